// roofline.cpp — measures the ceilings declared in roofline.hpp.
#include "roofline.hpp"

#include "../src/schedule.hpp"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <xsimd/xsimd.hpp>

namespace bench {
namespace {

using Batch = xsimd::batch<float>;
constexpr std::size_t kLanes = Batch::size;
// Independent FMA chains: more than latency x pipes (8-10 on current cores),
// and with the two constants, no more than the vector registers. 16 chains
// on AVX2's 16 registers spilled: 52 GFLOP/s on a Zen 3 core whose
// gemm_packed ran 66.
constexpr int kFmaChains = kLanes >= 16 ? 16 : 12;
constexpr int kReadChains = 8;   // independent add chains over the loads
constexpr int kPanelBatches = 8; // GEMV: rows per panel = kPanelBatches * kLanes

volatile float g_sink;  // keeps kernel results alive

struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

Buffer make_buffer(std::size_t floats, float value) {
    std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    Buffer b(static_cast<float*>(std::aligned_alloc(64, bytes)));
    std::fill(b.get(), b.get() + floats, value);
    return b;
}

void pin_to_core(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core % static_cast<int>(std::thread::hardware_concurrency()), &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// ---- kernels: each runs `reps` times and returns the work done (flops or bytes)

double fma_kernel(long reps) {
    Batch acc[kFmaChains];
    for (int k = 0; k < kFmaChains; ++k) acc[k] = Batch(1.0f + 0.001f * k);
    const Batch mul(0.9999999f), add(1e-7f);
    for (long r = 0; r < reps; ++r) {
        for (int i = 0; i < 100; ++i)
            for (int k = 0; k < kFmaChains; ++k) acc[k] = xsimd::fma(acc[k], mul, add);
        for (int k = 0; k < kFmaChains; ++k) asm("" : "+v"(acc[k].data));  // no constant folding
    }
    Batch sum(0.0f);
    for (int k = 0; k < kFmaChains; ++k) sum += acc[k];
    g_sink = xsimd::hadd(sum);
    return 2.0 * kFmaChains * kLanes * 100 * reps;
}

double read_kernel(const float* data, std::size_t floats, long reps) {
    Batch acc[kReadChains];
    for (auto& a : acc) a = Batch(0.0f);
    const std::size_t step = kReadChains * kLanes;
    for (long r = 0; r < reps; ++r)
        for (std::size_t i = 0; i + step <= floats; i += step)
            for (int k = 0; k < kReadChains; ++k)
                acc[k] += Batch::load_aligned(data + i + k * kLanes);
    Batch sum(0.0f);
    for (auto& a : acc) sum += a;
    g_sink = xsimd::hadd(sum);
    return double(floats / step * step) * sizeof(float) * reps;
}

// y = W x with W packed in panels of kPanelBatches*kLanes rows, column after
// column inside a panel, so the whole matrix is one contiguous stream of loads.
void matvec_panels(const float* w, const float* x, float* y, int rows, int cols) {
    const int panel = kPanelBatches * kLanes;
    for (int r0 = 0; r0 < rows; r0 += panel) {
        Batch acc[kPanelBatches];
        for (auto& a : acc) a = Batch(0.0f);
        const float* block = w + std::size_t(r0) * cols;
        for (int j = 0; j < cols; ++j) {
            const Batch xj(x[j]);
            for (int k = 0; k < kPanelBatches; ++k)
                acc[k] = xsimd::fma(Batch::load_aligned(block + j * panel + k * kLanes), xj, acc[k]);
        }
        for (int k = 0; k < kPanelBatches; ++k) acc[k].store_unaligned(y + r0 + k * kLanes);
    }
}

// ---- sampling harness

using Work = std::function<double(int tid, long reps)>;

struct Run {
    double units = 0, seconds = 0;  // total work of all threads, slowest thread's time
    std::vector<double> thread_rates;  // each pinned thread's own work / own time
    double rate() const { return units / seconds; }
};

// Runs work(tid, reps) on `threads` pinned threads released together.
Run run_once(int threads, long reps, const Work& work) {
    std::atomic<int> ready{0};
    std::vector<double> seconds(threads), units(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            pin_to_core(t);
            ready.fetch_add(1);
            while (ready.load() < threads) {}
            auto start = std::chrono::steady_clock::now();
            units[t] = work(t, reps);
            seconds[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        });
    for (auto& th : pool) th.join();
    Run run;
    for (int t = 0; t < threads; ++t) {
        run.units += units[t], run.seconds = std::max(run.seconds, seconds[t]);
        run.thread_rates.push_back(units[t] / seconds[t]);
    }
    return run;
}

// `per_core`, if given: each pinned thread's median rate over the samples.
Rate sample_rate(int threads, double sample_seconds, int samples, const Work& work,
                 double* per_core = nullptr) {
    // Calibrate on the kernel's own time: warm the data into place, then size
    // one sample to about sample_seconds.
    run_once(threads, 1, work);
    long reps = 1;
    double seconds;
    while ((seconds = run_once(1, reps, work).seconds) < sample_seconds / 4) reps *= 4;
    reps = std::max(1L, long(reps * sample_seconds / seconds));
    std::vector<double> rates;
    std::vector<std::vector<double>> thread_rates(threads);
    for (int i = 0; i < samples; ++i) {
        const Run run = run_once(threads, reps, work);
        rates.push_back(run.rate());
        for (int t = 0; t < threads; ++t) thread_rates[t].push_back(run.thread_rates[t]);
    }
    for (int t = 0; per_core && t < threads; ++t) {
        std::sort(thread_rates[t].begin(), thread_rates[t].end());
        per_core[t] = thread_rates[t][thread_rates[t].size() / 2];
    }
    std::sort(rates.begin(), rates.end());
    return {rates.back(), rates[rates.size() / 2]};
}

Rate scaled(Rate r, double factor) { return {r.best * factor, r.median * factor}; }

}  // namespace

const char* level_name(int level) {
    static const char* names[] = {"L1", "L2", "L3", "DRAM"};
    return level >= 0 && level < kLevels ? names[level] : "FMA";
}

// The library's own reading (sysfs, else sysconf), so the bench and the plan
// agree on what fits where.
CacheSizes cache_sizes() {
    const deeprnn::detail::sched::CacheSizes lib = deeprnn::detail::sched::read_cache_sizes();
    CacheSizes c;
    c.l1 = lib.l1d;
    c.l2 = lib.l2;
    c.l3 = lib.l3;
    return c;
}

int Roofline::level_for(std::size_t bytes, int threads) const {
    if (bytes <= caches.l1 * threads) return kL1;
    if (bytes <= caches.l2 * threads) return kL2;
    if (bytes <= caches.l3) return kL3;
    return kDram;
}

Roofline measure_roofline(double sample_seconds, int samples) {
    Roofline roof;
    roof.caches = cache_sizes();
    // L3: at most 8 L2s per thread, since a VM may report the host's whole L3
    // (sysconf says 508 MiB on this project's VMs, whose L3 is 32 MiB); DRAM:
    // far beyond what the L3 test used.
    const std::size_t l3_bytes = std::min(roof.caches.l3 / (2 * kMaxThreads), 8 * roof.caches.l2);
    const std::size_t per_thread_bytes[kLevels] = {roof.caches.l1 / 2, roof.caches.l2 / 2, l3_bytes,
                                                   std::max<std::size_t>(256 << 20, 16 * kMaxThreads * l3_bytes)};
    // Pinned threads that share one physical core (SMT siblings, or vCPUs a
    // host has put on one core for a while) each read half the peak, and
    // every FMA-bound floor at that thread count would come out twice too
    // high (seen once on the Zen 4 VM: 116.6 GFLOP/s on 2 threads, 117.7
    // on 1). Where t threads fall short of t cores, probe again after a
    // pause, up to 3 times, keeping the best; still short, fma_shared says so.
    for (int t = 1; t <= kMaxThreads; ++t)
        for (int attempt = 0; attempt < 4; ++attempt) {
            double cores[kMaxThreads] = {};
            const Rate r = scaled(sample_rate(t, sample_seconds, samples,
                                              [](int, long reps) { return fma_kernel(reps * 10); },
                                              t == kMaxThreads ? cores : nullptr),
                                  1e-9);
            if (attempt == 0 || r.best > roof.fma_gflops[t - 1].best) {
                roof.fma_gflops[t - 1] = r;
                if (t == kMaxThreads)
                    for (int c = 0; c < kMaxThreads; ++c) roof.fma_core_gflops[c] = cores[c] * 1e-9;
            }
            roof.fma_shared = t > 1 && roof.fma_gflops[t - 1].best < 0.75 * t * roof.fma_gflops[0].best;
            if (!roof.fma_shared) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    for (int level = 0; level < kLevels; ++level) {
        std::size_t floats = per_thread_bytes[level] / sizeof(float);
        std::vector<Buffer> data;
        for (int t = 0; t < kMaxThreads; ++t) data.push_back(make_buffer(floats, 1.0f));
        for (int t = 1; t <= kMaxThreads; ++t)
            roof.read_gbs[level][t - 1] = scaled(
                sample_rate(t, sample_seconds, samples,
                            [&](int tid, long reps) { return read_kernel(data[tid].get(), floats, reps); },
                            level == kL2 && t == kMaxThreads ? roof.l2_core_gbs : nullptr),
                1e-9);
    }
    for (double& r : roof.l2_core_gbs) r *= 1e-9;
    // GEMV: a [rows x 128] matrix filling half of one core's L2.
    const int cols = 128, panel = kPanelBatches * kLanes;
    const int rows = std::max<int>(panel, int(roof.caches.l2 / 2 / (cols * sizeof(float))) / panel * panel);
    roof.matvec_rows = rows;
    roof.matvec_cols = cols;
    const double flops = 2.0 * rows * cols;
    std::vector<Buffer> w, x, y;
    for (int t = 0; t < kMaxThreads; ++t) {
        w.push_back(make_buffer(std::size_t(rows) * cols, 0.01f));
        x.push_back(make_buffer(cols, 1.0f));
        y.push_back(make_buffer(rows, 0.0f));
    }
    for (int t = 1; t <= kMaxThreads; ++t)
        roof.matvec_gflops[t - 1] = scaled(sample_rate(t, sample_seconds, samples,
                                                       [&](int tid, long reps) {
                                                           for (long r = 0; r < reps; ++r)
                                                               matvec_panels(w[tid].get(), x[tid].get(),
                                                                             y[tid].get(), rows, cols);
                                                           return flops * reps;
                                                       }),
                                           1e-9);
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    roof.sgemv_gflops = scaled(sample_rate(1, sample_seconds, samples,
                                           [&](int, long reps) {
                                               for (long r = 0; r < reps; ++r)
                                                   cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f,
                                                               w[0].get(), cols, x[0].get(), 1, 0.0f,
                                                               y[0].get(), 1);
                                               return flops * reps;
                                           }),
                               1e-9);
    openblas_set_num_threads(blas_threads);
    return roof;
}

void print_roofline(const Roofline& roof, std::FILE* out) {
    auto cell = [&](Rate r) { std::fprintf(out, " %8.1f (%8.1f) |", r.best, r.median); };
    std::fprintf(out, "| ceiling (best of samples, median in parentheses) | 1 thread | 2 threads |\n");
    std::fprintf(out, "|---|---:|---:|\n");
    std::fprintf(out, "| peak fp32 FMA, GFLOP/s |");
    for (auto r : roof.fma_gflops) cell(r);
    const std::size_t kib[kLevels] = {roof.caches.l1 >> 10, roof.caches.l2 >> 10, roof.caches.l3 >> 10, 0};
    for (int level = 0; level < kLevels; ++level) {
        if (level == kDram)
            std::fprintf(out, "\n| read DRAM, GB/s |");
        else
            std::fprintf(out, "\n| read %s (%zu KiB%s), GB/s |", level_name(level), kib[level],
                         level == kL3 ? " shared" : " per core");
        for (auto r : roof.read_gbs[level]) cell(r);
    }
    std::fprintf(out, "\n| batch-1 GEMV %dx%d in L2 (own kernel), GFLOP/s |", roof.matvec_rows,
                 roof.matvec_cols);
    for (auto r : roof.matvec_gflops) cell(r);
    std::fprintf(out, "\n| same GEMV, OpenBLAS cblas_sgemv (%s kernels), GFLOP/s |", openblas_get_corename());
    cell(roof.sgemv_gflops);
    std::fprintf(out, " - |\n");
    // A split step waits for its slowest core, and a VM's vCPUs can part in
    // speed for seconds (docs/ENGINE.md, "Not done yet", cores of unequal speed).
    auto per_core = [&](const char* what, const double* rates) {
        double lo = rates[0], hi = lo;
        std::fprintf(out, "\n%s:", what);
        for (int t = 0; t < kMaxThreads; ++t) {
            std::fprintf(out, " core %d %.1f%s", t, rates[t], t + 1 < kMaxThreads ? "," : "");
            lo = std::min(lo, rates[t]), hi = std::max(hi, rates[t]);
        }
        std::fprintf(out, " (%.2fx apart)", lo > 0 ? hi / lo : 0.0);
    };
    std::fprintf(out, "\nCores side by side (the %d-thread probes, median per pinned core):", kMaxThreads);
    per_core("- FMA, GFLOP/s", roof.fma_core_gflops);
    per_core("- read L2, GB/s", roof.l2_core_gbs);
    if (roof.fma_shared)
        std::fprintf(out, "\n- warning: %d pinned threads read under 0.75x of %d cores' FMA peak in 4 probes: they "
                          "shared a core (SMT siblings, or the host), so FMA-bound floors at %d threads are too high",
                     kMaxThreads, kMaxThreads, kMaxThreads);
    std::fprintf(out, "\n");
}

// OpenBLAS's idle workers keep spinning (sched_yield) for 2^28 TSC cycles, about
// 0.1 s, after every threaded call, taking a core from whatever runs next; 2^24
// cycles (a few ms) is still longer than any gap between the steps of one pass.
// OpenBLAS 0.3.21 (Debian 12) falls back to its SSE3 "Prescott" kernels on CPU
// models newer than itself (an Emerald Rapids Xeon, model 207, for one):
// cblas_sgemv then runs at 5.5 GFLOP/s and the framework loop looks 3x slower
// than it is, so the core it would pick for this vector width is named instead.
void prepare_openblas(char** argv, bool limit_spinning) {
    bool changed = false;
    if (limit_spinning && !std::getenv("OPENBLAS_THREAD_TIMEOUT")) {
        setenv("OPENBLAS_THREAD_TIMEOUT", "24", 1);
        changed = true;
    }
    const char* core = openblas_get_corename();
    if (!std::getenv("OPENBLAS_CORETYPE") && core && !std::strcmp(core, "Prescott")) {
        __builtin_cpu_init();
        const char* better = __builtin_cpu_supports("avx512bw") ? "SkylakeX"
                             : __builtin_cpu_supports("avx2")   ? "Haswell"
                                                                : nullptr;
        if (better) {
            setenv("OPENBLAS_CORETYPE", better, 1);
            changed = true;
        }
    }
    if (changed) execv("/proc/self/exe", argv);  // if that fails, carry on as loaded
}

}  // namespace bench
