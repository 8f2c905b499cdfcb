// kernels.cpp — packed matrix products with run-time ISA dispatch.
//
// One generic micro-kernel written with GCC/Clang vector extensions is
// inlined into per-ISA entry points compiled with target attributes, so a
// binary built without -march flags still runs AVX-512 where the CPU has it.
#include "kernels.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#ifdef __x86_64__
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#define DEEPRNN_FP_CONTRACT , optimize("fp-contract=fast")  // GCC's ISO modes do not fuse a*b+c otherwise
#else
#define DEEPRNN_FP_CONTRACT                                  // Clang fuses within a statement by default
#endif
// Before a loop over a kernel's accumulators or panels (a compile-time
// count): GCC unrolls those completely only at -O3 by itself, and otherwise
// keeps the accumulators in memory (a batch-1 step took 1.9x as long at -O2).
#if defined(__GNUC__) && !defined(__clang__)
#define DEEPRNN_UNROLL_ALL _Pragma("GCC unroll 32")
#else
#define DEEPRNN_UNROLL_ALL
#endif
#if defined(__x86_64__) || defined(__i386__)
#define DEEPRNN_X86 1
#define DEEPRNN_TARGET(isa) __attribute__((target(isa) DEEPRNN_FP_CONTRACT))
#endif

namespace deeprnn {
namespace detail {

bool cpu_has_vnni() {
#ifdef DEEPRNN_X86
    static const bool vnni = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
    }();
    return vnni;
#else
    return false;
#endif
}

bool cpu_has_bf16_dot() {
#ifdef DEEPRNN_X86
    static const bool bf16 = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    }();
    return bf16;
#else
    return false;
#endif
}

int isa_width(Isa isa) { return isa == Isa::avx512 ? 16 : isa == Isa::avx2 ? 8 : 4; }

void* aligned_zeroed(size_t bytes) {
    const size_t huge = size_t(2) << 20;
    const size_t align = bytes >= 2 * huge ? huge : 64;
    bytes = std::max<size_t>(64, (bytes + align - 1) / align * align);
    void* p = std::aligned_alloc(align, bytes);
    if (!p) fail("out of memory allocating ", bytes, " bytes");
#ifdef MADV_HUGEPAGE
    if (align == huge) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    std::memset(p, 0, bytes);
    return p;
}

size_t element_bytes(WeightPrecision precision) {
    return precision == WeightPrecision::int8 ? 1 : precision == WeightPrecision::bf16 ? 2 : 4;
}

namespace {

// Round to nearest even; NaN stays a (quiet) NaN, infinities stay infinite.
uint32_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// One group's int8 row scales, max|w| / 127; a row with NaN or Inf gets a
// NaN scale, so its outputs are NaN, as they would be in f32.
void int8_scales(const float* group, int K, int rows, float* scale) {
    for (int k = 0; k < K; ++k)
        for (int i = 0; i < rows; ++i) {
            const float a = std::fabs(group[static_cast<size_t>(k) * rows + i]);
            scale[i] = std::isfinite(a) ? std::max(scale[i], a) : a + scale[i];  // NaN/Inf stick
        }
    for (int i = 0; i < rows; ++i) scale[i] = std::isfinite(scale[i]) ? scale[i] / 127.0f : NAN;
}

uint32_t to_int8(float w, float scale) {
    const float q = scale > 0 ? std::nearbyint(w / scale) : 0.0f;
    return static_cast<uint8_t>(static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, q))));
}

}  // namespace

namespace {

// VNNI layout: per group of up to 4 panels of 16 rows, per block of 4 k
// (zero-padded), one 64-byte vector per panel whose lane i holds row i's 4
// weights, which is what vpdpbusd multiplies by a broadcast of 4 bytes of X.
void store_vnni(PackedMatrix& m, const std::vector<float>& packed) {
    const int W = m.width, K = m.cols, K4 = (K + 3) / 4 * 4;
    m.data = Aligned<unsigned char>(static_cast<size_t>(m.rows) * K4);
    m.row_sum = Aligned<int32_t>(static_cast<size_t>(m.rows));
    const float* in = packed.data();
    unsigned char* out = m.data.data();
    for (int g0 = 0; g0 < m.rows; g0 += 4 * W) {
        const int gr = std::min(4 * W, m.rows - g0);
        float* scale = m.scale.data() + g0;
        int8_scales(in, K, gr, scale);
        for (int k0 = 0; k0 < K4; k0 += 4)
            for (int i = 0; i < gr; ++i)  // panel i / W, lane i % W
                for (int j = 0; j < 4; ++j) {
                    const int k = k0 + j;
                    const uint32_t q = k < K ? to_int8(in[static_cast<size_t>(k) * gr + i], scale[i]) : 0;
                    *out++ = static_cast<unsigned char>(q);
                    m.row_sum.data()[g0 + i] += static_cast<int8_t>(q);
                }
        in += static_cast<size_t>(K) * gr;
    }
}

// AVX512_BF16 layout: per group of up to 4 panels of 16 rows, per pair of k
// (zero-padded), one 64-byte vector per panel whose lane i holds row i's two
// weights, low half first, which is what vdpbf16ps multiplies by a broadcast
// pair of X.
void store_bf16_pairs(PackedMatrix& m, const std::vector<float>& packed) {
    const int W = m.width, K = m.cols, K2 = (K + 1) / 2;
    m.data = Aligned<unsigned char>(static_cast<size_t>(m.rows) * K2 * 4);
    const float* in = packed.data();
    uint32_t* out = reinterpret_cast<uint32_t*>(m.data.data());
    for (int g0 = 0; g0 < m.rows; g0 += 4 * W) {
        const int gr = std::min(4 * W, m.rows - g0);
        for (int k = 0; k < 2 * K2; k += 2)
            for (int i = 0; i < gr; ++i) {
                const uint32_t lo = to_bf16(in[static_cast<size_t>(k) * gr + i]);
                const uint32_t hi = k + 1 < K ? to_bf16(in[static_cast<size_t>(k + 1) * gr + i]) : 0;
                *out++ = lo | hi << 16;
            }
        in += static_cast<size_t>(K) * gr;
    }
}

}  // namespace

// Narrow weights are interleaved so widening needs only shifts and masks on
// 32-bit lanes, which every SIMD width does in one instruction (a byte or
// half-word sign/zero extension is split into pieces by GCC's vector
// lowering): per k, lane i of a group's vector v holds row i of panels
// 2v, 2v+1 (bf16, low half first) or of panels 0..3 (int8, byte j = panel j).
void store_packed(PackedMatrix& m, const std::vector<float>& packed) {
    const int W = m.width, K = m.cols, group_rows = 4 * W;
    size_t lanes = 0;
    for (int g0 = 0; g0 < m.rows; g0 += group_rows)
        lanes += lanes_per_k(m.precision, std::min(group_rows, m.rows - g0) / W, W) * K;
    m.data = Aligned<unsigned char>(lanes * 4);
    if (m.precision == WeightPrecision::f32) {
        if (!packed.empty())  // a worker may own no rows (an LSTM projection narrower than the workers' vectors)
            std::memcpy(m.data.data(), packed.data(), packed.size() * sizeof(float));
        return;
    }
    if (m.precision == WeightPrecision::int8) m.scale = AlignedFloats(static_cast<size_t>(m.rows));
    if (m.vnni) return store_vnni(m, packed);
    if (m.dot_bf16) return store_bf16_pairs(m, packed);
    uint32_t* out = reinterpret_cast<uint32_t*>(m.data.data());
    const float* in = packed.data();
    for (int g0 = 0; g0 < m.rows; g0 += group_rows) {
        const int gr = std::min(group_rows, m.rows - g0), np = gr / W;
        const float* scale = nullptr;
        if (m.precision == WeightPrecision::int8) {
            int8_scales(in, K, gr, m.scale.data() + g0);
            scale = m.scale.data() + g0;
        }
        for (int k = 0; k < K; ++k, in += gr) {
            for (size_t v = 0; v < lanes_per_k(m.precision, np, W) / W; ++v)
                for (int i = 0; i < W; ++i) {
                    uint32_t lane = 0;
                    if (m.precision == WeightPrecision::bf16) {
                        for (int j = 0; j < 2; ++j)
                            if (static_cast<int>(2 * v) + j < np) lane |= to_bf16(in[(2 * v + j) * W + i]) << (16 * j);
                    } else {
                        for (int j = 0; j < np; ++j) lane |= to_int8(in[j * W + i], scale[j * W + i]) << (8 * j);
                    }
                    *out++ = lane;
                }
        }
    }
}

