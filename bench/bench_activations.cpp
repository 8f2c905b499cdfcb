// bench_activations — elements per nanosecond of tanh and sigmoid, one thread,
// at lengths 64, 256, 1024 and 4096, against:
//   * a std::tanh loop, and 1/(1+std::exp(-x)) for sigmoid (what a user writes);
//   * a minimax rational tanh of our own (below), run through the same SIMD
//     machinery and dispatch, i.e. the other way to build such a kernel;
//   * our continued-fraction kernels on every SIMD level this CPU runs, at the
//     default precision and at activation_max_error = 1e-4.
// It also prints each kernel's max error on a dense sample, so speeds are
// compared at known accuracy, and the LSTM step (units/ns) of the fused cell
// kernel against the same work done as separate passes over the gates with
// the array kernels (what cells.cpp did before it was fused).
//
//   tools/amalgamate
//   g++ -std=c++17 -O3 -I. bench/bench_activations.cpp deeprnn.cpp -o bench_activations -lopenblas -lboost_thread -lpthread
//   ./bench_activations [--reps R]
//
// Build without -march flags: the run-time dispatch is what users get.
#include "deeprnn.hpp"
#include "src/activations.hpp"
#include "src/cells.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace deeprnn::detail;

namespace {

using Fn = void (*)(const float*, float*, int64_t);

void std_tanh(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void std_sigmoid(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

// Minimax rational tanh x ≈ x·P(x²)/Q(x²), degrees 13/6 (7 + 4 coefficients,
// 9 FMAs and one division, like Eigen's), for |x| <= 9, fitted by us for the
// least maximum relative error on [0, 9] (Loeb's linearisation with Lawson
// reweighting, in 50-digit mpmath; 1.3e-8 before rounding to float).
constexpr float kMinimaxP[] = {1.000000000e+00f, 1.308458745e-01f, 3.104601055e-03f, 1.116087151e-05f,
                               -2.024999368e-08f, 5.288571664e-11f, -8.512178999e-14f};
constexpr float kMinimaxQ[] = {1.000000000e+00f, 4.641791284e-01f, 2.449775301e-02f, 2.547076147e-04f};
constexpr float kMinimaxClamp = 9.0f;

template <bool Sigmoid>
struct MinimaxArray {
    template <class V>
    static DEEPRNN_INLINE void run(const float* x, float* y, int64_t n) {
        using S = Simd<V>;
        const V hi = S::splat(kMinimaxClamp), lo = S::splat(-kMinimaxClamp), half = S::splat(0.5f);
        const V one = S::splat(1.0f), minus_one = S::splat(-1.0f);
        V p[7], q[4];
        for (int k = 0; k < 7; ++k) p[k] = S::splat(kMinimaxP[k]);
        for (int k = 0; k < 4; ++k) q[k] = S::splat(kMinimaxQ[k]);
        for_each_vector<V>(n, [&](int64_t i, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V v = io.load(x + i);
            if (Sigmoid) v = v * half;
            v = clamp_below(clamp_above(v, hi), lo);
            const V s = v * v;
            V P = p[6], Q = q[3];
            for (int k = 5; k >= 0; --k) P = S::mul_add(P, s, p[k]);
            for (int k = 2; k >= 0; --k) Q = S::mul_add(Q, s, q[k]);
            V t = clamp_below(clamp_above(v * P / Q, one), minus_one);
            if (Sigmoid) t = S::mul_add(t, half, half);
            io.store(y + i, t);
        });
    }
};

// The LSTM step as separate passes (no peepholes, no clip): add, activate
// each gate in place, combine.
void lstm_unfused(const Activations& act, const CellArgs& a) {
    const int n = a.n, st = a.stride;
    float* g = a.hg;
    for (int k = 0; k < 4; ++k)
        for (int j = 0; j < n; ++j) g[k * st + j] += a.xg[k * st + j];
    act.sigmoid(g, g, n);
    act.sigmoid(g + st, g + st, n);
    act.tanh(g + 2 * st, g + 2 * st, n);
    act.sigmoid(g + 3 * st, g + 3 * st, n);
    for (int j = 0; j < n; ++j) a.c[j] = g[st + j] * a.c[j] + g[j] * g[2 * st + j];
    act.tanh(a.c, a.h, n);
    for (int j = 0; j < n; ++j) a.h[j] *= g[3 * st + j];
}

// Units per ns of one LSTM step over H units (gate inputs refreshed from a
// copy each call so values stay in range; the copy is timed in both).
double lstm_units_per_ns(const Activations& act, bool fused, int H, int reps) {
    const size_t units = size_t(H), gates = 4 * units;
    std::vector<float> xg(gates), hg0(gates), hg(gates), c0(units), c(units), h(units);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (float& v : xg) v = u(rng);
    for (float& v : hg0) v = u(rng);
    for (float& v : c0) v = u(rng);
    CellArgs a;
    a.n = H;
    a.stride = H;
    a.xg = xg.data();
    a.hg = hg.data();
    a.c = c.data();
    a.h = h.data();
    const int iters = std::max(1, 400000 / H);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int it = 0; it < iters; ++it) {
            std::memcpy(hg.data(), hg0.data(), hg.size() * sizeof(float));
            std::memcpy(c.data(), c0.data(), c.size() * sizeof(float));
            if (fused)
                lstm_cell(act, a);
            else
                lstm_unfused(act, a);
            asm volatile("" : : "r"(h.data()) : "memory");
        }
        best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / iters);
    }
    return H / best;
}

