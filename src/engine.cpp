// engine.cpp — packing and the forward pass.
//
// Each layer-direction runs in two phases (DeepCPU's time-independent and
// time-dependent phases): first every worker projects the whole sequence's
// inputs for its own units (one product), then the recurrence: per step,
// each worker multiplies the previous state by its weight block, which stays
// in its core's L2 for the whole run, finishes the cell update of its units,
// writes them, and meets its group at one barrier.
#include "engine.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <new>
#include <type_traits>

namespace deeprnn {
namespace detail {

int gates_per_cell(Cell cell) {
    switch (cell) {
        case Cell::lstm: return 4;
        case Cell::gru: return 3;
        default: return 1;
    }
}

static bool forward_only(const ModelImpl& m) { return m.D == 1 && m.cfg.direction == Direction::forward; }

// Packs one worker's share of one layer-direction.
static Part pack_part(const ModelImpl& m, int layer, const RawLayer& r, const Slice& sl, const Slice& ps) {
    const int G = m.G, H = m.H, S = m.S, in = m.in_size(layer), pad = sl.padded;
    // Slice-local row i is gate i/pad, unit i%pad; units past the slice are zero padding.
    auto row = [&](int i) -> long { return i % pad < sl.size ? static_cast<long>(i / pad) * H + sl.begin + i % pad : -1; };
    auto unit = [&](int i) -> long { return i < sl.size ? sl.begin + i : -1; };
    // The per-step products take the reduced precision. The input projection
    // runs once over all steps, bound by arithmetic, not bytes: it stays f32,
    // except where the CPU has dot products that do more work per instruction
    // than an f32 FMA: int8 on VNNI (4x) and bf16 on AVX512_BF16 (2x)
    // (docs/PRECISION.md has the measurements), for inputs narrow enough
    // for those kernels' stack block (dot_kernel_fits). The per-step products
    // use them too (pack_matrix decides where the CPU has them): their
    // operand h is then rounded (bf16) or quantised (int8) per step, and
    // batched steps, bound by arithmetic as well, ran 1.2-1.8x faster in bf16.
    const WeightPrecision wp = m.cfg.weight_precision;
    const bool dots = m.isa == Isa::avx512 && dot_kernel_fits(wp, in) &&
                      ((wp == WeightPrecision::int8 && cpu_has_vnni()) ||
                       (wp == WeightPrecision::bf16 && cpu_has_bf16_dot()));
    const bool hdots = wp == WeightPrecision::bf16;
    Part p;
    p.w_x = pack_matrix(m.isa, G * pad, in, r.w_ih.data(), in, row, dots ? wp : WeightPrecision::f32, true);
    if (m.rbm()) {
        p.w_h = pack_matrix(m.isa, pad, S, r.w_hh.data() + static_cast<size_t>(H) * S, S, unit, wp, hdots);  // z
        p.w_hn = pack_matrix(m.isa, pad, H, r.w_hh.data() + static_cast<size_t>(2) * H * S, S, unit, wp, hdots);
        // r, by chunks of columns (units of h): the reset product's fixed summation order.
        if (m.rbm_one_barrier) {  // every row, this worker's chunks (its slice is whole chunks)
            auto all = [H](int i) -> long { return i < H ? i : -1; };
            for (int c = sl.begin / m.rbm_chunk; c < m.rbm_chunks && m.chunk_begin(c) < sl.begin + sl.size; ++c)
                p.w_hr.push_back(pack_matrix(m.isa, H, m.chunk_size(c), r.w_hh.data() + m.chunk_begin(c), S, all, wp, hdots));
        } else {  // this worker's rows, every chunk
            for (int c = 0; c < m.rbm_chunks; ++c)
                p.w_hr.push_back(pack_matrix(m.isa, pad, m.chunk_size(c), r.w_hh.data() + m.chunk_begin(c), S, unit, wp, hdots));
        }
    } else {
        p.w_h = pack_matrix(m.isa, G * pad, S, r.w_hh.data(), S, row, wp, hdots);
    }
    p.w_h_finite = std::all_of(r.w_hh.begin(), r.w_hh.end(), [](float w) { return std::isfinite(w); });
    if (!r.w_hr.empty())
        p.w_r = pack_matrix(m.isa, ps.padded, H, r.w_hr.data(), H,
                            [&](int i) -> long { return i < ps.size ? ps.begin + i : -1; }, wp, hdots);
    // Every recurrent bias joins the input projection except GRU
    // linear-before-reset's b_hn, which is multiplied by r.
    const bool lbr = m.cfg.cell == Cell::gru && !m.rbm();
    p.bias_x.assign(static_cast<size_t>(G) * pad, 0.0f);
    for (int i = 0; i < G * pad; ++i) {
        const long k = row(i);
        if (k < 0) continue;
        if (!r.b_ih.empty()) p.bias_x[i] += r.b_ih[k];
        if (!r.b_hh.empty() && !(lbr && i / pad == 2)) p.bias_x[i] += r.b_hh[k];
    }
    if (lbr) {
        p.b_hn.assign(pad, 0.0f);
        for (int u = 0; u < sl.size && !r.b_hh.empty(); ++u) p.b_hn[u] = r.b_hh[static_cast<size_t>(2) * H + sl.begin + u];
    }
    if (!r.peep.empty()) {
        p.peep.assign(static_cast<size_t>(3) * pad, 0.0f);
        for (int k = 0; k < 3; ++k)
            for (int u = 0; u < sl.size; ++u) p.peep[k * pad + u] = r.peep[static_cast<size_t>(k) * H + sl.begin + u];
    }
    return p;
}

// Which layer-directions fold the input projection into the batch-1 steps
// (ModelImpl::folds): f32 on AVX-512, int8 on VNNI or bf16 on AVX512_BF16
// (folds_projection), by the same rule, each on its own measured fold gain
// (fold_gain_l2, _int8, _bf16; docs/PRECISION.md).
// Measured on the Zen 4 VM (2 workers, T = 100, p50 of 300 alternated runs,
// docs/ENGINE.md "The input projection inside the step"): 1.11-1.18x faster
// where E = S and both weight blocks stay in cache; it loses where
//  - E > S: the projection is then most of a step and runs on after the
//    recurrent product ends, in a kernel blocked for 8 rows, not the up-front
//    product's 6 x 4 (0.88-0.97x at E = 256-1400, S = 64-100);
//  - W_hh and W_ih together exceed half the L3: re-reading a share of W_ih
//    every step pushes W_hh out of it (LSTM 1024-1024, 32 MiB: 0.68x; GRU
//    1024-1024, 24 MiB: 0.91x; LSTM 768-768, 18 MiB: a tie; GRU 768-768,
//    13.5 MiB: 1.12x). Half the L3 this core measurably gets, not the size
//    the CPU reports: a Zen 5 VM reports 508 MiB, one core reads 12 MiB of
//    it at the L3 rate, and LSTM / GRU 1024-1024 folded there were 0.67x /
//    0.80x (docs/ENGINE.md);
//  - the step's extra reads cost more than the projection's multiply-adds up
//    front (sched::fold_pays): on a Xeon VM with 2 MiB L2s and a ~26 GB/s L3
//    per core, LSTM / GRU 1024-1024 folded were 1.08-1.23x slower, and the
//    TextSim GRU (200-512, whose W_hh fits a worker's L2 only unfolded) 1.05x.
static void set_folds(ModelImpl& m) {
    static const sched::MachineModel machine = sched::default_machine();
    const size_t l3 = machine.l3_usable_bytes ? machine.l3_usable_bytes : machine.caches.l3;
    m.folds.assign(m.parts.size(), 0);
    for (size_t i = 0; i < m.parts.size(); ++i) {
        const int layer = static_cast<int>(i) / m.D;
        const bool reverse = i % m.D == 1 || m.cfg.direction == Direction::reverse;  // chunks run forward in time
        bool kernels = !m.rbm() && m.S == m.H && m.in_size(layer) <= m.S && !reverse;
        size_t bytes = 0;
        bool pays = true;
        for (const Part& p : m.parts[i]) {
            kernels = kernels && folds_projection(p.w_h, p.w_x);
            bytes += p.w_h.bytes() + p.w_x.bytes();
            pays = pays && sched::fold_pays(machine, static_cast<double>(p.w_h.bytes()), static_cast<double>(p.w_x.bytes()),
                                            p.w_h.vnni || p.w_h.dot_bf16 ? p.w_h.precision : WeightPrecision::f32);
        }
        const int mode = m.cfg.fold_projection;
        m.folds[i] = kernels && mode != 0 && (mode == 1 || (bytes <= l3 / 2 && pays));
    }
}

// How much of a layer-direction's input projection runs at a time
// (ModelImpl::projection_chunk_bytes). Projected all at once, a batched
// sequence's projection outgrows L2 (LSTM 256-256, batch 20, T = 100: 4 MiB
// per worker of 2), so writing it pushes the recurrent block out to L3, and
// every step reads its rows back from there. In chunks of an eighth of L2,
// written to the same rows each time, it stays in L2 beside both weight
// blocks (docs/ENGINE.md, "Projection chunks"). Only where both blocks fit
// beside the chunk: else W_ih would be fetched again for every chunk.
static void set_projection_chunks(ModelImpl& m) {
    static const sched::MachineModel machine = sched::default_machine();
    const size_t chunk = machine.caches.l2 / 8;
    const double usable = machine.l2_usable * static_cast<double>(machine.caches.l2);
    m.projection_chunk_bytes.assign(m.parts.size(), 0);
    for (size_t i = 0; i < m.parts.size(); ++i) {
        bool fits = chunk > 0;
        for (const Part& p : m.parts[i]) {
            size_t bytes = p.w_x.bytes() + p.w_h.bytes() + p.w_hn.bytes() + p.w_r.bytes() + chunk;
            for (const PackedMatrix& w : p.w_hr) bytes += w.bytes();
            fits = fits && static_cast<double>(bytes) <= usable;
        }
        if (fits) m.projection_chunk_bytes[i] = chunk;
    }
    // A block of weights that cannot stay in L2 beside a chunk of X comes
    // from L3 once per chunk of rows (kernels.hpp, x_chunk_bytes): BiDAF's
    // W_ih (2.2 MiB at E = 1,400) took three passes over 100 rows, and the
    // product ran at 185-195 GFLOP/s on one Xeon core, 200-215 in one pass.
    // Chunks of half the L2 still leave room for the weights streaming by.
    for (std::vector<Part>& parts : m.parts)
        for (Part& p : parts)
            for (PackedMatrix* w : {&p.w_x, &p.w_h})
                if (static_cast<double>(w->bytes() + w->x_chunk_bytes) > usable)
                    w->x_chunk_bytes = std::max(w->x_chunk_bytes, machine.caches.l2 / 2);
}

// The model packed for one execution choice.
static std::shared_ptr<ModelImpl> pack_model(const Config& cfg, const std::vector<RawLayer>& raw,
                                             const sched::ExecutionChoice& choice) {
    auto m = std::make_shared<ModelImpl>();
    m->cfg = cfg;
    m->G = gates_per_cell(cfg.cell);
    m->H = cfg.hidden_size;
    m->S = state_size(cfg);
    m->D = num_directions(cfg);
    m->L = cfg.num_layers;
    m->act = select_activations(cfg.activation_max_error);
    m->isa = detect_isa();
    m->choice = choice;
    if (raw.size() != static_cast<size_t>(m->L * m->D))
        fail("internal: ", raw.size(), " layer-directions for num_layers=", m->L, " D=", m->D);
    m->pipelined = choice.pipelined && m->D == 1 && choice.workers > 1;
    if (m->rbm()) {
        m->rbm_chunk = rbm_chunk_units(m->H, isa_width(m->isa));
        m->rbm_chunks = rbm_chunk_count(m->H, isa_width(m->isa));
        if (m->rbm_chunks > kMaxRbmChunks) fail("internal: ", m->rbm_chunks, " reset-product chunks");
    }
    m->helpers = choice.projection_helpers && choice.workers > 1 && forward_only(*m) && !m->pipelined;
    if (m->rbm()) m->rbm_one_barrier = choice.rbm_one_barrier && choice.workers > 1 && !m->pipelined && !m->helpers;
    m->plans = plan_partitions(m->L, m->D, m->H, cfg.proj_size, isa_width(m->isa), m->helpers ? 1 : choice.workers,
                               choice.side_by_side, choice.pipelined, m->rbm_one_barrier ? m->rbm_chunk : 0);
    for (const auto& p : m->plans) m->workers = std::max(m->workers, p.first_worker + p.workers());
    m->directions_apart = m->D == 2;
    for (int l = 0; l < m->L && m->D == 2; ++l)
        m->directions_apart = m->directions_apart && m->plan(l, 0).first_worker + m->plan(l, 0).workers() <= m->plan(l, 1).first_worker;
    m->hands_over = m->workers > 1 && !m->pipelined && !m->helpers && (m->D == 1 || m->directions_apart);
    if (m->helpers) m->workers = choice.workers;
    const std::shared_ptr<WeightCentricPool>& shared = PoolAccess::of(cfg.pool);
    if (shared && m->workers > 1) m->pool = shared;  // validate() checked it is large enough
    else m->pool = std::make_shared<WeightCentricPool>(m->workers, cfg.pin_threads, nap_window_us(cfg.idle_nap_ms, "Config.idle_nap_ms"));

    // First touch: each worker packs (allocates and writes) the blocks it will read every step.
    m->parts.resize(raw.size());
    for (int i = 0; i < m->L * m->D; ++i) m->parts[i].resize(m->plans[i].workers());
    auto pack = [&](int w) {
        m->for_parts_of(w, [&](int l, int d, int q) {
            const PartitionPlan& plan = m->plan(l, d);
            const Slice ps = plan.proj_slices.empty() ? Slice{} : plan.proj_slices[q];
            m->parts[l * m->D + d][q] = pack_part(*m, l, raw[l * m->D + d], plan.slices[q], ps);
        });
    };
    m->run_on_workers(pack);
    set_folds(*m);
    set_projection_chunks(*m);
    return m;
}

// One byte of every cache line of the blocks worker `owner` packed (pack_model).
static unsigned touch_blocks(const ModelImpl& m, int owner) {
    unsigned sum = 0;
    auto touch = [&sum](const PackedMatrix& p) {
        for (size_t i = 0; i < p.data.size(); i += 64) sum += p.data.data()[i];
    };
    m.for_parts_of(owner, [&](int l, int d, int q) {
        const Part& part = m.parts[l * m.D + d][q];
        for (const PackedMatrix* p : {&part.w_x, &part.w_h, &part.w_hn, &part.w_r}) touch(*p);
        for (const PackedMatrix& c : part.w_hr) touch(c);
    });
    return sum;
}

// Model::prefetch's job on worker w >= 1: after idle the weights come back
// from DRAM (docs/ENGINE.md, "Model::prefetch"); this brings w's blocks into
// its L2. The caller's own blocks are left to its run: a worker reading them
// too (to leave them in L3) tied quietly and lost under load.
static void warm_blocks(void* ctx, int w) {
    const unsigned sum = touch_blocks(*static_cast<const ModelImpl*>(ctx), w);
    asm volatile("" : : "r"(sum));  // the loads are the point
}

void ModelImpl::prefetch() const {
    if (!gpu && workers > 1) pool->wake(warm_blocks, const_cast<ModelImpl*>(this), workers);
}

ModelImpl::~ModelImpl() {
    if (pool) pool->wait_warm();
}

// Seconds of one run of `steps` steps at batch 1 (after a warm-up run that
// brings each worker's weights into its cache), for calibration: the run the
// analytic model ranks (Config::tuning_seq_len), so that a pipeline's fill
// weighs in both as it does in the application's runs (at 24 steps, as
// before 2026-12-02, it weighed 1.3-1.4x more against a split than at 100).
// Longer runs are timed over their first kMaxCalibrationSteps steps.
static double time_model(const std::shared_ptr<const ModelImpl>& m, int steps) {
    SessionImpl s(m);
    const ModelImpl& mm = *m;
    std::vector<float> x(static_cast<size_t>(steps) * mm.cfg.input_size, 0.1f);
    std::vector<float> h(static_cast<size_t>(mm.L) * mm.D * mm.S, 0.0f), c(static_cast<size_t>(mm.L) * mm.D * mm.H, 0.0f);
    auto once = [&] {
        const auto t0 = std::chrono::steady_clock::now();
        s.forward(x.data(), steps, 1, nullptr, nullptr, h.data(), mm.cfg.cell == Cell::lstm ? c.data() : nullptr);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    once();
    return once();
}

// The CUDA backend, if cfg asks for it (cuda) or allows it (auto) and it can
// run here; nullptr = CPU, *note says why for auto.
static std::shared_ptr<gpu::GpuModel> make_gpu_model(const Config& cfg, const std::vector<RawLayer>& raw,
                                                     std::string* note) {
    if (cfg.backend == Backend::cpu) return nullptr;
    const gpu::CudaBackend* cuda = gpu::cuda_backend();
    if (!cuda) return nullptr;  // validate() refused backend = cuda already
    const std::string why = gpu::unsupported_reason(cfg);
    if (!why.empty()) {
        if (cfg.backend == Backend::cuda) fail(why);
        *note = why;
        return nullptr;
    }
    std::string device;
    if (!cuda->available(&device)) {
        if (cfg.backend == Backend::cuda)
            fail("Config.backend = cuda: no usable CUDA device: ", device, " (use auto or cpu)");
        *note = "no usable CUDA device: " + device;
        return nullptr;
    }
    std::vector<gpu::GpuLayerView> views;
    for (const RawLayer& r : raw) {
        auto ptr = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
        views.push_back({r.w_ih.data(), r.w_hh.data(), ptr(r.b_ih), ptr(r.b_hh), ptr(r.peep)});
    }
    return std::shared_ptr<gpu::GpuModel>(cuda->create(cfg, views, gpu::PlanOptions{}));
}

int planned_threads(const Config& cfg) {
    if (cfg.pool) return cfg.threads > 0 ? cfg.threads : cfg.pool.threads();
    if (cfg.threads <= 0) return default_threads();
    // Workers beyond the CPUs the process may run on take turns at every
    // step's barrier: LSTM 256-256, batch 1, 100 steps, 4 threads on the Zen 5
    // VM's 2 CPUs ran 1.65 ms against 0.61 on 2. A pool the application made
    // keeps the size it was given.
    return std::min(cfg.threads, logical_cpus());
}

// Whether every run of `batch` and at most `rows` rows hands over with the
// caller running steps (run_on_caller), where such runs hand over at all
// (`hands_over`: ShortRunLimits::hands_over): the layers' projections before step
// 0 are light for all of them, as a batch-1 fold's are (a batch-1 run too
// short to fold has fewer than 2 * kProjectAhead <= kHandOverRows rows). A
// critical-path-first run is as good as handed over: its caller runs it all
// while the helpers wake, and they take what is left of the projection.
static bool hands_over_runs(const ModelImpl& m, bool hands_over, int batch, long rows) {
    const bool folds = std::all_of(m.folds.begin(), m.folds.end(), [](char f) { return f != 0; });
    return m.helpers || (hands_over && (rows <= SessionImpl::kHandOverRows || (batch == 1 && folds)));
}

// Config::serial_rows, or the longest runs the cost model predicts faster on
// the caller alone, waking the pool included (asleep) and not (awake, for runs
// that come back to back), per power of two of the batch up to max_batch.
// Where a model hands over (run_on_caller) every run that the plain limit
// sends to the pool, such a run does not wait for the wake-up: the caller
// runs it until the workers join, and ends it alone if they have not
// (WeightCentricPool::run, ended_alone). Asleep, it still pays the notify
// (a system call, 30-40 us on the Zen 5 VM), and the limit is the
// break-even of sched::serial_rows with `hands_over`; napping, it pays
// nothing, so only runs the awake pool would lose stay on the caller.
// Other runs with the workers napping wait for them, a nap's wake-up
// (MachineModel::nap_dispatch_s) instead of a sleeper's.
static void set_short_runs(ModelImpl& m, const Config& cfg, const sched::Problem& p, const sched::MachineModel& machine) {
    ShortRunLimits& s = m.short_runs;
    s = ShortRunLimits{};
    for (int batch = 1;; batch *= 2) {
        sched::Problem at = p;
        at.batch = batch;
        // A step of a layer on the caller alone, against each wake-up (ShortRunLimits).
        at.seq_len = 1;
        const double step = m.hands_over ? sched::serial_seconds(at, machine, m.choice) / m.L : 0;
        const bool asleep_hands_over = m.hands_over && step <= machine.dispatch_s;
        const bool napping_hands_over = m.hands_over && step <= machine.nap_dispatch_s;
        s.hand_over_asleep.push_back(asleep_hands_over);
        s.hand_over_napping.push_back(napping_hands_over);
        long asleep = cfg.serial_rows >= 0 ? cfg.serial_rows : sched::serial_rows(at, machine, m.choice);
        const long awake = cfg.serial_rows >= 0 ? cfg.serial_rows : sched::serial_rows(at, sched::awake(machine), m.choice);
        long napping = cfg.serial_rows >= 0 ? cfg.serial_rows : sched::serial_rows(at, sched::napping(machine), m.choice);
        if (cfg.serial_rows < 0 && hands_over_runs(m, asleep_hands_over, batch, asleep))
            asleep = std::min<long>(asleep, sched::serial_rows(at, machine, m.choice, true));
        if (cfg.serial_rows < 0 && hands_over_runs(m, napping_hands_over, batch, napping)) napping = std::min(napping, awake);
        s.asleep.push_back(asleep);
        s.napping.push_back(napping);
        s.awake.push_back(awake);
        if (batch > cfg.max_batch / 2) break;  // 2 * batch would pass max_batch (and never overflow)
    }
}

// The model's plan is made for batch 1. Where a larger batch plans more
// workers, runs of that batch or more get a second packing with that plan
// (analytic, as its batch-1 plan's worker count may come from calibration):
// the smallest such batch, found among powers of two up to max_batch, then
// by bisection. Results do not depend on the worker count.
static void plan_batched(ModelImpl& m, const std::vector<RawLayer>& raw, const sched::Problem& one,
                         const sched::MachineModel& machine) {
    // Workers that split the recurrence: a batch's product gains from more
    // of them, where helpers only project (critical path first: one).
    auto splits = [&m](const sched::ExecutionChoice& c) { return c.projection_helpers ? 1 : c.total_workers(m.D); };
    const int workers = splits(m.choice);
    if (workers >= one.threads || m.cfg.max_batch < 2) return;
    auto choice_at = [&](int batch) {
        sched::Problem p = one;
        p.batch = batch;
        const sched::PlanDecision d =
            sched::choose_plan(p, sched::awake(machine), Tuning::heuristic, m.cfg.tuning_budget_seconds, "", nullptr);
        return d.chosen.choice;
    };
    int lo = 1, hi = 2;  // lo plans `workers`; find the first batch that plans more
    for (; splits(choice_at(hi)) <= workers; hi = std::min(2 * hi, m.cfg.max_batch)) {
        lo = hi;
        if (hi == m.cfg.max_batch) return;
    }
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        (splits(choice_at(mid)) > workers ? hi : lo) = mid;
    }
    sched::Problem at = one;
    at.batch = hi;
    const sched::ExecutionChoice choice = choice_at(hi);
    std::shared_ptr<ModelImpl> b = pack_model(m.cfg, raw, choice);
    set_short_runs(*b, m.cfg, at, machine);
    b->decision = cat("predicted (heuristic) for batch ", hi);
    m.batched = std::move(b);
    m.batched_from = hi;
}

sched::MachineModel measured_machine() {
    sched::MachineModel m = sched::default_machine();
    if (const double exchange = measure_step_exchange(); exchange > 0) m.barrier_s = exchange;
    m.awake_dispatch_s = measure_awake_dispatch();
    return m;
}

std::shared_ptr<const ModelImpl> build_model(const Config& cfg, const std::vector<RawLayer>& raw) {
    // A single-threaded model never meets a barrier: no second thread to measure one with.
    return build_model(cfg, raw, planned_threads(cfg) > 1 ? measured_machine() : sched::default_machine());
}

std::shared_ptr<const ModelImpl> build_model(const Config& cfg, const std::vector<RawLayer>& raw,
                                             const sched::MachineModel& machine) {
    validate(cfg);
    std::string gpu_note;
    if (std::shared_ptr<gpu::GpuModel> g = make_gpu_model(cfg, raw, &gpu_note)) {
        // The GPU runs everything; a one-worker CPU pack keeps SessionImpl's invariants.
        Config one = cfg;
        one.threads = 1;
        const sched::Problem problem = sched::problem_for(one, 1, isa_width(detect_isa()));
        const sched::PlanDecision d =
            sched::choose_plan(problem, machine, Tuning::heuristic, cfg.tuning_budget_seconds, "", nullptr);
        std::shared_ptr<ModelImpl> m = pack_model(one, raw, d.chosen.choice);
        m->cfg = cfg;
        m->gpu = std::move(g);
        m->decision = "unused (backend cuda)";
        return m;
    }
    const sched::Problem problem = sched::problem_for(cfg, planned_threads(cfg), isa_width(detect_isa()));
    auto time_one = [&](const sched::Candidate& c) {
        return time_model(pack_model(cfg, raw, c.choice), std::min(problem.seq_len, kMaxCalibrationSteps));
    };
    // The plan is made for workers that are awake, as calibration times them
    // (runs back to back). The wake-up is priced per run instead: a run too
    // short to pay for it stays on the caller (set_short_runs, full model).
    const sched::PlanDecision d = sched::choose_plan(problem, sched::awake(machine), cfg.tuning,
                                                     cfg.tuning_budget_seconds, cfg.plan_cache_path, time_one);
    std::shared_ptr<ModelImpl> m = pack_model(cfg, raw, d.chosen.choice);
    set_short_runs(*m, cfg, problem, machine);
    plan_batched(*m, raw, problem, machine);
    m->gpu_note = std::move(gpu_note);
    if (!cfg.pool && cfg.threads > problem.threads)
        m->threads_note = cat("Config.threads = ", cfg.threads, " lowered to the ", problem.threads,
                              " logical CPUs this process may run on (more would take turns at every step)");
    m->decision = d.from_cache                 ? cat("from the plan cache")
                  : d.calibration.ran > 0      ? cat(cfg.tuning == Tuning::exhaustive ? "exhaustive" : "calibrated", ": ",
                                                     d.calibration.ran, " candidates timed on ",
                                                     std::min(problem.seq_len, kMaxCalibrationSteps), "-step runs")
                                               : cat("predicted (", to_string(cfg.tuning), ") for ", problem.seq_len,
                                                     "-step runs on a core ", machine.rates,
                                                     " at ", std::lround(machine.flops_per_s / 1e9), " GFLOP/s, L2 ",
                                                     std::lround(machine.l2_bytes_per_s / 1e9), " GB/s and L3 ",
                                                     std::lround(machine.l3_bytes_per_s / 1e9), " GB/s, a ",
                                                     std::lround(machine.barrier_s * 1e9), " ns step exchange and a ",
                                                     std::lround(machine.awake_dispatch_s * 1e9), " ns pool run");
    if (cfg.log) {
        for (const auto& [level, message] : d.log) cfg.log(level, message.c_str(), cfg.log_user);
    }
    return m;
}

struct SessionImpl::Run {
    const float* x;
    int T, B;
    const int32_t* lengths;
    float* y;
    float* h;
    float* c;
};

// Layers [first, end) of a run in one dispatch: x is the first layer's input
// and y the last one's output. A whole run is one pass over all layers with
// the same Run for every direction; a long run of a model with a reverse
// direction is a pass per layer and window, each direction with its own.
struct SessionImpl::Pass {
    const Run* dir[2];
    int first, end;
};

SessionImpl::SessionImpl(std::shared_ptr<const ModelImpl> model) : m_(std::move(model)) {
    const ModelImpl& m = *m_;
    const size_t B = m.cfg.max_batch;
    scratch_.resize(m.pipelined ? m.L : m.workers);
    for (size_t li = 0; li < m.plans.size(); ++li)
        for (int q = 0; q < m.plans[li].workers(); ++q) {
            const PartitionPlan& plan = m.plans[li];
            WorkerScratch& ws = scratch_[scratch_index(li, q)];
            const size_t gp = static_cast<size_t>(m.G) * plan.slices[q].padded;
            if (ws.gates.size() < B * gp) ws.gates = AlignedFloats(B * gp);
            const size_t pp = plan.proj_slices.empty() ? 0 : plan.proj_slices[q].padded;
            if (ws.proj.size() < B * pp) ws.proj = AlignedFloats(B * pp);
            const bool folds = std::find(m.folds.begin(), m.folds.end(), 1) != m.folds.end();
            const size_t ahead = folds ? ahead_floats(std::max(m.in_size(0), m.in_size(1))) : 0;
            if (ws.ahead.size() < ahead) ws.ahead = AlignedFloats(ahead);
            // Two barriers: its rows' partials; one barrier: scratch for the fold of any slice.
            for (const Slice& sl : m.rbm_one_barrier ? plan.slices : std::vector<Slice>{plan.slices[q]}) {
                const size_t part = m.rbm() ? static_cast<size_t>(m.rbm_chunks) * B * sl.padded : 0;
                if (ws.part.size() < part) ws.part = AlignedFloats(part);
            }
            if (m.rbm_one_barrier) {
                if (ws.rh.size() < B * m.H) ws.rh = AlignedFloats(B * m.H);
                for (const Slice& other : plan.slices)
                    if (ws.other.size() < 2 * B * other.padded) ws.other = AlignedFloats(2 * B * other.padded);
            }
        }
    for (const PartitionPlan& plan : m.plans) {
        h_swap_.emplace_back(B * m.S);
        h_raw_.emplace_back(m.S != m.H ? B * m.H : 0);
        rh_.emplace_back(m.rbm() ? B * m.H : 0);
        partials_.emplace_back(m.rbm_one_barrier ? 2 * static_cast<size_t>(m.rbm_chunks) * B * m.h_padded() : 0);
        group_.emplace_back(new SpinBarrier(plan.workers()));
    }
    layer_out_.resize(m.pipelined ? m.L - 1 : std::min(m.L - 1, 2));
    if (m.pipelined) progress_.reset(new Progress[m.L]);
    if (m.helpers) {
        claims_.reset(new Claims[m.plans.size()]);
        chunk_done_.resize(m.plans.size());
    }
    all_.reset(m.workers);
    make_serial_storage();
    h_state_.resize(static_cast<size_t>(m.L) * m.D * B * m.S);
    c_state_.resize(static_cast<size_t>(m.L) * m.D * B * m.H);
    segment_lengths_.resize(m.D * B);
    reserve_rows(B, B);
}

// Buffers that scale with T*B grow here, once, to the largest run seen:
// the input projections to a segment's rows, the outputs between layers to a
// forward-only segment's or a windowed run's whole length (engine.cpp).
void SessionImpl::reserve_rows(size_t projected_rows, size_t output_rows) {
    const ModelImpl& m = *m_;
    const size_t rows = std::max(projected_rows, output_rows);
    try {
        if (projected_rows > projected_rows_) {
            for (size_t li = 0; li < m.plans.size(); ++li)
                for (int q = 0; q < m.plans[li].workers(); ++q) {
                    WorkerScratch& ws = scratch_[scratch_index(li, q)];
                    const size_t need = projected_rows * m.G * m.plans[li].slices[q].padded;
                    if (ws.xproj.size() < need) ws.xproj = AlignedFloats(need);
                }
            for (auto& done : chunk_done_)  // at most one chunk per row; value-initialised: 0, no pass
                done.reset(new std::atomic<uint32_t>[projected_rows]());
            projected_rows_ = projected_rows;
        }
        if (output_rows > output_rows_) {
            for (std::vector<float>& buf : layer_out_) buf.resize(output_rows * m.D * m.S);
            output_rows_ = output_rows;
        }
    } catch (const std::bad_alloc&) {
        fail("out of memory for a run of ", rows, " steps x sequences");
    }
}

// Grows the buffers to what a run of T steps at batch B takes, cut as
// forward cuts it: one pass or segments (rows of a segment), or windows for
// a model with a reverse direction (rows of a window, and every step's
// outputs between layers); batch-first runs' staging, and the output a run
// without y writes somewhere.
void SessionImpl::reserve_for(int T, int B, bool batch_first, bool with_y) {
    const ModelImpl& m = *m_;
    if (m.gpu) return;
    const int seg = segment_steps_for(B);
    const size_t E = m.cfg.input_size, DS = static_cast<size_t>(m.D) * m.S;
    if (T > seg && !forward_only(m)) {
        const size_t window = static_cast<size_t>(seg) * B;
        reserve_rows(window, m.L > 1 ? static_cast<size_t>(T) * B : 0);
        if (batch_first) staging_in(m.D * window * E);
        if (batch_first || !with_y) staging_out(m.D * window * DS);
        return;
    }
    const size_t rows = static_cast<size_t>(std::min(T, seg)) * B;
    reserve_rows(rows, rows);
    if (batch_first) staging_in(rows * E);
    if (batch_first || !with_y) staging_out(rows * DS);
}

float* SessionImpl::staging_in(size_t n) {
    if (stage_in_.size() < n) stage_in_.resize(n);
    return stage_in_.data();
}

float* SessionImpl::staging_out(size_t n) {
    if (stage_out_.size() < n) stage_out_.resize(n);
    return stage_out_.data();
}

// Steps [t0, t0 + n) of a batch-first array bf [B, T, w] into a time-major
// one tm [n, B, w], and back (columns [col, col + cols) of each row).
static void to_time_major(const float* bf, int T, int B, size_t w, int t0, int n, float* tm) {
    for (int t = 0; t < n; ++t)
        for (int b = 0; b < B; ++b)
            std::memcpy(tm + (static_cast<size_t>(t) * B + b) * w, bf + (static_cast<size_t>(b) * T + t0 + t) * w,
                        w * sizeof(float));
}

static void to_batch_first(const float* tm, int T, int B, size_t w, int t0, int n, float* bf, size_t col, size_t cols) {
    for (int t = 0; t < n; ++t)
        for (int b = 0; b < B; ++b)
            std::memcpy(bf + (static_cast<size_t>(b) * T + t0 + t) * w + col, tm + (static_cast<size_t>(t) * B + b) * w + col,
                        cols * sizeof(float));
}

int SessionImpl::segment_steps_for(int B) const {
    const ModelImpl& m = *m_;
    if (segment_steps > 0) return segment_steps;
    // A windowed run's layer outputs are whole (the next layer reads both
    // directions at every step), so only its projections count.
    // A pipelined model holds every layer's projections (scratch_index) and outputs.
    const size_t layers = m.pipelined ? m.L : 1;
    const size_t layer_out = forward_only(m) && m.L > 1 ? (m.pipelined ? m.L - 1 : 1) * m.S : 0;
    const size_t row_bytes = sizeof(float) * (layers * m.D * m.G * m.h_padded() + layer_out);
    return static_cast<int>(std::clamp<size_t>(kSegmentBytes / (row_bytes * B), kMinSegmentSteps, INT_MAX));
}

// A forward-only model's run longer than a segment goes segment by segment,
// each continuing from the state the last one left (what a Stream does), so
// the buffers that scale with steps x sequences stop growing at a segment
// however long the sequence. Every output is the same sum in the same order
// as in one pass: the bits do not depend on where the run is cut. A model
// with a reverse direction is cut into windows instead (forward_windows).
void SessionImpl::forward(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c,
                          bool batch_first) {
    const ModelImpl& m = *m_;
    if (m.batched && B >= m.batched_from) {
        // Runs of fewer sequences use this session's buffers: they grow now
        // to what a run of T steps at each such batch takes, so that a run
        // no longer and no wider than one seen allocates nothing.
        for (int b = 1; b < m.batched_from; ++b) reserve_for(T, b, batch_first, y != nullptr);
        if (!batched_) {
            batched_.reset(new SessionImpl(m.batched));
            batched_->clocks = clocks;
        }
        batched_->forward(x, T, B, lengths, y, h, c, batch_first);
        return;
    }
    const int seg = m.gpu ? INT_MAX : segment_steps_for(B);  // GpuModel sizes its own buffers
    if (T > seg && !forward_only(m)) {
        forward_windows(x, T, B, lengths, y, h, c, batch_first, seg);
        return;
    }
    if (T <= seg && !batch_first) {
        forward_segment(x, T, B, lengths, y, h, c);
        return;
    }
    const size_t E = m.cfg.input_size, DS = static_cast<size_t>(m.D) * m.S;
    for (int t0 = 0, n = 0; t0 < T; t0 += n) {  // += n: never past T, so never past INT_MAX
        n = std::min(seg, T - t0);
        const int32_t* len = lengths;
        if (lengths && n < T) {  // a sequence that ended before this segment carries its state through it
            for (int b = 0; b < B; ++b) segment_lengths_[b] = std::clamp(lengths[b] - t0, 0, n);
            len = segment_lengths_.data();
        }
        const float* xs = x + t0 * B * E;
        float* ys = y ? y + t0 * B * DS : nullptr;
        if (batch_first) {
            float* xt = staging_in(n * B * E);
            to_time_major(x, T, B, E, t0, n, xt);
            xs = xt;
            if (y) ys = staging_out(n * B * DS);
        }
        forward_segment(xs, n, B, len, ys, h, c);
        if (batch_first && y) to_batch_first(ys, T, B, DS, t0, n, y, 0, DS);
    }
}

void SessionImpl::forward_segment(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c) {
    const ModelImpl& m = *m_;
    if (m.gpu) {  // h and c are in/out; GpuModel serialises its runs
        gpu::GpuRun run;
        run.x = x;
        run.T = T;
        run.B = B;
        run.lengths = lengths;
        run.h0 = run.h_n = h;
        run.c0 = run.c_n = c;
        run.y = y;
        m.gpu->run(run);
        return;
    }
    reserve_for(T, B, false, y != nullptr);
    if (!y) y = staging_out(static_cast<size_t>(T) * B * m.D * m.S);  // the last layer writes somewhere
    const Run r{x, T, B, lengths, y, h, c};
    dispatch(Pass{{&r, &r}, 0, m.L}, T, B);
}

// A long run of a model with a reverse direction, which needs a sequence's
// end before its start: layer by layer (the next layer reads both directions
// at every step, so the outputs between layers stay whole), each layer in
// windows of `seg` steps, the forward direction's front to back and the
// reverse one's back to front, side by side in one dispatch. A window carries
// its direction's state to the next as a segment does; the input projections
// stop growing at a window. Each sequence's reverse direction starts at its
// own last step, inside whichever window holds it: the window's lengths are
// clamped to it, as a segment's are.
void SessionImpl::forward_windows(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c,
                                  bool batch_first, int seg) {
    const ModelImpl& m = *m_;
    const size_t E = m.cfg.input_size, DS = static_cast<size_t>(m.D) * m.S, window = static_cast<size_t>(seg) * B;
    reserve_for(T, B, batch_first, y != nullptr);
    float* xt = batch_first ? staging_in(m.D * window * E) : nullptr;      // a window of x per direction
    float* yt = batch_first || !y ? staging_out(m.D * window * DS) : nullptr;  // and of the last layer's output
    const int windows = (T - 1) / seg + 1;
    for (int l = 0; l < m.L; ++l) {
        const bool first = l == 0, last = l == m.L - 1;
        const float* in = first ? x : layer_buffer(l - 1);
        float* out = last ? y : layer_buffer(l);
        for (int i = 0; i < windows; ++i) {
            Run runs[2];
            int t0[2];
            for (int d = 0; d < m.D; ++d) {
                const bool reverse = d == 1 || m.cfg.direction == Direction::reverse;
                t0[d] = (reverse ? windows - 1 - i : i) * seg;
                const int n = std::min(seg, T - t0[d]);
                int32_t* len = lengths ? segment_lengths_.data() + d * B : nullptr;
                for (int b = 0; len && b < B; ++b) len[b] = std::clamp(lengths[b] - t0[d], 0, n);
                const float* xs = in + static_cast<size_t>(t0[d]) * B * m.in_size(l);
                if (first && batch_first) {
                    float* xd = xt + d * window * E;
                    to_time_major(x, T, B, E, t0[d], n, xd);
                    xs = xd;
                }
                float* ys = last && yt ? yt + d * window * DS : out + static_cast<size_t>(t0[d]) * B * DS;
                runs[d] = Run{xs, n, B, len, ys, h, c};
            }
            dispatch(Pass{{&runs[0], &runs[m.D - 1]}, l, l + 1}, runs[0].T, B);
            for (int d = 0; last && batch_first && y && d < m.D; ++d)  // its direction's columns of y
                to_batch_first(runs[d].y, T, B, DS, t0[d], runs[d].T, y, static_cast<size_t>(d) * m.S, m.S);
        }
    }
}

static double seconds_since(std::chrono::steady_clock::time_point begin) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

void SessionImpl::set_profiling(bool on) {
    Clocks& k = *clocks;
    if (on && k.worker.empty())  // every worker of the pool: batched_'s model may use more than this one
        k.worker.resize(static_cast<size_t>(m_->pool ? std::max(m_->pool->size(), m_->workers) : m_->workers));
    k.on = on;
    k.last.seconds = 0;
    k.last.workers.clear();
    k.last.workers.reserve(k.worker.size());  // so a run allocates nothing
}

void SessionImpl::start_profile() {
    Clocks& k = *clocks;
    std::fill(k.worker.begin(), k.worker.end(), WorkerClock{});
    k.workers = 0;
}

void SessionImpl::end_profile(double run_seconds) {
    Clocks& k = *clocks;
    k.last.seconds = run_seconds;
    k.last.workers.clear();
    for (int w = 0; w < k.workers; ++w) k.last.workers.push_back({k.worker[w].seconds, k.worker[w].wait_seconds});
}

// Runs a pass on the pool's workers, or on the caller alone.
void SessionImpl::dispatch(const Pass& p, int T, int B) {
    const ModelImpl& m = *m_;
    // A short run stays on the caller when waking the pool would cost more
    // (with the workers awake, spinning from the last pool run, the limit
    // prices no wake-up; napping, a run that hands over pays none either;
    // asleep, it pays only what of the wake-up the caller alone would not
    // have needed: set_short_runs). Runs
    // that come back to back (a burst) are worth waking the pool for. One
    // under half that break-even is not worth waiting for: the first such
    // run wakes the workers without waiting (WeightCentricPool::wake) and
    // stays on the caller, and so does every next one while that wake-up is
    // in flight; the first to find them spinning goes to the pool. (Until
    // 2026-11-29 the second run of a burst woke the pool and waited for it:
    // LSTM 256-256, one step, 80-110 us after 10 ms idle instead of 28-39.)
    // Half, because the break-even prices a wake-up at a constant above what
    // it measures on the Zen 4 VM: LSTM 256-64, 100 steps, near its
    // break-even, took 200-230 us on the caller against 145-170 on the pool
    // waiting for the workers (measured before hand-overs). A longer run, or
    // one whose workers woke and slept again (caller runs longer than their
    // 1 ms spin), wakes the pool; if it can, it hands over (run_on_caller).
    // A run also stays on the caller when the caller sits on a worker's core
    // and its affinity mask allows it no other (free_caller_core moves it
    // otherwise): one thread doing every share beats two taking turns.
    const auto start = std::chrono::steady_clock::now();
    const bool back_to_back = start - last_end_ < std::chrono::microseconds(kBackToBackMicros);
    const long rows = static_cast<long>(T) * B;
    using Idle = WeightCentricPool::Idle;
    const Idle idle = m.pool->idle(m.workers);
    const bool awake = idle == Idle::awake;
    bool short_run = rows <= m.short_runs.rows(B, idle);
    if (short_run && back_to_back && !awake && rows > m.short_runs.rows(B, Idle::awake)) {
        if (2 * rows > m.short_runs.rows(B, idle)) {
            short_run = false;
        } else if (!burst_woke_pool_) {
            m.pool->wake(m.workers);
            burst_woke_pool_ = true;
        } else {
            short_run = m.pool->waking();
        }
    }
    if (!back_to_back || !short_run) burst_woke_pool_ = false;
    if (clocks->on) clocks->workers = std::max(clocks->workers, m.workers);
    if (m.workers > 1 && (short_run || !m.pool->free_caller_core(m.workers))) {
        timed(0, &WorkerClock::seconds, [&] { run_on_caller(p, false); });
    } else {
        if (m.pipelined)  // published to the workers by the pool's dispatch
            for (int l = 0; l < m.L; ++l) progress_[l].steps.store(0, std::memory_order_relaxed);
        if (m.helpers) {  // so is this: a new pass, whose chunks are all unclaimed and undone
            if (++pass_ == 0) {  // wrapped: a chunk's old mark could equal the new pass
                for (auto& done : chunk_done_)
                    for (size_t i = 0; i < projected_rows_; ++i) done[i].store(0, std::memory_order_relaxed);
                pass_ = 1;
            }
            for (size_t i = 0; i < m.plans.size(); ++i) claims_[i].next.store(0, std::memory_order_relaxed);
            layers_done_.store(p.first, std::memory_order_relaxed);
        }
        handing_over_ = (hand_over_at || m.short_runs.hands_over(B, idle)) && m.hands_over;
        if (handing_over_) {  // published to the workers by the pool's dispatch
            ++hand_overs;
            handover_.arrived.store(0, std::memory_order_relaxed);
            handover_.join.store(-1, std::memory_order_relaxed);
        }
        auto job = [this, &p](int w) { work(p, w); };
        ended_alone_ = false;
        // Not on awake runs: the pool's entry gate would move a line between the cores each run.
        const bool may_end_alone = handing_over_ || (m.helpers && !awake);
        m.run_on_workers(job, may_end_alone ? &ended_alone_ : nullptr);
    }
    last_end_ = std::chrono::steady_clock::now();
}

// The whole-length output of a layer that feeds the next.
float* SessionImpl::layer_buffer(int layer) { return layer_out_[m_->pipelined ? layer : layer % 2].data(); }

// Layer l's input and output in pass p for direction run rd: the run's own x
// and y at the pass's ends, else the buffers between layers.
const float* SessionImpl::layer_input(const Pass& p, const Run& rd, int l) {
    return l == p.first ? rd.x : layer_buffer(l - 1);
}
float* SessionImpl::layer_output(const Pass& p, const Run& rd, int l) { return l == p.end - 1 ? rd.y : layer_buffer(l); }

template <class F>
void SessionImpl::timed(int w, double WorkerClock::*clock, F&& f) {
    if (!clocks->on) return f();
    const auto begin = std::chrono::steady_clock::now();
    f();
    clocks->worker[w].*clock += seconds_since(begin);
}

// Runs wait(), its seconds counted as worker w's waiting while profiling.
template <class Wait>
void SessionImpl::waiting(int w, Wait&& wait) {
    timed(w, &WorkerClock::wait_seconds, wait);
}

// Worker w's share of one pass, timed while profiling.
void SessionImpl::work(const Pass& p, int w) {
    timed(w, &WorkerClock::seconds, [&] { work_share(p, w); });
}

// Everything worker w does in one pass: its share of its layers and directions.
void SessionImpl::work_share(const Pass& p, int w) {
    const ModelImpl& m = *m_;
    const Run& r = *p.dir[0];
    if (m.pipelined && p.end - p.first > 1) {  // its stage's layers, step by step; no barrier
        try {
            run_stage(p, w);
        } catch (...) {  // never leave a later stage waiting for steps that will not come
            for (int l = p.first; l < p.end; ++l)
                if (m.plan(l, 0).first_worker == w) progress_[l].steps.store(r.T, std::memory_order_release);
            throw;
        }
        return;
    }
    JoinPoint j{p.first, -1};
    if (handing_over_ && w == 0) j = run_on_caller(p, true);
    else if (handing_over_) waiting(w, [&] { j = await_join(); });
    if (w == 0) ended_alone_ = j.layer == p.end;  // read by the pool's run after this returns, on this thread
    work_from(p, w, j);
    if (w == 0 && m.helpers) ended_alone_ = true;  // every chunk is done: a helper not yet in has nothing to take
}

// Worker w's share of the pass from layer j.layer on: of that layer, from step
// j.step of the DirectionRuns a hand-over's caller made (in serial storage),
// or (j.step = -1) all of it.
void SessionImpl::work_from(const Pass& p, int w, JoinPoint j) {
    const ModelImpl& m = *m_;
    for (int l = j.layer; l < p.end; ++l) {
        for (int d = 0; d < m.D; ++d) {
            const int q = w - m.plan(l, d).first_worker;
            const Run& rd = *p.dir[d];
            if (q >= 0 && q < m.plan(l, d).workers()) {
                if (l == j.layer && j.step >= 0) run_steps(serial_run(d, q), j.step);
                else run_direction(rd, l, d, q, layer_input(p, rd, l), layer_output(p, rd, l), nullptr, m.helpers);
            } else if (m.helpers) {
                // This layer's input is the layer before's output: worker 0's, whole.
                waiting(w, [&] {
                    for (int spins = 0; layers_done_.load(std::memory_order_acquire) < l; ++spins) spin_pause(spins);
                });
                help_project(rd, l, d, layer_input(p, rd, l));
            }
        }
        if (m.helpers && w == 0) layers_done_.store(l + 1, std::memory_order_release);
        else if (!m.helpers && l < p.end - 1) waiting(w, [&] { all_.wait(w); });  // the next layer reads every worker's output
    }
}

// Worker w waits until the stage before has finished more than `step` steps; returns how many it has.
int SessionImpl::wait_for_steps(int w, const std::atomic<int>& steps, int step) {
    int have = steps.load(std::memory_order_acquire);
    if (have > step) return have;  // no wait, no clock
    waiting(w, [&] {
        for (int spins = 0; have <= step; ++spins) {
            spin_pause(spins);
            have = steps.load(std::memory_order_acquire);
        }
    });
    return have;
}

// The chunks' partial reset products of GRU reset-before-matmul
// (partition.hpp): slot c of row b at base + c*slot + b*row, for n units.
struct ChunkPartials {
    float* base;
    size_t slot, row;
    float* at(int c, int b) const { return base + c * slot + b * row; }
};

// A cell's arguments that come from the Config: the clip and the activations.
static CellArgs gate_args(const Config& cfg) {
    CellArgs a;
    a.clip = cfg.clip;
    a.relu = cfg.cell == Cell::rnn_relu || cfg.cell_activation == CellActivation::relu;
    if (cfg.gate_activation == GateActivation::hard_sigmoid) {
        a.hard_alpha = cfg.hard_sigmoid_alpha;
        a.hard_beta = cfg.hard_sigmoid_beta;
    }
    return a;
}

// Adds up, in place, every node of the chunk tree [lo, hi) that lies inside
// chunks [a, b): a maximal one ends in slot lo. Every node is left + right.
static void fold_inside(const ChunkPartials& p, int lo, int hi, int a, int b, int B, int n) {
    if (hi - lo < 2 || hi <= a || lo >= b) return;
    const int mid = rbm_tree_mid(lo, hi);
    fold_inside(p, lo, mid, a, b, B, n);
    fold_inside(p, mid, hi, a, b, B, n);
    if (a <= lo && hi <= b)
        for (int r = 0; r < B; ++r) {
            float* o = p.at(lo, r);
            const float* x = p.at(mid, r);
            for (int u = 0; u < n; ++u) o[u] += x[u];
        }
}

// Node [lo, hi) of the chunk tree into out (rows out_row apart). A node whose
// chunks one worker owns (owner[] of its first and last chunk agree) was
// added up by it in slot lo of p; the others are added here, right children
// through tmp's slot of their first chunk.
static void fold_tree(const ChunkPartials& p, int lo, int hi, const int* owner, const ChunkPartials& tmp, float* out,
                      size_t out_row, int B, int n) {
    if (owner[lo] == owner[hi - 1]) {
        for (int r = 0; r < B; ++r) std::memcpy(out + r * out_row, p.at(lo, r), n * sizeof(float));
        return;
    }
    const int mid = rbm_tree_mid(lo, hi);
    fold_tree(p, lo, mid, owner, tmp, out, out_row, B, n);
    fold_tree(p, mid, hi, owner, tmp, tmp.at(mid, 0), tmp.row, B, n);
    for (int r = 0; r < B; ++r) {
        float* o = out + r * out_row;
        const float* x = tmp.at(mid, r);
        for (int u = 0; u < n; ++u) o[u] += x[u];
    }
}

// One worker's share of one layer-direction in one run, cut where its group's
// barriers fall: begin (the input projection; one-barrier GRU: h_0's partial
// reset products), then per step first_half, the mid-step barrier if
// has_mid(), second_half and the end-of-step barrier, then finish. The pool
// runs each worker's phases between the barriers (run_direction); a short run
// runs every worker's phases in turn on the caller (run_on_caller): the same
// arithmetic in the same order, so both give the same bits. It holds no state
// a phase needs from an earlier one except `projected` (pipelined stages).
struct SessionImpl::DirectionRun {
    SessionImpl& se;
    const ModelImpl& m;
    const Run& r;
    const PartitionPlan& plan;
    const int layer, dir, q;
    const int worker;  // q's pool worker (or pipelined stage's)
    const Slice sl;
    const Part& p;
    WorkerScratch& ws;
    const size_t li;
    const int T, B, H, S, pad, GP;
    const size_t DS;
    const bool reverse, projected_state;
    const Slice own;  // the part of h this worker writes
    float* const c;
    float* const bufs[2];  // step s reads bufs[s&1], writes bufs[(s+1)&1]
    float* const gates;
    const float* const in;
    float* const out;
    const Progress* const ready;  // the pipeline stage feeding this layer, or nullptr
    // Critical path first (ModelImpl::helpers), on the pool: the steps'
    // projections come in chunks of helper_chunk_steps from whichever worker
    // claimed them (help_project); this one, the only recurrent worker,
    // projects a chunk itself whenever the next it needs is not done.
    const bool helped;
    const size_t E;
    int projected = 0;  // steps whose projection is in xproj (helped: of the chunks done, in order)
    // Steps of input projection computed at a time (ModelImpl::
    // projection_chunk_bytes), into xproj's first rows each time: step t's
    // rows are in slot t % chunk. T: all up front, slot t (every path that
    // reads a projection at another step or worker).
    int chunk = 0;
    // Batch 1 (ModelImpl::folds): the projection of chunk c+1 (kProjectAhead
    // steps) is computed during chunk c's steps, a share of its panels per
    // step, inside the recurrent product's pass (gemv_with_projection). Chunk
    // 0 and a last partial chunk are projected up front; in a pipelined stage
    // fed by another, each chunk once the stage before has delivered its
    // steps, so this stage runs up to two chunks behind it.
    bool fold = false;
    bool zero_start = false;  // the state is all +0 at step 0: its recurrent products are skipped
    // GRU reset-before-matmul with one barrier (GRNN's single-barrier form):
    // this worker's slice is whole chunks of units, and it keeps U_r's columns
    // of those chunks for all H rows. After writing its part of h it computes
    // its chunks' partial reset products for every unit and adds up the
    // summation tree's nodes inside its chunks, into a shared buffer
    // (double-buffered by step parity, like h); after the barrier every worker
    // adds up the rest of the tree for all units and computes r and r*h of
    // every unit itself, so U_n·(r*h) needs no second barrier.
    const bool one_barrier;
    const int chunks;
    const size_t Hp, maxB;
    const size_t chunk_stride, parity_stride;  // partials: [parity][chunk][b][units]
    float* const partials;
    const int first_chunk, end_chunk;
    int owner[kMaxRbmChunks] = {};  // worker of the group owning each chunk (one barrier)

