// onnx.cpp — an ONNX model file's recurrent operator (or stack of them), read
// without a protobuf library.
//
// An ONNX file is one protobuf message (ModelProto). Protobuf's wire format
// is a run of fields, each a key (field number << 3 | wire type) followed by
// a varint (type 0), 8 bytes (1), a length and that many bytes (2: strings,
// bytes, nested messages, packed arrays) or 4 bytes (5). The fields read
// here (onnx.proto, stable since IR version 3):
//
//   ModelProto      7 graph
//   GraphProto      1 node (repeated)  5 initializer (repeated TensorProto)
//   NodeProto       1 input  2 output  3 name  4 op_type  5 attribute  7 domain
//   AttributeProto  1 name  2 f  3 i  4 s  5 t  7 floats  8 ints  9 strings
//   TensorProto     1 dims  2 data_type  4 float_data  5 int32_data  8 name
//                   9 raw_data  10 double_data  14 data_location
//
// Every other field is skipped by its wire type. Every length is checked
// against the bytes that remain before it is followed, and a tensor's data
// against the count its dims imply, so any bytes give a result or an Error.
#include "common.hpp"

#include <cstring>
#include <map>
#include <optional>
#include <vector>

namespace deeprnn {
namespace detail {

namespace {

// A window of a protobuf message's bytes, read front to back.
class Wire {
public:
    Wire(const unsigned char* p, size_t n, const std::string& what) : p_(p), end_(p + n), what_(&what) {}

