// deeprnn-plan — shows how deeprnn would schedule a configuration, and why.
//
// Prints the cell's MM-DAG, the phased schedules the three pruning rules keep,
// then every candidate (schedule x parallelism x partitioning) with its
// predicted L3<->L2 traffic and time from the roofline model, fastest first,
// and the winner among those the engine can execute. See docs/SCHEDULES.md.
// --measure builds a model of that configuration (random weights) through the
// public API with Config::tuning = exhaustive (or --tuning calibrate) and prints
// the table the engine logs at LogLevel::debug: the same candidates with their
// measured times. --counts prints the schedule counts of every cell.
// Build: make (build/deeprnn-plan), or
//   g++ -std=c++17 -O2 -I. tools/deeprnn_plan.cpp deeprnn.cpp -lopenblas -lboost_thread
#include "deeprnn.hpp"
#include "src/engine.hpp"
#include "src/pool.hpp"
#include "src/partition.hpp"
#include "src/schedule.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <cstring>
#include <stdexcept>
#include <string>

namespace {

namespace s = deeprnn::detail::sched;

const char* kUsage =
    "usage: deeprnn-plan --hidden H [--cell lstm|gru|gru-rbm|rnn_tanh|rnn_relu] [--input E]\n"
    "                    [--layers L] [--bidirectional] [--proj P] [--batch B] [--seq T]\n"
    "                    [--threads N] [--simd FLOATS] [--top N]\n"
    "                    [--measure [--tuning exhaustive|calibrate] [--budget SECONDS] [--plan-cache FILE]]\n"
    "                    [--counts]\n"
    "                    [--l2-gbs X] [--l3-gbs X] [--gflops X] [--barrier-us X] [--dispatch-us X] [--awake-dispatch-us X]\n"
    "                    [--l2-total-gbs X] [--l3-total-gbs X] [--gflops-total X]\n"
    "  --threads defaults to this machine's physical cores; --input to --hidden;\n"
    "  rates are per core (defaults: L2, GFLOP/s, the barrier and the awake dispatch measured on this machine, L3 90 GB/s,\n"
    "  dispatch 100 us; plans are ranked with the workers awake, paying the awake dispatch; the dispatch decides which\n"
    "  short runs stay on the caller);\n"
    "  *-total are ceilings of all busy cores together (default: none), e.g. from build/bench/roofline.\n"
    "  --measure: create the model (random weights) and time the candidates on this machine, as\n"
    "  Config::tuning does (default exhaustive; the model then uses this machine's default rates),\n"
    "  on runs of --seq steps at batch 1 (Config::tuning_seq_len; at most 1024 timed);\n"
    "  --counts: the phased-schedule counts of every cell, then exit.\n";

struct Usage : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int to_int(const std::string& flag, const char* v, int lo) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (!*v || *end || n < lo || n > 100000000) throw Usage(flag + " " + v + ": expected an integer >= " + std::to_string(lo));
    return static_cast<int>(n);
}

double to_rate(const std::string& flag, const char* v) {
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (!*v || *end || !(x > 0) || x > 1e9) throw Usage(flag + " " + v + ": expected a positive number");
    return x;
}

std::string kib(size_t bytes) { return std::to_string(bytes >> 10) + " KiB"; }

deeprnn::Tensor random_tensor(std::vector<int64_t> shape, std::mt19937& rng, float bound) {
    deeprnn::Tensor t;
    t.shape = std::move(shape);
    std::uniform_real_distribution<float> u(-bound, bound);
    t.data.resize(static_cast<size_t>(t.numel()));
    for (float& v : t.data) v = u(rng);
    return t;
}

// PyTorch-convention weights of the problem's shape, as torch initialises them.
deeprnn::Weights random_weights(const deeprnn::Config& c) {
    std::mt19937 rng(1);
    const int G = c.cell == deeprnn::Cell::lstm ? 4 : c.cell == deeprnn::Cell::gru ? 3 : 1;
    const int D = deeprnn::num_directions(c), S = deeprnn::state_size(c);
    const float bound = 1.0f / std::sqrt(static_cast<float>(c.hidden_size));
    deeprnn::Weights w;
    for (int l = 0; l < c.num_layers; ++l)
        for (int d = 0; d < D; ++d) {
            const std::string sfx = std::to_string(l) + (d ? "_reverse" : "");
            const int64_t gh = static_cast<int64_t>(G) * c.hidden_size, in = l == 0 ? c.input_size : D * S;
            w["weight_ih_l" + sfx] = random_tensor({gh, in}, rng, bound);
            w["weight_hh_l" + sfx] = random_tensor({gh, S}, rng, bound);
            w["bias_ih_l" + sfx] = random_tensor({gh}, rng, bound);
            w["bias_hh_l" + sfx] = random_tensor({gh}, rng, bound);
            if (c.proj_size) w["weight_hr_l" + sfx] = random_tensor({c.proj_size, c.hidden_size}, rng, bound);
        }
    return w;
}