struct Row {
    std::string name;
    Fn fn;
    bool sigmoid;
};

// Best time per call over reps, each rep long enough (~1 ms) to time.
double elements_per_ns(Fn fn, const std::vector<float>& x, std::vector<float>& y, int reps) {
    const int64_t n = int64_t(x.size());
    const int iters = int(std::max<int64_t>(1, 1000000 / (n * 4)));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int it = 0; it < iters; ++it) {
            fn(x.data(), y.data(), n);
            asm volatile("" : : "r"(y.data()) : "memory");  // keep every call
        }
        const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, ns / iters);
    }
    return double(n) / best;
}

// Max abs error and max error in ulps (of the exact result) on every 4099th
// float of either sign; sigmoid's ulp error over x >= 0.
void accuracy(Fn fn, bool sigmoid, double& max_abs, double& max_ulp) {
    std::vector<float> x;
    for (uint64_t b = 0; b <= 0x7f7fffffu; b += 4099) {
        float f;
        const uint32_t u = uint32_t(b);
        std::memcpy(&f, &u, 4);
        x.push_back(f);
        x.push_back(-f);
    }
    std::vector<float> y(x.size());
    fn(x.data(), y.data(), int64_t(x.size()));
    max_abs = max_ulp = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double r = sigmoid ? 1 / (1 + std::exp(-double(x[i]))) : std::tanh(double(x[i]));
        const double e = std::fabs(y[i] - r);
        max_abs = std::max(max_abs, e);
        if (sigmoid && x[i] < 0) continue;
        int ex;
        std::frexp(std::max(std::fabs(r), 0x1p-126), &ex);
        max_ulp = std::max(max_ulp, e / std::ldexp(1.0, ex - 24));
    }
}

}  // namespace

int main(int argc, char** argv) {
    int reps = 30;
    for (int i = 1; i + 1 < argc; i += 2)
        if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));

    std::vector<Row> rows = {{"std::tanh loop", std_tanh, false}, {"1/(1+std::exp(-x)) loop", std_sigmoid, true}};
    const std::vector<Activations> tables = activation_tables_supported(0);
    for (const Activations& a : tables) {
        const std::string isa = a.isa;
        rows.push_back({"minimax 13/6 " + isa, kernel_for<MinimaxArray<false>, const float*, float*, int64_t>(a.level), false});
        rows.push_back({"minimax 13/6 " + isa, kernel_for<MinimaxArray<true>, const float*, float*, int64_t>(a.level), true});
        rows.push_back({"deeprnn " + isa + " " + std::to_string(a.terms) + " terms (default)", a.tanh, false});
        rows.push_back({"deeprnn " + isa + " " + std::to_string(a.terms) + " terms (default)", a.sigmoid, true});
    }
    const Activations coarse = select_activations(1e-4);
    rows.push_back({std::string("deeprnn ") + coarse.isa + " " + std::to_string(coarse.terms) + " terms (1e-4)", coarse.tanh, false});
    rows.push_back({std::string("deeprnn ") + coarse.isa + " " + std::to_string(coarse.terms) + " terms (1e-4)", coarse.sigmoid, true});

    const int lengths[] = {64, 256, 1024, 4096};
    std::printf("one thread; inputs uniform in [-10, 10]; elements/ns (best of %d), x = speed-up over the libm loop\n", reps);
    for (bool sigmoid : {false, true}) {
        std::printf("\n| %s | max abs err | max ulp | n=64 | n=256 | n=1024 | n=4096 |\n|---|---|---|---|---|---|---|\n",
                    sigmoid ? "sigmoid" : "tanh");
        std::vector<double> base(4, 0);
        for (const Row& r : rows) {
            if (r.sigmoid != sigmoid) continue;
            double max_abs, max_ulp;
            accuracy(r.fn, sigmoid, max_abs, max_ulp);
            std::printf("| %s | %.2g | %.2f |", r.name.c_str(), max_abs, max_ulp);
            for (int k = 0; k < 4; ++k) {
                const size_t len = size_t(lengths[k]);
                std::vector<float> x(len), y(len);
                std::mt19937 rng(42);
                std::uniform_real_distribution<float> u(-10.0f, 10.0f);
                for (float& v : x) v = u(rng);
                const double e = elements_per_ns(r.fn, x, y, reps);
                if (base[size_t(k)] == 0) base[size_t(k)] = e;  // first row: the libm loop
                std::printf(" %.3f (%.0fx) |", e, e / base[size_t(k)]);
            }
            std::printf("\n");
        }
    }

    std::printf("\n| LSTM step (units/ns) | H=64 | H=256 | H=1024 | H=4096 |\n|---|---|---|---|---|\n");
    for (const Activations& a : tables)
        for (bool fused : {false, true}) {
            std::printf("| %s %s |", a.isa, fused ? "fused lstm_cell" : "separate passes");
            for (int H : {64, 256, 1024, 4096}) std::printf(" %.3f |", lstm_units_per_ns(a, fused, H, reps));
            std::printf("\n");
        }
    return 0;
}
