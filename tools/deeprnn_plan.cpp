// deeprnn-plan — shows how deeprnn would schedule a configuration, and why.
//
// Prints the cell's MM-DAG, the phased schedules the three pruning rules keep,
// then every candidate (schedule x parallelism x partitioning) with its
// predicted L3<->L2 traffic and time from the roofline model, fastest first,
// and the winner among those the engine can execute. See docs/SCHEDULES.md.
// Build: make (build/deeprnn-plan), or
//   g++ -std=c++17 -O2 -I. tools/deeprnn_plan.cpp deeprnn.cpp -lopenblas -lboost_thread
#include "deeprnn.hpp"
#include "src/pool.hpp"
#include "src/schedule.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace {

namespace s = deeprnn::detail::sched;

const char* kUsage =
    "usage: deeprnn-plan --hidden H [--cell lstm|gru|gru-rbm|rnn_tanh|rnn_relu] [--input E]\n"
    "                    [--layers L] [--bidirectional] [--proj P] [--batch B] [--seq T]\n"
    "                    [--threads N] [--simd FLOATS] [--top N]\n"
    "                    [--l2-gbs X] [--l3-gbs X] [--gflops X] [--barrier-us X]\n"
    "                    [--l2-total-gbs X] [--l3-total-gbs X] [--gflops-total X]\n"
    "  --threads defaults to this machine's physical cores; --input to --hidden;\n"
    "  rates are per core (defaults: L2 160 GB/s, L3 30 GB/s, 200 GFLOP/s, barrier 0.3 us);\n"
    "  *-total are ceilings of all busy cores together (default: none), e.g. from build/bench/roofline.\n";

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

}  // namespace

int main(int argc, char** argv) {
    s::Problem p;
    s::MachineModel m = s::default_machine();
    std::string cell = "lstm";
    int top = 0;
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
            else if (f == "--l2-gbs") m.l2_bytes_per_s = to_rate(f, v) * 1e9;
            else if (f == "--l3-gbs") m.l3_bytes_per_s = to_rate(f, v) * 1e9;
            else if (f == "--gflops") m.flops_per_s = to_rate(f, v) * 1e9;
            else if (f == "--barrier-us") m.barrier_s = to_rate(f, v) * 1e-6;
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
        std::printf("machine: %s; L1d %s, L2 %s per core, L3 %s (from %s); SIMD %d floats\n", s::read_cpu_model().c_str(),
                    kib(m.caches.l1d).c_str(), kib(m.caches.l2).c_str(), kib(m.caches.l3).c_str(),
                    m.caches.source.c_str(), p.simd_width);
        std::printf("model per core: L2 %.0f GB/s, L3 %.0f GB/s, %.0f GFLOP/s, barrier %.2f us; weights may use %.0f%% of L2\n",
                    m.l2_bytes_per_s / 1e9, m.l3_bytes_per_s / 1e9, m.flops_per_s / 1e9, m.barrier_s * 1e6,
                    m.l2_usable * 100);
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

        const std::vector<s::Candidate> c = s::rank_candidates(p, m);
        std::printf("\ncandidates: %zu, fastest predicted first (tiling: per product xi x xj x xk, L2 = weights stay "
                    "in L2; || = products side by side)\n",
                    c.size());
        std::printf("%5s %-4s %7s %4s %5s %4s %12s %12s %9s  %s\n", "rank", "sch", "workers", "side", "fused", "exec",
                    "MB/sequence", "predicted_us", "measured", "tiling (layer 0)");
        for (size_t i = 0; i < c.size() && (!top || static_cast<int>(i) < top); ++i)
            std::printf("%5zu S%-3d %7d %4s %5d %4s %12.3f %12.1f %9s  %s\n", i + 1, c[i].schedule, c[i].choice.workers,
                        c[i].choice.side_by_side ? "yes" : "-", c[i].choice.input_fused_across_time ? 1 : 0,
                        c[i].executable ? "yes" : "-", c[i].bytes / 1e6, c[i].seconds * 1e6, "-", c[i].tiling.c_str());
        const int w = s::best_executable(c);
        std::printf("\nwinner (executable): S%d %s, predicted %.1f us per sequence, %.3f MB L3<->L2\n", c[w].schedule,
                    c[w].choice.str().c_str(), c[w].seconds * 1e6, c[w].bytes / 1e6);
        if (w != 0)
            std::printf("best modeled (not executable yet): S%d %s tiling %s, predicted %.1f us\n", c[0].schedule,
                        c[0].choice.str().c_str(), c[0].tiling.c_str(), c[0].seconds * 1e6);
        std::printf("measured times: filled in when the engine calibrates (Config::tuning = calibrate).\n");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deeprnn-plan: %s\n", e.what());
        return 1;
    }
    return 0;
}
