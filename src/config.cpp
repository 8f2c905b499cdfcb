// config.cpp — Config validation and the names used in messages and flags.
#include "common.hpp"
#include "gpu_plan.hpp"
#include "pool.hpp"

#include <cmath>
#include <thread>

namespace deeprnn {

const char* to_string(Cell cell) {
    switch (cell) {
        case Cell::lstm: return "lstm";
        case Cell::gru: return "gru";
        case Cell::rnn_tanh: return "rnn_tanh";
        case Cell::rnn_relu: return "rnn_relu";
    }
    return "invalid";
}

const char* to_string(GruVariant variant) {
    switch (variant) {
        case GruVariant::linear_before_reset: return "linear-before-reset";
        case GruVariant::reset_before_matmul: return "reset-before-matmul";
    }
    return "invalid";
}

const char* to_string(Direction direction) {
    switch (direction) {
        case Direction::forward: return "forward";
        case Direction::reverse: return "reverse";
        case Direction::bidirectional: return "bidirectional";
    }
    return "invalid";
}

const char* to_string(Convention convention) {
    switch (convention) {
        case Convention::torch: return "torch";
        case Convention::onnx: return "onnx";
        case Convention::keras: return "keras";
    }
    return "invalid";
}

const char* to_string(WeightPrecision precision) {
    switch (precision) {
        case WeightPrecision::f32: return "f32";
        case WeightPrecision::bf16: return "bf16";
        case WeightPrecision::int8: return "int8";
    }
    return "invalid";
}

const char* to_string(GateActivation activation) {
    switch (activation) {
        case GateActivation::sigmoid: return "sigmoid";
        case GateActivation::hard_sigmoid: return "hard_sigmoid";
    }
    return "invalid";
}

const char* to_string(CellActivation activation) {
    switch (activation) {
        case CellActivation::tanh: return "tanh";
        case CellActivation::relu: return "relu";
    }
    return "invalid";
}

const char* to_string(Tuning tuning) {
    switch (tuning) {
        case Tuning::heuristic: return "heuristic";
        case Tuning::calibrate: return "calibrate";
        case Tuning::exhaustive: return "exhaustive";
    }
    return "invalid";
}

int num_directions(const Config& config) { return config.direction == Direction::bidirectional ? 2 : 1; }

int state_size(const Config& config) { return config.proj_size > 0 ? config.proj_size : config.hidden_size; }

namespace detail {

// Enums arrive from casts and C callers too: an out-of-range value is an error, not UB.
template <typename E>
void require_enum(E value, const char* field, int count) {
    const int v = static_cast<int>(value);
    require(v >= 0 && v < count, field, v, "not a valid enumerator");
}

constexpr int kMaxSize = 1 << 20;  // generous; keeps every size product inside int64

}  // namespace detail

void validate(const Config& c) {
    using detail::require;
    detail::require_enum(c.cell, "Config.cell", 4);
    detail::require_enum(c.gru_variant, "Config.gru_variant", 2);
    detail::require_enum(c.convention, "Config.convention", 3);
    detail::require_enum(c.direction, "Config.direction", 3);
    detail::require_enum(c.backend, "Config.backend", 3);
    detail::require_enum(c.tuning, "Config.tuning", 3);
    detail::require_enum(c.weight_precision, "Config.weight_precision", 3);
    require(c.input_size >= 1 && c.input_size <= detail::kMaxSize, "Config.input_size", c.input_size,
            "must be in [1, 1048576]");
    require(c.hidden_size >= 1 && c.hidden_size <= detail::kMaxSize, "Config.hidden_size", c.hidden_size,
            "must be in [1, 1048576]");
    require(c.num_layers >= 1 && c.num_layers <= 1024, "Config.num_layers", c.num_layers, "must be in [1, 1024]");
    require(c.proj_size >= 0, "Config.proj_size", c.proj_size, "must be >= 0");
    if (c.proj_size > 0) {
        require(c.cell == Cell::lstm, "Config.proj_size", c.proj_size,
                "projection needs cell = lstm, not ", to_string(c.cell));
        require(c.proj_size < c.hidden_size, "Config.proj_size", c.proj_size,
                "must be less than hidden_size (", c.hidden_size, ")");
    }
    if (c.peepholes)
        require(c.cell == Cell::lstm, "Config.peepholes", "true",
                "peepholes need cell = lstm, not ", to_string(c.cell));
    require(std::isfinite(c.clip) && c.clip >= 0, "Config.clip", c.clip, "must be finite and >= 0 (0 = off)");
    detail::require_enum(c.gate_activation, "Config.gate_activation", 2);
    if (c.gate_activation == GateActivation::hard_sigmoid) {
        require(c.cell == Cell::lstm || c.cell == Cell::gru, "Config.gate_activation", "hard_sigmoid",
                "gates need cell = lstm or gru, not ", to_string(c.cell));
        require(std::isfinite(c.hard_sigmoid_alpha) && c.hard_sigmoid_alpha > 0, "Config.hard_sigmoid_alpha",
                c.hard_sigmoid_alpha, "must be finite and > 0");
        require(std::isfinite(c.hard_sigmoid_beta), "Config.hard_sigmoid_beta", c.hard_sigmoid_beta, "must be finite");
    }
    detail::require_enum(c.cell_activation, "Config.cell_activation", 2);
    if (c.cell_activation != CellActivation::tanh)
        require(c.cell == Cell::lstm || c.cell == Cell::gru, "Config.cell_activation", to_string(c.cell_activation),
                "needs cell = lstm or gru, not ", to_string(c.cell), " (a vanilla RNN takes cell = rnn_relu)");
    require(c.max_batch >= 1 && c.max_batch <= 65536, "Config.max_batch", c.max_batch, "must be in [1, 65536]");
    require(c.threads >= 0 && c.threads <= detail::kMaxThreads, "Config.threads", c.threads, "must be in [0, ", detail::kMaxThreads, "] (0 = all cores)");
    if (c.pool)
        require(c.threads <= c.pool.threads(), "Config.threads", c.threads, "exceeds the ", c.pool.threads(),
                " workers of Config.pool (0 = all of them)");
    detail::nap_window_us(c.idle_nap_ms, "Config.idle_nap_ms");
    require(std::isfinite(c.activation_max_error) && c.activation_max_error >= 0 && c.activation_max_error <= 0.1,
            "Config.activation_max_error", c.activation_max_error, "must be in [0, 0.1] (0 = float accuracy)");
    require(c.serial_rows >= -1, "Config.serial_rows", c.serial_rows, "must be -1 (the plan's estimate), 0 (never) or a row count");
    require(c.fold_projection >= -1 && c.fold_projection <= 1, "Config.fold_projection", c.fold_projection,
            "must be -1 (where it pays), 0 (never) or 1 (wherever the kernels allow)");
    require(std::isfinite(c.tuning_budget_seconds) && c.tuning_budget_seconds > 0 && c.tuning_budget_seconds <= 3600,
            "Config.tuning_budget_seconds", c.tuning_budget_seconds, "must be in (0, 3600]");
    require(c.tuning_seq_len >= 1 && c.tuning_seq_len <= 1000000, "Config.tuning_seq_len", c.tuning_seq_len,
            "must be in [1, 1000000]");
    // Whether a device is present is checked when the model is built (build_model).
    require(c.backend != Backend::cuda || detail::gpu::cuda_backend(), "Config.backend", "cuda",
            "this build has no CUDA backend (use auto or cpu, or build with CUDA: make CUDA=1, "
            "cmake -DDEEPRNN_CUDA=ON, or link deeprnn_cuda.o; see docs/CUDA.md)");
}

}  // namespace deeprnn
