// seed.hpp — the seed of the random cases in one test run: DEEPRNN_TEST_SEED
// if set, else a fresh one, printed once per process (on stderr, whatever the
// log level: a CI log must show it) so that a failing run can be repeated
// exactly.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>

inline unsigned test_seed() {
    static const unsigned seed = [] {
        const char* env = std::getenv("DEEPRNN_TEST_SEED");
        const unsigned s = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
        std::fprintf(stderr, "random seed %u (set DEEPRNN_TEST_SEED=%u to repeat)\n", s, s);
        return s;
    }();
    return seed;
}
