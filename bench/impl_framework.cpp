// impl_framework.cpp — the TensorFlow/CNTK-style baseline (DeepCPU Listing 1).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "impls.hpp"

namespace bench {
namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// y[M, N] = a[M, K] * b[K, N] (+ y when accumulate), all row-major.
void gemm(int m, int n, int k, const float* a, const float* b, float* y, bool accumulate) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n,
                accumulate ? 1.0f : 0.0f, y, n);
}

// TensorFlow's kernel layout: rows of `w` [G*H, cols] become columns of the
// returned [cols, G*H] block, written at row `row0` of `out`.
void put_transposed(const std::vector<float>& w, int gh, int cols, std::vector<float>& out, int row0) {
    for (int r = 0; r < gh; ++r)
        for (int c = 0; c < cols; ++c) out[std::size_t(row0 + c) * gh + r] = w[std::size_t(r) * cols + c];
}

class Framework final : public Impl {
public:
    explicit Framework(const Problem& p) : Impl("framework"), p_(p), w_(p.work) {
        const int gh = gate_count(w_.cell) * w_.hidden;
        for (int l = 0; l < w_.layers; ++l) {
            const LayerWeights& src = p.layers[l];
            const int in = w_.layer_input(l);
            Layer layer;
            layer.kernel.resize(std::size_t(in + w_.hidden) * gh);  // [E+H, G*H]: W_ih^T over W_hh^T
            put_transposed(src.w_ih, gh, in, layer.kernel, 0);
            put_transposed(src.w_hh, gh, w_.hidden, layer.kernel, in);
            layer.b_x = src.b_ih;
            layer.b_h = src.b_hh;
            if (w_.cell == CellKind::lstm) {  // one bias, as TensorFlow's LSTMCell
                for (int i = 0; i < gh; ++i) layer.b_x[i] += layer.b_h[i];
            }
            layers_.push_back(std::move(layer));
        }
        const std::size_t bh = std::size_t(w_.batch) * w_.hidden;
        const int max_in = std::max(w_.input, w_.hidden);
        xh_.resize(std::size_t(w_.batch) * (max_in + w_.hidden));
        gates_.resize(std::size_t(w_.batch) * gh);
        gates_h_.resize(gates_.size());
        h_.resize(bh);
        c_.resize(bh);
        for (auto& y : y_) y.resize(std::size_t(w_.seq) * bh);
    }

    void run() override {
        const float* in = p_.x.data();
        for (int l = 0; l < w_.layers; ++l) {
            float* out = y_[l % 2].data();
            run_layer(layers_[l], w_.layer_input(l), in, out);
            in = out;
        }
    }

    const float* output() const override { return y_[(w_.layers - 1) % 2].data(); }

private:
    struct Layer {
        std::vector<float> kernel, b_x, b_h;  // LSTM: b_x = b_ih + b_hh
    };

    void run_layer(const Layer& layer, int in_size, const float* x, float* y) {
        std::fill(h_.begin(), h_.end(), 0.0f);
        std::fill(c_.begin(), c_.end(), 0.0f);
        const std::size_t bh = std::size_t(w_.batch) * w_.hidden;
        for (int t = 0; t < w_.seq; ++t) {
            const float* xt = x + std::size_t(t) * w_.batch * in_size;
            if (w_.cell == CellKind::lstm)
                lstm_step(layer, in_size, xt);
            else
                gru_step(layer, in_size, xt);
            std::memcpy(y + t * bh, h_.data(), bh * sizeof(float));
        }
    }

    // gates = [x_t h] * [W_ih^T; W_hh^T], one sgemm; then the element-wise cell.
    void lstm_step(const Layer& layer, int in_size, const float* xt) {
        const int H = w_.hidden, k = in_size + H, gh = 4 * H;
        for (int b = 0; b < w_.batch; ++b) {
            std::copy(xt + b * in_size, xt + (b + 1) * in_size, &xh_[std::size_t(b) * k]);
            std::copy(&h_[std::size_t(b) * H], &h_[std::size_t(b + 1) * H], &xh_[std::size_t(b) * k + in_size]);
        }
        gemm(w_.batch, gh, k, xh_.data(), layer.kernel.data(), gates_.data(), false);
        for (int b = 0; b < w_.batch; ++b) {
            const float* g = &gates_[std::size_t(b) * gh];
            for (int j = 0; j < H; ++j) {
                auto pre = [&](int gate) { return g[gate * H + j] + layer.b_x[gate * H + j]; };
                float& c = c_[std::size_t(b) * H + j];
                c = sigmoid(pre(1)) * c + sigmoid(pre(0)) * std::tanh(pre(2));
                h_[std::size_t(b) * H + j] = sigmoid(pre(3)) * std::tanh(c);
            }
        }
    }

    // Keras GRU(reset_after=True): x_t W and h U per step, then the cell.
    void gru_step(const Layer& layer, int in_size, const float* xt) {
        const int H = w_.hidden, gh = 3 * H;
        const float* w_x = layer.kernel.data();
        const float* w_h = w_x + std::size_t(in_size) * gh;
        gemm(w_.batch, gh, in_size, xt, w_x, gates_.data(), false);
        gemm(w_.batch, gh, H, h_.data(), w_h, gates_h_.data(), false);
        for (int b = 0; b < w_.batch; ++b) {
            const float* gx = &gates_[std::size_t(b) * gh];
            const float* gu = &gates_h_[std::size_t(b) * gh];
            for (int j = 0; j < H; ++j) {
                auto x_part = [&](int gate) { return gx[gate * H + j] + layer.b_x[gate * H + j]; };
                auto h_part = [&](int gate) { return gu[gate * H + j] + layer.b_h[gate * H + j]; };
                const float r = sigmoid(x_part(0) + h_part(0));
                const float z = sigmoid(x_part(1) + h_part(1));
                const float n = std::tanh(x_part(2) + r * h_part(2));
                float& h = h_[std::size_t(b) * H + j];
                h = (1.0f - z) * n + z * h;
            }
        }
    }

    const Problem& p_;
    const Workload w_;
    std::vector<Layer> layers_;
    std::vector<float> xh_, gates_, gates_h_, h_, c_;
    std::vector<float> y_[2];  // layer outputs, ping-pong
};

}  // namespace

ImplPtr make_framework(const Problem& p) { return std::make_unique<Framework>(p); }

}  // namespace bench