    DirectionRun(SessionImpl& session, const Run& run, int l, int d, int share, const float* input, float* output,
              const Progress* feed, bool help = false)
        : se(session), m(*session.m_), r(run), plan(m.plan(l, d)), layer(l), dir(d), q(share),
          worker(plan.first_worker + share), sl(plan.slices[q]),
          p(m.parts[l * m.D + d][q]), ws(se.scratch_[se.scratch_index(l * m.D + d, q)]), li(static_cast<size_t>(l) * m.D + d),
          T(r.T), B(r.B), H(m.H), S(m.S), pad(sl.padded), GP(m.G * pad), DS(static_cast<size_t>(m.D) * S),
          reverse(d == 1 || m.cfg.direction == Direction::reverse), projected_state(S != H),
          own(projected_state ? plan.proj_slices[q] : sl), c(r.c ? r.c + li * B * H : nullptr),
          bufs{r.h + li * B * S, se.h_swap_[li].data()}, gates(ws.gates.data()), in(input), out(output), ready(feed),
          helped(help), E(m.in_size(l)), one_barrier(m.rbm_one_barrier), chunks(m.rbm_chunks), Hp(m.h_padded()),
          maxB(static_cast<size_t>(m.cfg.max_batch)), chunk_stride(one_barrier ? maxB * Hp : maxB * pad),
          parity_stride(static_cast<size_t>(chunks) * chunk_stride),
          partials(one_barrier ? se.partials_[li].data() : nullptr),
          first_chunk(m.rbm() ? sl.begin / m.rbm_chunk : 0),
          end_chunk(first_chunk + static_cast<int>(p.w_hr.size())) {
        fold = m.folds[li] && B == 1 && T >= 2 * kProjectAhead && !helped;
        // Not for a reverse direction (its rows start at each sequence's own
        // last step), a pipelined layer fed by the layer before (on another
        // stage or its own: it projects as that layer delivers), the fold,
        // the one-barrier form (workers read each other's projections) or
        // helpers (they write every step's row). The first pipelined layer,
        // which reads the model's input, does chunk, in chunks of at most
        // kPipelineLeadRows rows: the next stage waits for its first step,
        // which would otherwise come only after every step's projection
        // (docs/ENGINE.md, "Projection chunks").
        const bool chunks_ok = !fold && !ready && !reverse && !one_barrier && !helped && T >= 2;
        const size_t bytes = m.projection_chunk_bytes[li], row = sizeof(float) * GP * B;
        chunk = T;
        if (chunks_ok && se.projection_chunk_steps > 0) chunk = std::min(T, se.projection_chunk_steps);
        else if (chunks_ok && bytes > 0)
            chunk = std::min(static_cast<int>(std::clamp<size_t>(bytes / row, 1, T)),
                             m.pipelined ? std::max(1, sched::kPipelineLeadRows / B) : T);
        for (int j = 0; one_barrier && j < plan.workers(); ++j)
            for (int k = plan.slices[j].begin / m.rbm_chunk;
                 k < chunks && m.chunk_begin(k) < plan.slices[j].begin + plan.slices[j].size; ++k)
                owner[k] = j;
    }

