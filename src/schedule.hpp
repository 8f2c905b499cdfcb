// schedule.hpp — choosing how to run a model: DeepCPU's phased-schedule search.
//
// DeepCPU (ATC'18, sections 4-5) picks an execution plan in four steps, all
// here:
//  1. MM-DAG: each cell is a small graph of matrix products (LSTM: 8, GRU: 6,
//     RNN: 2, plus the LSTM projection) with their dependencies.
//  2. Phased schedules: the products are grouped into phases, pruned by the
//     paper's three rules (time-dependent phases identical every step; two
//     consecutive phases of one type must depend on each other; time-
//     independent phases first). Products sharing an input inside a phase fuse
//     into one product. Schedules whose phases have the same shapes perform
//     the same and are kept once.
//  3. Parallelism and partitioning: every schedule at every degree 1..threads
//     (and directions side by side), each product partitioned by private-
//     cache-aware partitioning (PCP), which minimises L3<->L2 traffic with
//     the cross-step case (a weight block that stays in L2 is read once per
//     sequence). A roofline model turns traffic and flops into a time, which
//     ranks the candidates.
//  4. Calibration times the best few candidates the engine can execute and
//     keeps the fastest; a plan cache remembers the winner per configuration
//     and machine so a warm start times nothing.
// The engine executes only some of the schedules (docs/SCHEDULES.md): each
// Candidate says whether it is `executable` and, if so, its ExecutionChoice is
// what the engine needs.
#pragma once
#include "common.hpp"

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace deeprnn {
namespace detail {
namespace sched {

// ---------------------------------------------------------------------------
// The machine
// ---------------------------------------------------------------------------

// Data-cache sizes as the OS reports them, in bytes.
struct CacheSizes {
    size_t l1d = 0;
    size_t l2 = 0;  // per physical core (a shared L2 is divided among its cores)
    size_t l3 = 0;  // whole L3 of cpu0's domain
    std::string source;  // "sysfs", "sysconf" or "default" (nothing readable)
};

// Reads cpu_dir/cache/index*/{level,type,size,shared_cpu_list} and
// cpu_dir/topology/thread_siblings_list; falls back to sysconf, then to
// conservative defaults (source says which). Under a hypervisor sysconf may
// report the host's whole L3, so sysfs is preferred.
CacheSizes read_cache_sizes(const std::string& cpu_dir = "/sys/devices/system/cpu/cpu0");

// "48K" -> 49152, "32M" -> 33554432, "512" -> 512; 0 if malformed.
size_t parse_cache_size(const std::string& text);

// The CPU's "model name" from /proc/cpuinfo, or "unknown".
std::string read_cpu_model();

// The roofline the ranking uses. Rates are per core; the defaults were
// measured roughly on the development machine; plug in bench/roofline's.
struct MachineModel {
    CacheSizes caches;
    // Per core. default_machine() replaces these three with what the kernels
    // reach on this machine (measure_kernel_rates; the L3 rate where the L3
    // holds three L2s); the numbers here are a Zen 5 core's and what the
    // tests' fixed machine uses.
    double l2_bytes_per_s = 160e9;  // read bandwidth from a core's own L2
    double l3_bytes_per_s = 90e9;   // L3 -> L2 (bench/roofline, 8 MiB per thread: 93-101 GB/s)
    double flops_per_s = 200e9;     // fp32 FMA rate of the batched kernel
    // Batch 1, both blocks in L2: how much faster a step is with the input
    // projection folded in than without it plus the projection up front
    // (KernelRates::fold_gain_l2; the kernel harness on a Zen 4 core: 1.25).
    double fold_gain_l2 = 1.25;
    double fold_gain_l2_int8 = 1.25;  // the same for int8 on VNNI (KernelRates::fold_gain_l2_int8)
    double fold_gain_l2_bf16 = 1.25;  // and for bf16 on AVX512_BF16 (KernelRates::fold_gain_l2_bf16)
    std::string rates = "fixed";    // "measured" when default_machine() measured them
    // What a step costs 2 workers beyond their products: the barrier and each
    // fetching the other's new h from its core (measured 0.7 us on the
    // development VM: LSTM H = 64, 1,000 steps, 1.1 us per step on 2 workers
    // against 0.75 on one); grows with log2(workers). The engine plans with
    // the pool's measurement instead (engine.hpp, measured_machine).
    double barrier_s = 0.7e-6;
    // A run on more than one worker: waking the sleeping workers (a futex
    // wake-up through the hypervisor; the caller is worker 0 and never
    // sleeps). Measured on the development VM as a 2-worker run's time beyond
    // one worker's at T = 1: ~0 back to back (workers still spinning), 140-200
    // us after 10 ms idle; 100 us is the middle of what a served request meets.
    double dispatch_s = 100e-6;
    // The same with the workers napping (pool.hpp, kNapMicros): no notify,
    // and a worker finds the run when its nap ends. On the Zen 5 VM a nap
    // of 20 us lasts ~73 us (the timer's round trip through the
    // hypervisor), and a run reached the worker after 15-46 us (p50).
    double nap_dispatch_s = 40e-6;
    // The same with the workers awake (spinning since the last run): no
    // wake-up, but the run is still announced and joined across cores. 0
    // here; the engine measures it (measure_awake_dispatch: 0.08-0.18 us on
    // the Zen 4 VM; 1.2-1.7 us before the workers read the run word after
    // every pause), which keeps one-step runs of the smallest layers on the
    // caller alone.
    double awake_dispatch_s = 0;
    // Reading data another core has just written (cache lines handed across
    // cores, latency-bound): GRU reset-before-matmul's one-barrier form reads
    // the other workers' partial reset products and input-side r every step.
    // About 1 GB/s (64 ns per line) on the development VM: the model then
    // rates the one-barrier form about even with two barriers at hidden 128
    // and behind them above, where it measured even to a few percent either
    // way (docs/ENGINE.md); calibration decides.
    double cross_core_bytes_per_s = 1e9;
    double l2_usable = 0.75;        // share of L2 weights may occupy (rest: states, gates, stack)
    // The L3 one core reads at the L3 rate (KernelRates::l3_capacity_bytes):
    // what decides whether weights stay in it. caches.l3 is what the CPU
    // reports, kept for the plan cache's machine line, which must not move
    // with a noisy measurement. 0 = caches.l3.
    size_t l3_usable_bytes = 0;
    // Aggregate ceilings of all busy cores together (bench/roofline's
    // multi-thread columns); 0 = per-core rate x cores. SMT siblings or a
    // shared L3 port make these far below per-core x cores.
    double flops_total_per_s = 0, l2_total_bytes_per_s = 0, l3_total_bytes_per_s = 0;
};
// This machine: read_cache_sizes(), the L2, L3 and FMA rates and the usable
// L3 measured once per process (30-50 ms on the first call on the Zen 5 VM),
// the other rates as above.
MachineModel default_machine();
// The same machine with its workers awake (no wake-up to pay): what a plan is
// chosen for, and what runs that come back to back meet.
inline MachineModel awake(MachineModel m) {
    m.dispatch_s = m.awake_dispatch_s;
    return m;
}
// The same machine with its workers napping.
inline MachineModel napping(MachineModel m) {
    m.dispatch_s = m.nap_dispatch_s;
    return m;
}

// ---------------------------------------------------------------------------
// MM-DAG and phased schedules
// ---------------------------------------------------------------------------

// What a product multiplies: x_t; h_{t-1}; r_t*h_{t-1} (GRU reset-before-
// matmul); m_t = o_t*tanh(c_t) (the LSTM projection's input).
enum class Operand { x, h, rh, m };
const char* operand_name(Operand op);

// One node: one weight matrix times one operand, for one step.
struct MatMul {
    std::string weight;      // "W" (input), "U" (recurrent), "W_hr" (projection)
    std::string gate;        // "i", "f", "g", "o", "r", "z", "n", "" (RNN, projection)
    Operand input = Operand::x;
    bool projection = false;  // output has proj_size rows, else hidden_size
    std::vector<int> after;   // nodes of the same step that must finish first
    bool reads_h = false;     // needs h_{t-1}: depends on the previous step's writes_h
    bool writes_h = false;    // h_t follows from it with no product in between
    std::string name() const;  // "U_i.h"
};

struct MMDag {
    std::string cell;  // "lstm", "lstm+proj", "gru-lbr", "gru-rbm", "rnn"
    std::vector<MatMul> nodes;
};
MMDag build_mm_dag(Cell cell, GruVariant variant, bool projection);

struct Phase {
    bool time_independent = false;  // once over all steps, before the recurrence
    std::vector<int> nodes;         // MM-DAG node ids
};

// A phased schedule: time-independent phases, then one step's time-dependent
// phases (the same every step).
struct PhasedSchedule {
    std::vector<Phase> phases;
    std::string text;       // "TI[W{i,f,g,o}.X] TD[U{i,f,g,o}.h]" (X = x of all steps)
    std::string signature;  // shapes only; equal signatures perform the same
    int hoisted = 0;        // input products fused across time (in the TI phase)
};

// A phase's products grouped by shared input: one product each.
struct FusedMM {
    Operand input = Operand::x;
    std::vector<int> nodes;
};
std::vector<FusedMM> fuse(const MMDag& dag, const Phase& phase);

struct Enumeration {
    long considered = 0;                   // placements examined (non-empty phases)
    std::vector<PhasedSchedule> all;       // every placement the three rules keep
    std::vector<PhasedSchedule> distinct;  // one per signature (the engine's own first if present)
};
Enumeration enumerate_schedules(const MMDag& dag);

// True if the engine runs this schedule: every input product fused across
// time, then per step one phase of all products of h (and a second phase for
// U_n.(r*h) or the projection).
bool engine_runs(const MMDag& dag, const PhasedSchedule& s);

// ---------------------------------------------------------------------------
// Private-cache-aware partitioning
// ---------------------------------------------------------------------------

// C[i,j] = Σ_k A[i,k]·B[k,j], sizes in elements (float32); B is the weight.
struct Gemm {
    double i = 1, j = 1, k = 1;
    double weight_bytes = 4;  // bytes per element of B (Config.weight_precision)
};

// A P-way partitioning <xi, xj, xk> and its L3<->L2 traffic in bytes.
struct Tiling {
    int xi = 1, xj = 1, xk = 1;
    double bytes = 0;
    bool resident = false;  // each weight block stays in L2 across steps
};

// The paper's traffic for `steps` repetitions of g with the same weights:
//   block = |B|/(xj·xk) <= l2_bytes:  steps·(xj|A| + 2xk|C|) + xi|B|
//   otherwise:                         steps·(xj|A| + xi|B| + 2xk|C|)
// steps = 1 is the within-phase formula xj|A| + xi|B| + 2xk|C|.
Tiling tiling_bytes(const Gemm& g, int xi, int xj, int xk, double steps, double l2_bytes);

// The <xi, xj, xk> with xi·xj·xk = parts (no part empty) of least traffic;
// ties go to fewer reductions (smaller xk), then to output tiling (smaller xi).
Tiling pcp(const Gemm& g, int parts, double steps, double l2_bytes);

// ---------------------------------------------------------------------------
// Candidates
// ---------------------------------------------------------------------------

struct Problem {
    Cell cell = Cell::lstm;
    GruVariant gru_variant = GruVariant::linear_before_reset;
    int input = 1, hidden = 1, proj = 0, layers = 1, directions = 1;
    int batch = 1, seq_len = 100, threads = 1;
    bool reverse = false;  // one direction that runs backward in time (Direction::reverse)
    int simd_width = 8;  // the engine slices hidden units in whole vectors
    WeightPrecision precision = WeightPrecision::f32;  // of the time-dependent weights
};

// The Problem of a model: threads (0 = cfg.threads), the kernels' floats per
// vector (isa_width), a nominal batch (clamped to max_batch) and length (0 =
// Config::tuning_seq_len, the run the plan is chosen for).
Problem problem_for(const Config& cfg, int threads, int simd_width, int batch = 1, int seq_len = 0);

// Rows (steps x batch) of input projection a worker claims at a time in the
// critical-path-first form (ExecutionChoice::projection_helpers): one block
// of the AVX-512 kernel's 6 rows, so each pass over W_ih serves a full
// register block; few enough that the recurrence waits little for its first.
constexpr int kHelperChunkRows = 6;

// The first stage of pipelined layers projects at most this many rows a
// chunk (where it chunks at all): the next stage waits for its first step.
constexpr int kPipelineLeadRows = 16;

// Steps a pipelined layer runs behind the layer before it on the same stage
// (engine.cpp, run_stage). Folded (batch 1), 16: at each 8th step it reads the
// inputs of the 8 after the next 8 (kernels.hpp, kProjectAhead). Otherwise
// kPipelineLeadRows rows: it projects the rows the layer before has made in
// one product, and a product of 16 rows fills the kernel's register blocks.
constexpr int pipeline_lag(int batch, bool folds) {
    return folds ? 16 : kPipelineLeadRows / batch > 1 ? kPipelineLeadRows / batch : 1;
}

// What the engine can execute: per direction, the number of workers that
// split the hidden units; whether the two directions of a bidirectional layer
// run at once on disjoint groups; whether the input projection of all steps
// is one product before the recurrence (the engine's only mode today).
struct ExecutionChoice {
    int workers = 1;
    bool side_by_side = false;
    bool input_fused_across_time = true;
    // Layers as a wavefront (one direction only): `workers` pipeline stages of
    // consecutive layers, one worker each; stage w runs step t while stage w+1
    // runs step t-1, with no barrier (partition.hpp, engine.cpp).
    bool pipelined = false;
    // GRU reset-before-matmul on >= 2 workers: GRNN's one-barrier form (each
    // worker owns whole chunks of units, computes their partial reset products
    // for every unit, and after the step's one barrier every worker reduces
    // them for all units) instead of two barriers per step (engine.cpp).
    bool rbm_one_barrier = false;
    // Critical path first (one forward direction, `workers` >= 2): worker 0
    // alone runs the recurrence, the chain every step waits on, with all of
    // every layer's weights; all `workers` project the inputs in chunks of
    // steps ahead of it, each chunk claimed by whichever worker is free
    // (engine.cpp). Where the projection is most of the work and a step
    // gains little from a second worker (E > H, small H), the projection
    // then overlaps the recurrence instead of preceding it.
    bool projection_helpers = false;
    int total_workers(int directions) const { return side_by_side ? directions * workers : workers; }
    // Workers that split the recurrence's hidden units.
    int recurrent_workers() const { return projection_helpers ? 1 : workers; }
    std::string str() const;  // "workers=2 side_by_side=0 input_fused=1 pipelined=0 rbm_one_barrier=0 helpers=0"
    bool operator==(const ExecutionChoice& o) const {
        return workers == o.workers && side_by_side == o.side_by_side &&
               input_fused_across_time == o.input_fused_across_time && pipelined == o.pipelined &&
               rbm_one_barrier == o.rbm_one_barrier && projection_helpers == o.projection_helpers;
    }
};

struct Candidate {
    ExecutionChoice choice;
    bool executable = false;  // the engine can run it: engine schedule and output tiling
    int schedule = 0;         // index into enumerate_schedules(...).distinct
    std::string schedule_text;
    std::string tiling;       // layer 0's partitioning per product, "h:1x2x1 L2" ...
    double bytes = 0;         // predicted L3<->L2 bytes per sequence, all layers and directions
    double seconds = 0;       // predicted time per sequence
};

// Every schedule x parallelism x {engine tiling, PCP tiling}, fastest
// predicted first (ties: fewer workers, then executable).
std::vector<Candidate> rank_candidates(const Problem& p, const MachineModel& machine);
std::vector<Candidate> rank_candidates(const Problem& p);  // default_machine()

// Index of the first executable candidate, or -1.
int best_executable(const std::vector<Candidate>& ranked);

// The longest run, in rows (steps x batch), predicted to finish sooner on the
// caller alone, every worker's share in turn, than on the pool: waking the
// workers (dispatch_s) is paid once per run, while their speedup is earned
// per step. 0 when the choice runs on one worker or the pool wins even at one
// row (weights too large for one core to fetch alone). Uses p.batch, not
// p.seq_len. With `hands_over`, a run on the pool starts on the caller and the
// workers join it once awake (engine.cpp, run_on_caller): the pool then only
// loses a run the caller alone finishes within the wake-up.
int serial_rows(const Problem& p, const MachineModel& machine, const ExecutionChoice& choice, bool hands_over = false);
// The seconds a run of p.seq_len steps of p.batch takes on the caller
// alone, every worker's share in turn: what serial_rows weighs against the pool.
double serial_seconds(const Problem& p, const MachineModel& machine, const ExecutionChoice& choice);

// Whether folding a batch-1 layer's input projection into its steps (kernels.hpp,
// gemv_with_projection) pays on `machine`, for one worker's blocks of
// `wh_bytes` of W_hh and `wx_bytes` of W_ih (f32, int8 on VNNI or bf16 on
// AVX512_BF16). Where both fit the usable L2, as this core's measured gain
// for that precision (fold_gain_l2, _int8, _bf16) says. Else a step reads a
// kProjectAhead-th of W_ih from L3 besides W_hh (each line once in
// kProjectAhead steps, so W_hh stays in an L2 that holds it and that share),
// and where W_hh would fit without the share it is pushed out to L3; the fold's
// multiply-adds hide under those
// reads, while up front the projection costs its multiply-adds at the FMA
// rate: it pays where the extra reads cost less.
bool fold_pays(const MachineModel& machine, double wh_bytes, double wx_bytes,
               WeightPrecision precision = WeightPrecision::f32);

// ---------------------------------------------------------------------------
// Calibration
// ---------------------------------------------------------------------------

struct CalibrationResult {
    int best = -1;                 // index of the fastest timed, else the first executable
    double best_seconds = 0;       // its measured time (0 if nothing was timed)
    int ran = 0;                   // candidates timed
    int runs = 0;                  // calls of time_one
    double spent_s = 0;            // max(wall clock, sum of measured times)
    std::vector<double> measured;  // per candidate: fastest run, or -1 if not timed
    std::string summary;           // one line for the log
};

// Times up to `max_candidates` executable candidates in rank order, each up
// to `runs_per_candidate` times (fastest run counts), within budget_s.
// time_one(c) runs the engine once with c.choice and returns seconds. A
// candidate starts only if its expected cost (predicted time scaled by what
// the first call of time_one cost, setup included) fits what is left; a
// candidate already twice slower than the best after one run is not repeated.
// prune = false (exhaustive) drops both rules: every candidate up to
// max_candidates gets all its runs, whatever the budget.
CalibrationResult calibrate(const std::vector<Candidate>& ranked, double budget_s,
                            const std::function<double(const Candidate&)>& time_one, int max_candidates = 8,
                            int runs_per_candidate = 3, bool prune = true);

// ---------------------------------------------------------------------------
// Plan cache
// ---------------------------------------------------------------------------

// Which machine a plan was measured on.
struct MachineId {
    std::string cpu;  // model name with anything but [!-~] and '"' replaced by '_'
    size_t l1d = 0, l2 = 0, l3 = 0;
    std::string line() const;  // "cpu=AMD_EPYC l1d=49152 l2=1048576 l3=33554432"
};
MachineId this_machine();
MachineId machine_id(const std::string& cpu_model, const CacheSizes& caches);

// The configuration a plan is for; batch is bucketed to the next power of two.
std::string plan_key(const Problem& p);

struct PlanEntry {
    ExecutionChoice choice;
    double seconds = 0;  // measured (stored in whole nanoseconds)
    int ran = 0;         // candidates calibration timed to find it
};

// The result of reading a cache file's text. Never trusted on any doubt.
struct PlanFile {
    bool ok = false;
    std::string error;  // why the text was rejected (empty when ok)
    std::map<std::string, PlanEntry> entries;  // by plan_key
};

// Strict parser over a buffer (fuzzable; never throws on any input): magic
// line, version, machine, plan lines with exact fields and ranges, and an end
// line with the entry count and an FNV-1a checksum of everything before it.
PlanFile parse_plan_cache(const char* data, size_t size, const std::string& version, const MachineId& machine);
std::string serialize_plan_cache(const std::map<std::string, PlanEntry>& entries, const std::string& version,
                                 const MachineId& machine);

// The process-wide cache: memory always, plus the file at `path` if not empty
// (read on lookup, merged and replaced atomically on store). Thread-safe.
// `message` receives why a file was ignored or could not be written.
bool plan_cache_lookup(const std::string& path, const std::string& key, const MachineId& machine, PlanEntry* out,
                       std::string* message);
bool plan_cache_store(const std::string& path, const std::string& key, const MachineId& machine,
                      const PlanEntry& entry, std::string* message);
void plan_cache_clear_memory();  // tests

// ---------------------------------------------------------------------------
// The engine's one call
// ---------------------------------------------------------------------------

struct PlanDecision {
    Candidate chosen;                         // executable; its choice is what to run
    std::vector<Candidate> candidates;        // ranked
    CalibrationResult calibration;            // ran = 0 unless timed
    bool from_cache = false;
    std::string how;                          // "analytic", "calibrated", "exhaustive" or "from the plan cache"
    std::vector<std::pair<LogLevel, std::string>> log;  // for Config::log
};

// heuristic: the best executable candidate by the model, no timing, no cache.
// calibrate: a cached plan if valid, else calibrate(budget_s) and store it.
// exhaustive: time every executable candidate (no budget), store the winner.
// Without time_one, calibrate and exhaustive fall back to heuristic.
PlanDecision choose_plan(const Problem& p, const MachineModel& machine, Tuning tuning, double budget_s,
                         const std::string& cache_path, const std::function<double(const Candidate&)>& time_one);

// The explanation of a decision: every candidate (the first `top` if top > 0),
// fastest predicted first, with its predicted L3<->L2 megabytes and time per
// sequence, its measured time if calibration timed it, and the winner with how
// it was chosen. choose_plan logs it at LogLevel::debug (so Config::log
// receives it at model creation); deeprnn-plan prints it.
std::string describe_candidates(const PlanDecision& d, int top = 0);

}  // namespace sched
}  // namespace detail
}  // namespace deeprnn
