// The test runner's entry point; every test/test_*.cpp adds its suites.
#define BOOST_TEST_MODULE deeprnn
#define BOOST_TEST_DYN_LINK
#include <boost/test/unit_test.hpp>
