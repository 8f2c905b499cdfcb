// seq2seq.cpp — the sequence-to-sequence building blocks of deeprnn.hpp
// section 13: embeddings, dense layers, attention, the attention decoder step
// and beam search.
//
// Dense layers reuse the engine's packed kernels (kernels.hpp): the weight is
// packed once at construction and every forward is one gemm_packed. The
// decoder runs its recurrent model through a Stream whose batch is the number
// of hypotheses, so a beam-search step is one small-batch recurrent product;
// hypotheses are reordered between steps by gathering the Stream's states.
#include "activations.hpp"
#include "common.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

namespace deeprnn {

const char* to_string(Activation a) {
    switch (a) {
        case Activation::none: return "none";
        case Activation::tanh: return "tanh";
        case Activation::relu: return "relu";
        case Activation::sigmoid: return "sigmoid";
    }
    return "?";
}

const char* to_string(AttentionScore s) {
    switch (s) {
        case AttentionScore::dot: return "dot";
        case AttentionScore::general: return "general";
        case AttentionScore::additive: return "additive";
    }
    return "?";
}

namespace detail {

// Throws unless `t` has `rank` dimensions, each >= 1.
static void require_shape(const Tensor& t, size_t rank, const char* name, const char* expected) {
    bool ok = t.shape.size() == rank && static_cast<int64_t>(t.data.size()) == t.numel();
    for (int64_t d : t.shape) ok = ok && d >= 1 && d <= (1 << 24);
    if (!ok) fail(name, " shape = ", shape_str(t.shape), ": must be ", expected, " with every size >= 1");
}

struct EmbeddingImpl {
    int V = 0, E = 0;
    std::vector<float> table;  // [V, E]
};

struct DenseImpl {
    int I = 0, O = 0;
    Activation act = Activation::none;
    PackedMatrix w;           // O rows padded to the SIMD width, I columns
    std::vector<float> bias;  // w.rows (padding zero)
    void (*apply)(const float*, float*, int64_t) = nullptr;  // nullptr for none
};

struct AttentionImpl {
    AttentionScore kind = AttentionScore::dot;
    int Hd = 0, He = 0;
    std::optional<Dense> general;      // query -> W^T h, so that score = (W^T h)·e
    std::optional<Dense> query, keys;  // additive
    std::vector<float> v;              // additive [A]
    void (*tanh)(const float*, float*, int64_t) = nullptr;
};

struct DecoderImpl {
    Embedding embedding;
    Model rnn;
    Attention attention;
    Dense output;
    int L = 1, Sd = 0, H = 0, E = 0, He = 0, V = 0;
};

}  // namespace detail

// ---- Embedding ----

Embedding::Embedding(const Tensor& table) {
    detail::require_shape(table, 2, "Embedding table", "[V, E]");
    auto m = std::make_shared<detail::EmbeddingImpl>();
    m->V = static_cast<int>(table.shape[0]);
    m->E = static_cast<int>(table.shape[1]);
    m->table = table.data;
    impl_ = std::move(m);
}

int Embedding::vocab_size() const { return impl_->V; }
int Embedding::dim() const { return impl_->E; }

void Embedding::lookup(const int32_t* ids, int n, float* out, size_t ld_out) const {
    const detail::EmbeddingImpl& m = *impl_;
    detail::require(n >= 0, "Embedding::lookup n", n, "must be >= 0");
    detail::require(ld_out == 0 || ld_out >= static_cast<size_t>(m.E), "Embedding::lookup ld_out", ld_out,
                    "must be 0 or >= E = ", m.E);
    for (int i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= m.V) detail::fail("Embedding::lookup ids[", i, "] = ", ids[i], ": must be in [0, V = ", m.V, ")");
    const size_t ld = ld_out ? ld_out : m.E;
    for (int i = 0; i < n; ++i)
        std::memcpy(out + i * ld, m.table.data() + static_cast<size_t>(ids[i]) * m.E, m.E * sizeof(float));
}

// ---- Dense ----

Dense::Dense(const Tensor& weight, const Tensor* bias, Activation activation) {
    detail::require_shape(weight, 2, "Dense weight", "[O, I]");
    auto m = std::make_shared<detail::DenseImpl>();
    m->O = static_cast<int>(weight.shape[0]);
    m->I = static_cast<int>(weight.shape[1]);
    if (bias && !(bias->shape.size() == 1 && bias->shape[0] == m->O && bias->numel() == static_cast<int64_t>(bias->data.size())))
        detail::fail("Dense bias shape = ", detail::shape_str(bias->shape), ": must be [O] = [", m->O, "]");
    m->act = activation;
    m->w = detail::pack_matrix(detail::detect_isa(), m->O, m->I, weight.data.data(), m->I, [](int r) { return r; });
    m->bias.assign(m->w.rows, 0.0f);
    if (bias) std::copy(bias->data.begin(), bias->data.end(), m->bias.begin());
    const detail::Activations act = detail::select_activations(0.0);
    switch (activation) {
        case Activation::none: break;
        case Activation::tanh: m->apply = act.tanh; break;
        case Activation::relu: m->apply = act.relu; break;
        case Activation::sigmoid: m->apply = act.sigmoid; break;
        default: detail::fail("Dense activation = ", static_cast<int>(activation), ": not an Activation");
    }
    impl_ = std::move(m);
}

int Dense::in_features() const { return impl_->I; }
int Dense::out_features() const { return impl_->O; }
Activation Dense::activation() const { return impl_->act; }

void Dense::forward(const float* x, int rows, float* y) const {
    const detail::DenseImpl& m = *impl_;
    detail::require(rows >= 0, "Dense::forward rows", rows, "must be >= 0");
    if (rows == 0) return;
    const size_t n = static_cast<size_t>(rows) * m.O;
    if (y < x + static_cast<size_t>(rows) * m.I && x < y + n) detail::fail("Dense::forward y overlaps x: outputs must not alias inputs");
    if (m.w.rows == m.O) {
        detail::gemm_packed(m.w, x, m.I, rows, m.bias.data(), y, m.O);
    } else {  // the kernel writes whole SIMD vectors: go through a padded block
        std::vector<float> padded(static_cast<size_t>(rows) * m.w.rows);
        detail::gemm_packed(m.w, x, m.I, rows, m.bias.data(), padded.data(), m.w.rows);
        for (int r = 0; r < rows; ++r) std::memcpy(y + static_cast<size_t>(r) * m.O, &padded[static_cast<size_t>(r) * m.w.rows], m.O * sizeof(float));
    }
    if (m.apply) m.apply(y, y, static_cast<int64_t>(n));
}

// ---- Attention ----

Attention::Attention(std::shared_ptr<const detail::AttentionImpl> impl) : impl_(std::move(impl)) {}

Attention Attention::dot(int size) {
    detail::require(size >= 1, "Attention::dot size", size, "must be >= 1");
    auto m = std::make_shared<detail::AttentionImpl>();
    m->kind = AttentionScore::dot;
    m->Hd = m->He = size;
    return Attention(std::move(m));
}

Attention Attention::general(const Tensor& w) {
    detail::require_shape(w, 2, "Attention::general w", "[Hd, He]");
    auto m = std::make_shared<detail::AttentionImpl>();
    m->kind = AttentionScore::general;
    m->Hd = static_cast<int>(w.shape[0]);
    m->He = static_cast<int>(w.shape[1]);
    Tensor wt;  // W^T [He, Hd]: the query is mapped once instead of every encoder output
    wt.shape = {m->He, m->Hd};
    wt.data.resize(w.data.size());
    for (int i = 0; i < m->Hd; ++i)
        for (int j = 0; j < m->He; ++j) wt.data[static_cast<size_t>(j) * m->Hd + i] = w.data[static_cast<size_t>(i) * m->He + j];
    m->general.emplace(wt);
    return Attention(std::move(m));
}

Attention Attention::additive(const Dense& query, const Dense& keys, const Tensor& v) {
    detail::require_shape(v, 1, "Attention::additive v", "[A]");
    const int A = static_cast<int>(v.shape[0]);
    detail::require(query.out_features() == A, "Attention::additive query.out_features", query.out_features(), "must equal v's size A = ", A);
    detail::require(keys.out_features() == A, "Attention::additive keys.out_features", keys.out_features(), "must equal v's size A = ", A);
    detail::require(query.activation() == Activation::none, "Attention::additive query.activation", to_string(query.activation()), "must be none");
    detail::require(keys.activation() == Activation::none, "Attention::additive keys.activation", to_string(keys.activation()), "must be none");
    auto m = std::make_shared<detail::AttentionImpl>();
    m->kind = AttentionScore::additive;
    m->Hd = query.in_features();
    m->He = keys.in_features();
    m->query.emplace(query);
    m->keys.emplace(keys);
    m->v = v.data;
    m->tanh = detail::select_activations(0.0).tanh;
    return Attention(std::move(m));
}

AttentionScore Attention::score() const { return impl_->kind; }
int Attention::query_size() const { return impl_->Hd; }
int Attention::encoder_size() const { return impl_->He; }

void Attention::attend(const float* query, const float* enc, int S, int B, const int32_t* lengths, float* context,
                       float* weights) const {
    const detail::AttentionImpl& m = *impl_;
    detail::require(S >= 1, "Attention::attend S", S, "must be >= 1");
    detail::require(B >= 1, "Attention::attend B", B, "must be >= 1");
    detail::require(query && enc && context, "Attention::attend query, enc, context", "null", "all three are required");
    if (lengths)
        for (int b = 0; b < B; ++b)
            if (lengths[b] < 1 || lengths[b] > S)
                detail::fail("Attention::attend lengths[", b, "] = ", lengths[b], ": must be in [1, S = ", S, "]");
    const int He = m.He;
    std::vector<float> w(static_cast<size_t>(B) * S, 0.0f), q;
    auto e_at = [&](int s, int b) { return enc + (static_cast<size_t>(s) * B + b) * He; };
    auto dot = [](const float* a, const float* b, int n) {
        float acc = 0.0f;
        for (int i = 0; i < n; ++i) acc += a[i] * b[i];
        return acc;
    };
    if (m.kind == AttentionScore::additive) {
        const int A = static_cast<int>(m.v.size());
        std::vector<float> kq(static_cast<size_t>(B) * A), kk(static_cast<size_t>(S) * B * A);
        m.query->forward(query, B, kq.data());
        m.keys->forward(enc, S * B, kk.data());  // [S, B, A]
        for (int s = 0; s < S; ++s)
            for (int b = 0; b < B; ++b)
                for (int a = 0; a < A; ++a) kk[(static_cast<size_t>(s) * B + b) * A + a] += kq[static_cast<size_t>(b) * A + a];
        m.tanh(kk.data(), kk.data(), static_cast<int64_t>(kk.size()));
        for (int s = 0; s < S; ++s)
            for (int b = 0; b < B; ++b) w[static_cast<size_t>(b) * S + s] = dot(m.v.data(), &kk[(static_cast<size_t>(s) * B + b) * A], A);
    } else {
        const float* qp = query;  // dot: the query itself; general: W^T h
        if (m.general) {
            q.resize(static_cast<size_t>(B) * He);
            m.general->forward(query, B, q.data());
            qp = q.data();
        }
        for (int b = 0; b < B; ++b)
            for (int s = 0; s < S; ++s) w[static_cast<size_t>(b) * S + s] = dot(qp + static_cast<size_t>(b) * He, e_at(s, b), He);
    }
    // Masked softmax, then the weighted sum of encoder outputs.
    for (int b = 0; b < B; ++b) {
        float* row = &w[static_cast<size_t>(b) * S];
        const int len = lengths ? lengths[b] : S;
        const float top = *std::max_element(row, row + len);
        float sum = 0.0f;
        for (int s = 0; s < len; ++s) sum += row[s] = std::exp(row[s] - top);
        for (int s = 0; s < S; ++s) row[s] = s < len ? row[s] / sum : 0.0f;
        float* ctx = context + static_cast<size_t>(b) * He;
        std::fill_n(ctx, He, 0.0f);
        for (int s = 0; s < len; ++s) {
            const float* e = e_at(s, b);
            for (int j = 0; j < He; ++j) ctx[j] += row[s] * e[j];
        }
    }
    if (weights) std::copy(w.begin(), w.end(), weights);
}

// ---- Decoder ----

Decoder::Decoder(const Embedding& embedding, const Model& rnn, const Attention& attention, const Dense& output) {
    const Config& c = rnn.config();
    auto m = std::make_shared<detail::DecoderImpl>(detail::DecoderImpl{embedding, rnn, attention, output});
    m->L = c.num_layers;
    m->Sd = state_size(c);
    m->H = c.hidden_size;
    m->E = embedding.dim();
    m->He = attention.encoder_size();
    m->V = output.out_features();
    detail::require(c.direction == Direction::forward, "Decoder rnn Config.direction", to_string(c.direction), "must be forward");
    detail::require(c.input_size == m->E + m->He, "Decoder rnn Config.input_size", c.input_size,
                    "must be embedding dim + attention encoder size = ", m->E, " + ", m->He);
    detail::require(attention.query_size() == m->Sd, "Decoder attention query size", attention.query_size(),
                    "must be the rnn's state size ", m->Sd);
    detail::require(output.in_features() == m->Sd + m->He, "Decoder output in_features", output.in_features(),
                    "must be rnn state size + encoder size = ", m->Sd, " + ", m->He);
    impl_ = std::move(m);
}

int Decoder::vocab_size() const { return impl_->V; }
int Decoder::encoder_size() const { return impl_->He; }
const Model& Decoder::rnn() const { return impl_->rnn; }

DecoderState::DecoderState(const Decoder& decoder, int batch)
    : d_(decoder.impl_), stream_(decoder.impl_->rnn, batch), batch_(batch) {
    const detail::DecoderImpl& d = *d_;
    x_.resize(static_cast<size_t>(batch) * (d.E + d.He));
    y_.resize(static_cast<size_t>(batch) * d.Sd);
    ctx_.resize(static_cast<size_t>(batch) * d.He);
    hc_.resize(static_cast<size_t>(batch) * (d.Sd + d.He));
}

void DecoderState::start(const float* enc, int S, const int32_t* lengths, const float* h0, const float* c0) {
    detail::require(enc != nullptr, "DecoderState::start enc", "null", "the encoder outputs are required");
    detail::require(S >= 1, "DecoderState::start S", S, "must be >= 1");
    const int B = batch_;
    if (lengths)
        for (int b = 0; b < B; ++b)
            if (lengths[b] < 1 || lengths[b] > S)
                detail::fail("DecoderState::start lengths[", b, "] = ", lengths[b], ": must be in [1, S = ", S, "]");
    stream_.set_state(h0, c0);  // checks c0 against the cell first
    S_ = S;
    enc_.assign(enc, enc + static_cast<size_t>(S) * B * d_->He);
    if (lengths) lengths_.assign(lengths, lengths + B); else lengths_.assign(B, S);
}

void DecoderState::step(const int32_t* tokens, float* logits, float* weights) {
    const detail::DecoderImpl& d = *d_;
    if (S_ == 0) detail::fail("DecoderState::step: called before start()");
    const int B = batch_, in = d.E + d.He;
    const float* query = stream_.h() + static_cast<size_t>(d.L - 1) * B * d.Sd;  // top layer's h_{t-1}
    d.embedding.lookup(tokens, B, x_.data(), in);
    d.attention.attend(query, enc_.data(), S_, B, lengths_.data(), ctx_.data(), weights);
    for (int b = 0; b < B; ++b) std::memcpy(&x_[static_cast<size_t>(b) * in + d.E], &ctx_[static_cast<size_t>(b) * d.He], d.He * sizeof(float));
    stream_.push(x_.data(), 1, y_.data());
    for (int b = 0; b < B; ++b) {
        float* row = &hc_[static_cast<size_t>(b) * (d.Sd + d.He)];
        std::memcpy(row, &y_[static_cast<size_t>(b) * d.Sd], d.Sd * sizeof(float));
        std::memcpy(row + d.Sd, &ctx_[static_cast<size_t>(b) * d.He], d.He * sizeof(float));
    }
    d.output.forward(hc_.data(), B, logits);
}

void DecoderState::reorder(const int32_t* from) {
    const int B = batch_;
    for (int b = 0; b < B; ++b)
        if (from[b] < 0 || from[b] >= B) detail::fail("DecoderState::reorder from[", b, "] = ", from[b], ": must be in [0, batch = ", B, ")");
    // Gathers rows of a [planes, B, w] block.
    auto gather = [&](const float* src, std::vector<float>& dst, int planes, int w) {
        dst.resize(static_cast<size_t>(planes) * B * w);
        for (int p = 0; p < planes; ++p)
            for (int b = 0; b < B; ++b)
                std::memcpy(&dst[(static_cast<size_t>(p) * B + b) * w], src + (static_cast<size_t>(p) * B + from[b]) * w, w * sizeof(float));
    };
    const detail::DecoderImpl& d = *d_;
    std::vector<float> h;
    gather(stream_.h(), h, d.L, d.Sd);
    if (stream_.c()) gather(stream_.c(), scratch_, d.L, d.H);
    stream_.set_state(h.data(), stream_.c() ? scratch_.data() : nullptr);
    if (S_ == 0) return;
    gather(enc_.data(), scratch_, S_, d.He);
    enc_.swap(scratch_);
    std::vector<int32_t> len(B);
    for (int b = 0; b < B; ++b) len[b] = lengths_[from[b]];
    lengths_.swap(len);
}

int DecoderState::batch() const { return batch_; }
int DecoderState::source_length() const { return S_; }
const Stream& DecoderState::stream() const { return stream_; }

// ---- Beam search ----

std::vector<Hypothesis> beam_search(const Decoder& decoder, const float* enc, int S, const BeamOptions& o,
                                    const float* h0, const float* c0) {
    using detail::require;
    const int V = decoder.vocab_size(), K = o.beam, max_batch = decoder.rnn().config().max_batch;
    require(K >= 1 && K <= max_batch, "BeamOptions.beam", K, "must be in [1, rnn Config.max_batch = ", max_batch, "]");
    require(o.max_length >= 1, "BeamOptions.max_length", o.max_length, "must be >= 1");
    require(o.alpha >= 0.0f, "BeamOptions.alpha", o.alpha, "must be >= 0");
    require(o.start_token >= 0 && o.start_token < V, "BeamOptions.start_token", o.start_token, "must be in [0, V = ", V, ")");
    require(o.end_token >= 0 && o.end_token < V, "BeamOptions.end_token", o.end_token, "must be in [0, V = ", V, ")");
    require(o.nbest >= 1 && o.nbest <= K, "BeamOptions.nbest", o.nbest, "must be in [1, beam = ", K, "]");
    require(enc != nullptr, "beam_search enc", "null", "the encoder outputs are required");
    require(S >= 1, "beam_search S", S, "must be >= 1");

    // Every row starts from the one source and the one initial state.
    const Config& c = decoder.rnn().config();
    const int He = decoder.encoder_size(), L = c.num_layers, Sd = state_size(c), H = c.hidden_size;
    auto tile = [K](const float* src, int planes, int w) {
        std::vector<float> t(static_cast<size_t>(planes) * K * w);
        for (int p = 0; p < planes; ++p)
            for (int k = 0; k < K; ++k) std::memcpy(&t[(static_cast<size_t>(p) * K + k) * w], src + static_cast<size_t>(p) * w, w * sizeof(float));
        return t;
    };
    DecoderState state(decoder, K);
    const std::vector<float> enc_k = tile(enc, S, He);
    const std::vector<float> h_k = h0 ? tile(h0, L, Sd) : std::vector<float>();
    const std::vector<float> c_k = c0 ? tile(c0, L, H) : std::vector<float>();
    state.start(enc_k.data(), S, nullptr, h0 ? h_k.data() : nullptr, c0 ? c_k.data() : nullptr);

    struct Live {
        Hypothesis hyp;
        double log_prob = 0.0;
    };
    auto finish = [&o](Live& l, bool done) {
        l.hyp.log_prob = static_cast<float>(l.log_prob);
        l.hyp.score = static_cast<float>(l.log_prob / std::pow(static_cast<double>(l.hyp.tokens.size()), o.alpha));
        l.hyp.finished = done;
        return l.hyp;
    };
    std::vector<Live> live(1), next;
    std::vector<Hypothesis> done;
    // Done when K hypotheses have ended and no live one scores above the K-th
    // best of them (exact for alpha = 0: extending a hypothesis only lowers it).
    auto stop = [&](const std::vector<Live>& lv) {
        if (lv.empty()) return true;
        if (static_cast<int>(done.size()) < K) return false;
        std::vector<float> s;
        for (const Hypothesis& h : done) s.push_back(h.score);
        std::nth_element(s.begin(), s.begin() + (K - 1), s.end(), std::greater<float>());
        const Live& best = lv.front();  // candidates were taken best first
        return best.log_prob / std::pow(static_cast<double>(best.hyp.tokens.size()), o.alpha) <= s[K - 1];
    };
    std::vector<int32_t> tokens(K), from(K);
    std::vector<float> logits(static_cast<size_t>(K) * V), weights(static_cast<size_t>(K) * S);
    std::vector<double> cand(static_cast<size_t>(K) * V);
    std::vector<int> order;
    for (int t = 0; t < o.max_length && !live.empty(); ++t) {
        const int n = static_cast<int>(live.size());
        for (int k = 0; k < K; ++k) tokens[k] = k < n && t > 0 ? live[k].hyp.tokens.back() : o.start_token;
        state.step(tokens.data(), logits.data(), weights.data());
        // cand = running log-probability + log softmax of each live row.
        for (int k = 0; k < n; ++k) {
            const float* z = &logits[static_cast<size_t>(k) * V];
            const double top = *std::max_element(z, z + V);
            double sum = 0.0;
            for (int v = 0; v < V; ++v) sum += std::exp(z[v] - top);
            const double base = live[k].log_prob - top - std::log(sum);
            for (int v = 0; v < V; ++v) cand[static_cast<size_t>(k) * V + v] = base + z[v];
        }
        order.resize(static_cast<size_t>(n) * V);
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
        const size_t keep = std::min(order.size(), static_cast<size_t>(2 * K));
        std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                          [&](int a, int b) { return cand[a] > cand[b] || (cand[a] == cand[b] && a < b); });
        // The best candidates in order: an end token among the top K finishes a
        // hypothesis; the others continue until K are live again.
        next.clear();
        for (size_t r = 0; r < keep && static_cast<int>(next.size()) < K; ++r) {
            const int k = order[r] / V, v = order[r] % V;
            Live l = live[k];
            l.log_prob = cand[order[r]];
            l.hyp.tokens.push_back(v);
            l.hyp.attention.insert(l.hyp.attention.end(), &weights[static_cast<size_t>(k) * S], &weights[static_cast<size_t>(k + 1) * S]);
            if (v == o.end_token) {
                if (static_cast<int>(r) < K) done.push_back(finish(l, true));
            } else {
                from[next.size()] = k;
                next.push_back(std::move(l));
            }
        }
        live.swap(next);
        if (stop(live)) break;
        for (int k = static_cast<int>(live.size()); k < K; ++k) from[k] = 0;  // idle rows: any valid state
        state.reorder(from.data());
    }
    // Finished hypotheses rank first: a cut one's score is only an upper bound
    // on what it would score once it ends (exactly so for alpha = 0).
    auto by_score = [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; };
    std::stable_sort(done.begin(), done.end(), by_score);
    if (static_cast<int>(done.size()) < o.nbest) {  // cut at max_length: the best unfinished fill up
        std::vector<Hypothesis> cut;
        for (Live& l : live) cut.push_back(finish(l, false));
        std::stable_sort(cut.begin(), cut.end(), by_score);
        done.insert(done.end(), cut.begin(), cut.end());
    }
    done.resize(std::min(done.size(), static_cast<size_t>(o.nbest)));
    return done;
}

}  // namespace deeprnn
