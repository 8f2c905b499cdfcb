// impls.hpp — the implementations compared, behind one small interface.
//
// Each implementation is built from a Problem (all conversion and weight
// reordering happens at construction, outside any timed region); run() is one
// forward pass over the whole sequence with zero initial state, and output()
// is then the last layer's y [T, B, H].
#ifndef DEEPRNN_BENCH_IMPLS_HPP
#define DEEPRNN_BENCH_IMPLS_HPP

#include <memory>
#include <string>
#include <vector>

#include "../deeprnn.hpp"
#include "workloads.hpp"

namespace bench {

class Impl {
public:
    explicit Impl(std::string name) : name_(std::move(name)) {}
    virtual ~Impl() = default;
    virtual void run() = 0;
    virtual const float* output() const = 0;
    /// What the implementation chose to run, if it chooses (deeprnn: its plan's schedule); "" otherwise.
    virtual std::string plan() const { return ""; }
    /// Medians over `runs` profiled runs back to back (deeprnn: Session::set_profiling) of the
    /// run and of each worker's working and waiting time; "" if it cannot profile.
    virtual std::string profile(int /*runs*/) { return ""; }
    const std::string& name() const { return name_; }

private:
    std::string name_;
};

using ImplPtr = std::unique_ptr<Impl>;

/// deeprnn through its public API (Model + Session), Config.threads = threads;
/// named "deeprnn", or "deeprnn-bf16" / "deeprnn-int8" for reduced-precision weights.
ImplPtr make_deeprnn(const Problem& p, int threads, deeprnn::WeightPrecision precision);
/// One line about the deeprnn build (version, SIMD path, BLAS).
std::string deeprnn_info();

/// The framework-style loop of DeepCPU's Listing 1 (TensorFlow/CNTK): per
/// step an OpenBLAS sgemm of [x_t h_{t-1}] by the concatenated weights (GRU:
/// x_t W and h_{t-1} U, as Keras' reset_after GRU), then scalar std::exp /
/// std::tanh activations. Threads: OpenBLAS's pool.
ImplPtr make_framework(const Problem& p);

/// oneDNN's RNN primitive (lstm_forward, or lbr_gru_forward for the GRU),
/// inference, f32, weights reordered once. One entry per distinct weight
/// layout: "onednn-any" (format_tag::any: oneDNN's choice, its brgemm
/// kernel), left out when that choice is plain ldigo anyway, and
/// "onednn-ldigo" (plain layout, its GEMM path). Empty without oneDNN.
std::vector<ImplPtr> make_onednn(const Problem& p);
/// oneDNN's own reduced precision, the peer of deeprnn-bf16 / deeprnn-int8:
/// "onednn-bf16" (bf16 activations and weights) or "onednn-int8" (u8
/// activations, s8 weights scaled per gate and unit; LSTM only), weights in
/// oneDNN's chosen layout. Throws what oneDNN refuses, or without oneDNN.
ImplPtr make_onednn_reduced(const Problem& p, deeprnn::WeightPrecision precision);
bool have_onednn();
std::string onednn_info();

/// Sets the thread count of the OpenMP runtime oneDNN runs on (no-op without oneDNN).
void set_onednn_threads(int threads);

}  // namespace bench

#endif
