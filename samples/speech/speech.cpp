// deeprnn-speech — a streaming spoken-command recognizer running on deeprnn.
//
// What it shows: a real speech model served frame by frame through
// deeprnn::Stream. It reads a 16 kHz mono 16-bit WAV file (or a live WAV
// stream on stdin) 10 ms at a time, computes 40 log-mel features with KissFFT,
// optionally subtracts their causal running mean (when the model's
// features.txt says "running-mean N"), stacks S consecutive frames into one
// vector (S is the LSTM's input size / 40: 3 for the bundled model, 120 values
// every 30 ms; 1 for a model that steps every 10 ms) and pushes it through a
// 2-layer LSTM (weights exported from PyTorch, loaded with load_npy_dir + config_from_weights), applies the
// output layer itself, and decodes the 20-word vocabulary with greedy CTC. It prints each
// word as soon as it is recognised, with its start and end time, then the
// real-time factor and the p50/p99 compute time per 10 ms frame.
// What it needs: the model in samples/speech/model/ (trained by
// samples/speech/train/train.sh), libkissfft-dev, and deeprnn's own packages.
// Build (from the repository root):
//   g++ -std=c++17 -O3 -I. deeprnn.cpp samples/speech/speech.cpp -o deeprnn-speech
//       $(pkg-config --cflags --libs kissfft-float) -lopenblas -lboost_thread    (one line)
// Run:   deeprnn-speech samples/speech/demo.wav
//        sox -d -r 16000 -c 1 -b 16 -t wav - | deeprnn-speech -        (microphone)
//
// Index of this file
//   [SECTION] 1. WAV reader: a small strict RIFF parser that also reads pipes
//   [SECTION] 2. Features: 25 ms / 10 ms log-mel filterbank, causal running mean (the training script uses this code)
//   [SECTION] 3. Recognizer: LSTM stream, output layer, greedy CTC decoder with word times
//   [SECTION] 4. Command line
#include "deeprnn.hpp"

#include <kiss_fftr.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <signal.h>
#include <sys/stat.h>
#include <vector>

namespace {

constexpr int kRate = 16000;   // samples per second the model was trained on
constexpr int kHop = 160;      // 10 ms
constexpr int kWindow = 400;   // 25 ms
constexpr int kFft = 512;      // next power of two above kWindow
constexpr int kMels = 40;      // log-mel features per frame
constexpr float kMelLow = 20.0f, kMelHigh = 8000.0f;
constexpr double kPi = 3.14159265358979323846;
constexpr float kLogFloor = 1e-6f;  // log(max(energy, floor)): digital silence stays finite, near a quiet room
// Decoder confidence floor (--min-confidence): a word fires only once its CTC posterior reaches it.
// Chosen on the validation set (docs/SPEECH.md, "Decoding").
#define KMINCONF_STR "0"
constexpr float kMinConfidence = 0.0f;

using deeprnn::Error;

// ---------------------------------------------------------------------------
// [SECTION] 1. WAV reader
// ---------------------------------------------------------------------------
// Accepts RIFF/WAVE with a PCM (or WAVE_FORMAT_EXTENSIBLE PCM) fmt chunk of
// 16 kHz, mono, 16 bits; skips other chunks; refuses anything else with a
// message that says what was found. A data chunk whose size is 0 or
// 0xFFFFFFFF ("unknown", as streaming writers put it), or any data chunk read
// from a pipe, runs to the end of the input; in a regular file a data chunk
// longer than the file is an error.

class WavReader {
public:
    explicit WavReader(const std::string& path) : name_(path == "-" ? "<stdin>" : path) {
        if (path == "-") {
            f_ = stdin;
        } else {
            f_ = std::fopen(path.c_str(), "rb");
            if (!f_) throw Error(name_ + ": cannot open: " + std::strerror(errno));
            own_ = true;
        }
        struct stat st;
        stream_ = fstat(fileno(f_), &st) != 0 || !S_ISREG(st.st_mode);
        try {
            parse_header();
        } catch (...) {
            if (own_) std::fclose(f_);
            throw;
        }
    }
    ~WavReader() {
        if (own_) std::fclose(f_);
    }
    WavReader(const WavReader&) = delete;
    WavReader& operator=(const WavReader&) = delete;