    bool has_mid() const { return (m.rbm() && !one_barrier) || projected_state; }
    int length(int b) const { return r.lengths ? r.lengths[b] : T; }
    int time_of(int b, int s) const { return reverse ? length(b) - 1 - s : s; }

    // Phase 1: this worker's gates of every step's input projection, biases
    // included. A layer fed by the pipeline stage before projects the steps
    // that stage has finished, in one product per batch of them, as they come
    // (a reverse one needs the last step first, so it waits for all).
    void project_until(int steps) {
        const size_t row = static_cast<size_t>(projected) * B;
        gemm_packed(p.w_x, in + row * E, E, (steps - projected) * B, p.bias_x.data(), ws.xproj.data() + row * GP, GP);
        projected = steps;
    }

    // Its chunks' partials of every row, added up along the tree (zeros for
    // a zero state: see zero_state_product).
    void own_partials(const float* h, int parity, bool zero = false) {
        const ChunkPartials cp{partials + parity * parity_stride, chunk_stride, Hp};
        for (int k = first_chunk; k < end_chunk; ++k)
            if (zero)
                for (int b = 0; b < B; ++b) std::fill_n(cp.at(k, b), Hp, 0.0f);
            else
                gemm_packed(p.w_hr[k - first_chunk], h + m.chunk_begin(k), S, B, nullptr, cp.at(k, 0), Hp);
        fold_inside(cp, 0, chunks, first_chunk, end_chunk, B, static_cast<int>(Hp));
    }

