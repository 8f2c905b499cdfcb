// Forward pass against the float64 reference (test/reference.hpp) on random
// cases: every cell, odd sizes, layers, directions, projection, peepholes,
// clip, lengths, initial states, batch-first, streaming.
//
// Tolerance: float32 arithmetic against float64 truth. Each output is a chain
// of dot products of at most ~110 terms of magnitude <= ~1 (weights in
// within +-min(0.5, 1.5/sqrt(fan-in)), |x| <= 1, states bounded by 1 through tanh/sigmoid), so
// rounding stays near K * 2^-24 ~ 1e-5 in the worst case and ~1e-6 typically;
// the recurrence contracts errors (activation slopes <= 1). We require
// max |error| <= 2e-5 and relative L2 error <= 5e-6 (about 40 float32 ulp:
// a one-unit network's single output leaves no room for averaging), relative
// to no less than an RMS of 0.01 (ref::error_stats: a lone output near 0 is
// held by the absolute bound; without the floor, 2 seeds in 400 failed here
// with errors of 1e-8 on an h_n of 1e-3).
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <random>

#include "forced_plan.hpp"
#include "reference.hpp"
#include "seed.hpp"

namespace {

struct Case {
    deeprnn::Config cfg;
    int T = 1, B = 1;
    bool lengths = false, init = false, batch_first = false, bias = true;
};

std::vector<double> random_vec(std::mt19937& rng, size_t n, double scale) {
    std::uniform_real_distribution<double> u(-scale, scale);
    std::vector<double> v(n);
    for (auto& e : v) e = static_cast<float>(u(rng));
    return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    const ref::ErrorStats err = ref::error_stats(got, want);
    const double max_err = err.max_abs, rel = err.rel_l2;
    BOOST_TEST_MESSAGE(what << ": max abs err " << max_err << ", rel L2 " << rel);
    BOOST_TEST(max_err <= 2e-5, what << ": max abs error " << max_err);
    BOOST_TEST(rel <= 5e-6, what << ": relative L2 error " << rel);
}

// Transposes [T, B, w] <-> [B, T, w].
std::vector<double> swap_tb(const std::vector<double>& v, int T, int B, size_t w) {
    std::vector<double> out(v.size());
    for (int t = 0; t < T; ++t)
        for (int b = 0; b < B; ++b)
            for (size_t k = 0; k < w; ++k) out[(static_cast<size_t>(b) * T + t) * w + k] = v[(static_cast<size_t>(t) * B + b) * w + k];
    return out;
}

std::vector<float> to_f(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

void check_case(const Case& k, const std::string& name, bool peep = false) {
    std::mt19937 rng(test_seed() ^ std::hash<std::string>()(name));
    const auto& c = k.cfg;
    // Weights scaled like a trained net's (~1/sqrt(fan-in)) keep relu nets from
    // exploding, so an absolute tolerance stays meaningful.
    const double scale = std::min(0.5, 1.5 / std::sqrt(std::max(c.input_size, c.hidden_size)));
    const ref::Net net = ref::random_net(c, rng, scale, k.bias, peep);
    const deeprnn::Weights w = c.convention == deeprnn::Convention::onnx ? ref::onnx_weights(net) : ref::torch_weights(net);
    const int D = c.direction == deeprnn::Direction::bidirectional ? 2 : 1;
    const int S = c.proj_size ? c.proj_size : c.hidden_size, LD = c.num_layers * D;
    const std::vector<double> x = random_vec(rng, static_cast<size_t>(k.T) * k.B * c.input_size, 1.0);
    std::vector<int> lengths;
    if (k.lengths) {
        std::uniform_int_distribution<int> u(0, k.T);
        for (int b = 0; b < k.B; ++b) lengths.push_back(b == 0 ? k.T : u(rng));
        if (k.B > 2) lengths[1] = 0;
    }
    std::vector<double> h0, c0;
    if (k.init) {
        h0 = random_vec(rng, static_cast<size_t>(LD) * k.B * S, 0.8);
        if (c.cell == deeprnn::Cell::lstm) c0 = random_vec(rng, static_cast<size_t>(LD) * k.B * c.hidden_size, 0.8);
    }
    const ref::Result want = ref::run(net, x, k.T, k.B, lengths, h0, c0);

    deeprnn::Model model(c, w);
    deeprnn::Session session(model);
    std::vector<float> xf = to_f(k.batch_first ? swap_tb(x, k.T, k.B, c.input_size) : x);
    std::vector<float> h0f = to_f(h0), c0f = to_f(c0);
    std::vector<int32_t> len32(lengths.begin(), lengths.end());
    std::vector<float> y(want.y.size(), -7.0f), hn(want.h_n.size()), cn(want.c_n.size());
    deeprnn::RunInput in;
    in.x = xf.data();
    in.seq_len = k.T;
    in.batch = k.B;
    in.batch_first = k.batch_first;
    in.lengths = k.lengths ? len32.data() : nullptr;
    in.h0 = k.init ? h0f.data() : nullptr;
    in.c0 = c0f.empty() ? nullptr : c0f.data();
    deeprnn::RunOutput out;
    out.y = y.data();
    out.h_n = hn.data();
    out.c_n = c.cell == deeprnn::Cell::lstm ? cn.data() : nullptr;
    session.run(in, out);
    const std::vector<double> y_want = k.batch_first ? swap_tb(want.y, k.T, k.B, static_cast<size_t>(D) * S) : want.y;
    expect_close(y, y_want, name + " y");
    expect_close(hn, want.h_n, name + " h_n");
    if (c.cell == deeprnn::Cell::lstm) expect_close(cn, want.c_n, name + " c_n");
    if (k.lengths) {  // padded steps are exactly zero, not merely small
        for (int b = 0; b < k.B; ++b)
            for (int t = lengths[b]; t < k.T; ++t)
                for (int j = 0; j < D * S; ++j) {
                    const size_t i = k.batch_first ? (static_cast<size_t>(b) * k.T + t) * D * S + j
                                                   : (static_cast<size_t>(t) * k.B + b) * D * S + j;
                    BOOST_REQUIRE_EQUAL(y[i], 0.0f);
                }
    }
    // A second run on the same session reproduces the first bit for bit.
    std::vector<float> y2(y.size());
    out.y = y2.data();
    session.run(in, out);
    BOOST_TEST(y2 == y);
}

deeprnn::Config config(deeprnn::Cell cell, int E, int H, int L = 1,
                       deeprnn::Direction dir = deeprnn::Direction::forward) {
    deeprnn::Config c;
    c.cell = cell;
    c.input_size = E;
    c.hidden_size = H;
    c.num_layers = L;
    c.direction = dir;
    return c;
}

const deeprnn::Cell kCells[] = {deeprnn::Cell::lstm, deeprnn::Cell::gru, deeprnn::Cell::rnn_tanh,
                                deeprnn::Cell::rnn_relu};

}  // namespace

BOOST_AUTO_TEST_SUITE(forward_vs_float64_reference)

BOOST_AUTO_TEST_CASE(every_cell_odd_sizes) {
    for (auto cell : kCells)
        for (auto variant : {deeprnn::GruVariant::linear_before_reset, deeprnn::GruVariant::reset_before_matmul}) {
            if (cell != deeprnn::Cell::gru && variant != deeprnn::GruVariant::linear_before_reset) continue;
            Case k;
            k.cfg = config(cell, 37, 53);
            k.cfg.gru_variant = variant;
            k.T = 7;
            k.B = 3;
            check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " E37 H53 B3");
            k.T = 1;
            k.B = 1;
            check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " T1 B1");
            k.cfg = config(cell, 1, 1);
            k.cfg.gru_variant = variant;
            k.T = 5;
            check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " E1 H1");
        }
}

