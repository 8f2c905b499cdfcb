// Error paths of every public entry point except the .npy reader (test_npy.cpp):
// Config validation, weight import for each convention, config_from_weights,
// Session::run, Stream and moved-from objects. Each invalid input must raise
// deeprnn::Error (not another exception, not abort, not an ASan/UBSan finding)
// whose message names the field or tensor at fault and the bad value; after a
// throw, the object that threw must still work and give bit-identical results.
#include <boost/test/unit_test.hpp>

#include "deeprnn.hpp"
#include "reference.hpp"
#include "expect_error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

// Sizes of the small models and runs below: steps, batch, input, hidden.
constexpr int T = 3, B = 2, E = 3, H = 4;

// A small valid configuration: 1-layer forward LSTM, E = 3, H = 4.
deeprnn::Config base_config(deeprnn::Cell cell = deeprnn::Cell::lstm) {
    deeprnn::Config c;
    c.cell = cell;
    c.input_size = E;
    c.hidden_size = H;
    c.max_batch = 4;
    c.threads = 1;
    return c;
}

// Valid PyTorch-convention weights for cfg (random values, fixed seed).
deeprnn::Weights torch_weights(const deeprnn::Config& cfg, bool bias = true) {
    std::mt19937 rng(1234);
    return ref::torch_weights(ref::random_net(cfg, rng, 0.5, bias));
}

// A tensor of `shape` filled with a small constant (only shapes matter here).
deeprnn::Tensor filled(std::vector<int64_t> shape, float v = 0.1f) {
    deeprnn::Tensor t;
    t.shape = std::move(shape);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    t.data.assign(static_cast<size_t>(n), v);
    return t;
}

// ONNX tensors W, R, B (and P) for a one-layer cfg.
deeprnn::Weights onnx_weights(const deeprnn::Config& c, bool peep = false) {
    const int64_t G = ref::gates(c.cell), H = c.hidden_size, E = c.input_size;
    const int64_t D = c.direction == deeprnn::Direction::bidirectional ? 2 : 1;
    deeprnn::Weights w;
    w["W"] = filled({D, G * H, E});
    w["R"] = filled({D, G * H, H});
    w["B"] = filled({D, 2 * G * H});
    if (peep) w["P"] = filled({D, 3 * H});
    return w;
}

// Keras tensors for a one-layer forward cfg, no prefix.
deeprnn::Weights keras_weights(const deeprnn::Config& c) {
    const int64_t G = ref::gates(c.cell), H = c.hidden_size, E = c.input_size;
    deeprnn::Weights w;
    w["kernel"] = filled({E, G * H});
    w["recurrent_kernel"] = filled({H, G * H});
    const bool two_rows = c.cell == deeprnn::Cell::gru && c.gru_variant == deeprnn::GruVariant::linear_before_reset;
    w["bias"] = two_rows ? filled({2, G * H}) : filled({G * H});
    return w;
}

// Checks both deeprnn::validate and Model construction reject cfg naming `parts`.
void expect_config_error(const deeprnn::Config& cfg, std::initializer_list<std::string> parts) {
    expect_error([&] { deeprnn::validate(cfg); }, parts);
    // Weights valid for the base configuration: the config error must win.
    const deeprnn::Weights w = torch_weights(base_config());
    expect_error([&] { deeprnn::Model m(cfg, w); }, parts);
}

std::vector<float> iota_input(size_t n) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(errors)

// ---------------------------------------------------------------------------
// Config
// ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(config)

// The base configuration used by every other test here is itself valid.
BOOST_AUTO_TEST_CASE(base_config_is_valid) {
    BOOST_CHECK_NO_THROW(deeprnn::validate(base_config()));
    BOOST_CHECK_NO_THROW(deeprnn::Model(base_config(), torch_weights(base_config())));
}

// Enum fields holding values outside their enumerators (casts, C callers) are
// refused with the field name and the integer value, not undefined behaviour.
BOOST_AUTO_TEST_CASE(enums_out_of_range) {
    auto c = base_config();
    c.cell = static_cast<deeprnn::Cell>(4);
    expect_config_error(c, {"Config.cell", "4"});
    c = base_config();
    c.cell = static_cast<deeprnn::Cell>(-1);
    expect_config_error(c, {"Config.cell", "-1"});
    c = base_config();
    c.gru_variant = static_cast<deeprnn::GruVariant>(2);
    expect_config_error(c, {"Config.gru_variant", "2"});
    c = base_config();
    c.convention = static_cast<deeprnn::Convention>(3);
    expect_config_error(c, {"Config.convention", "3"});
    c = base_config();
    c.direction = static_cast<deeprnn::Direction>(7);
    expect_config_error(c, {"Config.direction", "7"});
    c = base_config();
    c.backend = static_cast<deeprnn::Backend>(3);
    expect_config_error(c, {"Config.backend", "3"});
    c = base_config();
    c.tuning = static_cast<deeprnn::Tuning>(-5);
    expect_config_error(c, {"Config.tuning", "-5"});
}

// to_string of an out-of-range enumerator returns a name instead of reading garbage.
BOOST_AUTO_TEST_CASE(to_string_out_of_range) {
    BOOST_TEST(std::string(deeprnn::to_string(static_cast<deeprnn::Cell>(9))) == "invalid");
    BOOST_TEST(std::string(deeprnn::to_string(static_cast<deeprnn::GruVariant>(9))) == "invalid");
    BOOST_TEST(std::string(deeprnn::to_string(static_cast<deeprnn::Direction>(9))) == "invalid");
    BOOST_TEST(std::string(deeprnn::to_string(static_cast<deeprnn::Convention>(9))) == "invalid");
}

// input_size and hidden_size must be in [1, 2^20]: zero, negative and too large.
BOOST_AUTO_TEST_CASE(sizes) {
    auto c = base_config();
    c.input_size = 0;
    expect_config_error(c, {"Config.input_size", "= 0"});
    c.input_size = -3;
    expect_config_error(c, {"Config.input_size", "-3"});
    c.input_size = 1048577;
    expect_config_error(c, {"Config.input_size", "1048577"});
    c = base_config();
    c.hidden_size = 0;
    expect_config_error(c, {"Config.hidden_size", "= 0"});
    c.hidden_size = -1;
    expect_config_error(c, {"Config.hidden_size", "-1"});
    c.hidden_size = 2000000;
    expect_config_error(c, {"Config.hidden_size", "2000000"});
}

