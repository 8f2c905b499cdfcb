// engine.hpp — the packed model and the per-caller workspace that runs it.
//
// A model is L layers x D directions. Each direction of every layer is split
// by hidden units across a group of pool workers (partition.hpp); worker q of
// the group owns, for its units and all gates: the packed input weights, the
// packed recurrent weights, the folded biases and the peepholes. Gate order
// inside the library is PyTorch's (LSTM i,f,g,o; GRU r,z,n).
#pragma once
#include "cells.hpp"
#include "gpu_plan.hpp"
#include "kernels.hpp"
#include "partition.hpp"
#include "pool.hpp"
#include "schedule.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace deeprnn {
namespace detail {

// One layer-direction's weights as every convention converts them: PyTorch
// layout and gate order. Empty biases/projection/peepholes mean "none".
struct RawLayer {
    std::vector<float> w_ih, w_hh;  // [G*H, in], [G*H, S]
    std::vector<float> b_ih, b_hh;  // [G*H] each, or empty
    std::vector<float> w_hr;        // [P, H], or empty
    std::vector<float> peep;        // [3, H] in order i, f, o, or empty
};

// What worker q of a direction's group owns for one layer. Gate g of unit u
// (slice-local) is row g*padded + u of every packed block.
struct Part {
    PackedMatrix w_x;           // input weights, G*padded rows x in
    PackedMatrix w_h;           // recurrent weights, G*padded rows x S (GRU reset-before-matmul: z only, padded rows)
    bool w_h_finite = false;    // every weight of the layer's weight_hh is finite (see zero_state_product)
    PackedMatrix w_hn;          // GRU reset-before-matmul: n-gate recurrent rows, padded x H
    // GRU reset-before-matmul: U_r by fixed chunks of units (partition.hpp,
    // rbm_chunk_units). Two barriers: this worker's r rows x chunk c, for every
    // chunk c. One barrier: all H r rows x chunk c, for this worker's chunks.
    std::vector<PackedMatrix> w_hr;
    PackedMatrix w_r;           // LSTM projection rows of this worker's proj slice, x H
    std::vector<float> bias_x;  // G*padded: every bias that can join the input projection
    std::vector<float> b_hn;    // padded: GRU linear-before-reset's recurrent n bias, or empty
    std::vector<float> peep;    // 3*padded, i f o, or empty
};

// Runs of at most rows(batch, awake) rows (steps x batch) stay on the caller
// (sched::serial_rows; Config::serial_rows, if set, for every batch). The
// break-even moves with the batch: at batch 1 a step is a matrix-vector
// product, which a second core speeds up little, at batch 20 a matrix
// product, which it nearly halves (GRU 64-64 on the Zen 4 VM: 3,871 rows at
// batch 1, 480 at batch 16), so it is kept per power of two of the batch.
// Kept for each way the workers can be waiting (WeightCentricPool::Idle).
//
// A pool run that finds the workers asleep or napping hands over
// (ModelImpl::hands_over) only where the caller alone finishes a step of a
// layer within their wake-up (MachineModel::dispatch_s, nap_dispatch_s):
// they can join only at a step boundary, so with longer steps they sat
// idle until the caller's first step ended. After 20 ms idle on the Zen 3
// VM, waiting for them instead took LSTM 1024-1024 x1 757-777 us against
// 1,180-1,309 handed over, LSTM 512-512 x1 350-389 against 450-470; napping
// (2 ms idle), LSTM 256-256 x1 58-70 against 88-100.
struct ShortRunLimits {
    std::vector<long> asleep;   // [k]: batches 2^k .. 2^(k+1)-1, the pool's wake-up paid; empty = never
    std::vector<long> napping;  // the same with the workers napping: a hand-over pays nothing to wake them
    std::vector<long> awake;    // the same with the workers awake (runs back to back): no wake-up to pay
    std::vector<char> hand_over_asleep, hand_over_napping;  // [k]: such runs hand over
    static size_t bucket(const std::vector<long>& v, int batch) {
        size_t k = 0;
        while (k + 1 < v.size() && (2L << k) <= batch) ++k;
        return k;
    }
    long rows(int batch, WeightCentricPool::Idle idle) const {
        using Idle = WeightCentricPool::Idle;
        const std::vector<long>& v = idle == Idle::awake ? awake : idle == Idle::napping ? napping : asleep;
        return v.empty() ? 0 : v[bucket(v, batch)];
    }
    // Whether a pool run of `batch` that finds the workers so idle hands over (never awake).
    bool hands_over(int batch, WeightCentricPool::Idle idle) const {
        using Idle = WeightCentricPool::Idle;
        const std::vector<char>& v = idle == Idle::napping ? hand_over_napping : hand_over_asleep;
        return idle != Idle::awake && !v.empty() && v[bucket(asleep, batch)];
    }
};

struct ModelImpl {
    Config cfg;
    int G = 0, H = 0, S = 0, D = 1, L = 1;  // gates, hidden, state, directions, layers
    Activations act;
    Isa isa = Isa::baseline;
    std::shared_ptr<WeightCentricPool> pool;  // its own, or Config::pool's
    int workers = 1;                          // pool workers 0..workers-1 run this model
    // Critical path first (ExecutionChoice::projection_helpers): every plan is
    // worker 0's alone, and workers 1..workers-1 only project inputs for it.
    // So worker 0's share is the whole run (a helper only takes chunks of the
    // projection worker 0 would otherwise make itself, and worker 0 never
    // waits for one: SessionImpl::layers_done_), and a run that finds the
    // helpers idle does not wait for one that has not woken by the time
    // worker 0 is done (dispatch).
    bool helpers = false;
    std::vector<PartitionPlan> plans;       // [layer*D + dir]
    bool pipelined = false;                 // layers as a wavefront of stages (ExecutionChoice::pipelined)
    // GRU reset-before-matmul: the reset product's fixed chunks (partition.hpp),
    // and whether it runs with one barrier per step (ExecutionChoice::rbm_one_barrier).
    int rbm_chunk = 0, rbm_chunks = 0;
    bool rbm_one_barrier = false;
    // Every layer's two directions run on disjoint workers (side by side).
    bool directions_apart = false;
    // A pool run that finds the workers asleep can start on the caller and
    // hand over to them at a step boundary (SessionImpl::run_on_caller): two
    // or more workers, no pipelined stages, no helpers, and a bidirectional
    // layer's directions apart (the caller steps them together); such runs
    // do where a step is short against the wake-up (ShortRunLimits::hands_over).
    bool hands_over = false;
    // Which runs execute every worker's share in turn on the caller, with the
    // same results: waking the pool would cost more than it saves.
    ShortRunLimits short_runs;
    // Per layer-direction: batch-1 runs of at least 2 chunks fold the next
    // chunk's input projection into each step's recurrent product
    // (kernels.hpp, gemv_with_projection; engine.cpp, set_folds).
    std::vector<char> folds;  // [layer*D + dir]
    // Per layer-direction: the input projection of a forward direction runs
    // ahead of its steps in chunks of about this many bytes of its output per
    // worker, into the same slots each chunk, so the chunk stays in L2 beside
    // both weight blocks; 0: every step's projection up front (engine.cpp,
    // set_projection_chunks).
    std::vector<size_t> projection_chunk_bytes;  // [layer*D + dir]
    std::vector<std::vector<Part>> parts;   // [layer*D + dir][worker of the group]
    // Runs of at least `batched_from` sequences run on `batched`: the same
    // weights packed for the plan of that batch, which uses more workers. One
    // plan cannot serve both: at batch 1 a small model is fastest on one core
    // (waking a second costs more than it saves), at batch 20 on all of them.
    // nullptr when the batch-1 plan already splits the recurrence over every thread.
    std::shared_ptr<const ModelImpl> batched;
    int batched_from = 0;
    sched::ExecutionChoice choice;          // what the schedule search chose
    std::string decision;                   // how: heuristic, calibrated, or cached
    // CUDA backend (docs/CUDA.md): when set, forward() runs on the GPU; the
    // CPU side is then a single-worker pack that only keeps sessions valid.
    std::shared_ptr<gpu::GpuModel> gpu;
    std::string gpu_note;                   // backend auto: why CUDA was not used ("" = not built)
    std::string threads_note;               // Config::threads lowered to the CPUs ("" = not)
    // Model::prefetch: the workers 1..workers-1 read their blocks (warm_blocks).
    void prefetch() const;
    // Waits for a prefetch still reading this model's blocks.
    ~ModelImpl();
    // Runs f(w) for w in 0..workers-1: on the caller for one worker, else on the pool.
    template <typename F>
    void run_on_workers(F& f, const bool* ended_alone = nullptr) const {
        if (workers == 1) f(0);
        else pool->run(f, workers, ended_alone);
    }
    const PartitionPlan& plan(int layer, int dir) const { return plans[static_cast<size_t>(layer) * D + dir]; }
    // f(layer, dir, q) for every layer-direction in which pool worker w owns
    // part q (its weights: packed by w, read by w every step).
    template <typename F>
    void for_parts_of(int w, F&& f) const {
        for (int l = 0; l < L; ++l)
            for (int d = 0; d < D; ++d) {
                const int q = w - plan(l, d).first_worker;
                if (q >= 0 && q < plan(l, d).workers()) f(l, d, q);
            }
    }
    int in_size(int layer) const { return layer == 0 ? cfg.input_size : D * S; }
    bool rbm() const { return cfg.cell == Cell::gru && cfg.gru_variant == GruVariant::reset_before_matmul; }
    int chunk_begin(int c) const { return c * rbm_chunk; }
    int chunk_size(int c) const { return std::min(rbm_chunk, H - c * rbm_chunk); }
    int h_padded() const { return (H + isa_width(isa) - 1) / isa_width(isa) * isa_width(isa); }
};

int gates_per_cell(Cell cell);

// The workers behind a public WorkerPool handle (nullptr when empty).
struct PoolAccess {
    static const std::shared_ptr<WeightCentricPool>& of(const WorkerPool& p) { return p.impl_; }
    static void set(WorkerPool& p, std::shared_ptr<WeightCentricPool> w) { p.impl_ = std::move(w); }
};

// Worker threads a model of `cfg` plans for: Config::threads, at most the
// logical CPUs the process may run on unless Config::pool is set; else all of
// Config::pool's workers, else one per physical core.
int planned_threads(const Config& cfg);

// This machine as a multi-threaded plan sees it: sched::default_machine()'s
// measured kernel rates, with the pool's measured step exchange as barrier_s
// where it could be measured (measure_step_exchange). Measured once per process.
sched::MachineModel measured_machine();

// Calibration times runs of Config::tuning_seq_len steps, at most this many.
constexpr int kMaxCalibrationSteps = 1024;

// Validates cfg, chooses the execution plan (schedule.hpp: by model, by
// calibration on this machine, or from the plan cache), creates the pool and
// packs the raw layers (each worker packs its own parts).
std::shared_ptr<const ModelImpl> build_model(const Config& cfg, const std::vector<RawLayer>& raw);
// The same for a given machine instead of this one's (sched::default_machine()):
// tests use fixed rates, since measured ones vary with the build and the load.
std::shared_ptr<const ModelImpl> build_model(const Config& cfg, const std::vector<RawLayer>& raw,
                                             const sched::MachineModel& machine);

// Config::convention's tensors of `w` as the engine's raw layers (conventions.cpp).
std::vector<RawLayer> import_weights(const Config& c, const Weights& w);

// Per-caller scratch memory and the forward pass over it.
class SessionImpl {
public:
    explicit SessionImpl(std::shared_ptr<const ModelImpl> model);

