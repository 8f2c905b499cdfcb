// Fused cell kernels against a double-precision reference, on every SIMD
// level this CPU supports: LSTM (peepholes, clip), both GRU variants (sigmoid
// or hard_sigmoid gates, tanh or relu candidates), RNN tanh/relu; odd slice
// sizes and strides; nothing written outside the slice; NaN propagation
// through clip and relu.
#include <boost/test/unit_test.hpp>

#include "deeprnn.hpp"
#include "src/cells.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace deeprnn::detail;

namespace {

const float kCanary = 12345.0f;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// hard_sigmoid gates as the tests set them: not Keras's 0.2 and 0.5, so a
// swapped or ignored parameter shows.
const float kHardAlpha = 0.3f, kHardBeta = 0.45f;
double gate(bool hard, double x) { return hard ? std::min(1.0, std::max(0.0, kHardAlpha * x + double{kHardBeta})) : sig(x); }
// The candidate's activation: tanh, or relu (CellArgs::relu).
double cand(bool relu, double x) { return relu ? std::max(0.0, x) : std::tanh(x); }
double clipped(double v, float clip) { return clip > 0 ? std::min<double>(clip, std::max<double>(-clip, v)) : v; }

// One slice of n units with gates `stride` apart, surrounded by canaries.
struct Slice {
    int n, stride;
    std::vector<float> xg, hg, h_prev, c, h, peep, b_hn, rh;

    Slice(int n_, int stride_, uint32_t seed) : n(n_), stride(stride_) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-3.0f, 3.0f);
        auto fill = [&](std::vector<float>& v, size_t size) {
            v.assign(size + 8, kCanary);  // canaries after the end
            for (size_t i = 0; i < size; ++i) v[i] = u(rng);
        };
        fill(xg, size_t(4) * stride);
        fill(hg, size_t(4) * stride);
        fill(peep, size_t(3) * stride);
        fill(h_prev, size_t(n));
        fill(c, size_t(n));
        fill(b_hn, size_t(n));
        h.assign(size_t(n) + 8, kCanary);
        rh.assign(size_t(n) + 8, kCanary);
        // Canaries in the gaps between gate slices too (not read or written).
        for (int k = 0; k < 4; ++k)
            for (int j = n; j < stride; ++j) xg[size_t(k * stride + j)] = hg[size_t(k * stride + j)] = kCanary;
    }

    CellArgs args(float clip, bool peepholes, bool hard = false, bool relu = false) {
        CellArgs a;
        a.relu = relu;
        if (hard) {
            a.hard_alpha = kHardAlpha;
            a.hard_beta = kHardBeta;
        }
        a.n = n;
        a.stride = stride;
        a.xg = xg.data();
        a.hg = hg.data();
        a.h_prev = h_prev.data();
        a.c = c.data();
        a.h = h.data();
        a.peep = peepholes ? peep.data() : nullptr;
        a.peep_stride = stride;
        a.b_hn = b_hn.data();
        a.rh = rh.data();
        a.clip = clip;
        return a;
    }
};

// |got - want| within a few float ulp of the values involved plus the
// activations' own bound.
bool close(double got, double want, double act_err) {
    return std::fabs(got - want) <= 4 * act_err + 2e-6 * (1 + std::fabs(want));
}

size_t canaries_touched(const std::vector<float>& v, size_t from) {
    size_t bad = 0;
    for (size_t i = from; i < v.size(); ++i) bad += v[i] != kCanary;
    return bad;
}

const int kSizes[] = {1, 3, 8, 15, 16, 17, 31, 33, 64, 100};

}  // namespace

BOOST_AUTO_TEST_SUITE(cells)

BOOST_AUTO_TEST_CASE(lstm_matches_reference) {
    for (const Activations& act : activation_tables_supported(0))
        for (int n : kSizes)
            for (bool peep : {false, true})
                for (float clip : {0.0f, 1.5f})
                for (bool hard : {false, true})
                for (bool relu : {false, true}) {
                    BOOST_TEST_CONTEXT(act.isa << " n=" << n << " peep=" << peep << " clip=" << clip << " hard=" << hard << " relu=" << relu) {
                        Slice s(n, n + 5, 11u + uint32_t(n));
                        const Slice before = s;
                        lstm_cell(act, s.args(clip, peep, hard, relu));
                        size_t wrong = 0;
                        for (int j = 0; j < n; ++j) {
                            auto pre = [&](int k) { return double(before.xg[size_t(k * s.stride + j)]) + before.hg[size_t(k * s.stride + j)]; };
                            const double c0 = before.c[size_t(j)];
                            const double pi = peep ? before.peep[size_t(j)] : 0, pf = peep ? before.peep[size_t(s.stride + j)] : 0,
                                         po = peep ? before.peep[size_t(2 * s.stride + j)] : 0;
                            const double i = gate(hard, clipped(pre(0) + pi * c0, clip)), f = gate(hard, clipped(pre(1) + pf * c0, clip));
                            const double g = cand(relu, clipped(pre(2), clip));
                            const double c1 = f * c0 + i * g;
                            const double o = gate(hard, clipped(pre(3) + po * c1, clip));
                            const double h = o * cand(relu, c1);
                            wrong += !close(s.c[size_t(j)], c1, act.max_abs_error) + !close(s.h[size_t(j)], h, act.max_abs_error);
                        }
                        BOOST_TEST(wrong == 0u);
                        BOOST_TEST(canaries_touched(s.c, size_t(n)) + canaries_touched(s.h, size_t(n)) == 0u);
                    }
                }
}