// num_layers must be in [1, 1024].
BOOST_AUTO_TEST_CASE(num_layers) {
    auto c = base_config();
    c.num_layers = 0;
    expect_config_error(c, {"Config.num_layers", "= 0"});
    c.num_layers = -2;
    expect_config_error(c, {"Config.num_layers", "-2"});
    c.num_layers = 1025;
    expect_config_error(c, {"Config.num_layers", "1025"});
}

// proj_size: negative, equal to or above hidden_size, or with a non-LSTM cell.
BOOST_AUTO_TEST_CASE(proj_size) {
    auto c = base_config();
    c.proj_size = -1;
    expect_config_error(c, {"Config.proj_size", "-1"});
    c.proj_size = 4;  // == hidden_size
    expect_config_error(c, {"Config.proj_size", "= 4", "hidden_size (4)"});
    c.proj_size = 9;
    expect_config_error(c, {"Config.proj_size", "= 9", "hidden_size (4)"});
    for (auto cell : {deeprnn::Cell::gru, deeprnn::Cell::rnn_tanh, deeprnn::Cell::rnn_relu}) {
        c = base_config(cell);
        c.proj_size = 2;
        expect_config_error(c, {"Config.proj_size", "= 2", deeprnn::to_string(cell)});
    }
}

// peepholes belong to LSTM only.
BOOST_AUTO_TEST_CASE(peepholes_non_lstm) {
    for (auto cell : {deeprnn::Cell::gru, deeprnn::Cell::rnn_tanh, deeprnn::Cell::rnn_relu}) {
        auto c = base_config(cell);
        c.peepholes = true;
        expect_config_error(c, {"Config.peepholes", "true", deeprnn::to_string(cell)});
    }
}

// clip must be finite and >= 0.
BOOST_AUTO_TEST_CASE(clip) {
    auto c = base_config();
    c.clip = -1.5f;
    expect_config_error(c, {"Config.clip", "-1.5"});
    c.clip = std::numeric_limits<float>::quiet_NaN();
    expect_config_error(c, {"Config.clip", "nan"});
    c.clip = std::numeric_limits<float>::infinity();
    expect_config_error(c, {"Config.clip", "inf"});
    c.clip = -std::numeric_limits<float>::infinity();
    expect_config_error(c, {"Config.clip", "-inf"});
}

// hard_sigmoid gates: LSTM or GRU only, alpha finite and > 0, beta finite;
// an out-of-range enum is named.
BOOST_AUTO_TEST_CASE(gate_activation) {
    auto c = base_config();
    c.gate_activation = deeprnn::GateActivation::hard_sigmoid;
    BOOST_CHECK_NO_THROW(deeprnn::validate(c));
    c.hard_sigmoid_alpha = 0.0f;
    expect_config_error(c, {"Config.hard_sigmoid_alpha", "0", "> 0"});
    c.hard_sigmoid_alpha = std::numeric_limits<float>::quiet_NaN();
    expect_config_error(c, {"Config.hard_sigmoid_alpha", "nan"});
    c.hard_sigmoid_alpha = 0.2f;
    c.hard_sigmoid_beta = std::numeric_limits<float>::infinity();
    expect_config_error(c, {"Config.hard_sigmoid_beta", "inf"});
    c.hard_sigmoid_beta = 0.5f;
    c.cell = deeprnn::Cell::rnn_tanh;
    expect_config_error(c, {"Config.gate_activation", "hard_sigmoid", "rnn_tanh"});
    c.gate_activation = static_cast<deeprnn::GateActivation>(7);
    expect_config_error(c, {"Config.gate_activation", "7"});
    c = base_config();
    c.hard_sigmoid_alpha = -1.0f;  // ignored while the gates are sigmoid
    BOOST_CHECK_NO_THROW(deeprnn::validate(c));
}

// relu candidates: LSTM or GRU only (a vanilla RNN says rnn_relu); an
// out-of-range enum is named.
BOOST_AUTO_TEST_CASE(cell_activation) {
    auto c = base_config();
    c.cell_activation = deeprnn::CellActivation::relu;
    BOOST_CHECK_NO_THROW(deeprnn::validate(c));
    c.cell = deeprnn::Cell::gru;
    BOOST_CHECK_NO_THROW(deeprnn::validate(c));
    c.cell = deeprnn::Cell::rnn_tanh;
    expect_config_error(c, {"Config.cell_activation", "relu", "rnn_tanh", "rnn_relu"});
    c.cell_activation = static_cast<deeprnn::CellActivation>(5);
    expect_config_error(c, {"Config.cell_activation", "5"});
}

// max_batch in [1, 65536]; threads in [0, 1024].
BOOST_AUTO_TEST_CASE(max_batch_and_threads) {
    auto c = base_config();
    c.max_batch = 0;
    expect_config_error(c, {"Config.max_batch", "= 0"});
    c.max_batch = 65537;
    expect_config_error(c, {"Config.max_batch", "65537"});
    c = base_config();
    c.threads = -1;
    expect_config_error(c, {"Config.threads", "-1"});
    c.threads = 1025;
    expect_config_error(c, {"Config.threads", "1025"});
    c = base_config();
    c.serial_rows = -2;
    expect_config_error(c, {"Config.serial_rows", "-2"});
    c = base_config();
    c.fold_projection = 2;
    expect_config_error(c, {"Config.fold_projection", "2"});
    c.fold_projection = -2;
    expect_config_error(c, {"Config.fold_projection", "-2"});
}

BOOST_AUTO_TEST_CASE(tuning_seq_len) {
    deeprnn::Config c = base_config();
    c.tuning_seq_len = 0;
    expect_config_error(c, {"Config.tuning_seq_len", "0", "[1, 1000000]"});
    c.tuning_seq_len = 1000001;
    expect_config_error(c, {"Config.tuning_seq_len", "1000001"});
}

// idle_nap_ms in [0, 10000] ms, finite; the same rule for WorkerPool's.
BOOST_AUTO_TEST_CASE(idle_nap_ms) {
    auto c = base_config();
    c.idle_nap_ms = -1;
    expect_config_error(c, {"Config.idle_nap_ms", "-1", "[0, 10000]"});
    c.idle_nap_ms = 20000;
    expect_config_error(c, {"Config.idle_nap_ms", "20000"});
    c.idle_nap_ms = std::nan("");
    expect_config_error(c, {"Config.idle_nap_ms", "nan"});
    c.idle_nap_ms = 0;
    BOOST_CHECK_NO_THROW(deeprnn::validate(c));
    expect_error([] { deeprnn::WorkerPool(2, true, -0.5); }, {"WorkerPool: idle_nap_ms", "-0.5"});
    expect_error([] { deeprnn::WorkerPool().set_idle_nap_ms(1); }, {"set_idle_nap_ms", "empty handle"});
    expect_error([] { deeprnn::WorkerPool(1).set_idle_nap_ms(1e9); }, {"set_idle_nap_ms: idle_nap_ms", "1e+09"});
}

