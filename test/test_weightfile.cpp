// Weight files: .safetensors and .npz (load_safetensors, load_npz, load_weights).
//
// Round trip: test/data/weightfiles/ holds .npy cases of test/data/ rewritten
// by tools/export_torch.py --fixtures (PyTorch/NumPy writers, not the code
// under test); each must load to exactly the tensors of its .npy directory,
// and a model built from it must give bit for bit the outputs of a model
// built from the .npy files. Malformed files are built byte by byte here and
// each must fail with an error naming the problem; every truncation and
// single-byte change of the fixtures must fail cleanly or load (never crash,
// never read out of bounds: CI runs this under ASan).
#include <boost/test/unit_test.hpp>

#include "deeprnn.hpp"
#include "reference.hpp"
#include "expect_error.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#ifndef DEEPRNN_TEST_DATA
#define DEEPRNN_TEST_DATA "test/data"
#endif

// The buffer parsers, declared here as a fuzzer would declare them.
namespace deeprnn::detail {
Weights parse_safetensors(const unsigned char* p, size_t n, const std::string& what);
Weights parse_npz(const unsigned char* p, size_t n, const std::string& what);
Weights parse_torch(const unsigned char* p, size_t n, const std::string& what);
Weights parse_onnx(const unsigned char* p, size_t n, const std::string& what, int index, Config* config);
}  // namespace deeprnn::detail

