// deeprnn_cuda.cu — the optional persistent-kernel GPU backend (docs/CUDA.md).
//
// Per layer: one cuBLAS GEMM projects the inputs of all steps of both
// directions (the time-independent phase). Then per direction one persistent
// kernel runs the whole sequence: each block loads the recurrent weights of
// its output tile (tw units, all gates, x th batch rows) into registers once,
// and per step reads h_{t-1} into shared memory, computes partial dot
// products (thread_dot), reduces them with warp shuffles, applies the fused
// cell update of its tile, writes h_t and meets the other blocks at one grid
// barrier (grid.sync() or a sense-reversing atomic barrier: a plan parameter).
// When the weights do not fit on chip, the plan falls back to a cuBLAS product
// per step plus a fused element-wise kernel.
//
// The index math and the cell formulas are src/gpu_plan.hpp's DEEPRNN_HD
// functions, which test/test_gpu_plan.cpp also executes on the CPU. The
// planner (src/gpu_plan.cpp) is compiled into deeprnn.cpp; this file defines
// the host interface declared at the end of gpu_plan.hpp. Nothing here leaks
// a CUDA type to deeprnn.hpp; every CUDA or cuBLAS failure becomes a
// deeprnn::Error naming the call and CUDA's message.
#include "deeprnn.hpp"
#include "src/gpu_plan.hpp"

#include <cooperative_groups.h>
#include <cublas_v2.h>
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

