// quickstart — load a PyTorch-convention LSTM from .npy files, run one
// sequence, print the output's first values and the latency.
//
// What it shows: the whole embedding story in one screen: weights by name,
// a Config inferred from them, a Model, a Session, one run.
// What it needs: the bundled model/ and input.npy next to this file (made by
// make_model.py; untrained weights: this times the engine, it solves no task).
// Build: g++ -std=c++17 -O3 -I../.. ../../deeprnn.cpp quickstart.cpp -lopenblas -lboost_thread
// Run:   ./quickstart [MODEL_DIR] [INPUT.npy] [RUNS]
#include "deeprnn.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
    const std::string dir = argc > 1 ? argv[1] : "samples/quickstart/model";
    const std::string input = argc > 2 ? argv[2] : "samples/quickstart/input.npy";
    const int runs = argc > 3 ? std::atoi(argv[3]) : 200;

    deeprnn::Weights weights = deeprnn::load_npy_dir(dir);  // weight_ih_l0.npy, ...
    deeprnn::Config cfg = deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, weights);
    cfg.max_batch = 1;
    deeprnn::Model model(cfg, weights);  // weights are copied; `weights` may go
    deeprnn::Session session(model);     // one per calling thread

    deeprnn::Tensor x = deeprnn::load_npy(input);  // [T, B=1, E]
    const int T = static_cast<int>(x.shape.at(0));
    std::vector<float> y(static_cast<size_t>(T) * model.output_size());
    deeprnn::RunInput in;
    in.x = x.data.data();
    in.seq_len = T;
    deeprnn::RunOutput out;
    out.y = y.data();

    std::vector<double> ms;
    for (int r = 0; r < std::max(1, runs); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        session.run(in, out);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s", deeprnn::build_info().c_str());
    std::printf("model: lstm, %d layers, input %d, hidden %d; %s\n", cfg.num_layers, cfg.input_size, cfg.hidden_size,
                model.plan().c_str());
    std::printf("y[T-1][0..3] = %.6f %.6f %.6f %.6f\n", y[(T - 1) * model.output_size()],
                y[(T - 1) * model.output_size() + 1], y[(T - 1) * model.output_size() + 2],
                y[(T - 1) * model.output_size() + 3]);
    std::printf("latency for %d steps, batch 1: median %.3f ms, p99 %.3f ms over %zu runs\n", T, ms[ms.size() / 2],
                ms[std::min(ms.size() - 1, ms.size() * 99 / 100)], ms.size());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 1;
}