namespace {

const std::string kData = DEEPRNN_TEST_DATA;
const std::string kFiles = kData + "/weightfiles/";

struct TempDir {
    std::string dir;
    TempDir() {
        char tmpl[] = "/tmp/deeprnn_weightfile_XXXXXX";
        BOOST_REQUIRE(mkdtemp(tmpl) != nullptr);
        dir = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string write(const std::string& name, const std::string& bytes) const {
        const std::string path = dir + "/" + name;
        std::ofstream f(path, std::ios::binary);
        f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        BOOST_REQUIRE(f.good());
        return path;
    }
};

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    BOOST_REQUIRE_MESSAGE(f.good(), "cannot open " << path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string le(uint64_t v, int bytes) {
    std::string s;
    for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
    return s;
}

// A .safetensors file: header length, header, data.
std::string safetensors(const std::string& header, const std::string& data) { return le(header.size(), 8) + header + data; }

// CRC-32 (zip's), bit by bit.
uint32_t crc32(const std::string& s) {
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : s) {
        c ^= b;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

// A zip of stored members, laid out as np.savez writes them: local headers
// and data, the central directory, the end record.
std::string zip(const std::vector<std::pair<std::string, std::string>>& members) {
    std::string out, central;
    for (const auto& [name, data] : members) {
        const std::string fields = le(0, 2) + le(0, 2) + le(0, 4) + le(crc32(data), 4) + le(data.size(), 4) +
                                   le(data.size(), 4) + le(name.size(), 2);  // flags, method, time, crc, sizes, name
        central += le(0x02014b50, 4) + le(20, 2) + le(20, 2) + fields + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 2) +
                   le(0, 4) + le(out.size(), 4) + name;
        out += le(0x04034b50, 4) + le(20, 2) + fields + le(0, 2) + name + data;
    }
    const size_t cd = out.size();
    return out + central + le(0x06054b50, 4) + le(0, 4) + le(members.size(), 2) + le(members.size(), 2) +
           le(central.size(), 4) + le(cd, 4) + le(0, 2);
}

// A float32 .npy file of `values` with shape [n].
std::string npy(const std::vector<float>& values) {
    TempDir tmp;
    deeprnn::Tensor t;
    t.shape = {static_cast<int64_t>(values.size())};
    t.data = values;
    deeprnn::save_npy(tmp.dir + "/t.npy", t);
    return read_bytes(tmp.dir + "/t.npy");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Output sequence of a model built from `w` (shapes from the weights) on x [T, B, E].
std::vector<float> run(const deeprnn::Weights& w, deeprnn::Cell cell, deeprnn::Convention conv,
                       const std::vector<float>& x, int T, int B) {
    return ref::run_model(deeprnn::Model(deeprnn::config_from_weights(cell, conv, w), w), x, T, B);
}

bool mapped(const std::string& path) {
    return read_bytes("/proc/self/maps").find(path) != std::string::npos;
}

}  // namespace

// Protobuf's wire format, as much as an ONNX model needs (tools/make_fixtures.py
// writes real ones with the onnx package; these build the broken ones).
std::string varint(uint64_t v) {
    std::string s;
    for (; v >= 0x80; v >>= 7) s += static_cast<char>((v & 0x7F) | 0x80);
    return s + static_cast<char>(v);
}
std::string pb_int(int field, uint64_t v) { return varint(static_cast<uint64_t>(field) << 3) + varint(v); }
std::string pb_len(int field, const std::string& body) { return varint(static_cast<uint64_t>(field) << 3 | 2) + varint(body.size()) + body; }
// A float32 initializer (raw_data), or one stored elsewhere (data_location = EXTERNAL).
std::string pb_tensor(const std::string& name, const std::vector<int64_t>& dims, bool external = false) {
    std::string t;
    int64_t n = 1;
    for (int64_t d : dims) {
        t += pb_int(1, static_cast<uint64_t>(d));
        n *= d;
    }
    t += pb_int(2, 1) + pb_len(8, name);
    if (external) return t + pb_int(14, 1);
    std::string raw;
    for (int64_t i = 0; i < n; ++i) raw += le(0x3f000000, 4);  // 0.5f
    return t + pb_len(9, raw);
}
// A node; attributes are already-encoded AttributeProtos.
std::string pb_node(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& attrs = {},
                    const std::string& name = "") {
    std::string n;
    for (const std::string& i : inputs) n += pb_len(1, i);
    n += pb_len(3, name) + pb_len(4, op);
    for (const std::string& a : attrs) n += pb_len(5, a);
    return n;
}
std::string pb_model(const std::vector<std::string>& nodes, const std::vector<std::string>& initializers) {
    std::string g;
    for (const std::string& n : nodes) g += pb_len(1, n);
    for (const std::string& t : initializers) g += pb_len(5, t);
    return pb_int(1, 7) + pb_len(7, g);
}
// A GRU of E = 2, H = 3, one direction: W [1, 9, 2], R [1, 9, 3].
std::vector<std::string> gru_weights() { return {pb_tensor("w", {1, 9, 2}), pb_tensor("r", {1, 9, 3})}; }

BOOST_AUTO_TEST_SUITE(weight_files)

// The fixtures' model.onnx files (written by the onnx package) carry the
// flags of their cases: the end-to-end runs are in test_fixtures.cpp; here,
// the Config load_onnx derives, and the weights against weights/*.npy.
BOOST_AUTO_TEST_CASE(onnx_files_give_the_operators_weights_and_attributes) {
    struct Case {
        const char* name;
        deeprnn::Cell cell;
        deeprnn::Direction direction;
        deeprnn::GruVariant variant;
        float clip;
        bool peepholes;
    };
    using deeprnn::Cell;
    using deeprnn::Direction;
    using deeprnn::GruVariant;
    const GruVariant rbm = GruVariant::reset_before_matmul, lbr = GruVariant::linear_before_reset;
    for (const Case& c : {Case{"onnx_gru", Cell::gru, Direction::forward, rbm, 0, false},
                          Case{"onnx_gru_lbr", Cell::gru, Direction::forward, lbr, 0, false},
                          Case{"onnx_gru_constants", Cell::gru, Direction::forward, rbm, 0, false},  // Constant operators
                          Case{"onnx_lstm_float16", Cell::lstm, Direction::forward, lbr, 0, true},   // FLOAT16, exact in f32
                          Case{"onnx_gru_bfloat16", Cell::gru, Direction::forward, rbm, 0, false},   // BFLOAT16
                          Case{"onnx_gru_reverse", Cell::gru, Direction::reverse, rbm, 0, false},
                          Case{"onnx_lstm_bidir", Cell::lstm, Direction::bidirectional, lbr, 0, false},
                          Case{"onnx_lstm_clip", Cell::lstm, Direction::forward, lbr, 0.5f, true},
                          Case{"onnx_rnn_relu", Cell::rnn_relu, Direction::forward, lbr, 0, false},
                          Case{"onnx_rnn_tanh", Cell::rnn_tanh, Direction::forward, lbr, 0, false}}) {
        BOOST_TEST_CONTEXT(c.name) {
            deeprnn::Config cfg;
            const deeprnn::Weights w = deeprnn::load_onnx(kData + "/" + c.name + "/model.onnx", &cfg);
            BOOST_TEST((cfg.cell == c.cell));
            BOOST_TEST((cfg.convention == deeprnn::Convention::onnx));
            BOOST_TEST((cfg.direction == c.direction));
            if (c.cell == Cell::gru) BOOST_TEST((cfg.gru_variant == c.variant));
            BOOST_TEST(cfg.clip == c.clip);
            BOOST_TEST(cfg.peepholes == c.peepholes);
            const deeprnn::Weights npy = deeprnn::load_npy_dir(kData + "/" + c.name + "/weights");
            BOOST_TEST(w.size() == npy.size());
            for (const auto& [name, t] : npy) {
                BOOST_REQUIRE(w.count(name));
                BOOST_TEST(w.at(name).shape == t.shape);
                BOOST_TEST(w.at(name).data == t.data);  // raw_data (W, R) and float_data (B, P) alike, bit for bit
            }
            BOOST_TEST(deeprnn::load_weights(kData + "/" + c.name + "/model.onnx").size() == w.size());
        }
    }
}

BOOST_AUTO_TEST_CASE(onnx_files_outside_what_runs_name_the_problem) {
    const TempDir tmp;
    const std::vector<std::string> gru_inputs = {"x", "w", "r"};
    auto load = [&](const std::string& bytes, int index = -1) {
        deeprnn::Config cfg;
        deeprnn::load_onnx(tmp.write("m.onnx", bytes), &cfg, index);
        return cfg;
    };
    auto attr_s = [](const char* name, const std::string& v) { return pb_len(1, name) + pb_len(4, v); };
    auto attr_i = [](const char* name, int64_t v) { return pb_len(1, name) + pb_int(3, static_cast<uint64_t>(v)); };
    auto attr_strings = [](const char* name, std::vector<std::string> v) {
        std::string a = pb_len(1, name);
        for (const std::string& s : v) a += pb_len(9, s);
        return a;
    };
    BOOST_TEST(load(pb_model({pb_node("GRU", gru_inputs)}, gru_weights())).hidden_size == 3);
    // Two recurrent operators: the index picks one; without it, both are named.
    const std::string two = pb_model({pb_node("GRU", gru_inputs, {}, "enc"), pb_node("Relu", {"y"}),
                                      pb_node("GRU", {"y", "w", "r"}, {attr_i("linear_before_reset", 1)}, "dec")},
                                     gru_weights());
    expect_error([&] { load(two); }, {"2 recurrent operators", "GRU 'enc'", "GRU 'dec'", "index"});
    BOOST_TEST((load(two, 1).gru_variant == deeprnn::GruVariant::linear_before_reset));
    BOOST_TEST((load(two, 0).gru_variant == deeprnn::GruVariant::reset_before_matmul));
    expect_error([&] { load(two, 2); }, {"index = 2", "2 recurrent operators"});
    // A stack: each layer's operator reads the previous one's Y through reshapes only.
    auto attr_ints = [](const char* name, std::vector<int64_t> v) {
        std::string a = pb_len(1, name);
        for (int64_t i : v) a += pb_int(8, static_cast<uint64_t>(i));
        return a;
    };
    auto out = [](std::string node, const std::string& y) { return node + pb_len(2, y); };  // a node's output
    std::vector<std::string> stacked = gru_weights();
    stacked.push_back(pb_tensor("w1", {1, 9, 3}));
    stacked.push_back(pb_tensor("r1", {1, 9, 3}));
    const std::string squeeze = out(pb_node("Squeeze", {"y0", "axes"}), "x1");
    const deeprnn::Config two_layers =
        load(pb_model({out(pb_node("GRU", gru_inputs, {}, "l0"), "y0"), squeeze, pb_node("GRU", {"x1", "w1", "r1"}, {}, "l1")}, stacked));
    BOOST_TEST(two_layers.num_layers == 2);
    BOOST_TEST(two_layers.input_size == 2);
    deeprnn::Weights layers = deeprnn::load_weights(tmp.dir + "/m.onnx");
    BOOST_TEST(layers.count("l1_R") == 1);
    BOOST_CHECK_NO_THROW(deeprnn::Model(two_layers, layers));
    layers.erase("l1_R");  // the onnx convention's stacked names are checked like any other
    expect_error([&] { deeprnn::Model m(two_layers, layers); }, {"'l1_R'"});
    layers["l1_R"] = layers["l0_R"];
    layers["W"] = layers["l0_W"];
    expect_error([&] { deeprnn::Model m(two_layers, layers); }, {"Config.num_layers = 2", "l0_W"});
    expect_error([&] { load(pb_model({out(pb_node("GRU", gru_inputs, {}, "l0"), "y0"), out(pb_node("Relu", {"y0"}), "x1"),
                                      pb_node("GRU", {"x1", "w1", "r1"}, {}, "l1")}, stacked)); },
                 {"not one stack", "a Relu", "index"});
    expect_error([&] { load(pb_model({out(pb_node("GRU", gru_inputs, {}, "l0"), "y0"), squeeze,
                                      pb_node("GRU", {"x1", "w1", "r1"}, {attr_i("linear_before_reset", 1)}, "l1")}, stacked)); },
                 {"not one stack", "attributes differ"});
    std::vector<std::string> stacked2 = {pb_tensor("w", {2, 9, 2}), pb_tensor("r", {2, 9, 3}), pb_tensor("w1", {2, 9, 6}),
                                         pb_tensor("r1", {2, 9, 3})};
    const std::string bidir = attr_s("direction", "bidirectional");
    const std::string reshape = out(pb_node("Reshape", {"t0", "shape"}), "x1");
    expect_error([&] { load(pb_model({out(pb_node("GRU", gru_inputs, {bidir}, "l0"), "t0"), reshape,
                                      pb_node("GRU", {"x1", "w1", "r1"}, {bidir}, "l1")}, stacked2)); },
                 {"not one stack", "without the Transpose"});
    const std::string transpose = out(pb_node("Transpose", {"y0"}, {attr_ints("perm", {0, 2, 1, 3})}), "t0");
    BOOST_TEST(load(pb_model({out(pb_node("GRU", gru_inputs, {bidir}, "l0"), "y0"), transpose, reshape,
                              pb_node("GRU", {"x1", "w1", "r1"}, {bidir}, "l1")}, stacked2)).num_layers == 2);
    expect_error([&] { deeprnn::load_onnx(tmp.write("i.onnx", two), nullptr, -2); }, {"index = -2"});
    // What deeprnn does not run, by name.
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {attr_strings("activations", {"Relu", "Tanh"})})}, gru_weights())); },
                 {"activations [Relu, Tanh]", "Sigmoid or HardSigmoid"});
    // HardSigmoid gates (Keras before 2.3): ONNX's alpha 0.2 and beta 0.5
    // unless activation_alpha / _beta give them, one value per HardSigmoid.
    auto attr_floats = [](const char* name, std::vector<float> v) {
        std::string a = pb_len(1, name);
        for (float f : v) {
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            a += std::string(1, static_cast<char>(7 << 3 | 5)) + le(bits, 4);
        }
        return a;
    };
    const std::string hard_gru = attr_strings("activations", {"HardSigmoid", "Tanh"});
    deeprnn::Config hard = load(pb_model({pb_node("GRU", gru_inputs, {hard_gru})}, gru_weights()));
    BOOST_TEST((hard.gate_activation == deeprnn::GateActivation::hard_sigmoid));
    BOOST_TEST(hard.hard_sigmoid_alpha == 0.2f);
    BOOST_TEST(hard.hard_sigmoid_beta == 0.5f);
    hard = load(pb_model({pb_node("GRU", gru_inputs, {hard_gru, attr_floats("activation_alpha", {0.25f}), attr_floats("activation_beta", {0.375f})})},
                         gru_weights()));
    BOOST_TEST(hard.hard_sigmoid_alpha == 0.25f);
    BOOST_TEST(hard.hard_sigmoid_beta == 0.375f);
    BOOST_CHECK_NO_THROW(deeprnn::Model(hard, deeprnn::load_weights(tmp.dir + "/m.onnx")));
    deeprnn::load_onnx(kData + "/onnx_lstm_hard_sigmoid/model.onnx", &hard);  // written by the onnx package
    BOOST_TEST((hard.gate_activation == deeprnn::GateActivation::hard_sigmoid && hard.direction == deeprnn::Direction::bidirectional));
    BOOST_TEST(hard.hard_sigmoid_alpha == 0.25f);
    BOOST_TEST(hard.hard_sigmoid_beta == 0.375f);
    const std::vector<std::string> bidir_weights = {pb_tensor("w", {2, 9, 2}), pb_tensor("r", {2, 9, 3})};
    const std::string two_hard = attr_strings("activations", {"HardSigmoid", "Tanh", "HardSigmoid", "Tanh"});
    BOOST_TEST(load(pb_model({pb_node("GRU", gru_inputs, {two_hard, attr_s("direction", "bidirectional")})}, bidir_weights))
                   .hard_sigmoid_alpha == 0.2f);
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {two_hard, attr_s("direction", "bidirectional"),
                                                                   attr_floats("activation_alpha", {0.2f, 0.3f})})}, bidir_weights)); },
                 {"activation_alpha / _beta differing", "0.3"});
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {attr_strings("activations", {"HardSigmoid", "Tanh", "Sigmoid", "Tanh"}),
                                                                   attr_s("direction", "bidirectional")})}, bidir_weights)); },
                 {"activations [HardSigmoid, Tanh, Sigmoid, Tanh]", "the same in each direction"});
    // Relu candidates (Keras activation='relu'): GRU [.., Relu], LSTM [.., Relu, Relu] alike.
    const std::string relu_gru = attr_strings("activations", {"Sigmoid", "Relu", "Sigmoid", "Relu"});
    deeprnn::Config relu = load(pb_model({pb_node("GRU", gru_inputs, {relu_gru, attr_s("direction", "bidirectional")})}, bidir_weights));
    BOOST_TEST((relu.cell_activation == deeprnn::CellActivation::relu && relu.gate_activation == deeprnn::GateActivation::sigmoid));
    relu = load(pb_model({pb_node("GRU", gru_inputs, {attr_strings("activations", {"HardSigmoid", "Relu"})})}, gru_weights()));
    BOOST_TEST((relu.cell_activation == deeprnn::CellActivation::relu && relu.gate_activation == deeprnn::GateActivation::hard_sigmoid));
    BOOST_TEST((load(pb_model({pb_node("GRU", gru_inputs, {hard_gru})}, gru_weights())).cell_activation == deeprnn::CellActivation::tanh));
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {attr_strings("activations", {"Sigmoid", "Relu", "Sigmoid", "Tanh"}),
                                                                   attr_s("direction", "bidirectional")})}, bidir_weights)); },
                 {"activations [Sigmoid, Relu, Sigmoid, Tanh]", "the same in each direction"});
    const std::vector<std::string> lstm_weights = {pb_tensor("w", {1, 12, 2}), pb_tensor("r", {1, 12, 3})};
    expect_error([&] { load(pb_model({pb_node("LSTM", gru_inputs, {attr_strings("activations", {"Sigmoid", "Relu", "Tanh"})})}, lstm_weights)); },
                 {"activations [Sigmoid, Relu, Tanh]", "g and h alike"});
    BOOST_TEST((load(pb_model({pb_node("LSTM", gru_inputs, {attr_strings("activations", {"Sigmoid", "Relu", "Relu"})})}, lstm_weights))
                    .cell_activation == deeprnn::CellActivation::relu));
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {attr_floats("activation_alpha", {0.1f})})}, gru_weights())); },
                 {"1 activation_alpha", "0 activations that take them"});
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {attr_s("direction", "sideways")})}, gru_weights())); },
                 {"direction 'sideways'"});
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {attr_s("direction", "bidirectional")})}, gru_weights())); },
                 {"direction 'bidirectional'", "[1, 9, 2]"});
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs, {attr_i("hidden_size", 4)})}, gru_weights())); },
                 {"hidden_size = 4"});
    // Weights as Constant operators, directly or through an Identity; a
    // Constant without a tensor value (value_float) is not one.
    auto constant = [&](const std::string& name, std::string value) {
        return out(pb_node("Constant", {}, {pb_len(1, "value") + pb_len(5, value)}, name), name);
    };
    const std::string r_constant = constant("r_c", pb_tensor("r_c", {1, 9, 3})), identity = out(pb_node("Identity", {"r_c"}), "r");
    BOOST_TEST(load(pb_model({r_constant, identity, pb_node("GRU", gru_inputs)}, {pb_tensor("w", {1, 9, 2})})).hidden_size == 3);
    BOOST_TEST(load(pb_model({constant("w", pb_tensor("w", {1, 9, 2})), r_constant, pb_node("GRU", {"x", "w", "r_c"})}, {})).input_size == 2);
    const deeprnn::Weights from_constants = deeprnn::load_weights(tmp.dir + "/m.onnx");
    BOOST_TEST(from_constants.at("R").shape == (std::vector<int64_t>{1, 9, 3}));
    BOOST_TEST(from_constants.at("R").data == std::vector<float>(27, 0.5f));
    expect_error([&] { load(pb_model({out(pb_node("Constant", {}, {pb_len(1, "value_int") + pb_int(3, 1)}), "r"), pb_node("GRU", gru_inputs)},
                                     {pb_tensor("w", {1, 9, 2})})); },
                 {"input R ('r')", "neither an initializer nor a Constant"});
    expect_error([&] { load(pb_model({constant("w", pb_tensor("w", {1, 9, 2}, true)), r_constant, pb_node("GRU", {"x", "w", "r_c"})}, {})); },
                 {"tensor 'w'", "external data"});
    // Weights that are not in the file.
    expect_error([&] { load(pb_model({pb_node("GRU", {"x", "w", "r_computed"})}, gru_weights())); },
                 {"input R ('r_computed')", "neither an initializer nor a Constant"});
    expect_error([&] { load(pb_model({pb_node("GRU", {"x", "w"})}, gru_weights())); }, {"no input R"});
    std::vector<std::string> with_h0 = gru_weights();
    with_h0.push_back(pb_tensor("h0", {1, 1, 3}));
    expect_error([&] { load(pb_model({pb_node("GRU", {"x", "w", "r", "", "", "h0"})}, with_h0)); },
                 {"input initial_h ('h0')", "constant", "RunInput"});
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs)}, {pb_tensor("w", {1, 9, 2}), pb_tensor("r", {1, 9, 3}, true)})); },
                 {"tensor 'r'", "external data"});
    expect_error([&] { load(pb_model({pb_node("MatMul", {"a", "b"})}, {})); }, {"no LSTM, GRU or RNN"});
    expect_error([&] { load(pb_int(1, 7)); }, {"no graph"});
    // A tensor whose data is not what its dims say.
    std::string short_r = pb_int(1, 1) + pb_int(1, 9) + pb_int(1, 3) + pb_int(2, 1) + pb_len(8, "r") + pb_len(9, le(0, 4));
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs)}, {pb_tensor("w", {1, 9, 2}), short_r})); },
                 {"tensor 'r'", "[1, 9, 3]", "4 bytes"});
    std::string int_r = pb_int(1, 1) + pb_int(2, 7) + pb_len(8, "r");
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs)}, {pb_tensor("w", {1, 9, 2}), int_r})); },
                 {"tensor 'r'", "data type 7", "FLOAT16 (10)"});
    // 16-bit weights: float16 and bfloat16 from raw_data or int32_data, each
    // exact in float32 (half 0x3800 = bfloat16 0x3F00 = 0.5; half 0x0001 is
    // the smallest subnormal, 2^-24); a count that is not the dims' is named.
    auto r16 = [](int type, const std::string& data) {
        return pb_int(1, 1) + pb_int(1, 9) + pb_int(1, 3) + pb_int(2, static_cast<uint64_t>(type)) + pb_len(8, "r") + data;
    };
    std::string raw_half, listed_bf16, listed_short;
    for (int i = 0; i < 27; ++i) raw_half += le(i == 0 ? 0x0001 : 0x3800, 2);
    for (int i = 0; i < 27; ++i) listed_bf16 += pb_int(5, 0x3F00);
    for (int i = 0; i < 26; ++i) listed_short += pb_int(5, 0x3800);
    const std::pair<std::string, float> sixteen[] = {{r16(10, pb_len(9, raw_half)), std::ldexp(1.0f, -24)},
                                                      {r16(16, listed_bf16), 0.5f}};
    for (const auto& [r, first] : sixteen) {
        load(pb_model({pb_node("GRU", gru_inputs)}, {pb_tensor("w", {1, 9, 2}), r}));
        const deeprnn::Tensor got = deeprnn::load_weights(tmp.dir + "/m.onnx").at("R");
        BOOST_TEST(got.data[0] == first);
        BOOST_TEST(got.data[1] == 0.5f);
        BOOST_TEST(got.data[26] == 0.5f);
    }
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs)}, {pb_tensor("w", {1, 9, 2}), r16(10, listed_short)})); },
                 {"tensor 'r'", "holds 26 values, not 27"});
    expect_error([&] { load(pb_model({pb_node("GRU", gru_inputs)}, {pb_tensor("w", {1, 9, 2}), r16(16, pb_len(9, raw_half + "xx"))})); },
                 {"tensor 'r'", "56 bytes of data, not 54"});
    expect_error([&] { deeprnn::load_onnx(tmp.dir + "/missing.onnx"); }, {"missing.onnx"});
}

