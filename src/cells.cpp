// cells.cpp — fused cell updates: one pass over the slice, one vector of hidden
// units at a time, every activation inlined (activations.hpp) and the gates of
// a unit evaluated together so their Horner chains overlap. Compiled per
// instruction set like the activation arrays; the Activations table says which.
//
// NaN rules: arithmetic propagates NaN; clip, relu and hard_sigmoid use comparisons that let
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

// clamp(alpha*x + beta, 0, 1); NaN passes.
template <class V>
struct HardSigmoid {
    V alpha, beta, zero, one;
    explicit DEEPRNN_INLINE HardSigmoid(const CellArgs& a)
        : alpha(Simd<V>::splat(a.hard_alpha)), beta(Simd<V>::splat(a.hard_beta)),
          zero(Simd<V>::splat(0.0f)), one(Simd<V>::splat(1.0f)) {}
    DEEPRNN_INLINE V operator()(const V& x) const { return clamp_above(clamp_below(Simd<V>::mul_add(x, alpha, beta), zero), one); }
};

// The cell's activation of its candidate (and LSTM's cell output), in place:
// tanh, chains evaluated together so they overlap, or relu (NaN passes).
template <bool Relu, class V, int N>
DEEPRNN_INLINE void candidate(const TanhPoly<V>& t, V (&v)[N]) {
    if constexpr (Relu) {
        const V zero = Simd<V>::splat(0.0f);
        for (int k = 0; k < N; ++k) v[k] = clamp_below(v[k], zero);
    } else {
        tanh_k(t, v);
    }
}

// In place, v[k] = gate(v[k]) for k < NSig and candidate(v[k]) for the rest.
// With sigmoid gates and tanh candidates every chain is one tanh (sigmoid(x)
// = ½ + ½·tanh(x/2)), all evaluated together; a hard gate or a relu needs none.
template <int NSig, bool Hard, bool Relu, class V, int N>
DEEPRNN_INLINE void activate(const TanhPoly<V>& t, const HardSigmoid<V>& hard, V (&v)[N]) {
    if constexpr (!Hard && !Relu) {
        for (int k = 0; k < NSig; ++k) v[k] = sigmoid_in(t, v[k]);
        tanh_k(t, v);
        for (int k = 0; k < NSig; ++k) v[k] = sigmoid_out(t, v[k]);
        return;
    } else {
        if constexpr (Hard) {
            for (int k = 0; k < NSig; ++k) v[k] = hard(v[k]);
        } else {
            V gates[NSig];
            for (int k = 0; k < NSig; ++k) gates[k] = sigmoid_in(t, v[k]);
            tanh_k(t, gates);
            for (int k = 0; k < NSig; ++k) v[k] = sigmoid_out(t, gates[k]);
        }
        if constexpr (N > NSig) {
            V rest[N - NSig];
            for (int k = NSig; k < N; ++k) rest[k - NSig] = v[k];
            candidate<Relu>(t, rest);
            for (int k = NSig; k < N; ++k) v[k] = rest[k - NSig];
        }
    }
}

template <bool Hard, bool Relu>
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
            activate<2, Hard, Relu>(t, hard, g);
            const V c_new = S::mul_add(g[1], c, g[0] * g[2]);
            // o (its peephole sees the new c) and tanh(c) together.
            V ho = io.load(a.hg + 3 * st + j);
            if (a.peep) ho = S::mul_add(io.load(a.peep + 2 * ps + j), c_new, ho);
            V oc[2] = {pre(io.load(a.xg + 3 * st + j) + ho), c_new};
            activate<1, Hard, Relu>(t, hard, oc);
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

template <bool Hard, bool Relu>
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
            activate<2, Hard, false>(t, hard, rz);
            const V b_hn = a.b_hn ? io.load(a.b_hn + j) : zero;
            V n[1] = {pre(S::mul_add(rz[0], io.load(a.hg + 2 * st + j) + b_hn, io.load(a.xg + 2 * st + j)))};
            candidate<Relu>(t, n);
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
            activate<2, Hard, false>(t, hard, rz);
            io.store(a.rh + j, rz[0] * io.load(a.h_prev + j));
            io.store(a.hg + st + j, rz[1]);  // z, for gru_rbm_cell
        });
    }
};

template <bool Relu>
struct GruRbmCell {
    template <class V>
    static DEEPRNN_INLINE void run(const TanhRational& r, const CellArgs& a) {
        const TanhPoly<V> t(r);
        const GatePre<V> pre(a.clip);
        const int64_t st = a.stride;
        for_each_vector<V>(a.n, [&](int64_t j, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V n[1] = {pre(io.load(a.xg + 2 * st + j) + io.load(a.hg + 2 * st + j))};
            candidate<Relu>(t, n);
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
        for_each_vector<V>(a.n, [&](int64_t j, const auto& io) DEEPRNN_INLINE_LAMBDA {
            V s[1] = {pre(io.load(a.xg + j) + io.load(a.hg + j))};
            candidate<Relu>(t, s);
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

// Kernel<Relu> for a relu candidate, else Kernel<false> (tanh).
template <template <bool> class Kernel>
DEEPRNN_INLINE void run_candidate_cell(const Activations& act, const CellArgs& a) {
    if (a.relu)
        run_cell<Kernel<true>>(act, a);
    else
        run_cell<Kernel<false>>(act, a);
}

// Kernel<Hard, Relu>: Hard for hard_sigmoid gates, Relu for a relu candidate.
template <template <bool, bool> class Kernel, bool Hard>
DEEPRNN_INLINE void run_gated_cell_with(const Activations& act, const CellArgs& a) {
    if (a.relu)
        run_cell<Kernel<Hard, true>>(act, a);
    else
        run_cell<Kernel<Hard, false>>(act, a);
}

template <template <bool, bool> class Kernel>
DEEPRNN_INLINE void run_gated_cell(const Activations& act, const CellArgs& a) {
    if (a.hard_alpha > 0)
        run_gated_cell_with<Kernel, true>(act, a);
    else
        run_gated_cell_with<Kernel, false>(act, a);
}

void lstm_cell(const Activations& act, const CellArgs& a) { run_gated_cell<LstmCell>(act, a); }

void gru_lbr_cell(const Activations& act, const CellArgs& a) { run_gated_cell<GruLbrCell>(act, a); }

void gru_rbm_gates(const Activations& act, const CellArgs& a) {
    if (a.hard_alpha > 0)
        run_cell<GruRbmGates<true>>(act, a);
    else
        run_cell<GruRbmGates<false>>(act, a);
}

void gru_rbm_cell(const Activations& act, const CellArgs& a) { run_candidate_cell<GruRbmCell>(act, a); }

void rnn_cell(const Activations& act, const CellArgs& a) { run_candidate_cell<RnnCell>(act, a); }

}  // namespace detail
}  // namespace deeprnn
