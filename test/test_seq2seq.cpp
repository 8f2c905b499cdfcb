// Sequence-to-sequence blocks (deeprnn.hpp section 13) against float64
// references written here from the formulas: Dense, Embedding, the three
// attention scores with length masks, the decoder step (recurrent part from
// test/reference.hpp), reordering, and beam search on a hand-built decoder
// whose best output is known by enumerating every sequence.
//
// Tolerances. Weights and inputs are drawn so every dot product has at most
// ~70 terms whose sum of magnitudes is about 1-3 (weights within
// +-1/sqrt(fan-in), |x| <= 1). float32 accumulation then errs by at most
// ~K * 2^-24 * Σ|terms| ~ 1e-5 and typically ~1e-6; tanh/sigmoid add a few
// ulp; softmax and the weighted sum of attention are contractions. So Dense
// and attention outputs must be within 2e-5 (abs) of float64, and decoder
// logits, after three chained steps (the recurrence contracts errors,
// activation slopes <= 1), within 5e-5. A wrong gate, mask or layout errs by
// ~1e-1. Masked attention weights must be exactly 0.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "reference.hpp"
#include "seed.hpp"

namespace {

using Vec = std::vector<double>;

Vec rnd(std::mt19937& rng, size_t n, double scale) {
    std::uniform_real_distribution<double> u(-scale, scale);
    Vec v(n);
    for (double& e : v) e = static_cast<float>(u(rng));  // exactly representable in float32
    return v;
}

std::vector<float> f32(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

double max_err(const std::vector<float>& got, const Vec& want) {
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    double m = 0;
    for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::fabs(got[i] - want[i]));
    return m;
}

template <typename F>
void expect_error(F&& f, const std::string& part) {
    try {
        f();
        BOOST_ERROR("expected deeprnn::Error containing \"" << part << "\"");
    } catch (const deeprnn::Error& e) {
        BOOST_TEST(std::string(e.what()).find(part) != std::string::npos, "message \"" << e.what() << "\" lacks \"" << part << "\"");
    }
}

// ---- float64 references ----

// y[r] = act(W x[r] + b), W [O, I].
Vec ref_dense(const Vec& W, const Vec& b, int O, int I, const Vec& x, int rows, deeprnn::Activation act) {
    Vec y(static_cast<size_t>(rows) * O);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < O; ++o) {
            double a = b.empty() ? 0 : b[o];
            for (int i = 0; i < I; ++i) a += W[static_cast<size_t>(o) * I + i] * x[static_cast<size_t>(r) * I + i];
            switch (act) {
                case deeprnn::Activation::tanh: a = std::tanh(a); break;
                case deeprnn::Activation::relu: a = std::max(0.0, a); break;
                case deeprnn::Activation::sigmoid: a = ref::sigm(a); break;
                default: break;
            }
            y[static_cast<size_t>(r) * O + o] = a;
        }
    return y;
}

struct AttnParams {
    deeprnn::AttentionScore kind;
    int Hd, He, A;
    Vec W;              // general [Hd, He]
    Vec Wq, bq, Wk, v;  // additive [A, Hd], [A], [A, He], [A]
};