BOOST_AUTO_TEST_CASE(every_truncation_and_byte_flip_of_an_onnx_file_fails_cleanly) {
    const std::string bytes = read_bytes(kData + "/onnx_lstm_peepholes/model.onnx");
    auto parse = [](const std::string& b, size_t n) {  // exactly n bytes: a read past them is caught by ASan
        std::vector<unsigned char> copy(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
        deeprnn::Config cfg;
        return deeprnn::detail::parse_onnx(copy.data(), n, "m.onnx", -1, &cfg);
    };
    const deeprnn::Weights whole = parse(bytes, bytes.size());
    // Protobuf has no end marker: a file cut between two of the model's fields
    // after the graph (opset_import) is a whole model; cut anywhere else, refused.
    size_t refused = 0, whole_again = 0;
    for (size_t n = 0; n < bytes.size(); ++n) {
        try {
            const deeprnn::Weights w = parse(bytes, n);
            BOOST_TEST(w.size() == whole.size());
            ++whole_again;
        } catch (const deeprnn::Error&) {
            ++refused;
        }
    }
    BOOST_TEST(refused + whole_again == bytes.size());
    BOOST_TEST(whole_again <= 3);  // the cuts after the graph field
    size_t flips_survived = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        std::string changed = bytes;
        changed[i] = static_cast<char>(changed[i] ^ 0x5A);
        try {
            parse(changed, changed.size());
            ++flips_survived;  // e.g. a changed weight value: protobuf has no checksum
        } catch (const deeprnn::Error&) {
        }
    }
    BOOST_TEST_MESSAGE("model.onnx: " << flips_survived << " of " << bytes.size() << " byte flips still load");
}