    CellArgs args_for(int b, int t, const float* hr, float* hw) const {
        CellArgs a = gate_args(m.cfg);
        a.n = sl.size;
        a.stride = pad;
        a.peep = p.peep.empty() ? nullptr : p.peep.data();
        a.peep_stride = pad;
        a.b_hn = p.b_hn.empty() ? nullptr : p.b_hn.data();
        a.xg = ws.xproj.data() + (static_cast<size_t>(t % chunk) * B + b) * GP;
        a.hg = gates + static_cast<size_t>(b) * GP;
        a.h_prev = hr + static_cast<size_t>(b) * S + sl.begin;
        a.c = c ? c + static_cast<size_t>(b) * H + sl.begin : nullptr;
        a.h = projected_state ? se.h_raw_[li].data() + static_cast<size_t>(b) * H + sl.begin
                              : hw + static_cast<size_t>(b) * S + sl.begin;
        a.rh = m.rbm() ? se.rh_[li].data() + static_cast<size_t>(b) * H + sl.begin : nullptr;
        return a;
    }

    // Steps [a, b) of a batch-1 run, projected up front.
    void project_steps(int a, int b) {
        gemm_packed(p.w_x, in + static_cast<size_t>(a) * E, E, b - a, p.bias_x.data(), ws.xproj.data() + a * GP, GP);
    }