// Context [B, He] and weights [B, S] for query [B, Hd], enc [S, B, He].
std::pair<Vec, Vec> ref_attend(const AttnParams& p, const Vec& q, const Vec& enc, int S, int B, const std::vector<int>& len) {
    Vec ctx(static_cast<size_t>(B) * p.He, 0.0), w(static_cast<size_t>(B) * S, 0.0);
    for (int b = 0; b < B; ++b) {
        const double* qb = &q[static_cast<size_t>(b) * p.Hd];
        Vec sc(len[b]);
        for (int s = 0; s < len[b]; ++s) {
            const double* e = &enc[(static_cast<size_t>(s) * B + b) * p.He];
            double a = 0;
            if (p.kind == deeprnn::AttentionScore::dot) {
                for (int j = 0; j < p.He; ++j) a += qb[j] * e[j];
            } else if (p.kind == deeprnn::AttentionScore::general) {
                for (int i = 0; i < p.Hd; ++i)
                    for (int j = 0; j < p.He; ++j) a += qb[i] * p.W[static_cast<size_t>(i) * p.He + j] * e[j];
            } else {
                for (int k = 0; k < p.A; ++k) {
                    double t = p.bq[k];
                    for (int i = 0; i < p.Hd; ++i) t += p.Wq[static_cast<size_t>(k) * p.Hd + i] * qb[i];
                    for (int j = 0; j < p.He; ++j) t += p.Wk[static_cast<size_t>(k) * p.He + j] * e[j];
                    a += p.v[k] * std::tanh(t);
                }
            }
            sc[s] = a;
        }
        const double top = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double& s : sc) sum += s = std::exp(s - top);
        for (int s = 0; s < len[b]; ++s) {
            w[static_cast<size_t>(b) * S + s] = sc[s] / sum;
            for (int j = 0; j < p.He; ++j) ctx[static_cast<size_t>(b) * p.He + j] += sc[s] / sum * enc[(static_cast<size_t>(s) * B + b) * p.He + j];
        }
    }
    return {ctx, w};
}

AttnParams random_attention(deeprnn::AttentionScore kind, int Hd, int He, int A, std::mt19937& rng) {
    AttnParams p{kind, Hd, He, A, {}, {}, {}, {}, {}};
    p.W = rnd(rng, static_cast<size_t>(Hd) * He, 1.0 / std::sqrt(He));
    p.Wq = rnd(rng, static_cast<size_t>(A) * Hd, 1.0 / std::sqrt(Hd));
    p.bq = rnd(rng, A, 0.5);
    p.Wk = rnd(rng, static_cast<size_t>(A) * He, 1.0 / std::sqrt(He));
    p.v = rnd(rng, A, 1.0 / std::sqrt(A));
    return p;
}

deeprnn::Attention make_attention(const AttnParams& p) {
    using deeprnn::Tensor;
    switch (p.kind) {
        case deeprnn::AttentionScore::dot: return deeprnn::Attention::dot(p.He);
        case deeprnn::AttentionScore::general: return deeprnn::Attention::general(ref::tensor(p.W, {p.Hd, p.He}));
        default: {
            const Tensor bq = ref::tensor(p.bq, {p.A});
            return deeprnn::Attention::additive(deeprnn::Dense(ref::tensor(p.Wq, {p.A, p.Hd}), &bq),
                                                deeprnn::Dense(ref::tensor(p.Wk, {p.A, p.He})), ref::tensor(p.v, {p.A}));
        }
    }
}

// A decoder with random weights and its float64 twin.
struct RefDecoder {
    ref::Net rnn;
    AttnParams attn;
    Vec emb, Wo, bo;  // [V, E], [V, Sd + He], [V]
    int V, E, He, Sd, L;
    deeprnn::Decoder make() const {
        deeprnn::Config cfg = rnn.cfg;
        const deeprnn::Tensor bias = ref::tensor(bo, {V});
        return deeprnn::Decoder(deeprnn::Embedding(ref::tensor(emb, {V, E})), deeprnn::Model(cfg, ref::torch_weights(rnn)),
                                make_attention(attn), deeprnn::Dense(ref::tensor(Wo, {V, Sd + He}), &bias));
    }
    // One step in float64: updates h/c [L, B, .], returns logits [B, V] and attention weights.
    Vec step(Vec& h, Vec& c, const std::vector<int>& tok, const Vec& enc, int S, const std::vector<int>& len, Vec* w) const {
        const int B = static_cast<int>(tok.size());
        const Vec query(h.begin() + static_cast<size_t>(L - 1) * B * Sd, h.end());
        auto [ctx, wts] = ref_attend(attn, query, enc, S, B, len);
        if (w) *w = wts;
        Vec x(static_cast<size_t>(B) * (E + He));
        for (int b = 0; b < B; ++b) {
            for (int e = 0; e < E; ++e) x[static_cast<size_t>(b) * (E + He) + e] = emb[static_cast<size_t>(tok[b]) * E + e];
            for (int j = 0; j < He; ++j) x[static_cast<size_t>(b) * (E + He) + E + j] = ctx[static_cast<size_t>(b) * He + j];
        }
        const ref::Result r = ref::run(rnn, x, 1, B, {}, h, rnn.cfg.cell == deeprnn::Cell::lstm ? c : Vec());
        h = r.h_n;
        if (rnn.cfg.cell == deeprnn::Cell::lstm) c = r.c_n;
        Vec hc(static_cast<size_t>(B) * (Sd + He));
        for (int b = 0; b < B; ++b) {
            for (int j = 0; j < Sd; ++j) hc[static_cast<size_t>(b) * (Sd + He) + j] = r.y[static_cast<size_t>(b) * Sd + j];
            for (int j = 0; j < He; ++j) hc[static_cast<size_t>(b) * (Sd + He) + Sd + j] = ctx[static_cast<size_t>(b) * He + j];
        }
        return ref_dense(Wo, bo, V, Sd + He, hc, B, deeprnn::Activation::none);
    }
};