BOOST_AUTO_TEST_CASE(gru_linear_before_reset_matches_reference) {
    for (const Activations& act : activation_tables_supported(0))
        for (int n : kSizes)
            for (float clip : {0.0f, 1.5f})
                for (bool bias : {false, true})
                for (bool hard : {false, true})
                for (bool relu : {false, true}) {
                    BOOST_TEST_CONTEXT(act.isa << " n=" << n << " clip=" << clip << " b_hn=" << bias << " hard=" << hard << " relu=" << relu) {
                        Slice s(n, n + 3, 23u + uint32_t(n));
                        const Slice before = s;
                        CellArgs a = s.args(clip, false, hard, relu);
                        if (!bias) a.b_hn = nullptr;
                        gru_lbr_cell(act, a);
                        size_t wrong = 0;
                        for (int j = 0; j < n; ++j) {
                            auto x = [&](int k) { return double(before.xg[size_t(k * s.stride + j)]); };
                            auto u = [&](int k) { return double(before.hg[size_t(k * s.stride + j)]); };
                            const double r = gate(hard, clipped(x(0) + u(0), clip)), z = gate(hard, clipped(x(1) + u(1), clip));
                            const double nn = cand(relu, clipped(x(2) + r * (u(2) + (bias ? before.b_hn[size_t(j)] : 0.0)), clip));
                            const double h = (1 - z) * nn + z * before.h_prev[size_t(j)];
                            wrong += !close(s.h[size_t(j)], h, act.max_abs_error);
                        }
                        BOOST_TEST(wrong == 0u);
                        BOOST_TEST(canaries_touched(s.h, size_t(n)) == 0u);
                    }
                }
}

// Two halves around the engine's U_n·(r*h): gates write r*h and sigmoid(z);
// the cell reads them back.
BOOST_AUTO_TEST_CASE(gru_reset_before_matmul_matches_reference) {
    for (const Activations& act : activation_tables_supported(0))
        for (int n : kSizes)
            for (float clip : {0.0f, 1.5f})
            for (bool hard : {false, true})
            for (bool relu : {false, true}) {
                BOOST_TEST_CONTEXT(act.isa << " n=" << n << " clip=" << clip << " hard=" << hard << " relu=" << relu) {
                    Slice s(n, n + 1, 37u + uint32_t(n));
                    const Slice before = s;
                    gru_rbm_gates(act, s.args(clip, false, hard, relu));
                    size_t wrong = 0;
                    std::vector<double> z(size_t(n), 0.0);
                    for (int j = 0; j < n; ++j) {
                        auto pre = [&](int k) { return double(before.xg[size_t(k * s.stride + j)]) + before.hg[size_t(k * s.stride + j)]; };
                        const double r = gate(hard, clipped(pre(0), clip));
                        z[size_t(j)] = gate(hard, clipped(pre(1), clip));
                        wrong += !close(s.rh[size_t(j)], r * before.h_prev[size_t(j)], act.max_abs_error);
                        wrong += !close(s.hg[size_t(s.stride + j)], z[size_t(j)], act.max_abs_error);
                    }
                    BOOST_TEST(canaries_touched(s.rh, size_t(n)) == 0u);
                    // The engine now stores U_n·(r*h) in the n slot; any values do.
                    for (int j = 0; j < n; ++j) s.hg[size_t(2 * s.stride + j)] = 0.25f * float(j % 7) - 0.8f;
                    gru_rbm_cell(act, s.args(clip, false, hard, relu));
                    for (int j = 0; j < n; ++j) {
                        const double nn = cand(relu, clipped(double(before.xg[size_t(2 * s.stride + j)]) + s.hg[size_t(2 * s.stride + j)], clip));
                        const double h = (1 - z[size_t(j)]) * nn + z[size_t(j)] * before.h_prev[size_t(j)];
                        wrong += !close(s.h[size_t(j)], h, act.max_abs_error);
                    }
                    BOOST_TEST(wrong == 0u);
                    BOOST_TEST(canaries_touched(s.h, size_t(n)) == 0u);
                }
            }
}

BOOST_AUTO_TEST_CASE(rnn_matches_reference) {
    for (const Activations& act : activation_tables_supported(0))
        for (int n : kSizes)
            for (bool relu : {false, true})
                for (float clip : {0.0f, 2.0f}) {
                    BOOST_TEST_CONTEXT(act.isa << " n=" << n << " relu=" << relu << " clip=" << clip) {
                        Slice s(n, n, 41u + uint32_t(n));
                        const Slice before = s;
                        rnn_cell(act, s.args(clip, false, false, relu));
                        size_t wrong = 0;
                        for (int j = 0; j < n; ++j) {
                            const double v = clipped(double(before.xg[size_t(j)]) + before.hg[size_t(j)], clip);
                            wrong += !close(s.h[size_t(j)], cand(relu, v), act.max_abs_error);
                        }
                        BOOST_TEST(wrong == 0u);
                        BOOST_TEST(canaries_touched(s.h, size_t(n)) == 0u);
                    }
                }
}