    const ModelImpl& model() const { return *m_; }

    // Runs all layers over x [T, B, E] time-major. h [L*D, B, S] and c [L*D, B, H]
    // hold the initial states on entry and the final states on return.
    // y [T, B, D*S] may be nullptr. Sizes must already be validated.
    // batch_first: x [B, T, E] and y [B, T, D*S] instead, transposed a
    // segment at a time. A run of more than segment_steps_for(B) steps goes
    // segment by segment (engine.cpp), with the same bits as one pass: a
    // forward-only model's all layers at once, a model with a reverse
    // direction layer by layer, each direction through its own windows.
    void forward(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c,
                 bool batch_first = false);

    // Steps per segment of a long run: segment_steps if set (tests), else as
    // many as kSegmentBytes of input projections (and a forward-only model's
    // layer outputs) hold, at least kMinSegmentSteps.
    int segment_steps_for(int B) const;
    int segment_steps = 0;
    // Steps per chunk of a forward direction's input projection, for tests
    // (0: as ModelImpl::projection_chunk_bytes says).
    int projection_chunk_steps = 0;
    static constexpr size_t kSegmentBytes = size_t{16} << 20;
    static constexpr int kMinSegmentSteps = 256;  // a segment's pool wake-up and pipeline fill stay < 1% of it
    // Tests: every pool run of a model that can hand over (engine.cpp,
    // run_on_caller) does, and the workers join it exactly here: before
    // `step` of `layer` (step -1: before its shares begin, each worker then
    // beginning its own; a layer past the run's: never), whenever they wake.
    struct JoinPoint {
        int layer, step;
    };
    std::optional<JoinPoint> hand_over_at;
    uint64_t hand_overs = 0;  // pool runs started as hand-overs, wherever they joined (tests)
    // A hand-over's caller runs the workers' steps only where each share's
    // projection before step 0 is at most this many rows (or a batch-1 fold's).
    static constexpr int kHandOverRows = 16;
    static_assert(2 * kProjectAhead <= kHandOverRows, "a batch-1 run too short to fold hands over too");
    static_assert(sched::pipeline_lag(1, true) >= 2 * kProjectAhead, "a folded stage layer reads 2 chunks ahead");

