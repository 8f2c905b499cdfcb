// api.cpp — the public classes: Model, Session, Stream, and version facts.
//
// Everything here validates, converts layouts and delegates to the engine.
#include "engine.hpp"

#include <chrono>
#include <cmath>
#include <climits>
#include <cstring>
#include <iomanip>
#include <sstream>

namespace deeprnn {
namespace detail {

// Byte range of a buffer for overlap checks; empty when the pointer is null.
struct Span {
    const char* name;
    const void* p;
    size_t bytes;
};

static void require_disjoint(std::initializer_list<Span> outs, std::initializer_list<Span> all) {
    for (const Span& o : outs) {
        if (!o.p) continue;
        const char* a = static_cast<const char*>(o.p);
        for (const Span& s : all) {
            if (!s.p || std::strcmp(s.name, o.name) == 0) continue;  // itself
            const char* b = static_cast<const char*>(s.p);
            if (a < b + s.bytes && b < a + o.bytes) fail(o.name, " overlaps ", s.name, ": outputs must not alias other buffers");
        }
    }
}

// Hands a message to Config::log; deeprnn is silent when no hook is set.
static void log_message(const Config& c, LogLevel level, const std::string& message) {
    if (c.log) c.log(level, message.c_str(), c.log_user);
}

// A moved-from Model holds no data: using it is an error, not a null dereference.
static const ModelImpl& live(const std::shared_ptr<const ModelImpl>& impl) {
    if (!impl) fail("Model: used after move");
    return *impl;
}

}  // namespace detail

const char* version() { return DEEPRNN_VERSION_STRING; }
int version_number() { return DEEPRNN_VERSION_NUMBER; }

std::string build_info() {
    const detail::Activations act = detail::select_activations(0.0);
    std::string s = detail::cat("deeprnn ", version(), "\n");
#if defined(__clang__)
    s += detail::cat("compiler: clang ", __clang_major__, ".", __clang_minor__, "\n");
#elif defined(__GNUC__)
    s += detail::cat("compiler: gcc ", __GNUC__, ".", __GNUC_MINOR__, "\n");
#endif
    s += detail::cat("kernels: ", detail::isa_name(detail::detect_isa()), " (best this CPU supports; chosen at run time)\n");
    s += detail::cat("activations: ", act.isa, ", ", act.terms, " continued-fraction terms at default precision\n");
    int cores = 1;
    std::vector<int> capacity;
    detail::usable_cpus(&cores, &capacity);
    capacity.resize(static_cast<size_t>(cores));
    s += detail::cat("physical cores available: ", detail::describe_cores(capacity), "\n");
    if (const double quota = detail::cgroup_cpu_limit(); quota > 0)
        s += detail::cat("cpu quota (cgroup): ", quota, quota == 1 ? " core" : " cores", ", so threads = 0 means ", detail::default_threads(), "\n");
    s += "blas: not called by the CPU engine (its own packed kernels)\n";
    if (const detail::gpu::CudaBackend* cuda = detail::gpu::cuda_backend()) {
        std::string device;
        const bool ok = cuda->available(&device);
        s += detail::cat("cuda: ", cuda->build, "; ", ok ? "" : "no usable device: ", device, "\n");
    } else {
        s += "cuda: not built (docs/CUDA.md)\n";
    }
    return s;
}

WorkerPool::WorkerPool(int threads, bool pin_threads, double idle_nap_ms) {
    if (threads < 0 || threads > detail::kMaxThreads)
        detail::fail("WorkerPool: threads = ", threads, ": must be in [0, ", detail::kMaxThreads, "] (0 = all cores)");
    impl_ = std::make_shared<detail::WeightCentricPool>(
        threads > 0 ? threads : detail::default_threads(), pin_threads,
        detail::nap_window_us(idle_nap_ms, "WorkerPool: idle_nap_ms"));
}

void WorkerPool::set_idle_nap_ms(double idle_nap_ms) {
    const int us = detail::nap_window_us(idle_nap_ms, "WorkerPool::set_idle_nap_ms: idle_nap_ms");
    if (!impl_) detail::fail("WorkerPool::set_idle_nap_ms: an empty handle (no workers)");
    impl_->set_nap_window(us);
}

double WorkerPool::idle_nap_ms() const { return impl_ ? impl_->nap_window() / 1000.0 : 0.0; }

int WorkerPool::threads() const { return impl_ ? impl_->size() : 0; }

std::string WorkerPool::pinning() const { return impl_ ? impl_->pinning() : std::string(); }

Model::Model(const Config& config, const Weights& weights)
    : impl_(detail::build_model(config, detail::import_weights(config, weights))) {
    if (!config.log) return;  // plan() builds a string: only when someone listens
    detail::log_message(config, LogLevel::info, "Model: plan: " + plan());
    if (!impl_->threads_note.empty()) detail::log_message(config, LogLevel::warning, "Model: " + impl_->threads_note);
    // When the OS refuses pinning the pool lets its workers float, and with
    // fewer cores than threads they take turns; pinning() says which.
    const std::string& pinning = impl_->pool->pinning();
    if ((config.pin_threads && pinning.find("refused") != std::string::npos) || pinning.find("take turns") != std::string::npos)
        detail::log_message(config, LogLevel::warning, "Model: " + pinning);
    const double quota = detail::cgroup_cpu_limit();
    if (const int limit = detail::cgroup_thread_limit(quota); limit > 0 && impl_->pool->size() > limit)
        detail::log_message(config, LogLevel::warning,
                            detail::cat("Model: ", impl_->pool->size(), " threads, but the process's cgroup grants the CPU time of ", quota,
                                        quota == 1 ? " core" : " cores",
                                        ": runs back to back will stall for the rest of each period (threads = 0 respects the quota)"));
}

const Config& Model::config() const { return detail::live(impl_).cfg; }

void Model::prefetch(int batch) const {
    const detail::ModelImpl& m = detail::live(impl_);
    detail::require(batch >= 1 && batch <= m.cfg.max_batch, "Model::prefetch batch", batch,
                    "must be in [1, Config.max_batch = ", m.cfg.max_batch, "]");
    (m.batched && batch >= m.batched_from ? *m.batched : m).prefetch();
}

int Model::output_size() const {
    const detail::ModelImpl& m = detail::live(impl_);
    return m.D * m.S;
}

// "runs of <= 3871 rows (steps x batch) on the caller alone at batch 1, 480 at batch 16":
// the limits of the first and the last power of two of the batch from `from`.
static std::string short_runs_text(const detail::ShortRunLimits& r, int from = 1) {
    const int last = r.asleep.empty() ? 1 : 1 << (r.asleep.size() - 1);
    using Idle = detail::WeightCentricPool::Idle;
    const long first_rows = r.rows(from, Idle::asleep), last_rows = r.rows(last, Idle::asleep);
    if (first_rows <= 0 && last_rows <= 0) return "every run on the pool";
    std::string s = detail::cat("runs of <= ", first_rows, " rows (steps x batch) on the caller alone");
    if (last > from && last_rows != first_rows) s += detail::cat(" at batch ", from, ", ", last_rows, " at batch ", last);
    // Handed over (engine.cpp, run_on_caller), a run that wakes the pool can
    // be worth it where one that finds it awake is not.
    if (const long awake = r.rows(from, Idle::awake); awake > first_rows)
        s += detail::cat(" (<= ", awake, " at batch ", from, " back to back)");
    else if (const long napping = r.rows(from, Idle::napping); napping < first_rows)
        s += detail::cat(" (<= ", napping, " at batch ", from, " with the workers napping)");
    return s;
}

std::string Model::plan() const {
    const detail::ModelImpl& m = detail::live(impl_);
    if (m.gpu) return "backend cuda; " + m.gpu->plan();
    const detail::PackedMatrix& wh = m.parts.at(0).at(0).w_h;
    const char* dots = wh.vnni       ? " (VNNI dot products, h quantised per step)"
                       : wh.dot_bf16 ? " (AVX512_BF16 dot products, h rounded to bf16 per step)"
                                     : "";
    std::string s = detail::cat("backend cpu; kernels ", detail::isa_name(m.isa), ", recurrent weights ",
                                to_string(m.cfg.weight_precision), dots,
                                "; activations ", m.act.isa, " (",
                                m.act.terms, " terms)",
                                m.cfg.gate_activation == GateActivation::hard_sigmoid
                                    ? detail::cat(", hard_sigmoid gates (", m.cfg.hard_sigmoid_alpha, " x + ", m.cfg.hard_sigmoid_beta, ")")
                                    : std::string(),
                                m.cfg.cell_activation == CellActivation::relu ? ", relu candidates" : "",
                                "; ", m.L, " layer(s) x ", m.D, " direction(s); schedule ",
                                m.choice.str(), ", ", m.decision, "; ", m.pool->pinning());
    if (m.pipelined) {
        s += "; layers pipelined:";
        for (int l = 0; l < m.L; ++l) s += detail::cat(l ? "," : "", " layer ", l, " on worker ", m.plan(l, 0).first_worker);
    }
    if (m.helpers)
        s += detail::cat("; critical path first: the recurrence on worker 0 alone, every layer's input projection in chunks of ",
                         detail::sched::kHelperChunkRows, " rows (steps x batch) claimed by workers 0..", m.workers - 1);
    for (int d = 0; d < m.D && !m.pipelined; ++d) {
        const detail::PartitionPlan& p = m.plan(0, d);  // every layer splits alike
        s += detail::cat("; direction ", d, ": workers ", p.first_worker, "..", p.first_worker + p.workers() - 1, ", units");
        for (const detail::Slice& sl : p.slices) s += detail::cat(" [", sl.begin, ",", sl.begin + sl.size, ")");
    }
    if (m.rbm())
        s += detail::cat("; GRU reset product in ", m.rbm_chunks, " chunk(s) of ", m.rbm_chunk, " units, ",
                         m.rbm_one_barrier ? "one barrier per step (partials of every unit reduced on every worker)"
                                           : "two barriers per step");
    int folded = 0;
    for (char f : m.folds) folded += f;
    if (folded)
        s += detail::cat("; batch 1: the next ", detail::kProjectAhead, " steps' input projection folded into each step (",
                         folded, " of ", m.folds.size(), " layer-directions)");
    if (m.workers > 1) s += "; " + short_runs_text(m.short_runs);
    // Where a step on the caller alone outlasts the wake-up (ShortRunLimits::hands_over).
    using Idle = detail::WeightCentricPool::Idle;
    if (m.hands_over && !m.short_runs.hands_over(1, Idle::napping))
        s += m.short_runs.hands_over(1, Idle::asleep)
                 ? "; at batch 1 a run that finds the workers napping waits for them (a step outlasts a nap)"
                 : "; at batch 1 a run that finds the workers idle waits for them (a step outlasts their wake-up)";
    if (m.batched)
        s += detail::cat("; batches of >= ", m.batched_from, " sequences: schedule ", m.batched->choice.str(), ", ",
                         m.batched->decision, "; ", m.batched->pool->pinning(),
                         ", ", short_runs_text(m.batched->short_runs, m.batched_from));
    if (!m.gpu_note.empty()) s += "; cuda not used: " + m.gpu_note;
    if (!m.threads_note.empty()) s += "; " + m.threads_note;
    return s;
}

namespace detail {

// forward(), its RunProfile recorded while the session profiles.
template <class Forward>
static void profiled(SessionImpl& s, Forward&& forward) {
    if (!s.clocks->on) return forward();
    s.start_profile();
    const auto begin = std::chrono::steady_clock::now();
    forward();
    s.end_profile(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
}

}  // namespace detail

Session::Session(const Model& model) {
    detail::live(model.impl_);
    impl_.reset(new detail::SessionImpl(model.impl_));
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

void Session::run(const RunInput& in, const RunOutput& out) {
    using detail::require;
    if (!impl_) detail::fail("Session: used after move");
    detail::SessionImpl& s = *impl_;
    const detail::ModelImpl& m = s.model();
    const Config& c = m.cfg;
    require(in.x != nullptr, "RunInput.x", "null", "the input sequence is required");
    require(in.seq_len >= 1, "RunInput.seq_len", in.seq_len, "must be >= 1");
    require(in.batch >= 1 && in.batch <= c.max_batch, "RunInput.batch", in.batch,
            "must be in [1, Config.max_batch = ", c.max_batch, "]");
    // The engine counts rows (steps x sequences) in int.
    require(static_cast<int64_t>(in.seq_len) * in.batch <= INT_MAX, "RunInput.seq_len", in.seq_len,
            "seq_len * batch (", in.batch, ") must be at most ", INT_MAX);
    const bool lstm = c.cell == Cell::lstm;
    require(lstm || !in.c0, "RunInput.c0", "set", "cell = ", to_string(c.cell), " has no cell state");
    require(lstm || !out.c_n, "RunOutput.c_n", "set", "cell = ", to_string(c.cell), " has no cell state");
    const int T = in.seq_len, B = in.batch;
    if (in.lengths)
        for (int b = 0; b < B; ++b)
            if (in.lengths[b] < 0 || in.lengths[b] > T)
                detail::fail("RunInput.lengths[", b, "] = ", in.lengths[b], ": must be in [0, seq_len = ", T, "]");

    const size_t f = sizeof(float), LD = static_cast<size_t>(m.L) * m.D;
    const size_t xn = static_cast<size_t>(T) * B * c.input_size, yn = static_cast<size_t>(T) * B * m.D * m.S;
    const size_t hn = LD * B * m.S, cn = LD * B * m.H;
    detail::require_disjoint(
        {{"RunOutput.y", out.y, yn * f}, {"RunOutput.h_n", out.h_n, hn * f}, {"RunOutput.c_n", out.c_n, cn * f}},
        {{"RunInput.x", in.x, xn * f},
         {"RunInput.lengths", in.lengths, in.lengths ? B * sizeof(int32_t) : 0},
         {"RunInput.h0", in.h0, hn * f},
         {"RunInput.c0", in.c0, cn * f},
         {"RunOutput.y", out.y, yn * f},
         {"RunOutput.h_n", out.h_n, hn * f},
         {"RunOutput.c_n", out.c_n, cn * f}});

    // States: [L*D, B, .] copied in, updated in place, copied out.
    float* h = s.state_h();
    float* cst = lstm ? s.state_c() : nullptr;
    if (in.h0) std::memcpy(h, in.h0, hn * f); else std::fill_n(h, hn, 0.0f);
    if (cst) {
        if (in.c0) std::memcpy(cst, in.c0, cn * f); else std::fill_n(cst, cn, 0.0f);
    }
    detail::profiled(s, [&] { s.forward(in.x, T, B, in.lengths, out.y, h, cst, in.batch_first); });
    if (out.h_n) std::memcpy(out.h_n, h, hn * f);
    if (out.c_n) std::memcpy(out.c_n, cst, cn * f);
}

void Session::set_profiling(bool on) {
    if (!impl_) detail::fail("Session: used after move");
    impl_->set_profiling(on);
}

const RunProfile& Session::last_profile() const {
    if (!impl_) detail::fail("Session: used after move");
    return impl_->clocks->last;
}

std::string to_string(const RunProfile& profile) {
    if (profile.workers.empty() && profile.seconds == 0) return "not profiled";
    std::ostringstream s;
    s << std::fixed << std::setprecision(3) << "run " << profile.seconds * 1e3 << " ms";
    for (size_t w = 0; w < profile.workers.size(); ++w)
        s << (w ? ", " : ": ") << "worker " << w << ' ' << profile.workers[w].seconds * 1e3 << " ms ("
          << profile.workers[w].wait_seconds * 1e3 << " waiting)";
    return s.str();
}

Stream::Stream(const Model& model, int batch) : batch_(batch) {
    const Config& c = model.config();
    if (c.direction != Direction::forward)
        detail::fail("Stream: Config.direction = ", to_string(c.direction),
                     ": streaming needs a forward-only model (the reverse direction needs the future)");
    detail::require(batch >= 1 && batch <= c.max_batch, "Stream batch", batch,
                    "must be in [1, Config.max_batch = ", c.max_batch, "]");
    impl_.reset(new detail::SessionImpl(model.impl_));
    const detail::ModelImpl& m = impl_->model();
    h_.assign(static_cast<size_t>(m.L) * batch * m.S, 0.0f);
    if (c.cell == Cell::lstm) c_.assign(static_cast<size_t>(m.L) * batch * m.H, 0.0f);
}

Stream::~Stream() = default;
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;

void Stream::push(const float* x, int frames, float* y) { push(x, frames, y, nullptr); }

void Stream::push(const float* x, int frames, float* y, const int32_t* lengths) {
    if (!impl_) detail::fail("Stream: used after move");
    detail::require(x != nullptr, "Stream::push x", "null", "the input frames are required");
    detail::require(frames >= 1, "Stream::push frames", frames, "must be >= 1");
    detail::require(static_cast<int64_t>(frames) * batch_ <= INT_MAX, "Stream::push frames", frames,
                    "frames * batch (", batch_, ") must be at most ", INT_MAX);
    const detail::ModelImpl& m = impl_->model();
    const size_t xn = static_cast<size_t>(frames) * batch_ * m.cfg.input_size;
    const size_t yn = static_cast<size_t>(frames) * batch_ * m.S;
    if (lengths)
        for (int b = 0; b < batch_; ++b)
            if (lengths[b] < 0 || lengths[b] > frames)
                detail::fail("Stream::push lengths[", b, "] = ", lengths[b], ": must be in [0, frames = ", frames, "]");
    detail::require_disjoint({{"Stream::push y", y, yn * sizeof(float)}},
                             {{"Stream::push x", x, xn * sizeof(float)},
                              {"Stream::push lengths", lengths, lengths ? batch_ * sizeof(int32_t) : 0}});
    detail::profiled(*impl_, [&] { impl_->forward(x, frames, batch_, lengths, y, h_.data(), c_.empty() ? nullptr : c_.data()); });
}

void Stream::set_profiling(bool on) {
    if (!impl_) detail::fail("Stream: used after move");
    impl_->set_profiling(on);
}

const RunProfile& Stream::last_profile() const {
    if (!impl_) detail::fail("Stream: used after move");
    return impl_->clocks->last;
}

void Stream::reset() {
    std::fill(h_.begin(), h_.end(), 0.0f);
    std::fill(c_.begin(), c_.end(), 0.0f);
}

void Stream::reset(int stream) {
    if (!impl_) detail::fail("Stream: used after move");
    detail::require(stream >= 0 && stream < batch_, "Stream::reset stream", stream, "must be in [0, batch = ", batch_, ")");
    const detail::ModelImpl& m = impl_->model();
    for (int l = 0; l < m.L; ++l) {  // h [L, batch, S], c [L, batch, H]
        std::fill_n(h_.begin() + (static_cast<size_t>(l) * batch_ + stream) * m.S, m.S, 0.0f);
        if (!c_.empty()) std::fill_n(c_.begin() + (static_cast<size_t>(l) * batch_ + stream) * m.H, m.H, 0.0f);
    }
}

void Stream::set_state(const float* h, const float* c) {
    if (!impl_) detail::fail("Stream: used after move");
    // Checked before anything is written: a refused call leaves the state as it was.
    if (c_.empty()) detail::require(c == nullptr, "Stream::set_state c", "set", "only LSTM models have a cell state");
    if (h) std::memcpy(h_.data(), h, h_.size() * sizeof(float)); else std::fill(h_.begin(), h_.end(), 0.0f);
    if (c_.empty()) return;
    if (c) std::memcpy(c_.data(), c, c_.size() * sizeof(float)); else std::fill(c_.begin(), c_.end(), 0.0f);
}

const float* Stream::h() const { return h_.data(); }
const float* Stream::c() const { return c_.empty() ? nullptr : c_.data(); }
int Stream::batch() const { return batch_; }

}  // namespace deeprnn
