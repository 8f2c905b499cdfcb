// seed.hpp — the seed of the random cases in one test run: DEEPRNN_TEST_SEED
// if set, else a fresh one, printed once per process so that a failing run
// can be repeated exactly.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <random>

inline unsigned test_seed() {
    static const unsigned seed = [] {
        const char* env = std::getenv("DEEPRNN_TEST_SEED");
        const unsigned s = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
        BOOST_TEST_MESSAGE("random seed " << s << " (set DEEPRNN_TEST_SEED to repeat)");
        return s;
    }();
    return seed;
}
