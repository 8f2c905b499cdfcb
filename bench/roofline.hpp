// roofline.hpp — measured ceilings of this machine (never assumed values).
//
// Peak fp32 FMA rate, read bandwidth out of L1, L2, L3 and DRAM, and the rate
// a batch-1 matrix-vector product reaches with its matrix resident in L2, each
// for 1 and 2 threads (one pinned thread per core, each on its own data; the
// figures are aggregates). Every point is sampled several times: `best` is the
// highest sample (the ceiling), `median` shows how noisy the machine was.
#ifndef DEEPRNN_BENCH_ROOFLINE_HPP
#define DEEPRNN_BENCH_ROOFLINE_HPP

#include <cstddef>
#include <cstdio>

namespace bench {

constexpr int kMaxThreads = 2;  ///< thread counts measured: 1 .. kMaxThreads

enum Level { kL1, kL2, kL3, kDram, kLevels };
const char* level_name(int level);

/// Data-cache sizes in bytes: L1 and L2 per core, L3 shared (the library's
/// sched::read_cache_sizes: sysfs, else sysconf).
struct CacheSizes {
    std::size_t l1 = 32 << 10, l2 = 512 << 10, l3 = 8 << 20;
};
CacheSizes cache_sizes();

/// One measured rate: best and median over the samples.
struct Rate {
    double best = 0, median = 0;
};

struct Roofline {
    CacheSizes caches;
    Rate fma_gflops[kMaxThreads];             ///< [threads-1] peak fp32 FMA GFLOP/s
    Rate read_gbs[kLevels][kMaxThreads];      ///< [level][threads-1] read GB/s
    Rate matvec_gflops[kMaxThreads];          ///< batch-1 GEMV, matrix in L2, own kernel
    Rate sgemv_gflops;                        ///< same GEMV through OpenBLAS cblas_sgemv, 1 thread
    double fma_core_gflops[kMaxThreads] = {}; ///< [core] median FMA GFLOP/s of each core in the all-threads probe
    bool fma_shared = false;                  ///< kMaxThreads threads read < 0.75x of as many cores in every probe
    double l2_core_gbs[kMaxThreads] = {};     ///< [core] median L2 read GB/s of each core in the all-threads probe
    int matvec_rows = 0, matvec_cols = 0;     ///< GEMV shape used

    /// Level whose aggregate capacity for `threads` cores holds `bytes`.
    int level_for(std::size_t bytes, int threads) const;
    double fma(int threads) const { return fma_gflops[threads - 1].best; }
    double read(int level, int threads) const { return read_gbs[level][threads - 1].best; }
};

/// Measures everything. `sample_seconds` is the length of one sample; each
/// point takes `samples` of them (quick: 0.01 s x 5, about 2 s in all).
Roofline measure_roofline(double sample_seconds, int samples);

/// Prints the ceilings as a markdown table.
void print_roofline(const Roofline& roof, std::FILE* out);

/// Sets the OpenBLAS environment a fair peer needs, then re-executes the program
/// once (OpenBLAS reads it only when it loads); variables already set are kept.
/// `limit_spinning`: OPENBLAS_THREAD_TIMEOUT=24. Always: OPENBLAS_CORETYPE where
/// OpenBLAS fell back to its SSE3 kernels on a CPU with AVX-512 or AVX2.
void prepare_openblas(char** argv, bool limit_spinning);

}  // namespace bench

#endif
