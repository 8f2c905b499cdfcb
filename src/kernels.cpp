// kernels.cpp — packed matrix products with run-time ISA dispatch.
//
// One generic micro-kernel written with GCC/Clang vector extensions is
// inlined into per-ISA entry points compiled with target attributes, so a
// binary built without -march flags still runs AVX-512 where the CPU has it.
#include "kernels.hpp"

#include <algorithm>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
#define DEEPRNN_FP_CONTRACT , optimize("fp-contract=fast")  // GCC's ISO modes do not fuse a*b+c otherwise
#else
#define DEEPRNN_FP_CONTRACT                                  // Clang fuses within a statement by default
#endif
#if defined(__x86_64__) || defined(__i386__)
#define DEEPRNN_X86 1
#define DEEPRNN_TARGET(isa) __attribute__((target(isa) DEEPRNN_FP_CONTRACT))
#endif

namespace deeprnn {
namespace detail {

Isa detect_isa() {
#ifdef DEEPRNN_X86
    static const Isa isa = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f")) return Isa::avx512;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
        return Isa::generic;
    }();
    return isa;
#else
    return Isa::generic;
#endif
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::avx512: return "avx512";
        case Isa::avx2: return "avx2";
        default: return "generic";
    }
}

int isa_width(Isa isa) { return isa == Isa::avx512 ? 16 : isa == Isa::avx2 ? 8 : 4; }

AlignedFloats::AlignedFloats(size_t n) : n_(n) {
    const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, bytes);
    if (!p) fail("out of memory allocating ", bytes, " bytes");
    std::memset(p, 0, bytes);
    p_.reset(static_cast<float*>(p));
}

namespace {

template <int W>
struct Vec {
    typedef float type __attribute__((vector_size(4 * W), aligned(4)));
};

// R rows of X times one group of NP panels over K columns:
// acc[r][p] = start + Σ_k W[k][p] * X[r][k], where start is the bias (or zero)
// or, when ACC, what Y already holds (a previous slice of k): the sums run in
// the same order either way, so slicing k never changes a result.
template <int W, int NP, int R, bool ACC>
__attribute__((always_inline)) inline void micro(const float* wp, int K, const float* X, size_t ldx, const float* bias,
                                                 float* Y, size_t ldy) {
    using V = typename Vec<W>::type;
    V acc[R][NP];
    for (int p = 0; p < NP; ++p) {
        V b = V{};
        if (!ACC && bias) std::memcpy(&b, bias + p * W, sizeof(V));
        for (int r = 0; r < R; ++r) {
            if (ACC) std::memcpy(&acc[r][p], Y + r * ldy + p * W, sizeof(V));
            else acc[r][p] = b;
        }
    }
    for (int k = 0; k < K; ++k, wp += NP * W) {
        V w[NP];
        for (int p = 0; p < NP; ++p) std::memcpy(&w[p], wp + p * W, sizeof(V));
        for (int r = 0; r < R; ++r) {
            const V x = V{} + X[r * ldx + k];
            for (int p = 0; p < NP; ++p) acc[r][p] += w[p] * x;
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < NP; ++p) std::memcpy(Y + r * ldy + p * W, &acc[r][p], sizeof(V));
}

// Rows of X in blocks of RB, one panel group at a time.
template <int W, int NP, int RB, bool ACC>
__attribute__((always_inline)) inline void rows(const float* wp, int K, const float* X, size_t ldx, int nrows,
                                                const float* bias, float* Y, size_t ldy) {
    int r = 0;
    for (; r + RB <= nrows; r += RB) micro<W, NP, RB, ACC>(wp, K, X + r * ldx, ldx, bias, Y + r * ldy, ldy);
    for (; r < nrows; ++r) micro<W, NP, 1, ACC>(wp, K, X + r * ldx, ldx, bias, Y + r * ldy, ldy);
}

template <int W, int NP, int RB>
__attribute__((always_inline)) inline void group(const float* wp, int K, const float* X, size_t ldx, int nrows,
                                                 const float* bias, float* Y, size_t ldy) {
    // With one row block, the weights stream through once: no slicing. With
    // several, slice k so a group's slice (NP*W*kc floats) stays in L1 while
    // every row block reuses it: FMA-bound instead of L2-bound.
    constexpr int kc = 32768 / (4 * NP * W * static_cast<int>(sizeof(float))) * 4;
    if (nrows <= RB || K <= kc) return rows<W, NP, RB, false>(wp, K, X, ldx, nrows, bias, Y, ldy);
    for (int k0 = 0; k0 < K; k0 += kc) {
        const int kn = std::min(kc, K - k0);
        if (k0 == 0) rows<W, NP, RB, false>(wp, kn, X, ldx, nrows, bias, Y, ldy);
        else rows<W, NP, RB, true>(wp + static_cast<size_t>(k0) * NP * W, kn, X + k0, ldx, nrows, nullptr, Y, ldy);
    }
}

template <int W, int RB>
__attribute__((always_inline)) inline void gemm(const PackedMatrix& m, const float* X, size_t ldx, int nrows,
                                                const float* bias, float* Y, size_t ldy) {
    const int K = m.cols;
    const float* wp = m.data.data();
    for (int g0 = 0; g0 < m.rows; g0 += 4 * W) {
        const float* b = bias ? bias + g0 : nullptr;
        switch (std::min(4, (m.rows - g0) / W)) {
            case 4: group<W, 4, RB>(wp, K, X, ldx, nrows, b, Y + g0, ldy); break;
            case 3: group<W, 3, RB>(wp, K, X, ldx, nrows, b, Y + g0, ldy); break;
            case 2: group<W, 2, RB>(wp, K, X, ldx, nrows, b, Y + g0, ldy); break;
            default: group<W, 1, RB>(wp, K, X, ldx, nrows, b, Y + g0, ldy); break;
        }
        wp += static_cast<size_t>(std::min(4 * W, m.rows - g0)) * K;
    }
}

#ifdef DEEPRNN_X86
// 4 rows x 4 panels = 16 of AVX-512's 32 registers hold accumulators.
DEEPRNN_TARGET("avx512f,fma")
void gemm_avx512(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* b, float* Y, size_t ldy) {
    gemm<16, 4>(m, X, ldx, n, b, Y, ldy);
}
// 2 rows x 4 panels = 8 of AVX2's 16 registers.
DEEPRNN_TARGET("avx2,fma")
void gemm_avx2(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* b, float* Y, size_t ldy) {
    gemm<8, 2>(m, X, ldx, n, b, Y, ldy);
}
#endif

void gemm_generic(const PackedMatrix& m, const float* X, size_t ldx, int n, const float* b, float* Y, size_t ldy) {
    gemm<4, 2>(m, X, ldx, n, b, Y, ldy);
}

}  // namespace

void gemm_packed(const PackedMatrix& W, const float* X, size_t ldx, int nrows, const float* bias, float* Y,
                 size_t ldy) {
    switch (W.isa) {
#ifdef DEEPRNN_X86
        case Isa::avx512: return gemm_avx512(W, X, ldx, nrows, bias, Y, ldy);
        case Isa::avx2: return gemm_avx2(W, X, ldx, nrows, bias, Y, ldy);
#endif
        default: return gemm_generic(W, X, ldx, nrows, bias, Y, ldy);
    }
}

}  // namespace detail
}  // namespace deeprnn
