// deeprnn_cuda_selftest — for whoever has an NVIDIA GPU (compute capability
// 8.0+): checks the CUDA backend against CPU references on every cell and
// every path, and prints timings. Built by `make cuda`; run:
//     build/deeprnn-cuda-selftest            all checks, then timings
//     build/deeprnn-cuda-selftest --quick    checks only
// Exit status: 0 all passed, 1 a check failed (or CUDA reported an error),
// 77 no usable CUDA device (nothing was checked).
//
// Correctness: every cell (LSTM, LSTM with peepholes and clip, GRU both
// variants with GRU reset-before-matmul's one- and two-barrier forms, RNN
// tanh/relu) x every path (persistent with grid.sync(), persistent with the
// atomic barrier, the cuBLAS-per-step fallback), on a small network that
// exercises padding, variable lengths, both directions and two layers,
// compared with the float64 reference of test/reference.hpp (tolerance 1e-4
// absolute); then the public API (Model with backend = cuda against backend =
// cpu, tolerance 1e-4). Timings on GRNN's sizes: the planned path, the
// persistent kernel with each barrier (grid.sync(), atomic), and the
// cuDNN-free baseline cuBLAS-per-step + fused element-wise kernel, each
// against the CPU engine (deeprnn::Model, backend cpu), whose output is the
// reference (tolerance 1e-4).
#include "deeprnn.hpp"
#include "src/gpu_plan.hpp"
#include "test/reference.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace g = deeprnn::detail::gpu;
using deeprnn::Cell;
using deeprnn::Config;
using deeprnn::GruVariant;