    /// Reads up to n samples; returns how many (0 at the end of the data).
    int read(int16_t* out, int n) {
        size_t want = static_cast<size_t>(n) * 2;
        if (!to_eof_) want = static_cast<size_t>(std::min<uint64_t>(want, remaining_));
        if (want == 0) return 0;
        unsigned char buf[2 * 4096];
        want = std::min(want, sizeof buf);
        size_t got = std::fread(buf, 1, want, f_);
        if (got < want && !to_eof_)
            fail("data chunk declares " + std::to_string(declared_) + " bytes but the file ends after " +
                 std::to_string(declared_ - remaining_ + got));
        if (!to_eof_) remaining_ -= got;
        got &= ~static_cast<size_t>(1);  // a stream cut mid-sample drops the odd byte
        for (size_t i = 0; i < got / 2; ++i)
            out[i] = static_cast<int16_t>(static_cast<uint16_t>(buf[2 * i] | (buf[2 * i + 1] << 8)));
        return static_cast<int>(got / 2);
    }
    const std::string& name() const { return name_; }

private:
    [[noreturn]] void fail(const std::string& what) const { throw Error(name_ + ": not a usable WAV file: " + what); }

    static uint32_t u32(const unsigned char* p) {
        return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
               static_cast<uint32_t>(p[3]) << 24;
    }
    static uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

    bool read_exact(unsigned char* p, size_t n) { return std::fread(p, 1, n, f_) == n; }

    void parse_header() {
        unsigned char h[12];
        if (!read_exact(h, 12)) fail("shorter than a 12-byte RIFF header");
        if (std::memcmp(h, "RIFF", 4) != 0) {
            if (std::memcmp(h, "RF64", 4) == 0 || std::memcmp(h, "RIFX", 4) == 0)
                fail(std::string(reinterpret_cast<char*>(h), 4) + " files are not supported (convert: sox in.wav out.wav)");
            fail("does not start with 'RIFF'");
        }
        if (std::memcmp(h + 8, "WAVE", 4) != 0) fail("RIFF form type is not 'WAVE'");
        bool have_fmt = false;
        for (;;) {
            unsigned char c[8];
            if (!read_exact(c, 8)) fail(have_fmt ? "no 'data' chunk" : "no 'fmt ' chunk");
            const std::string id(reinterpret_cast<char*>(c), 4);
            const uint32_t size = u32(c + 4);
            if (id == "fmt ") {
                if (have_fmt) fail("two 'fmt ' chunks");
                if (size < 16 || size > 1024) fail("'fmt ' chunk size " + std::to_string(size) + " (expected 16..1024)");
                std::vector<unsigned char> f(size + (size & 1));
                if (!read_exact(f.data(), f.size())) fail("truncated 'fmt ' chunk");
                parse_fmt(f.data(), size);
                have_fmt = true;
            } else if (id == "data") {
                if (!have_fmt) fail("'data' chunk before 'fmt ' chunk");
                declared_ = remaining_ = size;
                to_eof_ = stream_ || size == 0 || size == 0xFFFFFFFFu;
                if (!to_eof_ && size % 2 != 0) fail("data chunk size " + std::to_string(size) + " is not a whole number of samples");
                return;
            } else {
                uint64_t skip = static_cast<uint64_t>(size) + (size & 1);
                unsigned char junk[4096];
                while (skip > 0) {
                    const size_t n = static_cast<size_t>(std::min<uint64_t>(skip, sizeof junk));
                    if (!read_exact(junk, n)) fail("truncated '" + id + "' chunk");
                    skip -= n;
                }
            }
        }
    }

    void parse_fmt(const unsigned char* f, uint32_t size) {
        uint16_t format = u16(f);
        const uint16_t channels = u16(f + 2), bits = u16(f + 14), block = u16(f + 12);
        const uint32_t rate = u32(f + 4), byte_rate = u32(f + 8);
        if (format == 0xFFFE) {  // WAVE_FORMAT_EXTENSIBLE: the real format is the sub-format GUID's first two bytes
            if (size < 40 || u16(f + 16) < 22) fail("WAVE_FORMAT_EXTENSIBLE 'fmt ' chunk is too short");
            format = u16(f + 24);
        }
        if (format != 1) fail("format tag " + std::to_string(format) + " is not integer PCM (1)");
        if (channels == 0 || bits == 0 || rate == 0) fail("fmt chunk has zero channels, bits or rate");
        if (block != channels * ((bits + 7) / 8)) fail("block align " + std::to_string(block) + " does not match channels and bits");
        if (byte_rate != rate * block) fail("byte rate " + std::to_string(byte_rate) + " does not match rate * block align");
        if (channels != 1 || rate != kRate || bits != 16)
            fail("it is " + std::to_string(rate) + " Hz, " + std::to_string(channels) + " channel(s), " +
                 std::to_string(bits) + " bits; the model needs 16000 Hz mono 16-bit (convert: sox in.wav -r 16000 -c 1 -b 16 out.wav)");
    }