BOOST_AUTO_TEST_CASE(files_load_the_npy_tensors_and_models_match_bit_for_bit) {
    struct Case {
        const char* file;
        const char* npy_case;
        deeprnn::Cell cell;
        deeprnn::Convention conv;
    };
    const Case cases[] = {
        {"torch_lstm.safetensors", "torch_lstm", deeprnn::Cell::lstm, deeprnn::Convention::torch},
        {"torch_lstm.npz", "torch_lstm", deeprnn::Cell::lstm, deeprnn::Convention::torch},
        {"onnx_gru.safetensors", "onnx_gru", deeprnn::Cell::gru, deeprnn::Convention::onnx},
        {"keras_lstm_2layer.npz", "keras_lstm_2layer", deeprnn::Cell::lstm, deeprnn::Convention::keras},
    };
    const unsigned seed = std::random_device{}();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (const Case& c : cases) {
        BOOST_TEST_CONTEXT(c.file << " (input seed " << seed << ")") {
            const deeprnn::Weights got = deeprnn::load_weights(kFiles + c.file);
            const deeprnn::Weights want = deeprnn::load_npy_dir(kData + "/" + c.npy_case + "/weights");
            BOOST_TEST(got.size() == want.size());
            for (const auto& [name, t] : want) {
                const auto it = got.find(name);
                BOOST_TEST_REQUIRE((it != got.end()), "tensor " << name << " missing");
                BOOST_TEST(it->second.shape == t.shape, name << " shape");
                BOOST_TEST(same_bits(it->second.data, t.data), name << " values differ");
            }
            const int T = 7, B = 3, E = deeprnn::config_from_weights(c.cell, c.conv, want).input_size;
            std::vector<float> x(static_cast<size_t>(T) * B * E);
            for (float& v : x) v = uniform(rng);
            BOOST_TEST(same_bits(run(got, c.cell, c.conv, x, T, B), run(want, c.cell, c.conv, x, T, B)));
        }
    }
}