namespace {

// The net's weights as float32, and the views create_gpu_model takes.
struct FloatNet {
    std::vector<std::vector<float>> store;
    std::vector<g::GpuLayerView> views;
};

FloatNet float_net(const ref::Net& net) {
    FloatNet f;
    f.store.reserve(net.layers.size() * 5);
    auto keep = [&](const std::vector<double>& v) -> const float* {
        if (v.empty()) return nullptr;
        f.store.emplace_back(v.begin(), v.end());
        return f.store.back().data();
    };
    for (const ref::Layer& l : net.layers) {
        g::GpuLayerView v;
        v.w_ih = keep(l.w_ih);
        v.w_hh = keep(l.w_hh);
        v.b_ih = keep(l.b_ih);
        v.b_hh = keep(l.b_hh);
        v.peep = keep(l.peep);
        f.views.push_back(v);
    }
    return f;
}

double max_abs(const std::vector<float>& a, const std::vector<double>& b) {
    double e = 0;
    for (size_t i = 0; i < b.size(); ++i) e = std::max(e, std::isnan(a[i]) ? INFINITY : std::abs(a[i] - b[i]));
    return e;
}

struct CellCase {
    const char* name;
    Cell cell;
    GruVariant variant;
    int gru_syncs;  // reset-before-matmul: 1 or 2
    bool peep;
    float clip;
};
const CellCase kCells[] = {
    {"lstm", Cell::lstm, GruVariant::linear_before_reset, 0, false, 0},
    {"lstm+peep+clip", Cell::lstm, GruVariant::linear_before_reset, 0, true, 0.8f},
    {"gru-lbr", Cell::gru, GruVariant::linear_before_reset, 0, false, 0},
    {"gru-rbm-1barrier", Cell::gru, GruVariant::reset_before_matmul, 1, false, 0},
    {"gru-rbm-2barriers+clip", Cell::gru, GruVariant::reset_before_matmul, 2, false, 0.5f},
    {"rnn-tanh", Cell::rnn_tanh, GruVariant::linear_before_reset, 0, false, 0},
    {"rnn-relu", Cell::rnn_relu, GruVariant::linear_before_reset, 0, false, 0},
};

struct Path {
    const char* name;
    int barrier;  // -1 any
    bool fallback;
};
const Path kPaths[] = {{"persistent/grid-sync", static_cast<int>(g::BarrierKind::grid_sync), false},
                       {"persistent/atomic", static_cast<int>(g::BarrierKind::atomic), false},
                       {"fallback", -1, true}};

// Small network, every feature: padding (H=37 is no multiple of anything),
// lengths 0..T in any order, bidirectional, two layers, initial states.
bool check_cell(const CellCase& cc, const Path& path) {
    const int H = 37, E = 11, B = 5, T = 9;
    Config cfg;
    cfg.cell = cc.cell;
    cfg.gru_variant = cc.variant;
    cfg.input_size = E;
    cfg.hidden_size = H;
    cfg.num_layers = 2;
    cfg.direction = deeprnn::Direction::bidirectional;
    cfg.peepholes = cc.peep;
    cfg.clip = cc.clip;
    cfg.max_batch = B;
    std::mt19937 rng(7);
    const ref::Net net = ref::random_net(cfg, rng, 0.3, true, cc.peep);
    const FloatNet fn = float_net(net);
    const std::vector<int> lengths = {9, 4, 0, 9, 6};
    const std::vector<int32_t> len32(lengths.begin(), lengths.end());
    const int LD = 4;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(T) * B * E), h0(static_cast<size_t>(LD) * B * H), c0(h0.size());
    for (auto* v : {&x, &h0, &c0})
        for (float& e : *v) e = u(rng);
    const ref::Result want = ref::run(net, std::vector<double>(x.begin(), x.end()), T, B, lengths,
                                      std::vector<double>(h0.begin(), h0.end()), std::vector<double>(c0.begin(), c0.end()));
    g::PlanOptions opt;
    opt.barrier = path.barrier;
    opt.gru_syncs = cc.gru_syncs;
    opt.force_fallback = path.fallback;
    std::vector<float> y(want.y.size()), h_n(want.h_n.size()), c_n(want.c_n.size());
    std::string plan;
    double err = 0;
    try {
        auto m = g::create_gpu_model(cfg, fn.views, opt);
        plan = m->plan();
        g::GpuRun r;
        r.x = x.data();
        r.T = T;
        r.B = B;
        r.lengths = len32.data();
        r.h0 = h0.data();
        r.c0 = c0.data();
        r.y = y.data();
        r.h_n = h_n.data();
        r.c_n = c_n.data();
        m->run(r);
        err = std::max(max_abs(y, want.y), max_abs(h_n, want.h_n));
        if (cc.cell == Cell::lstm) err = std::max(err, max_abs(c_n, want.c_n));
    } catch (const deeprnn::Error& e) {
        std::printf("FAIL  %-24s %-22s error: %s\n", cc.name, path.name, e.what());
        return false;
    }
    const bool ok = err < 1e-4;
    std::printf("%s  %-24s %-22s max |gpu - float64| = %.2e\n", ok ? "PASS" : "FAIL", cc.name, path.name, err);
    if (!ok) std::printf("%s", plan.c_str());
    return ok;
}

