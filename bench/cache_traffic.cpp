// cache_traffic — one implementation, one configuration, one process: the
// program bench/cache_traffic.sh runs under valgrind's cachegrind to count
// the cache misses of a forward pass (docs/BENCHMARKS.md, "Weight traffic per
// step (cachegrind)").
//
// It builds the problem and the implementation exactly as deeprnn_bench does
// (workloads.cpp, impl_*.cpp), runs the forward pass --runs times and prints
// one line. It measures nothing itself: cachegrind counts the whole process,
// and the script takes the difference between two sequence lengths, which
// cancels everything that does not grow with the number of steps (start-up,
// weight generation, packing, oneDNN's JIT, the first touch of the weights).
#include <cblas.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "impls.hpp"
#include "workloads.hpp"

namespace {

const char* kUsage =
    "usage: cache_traffic --impl NAME [options]\n"
    "  --impl NAME      deeprnn, framework, onednn-any or onednn-ldigo\n"
    "  --cell CELL      lstm (default) or gru\n"
    "  --input E        input size; default 64\n"
    "  --hidden H       hidden size; default 256\n"
    "  --batch B        batch size; default 1\n"
    "  --seq T          sequence length; default 100\n"
    "  --threads N      deeprnn Config.threads, OpenBLAS and OpenMP threads; default 1\n"
    "  --runs R         forward passes; default 1\n"
    "  --info           print the deeprnn, OpenBLAS and oneDNN build lines and exit\n"
    "Exit status 3: the implementation does not exist here (no oneDNN, or oneDNN's\n"
    "own choice of layout is plain ldigo, so onednn-any would repeat onednn-ldigo).\n";

[[noreturn]] void usage_error(const std::string& message) {
    std::fprintf(stderr, "cache_traffic: %s\n%s", message.c_str(), kUsage);
    std::exit(2);
}

int positive(const std::string& arg, const char* value) {
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || v < 1 || v > 1 << 20) usage_error("bad value for " + arg + ": " + value);
    return int(v);
}

}  // namespace

int main(int argc, char** argv) {
    std::string impl_name, cell = "lstm";
    int input = 64, hidden = 256, batch = 1, seq = 100, threads = 1, runs = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            std::printf("%s", kUsage);
            return 0;
        }
        if (arg == "--info") {
            std::printf("deeprnn: %s\nOpenBLAS: %s\n%s\n", bench::deeprnn_info().c_str(), openblas_get_config(),
                        bench::onednn_info().c_str());
            return 0;
        }
        if (i + 1 >= argc) usage_error("missing value or unknown option " + arg);
        const char* value = argv[++i];
        if (arg == "--impl") impl_name = value;
        else if (arg == "--cell") cell = value;
        else if (arg == "--input") input = positive(arg, value);
        else if (arg == "--hidden") hidden = positive(arg, value);
        else if (arg == "--batch") batch = positive(arg, value);
        else if (arg == "--seq") seq = positive(arg, value);
        else if (arg == "--threads") threads = positive(arg, value);
        else if (arg == "--runs") runs = positive(arg, value);
        else usage_error("unknown option " + arg);
    }
    if (cell != "lstm" && cell != "gru") usage_error("--cell must be lstm or gru");
    if (impl_name.empty()) usage_error("--impl is required");

    using namespace bench;
    const Workload work = make_workload(cell == "lstm" ? CellKind::lstm : CellKind::gru, "cache", input, hidden,
                                        batch, seq);
    const Problem problem = make_problem(work);

    // The thread budget first: oneDNN sizes its work split when a primitive is created.
    openblas_set_num_threads(threads);
    set_onednn_threads(threads);

    ImplPtr impl;
    if (impl_name == "deeprnn") impl = make_deeprnn(problem, threads, deeprnn::WeightPrecision::f32);
    else if (impl_name == "framework") impl = make_framework(problem);
    else if (impl_name.rfind("onednn", 0) == 0) {
        for (ImplPtr& candidate : make_onednn(problem))
            if (candidate->name() == impl_name) impl = std::move(candidate);
        if (!impl) {
            std::printf("%s %s: not available (%s)\n", impl_name.c_str(), work.id().c_str(), onednn_info().c_str());
            return 3;
        }
    } else
        usage_error("unknown implementation " + impl_name);

    for (int r = 0; r < runs; ++r) impl->run();

    // Something that depends on every output, so that no pass can be dropped.
    const float* y = impl->output();
    double sum = 0;
    for (std::size_t i = 0, n = std::size_t(seq) * batch * hidden; i < n; ++i) sum += std::fabs(y[i]);
    std::printf("%s %s threads=%d runs=%d sum|y|=%.6g\n", impl->name().c_str(), work.id().c_str(), threads, runs,
                sum);
    return 0;
}