BOOST_AUTO_TEST_CASE(batch_one_longer_sequence) {
    for (auto cell : kCells) {
        Case k;
        k.cfg = config(cell, 64, 64);
        k.T = 30;
        check_case(k, std::string(deeprnn::to_string(cell)) + " E64 H64 T30");
    }
}

BOOST_AUTO_TEST_CASE(stacked_bidirectional_with_lengths_and_states) {
    for (auto cell : kCells)
        for (auto variant : {deeprnn::GruVariant::linear_before_reset, deeprnn::GruVariant::reset_before_matmul}) {
            if (cell != deeprnn::Cell::gru && variant != deeprnn::GruVariant::linear_before_reset) continue;
            Case k;
            k.cfg = config(cell, 11, 9, 3, deeprnn::Direction::bidirectional);
            k.cfg.gru_variant = variant;
            k.T = 6;
            k.B = 4;
            k.lengths = true;
            k.init = true;
            check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " L3 bidir lengths h0");
            k.batch_first = true;
            check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " batch-first");
        }
}

BOOST_AUTO_TEST_CASE(lstm_projection) {
    Case k;
    k.cfg = config(deeprnn::Cell::lstm, 13, 17, 2, deeprnn::Direction::bidirectional);
    k.cfg.proj_size = 7;
    k.T = 5;
    k.B = 3;
    k.lengths = true;
    k.init = true;
    check_case(k, "lstm proj 7 L2 bidir");
}

