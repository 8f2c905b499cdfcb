// Continued-fraction tanh/sigmoid: dense accuracy sampling against double
// libm per term count and SIMD level, special values, odd-length tails, the
// precision knob, and a run of every SIMD level this CPU supports. The
// exhaustive sweep over all floats is tools/activation_sweep (not a test).
#include <boost/test/unit_test.hpp>

#include "deeprnn.hpp"
#include "src/activations.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace deeprnn::detail;

namespace {

uint32_t bits_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

float float_of(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Every 4099th finite float of either sign (about 2M values, all binades),
// plus values that matter: signed zeros, denormals, the largest floats,
// infinities, and neighbourhoods of 1 (the switch between the two forms in
// tanh_k), of where float tanh saturates, and of each clamp point.
std::vector<float> dense_inputs() {
    std::vector<float> x;
    for (uint64_t b = 0; b <= 0x7f7fffffu; b += 4099) {
        x.push_back(float_of(uint32_t(b)));
        x.push_back(-float_of(uint32_t(b)));
    }
    const float inf = std::numeric_limits<float>::infinity();
    for (float v : {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, -1.17549421e-38f, 1.17549435e-38f, 3.4028235e38f,
                    -3.4028235e38f, inf, -inf, 1e-4f, 0.5f, 1.0f, 2.0f, 9.0109f, 9.5f, 20.0f, 88.0f, 1e6f})
        x.push_back(v);
    std::vector<float> centres = {kTanhNearOne, static_cast<float>(std::atanh(1.0 - 0x1p-25))};
    for (int n = 1; n <= kMaxTerms; ++n) centres.push_back(kTanhRationals.by_terms[n].clamp);
    for (float c : centres)
        for (int k = -300; k <= 300; ++k) {
            x.push_back(float_of(uint32_t(int64_t(bits_of(c)) + k)));
            x.push_back(-float_of(uint32_t(int64_t(bits_of(c)) + k)));
        }
    return x;
}

struct Errors {
    double tanh_abs = 0, tanh_rel = 0, sigmoid_abs = 0;
};

Errors measure(const Activations& a, const std::vector<float>& x, const std::vector<double>& t_ref,
               const std::vector<double>& s_ref) {
    std::vector<float> t(x.size()), s(x.size());
    a.tanh(x.data(), t.data(), int64_t(x.size()));
    a.sigmoid(x.data(), s.data(), int64_t(x.size()));
    Errors e;
    for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i])) continue;
        const double et = std::fabs(t[i] - t_ref[i]);
        e.tanh_abs = std::max(e.tanh_abs, et);
        if (t_ref[i] != 0) e.tanh_rel = std::max(e.tanh_rel, et / std::fabs(t_ref[i]));
        e.sigmoid_abs = std::max(e.sigmoid_abs, std::fabs(s[i] - s_ref[i]));
    }
    return e;
}

