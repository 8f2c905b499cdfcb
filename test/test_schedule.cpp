// Phased-schedule search (src/schedule.hpp): enumeration under the three
// pruning rules, PCP, ranking, calibration with a fake timer, plan cache.
#include <boost/test/unit_test.hpp>

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "forced_plan.hpp"
#include "reference.hpp"
#include "src/engine.hpp"
#include "src/kernels.hpp"
#include "src/partition.hpp"
#include "src/pool.hpp"
#include "src/schedule.hpp"

namespace s = deeprnn::detail::sched;
namespace fs = std::filesystem;
using deeprnn::Cell;
using deeprnn::GruVariant;

namespace {

struct CellCase {
    Cell cell;
    GruVariant variant;
    bool proj;
    size_t all, distinct;  // schedules the rules keep; performance-distinct ones
};
// Hand-derived: LSTM has no same-step dependency, so one time-dependent phase
// per step and 2^4 choices of hoisted input products; GRU reset-before-matmul
// needs a second phase for U_n.(r*h), where U_z.h, W_z.x, W_n.x may also go.
const CellCase kCells[] = {
    {Cell::lstm, GruVariant::linear_before_reset, false, 16, 5},
    {Cell::lstm, GruVariant::linear_before_reset, true, 16, 5},
    {Cell::gru, GruVariant::linear_before_reset, false, 8, 4},
    {Cell::gru, GruVariant::reset_before_matmul, false, 36, 18},
    {Cell::rnn_tanh, GruVariant::linear_before_reset, false, 2, 2},
};

bool depends(const s::MMDag& dag, int b, int a) {
    for (int x : dag.nodes[b].after)
        if (x == a) return true;
    return false;
}

// The pruning rules checked independently of the enumerator; "" if they hold.
std::string check_rules(const s::MMDag& dag, const s::PhasedSchedule& sc) {
    std::vector<int> where(dag.nodes.size(), -1);
    std::vector<size_t> td;  // indices of time-dependent phases
    for (size_t p = 0; p < sc.phases.size(); ++p) {
        const s::Phase& ph = sc.phases[p];
        if (ph.nodes.empty()) return "empty phase";
        if (ph.time_independent) {
            if (!td.empty()) return "rule iii: time-independent phase after a time-dependent one";
            if (p > 0) return "rule ii: two independent time-independent phases in a row";
            for (int n : ph.nodes)
                if (dag.nodes[n].input != s::Operand::x) return "time-dependent product in a time-independent phase";
        } else {
            td.push_back(p);
        }
        for (int n : ph.nodes) {
            if (where[n] >= 0) return "product scheduled twice";
            where[n] = static_cast<int>(p);
        }
    }
    for (int w : where)
        if (w < 0) return "product missing";
    if (td.empty()) return "no time-dependent phase";
    for (size_t b = 0; b < dag.nodes.size(); ++b)
        for (int a : dag.nodes[b].after)
            if (where[a] >= where[b]) return "same-step dependency violated";
    for (size_t q = 0; q < td.size(); ++q) {  // rule ii, including last phase -> next step's first
        const s::Phase& prev = sc.phases[q ? td[q - 1] : td.back()];
        const s::Phase& cur = sc.phases[td[q]];
        bool linked = false;
        for (int b : cur.nodes)
            for (int a : prev.nodes)
                linked = linked || (q ? depends(dag, b, a) : dag.nodes[b].reads_h && dag.nodes[a].writes_h);
        if (!linked) return "rule ii: consecutive time-dependent phases without dependency";
    }
    return "";
}

s::MachineModel fixed_machine() {  // tests must not depend on the host's caches
    s::MachineModel m;
    m.caches.l1d = 48 << 10;
    m.caches.l2 = 1 << 20;
    m.caches.l3 = 32 << 20;
    m.caches.source = "test";
    return m;
}

s::Problem lstm(int hidden, int threads, int directions = 1) {
    s::Problem p;
    p.cell = Cell::lstm;
    p.input = hidden;
    p.hidden = hidden;
    p.directions = directions;
    p.batch = 1;
    p.seq_len = 100;
    p.threads = threads;
    p.simd_width = 16;
    return p;
}

s::MachineId machine_a() {
    s::CacheSizes c;
    c.l1d = 49152;
    c.l2 = 1048576;
    c.l3 = 33554432;
    return s::machine_id("Test CPU \"A\" @ 3GHz", c);
}

std::string temp_path(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("deeprnn_sched_" + std::to_string(getpid()));
    fs::create_directories(dir);
    return (dir / name).string();
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(schedule)

// The fold's rule (sched::fold_pays) on the fixed machine: 1 MiB L2s (768 KiB
// usable), L2 160 GB/s, L3 90 GB/s, 200 GFLOP/s. Blocks that fit the L2
// together follow the measured gain; beyond, the extra reads against the
// projection's multiply-adds up front.
BOOST_AUTO_TEST_CASE(the_fold_pays_where_its_extra_reads_cost_less_than_projecting_up_front) {
    s::MachineModel m = fixed_machine();
    const double KiB = 1024, MiB = 1024 * KiB;
    BOOST_TEST(s::fold_pays(m, 256 * KiB, 256 * KiB));  // in L2, fold_gain_l2 1.25
    m.fold_gain_l2 = 1.05;                              // a tie on the kernels alone loses in a step
    BOOST_TEST(!s::fold_pays(m, 256 * KiB, 256 * KiB));
    const auto int8 = deeprnn::WeightPrecision::int8, bf16 = deeprnn::WeightPrecision::bf16;
    BOOST_TEST(s::fold_pays(m, 256 * KiB, 256 * KiB, int8));  // int8 on VNNI: its own gain, 1.25
    BOOST_TEST(s::fold_pays(m, 256 * KiB, 256 * KiB, bf16));  // bf16 on AVX512_BF16 too
    m.fold_gain_l2_int8 = 1.05;
    BOOST_TEST(!s::fold_pays(m, 256 * KiB, 256 * KiB, int8));
    BOOST_TEST(s::fold_pays(m, 256 * KiB, 256 * KiB, bf16));
    m.fold_gain_l2 = 1.25;
    m.fold_gain_l2_bf16 = 1.05;
    BOOST_TEST(!s::fold_pays(m, 256 * KiB, 256 * KiB, int8));
    BOOST_TEST(!s::fold_pays(m, 256 * KiB, 256 * KiB, bf16));
    BOOST_TEST(s::fold_pays(m, 256 * KiB, 256 * KiB));
    // 8 MiB each from L3: 1 MiB extra at 90 GB/s (11.7 us) against 4 Mflop at 200 GFLOP/s (21 us)...
    BOOST_TEST(s::fold_pays(m, 8 * MiB, 8 * MiB));
    m.l3_bytes_per_s = 26e9;  // ...and at 26 GB/s (40 us): it loses
    BOOST_TEST(!s::fold_pays(m, 8 * MiB, 8 * MiB));
    // W_hh fits with a step's share of W_ih (64 KiB, from L3 at 90 GB/s: 0.7 us), against
    // 0.26 Mflop up front (1.3 us): it pays...
    m = fixed_machine();
    BOOST_TEST(s::fold_pays(m, 512 * KiB, 512 * KiB));
    // ...but a W_hh that fits only without the share is pushed out to L3 every step.
    BOOST_TEST(!s::fold_pays(m, 736 * KiB, 512 * KiB));
}

BOOST_AUTO_TEST_CASE(schedule_counts_per_cell) {
    for (const CellCase& c : kCells) {
        const s::MMDag dag = s::build_mm_dag(c.cell, c.variant, c.proj);
        const s::Enumeration en = s::enumerate_schedules(dag);
        BOOST_TEST_CONTEXT(dag.cell) {
            BOOST_TEST(en.all.size() == c.all);
            BOOST_TEST(en.distinct.size() == c.distinct);
            BOOST_TEST(en.distinct.size() < 20u);  // the paper: Q < 20 for LSTM
            BOOST_TEST(en.considered > static_cast<long>(en.all.size()));
            // Exactly one distinct schedule is the engine's, listed first.
            int engine = 0;
            for (const auto& sc : en.distinct) engine += s::engine_runs(dag, sc);
            BOOST_TEST(engine == 1);
            BOOST_TEST(s::engine_runs(dag, en.distinct[0]));
            // Both kinds of input handling are present: fused across time and per step.
            BOOST_TEST(en.distinct.front().hoisted > 0);
            BOOST_TEST(en.distinct.back().hoisted == 0);
            std::set<std::string> sigs;
            for (const auto& sc : en.distinct) sigs.insert(sc.signature);
            BOOST_TEST(sigs.size() == en.distinct.size());
        }
    }
    BOOST_TEST(s::build_mm_dag(Cell::lstm, GruVariant::linear_before_reset, false).nodes.size() == 8u);
    BOOST_TEST(s::build_mm_dag(Cell::lstm, GruVariant::linear_before_reset, true).nodes.size() == 9u);
}

BOOST_AUTO_TEST_CASE(every_schedule_obeys_the_pruning_rules) {
    for (const CellCase& c : kCells) {
        const s::MMDag dag = s::build_mm_dag(c.cell, c.variant, c.proj);
        for (const auto& sc : s::enumerate_schedules(dag).all) BOOST_TEST(check_rules(dag, sc) == "", sc.text);
    }
}

// Brute force: every hoisting and every assignment of the remaining products
// to up to `cap` ordered phases, filtered by the independent checker, finds
// exactly the enumerated schedules (the enumerator's phase bound loses none).
BOOST_AUTO_TEST_CASE(enumeration_matches_brute_force) {
    for (const CellCase& c : kCells) {
        const s::MMDag dag = s::build_mm_dag(c.cell, c.variant, c.proj);
        const int n = static_cast<int>(dag.nodes.size());
        std::vector<int> xs;
        for (int i = 0; i < n; ++i)
            if (dag.nodes[i].input == s::Operand::x) xs.push_back(i);
        const int cap = n > 6 ? 3 : n;  // LSTM: 8-9 products; 3 phases keep it quick
        std::set<std::string> found;
        for (unsigned mask = 0; mask < (1u << xs.size()); ++mask) {
            std::vector<int> td;
            std::vector<int> ti;
            for (int i = 0; i < n; ++i) {
                bool hoisted = false;
                for (size_t b = 0; b < xs.size(); ++b) hoisted = hoisted || (xs[b] == i && (mask >> b & 1));
                (hoisted ? ti : td).push_back(i);
            }
            for (int m = 1; m <= std::min<int>(cap, td.size()); ++m) {
                long combos = 1;
                for (size_t i = 0; i < td.size(); ++i) combos *= m;
                for (long code = 0; code < combos; ++code) {
                    s::PhasedSchedule sc;
                    if (!ti.empty()) sc.phases.push_back(s::Phase{true, ti});
                    std::vector<s::Phase> phases(m);
                    long v = code;
                    for (int id : td) phases[v % m].nodes.push_back(id), v /= m;
                    sc.phases.insert(sc.phases.end(), phases.begin(), phases.end());
                    if (check_rules(dag, sc).empty()) {
                        std::string key;
                        for (const auto& ph : sc.phases) {
                            key += ph.time_independent ? "T" : "D";
                            for (int id : ph.nodes) key += std::to_string(id) + ",";
                            key += "|";
                        }
                        found.insert(key);
                    }
                }
            }
        }
        BOOST_TEST(found.size() == s::enumerate_schedules(dag).all.size(), dag.cell);
    }
}

BOOST_AUTO_TEST_CASE(fusion_groups_products_by_shared_input) {
    const s::MMDag dag = s::build_mm_dag(Cell::gru, GruVariant::reset_before_matmul, false);
    s::Phase ph;
    ph.nodes = {1, 3, 4, 5};  // W_z.x U_r.h U_z.h U_n.rh
    const auto f = s::fuse(dag, ph);
    BOOST_TEST_REQUIRE(f.size() == 3u);
    BOOST_TEST((f[0].input == s::Operand::x && f[0].nodes.size() == 1u));
    BOOST_TEST((f[1].input == s::Operand::h && f[1].nodes.size() == 2u));
    BOOST_TEST((f[2].input == s::Operand::rh && f[2].nodes.size() == 1u));
}

BOOST_AUTO_TEST_CASE(pcp_minimizes_traffic_on_hand_checked_cases) {
    const double big = 1e12;
    // Batch 1, 256 -> 1024: |A| 1 KiB, |B| 1 MiB, |C| 4 KiB. Output tiling wins:
    // (1,4,1) 4|A|+|B|+2|C| = 1060864 < (1,2,2) 1067008 < (1,1,4) 1082368.
    s::Tiling t = s::pcp({1, 1024, 256}, 4, 1, big);
    BOOST_TEST((t.xi == 1 && t.xj == 4 && t.xk == 1));
    BOOST_TEST(t.bytes == 1060864.0);
    // Tall input, small weight: |A| = |C| = 256 KiB, |B| = 16 KiB: split rows.
    t = s::pcp({1024, 64, 64}, 4, 1, big);
    BOOST_TEST((t.xi == 4 && t.xj == 1 && t.xk == 1));
    BOOST_TEST(t.bytes == 262144.0 + 4 * 16384.0 + 2 * 262144.0);
    // Long reduction, tiny output: split k.
    t = s::pcp({4, 4, 100000}, 2, 1, big);
    BOOST_TEST((t.xi == 1 && t.xj == 1 && t.xk == 2));
    BOOST_TEST(t.bytes == 1.6e6 + 1.6e6 + 2 * 2 * 64.0);
    // A prime degree has only the three axis-aligned partitionings.
    t = s::pcp({1, 1024, 256}, 7, 1, big);
    BOOST_TEST(t.xi * t.xj * t.xk == 7);
    // The degree never exceeds what a dimension can split.
    t = s::pcp({1, 2, 1}, 4, 1, big);
    BOOST_TEST(t.xi * t.xj * t.xk == 4);
}

BOOST_AUTO_TEST_CASE(pcp_cross_step_case) {
    // |A| = |C| = 32 KiB, |B| = 64 KiB, P = 2.
    const s::Gemm g{64, 128, 128};
    // Within a phase: (1,2,1) = 2|A|+|B|+2|C| = 196608 beats (2,1,1) = 229376.
    s::Tiling t = s::pcp(g, 2, 1, 1e12);
    BOOST_TEST((t.xi == 1 && t.xj == 2 && t.xk == 1));
    BOOST_TEST(t.bytes == 196608.0);
    BOOST_TEST(!t.resident);
    // 100 steps, blocks fit a 1 MiB L2: weights are read once, so (2,1,1)
    // = 100(|A|+2|C|) + 2|B| = 9961472 beats (1,2,1) = 100(2|A|+2|C|) + |B|.
    t = s::pcp(g, 2, 100, 1 << 20);
    BOOST_TEST((t.xi == 2 && t.xj == 1 && t.xk == 1));
    BOOST_TEST(t.resident);
    BOOST_TEST(t.bytes == 9961472.0);
    BOOST_TEST(s::tiling_bytes(g, 1, 2, 1, 100, 1 << 20).bytes == 13172736.0);
    // L2 of 40000 bytes: the whole |B| no longer fits, half of it does.
    t = s::pcp(g, 2, 100, 40000);
    BOOST_TEST((t.xi == 1 && t.xj == 2 && t.xk == 1));
    BOOST_TEST(t.resident);
    BOOST_TEST(t.bytes == 13172736.0);
    const s::Tiling spill = s::tiling_bytes(g, 2, 1, 1, 100, 40000);
    BOOST_TEST(!spill.resident);
    BOOST_TEST(spill.bytes == 100 * 229376.0);
}

BOOST_AUTO_TEST_CASE(cache_sizes_come_from_sysfs) {
    BOOST_TEST(s::parse_cache_size("48K") == 49152u);
    BOOST_TEST(s::parse_cache_size("32M") == 33554432u);
    BOOST_TEST(s::parse_cache_size("512") == 512u);
    BOOST_TEST(s::parse_cache_size("") == 0u);
    BOOST_TEST(s::parse_cache_size("K") == 0u);
    BOOST_TEST(s::parse_cache_size("12Q") == 0u);
    // A fake cpu0: L2 of 2 MiB shared by CPUs 0-3 = 2 cores of 2 threads.
    const fs::path cpu = temp_path("cpu0");
    auto put = [&](const std::string& rel, const std::string& text) {
        fs::create_directories((cpu / rel).parent_path());
        write_text((cpu / rel).string(), text + "\n");
    };
    put("topology/thread_siblings_list", "0-1");
    const char* idx[][4] = {{"1", "Data", "48K", "0-1"}, {"1", "Instruction", "32K", "0-1"},
                            {"2", "Unified", "2048K", "0-3"}, {"3", "Unified", "32768K", "0-7"}};
    for (int i = 0; i < 4; ++i) {
        const std::string d = "cache/index" + std::to_string(i) + "/";
        put(d + "level", idx[i][0]);
        put(d + "type", idx[i][1]);
        put(d + "size", idx[i][2]);
        put(d + "shared_cpu_list", idx[i][3]);
    }
    const s::CacheSizes c = s::read_cache_sizes(cpu.string());
    BOOST_TEST(c.l1d == 49152u);
    BOOST_TEST(c.l2 == 1048576u);
    BOOST_TEST(c.l3 == 33554432u);
    BOOST_TEST(c.source == "sysfs");
    const s::CacheSizes real = s::read_cache_sizes();
    BOOST_TEST(real.l2 > 0u);
    BOOST_TEST(!real.source.empty());
}

BOOST_AUTO_TEST_CASE(ranking_is_sane) {
    const s::MachineModel m = fixed_machine();
    // Hidden 1024 (16 MiB of recurrent weights): every extra worker that
    // splits the recurrence helps.
    const auto big = s::rank_candidates(lstm(1024, 8), m);
    double previous = 1e300;
    for (int w = 1; w <= 8; ++w)
        for (const auto& c : big)
            if (c.executable && c.choice.workers == w && !c.choice.projection_helpers) {
                BOOST_TEST(c.seconds < previous, "workers " << w);
                previous = c.seconds;
            }
    BOOST_TEST(big[s::best_executable(big)].choice.workers == 8);
    // Aggregate ceilings equal to one core's rates (SMT siblings): splitting
    // buys nothing but barriers, so one worker wins even for hidden 1024.
    s::MachineModel one_core = m;
    one_core.flops_total_per_s = m.flops_per_s;
    one_core.l2_total_bytes_per_s = m.l2_bytes_per_s;
    one_core.l3_total_bytes_per_s = m.l3_bytes_per_s;
    const auto capped = s::rank_candidates(lstm(1024, 8), one_core);
    BOOST_TEST(capped[s::best_executable(capped)].choice.workers == 1);
    // Hidden 32: a step is far shorter than a barrier, one worker wins.
    const auto small = s::rank_candidates(lstm(32, 8), m);
    BOOST_TEST(small[s::best_executable(small)].choice.workers == 1);
    // Hidden 256 on this machine's 1 MiB L2: 1 MiB of weights fit only when split.
    const auto mid = s::rank_candidates(lstm(256, 2), m);
    BOOST_TEST(mid[s::best_executable(mid)].choice.workers == 2);
    // Bidirectional 1024 uses every core, one way or the other.
    const auto bi = s::rank_candidates(lstm(1024, 8, 2), m);
    BOOST_TEST(bi[s::best_executable(bi)].choice.total_workers(2) == 8);
    for (const auto& c : bi) {
        BOOST_TEST(c.seconds > 0);
        BOOST_TEST(c.bytes > 0);
        BOOST_TEST(c.choice.total_workers(2) <= 8);
        if (c.executable) BOOST_TEST((c.schedule == 0 && c.choice.input_fused_across_time));
    }
    for (size_t i = 1; i < bi.size(); ++i) BOOST_TEST(bi[i - 1].seconds <= bi[i].seconds);
    // Never more workers than SIMD vectors of hidden units split the
    // recurrence (48 units = 3 vectors); helpers split the steps instead.
    for (const auto& c : s::rank_candidates(lstm(48, 8), m))
        BOOST_TEST(c.choice.workers <= (c.choice.projection_helpers ? 8 : 3));
    // Every cell ranks, with at least one executable candidate.
    for (const CellCase& cc : kCells) {
        s::Problem p = lstm(128, 4);
        p.cell = cc.cell;
        p.gru_variant = cc.variant;
        p.proj = cc.proj ? 64 : 0;
        BOOST_TEST(s::best_executable(s::rank_candidates(p, m)) >= 0);
    }
}

BOOST_AUTO_TEST_CASE(calibrate_picks_the_fastest_timed) {
    const auto ranked = s::rank_candidates(lstm(1024, 8), fixed_machine());
    int executable = 0;
    for (const auto& c : ranked) executable += c.executable;
    int calls = 0;
    auto timer = [&](const s::Candidate& c) {  // reality disagrees with the model: 5 workers best
        BOOST_TEST(c.executable);
        ++calls;
        return 0.01 + 0.001 * std::abs(c.choice.workers - 5);
    };
    const s::CalibrationResult r = s::calibrate(ranked, 100.0, timer, 1000, 3);
    BOOST_TEST(r.ran == executable);
    BOOST_TEST(r.runs == calls);
    BOOST_TEST(ranked[r.best].choice.workers == 5);
    BOOST_TEST(r.best_seconds == 0.01);
    BOOST_TEST(!r.summary.empty());
    for (size_t i = 0; i < ranked.size(); ++i) BOOST_TEST((r.measured[i] < 0) == !ranked[i].executable);
    // max_candidates keeps to the best few by the model.
    BOOST_TEST(s::calibrate(ranked, 100.0, timer, 2, 3).ran == 2);
}

BOOST_AUTO_TEST_CASE(calibrate_respects_the_budget) {
    const auto ranked = s::rank_candidates(lstm(1024, 8), fixed_machine());
    int executable = 0;
    for (const auto& c : ranked) executable += c.executable;
    double total = 0;
    auto timer = [&](const s::Candidate&) {
        total += 0.1;
        return 0.1;
    };
    const s::CalibrationResult r = s::calibrate(ranked, 0.65, timer, 1000, 3);
    BOOST_TEST(total <= 0.65 + 1e-9);
    BOOST_TEST(r.spent_s <= 0.65 + 1e-9);
    BOOST_TEST(r.ran >= 1);
    BOOST_TEST(r.ran < executable);
    // A budget too small for anything times nothing and keeps the analytic choice.
    total = 0;
    const s::CalibrationResult none = s::calibrate(ranked, 1e-12, timer, 1000, 3);
    BOOST_TEST(total == 0);
    BOOST_TEST(none.ran == 0);
    BOOST_TEST(none.best == s::best_executable(ranked));
    // No timer: analytic.
    BOOST_TEST(s::calibrate(ranked, 1.0, nullptr).best == s::best_executable(ranked));
    // Hopeless candidates (twice slower than the best) are timed once, not three times.
    int calls = 0;
    const int first = s::best_executable(ranked);
    auto skewed = [&](const s::Candidate& c) {
        ++calls;
        return &c == &ranked[first] ? 0.001 : 0.01;
    };
    const s::CalibrationResult h = s::calibrate(ranked, 100.0, skewed, 1000, 3);
    BOOST_TEST(h.best == first);
    BOOST_TEST(calls == 3 + (h.ran - 1));
    // A failing timer (negative or NaN) never wins.
    auto broken = [&](const s::Candidate& c) { return c.choice.workers == 8 ? std::nan("") : 0.5; };
    const s::CalibrationResult b = s::calibrate(ranked, 100.0, broken, 1000, 1);
    BOOST_TEST(ranked[b.best].choice.workers != 8);
}

BOOST_AUTO_TEST_CASE(exhaustive_calibration_times_everything) {
    const auto ranked = s::rank_candidates(lstm(1024, 8), fixed_machine());
    int executable = 0;
    for (const auto& c : ranked) executable += c.executable;
    const int first = s::best_executable(ranked);
    int calls = 0;
    auto skewed = [&](const s::Candidate& c) {
        ++calls;
        return &c == &ranked[first] ? 0.001 : 0.01;
    };
    // prune = false: no budget, no early stop; every candidate gets all its runs.
    const s::CalibrationResult r = s::calibrate(ranked, 1e-9, skewed, 1000, 3, false);
    BOOST_TEST(r.ran == executable);
    BOOST_TEST(calls == 3 * executable);
    BOOST_TEST(r.runs == calls);
    BOOST_TEST(r.best == first);
    // The pruned search finds the same winner with fewer runs.
    calls = 0;
    const s::CalibrationResult p = s::calibrate(ranked, 100.0, skewed, 1000, 3);
    BOOST_TEST(p.best == first);
    BOOST_TEST(p.runs < r.runs);
}

BOOST_AUTO_TEST_CASE(candidate_table_explains_the_decision) {
    const s::MachineModel m = fixed_machine();
    const s::Problem p = lstm(512, 4);
    s::plan_cache_clear_memory();
    auto timer = [](const s::Candidate& c) { return 1e-3 * (1 + std::abs(c.choice.workers - 3)); };
    const s::PlanDecision d = s::choose_plan(p, m, deeprnn::Tuning::exhaustive, 1.0, "", timer);
    const std::string t = s::describe_candidates(d);
    // One line per candidate, measured times for the timed ones, the winner marked once.
    size_t lines = 0, winners = 0;
    for (size_t at = 0; (at = t.find('\n', at)) != std::string::npos; ++at) ++lines;
    BOOST_TEST(lines >= d.candidates.size() + 2);
    for (size_t at = 0; (at = t.find("<- winner", at)) != std::string::npos; ++at) ++winners;
    BOOST_TEST(winners == 1u);
    BOOST_TEST(t.find("measured_us") != std::string::npos);
    BOOST_TEST(t.find("measured 1000.0 us") != std::string::npos);  // the winner's 1 ms
    BOOST_TEST(t.find("winner: S0 workers=3") != std::string::npos);
    BOOST_TEST(t.find("exhaustive") != std::string::npos);
    BOOST_TEST(s::describe_candidates(d, 3).size() < t.size());
    // choose_plan logs the table at debug level.
    bool logged = false;
    for (const auto& [level, msg] : d.log) logged = logged || (level == deeprnn::LogLevel::debug && msg == t);
    BOOST_TEST(logged);
    // The analytic choice has no measured times.
    const s::PlanDecision h = s::choose_plan(p, m, deeprnn::Tuning::heuristic, 1.0, "", nullptr);
    const std::string th = s::describe_candidates(h);
    BOOST_TEST(th.find("(analytic)") != std::string::npos);
    BOOST_TEST(th.find("calibration:") == std::string::npos);
    s::plan_cache_clear_memory();
}

BOOST_AUTO_TEST_CASE(stale_and_foreign_cache_files_are_reported_and_replaced) {
    const s::MachineModel m = fixed_machine();
    const s::MachineId here = s::machine_id(s::read_cpu_model(), m.caches);
    const s::Problem p = lstm(512, 4);
    const std::string path = temp_path("stale.txt");
    int calls = 0;
    auto timer = [&](const s::Candidate& c) {
        ++calls;
        return 1e-3 * (1 + std::abs(c.choice.workers - 3));
    };
    std::map<std::string, s::PlanEntry> entries{{s::plan_key(p), s::PlanEntry{{1, false, true}, 1e-3, 2}}};
    s::CacheSizes other = m.caches;
    other.l2 /= 2;
    const struct { std::string text, expect; } files[] = {
        {s::serialize_plan_cache(entries, "0.0.1", here), "stale"},                              // older library
        {s::serialize_plan_cache(entries, DEEPRNN_VERSION_STRING, s::machine_id("Other", m.caches)), "another machine"},
        {s::serialize_plan_cache(entries, DEEPRNN_VERSION_STRING, s::machine_id(s::read_cpu_model(), other)),
         "another machine"},  // same CPU name, other caches
        {"deeprnn-plan-cache 5\ngarbage\n", "truncated"},
        {"deeprnn-plan-cache 4\ngarbage\n", "not a deeprnn plan cache"},  // the format before helpers
        {"deeprnn-plan-cache 3\ngarbage\n", "not a deeprnn plan cache"},  // the format before rbm_one_barrier
    };
    for (const auto& f : files) {
        write_text(path, f.text);
        s::plan_cache_clear_memory();
        calls = 0;
        const s::PlanDecision d = s::choose_plan(p, m, deeprnn::Tuning::calibrate, 1.0, path, timer);
        BOOST_TEST(!d.from_cache, f.expect);
        BOOST_TEST(calls > 0, f.expect);
        BOOST_TEST(d.chosen.choice.workers == 3, f.expect);  // never the file's workers=1
        bool warned = false;
        for (const auto& [level, msg] : d.log)
            warned = warned || (level == deeprnn::LogLevel::warning && msg.find(path) != std::string::npos &&
                                msg.find(f.expect) != std::string::npos && msg.find("ignored") != std::string::npos);
        BOOST_TEST(warned, f.expect);
        const std::string now = read_text(path);  // replaced by a valid file for this machine and version
        BOOST_TEST(s::parse_plan_cache(now.data(), now.size(), DEEPRNN_VERSION_STRING, here).ok, f.expect);
    }
    s::plan_cache_clear_memory();
    fs::remove_all(fs::path(path).parent_path());
}

namespace {

deeprnn::Weights small_torch_lstm(int input, int hidden) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.3f, 0.3f);
    auto t = [&](std::vector<int64_t> shape) {
        deeprnn::Tensor x;
        x.shape = shape;
        x.data.resize(static_cast<size_t>(x.numel()));
        for (float& v : x.data) v = u(rng);
        return x;
    };
    return {{"weight_ih_l0", t({4 * hidden, input})}, {"weight_hh_l0", t({4 * hidden, hidden})},
            {"bias_ih_l0", t({4 * hidden})}, {"bias_hh_l0", t({4 * hidden})}};
}

struct Captured {
    std::vector<std::pair<deeprnn::LogLevel, std::string>> lines;
    bool has(deeprnn::LogLevel level, const std::string& text) const {
        for (const auto& [l, m] : lines)
            if (l == level && m.find(text) != std::string::npos) return true;
        return false;
    }
};

}  // namespace