// A unit's result does not depend on the slice size or where it falls in a
// vector: the tail runs the same vector code.
BOOST_AUTO_TEST_CASE(tails_give_the_same_bits) {
    for (const Activations& act : activation_tables_supported(0)) {
        const int big = 48;
        Slice full(big, big, 5u);
        Slice ref = full;
        lstm_cell(act, ref.args(1.0f, true));
        size_t mismatches = 0;
        for (int n : {1, 5, 16, 17, 33, 47}) {
            Slice part = full;
            CellArgs a = part.args(1.0f, true);
            a.n = n;  // same data, same stride, fewer units
            lstm_cell(act, a);
            mismatches += std::memcmp(part.h.data(), ref.h.data(), sizeof(float) * size_t(n)) != 0;
            mismatches += std::memcmp(part.c.data(), ref.c.data(), sizeof(float) * size_t(n)) != 0;
            mismatches += part.h[size_t(n)] != full.h[size_t(n)];  // untouched past n
        }
        BOOST_TEST(mismatches == 0u, act.isa);
    }
}

// NaN in a pre-activation reaches that unit's outputs, also through clip and
// relu; other units stay finite.
BOOST_AUTO_TEST_CASE(nan_propagates) {
    for (const Activations& act : activation_tables_supported(0)) {
        BOOST_TEST_CONTEXT(act.isa) {
            for (float clip : {0.0f, 1.0f}) {
                const int n = 21, bad = 19;  // in the tail for every vector width
                Slice s(n, n, 3u);
                s.xg[size_t(2 * n + bad)] = kNaN;  // LSTM g / GRU n
                Slice lstm = s;
                lstm_cell(act, lstm.args(clip, false));
                BOOST_TEST((std::isnan(lstm.c[size_t(bad)]) && std::isnan(lstm.h[size_t(bad)])));
                BOOST_TEST((std::isfinite(lstm.h[0]) && std::isfinite(lstm.c[size_t(bad - 1)])));

                Slice gru = s;
                gru_lbr_cell(act, gru.args(clip, false));
                BOOST_TEST(std::isnan(gru.h[size_t(bad)]));
                BOOST_TEST(std::isfinite(gru.h[size_t(bad - 1)]));

                // Through relu candidates, and relu of the NaN cell state.
                Slice lstm_relu = s;
                lstm_cell(act, lstm_relu.args(clip, false, true, true));
                BOOST_TEST((std::isnan(lstm_relu.c[size_t(bad)]) && std::isnan(lstm_relu.h[size_t(bad)])));
                BOOST_TEST(std::isfinite(lstm_relu.h[size_t(bad - 1)]));
                Slice gru_relu = s;
                gru_lbr_cell(act, gru_relu.args(clip, false, false, true));
                BOOST_TEST(std::isnan(gru_relu.h[size_t(bad)]));
                BOOST_TEST(std::isfinite(gru_relu.h[size_t(bad - 1)]));

                Slice r = s;
                r.xg[size_t(bad)] = kNaN;
                rnn_cell(act, r.args(clip, false, false, true));
                BOOST_TEST(std::isnan(r.h[size_t(bad)]));  // relu(NaN) = NaN
                rnn_cell(act, r.args(clip, false));
                BOOST_TEST(std::isnan(r.h[size_t(bad)]));
                BOOST_TEST(std::isfinite(r.h[0]));

                for (bool hard : {false, true}) {
                    Slice z = s;
                    z.hg[size_t(n + bad)] = kNaN;  // GRU z
                    gru_rbm_gates(act, z.args(clip, false, hard));
                    BOOST_TEST(std::isnan(z.hg[size_t(n + bad)]));  // through the hard gate's clamps too
                    BOOST_TEST(std::isfinite(z.hg[size_t(n + bad - 1)]));
                }
            }
        }
    }
}

// Lower precision tables run the same kernels with fewer terms.
BOOST_AUTO_TEST_CASE(precision_knob_reaches_the_cells) {
    for (double e : {1e-2, 1e-4}) {
        for (const Activations& act : activation_tables_supported(e)) {
            Slice s(40, 40, 9u);
            const Slice before = s;
            rnn_cell(act, s.args(0.0f, false));
            double worst = 0;
            for (int j = 0; j < 40; ++j)
                worst = std::max(worst, std::fabs(s.h[size_t(j)] - std::tanh(double(before.xg[size_t(j)]) + before.hg[size_t(j)])));
            BOOST_TEST(worst <= act.max_abs_error + 1e-6, act.isa << " " << act.terms << " terms");
            BOOST_TEST(act.max_abs_error <= e);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
