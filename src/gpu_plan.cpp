// gpu_plan.cpp — the CUDA backend's planner (host only, no CUDA headers):
// GRNN's configuration space, its pruning and its performance model
// (EuroSys'19, section 7), and the fallback decision.
//
// The space: tile width tw (units per block), tile height th (batch rows per
// block), work-group size ws (lanes per row's dot product), register shape
// (rows x kpt per thread), and, as plan parameters, the grid barrier and
// GRU reset-before-matmul's one- or two-barrier step. Selection as in GRNN
// 7.2: drop what does not fit (register file, shared memory, threads, all
// blocks resident at once), rank the rest by a model of one step's cost, and
// let the device time the top K (deeprnn_cuda.cu).
#include "common.hpp"
#include "gpu_plan.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace deeprnn {
namespace detail {
namespace gpu {

const char* to_string(BarrierKind b) { return b == BarrierKind::grid_sync ? "grid-sync" : "atomic"; }

const char* to_string(StepKind k) {
    switch (k) {
        case StepKind::lstm: return "lstm";
        case StepKind::gru_lbr: return "gru-linear-before-reset";
        case StepKind::gru_rbm1: return "gru-reset-before-matmul-1-barrier";
        case StepKind::gru_rbm2: return "gru-reset-before-matmul-2-barriers";
        case StepKind::rnn_tanh: return "rnn-tanh";
        case StepKind::rnn_relu: return "rnn-relu";
    }
    return "invalid";
}

int estimate_registers(RegShape s) { return s.max_regs < 255 ? s.max_regs : std::min(255, s.rows * s.kpt + 112); }

std::string unsupported_reason(const Config& cfg) {
    if (cfg.proj_size > 0)
        return cat("Config.proj_size = ", cfg.proj_size,
                   ": the CUDA backend does not support LSTM projection (use backend = cpu)");
    if (cfg.gate_activation != GateActivation::sigmoid)
        return cat("Config.gate_activation = ", to_string(cfg.gate_activation),
                   ": the CUDA backend has sigmoid gates only (use backend = cpu)");
    if (cfg.cell_activation != CellActivation::tanh)
        return cat("Config.cell_activation = ", to_string(cfg.cell_activation),
                   ": the CUDA backend has tanh candidates only (use backend = cpu)");
    if (cfg.weight_precision != WeightPrecision::f32)
        return cat("Config.weight_precision = ", to_string(cfg.weight_precision),
                   ": the CUDA backend keeps weights in f32 only (use weight_precision = f32 or backend = cpu)");
    return "";
}

void fold_biases(const Config& cfg, const float* b_ih, const float* b_hh, std::vector<float>& bias,
                 std::vector<float>& b_hn) {
    const int H = cfg.hidden_size, G = cfg.cell == Cell::lstm ? 4 : cfg.cell == Cell::gru ? 3 : 1;
    const bool lbr = cfg.cell == Cell::gru && cfg.gru_variant == GruVariant::linear_before_reset;
    bias.assign(static_cast<size_t>(G) * H, 0.0f);
    b_hn.assign(lbr ? H : 0, 0.0f);
    for (int i = 0; i < G * H; ++i) {
        if (b_ih) bias[i] += b_ih[i];
        if (b_hh && !(lbr && i >= 2 * H)) bias[i] += b_hh[i];
    }
    if (lbr && b_hh)
        for (int u = 0; u < H; ++u) b_hn[u] = b_hh[2 * H + u];
}

namespace {

// The distinct values ceil(n/k), k = 1..n: the smallest tile per tile count.
std::vector<int> tile_sizes(int n) {
    std::vector<int> v;
    for (int k = 1; k <= n; ++k) {
        const int s = ceil_div(n, k);
        if (v.empty() || v.back() != s) v.push_back(s);
    }
    return v;
}

std::vector<StepKind> step_kinds(Cell cell, GruVariant variant, int gru_syncs) {
    switch (cell) {
        case Cell::lstm: return {StepKind::lstm};
        case Cell::rnn_tanh: return {StepKind::rnn_tanh};
        case Cell::rnn_relu: return {StepKind::rnn_relu};
        case Cell::gru:
            if (variant == GruVariant::linear_before_reset) return {StepKind::gru_lbr};
            if (gru_syncs == 1) return {StepKind::gru_rbm1};
            if (gru_syncs == 2) return {StepKind::gru_rbm2};
            return {StepKind::gru_rbm1, StepKind::gru_rbm2};
    }
    return {};
}

double epilogue_weight(StepKind k) {
    switch (k) {
        case StepKind::lstm: return 1.0;
        case StepKind::rnn_tanh: return 0.3;
        case StepKind::rnn_relu: return 0.1;
        default: return 0.8;  // GRU
    }
}

std::string mib(double bytes) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(bytes < 10 * 1048576.0 ? 2 : 1) << bytes / 1048576.0 << " MiB";
    return s.str();
}

}  // namespace

void estimate_cost(const DeviceInfo& dev, const CostParams& cp, Candidate& c) {
    const Geometry& g = c.geo;
    const double k_sm = ceil_div(g.blocks, dev.sms);  // blocks on the busiest SM
    const double warps_sm = k_sm * (g.threads / 32);
    const double wps = std::ceil(warps_sm / dev.schedulers_per_sm);
    const int active_sms = std::min(g.blocks, dev.sms);
    // GRNN eq. 10: pairs of SMs share a path to L2.
    const double congestion = active_sms > dev.sms / 2 ? 2.0 : 1.0;
    const double row_bytes = 4.0 * g.th * g.H;  // one [th, H] state slab
    const double load = cp.l2_latency + k_sm * row_bytes * congestion / cp.l2_bytes_per_clock;

    // Partial products: per k column a thread issues rpg FMAs and one
    // shared-memory load; bound by issue (per scheduler), by the SM's shared-
    // memory port, or by the FMA dependency chain (GRNN's PC with S1, S2).
    const double per_j = std::max({wps * (g.rpg + 1), warps_sm / cp.lds_per_clock, cp.fma_latency});
    c.pc = g.th * g.kpt * per_j;
    // Butterfly: log2(ws) dependent shuffle+add steps per batch row; the
    // rpg rows interleave (GRNN's RC with S3).
    const double steps = std::log2(static_cast<double>(g.ws));
    c.rc = g.th * steps * std::max(g.rpg * 2.0 * wps, cp.shfl_latency);
    const double items = std::ceil(static_cast<double>(g.th) * g.tw / g.threads);
    c.ec = cp.global_latency + items * cp.epilogue_per_unit * epilogue_weight(c.kind);
    c.gc = load;
    int block_syncs = 3;
    if (c.kind == StepKind::gru_rbm2) {
        c.gc += load;  // r*h is read like h
        c.ec += cp.global_latency;
        block_syncs = 5;
    } else if (c.kind == StepKind::gru_rbm1) {
        // The price of the saved barrier (GRNN 5, fig. 7b): every block reads
        // all unit tiles' partial sums for its rows, reduces them and computes
        // r for all H units; the partial product itself reads its U_r slice
        // from shared memory.
        c.gc += load + cp.l2_latency + k_sm * row_bytes * g.unit_tiles * congestion / cp.l2_bytes_per_clock;
        const double per_thread = std::ceil(static_cast<double>(g.th) * g.H / g.threads);
        c.pc += per_thread * g.tw * 2.0 * wps;
        c.ec += per_thread * (g.unit_tiles + cp.epilogue_per_unit * 0.4);
        block_syncs = 5;
    }
    const double barrier = c.barrier == BarrierKind::grid_sync ? cp.grid_sync_base : cp.atomic_barrier_base;
    c.sc = barriers_per_step(c.kind) * (barrier + cp.barrier_per_block * g.blocks) + block_syncs * cp.block_sync;
    c.total = c.gc + c.pc + c.rc + c.ec + c.sc;
    c.us_per_step = c.total / (dev.clock_ghz * 1e3);
}

std::vector<Candidate> legal_candidates(const DeviceInfo& dev, Cell cell, GruVariant variant, int hidden, int batch,
                                        const PlanOptions& opt, const CostParams& cp, PruneStats* stats) {
    PruneStats st;
    std::vector<Candidate> out;
    std::vector<BarrierKind> barriers;
    // grid.sync() needs a cooperative launch; the atomic barrier does not.
    if (opt.barrier != static_cast<int>(BarrierKind::atomic) && dev.cooperative_launch)
        barriers.push_back(BarrierKind::grid_sync);
    if (opt.barrier != static_cast<int>(BarrierKind::grid_sync)) barriers.push_back(BarrierKind::atomic);
    std::vector<int> shape_rows;  // distinct register rows, ascending
    for (const RegShape& s : kRegShapes)
        if (std::find(shape_rows.begin(), shape_rows.end(), s.rows) == shape_rows.end()) shape_rows.push_back(s.rows);
    std::sort(shape_rows.begin(), shape_rows.end());

    const std::vector<int> tws = tile_sizes(hidden), ths = tile_sizes(batch);
    for (StepKind kind : step_kinds(cell, variant, opt.gru_syncs))
        for (int tw : tws)
            for (int th : ths)
                for (int ws = 1; ws <= std::min(32, dev.warp_size); ws *= 2)
                    for (int rows : shape_rows) {
                        st.considered += static_cast<long>(barriers.size());
                        // The smallest kpt of this row count covering H with ws lanes.
                        int shape = -1;
                        for (int i = 0; i < kNumRegShapes; ++i)
                            if (kRegShapes[i].rows == rows && kRegShapes[i].kpt * ws >= hidden &&
                                (shape < 0 || kRegShapes[i].kpt < kRegShapes[shape].kpt))
                                shape = i;
                        // Gate-filtered products need gate-pure work groups.
                        if (shape < 0 || (is_rbm(kind) && tw % rows != 0)) {
                            st.shape += static_cast<long>(barriers.size());
                            continue;
                        }
                        Candidate c;
                        c.kind = kind;
                        c.shape = shape;
                        c.geo = make_geometry(kind, hidden, batch, tw, th, ws, kRegShapes[shape]);
                        const Geometry& g = c.geo;
                        if (g.threads > dev.max_threads_per_block || g.threads > dev.max_threads_per_sm) {
                            st.threads += static_cast<long>(barriers.size());
                            continue;
                        }
                        c.regs = static_cast<size_t>(shape) < opt.regs.size() ? opt.regs[shape]
                                                                                : estimate_registers(kRegShapes[shape]);
                        // Registers are allocated per warp in units of 256.
                        const long block_regs =
                            static_cast<long>(g.threads / 32) * ((static_cast<long>(c.regs) * 32 + 255) / 256 * 256);
                        if (c.regs < 0 || c.regs > dev.max_regs_per_thread || block_regs > dev.regs_per_block ||
                            block_regs > dev.regs_per_sm) {
                            st.registers += static_cast<long>(barriers.size());
                            continue;
                        }
                        c.smem = sizeof(float) * static_cast<size_t>(smem_layout(g, kind).total);
                        const long smem_block = static_cast<long>(c.smem) + dev.smem_reserved_per_block;
                        if (c.smem > static_cast<size_t>(dev.smem_per_block_optin) || smem_block > dev.smem_per_sm) {
                            st.smem += static_cast<long>(barriers.size());
                            continue;
                        }
                        // A grid barrier needs every block resident at once.
                        c.blocks_per_sm = static_cast<int>(std::min<long>(
                            {dev.max_blocks_per_sm, dev.max_threads_per_sm / g.threads, dev.regs_per_sm / block_regs,
                             dev.smem_per_sm / smem_block}));
                        if (g.blocks > static_cast<long>(dev.sms) * c.blocks_per_sm) {
                            st.residency += static_cast<long>(barriers.size());
                            continue;
                        }
                        for (BarrierKind b : barriers) {
                            c.barrier = b;
                            estimate_cost(dev, cp, c);
                            out.push_back(c);
                            ++st.legal;
                        }
                    }
    if (stats) *stats = st;
    return out;
}

Plan make_plan(const DeviceInfo& dev, const Config& cfg, int batch, const PlanOptions& opt, const CostParams& cp) {
    const std::string why = unsupported_reason(cfg);
    if (!why.empty()) fail(why);
    if (batch < 1) fail("internal: gpu plan for batch ", batch);
    Plan p;
    const int H = cfg.hidden_size, G = cfg.cell == Cell::lstm ? 4 : cfg.cell == Cell::gru ? 3 : 1;
    p.weight_bytes = 4.0 * G * H * H;
    p.register_bytes = 4.0 * dev.sms * dev.regs_per_sm;
    if (opt.force_fallback) {
        p.fallback_reason = "forced (PlanOptions.force_fallback)";
        return p;
    }
    std::vector<Candidate> c = legal_candidates(dev, cfg.cell, cfg.gru_variant, H, batch, opt, cp, &p.stats);
    if (c.empty()) {
        if (p.weight_bytes > p.register_bytes)
            p.fallback_reason = cat("the recurrent weights of a layer-direction (", mib(p.weight_bytes),
                                    ") exceed the register files of all ", dev.sms, " SMs (", mib(p.register_bytes), ")");
        else
            p.fallback_reason = cat("no tile fits on chip: of ", p.stats.considered, " configurations ", p.stats.registers,
                                    " exceed the register file, ", p.stats.smem, " shared memory, ", p.stats.threads,
                                    " the thread limits, ", p.stats.residency, " the resident blocks, ", p.stats.shape,
                                    " have no register shape");
        return p;
    }
    // Total order, so the ranking is the same on every machine.
    std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
        if (a.total != b.total) return a.total < b.total;
        if (a.geo.blocks != b.geo.blocks) return a.geo.blocks < b.geo.blocks;
        if (a.geo.threads != b.geo.threads) return a.geo.threads < b.geo.threads;
        if (a.kind != b.kind) return a.kind < b.kind;
        if (a.shape != b.shape) return a.shape < b.shape;
        if (a.geo.ws != b.geo.ws) return a.geo.ws < b.geo.ws;
        if (a.geo.tw != b.geo.tw) return a.geo.tw < b.geo.tw;
        if (a.geo.th != b.geo.th) return a.geo.th < b.geo.th;
        return a.barrier < b.barrier;
    });
    if (c.size() > std::max<size_t>(opt.keep, 1)) c.resize(std::max<size_t>(opt.keep, 1));
    p.ranked = std::move(c);
    p.persistent = true;
    return p;
}