// activation_max_error in [0, 0.1], finite.
BOOST_AUTO_TEST_CASE(activation_max_error) {
    auto c = base_config();
    c.activation_max_error = -0.25;
    expect_config_error(c, {"Config.activation_max_error", "-0.25"});
    c.activation_max_error = 0.5;
    expect_config_error(c, {"Config.activation_max_error", "0.5"});
    c.activation_max_error = std::numeric_limits<double>::quiet_NaN();
    expect_config_error(c, {"Config.activation_max_error", "nan"});
    c.activation_max_error = std::numeric_limits<double>::infinity();
    expect_config_error(c, {"Config.activation_max_error", "inf"});
}

// tuning_budget_seconds in (0, 3600], finite.
BOOST_AUTO_TEST_CASE(tuning_budget_seconds) {
    auto c = base_config();
    c.tuning_budget_seconds = 0;
    expect_config_error(c, {"Config.tuning_budget_seconds", "= 0"});
    c.tuning_budget_seconds = -2;
    expect_config_error(c, {"Config.tuning_budget_seconds", "-2"});
    c.tuning_budget_seconds = 7200;
    expect_config_error(c, {"Config.tuning_budget_seconds", "7200"});
    c.tuning_budget_seconds = std::numeric_limits<double>::quiet_NaN();
    expect_config_error(c, {"Config.tuning_budget_seconds", "nan"});
}