BOOST_AUTO_TEST_CASE(clip_every_cell) {
    for (auto cell : kCells) {
        Case k;
        k.cfg = config(cell, 8, 6);
        k.cfg.clip = 0.3f;
        k.T = 5;
        k.B = 2;
        check_case(k, std::string(deeprnn::to_string(cell)) + " clip 0.3");
    }
}

// An ONNX LSTM with peepholes built from `c` against the reference; its
// Model::plan() names the setting (`says`).
void check_onnx_peepholes(deeprnn::Config c, const std::string& name, const std::string& says) {
    c.convention = deeprnn::Convention::onnx;
    c.peepholes = true;
    Case k;
    k.cfg = c;
    k.T = 6;
    k.B = 2;
    check_case(k, "onnx lstm peepholes " + name, true);
    std::mt19937 rng(1);
    const deeprnn::Model m(c, ref::onnx_weights(ref::random_net(c, rng, 0.5, true, true)));
    BOOST_TEST(m.plan().find(says) != std::string::npos, m.plan());
}

// Keras 2's hard_sigmoid gates (and another slope and offset), every gated
// cell and variant, with clip, peepholes, lengths and two layers; the
// reference applies the same gate (test/reference.hpp). hard_sigmoid differs
// from sigmoid by up to ~0.07 over [-2.5, 2.5] and 0.08 at the clamps, far
// above the tolerance, so a gate left at sigmoid fails.
BOOST_AUTO_TEST_CASE(hard_sigmoid_gates_every_gated_cell) {
    for (auto cell : {deeprnn::Cell::lstm, deeprnn::Cell::gru})
        for (auto variant : {deeprnn::GruVariant::linear_before_reset, deeprnn::GruVariant::reset_before_matmul})
            for (float alpha : {0.2f, 0.35f}) {
                if (cell == deeprnn::Cell::lstm && variant != deeprnn::GruVariant::linear_before_reset) continue;
                Case k;
                k.cfg = config(cell, 6, 9);
                k.cfg.gru_variant = variant;
                k.cfg.gate_activation = deeprnn::GateActivation::hard_sigmoid;
                k.cfg.hard_sigmoid_alpha = alpha;
                k.cfg.hard_sigmoid_beta = alpha == 0.2f ? 0.5f : 0.4f;
                k.cfg.num_layers = 2;
                k.cfg.clip = alpha == 0.2f ? 0.0f : 2.0f;
                k.T = 7;
                k.B = 3;
                k.lengths = true;
                check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " hard_sigmoid " +
                                  std::to_string(alpha));
            }
    deeprnn::Config c = config(deeprnn::Cell::lstm, 5, 7);
    c.gate_activation = deeprnn::GateActivation::hard_sigmoid;
    check_onnx_peepholes(c, "hard_sigmoid", "hard_sigmoid gates (0.2 x + 0.5)");
}