namespace deeprnn {
namespace detail {
namespace gpu {

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

namespace {

void check(cudaError_t e, const char* call) {
    if (e != cudaSuccess)
        throw Error(std::string("cuda: ") + call + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}
void check(cublasStatus_t s, const char* call) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string("cuda: ") + call + ": " + cublasGetStatusString(s) + " (" + cublasGetStatusName(s) + ")");
}
#define DEEPRNN_CHECK(call) check((call), #call)

}  // namespace

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

// About 10 s of spinning (at ~100 ns a sleep) before an atomic barrier gives up
// and traps: a lost block becomes a CUDA error instead of a hang.
constexpr unsigned kSpinLimit = 1u << 27;

// One barrier for all blocks. The atomic variant (cooperative groups' own
// pattern): after the block's __syncthreads, thread 0 fences, arrives with an
// acq_rel add; the last to arrive resets the count and flips the sense; the
// others wait for the flip. So every block's h_t is visible before any block
// reads it (those reads bypass L1 with __ldcg).
__device__ __forceinline__ void grid_barrier(const KernelArgs& a, unsigned& sense) {
    if (a.barrier == BarrierKind::grid_sync) {
        cooperative_groups::this_grid().sync();
        return;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        sense ^= 1u;
        __threadfence();
        cuda::atomic_ref<unsigned, cuda::thread_scope_device> count(a.bar[0]), flag(a.bar[1]);
        if (count.fetch_add(1u, cuda::memory_order_acq_rel) == gridDim.x - 1) {
            count.store(0u, cuda::memory_order_relaxed);
            flag.store(sense, cuda::memory_order_release);
        } else {
            for (unsigned spins = 0; flag.load(cuda::memory_order_acquire) != sense; ++spins) {
                if (spins > kSpinLimit) __trap();
                __nanosleep(100);
            }
        }
    }
    __syncthreads();
}

// dst[b][k] = src[(b0+b)*H + k] for the block's batch rows, k < H (L2, not L1:
// another block wrote it since this SM last looked).
__device__ __forceinline__ void load_rows(float* dst, const float* src, const Geometry& g, int b0, int nb) {
    for (int b = 0; b < nb; ++b)
        for (int k = threadIdx.x; k < g.H; k += blockDim.x) dst[b * g.kp + k] = __ldcg(src + static_cast<size_t>(b0 + b) * g.H + k);
}

// The block's recurrent products for the rows of gate slots [lo, hi): partial
// sums per thread, butterfly reduction inside each work group, one lane per
// row writes gates[b][row]. Work groups are gate-pure when a filter is used.
template <int RPG, int KPT>
__device__ __forceinline__ void dot_phase(const Geometry& g, const float (&w)[RPG][KPT], const float* in_s, float* gates_s,
                                          int nb, int grp, int lane, int lo, int hi) {
    const int first = block_row(g, grp, 0);
    const bool mine = first < g.rows && row_slot(g, first) >= lo && row_slot(g, first) < hi;
    const unsigned mask = __ballot_sync(0xffffffffu, mine);  // the lanes that shuffle below
    if (!mine) return;
    for (int b = 0; b < nb; ++b) {
        float acc[RPG];
        thread_dot<RPG, KPT>(w, in_s + b * g.kp, lane, g.ws, acc);
        DEEPRNN_UNROLL
        for (int r = 0; r < RPG; ++r) {
            for (int off = g.ws >> 1; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(mask, acc[r], off);
            const int row = block_row(g, grp, r);
            if (lane == writer_lane(g, r) && row < g.rows) gates_s[b * g.rows + row] = acc[r];
        }
    }
}

// The persistent kernel's body: one block per output tile, the whole sequence.
template <int RPG, int KPT>
__device__ __forceinline__ void persistent_body(const KernelArgs& a) {
    extern __shared__ float smem[];
    const Geometry& g = a.geo;
    const int ut = block_unit_tile(g, blockIdx.x), bt = block_batch_tile(g, blockIdx.x);
    const int u0 = ut * g.tw, b0 = bt * g.th, nu = tile_units(g, ut), nb = tile_batch(g, bt);
    const int tid = threadIdx.x, grp = thread_group(g, tid), lane = thread_lane(g, tid);
    const SmemLayout L = smem_layout(g, a.kind);
    float* h_s = smem + L.h;
    float* rh_s = smem + L.rh;
    float* gates_s = smem + L.gates;
    float* c_s = smem + L.c;
    float* hown_s = smem + L.hown;
    float* w1_s = smem + L.w1;
    const size_t BH = static_cast<size_t>(g.B) * g.H;

    // This thread's weights, in registers for the whole sequence (zero = padding).
    float w[RPG][KPT];
    DEEPRNN_UNROLL
    for (int r = 0; r < RPG; ++r) {
        const long row = weight_row(g, a.kind, ut, block_row(g, grp, r));
        DEEPRNN_UNROLL
        for (int j = 0; j < KPT; ++j) {
            const int k = weight_col(g, lane, j);
            w[r][j] = row >= 0 && k >= 0 ? __ldg(a.w_hh + row * g.H + k) : 0.0f;
        }
    }
    // Shared state that lives for the whole sequence. h_s and rh_s are zeroed
    // once: their columns past H are never written and must read as 0.
    for (int i = tid; i < L.gates; i += blockDim.x) smem[i] = 0.0f;
    if (a.kind == StepKind::lstm)
        for (int i = tid; i < nb * nu; i += blockDim.x)
            c_s[(i / nu) * g.tw + i % nu] = a.c[static_cast<size_t>(b0 + i / nu) * g.H + u0 + i % nu];
    if (a.kind == StepKind::gru_rbm1) {
        // U_r[:, own units], stored k-major so consecutive threads read consecutive rows.
        for (int i = tid; i < g.H * nu; i += blockDim.x)
            w1_s[(i % nu) * g.H + i / nu] = a.w_hh[static_cast<size_t>(i / nu) * g.H + u0 + i % nu];
        for (int i = tid; i < nb * nu; i += blockDim.x)
            hown_s[(i / nu) * g.tw + i % nu] = a.h[static_cast<size_t>(b0 + i / nu) * g.H + u0 + i % nu];
    }
    unsigned sense = 0;
    if (tid == 0 && a.barrier == BarrierKind::atomic)
        sense = cuda::atomic_ref<unsigned, cuda::thread_scope_device>(a.bar[1]).load(cuda::memory_order_relaxed);
    __syncthreads();

    for (int s = 0; s < a.steps; ++s) {
        const float* h_prev = a.h + (s & 1) * BH;
        float* h_next = a.h + ((s + 1) & 1) * BH;
        if (a.kind == StepKind::gru_rbm1) {
            // GRNN's single-barrier GRU: partial sums of U_r h over the own
            // units (known locally from the last step), exchanged at the
            // barrier; then every block reduces them for all H units.
            float* part = a.partial + static_cast<size_t>(s & 1) * g.unit_tiles * BH;
            for (int i = tid; i < nb * g.H; i += blockDim.x) {
                const int b = i / g.H, row = i % g.H;
                part[ut * BH + static_cast<size_t>(b0 + b) * g.H + row] = rbm1_partial(g, w1_s, hown_s + b * g.tw, row, nu);
            }
            grid_barrier(a, sense);
            load_rows(h_s, h_prev, g, b0, nb);
            __syncthreads();
            for (int i = tid; i < nb * g.H; i += blockDim.x) {
                const int b = i / g.H, u = i % g.H, bb = b0 + b;
                const StepTime st = step_time(s, __ldg(a.lengths + bb), a.reverse);
                rh_s[b * g.kp + u] = reset_unit(a, st, bb, u, rbm1_reduce(g, part, bb, u), h_s[b * g.kp + u]);
            }
            __syncthreads();
            dot_phase<RPG, KPT>(g, w, h_s, gates_s, nb, grp, lane, 0, 1);   // z
            dot_phase<RPG, KPT>(g, w, rh_s, gates_s, nb, grp, lane, 1, 2);  // n
            __syncthreads();
        } else {
            load_rows(h_s, h_prev, g, b0, nb);
            __syncthreads();
            dot_phase<RPG, KPT>(g, w, h_s, gates_s, nb, grp, lane, 0, a.kind == StepKind::gru_rbm2 ? 2 : g.G);
            __syncthreads();
            if (a.kind == StepKind::gru_rbm2) {
                // Two-barrier GRU: r*h for the own units, published, then U_n (r*h).
                for (int i = tid; i < nb * nu; i += blockDim.x) {
                    const int b = i / nu, u = u0 + i % nu, bb = b0 + b;
                    const StepTime st = step_time(s, __ldg(a.lengths + bb), a.reverse);
                    a.rh[static_cast<size_t>(bb) * g.H + u] = reset_unit(a, st, bb, u, gates_s[b * g.rows + i % nu], h_s[b * g.kp + u]);
                }
                grid_barrier(a, sense);
                load_rows(rh_s, a.rh, g, b0, nb);
                __syncthreads();
                dot_phase<RPG, KPT>(g, w, rh_s, gates_s, nb, grp, lane, 2, 3);
                __syncthreads();
            }
        }
        // The fused cell update of the tile.
        for (int i = tid; i < nb * nu; i += blockDim.x) {
            const int b = i / nu, ul = i % nu, u = u0 + ul, bb = b0 + b;
            const StepTime st = step_time(s, __ldg(a.lengths + bb), a.reverse);
            const float hn = update_unit(a, st, bb, u, h_s[b * g.kp + u], c_s + b * g.tw + ul, gates_s + b * g.rows + ul, g.tw);
            h_next[static_cast<size_t>(bb) * g.H + u] = hn;
            if (st.active && a.y) a.y[(static_cast<size_t>(st.t) * g.B + bb) * a.ld_y + u] = hn;
            if (a.kind == StepKind::gru_rbm1) hown_s[b * g.tw + ul] = hn;
        }
        if (a.kind == StepKind::gru_rbm1)
            __syncthreads();  // hown_s feeds the next step's partial sums; the barrier comes after them
        else
            grid_barrier(a, sense);
    }
    if (a.kind == StepKind::lstm) {
        __syncthreads();
        for (int i = tid; i < nb * nu; i += blockDim.x)
            a.c[static_cast<size_t>(b0 + i / nu) * g.H + u0 + i % nu] = c_s[(i / nu) * g.tw + i % nu];
    }
}

// Fallback, one step after cuBLAS wrote gh[B][cell_gates*H] = h_{t-1} W_hh^T
// (reset-before-matmul: phase 0 after the r,z product writes r*h to a.rh;
// phase 1 after the U_n (r*h) product finishes the step).
__global__ void fallback_step(const KernelArgs a, const float* gh, int s, int phase) {
    const Geometry& g = a.geo;
    const size_t BH = static_cast<size_t>(g.B) * g.H;
    const float* h_prev = a.h + (s & 1) * BH;
    float* h_next = a.h + ((s + 1) & 1) * BH;
    const int GH = cell_gates(a.kind) * g.H;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < BH; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int bb = static_cast<int>(i / g.H), u = static_cast<int>(i % g.H);
        const StepTime st = step_time(s, a.lengths[bb], a.reverse);
        const float* row = gh + static_cast<size_t>(bb) * GH + u;
        if (a.kind == StepKind::gru_rbm2 && phase == 0) {
            a.rh[i] = reset_unit(a, st, bb, u, row[0], h_prev[i]);
            continue;
        }
        // gh holds all cell gates in PyTorch order; rbm2 reads z at 1, n at 2.
        const float hn = update_unit(a, st, bb, u, h_prev[i], a.c ? a.c + i : nullptr, row, g.H);
        h_next[i] = hn;
        if (st.active && a.y) a.y[(static_cast<size_t>(st.t) * g.B + bb) * a.ld_y + u] = hn;
    }
}

// The kernels: capped shapes carry __maxnreg__; the others no attribute at
// all (an explicit __maxnreg__(255) makes ptxas use more registers, not fewer).
template <int RPG, int KPT, int MAXREG>
__global__ void __maxnreg__(MAXREG) persistent_rnn_capped(const KernelArgs a) {
    persistent_body<RPG, KPT>(a);
}
template <int RPG, int KPT>
__global__ void persistent_rnn(const KernelArgs a) {
    persistent_body<RPG, KPT>(a);
}

using KernelFn = void (*)(KernelArgs);
template <int RPG, int KPT, int MAXREG>
struct KernelOf {  // only the selected template is instantiated
    static constexpr KernelFn fn = &persistent_rnn_capped<RPG, KPT, MAXREG>;
};
template <int RPG, int KPT>
struct KernelOf<RPG, KPT, 255> {
    static constexpr KernelFn fn = &persistent_rnn<RPG, KPT>;
};
#define DEEPRNN_KERNEL_ENTRY(r, k, m) KernelOf<r, k, m>::fn,
// Index i is kRegShapes[i]: both come from DEEPRNN_GPU_SHAPES.
const KernelFn kKernels[] = {DEEPRNN_GPU_SHAPES(DEEPRNN_KERNEL_ENTRY)};
#undef DEEPRNN_KERNEL_ENTRY
static_assert(sizeof(kKernels) / sizeof(kKernels[0]) == kNumRegShapes, "one kernel per register shape");

// ---------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------

namespace {

DeviceInfo query_device(int dev) {
    cudaDeviceProp p;
    DEEPRNN_CHECK(cudaGetDeviceProperties(&p, dev));
    int clock_khz = 0;
    DEEPRNN_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    DeviceInfo d;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.sms = p.multiProcessorCount;
    d.regs_per_sm = p.regsPerMultiprocessor;
    d.regs_per_block = p.regsPerBlock;
    d.smem_per_sm = static_cast<int>(p.sharedMemPerMultiprocessor);
    d.smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
    d.smem_reserved_per_block = static_cast<int>(p.reservedSharedMemPerBlock);
    d.warp_size = p.warpSize;
    d.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    d.max_threads_per_block = p.maxThreadsPerBlock;
    d.max_blocks_per_sm = p.maxBlocksPerMultiProcessor;
    d.schedulers_per_sm = 4;  // every architecture since Maxwell
    d.clock_ghz = clock_khz > 0 ? clock_khz / 1e6 : 1.0;
    d.cooperative_launch = p.cooperativeLaunch != 0;
    return d;
}

// Device memory that frees itself; grows, never shrinks.
template <class T>
class DeviceArray {
public:
    DeviceArray() = default;
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), n_(o.n_) {
        o.p_ = nullptr;
        o.n_ = 0;
    }
    DeviceArray& operator=(DeviceArray&&) = delete;
    ~DeviceArray() {
        if (p_) cudaFree(p_);  // no throw from a destructor; a dead context frees everything anyway
    }
    T* get() const { return p_; }
    size_t size() const { return n_; }
    void reserve(size_t n) {
        if (n <= n_) return;
        if (p_) DEEPRNN_CHECK(cudaFree(p_));
        p_ = nullptr;
        n_ = 0;
        DEEPRNN_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
        n_ = n;
    }
    void upload(const T* src, size_t n) {
        reserve(n);
        DEEPRNN_CHECK(cudaMemcpy(p_, src, n * sizeof(T), cudaMemcpyHostToDevice));
    }

private:
    T* p_ = nullptr;
    size_t n_ = 0;
};

StepKind step_kind(const Config& c) {
    switch (c.cell) {
        case Cell::lstm: return StepKind::lstm;
        case Cell::gru: return c.gru_variant == GruVariant::linear_before_reset ? StepKind::gru_lbr : StepKind::gru_rbm2;
        case Cell::rnn_tanh: return StepKind::rnn_tanh;
        case Cell::rnn_relu: return StepKind::rnn_relu;
    }
    return StepKind::lstm;
}

class CudaModel final : public GpuModel {
public:
    CudaModel(const Config& cfg, const std::vector<GpuLayerView>& layers, const PlanOptions& opt);
    ~CudaModel() override {
        if (blas_) cublasDestroy(blas_);
        if (stream_) cudaStreamDestroy(stream_);
    }
    void run(const GpuRun& r) override;
    std::string plan() const override { return plan_text_; }

private:
    struct Direction {
        DeviceArray<float> w_hh, bias, b_hn, peep;
    };
    struct Layer {
        int in = 0;                  // E_l
        DeviceArray<float> w_ih;     // [D*G*H, E_l]: both directions, one GEMM
        std::vector<Direction> dirs;
    };