// Config::tuning_seq_len is the run the plan is chosen for: the analytic
// model ranks it, calibration times it (at most kMaxCalibrationSteps steps),
// the plan cache keys it, and Model::plan() says which it was.
BOOST_AUTO_TEST_CASE(the_plan_is_chosen_for_runs_of_tuning_seq_len_steps) {
    const deeprnn::Weights w = small_torch_lstm(8, 48);
    deeprnn::Config cfg = deeprnn::config_from_weights(Cell::lstm, deeprnn::Convention::torch, w);
    cfg.threads = 2;
    BOOST_TEST(cfg.tuning_seq_len == 100);
    BOOST_TEST(s::problem_for(cfg, 2, 16).seq_len == 100);
    cfg.tuning_seq_len = 7;
    BOOST_TEST(s::problem_for(cfg, 2, 16).seq_len == 7);
    BOOST_TEST(s::problem_for(cfg, 2, 16, 1, 30).seq_len == 30);  // an explicit length still wins
    BOOST_TEST(s::plan_key(s::problem_for(cfg, 2, 16)).find(" seq=7 ") != std::string::npos);
    BOOST_TEST(deeprnn::Model(cfg, w).plan().find("predicted (heuristic) for 7-step runs") != std::string::npos);

    s::plan_cache_clear_memory();
    cfg.tuning = deeprnn::Tuning::exhaustive;
    BOOST_TEST(deeprnn::Model(cfg, w).plan().find("candidates timed on 7-step runs") != std::string::npos);
    cfg.tuning_seq_len = 5000;  // timed over a prefix: the ranking, not the whole run, is what calibration needs
    BOOST_TEST(deeprnn::Model(cfg, w).plan().find("candidates timed on 1024-step runs") != std::string::npos);
    s::plan_cache_clear_memory();
}

// Through the public API: a calibrated model writes the cache file, a model
// created after the process's memory is emptied reads it and times nothing,
// and both compute the same outputs.
BOOST_AUTO_TEST_CASE(model_creation_uses_and_explains_the_plan_cache) {
    const deeprnn::Weights w = small_torch_lstm(8, 48);
    deeprnn::Config cfg = deeprnn::config_from_weights(Cell::lstm, deeprnn::Convention::torch, w);
    cfg.threads = 2;
    cfg.max_batch = 2;
    cfg.tuning = deeprnn::Tuning::calibrate;
    cfg.plan_cache_path = temp_path("model_plans.txt");
    fs::remove(cfg.plan_cache_path);
    Captured log;
    cfg.log = [](deeprnn::LogLevel level, const char* msg, void* user) {
        static_cast<Captured*>(user)->lines.push_back({level, msg});
    };
    cfg.log_user = &log;
    s::plan_cache_clear_memory();
    const deeprnn::Model cold(cfg, w);
    BOOST_TEST(log.has(deeprnn::LogLevel::info, "calibration: timed"));
    BOOST_TEST(log.has(deeprnn::LogLevel::debug, "plan candidates:"));
    BOOST_TEST(log.has(deeprnn::LogLevel::debug, "<- winner"));
    BOOST_TEST(cold.plan().find("calibrated") != std::string::npos);
    BOOST_TEST(fs::exists(cfg.plan_cache_path));

    s::plan_cache_clear_memory();  // a new process: only the file
    log.lines.clear();
    const deeprnn::Model warm(cfg, w);
    BOOST_TEST(log.has(deeprnn::LogLevel::info, "plan: from cache"));
    BOOST_TEST(!log.has(deeprnn::LogLevel::info, "calibration: timed"));
    BOOST_TEST(warm.plan().find("from the plan cache") != std::string::npos);
    const size_t a = cold.plan().find("schedule "), b = warm.plan().find("schedule ");
    BOOST_TEST(cold.plan().substr(a, 40) == warm.plan().substr(b, 40));

    std::vector<float> x(5 * 2 * 8, 0.25f), y1(5 * 2 * 48), y2(y1.size());
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = 5;
    in.batch = 2;
    deeprnn::RunOutput o1, o2;
    o1.y = y1.data();
    o2.y = y2.data();
    deeprnn::Session(cold).run(in, o1);
    deeprnn::Session(warm).run(in, o2);
    BOOST_TEST(y1 == y2);

    // A corrupted file: reported through Config::log, ignored, recalibrated.
    std::string text = read_text(cfg.plan_cache_path);
    text[text.find("workers=") + 8] = '7';
    write_text(cfg.plan_cache_path, text);
    s::plan_cache_clear_memory();
    log.lines.clear();
    const deeprnn::Model again(cfg, w);
    BOOST_TEST(log.has(deeprnn::LogLevel::warning, "checksum mismatch"));
    BOOST_TEST(log.has(deeprnn::LogLevel::info, "calibration: timed"));
    s::plan_cache_clear_memory();
    fs::remove_all(fs::path(cfg.plan_cache_path).parent_path());
}

// The Config fields the case tables below vary; everything else default.
static deeprnn::Config config_of(Cell cell, GruVariant variant, int input, int hidden, int proj, int layers, int max_batch) {
    deeprnn::Config c;
    c.cell = cell;
    c.gru_variant = variant;
    c.input_size = input;
    c.hidden_size = hidden;
    c.proj_size = proj;
    c.num_layers = layers;
    c.max_batch = max_batch;
    return c;
}

using forced::force_plan;

// y, h_n and c_n of one run with per-sequence lengths.
static std::vector<float> run_all(const deeprnn::Model& m, const std::vector<float>& x, int T, int B,
                                  const std::vector<int32_t>& lengths) {
    const deeprnn::Config& c = m.config();
    const size_t LD = static_cast<size_t>(c.num_layers) * deeprnn::num_directions(c);
    std::vector<float> y(static_cast<size_t>(T) * B * m.output_size()), h(LD * B * deeprnn::state_size(c)),
        cc(LD * B * c.hidden_size);
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = T;
    in.batch = B;
    in.lengths = lengths.empty() ? nullptr : lengths.data();
    deeprnn::RunOutput out;
    out.y = y.data();
    out.h_n = h.data();
    if (c.cell == Cell::lstm) out.c_n = cc.data();
    deeprnn::Session(m).run(in, out);
    y.insert(y.end(), h.begin(), h.end());
    y.insert(y.end(), cc.begin(), cc.end());
    return y;
}

// One random net (seeded) as a one-thread and a two-thread model; with
// `forced`, the two-thread one runs that plan (force_plan, cache in `file`).
static std::pair<deeprnn::Model, deeprnn::Model> one_and_two_threads(deeprnn::Config c, unsigned seed,
                                                                     const s::ExecutionChoice* forced = nullptr,
                                                                     const std::string& file = "") {
    std::mt19937 rng(seed);
    const deeprnn::Weights w = ref::torch_weights(ref::random_net(c, rng, 0.2));
    c.threads = 1;
    deeprnn::Model one(c, w);
    c.threads = 2;
    if (forced) force_plan(c, *forced, file);
    return {one, deeprnn::Model(c, w)};
}

// y of one batch-1 run through s, whose input and output rows are equally wide.
static std::vector<float> run_y(deeprnn::Session& s, const std::vector<float>& x, int T) {
    std::vector<float> y(x.size());
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = T;
    deeprnn::RunOutput out;
    out.y = y.data();
    s.run(in, out);
    return y;
}

// Stacked layers as a wavefront (ExecutionChoice::pipelined): every cell, 2
// to 4 layers on 2 stages, batches with ragged lengths and a projection give
// the same bits as one worker, which the forward tests hold to a float64
// reference.
BOOST_AUTO_TEST_CASE(pipelined_layers_match_one_worker_bit_for_bit) {
    struct Case {
        Cell cell;
        deeprnn::GruVariant variant;
        int layers, hidden, proj;
    };
    const Case cases[] = {
        {Cell::lstm, deeprnn::GruVariant::linear_before_reset, 2, 40, 0},
        {Cell::lstm, deeprnn::GruVariant::linear_before_reset, 3, 100, 0},
        {Cell::lstm, deeprnn::GruVariant::linear_before_reset, 2, 64, 24},
        {Cell::gru, deeprnn::GruVariant::linear_before_reset, 3, 33, 0},
        {Cell::gru, deeprnn::GruVariant::reset_before_matmul, 2, 48, 0},
        {Cell::rnn_tanh, deeprnn::GruVariant::linear_before_reset, 4, 20, 0},
    };
    for (const Case& k : cases) {
        s::ExecutionChoice choice;
        choice.workers = 2;
        choice.pipelined = true;
        const auto [serial, m] = one_and_two_threads(config_of(k.cell, k.variant, 12, k.hidden, k.proj, k.layers, 4),
                                                     k.layers * 100 + k.hidden, &choice, "pipelined.txt");
        BOOST_TEST_REQUIRE(m.plan().find("layers pipelined") != std::string::npos, m.plan());
        const int T = 9;
        for (int B : {1, 3}) {
            std::vector<float> x(static_cast<size_t>(T) * B * 12);
            for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
            for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{}, std::vector<int32_t>{9, 0, 4}}) {
                if (!lengths.empty() && static_cast<int>(lengths.size()) != B) continue;
                for (int rep = 0; rep < 3; ++rep)  // the progress counters restart every run
                    BOOST_TEST((run_all(m, x, T, B, lengths) == run_all(serial, x, T, B, lengths)),
                               deeprnn::to_string(k.cell) << " L=" << k.layers << " H=" << k.hidden << " B=" << B);
            }
        }
    }
    s::plan_cache_clear_memory();
}