// Keras activation='relu' (LSTM's candidate and cell output, GRU's
// candidate), every gated cell and variant, with either gate, clip, lengths,
// peepholes and two layers; the reference applies relu where it had tanh
// (test/reference.hpp). The cell states here reach |c| ~ 1-3, where relu and
// tanh differ by far more than the tolerance, and negative pre-activations
// (half of them) give 0 instead of tanh's < 0, so a tanh left in fails.
BOOST_AUTO_TEST_CASE(relu_candidates_every_gated_cell) {
    for (auto cell : {deeprnn::Cell::lstm, deeprnn::Cell::gru})
        for (auto variant : {deeprnn::GruVariant::linear_before_reset, deeprnn::GruVariant::reset_before_matmul})
            for (bool hard : {false, true}) {
                if (cell == deeprnn::Cell::lstm && variant != deeprnn::GruVariant::linear_before_reset) continue;
                Case k;
                k.cfg = config(cell, 6, 9);
                k.cfg.gru_variant = variant;
                k.cfg.cell_activation = deeprnn::CellActivation::relu;
                if (hard) k.cfg.gate_activation = deeprnn::GateActivation::hard_sigmoid;
                k.cfg.num_layers = 2;
                k.cfg.clip = hard ? 2.0f : 0.0f;
                k.T = 7;
                k.B = 3;
                k.lengths = true;
                check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " relu" +
                                  (hard ? " hard_sigmoid" : ""));
            }
    deeprnn::Config c = config(deeprnn::Cell::lstm, 5, 7, 1, deeprnn::Direction::bidirectional);
    c.cell_activation = deeprnn::CellActivation::relu;
    check_onnx_peepholes(c, "bidirectional relu", "relu candidates");
}

BOOST_AUTO_TEST_CASE(onnx_peepholes_reverse_and_no_bias) {
    Case k;
    k.cfg = config(deeprnn::Cell::lstm, 5, 7);
    k.cfg.convention = deeprnn::Convention::onnx;
    k.cfg.peepholes = true;
    k.T = 6;
    k.B = 2;
    k.lengths = true;
    check_case(k, "onnx lstm peepholes", true);
    k.cfg.direction = deeprnn::Direction::reverse;
    check_case(k, "onnx lstm peepholes reverse", true);
    k.cfg.direction = deeprnn::Direction::bidirectional;
    k.cfg.clip = 0.5f;
    check_case(k, "onnx lstm peepholes bidir clip", true);
    Case g;
    g.cfg = config(deeprnn::Cell::gru, 4, 5);
    g.T = 4;
    g.bias = false;
    check_case(g, "torch gru without bias");
}

BOOST_AUTO_TEST_CASE(stream_in_chunks_equals_one_run) {
    for (auto cell : kCells) {
        std::mt19937 rng(test_seed());
        deeprnn::Config c = config(cell, 6, 10, 2);
        const ref::Net net = ref::random_net(c, rng, 0.5);
        deeprnn::Model model(c, ref::torch_weights(net));
        const int T = 9, B = 2;
        const std::vector<float> x = to_f(random_vec(rng, static_cast<size_t>(T) * B * 6, 1.0));
        std::vector<float> y_full(static_cast<size_t>(T) * B * 10), y_stream(y_full.size());
        deeprnn::Session session(model);
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = T;
        in.batch = B;
        deeprnn::RunOutput out;
        out.y = y_full.data();
        session.run(in, out);
        deeprnn::Stream stream(model, B);
        int t = 0;
        for (int chunk : {1, 3, 1, 4}) {
            stream.push(&x[static_cast<size_t>(t) * B * 6], chunk, &y_stream[static_cast<size_t>(t) * B * 10]);
            t += chunk;
        }
        double diff = 0;
        for (size_t i = 0; i < y_full.size(); ++i) diff = std::max(diff, double(std::fabs(y_stream[i] - y_full[i])));
        BOOST_TEST_MESSAGE(deeprnn::to_string(cell) << " stream vs run max diff " << diff);
        // Every output is one dot product in a fixed order, however rows are
        // grouped, so chunks agree with one run bit for bit.
        BOOST_TEST(diff == 0.0, deeprnn::to_string(cell) << ": chunked stream differs from one run by " << diff);
        stream.reset();
        stream.push(x.data(), T, y_stream.data());
        BOOST_TEST(y_stream == y_full, "a reset stream fed the whole sequence matches one run exactly");
    }
}

