// expect_error.hpp — the check behind every "fails with a message that names
// the bad field and value" test.
#pragma once

#include <boost/test/unit_test.hpp>

#include <exception>
#include <functional>
#include <initializer_list>
#include <string>

#include "deeprnn.hpp"

// Runs fn and checks it throws deeprnn::Error whose what() contains every one
// of `parts` (field name, bad value, ...). Any other outcome is a test failure.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
    std::string expected;
    for (const auto& p : parts) expected += " '" + p + "'";
    try {
        fn();
    } catch (const deeprnn::Error& e) {
        const std::string msg = e.what();
        for (const auto& p : parts)
            BOOST_TEST(msg.find(p) != std::string::npos, "message \"" << msg << "\" lacks '" << p << "'");
        return;
    } catch (const std::exception& e) {
        BOOST_ERROR("expected deeprnn::Error naming" << expected << ", got another exception: " << e.what());
        return;
    }
    BOOST_ERROR("expected deeprnn::Error naming" << expected << ", nothing was thrown");
}
