// forced_plan.hpp — tests that must run a plan the analytic model would not
// pick on this machine store it in a plan-cache file first, as a calibration
// would have.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <boost/test/unit_test.hpp>

#include "deeprnn.hpp"
#include "src/kernels.hpp"
#include "src/pool.hpp"
#include "src/schedule.hpp"

namespace forced {

// A fresh path for `name` in this process's own temporary directory, which
// goes when the process ends normally.
inline std::string temp_path(const std::string& name) {
    namespace fs = std::filesystem;
    struct OwnDirectory {
        fs::path path = fs::temp_directory_path() / ("deeprnn_test_" + std::to_string(getpid()));
        ~OwnDirectory() {
            std::error_code ignored;
            fs::remove_all(path, ignored);
        }
    };
    static const OwnDirectory dir;
    fs::create_directories(dir.path);
    return (dir.path / name).string();
}

// Makes models of cfg use `choice`: a plan-cache file named `file` holding it
// for cfg's problem on this machine, and calibrated tuning, which reads that
// file. Every run then uses the pool (serial_rows = 0): short runs would
// otherwise run on the caller alone.
// Sets cfg.threads; where that is more than the logical CPUs here, which a
// model's own pool would be lowered to, also a WorkerPool of that many, so a
// test of 3- or 4-worker plans still runs them on a 2-CPU machine.
inline void set_threads(deeprnn::Config& cfg, int threads) {
    cfg.threads = threads;
    cfg.pool = threads > deeprnn::detail::logical_cpus() ? deeprnn::WorkerPool(threads) : deeprnn::WorkerPool();
}

inline void force_plan(deeprnn::Config& cfg, const deeprnn::detail::sched::ExecutionChoice& choice,
                       const std::string& file) {
    namespace d = deeprnn::detail;
    namespace s = deeprnn::detail::sched;
    if (!cfg.pool || cfg.pool.threads() < cfg.threads) set_threads(cfg, cfg.threads);  // the plan's key counts cfg.threads workers
    cfg.serial_rows = 0;
    cfg.plan_cache_path = temp_path(file);
    cfg.tuning = deeprnn::Tuning::calibrate;
    std::filesystem::remove(cfg.plan_cache_path);
    const s::Problem p = s::problem_for(cfg, cfg.threads, d::isa_width(d::detect_isa()));
    // A plan that is not an executable candidate would be ignored by the model,
    // which then calibrates: the test would run whatever this host's timings pick.
    bool candidate = false;
    for (const s::Candidate& c : s::rank_candidates(p)) candidate = candidate || (c.executable && c.choice == choice);
    BOOST_TEST_REQUIRE(candidate, "forced plan " << choice.str() << " is not an executable candidate");
    std::string msg;
    BOOST_TEST_REQUIRE(s::plan_cache_store(cfg.plan_cache_path, s::plan_key(p),
                                           s::machine_id(s::read_cpu_model(), s::default_machine().caches),
                                           s::PlanEntry{choice, 1e-4, 1}, &msg),
                       msg);
    s::plan_cache_clear_memory();
}

}  // namespace forced
