// reference.hpp — a float64 reference RNN, written from the textbook formulas
// with plain loops. It shares no code with the library, so agreement means
// something. Gate order and weight layout are PyTorch's.
#pragma once
#include "deeprnn.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace ref {

// One layer-direction's parameters, PyTorch layout: w_ih [G*H, in], w_hh [G*H, S],
// biases [G*H], w_hr [P, H], peep [3, H] in order i, f, o.
struct Layer {
    std::vector<double> w_ih, w_hh, b_ih, b_hh, w_hr, peep;
};

struct Net {
    deeprnn::Config cfg;
    std::vector<Layer> layers;  // index layer*D + dir
};

inline int gates(deeprnn::Cell c) { return c == deeprnn::Cell::lstm ? 4 : c == deeprnn::Cell::gru ? 3 : 1; }

inline double sigm(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Result {
    std::vector<double> y, h_n, c_n;  // [T,B,D*S], [L*D,B,S], [L*D,B,H]
};

// Runs the network on x [T, B, E] (time-major).
inline Result run(const Net& net, const std::vector<double>& x, int T, int B, const std::vector<int>& lengths,
                  const std::vector<double>& h0, const std::vector<double>& c0) {
    const auto& c = net.cfg;
    const int G = gates(c.cell), H = c.hidden_size, S = c.proj_size ? c.proj_size : H;
    const int D = c.direction == deeprnn::Direction::bidirectional ? 2 : 1, L = c.num_layers;
    const double clip = c.clip;
    auto cl = [clip](double v) { return clip > 0 ? std::min(clip, std::max(-clip, v)) : v; };
    // The gates' activation: sigmoid, or clamp(alpha*v + beta, 0, 1) (NaN passes).
    auto gate = [&c](double v) {
        if (c.gate_activation == deeprnn::GateActivation::sigmoid || v != v) return sigm(v);
        return std::min(1.0, std::max(0.0, double{c.hard_sigmoid_alpha} * v + double{c.hard_sigmoid_beta}));
    };
    // The candidate's (and LSTM's cell output's): tanh, or relu (NaN passes).
    auto act = [&c](double v) {
        if (c.cell_activation == deeprnn::CellActivation::tanh || v != v) return std::tanh(v);
        return v < 0 ? 0.0 : v;
    };
    Result r;
    r.h_n.assign(static_cast<size_t>(L) * D * B * S, 0.0);
    r.c_n.assign(static_cast<size_t>(L) * D * B * H, 0.0);
    std::vector<double> in = x;
    int in_w = c.input_size;
    for (int l = 0; l < L; ++l) {
        std::vector<double> out(static_cast<size_t>(T) * B * D * S, 0.0);
        for (int d = 0; d < D; ++d) {
            const Layer& p = net.layers[l * D + d];
            const bool rev = d == 1 || c.direction == deeprnn::Direction::reverse;
            const int idx = l * D + d;
            for (int b = 0; b < B; ++b) {
                const int len = lengths.empty() ? T : lengths[b];
                std::vector<double> h(S, 0.0), cs(H, 0.0);
                if (!h0.empty()) for (int j = 0; j < S; ++j) h[j] = h0[(static_cast<size_t>(idx) * B + b) * S + j];
                if (!c0.empty()) for (int j = 0; j < H; ++j) cs[j] = c0[(static_cast<size_t>(idx) * B + b) * H + j];
                for (int s = 0; s < len; ++s) {
                    const int t = rev ? len - 1 - s : s;
                    const double* xt = &in[(static_cast<size_t>(t) * B + b) * in_w];
                    // wx[k] = W_ih x + b_ih, uh[k] = W_hh h + b_hh, per gate row k.
                    std::vector<double> wx(G * H), uh(G * H);
                    for (int k = 0; k < G * H; ++k) {
                        double a = p.b_ih.empty() ? 0 : p.b_ih[k], u = p.b_hh.empty() ? 0 : p.b_hh[k];
                        for (int e = 0; e < in_w; ++e) a += p.w_ih[static_cast<size_t>(k) * in_w + e] * xt[e];
                        for (int j = 0; j < S; ++j) u += p.w_hh[static_cast<size_t>(k) * S + j] * h[j];
                        wx[k] = a;
                        uh[k] = u;
                    }
                    std::vector<double> hn(S);
                    if (c.cell == deeprnn::Cell::lstm) {
                        std::vector<double> hr(H);
                        for (int j = 0; j < H; ++j) {
                            double pi = 0, pf = 0, po = 0;
                            if (!p.peep.empty()) { pi = p.peep[j]; pf = p.peep[H + j]; po = p.peep[2 * H + j]; }
                            const double i = gate(cl(wx[j] + uh[j] + pi * cs[j]));
                            const double f = gate(cl(wx[H + j] + uh[H + j] + pf * cs[j]));
                            const double g = act(cl(wx[2 * H + j] + uh[2 * H + j]));
                            cs[j] = f * cs[j] + i * g;
                            const double o = gate(cl(wx[3 * H + j] + uh[3 * H + j] + po * cs[j]));
                            hr[j] = o * act(cs[j]);
                        }
                        if (c.proj_size) {
                            for (int q = 0; q < S; ++q) {
                                double a = 0;
                                for (int j = 0; j < H; ++j) a += p.w_hr[static_cast<size_t>(q) * H + j] * hr[j];
                                hn[q] = a;
                            }
                        } else {
                            hn = hr;
                        }
                    } else if (c.cell == deeprnn::Cell::gru) {
                        std::vector<double> rv(H), zv(H);
                        for (int j = 0; j < H; ++j) {
                            rv[j] = gate(cl(wx[j] + uh[j]));
                            zv[j] = gate(cl(wx[H + j] + uh[H + j]));
                        }
                        for (int j = 0; j < H; ++j) {
                            double npre;
                            if (c.gru_variant == deeprnn::GruVariant::linear_before_reset) {
                                npre = wx[2 * H + j] + rv[j] * uh[2 * H + j];
                            } else {
                                double u = p.b_hh.empty() ? 0 : p.b_hh[2 * H + j];
                                for (int q = 0; q < H; ++q) u += p.w_hh[static_cast<size_t>(2 * H + j) * H + q] * rv[q] * h[q];
                                npre = wx[2 * H + j] + u;
                            }
                            const double n = act(cl(npre));
                            hn[j] = (1 - zv[j]) * n + zv[j] * h[j];
                        }
                    } else {
                        for (int j = 0; j < H; ++j) {
                            const double a = cl(wx[j] + uh[j]);
                            hn[j] = c.cell == deeprnn::Cell::rnn_relu ? (a < 0 ? 0.0 : a) : std::tanh(a);  // relu(NaN) = NaN, as PyTorch
                        }
                    }
                    h = hn;
                    for (int j = 0; j < S; ++j) out[(static_cast<size_t>(t) * B + b) * D * S + d * S + j] = h[j];
                }
                for (int j = 0; j < S; ++j) r.h_n[(static_cast<size_t>(idx) * B + b) * S + j] = h[j];
                for (int j = 0; j < H; ++j) r.c_n[(static_cast<size_t>(idx) * B + b) * H + j] = cs[j];
            }
        }
        in = out;
        in_w = D * S;
    }
    r.y = in;
    return r;
}

// Random parameters for cfg, uniform in [-scale, scale].
inline Net random_net(const deeprnn::Config& cfg, std::mt19937& rng, double scale, bool bias = true, bool peep = false) {
    Net n;
    n.cfg = cfg;
    std::uniform_real_distribution<double> u(-scale, scale);
    auto fill = [&](std::vector<double>& v, size_t count) {
        v.resize(count);
        for (auto& e : v) e = static_cast<float>(u(rng));  // representable in float32 exactly
    };
    const int G = gates(cfg.cell), H = cfg.hidden_size, S = cfg.proj_size ? cfg.proj_size : H;
    const int D = cfg.direction == deeprnn::Direction::bidirectional ? 2 : 1;
    for (int l = 0; l < cfg.num_layers; ++l)
        for (int d = 0; d < D; ++d) {
            Layer p;
            const int in = l == 0 ? cfg.input_size : D * S;
            fill(p.w_ih, static_cast<size_t>(G) * H * in);
            fill(p.w_hh, static_cast<size_t>(G) * H * S);
            if (bias) { fill(p.b_ih, static_cast<size_t>(G) * H); fill(p.b_hh, static_cast<size_t>(G) * H); }
            if (cfg.proj_size) fill(p.w_hr, static_cast<size_t>(S) * H);
            if (peep) fill(p.peep, static_cast<size_t>(3) * H);
            n.layers.push_back(p);
        }
    return n;
}

inline deeprnn::Tensor tensor(const std::vector<double>& v, std::vector<int64_t> shape) {
    deeprnn::Tensor t;
    t.shape = std::move(shape);
    t.data.assign(v.begin(), v.end());
    return t;
}

// The net's weights named and shaped as PyTorch names them.
inline deeprnn::Weights torch_weights(const Net& n) {
    const auto& c = n.cfg;
    const int G = gates(c.cell), H = c.hidden_size, S = c.proj_size ? c.proj_size : H;
    const int D = c.direction == deeprnn::Direction::bidirectional ? 2 : 1;
    deeprnn::Weights w;
    for (int l = 0; l < c.num_layers; ++l)
        for (int d = 0; d < D; ++d) {
            const Layer& p = n.layers[l * D + d];
            const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
            const int64_t in = l == 0 ? c.input_size : D * S;
            w["weight_ih" + sfx] = tensor(p.w_ih, {G * H, in});
            w["weight_hh" + sfx] = tensor(p.w_hh, {G * H, S});
            if (!p.b_ih.empty()) {
                w["bias_ih" + sfx] = tensor(p.b_ih, {G * H});
                w["bias_hh" + sfx] = tensor(p.b_hh, {G * H});
            }
            if (c.proj_size) w["weight_hr" + sfx] = tensor(p.w_hr, {S, H});
        }
    return w;
}

// ONNX tensors (W, R, B, P) for a one-layer net: gate reorder i,f,g,o -> i,o,f,c and r,z,n -> z,r,h.
inline deeprnn::Weights onnx_weights(const Net& n) {
    const auto& c = n.cfg;
    const int G = gates(c.cell), H = c.hidden_size, E = c.input_size;
    const int D = c.direction == deeprnn::Direction::bidirectional ? 2 : 1;
    static const int lstm[4] = {0, 3, 1, 2}, gru[3] = {1, 0, 2}, one[1] = {0};
    const int* from = c.cell == deeprnn::Cell::lstm ? lstm : c.cell == deeprnn::Cell::gru ? gru : one;
    auto reorder = [&](const std::vector<double>& v, int cols, std::vector<double>& out) {
        for (int g = 0; g < G; ++g)
            out.insert(out.end(), v.begin() + static_cast<size_t>(from[g]) * H * cols,
                       v.begin() + static_cast<size_t>(from[g] + 1) * H * cols);
    };
    std::vector<double> W, R, Bv, P;
    for (int d = 0; d < D; ++d) {
        const Layer& p = n.layers[d];
        reorder(p.w_ih, E, W);
        reorder(p.w_hh, H, R);
        if (!p.b_ih.empty()) {  // B is optional: without it the biases are zeros
            reorder(p.b_ih, 1, Bv);
            reorder(p.b_hh, 1, Bv);
        }
        if (!p.peep.empty()) {  // i, f, o -> i, o, f
            P.insert(P.end(), p.peep.begin(), p.peep.begin() + H);
            P.insert(P.end(), p.peep.begin() + 2 * H, p.peep.end());
            P.insert(P.end(), p.peep.begin() + H, p.peep.begin() + 2 * H);
        }
    }
    deeprnn::Weights w;
    w["W"] = tensor(W, {D, G * H, E});
    w["R"] = tensor(R, {D, G * H, H});
    if (!Bv.empty()) w["B"] = tensor(Bv, {D, 2 * G * H});
    if (!P.empty()) w["P"] = tensor(P, {D, 3 * H});
    return w;
}

// The library side, for tests that compare runs: y [T, B, output_size] of one
// Session::run of `model` on x [T, B, E] from zero states.
inline std::vector<float> run_model(const deeprnn::Model& model, const std::vector<float>& x, int T, int B) {
    deeprnn::Session session(model);
    std::vector<float> y(static_cast<size_t>(T) * B * model.output_size());
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = T;
    in.batch = B;
    deeprnn::RunOutput out;
    out.y = y.data();
    session.run(in, out);
    return y;
}

// How far an output is from the float64 truth: the largest absolute error
// and the relative L2 error.
struct ErrorStats {
    double max_abs = 0, rel_l2 = 0;
};
// rel_l2 divides by the reference's norm, but by no less than an RMS of
// 0.1 per element: outputs here are O(1) (bounded by tanh and sigmoid), and
// a vector of a few values that happen to lie near 0 would turn the float
// rounding of their sums into a large "relative" error: a one-unit relu
// network with 120 inputs (random_models, seed 5062) had h_n of 1.1e-3 and
// 1.5e-2, the first off by 9.8e-8 (a sum of 121 terms of order 0.1-1 in
// float), 5.7e-6 "relative" to an RMS of 0.01 (the floor until 2026-12-04).
// Such vectors are held by the absolute bound instead.
inline ErrorStats error_stats(const std::vector<float>& got, const std::vector<double>& want) {
    ErrorStats e;
    double num = 0, den = 0;
    size_t n = 0;
    for (; n < got.size() && n < want.size(); ++n) {
        const double d = std::fabs(got[n] - want[n]);
        e.max_abs = std::max(e.max_abs, d);
        num += d * d;
        den += want[n] * want[n];
    }
    e.rel_l2 = std::sqrt(num / std::max(den, 1e-2 * static_cast<double>(std::max<size_t>(n, 1))));
    return e;
}

}  // namespace ref