// A pipelined stage fed by another folds its input projection at batch 1 too,
// chunk by chunk as the stage before delivers the steps (the last one
// partial or not, a sequence shorter than the run): the bits of one worker.
BOOST_AUTO_TEST_CASE(pipelined_stages_fold_their_projection_bit_for_bit) {
    const Cell cells[] = {Cell::lstm, Cell::gru, Cell::rnn_tanh};
    for (Cell cell : cells)
        for (int layers : {2, 3}) {
            s::ExecutionChoice choice;
            choice.workers = 2;
            choice.pipelined = true;
            deeprnn::Config c = config_of(cell, deeprnn::GruVariant::linear_before_reset, 12, 48, 0, layers, 1);
            c.fold_projection = 1;
            const auto [serial, m] = one_and_two_threads(c, 700 + layers, &choice, "pipelined_fold.txt");
            BOOST_TEST_REQUIRE(m.plan().find("layers pipelined") != std::string::npos, m.plan());
            if (m.plan().find("kernels avx512") != std::string::npos)  // the fold's kernel is AVX-512's
                BOOST_TEST(m.plan().find("folded into each step (" + std::to_string(layers) + " of") != std::string::npos,
                           m.plan());
            for (int T : {16, 23, 40}) {
                std::vector<float> x(static_cast<size_t>(T) * 12);
                for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.29 * i + T));
                for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{}, std::vector<int32_t>{T - 5}})
                    for (int rep = 0; rep < 3; ++rep)
                        BOOST_TEST((run_all(m, x, T, 1, lengths) == run_all(serial, x, T, 1, lengths)),
                                   deeprnn::to_string(cell) << " L=" << layers << " T=" << T << " lengths "
                                                            << lengths.size());
            }
        }
    s::plan_cache_clear_memory();
}

// A stage of several pipelined layers runs them step by step, each
// sched::pipeline_lag steps behind the one before (engine.cpp, run_stage):
// 5 layers on 2 stages (3 + 2), runs shorter and longer than the lags (16
// folded at batch 1, 5 at batch 3), folded or not, ragged lengths: the bits
// of one worker, run after run.
BOOST_AUTO_TEST_CASE(a_stage_runs_its_layers_step_by_step_bit_for_bit) {
    for (Cell cell : {Cell::lstm, Cell::gru})
        for (int fold : {0, 1}) {
            s::ExecutionChoice choice;
            choice.workers = 2;
            choice.pipelined = true;
            deeprnn::Config c = config_of(cell, deeprnn::GruVariant::linear_before_reset, 12, 40, 0, 5, 3);
            c.fold_projection = fold;
            const auto [serial, m] = one_and_two_threads(c, 900 + fold, &choice, "stage_steps.txt");
            BOOST_TEST_REQUIRE(m.plan().find("layer 2 on worker 0, layer 3 on worker 1") != std::string::npos, m.plan());
            for (int B : {1, 3})
                for (int T : {1, 2, 6, 15, 16, 17, 33}) {
                    std::vector<float> x(static_cast<size_t>(T) * B * 12);
                    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.31 * i + T));
                    const std::vector<int32_t> ragged = B == 1 ? std::vector<int32_t>{std::max(1, T - 3)}
                                                               : std::vector<int32_t>{T, 0, (T + 1) / 2};
                    for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{}, ragged})
                        for (int rep = 0; rep < 2; ++rep)
                            BOOST_TEST((run_all(m, x, T, B, lengths) == run_all(serial, x, T, B, lengths)),
                                       deeprnn::to_string(cell) << " fold " << fold << " B=" << B << " T=" << T
                                                                << " lengths " << lengths.size());
                }
        }
    s::plan_cache_clear_memory();
}

// Critical path first (ExecutionChoice::projection_helpers): every cell, 1 to
// 3 layers, an LSTM projection, lengths that are and are not whole chunks of
// kHelperChunkRows rows, batches with ragged lengths: the same bits as one
// worker, run after run (the chunk claims restart every run). The steps'
// rows come from whichever worker claimed them, so this is also what TSan
// watches for the claims' ordering.
BOOST_AUTO_TEST_CASE(critical_path_first_matches_one_worker_bit_for_bit) {
    struct Case {
        Cell cell;
        deeprnn::GruVariant variant;
        int layers, input, hidden, proj;
    };
    const Case cases[] = {
        {Cell::lstm, deeprnn::GruVariant::linear_before_reset, 1, 96, 40, 0},
        {Cell::lstm, deeprnn::GruVariant::linear_before_reset, 2, 48, 64, 24},
        {Cell::gru, deeprnn::GruVariant::linear_before_reset, 3, 70, 33, 0},
        {Cell::gru, deeprnn::GruVariant::reset_before_matmul, 2, 64, 48, 0},
        {Cell::rnn_tanh, deeprnn::GruVariant::linear_before_reset, 2, 20, 20, 0},
    };
    for (const Case& k : cases) {
        s::ExecutionChoice choice;
        choice.workers = 2;
        choice.projection_helpers = true;
        const auto [serial, m] = one_and_two_threads(config_of(k.cell, k.variant, k.input, k.hidden, k.proj, k.layers, 3),
                                                     k.layers * 100 + k.hidden, &choice, "helpers.txt");
        BOOST_TEST_REQUIRE(m.plan().find("critical path first") != std::string::npos, m.plan());
        const std::string name = std::string(deeprnn::to_string(k.cell)) + " L=" + std::to_string(k.layers);
        for (int T : {1, 5, 6, 7, 13, 40}) {
            for (int B : {1, 3}) {
                std::vector<float> x(static_cast<size_t>(T) * B * k.input);
                for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
                const std::vector<int32_t> ragged{T, 0, (T + 1) / 2};
                for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{}, ragged}) {
                    if (!lengths.empty() && B != 3) continue;
                    for (int rep = 0; rep < 3; ++rep)
                        BOOST_TEST((run_all(m, x, T, B, lengths) == run_all(serial, x, T, B, lengths)),
                                   name << " T=" << T << " B=" << B << (lengths.empty() ? "" : " ragged"));
                }
            }
        }
        // A run that finds the helper napping or asleep does not wait for it
        // (ModelImpl::helpers): it may come mid-run, in any layer, or
        // find the run ended.
        for (int rep = 0; rep < 6; ++rep) {
            const int T = rep < 2 ? 1 : 40;
            std::vector<float> x(static_cast<size_t>(T) * k.input);
            for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.29 * i));
            const auto expected = run_all(serial, x, T, 1, {});
            std::this_thread::sleep_for(std::chrono::milliseconds(rep % 2 ? 1 : 12));
            BOOST_TEST((run_all(m, x, T, 1, {}) == expected), name << " T=" << T << " after a pause");
        }
    }
    s::plan_cache_clear_memory();
}

// The plan offers critical path first for one forward direction only, on 2
// or more workers, and prefers it where the input projection dominates a
// step that gains little from a second worker; not where the recurrence does.
BOOST_AUTO_TEST_CASE(critical_path_first_is_offered_and_ranked) {
    const s::MachineModel m = s::awake(fixed_machine());
    auto best = [&](const s::Problem& p) {
        const auto ranked = s::rank_candidates(p, m);
        return ranked[s::best_executable(ranked)].choice;
    };
    s::Problem wide_input = lstm(64, 2);
    wide_input.input = 512;  // W_ih 512 KiB, W_hh 64 KiB, both in L2: the projection is most of the work
    BOOST_TEST(best(wide_input).projection_helpers);
    s::Problem wide_state = lstm(256, 2);
    wide_state.input = 64;    // the recurrence is most of it, and it splits
    BOOST_TEST(!best(wide_state).projection_helpers);
    BOOST_TEST(best(wide_state).workers == 2);
    for (s::Problem p : {lstm(64, 2, 2), lstm(64, 1), [&] { s::Problem r = wide_input; r.reverse = true; return r; }()})
        for (const s::Candidate& c : s::rank_candidates(p, m)) BOOST_TEST(!c.choice.projection_helpers);
    bool offered = false;
    for (const s::Candidate& c : s::rank_candidates(wide_input, m))
        offered = offered || (c.choice.projection_helpers && c.executable && c.choice.workers == 2);
    BOOST_TEST(offered);
}

// A pipelined layer fed faster than it runs falls behind and projects the
// steps that piled up in one product (engine.cpp, project_until); it is not
// charged a pass over W_ih every step. Two LSTM 128-128 layers on two
// workers then beat one worker by far (the Zen 5 VM: 0.33-0.38 against
// 0.49-0.51 ms), and a pipeline is never faster than its slower stage alone.
BOOST_AUTO_TEST_CASE(a_pipeline_fed_faster_than_it_runs_projects_what_piled_up) {
    const s::MachineModel m = s::awake(fixed_machine());
    s::Problem two_layers = lstm(128, 2);
    two_layers.layers = 2;
    double piped = 1e30, one = 1e30;
    for (const s::Candidate& c : s::rank_candidates(two_layers, m)) {
        if (!c.executable) continue;
        if (c.choice.pipelined) piped = std::min(piped, c.seconds);
        if (c.choice.total_workers(1) == 1) one = std::min(one, c.seconds);
    }
    BOOST_TEST_REQUIRE(piped < 1e30);
    BOOST_TEST(piped < 0.8 * one, piped << " s pipelined, " << one << " s on one worker");
    BOOST_TEST(piped > 0.5 * one, piped << " s pipelined, " << one << " s on one worker");
}

// A stage runs its layers step by step (engine.cpp, run_stage), so four
// layers on two workers take about two layers' time, not three (each stage
// whole, layer after layer, overlapped only at the stages' boundary: LSTM
// 4 x 128 at batch 1 on the Zen 5 VM, 0.75 against 1.01 ms); its layers
// share its L2, so where two layers' recurrent weights do not fit one L2
// (LSTM 4 x 256: 1 MiB each), the split over both workers stays ahead.
BOOST_AUTO_TEST_CASE(a_pipeline_stage_interleaves_its_layers) {
    const s::MachineModel m = s::awake(fixed_machine());
    auto best = [&](int hidden, bool pipelined_plan) {
        s::Problem p = lstm(hidden, 2);
        p.layers = 4;
        double t = 1e30, one = 1e30;
        for (const s::Candidate& c : s::rank_candidates(p, m)) {
            if (!c.executable) continue;
            if (c.choice.pipelined == pipelined_plan && c.choice.workers == 2 && !c.choice.projection_helpers)
                t = std::min(t, c.seconds);
            if (c.choice.total_workers(1) == 1) one = std::min(one, c.seconds);
        }
        BOOST_TEST_REQUIRE(t < 1e30);
        return std::pair<double, double>{t, one};
    };
    const auto [piped, one] = best(128, true);
    BOOST_TEST(piped < 0.75 * one, piped << " s pipelined, " << one << " s on one worker");
    BOOST_TEST(piped > 0.45 * one, piped << " s pipelined, " << one << " s on one worker");
    BOOST_TEST(best(256, true).first > best(256, false).first);
}

// An LSTM projection narrower than one SIMD vector, on two workers: the
// projection's rows go by whole vectors, so the second worker owns none of
// them (an empty packed block, which once copied from a null pointer: UBSan)
// and still computes its units. Any machine takes this plan here, so the path
// does not depend on the measured step price; bits equal one worker's.
BOOST_AUTO_TEST_CASE(projection_narrower_than_a_vector_on_two_workers) {
    deeprnn::Config c;
    c.input_size = 10;
    c.hidden_size = 64;
    c.proj_size = 3;
    c.max_batch = 3;
    s::ExecutionChoice choice;
    choice.workers = 2;
    const auto [serial, m] = one_and_two_threads(c, 17, &choice, "narrow_projection.txt");
    BOOST_TEST_REQUIRE(m.plan().find("workers=2") != std::string::npos, m.plan());
    const int T = 11;
    for (int B : {1, 3}) {
        std::vector<float> x(static_cast<size_t>(T) * B * 10);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.29 * i));
        const std::vector<int32_t> lengths = B == 3 ? std::vector<int32_t>{11, 4, 0} : std::vector<int32_t>{};
        BOOST_TEST((run_all(m, x, T, B, lengths) == run_all(serial, x, T, B, lengths)), "B=" << B);
    }
    s::plan_cache_clear_memory();
}

// y, h_n (and c_n) of one run with lengths and initial states h0 (empty = zeros).
static std::vector<float> run_with_state(const deeprnn::Model& m, const std::vector<float>& x, int T, int B,
                                         const std::vector<int32_t>& lengths, const std::vector<float>& h0) {
    const deeprnn::Config& c = m.config();
    const size_t LD = static_cast<size_t>(c.num_layers) * deeprnn::num_directions(c);
    std::vector<float> y(static_cast<size_t>(T) * B * m.output_size()), h(LD * B * deeprnn::state_size(c));
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = T;
    in.batch = B;
    in.lengths = lengths.empty() ? nullptr : lengths.data();
    in.h0 = h0.empty() ? nullptr : h0.data();
    deeprnn::RunOutput out;
    out.y = y.data();
    out.h_n = h.data();
    deeprnn::Session(m).run(in, out);
    y.insert(y.end(), h.begin(), h.end());
    return y;
}

// GRU reset-before-matmul runs in one of two forms on >= 2 workers: two
// barriers per step, or GRNN's one barrier with the reset product U_r·h
// partitioned by columns (fixed chunks of units) and reduced on every worker.
// Both, and one worker, sum U_r·h in the same fixed chunks and add them along
// the same fixed tree (partition.hpp), so every form and worker count gives
// the same bits: sizes of (with AVX-512) one chunk (48), two (100: the last
// short, and a short last vector) and five (260: the last of 4 units), 2
// layers, both directions (in turn and side by side), ragged lengths, batch 3
// and initial states. The forward tests hold the one-worker
// form to the float64 reference; here the forced one-barrier form is too.
BOOST_AUTO_TEST_CASE(gru_reset_before_matmul_forms_bit_identical) {
    namespace d = deeprnn::detail;
    for (int H : {48, 100, 260}) {
        deeprnn::Config c;
        c.cell = Cell::gru;
        c.gru_variant = deeprnn::GruVariant::reset_before_matmul;
        c.input_size = 12;
        c.hidden_size = H;
        c.num_layers = 2;
        c.direction = deeprnn::Direction::bidirectional;
        c.max_batch = 4;
        std::mt19937 rng(H);
        const double scale = std::min(0.5, 1.5 / std::sqrt(static_cast<double>(H)));
        const ref::Net net = ref::random_net(c, rng, scale);
        const deeprnn::Weights w = ref::torch_weights(net);
        c.threads = 1;
        const deeprnn::Model serial(c, w);
        const int T = 9, B = 3, LD = 4;
        std::uniform_real_distribution<double> u(-1, 1);
        std::vector<double> xd(static_cast<size_t>(T) * B * 12), h0d(static_cast<size_t>(LD) * B * H);
        for (double& v : xd) v = static_cast<float>(u(rng));
        for (double& v : h0d) v = static_cast<float>(0.8 * u(rng));
        const std::vector<float> x(xd.begin(), xd.end()), h0(h0d.begin(), h0d.end());
        const std::vector<int32_t> lengths{9, 0, 4};
        const std::vector<float> want = run_with_state(serial, x, T, B, lengths, h0);
        const int chunks = d::rbm_chunk_count(H, d::isa_width(d::detect_isa()));
        struct Form {
            int workers;
            bool side, one;
        };
        for (const Form f : {Form{2, false, false}, Form{3, false, false}, Form{2, false, true}, Form{3, false, true},
                             Form{2, true, true}}) {
            if (f.one && f.workers > chunks) continue;  // one barrier: whole chunks per worker
            deeprnn::Config fc = c;
            fc.threads = f.side ? 2 * f.workers : f.workers;
            s::ExecutionChoice choice;
            choice.workers = f.workers;
            choice.side_by_side = f.side;
            choice.rbm_one_barrier = f.one;
            force_plan(fc, choice, "rbm_forms.txt");
            const deeprnn::Model m(fc, w);
            const std::string plan = m.plan();
            const std::string what = "H=" + std::to_string(H) + " " + choice.str();
            BOOST_TEST_REQUIRE(plan.find(choice.str()) != std::string::npos, plan);
            BOOST_TEST_REQUIRE(plan.find(f.one ? "one barrier per step" : "two barriers per step") != std::string::npos, plan);
            for (int rep = 0; rep < 2; ++rep) {  // the partials buffers are reused across runs
                BOOST_TEST((run_with_state(m, x, T, B, lengths, h0) == want), what);
                BOOST_TEST((run_with_state(m, x, T, 1, {}, {}) == run_with_state(serial, x, T, 1, {}, {})), what << " B=1");
            }
            // A zero state skips step 0's products (U_z·h, the reset partials,
            // U_n·(r*h)); a -0 state runs them: the bits must agree. (No
            // length 0 here: such a sequence carries its -0 state out as is.)
            const std::vector<float> plus(h0.size(), 0.0f), minus(h0.size(), -0.0f);
            const std::vector<int32_t> ragged{9, 1, 4};
            const std::vector<float> skipped = run_with_state(m, x, T, B, ragged, plus),
                                     multiplied = run_with_state(m, x, T, B, ragged, minus);
            BOOST_TEST((skipped.size() == multiplied.size() &&
                        std::memcmp(skipped.data(), multiplied.data(), skipped.size() * sizeof(float)) == 0),
                       what << ": the skipped zero-state products changed the bits");
            if (!f.one) continue;
            // The one-barrier form against float64 (forward_vs_float64_reference's tolerance).
            const ref::Result r = ref::run(net, xd, T, B, std::vector<int>(lengths.begin(), lengths.end()), h0d, {});
            std::vector<double> truth = r.y;
            truth.insert(truth.end(), r.h_n.begin(), r.h_n.end());
            const std::vector<float> got = run_with_state(m, x, T, B, lengths, h0);
            BOOST_TEST_REQUIRE(got.size() == truth.size());
            const ref::ErrorStats err = ref::error_stats(got, truth);
            BOOST_TEST(err.max_abs <= 2e-5, what << ": max abs error " << err.max_abs);
            BOOST_TEST(err.rel_l2 <= 5e-6, what << ": relative L2 error " << err.rel_l2);
        }
    }
    s::plan_cache_clear_memory();
}

