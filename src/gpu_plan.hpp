// gpu_plan.hpp — the CUDA backend's plan: tiles, thread mapping, GRNN's
// performance model, and the host interface of deeprnn_cuda.cu.
//
// The GPU path (docs/CUDA.md) runs each layer-direction as one persistent
// kernel per sequence (GRNN, EuroSys'19, sections 4-7; Persistent RNNs,
// ICML'16, section 4). Each thread block owns an output tile: `tw` hidden
// units (all gates of them) x `th` batch rows. Its recurrent weights are
// loaded once into registers and stay there for every step. Per step the
// block reads h_{t-1} into shared memory, computes partial dot products,
// reduces them with warp shuffles, applies the fused cell update to its tile,
// writes h_t and meets the other blocks at one grid-wide barrier.
//
// This header is plain C++17 (it is amalgamated into deeprnn.cpp). Three
// parts:
//  1. Index and cell math shared by the kernel and the CPU emulation in
//     test/test_gpu_plan.cpp (DEEPRNN_HD functions: __host__ __device__ under
//     nvcc, plain inline otherwise). What the tests check is what runs.
//  2. The planner: legal configurations for a device, register-file and
//     shared-memory pruning, the cost model that ranks them, the fallback
//     decision (gpu_plan.cpp).
//  3. The host interface implemented in deeprnn_cuda.cu; only defined when
//     the library is built with DEEPRNN_CUDA. No CUDA type appears here.
#pragma once
#ifndef DEEPRNN_HPP  // amalgamated: already included; nvcc: found beside deeprnn_cuda.cu
#include "deeprnn.hpp"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define DEEPRNN_HD __host__ __device__ __forceinline__
#else
#define DEEPRNN_HD inline
#endif
#if defined(__CUDA_ARCH__)  // device pass only: the host compiler does not know the pragma
#define DEEPRNN_UNROLL _Pragma("unroll")
#else
#define DEEPRNN_UNROLL
#endif

