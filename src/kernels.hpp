// kernels.hpp — the matrix products of the engine, on weights packed once.
//
// Every product in a recurrent step is Y = bias + X·Wᵀ with a small X (the
// batch's hidden states) and a weight block W that is reused every step. W is
// packed at model creation into panel groups: up to 4 panels of `width` rows
// (one SIMD vector each), stored k-major, so the kernel streams the weights
// once, front to back, and keeps one accumulator per (row of X, panel) in
// registers. The same kernel does the input projection of all steps (X = the
// whole sequence). Each output is bias + Σ_k in increasing k whatever the
// batch or blocking, so results do not depend on how rows are grouped:
// streaming in chunks is bit-identical to one run.
//
// Weights may be stored narrower than float (Config.weight_precision): bf16
// or int8 with one scale per row, widened to float in registers as they are
// read, so a step moves 2x or 4x fewer weight bytes and still sums in float.
// An int8 row's sum is scaled once, after its last k: slicing k cannot change
// the result there either.
#pragma once
#include "activations.hpp"
#include "common.hpp"

#include <cstdlib>
#include <memory>
#include <vector>

namespace deeprnn {
namespace detail {

// The SIMD path of the kernels: the activations' levels (activations.hpp),
// best the CPU supports by default.
using Isa = SimdLevel;
inline Isa detect_isa() { return best_simd_level(); }
inline const char* isa_name(Isa isa) { return simd_level_name(isa); }
int isa_width(Isa isa);  // floats per vector

void* aligned_zeroed(size_t bytes);  // 64-byte aligned, zero-filled, freed with std::free

// 64-byte aligned storage of n trivially-copyable T; zero-filled.
template <typename T>
class Aligned {
public:
    Aligned() = default;
    explicit Aligned(size_t n) : p_(static_cast<T*>(aligned_zeroed(n * sizeof(T)))), n_(n) {}
    T* data() { return p_.get(); }
    const T* data() const { return p_.get(); }
    size_t size() const { return n_; }

private:
    struct Free {
        void operator()(T* p) const { std::free(p); }
    };
    std::unique_ptr<T, Free> p_;
    size_t n_ = 0;
};
using AlignedFloats = Aligned<float>;

// A weight block packed for gemm_packed.
struct PackedMatrix {
    Isa isa = Isa::baseline;
    WeightPrecision precision = WeightPrecision::f32;
    int rows = 0;       // output features (rows of W), padded to a multiple of width
    int cols = 0;       // K, input features
    int width = 4;      // rows per panel
    Aligned<unsigned char> data;  // [group][k][lanes_per_k 32-bit lanes] (store_packed)
    AlignedFloats scale;          // int8: one per row (rows), else empty
    // int8 on a CPU with AVX512-VNNI: X is quantised too, per row and call, and
    // the products are integer dot products (vpdpbusd). data is then
    // [group][k/4][panel][16 rows x 4 k] and row_sum holds Σ_k q per row.
    bool vnni = false;
    Aligned<int32_t> row_sum;
    // bf16 packed for AVX512_BF16 dot products (vdpbf16ps): X is rounded to
    // bf16 too, per call; data is [group][k/2][panel][16 rows x 2 k].
    bool dot_bf16 = false;
    // A long X (a whole sequence's input projection) meets the panel groups in
    // chunks of rows of at most this many bytes, each chunk staying in L2 while
    // every group passes over it. Weights that do not stay in L2 beside a
    // chunk are read again from L3 for every chunk, so the engine gives them
    // larger chunks (set_projection_chunks). Chunks are of equal size; a row's
    // sums do not depend on its chunk.
    size_t x_chunk_bytes = 256 << 10;
    size_t bytes() const { return data.size() + scale.size() * sizeof(float) + row_sum.size() * sizeof(int32_t); }
};

// gemm_packed with 1 or 2 rows on AVX2 prefetches the lines of weights larger
// than this 64 k ahead; the hardware prefetchers alone fell short where the
// weights spill out of the L3 a core gets. Zen 3 VM (512 KiB L2, 32 MiB L3),
// 1 row against no prefetch, medians of 15 alternated runs: 0.90-0.93x in L2
// and L3, 8 MiB 0.97x, 12 MiB 1.11x, 16 MiB 1.19-1.27x (2 rows 1.95-2.06x),
// 24 MiB 1.06x, 64 MiB 0.97x.
constexpr size_t kPrefetchBytes = size_t(8) << 20;

bool cpu_has_vnni();  // AVX512-VNNI (and AVX512F) at run time
bool cpu_has_bf16_dot();  // AVX512_BF16 (and AVX512F) at run time

// The dot-product kernels (int8 on VNNI, bf16 on AVX512_BF16) convert X a
// block of rows at a time into kDotBlockBytes on the caller's stack, so a
// run allocates nothing on any thread (a buffer grown per thread did, the
// first time a thread met a size). A matrix too wide for 4 rows of it keeps
// the other kernels: K above 16,384 (int8) or 8,192 (bf16). 64 KiB, not 32:
// weights beyond L2 are read again from L3 for every block (int8, 100 rows
// x 1,400 -> 1,600, one core: 0.80x the per-thread buffer's speed with 32
// KiB blocks, 0.89-0.91x with 64; ties where the weights stay in L2).
constexpr size_t kDotBlockBytes = 64 << 10;
constexpr int kDotBlockRows = 256;
// Bytes of one row of X as the dot kernels convert it: int8 K padded to a
// multiple of 4, bf16 K padded to even at 2 bytes each.
constexpr size_t dot_row_bytes(WeightPrecision precision, int cols) {
    return precision == WeightPrecision::int8 ? (static_cast<size_t>(cols) + 3) / 4 * 4
                                              : (static_cast<size_t>(cols) + 1) / 2 * 4;
}
constexpr bool dot_kernel_fits(WeightPrecision precision, int cols) {
    return 4 * dot_row_bytes(precision, cols) <= kDotBlockBytes;
}

size_t element_bytes(WeightPrecision precision);  // 4, 2, 1
// 32-bit lanes one k of a group of `panels` panels occupies (store_packed's layout).
constexpr size_t lanes_per_k(WeightPrecision precision, int panels, int width) {
    return static_cast<size_t>(precision == WeightPrecision::bf16   ? (panels + 1) / 2 * width
                               : precision == WeightPrecision::int8 ? width
                                                                    : panels * width);
}

// Stores f32 weights already in packed order into m.data at m.precision
// (bf16: round to nearest even; int8: per-row scale max|w|/127, round to nearest).
void store_packed(PackedMatrix& m, const std::vector<float>& packed);

// Packs rows row_of(0..rows-1) of a row-major matrix src with `cols` columns
// (leading dimension ld); row_of(i) < 0 gives a zero row (padding).
// bf16_dot: with bf16 on a CPU with AVX512_BF16, use its dot products (for
// compute-bound products; X is then rounded to bf16 as well).
template <typename RowOf>
PackedMatrix pack_matrix(Isa isa, int rows, int cols, const float* src, size_t ld, RowOf row_of,
                         WeightPrecision precision = WeightPrecision::f32, bool bf16_dot = false);

// Y[r][i] = bias[i] + Σ_k W[i][k] · X[r][k]  for r < nrows, i < W.rows.
// bias may be nullptr (zero), else holds W.rows floats (padding included:
// the kernel reads whole vectors). Y rows hold W.rows floats at stride ldy.
// last_first: the groups of 64 rows (AVX-512) in reverse order, with the
// same results. A product repeated every step alternates it, so it starts
// where the step before ended, on the weights the caches kept: a block a
// little larger than L1, or larger than L2, is then partly read from the
// nearer cache (measured per step, medians of 5 interleaved runs: GRU
// H = 64, a 48 KiB block, 1.2x over 400 steps; LSTM H = 1024 on 2 workers,
// 8 MiB each from L3, 1.1x; ties at T = 100 on the other batch-1 shapes).
// It costs where neither end stays: on the Zen 5 VM (48 KiB L1, a group of
// K = 256 is 64 KiB) a block held in L2, alone and repeated, read 10-20%
// slower alternating (512 x 256: 2.8 against 3.1-3.4 us; likely because
// each reversed group starts a new prefetch stream), yet whole runs tied
// (T = 100, 2 workers, three rounds: LSTM 256-256 and 128-128, GRU 256-256,
// LSTM 64-256, GRU 64-64), so it stays.
void gemm_packed(const PackedMatrix& W, const float* X, size_t ldx, int nrows, const float* bias, float* Y,
                 size_t ldy, bool last_first = false);

// The batch-1 recurrent product with a later chunk's input projection folded
// into the same pass over k: Yh = Wh·h (no bias) and, for panels [p0, p1) of
// Wx (`width` rows each), Yx[r] = bias + Wx·X[r] for kProjectAhead rows of X,
// given as pack_ahead wrote them.
// A batch-1 step reads its weights from L2 or L3 at one multiply-add per 4
// bytes and leaves the FMA units half idle; the projection's products reuse
// each weight kProjectAhead times from registers and fill them (docs/ENGINE.md,
// "The input projection inside the step"). Every output is the same chain of
// fused multiply-adds in increasing k as gemm_packed's, so the bits are equal.
// int8 weights on VNNI and bf16 on AVX512_BF16 fold too (dot_fold_unit):
// the same dot products in the same order and the same last rounding as
// gemm_packed's, with h and each row of X quantised or rounded as it does.
// Only for f32 AVX-512, int8 VNNI or bf16 dot-product weights:
// folds_projection says when.
constexpr int kProjectAhead = 8;
bool folds_projection(const PackedMatrix& Wh, const PackedMatrix& Wx);
// Floats of the buffer pack_ahead fills for a Wx of `cols` columns (either layout).
constexpr size_t ahead_floats(int cols) { return static_cast<size_t>(kProjectAhead) * (static_cast<size_t>(cols) + 8); }
// kProjectAhead rows of X (leading dimension ldx) as gemv_with_projection
// reads them: f32 k-major, ahead[k * kProjectAhead + r] = X[r][k]; int8 on
// VNNI quantised per row (bf16 rounded), 4 bytes of each row per 4 k (2 k),
// then the rows' scales.
void pack_ahead(const PackedMatrix& Wx, const float* X, size_t ldx, float* ahead);
void gemv_with_projection(const PackedMatrix& Wh, const float* h, float* Yh, bool last_first, const PackedMatrix& Wx,
                          int p0, int p1, const float* ahead, const float* bias, float* Yx, size_t ldy);

// What gemm_packed reaches on this core, measured by running it (best of 5
// samples, about 1 ms in all), for the plan's cost model: machines differ by
// 2x in both (a Zen 5 core: ~195 GFLOP/s, Zen 4's half-width AVX-512: ~100),
// and which plan wins depends on them.
// The L3 rate adds about 1 ms where the L3 can hold 3 L2s: a core's L3 reads
// vary 3.5x between machines (Zen 4 VM ~95 GB/s, a Xeon VM with 2 MiB L2s
// ~26 GB/s), and where weights stream from L3 it decides what pays.
struct KernelRates {
    double flops_per_s = 0;     // f32, 48 rows of X, weights in L2: compute-bound
    double l2_bytes_per_s = 0;  // batch 1, weights filling half the L2: bound by reading them
    double l3_bytes_per_s = 0;  // batch 1, weights of 3 L2s streamed from L3; 0: not measured (no such L3)
    // The largest working set one core still reads at about that rate: the L3
    // this core really gets. A hypervisor may report the host's whole L3 (a
    // Zen 5 VM: 508 MiB, of which one core reads 12 MiB at the L3 rate).
    // 0: not measured (then trust the reported size).
    size_t l3_capacity_bytes = 0;
    // Batch 1 with both blocks in the usable L2 (half of it each, at most 512 KiB): the plain
    // product plus the projection's share at the FMA rate, over the folded
    // kernel's time (gemv_with_projection); 0: not measured (no fold kernel).
    double fold_gain_l2 = 0;
    // The same with int8 weights on VNNI and bf16 on AVX512_BF16 (dot_fold_unit);
    // 0: not measured (no such dot products).
    double fold_gain_l2_int8 = 0;
    double fold_gain_l2_bf16 = 0;
};
// l2_usable: the share of the L2 the plan lets weights use (MachineModel::
// l2_usable); the fold probe's two blocks fill it, as a folded layer's must.
KernelRates measure_kernel_rates(Isa isa, size_t l2_bytes, size_t l3_bytes, double l2_usable);

// ---- template implementation ----

template <typename RowOf>
PackedMatrix pack_matrix(Isa isa, int rows, int cols, const float* src, size_t ld, RowOf row_of,
                         WeightPrecision precision, bool bf16_dot) {
    PackedMatrix m;
    m.isa = isa;
    m.precision = precision;
    const bool fits = dot_kernel_fits(precision, cols);
    m.vnni = precision == WeightPrecision::int8 && isa == Isa::avx512 && cpu_has_vnni() && fits;
    m.dot_bf16 = bf16_dot && precision == WeightPrecision::bf16 && isa == Isa::avx512 && cpu_has_bf16_dot() && fits;
    m.width = isa_width(isa);
    m.rows = (rows + m.width - 1) / m.width * m.width;
    m.cols = cols;
    std::vector<float> packed(static_cast<size_t>(m.rows) * cols);
    float* out = packed.data();
    const int group_rows = 4 * m.width;
    for (int g0 = 0; g0 < m.rows; g0 += group_rows) {
        const int gr = std::min(group_rows, m.rows - g0);
        for (int k = 0; k < cols; ++k)
            for (int i = 0; i < gr; ++i) {
                const long r = g0 + i < rows ? row_of(g0 + i) : -1;
                *out++ = r < 0 ? 0.0f : src[static_cast<size_t>(r) * ld + k];
            }
    }
    store_packed(m, packed);
    return m;
}

}  // namespace detail
}  // namespace deeprnn