void print_counts() {
    struct Row { const char* name; deeprnn::Cell cell; deeprnn::GruVariant v; bool proj; };
    const Row rows[] = {{"lstm", deeprnn::Cell::lstm, deeprnn::GruVariant::linear_before_reset, false},
                        {"lstm+proj", deeprnn::Cell::lstm, deeprnn::GruVariant::linear_before_reset, true},
                        {"gru (linear-before-reset)", deeprnn::Cell::gru, deeprnn::GruVariant::linear_before_reset, false},
                        {"gru (reset-before-matmul)", deeprnn::Cell::gru, deeprnn::GruVariant::reset_before_matmul, false},
                        {"rnn", deeprnn::Cell::rnn_tanh, deeprnn::GruVariant::linear_before_reset, false}};
    std::printf("%-26s %8s %22s %16s %9s %10s\n", "cell", "products", "placements (rules i,iii)", "kept (rule ii)",
                "distinct", "engine runs");
    for (const Row& r : rows) {
        const s::MMDag dag = s::build_mm_dag(r.cell, r.v, r.proj);
        const s::Enumeration en = s::enumerate_schedules(dag);
        int engine = 0;
        for (const s::PhasedSchedule& ps : en.distinct) engine += s::engine_runs(dag, ps);
        std::printf("%-26s %8zu %22ld %16zu %9zu %10d\n", r.name, dag.nodes.size(), en.considered, en.all.size(),
                    en.distinct.size(), engine);
    }
    std::printf("(the paper reports fewer than 20 schedules for LSTM)\n");
}

}  // namespace