// Live streams whose frames arrive unevenly (Stream::push with lengths), one
// of them ended and its slot reset for a new sequence (Stream::reset(b)):
// every stream's outputs and states are bit for bit those of its sequence
// pushed alone, rows past a stream's frames are 0, and what lies in x past
// them (NaN here) is never read into a result. Bit-identity holds because
// each output is one dot product in a fixed order whatever the batch.
BOOST_AUTO_TEST_CASE(streams_that_arrive_unevenly_match_each_alone) {
    const float kNaN = std::numeric_limits<float>::quiet_NaN();
    for (auto cell : kCells)
        for (int threads : {1, 2}) {
            BOOST_TEST_CONTEXT(deeprnn::to_string(cell) << " threads " << threads) {
                std::mt19937 rng(test_seed());
                const int E = 5, H = 40, B = 3;
                deeprnn::Config c = config(cell, E, H, 2);
                c.threads = threads;
                c.max_batch = B;
                const ref::Net net = ref::random_net(c, rng, 0.5);
                const deeprnn::Model model(c, ref::torch_weights(net));
                // Four sequences: slot 0 and 2 each hold one; slot 1 holds one of 5
                // frames, then, after a reset, another of 6.
                const int len[4] = {9, 5, 8, 6};
                std::vector<std::vector<float>> seq(4), want_y(4), want_h(4), want_c(4);
                for (int q = 0; q < 4; ++q) {
                    seq[q] = to_f(random_vec(rng, static_cast<size_t>(len[q]) * E, 1.0));
                    deeprnn::Stream alone(model, 1);
                    want_y[q].resize(static_cast<size_t>(len[q]) * H);
                    alone.push(seq[q].data(), len[q], want_y[q].data());
                    want_h[q].assign(alone.h(), alone.h() + 2 * H);
                    if (alone.c()) want_c[q].assign(alone.c(), alone.c() + 2 * H);
                }
                // Per push: frames, and per slot how many it takes.
                struct Push { int frames, n[B]; };
                const Push pushes[] = {{3, {3, 0, 2}}, {2, {1, 2, 2}}, {4, {4, 3, 0}}, {2, {0, 2, 1}}, {4, {1, 4, 3}}};
                deeprnn::Stream live(model, B);
                std::vector<std::vector<float>> got_y(4);
                int slot_seq[B] = {0, 1, 2}, pos[B] = {0, 0, 0};
                for (const Push& p : pushes) {
                    if (slot_seq[1] == 1 && pos[1] == len[1]) {  // slot 1's first sequence is done
                        BOOST_TEST(std::equal(want_h[1].begin(), want_h[1].begin() + H, live.h() + H));  // layer 0, slot 1
                        live.reset(1);
                        slot_seq[1] = 3;
                        pos[1] = 0;
                    }
                    std::vector<float> x(static_cast<size_t>(p.frames) * B * E, kNaN), y(static_cast<size_t>(p.frames) * B * H, kNaN);
                    for (int b = 0; b < B; ++b)
                        for (int t = 0; t < p.n[b]; ++t)
                            std::copy_n(&seq[slot_seq[b]][static_cast<size_t>(pos[b] + t) * E], E, &x[(static_cast<size_t>(t) * B + b) * E]);
                    live.push(x.data(), p.frames, y.data(), p.n);
                    for (int b = 0; b < B; ++b) {
                        for (int t = 0; t < p.frames; ++t) {
                            const float* row = &y[(static_cast<size_t>(t) * B + b) * H];
                            if (t < p.n[b]) got_y[slot_seq[b]].insert(got_y[slot_seq[b]].end(), row, row + H);
                            else BOOST_TEST(std::all_of(row, row + H, [](float v) { return v == 0.0f; }), "slot " << b << " row " << t);
                        }
                        pos[b] += p.n[b];
                    }
                }
                for (int q : {0, 2, 3}) BOOST_TEST(pos[q == 3 ? 1 : q] == len[q]);
                for (int q = 0; q < 4; ++q) BOOST_TEST(got_y[q] == want_y[q], "sequence " << q);
                for (int b = 0; b < B; ++b) {  // final states, layers 0 and 1, of the slots' last sequences
                    const int q = slot_seq[b];
                    for (int l = 0; l < 2; ++l) {
                        BOOST_TEST(std::equal(want_h[q].begin() + l * H, want_h[q].begin() + (l + 1) * H, live.h() + (l * B + b) * H));
                        if (live.c())
                            BOOST_TEST(std::equal(want_c[q].begin() + l * H, want_c[q].begin() + (l + 1) * H, live.c() + (l * B + b) * H));
                    }
                }
                const int32_t bad[B] = {0, 4, 1};
                std::vector<float> x(static_cast<size_t>(3) * B * E, 0.0f);
                BOOST_CHECK_EXCEPTION(live.push(x.data(), 3, nullptr, bad), deeprnn::Error, [](const deeprnn::Error& e) {
                    return std::string(e.what()).find("Stream::push lengths[1] = 4") != std::string::npos;
                });
                BOOST_CHECK_EXCEPTION(live.reset(B), deeprnn::Error, [](const deeprnn::Error& e) {
                    return std::string(e.what()).find("Stream::reset stream") != std::string::npos;
                });
            }
        }
}