// Every (SIMD level, term count) this CPU runs.
std::vector<Activations> all_tables() {
    std::vector<Activations> out;
    for (const Activations& best : activation_tables_supported(0))
        for (int n = 1; n <= kMaxTerms; ++n) out.push_back(activations_with_terms(best.level, n));
    return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(activations)

// The rational functions are the convergents of Lambert's fraction, with x²/4
// folded into the coefficients, clamped where the convergent stops rising.
BOOST_AUTO_TEST_CASE(coefficients_are_the_convergents) {
    const TanhRational& r1 = kTanhRationals.by_terms[1];  // tanh u ≈ u, reaches 1 at u = 1
    BOOST_TEST(r1.m == 1);
    BOOST_TEST(r1.p[0] == 1.0f);
    BOOST_TEST(r1.q[0] == 1.0f);
    BOOST_TEST(r1.clamp == 2.0f, boost::test_tools::tolerance(1e-6f));
    // N = 3: u(15 + u²)/(15 + 6u²); 1 at the root of u³ - 6u² + 15u - 15.
    const TanhRational& r3 = kTanhRationals.by_terms[3];
    BOOST_TEST(r3.m == 2);
    BOOST_TEST(r3.p[1] == float(1.0 / 15 / 4), boost::test_tools::tolerance(1e-7f));
    BOOST_TEST(r3.q[1] == float(6.0 / 15 / 4), boost::test_tools::tolerance(1e-7f));
    BOOST_TEST(r3.clamp == float(2 * 2.3221853546260855), boost::test_tools::tolerance(1e-6f));
    // N = 2: 3u/(3 + u²) peaks at u = √3.
    BOOST_TEST(kTanhRationals.by_terms[2].clamp == float(2 * std::sqrt(3.0)), boost::test_tools::tolerance(1e-6f));
    for (int n = 1; n <= kMaxTerms; ++n) {
        const TanhRational& r = kTanhRationals.by_terms[n];
        BOOST_TEST(r.terms == n);
        BOOST_TEST(r.p[0] == 1.0f);
        BOOST_TEST(r.q[0] == 1.0f);
        if (n > 1) BOOST_TEST(r.clamp > kTanhRationals.by_terms[n - 1].clamp);
    }
    // From 7 terms the clamp lies beyond where float tanh is already ±1.
    BOOST_TEST(kTanhRationals.by_terms[7].clamp > std::atanh(1.0 - 0x1p-25));
}

// Dense sample, every level and term count: within the published bounds,
// in range, odd bit for bit, exact at 0 and for denormals.
BOOST_AUTO_TEST_CASE(dense_sample_within_bounds_per_term_count) {
    const std::vector<float> x = dense_inputs();
    std::vector<double> t_ref(x.size()), s_ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) t_ref[i] = std::tanh(double(x[i])), s_ref[i] = sigmoid_ref(x[i]);
    for (const Activations& a : all_tables()) {
        BOOST_TEST_CONTEXT(a.isa << ", " << a.terms << " terms") {
            const ActivationAccuracy& bound = activation_accuracy(a.terms);
            const Errors e = measure(a, x, t_ref, s_ref);
            BOOST_TEST(e.tanh_abs <= bound.tanh_max_abs);
            BOOST_TEST(e.tanh_rel <= bound.tanh_max_rel);
            BOOST_TEST(e.sigmoid_abs <= bound.sigmoid_max_abs);
            BOOST_TEST(a.max_abs_error == std::max(bound.tanh_max_abs, bound.sigmoid_max_abs));

            std::vector<float> t(x.size()), s(x.size());
            a.tanh(x.data(), t.data(), int64_t(x.size()));
            a.sigmoid(x.data(), s.data(), int64_t(x.size()));
            size_t bad_range = 0, bad_exact = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                if (!(std::fabs(t[i]) <= 1) || !(s[i] >= 0 && s[i] <= 1)) ++bad_range;
                if (std::fabs(x[i]) < 1e-30f && bits_of(t[i]) != bits_of(x[i])) ++bad_exact;  // ±0, denormals
            }
            BOOST_TEST(bad_range == 0u);
            BOOST_TEST(bad_exact == 0u);
            // Odd: x and -x are neighbours in the sample.
            size_t not_odd = 0;
            for (size_t i = 0; i + 1 < x.size(); i += 2)
                if (x[i + 1] == -x[i] && bits_of(t[i + 1]) != (bits_of(t[i]) ^ 0x80000000u)) ++not_odd;
            BOOST_TEST(not_odd == 0u);
        }
    }
}

// NaN in, NaN out; infinities saturate; sigmoid(0) is exactly ½.
BOOST_AUTO_TEST_CASE(special_values) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const float x[] = {nan, -nan, inf, -inf, 0.0f, -0.0f, 30.0f, -30.0f};
    const int n = 8;
    for (const Activations& a : all_tables()) {
        BOOST_TEST_CONTEXT(a.isa << ", " << a.terms << " terms") {
            float t[n], s[n], r[n];
            a.tanh(x, t, n);
            a.sigmoid(x, s, n);
            a.relu(x, r, n);
            BOOST_TEST((std::isnan(t[0]) && std::isnan(t[1]) && std::isnan(s[0]) && std::isnan(s[1])));
            BOOST_TEST((std::isnan(r[0]) && std::isnan(r[1])));
            BOOST_TEST(s[4] == 0.5f);
            BOOST_TEST(s[5] == 0.5f);
            BOOST_TEST(r[2] == inf);
            BOOST_TEST(r[3] == 0.0f);
            BOOST_TEST(r[6] == 30.0f);
            BOOST_TEST(r[7] == 0.0f);
            if (a.terms % 2 == 1 || a.terms >= 7) {  // the convergent reaches 1 (odd N) or all but (N >= 7)
                BOOST_TEST(t[2] == 1.0f);
                BOOST_TEST(t[3] == -1.0f);
                BOOST_TEST(t[6] == 1.0f);
                BOOST_TEST(s[2] == 1.0f);
                BOOST_TEST(s[3] == 0.0f);
            }
        }
    }
}