RefDecoder random_decoder(deeprnn::Cell cell, deeprnn::AttentionScore kind, int layers, std::mt19937& rng) {
    RefDecoder d;
    d.V = 11; d.E = 6; d.He = 9; d.Sd = kind == deeprnn::AttentionScore::dot ? 9 : 10; d.L = layers;
    deeprnn::Config cfg;
    cfg.cell = cell;
    cfg.input_size = d.E + d.He;
    cfg.hidden_size = d.Sd;
    cfg.num_layers = layers;
    cfg.max_batch = 8;
    cfg.threads = 1;
    d.rnn = ref::random_net(cfg, rng, 1.0 / std::sqrt(cfg.input_size));
    d.attn = random_attention(kind, d.Sd, d.He, 7, rng);
    d.emb = rnd(rng, static_cast<size_t>(d.V) * d.E, 1.0);
    d.Wo = rnd(rng, static_cast<size_t>(d.V) * (d.Sd + d.He), 2.0 / std::sqrt(d.Sd + d.He));
    d.bo = rnd(rng, d.V, 0.5);
    return d;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(seq2seq)

BOOST_AUTO_TEST_CASE(dense_matches_float64) {
    std::mt19937 rng(test_seed());
    using A = deeprnn::Activation;
    for (A act : {A::none, A::tanh, A::relu, A::sigmoid})
        for (int O : {1, 5, 16, 37})
            for (int I : {1, 7, 33})
                for (int rows : {1, 3, 9}) {
                    const Vec W = rnd(rng, static_cast<size_t>(O) * I, 1.0 / std::sqrt(I)), b = rnd(rng, O, 0.5);
                    const Vec x = rnd(rng, static_cast<size_t>(rows) * I, 1.0);
                    const deeprnn::Tensor bt = ref::tensor(b, {O});
                    const bool with_bias = O % 2 == 1;
                    deeprnn::Dense d(ref::tensor(W, {O, I}), with_bias ? &bt : nullptr, act);
                    BOOST_TEST(d.in_features() == I);
                    BOOST_TEST(d.out_features() == O);
                    std::vector<float> y(static_cast<size_t>(rows) * O);
                    d.forward(f32(x).data(), rows, y.data());
                    const double e = max_err(y, ref_dense(W, with_bias ? b : Vec(), O, I, x, rows, act));
                    BOOST_TEST(e <= 2e-5, deeprnn::to_string(act) << " O=" << O << " I=" << I << " rows=" << rows << ": error " << e);
                }
}

BOOST_AUTO_TEST_CASE(dense_and_embedding_errors) {
    deeprnn::Tensor w;
    w.shape = {3, 0};
    expect_error([&] { deeprnn::Dense d(w); }, "Dense weight shape = [3, 0]");
    w.shape = {3, 2};
    w.data.assign(6, 0.5f);
    deeprnn::Tensor b;
    b.shape = {2};
    b.data.assign(2, 0.0f);
    expect_error([&] { deeprnn::Dense d(w, &b); }, "Dense bias shape = [2]: must be [O] = [3]");
    deeprnn::Dense d(w);
    std::vector<float> x(4, 1.0f);
    expect_error([&] { d.forward(x.data(), 2, x.data()); }, "Dense::forward y overlaps x");
    expect_error([&] { d.forward(x.data(), -1, nullptr); }, "Dense::forward rows = -1");

    deeprnn::Tensor t;
    t.shape = {4, 2};
    t.data = {0, 1, 10, 11, 20, 21, 30, 31};
    deeprnn::Embedding e(t);
    BOOST_TEST(e.vocab_size() == 4);
    BOOST_TEST(e.dim() == 2);
    const int32_t ids[] = {3, 0, 2};
    std::vector<float> out(9, -1.0f);
    e.lookup(ids, 3, out.data(), 3);  // a strided destination keeps the gaps
    const std::vector<float> want = {30, 31, -1, 0, 1, -1, 20, 21, -1};
    BOOST_TEST(out == want, boost::test_tools::per_element());
    const int32_t bad[] = {1, 4};
    expect_error([&] { e.lookup(bad, 2, out.data()); }, "Embedding::lookup ids[1] = 4: must be in [0, V = 4)");
    t.shape = {4};
    expect_error([&] { deeprnn::Embedding x(t); }, "Embedding table shape = [4]");
}

BOOST_AUTO_TEST_CASE(attention_matches_float64_with_masks) {
    std::mt19937 rng(test_seed() + 1);
    using K = deeprnn::AttentionScore;
    for (K kind : {K::dot, K::general, K::additive})
        for (int S : {1, 4, 13})
            for (int B : {1, 3}) {
                const int He = 9, Hd = kind == K::dot ? 9 : 5;
                const AttnParams p = random_attention(kind, Hd, He, 6, rng);
                const deeprnn::Attention a = make_attention(p);
                BOOST_TEST((a.score() == kind));
                BOOST_TEST(a.query_size() == Hd);
                BOOST_TEST(a.encoder_size() == He);
                const Vec q = rnd(rng, static_cast<size_t>(B) * Hd, 1.0), enc = rnd(rng, static_cast<size_t>(S) * B * He, 1.0);
                std::vector<int> len(B);
                std::vector<int32_t> len32(B);
                for (int b = 0; b < B; ++b) len32[b] = len[b] = 1 + static_cast<int>(rng() % S);
                len[0] = len32[0] = S;  // one full row
                std::vector<float> ctx(static_cast<size_t>(B) * He), w(static_cast<size_t>(B) * S, -1.0f);
                a.attend(f32(q).data(), f32(enc).data(), S, B, len32.data(), ctx.data(), w.data());
                const auto [rc, rw] = ref_attend(p, q, enc, S, B, len);
                const std::string what = std::string(deeprnn::to_string(kind)) + " S=" + std::to_string(S) + " B=" + std::to_string(B);
                BOOST_TEST(max_err(ctx, rc) <= 2e-5, what << ": context error " << max_err(ctx, rc));
                BOOST_TEST(max_err(w, rw) <= 2e-5, what << ": weight error " << max_err(w, rw));
                for (int b = 0; b < B; ++b) {
                    double sum = 0;
                    for (int s = 0; s < S; ++s) {
                        sum += w[static_cast<size_t>(b) * S + s];
                        if (s >= len[b]) BOOST_TEST(w[static_cast<size_t>(b) * S + s] == 0.0f, what << ": masked weight not zero");
                    }
                    BOOST_TEST(std::fabs(sum - 1.0) <= 1e-5, what << ": weights sum to " << sum);
                }
                // Without lengths every position counts; weights are optional.
                std::vector<float> ctx2(ctx.size());
                a.attend(f32(q).data(), f32(enc).data(), S, B, nullptr, ctx2.data());
                const auto full = ref_attend(p, q, enc, S, B, std::vector<int>(B, S));
                BOOST_TEST(max_err(ctx2, full.first) <= 2e-5, what << ": unmasked context");
            }
}

BOOST_AUTO_TEST_CASE(attention_errors) {
    const deeprnn::Attention a = deeprnn::Attention::dot(2);
    std::vector<float> q(4), enc(12), ctx(4);
    const int32_t len[] = {3, 0};
    expect_error([&] { a.attend(q.data(), enc.data(), 3, 2, len, ctx.data()); }, "Attention::attend lengths[1] = 0: must be in [1, S = 3]");
    expect_error([&] { a.attend(q.data(), enc.data(), 0, 2, nullptr, ctx.data()); }, "Attention::attend S = 0");
    expect_error([] { deeprnn::Attention::dot(0); }, "Attention::dot size = 0");
    deeprnn::Tensor w3;
    w3.shape = {3, 2};
    w3.data.assign(6, 0.1f);
    deeprnn::Tensor v;
    v.shape = {4};
    v.data.assign(4, 1.0f);
    expect_error([&] { deeprnn::Attention::additive(deeprnn::Dense(w3), deeprnn::Dense(w3), v); },
                 "Attention::additive query.out_features = 3: must equal v's size A = 4");
}

BOOST_AUTO_TEST_CASE(decoder_steps_match_float64) {
    std::mt19937 rng(test_seed() + 2);
    using K = deeprnn::AttentionScore;
    using C = deeprnn::Cell;
    struct Case { C cell; K kind; int layers; };
    for (const Case& cs : {Case{C::gru, K::additive, 1}, Case{C::gru, K::dot, 2}, Case{C::lstm, K::general, 2}}) {
        const RefDecoder rd = random_decoder(cs.cell, cs.kind, cs.layers, rng);
        const deeprnn::Decoder dec = rd.make();
        BOOST_TEST(dec.vocab_size() == rd.V);
        const int B = 3, S = 5;
        const Vec enc = rnd(rng, static_cast<size_t>(S) * B * rd.He, 1.0);
        const std::vector<int> len = {5, 2, 4};
        const std::vector<int32_t> len32(len.begin(), len.end());
        Vec h = rnd(rng, static_cast<size_t>(rd.L) * B * rd.Sd, 0.5), c = rnd(rng, static_cast<size_t>(rd.L) * B * rd.Sd, 0.5);
        deeprnn::DecoderState st(dec, B);
        BOOST_TEST(st.source_length() == 0);
        st.start(f32(enc).data(), S, len32.data(), f32(h).data(), cs.cell == C::lstm ? f32(c).data() : nullptr);
        BOOST_TEST(st.source_length() == S);
        const std::string what = std::string(deeprnn::to_string(cs.cell)) + "/" + deeprnn::to_string(cs.kind) + " L=" + std::to_string(cs.layers);
        Vec enc_ref = enc;
        std::vector<int> len_ref = len;
        for (int t = 0; t < 3; ++t) {
            std::vector<int> tok(B);
            for (int& v : tok) v = static_cast<int>(rng() % rd.V);
            const std::vector<int32_t> tok32(tok.begin(), tok.end());
            std::vector<float> logits(static_cast<size_t>(B) * rd.V), w(static_cast<size_t>(B) * S);
            st.step(tok32.data(), logits.data(), w.data());
            Vec rw;
            const Vec want = rd.step(h, c, tok, enc_ref, S, len_ref, &rw);
            BOOST_TEST(max_err(logits, want) <= 5e-5, what << " step " << t << ": logits error " << max_err(logits, want));
            BOOST_TEST(max_err(w, rw) <= 2e-5, what << " step " << t << ": attention error " << max_err(w, rw));
            if (t == 1) {  // reorder: rows take rows {2, 2, 0}; the reference gathers the same
                const std::vector<int32_t> from = {2, 2, 0};
                st.reorder(from.data());
                auto gather = [&](Vec& v, int planes, int width) {
                    Vec g(v.size());
                    for (int p = 0; p < planes; ++p)
                        for (int b = 0; b < B; ++b)
                            for (int j = 0; j < width; ++j)
                                g[(static_cast<size_t>(p) * B + b) * width + j] = v[(static_cast<size_t>(p) * B + from[b]) * width + j];
                    v = g;
                };
                gather(h, rd.L, rd.Sd);
                gather(c, rd.L, rd.Sd);
                gather(enc_ref, S, rd.He);
                len_ref = {len[2], len[2], len[0]};
            }
        }
        const int32_t bad[] = {0, rd.V, 0};
        std::vector<float> logits(static_cast<size_t>(B) * rd.V);
        expect_error([&] { st.step(bad, logits.data()); }, "ids[1] = 11");
        const int32_t bad_from[] = {0, 3, 0};
        expect_error([&] { st.reorder(bad_from); }, "DecoderState::reorder from[1] = 3: must be in [0, batch = 3)");
    }
}

BOOST_AUTO_TEST_CASE(decoder_errors) {
    std::mt19937 rng(test_seed() + 3);
    const RefDecoder rd = random_decoder(deeprnn::Cell::gru, deeprnn::AttentionScore::additive, 1, rng);
    deeprnn::Config cfg = rd.rnn.cfg;
    const deeprnn::Model rnn(cfg, ref::torch_weights(rd.rnn));
    const deeprnn::Embedding wide(ref::tensor(Vec(static_cast<size_t>(rd.V) * (rd.E + 1), 0.1), {rd.V, rd.E + 1}));
    const deeprnn::Dense out(ref::tensor(rd.Wo, {rd.V, rd.Sd + rd.He}));
    expect_error([&] { deeprnn::Decoder d(wide, rnn, make_attention(rd.attn), out); },
                 "Decoder rnn Config.input_size = 15: must be embedding dim + attention encoder size = 7 + 9");
    const deeprnn::Decoder dec = rd.make();
    deeprnn::DecoderState st(dec, 2);
    const int32_t tok[] = {0, 0};
    std::vector<float> logits(2 * rd.V);
    expect_error([&] { st.step(tok, logits.data()); }, "DecoderState::step: called before start()");
    expect_error([&] { deeprnn::DecoderState s(dec, 9); }, "Stream batch = 9");
    std::vector<float> enc(rd.He * 2 * 3);
    const int32_t len[] = {3, 4};
    expect_error([&] { st.start(enc.data(), 3, len); }, "DecoderState::start lengths[1] = 4: must be in [1, S = 3]");
    deeprnn::BeamOptions o;
    o.beam = 0;
    expect_error([&] { deeprnn::beam_search(dec, enc.data(), 3, o); }, "BeamOptions.beam = 0");
    o.beam = 2;
    o.nbest = 3;
    expect_error([&] { deeprnn::beam_search(dec, enc.data(), 3, o); }, "BeamOptions.nbest = 3: must be in [1, beam = 2]");
    o.nbest = 1;
    o.end_token = rd.V;
    expect_error([&] { deeprnn::beam_search(dec, enc.data(), 3, o); }, "BeamOptions.end_token = 11");
}

// A decoder whose next-token distribution depends only on the previous token:
// h = tanh(3 * onehot(prev)) through a one-layer tanh RNN with W_hh = 0, and
// the output layer maps h back to logit row log P[prev] (context is 0: the
// encoder outputs are zero). Token 0 is the start, 1 the end.
using Table = std::vector<std::vector<double>>;

// From start A (2) is likelier (0.6) than B (3) (0.4), but after A the end
// token has 0.4 while after B it has 0.97: greedy says "A end" (p 0.24), the
// best is "B end" (p 0.388).
const Table kGreedyTrap = {
    {0.0001, 0.0001, 0.5998, 0.4},  // after start
    {0.25, 0.25, 0.25, 0.25},       // after end (never used)
    {0.0001, 0.4, 0.3, 0.2999},     // after A
    {0.0001, 0.97, 0.0149, 0.015},  // after B
};

// The best sequence "A D end" (p 0.87) ends last: at step 2 three unlikely
// hypotheses end beside "A D". A search that stopped once `beam` hypotheses
// had ended would return one of them. Tokens: 2 A, 3 B, 4 C, 5 D.
const Table kLateBest = {
    {0.0001, 0.03, 0.9098, 0.03, 0.03, 0.0001},   // after start
    {1 / 6., 1 / 6., 1 / 6., 1 / 6., 1 / 6., 1 / 6.},  // after end
    {0.0001, 0.01, 0.0001, 0.01, 0.01, 0.9698},   // after A
    {0.002, 0.99, 0.002, 0.002, 0.002, 0.002},    // after B
    {0.004, 0.98, 0.004, 0.004, 0.004, 0.004},    // after C
    {0.002, 0.99, 0.002, 0.002, 0.002, 0.002},    // after D
};

deeprnn::Decoder markov_decoder(const Table& P) {
    const int V = static_cast<int>(P.size());
    deeprnn::Config cfg;
    cfg.cell = deeprnn::Cell::rnn_tanh;
    cfg.input_size = V + 1;  // embedding V + context 1
    cfg.hidden_size = V;
    cfg.max_batch = 8;
    cfg.threads = 1;
    Vec w_ih(V * (V + 1), 0.0), w_hh(V * V, 0.0), emb(V * V, 0.0), wo(V * (V + 1), 0.0);
    for (int i = 0; i < V; ++i) {
        w_ih[i * (V + 1) + i] = 3.0;
        emb[i * V + i] = 1.0;
    }
    for (int v = 0; v < V; ++v)
        for (int prev = 0; prev < V; ++prev) wo[v * (V + 1) + prev] = std::log(P[prev][v]) / std::tanh(3.0);
    deeprnn::Weights w;
    w["weight_ih_l0"] = ref::tensor(w_ih, {V, V + 1});
    w["weight_hh_l0"] = ref::tensor(w_hh, {V, V});
    return deeprnn::Decoder(deeprnn::Embedding(ref::tensor(emb, {V, V})), deeprnn::Model(cfg, w),
                            deeprnn::Attention::general(ref::tensor(Vec(V, 0.0), {V, 1})),
                            deeprnn::Dense(ref::tensor(wo, {V, V + 1})));
}

// Every finished sequence of at most `max_len` tokens with its log-probability, best first.
std::vector<std::pair<double, std::vector<int>>> enumerate_sequences(const Table& P, int max_len) {
    const int V = static_cast<int>(P.size());
    std::vector<std::pair<double, std::vector<int>>> all, open = {{0.0, {}}};
    for (int t = 0; t < max_len; ++t) {
        std::vector<std::pair<double, std::vector<int>>> next;
        for (const auto& [lp, seq] : open)
            for (int v = 0; v < V; ++v) {
                std::vector<int> s = seq;
                s.push_back(v);
                (v == 1 ? all : next).push_back({lp + std::log(P[seq.empty() ? 0 : seq.back()][v]), s});
            }
        open = next;
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    return all;
}

BOOST_AUTO_TEST_CASE(beam_search_finds_the_known_best) {
    struct Case { const Table* P; std::vector<int32_t> greedy; };
    for (const Case& c : {Case{&kGreedyTrap, {2, 1}}, Case{&kLateBest, {2, 5, 1}}}) {
        const deeprnn::Decoder dec = markov_decoder(*c.P);
        const std::vector<float> enc(3, 0.0f);  // S = 3, He = 1
        const auto truth = enumerate_sequences(*c.P, 4);
        deeprnn::BeamOptions o;
        o.start_token = 0;
        o.end_token = 1;
        o.max_length = 4;
        o.beam = 1;
        const auto greedy = deeprnn::beam_search(dec, enc.data(), 3, o);
        BOOST_REQUIRE_EQUAL(greedy.size(), 1u);
        BOOST_TEST(greedy[0].tokens == c.greedy, boost::test_tools::per_element());
        BOOST_TEST(greedy[0].finished);
        BOOST_TEST(greedy[0].attention.size() == c.greedy.size() * 3u);

        o.beam = 4;
        o.nbest = 4;
        const auto beam = deeprnn::beam_search(dec, enc.data(), 3, o);
        BOOST_REQUIRE_EQUAL(beam.size(), 4u);
        BOOST_TEST(beam[0].score >= greedy[0].score);
        // Here the beam is wide enough to be exact: its n-best are the true n best, sorted.
        for (size_t i = 0; i < beam.size(); ++i) {
            BOOST_TEST(std::vector<int>(beam[i].tokens.begin(), beam[i].tokens.end()) == truth[i].second, boost::test_tools::per_element());
            BOOST_TEST(std::fabs(beam[i].log_prob - truth[i].first) <= 1e-5, "hypothesis " << i);
            if (i) BOOST_TEST(beam[i - 1].score >= beam[i].score);
        }
    }
}

BOOST_AUTO_TEST_CASE(beam_search_on_random_decoders) {
    std::mt19937 rng(test_seed() + 4);
    for (deeprnn::Cell cell : {deeprnn::Cell::gru, deeprnn::Cell::lstm}) {
        const RefDecoder rd = random_decoder(cell, deeprnn::AttentionScore::additive, 1, rng);
        const deeprnn::Decoder dec = rd.make();
        const int S = 4;
        const Vec enc = rnd(rng, static_cast<size_t>(S) * rd.He, 1.0);
        deeprnn::BeamOptions o;
        o.max_length = 6;
        o.start_token = 0;
        o.end_token = 1;
        o.beam = 1;
        const auto greedy = deeprnn::beam_search(dec, f32(enc).data(), S, o);
        // Greedy by hand: argmax of each step's logits.
        deeprnn::DecoderState st(dec, 1);
        st.start(f32(enc).data(), S, nullptr);
        std::vector<int32_t> tokens;
        int32_t tok = 0;
        std::vector<float> logits(rd.V);
        for (int t = 0; t < o.max_length && tok != 1; ++t) {
            st.step(&tok, logits.data());
            tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            tokens.push_back(tok);
        }
        BOOST_TEST(greedy[0].tokens == tokens, boost::test_tools::per_element());
        for (float alpha : {0.0f, 0.7f}) {
            o.beam = 5;
            o.nbest = 5;
            o.alpha = alpha;
            const auto beam = deeprnn::beam_search(dec, f32(enc).data(), S, o);
            BOOST_TEST(!beam.empty());
            for (size_t i = 0; i < beam.size(); ++i) {
                const deeprnn::Hypothesis& h = beam[i];
                // Finished first, then cut ones; each group best first.
                if (i) BOOST_TEST((beam[i - 1].finished > h.finished ||
                                   (beam[i - 1].finished == h.finished && beam[i - 1].score >= h.score)),
                                  "hypothesis " << i);
                BOOST_TEST(std::fabs(h.score - h.log_prob / std::pow(h.tokens.size(), alpha)) <= 1e-5 * std::fabs(h.score) + 1e-6);
                // log_prob is what teacher forcing through the float64 twin gives.
                Vec hs(rd.Sd, 0.0), cs(rd.Sd, 0.0);
                double lp = 0;
                int prev = 0;
                for (int32_t v : h.tokens) {
                    const Vec z = rd.step(hs, cs, {prev}, enc, S, {S}, nullptr);
                    const double top = *std::max_element(z.begin(), z.end());
                    double sum = 0;
                    for (double e : z) sum += std::exp(e - top);
                    lp += z[v] - top - std::log(sum);
                    prev = v;
                }
                BOOST_TEST(std::fabs(h.log_prob - lp) <= 1e-4, "hypothesis " << i << ": " << h.log_prob << " vs " << lp);
            }
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