// A whole model's state_dict: the model's error names the module's prefix;
// strip_prefix takes that module's tensors, which then run bit for bit as the
// module's own file does. PyTorch cells' names (no _l0) are one layer.
BOOST_AUTO_TEST_CASE(a_module_of_a_state_dict_by_its_prefix) {
    const deeprnn::Weights all = deeprnn::load_weights(kFiles + "torch_module.safetensors");
    BOOST_TEST(all.size() == 7u);
    expect_error([&] { deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, all); },
                 {"'weight_hh_l0' is missing", "'encoder.lstm.weight_hh_l0' is there", "strip_prefix(weights, \"encoder.lstm.\")",
                  "--prefix encoder.lstm."});
    const deeprnn::Weights lstm = deeprnn::strip_prefix(all, "encoder.lstm.");
    const deeprnn::Weights want = deeprnn::load_weights(kFiles + "torch_lstm.safetensors");
    BOOST_TEST(lstm.size() == want.size());
    for (const auto& [name, t] : want) BOOST_TEST((lstm.count(name) && same_bits(lstm.at(name).data, t.data)), name);
    std::vector<float> x(5 * 2 * 5, 0.25f);
    BOOST_TEST(same_bits(run(lstm, deeprnn::Cell::lstm, deeprnn::Convention::torch, x, 5, 2),
                         run(want, deeprnn::Cell::lstm, deeprnn::Convention::torch, x, 5, 2)));
    BOOST_TEST(deeprnn::strip_prefix(all, "decoder.").empty());
    BOOST_TEST(deeprnn::strip_prefix(all, "").size() == all.size());
    const deeprnn::Weights head = deeprnn::strip_prefix(deeprnn::load_weights(kFiles + "torch_module.safetensors"), "head.");
    BOOST_TEST((head.size() == 2 && head.count("weight") && head.count("bias")));
    // nn.LSTMCell's names (test/data/torch_lstmcell runs them against PyTorch).
    deeprnn::Weights cell;
    for (const auto& [name, t] : want) cell[name.substr(0, name.size() - 3)] = t;  // weight_ih_l0 -> weight_ih
    const deeprnn::Config c = deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, cell);
    BOOST_TEST((c.num_layers == 1 && c.hidden_size == 7 && c.input_size == 5));
    BOOST_TEST(same_bits(run(cell, deeprnn::Cell::lstm, deeprnn::Convention::torch, x, 5, 2),
                         run(want, deeprnn::Cell::lstm, deeprnn::Convention::torch, x, 5, 2)));
    deeprnn::Weights in_module;
    for (const auto& [name, t] : cell) in_module["decoder.cell." + name] = t;
    expect_error([&] { deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, in_module); },
                 {"'weight_hh_l0' is missing", "'decoder.cell.weight_hh' is there", "\"decoder.cell.\""});
}