    std::string name_;
    FILE* f_ = nullptr;
    bool own_ = false, stream_ = false, to_eof_ = false;
    uint64_t declared_ = 0, remaining_ = 0;
};

// ---------------------------------------------------------------------------
// [SECTION] 2. Features
// ---------------------------------------------------------------------------
// Frame k covers samples [160k, 160k + 400). Each frame: scale to [-1, 1),
// remove its mean, Hann window, zero-pad to 512, real FFT (KissFFT), power
// spectrum, 40 triangular filters evenly spaced on the HTK mel scale from 20 Hz
// to 8 kHz, natural log. No global normalisation here: the training script folds
// the feature mean and variance into the first layer's weights (a model may also
// ask for the causal running mean below, which comes first). The training data
// is featurised by this very code (`deeprnn-speech --features-only`).

class LogMel {
public:
    LogMel() : fft_(kiss_fftr_alloc(kFft, 0, nullptr, nullptr)), window_(kWindow), spectrum_(kFft / 2 + 1) {
        if (!fft_) throw Error("kiss_fftr_alloc failed");
        for (int i = 0; i < kWindow; ++i)
            window_[i] = static_cast<float>(0.5 - 0.5 * std::cos(2.0 * kPi * i / (kWindow - 1)));
        auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
        const double lo = mel(kMelLow), hi = mel(kMelHigh);
        for (int m = 0; m < kMels; ++m) {
            const double left = lo + (hi - lo) * m / (kMels + 1), centre = lo + (hi - lo) * (m + 1) / (kMels + 1),
                         right = lo + (hi - lo) * (m + 2) / (kMels + 1);
            Filter f;
            for (int k = 0; k <= kFft / 2; ++k) {
                const double b = mel(static_cast<double>(k) * kRate / kFft);
                const double w = b <= left || b >= right ? 0.0 : b <= centre ? (b - left) / (centre - left) : (right - b) / (right - centre);
                if (w <= 0.0) continue;
                if (f.weights.empty()) f.first = k;
                f.weights.resize(k - f.first + 1, 0.0f);
                f.weights[k - f.first] = static_cast<float>(w);
            }
            filters_.push_back(f);
        }
        pending_.reserve(kWindow + kHop);
    }
    ~LogMel() { kiss_fftr_free(fft_); }
    LogMel(const LogMel&) = delete;
    LogMel& operator=(const LogMel&) = delete;

    /// Appends samples; returns the number of new frames written to `out` (kMels each, at most `max_frames`).
    int push(const int16_t* s, int n, float* out, int max_frames) {
        int frames = 0;
        for (int i = 0; i < n; ++i) {
            pending_.push_back(s[i] / 32768.0f);
            if (static_cast<int>(pending_.size()) == kWindow) {
                if (frames == max_frames) throw Error("LogMel::push: more frames than the caller's buffer holds");
                compute(pending_.data(), out + static_cast<size_t>(frames) * kMels);
                ++frames;
                pending_.erase(pending_.begin(), pending_.begin() + kHop);
            }
        }
        return frames;
    }
    void reset() { pending_.clear(); }

private:
    struct Filter {
        int first = 0;
        std::vector<float> weights;
    };

    void compute(const float* x, float* out) {
        float mean = 0.0f;
        for (int i = 0; i < kWindow; ++i) mean += x[i];
        mean /= kWindow;
        std::array<float, kFft> frame{};
        for (int i = 0; i < kWindow; ++i) frame[i] = (x[i] - mean) * window_[i];
        kiss_fftr(fft_, frame.data(), spectrum_.data());
        std::array<float, kFft / 2 + 1> power;
        for (int k = 0; k <= kFft / 2; ++k) power[k] = spectrum_[k].r * spectrum_[k].r + spectrum_[k].i * spectrum_[k].i;
        for (int m = 0; m < kMels; ++m) {
            const Filter& f = filters_[m];
            float e = 0.0f;
            for (size_t j = 0; j < f.weights.size(); ++j) e += f.weights[j] * power[f.first + j];
            out[m] = std::log(std::max(e, kLogFloor));
        }
    }