    // Initial/final state scratch [L*D, B, S] and [L*D, B, H].
    float* state_h() { return h_state_.data(); }
    float* state_c() { return c_state_.data(); }

    // Session::set_profiling. While `on`, every pass adds, per pool worker,
    // the seconds of its share and of its waits within it; `workers` is the
    // most workers a pass of the run used. Shared with batched_, so a run
    // there counts here too; a line per worker, each written by its own.
    struct alignas(64) WorkerClock {
        double seconds = 0, wait_seconds = 0;
    };
    struct Clocks {
        bool on = false;
        int workers = 0;
        std::vector<WorkerClock> worker;  // [pool size], made when turned on
        RunProfile last;                  // Session::last_profile
    };
    std::shared_ptr<Clocks> clocks = std::make_shared<Clocks>();
    void set_profiling(bool on);
    void start_profile();                 // before a run: zero the clocks
    void end_profile(double run_seconds);  // after it: clocks into `last`

private:
    struct Run;   // one forward pass's arguments, shared by the workers
    struct Pass;  // what one dispatch to the workers runs: layers, and a Run per direction
    // Steps of a layer finished in this run, for the pipelined stage after it.
    struct alignas(64) Progress {
        std::atomic<int> steps{0};
    };
    // Critical path first (ModelImpl::helpers), per layer-direction: the next
    // chunk of steps whose input projection no worker has claimed yet, and
    // per chunk the pass (pass_) that projected it last.
    struct alignas(64) Claims {
        std::atomic<int> next{0};
    };
    int helper_chunk_steps(int B) const { return std::max(1, sched::kHelperChunkRows / B); }
    void help_project(const Run& r, int layer, int dir, const float* in);
    struct WorkerScratch {
        AlignedFloats xproj;  // [T*B, G*padded]
        AlignedFloats gates;  // [B, G*padded]
        AlignedFloats proj;   // [B, proj padded]
        AlignedFloats ahead;  // [in, kProjectAhead]: the next chunk's inputs, k-major (ModelImpl::folds)
        // GRU reset-before-matmul. Two barriers: the chunks' partial reset
        // products of its rows, [chunks, B, padded]. One barrier: r*h of every
        // unit [B, H], and r/z scratch for other workers' units [B, 2*padded].
        AlignedFloats part, rh, other;
    };
    struct DirectionRun;  // one worker's share of one layer-direction, phase by phase (engine.cpp)
    // Time-major scratch copies of a segment for batch-first callers, and the
    // output a caller does not want, sized on demand.
    float* staging_in(size_t n);
    float* staging_out(size_t n);
    void forward_segment(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c);
    void forward_windows(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c,
                         bool batch_first, int seg);
    void reserve_rows(size_t projected_rows, size_t output_rows);
    void reserve_for(int T, int B, bool batch_first, bool with_y);
    void dispatch(const Pass& p, int T, int B);
    void work(const Pass& p, int worker);
    void work_share(const Pass& p, int worker);
    template <class F>
    void timed(int worker, double WorkerClock::*clock, F&& f);  // f(), its seconds added to that clock while profiling
    template <class Wait>
    void waiting(int worker, Wait&& wait);
    int wait_for_steps(int worker, const std::atomic<int>& steps, int step);
    void run_direction(const Run& r, int layer, int dir, int q, const float* in, float* out, const Progress* ready,
                       bool helped = false);
    void run_step(DirectionRun& d, int s);
    void run_steps(DirectionRun& d, int from);
    void run_stage(const Pass& p, int worker);
    void work_from(const Pass& p, int worker, JoinPoint j);
    JoinPoint run_on_caller(const Pass& p, bool hand_over);
    JoinPoint await_join();
    bool workers_arrived() const;
    JoinPoint publish_join(int layer, int step);
    DirectionRun& serial_run(int dir, int q);  // worker q of direction dir's group: its slot of serial_runs_
    DirectionRun& stage_run(int layer);        // a pipelined layer's slot of serial_runs_ (run_stage)
    static size_t stage_slot_bytes();
    // Worker q of layer-direction li's scratch: its pool worker's, or
    // pipelined, its layer's (a stage runs its layers step by step).
    size_t scratch_index(size_t li, int q) const { return m_->pipelined ? li : m_->plans[li].first_worker + q; }
    float* layer_buffer(int layer);
    const float* layer_input(const Pass& p, const Run& rd, int layer);
    float* layer_output(const Pass& p, const Run& rd, int layer);