namespace {

// W floats in one SIMD register, naturally aligned (alignof == sizeof): the
// kernels keep arrays of them on the stack (accumulators, widened weights)
// and compilers may move those with aligned vector instructions. Memory that
// is not vector-aligned (weights, X, Y, bias) is read and written with
// memcpy only, never through a V*.
template <int W>
struct Vec {
    typedef float type __attribute__((vector_size(4 * W)));
    static_assert(alignof(type) == sizeof(type), "stack arrays of Vec must be vector-aligned");
};
template <typename T, int W>
struct VecOf {
    typedef T type __attribute__((vector_size(sizeof(T) * W)));
};

// How one k of a group of NP panels is stored (store_packed) and widened to
// NP float vectors. Out parameters, not return values: a vector return is an
// ABI question. int8 converts exactly; its row scale comes after the sum.
template <WeightPrecision P>
struct Storage;

template <>
struct Storage<WeightPrecision::f32> {
    template <int W, int NP>
    __attribute__((always_inline)) static void widen(typename Vec<W>::type (&w)[NP], const uint32_t* p) {
        DEEPRNN_UNROLL_ALL for (int i = 0; i < NP; ++i) std::memcpy(&w[i], p + i * W, sizeof(w[i]));  // per vector: stays in registers
    }
};

template <>
struct Storage<WeightPrecision::bf16> {
    template <int W, int NP>
    __attribute__((always_inline)) static void widen(typename Vec<W>::type (&w)[NP], const uint32_t* p) {
        using U = typename VecOf<uint32_t, W>::type;
        for (int v = 0; 2 * v < NP; ++v) {
            U u, lo, hi;
            std::memcpy(&u, p + v * W, sizeof(u));
            lo = u << 16;
            std::memcpy(&w[2 * v], &lo, sizeof(lo));
            if (2 * v + 1 < NP) {
                hi = u & 0xffff0000u;
                std::memcpy(&w[2 * v + 1], &hi, sizeof(hi));
            }
        }
    }
};

template <>
struct Storage<WeightPrecision::int8> {
    template <int W, int NP>
    __attribute__((always_inline)) static void widen(typename Vec<W>::type (&w)[NP], const uint32_t* p) {
        using I = typename VecOf<int32_t, W>::type;
        I u;
        std::memcpy(&u, p, sizeof(u));
        DEEPRNN_UNROLL_ALL for (int j = 0; j < NP; ++j) w[j] = __builtin_convertvector((u << (24 - 8 * j)) >> 24, typename Vec<W>::type);
    }
};

// How far ahead a prefetching pass (Pass) fetches its lines. For a split
// pass, 16 ran 0.6-0.85x of 32 from memory, 32 tied 64.
constexpr int kPrefetchK = 64;

// How a group's panels go through the k loop:
//  - whole: all of them at once, the hardware prefetchers left alone;
//  - split: in passes of at most 2 panels (gemm_avx2_split). A pass reads
//    every other line, a stream the hardware prefetchers of a Zen 3 core
//    did not follow: 16 MiB of weights from memory ran at 0.5-0.9x the whole
//    group's rate. Each pass fetches its own lines ahead: 1.0-1.5x;
//  - prefetched: whole, with its lines fetched ahead (gemm_avx2 on weights
//    larger than kPrefetchBytes).
enum class Pass { whole, split, prefetched };

// R rows of X times NP panels over K columns, stored in a group of GP >= NP
// panels (step lanes_per_k(P, GP, W) per k):
// acc[r][p] = start + Σ_k W[k][p] * X[r][k], where start is the bias (or zero)
// or, when from_y, what Y already holds (a previous slice of k): the sums run
// in the same order either way, so slicing k never changes a result. from_y
// is a run-time flag, not a template one: it is read before the k loop, and
// as a template flag it doubled the instances the compilers must optimise.
template <int W, int NP, int GP, int R, WeightPrecision P, bool PF>
__attribute__((always_inline)) inline void micro(const uint32_t* wp, int K, const float* X, size_t ldx, bool from_y,
                                                 const float* bias, float* Y, size_t ldy) {
    using V = typename Vec<W>::type;
    constexpr size_t step = lanes_per_k(P, GP, W);
    alignas(sizeof(V)) V acc[R][NP];
    DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) {
        V b = V{};
        if (!from_y && bias) std::memcpy(&b, bias + p * W, sizeof(V));
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) {
            if (from_y) std::memcpy(&acc[r][p], Y + r * ldy + p * W, sizeof(V));
            else acc[r][p] = b;
        }
    }
    for (int k = 0; k < K; ++k, wp += step) {
        // PF: the lines of these panels kPrefetchK k ahead (Pass, gemm).
        if constexpr (PF) {
            constexpr size_t lines = (lanes_per_k(P, NP, W) + 15) / 16;  // of 16 lanes, 64 bytes
            static_assert(lines <= 2, "prefetching passes are AVX2's: at most 4 panels of 8 f32 lanes");
            __builtin_prefetch(wp + kPrefetchK * step);
            if constexpr (lines == 2) __builtin_prefetch(wp + kPrefetchK * step + 16);
        }
        alignas(sizeof(V)) V w[NP];
        Storage<P>::template widen<W, NP>(w, wp);
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) {
            const V x = X[r * ldx + k] - V{};  // a broadcast: x - 0 is x exactly, so no add survives
            DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) acc[r][p] += w[p] * x;
        }
    }
    DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r)
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) std::memcpy(Y + r * ldy + p * W, &acc[r][p], sizeof(V));
}

// One block of n <= R rows of X: micro<n>, chosen at run time.
template <int W, int NP, int GP, int R, WeightPrecision P, bool PF>
__attribute__((always_inline)) inline void block(int n, const uint32_t* wp, int K, const float* X, size_t ldx,
                                                 bool from_y, const float* bias, float* Y, size_t ldy) {
    if constexpr (R > 0) {
        if (n == R) return micro<W, NP, GP, R, P, PF>(wp, K, X, ldx, from_y, bias, Y, ldy);
        block<W, NP, GP, R - 1, P, PF>(n, wp, K, X, ldx, from_y, bias, Y, ldy);
    }
}

// Rows of X in the fewest blocks of at most RB rows, of sizes that differ by
// at most one (10 rows with RB = 6: 5 + 5, not 6 + 4), so every block keeps
// nearly as many accumulators busy as the largest; one panel group at a time.
template <int W, int NP, int GP, int RB, WeightPrecision P, bool PF>
__attribute__((always_inline)) inline void rows(const uint32_t* wp, int K, const float* X, size_t ldx, int nrows,
                                                bool from_y, const float* bias, float* Y, size_t ldy) {
    const int blocks = (nrows + RB - 1) / RB, small = nrows / std::max(blocks, 1), big_blocks = nrows % std::max(blocks, 1);
    for (int b = 0, r = 0; b < blocks; ++b) {
        const int n = small + (b < big_blocks);
        block<W, NP, GP, RB, P, PF>(n, wp, K, X + r * ldx, ldx, from_y, bias, Y + r * ldy, ldy);
        r += n;
    }
}

// Rows of X times one slice of k of a group; split: in passes of at most 2
// panels (gemm_avx2_split), which read disjoint lanes of each k, so the
// weights still come in once.
template <int W, int NP, int RB, WeightPrecision P, Pass PASS>
__attribute__((always_inline)) inline void slice(const uint32_t* wp, int K, const float* X, size_t ldx, int nrows,
                                                 bool from_y, const float* bias, float* Y, size_t ldy) {
    if constexpr (PASS == Pass::split && NP > 2) {
        static_assert(P != WeightPrecision::int8, "int8's 4 panels are one vector of bytes: no split");
        rows<W, 2, NP, RB, P, true>(wp, K, X, ldx, nrows, from_y, bias, Y, ldy);
        rows<W, NP - 2, NP, RB, P, true>(wp + lanes_per_k(P, 2, W), K, X, ldx, nrows, from_y, bias ? bias + 2 * W : nullptr,
                                   Y + 2 * W, ldy);
    } else {
        rows<W, NP, NP, RB, P, PASS == Pass::prefetched>(wp, K, X, ldx, nrows, from_y, bias, Y, ldy);
    }
}