BOOST_AUTO_TEST_SUITE_END()

// Hidden sizes large enough that the plan splits units across workers
// (recurrent weights above the split threshold), with more threads than
// cores, odd groups, both GRU variants' extra barrier and the projection's.
BOOST_AUTO_TEST_SUITE(partitioned_across_workers)

BOOST_AUTO_TEST_CASE(split_units_match_reference) {
    for (int threads : {2, 3, 4})
        for (auto cell : kCells)
            for (auto variant : {deeprnn::GruVariant::linear_before_reset, deeprnn::GruVariant::reset_before_matmul}) {
                if (cell != deeprnn::Cell::gru && variant != deeprnn::GruVariant::linear_before_reset) continue;
                Case k;
                k.cfg = config(cell, 37, cell == deeprnn::Cell::lstm ? 200 : 260, 2, deeprnn::Direction::bidirectional);
                k.cfg.gru_variant = variant;
                forced::set_threads(k.cfg, threads);
                k.T = 5;
                k.B = 3;
                k.lengths = true;
                k.init = true;
                check_case(k, std::string(deeprnn::to_string(cell)) + "/" + deeprnn::to_string(variant) + " threads " +
                                  std::to_string(threads));
            }
}

BOOST_AUTO_TEST_CASE(split_projection_matches_reference) {
    for (int threads : {1, 2, 3}) {
        Case k;
        k.cfg = config(deeprnn::Cell::lstm, 21, 230, 2);
        k.cfg.proj_size = 37;
        forced::set_threads(k.cfg, threads);
        k.T = 4;
        k.B = 2;
        k.lengths = true;
        check_case(k, "lstm proj 37 threads " + std::to_string(threads));
    }
}

// The same model with 1..4 threads gives bit-identical outputs: every output
// is one dot product in a fixed order, whoever computes it.
BOOST_AUTO_TEST_CASE(bit_identical_across_thread_counts) {
    for (auto cell : kCells) {
        std::mt19937 rng(test_seed());
        deeprnn::Config c = config(cell, 30, 250, 2, deeprnn::Direction::bidirectional);
        const ref::Net net = ref::random_net(c, rng, 0.1);
        const int T = 6, B = 2;
        const std::vector<float> x = to_f(random_vec(rng, static_cast<size_t>(T) * B * 30, 1.0));
        std::vector<float> first;
        for (int threads = 1; threads <= 4; ++threads) {
            forced::set_threads(c, threads);
            const std::vector<float> y = ref::run_model(deeprnn::Model(c, ref::torch_weights(net)), x, T, B);
            if (first.empty()) first = y;
            BOOST_TEST((y == first), deeprnn::to_string(cell) << ": threads=" << threads << " differs from threads=1");
        }
    }
}

