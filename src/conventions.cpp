// conventions.cpp — weight import from PyTorch, ONNX and Keras conventions.
//
// Each convention is read into RawLayer (PyTorch layout and gate order); the
// engine never sees a convention. Every tensor the configuration implies must
// be present with exactly the expected shape; tensors for layers or directions
// the configuration does not have are an error (a silently ignored layer is a
// wrong answer); names that are not weight names are ignored.
#include "engine.hpp"

#include <algorithm>
#include <cstdlib>

namespace deeprnn {
namespace detail {

static const Tensor* find(const Weights& w, const std::string& name) {
    auto it = w.find(name);
    return it == w.end() ? nullptr : &it->second;
}

// "<module>." where `name` ends as `want` after a dot; "" otherwise.
static std::string module_prefix(const std::string& name, const std::string& want) {
    const size_t n = name.size(), k = want.size();
    if (n <= k || name.compare(n - k, k, want) != 0 || name[n - k - 1] != '.') return "";
    return name.substr(0, n - k);
}

// A missing tensor's message: the tensor, and where a whole model's
// state_dict holds it (or, for "..._l0", a PyTorch cell's name for it) under
// a module's prefix, that prefix.
[[noreturn]] static void missing(const Weights& w, const std::string& name) {
    std::vector<std::string> wants = {name};
    if (name.size() > 3 && name.compare(name.size() - 3, 3, "_l0") == 0) wants.push_back(name.substr(0, name.size() - 3));
    for (const auto& kv : w)
        for (const std::string& want : wants)
            if (const std::string prefix = module_prefix(kv.first, want); !prefix.empty())
                fail("weights: tensor '", name, "' is missing, but '", kv.first, "' is there: take that module's tensors with ",
                     "strip_prefix(weights, \"", prefix, "\") (C: deeprnn_config.weights_prefix; deeprnn-run --prefix ", prefix, ")");
    fail("weights: tensor '", name, "' is missing");
}

static const Tensor& need(const Weights& w, const std::string& name) {
    const Tensor* t = find(w, name);
    if (!t) missing(w, name);
    if (static_cast<int64_t>(t->data.size()) != t->numel())
        fail("weights: tensor '", name, "' has ", t->data.size(), " values but shape ", shape_str(t->shape));
    return *t;
}

static const Tensor& need_shape(const Weights& w, const std::string& name, const std::vector<int64_t>& shape) {
    const Tensor& t = need(w, name);
    if (t.shape != shape)
        fail("weights: tensor '", name, "' has shape ", shape_str(t.shape), ", expected ", shape_str(shape));
    return t;
}

// Rows of a [G*H, cols] block reordered by gate: output gate k is input gate perm[k].
static std::vector<float> gates_reordered(const float* src, int G, int H, int64_t cols, const int* perm) {
    std::vector<float> out(static_cast<size_t>(G) * H * cols);
    const size_t block = static_cast<size_t>(H) * cols;
    for (int k = 0; k < G; ++k) std::copy_n(src + perm[k] * block, block, out.begin() + k * block);
    return out;
}

static std::vector<float> transposed(const Tensor& t) {
    const int64_t r = t.shape[0], c = t.shape[1];
    std::vector<float> out(static_cast<size_t>(r * c));
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) out[j * r + i] = t.data[i * c + j];
    return out;
}

static const int kIdentity[4] = {0, 1, 2, 3};
static const int kOnnxLstm[4] = {0, 2, 3, 1};  // torch i,f,g,o from onnx i,o,f,c
static const int kZrh[3] = {1, 0, 2};          // torch r,z,n from onnx/keras z,r,h

static const int* perm_from(Convention conv, Cell cell) {
    if (cell == Cell::gru && conv != Convention::torch) return kZrh;
    if (cell == Cell::lstm && conv == Convention::onnx) return kOnnxLstm;
    return kIdentity;
}

static bool is_lbr(const Config& c) { return c.gru_variant == GruVariant::linear_before_reset; }

// ---- PyTorch ----------------------------------------------------------------

// nn.LSTMCell, GRUCell and RNNCell name their one layer's tensors without
// the "_l0": weight_ih, weight_hh, bias_ih, bias_hh.
static bool torch_cell_names(const Weights& w) { return !find(w, "weight_ih_l0") && find(w, "weight_ih"); }

static std::string torch_name(const Weights& w, const char* kind, int layer, int dir) {
    if (layer == 0 && dir == 0 && torch_cell_names(w)) return kind;
    return cat(kind, "_l", layer, dir ? "_reverse" : "");
}

static RawLayer torch_layer(const Config& c, const Weights& w, int layer, int dir) {
    const int G = gates_per_cell(c.cell), H = c.hidden_size, S = state_size(c);
    const int64_t in = layer == 0 ? c.input_size : num_directions(c) * S;
    RawLayer r;
    r.w_ih = need_shape(w, torch_name(w, "weight_ih", layer, dir), {G * H, in}).data;
    r.w_hh = need_shape(w, torch_name(w, "weight_hh", layer, dir), {G * H, S}).data;
    const std::string bi = torch_name(w, "bias_ih", layer, dir), bh = torch_name(w, "bias_hh", layer, dir);
    if (find(w, bi) || find(w, bh)) {
        r.b_ih = need_shape(w, bi, {G * H}).data;
        r.b_hh = need_shape(w, bh, {G * H}).data;
    }
    if (c.proj_size > 0) r.w_hr = need_shape(w, torch_name(w, "weight_hr", layer, dir), {S, H}).data;
    return r;
}

// Parses "<kind>_l<k>[_reverse]"; false for names that are not torch weight names.
static bool torch_parse(const std::string& name, int* layer, int* dir) {
    for (const char* kind : {"weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"}) {
        const std::string pre = cat(kind, "_l");
        if (name.compare(0, pre.size(), pre) != 0) continue;
        size_t i = pre.size(), digits = 0;
        long k = 0;
        while (i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 6) k = k * 10 + (name[i++] - '0'), ++digits;
        if (digits == 0) return false;
        const std::string rest = name.substr(i);
        if (rest != "" && rest != "_reverse") return false;
        *layer = static_cast<int>(k);
        *dir = rest.empty() ? 0 : 1;
        return true;
    }
    return false;
}

static void torch_no_extras(const Config& c, const Weights& w) {
    for (const auto& kv : w) {
        int layer = 0, dir = 0;
        if (!torch_parse(kv.first, &layer, &dir)) continue;
        if (layer >= c.num_layers || dir >= num_directions(c))
            fail("weights: tensor '", kv.first, "' belongs to a layer the configuration lacks (num_layers=",
                 c.num_layers, ", direction=", to_string(c.direction), ")");
        if (c.proj_size == 0 && kv.first.compare(0, 9, "weight_hr") == 0)
            fail("weights: tensor '", kv.first, "' present but Config.proj_size = 0");
    }
}

// ---- ONNX -------------------------------------------------------------------

// One layer's names: W, R, B, P, or l<k>_W, ... for stacked layers (one
// ONNX operator each; load_onnx names a chain of them so).
static std::string onnx_prefix(const Config& c, int layer) { return c.num_layers == 1 ? "" : cat("l", layer, "_"); }

static RawLayer onnx_layer(const Config& c, const Weights& w, int layer, int dir) {
    const int G = gates_per_cell(c.cell), H = c.hidden_size, D = num_directions(c);
    const int64_t E = layer == 0 ? c.input_size : static_cast<int64_t>(D) * H, GH = static_cast<int64_t>(G) * H;
    const int* perm = perm_from(Convention::onnx, c.cell);
    const std::string pre = onnx_prefix(c, layer);
    RawLayer r;
    r.w_ih = gates_reordered(need_shape(w, pre + "W", {D, GH, E}).data.data() + dir * GH * E, G, H, E, perm);
    r.w_hh = gates_reordered(need_shape(w, pre + "R", {D, GH, H}).data.data() + dir * GH * H, G, H, H, perm);
    if (find(w, pre + "B")) {
        const float* b = need_shape(w, pre + "B", {D, 2 * GH}).data.data() + dir * 2 * GH;
        r.b_ih = gates_reordered(b, G, H, 1, perm);
        r.b_hh = gates_reordered(b + GH, G, H, 1, perm);
    }
    if (c.peepholes) {
        const float* p = need_shape(w, pre + "P", {D, 3 * static_cast<int64_t>(H)}).data.data() + dir * 3 * H;
        static const int kIof[3] = {0, 2, 1};  // i,f,o from onnx i,o,f
        r.peep = gates_reordered(p, 3, H, 1, kIof);
    }
    return r;
}

static void onnx_checks(const Config& c, const Weights& w) {
    if (c.num_layers > 1 && find(w, "W"))
        fail("Config.num_layers = ", c.num_layers, ": the onnx names W, R, B, P hold one layer (one operator); "
             "stacked layers are l0_W, l1_W, ...");
    if (c.proj_size > 0) fail("Config.proj_size = ", c.proj_size, ": the onnx convention has no projection");
    for (int l = 0; l < c.num_layers; ++l)
        if (!c.peepholes && find(w, onnx_prefix(c, l) + "P"))
            fail("weights: tensor '", onnx_prefix(c, l), "P' (peepholes) present but Config.peepholes = false");
    if (find(w, cat("l", c.num_layers, "_W")))
        fail("weights: tensor 'l", c.num_layers, "_W' belongs to a layer the configuration lacks (num_layers=", c.num_layers, ")");
}

// ---- Keras ------------------------------------------------------------------

static std::string keras_prefix(const Config& c, const Weights& w, int layer, int dir) {
    if (c.num_layers == 1 && c.direction != Direction::bidirectional && find(w, "kernel")) return "";
    return cat("l", layer, "_", dir ? "reverse_" : "");
}

static RawLayer keras_layer(const Config& c, const Weights& w, int layer, int dir) {
    const int G = gates_per_cell(c.cell), H = c.hidden_size, D = num_directions(c);
    const int64_t in = layer == 0 ? c.input_size : static_cast<int64_t>(D) * H, GH = static_cast<int64_t>(G) * H;
    const int* perm = perm_from(Convention::keras, c.cell);
    const std::string pre = keras_prefix(c, w, layer, dir);
    RawLayer r;
    r.w_ih = gates_reordered(transposed(need_shape(w, pre + "kernel", {in, GH})).data(), G, H, in, perm);
    r.w_hh = gates_reordered(transposed(need_shape(w, pre + "recurrent_kernel", {H, GH})).data(), G, H, H, perm);
    const std::string bias = pre + "bias";
    if (find(w, bias)) {
        const bool two_rows = c.cell == Cell::gru && is_lbr(c);
        const Tensor& b = two_rows ? need_shape(w, bias, {2, GH}) : need_shape(w, bias, {GH});
        r.b_ih = gates_reordered(b.data.data(), G, H, 1, perm);
        r.b_hh = two_rows ? gates_reordered(b.data.data() + GH, G, H, 1, perm) : std::vector<float>(GH, 0.0f);
    }
    return r;
}

static void keras_checks(const Config& c, const Weights& w) {
    if (c.proj_size > 0) fail("Config.proj_size = ", c.proj_size, ": the keras convention has no projection");
    const bool plain = c.num_layers == 1 && c.direction != Direction::bidirectional && find(w, "kernel");
    for (const auto& kv : w) {
        const std::string& n = kv.first;
        const bool prefixed = n.size() > 2 && n[0] == 'l' && n[1] >= '0' && n[1] <= '9';
        const bool weight = n.size() >= 6 && n.compare(n.size() - 6, 6, "kernel") == 0;  // biases follow their kernels
        if (!weight) continue;
        if (plain && prefixed) fail("weights: tensor '", n, "' is prefixed, but the plain names (kernel, ...) are in use");
        if (!plain && !prefixed)
            fail("weights: tensor '", n, "' has no layer prefix, but the configuration (num_layers=", c.num_layers,
                 ", direction=", to_string(c.direction), ") needs l<k>_ names");
        if (!prefixed) continue;
        const int layer = std::atoi(n.c_str() + 1);
        const bool reverse = n.find("_reverse_") != std::string::npos;
        if (layer >= c.num_layers || (reverse && c.direction != Direction::bidirectional))
            fail("weights: tensor '", n, "' belongs to a layer the configuration lacks (num_layers=", c.num_layers,
                 ", direction=", to_string(c.direction), ")");
    }
}

std::vector<RawLayer> import_weights(const Config& c, const Weights& w) {
    validate(c);
    if (c.direction == Direction::reverse && c.convention != Convention::onnx)
        fail("Config.direction = reverse: only the onnx convention has a reverse-only layer");
    if (c.peepholes && c.convention != Convention::onnx)
        fail("Config.peepholes = true: only the onnx convention carries peepholes (tensor P)");
    std::vector<RawLayer> layers;
    const int D = num_directions(c);
    if (c.convention == Convention::onnx) onnx_checks(c, w);
    for (int l = 0; l < c.num_layers; ++l)
        for (int d = 0; d < D; ++d) {
            switch (c.convention) {
                case Convention::torch: layers.push_back(torch_layer(c, w, l, d)); break;
                case Convention::onnx: layers.push_back(onnx_layer(c, w, l, d)); break;
                case Convention::keras: layers.push_back(keras_layer(c, w, l, d)); break;
            }
        }
    // Every expected tensor is present; now refuse the ones nobody expected.
    if (c.convention == Convention::torch) torch_no_extras(c, w);
    if (c.convention == Convention::keras) keras_checks(c, w);
    return layers;
}

// Hidden size from a dimension that holds G*H.
static int hidden_from(int64_t gh, int G, const std::string& name) {
    if (gh <= 0 || gh % G != 0) fail("weights: tensor '", name, "' has ", gh, " gate rows, not a multiple of ", G, " gates");
    return static_cast<int>(gh / G);
}

static int64_t dim(const Weights& w, const std::string& name, size_t rank, size_t i) {
    const Tensor& t = need(w, name);
    if (t.shape.size() != rank)
        fail("weights: tensor '", name, "' has shape ", shape_str(t.shape), ", expected ", rank, " dimensions");
    if (t.shape[i] < 1 || t.shape[i] > (1 << 24)) fail("weights: tensor '", name, "' has dimension ", t.shape[i]);
    return t.shape[i];
}

}  // namespace detail

