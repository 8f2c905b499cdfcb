// deeprnn-chat — a small task-oriented assistant running on deeprnn's
// sequence-to-sequence blocks (deeprnn.hpp section 13).
//
// What it shows: a PyTorch attention encoder-decoder served with deeprnn: a
// bidirectional GRU encoder (Session::run), a tanh bridge (Dense), and a GRU
// decoder with additive attention (Decoder) decoded by beam_search, whose
// hypotheses run as one batch per step. It answers requests about timers,
// alarms, lights, weather, unit conversions, small talk and help, repeating
// the request's numbers and names by attending to them.
// What it needs: the model in samples/chatbot/model/ (trained by
// samples/chatbot/train/train.sh; .npy files in PyTorch naming) and deeprnn's
// own packages.
// Build (from the repository root; one line):
//   g++ -std=c++17 -O3 -I. deeprnn.cpp samples/chatbot/chat.cpp -o deeprnn-chat -lopenblas -lboost_thread
// Run:   deeprnn-chat                      interactive: type a request, read the reply
//        deeprnn-chat --beam 4 --nbest 3 --show-attention
//        deeprnn-chat --batch < requests.txt   one reply per input line, nothing else
//        deeprnn-chat --check              C++ logits against PyTorch's on the same weights
//        deeprnn-chat --precision int8     the GRUs with int8 (or bf16) recurrent weights
// What it prints: the reply (with --nbest, the best hypotheses with their
// log-probabilities; with --show-attention, a text heat map of where each
// output token looked in the request).
#include "deeprnn.hpp"

#include <chrono>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

const int kBos = 1, kEos = 2;

// ---- Tokens: the same rules as samples/chatbot/train/make_data.py ----

struct Vocab {
    std::vector<std::string> words;
    std::map<std::string, int32_t> index;

    explicit Vocab(const std::string& path) {
        std::ifstream f(path);
        if (!f) throw deeprnn::Error("vocabulary " + path + ": cannot open");
        for (std::string w; f >> w;) {
            index[w] = static_cast<int32_t>(words.size());
            words.push_back(w);
        }
    }
    int32_t id(const std::string& t) const {
        auto it = index.find(t);
        return it == index.end() ? index.at("<unk>") : it->second;
    }
    // Vocabulary words stay words; any other word is spelled "~c ... ~".
    std::vector<int32_t> tokenize(std::string text) const {
        for (char& ch : text) {
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        std::string spaced;  // punctuation of the vocabulary as separate words
        for (char ch : text) spaced += std::strchr(",.!?", ch) ? std::string(" ") + ch + " " : std::string(1, ch);
        std::vector<int32_t> ids;
        std::istringstream in(spaced);
        for (std::string w; in >> w;) {
            if (index.count(w)) { ids.push_back(index.at(w)); continue; }
            for (char ch : w) ids.push_back(id(std::string("~") + ch));
            ids.push_back(index.at("~"));
        }
        return ids;
    }
    std::string detokenize(const std::vector<int32_t>& ids) const {
        std::string out, spell;
        auto add = [&out](const std::string& w) { out += (out.empty() ? "" : " ") + w; };
        for (int32_t i : ids) {
            const std::string& t = words[i];
            if (t == "~") { add(spell); spell.clear(); }
            else if (t[0] == '~') spell += t.substr(1);
            else if (t[0] != '<') add(t);
        }
        if (!spell.empty()) add(spell);
        return out;
    }
};

// ---- The model ----

deeprnn::Model gru(const std::string& dir, int max_batch, deeprnn::WeightPrecision precision) {
    const deeprnn::Weights w = deeprnn::load_npy_dir(dir);
    deeprnn::Config c = deeprnn::config_from_weights(deeprnn::Cell::gru, deeprnn::Convention::torch, w);
    c.threads = 1;  // a small model: one core is plenty, and leaves the others free
    c.max_batch = max_batch;
    c.weight_precision = precision;
    return deeprnn::Model(c, w);
}

struct Chatbot {
    Vocab vocab;
    deeprnn::Weights w;
    deeprnn::Model encoder;
    deeprnn::Session session;
    deeprnn::Embedding embedding;
    deeprnn::Dense bridge;
    deeprnn::Decoder decoder;

