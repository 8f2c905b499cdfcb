// deeprnn-run — runs a recurrent network stored as .npy files, from the shell.
//
// For checking a converted model against its framework and for tests written
// in any language. Weights, inputs and outputs use the chosen convention's own
// names and layouts (see deeprnn.hpp section 6 and `deeprnn-run --help`).
// Build: g++ -std=c++17 -O2 -I. deeprnn.cpp tools/deeprnn_run.cpp -lopenblas -lboost_thread
#include "deeprnn.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char* kUsage =
    "usage: deeprnn-run --cell lstm|gru|rnn_tanh|rnn_relu --convention torch|onnx|keras\n"
    "                   --weights DIR|FILE.safetensors|FILE.npz [--prefix MODULE.]  --input X.npy  --out DIR\n"
    "                   [--layers N] [--direction forward|reverse|bidirectional] [--bidirectional]\n"
    "                   [--proj P] [--clip C] [--gru-variant linear-before-reset|reset-before-matmul]\n"
    "                   [--gates sigmoid|hard_sigmoid [--hard-sigmoid-alpha A] [--hard-sigmoid-beta B]]\n"
    "                   [--cell-activation tanh|relu]\n"
    "                   [--batch-first] [--lengths L.npy] [--h0 H.npy] [--c0 C.npy]\n"
    "                   [--threads N] [--repeat N] [--profile]\n"
    "   or: deeprnn-run --onnx FILE.onnx [--onnx-index K] --input X.npy --out DIR\n"
    "                   [--batch-first] [--lengths L.npy] [--h0 H.npy] [--c0 C.npy] [--threads N] [--repeat N] [--profile]\n"
    "                   (cell, sizes, direction, clip, activations and GRU variant from the file's LSTM, GRU or RNN operator)\n";

struct Usage : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Args {
    std::string cell, convention, weights, prefix, input, out, direction, gru_variant, gates, cell_activation, lengths, h0, c0, onnx;
    int layers = 0, proj = -1, threads = 0, repeat = 0, onnx_index = -1;
    float clip = -1;  // -1: not given
    float alpha = NAN, beta = NAN;  // hard_sigmoid's; NaN: not given
    bool batch_first = false, profile = false;
};

int to_int(const std::string& flag, const std::string& v, int lo) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < lo || n > 1000000000) throw Usage(flag + " " + v + ": expected an integer >= " + std::to_string(lo));
    return static_cast<int>(n);
}

