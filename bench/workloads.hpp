// workloads.hpp — the benchmark's configurations and the problem data they make.
//
// Weights follow the PyTorch convention, which every implementation converts
// from: per layer W_ih [G*H, E], W_hh [G*H, H], b_ih, b_hh [G*H]; gate order
// LSTM i,f,g,o and GRU r,z,n with the linear-before-reset candidate
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).
#ifndef DEEPRNN_BENCH_WORKLOADS_HPP
#define DEEPRNN_BENCH_WORKLOADS_HPP

#include <cstddef>
#include <string>
#include <vector>

namespace bench {

enum class CellKind { lstm, gru };
const char* to_string(CellKind cell);
int gate_count(CellKind cell);  ///< G: 4 for LSTM, 3 for GRU

/// One benchmark configuration: a forward pass over the whole sequence.
struct Workload {
    CellKind cell = CellKind::lstm;
    std::string name;  ///< e.g. "t1-64-64-1-100" (group-input-hidden-batch-seq)
    int input = 0, hidden = 0, batch = 1, seq = 1, layers = 1;

    std::string id() const;          ///< "<cell>/<name>", what --filter matches
    int layer_input(int layer) const { return layer == 0 ? input : hidden; }
    double flops() const;            ///< matrix-product flops: sum over layers of 2*T*B*G*H*(E_l+H)
    /// The flops a run from a zero state cannot skip: step 0's recurrent
    /// product is exactly zero, so 2*B*G*H*(T*E_l + (T-1)*H) per layer.
    double necessary_flops() const;
    std::size_t w_ih_bytes(int layer) const;
    std::size_t w_hh_bytes(int layer) const;
};

/// A configuration named "<group>-E-H-B-T", e.g. make_workload(lstm, "t1", 64, 64, 1, 100).
Workload make_workload(CellKind cell, const std::string& group, int input, int hidden, int batch, int seq,
                       int layers = 1);

/// DeepCPU Table 1 (LSTM and GRU), the paper's real-world RNNs and a 2-layer char-RNN.
std::vector<Workload> default_suite();

struct LayerWeights {
    std::vector<float> w_ih, w_hh, b_ih, b_hh;  ///< PyTorch layout, see above
};

/// The data of one run: weights (PyTorch init, U(-1/sqrt(H), 1/sqrt(H))) and
/// an input x [T, B, E] drawn from U(-1, 1); deterministic for a given workload.
struct Problem {
    Workload work;
    std::vector<LayerWeights> layers;
    std::vector<float> x;
};
Problem make_problem(const Workload& work);

}  // namespace bench

#endif
