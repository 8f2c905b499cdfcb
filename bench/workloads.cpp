// workloads.cpp — configurations of the suite and their deterministic data.
#include "workloads.hpp"

#include <cmath>
#include <functional>
#include <random>

namespace bench {

const char* to_string(CellKind cell) { return cell == CellKind::lstm ? "lstm" : "gru"; }

int gate_count(CellKind cell) { return cell == CellKind::lstm ? 4 : 3; }

std::string Workload::id() const { return std::string(to_string(cell)) + "/" + name; }

double Workload::flops() const {
    const double g = gate_count(cell);
    double total = 0;
    for (int l = 0; l < layers; ++l) total += 2.0 * seq * batch * g * hidden * (layer_input(l) + hidden);
    return total;
}

double Workload::necessary_flops() const {
    const double g = gate_count(cell);
    double total = 0;
    for (int l = 0; l < layers; ++l)
        total += 2.0 * batch * g * hidden * (static_cast<double>(seq) * layer_input(l) + (seq - 1.0) * hidden);
    return total;
}

std::size_t Workload::w_ih_bytes(int layer) const {
    return sizeof(float) * gate_count(cell) * hidden * layer_input(layer);
}

std::size_t Workload::w_hh_bytes(int) const { return sizeof(float) * gate_count(cell) * hidden * hidden; }

Workload make_workload(CellKind cell, const std::string& group, int input, int hidden, int batch, int seq,
                       int layers) {
    Workload w;
    w.cell = cell;
    w.name = group + "-" + std::to_string(input) + "-" + std::to_string(hidden) + "-" +
             std::to_string(batch) + "-" + std::to_string(seq);
    w.input = input;
    w.hidden = hidden;
    w.batch = batch;
    w.seq = seq;
    w.layers = layers;
    return w;
}

namespace {

Workload make(CellKind cell, const std::string& group, int input, int hidden, int batch, int seq,
              int layers = 1) {
    return make_workload(cell, group, input, hidden, batch, seq, layers);
}

void fill_uniform(std::vector<float>& v, std::size_t n, float bound, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-bound, bound);
    v.resize(n);
    for (auto& value : v) value = dist(rng);
}

}  // namespace

std::vector<Workload> default_suite() {
    // DeepCPU (ATC'18) Table 1: input, hidden, batch, sequence length.
    static const int table1[][4] = {
        {64, 64, 1, 100},      {256, 64, 1, 100},     {1024, 64, 1, 100},   {64, 256, 1, 100},
        {64, 1024, 1, 100},    {1024, 1024, 1, 100},  {256, 256, 1, 1},     {256, 256, 1, 10},
        {256, 256, 1, 100},    {64, 64, 10, 100},     {64, 64, 20, 100},    {256, 256, 10, 100},
        {256, 256, 20, 100},   {1024, 1024, 10, 100}, {1024, 1024, 20, 100}};
    std::vector<Workload> suite;
    for (CellKind cell : {CellKind::lstm, CellKind::gru})
        for (const auto& c : table1) suite.push_back(make(cell, "t1", c[0], c[1], c[2], c[3]));
    // Real-world shapes (paper Table 2), one direction each.
    suite.push_back(make(CellKind::gru, "textsim", 200, 512, 1, 20));
    suite.push_back(make(CellKind::lstm, "bidaf", 800, 100, 1, 100));
    suite.push_back(make(CellKind::lstm, "bidaf", 1400, 100, 1, 100));
    // A 2-layer character-level language model.
    for (int batch : {1, 5, 20}) suite.push_back(make(CellKind::lstm, "charrnn2", 128, 128, batch, 100, 2));
    return suite;
}

Problem make_problem(const Workload& work) {
    Problem p;
    p.work = work;
    std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(work.id())));
    const std::size_t gh = std::size_t(gate_count(work.cell)) * work.hidden;
    const float bound = 1.0f / std::sqrt(float(work.hidden));
    p.layers.resize(work.layers);
    for (int l = 0; l < work.layers; ++l) {
        LayerWeights& lw = p.layers[l];
        fill_uniform(lw.w_ih, gh * work.layer_input(l), bound, rng);
        fill_uniform(lw.w_hh, gh * work.hidden, bound, rng);
        fill_uniform(lw.b_ih, gh, bound, rng);
        fill_uniform(lw.b_hh, gh, bound, rng);
    }
    fill_uniform(p.x, std::size_t(work.seq) * work.batch * work.input, 1.0f, rng);
    return p;
}

}  // namespace bench