template <int W, int NP, int RB, WeightPrecision P, Pass PASS>
__attribute__((always_inline)) inline void group(const uint32_t* wp, int K, const float* X, size_t ldx, int nrows,
                                                 const float* bias, const float* scale, float* Y, size_t ldy) {
    using V = typename Vec<W>::type;
    // int8 sums are scaled after their last k; the bias joins then.
    const float* start = scale ? nullptr : bias;
    // With one row block, the weights stream through once: no slicing. With
    // several, slice k so a group's slice (32 KiB) stays in L1 while
    // every row block reuses it: FMA-bound instead of L2-bound. Split, in
    // slices of 16 KiB: with 32 KiB and X, the passes outgrew a 32 KiB L1
    // (100 rows, 512 x 256 weights, Zen 3: 1.26x with 16 KiB; ties to 1.12x
    // elsewhere).
    constexpr int kc = static_cast<int>(2048 / lanes_per_k(P, NP, W)) * (PASS == Pass::split ? 2 : 4);
    // One call site: each is a whole inlined copy of the kernels.
    const int slice_k = nrows <= RB ? K : kc;
    int k0 = 0;
    do {  // at least once: with K = 0, Y is the bias
        slice<W, NP, RB, P, PASS>(wp + k0 * lanes_per_k(P, NP, W), std::min(slice_k, K - k0), X + k0, ldx, nrows,
                                   k0 > 0, k0 ? nullptr : start, Y, ldy);
        k0 += slice_k;
    } while (k0 < K);
    if (!scale) return;
    for (int r = 0; r < nrows; ++r)
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) {
            V y, s, b = V{};
            std::memcpy(&y, Y + r * ldy + p * W, sizeof(V));
            std::memcpy(&s, scale + p * W, sizeof(V));
            if (bias) std::memcpy(&b, bias + p * W, sizeof(V));
            y = b + s * y;
            std::memcpy(Y + r * ldy + p * W, &y, sizeof(V));
        }
}

template <int W, int RB, WeightPrecision P, Pass PASS>
__attribute__((always_inline)) inline void gemm(const PackedMatrix& m, const float* X, size_t ldx, int nrows,
                                                const float* bias, float* Y, size_t ldy, bool last_first) {
    const int K = m.cols, groups = (m.rows + 4 * W - 1) / (4 * W);
    const float* scale = m.scale.size() ? m.scale.data() : nullptr;
    // Every group reads all of X. A long X (the input projection of a whole
    // batched sequence: 2 MiB at T = 100, B = 20, E = 256) would then come
    // from L3 once per group, so the rows go in chunks (m.x_chunk_bytes) that
    // meet every group while they are in L2 (measured on one Xeon core, 512 x
    // 256 weights, 2,000 rows: 140 GFLOP/s unchunked, 165-170 for up to 200
    // rows). Equal chunks: weights re-read per chunk are read as few times as
    // the size allows. A row's sums do not depend on its chunk.
    const int most = std::max(RB, static_cast<int>(m.x_chunk_bytes / (sizeof(float) * K)) / RB * RB);
    const int chunks = std::max(1, (nrows + most - 1) / most);
    const int chunk = ((nrows + chunks - 1) / chunks + RB - 1) / RB * RB;
    for (int r0 = 0; r0 < nrows; r0 += chunk) {
        const int n = std::min(chunk, nrows - r0);
        const float* x = X + static_cast<size_t>(r0) * ldx;
        float* y = Y + static_cast<size_t>(r0) * ldy;
        for (int i = 0; i < groups; ++i) {
            const int g = last_first ? groups - 1 - i : i, g0 = g * 4 * W;
            // Every group but the last holds 4 panels.
            const uint32_t* wp = reinterpret_cast<const uint32_t*>(m.data.data()) + lanes_per_k(P, 4, W) * K * g;
            const float* b = bias ? bias + g0 : nullptr;
            const float* s = scale ? scale + g0 : nullptr;
            const int np = std::min(4, (m.rows - g0) / W);
            switch (np) {
                case 4: group<W, 4, RB, P, PASS>(wp, K, x, ldx, n, b, s, y + g0, ldy); break;
                case 3: group<W, 3, RB, P, PASS>(wp, K, x, ldx, n, b, s, y + g0, ldy); break;
                case 2: group<W, 2, RB, P, PASS>(wp, K, x, ldx, n, b, s, y + g0, ldy); break;
                default: group<W, 1, RB, P, PASS>(wp, K, x, ldx, n, b, s, y + g0, ldy); break;
            }
        }
    }
}

// One entry per ISA and storage type (gemm_packed picks). Not one per ISA
// with the storage type switched inside: a compiler's time on a function
// grows faster than its size, and clang -O1 with ASan and fuzzer coverage
// spent 2 minutes on each whole-ISA entry (8 of the 10 the fuzz build took).
#ifdef DEEPRNN_X86
// Up to 6 rows x 4 panels = 24 of AVX-512's 32 registers hold accumulators
// (4 rows reached 75% of the FMA peak on batched products, 6 rows 85-90%).
template <WeightPrecision P>
DEEPRNN_TARGET("avx512f,fma")
void gemm_avx512(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* b, float* Y, size_t ldy,
                 bool last_first) {
    gemm<16, 6, P, Pass::whole>(m, X, ldx, n, b, Y, ldy, last_first);
}
// 2 rows x 4 panels = 8 of AVX2's 16 registers.
template <WeightPrecision P, Pass PASS>
DEEPRNN_TARGET("avx2,fma")
void gemm_avx2(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* b, float* Y, size_t ldy,
               bool last_first) {
    gemm<8, 2, P, PASS>(m, X, ldx, n, b, Y, ldy, last_first);
}
// With 4 panels, the sums of 2 rows are 8 multiply-adds in flight, where two
// FMA pipes of latency 4-5 need 8-10: all of a group's sums for a third row
// would not fit AVX2's 16 registers beside the 4 weights and a broadcast.
// More rows take a group in two passes of 2 panels and 6 rows: 12 sums in
// flight, 2 weights, a broadcast (the usual 6 x 16 AVX2 kernel). On a Zen 3
// core (FMA peak 92-95 GFLOP/s), medians of 7 alternated runs against the
// 2-row blocks: 0.97-1.67x with 512 x 256 weights (in L2) and 2048 x 256 (in
// L3), 5 to 100 rows; 1.0-1.5x with 4096 x 1024 (16 MiB, from memory). 1 or
// 2 rows, 2 panels a pass, ran 0.6x, so they stay in gemm_avx2. 3 rows tie
// (0.79-1.14x over two sessions and three shapes). Not int8 (one vector of
// bytes holds its 4 panels).
template <WeightPrecision P>
DEEPRNN_TARGET("avx2,fma")
void gemm_avx2_split(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* b, float* Y, size_t ldy,
                     bool last_first) {
    gemm<8, 6, P, Pass::split>(m, X, ldx, n, b, Y, ldy, last_first);
}
#endif

#ifdef DEEPRNN_X86
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's intrinsics start from _mm512_undefined_*(), which its own
// -Wuninitialized then reports at every use (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// How one row of X was quantised: x = (xq - 128) * s * unscale. unscale is 1,
// or 2^-100 for a row whose max |x| is below 2^-100 (tiny and denormal
// values): such a row is first scaled up by 2^100, which is exact, so that
// 127 / max|x| stays finite (it overflows below ~3.7e-37) and s stays a
// normal float; the product is scaled back once, in its last rounding.
struct RowScale {
    float s, unscale;
};
constexpr float kTinyRow = 0x1p-100f, kTinyUp = 0x1p100f;

// Row r of X as unsigned bytes xq = round(x / s) + 128 with s = max|x| / 127
// (K padded to a multiple of 4). s is NaN if the row has NaN or Inf (so the
// outputs are NaN), 0 for an all-zero row.
DEEPRNN_TARGET("avx512f")
RowScale quantize_row(const float* x, int K, unsigned char* xq) {
    __m512 amax = _mm512_setzero_ps(), poison = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        const __m512 v = _mm512_loadu_ps(x + k);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
        poison = _mm512_add_ps(poison, _mm512_mul_ps(v, _mm512_setzero_ps()));  // NaN for NaN or Inf
    }
    float top = _mm512_reduce_max_ps(amax), bad = _mm512_reduce_add_ps(poison);
    for (int t = k; t < K; ++t) {
        top = std::max(top, std::fabs(x[t]));
        bad += x[t] * 0.0f;
    }
    const int K4 = (K + 3) / 4 * 4;
    if (!(bad == 0.0f) || top == 0.0f) {
        std::memset(xq, 128, K4);
        return {bad == 0.0f ? 0.0f : NAN, 1.0f};
    }
    const bool tiny = top < kTinyRow;
    const float up = tiny ? kTinyUp : 1.0f;  // x * 1 is x: other rows quantise exactly as before
    top *= up;
    const float s = top / 127.0f, inv = 127.0f / top;
    const __m512 vup = _mm512_set1_ps(up), vinv = _mm512_set1_ps(inv);
    const __m512i offset = _mm512_set1_epi32(128);
    for (k = 0; k + 16 <= K; k += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), vup), vinv);
        const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), offset);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + k), _mm512_cvtepi32_epi8(q));
    }
    for (; k < K4; ++k) xq[k] = k < K ? static_cast<unsigned char>(std::nearbyint(x[k] * up * inv) + 128) : 128;
    return {s, tiny ? 1.0f / kTinyUp : 1.0f};
}

