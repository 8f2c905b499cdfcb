// impl_deeprnn.cpp — deeprnn through its public API only.
#include <algorithm>
#include <sstream>
#include <vector>

#include "../deeprnn.hpp"
#include "impls.hpp"

namespace bench {
namespace {

deeprnn::Tensor tensor(std::vector<int64_t> shape, const std::vector<float>& data) {
    deeprnn::Tensor t;
    t.shape = std::move(shape);
    t.data = data;
    return t;
}

// PyTorch-convention weights: weight_ih_l{k} [G*H, E_k], weight_hh_l{k} [G*H, H], biases [G*H].
deeprnn::Weights torch_weights(const Problem& p) {
    const Workload& w = p.work;
    const int64_t gh = int64_t(gate_count(w.cell)) * w.hidden;
    deeprnn::Weights weights;
    for (int l = 0; l < w.layers; ++l) {
        const std::string k = std::to_string(l);
        const LayerWeights& lw = p.layers[l];
        weights["weight_ih_l" + k] = tensor({gh, w.layer_input(l)}, lw.w_ih);
        weights["weight_hh_l" + k] = tensor({gh, w.hidden}, lw.w_hh);
        weights["bias_ih_l" + k] = tensor({gh}, lw.b_ih);
        weights["bias_hh_l" + k] = tensor({gh}, lw.b_hh);
    }
    return weights;
}

deeprnn::Config make_config(const Problem& p, const deeprnn::Weights& weights, int threads,
                            deeprnn::WeightPrecision precision) {
    const deeprnn::Cell cell = p.work.cell == CellKind::lstm ? deeprnn::Cell::lstm : deeprnn::Cell::gru;
    deeprnn::Config cfg = deeprnn::config_from_weights(cell, deeprnn::Convention::torch, weights);
    cfg.gru_variant = deeprnn::GruVariant::linear_before_reset;
    cfg.max_batch = p.work.batch;
    cfg.tuning_seq_len = p.work.seq;  // as an application that knows its runs' length would
    cfg.threads = threads;
    cfg.weight_precision = precision;
    return cfg;
}

class Deeprnn final : public Impl {
public:
    Deeprnn(const Problem& p, int threads, deeprnn::WeightPrecision precision)
        : Impl(precision == deeprnn::WeightPrecision::f32 ? "deeprnn" : std::string("deeprnn-") + deeprnn::to_string(precision)),
          p_(p), model_(make_model(p, threads, precision)), session_(model_),
          y_(std::size_t(p.work.seq) * p.work.batch * model_.output_size()) {}

    void run() override {
        deeprnn::RunInput in;
        in.x = p_.x.data();
        in.seq_len = p_.work.seq;
        in.batch = p_.work.batch;
        deeprnn::RunOutput out;
        out.y = y_.data();
        session_.run(in, out);
    }

    const float* output() const override { return y_.data(); }

    // "workers=2 side_by_side=0 ... helpers=0" of Model::plan(): which plan the
    // model's cost model picked in this process (it depends on rates measured
    // here), and " folded" where batch 1 folds an input projection into its steps.
    std::string plan() const override {
        const std::string all = model_.plan();
        const size_t at = all.find("workers="), end = all.find(',', at);
        const std::string folded = all.find("input projection folded") != std::string::npos ? " folded" : "";
        return at == std::string::npos ? all : all.substr(at, end == std::string::npos ? std::string::npos : end - at) + folded;
    }

    std::string profile(int runs) override {
        session_.set_profiling(true);
        std::vector<double> run_ms;
        std::vector<std::vector<double>> work_ms, wait_ms;  // [worker][run]
        for (int r = 0; r < runs; ++r) {
            run();
            const deeprnn::RunProfile& p = session_.last_profile();
            run_ms.push_back(p.seconds * 1e3);
            work_ms.resize(std::max(work_ms.size(), p.workers.size()));
            wait_ms.resize(work_ms.size());
            for (std::size_t w = 0; w < p.workers.size(); ++w) {
                work_ms[w].push_back((p.workers[w].seconds - p.workers[w].wait_seconds) * 1e3);
                wait_ms[w].push_back(p.workers[w].wait_seconds * 1e3);
            }
        }
        session_.set_profiling(false);
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v.empty() ? 0.0 : v[v.size() / 2];
        };
        std::ostringstream s;
        s.precision(3);
        s << std::fixed << "run " << median(run_ms) << " ms";
        for (std::size_t w = 0; w < work_ms.size(); ++w)
            s << "; worker " << w << " working " << median(work_ms[w]) << ", waiting " << median(wait_ms[w]);
        return s.str();
    }

private:
    static deeprnn::Model make_model(const Problem& p, int threads, deeprnn::WeightPrecision precision) {
        const deeprnn::Weights weights = torch_weights(p);
        return deeprnn::Model(make_config(p, weights, threads, precision), weights);
    }

    const Problem& p_;
    deeprnn::Model model_;
    deeprnn::Session session_;
    std::vector<float> y_;
};

}  // namespace

ImplPtr make_deeprnn(const Problem& p, int threads, deeprnn::WeightPrecision precision) {
    return std::make_unique<Deeprnn>(p, threads, precision);
}

std::string deeprnn_info() {
    std::istringstream lines(deeprnn::build_info());
    std::string line, joined;
    while (std::getline(lines, line))
        if (!line.empty()) joined += (joined.empty() ? "" : "; ") + line;
    return joined;
}

}  // namespace bench