    kiss_fftr_cfg fft_;
    std::vector<float> window_;
    std::vector<kiss_fft_cpx> spectrum_;
    std::vector<Filter> filters_;
    std::vector<float> pending_;
};

// Causal running-mean normalisation, per filter: frame t becomes x_t - mean(x_{t-N+1} .. x_t), the mean
// of the last N frames including itself (of all frames so far while fewer than N have been seen). It
// removes a stationary channel or speaker colouring (a constant added to the log-mel, i.e. a fixed gain
// per frequency band) after a few seconds, and looks at no future frame, so the program stays a
// streaming recognizer with no added latency. A model asks for it with a features.txt file in its
// directory holding "running-mean N"; `--features-only --running-mean N` writes the same features for
// training. The sums are kept in double and recomputed from the window every N frames, so a stream of
// any length gives the same result as a fresh sum.

class RunningMean {
public:
    explicit RunningMean(int n) : n_(n), window_(static_cast<size_t>(n) * kMels), sum_(kMels, 0.0) {}
    int length() const { return n_; }

    /// Replaces the kMels values of one frame by themselves minus the running mean (which includes them).
    void apply(float* f) {
        const int slot = static_cast<int>(count_ % n_);
        float* w = window_.data() + static_cast<size_t>(slot) * kMels;
        for (int m = 0; m < kMels; ++m) {
            if (count_ >= n_) sum_[m] -= w[m];
            w[m] = f[m];
            sum_[m] += f[m];
        }
        ++count_;
        const int64_t have = std::min<int64_t>(count_, n_);
        if (slot == n_ - 1) {  // a full window: start its sum afresh (no rounding drift on long streams)
            std::fill(sum_.begin(), sum_.end(), 0.0);
            for (int j = 0; j < n_; ++j)
                for (int m = 0; m < kMels; ++m) sum_[m] += window_[static_cast<size_t>(j) * kMels + m];
        }
        for (int m = 0; m < kMels; ++m) f[m] = static_cast<float>(f[m] - sum_[m] / static_cast<double>(have));
    }
    void reset() {
        count_ = 0;
        std::fill(sum_.begin(), sum_.end(), 0.0);
    }

private:
    int n_;
    int64_t count_ = 0;
    std::vector<float> window_;
    std::vector<double> sum_;
};

/// The feature settings a model directory asks for: its features.txt, if any ("running-mean N", N frames);
/// 0 when there is none (raw log-mel, as every model before the sixth round).
int model_running_mean(const std::string& dir) {
    std::ifstream in(dir + "/features.txt");
    if (!in) return 0;
    std::string key, extra;
    long n = 0;
    if (!(in >> key >> n) || key != "running-mean" || n < 1 || n > 100000 || (in >> extra))
        throw Error(dir + "/features.txt: expected one line \"running-mean N\" with N in [1, 100000] (10 ms frames)");
    return static_cast<int>(n);
}

// ---------------------------------------------------------------------------
// [SECTION] 3. Recognizer
// ---------------------------------------------------------------------------
// The model directory holds the LSTM in PyTorch names (weight_ih_l0.npy, ...),
// the output layer output.weight.npy [K+1, H] and output.bias.npy [K+1], and
// labels.txt with K lines (line 1 is the CTC blank). Rows 0..K-1 of the output
// layer are CTC logits over the labels; row K is a speech-activity logit used
// only to place word boundaries. A label after the blank written in angle
// brackets (e.g. "<filler>", which train.py --filler-label trains on
// out-of-vocabulary words) is not a word: it is decoded like one, so it takes its
// stretch of speech, but it is not reported or put in the transcript.
//
// Frame stacking: the model steps once per S feature frames. Model step j sees
// frames jS .. jS+S-1 concatenated in order (frame jS first), exactly what the
// training script's reshape of the --features-only output [T, 40] to
// [T / S, 40 S] gives; a last incomplete group of frames is not used. A model
// step's time is the centre of its middle frame, jS + S/2.
//
// Decoding is greedy CTC: a word fires on the frame where its label becomes the
// arg-max after the blank or another label. CTC says *that* a word was said,
// not where it began, so its times come from the speech-activity output: the
// word ends at the last speech frame at or before it fired, and starts where
// that stretch of speech starts (but after the previous word's end).

struct Word {
    std::string text;
    double start = 0, end = 0;  // seconds, frame centres
    float confidence = 0;       // posterior of the word's label on the frame it fired
};

inline double frame_time(int64_t k) { return (static_cast<double>(k) * kHop + kWindow / 2.0) / kRate; }

class Recognizer {
public:
    Recognizer(const std::string& dir, int threads, deeprnn::Backend backend, deeprnn::WeightPrecision precision,
               float min_confidence)
        : min_confidence_(min_confidence) {
        deeprnn::Weights w = deeprnn::load_npy_dir(dir);
        deeprnn::Config cfg = deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, w);
        cfg.max_batch = 1;
        cfg.threads = threads;
        cfg.backend = backend;
        cfg.weight_precision = precision;
        cfg.tuning_seq_len = 1;  // the stream pushes one frame at a time: each push is a one-step run
        model_.reset(new deeprnn::Model(cfg, w));
        stream_.reset(new deeprnn::Stream(*model_));
        if (cfg.input_size % kMels != 0 || cfg.input_size == 0)
            throw Error(dir + ": weight_ih_l0 takes " + std::to_string(cfg.input_size) + " features; this program computes " +
                        std::to_string(kMels) + " per 10 ms frame and stacks whole frames");
        stack_ = static_cast<int>(cfg.input_size / kMels);
        stacked_.resize(static_cast<size_t>(cfg.input_size));
        if (const int n = model_running_mean(dir)) running_mean_.reset(new RunningMean(n));
        std::ifstream in(dir + "/labels.txt");
        if (!in) throw Error(dir + "/labels.txt: cannot open");
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) labels_.push_back(line);
        is_word_.assign(labels_.size(), true);
        if (!is_word_.empty()) is_word_[0] = false;
        for (size_t k = 1; k < labels_.size(); ++k)
            if (labels_[k].size() > 2 && labels_[k].front() == '<' && labels_[k].back() == '>') is_word_[k] = false;
        const auto words = std::count(is_word_.begin(), is_word_.end(), true);
        if (words < 1) throw Error(dir + "/labels.txt: needs the blank and at least one word");
        const int H = model_->output_size(), K = static_cast<int>(labels_.size());
        const deeprnn::Tensor* ow = find(w, "output.weight", dir);
        const deeprnn::Tensor* ob = find(w, "output.bias", dir);
        if (ow->shape != std::vector<int64_t>{K + 1, H} || ob->shape != std::vector<int64_t>{K + 1})
            throw Error(dir + ": output.weight must be [" + std::to_string(K + 1) + ", " + std::to_string(H) +
                        "] and output.bias [" + std::to_string(K + 1) + "] (labels.txt has " + std::to_string(K) + " lines)");
        out_w_ = ow->data;
        out_b_ = ob->data;
        h_.resize(H);
        logits_.resize(K + 1);
        post_.resize(K);
        describe_ = "lstm " + std::to_string(cfg.num_layers) + "x" + std::to_string(cfg.hidden_size) + ", " +
                    std::to_string(words) + " words, " + std::to_string(10 * stack_) + " ms steps" +
                    (running_mean_ ? ", running mean " + std::to_string(running_mean_->length()) + " frames" : "");
    }

    /// Takes one 10 ms log-mel frame; subtracts the running mean if the model asks for it, and every
    /// `stack()`-th frame completes a stacked vector and runs one model step. Sets *stepped to whether it
    /// did; returns true and fills `word` when a word fires.
    bool push(const float* feature, Word* word, bool* stepped) {
        float* dst = stacked_.data() + static_cast<std::ptrdiff_t>(filled_) * kMels;
        std::copy(feature, feature + kMels, dst);
        if (running_mean_) running_mean_->apply(dst);
        *stepped = ++filled_ == stack_;
        if (!*stepped) return false;
        filled_ = 0;
        return step(stacked_.data(), word);
    }
    int stack() const { return stack_; }

    /// Forgets the stream's state and the transcript: ready for a new recording.
    void reset() {
        stream_->reset();
        if (running_mean_) running_mean_->reset();
        frame_ = 0;
        last_end_ = -1;
        prev_ = 0;
        filled_ = 0;
        run_fired_ = false;
        std::fill(speech_.begin(), speech_.end(), false);
        transcript_.clear();
    }
    const std::vector<std::string>& transcript() const { return transcript_; }
    /// The output layer of the last model step (K CTC logits, then the speech-activity logit).
    const std::vector<float>& outputs() const { return logits_; }
    const std::string& describe() const { return describe_; }