    const deeprnn::Tensor& at(const std::string& name) {
        auto it = w.find(name);
        if (it == w.end()) throw deeprnn::Error("model: " + name + ".npy is missing");
        return it->second;
    }
    Chatbot(const std::string& dir, int max_beam, deeprnn::WeightPrecision precision)
        : vocab(dir + "/vocab.txt"), w(deeprnn::load_npy_dir(dir)), encoder(gru(dir + "/encoder", 1, precision)),
          session(encoder),
          embedding(at("embedding.weight")), bridge(at("bridge.weight"), &at("bridge.bias"), deeprnn::Activation::tanh),
          decoder(embedding, gru(dir + "/decoder", max_beam, precision),
                  deeprnn::Attention::additive(deeprnn::Dense(at("attn_query.weight"), &at("attn_query.bias")),
                                               deeprnn::Dense(at("attn_keys.weight")), at("attn_v")),
                  deeprnn::Dense(at("out.weight"), &at("out.bias"))) {}

    // Encoder outputs enc [S, 1, He] and the decoder's initial state h0 [1, 1, Hd].
    void encode(const std::vector<int32_t>& ids, std::vector<float>& enc, std::vector<float>& h0) {
        const int S = static_cast<int>(ids.size()), E = embedding.dim(), He = decoder.encoder_size();
        std::vector<float> x(static_cast<size_t>(S) * E), hn(He);
        embedding.lookup(ids.data(), S, x.data());
        enc.resize(static_cast<size_t>(S) * He);
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = S;
        deeprnn::RunOutput out;
        out.y = enc.data();
        out.h_n = hn.data();  // [2, 1, He/2]: forward then reverse final state
        session.run(in, out);
        h0.resize(bridge.out_features());
        bridge.forward(hn.data(), 1, h0.data());
    }