    // Steps [s, s + chunk) into slots 0.. (chunk < T: a forward direction).
    void project_chunk(int s) {
        const int n = std::min(chunk, T - s);
        gemm_packed(p.w_x, in + static_cast<size_t>(s) * B * E, E, n * B, p.bias_x.data(), ws.xproj.data(), GP);
    }

    // Steps [j*c, (j+1)*c) of a forward direction into their own rows (critical path first).
    static void project_claimed(const Part& p, const float* in, size_t E, int T, int B, int c, int j, float* xproj,
                                size_t GP) {
        const size_t row = static_cast<size_t>(j) * c * B;
        gemm_packed(p.w_x, in + row * E, E, (std::min(T, (j + 1) * c) - j * c) * B, p.bias_x.data(), xproj + row * GP, GP);
    }

    // Until step s is projected: take the chunks done by then in order, and
    // while the next one is not done, claim and project one that no worker
    // has claimed (the next unclaimed, maybe a later one), else wait for it.
    void await_projection(int s) {
        const int c = se.helper_chunk_steps(B), n = (T - 1) / c + 1;
        std::atomic<uint32_t>* const done = se.chunk_done_[li].get();
        while (projected <= s) {
            const int k = projected / c;
            if (done[k].load(std::memory_order_acquire) == se.pass_) {
                projected = std::min(T, (k + 1) * c);
            } else if (const int j = se.claims_[li].next.fetch_add(1, std::memory_order_relaxed); j < n) {
                project_claimed(p, in, E, T, B, c, j, ws.xproj.data(), GP);
                done[j].store(se.pass_, std::memory_order_release);
            } else {
                se.waiting(worker, [&] {
                    for (int spins = 0; done[k].load(std::memory_order_acquire) != se.pass_; ++spins) spin_pause(spins);
                });
            }
        }
    }