// Without a CUDA backend, asking for it is an error naming it. (Builds with
// CUDA: tools/deeprnn_cuda_nodevice_test.cpp and deeprnn-cuda-selftest.)
BOOST_AUTO_TEST_CASE(backend_cuda) {
    if (deeprnn::build_info().find("cuda: not built") == std::string::npos) return;
    auto c = base_config();
    c.backend = deeprnn::Backend::cuda;
    expect_config_error(c, {"Config.backend", "cuda"});
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------
// Weight import, PyTorch convention
// ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(torch_import)

// A missing weight is named: weight_ih, weight_hh, and the second of a bias pair.
BOOST_AUTO_TEST_CASE(missing_tensor) {
    const auto c = base_config();
    for (const char* name : {"weight_ih_l0", "weight_hh_l0", "bias_hh_l0", "bias_ih_l0"}) {
        auto w = torch_weights(c);
        w.erase(name);
        expect_error([&] { deeprnn::Model m(c, w); }, {"'" + std::string(name) + "'", "missing"});
    }
    // Second layer missing in a 2-layer model.
    auto c2 = c;
    c2.num_layers = 2;
    auto w = torch_weights(c2);
    w.erase("weight_hh_l1");
    expect_error([&] { deeprnn::Model m(c2, w); }, {"'weight_hh_l1'", "missing"});
}

// A wrong shape names the tensor, the actual shape and the expected shape.
BOOST_AUTO_TEST_CASE(wrong_shape) {
    const auto c = base_config();
    auto w = torch_weights(c);
    w["weight_ih_l0"] = filled({16, 5});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_ih_l0'", "[16, 5]", "[16, 3]"});
    w = torch_weights(c);
    w["weight_hh_l0"] = filled({4, 16});  // transposed
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_hh_l0'", "[4, 16]", "[16, 4]"});
    w = torch_weights(c);
    w["bias_ih_l0"] = filled({1, 16});  // wrong rank
    expect_error([&] { deeprnn::Model m(c, w); }, {"'bias_ih_l0'", "[1, 16]", "[16]"});
    // Layer 1 of a bidirectional stack takes D*H = 8 inputs, not E = 3.
    auto c2 = c;
    c2.num_layers = 2;
    c2.direction = deeprnn::Direction::bidirectional;
    w = torch_weights(c2);
    w["weight_ih_l1_reverse"] = filled({16, 3});
    expect_error([&] { deeprnn::Model m(c2, w); }, {"'weight_ih_l1_reverse'", "[16, 3]", "[16, 8]"});
}

// Tensors for a layer or a direction the configuration lacks are an error,
// not silently ignored.
BOOST_AUTO_TEST_CASE(extra_layer_and_reverse) {
    const auto c = base_config();
    auto w = torch_weights(c);
    w["weight_ih_l1"] = filled({16, 4});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_ih_l1'", "num_layers=1"});
    w = torch_weights(c);
    w["bias_hh_l1"] = filled({16});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'bias_hh_l1'", "num_layers=1"});
    w = torch_weights(c);
    w["weight_hh_l0_reverse"] = filled({16, 4});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_hh_l0_reverse'", "direction=forward"});
    // A whole bidirectional net given to a forward config.
    auto cb = c;
    cb.direction = deeprnn::Direction::bidirectional;
    w = torch_weights(cb);
    expect_error([&] { deeprnn::Model m(c, w); }, {"_reverse'", "direction=forward"});
}

// weight_hr with proj_size 0 is refused; a projected config needs weight_hr.
BOOST_AUTO_TEST_CASE(projection_tensors) {
    const auto c = base_config();
    auto w = torch_weights(c);
    w["weight_hr_l0"] = filled({2, 4});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_hr_l0'", "Config.proj_size = 0"});
    auto cp = c;
    cp.proj_size = 2;
    w = torch_weights(cp);
    BOOST_CHECK_NO_THROW(deeprnn::Model(cp, w));
    w.erase("weight_hr_l0");
    expect_error([&] { deeprnn::Model m(cp, w); }, {"'weight_hr_l0'", "missing"});
    w = torch_weights(cp);
    w["weight_hr_l0"] = filled({4, 2});  // transposed
    expect_error([&] { deeprnn::Model m(cp, w); }, {"'weight_hr_l0'", "[4, 2]", "[2, 4]"});
}

// PyTorch has neither peepholes nor a reverse-only layer.
BOOST_AUTO_TEST_CASE(peepholes_and_reverse) {
    auto c = base_config();
    c.peepholes = true;
    expect_error([&] { deeprnn::Model m(c, torch_weights(base_config())); }, {"Config.peepholes = true", "onnx"});
    c = base_config();
    c.direction = deeprnn::Direction::reverse;
    expect_error([&] { deeprnn::Model m(c, torch_weights(base_config())); }, {"Config.direction = reverse", "onnx"});
}

// A tensor whose data holds fewer or more values than its shape says is refused
// before anything reads it.
BOOST_AUTO_TEST_CASE(data_size_disagrees_with_shape) {
    const auto c = base_config();
    auto w = torch_weights(c);
    w["weight_ih_l0"].data.pop_back();
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_ih_l0'", "47 values", "[16, 3]"});
    w = torch_weights(c);
    w["bias_hh_l0"].data.push_back(1.0f);
    expect_error([&] { deeprnn::Model m(c, w); }, {"'bias_hh_l0'", "17 values", "[16]"});
}

// Shapes with negative or astronomically large dimensions (whose product
// overflows int64) are refused as data-size mismatches, with no UB in numel().
BOOST_AUTO_TEST_CASE(absurd_shapes) {
    const auto c = base_config();
    auto w = torch_weights(c);
    w["weight_ih_l0"].shape = {-16, -3};  // product 48 == data size
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_ih_l0'", "[-16, -3]"});
    w = torch_weights(c);
    w["weight_ih_l0"].shape = {int64_t(1) << 40, int64_t(1) << 40, 16};
    expect_error([&] { deeprnn::Model m(c, w); }, {"'weight_ih_l0'", "[1099511627776, 1099511627776, 16]"});
    deeprnn::Tensor t;
    t.shape = {int64_t(1) << 40, int64_t(1) << 40};
    BOOST_TEST(t.numel() < 0);  // no valid count
    t.shape = {int64_t(1) << 40, int64_t(1) << 40, 0};
    BOOST_TEST(t.numel() == 0);
    t.shape = {};
    BOOST_TEST(t.numel() == 1);
}

// Names that are not weight names are ignored (documented); the model builds.
BOOST_AUTO_TEST_CASE(unrelated_names_ignored) {
    const auto c = base_config();
    auto w = torch_weights(c);
    w["num_batches_tracked"] = filled({1});
    w["something_else"] = filled({2, 2});
    BOOST_CHECK_NO_THROW(deeprnn::Model(c, w));
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------
// Weight import, ONNX convention
// ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(onnx_import)

deeprnn::Config onnx_config(deeprnn::Cell cell = deeprnn::Cell::lstm) {
    auto c = base_config(cell);
    c.convention = deeprnn::Convention::onnx;
    return c;
}

// Positive controls: forward, reverse, bidirectional, peepholes and no-bias builds.
BOOST_AUTO_TEST_CASE(valid_builds) {
    auto c = onnx_config();
    BOOST_CHECK_NO_THROW(deeprnn::Model(c, onnx_weights(c)));
    c.direction = deeprnn::Direction::reverse;
    BOOST_CHECK_NO_THROW(deeprnn::Model(c, onnx_weights(c)));
    c.direction = deeprnn::Direction::bidirectional;
    BOOST_CHECK_NO_THROW(deeprnn::Model(c, onnx_weights(c)));
    c.peepholes = true;
    BOOST_CHECK_NO_THROW(deeprnn::Model(c, onnx_weights(c, true)));
    auto w = onnx_weights(onnx_config());
    w.erase("B");
    BOOST_CHECK_NO_THROW(deeprnn::Model(onnx_config(), w));
}

// Missing W or R is named.
BOOST_AUTO_TEST_CASE(missing_tensor) {
    const auto c = onnx_config();
    for (const char* name : {"W", "R"}) {
        auto w = onnx_weights(c);
        w.erase(name);
        expect_error([&] { deeprnn::Model m(c, w); }, {"'" + std::string(name) + "'", "missing"});
    }
    auto cp = c;
    cp.peepholes = true;
    expect_error([&] { deeprnn::Model m(cp, onnx_weights(c)); }, {"'P'", "missing"});
}

// Wrong shapes name the tensor, actual and expected shapes; also a forward
// tensor set given to a bidirectional config.
BOOST_AUTO_TEST_CASE(wrong_shape) {
    const auto c = onnx_config();
    auto w = onnx_weights(c);
    w["W"] = filled({1, 16, 5});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'W'", "[1, 16, 5]", "[1, 16, 3]"});
    w = onnx_weights(c);
    w["R"] = filled({16, 4});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'R'", "[16, 4]", "[1, 16, 4]"});
    w = onnx_weights(c);
    w["B"] = filled({1, 16});  // only Wb, no Rb
    expect_error([&] { deeprnn::Model m(c, w); }, {"'B'", "[1, 16]", "[1, 32]"});
    auto cb = c;
    cb.direction = deeprnn::Direction::bidirectional;
    expect_error([&] { deeprnn::Model m(cb, onnx_weights(c)); }, {"'W'", "[1, 16, 3]", "[2, 16, 3]"});
    auto cp = c;
    cp.peepholes = true;
    w = onnx_weights(c);
    w["P"] = filled({1, 16});  // 4*H instead of 3*H
    expect_error([&] { deeprnn::Model m(cp, w); }, {"'P'", "[1, 16]", "[1, 12]"});
}

// One layer per ONNX operator, no projection; P without peepholes is refused.
BOOST_AUTO_TEST_CASE(layers_projection_peepholes) {
    auto c = onnx_config();
    c.num_layers = 2;
    expect_error([&] { deeprnn::Model m(c, onnx_weights(onnx_config())); }, {"Config.num_layers = 2", "onnx"});
    c = onnx_config();
    c.proj_size = 2;
    expect_error([&] { deeprnn::Model m(c, onnx_weights(onnx_config())); }, {"Config.proj_size = 2", "onnx"});
    c = onnx_config();
    expect_error([&] { deeprnn::Model m(c, onnx_weights(c, true)); }, {"'P'", "Config.peepholes = false"});
}

// A tensor whose data size disagrees with its shape is refused.
BOOST_AUTO_TEST_CASE(data_size_disagrees_with_shape) {
    const auto c = onnx_config();
    auto w = onnx_weights(c);
    w["R"].data.resize(10);
    expect_error([&] { deeprnn::Model m(c, w); }, {"'R'", "10 values", "[1, 16, 4]"});
    w = onnx_weights(c);
    w["B"].data.push_back(0.0f);
    expect_error([&] { deeprnn::Model m(c, w); }, {"'B'", "33 values", "[1, 32]"});
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------
// Weight import, Keras convention
// ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(keras_import)

deeprnn::Config keras_config(deeprnn::Cell cell = deeprnn::Cell::lstm) {
    auto c = base_config(cell);
    c.convention = deeprnn::Convention::keras;
    return c;
}

// Prefixed names ("l0_", "l0_reverse_") for a stack: G*H = 16 columns.
deeprnn::Weights keras_stack(int layers, bool bidir) {
    deeprnn::Weights w;
    const int64_t D = bidir ? 2 : 1;
    for (int l = 0; l < layers; ++l)
        for (int d = 0; d < D; ++d) {
            const std::string pre = "l" + std::to_string(l) + "_" + (d ? "reverse_" : "");
            w[pre + "kernel"] = filled({l == 0 ? 3 : D * 4, 16});
            w[pre + "recurrent_kernel"] = filled({4, 16});
            w[pre + "bias"] = filled({16});
        }
    return w;
}

// Positive controls: plain names, prefixed stack, bidirectional, GRU variants.
BOOST_AUTO_TEST_CASE(valid_builds) {
    auto c = keras_config();
    BOOST_CHECK_NO_THROW(deeprnn::Model(c, keras_weights(c)));
    c.num_layers = 2;
    c.direction = deeprnn::Direction::bidirectional;
    BOOST_CHECK_NO_THROW(deeprnn::Model(c, keras_stack(2, true)));
    auto g = keras_config(deeprnn::Cell::gru);
    BOOST_CHECK_NO_THROW(deeprnn::Model(g, keras_weights(g)));
    g.gru_variant = deeprnn::GruVariant::reset_before_matmul;
    BOOST_CHECK_NO_THROW(deeprnn::Model(g, keras_weights(g)));
}

// Missing kernel / recurrent_kernel is named (plain and prefixed).
BOOST_AUTO_TEST_CASE(missing_tensor) {
    const auto c = keras_config();
    auto w = keras_weights(c);
    w.erase("recurrent_kernel");
    expect_error([&] { deeprnn::Model m(c, w); }, {"'recurrent_kernel'", "missing"});
    auto c2 = c;
    c2.num_layers = 2;
    w = keras_stack(2, false);
    w.erase("l1_kernel");
    expect_error([&] { deeprnn::Model m(c2, w); }, {"'l1_kernel'", "missing"});
    // Plain names cannot describe a 2-layer stack.
    expect_error([&] { deeprnn::Model m(c2, keras_weights(c)); }, {"'l0_kernel'", "missing"});
}

// Wrong shapes name tensor, actual and expected shapes (Keras kernels are [in, G*H]).
BOOST_AUTO_TEST_CASE(wrong_shape) {
    const auto c = keras_config();
    auto w = keras_weights(c);
    w["kernel"] = filled({16, 3});  // PyTorch orientation
    expect_error([&] { deeprnn::Model m(c, w); }, {"'kernel'", "[16, 3]", "[3, 16]"});
    w = keras_weights(c);
    w["recurrent_kernel"] = filled({4, 12});
    expect_error([&] { deeprnn::Model m(c, w); }, {"'recurrent_kernel'", "[4, 12]", "[4, 16]"});
}

// Tensors of a layer or direction the configuration lacks are an error.
BOOST_AUTO_TEST_CASE(extra_layer_and_reverse) {
    auto c = keras_config();
    c.num_layers = 1;
    auto w = keras_stack(2, false);
    expect_error([&] { deeprnn::Model m(c, w); }, {"'l1_kernel'", "num_layers=1"});
    w = keras_stack(1, true);
    expect_error([&] { deeprnn::Model m(c, w); }, {"'l0_reverse_kernel'", "direction=forward"});
}

// GRU bias rank must match the variant: [2, G*H] for reset_after=True
// (linear-before-reset), [G*H] for reset-before-matmul.
BOOST_AUTO_TEST_CASE(gru_bias_rank) {
    auto g = keras_config(deeprnn::Cell::gru);
    auto w = keras_weights(g);
    w["bias"] = filled({12});
    expect_error([&] { deeprnn::Model m(g, w); }, {"'bias'", "[12]", "[2, 12]"});
    g.gru_variant = deeprnn::GruVariant::reset_before_matmul;
    w["bias"] = filled({2, 12});
    expect_error([&] { deeprnn::Model m(g, w); }, {"'bias'", "[2, 12]", "expected [12]"});
}

// Keras has no projection, peepholes or reverse-only layer.
BOOST_AUTO_TEST_CASE(unsupported_features) {
    auto c = keras_config();
    c.proj_size = 2;
    expect_error([&] { deeprnn::Model m(c, keras_weights(keras_config())); }, {"Config.proj_size = 2", "keras"});
    c = keras_config();
    c.peepholes = true;
    expect_error([&] { deeprnn::Model m(c, keras_weights(keras_config())); }, {"Config.peepholes = true"});
    c = keras_config();
    c.direction = deeprnn::Direction::reverse;
    expect_error([&] { deeprnn::Model m(c, keras_weights(keras_config())); }, {"Config.direction = reverse"});
}

// A tensor whose data size disagrees with its shape is refused.
BOOST_AUTO_TEST_CASE(data_size_disagrees_with_shape) {
    const auto c = keras_config();
    auto w = keras_weights(c);
    w["kernel"].data.resize(47);
    expect_error([&] { deeprnn::Model m(c, w); }, {"'kernel'", "47 values", "[3, 16]"});
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------
// config_from_weights
// ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(config_from_weights)

using deeprnn::Cell;
using deeprnn::Convention;

// Positive control: the inferred torch config matches and builds.
BOOST_AUTO_TEST_CASE(valid_inference) {
    auto c = base_config();
    c.num_layers = 2;
    c.direction = deeprnn::Direction::bidirectional;
    c.proj_size = 2;
    const auto w = torch_weights(c);
    const auto got = deeprnn::config_from_weights(Cell::lstm, Convention::torch, w);
    BOOST_TEST(got.input_size == 3);
    BOOST_TEST(got.hidden_size == 4);
    BOOST_TEST(got.num_layers == 2);
    BOOST_TEST(got.proj_size == 2);
    BOOST_TEST((got.direction == deeprnn::Direction::bidirectional));
    BOOST_CHECK_NO_THROW(deeprnn::Model(got, w));
}

// Missing first-layer tensors are named, for each convention.
BOOST_AUTO_TEST_CASE(missing_tensor) {
    auto w = torch_weights(base_config());
    w.erase("weight_hh_l0");
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::torch, w); }, {"'weight_hh_l0'", "missing"});
    w = torch_weights(base_config());
    w.erase("weight_ih_l0");
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::torch, w); }, {"'weight_ih_l0'", "missing"});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::onnx, deeprnn::Weights{}); },
                 {"'W'", "missing"});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::keras, deeprnn::Weights{}); },
                 {"'l0_recurrent_kernel'", "missing"});
    auto k = keras_weights(base_config());
    k.erase("kernel");  // then the prefixed names are looked for
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::keras, k); }, {"'l0_", "missing"});
}