private:
    /// Runs one model step on a stacked vector; returns true and fills `word` when a word fires on it (a
    /// label that is not a word fires and takes its speech, but is not returned).
    bool step(const float* feature, Word* word) {
        stream_->push(feature, 1, h_.data());
        const int K = static_cast<int>(labels_.size()), H = static_cast<int>(h_.size());
        for (int k = 0; k <= K; ++k) {
            const float* row = out_w_.data() + static_cast<size_t>(k) * H;
            float acc = out_b_[k];
            for (int j = 0; j < H; ++j) acc += row[j] * h_[j];
            logits_[k] = acc;
        }
        const float top = *std::max_element(logits_.begin(), logits_.begin() + K);
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) sum += post_[k] = std::exp(logits_[k] - top);
        for (int k = 0; k < K; ++k) post_[k] /= sum;
        const int best = static_cast<int>(std::max_element(post_.begin(), post_.end()) - post_.begin());
        const int64_t t = frame_++;
        speech_[t % kHistory] = logits_[K] > 0.0f;  // sigmoid > 0.5

        // A run of one arg-max label fires once, on its first frame whose posterior reaches the floor
        // (floor 0: on the run's first frame, plain greedy CTC).
        if (best != prev_) run_fired_ = false;
        bool fired = false;
        if (best != 0 && !run_fired_ && post_[best] >= min_confidence_) {
            // The word's end: last speech frame at or before t (t itself if none since the previous word).
            int64_t e = t;
            while (e > last_end_ && t - e < kHistory - 1 && !speech_[e % kHistory]) --e;
            if (e == last_end_ || t - e >= kHistory - 1) e = t;
            int64_t s = e;
            while (s - 1 > last_end_ && t - (s - 1) < kHistory && speech_[(s - 1) % kHistory]) --s;
            last_end_ = e;
            run_fired_ = true;
            fired = is_word_[static_cast<size_t>(best)];
            if (fired) {
                word->text = labels_[best];
                word->start = frame_time(s * stack_ + stack_ / 2);
                word->end = frame_time(e * stack_ + stack_ / 2);
                word->confidence = post_[best];
            }
        }
        if (fired) transcript_.push_back(word->text);
        prev_ = best;
        return fired;
    }

    static const deeprnn::Tensor* find(const deeprnn::Weights& w, const std::string& name, const std::string& dir) {
        auto it = w.find(name);
        if (it == w.end()) throw Error(dir + ": missing " + name + ".npy");
        return &it->second;
    }

    static constexpr int kHistory = 256;  // model steps of speech flags kept: the longest word we time (7.7 s at 30 ms)
    std::unique_ptr<deeprnn::Model> model_;
    std::unique_ptr<deeprnn::Stream> stream_;
    std::unique_ptr<RunningMean> running_mean_;  // null: raw log-mel (no features.txt)
    std::vector<std::string> labels_;
    std::vector<bool> is_word_;  // false: the blank, and labels in angle brackets (not reported)
    std::vector<float> out_w_, out_b_, h_, logits_, post_;
    std::array<bool, kHistory> speech_{};
    int64_t frame_ = 0, last_end_ = -1;
    int prev_ = 0, stack_ = 1, filled_ = 0;
    std::vector<float> stacked_;
    bool run_fired_ = false;
    float min_confidence_ = 0;
    std::vector<std::string> transcript_;
    std::string describe_;
};