    void begin() {
        zero_start = zero_state_product(bufs[0]);
        if (chunk < T) {
            project_chunk(0);
        } else if (fold) {  // a pipelined stage projects as the stage before delivers: first_half, fold_step
            if (ready) se.wait_for_steps(worker, ready->steps, kProjectAhead - 1);
            project_steps(0, kProjectAhead);
            if (T % kProjectAhead && !ready) project_steps(T / kProjectAhead * kProjectAhead, T);
        } else if (!helped && (!ready || reverse)) {  // helped: chunks come as it needs them (await_projection)
            project_until(ready ? se.wait_for_steps(worker, ready->steps, T - 1) : T);
        }
        if (one_barrier) own_partials(bufs[0], 0, zero_start);  // h_0's, for step 0
    }

    // Everything of step s before the mid-step barrier (all of it without one).
    void first_half(int s) {
        const float* hr = bufs[s & 1];
        float* hw = bufs[(s + 1) & 1];
        if (ready && !fold && projected <= s) project_until(se.wait_for_steps(worker, ready->steps, s));
        if (ready && fold && s == T / kProjectAhead * kProjectAhead) {  // the last, partial chunk (begin: the rest)
            se.wait_for_steps(worker, ready->steps, T - 1);
            project_steps(s, T);
        }
        if (helped && projected <= s) await_projection(s);
        if (chunk < T && s > 0 && s % chunk == 0) project_chunk(s);
        if (one_barrier) {
            one_barrier_step(s, hr, hw);
            return;
        }
        if (m.rbm() && s == 0 && zero_start) {  // z and r; n waits for second_half
            std::fill_n(gates, static_cast<size_t>(B) * GP, 0.0f);
        } else if (m.rbm()) {  // z over all units; r from the chunks' partial sums, added along the tree
            gemm_packed(p.w_h, hr, S, B, nullptr, gates + pad, GP);
            const ChunkPartials cp{ws.part.data(), chunk_stride, static_cast<size_t>(pad)};
            for (int k = 0; k < chunks; ++k) gemm_packed(p.w_hr[k], hr + m.chunk_begin(k), S, B, nullptr, cp.at(k, 0), pad);
            const int one_owner[kMaxRbmChunks] = {};
            fold_inside(cp, 0, chunks, 0, chunks, B, pad);
            fold_tree(cp, 0, chunks, one_owner, cp, gates, GP, B, pad);  // the root, from slot 0
        } else if (fold && s / kProjectAhead + 1 < T / kProjectAhead) {
            fold_step(s, hr);
        } else if (s == 0 && zero_start) {
            std::fill_n(gates, static_cast<size_t>(B) * GP, 0.0f);
        } else {
            gemm_packed(p.w_h, hr, S, B, nullptr, gates, GP, s & 1);  // alternate ends: see gemm_packed
        }
        for (int b = 0; b < B; ++b) {
            if (s >= length(b)) continue;
            const CellArgs& ab = args_for(b, time_of(b, s), hr, hw);
            switch (m.cfg.cell) {
                case Cell::lstm: lstm_cell(m.act, ab); break;
                case Cell::rnn_tanh:
                case Cell::rnn_relu: rnn_cell(m.act, ab); break;
                case Cell::gru:
                    if (m.rbm()) gru_rbm_gates(m.act, ab);  // r*h of its units; the rest after the barrier
                    else gru_lbr_cell(m.act, ab);
                    break;
            }
        }
    }