// torch.save files, written by PyTorch 1.13 (tools/export_torch.py --fixtures).
BOOST_AUTO_TEST_CASE(torch_save_files_give_their_tensors) {
    const deeprnn::Weights want = deeprnn::load_npy_dir(kData + "/torch_lstm/weights");
    const deeprnn::Weights sd = deeprnn::load_weights(kFiles + "torch_lstm.pt");  // nn.LSTM's state_dict
    for (const char* file : {"torch_lstm.pt", "torch_lstm_protocol4.pt"}) {
        const deeprnn::Weights got = deeprnn::load_weights(kFiles + file);
        BOOST_TEST(got.size() == want.size(), file);
        for (const auto& [name, t] : want)
            BOOST_TEST((got.count(name) && got.at(name).shape == t.shape && same_bits(got.at(name).data, t.data)), file << " " << name);
    }
    std::vector<float> x(6 * 3 * 5, -0.5f);
    BOOST_TEST(same_bits(run(sd, deeprnn::Cell::lstm, deeprnn::Convention::torch, x, 6, 3),
                         run(want, deeprnn::Cell::lstm, deeprnn::Convention::torch, x, 6, 3)));

    // A checkpoint: the model's tensors under their keys' path, the optimizer's
    // too; numbers, strings, lists and int64 tensors skipped.
    const deeprnn::Weights ck = deeprnn::load_torch(kFiles + "checkpoint.pt");
    BOOST_TEST(ck.count("model.head.weight") == 1u);
    BOOST_TEST(ck.count("optimizer.state.0.exp_avg") == 1u);
    BOOST_TEST((ck.count("ids") == 0 && ck.count("epoch") == 0 && ck.count("model.bn.num_batches_tracked") == 0));
    const deeprnn::Weights lstm = deeprnn::strip_prefix(ck, "model.encoder.lstm.");
    BOOST_TEST(lstm.size() == want.size());
    for (const auto& [name, t] : want) BOOST_TEST((lstm.count(name) && same_bits(lstm.at(name).data, t.data)), name);
    expect_error([&] { deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, ck); },
                 {"strip_prefix(weights, \"model.encoder.lstm.\")"});
    // Views of one 6x4 tensor a = (k - 12) / 8, in every floating dtype.
    std::vector<float> a(24);
    for (int k = 0; k < 24; ++k) a[k] = static_cast<float>(k - 12) / 8;
    using Shape = std::vector<int64_t>;
    for (const char* name : {"views.a", "views.f16", "views.bf16", "views.f64"}) {
        BOOST_TEST((ck.at(name).shape == Shape{6, 4}), name);
        BOOST_TEST(ck.at(name).data == a, name);
    }
    std::vector<float> t(24), slice;
    for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 4; ++j) t[j * 6 + i] = a[i * 4 + j];
    for (int i = 1; i < 4; ++i)
        for (int j = 1; j < 3; ++j) slice.push_back(a[i * 4 + j]);
    BOOST_TEST((ck.at("views.t").shape == Shape{4, 6} && ck.at("views.t").data == t));
    BOOST_TEST((ck.at("views.slice").shape == Shape{3, 2} && ck.at("views.slice").data == slice));
    BOOST_TEST((ck.at("views.scalar").shape == Shape{} && ck.at("views.scalar").data == std::vector<float>{-0.125f}));

    expect_error([&] { deeprnn::load_weights(kFiles + "whole_module.pt"); },
                 {"whole_module.pt", "no floating-point tensors", "torch.save(model.state_dict(), path)"});
    expect_error([&] { deeprnn::load_torch(kFiles + "legacy.pt"); }, {"legacy.pt", "legacy format", "current PyTorch"});
    expect_error([&] { deeprnn::load_torch(kFiles + "torch_lstm.npz"); }, {"torch_lstm.npz", "no <dir>/data.pkl"});
    expect_error([&] { deeprnn::load_torch(kFiles + "dtypes.safetensors"); }, {"not a torch.save file"});
}