    std::shared_ptr<const ModelImpl> m_;
    std::unique_ptr<SessionImpl> batched_;             // on m_->batched, made by its first run
    size_t projected_rows_ = 0, output_rows_ = 0;      // T*B the xproj and layer_out_ buffers hold
    std::chrono::steady_clock::time_point last_end_;   // when this session's last run ended
    // A run this soon after the last one is "back to back": the pool's workers
    // spin this long after a run before they sleep (pool.cpp).
    static constexpr int kBackToBackMicros = 50;
    bool burst_woke_pool_ = false;  // this burst of back-to-back runs has woken the pool (dispatch)
    std::vector<WorkerScratch> scratch_;               // per pool worker, or pipelined per layer (scratch_index)
    std::vector<AlignedFloats> h_swap_, h_raw_, rh_;   // per layer-direction, [B, S] / [B, H]
    // GRU reset-before-matmul with one barrier, per layer-direction: the reset
    // product's chunk partials of all H rows, [2 (step parity), chunks, B, H padded].
    std::vector<AlignedFloats> partials_;
    std::vector<std::vector<float>> layer_out_;        // [T, B, D*S] between layers: 2 in turn, or L-1 pipelined
    std::unique_ptr<Progress[]> progress_;             // per layer, pipelined only
    std::unique_ptr<Claims[]> claims_;                 // per layer-direction, helpers only
    std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> chunk_done_;  // per layer-direction [rows], helpers only
    uint32_t pass_ = 0;                                // pool dispatches so far, helpers only (never 0 after the first)
    // Layers worker 0 has finished in this pass, helpers only: a helper
    // projects a layer's input once the layer before is done, and worker 0
    // never waits for a helper (it makes any chunk none has claimed).
    alignas(64) std::atomic<int> layers_done_{0};
    std::vector<float> h_state_, c_state_;             // run()'s state buffers
    std::vector<float> stage_in_, stage_out_;          // batch-first transposes
    std::vector<int32_t> segment_lengths_;             // [D, max_batch]: a segment's lengths per direction
    // Storage for the DirectionRuns of every worker of one layer, both
    // directions (run_on_caller; engine.cpp: the type is complete only
    // there), made with the session so a run allocates nothing.
    std::unique_ptr<unsigned char[]> serial_runs_;
    void make_serial_storage();
    // A pool run that found the workers asleep (dispatch): the caller runs
    // their phases too until they have all woken, and they join it at a step
    // boundary (run_on_caller), taking over their DirectionRuns in
    // serial_runs_. Reset before each such run; published by the pool's run.
    bool handing_over_ = false;
    // This hand-over's caller ran it all, or a helpers run's worker 0
    // is done: workers not yet in may skip it.
    bool ended_alone_ = false;
    struct alignas(64) Handover {
        std::atomic<int> arrived{0};                // workers 1.. that have taken the run
        alignas(64) std::atomic<int64_t> join{-1};  // layer << 32 | (step + 1) where they join; -1: not yet
    };
    Handover handover_;
    SpinBarrier all_;                                  // every worker, between layers (not with helpers)
    std::vector<std::unique_ptr<SpinBarrier>> group_;  // per layer-direction's worker group
};

}  // namespace detail
}  // namespace deeprnn