// The default precision is float accuracy: about 2 ulp, so results match
// PyTorch's float32 (itself within an ulp of exact) to about 1e-6 relative,
// and float tanh's saturation at ±1 is reproduced exactly.
BOOST_AUTO_TEST_CASE(default_precision_is_float_accuracy) {
    const std::vector<float> x = dense_inputs();
    for (const Activations& a : activation_tables_supported(0)) {
        BOOST_TEST_CONTEXT(a.isa) {
            std::vector<float> t(x.size()), s(x.size());
            a.tanh(x.data(), t.data(), int64_t(x.size()));
            a.sigmoid(x.data(), s.data(), int64_t(x.size()));
            double max_rel = 0, max_sig_rel = 0;
            size_t unsaturated = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                const double r = std::tanh(double(x[i]));
                if (r != 0) max_rel = std::max(max_rel, std::fabs(t[i] - r) / std::fabs(r));
                if (x[i] >= 0) max_sig_rel = std::max(max_sig_rel, std::fabs(s[i] - sigmoid_ref(x[i])) / sigmoid_ref(x[i]));
                if (std::fabs(r) > 1 - 0x1p-25 && std::fabs(t[i]) != 1) ++unsaturated;
            }
            BOOST_TEST(max_rel < 3 * 0x1p-24);  // under 3 ulp (about 2 in the exhaustive sweep)
            BOOST_TEST(max_sig_rel < 3 * 0x1p-24);
            BOOST_TEST(max_rel < 1e-6);
            BOOST_TEST(unsaturated == 0u);
            BOOST_TEST(a.max_abs_error < 2e-7);
        }
    }
}

// Any length, any offset, in place or not: each element gets the result the
// full vectors give it (tails go through the same vector code).
BOOST_AUTO_TEST_CASE(odd_lengths_and_in_place_match) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-12.0f, 12.0f);
    std::vector<float> x(200);
    for (float& v : x) v = u(rng);
    for (const Activations& a : activation_tables_supported(1e-4)) {
        for (auto fn : {a.tanh, a.sigmoid, a.relu}) {
            std::vector<float> whole(x.size());
            fn(x.data(), whole.data(), int64_t(x.size()));
            size_t mismatches = 0;
            for (int n = 0; n <= 70; ++n)
                for (int off : {0, 1, 3, 17}) {
                    std::vector<float> y(x.begin() + off, x.begin() + off + n);
                    fn(y.data(), y.data(), n);  // in place
                    for (int i = 0; i < n; ++i)
                        if (bits_of(y[size_t(i)]) != bits_of(whole[size_t(off + i)])) ++mismatches;
                }
            BOOST_TEST(mismatches == 0u, a.isa);
        }
    }
}

// The precision knob: fewest terms whose bound meets the request; 0 and
// requests tighter than float accuracy get float accuracy.
BOOST_AUTO_TEST_CASE(knob_picks_fewest_terms) {
    const int float_terms = activation_terms(0);
    BOOST_TEST(float_terms >= 1);
    BOOST_TEST(float_terms <= kMaxTerms);
    BOOST_TEST(activation_terms(1e-12) == float_terms);
    BOOST_TEST(activation_terms(-1) == float_terms);
    for (double e : {0.1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 3e-7}) {
        const int n = activation_terms(e);
        const ActivationAccuracy& acc = activation_accuracy(n);
        BOOST_TEST_CONTEXT("max error " << e << " -> " << n << " terms") {
            BOOST_TEST(n <= float_terms);
            BOOST_TEST((std::max(acc.tanh_max_abs, acc.sigmoid_max_abs) <= e || n == float_terms));
            if (n > 1) BOOST_TEST(activation_accuracy(n - 1).tanh_max_abs > e);
            BOOST_TEST(select_activations(e).terms == n);
        }
    }
    // Looser requests never cost more terms.
    BOOST_TEST(activation_terms(1e-2) <= activation_terms(1e-4));
    BOOST_TEST(activation_terms(1e-4) < float_terms);
    for (int n = 1; n <= kMaxTerms; ++n)
        BOOST_TEST(activations_with_terms(SimdLevel::baseline, n).rational == &kTanhRationals.by_terms[n]);
    BOOST_CHECK_THROW(activations_with_terms(SimdLevel::baseline, 0), deeprnn::Error);
    BOOST_CHECK_THROW(activations_with_terms(SimdLevel::baseline, kMaxTerms + 1), deeprnn::Error);
}