    // Whether the recurrent product of state h is all +0 without being run:
    // when every bit of h is zero (a fresh or reset state) and every weight
    // finite, each output is +0 + Σ w·(+0) = +0 in every precision's kernel
    // (their sums start at +0, and int8 scales an all-zero row by 0), so
    // writing zeros gives the product's own bits. It saves a whole pass over
    // the recurrent weights at step 0: half the weight traffic of a run of
    // one step. A NaN or Inf weight keeps the product (0·NaN is NaN). Every
    // worker reads the same h, so all decide alike. Checked once, in begin()
    // (zero_start), for step 0, where a zero state is common; not used in a
    // folded step (it also projects).
    bool zero_state_product(const float* h) const {
        if (!p.w_h_finite) return false;
        const size_t n = static_cast<size_t>(B) * S;
        for (size_t i = 0; i < n; ++i) {
            uint32_t bits;
            std::memcpy(&bits, h + i, sizeof bits);
            if (bits != 0) return false;  // -0 too: its product is +0 as well, and running it lets a test compare
        }
        return true;
    }

    // Step s's recurrent product with its share of the next chunk's input
    // projection in the same pass.
    void fold_step(int s, const float* hr) {
        constexpr int R = kProjectAhead;
        const int next = (s / R + 1) * R, j = s % R, panels = GP / isa_width(m.isa);
        if (j == 0) {  // the chunk's inputs, as the kernel reads them
            if (ready) se.wait_for_steps(worker, ready->steps, next + R - 1);
            pack_ahead(p.w_x, in + static_cast<size_t>(next) * E, E, ws.ahead.data());
        }
        gemv_with_projection(p.w_h, hr, gates, s & 1, p.w_x, j * panels / R, (j + 1) * panels / R, ws.ahead.data(),
                             p.bias_x.data(), ws.xproj.data() + static_cast<size_t>(next) * GP, GP);
    }

    void one_barrier_step(int s, const float* hr, float* hw) {
        const bool zero = s == 0 && zero_start;
        if (zero)
            for (int b = 0; b < B; ++b) std::fill_n(gates + static_cast<size_t>(b) * GP + pad, pad, 0.0f);
        else
            gemm_packed(p.w_h, hr, S, B, nullptr, gates + pad, GP);  // z of its units
        // r and r*h of every unit: its own slice into its gates, the others' into scratch.
        for (int j = 0; j < plan.workers(); ++j) {
            const Slice sj = plan.slices[j];
            const bool mine = j == q;
            float* hg = mine ? gates : ws.other.data();
            const size_t hg_row = mine ? GP : 2 * static_cast<size_t>(sj.padded);
            const ChunkPartials all{partials + (s & 1) * parity_stride + sj.begin, chunk_stride, Hp};
            const ChunkPartials tmp{ws.part.data(), maxB * sj.padded, static_cast<size_t>(sj.padded)};
            fold_tree(all, 0, chunks, owner, tmp, hg, hg_row, B, sj.padded);
            const float* xp = se.scratch_[plan.first_worker + j].xproj.data();
            const size_t GPj = static_cast<size_t>(m.G) * sj.padded;
            CellArgs g = gate_args(m.cfg);
            g.n = sj.size;
            g.stride = sj.padded;
            for (int b = 0; b < B; ++b) {
                if (s >= length(b)) continue;
                g.xg = xp + (static_cast<size_t>(time_of(b, s)) * B + b) * GPj;
                g.hg = hg + b * hg_row;
                g.h_prev = hr + static_cast<size_t>(b) * S + sj.begin;
                g.rh = ws.rh.data() + static_cast<size_t>(b) * H + sj.begin;
                gru_rbm_gates(m.act, g);
            }
        }
        if (zero)  // r*h is +0 too (r in [0, 1], or NaN where x is: NaN anyway)
            for (int b = 0; b < B; ++b) std::fill_n(gates + static_cast<size_t>(b) * GP + 2 * pad, pad, 0.0f);
        else
            gemm_packed(p.w_hn, ws.rh.data(), H, B, nullptr, gates + 2 * pad, GP);
        for (int b = 0; b < B; ++b)
            if (s < length(b)) gru_rbm_cell(m.act, args_for(b, time_of(b, s), hr, hw));
    }

    // Everything of step s after the mid-step barrier: what needs every
    // worker's first half, then its part of h into the layer's output.
    void second_half(int s) {
        const float* hr = bufs[s & 1];
        float* hw = bufs[(s + 1) & 1];
        if (m.rbm() && !one_barrier) {  // U_n·(r*h) needs every worker's r*h
            if (s == 0 && zero_start)  // r*h is +0 too (r in [0, 1], or NaN where x is: NaN anyway)
                for (int b = 0; b < B; ++b) std::fill_n(gates + static_cast<size_t>(b) * GP + 2 * pad, pad, 0.0f);
            else
                gemm_packed(p.w_hn, se.rh_[li].data(), H, B, nullptr, gates + 2 * pad, GP);
            for (int b = 0; b < B; ++b)
                if (s < length(b)) gru_rbm_cell(m.act, args_for(b, time_of(b, s), hr, hw));
        }
        if (projected_state) {  // h = W_hr·(o*tanh(c)) needs every worker's units
            if (own.size > 0) gemm_packed(p.w_r, se.h_raw_[li].data(), H, B, nullptr, ws.proj.data(), own.padded);
            for (int b = 0; b < B && own.size > 0; ++b)  // a worker may own no projected units (proj < workers' vectors)
                if (s < length(b))
                    std::memcpy(hw + static_cast<size_t>(b) * S + own.begin, ws.proj.data() + static_cast<size_t>(b) * own.padded,
                                own.size * sizeof(float));
        }
        for (int b = 0; b < B; ++b) {
            const size_t at = static_cast<size_t>(b) * S + own.begin;
            if (s < length(b))
                std::memcpy(out + (static_cast<size_t>(time_of(b, s)) * B + b) * DS + static_cast<size_t>(dir) * S + own.begin,
                            hw + at, own.size * sizeof(float));
            else {
                std::memcpy(hw + at, hr + at, own.size * sizeof(float));  // finished: carry the state
                if (m.pipelined)  // the next stage may read step s now: its zeros cannot wait till the end
                    std::fill_n(out + (static_cast<size_t>(s) * B + b) * DS + own.begin, own.size, 0.0f);
            }
        }
        if (one_barrier && s + 1 < T) own_partials(hw, (s + 1) & 1);  // for the next step, from its units of h
    }