namespace deeprnn {
namespace detail {
namespace gpu {

// ---------------------------------------------------------------------------
// 1. Shared index and cell math
// ---------------------------------------------------------------------------

// Register shapes compiled into deeprnn_cuda.cu: (rows per thread, k values
// per thread, register cap). A thread keeps float w[rows][kpt] in registers,
// so both must be compile-time constants (a runtime-indexed array would live
// in local memory, i.e. spill). rows*kpt <= 128 keeps every kernel under the
// 255-register limit. Uncapped (255: no attribute), ptxas spends ~64-100
// registers beyond the weights on scheduling; the caps (__maxnreg__) were
// found spill-free on both sm_80 and sm_90 with CUDA 13.0. ptxas is not
// monotone in them (some caps spill where a smaller one does not), so they
// are re-checked by every `make cuda`, which fails if any kernel spills; at
// run time a kernel that needs local memory is not used. They decide what
// fits: a hidden-1024 LSTM on an A100 needs tiles of 10 units (40 rows x 1024
// k) in 320 threads; uncapped, no 128-weight shape fits 320 threads in 64K
// registers (206-231 each); capped, (1, 128) at 184 and (4, 32) at 192 do.
#define DEEPRNN_GPU_SHAPES(X)                                                                                     \
    X(1, 8, 255) X(1, 16, 255) X(1, 32, 255) X(1, 64, 255) X(1, 128, 184) X(2, 8, 255) X(2, 16, 96) X(2, 32, 255) \
        X(2, 64, 255) X(4, 8, 255) X(4, 16, 255) X(4, 32, 192) X(8, 8, 120) X(8, 16, 184)

struct RegShape {
    int rows;      // weight rows a thread holds (rows of its work group)
    int kpt;       // k values of each row it holds: lane, lane+ws, lane+2ws, ...
    int max_regs;  // __maxnreg__ of its kernel (255: no cap)
};
#define DEEPRNN_GPU_SHAPE_ENTRY(r, k, m) RegShape{r, k, m},
constexpr RegShape kRegShapes[] = {DEEPRNN_GPU_SHAPES(DEEPRNN_GPU_SHAPE_ENTRY)};
#undef DEEPRNN_GPU_SHAPE_ENTRY
constexpr int kNumRegShapes = static_cast<int>(sizeof(kRegShapes) / sizeof(kRegShapes[0]));

// What one step does. GRU reset-before-matmul has two: GRNN's single-barrier
// form (rbm1: U_r split by columns, partial sums reduced after the barrier)
// and the two-barrier form (rbm2).
enum class StepKind : int { lstm, gru_lbr, gru_rbm1, gru_rbm2, rnn_tanh, rnn_relu };

// Gates whose recurrent rows a block keeps in registers. rbm1 keeps z and n
// rows; its U_r columns live in shared memory.
DEEPRNN_HD int reg_gates(StepKind k) {
    return k == StepKind::lstm ? 4 : (k == StepKind::gru_lbr || k == StepKind::gru_rbm2) ? 3 : k == StepKind::gru_rbm1 ? 2 : 1;
}
// Gates of the cell in PyTorch order (LSTM i,f,g,o; GRU r,z,n).
DEEPRNN_HD int cell_gates(StepKind k) { return k == StepKind::lstm ? 4 : (k == StepKind::rnn_tanh || k == StepKind::rnn_relu) ? 1 : 3; }
// PyTorch gate of register gate slot `slot`.
DEEPRNN_HD int torch_gate(StepKind k, int slot) { return k == StepKind::gru_rbm1 ? slot + 1 : slot; }
DEEPRNN_HD bool is_rbm(StepKind k) { return k == StepKind::gru_rbm1 || k == StepKind::gru_rbm2; }
DEEPRNN_HD int barriers_per_step(StepKind k) { return k == StepKind::gru_rbm2 ? 2 : 1; }

// The geometry of one persistent launch, everything the kernel's index math
// needs. Made by make_geometry(); the kernel receives it by value.
struct Geometry {
    int H = 0, B = 0;        // hidden units, batch rows of this run
    int G = 0;               // register gates (reg_gates)
    int tw = 0, th = 0;      // tile: units x batch rows per block
    int ws = 0;              // work-group size: lanes sharing one row's dot product (1..32, power of 2)
    int rpg = 0, kpt = 0;    // register shape: rows per work group (= per thread), k per thread
    int rows = 0;            // block rows with weights: G*tw, gate-major (row i: gate slot i/tw, unit i%tw)
    int groups = 0;          // work groups per block (padded so threads is a multiple of 32)
    int threads = 0;         // groups*ws
    int kp = 0;              // padded k extent of a shared-memory row: ws*kpt >= H
    int unit_tiles = 0, batch_tiles = 0, blocks = 0;
};

DEEPRNN_HD int ceil_div(int a, int b) { return (a + b - 1) / b; }

DEEPRNN_HD Geometry make_geometry(StepKind kind, int H, int B, int tw, int th, int ws, RegShape s) {
    Geometry g;
    g.H = H;
    g.B = B;
    g.G = reg_gates(kind);
    g.tw = tw;
    g.th = th;
    g.ws = ws;
    g.rpg = s.rows;
    g.kpt = s.kpt;
    g.rows = g.G * tw;
    const int threads = ceil_div(ceil_div(g.rows, s.rows) * ws, 32) * 32;  // whole warps: full-mask shuffles
    g.threads = threads;
    g.groups = threads / ws;
    g.kp = ws * s.kpt;
    g.unit_tiles = ceil_div(H, tw);
    g.batch_tiles = ceil_div(B, th);
    g.blocks = g.unit_tiles * g.batch_tiles;
    return g;
}

// Block b owns unit tile b % unit_tiles and batch tile b / unit_tiles, so
// blocks sharing weights (same unit tile) are unit_tiles apart.
DEEPRNN_HD int block_unit_tile(const Geometry& g, int block) { return block % g.unit_tiles; }
DEEPRNN_HD int block_batch_tile(const Geometry& g, int block) { return block / g.unit_tiles; }
// Units and batch rows a tile really has (the last tiles may be partial).
DEEPRNN_HD int tile_units(const Geometry& g, int ut) { return ut * g.tw + g.tw <= g.H ? g.tw : g.H - ut * g.tw; }
DEEPRNN_HD int tile_batch(const Geometry& g, int bt) { return bt * g.th + g.th <= g.B ? g.th : g.B - bt * g.th; }

// Thread t is lane t % ws of work group t / ws. Groups are ws-aligned inside
// a warp, so a shuffle xor < ws never leaves the group.
DEEPRNN_HD int thread_group(const Geometry& g, int tid) { return tid / g.ws; }
DEEPRNN_HD int thread_lane(const Geometry& g, int tid) { return tid % g.ws; }
// Block row held as register row r by work group `group`; >= g.rows is padding.
DEEPRNN_HD int block_row(const Geometry& g, int group, int r) { return group * g.rpg + r; }
DEEPRNN_HD int row_slot(const Geometry& g, int row) { return row / g.tw; }
DEEPRNN_HD int row_unit(const Geometry& g, int row) { return row % g.tw; }
// Row of the PyTorch W_hh [cell_gates*H, H] for block row `row` of unit tile
// `ut`, or -1 for padding (no such row, or a unit past H).
DEEPRNN_HD long weight_row(const Geometry& g, StepKind kind, int ut, int row) {
    if (row >= g.rows) return -1;
    const int u = ut * g.tw + row_unit(g, row);
    if (u >= g.H) return -1;
    return static_cast<long>(torch_gate(kind, row_slot(g, row))) * g.H + u;
}
// Column k of register column j of lane `lane`, or -1 past H (padding). The
// stride ws makes the lanes of a group read consecutive shared-memory words.
DEEPRNN_HD int weight_col(const Geometry& g, int lane, int j) {
    const int k = lane + g.ws * j;
    return k < g.H ? k : -1;
}
// After the butterfly every lane holds the sum; lane r % ws writes row r, so
// the writes of one group spread over its lanes.
DEEPRNN_HD int writer_lane(const Geometry& g, int r) { return r % g.ws; }
// For gate-filtered phases (GRU reset-before-matmul), every row of a group
// must have one gate: then tw % rpg == 0 and the group's gate slot is this.
DEEPRNN_HD int group_slot(const Geometry& g, int group) { return row_slot(g, block_row(g, group, 0)); }

// Shared memory of one block, in floats, by purpose.
struct SmemLayout {
    int h = 0;        // [th][kp] h_{t-1} (zero past H)
    int rh = 0;       // [th][kp] r*h_{t-1} (GRU reset-before-matmul)
    int gates = 0;    // [th][rows] recurrent pre-activations of the block's rows
    int c = 0;        // [th][tw] LSTM cell state, for the whole sequence
    int hown = 0;     // [th][tw] rbm1: the block's own units of h_{t-1}
    int w1 = 0;       // [H][tw] rbm1: U_r[:, the block's units]
    int total = 0;
};
DEEPRNN_HD SmemLayout smem_layout(const Geometry& g, StepKind kind) {
    SmemLayout s;
    int at = 0;
    s.h = at;
    at += g.th * g.kp;
    s.rh = at;
    if (is_rbm(kind)) at += g.th * g.kp;
    s.gates = at;
    at += g.th * g.rows;
    s.c = at;
    if (kind == StepKind::lstm) at += g.th * g.tw;
    s.hown = at;
    if (kind == StepKind::gru_rbm1) at += g.th * g.tw;
    s.w1 = at;
    if (kind == StepKind::gru_rbm1) at += g.H * g.tw;
    s.total = at;
    return s;
}

// Sequence b runs steps 0..len-1; step s is time s, or len-1-s in reverse.
// Past its length a sequence keeps its state and writes nothing.
struct StepTime {
    bool active;
    int t;
};
DEEPRNN_HD StepTime step_time(int s, int len, bool reverse) { return StepTime{s < len, reverse ? len - 1 - s : s}; }

DEEPRNN_HD float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return fmaf(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}

// One thread's partial dot products for one batch row: acc[r] = sum over j
// of w[r][j] * in[lane + ws*j], j ascending. h is read once per j and reused
// by every register row (GRNN's sub-tile reuse).
template <int RPG, int KPT>
DEEPRNN_HD void thread_dot(const float (&w)[RPG][KPT], const float* in_row, int lane, int ws, float (&acc)[RPG]) {
    DEEPRNN_UNROLL
    for (int r = 0; r < RPG; ++r) acc[r] = 0.0f;
    DEEPRNN_UNROLL
    for (int j = 0; j < KPT; ++j) {
        const float x = in_row[lane + ws * j];
        DEEPRNN_UNROLL
        for (int r = 0; r < RPG; ++r) acc[r] = fma_f(w[r][j], x, acc[r]);
    }
}

// --- Cell math (the CPU engine's formulas and NaN rules, src/cells.cpp) ---

DEEPRNN_HD float gpu_tanh(float x) {
#if defined(__CUDA_ARCH__)
    return tanhf(x);
#else
    return std::tanh(x);
#endif
}
DEEPRNN_HD float gpu_sigmoid(float x) {
#if defined(__CUDA_ARCH__)
    return 1.0f / (1.0f + expf(-x));
#else
    return 1.0f / (1.0f + std::exp(-x));
#endif
}
// ONNX clip: clamp to [-clip, clip] when clip > 0; NaN passes.
DEEPRNN_HD float clip_pre(float v, float clip) {
    if (!(clip > 0.0f)) return v;
    v = v < -clip ? -clip : v;
    return v > clip ? clip : v;
}

// LSTM unit: p* are full pre-activations (input projection + biases + U h).
// Peepholes (pi, pf see the old c, po the new one) when `peep`.
DEEPRNN_HD void lstm_unit(float pi, float pf, float pg, float po, bool peep, float wi, float wf, float wo, float clip,
                          float& c, float& h) {
    if (peep) {
        pi = fma_f(wi, c, pi);
        pf = fma_f(wf, c, pf);
    }
    const float i = gpu_sigmoid(clip_pre(pi, clip)), f = gpu_sigmoid(clip_pre(pf, clip));
    const float gg = gpu_tanh(clip_pre(pg, clip));
    c = fma_f(f, c, i * gg);
    if (peep) po = fma_f(wo, c, po);
    h = gpu_sigmoid(clip_pre(po, clip)) * gpu_tanh(c);
}
// (1-z)*n + z*h_prev, written as n + z*(h_prev - n) like the CPU.
DEEPRNN_HD float gru_mix(float n, float z, float h_prev) { return fma_f(z, h_prev - n, n); }
// GRU linear-before-reset: xr, xz, xn include every bias but b_hn.
DEEPRNN_HD float gru_lbr_unit(float xr, float xz, float xn, float hr, float hz, float hn, float b_hn, float clip,
                              float h_prev) {
    const float r = gpu_sigmoid(clip_pre(xr + hr, clip)), z = gpu_sigmoid(clip_pre(xz + hz, clip));
    const float n = gpu_tanh(clip_pre(fma_f(r, hn + b_hn, xn), clip));
    return gru_mix(n, z, h_prev);
}
// GRU reset-before-matmul, first half: r*h_prev.
DEEPRNN_HD float gru_rbm_rh(float xr, float hr, float clip, float h_prev) {
    return gpu_sigmoid(clip_pre(xr + hr, clip)) * h_prev;
}
// Second half: hz = U_z h_prev, hn = U_n (r*h_prev); xn includes b_hn.
DEEPRNN_HD float gru_rbm_unit(float xz, float xn, float hz, float hn, float clip, float h_prev) {
    const float z = gpu_sigmoid(clip_pre(xz + hz, clip));
    const float n = gpu_tanh(clip_pre(xn + hn, clip));
    return gru_mix(n, z, h_prev);
}
DEEPRNN_HD float rnn_unit(float x, float hx, bool relu, float clip) {
    const float v = clip_pre(x + hx, clip);
    return relu ? (v < 0.0f ? 0.0f : v) : gpu_tanh(v);
}

// --- One launch's arguments and the per-unit step (kernel, fallback, emulation) ---

enum class BarrierKind : int { grid_sync, atomic };

// Everything a persistent or fallback launch needs; passed by value. Plain
// pointers into device memory (host memory in the emulation).
struct KernelArgs {
    Geometry geo;
    StepKind kind = StepKind::lstm;
    BarrierKind barrier = BarrierKind::grid_sync;
    int steps = 0;                 // longest sequence
    int reverse = 0;               // run each sequence from its last valid step back
    float clip = 0.0f;
    const float* w_hh = nullptr;   // [cell_gates*H, H], PyTorch order
    const float* xproj = nullptr;  // row t*B+b of the input projection, this direction's first column
    int ld_x = 0;
    const float* bias = nullptr;   // [cell_gates*H]: every bias but linear-before-reset's b_hn
    const float* b_hn = nullptr;   // [H] or nullptr
    const float* peep = nullptr;   // [3*H] i, f, o, or nullptr
    const int* lengths = nullptr;  // [B]
    float* h = nullptr;            // [2][B][H]: step s reads h[s&1], writes h[(s+1)&1]; h[0] = h0
    float* c = nullptr;            // [B][H] LSTM, in/out
    float* y = nullptr;            // row t*B+b of the layer output, this direction's first column, or nullptr
    int ld_y = 0;
    float* rh = nullptr;           // [B][H] rbm2: r*h_{t-1} for the second product
    float* partial = nullptr;      // [2][unit_tiles][B][H] rbm1: partial sums of U_r h
    unsigned* bar = nullptr;       // atomic barrier: arrival count, sense
};

// Loads of data no one writes during the launch (read-only cache), and of
// data another block wrote since the last barrier (L2, never a stale L1 line).
DEEPRNN_HD float load_ro(const float* p) {
#if defined(__CUDA_ARCH__)
    return __ldg(p);
#else
    return *p;
#endif
}
DEEPRNN_HD float load_cg(const float* p) {
#if defined(__CUDA_ARCH__)
    return __ldcg(p);
#else
    return *p;
#endif
}

// Input projection + folded bias of gate `gate`, unit u, time t, batch row bb.
DEEPRNN_HD float x_in(const KernelArgs& a, int t, int bb, int gate, int u) {
    const int i = gate * a.geo.H + u;
    return load_ro(a.xproj + (static_cast<size_t>(t) * a.geo.B + bb) * a.ld_x + i) + load_ro(a.bias + i);
}

// The cell update of unit u of batch row bb, given its recurrent gate sums
// hg[slot * stride] (register gate slots; the fallback passes all cell gates
// in PyTorch order with kind rbm2). Returns the new h, or hp when the
// sequence has ended; updates *c (LSTM).
DEEPRNN_HD float update_unit(const KernelArgs& a, StepTime st, int bb, int u, float hp, float* c, const float* hg,
                             int stride) {
    if (!st.active) return hp;
    const int H = a.geo.H, t = st.t;
    switch (a.kind) {
        case StepKind::lstm: {
            const bool pp = a.peep != nullptr;
            float h = 0.0f;
            lstm_unit(x_in(a, t, bb, 0, u) + hg[0], x_in(a, t, bb, 1, u) + hg[stride], x_in(a, t, bb, 2, u) + hg[2 * stride],
                      x_in(a, t, bb, 3, u) + hg[3 * stride], pp, pp ? a.peep[u] : 0.0f, pp ? a.peep[H + u] : 0.0f,
                      pp ? a.peep[2 * H + u] : 0.0f, a.clip, *c, h);
            return h;
        }
        case StepKind::gru_lbr:
            return gru_lbr_unit(x_in(a, t, bb, 0, u), x_in(a, t, bb, 1, u), x_in(a, t, bb, 2, u), hg[0], hg[stride],
                                hg[2 * stride], a.b_hn ? a.b_hn[u] : 0.0f, a.clip, hp);
        case StepKind::gru_rbm1:
            return gru_rbm_unit(x_in(a, t, bb, 1, u), x_in(a, t, bb, 2, u), hg[0], hg[stride], a.clip, hp);
        case StepKind::gru_rbm2:
            return gru_rbm_unit(x_in(a, t, bb, 1, u), x_in(a, t, bb, 2, u), hg[stride], hg[2 * stride], a.clip, hp);
        case StepKind::rnn_tanh:
        case StepKind::rnn_relu: return rnn_unit(x_in(a, t, bb, 0, u), hg[0], a.kind == StepKind::rnn_relu, a.clip);
    }
    return hp;
}

// GRU reset-before-matmul: r*h_prev of unit u (0 once the sequence has ended:
// then nothing reads it).
DEEPRNN_HD float reset_unit(const KernelArgs& a, StepTime st, int bb, int u, float hr, float hp) {
    return st.active ? gru_rbm_rh(x_in(a, st.t, bb, 0, u), hr, a.clip, hp) : 0.0f;
}

// rbm1, before the barrier: row `row` of U_r[:, own units] . h_own (nu units).
DEEPRNN_HD float rbm1_partial(const Geometry& g, const float* w1_s, const float* hown_row, int row, int nu) {
    float acc = 0.0f;
    for (int k = 0; k < nu; ++k) acc = fma_f(w1_s[k * g.H + row], hown_row[k], acc);
    return acc;
}
// rbm1, after the barrier: (U_r h)[u] of batch row bb, summed over the unit tiles in order.
DEEPRNN_HD float rbm1_reduce(const Geometry& g, const float* part, int bb, int u) {
    const size_t BH = static_cast<size_t>(g.B) * g.H;
    float s = 0.0f;
    for (int p = 0; p < g.unit_tiles; ++p) s += load_cg(part + p * BH + static_cast<size_t>(bb) * g.H + u);
    return s;
}

// ---------------------------------------------------------------------------
// 2. The planner
// ---------------------------------------------------------------------------

// What the planner needs to know about a device: cudaDeviceProp's fields
// (deeprnn_cuda.cu fills it), or published data sheets in the tests.
struct DeviceInfo {
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sms = 0;
    int regs_per_sm = 65536;
    int regs_per_block = 65536;
    int max_regs_per_thread = 255;
    int smem_per_sm = 0;              // bytes
    int smem_per_block_optin = 0;     // bytes a block may opt in to
    int smem_reserved_per_block = 1024;
    int warp_size = 32;
    int max_threads_per_sm = 2048;
    int max_threads_per_block = 1024;
    int max_blocks_per_sm = 32;
    int schedulers_per_sm = 4;
    double clock_ghz = 1.0;
    bool cooperative_launch = true;
};

// The cost model's constants, in cycles of one SM (GRNN's "measured
// parameters"). The defaults are textbook values for Ampere/Hopper, not
// measurements; calibration on the device corrects the ranking's mistakes.
struct CostParams {
    double fma_latency = 4;           // dependent FMA
    double shfl_latency = 26;         // dependent shuffle+add (GRNN's FPS=7 FMAs on Volta)
    double lds_per_clock = 1;         // warp-wide shared-memory loads per clock per SM
    double l2_latency = 260;          // one round trip to L2
    double l2_bytes_per_clock = 48;   // per SM; halved when more than half the SMs load (GRNN eq. 10)
    double block_sync = 30;           // one __syncthreads
    double grid_sync_base = 1400;     // cooperative_groups grid.sync()
    double atomic_barrier_base = 1000;  // the sense-reversing atomic barrier
    double barrier_per_block = 4;     // serialised arrivals at one L2 counter
    double epilogue_per_unit = 120;   // one unit's cell update (transcendentals)
    double global_latency = 500;      // first input-projection load of a step
};

const char* to_string(BarrierKind b);
const char* to_string(StepKind k);

// A point of the configuration space, and what the model says about it.
struct Candidate {
    StepKind kind = StepKind::lstm;
    BarrierKind barrier = BarrierKind::grid_sync;
    int shape = 0;  // index into kRegShapes
    Geometry geo;
    int regs = 0;           // per thread (measured or estimated)
    size_t smem = 0;        // dynamic shared memory per block, bytes
    int blocks_per_sm = 0;  // blocks an SM can hold at once
    // Cost per step in SM cycles: global loads, partial products, reduction,
    // epilogue, synchronisation (GRNN's GC, PC, RC, plus EC and SC).
    double gc = 0, pc = 0, rc = 0, ec = 0, sc = 0, total = 0;
    double us_per_step = 0;
};

// Why configurations were rejected (counts), for tests and the plan text.
struct PruneStats {
    long considered = 0, legal = 0;
    long registers = 0;   // register file or per-thread register limit
    long smem = 0;        // shared memory per block / per SM
    long threads = 0;     // threads per block / per SM
    long residency = 0;   // more blocks than the device can hold at once (a grid barrier would deadlock)
    long shape = 0;       // no register shape covers the row (k too long for kpt, or gate-mixed groups)
};

// Which variants the planner may pick (tests and the self-test force them).
struct PlanOptions {
    int barrier = -1;          // -1 any, else a BarrierKind
    int gru_syncs = 0;         // GRU reset-before-matmul: 0 either, 1 (rbm1) or 2 (rbm2)
    bool force_fallback = false;
    size_t keep = 16;          // ranked candidates kept in the plan (calibration's top K comes from these)
    // Registers per thread of each register shape, as the compiled kernels
    // report them (cudaFuncGetAttributes); empty = estimate_registers(). A
    // negative entry means "unusable" (e.g. the kernel spills on this device).
    std::vector<int> regs;
};

// What a layer-direction of one batch size runs.
struct Plan {
    bool persistent = false;
    std::string fallback_reason;       // why not persistent (empty when persistent)
    std::vector<Candidate> ranked;     // best first, at most options.keep
    PruneStats stats;
    double weight_bytes = 0;           // recurrent weights of one layer-direction
    double register_bytes = 0;         // all register files of the device
    const Candidate& best() const { return ranked.front(); }
};

// Registers per thread a shape is expected to need: its cap, or for an
// uncapped shape its rows*kpt weights plus 112 (accumulators, prefetched h
// values, addresses, the epilogue). An upper bound of ptxas's counts on sm_80
// and sm_90 (docs/CUDA.md); on a device the real counts replace it.
int estimate_registers(RegShape s);

// Cost of one candidate (fills gc..total, us_per_step); the geometry and the
// residency fields must already be set.
void estimate_cost(const DeviceInfo& dev, const CostParams& cp, Candidate& c);

// Every legal configuration for a layer of `hidden` units and batch `batch`,
// unsorted, with the reasons for the rejected ones. Tile widths are the
// smallest per number of unit tiles (ceil(H/n)), tile heights likewise; for
// each (ws, rows) the smallest kpt that covers H. Larger values only add
// padding, so they are dominated and not enumerated.
std::vector<Candidate> legal_candidates(const DeviceInfo& dev, Cell cell, GruVariant variant, int hidden, int batch,
                                        const PlanOptions& opt, const CostParams& cp, PruneStats* stats);

// The plan: legal candidates ranked by the model, or the fallback (cuBLAS
// per step + a fused element-wise kernel) with the reason.
Plan make_plan(const DeviceInfo& dev, const Config& cfg, int batch, const PlanOptions& opt = {},
               const CostParams& cp = {});

// One line per fact about a plan, for Model::plan() and logs.
std::string describe(const Plan& plan, const DeviceInfo& dev);
std::string describe(const Candidate& c);

// The biases as the kernels take them: bias [G*H] = b_ih + b_hh except
// linear-before-reset's recurrent n bias, which goes to b_hn [H] (it is
// multiplied by r); b_hn is empty for other cells. Either input may be nullptr.
void fold_biases(const Config& cfg, const float* b_ih, const float* b_hh, std::vector<float>& bias,
                 std::vector<float>& b_hn);

// "" if the CUDA backend can run cfg, else an Error-style message naming the
// unsupported field, e.g. "Config.proj_size = 64: the CUDA backend does not
// support LSTM projection (use backend = cpu)".
std::string unsupported_reason(const Config& cfg);

// ---------------------------------------------------------------------------
// 3. Host interface of deeprnn_cuda.cu (defined only in it; see section 4)
// ---------------------------------------------------------------------------

// True when a device of compute capability >= 8.0 is present and the driver
// works; *why (if given) says which device, or why not.
bool cuda_backend_available(std::string* why);

// One layer-direction's weights, PyTorch layout and gate order (as
// detail::RawLayer holds them): w_ih [G*H, E_l], w_hh [G*H, H], biases [G*H]
// (nullptr = zeros), peep [3*H] i, f, o (nullptr = none).
struct GpuLayerView {
    const float* w_ih = nullptr;
    const float* w_hh = nullptr;
    const float* b_ih = nullptr;
    const float* b_hh = nullptr;
    const float* peep = nullptr;
};

// One run, host memory, time-major like SessionImpl::forward: x [T, B, E],
// lengths [B] or nullptr, h0/h_n [L*D, B, H], c0/c_n [L*D, B, H] (LSTM),
// y [T, B, D*H]; any output may be nullptr, h0/c0 nullptr = zeros.
struct GpuRun {
    const float* x = nullptr;
    int T = 0, B = 0;
    const int32_t* lengths = nullptr;
    const float* h0 = nullptr;
    const float* c0 = nullptr;
    float* y = nullptr;
    float* h_n = nullptr;
    float* c_n = nullptr;
};

// A model on the current CUDA device: weights copied to the device once,
// plans chosen (and calibrated) at creation. Runs of one GpuModel are
// serialised by a mutex (one device workspace); every CUDA or cuBLAS failure
// throws deeprnn::Error naming the call and CUDA's message.
class GpuModel {
public:
    virtual ~GpuModel() = default;
    virtual void run(const GpuRun& run) = 0;
    virtual std::string plan() const = 0;
};

// cfg must be valid (validate()) and supported (unsupported_reason() empty);
// layers has L*D entries, index layer*D + direction.
std::unique_ptr<GpuModel> create_gpu_model(const Config& cfg, const std::vector<GpuLayerView>& layers,
                                           const PlanOptions& opt = {});

// ---------------------------------------------------------------------------
// 4. How the library finds the backend: registration
// ---------------------------------------------------------------------------
//
// deeprnn.cpp never calls into deeprnn_cuda.cu directly, so the two-file
// drop-in links without CUDA. Instead deeprnn_cuda.o registers itself: a
// static initialiser in it calls register_cuda_backend() (linking the object
// is enough, even with an unchanged deeprnn.cpp). A static library would not
// pull an object nobody references, so a build that compiles deeprnn.cpp
// with -DDEEPRNN_CUDA (make CUDA=1, cmake -DDEEPRNN_CUDA=ON) also calls
// deeprnn_cuda_register() from cuda_backend(): the reference pulls the object
// out of the archive, and forgetting to link it is a link error naming that
// symbol rather than a silent CPU fallback. Not weak symbols: they are not
// portable (MSVC), and a weak reference does not pull an archive member
// either.
struct CudaBackend {
    const char* build;  // e.g. "sm_80 sm_90 (CUDA 13.0)"
    bool (*available)(std::string* why);
    std::unique_ptr<GpuModel> (*create)(const Config&, const std::vector<GpuLayerView>&, const PlanOptions&);
};
void register_cuda_backend(const CudaBackend* backend);
// The registered backend, or nullptr when this program has none.
const CudaBackend* cuda_backend();

}  // namespace gpu
}  // namespace detail
}  // namespace deeprnn

#if defined(DEEPRNN_CUDA)
// Defined in deeprnn_cuda.cu; registers the backend (idempotent).
extern "C" void deeprnn_cuda_register();
#endif
