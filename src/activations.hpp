// activations.hpp — tanh, sigmoid and relu over float arrays, chosen once per
// model, and the SIMD building blocks that activations.cpp and cells.cpp share.
//
// The engine calls activations through an Activations table picked at model
// creation from the requested accuracy and the CPU's instruction set, so the
// hot loops never branch on either.
//
// How it works (details and measurements in docs/ACTIVATIONS.md):
//   * tanh is Lambert's continued fraction x/(1 + x²/(3 + x²/(5 + …))) cut
//     after N terms: the convergent R_N(x) = x·p(x²)/q(x²). It is applied to
//     x/2 and doubled, tanh x = 2t/(1+t²) with t = R_N(x/2), which is still
//     one rational function of x with one division. Halving the argument makes
//     the fraction converge far faster (7 terms reach 1e-8 where R_N(x) needs
//     14) and the doubling damps errors where tanh saturates.
//   * tanh_k evaluates that fraction from |x| in one of two exact
//     rearrangements, a small correction to |x| (|x| < 1) or to 1 (beyond), and
//     puts the sign back: at the default 7 terms every finite float is within
//     2.2 ulp, results are odd bit for bit, never exceed 1, are exactly ±1
//     wherever float tanh is, tanh(±0) = ±0, tiny and denormal x give x, and
//     NaN gives NaN.
//   * The input is clamped at 2c, c where R_N stops rising (odd N: where it
//     reaches 1; even N: at its maximum), so results are bounded and monotone
//     (up to rounding) for every N.
//   * sigmoid(x) = ½ + ½·tanh(x/2); relu(x) = x < 0 ? 0 : x.
//   * One generic kernel source is written against a tiny vector interface
//     (Simd<V>) and instantiated per instruction set: xsimd's compile-time
//     architecture for the baseline (SSE2 without -march flags, NEON on Arm),
//     and on x86 with GCC/Clang also AVX2 and AVX-512 functions compiled with
//     __attribute__((target)) on GCC/Clang vector extensions, picked at run
//     time. (xsimd 8 decides which architectures exist from -m flags at include
//     time, so it cannot give AVX-512 inside one translation unit built
//     without them.)
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include <xsimd/xsimd.hpp>