template <class F>
double median_ms(F&& f, int reps) {
    std::vector<double> t;
    f();  // warm-up
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// Through the public API: Model with backend = cuda against backend = cpu
// (batch-first, lengths, initial states, bidirectional, 2 layers).
// Tolerance 1e-4 absolute: both are float32; the CPU engine's activations
// and CUDA's tanhf/expf differ by ~1e-6 per step, compounded over 9 steps
// and 2 layers of weights of scale 0.3.
bool check_public_api(const CellCase& cc) {
    const int H = 37, E = 11, B = 5, T = 9;
    Config cfg;
    cfg.cell = cc.cell;
    cfg.gru_variant = cc.variant;
    cfg.input_size = E;
    cfg.hidden_size = H;
    cfg.num_layers = 2;
    cfg.direction = deeprnn::Direction::bidirectional;
    cfg.peepholes = cc.peep;
    cfg.clip = cc.clip;
    cfg.max_batch = B;
    std::mt19937 rng(11);
    const deeprnn::Weights w = ref::torch_weights(ref::random_net(cfg, rng, 0.3, true, cc.peep));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(T) * B * E), h0(static_cast<size_t>(4) * B * H), c0(h0.size());
    for (auto* v : {&x, &h0, &c0})
        for (float& e : *v) e = u(rng);
    const std::vector<int32_t> lengths = {9, 4, 0, 9, 6};
    std::vector<float> out[2][3];
    std::string plan;
    try {
        for (int k = 0; k < 2; ++k) {
            Config c = cfg;
            c.backend = k == 0 ? deeprnn::Backend::cuda : deeprnn::Backend::cpu;
            deeprnn::Model m(c, w);
            if (k == 0) plan = m.plan();
            deeprnn::Session session(m);
            deeprnn::RunInput in;
            in.x = x.data();
            in.seq_len = T;
            in.batch = B;
            in.batch_first = true;
            in.lengths = lengths.data();
            in.h0 = h0.data();
            in.c0 = cc.cell == Cell::lstm ? c0.data() : nullptr;
            out[k][0].assign(static_cast<size_t>(T) * B * 2 * H, 0.0f);
            out[k][1].assign(h0.size(), 0.0f);
            out[k][2].assign(h0.size(), 0.0f);
            deeprnn::RunOutput o;
            o.y = out[k][0].data();
            o.h_n = out[k][1].data();
            o.c_n = cc.cell == Cell::lstm ? out[k][2].data() : nullptr;
            session.run(in, o);
        }
    } catch (const deeprnn::Error& e) {
        std::printf("FAIL  %-24s %-22s error: %s\n", cc.name, "Model(backend cuda)", e.what());
        return false;
    }
    double err = 0;
    for (int i = 0; i < 3; ++i)
        for (size_t j = 0; j < out[0][i].size(); ++j)
            err = std::max(err, std::isnan(out[0][i][j]) ? INFINITY : std::abs(double(out[0][i][j]) - out[1][i][j]));
    const bool ok = err < 1e-4 && plan.rfind("backend cuda", 0) == 0;
    std::printf("%s  %-24s %-22s max |cuda - cpu| = %.2e\n", ok ? "PASS" : "FAIL", cc.name, "Model(backend cuda)", err);
    if (!ok) std::printf("%s\n", plan.c_str());
    return ok;
}

