// cells.cpp — fused cell updates (portable version).
#include "cells.hpp"

namespace deeprnn {
namespace detail {

// Written with comparisons that let NaN through (std::min/max would drop it).
static inline float clamp1(float v, float clip) { return v < -clip ? -clip : (v > clip ? clip : v); }

// s[j] = x[j] + s[j], clamped when clip > 0.
static void add_pre(const float* x, float* s, int n, float clip) {
    if (clip > 0) {
        for (int j = 0; j < n; ++j) s[j] = clamp1(x[j] + s[j], clip);
    } else {
        for (int j = 0; j < n; ++j) s[j] += x[j];
    }
}

static void clamp(float* s, int n, float clip) {
    if (clip <= 0) return;
    for (int j = 0; j < n; ++j) s[j] = clamp1(s[j], clip);
}

void lstm_cell(const Activations& act, const CellArgs& a) {
    const int n = a.n, st = a.stride;
    float* gi = a.hg;
    float* gf = a.hg + st;
    float* gg = a.hg + 2 * st;
    float* go = a.hg + 3 * st;
    if (a.peep) {
        const float* pi = a.peep;
        const float* pf = a.peep + a.peep_stride;
        for (int j = 0; j < n; ++j) {
            gi[j] += pi[j] * a.c[j];
            gf[j] += pf[j] * a.c[j];
        }
    }
    add_pre(a.xg, gi, n, a.clip);
    add_pre(a.xg + st, gf, n, a.clip);
    add_pre(a.xg + 2 * st, gg, n, a.clip);
    act.sigmoid(gi, gi, n);
    act.sigmoid(gf, gf, n);
    act.tanh(gg, gg, n);
    for (int j = 0; j < n; ++j) a.c[j] = gf[j] * a.c[j] + gi[j] * gg[j];
    if (a.peep) {
        const float* po = a.peep + 2 * a.peep_stride;
        for (int j = 0; j < n; ++j) go[j] += po[j] * a.c[j];
    }
    add_pre(a.xg + 3 * st, go, n, a.clip);
    act.sigmoid(go, go, n);
    act.tanh(a.c, a.h, n);
    for (int j = 0; j < n; ++j) a.h[j] *= go[j];
}

void gru_lbr_cell(const Activations& act, const CellArgs& a) {
    const int n = a.n, st = a.stride;
    float* r = a.hg;
    float* z = a.hg + st;
    float* hn = a.hg + 2 * st;
    add_pre(a.xg, r, n, a.clip);
    add_pre(a.xg + st, z, n, a.clip);
    act.sigmoid(r, r, n);
    act.sigmoid(z, z, n);
    const float* xn = a.xg + 2 * st;
    for (int j = 0; j < n; ++j) hn[j] = xn[j] + r[j] * (hn[j] + (a.b_hn ? a.b_hn[j] : 0.0f));
    clamp(hn, n, a.clip);
    act.tanh(hn, hn, n);
    for (int j = 0; j < n; ++j) a.h[j] = hn[j] + z[j] * (a.h_prev[j] - hn[j]);
}

void gru_rbm_gates(const Activations& act, const CellArgs& a) {
    const int n = a.n, st = a.stride;
    float* r = a.hg;
    float* z = a.hg + st;
    add_pre(a.xg, r, n, a.clip);
    add_pre(a.xg + st, z, n, a.clip);
    act.sigmoid(r, r, n);
    act.sigmoid(z, z, n);
    for (int j = 0; j < n; ++j) a.rh[j] = r[j] * a.h_prev[j];
}

void gru_rbm_cell(const Activations& act, const CellArgs& a) {
    const int n = a.n, st = a.stride;
    const float* z = a.hg + st;
    float* hn = a.hg + 2 * st;
    add_pre(a.xg + 2 * st, hn, n, a.clip);
    act.tanh(hn, hn, n);
    for (int j = 0; j < n; ++j) a.h[j] = hn[j] + z[j] * (a.h_prev[j] - hn[j]);
}

void rnn_cell(const Activations& act, const CellArgs& a, bool relu) {
    float* s = a.hg;
    add_pre(a.xg, s, a.n, a.clip);
    if (relu) {
        for (int j = 0; j < a.n; ++j) a.h[j] = s[j] < 0.0f ? 0.0f : s[j];  // NaN passes through
    } else {
        act.tanh(s, a.h, a.n);
    }
}

}  // namespace detail
}  // namespace deeprnn
