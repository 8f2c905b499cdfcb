// cells.hpp — fused element-wise cell updates: gate pre-activations in, new
// states out, in one pass over a slice of hidden units.
//
// The engine computes, per batch row, the input-side pre-activations xg
// (input projection plus every bias that can be folded in) and the
// recurrent-side pre-activations hg = U·h_{t-1}; a cell kernel finishes the
// step for hidden units [0, n) of a slice. Gate k of the slice lives at
// xg + k*stride and hg + k*stride, so the same kernels serve the plain layout
// (stride = H) and partitioned layouts (stride = slice width).
//
// Gate order everywhere inside the library is PyTorch's: LSTM i,f,g,o;
// GRU r,z,n.
#pragma once
#include "activations.hpp"

namespace deeprnn {
namespace detail {

struct CellArgs {
    int n = 0;                    // hidden units in this slice
    int stride = 0;               // distance between gate slices in xg and hg
    const float* xg = nullptr;    // input-side pre-activations (biases folded in)
    float* hg = nullptr;          // recurrent-side pre-activations; used as scratch
    const float* h_prev = nullptr;  // previous hidden state slice (GRU)
    float* c = nullptr;           // LSTM cell state slice, updated in place
    float* h = nullptr;           // new hidden state slice (LSTM: before projection)
    const float* peep = nullptr;  // LSTM peepholes i,f,o at peep + k*peep_stride, or nullptr
    int peep_stride = 0;
    const float* b_hn = nullptr;  // GRU linear-before-reset recurrent bias of n
    float* rh = nullptr;          // GRU reset-before-matmul: r*h_prev written here
    float clip = 0.0f;            // > 0: clamp gate pre-activations to [-clip, clip]
    float hard_alpha = 0.0f;      // > 0: gates are hard_sigmoid = clamp(hard_alpha*x + hard_beta, 0, 1), not sigmoid
    float hard_beta = 0.0f;
    bool relu = false;            // the candidate (LSTM: and the cell output) is relu, not tanh
};

// Where the formulas below say tanh for a candidate or a cell output, it is
// relu when CellArgs::relu is set (Keras activation='relu', ONNX Relu).

// LSTM: c = f*c + i*g, h = o*tanh(c), with optional peepholes and clip.
void lstm_cell(const Activations& act, const CellArgs& a);

// GRU, linear-before-reset: n = tanh(xn + r*(hn + b_hn)), h = (1-z)*n + z*h_prev.
void gru_lbr_cell(const Activations& act, const CellArgs& a);

// GRU, reset-before-matmul, first half: r, z from xg+hg; writes rh = r*h_prev
// and leaves sigmoid(z) in the hg z slot for the second half.
void gru_rbm_gates(const Activations& act, const CellArgs& a);

// Second half, after the engine stored U_n·(r*h_prev) in the hg n slot:
// n = tanh(xn + that), h = (1-z)*n + z*h_prev.
void gru_rbm_cell(const Activations& act, const CellArgs& a);

// Vanilla RNN: h = tanh(xg + hg), or relu.
void rnn_cell(const Activations& act, const CellArgs& a);

}  // namespace detail
}  // namespace deeprnn