std::string describe(const Candidate& c) {
    const Geometry& g = c.geo;
    std::ostringstream s;
    s << to_string(c.kind) << ": tile " << g.tw << " units x " << g.th << " rows, " << g.blocks << " blocks of "
      << g.threads << " threads (work groups of " << g.ws << ", " << g.rpg << " rows x " << g.kpt
      << " k per thread), " << to_string(c.barrier) << " barrier, " << c.regs << " regs, " << c.smem
      << " B smem, model " << std::fixed << std::setprecision(2) << c.us_per_step << " us/step (cycles: gc "
      << std::setprecision(0) << c.gc << ", pc " << c.pc << ", rc " << c.rc << ", ec " << c.ec << ", sc " << c.sc << ")";
    return s.str();
}

std::string describe(const Plan& p, const DeviceInfo& dev) {
    std::ostringstream s;
    s << "cuda device: " << dev.name << " (cc " << dev.cc_major << "." << dev.cc_minor << ", " << dev.sms << " SMs)\n";
    if (!p.persistent) {
        s << "cuda path: fallback (cuBLAS product per step + fused element-wise kernel): " << p.fallback_reason << "\n";
        return s.str();
    }
    s << "cuda path: persistent kernel, " << describe(p.best()) << "\n";
    s << "cuda search: " << p.stats.legal << " legal of " << p.stats.considered << " (pruned: registers "
      << p.stats.registers << ", shared memory " << p.stats.smem << ", threads " << p.stats.threads
      << ", residency " << p.stats.residency << ", shape " << p.stats.shape << "); weights " << mib(p.weight_bytes)
      << " of " << mib(p.register_bytes) << " registers\n";
    return s.str();
}

namespace {
const CudaBackend*& registered_backend() {
    static const CudaBackend* backend = nullptr;  // function-local: safe from other static initialisers
    return backend;
}
}  // namespace

void register_cuda_backend(const CudaBackend* backend) { registered_backend() = backend; }

const CudaBackend* cuda_backend() {
#if defined(DEEPRNN_CUDA)
    if (!registered_backend()) deeprnn_cuda_register();
#endif
    return registered_backend();
}

}  // namespace gpu
}  // namespace detail
}  // namespace deeprnn