// The dot-product kernels take rows of X kDotRowBlock at a time, each block
// one pass over the weights with R x NP accumulators, the last block of 1-3
// rows in one pass too (it was one pass per row), each block size reached
// through one switch. GCC 12 compiles the same block code well or badly
// depending on the code around it and on -march: it folds a weight load
// into every dot product that uses it (R loads of a vector instead of one),
// and a Zen 4 core loads one 64-byte vector a cycle, so 20 loads to 16 dot
// products cap the block at 4/5 of the peak. Both blocks are therefore
// functions of their own (noinline), and the VNNI block spells its dot
// product in asm, whose operands are registers: with the intrinsic, GCC
// folded the loads with -march=native, and an empty asm holding the weights
// in registers made it spill them to the stack instead.
// On one Zen 4 core, 1,024 x 256 weights in L2, GFLOP/s: bf16 from 4 rows
// on 226-229 built with -march=native (98% of 2x the f32 FMA peak; 181
// before) and 226-228 without (210-229 before), 2-3 rows 178-217 (131-140);
// int8 (2026-12-05, the asm against the intrinsic inlined) from 4 rows
// 429-434 with -march=native (345-352) and 431-437 without (415-433), 2 rows
// 401-416 (336-343), 3 rows 345-351 (349-350), 1 row 215-218 (204-218).
constexpr int kDotRowBlock = 4;

template <int N>
using Count = std::integral_constant<int, N>;

// Calls body(Count<NP>{}) for NP = min(n, 4): a dot kernel's panel groups
// and row blocks are each 1-4 wide, a template parameter of the block.
template <typename Body>
inline void with_count(int n, Body&& body) {
    switch (std::min(n, 4)) {
        case 4: body(Count<4>{}); break;
        case 3: body(Count<3>{}); break;
        case 2: body(Count<2>{}); break;
        default: body(Count<1>{}); break;
    }
}

// Rows [0, n) of X a block at a time: block(Count<R>{}, first row).
template <typename Block>
inline void for_row_blocks(int n, Block&& block) {
    for (int r = 0; r < n; r += kDotRowBlock) with_count(n - r, [&](auto rows) { block(rows, r); });
}

// One panel's last rounding: y = bias + scale_row * s_x * (Σ q·xq - 128 Σ q)
// (times the row's unscale, before the bias, for a tiny row). Shared by the
// VNNI block and the int8 fold, so both give the same bits.
struct VnniPanel {
    __m512i offset;  // 128 * Σ_k q per row
    __m512 s, b;
    DEEPRNN_TARGET("avx512f")
    VnniPanel(const float* scale, const int32_t* row_sum, const float* bias)
        : offset(_mm512_slli_epi32(_mm512_loadu_si512(row_sum), 7)),
          s(_mm512_loadu_ps(scale)),
          b(bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps()) {}
    DEEPRNN_TARGET("avx512f")
    void store(__m512i acc, RowScale xs, float* y) const {
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, offset));
        const __m512 sx = _mm512_mul_ps(s, _mm512_set1_ps(xs.s));
        _mm512_storeu_ps(y, xs.unscale == 1.0f ? _mm512_fmadd_ps(sx, dot, b)
                                                : _mm512_fmadd_ps(_mm512_mul_ps(sx, dot), _mm512_set1_ps(xs.unscale), b));
    }
};

// R rows of quantised X times one group of NP panels: exact int32 sums, then
// y = bias + scale_row * s_x * (Σ q·(xq - 128)), the -128 folded in via row_sum
// (times the row's unscale, before the bias, for a tiny row).
template <int NP, int R>
DEEPRNN_TARGET("avx512f,avx512vnni")
__attribute__((noinline)) void vnni_block(const unsigned char* wp, int K4, const unsigned char* xq, size_t ldq, const RowScale* xs,
                       const float* bias, const float* scale, const int32_t* row_sum, float* Y, size_t ldy) {
    __m512i acc[R][NP];
    DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r)
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_si512();
    for (int k = 0; k < K4; k += 4, wp += NP * 64) {
        __m512i w[NP];
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) w[p] = _mm512_loadu_si512(wp + p * 64);
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) {
            int32_t four;
            std::memcpy(&four, xq + r * ldq + k, 4);
            const __m512i x = _mm512_set1_epi32(four);
            DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p)  // acc += x · w (vpdpbusd), all in registers
                __asm__("vpdpbusd %2, %1, %0" : "+v"(acc[r][p]) : "v"(x), "v"(w[p]));
        }
    }
    DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) {
        const VnniPanel panel(scale + p * 16, row_sum + p * 16, bias ? bias + p * 16 : nullptr);
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) panel.store(acc[r][p], xs[r], Y + r * ldy + p * 16);
    }
}

DEEPRNN_TARGET("avx512f,avx512vnni")
void gemm_vnni(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* bias, float* Y, size_t ldy) {
    const int K = m.cols, K4 = static_cast<int>(dot_row_bytes(WeightPrecision::int8, K));
    // X quantised a block of rows at a time on the stack (dot_kernel_fits):
    // no run allocates, on any thread. A row's sums do not depend on its block.
    alignas(64) unsigned char xq[kDotBlockBytes];
    RowScale xs[kDotBlockRows];
    const int block = static_cast<int>(std::min<size_t>(kDotBlockRows, kDotBlockBytes / K4));
    for (int r0 = 0; r0 < n; r0 += block) {
        const int rows = std::min(block, n - r0);
        for (int r = 0; r < rows; ++r) xs[r] = quantize_row(X + (r0 + r) * ldx, K, xq + static_cast<size_t>(r) * K4);
        const unsigned char* wp = m.data.data();
        float* Yb = Y + r0 * ldy;
        for (int g0 = 0; g0 < m.rows; g0 += 64) {
            const float* b = bias ? bias + g0 : nullptr;
            const float* s = m.scale.data() + g0;
            const int32_t* rs = m.row_sum.data() + g0;
            const int np = std::min(4, (m.rows - g0) / 16);
            with_count(np, [&](auto NP) {
                for_row_blocks(rows, [&](auto R, int r) {
                    vnni_block<NP, R>(wp, K4, xq + r * K4, K4, xs + r, b, s, rs, Yb + g0 + r * ldy, ldy);
                });
            });
            wp += static_cast<size_t>(np) * 16 * K4;
        }
    }
}
// Row of X rounded to bf16 (nearest even), K padded to even with zeros.
DEEPRNN_TARGET("avx512f,avx512bf16")
void round_row_bf16(const float* x, int K, uint16_t* out) {
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
        std::memcpy(out + k, &v, 64);
    }
    for (; k < K; ++k) out[k] = static_cast<uint16_t>(to_bf16(x[k]));
    if (K & 1) out[K] = 0;
}

// The dot-product folds (gemv_with_projection on VNNI or AVX512_BF16
// weights): one unit is one group of NH panels of Wh times h (one converted
// row) and NX (0 or 1) panel of Wx times the chunk's kProjectAhead rows, in
// one pass over k. The recurrent product alone reads a 64-byte vector from
// L2 per dot product and leaves the dot unit half idle; the projection's
// vector serves 8 dot products from registers and fills it. One Wx panel
// per unit, not two as in the f32 fold: with two, int8 gained 1.14-1.23x
// over the plain pair on a Zen 4 core, with one 1.24-1.31x (harness,
// 384-1,024 rows x 128-256). int8 and bf16 share the layout (4 bytes of a
// row per dot product and panel) and differ in the instruction, where the
// projection's sums start and their last rounding: DotFold's two policies.
// Where a fold unit's sums go: its Wh panels' rows (no bias) times h, and
// its Wx panel's rows times each of the chunk's rows.
struct FoldOut {
    const float* h_scale;  // int8 only (VnniPanel), like the other int8 fields
    const int32_t* h_row_sum;
    RowScale hs;
    float* yh;
    const float *x_scale, *x_bias;
    const int32_t* x_row_sum;
    const RowScale* xs;
    float* yx;
    size_t ldy;
};