float to_float(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const float x = std::strtof(v.c_str(), &end);
    if (v.empty() || *end || !std::isfinite(x)) throw Usage(flag + " " + v + ": expected a number");
    return x;
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string f = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw Usage(f + " needs a value");
            return argv[++i];
        };
        if (f == "--cell") a.cell = value();
        else if (f == "--convention") a.convention = value();
        else if (f == "--weights") a.weights = value();
        else if (f == "--prefix") a.prefix = value();
        else if (f == "--input") a.input = value();
        else if (f == "--out") a.out = value();
        else if (f == "--layers") a.layers = to_int(f, value(), 1);
        else if (f == "--direction") a.direction = value();
        else if (f == "--bidirectional") a.direction = "bidirectional";
        else if (f == "--proj") a.proj = to_int(f, value(), 0);
        else if (f == "--clip") {
            const std::string v = value();
            a.clip = to_float(f, v);
            if (a.clip < 0) throw Usage("--clip " + v + ": expected a number >= 0");
        }
        else if (f == "--gru-variant") a.gru_variant = value();
        else if (f == "--gates") a.gates = value();
        else if (f == "--hard-sigmoid-alpha") a.alpha = to_float(f, value());
        else if (f == "--hard-sigmoid-beta") a.beta = to_float(f, value());
        else if (f == "--cell-activation") a.cell_activation = value();
        else if (f == "--batch-first") a.batch_first = true;
        else if (f == "--lengths") a.lengths = value();
        else if (f == "--h0") a.h0 = value();
        else if (f == "--c0") a.c0 = value();
        else if (f == "--onnx") a.onnx = value();
        else if (f == "--onnx-index") a.onnx_index = to_int(f, value(), 0);
        else if (f == "--threads") a.threads = to_int(f, value(), 0);
        else if (f == "--repeat") a.repeat = to_int(f, value(), 1);
        else if (f == "--profile") a.profile = true;
        else throw Usage("unknown argument '" + f + "'");
    }
    for (auto [flag, v] : {std::pair<const char*, const std::string*>{"--input", &a.input}, {"--out", &a.out}})
        if (v->empty()) throw Usage(std::string(flag) + " is required");
    if (!a.onnx.empty()) {  // the file says what these would
        if (!a.cell.empty() || !a.convention.empty() || !a.weights.empty() || !a.prefix.empty() || !a.direction.empty() || !a.gru_variant.empty() ||
            a.layers || a.proj >= 0 || a.clip >= 0 || !a.gates.empty() || !std::isnan(a.alpha) || !std::isnan(a.beta) ||
            !a.cell_activation.empty())
            throw Usage("--onnx takes the cell, weights, direction, clip, activations and GRU variant from the file: "
                        "drop --cell, --convention, --weights, --prefix, --layers, --direction, --proj, --clip, --gru-variant, "
                        "--gates, --hard-sigmoid-* and --cell-activation");
        return a;
    }
    if (a.onnx_index >= 0) throw Usage("--onnx-index needs --onnx");
    if ((!std::isnan(a.alpha) || !std::isnan(a.beta)) && a.gates != "hard_sigmoid")
        throw Usage("--hard-sigmoid-alpha and --hard-sigmoid-beta need --gates hard_sigmoid");
    for (auto [flag, v] : {std::pair<const char*, const std::string*>{"--cell", &a.cell}, {"--convention", &a.convention},
                           {"--weights", &a.weights}})
        if (v->empty()) throw Usage(std::string(flag) + " is required (or --onnx)");
    return a;
}

template <typename E>
E pick(const std::string& flag, const std::string& v, std::initializer_list<E> options) {
    for (E e : options)
        if (v == deeprnn::to_string(e)) return e;
    throw Usage(flag + " " + v + ": not a valid choice");
}

// The flags may restate what the weights imply; they must agree with it.
deeprnn::Config make_config(const Args& a, const deeprnn::Weights& w) {
    using namespace deeprnn;
    const Cell cell = pick(std::string("--cell"), a.cell, {Cell::lstm, Cell::gru, Cell::rnn_tanh, Cell::rnn_relu});
    const Convention conv = pick(std::string("--convention"), a.convention, {Convention::torch, Convention::onnx, Convention::keras});
    Config c = config_from_weights(cell, conv, w);
    if (a.layers && a.layers != c.num_layers)
        throw Error("--layers " + std::to_string(a.layers) + " conflicts with the weights, which hold " +
                    std::to_string(c.num_layers) + " layer(s)");
    if (!a.direction.empty()) {
        const Direction d = pick(std::string("--direction"), a.direction,
                                 {Direction::forward, Direction::reverse, Direction::bidirectional});
        const bool two = c.direction == Direction::bidirectional;
        if ((d == Direction::bidirectional) != two)
            throw Error("--direction " + a.direction + " conflicts with the weights, which hold " +
                        (two ? "two directions" : "one direction"));
        c.direction = d;
    }
    if (a.proj >= 0 && a.proj != c.proj_size)
        throw Error("--proj " + std::to_string(a.proj) + " conflicts with the weights (projection size " +
                    std::to_string(c.proj_size) + ")");
    if (!a.gru_variant.empty())
        c.gru_variant = pick(std::string("--gru-variant"), a.gru_variant,
                             {GruVariant::linear_before_reset, GruVariant::reset_before_matmul});
    c.clip = std::max(a.clip, 0.0f);
    if (!a.gates.empty())
        c.gate_activation = pick(std::string("--gates"), a.gates, {GateActivation::sigmoid, GateActivation::hard_sigmoid});
    if (!std::isnan(a.alpha)) c.hard_sigmoid_alpha = a.alpha;
    if (!std::isnan(a.beta)) c.hard_sigmoid_beta = a.beta;
    if (!a.cell_activation.empty())
        c.cell_activation = pick(std::string("--cell-activation"), a.cell_activation, {CellActivation::tanh, CellActivation::relu});
    return c;
}