// Gate rows must be a positive multiple of the cell's gate count.
BOOST_AUTO_TEST_CASE(gate_rows_not_multiple) {
    auto w = torch_weights(base_config());
    w["weight_hh_l0"] = filled({10, 4});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::torch, w); },
                 {"'weight_hh_l0'", "10 gate rows", "multiple of 4"});
    expect_error([&] { deeprnn::config_from_weights(Cell::gru, Convention::torch, w); },
                 {"'weight_hh_l0'", "10 gate rows", "multiple of 3"});
    deeprnn::Weights o;
    o["W"] = filled({1, 14, 3});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::onnx, o); },
                 {"'W'", "14 gate rows", "multiple of 4"});
}

// Tensors of the wrong rank, a zero dimension, or more than two ONNX directions.
BOOST_AUTO_TEST_CASE(wrong_rank_and_dims) {
    auto w = torch_weights(base_config());
    w["weight_hh_l0"] = filled({16});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::torch, w); },
                 {"'weight_hh_l0'", "[16]", "2 dimensions"});
    w = torch_weights(base_config());
    w["weight_ih_l0"] = filled({16, 3, 1});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::torch, w); },
                 {"'weight_ih_l0'", "[16, 3, 1]", "2 dimensions"});
    w = torch_weights(base_config());
    w["weight_hh_l0"] = filled({0, 4});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::torch, w); },
                 {"'weight_hh_l0'", "dimension 0"});
    deeprnn::Weights o;
    o["W"] = filled({16, 3});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::onnx, o); },
                 {"'W'", "[16, 3]", "3 dimensions"});
    o["W"] = filled({3, 16, 3});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::onnx, o); },
                 {"'W'", "3 directions"});
    auto k = keras_weights(base_config());
    k["recurrent_kernel"] = filled({4, 16, 1});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::keras, k); },
                 {"'recurrent_kernel'", "[4, 16, 1]", "2 dimensions"});
}

