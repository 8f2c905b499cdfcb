// The CUDA backend's planner and kernel mapping, on the CPU (no GPU needed):
// legal tiles for published device descriptions, register-file pruning, the
// ranking, the fallback decision, and an emulation of the persistent kernel
// that executes its tiling and thread mapping (src/gpu_plan.hpp's shared
// index and cell math) block by block, lane by lane, and is checked for
// exact coverage and against the float64 reference (test/reference.hpp).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "reference.hpp"
#include "src/gpu_plan.hpp"

namespace g = deeprnn::detail::gpu;
using deeprnn::Cell;
using deeprnn::Config;
using deeprnn::GruVariant;

namespace {

// ---------------------------------------------------------------------------
// Published device properties (CUDA programming guide, table of compute
// capabilities, and the vendors' data sheets).
// ---------------------------------------------------------------------------

g::DeviceInfo a100() {  // A100 SXM4: cc 8.0, 108 SMs, 164 KiB shared memory per SM
    g::DeviceInfo d;
    d.name = "A100-SXM4";
    d.cc_major = 8;
    d.sms = 108;
    d.smem_per_sm = 164 * 1024;
    d.smem_per_block_optin = 163 * 1024;
    d.max_threads_per_sm = 2048;
    d.max_blocks_per_sm = 32;
    d.clock_ghz = 1.41;
    return d;
}

g::DeviceInfo h100() {  // H100 SXM5: cc 9.0, 132 SMs, 228 KiB
    g::DeviceInfo d;
    d.name = "H100-SXM5";
    d.cc_major = 9;
    d.sms = 132;
    d.smem_per_sm = 228 * 1024;
    d.smem_per_block_optin = 227 * 1024;
    d.max_threads_per_sm = 2048;
    d.max_blocks_per_sm = 32;
    d.clock_ghz = 1.98;
    return d;
}

g::DeviceInfo rtx4090() {  // RTX 4090: cc 8.9, 128 SMs, 100 KiB, 48 warps per SM
    g::DeviceInfo d;
    d.name = "RTX-4090";
    d.cc_major = 8;
    d.cc_minor = 9;
    d.sms = 128;
    d.smem_per_sm = 100 * 1024;
    d.smem_per_block_optin = 99 * 1024;
    d.max_threads_per_sm = 1536;
    d.max_blocks_per_sm = 24;
    d.clock_ghz = 2.52;
    return d;
}

g::DeviceInfo orin() {  // Jetson AGX Orin 64 GB: cc 8.7, 16 SMs, 164 KiB, 48 warps per SM
    g::DeviceInfo d;
    d.name = "Jetson-AGX-Orin";
    d.cc_major = 8;
    d.cc_minor = 7;
    d.sms = 16;
    d.smem_per_sm = 164 * 1024;
    d.smem_per_block_optin = 163 * 1024;
    d.max_threads_per_sm = 1536;
    d.max_blocks_per_sm = 16;
    d.clock_ghz = 1.3;
    return d;
}

std::vector<g::DeviceInfo> devices() { return {a100(), h100(), rtx4090(), orin()}; }

Config config(Cell cell, int hidden, GruVariant v = GruVariant::linear_before_reset) {
    Config c;
    c.cell = cell;
    c.gru_variant = v;
    c.input_size = 16;
    c.hidden_size = hidden;
    return c;
}

struct CellVariant {
    Cell cell;
    GruVariant variant;
};
const CellVariant kCells[] = {{Cell::lstm, GruVariant::linear_before_reset},
                              {Cell::gru, GruVariant::linear_before_reset},
                              {Cell::gru, GruVariant::reset_before_matmul},
                              {Cell::rnn_tanh, GruVariant::linear_before_reset},
                              {Cell::rnn_relu, GruVariant::linear_before_reset}};

long block_regs(const g::Candidate& c) { return static_cast<long>(c.geo.threads / 32) * ((c.regs * 32L + 255) / 256 * 256); }

// Every rule a legal candidate must satisfy, checked independently of the planner.
std::string check_legal(const g::DeviceInfo& d, const g::Candidate& c, int H, int B) {
    const g::Geometry& geo = c.geo;
    const g::RegShape s = g::kRegShapes[c.shape];
    if (geo.rpg != s.rows || geo.kpt != s.kpt) return "shape mismatch";
    if (geo.kp < H) return "k not covered";
    if (geo.groups * geo.rpg < geo.rows) return "rows not covered";
    if (geo.unit_tiles * geo.tw < H || geo.batch_tiles * geo.th < B) return "tiles do not cover";
    if ((geo.unit_tiles - 1) * geo.tw >= H || (geo.batch_tiles - 1) * geo.th >= B) return "empty tile";
    if (geo.threads % 32 != 0 || geo.threads != geo.groups * geo.ws) return "partial warp";
    if (geo.ws < 1 || geo.ws > 32 || (geo.ws & (geo.ws - 1))) return "ws";
    if (geo.threads > d.max_threads_per_block) return "threads";
    if (c.regs > d.max_regs_per_thread || block_regs(c) > d.regs_per_sm) return "registers";
    if (c.smem > static_cast<size_t>(d.smem_per_block_optin)) return "smem";
    if (geo.blocks > d.sms * c.blocks_per_sm) return "residency";
    if (static_cast<long>(c.blocks_per_sm) * block_regs(c) > d.regs_per_sm) return "blocks_per_sm vs registers";
    if (g::is_rbm(c.kind) && geo.tw % geo.rpg != 0) return "gate-mixed group";
    if (!(c.total > 0) || std::abs(c.gc + c.pc + c.rc + c.ec + c.sc - c.total) > 1e-6 * c.total) return "cost";
    return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpu_plan)

// Legal tiles exist for ordinary sizes on every device and all obey its limits.
BOOST_AUTO_TEST_CASE(legal_tiles_obey_device_limits) {
    for (const g::DeviceInfo& d : devices())
        for (const CellVariant& cv : kCells)
            for (int H : {64, 256})
                for (int B : {1, 8}) {
                    g::PruneStats st;
                    const auto cands = g::legal_candidates(d, cv.cell, cv.variant, H, B, {}, {}, &st);
                    BOOST_TEST_CONTEXT(d.name << " " << deeprnn::to_string(cv.cell) << " H=" << H << " B=" << B) {
                        BOOST_TEST(!cands.empty());
                        BOOST_TEST(st.legal == static_cast<long>(cands.size()));
                        BOOST_TEST(st.considered == st.legal + st.registers + st.smem + st.threads + st.residency + st.shape);
                        for (const g::Candidate& c : cands) BOOST_TEST(check_legal(d, c, H, B) == "");
                    }
                }
}

// The enumeration is GRNN's space without dominated points: every tile count
// appears with its smallest tile; both barriers; both GRU reset-before-matmul forms.
BOOST_AUTO_TEST_CASE(space_has_every_parameter) {
    const auto cands = g::legal_candidates(a100(), Cell::gru, GruVariant::reset_before_matmul, 128, 4, {}, {}, nullptr);
    bool rbm1 = false, rbm2 = false, grid = false, atomic = false;
    std::vector<int> ws_seen(33, 0), th_seen(5, 0);
    for (const g::Candidate& c : cands) {
        rbm1 |= c.kind == g::StepKind::gru_rbm1;
        rbm2 |= c.kind == g::StepKind::gru_rbm2;
        grid |= c.barrier == g::BarrierKind::grid_sync;
        atomic |= c.barrier == g::BarrierKind::atomic;
        ws_seen[c.geo.ws] = 1;
        th_seen[c.geo.th] = 1;
        BOOST_TEST(c.geo.tw == g::ceil_div(128, c.geo.unit_tiles));  // smallest tile for its count
    }
    BOOST_TEST(rbm1);
    BOOST_TEST(rbm2);
    BOOST_TEST(grid);
    BOOST_TEST(atomic);
    for (int ws : {1, 2, 4, 8, 16, 32}) BOOST_TEST(ws_seen[ws] == 1);
    for (int th : {1, 2, 4}) BOOST_TEST(th_seen[th] == 1);  // 3 is no smallest tile for any count of 4 rows

    g::PlanOptions one;
    one.barrier = static_cast<int>(g::BarrierKind::atomic);
    one.gru_syncs = 1;
    for (const g::Candidate& c : g::legal_candidates(a100(), Cell::gru, GruVariant::reset_before_matmul, 128, 4, one, {}, nullptr)) {
        BOOST_TEST((c.barrier == g::BarrierKind::atomic));
        BOOST_TEST((c.kind == g::StepKind::gru_rbm1));
    }
    // grid.sync() needs a cooperative launch.
    g::DeviceInfo no_coop = a100();
    no_coop.cooperative_launch = false;
    for (const g::Candidate& c : g::legal_candidates(no_coop, Cell::lstm, GruVariant::linear_before_reset, 128, 1, {}, {}, nullptr))
        BOOST_TEST((c.barrier == g::BarrierKind::atomic));
}

// GRNN 7.2: configurations that need more registers than an SM has are pruned.
BOOST_AUTO_TEST_CASE(register_file_pruning) {
    const g::DeviceInfo d = a100();
    g::PruneStats base, tight;
    const auto all = g::legal_candidates(d, Cell::lstm, GruVariant::linear_before_reset, 256, 1, {}, {}, &base);
    // Every shape at 255 registers: a block holds at most 65536/(255->256 per lane) = 256 threads.
    g::PlanOptions fat;
    fat.regs.assign(g::kNumRegShapes, 255);
    const auto few = g::legal_candidates(d, Cell::lstm, GruVariant::linear_before_reset, 256, 1, fat, {}, &tight);
    BOOST_TEST(tight.registers > base.registers);
    BOOST_TEST(few.size() < all.size());
    for (const g::Candidate& c : few) BOOST_TEST(c.geo.threads <= 256);
    // Half the register file: fewer legal tiles, all within it.
    g::DeviceInfo half = d;
    half.regs_per_sm = half.regs_per_block = 32768;
    g::PruneStats hs;
    for (const g::Candidate& c : g::legal_candidates(half, Cell::lstm, GruVariant::linear_before_reset, 256, 1, {}, {}, &hs))
        BOOST_TEST(block_regs(c) * c.blocks_per_sm <= 32768);
    BOOST_TEST(hs.registers > base.registers);
    // A shape the device reports unusable (spilling kernel) is never proposed.
    g::PlanOptions only;
    only.regs.assign(g::kNumRegShapes, -1);
    only.regs[3] = 120;  // (1, 64)
    for (const g::Candidate& c : g::legal_candidates(d, Cell::lstm, GruVariant::linear_before_reset, 256, 1, only, {}, nullptr)) {
        BOOST_TEST(c.shape == 3);
        BOOST_TEST(c.regs == 120);
    }
    // The whole layer's weights sit in registers: resident blocks x threads x rows x kpt >= G*H*H.
    for (const g::Candidate& c : all)
        BOOST_TEST(static_cast<double>(c.geo.unit_tiles) * c.geo.threads * c.geo.rpg * c.geo.kpt >= 4.0 * 256 * 256);
}

// Hidden 1024 LSTM (16 MiB of recurrent weights) fits the register files of
// A100 (27 MiB) and H100 (33 MiB), not Orin's (4 MiB); hidden 2048 (64 MiB) fits none.
BOOST_AUTO_TEST_CASE(fallback_decision) {
    auto plan = [](const g::DeviceInfo& d, int H, int B = 1) { return g::make_plan(d, config(Cell::lstm, H), B); };
    BOOST_TEST(plan(a100(), 1024).persistent);
    BOOST_TEST(plan(h100(), 1024).persistent);
    const g::Plan o = plan(orin(), 1024);
    BOOST_TEST(!o.persistent);
    BOOST_TEST(o.ranked.empty());
    BOOST_TEST(o.fallback_reason.find("exceed the register files") != std::string::npos);
    BOOST_TEST(o.fallback_reason.find("16.0 MiB") != std::string::npos);
    BOOST_TEST(g::describe(o, orin()).find("fallback (cuBLAS product per step") != std::string::npos);
    for (const g::DeviceInfo& d : devices()) BOOST_TEST(!plan(d, 2048).persistent);
    // Small models are persistent everywhere, also at batch 64.
    for (const g::DeviceInfo& d : devices())
        for (const CellVariant& cv : kCells)
            BOOST_TEST(g::make_plan(d, config(cv.cell, 256, cv.variant), 64).persistent);
    // Forced fallback.
    g::PlanOptions f;
    f.force_fallback = true;
    BOOST_TEST(!g::make_plan(a100(), config(Cell::lstm, 64), 1, f).persistent);
    // Weights that fit in total but no tile: a 32-SM device with a tiny shared memory.
    g::DeviceInfo tiny = a100();
    tiny.smem_per_sm = tiny.smem_per_block_optin = 2048;
    const g::Plan t = g::make_plan(tiny, config(Cell::lstm, 512), 1);
    BOOST_TEST(!t.persistent);
    BOOST_TEST(t.fallback_reason.find("no tile fits on chip") != std::string::npos);
    BOOST_TEST(t.stats.smem > 0);
}

// Projection, narrow weights, hard_sigmoid gates and relu candidates are refused by name; the
// rest of LSTM (peepholes, clip) is supported.
BOOST_AUTO_TEST_CASE(unsupported_features_named) {
    Config c = config(Cell::lstm, 64);
    BOOST_TEST(g::unsupported_reason(c) == "");
    c.peepholes = true;
    c.clip = 3.0f;
    BOOST_TEST(g::unsupported_reason(c) == "");
    c.proj_size = 32;
    const std::string why = g::unsupported_reason(c);
    BOOST_TEST(why.find("Config.proj_size = 32") == 0);
    BOOST_TEST(why.find("projection") != std::string::npos);
    BOOST_CHECK_THROW(g::make_plan(a100(), c, 1), deeprnn::Error);
    c.proj_size = 0;
    c.weight_precision = deeprnn::WeightPrecision::bf16;
    BOOST_TEST(g::unsupported_reason(c).find("Config.weight_precision = bf16") == 0);
    c.weight_precision = deeprnn::WeightPrecision::f32;
    c.gate_activation = deeprnn::GateActivation::hard_sigmoid;
    BOOST_TEST(g::unsupported_reason(c).find("Config.gate_activation = hard_sigmoid") == 0);
    c.gate_activation = deeprnn::GateActivation::sigmoid;
    c.cell_activation = deeprnn::CellActivation::relu;
    BOOST_TEST(g::unsupported_reason(c).find("Config.cell_activation = relu") == 0);
}

// The public API in a build without the backend (the normal test binary):
// cuda is an Error that says how to build with CUDA, auto is the CPU and the
// plan does not talk about CUDA. With the backend linked, the same questions
// are tools/deeprnn_cuda_nodevice_test.cpp's (make cuda-test).
BOOST_AUTO_TEST_CASE(backend_without_cuda) {
    if (g::cuda_backend()) return;  // this binary was linked with deeprnn_cuda.o
    BOOST_TEST(deeprnn::build_info().find("cuda: not built") != std::string::npos);
    Config c = config(Cell::gru, 16);
    c.input_size = 5;
    std::mt19937 rng(1);
    const deeprnn::Weights w = ref::torch_weights(ref::random_net(c, rng, 0.3));
    c.backend = deeprnn::Backend::cuda;
    try {
        deeprnn::Model m(c, w);
        BOOST_ERROR("backend = cuda without the backend must throw");
    } catch (const deeprnn::Error& e) {
        const std::string msg = e.what();
        BOOST_TEST(msg.find("Config.backend = cuda") != std::string::npos, msg);
        BOOST_TEST(msg.find("make CUDA=1") != std::string::npos, msg);
    }
    c.backend = deeprnn::Backend::auto_;
    const deeprnn::Model m(c, w);
    BOOST_TEST(m.plan().find("backend cpu") == 0);
    BOOST_TEST(m.plan().find("cuda") == std::string::npos);
}

// The ranking: sorted by the model, deterministic, its head the cheapest of all legal.
BOOST_AUTO_TEST_CASE(ranking) {
    for (const g::DeviceInfo& d : devices())
        for (const CellVariant& cv : kCells) {
            const Config c = config(cv.cell, 256, cv.variant);
            const g::Plan p = g::make_plan(d, c, 4), q = g::make_plan(d, c, 4);
            BOOST_TEST_CONTEXT(d.name << " " << deeprnn::to_string(cv.cell)) {
                BOOST_TEST_REQUIRE(p.persistent);
                BOOST_TEST(p.ranked.size() == 16u);
                for (size_t i = 1; i < p.ranked.size(); ++i) BOOST_TEST(p.ranked[i - 1].total <= p.ranked[i].total);
                BOOST_TEST(g::describe(p.best()) == g::describe(q.best()));
                double lowest = std::numeric_limits<double>::infinity();
                for (const g::Candidate& x : g::legal_candidates(d, cv.cell, cv.variant, 256, 4, {}, {}, nullptr))
                    lowest = std::min(lowest, x.total);
                BOOST_TEST(p.best().total == lowest);
                // One block per SM cannot hold a hidden-256 layer alone: the best spreads it.
                BOOST_TEST(p.best().geo.blocks > 1);
                BOOST_TEST(p.best().us_per_step > 0.1);
                BOOST_TEST(p.best().us_per_step < 50.0);
            }
        }
}

// GRNN 8.4: the single-barrier GRU wins for small hidden sizes and loses for
// large ones, where reading every tile's partial sums costs more than a barrier.
BOOST_AUTO_TEST_CASE(gru_one_or_two_barriers) {
    const Config small = config(Cell::gru, 64, GruVariant::reset_before_matmul);
    const Config large = config(Cell::gru, 1024, GruVariant::reset_before_matmul);
    BOOST_TEST((g::make_plan(a100(), small, 1).best().kind == g::StepKind::gru_rbm1));
    BOOST_TEST((g::make_plan(h100(), large, 1).best().kind == g::StepKind::gru_rbm2));
}

// The model's pieces move the way GRNN's equations say.
BOOST_AUTO_TEST_CASE(cost_model_terms) {
    const g::DeviceInfo d = a100();
    g::CostParams cp;
    auto cand = [&](int H, int tw, int th, int ws, int rows, int kpt) {
        g::Candidate c;
        c.kind = g::StepKind::lstm;
        c.shape = -1;
        for (int i = 0; i < g::kNumRegShapes; ++i)
            if (g::kRegShapes[i].rows == rows && g::kRegShapes[i].kpt == kpt) c.shape = i;
        BOOST_REQUIRE(c.shape >= 0);
        c.geo = g::make_geometry(c.kind, H, th, tw, th, ws, g::kRegShapes[c.shape]);  // one batch tile
        BOOST_REQUIRE(c.geo.kp >= H);
        g::estimate_cost(d, cp, c);
        return c;
    };
    // Eq. 10: more than half the SMs loading doubles the per-byte cost.
    const g::Candidate few = cand(512, 64, 1, 32, 1, 16), many = cand(512, 4, 1, 32, 1, 16);
    BOOST_TEST(few.geo.blocks * 2 <= d.sms);
    BOOST_TEST(many.geo.blocks * 2 > d.sms);
    BOOST_TEST(many.gc - cp.l2_latency > 1.9 * (few.gc - cp.l2_latency));
    // No reduction with work groups of one lane; log2(ws) steps otherwise.
    BOOST_TEST(cand(128, 8, 1, 1, 1, 128).rc == 0.0);
    BOOST_TEST(cand(128, 8, 1, 8, 1, 16).rc > 0.0);
    // Taller tiles: more products per block.
    BOOST_TEST(cand(128, 8, 4, 8, 1, 16).pc > cand(128, 8, 1, 8, 1, 16).pc);
    // Reuse: the same block work with more rows per thread issues fewer loads.
    BOOST_TEST(cand(128, 8, 1, 8, 4, 16).pc < 4 * cand(128, 8, 1, 8, 1, 16).pc);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// Emulation of the persistent kernel (deeprnn_cuda.cu, persistent_rnn)
// ===========================================================================

namespace {

// Who touched what, for the coverage checks.
struct Coverage {
    std::vector<int> weight;  // [batch_tiles][cell_gates*H][H]: register loads of W_hh (and rbm1's U_r in smem)
    std::vector<int> output;  // [blocks][th][rows]: writes of a gate sum
    bool reduction_ok = true; // every butterfly summed each lane of its group exactly once
};

template <int RPG, int KPT>
struct ThreadRegs {
    float w[RPG][KPT];
};

// The butterfly on lane sets instead of values: after log2(ws) xor steps each
// lane must hold every lane of its group exactly once.
bool butterfly_covers(int ws) {
    std::vector<std::vector<int>> has(ws, std::vector<int>(ws, 0));
    for (int l = 0; l < ws; ++l) has[l][l] = 1;
    for (int off = ws >> 1; off > 0; off >>= 1) {
        auto next = has;
        for (int l = 0; l < ws; ++l)
            for (int k = 0; k < ws; ++k) next[l][k] = has[l][k] + has[l ^ off][k];
        has = next;
    }
    for (int l = 0; l < ws; ++l)
        for (int k = 0; k < ws; ++k)
            if (has[l][k] != 1) return false;
    return true;
}

// One layer-direction's launch, executed on the CPU. Each block's program is
// cut into segments at its grid barriers (as persistent_rnn is); all blocks
// run a segment, in `order`, before any starts the next. Inside a segment the
// code between __syncthreads runs thread by thread. Shared memory starts as
// NaN except what the kernel zeroes, so reading something never written shows.
template <int RPG, int KPT>
void emulate_launch(const g::KernelArgs& a, const std::vector<int>& order, Coverage* cov) {
    const g::Geometry& geo = a.geo;
    const g::SmemLayout L = g::smem_layout(geo, a.kind);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const size_t BH = static_cast<size_t>(geo.B) * geo.H;
    const int CG = g::cell_gates(a.kind);
    struct Block {
        std::vector<float> smem;
        std::vector<ThreadRegs<RPG, KPT>> regs;
        int ut, bt, u0, b0, nu, nb;
    };
    std::vector<Block> blocks(geo.blocks);
    for (int blk = 0; blk < geo.blocks; ++blk) {
        Block& k = blocks[blk];
        k.ut = g::block_unit_tile(geo, blk);
        k.bt = g::block_batch_tile(geo, blk);
        k.u0 = k.ut * geo.tw;
        k.b0 = k.bt * geo.th;
        k.nu = g::tile_units(geo, k.ut);
        k.nb = g::tile_batch(geo, k.bt);
        k.smem.assign(L.total, nan);
        k.regs.resize(geo.threads);
        for (int tid = 0; tid < geo.threads; ++tid) {
            const int grp = g::thread_group(geo, tid), lane = g::thread_lane(geo, tid);
            for (int r = 0; r < RPG; ++r) {
                const long row = g::weight_row(geo, a.kind, k.ut, g::block_row(geo, grp, r));
                for (int j = 0; j < KPT; ++j) {
                    const int col = g::weight_col(geo, lane, j);
                    k.regs[tid].w[r][j] = row >= 0 && col >= 0 ? a.w_hh[row * geo.H + col] : 0.0f;
                    if (cov && row >= 0 && col >= 0) ++cov->weight[(static_cast<size_t>(k.bt) * CG * geo.H + row) * geo.H + col];
                }
            }
        }
        std::fill(k.smem.begin(), k.smem.begin() + L.gates, 0.0f);
        for (int i = 0; i < k.nb * k.nu; ++i) {
            const size_t gi = static_cast<size_t>(k.b0 + i / k.nu) * geo.H + k.u0 + i % k.nu;
            if (a.kind == g::StepKind::lstm) k.smem[L.c + (i / k.nu) * geo.tw + i % k.nu] = a.c[gi];
            if (a.kind == g::StepKind::gru_rbm1) k.smem[L.hown + (i / k.nu) * geo.tw + i % k.nu] = a.h[gi];
        }
        if (a.kind == g::StepKind::gru_rbm1)
            for (int i = 0; i < geo.H * k.nu; ++i) {
                k.smem[L.w1 + (i % k.nu) * geo.H + i / k.nu] = a.w_hh[static_cast<size_t>(i / k.nu) * geo.H + k.u0 + i % k.nu];
                if (cov) ++cov->weight[(static_cast<size_t>(k.bt) * CG * geo.H + i / k.nu) * geo.H + k.u0 + i % k.nu];
            }
    }
    if (cov) cov->output.assign(static_cast<size_t>(geo.blocks) * geo.th * geo.rows, 0);

    auto load_rows = [&](Block& k, int off, const float* src) {
        for (int b = 0; b < k.nb; ++b)
            for (int u = 0; u < geo.H; ++u) k.smem[off + b * geo.kp + u] = g::load_cg(src + static_cast<size_t>(k.b0 + b) * geo.H + u);
    };
    auto dot_phase = [&](Block& k, int blk, int in_off, int lo, int hi) {
        std::vector<float[RPG]> acc(geo.ws);
        for (int grp = 0; grp < geo.groups; ++grp) {
            const int first = g::block_row(geo, grp, 0);
            if (!(first < geo.rows && g::row_slot(geo, first) >= lo && g::row_slot(geo, first) < hi)) continue;
            for (int b = 0; b < k.nb; ++b) {
                for (int lane = 0; lane < geo.ws; ++lane)
                    g::thread_dot<RPG, KPT>(k.regs[grp * geo.ws + lane].w, k.smem.data() + in_off + b * geo.kp, lane, geo.ws, acc[lane]);
                for (int r = 0; r < RPG; ++r) {
                    for (int off = geo.ws >> 1; off > 0; off >>= 1) {  // __shfl_xor_sync: all lanes at once
                        std::vector<float> next(geo.ws);
                        for (int l = 0; l < geo.ws; ++l) next[l] = acc[l][r] + acc[l ^ off][r];
                        for (int l = 0; l < geo.ws; ++l) acc[l][r] = next[l];
                    }
                    const int row = g::block_row(geo, grp, r);
                    if (row < geo.rows) {
                        k.smem[L.gates + b * geo.rows + row] = acc[g::writer_lane(geo, r)][r];
                        if (cov) ++cov->output[(static_cast<size_t>(blk) * geo.th + b) * geo.rows + row];
                    }
                }
            }
        }
    };
    // The cell update of the tile (persistent_rnn's last loop of a step).
    auto epilogue = [&](Block& k, int s) {
        float* h_next = a.h + ((s + 1) & 1) * BH;
        for (int i = 0; i < k.nb * k.nu; ++i) {
            const int b = i / k.nu, ul = i % k.nu, u = k.u0 + ul, bb = k.b0 + b;
            const g::StepTime st = g::step_time(s, a.lengths[bb], a.reverse);
            const float hn = g::update_unit(a, st, bb, u, k.smem[L.h + b * geo.kp + u], &k.smem[L.c + b * geo.tw + ul],
                                            &k.smem[L.gates + b * geo.rows + ul], geo.tw);
            h_next[static_cast<size_t>(bb) * geo.H + u] = hn;
            if (st.active && a.y) a.y[(static_cast<size_t>(st.t) * geo.B + bb) * a.ld_y + u] = hn;
            if (a.kind == g::StepKind::gru_rbm1) k.smem[L.hown + b * geo.tw + ul] = hn;
        }
    };
    auto rbm1_partials = [&](Block& k, int s) {
        float* part = a.partial + static_cast<size_t>(s & 1) * geo.unit_tiles * BH;
        for (int i = 0; i < k.nb * geo.H; ++i) {
            const int b = i / geo.H, row = i % geo.H;
            part[k.ut * BH + static_cast<size_t>(k.b0 + b) * geo.H + row] =
                g::rbm1_partial(geo, k.smem.data() + L.w1, k.smem.data() + L.hown + b * geo.tw, row, k.nu);
        }
    };
    // Segment `seg` of block blk: the code between two grid barriers.
    auto segment = [&](int blk, int seg) {
        Block& k = blocks[blk];
        if (a.kind == g::StepKind::gru_rbm1) {
            if (seg > 0) {  // second half of step seg-1
                const int s = seg - 1;
                float* part = a.partial + static_cast<size_t>(s & 1) * geo.unit_tiles * BH;
                load_rows(k, L.h, a.h + (s & 1) * BH);
                for (int i = 0; i < k.nb * geo.H; ++i) {
                    const int b = i / geo.H, u = i % geo.H, bb = k.b0 + b;
                    const g::StepTime st = g::step_time(s, a.lengths[bb], a.reverse);
                    k.smem[L.rh + b * geo.kp + u] = g::reset_unit(a, st, bb, u, g::rbm1_reduce(geo, part, bb, u), k.smem[L.h + b * geo.kp + u]);
                }
                dot_phase(k, blk, L.h, 0, 1);
                dot_phase(k, blk, L.rh, 1, 2);
                epilogue(k, s);
            }
            if (seg < a.steps) rbm1_partials(k, seg);  // first half of step seg
            return;
        }
        if (a.kind == g::StepKind::gru_rbm2) {
            const int s = seg / 2;
            if (seg % 2 == 0) {
                load_rows(k, L.h, a.h + (s & 1) * BH);
                dot_phase(k, blk, L.h, 0, 2);
                for (int i = 0; i < k.nb * k.nu; ++i) {
                    const int b = i / k.nu, u = k.u0 + i % k.nu, bb = k.b0 + b;
                    const g::StepTime st = g::step_time(s, a.lengths[bb], a.reverse);
                    a.rh[static_cast<size_t>(bb) * geo.H + u] =
                        g::reset_unit(a, st, bb, u, k.smem[L.gates + b * geo.rows + i % k.nu], k.smem[L.h + b * geo.kp + u]);
                }
            } else {
                load_rows(k, L.rh, a.rh);
                dot_phase(k, blk, L.rh, 2, 3);
                epilogue(k, s);
            }
            return;
        }
        load_rows(k, L.h, a.h + (seg & 1) * BH);
        dot_phase(k, blk, L.h, 0, geo.G);
        epilogue(k, seg);
    };
    const int segments = a.kind == g::StepKind::gru_rbm1 ? a.steps + 1 : a.kind == g::StepKind::gru_rbm2 ? 2 * a.steps : a.steps;
    for (int seg = 0; seg < segments && a.steps > 0; ++seg)
        for (int blk : order) segment(blk, seg);
    if (a.kind == g::StepKind::lstm)
        for (const Block& k : blocks)
            for (int i = 0; i < k.nb * k.nu; ++i)
                a.c[static_cast<size_t>(k.b0 + i / k.nu) * geo.H + k.u0 + i % k.nu] = k.smem[L.c + (i / k.nu) * geo.tw + i % k.nu];
    if (cov) cov->reduction_ok = butterfly_covers(geo.ws);
}

// The fallback path on the CPU: the per-step products (cuBLAS there) then fallback_step's loop.
void emulate_fallback(const g::KernelArgs& a) {
    const g::Geometry& geo = a.geo;
    const int H = geo.H, B = geo.B, GH = g::cell_gates(a.kind) * H;
    const size_t BH = static_cast<size_t>(B) * H;
    std::vector<float> gh(static_cast<size_t>(B) * GH, std::numeric_limits<float>::quiet_NaN());
    auto product = [&](const float* in, int row0, int rows) {
        for (int b = 0; b < B; ++b)
            for (int r = row0; r < row0 + rows; ++r) {
                double acc = 0;
                for (int k = 0; k < H; ++k) acc += static_cast<double>(a.w_hh[static_cast<size_t>(r) * H + k]) * in[b * H + k];
                gh[static_cast<size_t>(b) * GH + r] = static_cast<float>(acc);
            }
    };
    for (int s = 0; s < a.steps; ++s) {
        const float* h_prev = a.h + (s & 1) * BH;
        float* h_next = a.h + ((s + 1) & 1) * BH;
        const bool rbm = a.kind == g::StepKind::gru_rbm2;
        product(h_prev, 0, rbm ? 2 * H : GH);
        for (int phase = rbm ? 0 : 1; phase < 2; ++phase) {
            if (phase == 1 && rbm) product(a.rh, 2 * H, H);
            for (size_t i = 0; i < BH; ++i) {
                const int bb = static_cast<int>(i / H), u = static_cast<int>(i % H);
                const g::StepTime st = g::step_time(s, a.lengths[bb], a.reverse);
                const float* row = gh.data() + static_cast<size_t>(bb) * GH + u;
                if (rbm && phase == 0) {
                    a.rh[i] = g::reset_unit(a, st, bb, u, row[0], h_prev[i]);
                    continue;
                }
                const float hn = g::update_unit(a, st, bb, u, h_prev[i], a.c ? a.c + i : nullptr, row, H);
                h_next[i] = hn;
                if (st.active && a.y) a.y[(static_cast<size_t>(st.t) * B + bb) * a.ld_y + u] = hn;
            }
        }
    }
}

template <int RPG, int KPT>
void emulate_shape(const g::KernelArgs& a, const std::vector<int>& order, Coverage* cov) {
    emulate_launch<RPG, KPT>(a, order, cov);
}
using EmulateFn = void (*)(const g::KernelArgs&, const std::vector<int>&, Coverage*);
#define EMU_ENTRY(r, k, m) &emulate_shape<r, k>,
const EmulateFn kEmulate[] = {DEEPRNN_GPU_SHAPES(EMU_ENTRY)};
#undef EMU_ENTRY

// How a test runs the layers: one geometry for all, or the fallback.
struct Mapping {
    g::StepKind kind;
    int tw = 0, th = 0, ws = 0, shape = 0;
    bool fallback = false;
    g::BarrierKind barrier = g::BarrierKind::grid_sync;
};

struct Outputs {
    std::vector<float> y, h_n, c_n;
    std::vector<Coverage> cov;  // per layer-direction
};

enum class Order { forward, reverse, shuffled };

// CudaModel::run on the CPU: per layer one input projection for both
// directions, then each direction's launch, emulated.
Outputs emulate_forward(const ref::Net& net, const std::vector<float>& x, int T, int B, const std::vector<int>& lengths,
                        const std::vector<float>& h0, const std::vector<float>& c0, const Mapping& m, Order order) {
    const Config& cfg = net.cfg;
    const int G = ref::gates(cfg.cell), H = cfg.hidden_size, D = deeprnn::num_directions(cfg), L = cfg.num_layers;
    const size_t rows = static_cast<size_t>(T) * B, BH = static_cast<size_t>(B) * H;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Outputs o;
    o.h_n.assign(L * D * BH, nan);
    o.c_n.assign(L * D * BH, nan);
    std::vector<float> in = x, out;
    int E = cfg.input_size;
    for (int l = 0; l < L; ++l) {
        // xproj [T*B, D*G*H] = in . W_ih^T (cuBLAS there; double accumulation here).
        std::vector<float> xproj(rows * D * G * H);
        for (int d = 0; d < D; ++d) {
            const ref::Layer& p = net.layers[l * D + d];
            for (size_t r = 0; r < rows; ++r)
                for (int k = 0; k < G * H; ++k) {
                    double acc = 0;
                    for (int e = 0; e < E; ++e) acc += p.w_ih[static_cast<size_t>(k) * E + e] * in[r * E + e];
                    xproj[r * D * G * H + d * G * H + k] = static_cast<float>(acc);
                }
        }
        out.assign(rows * D * H, 0.0f);
        for (int d = 0; d < D; ++d) {
            const ref::Layer& p = net.layers[l * D + d];
            const std::vector<float> w_hh(p.w_hh.begin(), p.w_hh.end()), b_ih(p.b_ih.begin(), p.b_ih.end()),
                b_hh(p.b_hh.begin(), p.b_hh.end()), peep(p.peep.begin(), p.peep.end());
            std::vector<float> bias, b_hn;
            g::fold_biases(cfg, b_ih.empty() ? nullptr : b_ih.data(), b_hh.empty() ? nullptr : b_hh.data(), bias, b_hn);
            const size_t idx = static_cast<size_t>(l) * D + d;
            std::vector<float> h(2 * BH, nan), c(BH, 0.0f), rh(BH, nan);
            std::copy(h0.begin() + idx * BH, h0.begin() + (idx + 1) * BH, h.begin());
            if (cfg.cell == Cell::lstm) std::copy(c0.begin() + idx * BH, c0.begin() + (idx + 1) * BH, c.begin());
            const int steps = *std::max_element(lengths.begin(), lengths.end());
            g::KernelArgs a;
            a.kind = m.kind;
            a.geo = m.fallback ? g::make_geometry(m.kind, H, B, H, B, 1, g::kRegShapes[0])
                               : g::make_geometry(m.kind, H, B, m.tw, m.th, m.ws, g::kRegShapes[m.shape]);
            std::vector<float> partial(m.fallback ? 0 : 2 * a.geo.unit_tiles * BH, nan);
            a.barrier = m.barrier;
            a.steps = steps;
            a.reverse = d == 1 || cfg.direction == deeprnn::Direction::reverse;
            a.clip = cfg.clip;
            a.w_hh = w_hh.data();
            a.xproj = xproj.data() + static_cast<size_t>(d) * G * H;
            a.ld_x = D * G * H;
            a.bias = bias.data();
            a.b_hn = b_hn.empty() ? nullptr : b_hn.data();
            a.peep = peep.empty() ? nullptr : peep.data();
            a.lengths = lengths.data();
            a.h = h.data();
            a.c = cfg.cell == Cell::lstm ? c.data() : nullptr;
            a.y = out.data() + static_cast<size_t>(d) * H;
            a.ld_y = D * H;
            a.rh = rh.data();
            a.partial = partial.data();
            if (m.fallback) {
                emulate_fallback(a);
            } else {
                std::vector<int> ord(a.geo.blocks);
                std::iota(ord.begin(), ord.end(), 0);
                if (order == Order::reverse) std::reverse(ord.begin(), ord.end());
                if (order == Order::shuffled) std::shuffle(ord.begin(), ord.end(), std::mt19937(1234 + l * 2 + d));
                Coverage cov;
                cov.weight.assign(static_cast<size_t>(a.geo.batch_tiles) * G * H * H, 0);
                kEmulate[m.shape](a, ord, &cov);
                o.cov.push_back(std::move(cov));
            }
            std::copy(h.begin() + (steps & 1) * BH, h.begin() + (steps & 1) * BH + BH, o.h_n.begin() + idx * BH);
            std::copy(c.begin(), c.end(), o.c_n.begin() + idx * BH);
        }
        in = out;
        E = D * H;
    }
    o.y = out;
    return o;
}

struct EmuCase {
    const char* name;
    Cell cell;
    GruVariant variant;
    deeprnn::Direction direction;
    int layers;
    bool peep;
    float clip;
};
const EmuCase kEmuCases[] = {
    {"lstm", Cell::lstm, GruVariant::linear_before_reset, deeprnn::Direction::forward, 1, false, 0},
    {"lstm-peep-clip-bidir-2layer", Cell::lstm, GruVariant::linear_before_reset, deeprnn::Direction::bidirectional, 2, true, 0.8f},
    {"gru-lbr-reverse", Cell::gru, GruVariant::linear_before_reset, deeprnn::Direction::reverse, 1, false, 0},
    {"gru-rbm-bidir", Cell::gru, GruVariant::reset_before_matmul, deeprnn::Direction::bidirectional, 1, false, 0},
    {"gru-rbm-clip-2layer", Cell::gru, GruVariant::reset_before_matmul, deeprnn::Direction::forward, 2, false, 0.5f},
    {"rnn-tanh", Cell::rnn_tanh, GruVariant::linear_before_reset, deeprnn::Direction::bidirectional, 1, false, 0},
    {"rnn-relu-2layer", Cell::rnn_relu, GruVariant::linear_before_reset, deeprnn::Direction::forward, 2, false, 0},
};

std::vector<g::StepKind> kinds_of(Cell cell, GruVariant v) {
    switch (cell) {
        case Cell::lstm: return {g::StepKind::lstm};
        case Cell::gru:
            return v == GruVariant::linear_before_reset ? std::vector<g::StepKind>{g::StepKind::gru_lbr}
                                                        : std::vector<g::StepKind>{g::StepKind::gru_rbm1, g::StepKind::gru_rbm2};
        case Cell::rnn_tanh: return {g::StepKind::rnn_tanh};
        case Cell::rnn_relu: return {g::StepKind::rnn_relu};
    }
    return {};
}

int shape_index(int rows, int kpt) {
    for (int i = 0; i < g::kNumRegShapes; ++i)
        if (g::kRegShapes[i].rows == rows && g::kRegShapes[i].kpt == kpt) return i;
    return -1;
}

// Mappings with every kind of padding: tiles that do not divide H or B, k
// padding (ws*kpt > H), padded work groups, one-lane and full-warp groups,
// one block per unit, one block for everything; plus A100's best plan.
std::vector<Mapping> mappings_for(const Config& cfg, int B, g::StepKind kind) {
    const int H = cfg.hidden_size;
    struct Hand {
        int tw, th, ws, rows, kpt;
    };
    const Hand hand[] = {{5, 2, 4, 2, 16}, {H, B, 32, 1, 8}, {8, 3, 8, 4, 8}, {1, 1, 2, 1, 32},
                         {4, 5, 1, 4, 32}, {16, 2, 16, 8, 8}, {6, 4, 2, 2, 32}};
    std::vector<Mapping> v;
    for (const Hand& x : hand) {
        Mapping m{kind, x.tw, x.th, x.ws, shape_index(x.rows, x.kpt)};
        BOOST_REQUIRE(m.shape >= 0);
        if (x.ws * x.kpt < H || (g::is_rbm(kind) && x.tw % x.rows != 0)) continue;  // not a legal mapping
        v.push_back(m);
    }
    g::PlanOptions opt;
    opt.gru_syncs = kind == g::StepKind::gru_rbm1 ? 1 : kind == g::StepKind::gru_rbm2 ? 2 : 0;
    const g::Plan p = g::make_plan(a100(), cfg, B, opt);
    BOOST_REQUIRE(p.persistent);
    const g::Candidate& c = p.best();
    v.push_back(Mapping{c.kind, c.geo.tw, c.geo.th, c.geo.ws, c.shape, false, c.barrier});
    Mapping fb{kind};
    fb.fallback = true;
    if (kind != g::StepKind::gru_rbm1) v.push_back(fb);  // the fallback runs reset-before-matmul as rbm2
    return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpu_emulation)

// The reduction pattern: xor butterflies over any power-of-two group sum every lane once.
BOOST_AUTO_TEST_CASE(butterfly_sums_each_lane_once) {
    for (int ws = 1; ws <= 32; ws *= 2) BOOST_TEST(butterfly_covers(ws));
}

// Every cell, with and without padding in every dimension, variable lengths,
// reverse and bidirectional directions and stacked layers: the emulated
// kernel covers every recurrent weight exactly once per batch tile, writes
// every gate sum exactly once, matches the float64 reference, and gives
// bit-identical results whatever order the blocks run in between barriers
// (so no block reads what another writes in the same phase).
BOOST_AUTO_TEST_CASE(emulation_matches_float64_reference) {
    const int H = 37, E = 11, B = 5, T = 7;
    const std::vector<int> lengths = {7, 3, 0, 5, 7};
    std::mt19937 rng(11);
    for (const EmuCase& ec : kEmuCases) {
        Config cfg;
        cfg.cell = ec.cell;
        cfg.gru_variant = ec.variant;
        cfg.input_size = E;
        cfg.hidden_size = H;
        cfg.num_layers = ec.layers;
        cfg.direction = ec.direction;
        cfg.peepholes = ec.peep;
        cfg.clip = ec.clip;
        cfg.max_batch = B;
        const ref::Net net = ref::random_net(cfg, rng, 0.3, true, ec.peep);
        const int D = deeprnn::num_directions(cfg), LD = ec.layers * D;
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(T) * B * E), h0(static_cast<size_t>(LD) * B * H), c0(h0.size());
        for (auto* v : {&x, &h0, &c0})
            for (float& e : *v) e = u(rng);
        const ref::Result want = ref::run(net, std::vector<double>(x.begin(), x.end()), T, B, lengths,
                                          std::vector<double>(h0.begin(), h0.end()), std::vector<double>(c0.begin(), c0.end()));
        for (g::StepKind kind : kinds_of(ec.cell, ec.variant))
            for (const Mapping& m : mappings_for(cfg, B, kind)) {
                BOOST_TEST_CONTEXT(ec.name << " " << g::to_string(kind) << (m.fallback ? " fallback" : "") << " tw=" << m.tw
                                           << " th=" << m.th << " ws=" << m.ws << " shape=" << m.shape) {
                    const Outputs got = emulate_forward(net, x, T, B, lengths, h0, c0, m, Order::forward);
                    auto max_err = [](const std::vector<float>& a, const std::vector<double>& b, size_t n) {
                        double e = 0;
                        for (size_t i = 0; i < n; ++i) e = std::max(e, std::isnan(a[i]) ? 1e30 : std::abs(a[i] - b[i]));
                        return e;
                    };
                    BOOST_TEST(max_err(got.y, want.y, want.y.size()) < 2e-5);
                    BOOST_TEST(max_err(got.h_n, want.h_n, want.h_n.size()) < 2e-5);
                    if (ec.cell == Cell::lstm) BOOST_TEST(max_err(got.c_n, want.c_n, want.c_n.size()) < 2e-5);
                    if (m.fallback) continue;
                    for (const Coverage& cov : got.cov) {
                        BOOST_TEST(cov.reduction_ok);
                        // Register rows (and rbm1's U_r columns): each weight once per batch tile.
                        const g::Geometry geo = g::make_geometry(kind, H, B, m.tw, m.th, m.ws, g::kRegShapes[m.shape]);
                        const int CG = g::cell_gates(kind);
                        long wrong = 0;
                        for (size_t i = 0; i < static_cast<size_t>(geo.batch_tiles) * CG * H * H; ++i) wrong += cov.weight[i] != 1;
                        BOOST_TEST(wrong == 0);
                        // Gate sums: each (block, batch row of its tile, block row) written once per step.
                        const int steps = *std::max_element(lengths.begin(), lengths.end());
                        long sums = 0;
                        for (int blk = 0; blk < geo.blocks; ++blk)
                            for (int b = 0; b < geo.th; ++b)
                                for (int row = 0; row < geo.rows; ++row) {
                                    const int expect = b < g::tile_batch(geo, g::block_batch_tile(geo, blk)) ? steps : 0;
                                    sums += cov.output[(static_cast<size_t>(blk) * geo.th + b) * geo.rows + row] != expect;
                                }
                        BOOST_TEST(sums == 0);
                    }
                    // Block order between barriers does not matter.
                    for (Order o : {Order::reverse, Order::shuffled}) {
                        const Outputs other = emulate_forward(net, x, T, B, lengths, h0, c0, m, o);
                        BOOST_TEST(std::memcmp(other.y.data(), got.y.data(), got.y.size() * sizeof(float)) == 0);
                        BOOST_TEST(std::memcmp(other.h_n.data(), got.h_n.data(), got.h_n.size() * sizeof(float)) == 0);
                    }
                }
            }
    }
}

BOOST_AUTO_TEST_SUITE_END()
