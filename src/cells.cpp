// cells.cpp — fused cell updates: one pass over the slice, one vector of hidden
// units at a time, every activation inlined (activations.hpp) and the gates of
// a unit evaluated together so their Horner chains overlap. Compiled per
// instruction set like the activation arrays; the Activations table says which.
//
// NaN rules: arithmetic propagates NaN; clip and relu use comparisons that let
// NaN through (x < lo ? lo : x); tanh/sigmoid of NaN are NaN.
#include "cells.hpp"

namespace deeprnn {
namespace detail {

namespace {

// Gate pre-activation xg + hg (+ peephole), clamped to [-clip, clip] when clip is on.
template <class V>
struct GatePre {
    using S = Simd<V>;
    bool clip;
    V lo, hi;
    explicit DEEPRNN_INLINE GatePre(float c) : clip(c > 0), lo(S::splat(clip ? -c : -1.0f)), hi(S::splat(clip ? c : 1.0f)) {}
    DEEPRNN_INLINE V operator()(const V& v) const { return clip ? clamp_above(clamp_below(v, lo), hi) : v; }
};

// The gates' activation, with the tanh of the cell's other values: in
// place, v[k] = gate(v[k]) for k < NSig and tanh(v[k]) for the rest, the tanh
// chains evaluated together so they overlap. A sigmoid gate goes through the
// same tanh (sigmoid(x) = ½ + ½·tanh(x/2)); a hard one needs none.
template <class V>
struct HardSigmoid {
    V alpha, beta, zero, one;
    explicit DEEPRNN_INLINE HardSigmoid(const CellArgs& a)
        : alpha(Simd<V>::splat(a.hard_alpha)), beta(Simd<V>::splat(a.hard_beta)),
          zero(Simd<V>::splat(0.0f)), one(Simd<V>::splat(1.0f)) {}
    // clamp(alpha*x + beta, 0, 1); NaN passes.
    DEEPRNN_INLINE V operator()(const V& x) const { return clamp_above(clamp_below(Simd<V>::mul_add(x, alpha, beta), zero), one); }
};

template <int NSig, bool Hard, class V, int N>
DEEPRNN_INLINE void activate(const TanhPoly<V>& t, const HardSigmoid<V>& hard, V (&v)[N]) {
    if constexpr (!Hard) {
        for (int k = 0; k < NSig; ++k) v[k] = sigmoid_in(t, v[k]);
        tanh_k(t, v);
        for (int k = 0; k < NSig; ++k) v[k] = sigmoid_out(t, v[k]);
    } else {
        for (int k = 0; k < NSig; ++k) v[k] = hard(v[k]);
        if constexpr (N > NSig) {
            V rest[N - NSig];
            for (int k = NSig; k < N; ++k) rest[k - NSig] = v[k];
            tanh_k(t, rest);
            for (int k = NSig; k < N; ++k) v[k] = rest[k - NSig];
        }
    }
}

template <bool Hard>
struct LstmCell {
    template <class V>
    static DEEPRNN_INLINE void run(const TanhRational& r, const CellArgs& a) {
        using S = Simd<V>;
        const TanhPoly<V> t(r);
        const GatePre<V> pre(a.clip);
        const HardSigmoid<V> hard(a);
        const int64_t st = a.stride, ps = a.peep_stride;
        for_each_vector<V>(a.n, [&](int64_t j, const auto& io) DEEPRNN_INLINE_LAMBDA {
            const V c = io.load(a.c + j);
            V hi = io.load(a.hg + j), hf = io.load(a.hg + st + j);
            if (a.peep) {
                hi = S::mul_add(io.load(a.peep + j), c, hi);
                hf = S::mul_add(io.load(a.peep + ps + j), c, hf);
            }
            // i, f, g together.
            V g[3] = {pre(io.load(a.xg + j) + hi), pre(io.load(a.xg + st + j) + hf),
                      pre(io.load(a.xg + 2 * st + j) + io.load(a.hg + 2 * st + j))};
            activate<2, Hard>(t, hard, g);
            const V c_new = S::mul_add(g[1], c, g[0] * g[2]);
            // o (its peephole sees the new c) and tanh(c) together.
            V ho = io.load(a.hg + 3 * st + j);
            if (a.peep) ho = S::mul_add(io.load(a.peep + 2 * ps + j), c_new, ho);
            V oc[2] = {pre(io.load(a.xg + 3 * st + j) + ho), c_new};
            activate<1, Hard>(t, hard, oc);
            io.store(a.c + j, c_new);
            io.store(a.h + j, oc[0] * oc[1]);
        });
    }
};

// (1-z)*n + z*h_prev, written as n + z*(h_prev - n).
template <class V>
DEEPRNN_INLINE V gru_mix(const V& n, const V& z, const V& h_prev) {
    return Simd<V>::mul_add(z, h_prev - n, n);
}

template <bool Hard>
struct GruLbrCell {
    template <class V>
    static DEEPRNN_INLINE void run(const TanhRational& r, const CellArgs& a) {
        using S = Simd<V>;
        const TanhPoly<V> t(r);
        const GatePre<V> pre(a.clip);
        const HardSigmoid<V> hard(a);
        const int64_t st = a.stride;
        const V zero = S::splat(0.0f);
        for_each_vector<V>(a.n, [&](int64_t j, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V rz[2] = {pre(io.load(a.xg + j) + io.load(a.hg + j)), pre(io.load(a.xg + st + j) + io.load(a.hg + st + j))};
            activate<2, Hard>(t, hard, rz);
            const V b_hn = a.b_hn ? io.load(a.b_hn + j) : zero;
            V n[1] = {pre(S::mul_add(rz[0], io.load(a.hg + 2 * st + j) + b_hn, io.load(a.xg + 2 * st + j)))};
            tanh_k(t, n);
            io.store(a.h + j, gru_mix(n[0], rz[1], io.load(a.h_prev + j)));
        });
    }
};

template <bool Hard>
struct GruRbmGates {
    template <class V>
    static DEEPRNN_INLINE void run(const TanhRational& r, const CellArgs& a) {
        const TanhPoly<V> t(r);
        const GatePre<V> pre(a.clip);
        const HardSigmoid<V> hard(a);
        const int64_t st = a.stride;
        for_each_vector<V>(a.n, [&](int64_t j, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V rz[2] = {pre(io.load(a.xg + j) + io.load(a.hg + j)), pre(io.load(a.xg + st + j) + io.load(a.hg + st + j))};
            activate<2, Hard>(t, hard, rz);
            io.store(a.rh + j, rz[0] * io.load(a.h_prev + j));
            io.store(a.hg + st + j, rz[1]);  // z, for gru_rbm_cell
        });
    }
};

struct GruRbmCell {
    template <class V>
    static DEEPRNN_INLINE void run(const TanhRational& r, const CellArgs& a) {
        const TanhPoly<V> t(r);
        const GatePre<V> pre(a.clip);
        const int64_t st = a.stride;
        for_each_vector<V>(a.n, [&](int64_t j, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V n[1] = {pre(io.load(a.xg + 2 * st + j) + io.load(a.hg + 2 * st + j))};
            tanh_k(t, n);
            io.store(a.h + j, gru_mix(n[0], io.load(a.hg + st + j), io.load(a.h_prev + j)));
        });
    }
};

template <bool Relu>
struct RnnCell {
    template <class V>
    static DEEPRNN_INLINE void run(const TanhRational& r, const CellArgs& a) {
        const TanhPoly<V> t(r);
        const GatePre<V> pre(a.clip);
        const V zero = Simd<V>::splat(0.0f);
        for_each_vector<V>(a.n, [&](int64_t j, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V s[1] = {pre(io.load(a.xg + j) + io.load(a.hg + j))};
            if (Relu)
                s[0] = clamp_below(s[0], zero);  // s < 0 ? 0 : s, NaN passes
            else
                tanh_k(t, s);
            io.store(a.h + j, s[0]);
        });
    }
};

// Runs Kernel compiled for the table's instruction set.
template <class Kernel>
DEEPRNN_INLINE void run_cell(const Activations& act, const CellArgs& a) {
    kernel_for<Kernel, const TanhRational&, const CellArgs&>(act.level)(*act.rational, a);
}

}  // namespace

// Kernel<true> for hard_sigmoid gates, else Kernel<false>.
template <template <bool> class Kernel>
DEEPRNN_INLINE void run_gated_cell(const Activations& act, const CellArgs& a) {
    if (a.hard_alpha > 0)
        run_cell<Kernel<true>>(act, a);
    else
        run_cell<Kernel<false>>(act, a);
}

void lstm_cell(const Activations& act, const CellArgs& a) { run_gated_cell<LstmCell>(act, a); }

void gru_lbr_cell(const Activations& act, const CellArgs& a) { run_gated_cell<GruLbrCell>(act, a); }

void gru_rbm_gates(const Activations& act, const CellArgs& a) { run_gated_cell<GruRbmGates>(act, a); }

void gru_rbm_cell(const Activations& act, const CellArgs& a) { run_cell<GruRbmCell>(act, a); }

void rnn_cell(const Activations& act, const CellArgs& a, bool relu) {
    if (relu)
        run_cell<RnnCell<true>>(act, a);
    else
        run_cell<RnnCell<false>>(act, a);
}

}  // namespace detail
}  // namespace deeprnn