    void finish() {
        if (T & 1)  // the final state ended in the swap buffer
            for (int b = 0; b < B; ++b)
                std::memcpy(bufs[0] + static_cast<size_t>(b) * S + own.begin, bufs[1] + static_cast<size_t>(b) * S + own.begin,
                            own.size * sizeof(float));
        if (r.lengths && !m.pipelined)  // padded steps give exactly zero, in every layer
            for (int b = 0; b < B; ++b)
                for (int t = length(b); t < T; ++t)
                    std::fill_n(out + (static_cast<size_t>(t) * B + b) * DS + static_cast<size_t>(dir) * S + own.begin, own.size,
                                0.0f);
    }
};

void SessionImpl::run_direction(const Run& r, int layer, int dir, int q, const float* in, float* out,
                                const Progress* ready, bool helped) {
    DirectionRun d(*this, r, layer, dir, q, in, out, ready, helped);
    d.begin();
    run_steps(d, 0);
}

// Step s of a begun share on the pool, between its group's barriers.
void SessionImpl::run_step(DirectionRun& d, int s) {
    SpinBarrier& barrier = *group_[d.li];
    d.first_half(s);
    if (d.has_mid()) waiting(d.worker, [&] { barrier.wait(d.q); });
    d.second_half(s);
    waiting(d.worker, [&] { barrier.wait(d.q); });
    if (m_->pipelined) progress_[d.layer].steps.store(s + 1, std::memory_order_release);
}

// Steps from.. of a begun share on the pool, and its finish.
void SessionImpl::run_steps(DirectionRun& d, int from) {
    if (from == 0 && d.one_barrier) waiting(d.worker, [&] { group_[d.li]->wait(d.q); });  // publishes h_0's partials and every worker's input projection
    for (int s = from; s < d.T; ++s) run_step(d, s);
    d.finish();
}

// Worker w's pipeline stage: its consecutive layers, interleaved step by
// step, each sched::pipeline_lag steps behind the layer before it, which it
// reads as it goes like a stage fed by another (so the stage is a wavefront
// of its own, and the next stage starts after a few steps, not after all
// but its last layer). Each layer has its own scratch (scratch_index).
void SessionImpl::run_stage(const Pass& p, int w) {
    const ModelImpl& m = *m_;
    const Run& r = *p.dir[0];
    int a = p.first;
    while (a < p.end && m.plan(a, 0).first_worker != w) ++a;
    int b = a;
    while (b < p.end && m.plan(b, 0).first_worker == w) ++b;
    for (int l = a; l < b; ++l)
        new (&stage_run(l)) DirectionRun(*this, r, l, 0, 0, layer_input(p, r, l), layer_output(p, r, l),
                                         l > p.first ? &progress_[l - 1] : nullptr);
    for (int tick = 0, left = b - a; left > 0; ++tick) {
        for (int l = a, start = 0; l < b; ++l) {
            DirectionRun& d = stage_run(l);
            if (l > a) start += sched::pipeline_lag(r.B, d.fold);
            const int s = tick - start;
            if (s < 0) break;  // the layers above start later still
            if (s >= d.T) continue;
            if (s == 0) d.begin();
            run_step(d, s);
            if (s == d.T - 1) d.finish(), --left;
        }
    }
}

// A helper's share of a layer-direction (critical path first): claims chunks
// of steps no worker has claimed and projects them into the recurrent
// worker's rows, from its packed W_ih (which this core's L2 then keeps too),
// until none is left.
void SessionImpl::help_project(const Run& r, int layer, int dir, const float* in) {
    const ModelImpl& m = *m_;
    const size_t li = static_cast<size_t>(layer) * m.D + dir;
    const PartitionPlan& plan = m.plan(layer, dir);
    const Part& p = m.parts[li][0];
    const int c = helper_chunk_steps(r.B), n = (r.T - 1) / c + 1;
    float* xproj = scratch_[plan.first_worker].xproj.data();
    const size_t GP = static_cast<size_t>(m.G) * plan.slices[0].padded;
    for (int j; (j = claims_[li].next.fetch_add(1, std::memory_order_relaxed)) < n;) {
        DirectionRun::project_claimed(p, in, m.in_size(layer), r.T, r.B, c, j, xproj, GP);
        chunk_done_[li][j].store(pass_, std::memory_order_release);
    }
}

SessionImpl::DirectionRun& SessionImpl::serial_run(int dir, int q) {
    return reinterpret_cast<DirectionRun*>(serial_runs_.get())[static_cast<size_t>(dir) * m_->workers + q];
}

// Slots a line apart at least, whatever the storage's alignment: each is written by its stage's worker at every step.
size_t SessionImpl::stage_slot_bytes() { return (sizeof(DirectionRun) + 63) / 64 * 64 + 64; }

SessionImpl::DirectionRun& SessionImpl::stage_run(int layer) {
    return *reinterpret_cast<DirectionRun*>(serial_runs_.get() + layer * stage_slot_bytes());
}

void SessionImpl::make_serial_storage() {
    // A DirectionRun holds no resource, so run_on_caller's are made in raw
    // storage and left without a destructor call.
    static_assert(std::is_trivially_destructible_v<DirectionRun>);
    static_assert(alignof(DirectionRun) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    const size_t serial = static_cast<size_t>(m_->D) * m_->workers * sizeof(DirectionRun);
    serial_runs_.reset(new unsigned char[std::max(serial, m_->pipelined ? m_->L * stage_slot_bytes() : 0)]);
}

// A run on the caller alone (ModelImpl::short_runs), or the start of a pool
// run that found the workers asleep (hand_over), until they join: every
// worker's phases in turn, layer by layer, each phase of all workers before
// the next, as the barriers order them; the directions of a layer step
// together where they are on disjoint workers (a worker's scratch holds one
// direction's projection at a time), else one after the other. Each worker's
// DirectionRun is made once per layer-direction, as on the pool (made once
// per phase, the constructor took 6% of a 2-worker LSTM 64-64 run of 100
// steps, and step 0 of a zero state could not skip its recurrent product:
// begin() finds that out), in serial storage, where joining workers take
// theirs over (work_from).
//
// Handing over: waiting for the workers at the first barrier costs the whole
// wake-up (60-90 us p50 after 10 ms idle on the Zen 4 VM); instead the
// caller runs their phases too, checking at each step boundary whether they
// have all taken the run, then publishes where they join (layer, step) and
// returns it. The phases and their order per worker are those of either
// path, so the bits are too. Only where every share's input projection
// before step 0 is light (a batch-1 fold's first chunk, or at most
// kHandOverRows rows): a heavy one is each worker's to make as it wakes, as
// before hand-overs (made by the caller, the workers would wait for it; made
// a block at a time, each finishing its own when it joins, it measured as a
// tie: the caller gains the wake-up on its own projection only, which then
// decides the run's end). Returns {p.end, 0} when the caller ran it all.
SessionImpl::JoinPoint SessionImpl::run_on_caller(const Pass& p, bool hand_over) {
    const ModelImpl& m = *m_;
    const auto join_here = [&](int l, int s) {
        if (!hand_over) return false;
        return hand_over_at ? hand_over_at->layer == l && hand_over_at->step == s : workers_arrived();
    };
    const int together = m.directions_apart ? m.D : 1;  // directions [d0, d0 + together) step together
    try {
        for (int l = p.first; l < p.end; ++l)
            for (int d0 = 0; d0 < m.D; d0 += together) {
                const auto each = [&](auto f) {
                    for (int d = d0; d < d0 + together; ++d)
                        for (int q = 0; q < m.plan(l, d).workers(); ++q) f(serial_run(d, q));
                };
                int steps = 0;
                bool heavy = false;
                for (int d = d0; d < d0 + together; ++d) {
                    const Run& r = *p.dir[d];
                    steps = std::max(steps, r.T);
                    const float* in = layer_input(p, r, l);
                    float* out = layer_output(p, r, l);
                    for (int q = 0; q < m.plan(l, d).workers(); ++q) {
                        const DirectionRun& w = *new (&serial_run(d, q)) DirectionRun(*this, r, l, d, q, in, out, nullptr);
                        heavy = heavy || w.chunk < w.T || (!w.fold && w.T * w.B > kHandOverRows);
                    }
                }
                if (join_here(l, -1) || (hand_over && !hand_over_at && heavy)) return publish_join(l, -1);
                each([](DirectionRun& w) { w.begin(); });
                for (int s = 0; s < steps; ++s) {
                    if (join_here(l, s)) return publish_join(l, s);
                    each([s](DirectionRun& w) {
                        if (s < w.T) w.first_half(s);
                    });
                    each([s](DirectionRun& w) {
                        if (s < w.T) w.second_half(s);
                    });
                }
                each([](DirectionRun& w) { w.finish(); });
            }
    } catch (...) {
        if (hand_over) publish_join(p.end, 0);  // nothing was published yet: the workers return
        throw;
    }
    return hand_over ? publish_join(p.end, 0) : JoinPoint{p.end, 0};  // the caller ran it all: the workers return
}

bool SessionImpl::workers_arrived() const {
    return handover_.arrived.load(std::memory_order_relaxed) == m_->workers - 1;
}

SessionImpl::JoinPoint SessionImpl::publish_join(int layer, int step) {
    handover_.join.store(static_cast<int64_t>(layer) << 32 | static_cast<uint32_t>(step + 1), std::memory_order_release);
    return JoinPoint{layer, step};
}

// A worker's part of a hand-over before it joins: says it is here and waits for where to join.
SessionImpl::JoinPoint SessionImpl::await_join() {
    handover_.arrived.fetch_add(1, std::memory_order_relaxed);
    int64_t j = handover_.join.load(std::memory_order_acquire);
    for (int spins = 0; j < 0; ++spins) {
        spin_pause(spins);
        j = handover_.join.load(std::memory_order_acquire);
    }
    return JoinPoint{static_cast<int>(j >> 32), static_cast<int>(j & 0xffffffff) - 1};
}

}  // namespace detail
}  // namespace deeprnn