// Run-time dispatch: every level the CPU has is compiled in and runs, the
// default is the best of them, and they agree within their bounds.
BOOST_AUTO_TEST_CASE(every_supported_level_runs) {
    const std::vector<Activations> tables = activation_tables_supported(0);
    BOOST_REQUIRE(!tables.empty());
    std::string names;
    for (const Activations& a : tables) names += std::string(a.isa) + " ";
    BOOST_TEST_MESSAGE("SIMD levels run: " << names);
    BOOST_TEST(std::string(select_activations(0).isa) == tables.front().isa);
    BOOST_TEST((tables.back().level == SimdLevel::baseline));
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) || defined(__clang__)
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    BOOST_TEST(simd_level_supported(SimdLevel::avx512) == avx512);
    BOOST_TEST(simd_level_supported(SimdLevel::avx2) == avx2);
    BOOST_TEST(std::string(select_activations(0).isa) == (avx512 ? "avx512" : avx2 ? "avx2" : simd_level_name(SimdLevel::baseline)));
    BOOST_TEST(tables.size() == size_t(1 + avx512 + avx2));
#endif
#endif
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = -10.0f + 0.02f * float(i);
    std::vector<float> y0(x.size()), y(x.size());
    tables.front().tanh(x.data(), y0.data(), int64_t(x.size()));
    for (const Activations& a : tables) {
        BOOST_TEST(a.tanh != nullptr);
        BOOST_TEST(a.rational == &kTanhRationals.by_terms[a.terms]);
        BOOST_TEST(std::string(select_activations_for_isa(a.isa, 0).isa) == a.isa);
        a.tanh(x.data(), y.data(), int64_t(x.size()));
        double diff = 0;
        for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, double(std::fabs(y[i] - y0[i])));
        BOOST_TEST(diff <= 2 * a.max_abs_error, a.isa);
    }
    BOOST_TEST(std::string(select_activations_for_isa("baseline", 0).isa) == simd_level_name(SimdLevel::baseline));
    BOOST_CHECK_THROW(select_activations_for_isa("bogus", 0), deeprnn::Error);
}

// The portable back ends (plain float; 4-lane GCC/Clang vectors), which other
// architectures and compilers fall back to, run the same kernel source and
// stay within the bounds.
BOOST_AUTO_TEST_CASE(portable_backends_agree) {
    const std::vector<float> x = dense_inputs();
    const int terms = activation_terms(0);
    const TanhRational& r = kTanhRationals.by_terms[terms];
    std::vector<float> y_float(x.size());
    {
        const TanhPoly<float> t(r);
        for (size_t i = 0; i < x.size(); ++i) {
            float v[1] = {x[i]};
            tanh_k(t, v);
            y_float[i] = v[0];
        }
    }
    std::vector<float> y_vec(x.size());
#if DEEPRNN_GNU_VECTORS
    {
        using V = GnuVec<4>;
        const TanhPoly<V> t(r);
        for_each_vector<V>(int64_t(x.size()), [&](int64_t i, const auto& io) {
            V v[1] = {io.load(x.data() + i)};
            tanh_k(t, v);
            io.store(y_vec.data() + i, v[0]);
        });
    }
#else
    y_vec = y_float;
#endif
    const double bound = activation_accuracy(terms).tanh_max_abs;
    size_t out_of_bound = 0, nan_wrong = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double ref = std::tanh(double(x[i]));
        for (float y : {y_float[i], y_vec[i]}) {
            if (std::isnan(x[i]) != std::isnan(y)) ++nan_wrong;
            if (!(std::fabs(y - ref) <= bound)) ++out_of_bound;
        }
    }
    BOOST_TEST(out_of_bound == 0u);
    BOOST_TEST(nan_wrong == 0u);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float v[1] = {nan};
    tanh_k(TanhPoly<float>(r), v);
    BOOST_TEST(std::isnan(v[0]));
}

BOOST_AUTO_TEST_SUITE_END()