// int8 on VNNI: exact integer sums from zero, scaled once at the end (VnniPanel).
struct VnniFold {
    using Acc = __m512i;
    static constexpr WeightPrecision precision = WeightPrecision::int8;
    DEEPRNN_TARGET("avx512f,avx512vnni")
    __attribute__((always_inline)) static void dot(__m512i& acc, __m512i x, __m512i w) {
        __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));  // asm: GCC would fold each load into each use
    }
    DEEPRNN_TARGET("avx512f") __attribute__((always_inline)) static __m512i x_start(const float*) { return _mm512_setzero_si512(); }
    template <int NH>
    DEEPRNN_TARGET("avx512f")
    __attribute__((always_inline)) static void store(const __m512i* ah, const __m512i* ax, bool nx, const FoldOut& out) {
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NH; ++p)
            VnniPanel(out.h_scale + p * 16, out.h_row_sum + p * 16, nullptr).store(ah[p], out.hs, out.yh + p * 16);
        if (!nx) return;
        const VnniPanel panel(out.x_scale, out.x_row_sum, out.x_bias);
        DEEPRNN_UNROLL_ALL for (int r = 0; r < kProjectAhead; ++r) panel.store(ax[r], out.xs[r], out.yx + r * out.ldy);
    }
};

// bf16 on AVX512_BF16: float sums, the projection's from its bias, as bf16_block's.
struct Bf16Fold {
    using Acc = __m512;
    static constexpr WeightPrecision precision = WeightPrecision::bf16;
    DEEPRNN_TARGET("avx512f,avx512bf16")
    __attribute__((always_inline)) static void dot(__m512& acc, __m512i x, __m512i w) {
        __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
    }
    DEEPRNN_TARGET("avx512f") __attribute__((always_inline)) static __m512 x_start(const float* bias) { return _mm512_loadu_ps(bias); }
    template <int NH>
    DEEPRNN_TARGET("avx512f")
    __attribute__((always_inline)) static void store(const __m512* ah, const __m512* ax, bool nx, const FoldOut& out) {
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NH; ++p) _mm512_storeu_ps(out.yh + p * 16, ah[p]);
        if (!nx) return;
        DEEPRNN_UNROLL_ALL for (int r = 0; r < kProjectAhead; ++r) _mm512_storeu_ps(out.yx + r * out.ldy, ax[r]);
    }
};

// acc[p] += panel p of a group of N (stride N * 64 per 4 bytes of a row)
// times x4, the same 4 bytes of h for every panel.
template <typename Dot, int N>
DEEPRNN_TARGET("avx512f,avx512vnni,avx512bf16")
__attribute__((always_inline)) inline void group_dots(typename Dot::Acc (&acc)[N], const unsigned char* w, const unsigned char* x4) {
    int32_t four;
    std::memcpy(&four, x4, 4);
    const __m512i x = _mm512_set1_epi32(four);
    DEEPRNN_UNROLL_ALL for (int p = 0; p < N; ++p) Dot::dot(acc[p], x, _mm512_loadu_si512(w + p * 64));
}

// acc[r] += one panel's 4 bytes of k (w) times row r's of the chunk (xa4: R x 4 bytes).
template <typename Dot>
DEEPRNN_TARGET("avx512f,avx512vnni,avx512bf16")
__attribute__((always_inline)) inline void chunk_dots(typename Dot::Acc (&acc)[kProjectAhead], const unsigned char* w,
                                                     const unsigned char* xa4) {
    const __m512i v = _mm512_loadu_si512(w);
    DEEPRNN_UNROLL_ALL for (int r = 0; r < kProjectAhead; ++r) {
        int32_t four;
        std::memcpy(&four, xa4 + r * 4, 4);
        Dot::dot(acc[r], _mm512_set1_epi32(four), v);
    }
}

template <typename Dot, int NH, int NX>
DEEPRNN_TARGET("avx512f,avx512vnni,avx512bf16")
__attribute__((noinline)) void dot_fold_unit(const unsigned char* wh, int KBh, const unsigned char* hx, const unsigned char* wx,
                                             size_t wx_step, int KBx, const unsigned char* xa, const FoldOut& out) {
    constexpr int R = kProjectAhead;
    // Every accumulator in a register: with the products in lambdas, or
    // `both` from std::min (below), GCC 12 kept them all on the stack.
    typename Dot::Acc ah[NH > 0 ? NH : 1], ax[R];
    DEEPRNN_UNROLL_ALL for (int p = 0; p < NH; ++p) ah[p] = typename Dot::Acc{};
    DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) ax[r] = NX ? Dot::x_start(out.x_bias) : typename Dot::Acc{};
    // k where both run, then where only one does (E < H: Wh alone; the kernel also allows E > H).
    const int both = NX == 0 ? 0 : KBh < KBx ? KBh : KBx;
    int k = 0;
    for (; k < both; k += 4, wh += NH * 64, wx += wx_step) {
        if constexpr (NH > 0) group_dots<Dot, NH>(ah, wh, hx + k);
        chunk_dots<Dot>(ax, wx, xa + k * R);
    }
    if constexpr (NH > 0)
        for (; k < KBh; k += 4, wh += NH * 64) group_dots<Dot, NH>(ah, wh, hx + k);
    if constexpr (NX > 0)
        for (k = both; k < KBx; k += 4, wx += wx_step) chunk_dots<Dot>(ax, wx, xa + k * R);
    Dot::template store<NH>(ah, ax, NX > 0, out);
}

// One row of X as the dot kernels read it: quantised (int8, its scale
// returned) or rounded to bf16 (a unit scale), KB = dot_row_bytes bytes.
DEEPRNN_TARGET("avx512f,avx512bf16")
RowScale convert_row(WeightPrecision precision, const float* x, int K, unsigned char* out) {
    if (precision == WeightPrecision::int8) return quantize_row(x, K, out);
    round_row_bf16(x, K, reinterpret_cast<uint16_t*>(out));
    return {1.0f, 1.0f};
}

template <typename Dot>
DEEPRNN_TARGET("avx512f,avx512vnni,avx512bf16")
void gemv_with_projection_dot(const PackedMatrix& Wh, const float* h, float* Yh, bool last_first, const PackedMatrix& Wx,
                              int p0, int p1, const float* ahead, const float* bias, float* Yx, size_t ldy) {
    constexpr int R = kProjectAhead;
    constexpr bool int8 = Dot::precision == WeightPrecision::int8;
    const int KBh = static_cast<int>(dot_row_bytes(Dot::precision, Wh.cols));
    const int KBx = static_cast<int>(dot_row_bytes(Dot::precision, Wx.cols));
    alignas(64) unsigned char hx[kDotBlockBytes / 4];  // KB <= kDotBlockBytes / 4 (dot_kernel_fits)
    const RowScale hs = convert_row(Dot::precision, h, Wh.cols, hx);
    const auto* xa = reinterpret_cast<const unsigned char*>(ahead);
    RowScale xs[R];
    std::memcpy(xs, xa + static_cast<size_t>(KBx) * R, sizeof xs);
    const int panels = Wh.rows / 16, groups = (panels + 3) / 4;
    int px = p0;
    for (int i = 0; i < groups || px < p1; ++i) {
        const int g = i < groups ? (last_first ? groups - 1 - i : i) : -1;  // alternate ends, as gemm_packed does
        const int nh = g < 0 ? 0 : std::min(4, panels - 4 * g), nx = px < p1 ? 1 : 0;
        const unsigned char* wh = Wh.data.data() + static_cast<size_t>(std::max(g, 0)) * 64 * KBh;
        const int gx = nx ? px / 4 : 0;  // Wx's panels: groups of 4, k-major inside a group
        const unsigned char* wx = nx ? Wx.data.data() + static_cast<size_t>(gx) * 64 * KBx + (px % 4) * 64 : nullptr;
        const size_t wx_step = static_cast<size_t>(std::min(4, panels - 4 * gx)) * 64;
        const int h0 = 4 * std::max(g, 0) * 16, x0 = px * 16;  // first row of each
        const FoldOut out{int8 ? Wh.scale.data() + h0 : nullptr, int8 ? Wh.row_sum.data() + h0 : nullptr, hs, Yh + h0,
                          int8 && nx ? Wx.scale.data() + x0 : nullptr, nx ? bias + x0 : nullptr,
                          int8 && nx ? Wx.row_sum.data() + x0 : nullptr, xs, Yx + x0, ldy};
        const auto unit = [&](auto NH) {
            if (nx) dot_fold_unit<Dot, NH, 1>(wh, KBh, hx, wx, wx_step, KBx, xa, out);
            else dot_fold_unit<Dot, NH, 0>(wh, KBh, hx, nullptr, 0, 0, xa, out);
        };
        if (nh == 0) unit(Count<0>{});
        else with_count(nh, unit);
        px += nx;
    }
}