void require_shape(const std::string& what, const deeprnn::Tensor& t, const std::vector<int64_t>& want) {
    if (t.shape != want) {
        std::ostringstream s;
        auto put = [&s](const std::vector<int64_t>& v) {
            s << '[';
            for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
            s << ']';
        };
        s << what << " has shape ";
        put(t.shape);
        s << ", expected ";
        put(want);
        throw deeprnn::Error(s.str());
    }
}

// [n, A, B, w] -> [n, B, A, w]: swaps two axes, e.g. ONNX's [T, D, B, H] from [T, B, D*H].
std::vector<float> swap_outer(const std::vector<float>& v, int64_t A, int64_t B, int64_t w, int64_t n = 1) {
    std::vector<float> out(v.size());
    for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < A; ++i)
            for (int64_t j = 0; j < B; ++j)
                std::copy_n(&v[((k * A + i) * B + j) * w], w, &out[((k * B + j) * A + i) * w]);
    return out;
}

void make_dir(const std::string& dir) {
    std::string path;
    std::stringstream parts(dir);
    std::string part;
    if (!dir.empty() && dir[0] == '/') path = "/";
    while (std::getline(parts, part, '/')) {
        if (part.empty()) continue;
        path += part + "/";
        if (mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) throw deeprnn::Error("cannot create directory '" + path + "'");
    }
}

