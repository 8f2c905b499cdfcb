// activations.cpp — tanh, sigmoid and relu over arrays, per instruction set and
// term count, and the choice of table. The kernels and the rational functions
// are in activations.hpp; docs/ACTIVATIONS.md has the measurements.
#include "activations.hpp"

#include <cmath>
#include <utility>

#include "common.hpp"

namespace deeprnn {
namespace detail {

namespace {

// y = tanh(x) or sigmoid(x) with N terms. N is a template argument so the
// coefficients are constants and the Horner loop unrolls.
template <int N, bool Sigmoid>
struct ActivationArray {
    template <class V>
    static DEEPRNN_INLINE void run(const float* x, float* y, int64_t n) {
        const TanhPoly<V> t(kTanhRationals.by_terms[N]);
        for_each_vector<V>(n, [&](int64_t i, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V v[1] = {io.load(x + i)};
            if (Sigmoid) v[0] = sigmoid_in(t, v[0]);
            tanh_k(t, v);
            io.store(y + i, Sigmoid ? sigmoid_out(t, v[0]) : v[0]);
        });
    }
};

struct ReluArray {
    template <class V>
    static DEEPRNN_INLINE void run(const float* x, float* y, int64_t n) {
        const V zero = Simd<V>::splat(0.0f);
        for_each_vector<V>(n, [&](int64_t i, const auto& io) DEEPRNN_INLINE_LAMBDA {
            io.store(y + i, clamp_below(io.load(x + i), zero));  // x < 0 ? 0 : x
        });
    }
};

using ActivationArrayFn = void (*)(const float*, float*, int64_t);

template <bool Sigmoid, int... N>
ActivationArrayFn activation_array_kernel(SimdLevel level, int terms, std::integer_sequence<int, N...>) {
    const ActivationArrayFn by_terms[] = {kernel_for<ActivationArray<N + 1, Sigmoid>, const float*, float*, int64_t>(level)...};
    return by_terms[terms - 1];
}

// Measured by tools/activation_sweep over every finite float: the worst of the
// avx512, avx2 (FMA) and sse2 (no FMA) levels, GCC 12 and Clang 14 builds,
// rounded up to 3 digits. Columns: terms, tanh abs, tanh rel, sigmoid abs.
// See docs/ACTIVATIONS.md.
constexpr ActivationAccuracy kActivationAccuracy[kMaxTerms] = {
    {1, 0.055, 0.0614, 0.0275},
    {2, 0.0103, 0.0103, 0.00514},
    {3, 0.000352, 0.000352, 0.000176},
    {4, 5.18e-05, 5.18e-05, 2.59e-05},
    {5, 1.95e-06, 1.95e-06, 1.01e-06},
    {6, 2.39e-07, 2.39e-07, 1.28e-07},
    {7, 1.33e-07, 1.74e-07, 8.56e-08},
    {8, 1.31e-07, 1.69e-07, 8.53e-08},
    {9, 1.3e-07, 1.68e-07, 8.86e-08},
    {10, 1.35e-07, 1.72e-07, 8.7e-08},
};

// "Float accuracy": the fewest terms at the float rounding floor.
constexpr int kFloatAccuracyTerms = 7;

Activations make_activations(SimdLevel level, int terms) {
    Activations a;
    a.level = level;
    a.isa = simd_level_name(level);
    a.terms = terms;
    const ActivationAccuracy& acc = activation_accuracy(a.terms);
    a.max_abs_error = acc.tanh_max_abs > acc.sigmoid_max_abs ? acc.tanh_max_abs : acc.sigmoid_max_abs;
    a.rational = &kTanhRationals.by_terms[a.terms];
    a.tanh = activation_array_kernel<false>(level, a.terms, std::make_integer_sequence<int, kMaxTerms>());
    a.sigmoid = activation_array_kernel<true>(level, a.terms, std::make_integer_sequence<int, kMaxTerms>());
    a.relu = kernel_for<ReluArray, const float*, float*, int64_t>(level);
    return a;
}

void check_terms(int terms) {
    if (terms < 1 || terms > kMaxTerms) fail("activation terms = ", terms, ": must be in [1, ", kMaxTerms, "]");
}

constexpr SimdLevel kLevelsBestFirst[] = {SimdLevel::avx512, SimdLevel::avx2, SimdLevel::baseline};

}  // namespace

bool simd_level_compiled(SimdLevel level) {
    return level == SimdLevel::baseline || DEEPRNN_X86_DISPATCH;
}

bool simd_level_supported(SimdLevel level) {
    if (!simd_level_compiled(level)) return false;
#if DEEPRNN_X86_DISPATCH
    // libgcc/compiler-rt also check that the OS saves the AVX/AVX-512 registers.
    __builtin_cpu_init();
    if (level == SimdLevel::avx512) return __builtin_cpu_supports("avx512f");
    if (level == SimdLevel::avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return level == SimdLevel::baseline;
}

const char* simd_level_name(SimdLevel level) {
    switch (level) {
        case SimdLevel::avx512: return "avx512";
        case SimdLevel::avx2: return "avx2";
        case SimdLevel::baseline: break;
    }
#ifndef XSIMD_NO_SUPPORTED_ARCHITECTURE
    return xsimd::default_arch::name();
#elif DEEPRNN_GNU_VECTORS
    return "vector128";
#else
    return "scalar";
#endif
}

const ActivationAccuracy& activation_accuracy(int terms) {
    check_terms(terms);
    return kActivationAccuracy[terms - 1];
}

int activation_terms(double max_abs_error) {
    if (!(max_abs_error > 0)) return kFloatAccuracyTerms;  // 0 (and anything not positive) = float accuracy
    for (int n = 1; n < kFloatAccuracyTerms; ++n) {
        const ActivationAccuracy& acc = kActivationAccuracy[n - 1];
        if (acc.tanh_max_abs <= max_abs_error && acc.sigmoid_max_abs <= max_abs_error) return n;
    }
    return kFloatAccuracyTerms;
}

Activations activations_with_terms(SimdLevel level, int terms) {
    check_terms(terms);
    if (!simd_level_supported(level)) fail("SIMD level ", simd_level_name(level), " is not supported here");
    return make_activations(level, terms);
}

SimdLevel best_simd_level() {
    for (SimdLevel level : kLevelsBestFirst)
        if (simd_level_supported(level)) return level;
    return SimdLevel::baseline;
}

Activations select_activations(double max_abs_error) {
    return activation_tables_supported(max_abs_error).front();  // the baseline is always there
}

std::vector<Activations> activation_tables_supported(double max_abs_error) {
    std::vector<Activations> tables;
    for (SimdLevel level : kLevelsBestFirst)
        if (simd_level_supported(level)) tables.push_back(make_activations(level, activation_terms(max_abs_error)));
    return tables;
}

Activations select_activations_for_isa(const char* isa, double max_abs_error) {
    const std::string name = isa ? isa : "";
    for (SimdLevel level : kLevelsBestFirst) {
        if (name != simd_level_name(level) && !(level == SimdLevel::baseline && name == "baseline")) continue;
        if (!simd_level_supported(level))
            fail("activation ISA \"", name, "\": ", simd_level_compiled(level) ? "not supported by this CPU" : "not compiled in");
        return make_activations(level, activation_terms(max_abs_error));
    }
    fail("activation ISA \"", name, "\": unknown (expected avx512, avx2 or baseline)");
}

}  // namespace detail
}  // namespace deeprnn
