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
#pragma once
#include "common.hpp"

#include <cstdlib>
#include <memory>

namespace deeprnn {
namespace detail {

// The SIMD path the kernels of this process use (best the CPU supports).
enum class Isa { generic, avx2, avx512 };
Isa detect_isa();
const char* isa_name(Isa isa);
int isa_width(Isa isa);  // floats per vector

// 64-byte aligned float storage; zero-filled.
class AlignedFloats {
public:
    AlignedFloats() = default;
    explicit AlignedFloats(size_t n);
    float* data() { return p_.get(); }
    const float* data() const { return p_.get(); }
    size_t size() const { return n_; }

private:
    struct Free {
        void operator()(float* p) const { std::free(p); }
    };
    std::unique_ptr<float, Free> p_;
    size_t n_ = 0;
};

// A weight block packed for gemm_packed.
struct PackedMatrix {
    Isa isa = Isa::generic;
    int rows = 0;       // output features (rows of W), padded to a multiple of width
    int cols = 0;       // K, input features
    int width = 4;      // rows per panel
    AlignedFloats data; // [group][k][panels_in_group * width]
    size_t bytes() const { return data.size() * sizeof(float); }
};

// Packs rows row_of(0..rows-1) of a row-major matrix src with `cols` columns
// (leading dimension ld); row_of(i) < 0 gives a zero row (padding).
template <typename RowOf>
PackedMatrix pack_matrix(Isa isa, int rows, int cols, const float* src, size_t ld, RowOf row_of);

// Y[r][i] = bias[i] + Σ_k W[i][k] · X[r][k]  for r < nrows, i < W.rows.
// bias may be nullptr (zero). Y rows hold W.rows floats at stride ldy.
void gemm_packed(const PackedMatrix& W, const float* X, size_t ldx, int nrows, const float* bias, float* Y,
                 size_t ldy);

// ---- template implementation ----

template <typename RowOf>
PackedMatrix pack_matrix(Isa isa, int rows, int cols, const float* src, size_t ld, RowOf row_of) {
    PackedMatrix m;
    m.isa = isa;
    m.width = isa_width(isa);
    m.rows = (rows + m.width - 1) / m.width * m.width;
    m.cols = cols;
    m.data = AlignedFloats(static_cast<size_t>(m.rows) * cols);
    float* out = m.data.data();
    const int group_rows = 4 * m.width;
    for (int g0 = 0; g0 < m.rows; g0 += group_rows) {
        const int gr = std::min(group_rows, m.rows - g0);
        for (int k = 0; k < cols; ++k)
            for (int i = 0; i < gr; ++i) {
                const long r = g0 + i < rows ? row_of(g0 + i) : -1;
                *out++ = r < 0 ? 0.0f : src[static_cast<size_t>(r) * ld + k];
            }
    }
    return m;
}

}  // namespace detail
}  // namespace deeprnn