Config config_from_weights(Cell cell, Convention convention, const Weights& w) {
    using namespace detail;
    Config c;
    c.cell = cell;
    c.convention = convention;
    require_enum(cell, "cell", 4);
    require_enum(convention, "convention", 3);
    const int G = gates_per_cell(cell);
    switch (convention) {
        case Convention::torch: {
            const std::string hh = torch_name(w, "weight_hh", 0, 0);
            c.hidden_size = hidden_from(dim(w, hh, 2, 0), G, hh);
            c.input_size = static_cast<int>(dim(w, torch_name(w, "weight_ih", 0, 0), 2, 1));
            while (find(w, torch_name(w, "weight_ih", c.num_layers, 0))) ++c.num_layers;
            if (find(w, "weight_ih_l0_reverse")) c.direction = Direction::bidirectional;
            if (find(w, "weight_hr_l0")) c.proj_size = static_cast<int>(dim(w, "weight_hr_l0", 2, 0));
            c.gru_variant = GruVariant::linear_before_reset;
            break;
        }
        case Convention::onnx: {
            const std::string pre = find(w, "W") || !find(w, "l0_W") ? "" : "l0_";
            if (!pre.empty())
                while (find(w, cat("l", c.num_layers, "_W"))) ++c.num_layers;
            const int64_t D = dim(w, pre + "W", 3, 0);
            if (D > 2) fail("weights: tensor '", pre, "W' has ", D, " directions, expected 1 or 2");
            c.hidden_size = hidden_from(dim(w, pre + "W", 3, 1), G, pre + "W");
            c.input_size = static_cast<int>(dim(w, pre + "W", 3, 2));
            c.direction = D == 2 ? Direction::bidirectional : Direction::forward;
            c.peepholes = cell == Cell::lstm && find(w, pre + "P") != nullptr;
            c.gru_variant = GruVariant::reset_before_matmul;
            break;
        }
        case Convention::keras: {
            const bool plain = find(w, "kernel") != nullptr;
            const std::string pre = plain ? "" : "l0_";
            c.hidden_size = static_cast<int>(dim(w, pre + "recurrent_kernel", 2, 0));
            c.input_size = static_cast<int>(dim(w, pre + "kernel", 2, 0));
            if (!plain) {
                c.num_layers = 0;
                while (find(w, cat("l", c.num_layers, "_kernel"))) ++c.num_layers;
                if (find(w, "l0_reverse_kernel")) c.direction = Direction::bidirectional;
            }
            const Tensor* b = find(w, pre + "bias");
            c.gru_variant = (b && b->shape.size() == 1) ? GruVariant::reset_before_matmul : GruVariant::linear_before_reset;
            break;
        }
    }
    return c;
}

}  // namespace deeprnn