// A stream fed in chunks on the one-barrier form equals one run on one worker
// (one direction, 2 layers: streams carry the partials' inputs, h, across pushes).
BOOST_AUTO_TEST_CASE(gru_reset_before_matmul_one_barrier_streams_bit_identical) {
    deeprnn::Config c;
    c.cell = Cell::gru;
    c.gru_variant = deeprnn::GruVariant::reset_before_matmul;
    c.input_size = 6;
    c.hidden_size = 100;
    c.num_layers = 2;
    c.max_batch = 2;
    s::ExecutionChoice choice;
    choice.workers = 2;
    choice.rbm_one_barrier = true;
    const auto [serial, m] = one_and_two_threads(c, 5, &choice, "rbm_stream.txt");
    BOOST_TEST_REQUIRE(m.plan().find("one barrier per step") != std::string::npos, m.plan());
    const int T = 9, B = 2;
    std::vector<float> x(static_cast<size_t>(T) * B * 6);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.41 * i));
    std::vector<float> want(static_cast<size_t>(T) * B * 100), got(want.size());
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = T;
    in.batch = B;
    deeprnn::RunOutput out;
    out.y = want.data();
    deeprnn::Session(serial).run(in, out);
    deeprnn::Stream stream(m, B);
    int t = 0;
    for (int chunk : {1, 3, 1, 4}) {
        stream.push(&x[static_cast<size_t>(t) * B * 6], chunk, &got[static_cast<size_t>(t) * B * 100]);
        t += chunk;
    }
    BOOST_TEST((got == want));
    s::plan_cache_clear_memory();
}

// Short runs arriving back to back leave the caller for the pool (the first
// of a burst runs on the caller, the next ones too while the workers it woke
// are on their way, then the pool; or the other way round if the machine
// prices waking cheaply): whichever path each run takes, every run of a burst
// gives the bits of a one-thread model. Each burst starts once with the
// workers spinning and once after they have had time to fall asleep.
BOOST_AUTO_TEST_CASE(back_to_back_short_runs_match_one_thread_bit_for_bit) {
    deeprnn::Config c;
    c.cell = Cell::lstm;
    c.input_size = c.hidden_size = 256;
    const auto [one, two] = one_and_two_threads(c, 5);
    for (int T : {1, 3, 10})
        for (int idle_ms : {0, 5}) {
            std::vector<float> x(static_cast<size_t>(T) * 256);
            for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.11 * i + T));
            const std::vector<float> want = run_all(one, x, T, 1, {});
            deeprnn::Session s(two);
            std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
            for (int run = 0; run < 20; ++run)
                BOOST_TEST((run_y(s, x, T) == std::vector<float>(want.begin(), want.begin() + x.size())),
                           "T=" << T << " idle " << idle_ms << " ms, run " << run);
        }
}

// Session::set_profiling: off, no profile; on, each run's seconds per worker
// and its waits within them, on the pool and on the caller alone, with the
// bits of an unprofiled run; off again, none. Also two layers of 128 (the
// plan may pipeline them) and a wide input on a small state (it may have
// helpers project): the same bits there, whatever the plan.
BOOST_AUTO_TEST_CASE(a_profiled_run_says_where_each_worker_spent_it) {
    struct Case {
        int input, hidden, layers;
        long serial_rows;
    };
    for (const Case& k : {Case{256, 256, 1, 0}, Case{256, 256, 1, 1L << 30}, Case{128, 128, 2, 0}, Case{512, 64, 1, 0}}) {
        deeprnn::Config c = config_of(Cell::lstm, deeprnn::GruVariant::linear_before_reset, k.input, k.hidden, 0, k.layers, 1);
        c.serial_rows = k.serial_rows;  // every run on the pool, or on the caller alone
        const int T = 200;
        std::vector<float> x(static_cast<size_t>(T) * k.input);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.07 * i));
        const long serial_rows = k.serial_rows;
        const bool plain_plan = k.layers == 1 && k.input == k.hidden;
        const auto [one, two] = one_and_two_threads(c, 17);
        const std::string plan = two.plan();
        const size_t at = plan.find("workers=");
        BOOST_TEST_REQUIRE(at != std::string::npos, plan);
        const int workers = std::stoi(plan.substr(at + 8));
        deeprnn::Session plain(two), profiled(two);
        BOOST_TEST(profiled.last_profile().workers.empty());
        BOOST_TEST(deeprnn::to_string(profiled.last_profile()) == "not profiled");
        profiled.set_profiling(true);
        const std::vector<float> want = run_y(plain, x, T);
        for (int run = 0; run < 3; ++run)  // the last with the workers awake, each waiting at every step
            BOOST_TEST((run_y(profiled, x, T) == want), plan << ", run " << run);
        const deeprnn::RunProfile& p = profiled.last_profile();
        BOOST_TEST_REQUIRE(static_cast<int>(p.workers.size()) == workers, plan);
        BOOST_TEST(p.seconds > 0);
        BOOST_TEST(p.workers[0].seconds > 0);
        for (int w = 0; w < workers; ++w) {
            const deeprnn::RunProfile::Worker& pw = p.workers[w];
            BOOST_TEST((0 <= pw.wait_seconds && pw.wait_seconds <= pw.seconds && pw.seconds <= p.seconds), plan << ", worker " << w);
            if (plain_plan && serial_rows == 0 && workers > 1) BOOST_TEST(pw.wait_seconds > 0, "worker " << w);  // 200 barriers
            if (serial_rows != 0 && w > 0) BOOST_TEST(pw.seconds == 0, "worker " << w);  // the caller ran it all
        }
        BOOST_TEST(deeprnn::to_string(p).find("worker 0 ") != std::string::npos, deeprnn::to_string(p));
        profiled.set_profiling(false);
        BOOST_TEST((run_y(profiled, x, T) == want));
        BOOST_TEST(profiled.last_profile().workers.empty());
        // A stream's pushes too: the same bits as the run, a profile of the last push.
        deeprnn::Stream stream(two);
        stream.set_profiling(true);
        const int frames = T / 2, S = k.hidden;
        std::vector<float> y(static_cast<size_t>(T) * S);
        stream.push(x.data(), frames, y.data());
        stream.push(x.data() + static_cast<size_t>(frames) * k.input, T - frames, y.data() + static_cast<size_t>(frames) * S);
        BOOST_TEST((std::equal(y.begin(), y.end(), want.begin())), plan);
        BOOST_TEST(static_cast<int>(stream.last_profile().workers.size()) == workers, plan);
        BOOST_TEST(stream.last_profile().seconds > 0);
        const deeprnn::Session taken = std::move(plain);
        const deeprnn::Stream taken_stream = std::move(stream);
        BOOST_CHECK_THROW(plain.set_profiling(true), deeprnn::Error);  // "Session: used after move"
        BOOST_CHECK_THROW(plain.last_profile(), deeprnn::Error);
        BOOST_CHECK_THROW(stream.set_profiling(true), deeprnn::Error);
        BOOST_CHECK_THROW(stream.last_profile(), deeprnn::Error);
    }
}