// A tensor whose data disagrees with its shape, and invalid enum arguments.
BOOST_AUTO_TEST_CASE(bad_data_and_enums) {
    auto w = torch_weights(base_config());
    w["weight_hh_l0"].data.resize(3);
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, Convention::torch, w); },
                 {"'weight_hh_l0'", "3 values", "[16, 4]"});
    w = torch_weights(base_config());
    expect_error([&] { deeprnn::config_from_weights(static_cast<Cell>(9), Convention::torch, w); }, {"cell", "9"});
    expect_error([&] { deeprnn::config_from_weights(Cell::lstm, static_cast<Convention>(-1), w); },
                 {"convention", "-1"});
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------
// Session::run
// ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(session_run)

struct Fixture {
    deeprnn::Config cfg = base_config();
    deeprnn::Model model{cfg, torch_weights(cfg)};
    std::vector<float> x = iota_input(static_cast<size_t>(T) * B * E);
    std::vector<float> y = std::vector<float>(static_cast<size_t>(T) * B * H, -7.0f);
    std::vector<float> h_n = std::vector<float>(static_cast<size_t>(B) * H, -7.0f);
    std::vector<float> c_n = std::vector<float>(static_cast<size_t>(B) * H, -7.0f);
    deeprnn::RunInput in() const {
        deeprnn::RunInput i;
        i.x = x.data();
        i.seq_len = T;
        i.batch = B;
        return i;
    }
    deeprnn::RunOutput out() {
        deeprnn::RunOutput o;
        o.y = y.data();
        o.h_n = h_n.data();
        o.c_n = c_n.data();
        return o;
    }
};

// x is required; seq_len >= 1; batch in [1, max_batch]; seq_len * batch fits
// in int. Outputs are untouched
// by a run that throws (validation precedes any write).
BOOST_FIXTURE_TEST_CASE(basic_fields, Fixture) {
    deeprnn::Session s(model);
    auto i = in();
    i.x = nullptr;
    expect_error([&] { s.run(i, out()); }, {"RunInput.x", "null"});
    i = in();
    i.seq_len = 0;
    expect_error([&] { s.run(i, out()); }, {"RunInput.seq_len", "= 0"});
    i.seq_len = -4;
    expect_error([&] { s.run(i, out()); }, {"RunInput.seq_len", "-4"});
    i = in();
    i.batch = 0;
    expect_error([&] { s.run(i, out()); }, {"RunInput.batch", "= 0"});
    i.batch = -1;
    expect_error([&] { s.run(i, out()); }, {"RunInput.batch", "-1"});
    i.batch = 5;
    expect_error([&] { s.run(i, out()); }, {"RunInput.batch", "= 5", "max_batch = 4"});
    // seq_len * batch beyond int (the engine's row count) is refused before x is read.
    i.batch = 2;
    i.seq_len = 1 << 30;
    expect_error([&] { s.run(i, deeprnn::RunOutput{}); }, {"RunInput.seq_len", "1073741824", "batch (2)"});
    for (float v : y) BOOST_REQUIRE(v == -7.0f);
    for (float v : h_n) BOOST_REQUIRE(v == -7.0f);
    for (float v : c_n) BOOST_REQUIRE(v == -7.0f);
}

// lengths[b] outside [0, T] names the index and the value.
BOOST_FIXTURE_TEST_CASE(lengths_out_of_range, Fixture) {
    deeprnn::Session s(model);
    auto i = in();
    const int32_t neg[B] = {2, -1};
    i.lengths = neg;
    expect_error([&] { s.run(i, out()); }, {"RunInput.lengths[1]", "-1", "seq_len = 3"});
    const int32_t big[B] = {4, 1};
    i.lengths = big;
    expect_error([&] { s.run(i, out()); }, {"RunInput.lengths[0]", "= 4", "seq_len = 3"});
    const int32_t edge[B] = {0, T};  // both ends of the range are valid
    i.lengths = edge;
    BOOST_CHECK_NO_THROW(s.run(i, out()));
}