// Batch 1 folds the next chunk's input projection into each step where the
// kernels allow (AVX-512 f32, VNNI int8 or AVX512_BF16 bf16, E <= H): its outputs must be the
// bits of the plain path's, which a batch of two runs. T = 15 folds nothing,
// 16 two whole chunks, 37 a partial last chunk; two layers, so the second
// layer folds too; 1-3 threads; sizes that leave partial panel groups (GRU
// and RNN with 16-unit slices). Exact equality: every output is the same
// chain of fused multiply-adds in the same order, for bf16 the same chain of
// dot products of rows rounded alike, and for int8 the same exact integer
// sums and last rounding of each row quantised alike (kernels.hpp).
BOOST_AUTO_TEST_CASE(batch_one_folded_projection_equals_the_plain_path) {
    const bool int8_folds = __builtin_cpu_supports("avx512f") && deeprnn::detail::cpu_has_vnni();
    const bool bf16_folds = __builtin_cpu_supports("avx512f") && deeprnn::detail::cpu_has_bf16_dot();
    for (auto precision : {deeprnn::WeightPrecision::f32, deeprnn::WeightPrecision::int8, deeprnn::WeightPrecision::bf16})
        for (auto cell : kCells)
            for (auto [E, H] : {std::pair{40, 100}, std::pair{12, 20}, std::pair{53, 53}}) {
                if (precision == deeprnn::WeightPrecision::int8 && !int8_folds) break;
                if (precision == deeprnn::WeightPrecision::bf16 && !bf16_folds) break;
                std::mt19937 rng(test_seed());
                deeprnn::Config c = config(cell, E, H, 2);
                c.max_batch = 2;
                c.weight_precision = precision;
                c.fold_projection = 1;  // the folded kernel's bits, whether or not it pays on this machine
                const ref::Net net = ref::random_net(c, rng, 0.2);
                for (int threads = 1; threads <= 3; ++threads) {
                    c.threads = threads;
                    // Units split among the workers, whatever the machine model
                    // would choose: pipelined layers and critical path first do not fold.
                    // No more workers than vectors of hidden units (H = 20 has two at
                    // AVX-512): a split wider than that is not a candidate, so the model
                    // would calibrate instead, and on some hosts pick pipelined layers.
                    const int width = deeprnn::detail::isa_width(deeprnn::detail::detect_isa());
                    deeprnn::detail::sched::ExecutionChoice split;
                    split.workers = std::min(threads, (H + width - 1) / width);
                    forced::force_plan(c, split, "fold.txt");
                    const deeprnn::Model model(c, ref::torch_weights(net));
                    if (__builtin_cpu_supports("avx512f"))
                        BOOST_TEST(model.plan().find("input projection folded") != std::string::npos, model.plan());
                    for (int T : {15, 16, 37}) {
                        const std::vector<float> x = to_f(random_vec(rng, static_cast<size_t>(T) * E, 1.0));
                        std::vector<float> x2(x.size() * 2);  // [T, 2, E]: the same sequence twice
                        for (int t = 0; t < T; ++t)
                            for (int b = 0; b < 2; ++b) std::copy_n(&x[t * E], E, &x2[(t * 2 + b) * E]);
                        const std::vector<float> one = ref::run_model(model, x, T, 1), two = ref::run_model(model, x2, T, 2);
                        for (int t = 0; t < T; ++t)
                            for (int b = 0; b < 2; ++b)
                                BOOST_TEST((std::vector<float>(&one[t * H], &one[t * H] + H) ==
                                            std::vector<float>(&two[(t * 2 + b) * H], &two[(t * 2 + b) * H] + H)),
                                           deeprnn::to_string(cell) << " " << deeprnn::to_string(precision) << " E=" << E
                                                                    << " H=" << H << " threads=" << threads << " T=" << T
                                                                    << " t=" << t);
                    }
                }
            }
    deeprnn::detail::sched::plan_cache_clear_memory();
    std::filesystem::remove_all(std::filesystem::path(forced::temp_path("fold.txt")).parent_path());
}

BOOST_AUTO_TEST_SUITE_END()