    Plan& plan_for(int B);
    void project(int layer, const float* in, int rows);
    void run_direction(const Candidate* c, int layer, int d, int B, int steps, float* out);
    void launch(const Candidate& c, const KernelArgs& a);
    void calibrate();

    Config cfg_;
    PlanOptions opt_;
    int G_ = 0, H_ = 0, D_ = 1;
    DeviceInfo dev_;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    std::vector<Layer> layers_;
    std::map<int, Plan> plans_;  // per batch size
    std::string plan_text_;
    std::string calibration_;  // what calibrate() measured, for plan()
    std::mutex mu_;
    // Workspace, grown on demand.
    DeviceArray<float> x_, xproj_, out_[2], h_, c_, rh_, part_, gh_, h0_, c0_, hn_, cn_;
    DeviceArray<int> lengths_;
    std::vector<int> len_;  // host copy of the lengths of a run
    DeviceArray<unsigned> bar_;
};

CudaModel::CudaModel(const Config& cfg, const std::vector<GpuLayerView>& layers, const PlanOptions& opt)
    : cfg_(cfg), opt_(opt) {
    const std::string why = unsupported_reason(cfg);
    if (!why.empty()) throw Error(why);
    G_ = cfg.cell == Cell::lstm ? 4 : cfg.cell == Cell::gru ? 3 : 1;
    H_ = cfg.hidden_size;
    D_ = cfg.direction == deeprnn::Direction::bidirectional ? 2 : 1;
    if (layers.size() != static_cast<size_t>(cfg.num_layers) * D_)
        throw Error("internal: create_gpu_model got " + std::to_string(layers.size()) + " layer-directions");
    int dev = 0;
    DEEPRNN_CHECK(cudaGetDevice(&dev));
    dev_ = query_device(dev);
    DEEPRNN_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DEEPRNN_CHECK(cublasCreate(&blas_));
    DEEPRNN_CHECK(cublasSetStream(blas_, stream_));
    // FP32 products without TF32 tensor cores: results must match the CPU to ~1e-6.
    DEEPRNN_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));