// c0 and c_n with a cell that has no cell state (GRU, RNN).
BOOST_AUTO_TEST_CASE(cell_state_without_lstm) {
    for (auto cell : {deeprnn::Cell::gru, deeprnn::Cell::rnn_tanh}) {
        const auto cfg = base_config(cell);
        deeprnn::Model m(cfg, torch_weights(cfg));
        deeprnn::Session s(m);
        const auto x = iota_input(static_cast<size_t>(T) * B * E);
        std::vector<float> c(static_cast<size_t>(B) * H, 0.0f), y(static_cast<size_t>(T) * B * H);
        deeprnn::RunInput i;
        i.x = x.data();
        i.seq_len = T;
        i.batch = B;
        i.c0 = c.data();
        deeprnn::RunOutput o;
        o.y = y.data();
        expect_error([&] { s.run(i, o); }, {"RunInput.c0", deeprnn::to_string(cell)});
        i.c0 = nullptr;
        o.c_n = c.data();
        expect_error([&] { s.run(i, o); }, {"RunOutput.c_n", deeprnn::to_string(cell)});
    }
}

// Outputs must not overlap inputs or each other: y over x (whole and partial),
// h_n over y, h_n over h0, c_n over x. Adjacent buffers are fine.
BOOST_FIXTURE_TEST_CASE(aliasing, Fixture) {
    deeprnn::Session s(model);
    const size_t xn = x.size(), yn = y.size(), hn = h_n.size();
    std::vector<float> buf(xn + yn + hn + hn, 0.0f);
    std::copy(x.begin(), x.end(), buf.begin());
    auto i = in();
    i.x = buf.data();
    deeprnn::RunOutput o;
    o.y = buf.data();  // in place
    expect_error([&] { s.run(i, o); }, {"RunOutput.y", "overlaps", "RunInput.x"});
    o.y = buf.data() + xn - 1;  // last float shared
    expect_error([&] { s.run(i, o); }, {"RunOutput.y", "overlaps", "RunInput.x"});
    o.y = buf.data() + xn;  // adjacent: valid
    BOOST_CHECK_NO_THROW(s.run(i, o));
    o.h_n = buf.data() + xn + yn - 2;  // last two floats of y
    expect_error([&] { s.run(i, o); }, {"RunOutput.h_n", "overlaps", "RunOutput.y"});
    o = deeprnn::RunOutput{};
    std::vector<float> h0(hn, 0.0f);
    i.h0 = h0.data();
    o.h_n = h0.data();
    expect_error([&] { s.run(i, o); }, {"RunOutput.h_n", "overlaps", "RunInput.h0"});
    o = deeprnn::RunOutput{};
    i.h0 = nullptr;
    o.c_n = buf.data() + 1;
    expect_error([&] { s.run(i, o); }, {"RunOutput.c_n", "overlaps", "RunInput.x"});
    o.c_n = buf.data() + xn;
    o.h_n = buf.data() + xn + 1;
    expect_error([&] { s.run(i, o); }, {"RunOutput.c_n", "overlaps", "RunOutput.h_n"});
}

// A moved-from Session throws instead of dereferencing null; the moved-to one works.
BOOST_FIXTURE_TEST_CASE(moved_from_session, Fixture) {
    deeprnn::Session a(model);
    deeprnn::Session b(std::move(a));
    expect_error([&] { a.run(in(), out()); }, {"Session", "after move"});
    BOOST_CHECK_NO_THROW(b.run(in(), out()));
    deeprnn::Session c(model);
    c = std::move(b);
    expect_error([&] { b.run(in(), out()); }, {"Session", "after move"});
    BOOST_CHECK_NO_THROW(c.run(in(), out()));
}

// A moved-from Model throws from every member and from Session/Stream
// construction instead of dereferencing null.
BOOST_FIXTURE_TEST_CASE(moved_from_model, Fixture) {
    deeprnn::Model a = model;
    deeprnn::Model b(std::move(a));
    expect_error([&] { deeprnn::Session s(a); }, {"Model", "after move"});
    expect_error([&] { deeprnn::Stream s(a); }, {"Model", "after move"});
    expect_error([&] { (void)a.config(); }, {"Model", "after move"});
    expect_error([&] { (void)a.output_size(); }, {"Model", "after move"});
    expect_error([&] { (void)a.plan(); }, {"Model", "after move"});
    deeprnn::Session s(b);
    BOOST_CHECK_NO_THROW(s.run(in(), out()));
}

