// The test runner's entry point; every test/test_*.cpp adds its suites.
// After Boost.Test's own report it prints one plain line, "N passed, N failed"
// (test cases), which CI systems and humans can read without knowing Boost.
#define BOOST_TEST_MODULE deeprnn
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#include <boost/test/results_collector.hpp>
#include <boost/test/unit_test.hpp>

#include <cstdio>

namespace {
namespace ut = boost::unit_test;
unsigned long passed = 0, failed = 0, skipped = 0;

// Reads the totals once the whole run has finished and been tallied.
struct Totals : ut::test_observer {
    void test_finish() override {
        const ut::test_results& r = ut::results_collector.results(ut::framework::master_test_suite().p_id);
        passed = r.p_test_cases_passed;
        failed = r.p_test_cases_failed;  // aborted cases are counted here too
        skipped = r.p_test_cases_skipped;
    }
    int priority() override { return 1000; }  // after the results collector
};
Totals totals;

struct RegisterTotals {
    RegisterTotals() { ut::framework::register_observer(totals); }
};
}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(RegisterTotals);

int main(int argc, char* argv[]) {
    const int rc = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
    std::printf("%lu passed, %lu failed, %lu skipped\n", passed, failed, skipped);
    return rc;
}
