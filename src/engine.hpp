// engine.hpp — the packed model and the per-caller workspace that runs it.
//
// A model is a list of layer-directions (index layer*D + direction), each with
// its weights in PyTorch's gate order and biases folded where algebra allows,
// so the step loop adds one bias vector per gate and nothing else.
#pragma once
#include "cells.hpp"
#include "common.hpp"

#include <memory>
#include <vector>

namespace deeprnn {
namespace detail {

// One layer-direction's weights as every convention converts them: PyTorch
// layout and gate order. Empty biases/projection/peepholes mean "none".
struct RawLayer {
    std::vector<float> w_ih, w_hh;  // [G*H, in], [G*H, S]
    std::vector<float> b_ih, b_hh;  // [G*H] each, or empty
    std::vector<float> w_hr;        // [P, H], or empty
    std::vector<float> peep;        // [3, H] in order i, f, o, or empty
};

// What the step loop reads.
struct PackedLayer {
    int in = 0;                     // input features of this layer
    std::vector<float> w_ih;        // [G*H, in]
    std::vector<float> w_hh;        // [G*H, S]
    std::vector<float> b_x;         // [G*H] every bias that can join the input projection
    std::vector<float> b_hn;        // [H] GRU linear-before-reset only: stays inside r*(...)
    std::vector<float> w_hr;        // [P, H] LSTM projection, or empty
    std::vector<float> peep;        // [3, H] i, f, o, or empty
};

struct ModelImpl {
    Config cfg;
    int G = 0, H = 0, S = 0, D = 1, L = 1;  // gates, hidden, state, directions, layers
    Activations act;
    std::vector<PackedLayer> layers;        // index layer*D + direction
};

int gates_per_cell(Cell cell);

// Validates cfg against the raw layers' sizes and packs them.
std::shared_ptr<const ModelImpl> build_model(const Config& cfg, std::vector<RawLayer> raw);

// Per-caller scratch memory and the forward pass over it.
class SessionImpl {
public:
    explicit SessionImpl(std::shared_ptr<const ModelImpl> model);

    const ModelImpl& model() const { return *m_; }

    // Runs all layers over x [T, B, E] time-major. h [L*D, B, S] and c [L*D, B, H]
    // hold the initial states on entry and the final states on return.
    // y [T, B, D*S] may be nullptr. Sizes must already be validated.
    void forward(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c);

    // Time-major scratch copies for batch-first callers, sized on demand.
    float* staging_in(size_t n);
    float* staging_out(size_t n);
    // Initial/final state scratch [L*D, B, S] and [L*D, B, H].
    float* state_h() { return h_state_.data(); }
    float* state_c() { return c_state_.data(); }

private:
    void reserve_rows(size_t rows);
    void run_direction(int layer, int dir, const float* in, int T, int B, const int32_t* lengths,
                       float* out, float* h, float* c);
    void step_cells(const PackedLayer& p, int s, int T, int B, const int32_t* lengths, bool reverse,
                    float* h, float* c);

    std::shared_ptr<const ModelImpl> m_;
    size_t rows_ = 0;                                 // T*B rows the buffers hold
    std::vector<float> xproj_;                        // [T, B, G*H]
    std::vector<float> layer_out_[2];                 // [T, B, D*S] ping-pong between layers
    std::vector<float> hg_, hraw_, hnew_, rh_;        // per-step scratch, [B, ...]
    std::vector<float> h_state_, c_state_;            // run()'s state buffers
    std::vector<float> stage_in_, stage_out_;         // batch-first transposes
};

}  // namespace detail
}  // namespace deeprnn