    // The next field's number and wire type; false at the end of the window.
    bool next(uint64_t* field, int* type) {
        if (p_ == end_) return false;
        const uint64_t key = varint();
        *field = key >> 3;
        *type = static_cast<int>(key & 7);
        if (*field == 0) fail(*what_, ": not an ONNX model (protobuf field number 0)");
        return true;
    }
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p_ == end_) fail(*what_, ": truncated (a number runs past the end)");
            const unsigned char b = *p_++;
            v |= static_cast<uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        fail(*what_, ": not an ONNX model (a number longer than 10 bytes)");
    }
    // A length-delimited field's bytes.
    Wire bytes() {
        const uint64_t n = varint();
        if (n > left()) fail(*what_, ": truncated (a field of ", n, " bytes, ", left(), " left)");
        Wire inner(p_, static_cast<size_t>(n), *what_);
        p_ += n;
        return inner;
    }
    std::string text() {
        const Wire w = bytes();
        return std::string(reinterpret_cast<const char*>(w.p_), w.left());
    }
    uint64_t fixed(int width) {
        if (left() < static_cast<size_t>(width)) fail(*what_, ": truncated (", width, "-byte field, ", left(), " left)");
        uint64_t v = 0;
        for (int i = width - 1; i >= 0; --i) v = (v << 8) | p_[i];
        p_ += width;
        return v;
    }
    void skip(int type) {
        switch (type) {
            case 0: varint(); return;
            case 1: fixed(8); return;
            case 2: bytes(); return;
            case 5: fixed(4); return;
            default: fail(*what_, ": not an ONNX model (protobuf wire type ", type, ")");
        }
    }
    size_t left() const { return static_cast<size_t>(end_ - p_); }
    const unsigned char* data() const { return p_; }
    const std::string& what() const { return *what_; }

private:
    const unsigned char* p_;
    const unsigned char* end_;
    const std::string* what_;
};

float float_from_bits(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

double double_from_bits(uint64_t bits) {
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
}

// TensorProto -> Tensor, stored in the file: float32 (raw_data or
// float_data), float64 (raw_data or double_data, rounded to float32), or
// float16 / bfloat16 (raw_data, or int32_data holding each value's 16 bits;
// exact in float32).
Tensor read_tensor(Wire w, const std::string& name) {
    const std::string& what = w.what();
    Tensor t;
    uint64_t field;
    int type, data_type = 0;
    bool external = false;
    Wire raw(nullptr, 0, what);
    std::vector<double> listed;
    std::vector<uint16_t> listed16;  // int32_data: float16 / bfloat16 bits
    while (w.next(&field, &type)) {
        if (field == 1 && type == 0) {
            t.shape.push_back(static_cast<int64_t>(w.varint()));
        } else if (field == 1 && type == 2) {
            for (Wire dims = w.bytes(); dims.left();) t.shape.push_back(static_cast<int64_t>(dims.varint()));
        } else if (field == 2 && type == 0) {
            data_type = static_cast<int>(w.varint());
        } else if (field == 4 && type == 2) {  // float_data, packed
            for (Wire v = w.bytes(); v.left();) listed.push_back(float_from_bits(static_cast<uint32_t>(v.fixed(4))));
        } else if (field == 4 && type == 5) {  // float_data, one value a field
            listed.push_back(float_from_bits(static_cast<uint32_t>(w.fixed(4))));
        } else if (field == 10 && type == 2) {  // double_data, packed
            for (Wire v = w.bytes(); v.left();) listed.push_back(double_from_bits(v.fixed(8)));
        } else if (field == 10 && type == 1) {
            listed.push_back(double_from_bits(w.fixed(8)));
        } else if (field == 5 && type == 2) {  // int32_data, packed
            for (Wire v = w.bytes(); v.left();) listed16.push_back(static_cast<uint16_t>(v.varint()));
        } else if (field == 5 && type == 0) {
            listed16.push_back(static_cast<uint16_t>(w.varint()));
        } else if (field == 9 && type == 2) {
            raw = w.bytes();
        } else if (field == 14 && type == 0) {
            external = w.varint() == 1;
        } else {
            w.skip(type);
        }
    }
    if (external)
        fail(what, ": tensor '", name, "' is stored outside the file (external data); save the model with its weights inside");
    enum { kFloat = 1, kFloat16 = 10, kDouble = 11, kBfloat16 = 16 };
    if (data_type != kFloat && data_type != kDouble && data_type != kFloat16 && data_type != kBfloat16)
        fail(what, ": tensor '", name, "' has ONNX data type ", data_type,
             "; need FLOAT (1), DOUBLE (11), FLOAT16 (10) or BFLOAT16 (16)");
    const bool half = data_type == kFloat16 || data_type == kBfloat16;
    const auto value = [&](uint64_t bits) {
        switch (data_type) {
            case kFloat: return float_from_bits(static_cast<uint32_t>(bits));
            case kDouble: return static_cast<float>(double_from_bits(bits));
            case kFloat16: return half_to_float(static_cast<uint16_t>(bits));
            default: return bf16_to_float(static_cast<uint16_t>(bits));
        }
    };
    int64_t n = 1;
    for (int64_t d : t.shape) {
        if (d < 0 || d > (int64_t{1} << 31) || n > (int64_t{1} << 31) / std::max<int64_t>(d, 1))
            fail(what, ": tensor '", name, "' has shape ", shape_str(t.shape), ", too large or negative");
        n *= d;
    }
    const int width = data_type == kFloat ? 4 : data_type == kDouble ? 8 : 2;
    if (raw.data()) {
        if (!listed.empty() || !listed16.empty() || raw.left() != static_cast<size_t>(n) * width)
            fail(what, ": tensor '", name, "' of shape ", shape_str(t.shape), " holds ", raw.left(), " bytes of data, not ",
                 static_cast<size_t>(n) * width);
        t.data.resize(static_cast<size_t>(n));
        for (float& v : t.data) v = value(raw.fixed(width));
    } else {
        const size_t count = half ? listed16.size() : listed.size();
        if (count != static_cast<size_t>(n))
            fail(what, ": tensor '", name, "' of shape ", shape_str(t.shape), " holds ", count, " values, not ", n);
        if (half)
            for (uint16_t bits : listed16) t.data.push_back(value(bits));
        else
            t.data.assign(listed.begin(), listed.end());
    }
    return t;
}

struct Attribute {
    int64_t i = 0;
    float f = 0;
    std::string s;
    std::optional<Wire> t;  // a TensorProto, read only when used
    std::vector<std::string> strings;
    std::vector<int64_t> ints;
    std::vector<float> floats;
};

struct Node {
    std::string op, name, domain;
    std::vector<std::string> inputs, outputs;
    std::map<std::string, Attribute> attributes;
};

Attribute read_attribute(Wire w, std::string* name) {
    Attribute a;
    uint64_t field;
    int type;
    while (w.next(&field, &type)) {
        if (field == 1 && type == 2) *name = w.text();
        else if (field == 2 && type == 5) a.f = float_from_bits(static_cast<uint32_t>(w.fixed(4)));
        else if (field == 3 && type == 0) a.i = static_cast<int64_t>(w.varint());
        else if (field == 4 && type == 2) a.s = w.text();
        else if (field == 5 && type == 2) a.t = w.bytes();
        else if (field == 9 && type == 2) a.strings.push_back(w.text());
        else if (field == 7 && type == 5) a.floats.push_back(float_from_bits(static_cast<uint32_t>(w.fixed(4))));
        else if (field == 7 && type == 2)
            for (Wire v = w.bytes(); v.left();) a.floats.push_back(float_from_bits(static_cast<uint32_t>(v.fixed(4))));
        else if (field == 8 && type == 0) a.ints.push_back(static_cast<int64_t>(w.varint()));
        else if (field == 8 && type == 2)
            for (Wire v = w.bytes(); v.left();) a.ints.push_back(static_cast<int64_t>(v.varint()));
        else w.skip(type);
    }
    return a;
}

Node read_node(Wire w) {
    Node node;
    uint64_t field;
    int type;
    while (w.next(&field, &type)) {
        if (field == 1 && type == 2) node.inputs.push_back(w.text());
        else if (field == 2 && type == 2) node.outputs.push_back(w.text());
        else if (field == 3 && type == 2) node.name = w.text();
        else if (field == 4 && type == 2) node.op = w.text();
        else if (field == 7 && type == 2) node.domain = w.text();
        else if (field == 5 && type == 2) {
            std::string name;
            const Attribute a = read_attribute(w.bytes(), &name);
            node.attributes[name] = a;
        } else {
            w.skip(type);
        }
    }
    return node;
}

bool recurrent(const Node& n) {
    return (n.domain.empty() || n.domain == "ai.onnx") && (n.op == "LSTM" || n.op == "GRU" || n.op == "RNN");
}

// What the operator's activations say: the cell (RNN: Tanh or Relu), its
// gates' activation (LSTM, GRU: Sigmoid, or HardSigmoid with its alpha and
// beta) and its candidate's (LSTM, GRU: Tanh or Relu; LSTM's g and h alike),
// the same in every direction; anything else is refused by name.
struct OperatorActivations {
    Cell cell = Cell::lstm;
    GateActivation gates = GateActivation::sigmoid;
    CellActivation candidate = CellActivation::tanh;
    float alpha = 0.2f, beta = 0.5f;  // HardSigmoid's (ONNX's defaults)
    bool operator==(const OperatorActivations& o) const {
        return cell == o.cell && gates == o.gates && candidate == o.candidate && alpha == o.alpha && beta == o.beta;
    }
};

OperatorActivations activations_of(const Node& n, const std::string& what) {
    const auto list_of = [&](const char* name) {
        const auto it = n.attributes.find(name);
        return it == n.attributes.end() ? Attribute() : it->second;
    };
    const std::vector<std::string> given = list_of("activations").strings;
    const std::vector<float> alphas = list_of("activation_alpha").floats, betas = list_of("activation_beta").floats;
    std::vector<std::string> want = n.op == "LSTM" ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                    : n.op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                    : std::vector<std::string>{"Tanh"};
    OperatorActivations a;
    a.cell = n.op == "LSTM" ? Cell::lstm : n.op == "GRU" ? Cell::gru : Cell::rnn_tanh;
    if (n.op == "RNN" && !given.empty() && given[0] == "Relu") {
        want[0] = "Relu";
        a.cell = Cell::rnn_relu;
    }
    if (n.op != "RNN" && !given.empty() && given[0] == "HardSigmoid") {
        want[0] = "HardSigmoid";
        a.gates = GateActivation::hard_sigmoid;
    }
    if (n.op != "RNN" && given.size() > 1 && given[1] == "Relu") {
        for (size_t k = 1; k < want.size(); ++k) want[k] = "Relu";
        a.candidate = CellActivation::relu;
    }
    const auto refuse = [&](const std::string& why) {
        std::string list;
        for (const std::string& g : given) list += (list.empty() ? "" : ", ") + g;
        fail(what, ": ", n.op, " '", n.name, "' has activations [", list, "]", why);
    };
    // activation_alpha and _beta hold one value for each activation that
    // takes one, in the list's order (HardSigmoid takes both); every
    // HardSigmoid must get the same.
    size_t used = 0;
    for (size_t k = 0; k < given.size(); ++k) {
        if (given[k] != want[k % want.size()])
            refuse(cat("; deeprnn runs ", n.op,
                       n.op == "RNN" ? " with Tanh or Relu" : " with Sigmoid or HardSigmoid gates and Tanh or Relu elsewhere (LSTM: g and h alike)",
                       ", the same in each direction"));
        if (given[k] != "HardSigmoid") continue;
        const float alpha = used < alphas.size() ? alphas[used] : 0.2f, beta = used < betas.size() ? betas[used] : 0.5f;
        if (used++ > 0 && (alpha != a.alpha || beta != a.beta))
            refuse(cat(" with activation_alpha / _beta differing between directions (", a.alpha, ", ", a.beta, " and ",
                       alpha, ", ", beta, "); deeprnn takes one HardSigmoid"));
        a.alpha = alpha;
        a.beta = beta;
    }
    if (alphas.size() > used || betas.size() > used)
        fail(what, ": ", n.op, " '", n.name, "' has ", alphas.size(), " activation_alpha and ", betas.size(),
             " activation_beta values for ", used, " activations that take them");
    return a;
}

// Whether recurrent operator `next` reads `prev`'s output Y, through
// operators that only reshape it (PyTorch's export of a stack: Squeeze for
// one direction; Transpose [0, 2, 1, 3] and Reshape for two, which put the
// directions side by side as a stacked layer reads them). Else why not.
std::string stack_link(const std::vector<Node>& nodes, const std::map<std::string, size_t>& producer, const Node& prev,
                       const Node& next, bool two_directions) {
    if (prev.outputs.empty() || prev.outputs[0].empty()) return cat(prev.op, " '", prev.name, "' has no output Y");
    bool transposed = false;
    std::string name = next.inputs.empty() ? "" : next.inputs[0];
    for (size_t steps = 0; name != prev.outputs[0]; ++steps) {
        const auto it = producer.find(name);
        if (it == producer.end() || steps > nodes.size())
            return cat("the input X of ", next.op, " '", next.name, "' is not the output Y of ", prev.op, " '", prev.name, "'");
        const Node& via = nodes[it->second];
        if (via.op == "Transpose") {
            const auto perm = via.attributes.find("perm");
            if (perm == via.attributes.end() || perm->second.ints != std::vector<int64_t>{0, 2, 1, 3})
                return cat("a Transpose '", via.name, "' other than perm [0, 2, 1, 3] lies between them");
            transposed = true;
        } else if (via.op != "Squeeze" && via.op != "Unsqueeze" && via.op != "Reshape" && via.op != "Identity") {
            return cat("a ", via.op, " '", via.name, "' lies between them");
        }
        if (via.inputs.empty()) return cat(via.op, " '", via.name, "' has no input");
        name = via.inputs[0];
    }
    if (two_directions && !transposed)
        return cat("the two directions of ", prev.op, " '", prev.name, "' reach the next layer without the Transpose that puts them side by side");
    return "";
}

// One operator's weights under its input names, prefixed ("l<k>_" in a stack).
void add_weights(const Node& op, const std::map<std::string, Wire>& initializers, const std::string& prefix,
                 const std::string& what, Weights* w) {
    static const char* names[] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
    for (int i : {1, 2, 3, 7}) {
        const std::string input = i < static_cast<int>(op.inputs.size()) ? op.inputs[static_cast<size_t>(i)] : "";
        if (input.empty()) {
            if (i <= 2) fail(what, ": ", op.op, " '", op.name, "' has no input ", names[i]);
            continue;
        }
        const auto it = initializers.find(input);
        if (it == initializers.end())
            fail(what, ": ", op.op, " '", op.name, "' input ", names[i], " ('", input,
                 "') is neither an initializer nor a Constant of the graph: it is computed by other operators (export with constant folding) or fed at run time");
        (*w)[prefix + names[i]] = read_tensor(it->second, input);
    }
    // A constant state or length would be the graph's, not the caller's: a
    // model without it would run from zeros and full lengths, so refuse.
    for (int i : {4, 5, 6})
        if (i < static_cast<int>(op.inputs.size()) && initializers.count(op.inputs[static_cast<size_t>(i)]))
            fail(what, ": ", op.op, " '", op.name, "' input ", names[i], " ('", op.inputs[static_cast<size_t>(i)],
                 "') is a constant of the graph; deeprnn takes it per run (RunInput), so pass it there and drop it from the graph");
}

// What one operator's attributes set beyond its weights.
struct OperatorSettings {
    OperatorActivations act;
    std::string direction;
    float clip = 0;
    bool lbr = false;
    int64_t layout = 0, hidden = -1;
    bool operator==(const OperatorSettings& o) const {
        return act == o.act && direction == o.direction && clip == o.clip && lbr == o.lbr && layout == o.layout;
    }
};

OperatorSettings settings_of(const Node& op, const std::string& what) {
    const auto attr = [&](const char* name) -> const Attribute* {
        const auto it = op.attributes.find(name);
        return it == op.attributes.end() ? nullptr : &it->second;
    };
    OperatorSettings s;
    s.act = activations_of(op, what);
    s.direction = attr("direction") ? attr("direction")->s : "forward";
    if (s.direction != "forward" && s.direction != "reverse" && s.direction != "bidirectional")
        fail(what, ": ", op.op, " '", op.name, "' has direction '", s.direction, "'; need forward, reverse or bidirectional");
    if (const Attribute* clip = attr("clip")) s.clip = clip->f;
    if (const Attribute* f = attr("input_forget"); f && f->i != 0)
        fail(what, ": ", op.op, " '", op.name, "' has input_forget = ", f->i, " (coupled input and forget gates), which deeprnn does not support");
    s.lbr = attr("linear_before_reset") && attr("linear_before_reset")->i != 0;
    if (const Attribute* layout = attr("layout")) s.layout = layout->i;
    if (s.layout != 0 && s.layout != 1) fail(what, ": ", op.op, " '", op.name, "' has layout = ", s.layout, "; need 0 or 1");
    if (const Attribute* h = attr("hidden_size")) s.hidden = h->i;
    return s;
}

}  // namespace

Weights parse_onnx(const unsigned char* p, size_t n, const std::string& what, int index, Config* config) {
    Wire model(p, n, what);
    std::vector<Node> nodes;
    std::map<std::string, Wire> initializers;
    bool graph_seen = false;
    uint64_t field;
    int type;
    while (model.next(&field, &type)) {
        if (field != 7 || type != 2) {
            model.skip(type);
            continue;
        }
        graph_seen = true;
        for (Wire graph = model.bytes(); graph.next(&field, &type);) {
            if (field == 1 && type == 2) {
                nodes.push_back(read_node(graph.bytes()));
            } else if (field == 5 && type == 2) {
                Wire t = graph.bytes();
                std::string name;
                for (Wire scan = t; scan.next(&field, &type);) {  // its name (field 8), wherever it is
                    if (field == 8 && type == 2) name = scan.text();
                    else scan.skip(type);
                }
                initializers.emplace(name, t);
            } else {
                graph.skip(type);
            }
        }
    }
    if (!graph_seen) fail(what, ": not an ONNX model (no graph)");
    // Weights may also come as Constant operators (a graph written with
    // onnx.helper, or by converters other than PyTorch's), and either kind
    // through Identity operators (PyTorch's export of weights used twice).
    // Nodes are in topological order, so one pass sees each name's source first.
    for (const Node& node : nodes) {
        if (node.outputs.size() != 1 || !(node.domain.empty() || node.domain == "ai.onnx")) continue;
        if (node.op == "Constant") {
            const auto value = node.attributes.find("value");
            if (value != node.attributes.end() && value->second.t) initializers.emplace(node.outputs[0], *value->second.t);
        } else if (node.op == "Identity" && node.inputs.size() == 1) {
            const auto source = initializers.find(node.inputs[0]);
            if (source != initializers.end()) initializers.emplace(node.outputs[0], source->second);
        }
    }
    std::vector<const Node*> ops;
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < nodes.size(); ++i) {
        if (recurrent(nodes[i])) ops.push_back(&nodes[i]);
        for (const std::string& out : nodes[i].outputs) producer.emplace(out, i);
    }
    if (ops.empty()) fail(what, ": the graph has no LSTM, GRU or RNN operator");
    if (index >= static_cast<int>(ops.size()))
        fail(what, ": index = ", index, " but the graph has ", ops.size(), ops.size() == 1 ? " recurrent operator" : " recurrent operators");
    if (index >= 0) ops = {ops[static_cast<size_t>(index)]};