// The chunk's rows converted as the dot kernels convert them, interleaved
// [4 bytes of k][row] 4 bytes each, then their RowScales (int8's; bf16's are 1).
DEEPRNN_TARGET("avx512f,avx512bf16")
void pack_ahead_dot(const PackedMatrix& Wx, const float* X, size_t ldx, float* ahead) {
    constexpr int R = kProjectAhead;
    const WeightPrecision precision = Wx.vnni ? WeightPrecision::int8 : WeightPrecision::bf16;
    const size_t KB = dot_row_bytes(precision, Wx.cols);
    auto* xa = reinterpret_cast<unsigned char*>(ahead);
    alignas(64) unsigned char row[kDotBlockBytes / 4];
    RowScale xs[R];
    for (int r = 0; r < R; ++r) {
        xs[r] = convert_row(precision, X + r * ldx, Wx.cols, row);
        for (size_t k = 0; k < KB; k += 4) std::memcpy(xa + k * R + r * 4, row + k, 4);
    }
    std::memcpy(xa + KB * R, xs, sizeof xs);
}

template <int NP, int R>
DEEPRNN_TARGET("avx512f,avx512bf16")
__attribute__((noinline)) void bf16_block(const unsigned char* wp, int K2, const uint16_t* xb, size_t ldb, const float* bias, float* Y,
                       size_t ldy) {
    __m512 acc[R][NP];
    DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) {
        const __m512 b = bias ? _mm512_loadu_ps(bias + p * 16) : _mm512_setzero_ps();
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) acc[r][p] = b;
    }
    for (int k = 0; k < K2; ++k, wp += NP * 64) {
        __m512bh w[NP];
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) w[p] = (__m512bh)_mm512_loadu_si512(wp + p * 64);
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) {
            int32_t pair;
            std::memcpy(&pair, xb + r * ldb + 2 * k, 4);
            const __m512bh x = (__m512bh)_mm512_set1_epi32(pair);
            DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], x, w[p]);
        }
    }
    DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r)
        DEEPRNN_UNROLL_ALL for (int p = 0; p < NP; ++p) _mm512_storeu_ps(Y + r * ldy + p * 16, acc[r][p]);
}

DEEPRNN_TARGET("avx512f,avx512bf16")
void gemm_bf16_dot(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* bias, float* Y, size_t ldy) {
    const int K = m.cols, K2 = (K + 1) / 2;
    // X rounded a block of rows at a time on the stack, as gemm_vnni's.
    alignas(64) uint16_t xb[kDotBlockBytes / sizeof(uint16_t)];
    const int block = static_cast<int>(std::min<size_t>(kDotBlockRows, kDotBlockBytes / dot_row_bytes(WeightPrecision::bf16, K)));
    for (int r0 = 0; r0 < n; r0 += block) {
        const int rows = std::min(block, n - r0);
        for (int r = 0; r < rows; ++r) round_row_bf16(X + (r0 + r) * ldx, K, xb + static_cast<size_t>(r) * 2 * K2);
        const unsigned char* wp = m.data.data();
        float* Yb = Y + r0 * ldy;
        for (int g0 = 0; g0 < m.rows; g0 += 64) {
            const float* b = bias ? bias + g0 : nullptr;
            const int np = std::min(4, (m.rows - g0) / 16);
            with_count(np, [&](auto NP) {
                for_row_blocks(rows, [&](auto R, int r) {
                    bf16_block<NP, R>(wp, K2, xb + r * 2 * K2, 2 * K2, b, Yb + g0 + r * ldy, ldy);
                });
            });
            wp += static_cast<size_t>(np) * 64 * K2;
        }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#ifdef DEEPRNN_X86
// One k of the unit's Wh panels (NG groups of PG) times h[k]. The two halves
// are always-inline functions, not lambdas: a lambda is a function of its own
// that need not be inlined (-O0), and it would not inherit the caller's
// fp-contract=fast, so its a*b+c would round twice where micro's fuses.
template <int W, int NG, int PG>
__attribute__((always_inline)) inline void unit_gemv_k(typename Vec<W>::type* ah, const float* const* wh, const float* h,
                                                       int k) {
    using V = typename Vec<W>::type;
    const V x = h[k] - V{};
    DEEPRNN_UNROLL_ALL for (int g = 0; g < NG; ++g)
        DEEPRNN_UNROLL_ALL for (int p = 0; p < PG; ++p) {
            V w;
            std::memcpy(&w, wh[g] + static_cast<size_t>(k) * PG * W + p * W, sizeof(V));
            ah[g * PG + p] += w * x;
        }
}

// One k of the unit's NX Wx panels (at wx[i], sx floats per k) times the
// kProjectAhead inputs. Each input is broadcast once for all NX panels: with
// one panel a k took a broadcast per multiply-add, and the step's loads, not
// its multiply-adds, bounded the fold where two FMA ports share two load ports.
template <int W, int NX>
__attribute__((always_inline)) inline void unit_project_k(typename Vec<W>::type (*ax)[NX], const float* const* wx, size_t sx,
                                                          const float* Xt, int k) {
    using V = typename Vec<W>::type;
    V w[NX];
    DEEPRNN_UNROLL_ALL for (int i = 0; i < NX; ++i) std::memcpy(&w[i], wx[i] + k * sx, sizeof(V));
    DEEPRNN_UNROLL_ALL for (int r = 0; r < kProjectAhead; ++r) {
        const V x = Xt[k * kProjectAhead + r] - V{};
        DEEPRNN_UNROLL_ALL for (int i = 0; i < NX; ++i) ax[r][i] += w[i] * x;
    }
}

// One unit of gemv_with_projection: NH panels of Wh (one group of NH <= 4, or
// two groups of 4 at wh[0], wh[1]) times h, and NX <= 2 panels of Wx (at
// wx[i], sx floats per k) times kProjectAhead rows of X, stored k-major
// (Xt[k][r]: one 32-byte read per k; rows of X a multiple of 4 KiB apart
// would all fall into one L1 set). The two share the k loop up to the
// shorter K; the rest of the longer runs alone. Every sum runs over k in
// order from its start (0 or the bias), as gemm_packed's do: folding never
// changes a bit.
template <int W, int NH, int NX>
__attribute__((always_inline)) inline void project_unit(const float* const* wh, int Kh, const float* h, float* yh,
                                                        const float* const* wx, size_t sx, int Kx, const float* Xt,
                                                        const float* const* bias, float* const* yx, size_t ldy) {
    using V = typename Vec<W>::type;
    constexpr int R = kProjectAhead, NG = NH > 4 ? 2 : 1, PG = NH > 4 ? 4 : NH;  // groups, panels per group
    constexpr int AX = NX > 0 ? NX : 1;
    alignas(sizeof(V)) V ah[NH > 0 ? NH : 1], ax[R][AX];
    DEEPRNN_UNROLL_ALL for (int p = 0; p < NH; ++p) ah[p] = V{};
    DEEPRNN_UNROLL_ALL for (int i = 0; i < NX; ++i) {
        V b;
        std::memcpy(&b, bias[i], sizeof(V));
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) ax[r][i] = b;
    }
    const int both = NH == 0 ? 0 : NX > 0 ? std::min(Kh, Kx) : Kh;
    int k = 0;
    for (; k < both; ++k) {
        if constexpr (NH > 0) unit_gemv_k<W, NG, PG>(ah, wh, h, k);
        if constexpr (NX > 0) unit_project_k<W, NX>(ax, wx, sx, Xt, k);
    }
    if constexpr (NH > 0)
        for (int j = k; j < Kh; ++j) unit_gemv_k<W, NG, PG>(ah, wh, h, j);
    if constexpr (NX > 0)
        for (int j = k; j < Kx; ++j) unit_project_k<W, NX>(ax, wx, sx, Xt, j);
    DEEPRNN_UNROLL_ALL for (int g = 0; g < NG; ++g)
        for (int p = 0; p < PG && NH > 0; ++p) std::memcpy(yh + (g * 4 + p) * W, &ah[g * PG + p], sizeof(V));
    DEEPRNN_UNROLL_ALL for (int i = 0; i < NX; ++i)
        DEEPRNN_UNROLL_ALL for (int r = 0; r < R; ++r) std::memcpy(yx[i] + r * ldy, &ax[r][i], sizeof(V));
}

template <int W, int NX>
__attribute__((always_inline)) inline void project_unit_any(int nh, const float* const* wh, int Kh, const float* h,
                                                            float* yh, const float* const* wx, size_t sx, int Kx,
                                                            const float* Xt, const float* const* bias, float* const* yx,
                                                            size_t ldy) {
    switch (nh) {
        case 8: return project_unit<W, 8, NX>(wh, Kh, h, yh, wx, sx, Kx, Xt, bias, yx, ldy);
        case 4: return project_unit<W, 4, NX>(wh, Kh, h, yh, wx, sx, Kx, Xt, bias, yx, ldy);
        case 3: return project_unit<W, 3, NX>(wh, Kh, h, yh, wx, sx, Kx, Xt, bias, yx, ldy);
        case 2: return project_unit<W, 2, NX>(wh, Kh, h, yh, wx, sx, Kx, Xt, bias, yx, ldy);
        case 1: return project_unit<W, 1, NX>(wh, Kh, h, yh, wx, sx, Kx, Xt, bias, yx, ldy);
        default: if constexpr (NX > 0) return project_unit<W, 0, NX>(wh, Kh, h, yh, wx, sx, Kx, Xt, bias, yx, ldy);
    }
}

// Units of Wh: pairs of whole groups (8 panels), then a whole group left
// over, then the last group if partial; unit i goes with Wx's panel p0 + i.
DEEPRNN_TARGET("avx512f,fma")
void gemv_with_projection_avx512(const PackedMatrix& Wh, const float* h, float* Yh, bool last_first,
                                 const PackedMatrix& Wx, int p0, int p1, const float* Xt, const float* bias, float* Yx,
                                 size_t ldy) {
    constexpr int W = 16;
    const int panels = Wh.rows / W, whole = panels / 4;
    const float* const wh0 = reinterpret_cast<const float*>(Wh.data.data());
    const float* const wx0 = reinterpret_cast<const float*>(Wx.data.data());
    const int pairs = whole / 2, units = pairs + whole % 2 + (panels > whole * 4);
    auto unit = [&](int u, int& first, int& count) {
        if (u < pairs) first = 8 * u, count = 8;
        else if (u < whole - pairs) first = 8 * pairs, count = 4;
        else first = whole * 4, count = panels - whole * 4;
    };
    // A Wx panel's k-th vector: groups of 4 panels, k-major inside a group.
    auto wx_panel = [&](int px, size_t& stride) {
        const int gx = px / 4;
        stride = static_cast<size_t>(std::min(4, Wx.rows / W - gx * 4)) * W;
        return wx0 + static_cast<size_t>(gx) * 4 * W * Wx.cols + (px % 4) * W;
    };
    // Wx's panels in pairs, one pair per unit (one panel alone where the next
    // is in a group of another stride), from p0 on, until p1.
    int px = p0;
    for (int i = 0; i < units || px < p1; ++i) {
        const int u = last_first ? units - 1 - i : i;  // alternate ends, as gemm_packed does
        const float* wh[2] = {nullptr, nullptr};
        float* yh = nullptr;
        int nh = 0;
        if (i < units) {
            int fp = 0;
            unit(u, fp, nh);
            wh[0] = wh0 + static_cast<size_t>(fp) * W * Wh.cols;  // whole groups before it: 4 panels each
            wh[1] = wh[0] + static_cast<size_t>(4) * W * Wh.cols;
            yh = Yh + fp * W;
        }
        const float* wx[2] = {nullptr, nullptr};
        const float* b[2] = {nullptr, nullptr};
        float* yx[2] = {nullptr, nullptr};
        size_t sx = 0, next_sx = 0;
        int nx = 0;
        if (px < p1) {
            const float* next = px + 1 < p1 ? wx_panel(px + 1, next_sx) : nullptr;
            wx[0] = wx_panel(px, sx);
            nx = next && next_sx == sx ? 2 : 1;
            if (nx == 2) wx[1] = next;
            for (int k = 0; k < nx; ++k) b[k] = bias + (px + k) * W, yx[k] = Yx + (px + k) * W;
            px += nx;
        }
        switch (nx) {
            case 2: project_unit_any<W, 2>(nh, wh, Wh.cols, h, yh, wx, sx, Wx.cols, Xt, b, yx, ldy); break;
            case 1: project_unit_any<W, 1>(nh, wh, Wh.cols, h, yh, wx, sx, Wx.cols, Xt, b, yx, ldy); break;
            default: project_unit_any<W, 0>(nh, wh, Wh.cols, h, yh, wx, sx, 0, Xt, b, yx, ldy); break;
        }
    }
}
#endif

template <WeightPrecision P>
void gemm_generic(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* b, float* Y, size_t ldy,
                  bool last_first) {
    gemm<4, 2, P, Pass::whole>(m, X, ldx, n, b, Y, ldy, last_first);
}

template <WeightPrecision P>
void gemm_stored(const PackedMatrix& W, const float* X, size_t ldx, int nrows, const float* bias, float* Y,
                 size_t ldy, bool last_first) {
    switch (W.isa) {
#ifdef DEEPRNN_X86
        case Isa::avx512: return gemm_avx512<P>(W, X, ldx, nrows, bias, Y, ldy, last_first);
        case Isa::avx2:
            if constexpr (P != WeightPrecision::int8)
                if (nrows > 2) return gemm_avx2_split<P>(W, X, ldx, nrows, bias, Y, ldy, last_first);
            if (W.bytes() > kPrefetchBytes) return gemm_avx2<P, Pass::prefetched>(W, X, ldx, nrows, bias, Y, ldy, last_first);
            return gemm_avx2<P, Pass::whole>(W, X, ldx, nrows, bias, Y, ldy, last_first);
#endif
        default: return gemm_generic<P>(W, X, ldx, nrows, bias, Y, ldy, last_first);
    }
}

}  // namespace