    // The compiled kernels' real register counts replace the planner's estimate;
    // a kernel that needs local memory (spills, e.g. after a JIT for a newer GPU) is not used.
    // Every kernel may use all the shared memory a block can have, and asks
    // for the largest shared-memory carveout (it keeps its state on chip; L1
    // has nothing to reuse), so that the occupancy the plan relies on is real.
    opt_.regs.assign(kNumRegShapes, -1);
    for (int i = 0; i < kNumRegShapes; ++i) {
        cudaFuncAttributes fa;
        DEEPRNN_CHECK(cudaFuncGetAttributes(&fa, kKernels[i]));
        opt_.regs[i] = fa.localSizeBytes == 0 ? fa.numRegs : -1;
        DEEPRNN_CHECK(cudaFuncSetAttribute(kKernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize, dev_.smem_per_block_optin));
        DEEPRNN_CHECK(cudaFuncSetAttribute(kKernels[i], cudaFuncAttributePreferredSharedMemoryCarveout,
                                           static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    }
    if (cfg.tuning == Tuning::exhaustive) opt_.keep = std::max<size_t>(opt_.keep, 64);

    const size_t GH = static_cast<size_t>(G_) * H_;
    layers_.resize(cfg.num_layers);
    for (int l = 0; l < cfg.num_layers; ++l) {
        Layer& L = layers_[l];
        L.in = l == 0 ? cfg.input_size : D_ * H_;
        std::vector<float> w_ih(D_ * GH * L.in);
        L.dirs.resize(D_);
        for (int d = 0; d < D_; ++d) {
            const GpuLayerView& v = layers[l * D_ + d];
            std::memcpy(w_ih.data() + d * GH * L.in, v.w_ih, GH * L.in * sizeof(float));
            Direction& dir = L.dirs[d];
            dir.w_hh.upload(v.w_hh, GH * H_);
            std::vector<float> bias, b_hn;
            fold_biases(cfg, v.b_ih, v.b_hh, bias, b_hn);
            dir.bias.upload(bias.data(), GH);
            if (!b_hn.empty()) dir.b_hn.upload(b_hn.data(), H_);
            if (v.peep) dir.peep.upload(v.peep, 3 * static_cast<size_t>(H_));
        }
        L.w_ih.upload(w_ih.data(), w_ih.size());
    }
    bar_.reserve(2);
    DEEPRNN_CHECK(cudaMemset(bar_.get(), 0, 2 * sizeof(unsigned)));
    // cudaMemcpy from pageable memory may return before its DMA lands, and the
    // legacy stream does not order work on stream_: wait for all of it here.
    DEEPRNN_CHECK(cudaDeviceSynchronize());
    if (cfg.tuning != Tuning::heuristic) calibrate();
    plan_text_ = describe(plan_for(cfg.max_batch), dev_) + calibration_;
}

// The model's ranking for batch B, keeping only candidates the driver's
// occupancy calculator confirms can be resident all at once (a cooperative
// launch would fail otherwise).
Plan& CudaModel::plan_for(int B) {
    auto it = plans_.find(B);
    if (it != plans_.end()) return it->second;
    Plan p = make_plan(dev_, cfg_, B, opt_);
    std::vector<Candidate> resident;
    for (const Candidate& c : p.ranked) {
        int per_sm = 0;
        DEEPRNN_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernels[c.shape], c.geo.threads, c.smem));
        if (static_cast<long>(per_sm) * dev_.sms >= c.geo.blocks) resident.push_back(c);
    }
    if (p.persistent && resident.empty()) {
        p.persistent = false;
        p.fallback_reason = "the driver's occupancy calculator cannot keep any of the model's best " +
                            std::to_string(p.ranked.size()) + " configurations resident";
    }
    p.ranked = std::move(resident);
    return plans_.emplace(B, std::move(p)).first->second;
}