namespace deeprnn {
namespace detail {

// ---------------------------------------------------------------------------
// The continued fraction, truncated: computed at compile time.
// ---------------------------------------------------------------------------

constexpr int kMaxTerms = 10;                  // term counts tabulated: 1..kMaxTerms
constexpr int kMaxCoeffs = kMaxTerms / 2 + 1;  // coefficients per polynomial

// One truncation, ready to evaluate: with a = x·p(x²) and b = q(x²) (constant
// terms first, p[0] = q[0] = 1), tanh x ≈ a·b / (a²/4 + b²) for |x| <= clamp
// (that is 2t/(1+t²) with t = a/2b = R_N(x/2)). p has a leading 0 when it is
// one shorter than q (even N), so both have m coefficients.
struct TanhRational {
    int terms = 0;
    int m = 0;
    float clamp = 0;
    float p[kMaxCoeffs] = {};
    float q[kMaxCoeffs] = {};
};

namespace cf {
constexpr int kPowers = 2 * kMaxTerms + 2;

// N-th convergent A_N(x)/B_N(x) as coefficient arrays (index = power of x).
struct Convergent {
    double a[kPowers] = {};
    double b[kPowers] = {};
};

// Wallis–Euler recurrence: A_k = (2k-1)·A_{k-1} + a_k·A_{k-2} (B alike), with
// partial numerators a_1 = x, a_k = x² after; A_{-1} = 1, A_0 = 0, B_{-1} = 0, B_0 = 1.
constexpr Convergent convergent(int terms) {
    Convergent older, old;
    older.a[0] = 1;
    old.b[0] = 1;
    for (int k = 1; k <= terms; ++k) {
        Convergent cur;
        const int shift = k == 1 ? 1 : 2;
        for (int i = 0; i < kPowers; ++i) {
            cur.a[i] = (2 * k - 1) * old.a[i] + (i >= shift ? older.a[i - shift] : 0.0);
            cur.b[i] = (2 * k - 1) * old.b[i] + (i >= shift ? older.b[i - shift] : 0.0);
        }
        older = old;
        old = cur;
    }
    return old;
}

constexpr double poly(const double* c, double x) {
    double r = 0;
    for (int i = kPowers - 1; i >= 0; --i) r = r * x + c[i];
    return r;
}

constexpr double dpoly(const double* c, double x) {
    double r = 0;
    for (int i = kPowers - 1; i >= 1; --i) r = r * x + i * c[i];
    return r;
}

// Where the truncation stops rising: odd N overshoots tanh and crosses 1
// (root of B - A); even N undershoots and peaks below 1 (root of A'B - AB').
// Both functions are positive before that point; bisection on [0, 2N+2].
constexpr double clamp_point(const Convergent& c, int terms) {
    double lo = 0, hi = 2.0 * terms + 2;
    for (int it = 0; it < 200; ++it) {
        const double x = 0.5 * (lo + hi);
        const double f = terms % 2 ? poly(c.b, x) - poly(c.a, x)
                                   : dpoly(c.a, x) * poly(c.b, x) - poly(c.a, x) * dpoly(c.b, x);
        (f > 0 ? lo : hi) = x;
    }
    return lo;
}

// p̂_k = p_k/4^k, q̂_k = q_k/4^k: R_N(x/2) = (x/2)·p̂(x²)/q̂(x²).
constexpr TanhRational rational(int terms) {
    const Convergent c = convergent(terms);
    TanhRational r;
    r.terms = terms;
    r.m = terms / 2 + 1;
    r.clamp = static_cast<float>(2 * clamp_point(c, terms));
    double scale = 1;
    for (int i = 0; i < r.m; ++i, scale /= 4) {
        r.p[i] = static_cast<float>(c.a[2 * i + 1] / c.a[1] * scale);
        r.q[i] = static_cast<float>(c.b[2 * i] / c.b[0] * scale);
    }
    return r;
}

struct Table {
    TanhRational by_terms[kMaxTerms + 1];
};

constexpr Table table() {
    Table t;
    for (int n = 1; n <= kMaxTerms; ++n) t.by_terms[n] = rational(n);
    return t;
}
}  // namespace cf

inline constexpr cf::Table kTanhRationals = cf::table();

// ---------------------------------------------------------------------------
// The table the engine uses.
// ---------------------------------------------------------------------------

// Instruction sets a kernel is compiled for, in order of preference.
//   baseline: xsimd's architecture at compile time (SSE2 on plain x86-64, NEON
//             on Arm, whatever -march gives), else GCC/Clang vectors, else scalar.
//   avx2, avx512: x86 with GCC or Clang, chosen at run time from the CPU.
enum class SimdLevel { baseline = 0, avx2 = 1, avx512 = 2 };

struct Activations {
    const char* isa = "scalar";   // SIMD path in use: "avx512", "avx2", or the baseline's name ("sse2", "neon64", ...)
    int terms = 0;                // continued-fraction terms of tanh (1..kMaxTerms)
    double max_abs_error = 0;     // measured bound for this choice (tanh and sigmoid)
    void (*tanh)(const float* x, float* y, int64_t n) = nullptr;     // y may equal x
    void (*sigmoid)(const float* x, float* y, int64_t n) = nullptr;  // y may equal x
    void (*relu)(const float* x, float* y, int64_t n) = nullptr;     // y may equal x; relu(NaN) = NaN
    SimdLevel level = SimdLevel::baseline;    // which compiled kernels (cells.cpp dispatches on it)
    const TanhRational* rational = nullptr;  // coefficients for fused kernels
};

// The fastest table whose tanh/sigmoid error is at most max_abs_error
// (0 = float accuracy). Never fails: tighter requests get the most accurate table.
Activations select_activations(double max_abs_error);

// One table per instruction set this binary has and this CPU runs, best first
// (tests run every one of them).
std::vector<Activations> activation_tables_supported(double max_abs_error);

// The table for one instruction set by name ("avx512", "avx2", "baseline" or
// the baseline's own name); throws Error if it is not compiled in or the CPU
// lacks it.
Activations select_activations_for_isa(const char* isa, double max_abs_error);

// The table for one compiled level and an exact term count (1..kMaxTerms),
// for tests and tools/activation_sweep; throws Error if the level is not supported.
Activations activations_with_terms(SimdLevel level, int terms);

// Fewest terms whose measured error is at most max_abs_error (0 = float accuracy).
int activation_terms(double max_abs_error);

// Measured over every finite float by tools/activation_sweep on every x86 path
// (the worst of them), published in docs/ACTIVATIONS.md.
struct ActivationAccuracy {
    int terms;
    double tanh_max_abs;      // max |tanh~(x) - tanh(x)|
    double tanh_max_rel;      // max |tanh~(x) - tanh(x)| / |tanh(x)|, tanh(x) != 0
    double sigmoid_max_abs;   // max |σ~(x) - σ(x)|
};
const ActivationAccuracy& activation_accuracy(int terms);  // terms in 1..kMaxTerms

// ---------------------------------------------------------------------------
// SIMD building blocks (shared by activations.cpp and cells.cpp).
// ---------------------------------------------------------------------------

#if defined(__GNUC__) || defined(__clang__)
#define DEEPRNN_INLINE inline __attribute__((always_inline))
// Lambdas given to for_each_vector must be inlined too: a lambda body is a
// function of its own, compiled for the default target unless inlined into the
// kernel's target-specific entry point.
#define DEEPRNN_INLINE_LAMBDA __attribute__((always_inline))
#define DEEPRNN_GNU_VECTORS 1
#elif defined(_MSC_VER)
#define DEEPRNN_INLINE __forceinline
#define DEEPRNN_INLINE_LAMBDA
#define DEEPRNN_GNU_VECTORS 0
#else
#define DEEPRNN_INLINE inline
#define DEEPRNN_INLINE_LAMBDA
#define DEEPRNN_GNU_VECTORS 0
#endif

#if (defined(__x86_64__) || defined(__i386__)) && DEEPRNN_GNU_VECTORS
#define DEEPRNN_X86_DISPATCH 1
// The run-time paths. Features beyond what the code needs are not listed, so
// the CPU check (simd_level_supported) stays exactly these.
#define DEEPRNN_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define DEEPRNN_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#else
#define DEEPRNN_X86_DISPATCH 0
#endif

// Simd<V> is all a kernel needs from a vector type V of floats, beyond the
// arithmetic operators: lanes, splat, unaligned load/store, a*b+c, |x|, the
// sign of one value put on a non-negative other, and one compare-and-select:
//   select_gt(a, b, yes, no) = a > b ? yes : no
// A comparison with NaN is false, which the kernels use to let NaN through
// (std::max-style helpers differ between instruction sets on NaN).
template <class V>
struct Simd;

template <>
struct Simd<float> {
    static constexpr int lanes = 1;
    static DEEPRNN_INLINE float splat(float s) { return s; }
    static DEEPRNN_INLINE float load(const float* p) { return *p; }
    static DEEPRNN_INLINE void store(float* p, float v) { *p = v; }
    static DEEPRNN_INLINE float mul_add(float a, float b, float c) { return a * b + c; }
    static DEEPRNN_INLINE float abs(float x) { return std::fabs(x); }
    static DEEPRNN_INLINE float with_sign_of(float mag, float s) { return std::copysign(mag, s); }
    static DEEPRNN_INLINE float select_gt(float a, float b, float yes, float no) { return a > b ? yes : no; }
};

#ifndef XSIMD_NO_SUPPORTED_ARCHITECTURE
template <class A>
struct Simd<xsimd::batch<float, A>> {
    using V = xsimd::batch<float, A>;
    static constexpr int lanes = static_cast<int>(V::size);
    static DEEPRNN_INLINE V splat(float s) { return V(s); }
    static DEEPRNN_INLINE V load(const float* p) { return V::load_unaligned(p); }
    static DEEPRNN_INLINE void store(float* p, const V& v) { v.store_unaligned(p); }
    static DEEPRNN_INLINE V mul_add(const V& a, const V& b, const V& c) { return xsimd::fma(a, b, c); }
    static DEEPRNN_INLINE V abs(const V& x) { return xsimd::abs(x); }
    static DEEPRNN_INLINE V with_sign_of(const V& mag, const V& s) { return mag | (s & V(-0.0f)); }
    static DEEPRNN_INLINE V select_gt(const V& a, const V& b, const V& yes, const V& no) {
        return xsimd::select(a > b, yes, no);
    }
};
#endif

#if DEEPRNN_GNU_VECTORS
// W floats as a GCC/Clang vector. Wrapped in a struct and passed by reference:
// a bare 32/64-byte vector passed by value outside an AVX function draws
// -Wpsabi warnings (its calling convention differs with -mavx), and every use
// is inlined into an AVX function anyway.
template <int W>
struct GnuVec {
    typedef float raw __attribute__((vector_size(4 * W)));
    typedef int32_t bits __attribute__((vector_size(4 * W)));
    typedef float unaligned __attribute__((vector_size(4 * W), aligned(4), may_alias));
    raw v;
};
template <int W> DEEPRNN_INLINE GnuVec<W> operator+(const GnuVec<W>& a, const GnuVec<W>& b) { return {a.v + b.v}; }
template <int W> DEEPRNN_INLINE GnuVec<W> operator-(const GnuVec<W>& a, const GnuVec<W>& b) { return {a.v - b.v}; }
template <int W> DEEPRNN_INLINE GnuVec<W> operator*(const GnuVec<W>& a, const GnuVec<W>& b) { return {a.v * b.v}; }
template <int W> DEEPRNN_INLINE GnuVec<W> operator/(const GnuVec<W>& a, const GnuVec<W>& b) { return {a.v / b.v}; }

template <int W>
struct Simd<GnuVec<W>> {
    using V = GnuVec<W>;
    using bits = typename V::bits;
    using raw = typename V::raw;
    static constexpr int lanes = W;
    // A zero vector plus s: GCC turns this into one broadcast, while spellings
    // such as s - zero can become lane-by-lane inserts. Only for constants
    // (never -0), hoisted out of loops.
    static DEEPRNN_INLINE V splat(float s) { return {raw{} + s}; }
    static DEEPRNN_INLINE V load(const float* p) { return {*reinterpret_cast<const typename V::unaligned*>(p)}; }
    static DEEPRNN_INLINE void store(float* p, const V& x) { *reinterpret_cast<typename V::unaligned*>(p) = x.v; }
    // Written as a*b+c: with FMA enabled both compilers contract it into one
    // fused multiply-add by default (GCC -ffp-contract=fast, Clang =on); vector
    // extensions have no portable fma builtin.
    static DEEPRNN_INLINE V mul_add(const V& a, const V& b, const V& c) { return {a.v * b.v + c.v}; }
    static DEEPRNN_INLINE V abs(const V& x) { return {(raw)((bits)x.v & 0x7fffffff)}; }
    static DEEPRNN_INLINE V with_sign_of(const V& mag, const V& s) {
        return {(raw)((bits)mag.v | ((bits)s.v & static_cast<int32_t>(0x80000000u)))};
    }
    static DEEPRNN_INLINE V select_gt(const V& a, const V& b, const V& yes, const V& no) {
        return {a.v > b.v ? yes.v : no.v};
    }
};
#endif

// x > hi ? hi : x and x < lo ? lo : x: clamps that keep NaN.
template <class V>
DEEPRNN_INLINE V clamp_above(const V& x, const V& hi) { return Simd<V>::select_gt(x, hi, hi, x); }
template <class V>
DEEPRNN_INLINE V clamp_below(const V& x, const V& lo) { return Simd<V>::select_gt(lo, x, lo, x); }

// The baseline vector type.
#ifndef XSIMD_NO_SUPPORTED_ARCHITECTURE
using BaselineVec = xsimd::batch<float>;
#elif DEEPRNN_GNU_VECTORS
using BaselineVec = GnuVec<4>;
#else
using BaselineVec = float;
#endif

// Below this |x|, tanh_k adds a correction to |x|; above, it subtracts one
// from 1 (chosen with tools/activation_sweep: the two forms' errors cross).
constexpr float kTanhNearOne = 1.0f;

// Coefficients of one TanhRational broadcast once per call, so Horner steps
// read ready vectors (and constants fold when the rational is known).
template <class V>
struct TanhPoly {
    using S = Simd<V>;
    int m;
    V p[kMaxCoeffs], q[kMaxCoeffs];
    V clamp, near_one2, zero, one, two, half;
    DEEPRNN_INLINE explicit TanhPoly(const TanhRational& r)
        : m(r.m), clamp(S::splat(r.clamp)), near_one2(S::splat(kTanhNearOne * kTanhNearOne)),
          zero(S::splat(0.0f)), one(S::splat(1.0f)), two(S::splat(2.0f)), half(S::splat(0.5f)) {
        for (int k = 0; k < m; ++k) {
            p[k] = S::splat(r.p[k]);
            q[k] = S::splat(2 * r.q[k]);  // tanh_k works with 2q
        }
    }
};

// tanh of K independent vectors in place (several together give the CPU 2K
// independent Horner chains to overlap).
//
// With x clamped, s = x², p = p̂(s) = 1 + s·p1, q = q̂(s) = 1 + s·q1 and
// h = |x|·p/2 (so t = tanh(|x|/2) ≈ h/q), tanh|x| = 2t/(1+t²) = 2hq/(h² + q²).
// Two exact rearrangements of that one fraction keep the float rounding small
// at both ends:
//   |x| small: tanh|x| = |x| - |x|·s·(p²/4 - q·(p1 - q1)) / (h² + q²)   (a small correction to |x|)
//   |x| large: tanh|x| = 1 - (q - h)² / (h² + q²)                       (a small correction to 1)
// so results near 0 and near ±1 are close to correctly rounded, saturate
// exactly and never exceed 1. Both are evaluated scaled by 4, with H = 2h and
// Q = 2q (TanhPoly doubles q's coefficients), which saves the factors ½ and ¼.
// The sign goes back on last: tanh is odd bit for bit.
template <class V, int K>
DEEPRNN_INLINE void tanh_k(const TanhPoly<V>& t, V (&x)[K]) {
    using S = Simd<V>;
    V a[K], s[K], p[K], q[K];
    for (int j = 0; j < K; ++j) {
        a[j] = clamp_above(S::abs(x[j]), t.clamp);  // inf → clamp, NaN stays NaN
        s[j] = a[j] * a[j];
        p[j] = t.m > 1 ? t.p[t.m - 1] : t.zero;     // p1 and 2·q1 by Horner
        q[j] = t.m > 1 ? t.q[t.m - 1] : t.zero;
    }
    for (int k = t.m - 2; k >= 1; --k) {
        for (int j = 0; j < K; ++j) {
            p[j] = S::mul_add(p[j], s[j], t.p[k]);
            q[j] = S::mul_add(q[j], s[j], t.q[k]);
        }
    }
    for (int j = 0; j < K; ++j) {
        const V P = S::mul_add(p[j], s[j], t.one);  // p
        const V Q = S::mul_add(q[j], s[j], t.two);  // 2q
        const V H = a[j] * P;                       // 2h
        const V d = S::mul_add(H, H, Q * Q);        // 4(h² + q²)
        const V e = Q - H;                          // 2(q - h)
        const V p1_q1 = p[j] * t.two - q[j];        // 2(p1 - q1)
        const V small = a[j] * s[j] * (P * P - Q * p1_q1);
        // |x| < 1: |x| - small/d; beyond: 1 - e²/d. One division either way.
        const V base = S::select_gt(s[j], t.near_one2, t.one, a[j]);
        const V correction = S::select_gt(s[j], t.near_one2, e * e, small);
        x[j] = S::with_sign_of(base - correction / d, x[j]);
    }
}

// sigmoid(x) = ½ + ½·tanh(x/2): scale in before tanh_k, finish after.
template <class V>
DEEPRNN_INLINE V sigmoid_in(const TanhPoly<V>& t, const V& x) { return x * t.half; }
template <class V>
DEEPRNN_INLINE V sigmoid_out(const TanhPoly<V>& t, const V& th) { return Simd<V>::mul_add(th, t.half, t.half); }

// Loads and stores of one whole vector at p.
template <class V>
struct FullIo {
    DEEPRNN_INLINE V load(const float* p) const { return Simd<V>::load(p); }
    DEEPRNN_INLINE void store(float* p, const V& v) const { Simd<V>::store(p, v); }
};

// Loads and stores of the last `count` < lanes elements, through a zero-padded
// buffer, so the tail runs the same vector code as the rest (same results).
// Written as fixed-length loops with a condition rather than memcpy: GCC turns
// them into one masked load/store on AVX-512, and nothing becomes a call.
template <class V>
struct TailIo {
    static constexpr int W = Simd<V>::lanes;
    int64_t count;
    DEEPRNN_INLINE V load(const float* p) const {
        float buf[W];
        for (int k = 0; k < W; ++k) buf[k] = k < count ? p[k] : 0.0f;
        return Simd<V>::load(buf);
    }
    DEEPRNN_INLINE void store(float* p, const V& v) const {
        float buf[W];
        Simd<V>::store(buf, v);
        for (int k = 0; k < W; ++k)
            if (k < count) p[k] = buf[k];
    }
};

// Calls body(i, io) for i = 0, W, 2W, ... < n, where io loads/stores the W
// (or, last, fewer) elements at offset i: io.load(ptr + i), io.store(ptr + i, v).
template <class V, class Body>
DEEPRNN_INLINE void for_each_vector(int64_t n, Body&& body) {
    constexpr int W = Simd<V>::lanes;
    int64_t i = 0;
    for (; i + W <= n; i += W) body(i, FullIo<V>{});
    if (i < n) body(i, TailIo<V>{n - i});
}

// Instruction-set entry points: run_on_*<Kernel>(args...) calls
// Kernel::run<V>(args...) with that set's vector type, compiled for it.
// Everything a kernel calls is DEEPRNN_INLINE, so it all lands in the entry
// point and takes its target.
template <class Kernel, class... Args>
void run_on_baseline(Args... args) {
    Kernel::template run<BaselineVec>(args...);
}
#if DEEPRNN_X86_DISPATCH
template <class Kernel, class... Args>
DEEPRNN_TARGET_AVX2 void run_on_avx2(Args... args) {
    Kernel::template run<GnuVec<8>>(args...);
}
template <class Kernel, class... Args>
DEEPRNN_TARGET_AVX512 void run_on_avx512(Args... args) {
    Kernel::template run<GnuVec<16>>(args...);
}
#endif

// Kernel compiled for `level` (which must be compiled in: see simd_level_compiled).
template <class Kernel, class... Args>
auto kernel_for(SimdLevel level) -> void (*)(Args...) {
#if DEEPRNN_X86_DISPATCH
    if (level == SimdLevel::avx512) return &run_on_avx512<Kernel, Args...>;
    if (level == SimdLevel::avx2) return &run_on_avx2<Kernel, Args...>;
#endif
    (void)level;
    return &run_on_baseline<Kernel, Args...>;
}

bool simd_level_compiled(SimdLevel level);   // this binary has kernels for it
bool simd_level_supported(SimdLevel level);  // compiled and the CPU (and OS) run it
const char* simd_level_name(SimdLevel level);
SimdLevel best_simd_level();                  // the best this CPU runs (kernels.hpp's Isa too)

}  // namespace detail
}  // namespace deeprnn