// ---------------------------------------------------------------------------
// [SECTION] 4. Command line
// ---------------------------------------------------------------------------

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_sigint(int) { g_stop = 1; }

const char* kUsage =
    "usage: deeprnn-speech [options] FILE.wav|- ...\n"
    "  Transcribes 16 kHz mono 16-bit WAV files, or a WAV stream on stdin ('-'),\n"
    "  10 ms at a time; prints each word with its start and end time, then the\n"
    "  real-time factor and the p50/p99 compute time per 10 ms frame.\n"
    "options:\n"
    "  --model DIR          model directory (default samples/speech/model)\n"
    "  --threads N          deeprnn worker threads (default 1; 0 = all physical cores)\n"
    "  --backend B          cpu, auto or cuda (default cpu)\n"
    "  --precision P        recurrent weights f32, bf16 or int8 (default f32; docs/PRECISION.md)\n"
    "  --min-confidence P   a word fires only once its posterior reaches P (default " KMINCONF_STR ")\n"
    "  --expect FILE        compare the transcript of the one input with the words in FILE;\n"
    "                       exit status 1 when they differ\n"
    "  --outputs FILE.npy   write the output layer of every model step [T / S, K+1] (one input)\n"
    "  --features-only DIR  write each input's log-mel features as DIR/NAME.npy [T, 40]\n"
    "                       (10 ms frames, not stacked) and nothing else (the training\n"
    "                       script uses this and stacks them as the program does)\n"
    "  --running-mean N     with --features-only: subtract the causal mean of the last N\n"
    "                       frames, as a model whose features.txt says \"running-mean N\" does\n"
    "  --help\n"
    "microphone: sox -d -r 16000 -c 1 -b 16 -t wav - | deeprnn-speech -\n";