// xproj[rows, D*G*H] = in[rows, E_l] . W_ih^T for both directions at once.
void CudaModel::project(int layer, const float* in, int rows) {
    const Layer& L = layers_[layer];
    const int n = D_ * G_ * H_;
    const float one = 1.0f, zero = 0.0f;
    DEEPRNN_CHECK(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, L.in, &one, L.w_ih.get(), L.in, in, L.in, &zero,
                              xproj_.get(), n));
}

void CudaModel::launch(const Candidate& c, const KernelArgs& a) {
    const KernelFn fn = kKernels[c.shape];
    // A cooperative launch guarantees that all blocks are resident (or fails
    // cleanly), which the atomic barrier needs as much as grid.sync() does.
    if (dev_.cooperative_launch) {
        KernelArgs copy = a;
        void* args[] = {&copy};
        DEEPRNN_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(fn), dim3(c.geo.blocks),
                                                  dim3(c.geo.threads), args, c.smem, stream_));
    } else {
        fn<<<c.geo.blocks, c.geo.threads, c.smem, stream_>>>(a);
        DEEPRNN_CHECK(cudaGetLastError());
    }
}

// One direction of one layer over the projected inputs in xproj_. c == nullptr: fallback.
void CudaModel::run_direction(const Candidate* c, int layer, int d, int B, int steps, float* out) {
    const Direction& dir = layers_[layer].dirs[d];
    KernelArgs a;
    a.kind = c ? c->kind : step_kind(cfg_);
    a.geo = c ? c->geo : make_geometry(a.kind, H_, B, H_, B, 1, kRegShapes[0]);
    a.barrier = c ? c->barrier : BarrierKind::atomic;
    a.steps = steps;
    a.reverse = d == 1 || cfg_.direction == deeprnn::Direction::reverse;
    a.clip = cfg_.clip;
    a.w_hh = dir.w_hh.get();
    a.xproj = xproj_.get() + static_cast<size_t>(d) * G_ * H_;
    a.ld_x = D_ * G_ * H_;
    a.bias = dir.bias.get();
    a.b_hn = dir.b_hn.get();
    a.peep = dir.peep.get();
    a.lengths = lengths_.get();
    a.h = h_.get();
    a.c = cfg_.cell == Cell::lstm ? c_.get() : nullptr;
    a.y = out ? out + static_cast<size_t>(d) * H_ : nullptr;
    a.ld_y = D_ * H_;
    a.rh = rh_.get();
    a.partial = part_.get();
    a.bar = bar_.get();
    if (steps == 0) return;
    if (c) {
        launch(*c, a);
        return;
    }
    // Fallback: per step a cuBLAS product (weights streamed from L2/HBM) and one fused kernel.
    const size_t BH = static_cast<size_t>(B) * H_;
    const int GH = G_ * H_;
    const float one = 1.0f, zero = 0.0f;
    const int threads = 256, blocks = static_cast<int>(std::min<size_t>((BH + threads - 1) / threads, 4096));
    for (int s = 0; s < steps; ++s) {
        const float* h_prev = h_.get() + (s & 1) * BH;
        const bool rbm = a.kind == StepKind::gru_rbm2;
        const int rows = rbm ? 2 * H_ : GH;  // rbm: r, z first; n after r*h is known
        DEEPRNN_CHECK(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, rows, B, H_, &one, dir.w_hh.get(), H_, h_prev, H_, &zero,
                                  gh_.get(), GH));
        if (rbm) {
            fallback_step<<<blocks, threads, 0, stream_>>>(a, gh_.get(), s, 0);
            DEEPRNN_CHECK(cudaGetLastError());
            DEEPRNN_CHECK(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, H_, B, H_, &one,
                                      dir.w_hh.get() + static_cast<size_t>(2) * H_ * H_, H_, rh_.get(), H_, &zero,
                                      gh_.get() + 2 * H_, GH));
        }
        fallback_step<<<blocks, threads, 0, stream_>>>(a, gh_.get(), s, 1);
        DEEPRNN_CHECK(cudaGetLastError());
    }
}