// After every kind of throwing run, the same Session gives results bit-identical
// to a fresh Session's (no state, scratch or size leaks from the failed calls).
BOOST_FIXTURE_TEST_CASE(session_usable_after_throw, Fixture) {
    // A 2-layer bidirectional LSTM with lengths and initial states exercises
    // every scratch buffer.
    auto cfg2 = base_config();
    cfg2.num_layers = 2;
    cfg2.direction = deeprnn::Direction::bidirectional;
    deeprnn::Model m2(cfg2, torch_weights(cfg2));
    const size_t LD = 4, yn = static_cast<size_t>(T) * B * 2 * H, sn = LD * B * H;
    std::vector<float> h0 = iota_input(sn), c0 = iota_input(sn + 3);
    c0.erase(c0.begin(), c0.begin() + 3);
    const int32_t lengths[B] = {3, 2};
    auto run_valid = [&](deeprnn::Session& s, std::vector<float>& yv, std::vector<float>& hv, std::vector<float>& cv) {
        yv.assign(yn, -1.0f);
        hv.assign(sn, -1.0f);
        cv.assign(sn, -1.0f);
        deeprnn::RunInput i = in();
        i.lengths = lengths;
        i.h0 = h0.data();
        i.c0 = c0.data();
        s.run(i, deeprnn::RunOutput{yv.data(), hv.data(), cv.data()});
    };
    std::vector<float> y_ref, h_ref, c_ref, y_got, h_got, c_got;
    {
        deeprnn::Session fresh(m2);
        run_valid(fresh, y_ref, h_ref, c_ref);
    }
    deeprnn::Session s(m2);
    std::vector<float> big_y(static_cast<size_t>(64) * B * 2 * H);
    auto bad = [&](auto edit) {
        deeprnn::RunInput i = in();
        i.h0 = h0.data();
        i.c0 = c0.data();
        i.lengths = lengths;
        deeprnn::RunOutput o{big_y.data(), nullptr, nullptr};
        edit(i, o);
        BOOST_CHECK_THROW(s.run(i, o), deeprnn::Error);
    };
    bad([](deeprnn::RunInput& i, deeprnn::RunOutput&) { i.x = nullptr; });
    bad([](deeprnn::RunInput& i, deeprnn::RunOutput&) { i.seq_len = 64; i.lengths = nullptr; i.batch = 9; });
    const int32_t bad_len[B] = {1, 64};
    bad([&](deeprnn::RunInput& i, deeprnn::RunOutput&) { i.lengths = bad_len; });
    bad([&](deeprnn::RunInput&, deeprnn::RunOutput& o) { o.h_n = const_cast<float*>(h0.data()); });
    bad([&](deeprnn::RunInput& i, deeprnn::RunOutput& o) { o.y = const_cast<float*>(i.x); });
    run_valid(s, y_got, h_got, c_got);
    BOOST_TEST(same_bits(y_got, y_ref));
    BOOST_TEST(same_bits(h_got, h_ref));
    BOOST_TEST(same_bits(c_got, c_ref));
    // And again after a longer valid run has grown the buffers.
    {
        const auto xl = iota_input(static_cast<size_t>(20) * B * E);
        deeprnn::RunInput i;
        i.x = xl.data();
        i.seq_len = 20;
        i.batch = B;
        std::vector<float> yl(static_cast<size_t>(20) * B * 2 * H);
        s.run(i, deeprnn::RunOutput{yl.data(), nullptr, nullptr});
    }
    bad([](deeprnn::RunInput& i, deeprnn::RunOutput&) { i.batch = 0; });
    run_valid(s, y_got, h_got, c_got);
    BOOST_TEST(same_bits(y_got, y_ref));
    BOOST_TEST(same_bits(h_got, h_ref));
    BOOST_TEST(same_bits(c_got, c_ref));
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------
// Stream
// ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(stream)

// Bidirectional and reverse models need the future: refused, naming the direction.
BOOST_AUTO_TEST_CASE(direction_refused) {
    auto c = base_config();
    c.direction = deeprnn::Direction::bidirectional;
    deeprnn::Model bi(c, torch_weights(c));
    expect_error([&] { deeprnn::Stream s(bi); }, {"Config.direction", "bidirectional"});
    auto o = base_config();
    o.convention = deeprnn::Convention::onnx;
    o.direction = deeprnn::Direction::reverse;
    deeprnn::Model rev(o, onnx_weights(o));
    expect_error([&] { deeprnn::Stream s(rev); }, {"Config.direction", "reverse"});
}

// batch must be in [1, max_batch].
BOOST_AUTO_TEST_CASE(batch_out_of_range) {
    const auto c = base_config();
    deeprnn::Model m(c, torch_weights(c));
    expect_error([&] { deeprnn::Stream s(m, 0); }, {"batch", "= 0", "max_batch = 4"});
    expect_error([&] { deeprnn::Stream s(m, -3); }, {"batch", "-3"});
    expect_error([&] { deeprnn::Stream s(m, 5); }, {"batch", "= 5", "max_batch = 4"});
    BOOST_CHECK_NO_THROW(deeprnn::Stream(m, 4));
}

// push: x required, frames >= 1, y must not overlap x; the stream keeps working
// and its state is unchanged by the failed calls.
BOOST_AUTO_TEST_CASE(push_errors) {
    const auto c = base_config();
    deeprnn::Model m(c, torch_weights(c));
    deeprnn::Stream s(m, 2), fresh(m, 2);
    const auto x = iota_input(static_cast<size_t>(3) * 2 * E);
    std::vector<float> y(static_cast<size_t>(3) * 2 * H), y_ref(y.size());
    expect_error([&] { s.push(nullptr, 3, y.data()); }, {"Stream::push x", "null"});
    expect_error([&] { s.push(x.data(), 0, y.data()); }, {"Stream::push frames", "= 0"});
    expect_error([&] { s.push(x.data(), -2, y.data()); }, {"Stream::push frames", "-2"});
    expect_error([&] { s.push(x.data(), 1 << 30, nullptr); }, {"Stream::push frames", "1073741824", "batch (2)"});
    std::vector<float> buf(x.size() + y.size());
    std::copy(x.begin(), x.end(), buf.begin());
    expect_error([&] { s.push(buf.data(), 3, buf.data() + 1); }, {"Stream::push y", "overlaps", "Stream::push x"});
    s.push(x.data(), 3, y.data());
    fresh.push(x.data(), 3, y_ref.data());
    BOOST_TEST(same_bits(y, y_ref));
}

// set_state with a cell state for a model without one is refused, and leaves
// the hidden state as it was (nothing half-set).
BOOST_AUTO_TEST_CASE(set_state_c_for_gru) {
    const auto c = base_config(deeprnn::Cell::gru);
    deeprnn::Model m(c, torch_weights(c));
    deeprnn::Stream s(m, 2);
    const auto x = iota_input(static_cast<size_t>(2) * E);
    s.push(x.data(), 1, nullptr);
    const std::vector<float> before(s.h(), s.h() + 2 * H);
    const std::vector<float> h(2 * H, 0.5f), cst(2 * H, 0.25f);
    expect_error([&] { s.set_state(h.data(), cst.data()); }, {"Stream::set_state c", "LSTM"});
    BOOST_TEST(same_bits(std::vector<float>(s.h(), s.h() + 2 * H), before));
    BOOST_TEST(s.c() == nullptr);
    BOOST_CHECK_NO_THROW(s.set_state(h.data(), nullptr));
    BOOST_TEST(same_bits(std::vector<float>(s.h(), s.h() + 2 * H), h));
}

// A moved-from Stream throws from push and set_state instead of touching null data.
BOOST_AUTO_TEST_CASE(moved_from_stream) {
    const auto c = base_config();
    deeprnn::Model m(c, torch_weights(c));
    deeprnn::Stream a(m, 1);
    deeprnn::Stream b(std::move(a));
    const auto x = iota_input(E);
    std::vector<float> y(H);
    expect_error([&] { a.push(x.data(), 1, y.data()); }, {"Stream", "after move"});
    const std::vector<float> h(H, 0.5f);
    expect_error([&] { a.set_state(h.data(), h.data()); }, {"Stream", "after move"});
    BOOST_CHECK_NO_THROW(b.push(x.data(), 1, y.data()));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()