    // Several operators: the layers of one stack, or refused.
    std::vector<OperatorSettings> settings;
    for (const Node* o : ops) settings.push_back(settings_of(*o, what));
    const OperatorSettings& first = settings[0];
    for (size_t k = 1; k < ops.size(); ++k) {
        std::string why = settings[k] == first ? "" : "their attributes differ";
        if (why.empty() && first.layout != 0) why = "layout = 1";
        if (why.empty()) why = stack_link(nodes, producer, *ops[k - 1], *ops[k], first.direction == "bidirectional");
        if (!why.empty()) {
            std::string list;
            for (const Node* o : ops) list += cat(list.empty() ? "" : ", ", o->op, " '", o->name, "'");
            fail(what, ": the graph has ", ops.size(), " recurrent operators (", list, ") that are not one stack of layers (",
                 why, "); choose one with load_onnx's index");
        }
    }
    Weights w;
    for (size_t k = 0; k < ops.size(); ++k) add_weights(*ops[k], initializers, ops.size() == 1 ? "" : cat("l", k, "_"), what, &w);
    if (!config) return w;

    const Node& op = *ops[0];
    Config c = config_from_weights(first.act.cell, Convention::onnx, w);
    const std::string W = ops.size() == 1 ? "W" : "l0_W", R = ops.size() == 1 ? "R" : "l0_R";
    if ((first.direction == "bidirectional") != (c.direction == Direction::bidirectional))
        fail(what, ": ", op.op, " '", op.name, "' has direction '", first.direction, "' but W has shape ", shape_str(w[W].shape));
    if (first.direction == "reverse") {
        if (ops.size() > 1) fail(what, ": ", ops.size(), " stacked operators with direction 'reverse': deeprnn's reverse layer is one operator");
        c.direction = Direction::reverse;
    }
    for (size_t k = 0; k < ops.size(); ++k)
        if (const int64_t h = settings[k].hidden; h >= 0 && h != c.hidden_size)
            fail(what, ": ", ops[k]->op, " '", ops[k]->name, "' has hidden_size = ", h, " but R has shape ", shape_str(w[R].shape));
    c.clip = first.clip;
    c.gate_activation = first.act.gates;
    c.cell_activation = first.act.candidate;
    if (c.gate_activation == GateActivation::hard_sigmoid) {
        c.hard_sigmoid_alpha = first.act.alpha;
        c.hard_sigmoid_beta = first.act.beta;
    }
    if (first.act.cell == Cell::gru) c.gru_variant = first.lbr ? GruVariant::linear_before_reset : GruVariant::reset_before_matmul;
    *config = c;
    return w;
}

}  // namespace detail

Weights load_onnx(const std::string& path, Config* config, int index) {
    if (index < -1) detail::fail("load_onnx: index = ", index, ": need -1 (the graph's recurrent operator or stack) or an operator's index");
    const detail::MappedFile f(path);
    return detail::parse_onnx(f.data(), f.size(), path, index, config);
}

}  // namespace deeprnn