void CudaModel::run(const GpuRun& r) {
    std::lock_guard<std::mutex> lock(mu_);
    const int T = r.T, B = r.B, L = cfg_.num_layers;
    if (T < 1 || B < 1 || B > cfg_.max_batch) throw Error("internal: GpuModel::run with T=" + std::to_string(T) + " B=" + std::to_string(B));
    const Plan& p = plan_for(B);
    const Candidate* c = p.persistent ? &p.best() : nullptr;
    const size_t rows = static_cast<size_t>(T) * B, BH = static_cast<size_t>(B) * H_, LD = static_cast<size_t>(L) * D_;
    if (rows * D_ * G_ * H_ > static_cast<size_t>(INT32_MAX) || rows * cfg_.input_size > static_cast<size_t>(INT32_MAX))
        throw Error("RunInput.seq_len = " + std::to_string(T) + ": T*B*features exceeds the CUDA backend's 2^31 limit");

    // Lengths and the number of steps (the longest sequence).
    len_.assign(B, T);  // no allocation once a batch this large was seen
    if (r.lengths) std::copy(r.lengths, r.lengths + B, len_.begin());
    const int steps = *std::max_element(len_.begin(), len_.end());

    x_.reserve(rows * cfg_.input_size);
    xproj_.reserve(rows * D_ * G_ * H_);
    for (auto& o : out_) o.reserve(rows * D_ * H_);
    h_.reserve(2 * BH);
    c_.reserve(BH);
    rh_.reserve(BH);
    gh_.reserve(BH * G_);
    part_.reserve(c && c->kind == StepKind::gru_rbm1 ? 2 * BH * c->geo.unit_tiles : 1);
    h0_.reserve(LD * BH);
    c0_.reserve(LD * BH);
    hn_.reserve(LD * BH);
    cn_.reserve(LD * BH);
    lengths_.reserve(B);

    DEEPRNN_CHECK(cudaMemcpyAsync(x_.get(), r.x, rows * cfg_.input_size * sizeof(float), cudaMemcpyHostToDevice, stream_));
    DEEPRNN_CHECK(cudaMemcpyAsync(lengths_.get(), len_.data(), B * sizeof(int), cudaMemcpyHostToDevice, stream_));
    if (r.h0)
        DEEPRNN_CHECK(cudaMemcpyAsync(h0_.get(), r.h0, LD * BH * sizeof(float), cudaMemcpyHostToDevice, stream_));
    else
        DEEPRNN_CHECK(cudaMemsetAsync(h0_.get(), 0, LD * BH * sizeof(float), stream_));
    if (r.c0 && cfg_.cell == Cell::lstm)
        DEEPRNN_CHECK(cudaMemcpyAsync(c0_.get(), r.c0, LD * BH * sizeof(float), cudaMemcpyHostToDevice, stream_));
    else
        DEEPRNN_CHECK(cudaMemsetAsync(c0_.get(), 0, LD * BH * sizeof(float), stream_));

    const float* in = x_.get();
    float* out = nullptr;
    for (int l = 0; l < L; ++l) {
        project(l, in, static_cast<int>(rows));
        out = out_[l & 1].get();
        DEEPRNN_CHECK(cudaMemsetAsync(out, 0, rows * D_ * H_ * sizeof(float), stream_));  // steps past a length stay 0
        for (int d = 0; d < D_; ++d) {
            const size_t idx = static_cast<size_t>(l) * D_ + d;
            DEEPRNN_CHECK(cudaMemcpyAsync(h_.get(), h0_.get() + idx * BH, BH * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
            DEEPRNN_CHECK(cudaMemcpyAsync(c_.get(), c0_.get() + idx * BH, BH * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
            run_direction(c, l, d, B, steps, out);
            DEEPRNN_CHECK(cudaMemcpyAsync(hn_.get() + idx * BH, h_.get() + (steps & 1) * BH, BH * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream_));
            DEEPRNN_CHECK(cudaMemcpyAsync(cn_.get() + idx * BH, c_.get(), BH * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
        }
        in = out;
    }
    if (r.y) DEEPRNN_CHECK(cudaMemcpyAsync(r.y, out, rows * D_ * H_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    if (r.h_n) DEEPRNN_CHECK(cudaMemcpyAsync(r.h_n, hn_.get(), LD * BH * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    if (r.c_n && cfg_.cell == Cell::lstm)
        DEEPRNN_CHECK(cudaMemcpyAsync(r.c_n, cn_.get(), LD * BH * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    DEEPRNN_CHECK(cudaStreamSynchronize(stream_));  // also reports a kernel's failure (e.g. a barrier trap)
}

// GRNN 7.2: time the model's top K for max_batch on this device and keep
// the fastest first. Times layer 0, direction 0 over 32 steps of zero input.
void CudaModel::calibrate() {
    const int B = cfg_.max_batch, T = 32;
    Plan& p = plan_for(B);
    if (!p.persistent || p.ranked.size() < 2) return;
    const size_t K = cfg_.tuning == Tuning::exhaustive ? p.ranked.size() : std::min<size_t>(4, p.ranked.size());
    const size_t rows = static_cast<size_t>(T) * B, BH = static_cast<size_t>(B) * H_;
    xproj_.reserve(rows * D_ * G_ * H_);
    h_.reserve(2 * BH);
    c_.reserve(BH);
    rh_.reserve(BH);
    lengths_.reserve(B);
    size_t tiles = 1;
    for (size_t i = 0; i < K; ++i) tiles = std::max<size_t>(tiles, p.ranked[i].geo.unit_tiles);
    part_.reserve(2 * BH * tiles);
    DEEPRNN_CHECK(cudaMemsetAsync(xproj_.get(), 0, rows * D_ * G_ * H_ * sizeof(float), stream_));
    const std::vector<int> len(B, T);
    DEEPRNN_CHECK(cudaMemcpyAsync(lengths_.get(), len.data(), B * sizeof(int), cudaMemcpyHostToDevice, stream_));
    cudaEvent_t e0, e1;
    DEEPRNN_CHECK(cudaEventCreate(&e0));
    DEEPRNN_CHECK(cudaEventCreate(&e1));
    const auto start = std::chrono::steady_clock::now();
    size_t best = 0, timed = 0;
    float best_ms = 0, first_ms = 0;
    for (size_t i = 0; i < K; ++i) {
        float ms = 0;
        for (int rep = 0; rep < 2; ++rep) {  // the first run is a warm-up
            DEEPRNN_CHECK(cudaMemsetAsync(h_.get(), 0, 2 * BH * sizeof(float), stream_));
            DEEPRNN_CHECK(cudaMemsetAsync(c_.get(), 0, BH * sizeof(float), stream_));
            DEEPRNN_CHECK(cudaEventRecord(e0, stream_));
            run_direction(&p.ranked[i], 0, 0, B, T, nullptr);
            DEEPRNN_CHECK(cudaEventRecord(e1, stream_));
            DEEPRNN_CHECK(cudaEventSynchronize(e1));
            DEEPRNN_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        }
        ++timed;
        if (i == 0) first_ms = ms;
        if (i == 0 || ms < best_ms) {
            best = i;
            best_ms = ms;
        }
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > cfg_.tuning_budget_seconds) break;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::rotate(p.ranked.begin(), p.ranked.begin() + best, p.ranked.begin() + best + 1);
    calibration_ = "cuda calibration: timed the model's best " + std::to_string(timed) + " over " + std::to_string(T) +
                   " steps at batch " + std::to_string(B) + "; its #" + std::to_string(best + 1) + " was fastest (" +
                   std::to_string(best_ms * 1e3f / T) + " us/step; #1: " + std::to_string(first_ms * 1e3f / T) + ")\n";
}

}  // namespace

bool cuda_backend_available(std::string* why) {
    auto say = [&](const std::string& s) {
        if (why) *why = s;
    };
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        say(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
        cudaGetLastError();  // clear it: the caller may go on without CUDA
        return false;
    }
    if (n == 0) {
        say("no CUDA device");
        return false;
    }
    int dev = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        say("cudaGetDeviceProperties failed");
        cudaGetLastError();
        return false;
    }
    const std::string name = "device " + std::to_string(dev) + " (" + p.name + ", compute capability " +
                             std::to_string(p.major) + "." + std::to_string(p.minor) + ", " +
                             std::to_string(p.multiProcessorCount) + " SMs)";
    if (p.major < 8) {
        say(name + ": the CUDA backend needs compute capability 8.0 or newer");
        return false;
    }
    say(name);
    return true;
}

std::unique_ptr<GpuModel> create_gpu_model(const Config& cfg, const std::vector<GpuLayerView>& layers,
                                           const PlanOptions& opt) {
    return std::unique_ptr<GpuModel>(new CudaModel(cfg, layers, opt));
}

namespace {
#define DEEPRNN_CUDA_STR2(...) #__VA_ARGS__
#define DEEPRNN_CUDA_STR(...) DEEPRNN_CUDA_STR2(__VA_ARGS__)
#if defined(__CUDA_ARCH_LIST__)
#define DEEPRNN_CUDA_ARCHS " for compute capabilities " DEEPRNN_CUDA_STR(__CUDA_ARCH_LIST__)
#else
#define DEEPRNN_CUDA_ARCHS ""
#endif
std::unique_ptr<GpuModel> create_default(const Config& cfg, const std::vector<GpuLayerView>& layers,
                                         const PlanOptions& opt) {
    return create_gpu_model(cfg, layers, opt);
}
const CudaBackend kBackend = {"built with CUDA " DEEPRNN_CUDA_STR(__CUDACC_VER_MAJOR__) "." DEEPRNN_CUDA_STR(
                                  __CUDACC_VER_MINOR__) DEEPRNN_CUDA_ARCHS,
                              cuda_backend_available, create_default};
// Linking this object is enough to enable the backend (gpu_plan.hpp, section 4).
[[maybe_unused]] const bool kRegistered = (register_cuda_backend(&kBackend), true);
}  // namespace

}  // namespace gpu
}  // namespace detail
}  // namespace deeprnn

extern "C" void deeprnn_cuda_register() { deeprnn::detail::gpu::register_cuda_backend(&deeprnn::detail::gpu::kBackend); }