std::vector<std::string> read_words(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(path + ": cannot open");
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}

std::string join(const std::vector<std::string>& words) {
    std::string s;
    for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
    return s;
}

int features_only(const std::vector<std::string>& inputs, const std::string& dir, int running_mean) {
    LogMel mel;
    std::unique_ptr<RunningMean> norm(running_mean > 0 ? new RunningMean(running_mean) : nullptr);
    std::vector<int16_t> pcm(4096);
    std::vector<float> frames(static_cast<size_t>(pcm.size() / kHop + 2) * kMels);
    for (const std::string& path : inputs) {
        WavReader wav(path);
        mel.reset();
        if (norm) norm->reset();
        deeprnn::Tensor t;
        for (int n; (n = wav.read(pcm.data(), static_cast<int>(pcm.size()))) > 0;) {
            const int f = mel.push(pcm.data(), n, frames.data(), static_cast<int>(frames.size() / kMels));
            if (norm)
                for (int k = 0; k < f; ++k) norm->apply(frames.data() + static_cast<size_t>(k) * kMels);
            t.data.insert(t.data.end(), frames.begin(), frames.begin() + static_cast<size_t>(f) * kMels);
        }
        t.shape = {static_cast<int64_t>(t.data.size() / kMels), kMels};
        std::string stem = path == "-" ? "stdin" : path.substr(path.find_last_of('/') + 1);
        if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".wav") == 0) stem.resize(stem.size() - 4);
        deeprnn::save_npy(dir + "/" + stem + ".npy", t);
    }
    return 0;
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) try {
    std::string model_dir = "samples/speech/model", expect, outputs_path, features_dir, backend_name = "cpu",
                precision_name = "f32";
    int threads = 1, running_mean = 0;
    float min_confidence = kMinConfidence;
    std::vector<std::string> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw Error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (a == "--model") {
            model_dir = value();
        } else if (a == "--threads") {
            const std::string v = value();
            char* end = nullptr;
            const long n = std::strtol(v.c_str(), &end, 10);
            if (v.empty() || *end || n < 0 || n > 1024) throw Error("--threads " + v + ": must be a whole number in [0, 1024]");
            threads = static_cast<int>(n);
        } else if (a == "--backend") {
            backend_name = value();
        } else if (a == "--precision") {
            precision_name = value();
        } else if (a == "--min-confidence") {
            const std::string v = value();
            char* end = nullptr;
            const double p = std::strtod(v.c_str(), &end);
            if (v.empty() || *end || !(p >= 0 && p <= 1)) throw Error("--min-confidence " + v + ": must be in [0, 1]");
            min_confidence = static_cast<float>(p);
        } else if (a == "--expect") {
            expect = value();
        } else if (a == "--outputs") {
            outputs_path = value();
        } else if (a == "--features-only") {
            features_dir = value();
        } else if (a == "--running-mean") {
            const std::string v = value();
            char* end = nullptr;
            const long n = std::strtol(v.c_str(), &end, 10);
            if (v.empty() || *end || n < 1 || n > 100000) throw Error("--running-mean " + v + ": must be a whole number in [1, 100000]");
            running_mean = static_cast<int>(n);
        } else if (a.size() > 1 && a[0] == '-') {
            throw Error("unknown option " + a + " (--help lists them)");
        } else {
            inputs.push_back(a);
        }
    }
    if (inputs.empty()) {
        std::fputs(kUsage, stderr);
        return 2;
    }
    if (!features_dir.empty()) return features_only(inputs, features_dir, running_mean);
    if (running_mean > 0)
        throw Error("--running-mean goes with --features-only; a model asks for it with features.txt in its directory");
    if ((!expect.empty() || !outputs_path.empty()) && inputs.size() != 1)
        throw Error("--expect and --outputs take exactly one input");
    deeprnn::Backend backend;
    if (backend_name == "cpu") backend = deeprnn::Backend::cpu;
    else if (backend_name == "auto") backend = deeprnn::Backend::auto_;
    else if (backend_name == "cuda") backend = deeprnn::Backend::cuda;
    else throw Error("--backend " + backend_name + ": must be cpu, auto or cuda");

    deeprnn::WeightPrecision precision;
    if (precision_name == "f32") precision = deeprnn::WeightPrecision::f32;
    else if (precision_name == "bf16") precision = deeprnn::WeightPrecision::bf16;
    else if (precision_name == "int8") precision = deeprnn::WeightPrecision::int8;
    else throw Error("--precision " + precision_name + ": must be f32, bf16 or int8");

    Recognizer rec(model_dir, threads, backend, precision, min_confidence);
    LogMel mel;
    struct sigaction sa;  // Ctrl-C ends a live stream cleanly: the summary is still printed
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, nullptr);

    std::vector<double> frame_ms;
    double audio_s = 0, compute_s = 0;
    std::vector<float> outputs;
    bool mismatch = false;
    for (const std::string& path : inputs) {
        WavReader wav(path);
        rec.reset();
        mel.reset();
        std::printf("== %s\n", wav.name().c_str());
        std::fflush(stdout);
        int16_t pcm[kHop];
        float feature[kMels];
        int64_t samples = 0;
        // One 10 ms hop at a time, as a live stream delivers it.
        for (int n; !g_stop && (n = wav.read(pcm, kHop)) > 0;) {
            samples += n;
            const auto t0 = std::chrono::steady_clock::now();
            const int f = mel.push(pcm, n, feature, 1);
            Word w;
            bool stepped = false;
            const bool fired = f == 1 && rec.push(feature, &w, &stepped);
            const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (f == 0) continue;
            compute_s += dt;
            frame_ms.push_back(dt * 1e3);
            if (stepped && !outputs_path.empty()) outputs.insert(outputs.end(), rec.outputs().begin(), rec.outputs().end());
            if (fired) {
                std::printf("  %7.2f - %7.2f  %-6s (%.2f)\n", w.start, w.end, w.text.c_str(), w.confidence);
                std::fflush(stdout);
            }
        }
        audio_s += static_cast<double>(samples) / kRate;
        std::printf("words: %s\n", join(rec.transcript()).c_str());
        if (!expect.empty()) {
            const std::vector<std::string> want = read_words(expect);
            mismatch = want != rec.transcript();
            std::printf("expected: %s  [%s]\n", join(want).c_str(), mismatch ? "DIFFERENT" : "match");
        }
        std::fflush(stdout);
    }
    if (!outputs_path.empty()) {
        deeprnn::Tensor t;
        const int64_t width = static_cast<int64_t>(rec.outputs().size());
        t.shape = {static_cast<int64_t>(outputs.size()) / width, width};
        t.data = std::move(outputs);
        deeprnn::save_npy(outputs_path, t);
    }
    const double rtf = audio_s > 0 ? compute_s / audio_s : 0.0;
    std::printf("real-time factor %.4f (%.0fx faster than real time): %.3f s of compute for %.2f s of audio in %zu file(s)\n",
                rtf, rtf > 0 ? 1.0 / rtf : 0.0, compute_s, audio_s, inputs.size());
    std::printf("compute per 10 ms frame: p50 %.4f ms, p99 %.4f ms over %zu frames (%s; threads %d, backend %s)\n",
                percentile(frame_ms, 0.50), percentile(frame_ms, 0.99), frame_ms.size(), rec.describe().c_str(), threads,
                backend_name.c_str());
    return mismatch ? 1 : 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "deeprnn-speech: %s\n", e.what());
    return 2;
}