// Pickles that are not what torch.save writes name the problem; none runs
// anything. Each is wrapped in a zip as torch.save writes one.
BOOST_AUTO_TEST_CASE(torch_pickles_outside_what_torch_save_writes_name_the_problem) {
    const auto load = [](const std::string& pickle, std::vector<std::pair<std::string, std::string>> more = {}) {
        more.insert(more.begin(), {"archive/data.pkl", pickle});
        const std::string z = zip(more);
        return deeprnn::detail::parse_torch(reinterpret_cast<const unsigned char*>(z.data()), z.size(), "t.pt");
    };
    const auto text = [](const std::string& v) { return "X" + le(v.size(), 4) + v; };  // BINUNICODE
    const auto small = [](int v) { return "K" + std::string(1, static_cast<char>(v)); };  // BININT1
    const std::string proto = "\x80\x02";
    expect_error([&] { load(proto + "}."); }, {"t.pt", "no floating-point tensors"});  // an empty dict
    expect_error([&] { load(proto + "}X" + le(9, 4) + "a"); }, {"runs past the pickle"});
    expect_error([&] { load(proto + "}K"); }, {"pickle ends inside", "truncated"});
    expect_error([&] { load(proto + "0."); }, {"pops an empty stack"});
    expect_error([&] { load(proto + "h" + std::string(1, '\x05') + "."); }, {"memo 5 was never stored"});
    expect_error([&] { load(proto + "\xff."); }, {"opcode 0xff"});
    expect_error([&] { load(proto + "}" + small(1) + "u."); }, {"no MARK"});
    expect_error([&] { load(proto + "](" + small(1) + small(2) + "u."); }, {"SETITEMS needs a dict"});
    expect_error([&] { load(proto + "}}."); }, {"STOP leaves 1 values"});
    // A call deeprnn does not evaluate (os.system) is an opaque value, never run.
    expect_error([&] { load(proto + "}" + text("a") + "cos\nsystem\n" + text("ls") + "\x85Rs."); }, {"no floating-point tensors"});
    // {"w": a float32 tensor of `size` elements `stride` apart in a storage of `count`}.
    const auto tensor = [&](int count, int size, int stride) {
        return proto + "}" + text("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" + text("storage") + "ctorch\nFloatStorage\n" +
               text("0") + text("cpu") + small(count) + "tQ" + small(0) + small(size) + "\x85" + small(stride) + "\x85\x89}tRs.";
    };
    const std::string floats(12, '\0');
    const deeprnn::Weights w = load(tensor(3, 3, 1), {{"archive/data/0", floats}});
    BOOST_TEST((w.size() == 1 && w.at("w").shape == std::vector<int64_t>{3} && w.at("w").data == std::vector<float>(3, 0.0f)));
    expect_error([&] { load(tensor(3, 3, 1)); }, {"tensor 'w' names storage '0', which the file lacks"});
    expect_error([&] { load(tensor(3, 3, 1), {{"archive/data/0", floats.substr(4)}}); }, {"tensor 'w'", "holds 8 bytes"});
    expect_error([&] { load(tensor(3, 3, 2), {{"archive/data/0", floats}}); }, {"tensor 'w'", "reaches past its storage's 3"});
    expect_error([&] { load(tensor(2, 3, 1), {{"archive/data/0", floats}}); }, {"tensor 'w'", "more elements than its storage's 2"});
    expect_error([&] { load(tensor(3, 3, 1), {{"archive/data/0", floats}, {"archive/byteorder", "big"}}); }, {"byte order 'big'"});
}

BOOST_AUTO_TEST_CASE(safetensors_dtypes_become_float32) {
    // Written by NumPy and PyTorch (tools/export_torch.py --fixtures); the values are exact in each dtype.
    const deeprnn::Weights w = deeprnn::load_safetensors(kFiles + "dtypes.safetensors");
    using Shape = std::vector<int64_t>;
    const deeprnn::Tensor &f16 = w.at("f16"), &bf16 = w.at("bf16"), &f64 = w.at("f64"), &i32 = w.at("i32"),
                          &i64 = w.at("i64");
    BOOST_TEST(f16.shape == Shape{6});
    BOOST_TEST(f16.data[0] == 1.0f);
    BOOST_TEST(f16.data[1] == -2.5f);
    BOOST_TEST(f16.data[2] == 65504.0f);                 // largest half
    BOOST_TEST(f16.data[3] == std::ldexp(1.0f, -24));    // smallest subnormal half
    BOOST_TEST((f16.data[4] == 0.0f && std::signbit(f16.data[4])));
    BOOST_TEST((std::isinf(f16.data[5]) && f16.data[5] > 0));
    BOOST_TEST(bf16.shape == (Shape{2, 2}));
    BOOST_TEST(bf16.data == (std::vector<float>{1.0f, -3.0f, std::ldexp(1.0f, 100), 0.15625f}));
    BOOST_TEST(f64.data == (std::vector<float>{static_cast<float>(0.1), static_cast<float>(-1e30)}));
    BOOST_TEST(i32.shape == (Shape{2, 1}));
    BOOST_TEST(i32.data == (std::vector<float>{-7.0f, 16777216.0f}));
    BOOST_TEST(i64.shape == Shape{});  // a scalar
    BOOST_TEST(i64.data == std::vector<float>{-16777216.0f});
}

BOOST_AUTO_TEST_CASE(load_weights_goes_by_what_the_path_is) {
    const std::string dir = kData + "/torch_lstm/weights";
    BOOST_TEST(deeprnn::load_weights(dir).size() == 4u);
    const deeprnn::Weights one = deeprnn::load_weights(dir + "/bias_ih_l0.npy");
    BOOST_TEST((one.size() == 1 && one.count("bias_ih_l0") == 1));
    expect_error([&] { deeprnn::load_weights(kData + "/torch_lstm/args"); }, {"torch_lstm/args", "unknown kind"});
    expect_error([&] { deeprnn::load_weights(kFiles + "absent.safetensors"); }, {"absent.safetensors", "No such file"});
    expect_error([&] { deeprnn::load_safetensors(dir); }, {"torch_lstm/weights", "not a regular file"});
}

BOOST_AUTO_TEST_CASE(compressed_npz_is_refused_with_a_reason) {
    expect_error([&] { deeprnn::load_npz(kFiles + "compressed.npz"); },
                 {"compressed.npz", "'W.npy'", "np.savez_compressed", "np.savez"});
}

BOOST_AUTO_TEST_CASE(malformed_safetensors_name_the_problem) {
    TempDir tmp;
    const std::string f4 = "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":";
    const std::string four(4, '\0');
    auto check = [&](const std::string& bytes, std::initializer_list<std::string> parts) {
        const std::string path = tmp.write("bad.safetensors", bytes);
        expect_error([&] { deeprnn::load_safetensors(path); }, parts);
    };
    check("", {"bad.safetensors", "too short"});
    check(le(100, 8) + "{}", {"header length 100 runs past the end"});
    check(safetensors("[]", ""), {"expected '{'", "at byte 8"});
    check(safetensors("{\"a\" " + f4 + "[0,4]}}", four), {"expected ':'"});
    check(safetensors("{\"a\":" + f4 + "[0,4]}", four), {"expected '}'"});
    check(safetensors("{\"a", ""), {"unterminated string"});
    check(safetensors("{\"a\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}", four), {"'a'", "dtype I8 not supported"});
    check(safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", four), {"hold 4 bytes", "needs 8"});
    check(safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", four), {"non-negative integer"});
    check(safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", four), {"fraction"});
    check(safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", four),
          {"too large"});
    check(safetensors("{\"a\":" + f4 + "[0,8]}}", four), {"outside the 4-byte data section", "truncated"});
    check(safetensors("{\"a\":" + f4 + "[4,0]}}", four), {"outside"});
    check(safetensors("{\"a\":" + f4 + "[0]}}", four), {"data_offsets has 1 values"});
    check(safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", four), {"lacks dtype, shape or data_offsets"});
    check(safetensors("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", four), {"repeated key 'dtype'"});
    check(safetensors("{\"a\":" + f4 + "[0,4]},\"a\":" + f4 + "[0,4]}}", four), {"'a' appears twice"});
    check(safetensors("{\"a\":" + f4 + "[0,4]},\"b\":" + f4 + "[8,12]}}", std::string(12, '\0')),
          {"'b' starts at data offset 8, expected 4"});
    check(safetensors("{\"a\":" + f4 + "[0,4]}}", std::string(6, '\0')), {"2 bytes after the last tensor"});
    check(safetensors("{\"__metadata__\":{\"k\":1}}", ""), {"expected '\"'"});
    check(safetensors("{\"a\\q\":" + f4 + "[0,4]}}", four), {"bad escape"});
    check(safetensors("{\"\\ud800\":" + f4 + "[0,4]}}", four), {"lone high surrogate"});
    check(safetensors("{} x", ""), {"trailing bytes"});
}

BOOST_AUTO_TEST_CASE(safetensors_names_metadata_and_padding) {
    const std::string one = le(0x3F800000, 4), two = le(0x40000000, 4);  // 1.0f, 2.0f
    const std::string header = "{\"__metadata__\":{\"format\":\"pt\"},\"caf\\u00e9 \\ud83d\\ude00\":"
                               "{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]},"
                               "\"a\" : { \"shape\" : [ 1 ] , \"dtype\" : \"F32\" , \"data_offsets\" : [ 0 , 4 ] } }   ";
    const std::string bytes = safetensors(header, one + two);
    const deeprnn::Weights w =
        deeprnn::detail::parse_safetensors(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "mem");
    BOOST_TEST(w.size() == 2u);
    BOOST_TEST(w.at("a").data == std::vector<float>{1.0f});
    BOOST_TEST(w.at("caf\xC3\xA9 \xF0\x9F\x98\x80").data == std::vector<float>{2.0f});  // UTF-8 of é and U+1F600
}

BOOST_AUTO_TEST_CASE(malformed_npz_name_the_problem) {
    TempDir tmp;
    const std::string a = npy({1.0f, 2.0f}), b = npy({3.0f});
    auto check = [&](const std::string& bytes, std::initializer_list<std::string> parts) {
        const std::string path = tmp.write("bad.npz", bytes);
        expect_error([&] { deeprnn::load_npz(path); }, parts);
    };
    const deeprnn::Weights good = deeprnn::load_npz(tmp.write("good.npz", zip({{"a.npy", a}, {"b.npy", b}})));
    BOOST_TEST(good.at("a").data == (std::vector<float>{1.0f, 2.0f}));
    BOOST_TEST(good.at("b").data == std::vector<float>{3.0f});

    const std::string z = zip({{"a.npy", a}});
    check("", {"bad.npz", "not a .npz file"});
    check("PK\x03\x04 and then nothing", {"zip end record missing", "truncated"});
    check(z.substr(0, z.size() - 1), {"truncated"});
    check(zip({{"a.txt", a}}), {"member 'a.txt'", "not a NAME.npy"});
    check(zip({{".npy", a}}), {"not a NAME.npy"});
    check(zip({{"a.npy", a}, {"a.npy", a}}), {"'a' appears twice"});
    check(zip({{"a.npy", a.substr(0, a.size() - 4)}}), {"member 'a.npy'", "data is 4 bytes", "needs 8"});
    std::string flipped = z;
    flipped[z.find("NUMPY") + 20] ^= 1;
    check(flipped, {"'a.npy'", "CRC-32 mismatch"});
    const size_t eocd = z.size() - 22, cd = z.find("PK\x01\x02");
    std::string bad_cd = z;
    bad_cd.replace(eocd + 16, 4, le(z.size(), 4));  // central directory offset past the end
    check(bad_cd, {"central directory", "outside the archive"});
    std::string bad_count = z;
    bad_count.replace(eocd + 10, 2, le(2, 2));  // two entries claimed, one present
    check(bad_count, {"central directory entry 1 of 2"});
    std::string bad_local = z;
    bad_local.replace(cd + 42, 4, le(7, 4));  // local header offset
    check(bad_local, {"local header at offset 7"});
    std::string deflated = z;
    deflated.replace(cd + 10, 2, le(8, 2));
    check(deflated, {"deflate-compressed"});
    std::string stored_sizes = z;
    stored_sizes.replace(cd + 20, 4, le(1, 4));
    check(stored_sizes, {"compressed size 1"});
}

BOOST_AUTO_TEST_CASE(every_truncation_and_byte_flip_fails_cleanly) {
    using Parser = deeprnn::Weights (*)(const unsigned char*, size_t, const std::string&);
    const std::pair<const char*, Parser> files[] = {{"torch_lstm.safetensors", deeprnn::detail::parse_safetensors},
                                                   {"torch_lstm.npz", deeprnn::detail::parse_npz},
                                                   {"torch_lstm.pt", deeprnn::detail::parse_torch}};
    for (const auto& [name, parse] : files) {
        BOOST_TEST_CONTEXT(name) {
            const std::string bytes = read_bytes(kFiles + name);
            // A copy of exactly n bytes, so a read past the end is caught by ASan.
            auto parse_prefix = [parse = parse, what = std::string(name)](const std::string& b, size_t n) {
                std::vector<unsigned char> copy(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
                return parse(copy.data(), n, what);
            };
            size_t truncations_refused = 0, flips_survived = 0;
            for (size_t n = 0; n < bytes.size(); ++n) {
                try {
                    parse_prefix(bytes, n);
                } catch (const deeprnn::Error&) {
                    ++truncations_refused;
                }
            }
            BOOST_TEST(truncations_refused == bytes.size(), "every truncated file must be refused");
            for (size_t i = 0; i < bytes.size(); ++i) {
                std::string changed = bytes;
                changed[i] = static_cast<char>(changed[i] ^ 0x5A);
                try {
                    parse_prefix(changed, changed.size());
                    ++flips_survived;  // e.g. a changed weight value in .safetensors, which has no checksum
                } catch (const deeprnn::Error&) {
                }
            }
            BOOST_TEST_MESSAGE(name << ": " << flips_survived << " of " << bytes.size() << " byte flips still load");
        }
    }
}

BOOST_AUTO_TEST_CASE(files_are_unmapped_after_success_and_failure) {
    TempDir tmp;
    const std::string good = tmp.write("good.safetensors", read_bytes(kFiles + "torch_lstm.safetensors"));
    const std::string bad = tmp.write("bad.safetensors", safetensors("{\"a\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]}}", "x"));
    deeprnn::load_safetensors(good);
    expect_error([&] { deeprnn::load_safetensors(bad); }, {"I8"});
    const std::string npz = tmp.write("bad.npz", "PK\x03\x04 truncated");
    expect_error([&] { deeprnn::load_npz(npz); }, {"truncated"});
    BOOST_TEST(!mapped(tmp.dir), "a weight file is still mapped");
}

BOOST_AUTO_TEST_CASE(model_creation_logs_its_plan_through_the_hook) {
    const deeprnn::Weights w = deeprnn::load_weights(kFiles + "torch_lstm.safetensors");
    deeprnn::Config cfg = deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, w);
    std::vector<std::pair<deeprnn::LogLevel, std::string>> log;
    cfg.log = [](deeprnn::LogLevel level, const char* message, void* user) {
        static_cast<std::vector<std::pair<deeprnn::LogLevel, std::string>>*>(user)->emplace_back(level, message);
    };
    cfg.log_user = &log;
    const deeprnn::Model model(cfg, w);
    // The schedule search logs its decision first, then the model its whole plan.
    BOOST_TEST_REQUIRE(!log.empty());
    BOOST_TEST((log.back().first == deeprnn::LogLevel::info));
    BOOST_TEST(log.back().second == "Model: plan: " + model.plan());
    for (const auto& [level, message] : log)
        if (level == deeprnn::LogLevel::warning)
            BOOST_TEST((message.find("pinning") != std::string::npos || message.find("plan cache") != std::string::npos),
                       message);
}

BOOST_AUTO_TEST_SUITE_END()