// GRNN's table 1 sizes (T = 100): every GPU path against the CPU engine.
// Rows: the planned path (calibrated), the persistent kernel forced to each
// barrier (grid.sync() and the atomic sense-reversing one), and the
// cuDNN-free baseline: cuBLAS per step + the fused element-wise kernel.
bool time_cell(Cell cell, GruVariant variant, int H, int B) {
    const int T = 100, E = H;
    Config cfg;
    cfg.cell = cell;
    cfg.gru_variant = variant;
    cfg.input_size = E;
    cfg.hidden_size = H;
    cfg.max_batch = B;
    cfg.tuning = deeprnn::Tuning::calibrate;
    std::mt19937 rng(3);
    const ref::Net net = ref::random_net(cfg, rng, 1.0 / std::sqrt(H));
    const FloatNet fn = float_net(net);
    std::vector<float> x(static_cast<size_t>(T) * B * E);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& e : x) e = u(rng);
    std::vector<float> y_gpu(static_cast<size_t>(T) * B * H), y_cpu(y_gpu.size());

    Config cpu_cfg = cfg;
    cpu_cfg.backend = deeprnn::Backend::cpu;
    cpu_cfg.tuning = deeprnn::Tuning::heuristic;
    deeprnn::Model cpu(cpu_cfg, ref::torch_weights(net));
    deeprnn::Session session(cpu);
    deeprnn::RunInput in;
    in.x = x.data();
    in.seq_len = T;
    in.batch = B;
    deeprnn::RunOutput out;
    out.y = y_cpu.data();
    const double cpu_ms = median_ms([&] { session.run(in, out); }, 5);
    std::printf("      %-4s %-20s H=%-5d B=%-3d  cpu engine %8.3f ms\n", deeprnn::to_string(cell),
                cell == Cell::gru ? deeprnn::to_string(variant) : "", H, B, cpu_ms);

    struct Variant {
        const char* name;
        int barrier;
        bool fallback;
    };
    const Variant variants[] = {{"planned", -1, false},
                                {"persistent/grid-sync", static_cast<int>(g::BarrierKind::grid_sync), false},
                                {"persistent/atomic", static_cast<int>(g::BarrierKind::atomic), false},
                                {"cublas-per-step", -1, true}};
    bool all_ok = true;
    for (const Variant& v : variants) {
        g::PlanOptions opt;
        opt.barrier = v.barrier;
        opt.force_fallback = v.fallback;
        std::unique_ptr<g::GpuModel> m;
        try {
            m = g::create_gpu_model(cfg, fn.views, opt);
        } catch (const deeprnn::Error& e) {  // e.g. no cooperative launch: that barrier cannot be timed here
            std::printf("n/a   %-22s %s\n", v.name, e.what());
            continue;
        }
        g::GpuRun r;
        r.x = x.data();
        r.T = T;
        r.B = B;
        r.y = y_gpu.data();
        const double gpu_ms = median_ms([&] { m->run(r); }, 20);
        double err = 0;
        for (size_t i = 0; i < y_cpu.size(); ++i) err = std::max(err, static_cast<double>(std::abs(y_gpu[i] - y_cpu[i])));
        const bool ok = err < 1e-4;
        all_ok = all_ok && ok;
        const std::string plan = m->plan();
        const size_t path = plan.find("cuda path: ");
        const size_t end = path == std::string::npos ? std::string::npos : plan.find('\n', path);
        std::printf("%s  %-22s gpu %8.3f ms (%7.2f us/step)  speedup vs cpu %5.1fx  max |gpu-cpu| %.1e\n      %s\n",
                    ok ? "PASS" : "FAIL", v.name, gpu_ms, 1e3 * gpu_ms / T, cpu_ms / gpu_ms, err,
                    path == std::string::npos ? plan.c_str() : plan.substr(path, end - path).c_str());
    }
    return all_ok;
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    std::string why;
    if (!g::cuda_backend_available(&why)) {
        std::printf("deeprnn-cuda-selftest: no usable CUDA device: %s\nnothing was checked\n", why.c_str());
        return 77;
    }
    std::printf("deeprnn %s, CUDA %s\n", deeprnn::version(), why.c_str());
    int failed = 0, total = 0;
    try {
        std::printf("\n-- correctness: H=37, E=11, B=5, T=9, lengths {9,4,0,9,6}, bidirectional, 2 layers --\n");
        for (const CellCase& cc : kCells)
            for (const Path& p : kPaths) {
                ++total;
                failed += !check_cell(cc, p);
            }
        std::printf("\n-- public API: Model(backend cuda) vs Model(backend cpu), same sizes, batch-first --\n");
        for (const CellCase& cc : kCells) {
            if (cc.gru_syncs == 2) continue;  // the public API lets the planner choose the GRU form
            ++total;
            failed += !check_public_api(cc);
        }
        if (!quick) {
            std::printf("\n-- timings: T=100, E=H, whole run incl. host<->device copies, median of 20 (cpu: 5) --\n");
            for (Cell cell : {Cell::lstm, Cell::gru})
                for (int H : {64, 256, 1024})
                    for (int B : {1, 10, 20}) {
                        ++total;
                        failed += !time_cell(cell, cell == Cell::gru ? GruVariant::reset_before_matmul : GruVariant::linear_before_reset,
                                             H, B);
                    }
        }
    } catch (const deeprnn::Error& e) {
        std::printf("FAIL  %s\n", e.what());
        return 1;
    }
    std::printf("\n%d passed, %d failed\n", total - failed, failed);
    return failed ? 1 : 0;
}