void gemm_packed(const PackedMatrix& W, const float* X, size_t ldx, int nrows, const float* bias, float* Y,
                 size_t ldy, bool last_first) {
#ifdef DEEPRNN_X86
    if (W.vnni) return gemm_vnni(W, X, ldx, nrows, bias, Y, ldy);
    if (W.dot_bf16) return gemm_bf16_dot(W, X, ldx, nrows, bias, Y, ldy);
#endif
    switch (W.precision) {
        case WeightPrecision::bf16: return gemm_stored<WeightPrecision::bf16>(W, X, ldx, nrows, bias, Y, ldy, last_first);
        case WeightPrecision::int8: return gemm_stored<WeightPrecision::int8>(W, X, ldx, nrows, bias, Y, ldy, last_first);
        default: return gemm_stored<WeightPrecision::f32>(W, X, ldx, nrows, bias, Y, ldy, last_first);
    }
}

bool folds_projection(const PackedMatrix& Wh, const PackedMatrix& Wx) {
    auto plain = [](const PackedMatrix& m) {
        return m.isa == Isa::avx512 && m.precision == WeightPrecision::f32 && !m.vnni && !m.dot_bf16;
    };
#ifdef DEEPRNN_X86
    return Wx.rows == Wh.rows && ((plain(Wh) && plain(Wx)) || (Wh.vnni && Wx.vnni) || (Wh.dot_bf16 && Wx.dot_bf16));
#else
    (void)plain;
    return false;
#endif
}

void pack_ahead(const PackedMatrix& Wx, const float* X, size_t ldx, float* ahead) {
#ifdef DEEPRNN_X86
    if (Wx.vnni || Wx.dot_bf16) return pack_ahead_dot(Wx, X, ldx, ahead);
#endif
    constexpr int R = kProjectAhead;
    for (int k = 0; k < Wx.cols; ++k, ahead += R)  // writing in order takes half the time of reading in order
        for (int r = 0; r < R; ++r) ahead[r] = X[r * ldx + k];
}

void gemv_with_projection(const PackedMatrix& Wh, const float* h, float* Yh, bool last_first, const PackedMatrix& Wx,
                          int p0, int p1, const float* ahead, const float* bias, float* Yx, size_t ldy) {
#ifdef DEEPRNN_X86
    if (folds_projection(Wh, Wx))
        return Wh.vnni       ? gemv_with_projection_dot<VnniFold>(Wh, h, Yh, last_first, Wx, p0, p1, ahead, bias, Yx, ldy)
               : Wh.dot_bf16 ? gemv_with_projection_dot<Bf16Fold>(Wh, h, Yh, last_first, Wx, p0, p1, ahead, bias, Yx, ldy)
                             : gemv_with_projection_avx512(Wh, h, Yh, last_first, Wx, p0, p1, ahead, bias, Yx, ldy);
#endif
    fail("gemv_with_projection: needs f32 AVX-512 or int8 VNNI weights of equal rows (folds_projection)");
}