// WeightCentricPool::wake: sleeping workers wake without work (a run of no
// worker) and the pool then runs jobs as before; a wake() already in flight
// is not repeated; destroying a pool while a wake-up is on its way is safe.
BOOST_AUTO_TEST_CASE(a_pool_woken_without_work_wakes_and_runs_as_before) {
    using deeprnn::detail::WeightCentricPool;
    auto wait_for = [](auto done) {  // seconds, not a timing test: a loaded machine may be slow
        for (int i = 0; i < 20000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
        return done();
    };
    WeightCentricPool pool(2, true);
    std::atomic<int> ran{0};
    auto job = [&](int) { ran.fetch_add(1); };
    pool.run(job);
    BOOST_TEST(ran.load() == 2);
    BOOST_REQUIRE(wait_for([&] { return !pool.awake(); }));  // asleep after their spin
    pool.wake();
    BOOST_TEST(wait_for([&] { return !pool.waking(); }));  // a worker woke since
    pool.run(job);
    BOOST_TEST(ran.load() == 4);
    BOOST_REQUIRE(wait_for([&] { return !pool.awake(); }));
    for (int i = 0; i < 100; ++i) pool.wake();  // one wake-up in flight, not a hundred
    pool.run(job);
    BOOST_TEST(ran.load() == 6);
    for (int i = 0; i < 20; ++i) {
        WeightCentricPool brief(2, true);
        BOOST_REQUIRE(wait_for([&] { return !brief.awake(); }));
        brief.wake();  // then destroyed at once, its worker maybe still waking
    }
}

// A wake-up with a warm job (Model::prefetch): each woken worker 1..active-1
// runs it once, the caller none; wait_warm() returns once they have, and also
// when a run's word reached a worker before the warm one did (the worker
// then owes it and only counts it off); a second warm-up while one is in
// flight posts nothing; a pool destroyed during one joins cleanly.
BOOST_AUTO_TEST_CASE(a_pool_woken_with_a_warm_job_runs_it_once_per_worker) {
    using deeprnn::detail::WeightCentricPool;
    auto wait_for = [](auto done) {  // seconds, not a timing test: a loaded machine may be slow
        for (int i = 0; i < 20000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
        return done();
    };
    struct Count {
        std::atomic<int> warmed{0}, on_caller{0};
        std::atomic<bool> hold{false};  // worker 1 stays in its warm job while set
    };
    const WeightCentricPool::Job warm = [](void* ctx, int w) {
        auto& count = *static_cast<Count*>(ctx);
        (w == 0 ? count.on_caller : count.warmed).fetch_add(1);
        while (w == 1 && count.hold.load()) std::this_thread::yield();
    };
    WeightCentricPool pool(3, true);
    std::atomic<int> ran{0};
    auto job = [&](int) { ran.fetch_add(1); };
    pool.run(job);
    Count count;
    BOOST_REQUIRE(wait_for([&] { return !pool.awake(); }));
    // Worker 1 held inside the warm-up while worker 2 finishes it and naps
    // again: a second wake() then finds the first in flight (not a matter of
    // timing: on a slow machine both could otherwise finish in between).
    count.hold = true;
    pool.wake(warm, &count, 3);
    const bool held = wait_for([&] { return count.warmed.load() == 2 && !pool.awake(); });
    if (!held) count.hold = false;  // never leave worker 1 spinning: the pool joins it
    BOOST_REQUIRE(held);
    pool.wake(warm, &count, 3);  // in flight: nothing posted
    count.hold = false;
    pool.wait_warm();
    BOOST_TEST(count.warmed.load() == 2);
    BOOST_TEST(count.on_caller.load() == 0);
    BOOST_REQUIRE(wait_for([&] { return pool.idle(2) != WeightCentricPool::Idle::awake; }));
    pool.wake(warm, &count, 2);  // a model on 2 of the pool's 3 workers
    pool.wait_warm();
    BOOST_TEST(count.warmed.load() == 3);
    for (int i = 0; i < 200; ++i) {  // a run right behind the warm-up: some workers see its word first
        if (i % 20 == 0) BOOST_REQUIRE(wait_for([&] { return !pool.awake(); }));
        pool.wake(warm, &count, 3);
        pool.run(job);
        pool.wait_warm();
    }
    BOOST_TEST(ran.load() == 3 + 200 * 3);
    BOOST_TEST(count.warmed.load() <= 3 + 200 * 2);
    BOOST_TEST(count.on_caller.load() == 0);
    for (int i = 0; i < 20; ++i) {
        Count brief_count;
        WeightCentricPool brief(2, true);
        BOOST_REQUIRE(wait_for([&] { return !brief.awake(); }));
        brief.wake(warm, &brief_count, 2);
        brief.wait_warm();  // as a model does before its weights go
    }
}

// A shared pool larger than a model's plan: runs and wake-ups on workers
// 0..1 leave worker 2 alone. It falls asleep after its own window and sleeps
// on through them (before session 61 every run restarted its spin and naps),
// and a run on all three still wakes it.
BOOST_AUTO_TEST_CASE(pool_workers_a_run_does_not_use_sleep_through_it) {
    using deeprnn::detail::WeightCentricPool;
    using Idle = WeightCentricPool::Idle;
    WeightCentricPool pool(3, true, 2000);  // a 2 ms nap window
    std::atomic<int> ran{0};
    auto job = [&](int) { ran.fetch_add(1); };
    const WeightCentricPool::Job warm = [](void* ctx, int w) { static_cast<std::atomic<int>*>(ctx)->fetch_or(1 << w); };
    std::atomic<int> warmed{0};  // the workers that ran a warm job, a bit each
    int runs = 0;
    // Runs on two workers every ~0.3 ms, well inside the window: worker 2
    // must still fall asleep (seconds allowed: a loaded machine may be slow).
    for (int i = 0; i < 20000 && pool.idle_of(2) != Idle::asleep; ++i, ++runs) {
        pool.run(job, 2);
        std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    BOOST_REQUIRE(pool.idle_of(2) == Idle::asleep);
    for (int i = 0; i < 100; ++i, ++runs) {
        pool.run(job, 2);
        if (i % 10 == 0) pool.wake(2);
        if (i % 10 == 5) {
            pool.wake(warm, &warmed, 2);
            pool.wait_warm();
        }
        BOOST_TEST((pool.idle_of(2) == Idle::asleep));
        std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    BOOST_TEST((warmed.load() & ~2) == 0);  // worker 1 at most (it may have been awake: no warm-up posted)
    BOOST_TEST(ran.load() == 2 * runs);
    pool.run(job, 3);
    BOOST_TEST(ran.load() == 2 * runs + 3);
    // A wake-up of workers 1..1 still in flight does not stop one of 1..2.
    WeightCentricPool sleepy(3, true, 0);  // workers sleep right after their spin
    const auto asleep = [&] { return sleepy.idle_of(1) == Idle::asleep && sleepy.idle_of(2) == Idle::asleep; };
    for (int i = 0; i < 20000 && !asleep(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
    BOOST_REQUIRE(asleep());
    warmed = 0;
    sleepy.wake(2);
    sleepy.wake(warm, &warmed, 3);
    sleepy.wait_warm();
    BOOST_TEST((warmed.load() & 4) != 0);  // worker 2 woke for it
}

// The nap window (Config::idle_nap_ms, WorkerPool::set_idle_nap_ms): with 0
// idle workers never nap, they sleep after their spin (on battery, the naps'
// ~30% of a core is saved); a window changed while they nap holds from their
// next nap, so they fall asleep then, and runs go on as before.
BOOST_AUTO_TEST_CASE(idle_workers_nap_only_for_the_window_they_are_given) {
    using deeprnn::detail::WeightCentricPool;
    auto wait_for = [](auto done) {  // seconds, not a timing test: a loaded machine may be slow
        for (int i = 0; i < 20000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
        return done();
    };
    std::atomic<int> ran{0};
    auto job = [&](int) { ran.fetch_add(1); };
    WeightCentricPool never(2, true, 0);
    for (int round = 0; round < 3; ++round) {
        never.run(job);
        BOOST_REQUIRE(wait_for([&] { return never.idle() == WeightCentricPool::Idle::asleep; }));
    }
    BOOST_TEST(never.naps() == 0);
    BOOST_TEST(ran.load() == 6);

    WeightCentricPool long_naps(2, true, WeightCentricPool::kMaxNapWindowMicros);  // 10 s
    long_naps.run(job);
    const long before = long_naps.naps();  // the worker napped before the run too
    BOOST_REQUIRE(wait_for([&] { return long_naps.naps() > before; }));
    BOOST_TEST((long_naps.idle() == WeightCentricPool::Idle::napping));
    long_naps.set_nap_window(0);  // e.g. the device went on battery
    BOOST_TEST(wait_for([&] { return long_naps.idle() == WeightCentricPool::Idle::asleep; }));
    long_naps.run(job);
    BOOST_TEST(ran.load() == 10);

    // The public handle: checked values, the window read back.
    deeprnn::WorkerPool shared(2, true, 0.5);
    BOOST_TEST(shared.idle_nap_ms() == 0.5);
    shared.set_idle_nap_ms(0);
    BOOST_TEST(shared.idle_nap_ms() == 0.0);
    BOOST_CHECK_THROW(shared.set_idle_nap_ms(-1), deeprnn::Error);
    BOOST_TEST(shared.idle_nap_ms() == 0.0);
}

// A run whose caller ends it alone (WeightCentricPool::run, ended_alone; a
// hand-over that finished before the workers woke) returns without waiting
// for them: a worker that had not started it skips it, never to run it
// later (the caller's frame, where the job lives, is gone by then), and
// takes the next run as usual. A worker that started it is waited for.
BOOST_AUTO_TEST_CASE(a_run_its_caller_ends_alone_does_not_wait_for_sleeping_workers) {
    using deeprnn::detail::WeightCentricPool;
    WeightCentricPool pool(2, true);
    std::atomic<int> worker_runs{0};
    bool ended_alone = false;
    auto job = [&](int w) {
        if (w == 0) ended_alone = true;
        else worker_runs.fetch_add(1);
    };
    int skipped = 0;
    for (int round = 0; round < 40; ++round) {
        for (int i = 0; i < 20000 && pool.awake(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
        const int before = worker_runs.load();
        pool.run(job, 2, &ended_alone);
        const int after = worker_runs.load();
        BOOST_TEST((after == before || after == before + 1));
        skipped += after == before;
        std::this_thread::sleep_for(std::chrono::milliseconds(round % 2 ? 1 : 12));  // napping, then asleep
        BOOST_TEST(worker_runs.load() == after, "round " << round << ": a late worker ran a finished run");
        ended_alone = false;
        auto plain = [&](int w) {
            if (w != 0) worker_runs.fetch_add(1);
        };
        pool.run(plain, 2);
        BOOST_TEST(worker_runs.load() == after + 1, "round " << round);
    }
    BOOST_TEST_MESSAGE(skipped << " of 40 runs ended without the worker");
    // Runs ended without the worker do not restart its nap window (a
    // stream of one-step runs would keep it napping for nothing): 1 ms
    // apart, it falls asleep 10 ms after the last run it took, and a run
    // that wakes it only to be skipped lets it sleep again.
    int asleep = 0;
    for (int i = 0; i < 200; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        asleep += pool.idle() == WeightCentricPool::Idle::asleep;
        ended_alone = false;
        pool.run(job, 2, &ended_alone);
    }
    BOOST_TEST(asleep > 0, asleep << " of 200 runs found the worker asleep");
}

// The caller is worker 0 and floats, so the OS may put it on the core the
// other worker is pinned to. A run then moves it off (its affinity mask as it
// was) or, when its mask allows only that core, moves the worker to a free
// core; with no free core it runs on the caller alone. Every way the outputs
// are one worker's bits. (Before, the two threads took turns at every
// barrier: GRU 256-256, 100 steps, 11.5 ms instead of 0.57; and until
// 2026-12-06 a caller pinned to the worker's core ran alone: LSTM 256-256,
// 100 steps, 1.46-1.48 ms instead of 0.58-0.65.)
BOOST_AUTO_TEST_CASE(a_caller_on_the_workers_core_moves_off_or_moves_the_worker) {
    deeprnn::Config c;
    c.cell = Cell::gru;
    c.input_size = c.hidden_size = 128;
    c.serial_rows = 0;  // every run on the pool unless the caller cannot leave the worker's core
    const auto [one, two] = one_and_two_threads(c, 6);
    const std::string plan = two.plan();
    const size_t at = plan.find("pinned to cores ");
    if (at == std::string::npos) {
        BOOST_TEST_MESSAGE("workers not pinned here (" << plan << "): only the outputs are checked");
    }
    const int T = 40;
    std::vector<float> x(static_cast<size_t>(T) * 128);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.07 * i));
    const std::vector<float> all = run_all(one, x, T, 1, {}), want(all.begin(), all.begin() + x.size());
    deeprnn::Session s(two);
    cpu_set_t own, worker;
    BOOST_REQUIRE(sched_getaffinity(0, sizeof(own), &own) == 0);
    CPU_ZERO(&worker);
    if (at != std::string::npos) CPU_SET(std::stoi(plan.substr(at + 16)), &worker);
    for (bool may_leave : {true, false}) {
        for (int run = 0; run < 5; ++run) {
            if (at != std::string::npos) {
                BOOST_REQUIRE(sched_setaffinity(0, sizeof(worker), &worker) == 0);  // now on the worker's core
                if (may_leave) BOOST_REQUIRE(sched_setaffinity(0, sizeof(own), &own) == 0);
            }
            BOOST_TEST((run_y(s, x, T) == want), "may_leave " << may_leave << " run " << run);
            cpu_set_t now;
            BOOST_REQUIRE(sched_getaffinity(0, sizeof(now), &now) == 0);
            BOOST_TEST(CPU_EQUAL(&now, may_leave || at == std::string::npos ? &own : &worker));  // the mask is the caller's
        }
    }
    BOOST_REQUIRE(sched_setaffinity(0, sizeof(own), &own) == 0);
    // The move itself: the kernel migrates a thread whose new mask excludes its
    // CPU before the call returns, and restoring the mask does not move it back.
    deeprnn::detail::WeightCentricPool pool(2, true);
    if (at != std::string::npos && pool.pinning().find("pinned to cores ") != std::string::npos) {
        cpu_set_t theirs;
        CPU_ZERO(&theirs);
        const int core = std::stoi(pool.pinning().substr(pool.pinning().find("pinned to cores ") + 16));
        CPU_SET(core, &theirs);
        BOOST_REQUIRE(sched_setaffinity(0, sizeof(theirs), &theirs) == 0);
        BOOST_REQUIRE(sched_setaffinity(0, sizeof(own), &own) == 0);
        BOOST_TEST(sched_getcpu() == core);
        BOOST_TEST(pool.free_caller_core(2));
        BOOST_TEST(sched_getcpu() != core);
        BOOST_TEST(pool.worker_moves() == 0);
        BOOST_REQUIRE(sched_setaffinity(0, sizeof(theirs), &theirs) == 0);  // the caller may not leave: the worker does
        BOOST_TEST(pool.free_caller_core(2));
        BOOST_TEST(pool.worker_moves() == 1);
        BOOST_TEST(pool.core_of(1) != core);
        BOOST_TEST(pool.core_of(1) >= 0);
        // pinning() (and so plan()) says where the worker is now.
        BOOST_TEST(pool.pinning().find(deeprnn::detail::cat("pinned to cores ", pool.core_of(1), ",")) != std::string::npos, pool.pinning());
        BOOST_TEST(pool.pinning().find("moved 1 time off a caller's core") != std::string::npos, pool.pinning());
        BOOST_TEST(pool.free_caller_core(2));  // clear now: nothing moves
        BOOST_TEST(pool.worker_moves() == 1);
        // This is the main thread, so its mask is the process's too: a pool
        // made now has one core for both threads, says so, and its runs stay
        // on the caller.
        deeprnn::detail::WeightCentricPool cramped(2, true);
        BOOST_TEST(cramped.core_of(1) == core);
        BOOST_TEST(cramped.pinning().find("take turns") != std::string::npos, cramped.pinning());
        BOOST_TEST(!cramped.free_caller_core(2));  // nowhere else to go
        BOOST_TEST(cramped.worker_moves() == 0);
        BOOST_REQUIRE(sched_setaffinity(0, sizeof(own), &own) == 0);
    }
}

// An application may pin the thread that builds a model (an audio thread)
// to one core: the process may still use the others, and the workers go
// there, not onto the builder's core (until 2026-12-06 they did, and every
// run from that thread went on the caller alone: 2.3-2.5x slower).
BOOST_AUTO_TEST_CASE(a_pool_built_on_a_pinned_thread_puts_its_workers_on_other_cores) {
    const std::vector<int> cores = deeprnn::detail::physical_cores();
    if (cores.size() < 2) {
        BOOST_TEST_MESSAGE("one physical core here: nothing to place");
        return;
    }
    for (int core : {cores.front(), cores.back()}) {
        std::string pinning;
        int worker_core = -1, builder_core = -1;
        boost::thread builder([&] {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(core, &one);
            if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0) return;
            builder_core = sched_getcpu();
            deeprnn::detail::WeightCentricPool pool(2, true);
            pinning = pool.pinning();
            worker_core = pool.core_of(1);
        });
        builder.join();
        if (builder_core < 0) {
            BOOST_TEST_MESSAGE("the OS refused to pin a thread to core " << core);
            continue;
        }
        if (pinning.find("pinned to cores ") == std::string::npos) {
            BOOST_TEST_MESSAGE("workers not pinned here: " << pinning);
            continue;
        }
        BOOST_TEST(worker_core >= 0);
        BOOST_TEST(worker_core != builder_core, pinning);
        BOOST_TEST(pinning.find("take turns") == std::string::npos, pinning);
    }
}

// Config::threads above the logical CPUs the process may run on is lowered
// to them (the extra workers would take turns at every step's barrier:
// LSTM 256-256 at batch 1 ran 2.7x slower with 4 threads on 2 CPUs), says
// so in plan() and the log, and keeps the bits; a WorkerPool the application
// made keeps its size.
BOOST_AUTO_TEST_CASE(config_threads_above_the_cpus_are_lowered_to_them) {
    namespace d = deeprnn::detail;
    int cores = 0;
    const int cpus = d::logical_cpus();
    BOOST_TEST(cpus == static_cast<int>(d::usable_cpus(&cores).size()));
    const deeprnn::Weights w = small_torch_lstm(16, 256);
    deeprnn::Config cfg = deeprnn::config_from_weights(Cell::lstm, deeprnn::Convention::torch, w);
    cfg.threads = cpus + 2;
    Captured log;
    cfg.log = [](deeprnn::LogLevel level, const char* msg, void* user) {
        static_cast<Captured*>(user)->lines.push_back({level, msg});
    };
    cfg.log_user = &log;
    const deeprnn::Model lowered(cfg, w);
    const std::string note = d::cat("Config.threads = ", cpus + 2, " lowered to the ", cpus, " logical CPUs");
    BOOST_TEST(lowered.plan().find(note) != std::string::npos, lowered.plan());
    BOOST_TEST(log.has(deeprnn::LogLevel::warning, note));
    const std::string plan = lowered.plan();
    const size_t at = plan.find("schedule workers=");
    BOOST_REQUIRE(at != std::string::npos);
    BOOST_TEST(std::stoi(plan.substr(at + 17)) <= cpus, plan);

    cfg.pool = deeprnn::WorkerPool(cpus + 2);
    log.lines.clear();
    const deeprnn::Model asked(cfg, w);
    BOOST_TEST(asked.plan().find("lowered") == std::string::npos, asked.plan());
    BOOST_TEST(!log.has(deeprnn::LogLevel::warning, "lowered"));
    std::vector<float> x(7 * 16, 0.5f), y1(7 * 256), y2(y1.size());
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = 7;
    deeprnn::RunOutput o1, o2;
    o1.y = y1.data();
    o2.y = y2.data();
    deeprnn::Session(lowered).run(in, o1);
    deeprnn::Session(asked).run(in, o2);
    BOOST_TEST(y1 == y2);
}

// A directory of small files laid out as a kernel interface (sysfs, cgroup
// hierarchies) presents them, removed at the end of the test.
struct ScratchTree {
    std::filesystem::path root;
    explicit ScratchTree(const std::string& name)
        : root(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()))) {
        std::filesystem::remove_all(root);
    }
    ~ScratchTree() { std::filesystem::remove_all(root); }
    void put(const std::filesystem::path& file, const std::string& text) const {
        std::filesystem::create_directories((root / file).parent_path());
        std::ofstream(root / file) << text << "\n";
    }
};

// More threads than physical cores (threads = hardware_concurrency() on an
// SMT machine): the extra workers go on the cores' SMT siblings, which run
// alongside, before any two share a logical CPU and take turns at every
// barrier (until 2026-12-06 they did so at once: worker 8 of 16 on an 8-core,
// 16-thread CPU went on worker 0's CPU). Cores are told apart by the
// kernel's thread-sibling lists, not (package, core_id), which arm64 repeats
// in every cluster; big cores (cpu_capacity) lead, and threads = 0 takes the
// big ones alone where the little ones would slow every step more than they
// add. Intel hybrid parts' E-cores (outside the PMU's cpu_core list) count a quarter.
BOOST_AUTO_TEST_CASE(workers_take_whole_cores_then_smt_siblings) {
    const ScratchTree tree("deeprnn_sysfs");
    const std::filesystem::path& root = tree.root;
    // x86: two packages of two cores with two threads each; CPUs 0-3 the
    // first thread of each core, 4-7 their siblings (Linux's usual numbering).
    for (int cpu = 0; cpu < 8; ++cpu) {
        const std::filesystem::path topo = std::filesystem::path("x86") / ("cpu" + std::to_string(cpu)) / "topology";
        tree.put(topo / "physical_package_id", std::to_string((cpu % 4) / 2));
        tree.put(topo / "core_id", std::to_string(cpu % 2));
        tree.put(topo / "thread_siblings_list", std::to_string(cpu % 4) + "," + std::to_string(cpu % 4 + 4));
    }
    // arm64 big.LITTLE (an RK3588's layout): cluster 0 is four little cores
    // (CPUs 0-3, core_id 0-3), clusters 1 and 2 two big ones each (CPUs 4-7,
    // core_id 0-1 again), all in package 0, one thread a core.
    const int core_id[8] = {0, 1, 2, 3, 0, 1, 0, 1};
    for (int cpu = 0; cpu < 8; ++cpu) {
        const std::filesystem::path dir = std::filesystem::path("arm") / ("cpu" + std::to_string(cpu));
        tree.put(dir / "topology/physical_package_id", "0");
        tree.put(dir / "topology/core_id", std::to_string(core_id[cpu]));
        tree.put(dir / "topology/thread_siblings_list", std::to_string(cpu));
        tree.put(dir / "cpu_capacity", cpu < 4 ? "414" : "1024");
    }
    const auto cpus = [&](const char* tree, std::vector<int> allowed, int first, int want_cores, std::vector<int>* capacity = nullptr) {
        cpu_set_t mask;
        CPU_ZERO(&mask);
        for (int cpu : allowed) CPU_SET(cpu, &mask);
        int cores = -1;
        const std::vector<int> order = deeprnn::detail::usable_cpus(mask, (root / tree).string(), first, &cores, capacity);
        BOOST_TEST(cores == want_cores);
        return order;
    };
    using V = std::vector<int>;
    const V all{0, 1, 2, 3, 4, 5, 6, 7};
    BOOST_TEST(cpus("x86", all, 0, 4) == (V{0, 1, 2, 3, 4, 5, 6, 7}), boost::test_tools::per_element());
    BOOST_TEST(cpus("x86", all, 6, 4) == (V{6, 0, 1, 3, 2, 4, 5, 7}), boost::test_tools::per_element());
    BOOST_TEST(cpus("x86", {0, 4}, 0, 1) == (V{0, 4}), boost::test_tools::per_element());       // one core, both threads
    BOOST_TEST(cpus("x86", {1, 2, 5}, 9, 2) == (V{1, 2, 5}), boost::test_tools::per_element());  // first not allowed: ignored
    BOOST_TEST(cpus("x86", {3}, 3, 1) == (V{3}), boost::test_tools::per_element());
    BOOST_TEST(cpus("none", {8, 9}, 9, 2) == (V{9, 8}), boost::test_tools::per_element());  // no topology: each its own core
    // arm64: eight cores (not four), the big ones first; the builder's leads
    // its equals, and a builder on a little core leaves the callers a big one.
    std::vector<int> capacity;
    BOOST_TEST(cpus("arm", all, 0, 8, &capacity) == (V{4, 5, 6, 7, 0, 1, 2, 3}), boost::test_tools::per_element());
    BOOST_TEST(capacity == (V{1024, 1024, 1024, 1024, 414, 414, 414, 414}), boost::test_tools::per_element());
    BOOST_TEST(cpus("arm", all, 6, 8) == (V{6, 4, 5, 7, 0, 1, 2, 3}), boost::test_tools::per_element());
    BOOST_TEST(cpus("arm", {0, 1, 2}, 1, 3) == (V{1, 0, 2}), boost::test_tools::per_element());  // little cores alone
    // Intel hybrid (an i7-12700H's layout): 6 P-cores with two threads each
    // (CPUs 0-11, siblings numbered in pairs) and 8 E-cores (CPUs 12-19),
    // named by the hybrid PMU's lists; no cpu_capacity, as before Linux 6.12.
    for (int cpu = 0; cpu < 20; ++cpu) {
        const std::filesystem::path topo =
            std::filesystem::path("hybrid/devices/system/cpu") / ("cpu" + std::to_string(cpu)) / "topology";
        tree.put(topo / "thread_siblings_list",
                 cpu < 12 ? std::to_string(cpu & ~1) + "-" + std::to_string(cpu | 1) : std::to_string(cpu));
    }
    tree.put("hybrid/devices/cpu_core/cpus", "0-11");
    tree.put("hybrid/devices/cpu_atom/cpus", "12-19");
    tree.put("hybrid/devices/system/cpu/cpu20/topology/thread_siblings_list", "20");  // a low-power E-core: in no list here
    V every(20);
    for (int cpu = 0; cpu < 20; ++cpu) every[cpu] = cpu;
    const V hybrid_order{0, 2, 4, 6, 8, 10, 12, 13, 14, 15, 16, 17, 18, 19, 1, 3, 5, 7, 9, 11};
    BOOST_TEST(cpus("hybrid/devices/system/cpu", every, 0, 14, &capacity) == hybrid_order, boost::test_tools::per_element());
    BOOST_TEST(capacity[5] == 1024);
    BOOST_TEST(capacity[6] == 256);
    capacity.resize(14);
    BOOST_TEST(deeprnn::detail::fastest_core_count(capacity) == 6);  // 6 x 1024 > 14 x 256: the P-cores alone
    // A builder on an E-core leaves the callers a P-core; E-cores alone (a
    // mask, or an E-core-only part) are all taken; a CPU in no P-core list
    // is an E-core; without the cpu_core list (not a hybrid part) every
    // core counts in full.
    BOOST_TEST(cpus("hybrid/devices/system/cpu", every, 15, 14)[0] == 0);
    BOOST_TEST(cpus("hybrid/devices/system/cpu", {12, 13, 14, 15}, 13, 4, &capacity) == (V{13, 12, 14, 15}),
               boost::test_tools::per_element());
    BOOST_TEST(capacity == (V{256, 256, 256, 256}), boost::test_tools::per_element());
    BOOST_TEST(deeprnn::detail::fastest_core_count(capacity) == 4);
    cpus("hybrid/devices/system/cpu", {10, 20}, 20, 2, &capacity);
    BOOST_TEST(capacity == (V{1024, 256}), boost::test_tools::per_element());
    tree.put("atom_only/devices/system/cpu/cpu0/topology/thread_siblings_list", "0");
    tree.put("atom_only/devices/cpu_atom/cpus", "0");
    cpus("atom_only/devices/system/cpu", {0}, 0, 1, &capacity);
    BOOST_TEST(capacity == (V{1024}), boost::test_tools::per_element());
    // threads = 0: k fastest cores maximizing k x the k-th capacity.
    using deeprnn::detail::fastest_core_count;
    BOOST_TEST(fastest_core_count({1024, 1024, 1024, 1024, 414, 414, 414, 414}) == 4);  // the arm64 chip: 4 x 1024 > 8 x 414
    BOOST_TEST(fastest_core_count({1024, 1024, 600, 600, 600, 600}) == 6);  // 6 x 600 > 2 x 1024
    BOOST_TEST(fastest_core_count({1024, 1024, 512, 512}) == 4);          // a tie: more L2
    BOOST_TEST(fastest_core_count({1024, 1024, 1024}) == 3);
    BOOST_TEST(fastest_core_count({1024}) == 1);
    BOOST_TEST(fastest_core_count({1024, 1024, 256, 256, 256, 256, 256, 256, 256, 256}) == 10);  // 2 P + 8 E: all
    // build_info's line on them.
    using deeprnn::detail::describe_cores;
    BOOST_TEST(describe_cores({1024, 1024}) == "2");
    BOOST_TEST(describe_cores({414, 1024, 1024, 414}) == "4 (2 at capacity 1024, 2 at 414: threads = 0 takes the 2 fastest)");
    BOOST_TEST(describe_cores({1024, 256, 256, 256, 256, 256, 256, 256, 256, 1024}) ==
               "10 (2 at capacity 1024, 8 at 256: threads = 0 takes them all)");
    // This machine: whole cores lead, and each CPU appears once.
    int cores = 0;
    const std::vector<int> here = deeprnn::detail::usable_cpus(&cores);
    BOOST_TEST(cores >= 1);
    BOOST_TEST(static_cast<int>(deeprnn::detail::physical_cores().size()) == cores);
    BOOST_TEST(std::set<int>(here.begin(), here.end()).size() == here.size());
    BOOST_TEST(deeprnn::detail::default_threads() <= cores);
}

// Two models with pools of their own, run at once on a machine with cores to
// spare, take different cores: each pool starts after the cores other live
// pools' workers hold (until 2026-12-06 every pool started from the core after
// its builder's, so both models' workers took turns on the same ones).
BOOST_AUTO_TEST_CASE(a_second_pool_takes_the_cores_the_first_left_free) {
    using deeprnn::detail::worker_cpus;
    using V = std::vector<int>;
    const V cpus{4, 5, 6, 7};  // usable_cpus order: 4 is the builder's
    BOOST_TEST(worker_cpus(cpus, 3, {}) == (V{-1, 5, 6}), boost::test_tools::per_element());
    BOOST_TEST(worker_cpus(cpus, 3, {{5, 1}}) == (V{-1, 6, 7}), boost::test_tools::per_element());
    BOOST_TEST(worker_cpus(cpus, 4, {{5, 1}, {6, 1}, {7, 2}}) == (V{-1, 5, 6, 7}), boost::test_tools::per_element());
    BOOST_TEST(worker_cpus(cpus, 3, {{5, 2}, {6, 1}, {4, 0}}) == (V{-1, 7, 6}), boost::test_tools::per_element());
    BOOST_TEST(worker_cpus(cpus, 6, {{6, 1}}) == (V{-1, 5, 7, 6, 4, 5}), boost::test_tools::per_element());  // past 4: wraps
    BOOST_TEST(worker_cpus({3}, 2, {}) == (V{-1, 3}), boost::test_tools::per_element());
    BOOST_TEST(worker_cpus({3}, 1, {}) == (V{-1}), boost::test_tools::per_element());
    // Live pools: the registry counts their workers while they live.
    const auto on = [](int cpu) {
        deeprnn::detail::PinnedWorkers& r = deeprnn::detail::pinned_workers();
        boost::lock_guard<boost::mutex> lock(r.mutex);
        const auto it = r.on_cpu.find(cpu);
        return it == r.on_cpu.end() ? 0 : it->second;
    };
    const int cpus_here = static_cast<int>(deeprnn::detail::usable_cpus(nullptr).size());
    auto first = std::make_unique<deeprnn::detail::WeightCentricPool>(2, true);
    const int a = first->core_of(1);
    if (a < 0) {
        BOOST_TEST_MESSAGE("workers not pinned here: " << first->pinning());
        return;
    }
    const int before = on(a);
    BOOST_TEST(before >= 1);
    {
        deeprnn::detail::WeightCentricPool second(2, true);
        const int b = second.core_of(1);
        BOOST_TEST(b >= 0);
        if (cpus_here >= 3) BOOST_TEST(b != a, "both pools' workers on CPU " << a);
        BOOST_TEST(on(b) == (b == a ? before + 1 : 1));
    }
    BOOST_TEST(on(a) == before);  // the second pool's worker is counted off
    first.reset();
    BOOST_TEST(on(a) == before - 1);
}

// threads = 0 in a container started with --cpus=1 on a 2-core host: one
// worker, not two that stall for the rest of each 100 ms period (--cpus=1.5:
// two). The quota is read from cgroup v2's cpu.max or v1's cfs files, the
// smallest along the cgroup's path (a container's own cgroup is mounted at
// the top even when /proc/self/cgroup names the host's path).
BOOST_AUTO_TEST_CASE(the_cgroup_cpu_quota_is_read_from_v1_and_v2_files) {
    const ScratchTree tree("deeprnn_cgroup");
    const std::filesystem::path& root = tree.root;
    using deeprnn::detail::cgroup_cpu_limit;
    // v2: the leaf says max, its parent 150000 of 100000, the top 300000.
    tree.put("v2/cpu.max", "300000 100000");
    tree.put("v2/app/cpu.max", "150000 100000");
    tree.put("v2/app/leaf/cpu.max", "max 100000");
    BOOST_TEST(cgroup_cpu_limit((root / "v2").string(), "0::/app/leaf\n") == 1.5);
    BOOST_TEST(cgroup_cpu_limit((root / "v2").string(), "0::/\n") == 3.0);
    BOOST_TEST(cgroup_cpu_limit((root / "v2").string(), "0::/elsewhere\n") == 3.0);  // the top still counts
    // v1, the cpu hierarchy mounted as "cpu,cpuacct", -1 = no quota.
    tree.put("v1/cpu,cpuacct/cpu.cfs_quota_us", "-1");
    tree.put("v1/cpu,cpuacct/cpu.cfs_period_us", "100000");
    tree.put("v1/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "50000");
    tree.put("v1/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000");
    const std::string self = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n";
    BOOST_TEST(cgroup_cpu_limit((root / "v1").string(), self) == 0.5);
    BOOST_TEST(cgroup_cpu_limit((root / "v1").string(), "4:cpu,cpuacct:/\n") == 0.0);
    // Nothing limits: no files, "max", garbage, a controller named cpuset.
    tree.put("v3/cpu.max", "max 100000");
    BOOST_TEST(cgroup_cpu_limit((root / "v3").string(), "0::/\n") == 0.0);
    tree.put("v4/cpu.max", "lots");
    BOOST_TEST(cgroup_cpu_limit((root / "v4").string(), "0::/\n") == 0.0);
    BOOST_TEST(cgroup_cpu_limit((root / "none").string(), "0::/a/b\n3:cpuset:/\ngarbage\n") == 0.0);
    // This machine: threads = 0 never asks for more whole cores than it may use.
    const double quota = cgroup_cpu_limit();
    const int threads = deeprnn::detail::default_threads();
    BOOST_TEST(threads >= 1);
    BOOST_TEST(threads <= static_cast<int>(deeprnn::detail::physical_cores().size()));
    if (quota > 0) BOOST_TEST(threads <= deeprnn::detail::cgroup_thread_limit(quota));
    // The quota becomes threads rounded up (1.5 cores: 2), never 0 threads,
    // and a quota a hair over a whole core (float division) stays at it.
    using deeprnn::detail::cgroup_thread_limit;
    BOOST_TEST(cgroup_thread_limit(0) == 0);
    BOOST_TEST(cgroup_thread_limit(0.2) == 1);
    BOOST_TEST(cgroup_thread_limit(1) == 1);
    BOOST_TEST(cgroup_thread_limit(1.0000001) == 1);
    BOOST_TEST(cgroup_thread_limit(1.25) == 2);
    BOOST_TEST(cgroup_thread_limit(1.5) == 2);
    BOOST_TEST(cgroup_thread_limit(8) == 8);
}

// Short runs execute every worker's share in turn on the caller
// (Config::serial_rows): the same phases as on the pool, in the order the
// barriers impose, so every multi-worker form gives the pool's bits: output
// tiling (LSTM with a projection: a mid-step barrier; RNN), GRU
// reset-before-matmul with two barriers and with one, directions in turn and
// side by side, and pipelined layers; ragged lengths, initial states, c_n, and
// a stream pushed in chunks.
BOOST_AUTO_TEST_CASE(short_runs_on_the_caller_match_the_pool_bit_for_bit) {
    struct Case {
        Cell cell;
        deeprnn::GruVariant variant;
        int hidden, proj, layers;
        deeprnn::Direction direction;
        s::ExecutionChoice choice;
    };
    const auto fwd = deeprnn::Direction::forward, bi = deeprnn::Direction::bidirectional;
    const auto lbr = deeprnn::GruVariant::linear_before_reset, rbm = deeprnn::GruVariant::reset_before_matmul;
    s::ExecutionChoice two, side, piped, one_barrier;
    two.workers = 2;
    side.workers = 1;
    side.side_by_side = true;
    piped.workers = 2;
    piped.pipelined = true;
    one_barrier.workers = 2;
    one_barrier.rbm_one_barrier = true;
    const Case cases[] = {
        {Cell::lstm, lbr, 64, 24, 2, fwd, two},   {Cell::rnn_tanh, lbr, 40, 0, 1, fwd, two},
        {Cell::gru, rbm, 100, 0, 2, fwd, two},    {Cell::gru, rbm, 100, 0, 2, bi, one_barrier},
        {Cell::gru, lbr, 33, 0, 2, bi, side},     {Cell::lstm, lbr, 48, 0, 2, bi, two},
        {Cell::lstm, lbr, 40, 0, 3, fwd, piped},
    };
    for (const Case& k : cases) {
        deeprnn::Config c = config_of(k.cell, k.variant, 7, k.hidden, k.proj, k.layers, 3);
        c.direction = k.direction;
        c.threads = 2;
        std::mt19937 rng(k.hidden + 7 * k.layers);
        const deeprnn::Weights w = ref::torch_weights(ref::random_net(c, rng, 0.3));
        force_plan(c, k.choice, "short_runs.txt");  // serial_rows = 0: always the pool
        const deeprnn::Model pool(c, w);
        deeprnn::Config sc = c;
        sc.serial_rows = 1L << 40;  // always the caller
        const deeprnn::Model caller(sc, w);
        const std::string what = std::string(deeprnn::to_string(k.cell)) + " H=" + std::to_string(k.hidden) + " " +
                                 k.choice.str() + (k.direction == bi ? " bidirectional" : "");
        BOOST_TEST_REQUIRE(caller.plan().find(k.choice.str()) != std::string::npos, caller.plan());
        BOOST_TEST(pool.plan().find("every run on the pool") != std::string::npos, pool.plan());
        BOOST_TEST(caller.plan().find("on the caller alone") != std::string::npos, caller.plan());
        const int T = 6, B = 3, LD = k.layers * deeprnn::num_directions(c);
        std::vector<float> x(static_cast<size_t>(T) * B * 7), h0(static_cast<size_t>(LD) * B * deeprnn::state_size(c));
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
        for (size_t i = 0; i < h0.size(); ++i) h0[i] = static_cast<float>(0.5 * std::cos(0.23 * i));
        const std::vector<int32_t> lengths{6, 0, 3};
        for (int rep = 0; rep < 2; ++rep) {  // buffers and progress counters are reused across runs
            BOOST_TEST((run_with_state(caller, x, T, B, lengths, h0) == run_with_state(pool, x, T, B, lengths, h0)), what);
            BOOST_TEST((run_all(caller, x, T, B, {}) == run_all(pool, x, T, B, {})), what << " (c_n, no lengths)");
            BOOST_TEST((run_all(caller, x, 1, 1, {}) == run_all(pool, x, 1, 1, {})), what << " (one step)");
        }
        if (k.direction == bi) continue;  // streams are unidirectional
        std::vector<float> want(static_cast<size_t>(T) * 2 * caller.output_size()), got(want.size());
        deeprnn::Stream ps(pool, 2), cs(caller, 2);
        for (int t = 0, chunk = 1; t < T; t += chunk, chunk = 3 - chunk) {  // 1, 2, 1, 2 steps
            const size_t at = static_cast<size_t>(t) * 2;
            ps.push(&x[at * 7], chunk, &want[at * caller.output_size()]);
            cs.push(&x[at * 7], chunk, &got[at * caller.output_size()]);
        }
        BOOST_TEST((got == want), what << " (stream)");
    }
    s::plan_cache_clear_memory();
}

// [T, B, w] as [B, T, w], and back.
static std::vector<float> batch_first(const std::vector<float>& a, int T, int B, size_t w) {
    std::vector<float> o(a.size());
    for (int t = 0; t < T; ++t)
        for (int b = 0; b < B; ++b)
            std::copy_n(a.begin() + (static_cast<size_t>(t) * B + b) * w, w, o.begin() + (static_cast<size_t>(b) * T + t) * w);
    return o;
}
static std::vector<float> time_major(const std::vector<float>& a, int T, int B, size_t w) {
    std::vector<float> o(a.size());
    for (int t = 0; t < T; ++t)
        for (int b = 0; b < B; ++b)
            std::copy_n(a.begin() + (static_cast<size_t>(b) * T + t) * w, w, o.begin() + (static_cast<size_t>(t) * B + b) * w);
    return o;
}

// ONNX's W, R and B of a one-layer cfg, uniform in +-0.3.
static deeprnn::Weights onnx_random_weights(const deeprnn::Config& c, std::mt19937& rng) {
    const int64_t G = ref::gates(c.cell), H = c.hidden_size, E = c.input_size;
    const int64_t D = c.direction == deeprnn::Direction::bidirectional ? 2 : 1;
    std::uniform_real_distribution<float> u(-0.3f, 0.3f);
    deeprnn::Weights w;
    for (const auto& [name, shape] : {std::pair<const char*, std::vector<int64_t>>{"W", {D, G * H, E}},
                                      {"R", {D, G * H, H}}, {"B", {D, 2 * G * H}}}) {
        deeprnn::Tensor& t = w[name];
        t.shape = shape;
        t.data.resize(static_cast<size_t>(shape[0] * shape[1] * (shape.size() > 2 ? shape[2] : 1)));
        for (float& v : t.data) v = u(rng);
    }
    return w;
}

// A pool run that finds the workers asleep starts on the caller, which runs
// every worker's phases until they have woken, and they join it at a step
// boundary (engine.cpp, run_on_caller). Forced here at every kind of join
// point (SessionImpl::hand_over_at), whenever the workers really wake: before
// a layer's steps, at its first, middle and last step, in the next layer, and
// never (the caller runs it all). Every one must give the bits of a plain pool
// run (exact: the same phases in the same order per worker), with variable
// lengths, an initial state, the fold (batch 1, 40 steps), projections up
// front (E > H, and batch 3; without the forcing, only runs of at most
// SessionImpl::kHandOverRows rows run steps on the caller), projections
// in chunks of 4 steps, a reverse layer, and a bidirectional layer with a
// direction on each worker (one split over both does not hand over).
BOOST_AUTO_TEST_CASE(a_run_handed_over_to_waking_workers_matches_the_pool_bit_for_bit) {
    namespace d = deeprnn::detail;
    struct Case {
        Cell cell;
        GruVariant variant;
        int input, hidden, proj, layers;
        deeprnn::Direction direction;
        s::ExecutionChoice choice;
    };
    const auto fwd = deeprnn::Direction::forward, rev = deeprnn::Direction::reverse, bi = deeprnn::Direction::bidirectional;
    const auto lbr = GruVariant::linear_before_reset, rbm = GruVariant::reset_before_matmul;
    s::ExecutionChoice two, side, one_barrier;
    two.workers = 2;
    side.workers = 1;
    side.side_by_side = true;
    one_barrier.workers = 2;
    one_barrier.rbm_one_barrier = true;
    const Case cases[] = {
        {Cell::lstm, lbr, 7, 64, 24, 2, fwd, two},        {Cell::gru, rbm, 7, 100, 0, 2, fwd, two},
        {Cell::gru, rbm, 7, 100, 0, 1, fwd, one_barrier}, {Cell::rnn_tanh, lbr, 7, 40, 0, 2, fwd, two},
        {Cell::lstm, lbr, 7, 48, 0, 1, rev, two},         {Cell::lstm, lbr, 90, 32, 0, 2, fwd, two},
        {Cell::lstm, lbr, 7, 48, 0, 2, bi, two},          {Cell::gru, lbr, 40, 33, 0, 2, bi, side},
    };
    for (const Case& k : cases) {
        deeprnn::Config c = config_of(k.cell, k.variant, k.input, k.hidden, k.proj, k.layers, 3);
        c.direction = k.direction;
        c.threads = 2;
        std::mt19937 rng(k.hidden + 5 * k.layers);
        if (k.direction == rev) c.convention = deeprnn::Convention::onnx;
        const deeprnn::Weights w = k.direction == rev ? onnx_random_weights(c, rng) : ref::torch_weights(ref::random_net(c, rng, 0.3));
        const s::ExecutionChoice& choice = k.choice;
        force_plan(c, choice, "hand_over.txt");
        const std::shared_ptr<const d::ModelImpl> m = d::build_model(c, d::import_weights(c, w));
        BOOST_TEST_REQUIRE(m->choice.str() == choice.str());
        const std::string what = std::string(deeprnn::to_string(k.cell)) + " " + deeprnn::to_string(k.direction) +
                                 " H=" + std::to_string(k.hidden) + " " + choice.str();
        // Both directions on both workers cannot step together: a worker's
        // scratch holds one direction's projection at a time.
        BOOST_TEST(m->hands_over == (k.direction != bi || choice.side_by_side), what);
        struct Shape {
            int T, B;
            std::vector<int32_t> lengths;
        };
        for (const Shape& shape : {Shape{9, 3, {9, 0, 4}}, Shape{9, 3, {}}, Shape{40, 1, {}}}) {
            const int T = shape.T, B = shape.B;  // not a structured binding: C++17 lambdas cannot capture one
            const std::vector<int32_t>& lengths = shape.lengths;
            const int LD = k.layers * m->D, S = m->S;
            std::vector<float> x(static_cast<size_t>(T) * B * k.input), h0(static_cast<size_t>(LD) * B * S),
                c0(static_cast<size_t>(LD) * B * m->H);
            for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
            for (size_t i = 0; i < h0.size(); ++i) h0[i] = static_cast<float>(0.5 * std::cos(0.23 * i));
            for (size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>(0.4 * std::sin(0.31 * i));
            const auto run = [&](d::SessionImpl& session) {
                std::vector<float> y(static_cast<size_t>(T) * B * m->D * S, -1.0f), h = h0, cs = c0;
                session.forward(x.data(), T, B, lengths.empty() ? nullptr : lengths.data(), y.data(), h.data(),
                                k.cell == Cell::lstm ? cs.data() : nullptr);
                y.insert(y.end(), h.begin(), h.end());
                y.insert(y.end(), cs.begin(), cs.end());
                return y;
            };
            d::SessionImpl plain(m);
            const std::vector<float> want = run(plain);
            const d::SessionImpl::JoinPoint points[] = {{0, -1}, {0, 0}, {0, 1}, {0, T / 2}, {0, T - 1},
                                                        {k.layers - 1, -1}, {k.layers - 1, 3}, {k.layers, 0}};
            for (const d::SessionImpl::JoinPoint& at : points)
                for (int chunk : {0, 4}) {
                    d::SessionImpl session(m);
                    session.hand_over_at = at;
                    session.projection_chunk_steps = chunk;
                    for (int rep = 0; rep < 2; ++rep)  // the second run after the workers have slept
                        BOOST_TEST((run(session) == want), what << " T=" << T << " B=" << B << " lengths "
                                                                << lengths.size() << " chunk " << chunk << " join at "
                                                                << at.layer << "," << at.step << " run " << rep);
                    BOOST_TEST(session.hand_overs == (m->hands_over ? 2u : 0u), what);
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
        }
    }
    s::plan_cache_clear_memory();
}

// A long run goes segment by segment (engine.cpp, SessionImpl::forward), each
// continuing from the state the last one left, so its scratch stops growing at
// a segment; a model with a reverse direction goes layer by layer, each
// direction through its own windows (the reverse one back to front). The cut
// must not change a bit: y, h_n and c_n of 5-step segments against one pass,
// over the plans that carry state differently (output tiling with a
// projection, GRU reset-before-matmul with two barriers and with one,
// pipelined layers, one worker, directions side by side or in turn), with
// initial states and sequences that end inside, at the edge of, and before a
// segment, time-major and batch-first (transposed a segment at a time), and
// without y (h_n and c_n alone). The same for a forward direction's input
// projection in chunks (ModelImpl::projection_chunk_bytes), with and without
// segments: every chunk writes the same rows of the projection buffer.
BOOST_AUTO_TEST_CASE(long_runs_cut_into_segments_match_one_pass_bit_for_bit) {
    namespace d = deeprnn::detail;
    using deeprnn::Direction;
    struct Case {
        Cell cell;
        deeprnn::GruVariant variant;
        Direction direction;
        int hidden, proj, layers, threads;
        s::ExecutionChoice choice;
    };
    const auto lbr = deeprnn::GruVariant::linear_before_reset, rbm = deeprnn::GruVariant::reset_before_matmul;
    const Direction fwd = Direction::forward, bi = Direction::bidirectional, rev = Direction::reverse;
    s::ExecutionChoice one, two, piped, one_barrier, side;
    two.workers = piped.workers = one_barrier.workers = 2;
    piped.pipelined = true;
    one_barrier.rbm_one_barrier = true;
    side.side_by_side = true;
    const Case cases[] = {
        {Cell::lstm, lbr, fwd, 64, 24, 2, 2, two},          {Cell::gru, rbm, fwd, 100, 0, 2, 2, two},
        {Cell::gru, rbm, fwd, 100, 0, 1, 2, one_barrier},   {Cell::lstm, lbr, fwd, 40, 0, 3, 2, piped},
        {Cell::rnn_tanh, lbr, fwd, 40, 0, 2, 1, one},       {Cell::gru, lbr, fwd, 33, 0, 1, 2, two},
        {Cell::lstm, lbr, bi, 64, 24, 2, 2, side},          {Cell::gru, rbm, bi, 100, 0, 3, 2, two},
        {Cell::gru, rbm, bi, 100, 0, 2, 2, one_barrier},    {Cell::lstm, lbr, rev, 40, 0, 1, 2, two},
        {Cell::rnn_tanh, lbr, bi, 40, 0, 1, 1, one},        {Cell::gru, rbm, rev, 33, 0, 1, 1, one},
    };
    for (const Case& k : cases) {
        deeprnn::Config c = config_of(k.cell, k.variant, 7, k.hidden, k.proj, k.layers, 3);
        c.threads = k.threads;
        c.direction = k.direction;
        std::mt19937 rng(k.hidden + 11 * k.layers);
        if (k.direction == rev) c.convention = deeprnn::Convention::onnx;  // the one with reverse-only layers
        const deeprnn::Weights w = k.direction == rev ? onnx_random_weights(c, rng) : ref::torch_weights(ref::random_net(c, rng, 0.3));
        if (k.threads > 1) force_plan(c, k.choice, "segments.txt");
        const std::shared_ptr<const d::ModelImpl> m = d::build_model(c, d::import_weights(c, w));
        BOOST_TEST_REQUIRE(m->choice.str() == k.choice.str());
        const std::string what = std::string(deeprnn::to_string(k.cell)) + " " + deeprnn::to_string(k.direction) +
                                 " H=" + std::to_string(k.hidden) + " " + k.choice.str();
        BOOST_TEST(d::SessionImpl(m).segment_steps_for(3) >= d::SessionImpl::kMinSegmentSteps, what);
        const int T = 23, B = 3, LD = k.layers * m->D, DS = m->D * m->S;
        const size_t ny = static_cast<size_t>(T) * B * DS, nh = static_cast<size_t>(LD) * B * m->S,
                     nc = static_cast<size_t>(LD) * B * m->H;
        std::vector<float> x(static_cast<size_t>(T) * B * 7), h0(nh), c0(nc);
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
        for (size_t i = 0; i < h0.size(); ++i) h0[i] = static_cast<float>(0.5 * std::cos(0.23 * i));
        for (size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>(0.4 * std::sin(0.31 * i));
        for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{}, {23, 10, 0}, {7, 23, 13}}) {
            std::vector<float> got[6];
            // one pass; segments; segments of batch-first x and y; segments without y; one pass with the
            // input projection in chunks of 4 steps; segments of 5 with chunks of 3 (a forward direction's)
            for (int cut : {0, 1, 2, 3, 4, 5}) {
                d::SessionImpl session(m);
                session.segment_steps = cut && cut != 4 ? 5 : T;
                session.projection_chunk_steps = cut == 4 ? 4 : cut == 5 ? 3 : 0;
                std::vector<float> xb = x, y(ny, -1.0f), h = h0, cs = c0;
                if (cut == 2) xb = batch_first(x, T, B, 7);
                session.forward(xb.data(), T, B, lengths.empty() ? nullptr : lengths.data(), cut == 3 ? nullptr : y.data(),
                                h.data(), k.cell == Cell::lstm ? cs.data() : nullptr, cut == 2);
                got[cut] = cut == 2 ? time_major(y, T, B, DS) : cut == 3 ? std::vector<float>() : y;
                got[cut].insert(got[cut].end(), h.begin(), h.end());
                got[cut].insert(got[cut].end(), cs.begin(), cs.end());
            }
            BOOST_TEST(got[0] == got[1], what << " lengths " << lengths.size());
            BOOST_TEST(got[0] == got[2], what << " lengths " << lengths.size() << " batch-first");
            BOOST_TEST(got[0] == got[4], what << " lengths " << lengths.size() << " projection chunks");
            BOOST_TEST(got[0] == got[5], what << " lengths " << lengths.size() << " segments, projection chunks");
            BOOST_TEST(std::equal(got[3].begin(), got[3].end(), got[0].end() - got[3].size()),
                       what << " lengths " << lengths.size() << " without y");
        }
    }
}

// The plan's L2 and FMA rates are measured once per process by running the
// kernels (machines differ 2x in both); no timing is asserted, only that the
// rates are real numbers and the second call does not measure again.
BOOST_AUTO_TEST_CASE(default_machine_measures_its_rates_once) {
    const s::MachineModel a = s::default_machine(), b = s::default_machine();
    BOOST_TEST(a.rates == "measured");
    BOOST_TEST((std::isfinite(a.flops_per_s) && a.flops_per_s > 0), a.flops_per_s);
    BOOST_TEST((std::isfinite(a.l2_bytes_per_s) && a.l2_bytes_per_s > 0), a.l2_bytes_per_s);
    BOOST_TEST(a.flops_per_s == b.flops_per_s);
    BOOST_TEST(a.l2_bytes_per_s == b.l2_bytes_per_s);
    BOOST_TEST(s::MachineModel().rates == "fixed");
    // The usable L3 is measured, never more than the CPU reports; the reported
    // size stays in caches (the plan cache's machine line).
    BOOST_TEST(a.l3_usable_bytes > 0u);
    BOOST_TEST(a.l3_usable_bytes <= a.caches.l3);
    BOOST_TEST(a.l3_usable_bytes == b.l3_usable_bytes);
    BOOST_TEST(a.caches.l3 == s::read_cache_sizes().l3);
}

// The capacity probe reports a size between the 3-L2 set it starts from and
// the reported L3, whatever the machine's neighbours do meanwhile.
BOOST_AUTO_TEST_CASE(l3_capacity_probe_stays_within_the_reported_l3) {
    namespace d = deeprnn::detail;
    const size_t MiB = size_t(1) << 20;
    const s::MachineModel fixed;
    const d::KernelRates r = d::measure_kernel_rates(d::detect_isa(), 1 * MiB, 8 * MiB, fixed.l2_usable);
    BOOST_TEST_REQUIRE(r.l3_bytes_per_s > 0);  // 3 MiB <= 8 MiB / 2: measured
    BOOST_TEST(r.l3_capacity_bytes >= 3 * MiB);
    BOOST_TEST(r.l3_capacity_bytes <= 8 * MiB);
    const d::KernelRates none = d::measure_kernel_rates(d::detect_isa(), 1 * MiB, 4 * MiB, fixed.l2_usable);
    BOOST_TEST(none.l3_capacity_bytes == 0u);  // no L3 rate measured: nothing to compare with
}

// A multi-threaded plan prices each step's exchange between workers with the
// pool's measurement (0.7 us fixed made H = 64 stay on one worker that two run
// 1.15-1.4x faster on the Zen 4 VM). No timing is asserted: a real number,
// measured once, carried by the engine's machine with the kernel rates.
BOOST_AUTO_TEST_CASE(measured_machine_carries_the_pools_step_exchange) {
    const double a = deeprnn::detail::measure_step_exchange(), b = deeprnn::detail::measure_step_exchange();
    BOOST_TEST((std::isfinite(a) && a >= 0), a);
    BOOST_TEST(a == b);
    const s::MachineModel m = deeprnn::detail::measured_machine(), d = s::default_machine();
    BOOST_TEST(m.barrier_s == (a > 0 ? a : s::MachineModel().barrier_s));
    BOOST_TEST(m.flops_per_s == d.flops_per_s);
    BOOST_TEST(m.l2_bytes_per_s == d.l2_bytes_per_s);
    // And an awake pool's run: announced and joined across cores, never free
    // where there is a second core (no timing asserted beyond "under 1 ms").
    const double w = deeprnn::detail::measure_awake_dispatch();
    BOOST_TEST((std::isfinite(w) && w >= 0 && w < 1e-3), w);
    BOOST_TEST((a == 0 || w > 0));  // a is 0 also where no sample ended in 20 ms (a busy second core)
    BOOST_TEST(m.awake_dispatch_s == w);
    BOOST_TEST(s::awake(m).dispatch_s == w);
}

// The exchange is measured with a thread on the second core, which a busy
// machine hands only time slices: each step can then wait for one (4 spinning
// programs per core made the measurement take 87-111 ms where it takes 2 ms
// idle). It stops at its cap instead, the partner told to end with the step
// the caller ends on. Capped at 0 it stops after its first 8 steps, before a
// sample ends: 0, not measured. Repeated: a lost handshake would hang here.
BOOST_AUTO_TEST_CASE(the_step_exchange_measurement_stops_at_its_cap) {
    for (int i = 0; i < 50; ++i) BOOST_TEST(deeprnn::detail::time_step_exchange(0) == 0.0);
    for (double cap : {1e-4, 5e-4, 2e-3}) {
        const double x = deeprnn::detail::time_step_exchange(cap);
        BOOST_TEST((std::isfinite(x) && x >= 0 && x < 1e-3), x);
    }
}

// Back to back, a pool run costs its announcement and join even with the
// workers spinning (measure_awake_dispatch: 1.2 us on the Zen 5 VM). Priced
// at 0, one-step runs of LSTM 64-64 went to the pool at 2.4-3.0 us against
// 0.7 on the caller alone; priced, they stay on the caller, while LSTM
// 256-256's, which two cores halve, still go to the pool. Fixed rates.
BOOST_AUTO_TEST_CASE(an_awake_pools_dispatch_keeps_one_step_runs_of_small_layers_on_the_caller) {
    s::MachineModel m;
    m.caches = s::default_machine().caches;
    m.barrier_s = 0.3e-6;
    s::Problem p;
    p.cell = Cell::lstm;
    p.input = p.hidden = 64;
    p.threads = 2;
    p.simd_width = 16;
    s::ExecutionChoice two;
    two.workers = 2;
    BOOST_TEST(s::serial_rows(p, s::awake(m), two) == 0);  // free: every run to the pool
    m.awake_dispatch_s = 1.2e-6;
    BOOST_TEST(s::serial_rows(p, s::awake(m), two) >= 1);
    p.input = p.hidden = 256;
    BOOST_TEST(s::serial_rows(p, s::awake(m), two) == 0);
}

// The threshold comes from the cost model: never on one worker; short runs
// on the caller for a model whose weights one core fetches quickly; none when
// two cores fetch a large model's weights faster even for one step.
BOOST_AUTO_TEST_CASE(serial_rows_follow_the_cost_model) {
    s::MachineModel m;  // fixed rates: the measured ones vary with the build (sanitizers) and the load
    m.caches = s::default_machine().caches;
    s::Problem p;
    p.cell = Cell::lstm;
    p.input = p.hidden = 256;
    p.threads = 2;
    p.simd_width = 16;
    s::ExecutionChoice one, two;
    two.workers = 2;
    BOOST_TEST(s::serial_rows(p, m, one) == 0);
    const int rows = s::serial_rows(p, m, two);
    BOOST_TEST(rows >= 1);
    s::MachineModel slow_wake = m;
    slow_wake.dispatch_s *= 10;  // dearer wake-ups: longer runs stay on the caller
    BOOST_TEST(s::serial_rows(p, slow_wake, two) > rows);
    p.input = p.hidden = 1024;  // 32 MiB of weights: two cores fetch them faster even for one step
    BOOST_TEST(s::serial_rows(p, m, two) == 0);
}

// The short-run limit is kept per power of two of the batch (ModelImpl::short_runs):
// at batch 1 a second core speeds a step up little, at batch 16 it nearly halves
// it, so one batch-1 limit in rows kept batch-20 runs of a GRU 64-64 on the
// caller at one core's speed after any idle (1.13 against 0.66 ms, T = 100, Zen
// 4 VM). Fixed rates (measured ones vary with the build and the load): GRU
// 128-128 in two layers plans two pipelined workers there, each run past the
// limit waiting for their wake-up; in one layer, a helper projecting for
// worker 0, whose runs need not wait (ModelImpl::helpers).
BOOST_AUTO_TEST_CASE(short_runs_are_limited_per_power_of_two_of_the_batch) {
    namespace d = deeprnn::detail;
    using Idle = d::WeightCentricPool::Idle;
    s::MachineModel fixed;
    fixed.caches = s::default_machine().caches;
    deeprnn::Config c = config_of(Cell::gru, deeprnn::GruVariant::linear_before_reset, 128, 128, 0, 2, 20);
    c.threads = 2;
    std::mt19937 rng(5);
    auto build = [&](const deeprnn::Config& cfg) {
        return d::build_model(cfg, d::import_weights(cfg, ref::torch_weights(ref::random_net(cfg, rng, 0.3))), fixed);
    };
    const std::shared_ptr<const d::ModelImpl> m = build(c);
    BOOST_TEST_REQUIRE((m->workers == 2 && m->pipelined && !m->hands_over && !m->helpers));
    const d::ShortRunLimits& r = m->short_runs;
    BOOST_TEST_REQUIRE(r.asleep.size() == 5u);  // batches 1, 2, 4, 8, 16 (max_batch 20)
    BOOST_TEST_REQUIRE(r.awake.size() == 5u);
    BOOST_TEST_REQUIRE(r.napping.size() == 5u);
    s::Problem p = s::problem_for(c, 2, d::isa_width(m->isa));
    for (int k = 0; k < 5; ++k) {
        p.batch = 1 << k;
        BOOST_TEST(r.asleep[k] == s::serial_rows(p, fixed, m->choice), "batch " << p.batch);
        BOOST_TEST(r.awake[k] <= r.asleep[k], "batch " << p.batch);
        // Napping workers cost a run less to wake (MachineModel::nap_dispatch_s).
        BOOST_TEST(r.napping[k] == s::serial_rows(p, s::napping(fixed), m->choice), "batch " << p.batch);
        BOOST_TEST((r.awake[k] <= r.napping[k] && r.napping[k] <= r.asleep[k]), "batch " << p.batch);
    }
    BOOST_TEST(r.rows(1, Idle::asleep) == r.asleep[0]);
    BOOST_TEST(r.rows(3, Idle::asleep) == r.asleep[1]);
    BOOST_TEST(r.rows(20, Idle::asleep) == r.asleep[4]);
    BOOST_TEST(r.rows(20, Idle::awake) == r.awake[4]);
    c.serial_rows = 1000;  // the application's limit holds at every batch
    const std::shared_ptr<const d::ModelImpl> fixed_limit = build(c);
    for (int batch : {1, 7, 20}) {
        BOOST_TEST(fixed_limit->short_runs.rows(batch, Idle::asleep) == 1000);
        BOOST_TEST(fixed_limit->short_runs.rows(batch, Idle::awake) == 1000);
    }
    // In one layer, a helper plan: its waiting run would win fewer rows at
    // batch 16 than at 1; but no run of it waits for the wake-up: its caller
    // runs it all while the helper wakes and ends it alone if the helper has
    // not come (WeightCentricPool::run, ended_alone). With the helper
    // napping that costs the caller nothing, so only runs the awake pool
    // would lose stay on the caller; asleep, it pays the notify, and runs it
    // finishes within the wake-up stay.
    c.num_layers = 1;
    c.serial_rows = -1;
    const std::shared_ptr<const d::ModelImpl> helped = build(c);
    BOOST_TEST_REQUIRE(helped->helpers);
    p = s::problem_for(c, 2, d::isa_width(helped->isa));
    const d::ShortRunLimits& h = helped->short_runs;
    for (int k = 0; k < 5; ++k) {
        p.batch = 1 << k;
        BOOST_TEST(h.napping[k] == h.awake[k], "batch " << p.batch);
        BOOST_TEST(h.asleep[k] == std::min(s::serial_rows(p, fixed, helped->choice), s::serial_rows(p, fixed, helped->choice, true)),
                   "batch " << p.batch);
    }
    p.batch = 16;
    const int waiting_16 = s::serial_rows(p, fixed, helped->choice);
    p.batch = 1;
    BOOST_TEST(waiting_16 < s::serial_rows(p, fixed, helped->choice));
    // So does a model whose batch-1 runs hand over (every layer folds): there.
    deeprnn::Config l = config_of(Cell::lstm, deeprnn::GruVariant::linear_before_reset, 256, 256, 0, 1, 1);
    l.threads = 2;
    l.fold_projection = 1;  // whether folding pays is measured, and varies with the load
    const std::shared_ptr<const d::ModelImpl> folded = build(l);
    BOOST_TEST_REQUIRE(folded->workers == 2);
    BOOST_TEST_REQUIRE(folded->hands_over);
    if (folded->isa != d::Isa::avx512) {  // the fold's kernels are AVX-512's (folds_projection)
        BOOST_TEST(!folded->folds[0]);
        return;
    }
    BOOST_TEST_REQUIRE(folded->folds[0]);
    s::Problem q = s::problem_for(l, 2, d::isa_width(folded->isa));
    BOOST_TEST(folded->short_runs.rows(1, Idle::awake) == s::serial_rows(q, s::awake(fixed), folded->choice));
    // Where its runs hand over at all (a step short against the wake-up: the next test).
    if (folded->short_runs.hands_over(1, Idle::napping))
        BOOST_TEST(folded->short_runs.rows(1, Idle::napping) == folded->short_runs.rows(1, Idle::awake));
    else
        BOOST_TEST(folded->short_runs.rows(1, Idle::napping) == s::serial_rows(q, s::napping(fixed), folded->choice));
    if (folded->short_runs.hands_over(1, Idle::asleep))
        BOOST_TEST(folded->short_runs.rows(1, Idle::asleep) == std::min(s::serial_rows(q, fixed, folded->choice),
                                                                        s::serial_rows(q, fixed, folded->choice, true)));
    else
        BOOST_TEST(folded->short_runs.rows(1, Idle::asleep) == s::serial_rows(q, fixed, folded->choice));
}

// A pool run that finds the workers asleep or napping hands over only where
// the caller alone finishes a step of a layer within their wake-up
// (ShortRunLimits::hands_over): they join only at step boundaries, so a
// longer step kept them idle until it ended (LSTM 1024-1024, one step after
// 20 ms idle on the Zen 3 VM: 1.18-1.31 ms handed over, 0.76-0.78 waiting
// for them). The rule on fixed rates, and on rates 1,000x slower, where
// the same LSTM 64-64's step is far longer than any wake-up; never awake.
// Then runs: the model that hands over does, the other waits for the
// workers, and both give the same bits.
BOOST_AUTO_TEST_CASE(pool_runs_hand_over_only_where_a_step_is_short_against_the_wake_up) {
    namespace d = deeprnn::detail;
    using Idle = d::WeightCentricPool::Idle;
    s::MachineModel fixed;
    fixed.caches = s::default_machine().caches;
    s::MachineModel slow = fixed;
    slow.l2_bytes_per_s /= 1000;
    slow.l3_bytes_per_s /= 1000;
    slow.flops_per_s /= 1000;
    deeprnn::Config c = config_of(Cell::lstm, deeprnn::GruVariant::linear_before_reset, 64, 64, 0, 1, 4);
    c.threads = 2;
    c.idle_nap_ms = 0;  // idle workers sleep at once
    s::ExecutionChoice two;
    two.workers = 2;
    force_plan(c, two, "hand_over_rule.txt");  // serial_rows = 0: every run on the pool
    std::mt19937 rng(21);
    const std::vector<d::RawLayer> raw = d::import_weights(c, ref::torch_weights(ref::random_net(c, rng, 0.3)));
    const std::shared_ptr<const d::ModelImpl> quick = d::build_model(c, raw, fixed), slowed = d::build_model(c, raw, slow);
    for (const auto& [m, machine] : {std::pair{quick, fixed}, std::pair{slowed, slow}}) {
        BOOST_TEST_REQUIRE(m->choice.str() == two.str());
        BOOST_TEST_REQUIRE(m->hands_over);
        s::Problem p = s::problem_for(c, 2, d::isa_width(m->isa));
        p.seq_len = 1;
        for (int batch : {1, 2, 4}) {
            p.batch = batch;
            const double step = s::serial_seconds(p, machine, m->choice);
            BOOST_TEST(step > 0);
            BOOST_TEST(m->short_runs.hands_over(batch, Idle::asleep) == (step <= machine.dispatch_s), "batch " << batch);
            BOOST_TEST(m->short_runs.hands_over(batch, Idle::napping) == (step <= machine.nap_dispatch_s), "batch " << batch);
            BOOST_TEST(!m->short_runs.hands_over(batch, Idle::awake));
        }
    }
    BOOST_TEST_REQUIRE(quick->short_runs.hands_over(1, Idle::asleep));
    BOOST_TEST_REQUIRE(!slowed->short_runs.hands_over(1, Idle::asleep));
    BOOST_TEST_REQUIRE(!slowed->short_runs.hands_over(1, Idle::napping));
    auto wait_for = [](auto done) {  // seconds, not a timing test: a loaded machine may be slow
        for (int i = 0; i < 20000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
        return done();
    };
    constexpr int T = 8;
    std::vector<float> x(static_cast<size_t>(T) * 64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
    std::vector<std::vector<float>> ys;
    for (const std::shared_ptr<const d::ModelImpl>& m : {quick, slowed}) {
        d::SessionImpl session(m);
        for (int run = 0; run < 3; ++run) {
            BOOST_REQUIRE(wait_for([&] { return m->pool->idle(m->workers) == Idle::asleep; }));
            std::vector<float> y(static_cast<size_t>(T) * 64, -1.0f), h(64, 0.0f), cs(64, 0.0f);
            session.forward(x.data(), T, 1, nullptr, y.data(), h.data(), cs.data());
            ys.push_back(y);
        }
        BOOST_TEST(session.hand_overs == (m == quick ? 3u : 0u));
    }
    for (const std::vector<float>& y : ys) BOOST_TEST((y == ys.front()));
    s::plan_cache_clear_memory();
}

// A small model plans one recurrent worker at batch 1 and more for large
// batches (an input narrower than the state: at batch 1 the projection is
// not worth a helper, at batch 64 the recurrence is worth splitting): runs
// of a large batch use the second packing, and every batch size, ragged
// lengths included, gives the bits of a one-thread model. Every cell; the
// first batch that plans two workers is where the switch happens, so the
// batches straddle it. The plans come from the fixed rates (MachineModel's
// defaults): measured ones vary with the build (sanitizers) and the load.
BOOST_AUTO_TEST_CASE(large_batches_use_the_batched_plan_bit_for_bit) {
    namespace d = deeprnn::detail;
    struct Case {
        Cell cell;
        deeprnn::GruVariant variant;
    };
    const Case cases[] = {{Cell::lstm, deeprnn::GruVariant::linear_before_reset},
                          {Cell::gru, deeprnn::GruVariant::linear_before_reset},
                          {Cell::gru, deeprnn::GruVariant::reset_before_matmul},
                          {Cell::rnn_tanh, deeprnn::GruVariant::linear_before_reset}};
    s::MachineModel fixed;
    fixed.caches = s::default_machine().caches;
    for (const Case& k : cases) {
        deeprnn::Config c = config_of(k.cell, k.variant, 16, 64, 0, 1, 64);
        std::mt19937 rng(11);
        const deeprnn::Weights w = ref::torch_weights(ref::random_net(c, rng, 0.3));
        c.threads = 1;
        const deeprnn::Model one(c, w);
        c.threads = 2;
        const std::shared_ptr<const d::ModelImpl> two = d::build_model(c, d::import_weights(c, w), fixed);
        const std::string name = deeprnn::to_string(k.cell);
        // Batch 1: one worker, or one recurrent worker and a projecting helper.
        BOOST_TEST_REQUIRE(two->choice.recurrent_workers() == 1, name);
        BOOST_TEST_REQUIRE(two->batched != nullptr, name);
        BOOST_TEST_REQUIRE(two->batched->choice.recurrent_workers() == 2, name);
        const int from = two->batched_from;
        BOOST_TEST_REQUIRE(from >= 2, name << " " << from);
        BOOST_TEST_REQUIRE(from <= 64, name << " " << from);
        d::SessionImpl session(two);
        const int T = 7;
        for (int B : {1, from - 1, from, 64}) {
            std::vector<float> x(static_cast<size_t>(T) * B * 16);
            for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i));
            std::vector<int32_t> lengths(B);
            for (int b = 0; b < B; ++b) lengths[b] = (b * 3) % (T + 1);
            for (bool ragged : {true, false}) {
                std::vector<float> y(static_cast<size_t>(T) * B * 64), h(static_cast<size_t>(B) * 64),
                    cc(static_cast<size_t>(B) * 64);
                session.forward(x.data(), T, B, ragged ? lengths.data() : nullptr, y.data(), h.data(),
                                k.cell == Cell::lstm ? cc.data() : nullptr);
                y.insert(y.end(), h.begin(), h.end());
                y.insert(y.end(), cc.begin(), cc.end());  // as run_all: zeros but for the LSTM
                BOOST_TEST((y == run_all(one, x, T, B, ragged ? lengths : std::vector<int32_t>{})),
                           name << " B=" << B << (ragged ? ", ragged" : ", full length"));
            }
        }
    }
}

// The plan offers the one-barrier form for reset-before-matmul GRU on >= 2
// workers (never for other cells, one worker or pipelines), charges it one
// barrier fewer per step plus the reduction, and shows it.
BOOST_AUTO_TEST_CASE(gru_reset_before_matmul_plan_offers_both_forms) {
    s::Problem p;
    p.cell = Cell::gru;
    p.gru_variant = deeprnn::GruVariant::reset_before_matmul;
    p.input = 64;
    p.hidden = 256;
    p.threads = 2;
    p.simd_width = 16;
    const std::vector<s::Candidate> c = s::rank_candidates(p, fixed_machine());
    const s::Candidate *one = nullptr, *two = nullptr;
    for (const s::Candidate& k : c) {
        if (!k.executable || k.choice.workers != 2 || k.choice.projection_helpers) continue;
        (k.choice.rbm_one_barrier ? one : two) = &k;
        BOOST_TEST(!(k.choice.rbm_one_barrier && k.choice.pipelined));
    }
    BOOST_TEST_REQUIRE(one);
    BOOST_TEST_REQUIRE(two);
    // The default machine (the development VM's measurements): the partial
    // reset products cost more to hand across cores than the barrier they save.
    const std::vector<s::Candidate> c1 = s::rank_candidates(p, fixed_machine());
    BOOST_TEST(c1[s::best_executable(c1)].choice.workers == 2);
    BOOST_TEST(!c1[s::best_executable(c1)].choice.rbm_one_barrier);
    // Cheap cross-core reads and a slow barrier: one barrier saved per step wins
    // (no wake-up cost, so that one worker does not win outright).
    s::MachineModel slow_barrier = fixed_machine();
    slow_barrier.dispatch_s = 0;
    slow_barrier.barrier_s = 2e-6;
    slow_barrier.cross_core_bytes_per_s = 100e9;
    const std::vector<s::Candidate> c2 = s::rank_candidates(p, slow_barrier);
    BOOST_TEST(c2[s::best_executable(c2)].choice.rbm_one_barrier);
    s::MachineModel free_barrier = fixed_machine();
    free_barrier.barrier_s = 0;
    const std::vector<s::Candidate> c3 = s::rank_candidates(p, free_barrier);
    BOOST_TEST(!c3[s::best_executable(c3)].choice.rbm_one_barrier);
    BOOST_TEST(s::describe_candidates(s::PlanDecision{c2[s::best_executable(c2)], c2, {}, false, "", {}}).find("1bar") !=
               std::string::npos);
    for (Cell cell : {Cell::lstm, Cell::gru}) {  // linear-before-reset GRU and LSTM: no such form
        s::Problem q = p;
        q.cell = cell;
        q.gru_variant = deeprnn::GruVariant::linear_before_reset;
        for (const s::Candidate& k : s::rank_candidates(q, fixed_machine())) BOOST_TEST(!k.choice.rbm_one_barrier);
    }
    p.threads = 1;
    for (const s::Candidate& k : s::rank_candidates(p, fixed_machine())) BOOST_TEST(!k.choice.rbm_one_barrier);
    // At most one worker per chunk: hidden 200 has 4 chunks of 64 units (the
    // last of 8), hidden 48 one chunk, so no one-barrier form at all.
    p.hidden = 200;
    p.threads = 8;
    bool four = false;
    for (const s::Candidate& k : s::rank_candidates(p, fixed_machine())) {
        BOOST_TEST(!(k.choice.rbm_one_barrier && k.choice.workers > 4));
        four = four || (k.choice.rbm_one_barrier && k.choice.workers == 4);
    }
    BOOST_TEST(four);
    p.hidden = 48;
    for (const s::Candidate& k : s::rank_candidates(p, fixed_machine())) BOOST_TEST(!k.choice.rbm_one_barrier);
}

BOOST_AUTO_TEST_CASE(plan_cache_round_trip) {
    std::map<std::string, s::PlanEntry> entries;
    entries[s::plan_key(lstm(256, 2))] = s::PlanEntry{{2, false, true}, 1.25e-4, 3};
    entries[s::plan_key(lstm(512, 8, 2))] = s::PlanEntry{{4, true, true}, 0.5, 7};
    s::Problem g = lstm(256, 2);
    g.cell = Cell::gru;
    g.gru_variant = deeprnn::GruVariant::reset_before_matmul;
    entries[s::plan_key(g)] = s::PlanEntry{{2, false, true, false, true}, 2.5e-4, 4};
    entries[s::plan_key(lstm(64, 2))] = s::PlanEntry{{2, false, true, false, false, true}, 5e-5, 2};
    s::Problem reverse = lstm(64, 2);
    reverse.reverse = true;  // a reverse-only model has a plan of its own (it cannot take helpers)
    BOOST_TEST(s::plan_key(reverse) != s::plan_key(lstm(64, 2)));
    entries[s::plan_key(reverse)] = s::PlanEntry{{1, false, true}, 6e-5, 2};
    const std::string text = s::serialize_plan_cache(entries, "0.1.0", machine_a());
    BOOST_TEST(text.find("rbm_one_barrier=1") != std::string::npos);
    BOOST_TEST(text.find("helpers=1") != std::string::npos);
    const s::PlanFile f = s::parse_plan_cache(text.data(), text.size(), "0.1.0", machine_a());
    BOOST_TEST_REQUIRE(f.ok, f.error);
    BOOST_TEST_REQUIRE(f.entries.size() == 5u);
    for (const auto& [key, e] : entries) {
        const s::PlanEntry& g = f.entries.at(key);
        BOOST_TEST((g.choice == e.choice));
        BOOST_TEST(std::abs(g.seconds - e.seconds) < 1e-9);
        BOOST_TEST(g.ran == e.ran);
    }
    BOOST_TEST(text.find('"') == std::string::npos);  // the CPU name was sanitized
    const s::PlanFile empty = s::parse_plan_cache(nullptr, 0, "0.1.0", machine_a());
    BOOST_TEST(!empty.ok);
    // Batches share a plan by power-of-two bucket.
    s::Problem p5 = lstm(256, 2), p8 = lstm(256, 2), p9 = lstm(256, 2);
    p5.batch = 5, p8.batch = 8, p9.batch = 9;
    BOOST_TEST(s::plan_key(p5) == s::plan_key(p8));
    BOOST_TEST(s::plan_key(p8) != s::plan_key(p9));
}

BOOST_AUTO_TEST_CASE(plan_cache_rejects_corrupt_and_stale_files) {
    std::map<std::string, s::PlanEntry> entries;
    entries[s::plan_key(lstm(256, 2))] = s::PlanEntry{{2, false, true}, 1.25e-4, 3};
    const std::string text = s::serialize_plan_cache(entries, "0.1.0", machine_a());
    auto parse = [](const std::string& t, const std::string& version, const s::MachineId& m) {
        return s::parse_plan_cache(t.data(), t.size(), version, m);
    };
    // Every truncation.
    for (size_t n = 0; n < text.size(); ++n) {
        const s::PlanFile f = parse(text.substr(0, n), "0.1.0", machine_a());
        BOOST_TEST(!f.ok, "prefix " << n);
        BOOST_TEST(!f.error.empty());
    }
    // Every single-character change.
    for (size_t i = 0; i < text.size(); ++i) {
        std::string bad = text;
        bad[i] = bad[i] == '1' ? '2' : '1';
        BOOST_TEST(!parse(bad, "0.1.0", machine_a()).ok, "offset " << i);
    }
    std::string bad = text;
    bad[text.find("workers=2") + 8] = '1';
    BOOST_TEST(parse(bad, "0.1.0", machine_a()).error.find("checksum") != std::string::npos);
    // Another version: stale.
    const std::string old = s::serialize_plan_cache(entries, "0.0.9", machine_a());
    const s::PlanFile fo = parse(old, "0.1.0", machine_a());
    BOOST_TEST(!fo.ok);
    BOOST_TEST(fo.error.find("0.0.9") != std::string::npos);
    BOOST_TEST(fo.error.find("stale") != std::string::npos);
    // Another CPU, or the same CPU name with other caches.
    s::CacheSizes other;
    other.l1d = 32768, other.l2 = 262144, other.l3 = 8 << 20;
    const s::PlanFile fc = parse(text, "0.1.0", s::machine_id("Other CPU", other));
    BOOST_TEST(!fc.ok);
    BOOST_TEST(fc.error.find("another machine") != std::string::npos);
    s::MachineId a2 = machine_a();
    a2.l2 *= 2;
    BOOST_TEST(!parse(text, "0.1.0", a2).ok);
    // Valid checksum but impossible contents: more workers than threads, side by
    // side with one direction, trailing garbage.
    // One barrier for an LSTM is impossible too, and so are helpers with one
    // worker, with layers pipelined, or for two directions or a reverse one.
    s::Problem bi = lstm(256, 2, 2), reverse = lstm(256, 2);
    reverse.reverse = true;
    const std::pair<s::Problem, s::PlanEntry> impossible[] = {
        {lstm(256, 2), s::PlanEntry{{3, false, true}, 0, 0}},
        {lstm(256, 2), s::PlanEntry{{1, true, true}, 0, 0}},
        {lstm(256, 2), s::PlanEntry{{2, false, true, false, true}, 0, 0}},
        {lstm(256, 2), s::PlanEntry{{1, false, true, false, false, true}, 0, 0}},
        {lstm(256, 2), s::PlanEntry{{2, false, true, true, false, true}, 0, 0}},
        {bi, s::PlanEntry{{2, false, true, false, false, true}, 0, 0}},
        {reverse, s::PlanEntry{{2, false, true, false, false, true}, 0, 0}},
    };
    for (const auto& [p, e] : impossible) {
        std::map<std::string, s::PlanEntry> m{{s::plan_key(p), e}};
        const s::PlanFile f = parse(s::serialize_plan_cache(m, "0.1.0", machine_a()), "0.1.0", machine_a());
        BOOST_TEST(!f.ok, e.choice.str());
        BOOST_TEST(f.error.find("malformed") != std::string::npos);
    }
    BOOST_TEST(!parse(text + "x\n", "0.1.0", machine_a()).ok);
    BOOST_TEST(!parse(text + text, "0.1.0", machine_a()).ok);
    // Fuzz: random bytes and random mutations never crash and are never accepted.
    std::mt19937 rng(1);
    for (int i = 0; i < 3000; ++i) {
        std::string t = i % 2 ? text : std::string(rng() % 400, ' ');
        for (int k = 0, n = 1 + rng() % 8; k < n; ++k)
            if (!t.empty()) t[rng() % t.size()] = static_cast<char>(i % 4 ? 32 + rng() % 95 : rng() % 256);
        const s::PlanFile f = parse(t, "0.1.0", machine_a());
        BOOST_TEST((!f.ok || t == text));
    }
}

BOOST_AUTO_TEST_CASE(plan_cache_file_and_warm_start) {
    s::plan_cache_clear_memory();
    const std::string path = temp_path("plans.txt");
    fs::remove(path);
    const s::MachineModel m = fixed_machine();
    const s::Problem p = lstm(512, 4);
    int calls = 0;
    auto timer = [&](const s::Candidate& c) {
        ++calls;
        return 1e-3 * (1 + std::abs(c.choice.workers - 3));
    };
    // Cold start: calibrates, stores.
    s::PlanDecision d = s::choose_plan(p, m, deeprnn::Tuning::calibrate, 1.0, path, timer);
    BOOST_TEST(calls > 0);
    BOOST_TEST(!d.from_cache);
    BOOST_TEST(d.chosen.executable);
    BOOST_TEST(d.chosen.choice.workers == 3);
    BOOST_TEST(d.calibration.ran > 0);
    BOOST_TEST(fs::exists(path));
    // Warm start in a "new process": memory cleared, the file answers, nothing is timed.
    s::plan_cache_clear_memory();
    calls = 0;
    d = s::choose_plan(p, m, deeprnn::Tuning::calibrate, 1.0, path, timer);
    BOOST_TEST(calls == 0);
    BOOST_TEST(d.from_cache);
    BOOST_TEST(d.chosen.choice.workers == 3);
    // In-memory cache (no path) also answers within the process.
    d = s::choose_plan(p, m, deeprnn::Tuning::calibrate, 1.0, "", timer);
    BOOST_TEST(calls == 0);
    // Another configuration in the same file: both kept.
    d = s::choose_plan(lstm(256, 4), m, deeprnn::Tuning::calibrate, 1.0, path, timer);
    BOOST_TEST(calls > 0);
    const std::string text = read_text(path);
    BOOST_TEST(text.find("hidden=512") != std::string::npos);
    BOOST_TEST(text.find("hidden=256") != std::string::npos);
    // A corrupt file is reported, ignored, recalibrated and replaced.
    write_text(path, text.substr(0, text.size() / 2));
    s::plan_cache_clear_memory();
    calls = 0;
    d = s::choose_plan(p, m, deeprnn::Tuning::calibrate, 1.0, path, timer);
    BOOST_TEST(calls > 0);
    BOOST_TEST(!d.from_cache);
    bool warned = false;
    for (const auto& [level, msg] : d.log)
        warned = warned || (level == deeprnn::LogLevel::warning && msg.find(path) != std::string::npos &&
                            msg.find("ignored") != std::string::npos);
    BOOST_TEST(warned);
    const std::string again = read_text(path);
    BOOST_TEST(s::parse_plan_cache(again.data(), again.size(), DEEPRNN_VERSION_STRING,
                                   s::machine_id(s::read_cpu_model(), m.caches)).ok);
    // Heuristic mode never times and never reads the cache.
    calls = 0;
    d = s::choose_plan(p, m, deeprnn::Tuning::heuristic, 1.0, path, timer);
    BOOST_TEST(calls == 0);
    BOOST_TEST(!d.from_cache);
    // Exhaustive times every executable candidate even with a cached plan.
    int executable = 0;
    for (const auto& c : d.candidates) executable += c.executable;
    d = s::choose_plan(p, m, deeprnn::Tuning::exhaustive, 1e-9, path, timer);
    BOOST_TEST(d.calibration.ran == executable);
    // A missing file is not an error; an unwritable one is reported, and the plan kept in memory.
    s::plan_cache_clear_memory();
    s::PlanEntry e;
    std::string msg;
    BOOST_TEST(!s::plan_cache_lookup(temp_path("missing.txt"), "k", s::this_machine(), &e, &msg));
    BOOST_TEST(msg.empty());
    BOOST_TEST(!s::plan_cache_store(temp_path("no/such/dir/plans.txt"), "k", s::this_machine(), e, &msg));
    BOOST_TEST(msg.find("cannot write") != std::string::npos);
    BOOST_TEST(s::plan_cache_lookup("", "k", s::this_machine(), &e, &msg));
    s::plan_cache_clear_memory();
    fs::remove_all(fs::path(path).parent_path());
}

BOOST_AUTO_TEST_SUITE_END()