int main(int argc, char** argv) {
    s::Problem p;
    s::MachineModel m = deeprnn::detail::measured_machine();  // what the engine plans with
    std::string cell = "lstm", tuning = "exhaustive", cache_path;
    int top = 0;
    bool measure = false;
    double budget = 1.0;
    p.input = 0;
    p.hidden = 0;
    p.threads = 0;
    p.simd_width = 0;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string f = argv[i];
            if (f == "--help" || f == "-h") {
                std::fputs(kUsage, stdout);
                return 0;
            }
            if (f == "--bidirectional") {
                p.directions = 2;
                continue;
            }
            if (f == "--measure") {
                measure = true;
                continue;
            }
            if (f == "--counts") {
                print_counts();
                return 0;
            }
            if (i + 1 >= argc) throw Usage(f + (f.compare(0, 2, "--") ? ": unknown argument" : " needs a value"));
            const char* v = argv[++i];
            if (f == "--cell") cell = v;
            else if (f == "--input") p.input = to_int(f, v, 1);
            else if (f == "--hidden") p.hidden = to_int(f, v, 1);
            else if (f == "--layers") p.layers = to_int(f, v, 1);
            else if (f == "--proj") p.proj = to_int(f, v, 0);
            else if (f == "--batch") p.batch = to_int(f, v, 1);
            else if (f == "--seq") p.seq_len = to_int(f, v, 1);
            else if (f == "--threads") p.threads = to_int(f, v, 1);
            else if (f == "--top") top = to_int(f, v, 1);
            else if (f == "--simd") p.simd_width = to_int(f, v, 1);
            else if (f == "--tuning") tuning = v;
            else if (f == "--budget") budget = to_rate(f, v);
            else if (f == "--plan-cache") cache_path = v;
            else if (f == "--l2-gbs") m.l2_bytes_per_s = to_rate(f, v) * 1e9;
            else if (f == "--l3-gbs") m.l3_bytes_per_s = to_rate(f, v) * 1e9;
            else if (f == "--gflops") m.flops_per_s = to_rate(f, v) * 1e9;
            else if (f == "--barrier-us") m.barrier_s = to_rate(f, v) * 1e-6;
            else if (f == "--dispatch-us") m.dispatch_s = to_rate(f, v) * 1e-6;
            else if (f == "--awake-dispatch-us") m.awake_dispatch_s = to_rate(f, v) * 1e-6;
            else if (f == "--gflops-total") m.flops_total_per_s = to_rate(f, v) * 1e9;
            else if (f == "--l2-total-gbs") m.l2_total_bytes_per_s = to_rate(f, v) * 1e9;
            else if (f == "--l3-total-gbs") m.l3_total_bytes_per_s = to_rate(f, v) * 1e9;
            else throw Usage("unknown argument '" + f + "'");
        }
        if (cell == "lstm") p.cell = deeprnn::Cell::lstm;
        else if (cell == "gru" || cell == "gru-lbr") p.cell = deeprnn::Cell::gru;
        else if (cell == "gru-rbm") p.cell = deeprnn::Cell::gru, p.gru_variant = deeprnn::GruVariant::reset_before_matmul;
        else if (cell == "rnn_tanh") p.cell = deeprnn::Cell::rnn_tanh;
        else if (cell == "rnn_relu") p.cell = deeprnn::Cell::rnn_relu;
        else throw Usage("--cell " + cell + ": expected lstm, gru, gru-rbm, rnn_tanh or rnn_relu");
        if (!p.hidden) throw Usage("--hidden is required");
        if (p.proj && (p.cell != deeprnn::Cell::lstm || p.proj >= p.hidden)) throw Usage("--proj: LSTM only, and < --hidden");
        if (tuning != "exhaustive" && tuning != "calibrate") throw Usage("--tuning " + tuning + ": expected exhaustive or calibrate");
    } catch (const Usage& e) {
        std::fprintf(stderr, "deeprnn-plan: %s\n%s", e.what(), kUsage);
        return 2;
    }
    if (!p.input) p.input = p.hidden;
    if (!p.threads) p.threads = static_cast<int>(deeprnn::detail::physical_cores().size());
    if (!p.simd_width) {  // the engine's kernel width: AVX-512 16 floats, AVX2 8, else 4
#if defined(__x86_64__) || defined(__i386__)
        p.simd_width = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("avx2") ? 8 : 4;
#else
        p.simd_width = 4;
#endif
    }

    try {
        std::printf("deeprnn-plan %s: %s input=%d hidden=%d proj=%d layers=%d directions=%d batch=%d seq=%d threads=%d\n",
                    deeprnn::version(), cell.c_str(), p.input, p.hidden, p.proj, p.layers, p.directions, p.batch,
                    p.seq_len, p.threads);
        std::printf("machine: %s; L1d %s, L2 %s per core, L3 %s (from %s; %s read at the L3 rate); SIMD %d floats\n",
                    s::read_cpu_model().c_str(), kib(m.caches.l1d).c_str(), kib(m.caches.l2).c_str(),
                    kib(m.caches.l3).c_str(), m.caches.source.c_str(),
                    kib(m.l3_usable_bytes ? m.l3_usable_bytes : m.caches.l3).c_str(), p.simd_width);
        std::printf("model per core (L2, GFLOP/s and barrier %s unless given): L2 %.0f GB/s, L3 %.0f GB/s, %.0f GFLOP/s, barrier %.2f us, "
                    "dispatch %.0f us (awake %.2f us), cross-core reads %.1f GB/s; weights may use %.0f%% of L2\n",
                    m.rates.c_str(), m.l2_bytes_per_s / 1e9, m.l3_bytes_per_s / 1e9, m.flops_per_s / 1e9, m.barrier_s * 1e6, m.dispatch_s * 1e6,
                    m.awake_dispatch_s * 1e6,
                    m.cross_core_bytes_per_s / 1e9, m.l2_usable * 100);
        auto total = [](double v, const char* unit) { return v > 0 ? std::to_string(static_cast<long>(v / 1e9)) + unit : std::string("none"); };
        std::printf("aggregate ceilings of all busy cores: L2 %s, L3 %s, compute %s\n\n", total(m.l2_total_bytes_per_s, " GB/s").c_str(),
                    total(m.l3_total_bytes_per_s, " GB/s").c_str(), total(m.flops_total_per_s, " GFLOP/s").c_str());

        const s::MMDag dag = s::build_mm_dag(p.cell, p.gru_variant, p.proj > 0);
        std::printf("MM-DAG %s, %zu products:", dag.cell.c_str(), dag.nodes.size());
        for (const s::MatMul& n : dag.nodes) {
            std::printf(" %s", n.name().c_str());
            for (size_t k = 0; k < n.after.size(); ++k)
                std::printf("%s%s", k ? "," : "(after ", dag.nodes[n.after[k]].name().c_str());
            if (!n.after.empty()) std::printf(")");
        }
        const s::Enumeration en = s::enumerate_schedules(dag);
        std::printf("\nphased schedules: %ld symmetric placements with time-independent phases first; rule ii keeps %zu; "
                    "%zu distinct (X = input of all steps, * = the engine runs it)\n",
                    en.considered, en.all.size(), en.distinct.size());
        for (size_t i = 0; i < en.distinct.size(); ++i)
            std::printf("  S%-2zu %s %s\n", i, s::engine_runs(dag, en.distinct[i]) ? "*" : " ", en.distinct[i].text.c_str());

        if (!measure) {
            // As the engine: ranked for workers awake; the wake-up decides only which runs stay on the caller.
            const s::PlanDecision d = s::choose_plan(p, s::awake(m), deeprnn::Tuning::heuristic, 1.0, "", nullptr);
            std::printf("\n%s\n", s::describe_candidates(d, top).c_str());
            if (p.cell == deeprnn::Cell::gru && p.gru_variant == deeprnn::GruVariant::reset_before_matmul)
                std::printf("GRU reset-before-matmul: U_r.h summed in %d fixed chunk(s) of %d units; the winner runs %s\n",
                            deeprnn::detail::rbm_chunk_count(p.hidden, p.simd_width),
                            deeprnn::detail::rbm_chunk_units(p.hidden, p.simd_width),
                            d.chosen.choice.rbm_one_barrier ? "one barrier per step (partials reduced on every worker)"
                                                            : "two barriers per step");
            if (const int rows = s::serial_rows(p, m, d.chosen.choice))
                std::printf("short runs: up to %d rows (steps x batch) run on the caller alone (waking the pool costs more), "
                            "%d when runs come back to back\n", rows, s::serial_rows(p, s::awake(m), d.chosen.choice));
            std::printf("measured times: run with --measure (or set Config::tuning = calibrate with a Config::log).\n");
            return 0;
        }
        // What the engine does at model creation, through the public API.
        deeprnn::Config cfg;
        cfg.cell = p.cell;
        cfg.gru_variant = p.gru_variant;
        cfg.input_size = p.input;
        cfg.hidden_size = p.hidden;
        cfg.proj_size = p.proj;
        cfg.num_layers = p.layers;
        cfg.direction = p.directions == 2 ? deeprnn::Direction::bidirectional : deeprnn::Direction::forward;
        cfg.max_batch = p.batch;
        cfg.threads = p.threads;
        cfg.tuning = tuning == "calibrate" ? deeprnn::Tuning::calibrate : deeprnn::Tuning::exhaustive;
        cfg.tuning_budget_seconds = budget;
        cfg.tuning_seq_len = p.seq_len;  // ranked and timed at --seq steps
        cfg.plan_cache_path = cache_path;
        struct Captured { std::string table, other; } log;
        cfg.log = [](deeprnn::LogLevel level, const char* msg, void* user) {
            Captured& c = *static_cast<Captured*>(user);
            const std::string text = msg;
            if (level == deeprnn::LogLevel::debug && text.compare(0, 16, "plan candidates:") == 0) c.table = text;
            else c.other += std::string(level == deeprnn::LogLevel::warning ? "warning: " : "") + text + "\n";
        };
        cfg.log_user = &log;
        const deeprnn::Weights w = random_weights(cfg);
        const auto t0 = std::chrono::steady_clock::now();
        const deeprnn::Model model(cfg, w);
        const double created = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("\nmeasured on this machine: Model creation with Config::tuning = %s%s took %.3f s "
                    "(calibration times batch 1, %d steps; the model uses the default rates above)\n",
                    tuning.c_str(), tuning == "calibrate" ? (" budget " + std::to_string(budget) + " s").c_str() : "",
                    created, std::min(p.seq_len, deeprnn::detail::kMaxCalibrationSteps));
        // The engine logs every candidate; --top keeps the first N rows and every timed one.
        std::string shown;
        int rows = 0;
        size_t b = 0;
        while (b < log.table.size()) {
            size_t e = log.table.find('\n', b);
            if (e == std::string::npos) e = log.table.size();
            const std::string line = log.table.substr(b, e - b);
            const bool row = line.size() > 5 && line[4] >= '0' && line[4] <= '9';
            const bool timed = row && line.size() >= 73 && line.substr(61, 12) != std::string(11, ' ') + "-";
            if (!row || !top || ++rows <= top || timed) shown += line + "\n";
            b = e + 1;
        }
        std::printf("%s%s", shown.c_str(), log.other.c_str());    } catch (const std::exception& e) {
        std::fprintf(stderr, "deeprnn-plan: %s\n", e.what());
        return 1;
    }
    return 0;
}