// Doubles a batch-1 read's working set from twice `stream` while one core
// still reads it at 3/4 of `l3_rate` (or of a faster probe) or more; returns
// the last size that did (the reported L3 where none up to it, or up to
// 64 MiB, fell short). The weights are zeros: only the bytes moved matter,
// and zeros cannot be denormals.
static size_t probe_l3_capacity(Isa isa, size_t stream, size_t l3_bytes, double l3_rate) {
    constexpr int K = 256;
    constexpr size_t kMaxProbe = size_t(64) << 20;
    const float x[K] = {};
    size_t fits = stream;
    for (size_t size = 2 * stream; size <= std::min(l3_bytes, kMaxProbe); size *= 2) {
        PackedMatrix m;
        m.isa = isa;
        m.width = isa_width(isa);
        m.rows = static_cast<int>(size / (K * sizeof(float))) / 64 * 64;
        m.cols = K;
        store_packed(m, {});  // allocated zeroed (aligned_zeroed)
        AlignedFloats y(static_cast<size_t>(m.rows));
        // The first pass brings what fits into the L3; then the median of three,
        // so that one lucky pass (a neighbour idle for a moment) does not pass
        // a set that does not fit.
        double s[4];
        for (double& t : s) {
            const auto t0 = std::chrono::steady_clock::now();
            gemm_packed(m, x, K, 1, nullptr, y.data(), m.rows);
            t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        std::sort(s + 1, s + 4);
        const double rate = static_cast<double>(m.bytes()) / std::max(s[2], 1e-9);
        if (rate < 0.75 * l3_rate) return fits;
        l3_rate = std::max(l3_rate, rate);  // one slow sample of the 3-L2 rate must not pass a larger set
        fits = size;
    }
    return l3_bytes;
}

KernelRates measure_kernel_rates(Isa isa, size_t l2_bytes, size_t l3_bytes, double l2_usable) {
    constexpr int K = 256, kRows = 48;  // 48 = 8 blocks of the AVX-512 kernel's 6 rows
    auto best_of = [](int reps, auto&& run) {  // seconds of run(r) per rep, best of 3 samples after a warm-up
        double best = 1e30;
        for (int sample = 0; sample < 4; ++sample) {  // the first only warms the caches
            const auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; ++r) run(r);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
            if (sample > 0) best = std::min(best, s);
        }
        return std::max(best, 1e-9);
    };
    auto best_seconds = [&](const PackedMatrix& m, const float* x, float* y, int rows, int reps) {
        return best_of(reps, [&](int r) { gemm_packed(m, x, K, rows, nullptr, y, m.rows, r & 1); });
    };
    // The values do not matter, so the weights are written in packed order directly.
    auto filled = [isa](int rows, WeightPrecision precision = WeightPrecision::f32) {
        PackedMatrix m;
        m.isa = isa;
        m.precision = precision;
        m.vnni = precision == WeightPrecision::int8 && isa == Isa::avx512 && cpu_has_vnni();
        m.dot_bf16 = precision == WeightPrecision::bf16 && isa == Isa::avx512 && cpu_has_bf16_dot();
        m.width = isa_width(isa);
        m.rows = rows;  // a multiple of 64: whole panel groups at every width
        m.cols = K;
        store_packed(m, std::vector<float>(static_cast<size_t>(rows) * K, 0.01f));
        return m;
    };
    const size_t half = std::min<size_t>(std::max<size_t>(l2_bytes / 2, 128 << 10), 1 << 20);
    const PackedMatrix big = filled(std::max(128, static_cast<int>(half / (K * sizeof(float))) / 64 * 64)), small = filled(128);
    AlignedFloats x(static_cast<size_t>(kRows) * K), y(static_cast<size_t>(kRows) * big.rows);
    std::fill(x.data(), x.data() + x.size(), 0.5f);
    KernelRates r;
    r.l2_bytes_per_s = static_cast<double>(big.bytes()) / best_seconds(big, x.data(), y.data(), 1, 8);
    r.flops_per_s = 2.0 * kRows * 128 * K / best_seconds(small, x.data(), y.data(), kRows, 2);
    // Three L2s (at most 24 MiB), read front to back every pass: none of it is in L2 when read again.
    const size_t stream = std::min<size_t>(3 * l2_bytes, 24 << 20);
    if (l2_bytes > 0 && stream <= l3_bytes / 2) {
        const PackedMatrix l3 = filled(std::max(128, static_cast<int>(stream / (K * sizeof(float))) / 64 * 64));
        AlignedFloats y3(static_cast<size_t>(l3.rows));
        r.l3_bytes_per_s = static_cast<double>(l3.bytes()) / best_seconds(l3, x.data(), y3.data(), 1, 1);
        r.l3_capacity_bytes = probe_l3_capacity(isa, stream, l3_bytes, r.l3_bytes_per_s);
    }
    // The fold's trade on this core, as a step makes it: a kProjectAhead-th of
    // W_ih's panels beside all of W_hh, against W_hh alone plus that share's
    // multiply-adds up front. Zen 4 (one 512-bit FMA a cycle) gains; a Xeon
    // with two FMA ports loses (docs/ENGINE.md, "The input projection inside the step").
    // The dot products' trades differ (int8's and bf16's up-front products run
    // at 4x and 2x the f32 rate, their steps read 4x and 2x fewer bytes per
    // multiply-add), so they are measured too.
    auto fold_gain = [&](const PackedMatrix& wh, const PackedMatrix& wx) {
        const int panels = wx.rows / wx.width;
        AlignedFloats yh(static_cast<size_t>(wh.rows)), bias(static_cast<size_t>(wx.rows));
        AlignedFloats ahead(ahead_floats(K)), yx(static_cast<size_t>(kRows) * wx.rows);
        pack_ahead(wx, x.data(), K, ahead.data());
        auto seconds = [](int reps, auto&& run) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int s = 0; s < reps; ++s) run(s);
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        };
        // Rounds of the three in turn, the median of their ratios: one slow sample (a preempted
        // core) moves a best-of estimate of one of them, and this ratio decides a plan.
        std::vector<double> gains;
        for (int round = 0; round < 8; ++round) {  // the first warms the caches
            const double plain = seconds(32, [&](int s) { gemm_packed(wh, x.data(), K, 1, nullptr, yh.data(), wh.rows, s & 1); });
            const double up_front =  // one step's rows of the product over all steps
                seconds(2, [&](int) { gemm_packed(wx, x.data(), K, kRows, nullptr, yx.data(), wx.rows); }) / kRows;
            const double folded = seconds(32, [&](int s) {
                const int j = s % kProjectAhead;
                gemv_with_projection(wh, x.data(), yh.data(), s & 1, wx, j * panels / kProjectAhead,
                                     (j + 1) * panels / kProjectAhead, ahead.data(), bias.data(), yx.data(), wx.rows);
            });
            if (round > 0) gains.push_back((plain + up_front) / std::max(folded, 1e-9));
        }
        std::nth_element(gains.begin(), gains.begin() + gains.size() / 2, gains.end());
        return gains[gains.size() / 2];
    };
    // f32 blocks of half the usable L2 each (at most 512 KiB, one worker's of
    // LSTM 256-256): the plan uses the gain only where a layer's two blocks
    // fit the usable L2 together. Two 512 KiB blocks spill a 1 MiB L2, and
    // there the probe read 0.73-1.12 from process to process on a Zen 5 VM,
    // around the plan's 1.1 margin, so the same model folded in one process
    // and not in the next; blocks that fit read 1.05-1.33 (docs/ENGINE.md,
    // "Each block 3/8 of the L2").
    const double block = static_cast<double>(l2_bytes) * l2_usable / 2;
    const int fold_rows = std::clamp(static_cast<int>(block / (K * sizeof(float))) / 64 * 64, 128, 512);
    const PackedMatrix wh = filled(fold_rows, WeightPrecision::f32), wx = filled(fold_rows, WeightPrecision::f32);
    if (folds_projection(wh, wx)) r.fold_gain_l2 = fold_gain(wh, wx);
    const PackedMatrix wh8 = filled(512, WeightPrecision::int8), wx8 = filled(512, WeightPrecision::int8);
    if (folds_projection(wh8, wx8)) r.fold_gain_l2_int8 = fold_gain(wh8, wx8);
    const PackedMatrix wh16 = filled(512, WeightPrecision::bf16), wx16 = filled(512, WeightPrecision::bf16);
    if (folds_projection(wh16, wx16)) r.fold_gain_l2_bf16 = fold_gain(wh16, wx16);
    return r;
}

}  // namespace detail
}  // namespace deeprnn