int run(const Args& a) {
    using namespace deeprnn;
    Config cfg;
    Weights w;
    if (!a.onnx.empty()) {
        w = load_onnx(a.onnx, &cfg, a.onnx_index);
    } else {
        w = load_weights(a.weights);  // a directory of .npy, or .safetensors / .npz / .onnx
        if (!a.prefix.empty()) w = strip_prefix(std::move(w), a.prefix);
        cfg = make_config(a, w);
    }
    cfg.threads = a.threads;
    const bool onnx = cfg.convention == Convention::onnx;
    const bool batch_first = a.batch_first || cfg.convention == Convention::keras;
    const int64_t D = num_directions(cfg), S = state_size(cfg), H = cfg.hidden_size, LD = D * cfg.num_layers;

    const Tensor x = load_npy(a.input);
    if (x.shape.size() != 3 || x.shape[2] != cfg.input_size)
        throw Error(a.input + ": input has shape of rank " + std::to_string(x.shape.size()) + ", expected [" +
                    (batch_first ? "B, T, " : "T, B, ") + std::to_string(cfg.input_size) + "]");
    const int64_t T = batch_first ? x.shape[1] : x.shape[0], B = batch_first ? x.shape[0] : x.shape[1];
    if (T < 1 || B < 1) throw Error(a.input + ": empty input");

    Config run_cfg = cfg;
    run_cfg.max_batch = static_cast<int>(B);
    Model model(run_cfg, w);

    std::vector<int32_t> lengths;
    if (!a.lengths.empty()) {
        std::vector<int64_t> shape;
        lengths = load_npy_int(a.lengths, &shape);
        if (shape != std::vector<int64_t>{B}) throw Error(a.lengths + ": lengths must have shape [" + std::to_string(B) + "]");
    }
    // Initial states arrive in the convention's layout: [L*D, B, .], or ONNX layout=1's [B, L*D, .].
    auto load_state = [&](const std::string& path, int64_t width) {
        Tensor t = load_npy(path);
        if (onnx && batch_first) {
            require_shape(path, t, {B, LD, width});
            return swap_outer(t.data, B, LD, width);
        }
        require_shape(path, t, {LD, B, width});
        return t.data;
    };
    std::vector<float> h0, c0;
    if (!a.h0.empty()) h0 = load_state(a.h0, S);
    if (!a.c0.empty()) {
        if (cfg.cell != Cell::lstm) throw Error("--c0 given but --cell " + a.cell + " has no cell state");
        c0 = load_state(a.c0, H);
    }

    std::vector<float> y(static_cast<size_t>(T * B * D * S)), hn(static_cast<size_t>(LD * B * S)), cn(static_cast<size_t>(LD * B * H));
    RunInput in;
    in.x = x.data.data();
    in.seq_len = static_cast<int>(T);
    in.batch = static_cast<int>(B);
    in.batch_first = batch_first;
    in.lengths = lengths.empty() ? nullptr : lengths.data();
    in.h0 = h0.empty() ? nullptr : h0.data();
    in.c0 = c0.empty() ? nullptr : c0.data();
    RunOutput out;
    out.y = y.data();
    out.h_n = hn.data();
    out.c_n = cfg.cell == Cell::lstm ? cn.data() : nullptr;
    Session session(model);
    session.set_profiling(a.profile);
    std::vector<double> ms;
    std::vector<std::pair<double, RunProfile>> profiles;  // (ms, profile) of each run
    for (int r = 0; r < std::max(1, a.repeat); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        session.run(in, out);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        if (a.profile) profiles.emplace_back(ms.back(), session.last_profile());
    }
    if (a.profile) {  // the run of median time's
        std::sort(profiles.begin(), profiles.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
        std::cout << "profile of the median run: " << to_string(profiles[profiles.size() / 2].second) << "\n";
    }

    make_dir(a.out);
    const std::string dir = a.out + "/";
    auto save = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
        Tensor t;
        t.shape = std::move(shape);
        t.data = std::move(data);
        save_npy(dir + name, t);
    };
    const bool lstm = cfg.cell == Cell::lstm;
    if (onnx) {
        // Y [T, D, B, H] from y [T, B, D*H]; with layout=1, y [B, T, D*H] is already Y [B, T, D, H].
        if (batch_first) save("Y.npy", {B, T, D, S}, y);
        else save("Y.npy", {T, D, B, S}, swap_outer(y, B, D, S, T));
        // Y_h [D, B, H] per operator; stacked layers' one after another, [L*D, B, H].
        save("Y_h.npy", batch_first ? std::vector<int64_t>{B, LD, S} : std::vector<int64_t>{LD, B, S},
             batch_first ? swap_outer(hn, LD, B, S) : hn);
        if (lstm)
            save("Y_c.npy", batch_first ? std::vector<int64_t>{B, LD, H} : std::vector<int64_t>{LD, B, H},
                 batch_first ? swap_outer(cn, LD, B, H) : cn);
    } else {
        save("output.npy", batch_first ? std::vector<int64_t>{B, T, D * S} : std::vector<int64_t>{T, B, D * S}, y);
        save("h_n.npy", {LD, B, S}, hn);
        if (lstm) save("c_n.npy", {LD, B, H}, cn);
    }
    if (a.repeat > 0) {
        std::sort(ms.begin(), ms.end());
        const double median = ms[ms.size() / 2];
        const double p99 = ms[std::min(ms.size() - 1, static_cast<size_t>(std::ceil(0.99 * ms.size())) - 1)];
        std::cout << "median_ms=" << median << " p99_ms=" << p99 << " runs=" << ms.size() << "\n";
    }
    return 0;
}

}  // namespace

int deeprnn_run_main(int argc, char** argv) {
    try {
        if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
            std::cout << kUsage;
            return 0;
        }
        return run(parse(argc, argv));
    } catch (const Usage& e) {
        std::cerr << "deeprnn-run: " << e.what() << "\n" << kUsage;
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "deeprnn-run: " << e.what() << "\n";
        return 1;
    }
}

#ifndef DEEPRNN_RUN_NO_MAIN
int main(int argc, char** argv) { return deeprnn_run_main(argc, argv); }
#endif