    std::vector<deeprnn::Hypothesis> reply(const std::vector<int32_t>& ids, const deeprnn::BeamOptions& o) {
        std::vector<float> enc, h0;
        encode(ids, enc, h0);
        return deeprnn::beam_search(decoder, enc.data(), static_cast<int>(ids.size()), o, h0.data());
    }
};

// Rows: output tokens; columns: request tokens; darker = more attention.
void show_attention(const Vocab& v, const std::vector<int32_t>& src, const deeprnn::Hypothesis& h) {
    const char* shades = " .:-=+*#%@";
    const size_t S = src.size();
    for (size_t j = 0; j < S; ++j) std::printf("%s%s", j ? " " : "           ", v.words[src[j]].c_str());
    std::printf("\n");
    for (size_t t = 0; t < h.tokens.size(); ++t) {
        std::printf("%10.10s ", v.words[h.tokens[t]].c_str());
        for (size_t j = 0; j < S; ++j) {
            const float a = h.attention[t * S + j];
            const std::string cell(v.words[src[j]].size(), shades[std::min(9, static_cast<int>(a * 10))]);
            std::printf("%s%s", j ? " " : "", cell.c_str());
        }
        std::printf("\n");
    }
}

// Teacher-forced logits of the check pairs against PyTorch's (train.py wrote them).
int check(Chatbot& bot, const std::string& dir) {
    const double tolerance = 1e-3;
    double worst = 0;
    int n = 0;
    for (;; ++n) {
        const std::string p = dir + "/check/" + std::to_string(n) + "_";
        if (!std::ifstream(p + "src.npy")) break;
        const std::vector<int32_t> src = deeprnn::load_npy_int(p + "src.npy"), tgt = deeprnn::load_npy_int(p + "tgt.npy");
        const deeprnn::Tensor want = deeprnn::load_npy(p + "logits.npy");  // [T, V]
        std::vector<float> enc, h0;
        bot.encode(src, enc, h0);
        deeprnn::DecoderState st(bot.decoder, 1);
        st.start(enc.data(), static_cast<int>(src.size()), nullptr, h0.data());
        const int V = bot.decoder.vocab_size();
        std::vector<float> logits(V);
        for (int64_t t = 0; t < want.shape[0]; ++t) {
            st.step(&tgt[t], logits.data());
            for (int v = 0; v < V; ++v) worst = std::max(worst, static_cast<double>(std::fabs(logits[v] - want.data[t * V + v])));
        }
    }
    std::printf("check: %d pair(s), max |logit C++ - PyTorch| = %.3g (tolerance %.0e)\n", n, worst, tolerance);
    return n > 0 && worst <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir = "samples/chatbot/model";
    deeprnn::BeamOptions o;
    o.beam = 4;
    o.max_length = 40;
    o.start_token = kBos;
    o.end_token = kEos;
    bool batch = false, attention = false, scores = false, run_check = false, timing = false;
    deeprnn::WeightPrecision precision = deeprnn::WeightPrecision::f32;  // of the GRUs' recurrent weights
    double reply_seconds = 0;  // --timing: encoder + beam search, per reply
    long tokens_out = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw deeprnn::Error(a + ": needs a value");
            return argv[++i];
        };
        if (a == "--model") dir = value();
        else if (a == "--beam") o.beam = std::stoi(value());
        else if (a == "--nbest") o.nbest = std::stoi(value());
        else if (a == "--alpha") o.alpha = std::stof(value());
        else if (a == "--show-attention") attention = true;
        else if (a == "--batch") batch = true;
        else if (a == "--scores") scores = true;
        else if (a == "--check") run_check = true;
        else if (a == "--timing") timing = true;
        else if (a == "--precision") {
            const std::string p = value();
            if (p == "f32") precision = deeprnn::WeightPrecision::f32;
            else if (p == "bf16") precision = deeprnn::WeightPrecision::bf16;
            else if (p == "int8") precision = deeprnn::WeightPrecision::int8;
            else {
                std::fprintf(stderr, "deeprnn-chat: --precision %s: must be f32, bf16 or int8\n", p.c_str());
                return 2;
            }
        } else {
            std::fprintf(stderr, "usage: deeprnn-chat [--model DIR] [--beam N] [--nbest N] [--alpha A] "
                                 "[--show-attention] [--batch] [--scores] [--check] [--timing] "
                                 "[--precision f32|bf16|int8]\n");
            return 2;
        }
    }
    try {
        Chatbot bot(dir, std::max(o.beam, 1), precision);
        if (run_check) return check(bot, dir);
        if (!batch) std::printf("deeprnn-chat: ask about timers, alarms, lights, weather, units; empty line quits\n> ");
        std::fflush(stdout);
        for (std::string line; std::getline(std::cin, line);) {
            if (!batch && line.empty()) break;
            const std::vector<int32_t> src = bot.vocab.tokenize(line);
            if (src.empty()) { std::printf(batch ? "\n" : "> "); continue; }
            const auto t0 = std::chrono::steady_clock::now();
            const std::vector<deeprnn::Hypothesis> hyps = bot.reply(src, o);
            reply_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            tokens_out += static_cast<long>(hyps[0].tokens.size()) + 1;  // + the end token
            for (const deeprnn::Hypothesis& h : hyps) {
                if (scores || hyps.size() > 1) std::printf("%.4f\t", h.score);
                std::printf("%s\n", bot.vocab.detokenize(h.tokens).c_str());
            }
            if (attention) show_attention(bot.vocab, src, hyps[0]);
            std::printf(batch ? "" : "> ");
            std::fflush(stdout);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "deeprnn-chat: %s\n", e.what());
        return 1;
    }
    if (timing && tokens_out > 0)
        std::fprintf(stderr, "beam %d: %.1f us per output token (%ld tokens, encoder included)\n", o.beam,
                     1e6 * reply_seconds / tokens_out, tokens_out);
    return 0;
}
