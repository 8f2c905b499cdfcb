// deeprnn.hpp — the whole public API of deeprnn, written as its manual.
//
// deeprnn serves recurrent neural networks (LSTM, GRU, vanilla RNN; stacked,
// bidirectional, batched, variable-length, streaming) on the CPU, embedded in
// your program as two files: this header and the generated `deeprnn.cpp`.
// Whatever is not declared in this file outside `namespace deeprnn::detail` is
// not API.
//
// Index of this file
//   [SECTION] 1. Quick start
//   [SECTION] 2. Building
//   [SECTION] 3. Versioning
//   [SECTION] 4. Errors
//   [SECTION] 5. Configuration
//   [SECTION] 6. Tensors, weights and weight conventions (gate-order tables)
//   [SECTION] 7. Models
//   [SECTION] 8. Running a whole sequence
//   [SECTION] 9. Streaming
//   [SECTION] 10. Threading contract and lifetimes
//   [SECTION] 11. Numerics
//   [SECTION] 12. C API
//   [SECTION] 13. Sequence-to-sequence building blocks
//
// ---------------------------------------------------------------------------
// [SECTION] 1. Quick start
// ---------------------------------------------------------------------------
//
//     #include "deeprnn.hpp"
//     deeprnn::Weights w = deeprnn::load_npy_dir("my_lstm/");   // weight_ih_l0.npy ...
//     // or straight from PyTorch: strip_prefix(load_weights("model.pt"), "lstm.")
//     deeprnn::Config cfg = deeprnn::config_from_weights(
//         deeprnn::Cell::lstm, deeprnn::Convention::torch, w);
//     deeprnn::Model model(cfg, w);                 // weights copied; w may go
//     deeprnn::Session session(model);              // one per calling thread
//     std::vector<float> x(T * B * cfg.input_size), y(T * B * model.output_size());
//     deeprnn::RunInput in;  in.x = x.data();  in.seq_len = T;  in.batch = B;
//     deeprnn::RunOutput out; out.y = y.data();
//     session.run(in, out);                         // y is [T, B, D*H]
//
// ---------------------------------------------------------------------------
// [SECTION] 2. Building
// ---------------------------------------------------------------------------
//
//   Two files:     g++ -std=c++17 -O3 deeprnn.cpp app.cpp -lopenblas -lboost_thread
//   Submodule:     add_subdirectory(deeprnn)  then link deeprnn::deeprnn
//   Installed:     find_package(deeprnn CONFIG REQUIRED) or pkg-config deeprnn
//
//   No macro is required. Dependencies: xsimd (headers only), Boost.Thread, and
//   OpenBLAS in the link line (the CPU engine itself calls no BLAS routine: its
//   packed kernels are faster here; docs/ENGINE.md). ABI: use the sources; no stable binary interface is promised
//   across versions (compile deeprnn.cpp with your program).
//
#ifndef DEEPRNN_HPP
#define DEEPRNN_HPP

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// ---------------------------------------------------------------------------
// [SECTION] 3. Versioning
// ---------------------------------------------------------------------------
// The version is a string and one integer (major*10000 + minor*100 + patch);
// version_number() returns the value the library was compiled with, so a
// header/library mismatch is detectable at run time.
#define DEEPRNN_VERSION_MAJOR 0
#define DEEPRNN_VERSION_MINOR 1
#define DEEPRNN_VERSION_PATCH 0
#define DEEPRNN_VERSION_STRING "0.1.0"
#define DEEPRNN_VERSION_NUMBER 100

namespace deeprnn {

/// The library's version string, e.g. "0.1.0".
const char* version();
/// The library's version integer; equals DEEPRNN_VERSION_NUMBER when header and library match.
int version_number();
/// One line per fact: version, compiler, CPU features detected, SIMD path chosen, the cores (their
/// capacities where they differ) and any cgroup CPU quota, BLAS, CUDA.
std::string build_info();

// ---------------------------------------------------------------------------
// [SECTION] 4. Errors
// ---------------------------------------------------------------------------
// Every public entry point validates its arguments. Invalid arguments, malformed
// files and impossible configurations throw deeprnn::Error, whose message names
// the field and the value, e.g.
//   "Config.hidden_size = 0: must be at least 1".
// After a throw, no object is left half-built and no output is partly written
// in a way you should trust. Nothing in deeprnn calls abort() on bad input.

/// The one exception type deeprnn throws for bad input or impossible requests.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// ---------------------------------------------------------------------------
// [SECTION] 5. Configuration
// ---------------------------------------------------------------------------
// One plain aggregate. Start from the defaults, set what you need, pass it to
// Model. Model validates it and names any bad field.

/// Recurrent cell type.
enum class Cell { lstm, gru, rnn_tanh, rnn_relu };

/// GRU candidate-state formula (ignored for other cells).
///   linear_before_reset: n = tanh(Wx + b_in + r*(Uh + b_hn))   PyTorch, cuDNN,
///                        ONNX linear_before_reset=1, Keras reset_after=True.
///   reset_before_matmul: n = tanh(Wx + b_in + U(r*h) + b_hn)   Cho et al. 2014,
///                        ONNX default (linear_before_reset=0), Keras reset_after=False.
enum class GruVariant { linear_before_reset, reset_before_matmul };

/// The gate activation of LSTM (i, f, o) and GRU (r, z) cells; candidates and
/// states keep theirs (CellActivation).
///   sigmoid:      1 / (1 + exp(-x)): PyTorch, ONNX's default, tf.keras and
///                 Keras >= 2.3.
///   hard_sigmoid: clamp(alpha*x + beta, 0, 1), Config::hard_sigmoid_alpha
///                 and _beta: the default recurrent_activation of Keras
///                 before 2.3 (alpha 0.2, beta 0.5), ONNX HardSigmoid. A
///                 Keras model trained with it gives wrong outputs under
///                 sigmoid, and nothing in its weights says which it used.
enum class GateActivation { sigmoid, hard_sigmoid };

/// The activation of LSTM's candidate g and cell output (h = o * act(c)) and
/// of GRU's candidate n; the gates keep theirs (GateActivation).
///   tanh: every framework's default.
///   relu: max(x, 0), Keras activation='relu', ONNX activations [.., Relu,
///         Relu]. As with gates, a Keras model trained with it gives wrong
///         outputs under tanh, and nothing in its weights says which it used.
///         The state is then unbounded; a vanilla RNN takes Cell::rnn_relu.
enum class CellActivation { tanh, relu };

/// Which way each layer runs over time. `reverse` is a single layer that runs
/// from each sequence's last valid step back to step 0 (ONNX direction="reverse").
enum class Direction { forward, reverse, bidirectional };

/// Naming, gate order and layout of the weights handed to Model (section 6).
enum class Convention { torch, onnx, keras };

/// Where the model runs (docs/CUDA.md). `cpu`: always the CPU engine. `cuda`:
/// the CUDA backend; a deeprnn::Error names Config.backend when the program
/// was built without it (build with `make CUDA=1`, `cmake -DDEEPRNN_CUDA=ON`,
/// or link deeprnn_cuda.o), when no device of compute capability >= 8.0 is
/// usable (with CUDA's own message), or names the field it does not support
/// (proj_size, weight_precision). `auto_`: CUDA when built in, supported and
/// a device is usable, else the CPU; Model::plan() says which and why.
/// On the GPU results are float32 like the CPU's but not bit-identical to it
/// (~1e-6: CUDA's tanhf/expf) nor across stream chunk sizes. The CUDA backend
/// has not yet been run on a GPU (docs/CUDA.md, "What was run").
enum class Backend { auto_, cpu, cuda };

/// How the recurrent weights are stored (docs/PRECISION.md). Inputs, states,
/// activations and every sum stay float32; the stored weights shrink, so
/// each step reads fewer bytes (a batch-1 step is bound by those bytes).
/// Where the CPU has dot products for them (AVX512_BF16 for bf16,
/// AVX512-VNNI for int8) every product also rounds its operand, the layer
/// input or h, to bf16 or 8 bits per row and call, and does 2x / 4x the
/// multiply-adds of an f32 FMA per instruction; Model::plan() says so.
///   f32:  exact (the default).
///   bf16: round-to-nearest-even bfloat16, half the bytes; output relative L2
///         error vs f32 about 5e-4 widened to f32 (up to 2e-3 measured, every
///         cell), 1-3e-3 with AVX512_BF16 dot products (up to 3.3e-3).
///   int8: symmetric int8 with one float scale per output row (max |w| / 127,
///         computed at model creation, no calibration data), a quarter of the
///         bytes; output relative L2 error vs f32 about 1.3e-3 (up to 4.4e-3),
///         3-10e-3 with VNNI dot products.
/// The input projection (compute-bound, all steps at once) keeps f32 weights
/// where the CPU has no such dot products.
/// A NaN weight makes its outputs NaN at every precision (an Inf one too in int8,
/// whose row scale cannot be finite).
/// The plan search never changes the precision: it is what you set.
enum class WeightPrecision { f32, bf16, int8 };

/// How the execution plan is chosen at model creation, for runs of batch 1 and
/// Config::tuning_seq_len steps (a larger batch may get its own plan: section 7).
///   heuristic: analytic choice only, no timing (fast, deterministic start).
///   calibrate: time the few best analytic candidates on this machine.
///   exhaustive: time every candidate (slow; for studying plans).
/// Timed runs are of tuning_seq_len steps (at most 1024). Set it to the length
/// your runs typically have: a short run favours fewer workers and no pipeline
/// (whose layers start one after another), a long one the opposite.
enum class Tuning { heuristic, calibrate, exhaustive };

/// Severity of a log message.
enum class LogLevel { debug, info, warning };

/// Receives the library's log messages (plan choice, fallbacks such as "no
/// pinning", warnings). Called on the thread that triggered the message.
using LogCallback = void (*)(LogLevel level, const char* message, void* user);

namespace detail { class WeightCentricPool; struct PoolAccess; }

/// Pinned worker threads that several models can share (section 10), set in
/// Config::pool. Copies are handles to the same workers; the threads end when
/// the last handle and the last model using them are gone.
class WorkerPool {
public:
    /// An empty handle: a model given one creates its own workers.
    WorkerPool() = default;
    /// Creates `threads` workers (0 = as Config::threads = 0; at most 1024), pinned
    /// one per core when `pin_threads` is set, napping `idle_nap_ms` after each
    /// run (as Config::idle_nap_ms). Throws Error naming a bad argument.
    explicit WorkerPool(int threads, bool pin_threads = true, double idle_nap_ms = 10.0);
    /// True when this handle holds workers.
    explicit operator bool() const { return impl_ != nullptr; }
    /// Number of workers; 0 for an empty handle.
    int threads() const;
    /// "1 worker pinned to cores 1, worker 0 the calling thread" (where they are now, and how often one moved off a caller's core), or why they are not pinned; "" for an empty handle.
    std::string pinning() const;
    /// Changes how long idle workers nap after a run, at any time, from any thread
    /// (e.g. 0 when the device goes on battery); napping workers see it within a nap.
    /// Throws Error naming a bad value, or for an empty handle.
    void set_idle_nap_ms(double idle_nap_ms);
    /// The current nap window in ms; 0 for an empty handle.
    double idle_nap_ms() const;

private:
    friend struct detail::PoolAccess;
    std::shared_ptr<detail::WeightCentricPool> impl_;
};

/// Everything that shapes a model. Defaults give a 1-layer forward LSTM.
struct Config {
    Cell cell = Cell::lstm;                              ///< cell type
    GruVariant gru_variant = GruVariant::linear_before_reset;  ///< GRU only
    Convention convention = Convention::torch;           ///< weight naming/order
    int input_size = 0;                                  ///< E, features per step (>= 1)
    int hidden_size = 0;                                 ///< H, units per layer and direction (>= 1)
    int num_layers = 1;                                  ///< L, stacked layers (>= 1)
    Direction direction = Direction::forward;            ///< D = 2 when bidirectional
    int proj_size = 0;                                   ///< P, LSTM projection (PyTorch); 0 = none, else < H
    bool peepholes = false;                              ///< LSTM peepholes (ONNX P tensor)
    float clip = 0.0f;                                   ///< ONNX cell clip: gate pre-activations clamped to [-clip, clip]; 0 = off
    GateActivation gate_activation = GateActivation::sigmoid;  ///< LSTM/GRU gates: sigmoid, or hard_sigmoid (Keras < 2.3)
    float hard_sigmoid_alpha = 0.2f;                     ///< hard_sigmoid's slope, finite and > 0 (Keras, ONNX: 0.2)
    float hard_sigmoid_beta = 0.5f;                      ///< hard_sigmoid's offset, finite (Keras, ONNX: 0.5)
    CellActivation cell_activation = CellActivation::tanh;  ///< LSTM/GRU candidate and cell output: tanh, or relu (Keras activation='relu')
    WeightPrecision weight_precision = WeightPrecision::f32;  ///< stored recurrent weights: f32, bf16, int8
    int max_batch = 64;                                  ///< largest batch a run may use (>= 1)
    int threads = 0;                                     ///< worker threads, at most the logical CPUs the process may use; 0 = all physical cores, at most the cgroup CPU quota rounded up (or all of pool's)
    bool pin_threads = true;                             ///< pin workers to cores where the OS allows (ignored with pool)
    double idle_nap_ms = 10.0;                           ///< after a run, idle workers nap this long (a run then needs no wake-up; ~30% of a core on a VM), then sleep; 0 = sleep at once, in [0, 10000] (ignored with pool)
    WorkerPool pool;                                     ///< workers shared with other models; empty = the model creates its own
    double activation_max_error = 0.0;                   ///< max abs error of tanh/sigmoid; 0 = float accuracy
    Backend backend = Backend::auto_;                    ///< cpu, cuda or auto
    Tuning tuning = Tuning::heuristic;                   ///< plan choice (section 7)
    double tuning_budget_seconds = 1.0;                  ///< time limit for calibration (> 0)
    int tuning_seq_len = 100;                            ///< steps of the run the plan is chosen for, ranked and timed (in [1, 1000000])
    long serial_rows = -1;                               ///< runs of <= this many rows (steps x batch) on the calling thread alone, at any batch; -1 = the plan's estimate per batch, 0 = never
    int fold_projection = -1;                            ///< batch 1: the input projection folded into the steps; -1 = where the machine model says it pays, 0 = never, 1 = wherever the kernels allow
    std::string plan_cache_path;                         ///< plan cache file; empty = in-memory only
    LogCallback log = nullptr;                           ///< log hook; nullptr = silent
    void* log_user = nullptr;                            ///< passed to log unchanged
};

/// Throws Error naming the first invalid field of `config`; returns normally if it is valid.
void validate(const Config& config);

/// Number of directions: 2 for bidirectional, else 1.
int num_directions(const Config& config);

/// Size of one direction's output and recurrent state: proj_size if set, else hidden_size.
int state_size(const Config& config);

/// Lower-case names used in messages and on the command line ("lstm", "linear-before-reset", ...).
const char* to_string(Cell cell);
const char* to_string(GruVariant variant);
const char* to_string(Direction direction);
const char* to_string(Convention convention);
const char* to_string(Tuning tuning);
const char* to_string(WeightPrecision precision);
const char* to_string(GateActivation activation);
const char* to_string(CellActivation activation);

// ---------------------------------------------------------------------------
// [SECTION] 6. Tensors, weights and weight conventions
// ---------------------------------------------------------------------------
// Weights arrive as named float32 tensors, named and laid out as the framework
// that trained them names them. Model converts gate order and bias layout and
// copies everything into its own packed layout.
//
// Gate order per convention (the library converts; you never reorder by hand):
//
//   cell   | torch (PyTorch)   | onnx            | keras
//   -------+-------------------+-----------------+-----------------------
//   LSTM   | i, f, g, o        | i, o, f, c      | i, f, c, o
//   GRU    | r, z, n           | z, r, h         | z, r, h
//   RNN    | (one gate)        | (one gate)      | (one gate)
//
// Tensor names and shapes (G gates, H hidden, E input, P projection, S = P or H):
//
//   torch, layer k, suffix "" or "_reverse":
//     weight_ih_l{k}{sfx} [G*H, E_k]   weight_hh_l{k}{sfx} [G*H, S]
//     bias_ih_l{k}{sfx}   [G*H]        bias_hh_l{k}{sfx}   [G*H]     (optional pair)
//     weight_hr_l{k}{sfx} [P, H]       (LSTM with proj_size)
//     or nn.LSTMCell / GRUCell / RNNCell's weight_ih, weight_hh, bias_ih,
//     bias_hh: one layer, the same cell (a model of it runs any number of steps).
//     A whole model's state_dict names them "<module>.weight_ih_l0": take the
//     module's with strip_prefix (a missing tensor's error names the prefix).
//   onnx (one operator's inputs; D = 1 or 2), prefix "" (one layer) or
//   "l{k}_" (stacked layers, one operator each, as load_onnx names them):
//     W [D, G*H, E_k]   R [D, G*H, H]   B [D, 2*G*H] = [Wb | Rb] (optional)
//     P [D, 3*H] peepholes in order i, o, f (LSTM, optional)
//   keras, prefix "" (one forward layer) or "l{k}_" / "l{k}_reverse_":
//     kernel [E_k, G*H]   recurrent_kernel [H, G*H]
//     bias [G*H], or [2, G*H] for GRU with reset_after=True (optional)
//     Keras before 2.3 defaulted to recurrent_activation='hard_sigmoid' (and
//     GRU reset_after=False): set Config::gate_activation = hard_sigmoid for
//     such a model, and Config::cell_activation = relu for one built with
//     activation='relu'; the weights cannot tell.
//
// E_k is input_size for k = 0 and D*S above. Missing biases are zeros. Names
// that are not weight names are ignored.

/// A dense, row-major float32 tensor that owns its data.
struct Tensor {
    std::vector<int64_t> shape;  ///< dimensions, outermost first
    std::vector<float> data;     ///< product(shape) values
    /// Number of elements implied by shape (1 for a scalar).
    int64_t numel() const;
};

/// Named tensors, as a framework names its parameters.
using Weights = std::map<std::string, Tensor>;

/// Reads a .npy file (format 1.0–3.0, little-endian f4/f8/i4/i8, C order); values become float32.
/// Integer values beyond 2^24 in magnitude are refused (they would not survive float32).
Tensor load_npy(const std::string& path);

/// Reads a .npy file of integers (i4/i8, or f4/f8 holding whole numbers) into int32 values.
std::vector<int32_t> load_npy_int(const std::string& path, std::vector<int64_t>* shape = nullptr);

/// Writes `tensor` as a little-endian float32 .npy (format 1.0).
void save_npy(const std::string& path, const Tensor& tensor);

/// Loads every `*.npy` file in `dir` as a tensor named after the file without ".npy".
Weights load_npy_dir(const std::string& dir);

/// Loads every tensor of a .safetensors file (F32, F64, F16, BF16 and I32/I64 up to
/// 2^24 become float32), memory-mapping the file while converting. Validates header,
/// dtypes, offsets and sizes first; a truncated or corrupt file throws Error naming the fault.
Weights load_safetensors(const std::string& path);

/// Loads every array of a NumPy .npz archive written by np.savez (stored members, each
/// a .npy read as load_npy reads it, CRC-checked), memory-mapping the file. A compressed
/// archive (np.savez_compressed) is refused with a message saying so.
Weights load_npz(const std::string& path);

/// Loads the tensors of a PyTorch torch.save file (.pt, .pth; PyTorch >= 1.6's zip
/// format), a state_dict or a checkpoint of them, without Python: its pickle is
/// read as data and never run. Every floating-point tensor (f32, f64, f16, bf16;
/// views too) reachable through dicts becomes float32, named by its keys joined
/// with "." ({"model": state_dict} gives "model.lstm.weight_ih_l0": strip_prefix
/// selects a module); other values are skipped. A whole pickled model, the
/// legacy format or a damaged file throws Error saying which.
Weights load_torch(const std::string& path);

/// Loads weights by what `path` is: a .safetensors, .npz, .pt or .pth file, a .npy
/// file (one tensor named after the file), a directory of .npy files, or an .onnx
/// file (load_onnx with index -1: its recurrent operator or stack of them).
Weights load_weights(const std::string& path);

/// The tensors of `weights` whose names begin with `prefix`, renamed without it;
/// the others dropped. Selects one module's tensors from a whole model's
/// state_dict: strip_prefix(load_weights("model.safetensors"), "encoder.lstm.")
/// (moves the tensors when given a temporary, copies nothing).
Weights strip_prefix(Weights weights, const std::string& prefix);

/// Reads the LSTM, GRU or RNN operator of an ONNX model file (no protobuf
/// library: the file's bytes are checked as they are read): its weights under
/// the operator's input names W, R, B, P (the onnx convention above), and in
/// *config, if given, config_from_weights(cell, onnx, weights) with the
/// operator's attributes: direction (reverse too), clip, linear_before_reset
/// (GRU), Relu (RNN), HardSigmoid gates with their activation_alpha / _beta
/// (LSTM, GRU), Relu for the candidate and cell output (LSTM [.., Relu, Relu],
/// GRU [.., Relu]: Config::cell_activation). index -1 takes the graph's recurrent operators: one, or
/// a stack of layers (one operator each, as PyTorch exports them: each reads
/// the previous one's Y through Squeeze, or Transpose [0, 2, 1, 3] and
/// Reshape, alone; same attributes), then named l0_W, l1_W, ...; operators
/// that are not one stack fail, naming them and why. k >= 0 takes the k-th
/// recurrent operator in graph order alone. The weights must be float32,
/// float64, float16 or bfloat16 tensors (converted to float32) stored in the file: initializers, or Constant operators'
/// values, either also through Identity operators. Refused, with a message naming
/// what was found: other activations (LSTM's g and h differing, or HardSigmoid
/// parameters that differ between directions), input_forget = 1,
/// external data, an initial state or sequence_lens stored in the graph
/// (deeprnn takes those per run). An operator with layout = 1 takes batch-major X and Y: run
/// it with RunInput::batch_first.
Weights load_onnx(const std::string& path, Config* config = nullptr, int index = -1);

/// Infers input_size, hidden_size, num_layers, direction, proj_size and peepholes
/// from the weights of `convention`, plus the convention's default GRU variant
/// (torch: linear-before-reset; onnx: reset-before-matmul; keras: from the bias
/// shape). Other fields keep their defaults. Throws Error if the weights are
/// incomplete or inconsistent.
Config config_from_weights(Cell cell, Convention convention, const Weights& weights);

// ---------------------------------------------------------------------------
// [SECTION] 7. Models
// ---------------------------------------------------------------------------

namespace detail { struct ModelImpl; class SessionImpl; }

/// An immutable network: validated configuration plus packed weights. Cheap to
/// copy (copies share the same immutable data). Safe to use from many threads.
class Model {
public:
    /// Validates `config`, checks and converts `weights` by config.convention
    /// (every expected tensor present with the right shape; extra layers are an
    /// error) and packs them. Throws Error naming the field or tensor at fault.
    Model(const Config& config, const Weights& weights);
    /// The validated configuration.
    const Config& config() const;
    /// Features per step of the output sequence: D * state_size(config).
    int output_size() const;
    /// Human-readable description of the execution plan chosen at creation.
    std::string plan() const;
    /// A hint that a run of `batch` sequences (in [1, config.max_batch]) is
    /// coming: wakes the model's workers and has each read its own weights back
    /// into its core's cache, then returns at once. After ~10 ms idle the
    /// weights have left the caches and the workers sleep; call this when a
    /// request arrives, before work of your own (feature extraction), so the
    /// run finds them warm (the calling thread's own share comes with its run).
    /// Never changes results; a no-op for one worker, while a run holds the
    /// pool or the workers are awake. Safe from any thread, also during runs.
    void prefetch(int batch = 1) const;

private:
    friend class Session;
    friend class Stream;
    std::shared_ptr<const detail::ModelImpl> impl_;
};

// ---------------------------------------------------------------------------
// [SECTION] 8. Running a whole sequence
// ---------------------------------------------------------------------------
// Layouts (T steps, B sequences, E input features, L layers, D directions,
// S state size, H hidden size):
//   x   [T, B, E]       or [B, T, E] with batch_first
//   y   [T, B, D*S]     or [B, T, D*S] with batch_first; forward direction first
//   h0, h_n [L*D, B, S] index = layer*D + direction (as PyTorch)
//   c0, c_n [L*D, B, H] LSTM only
// Lengths: lengths[b] in [0, T], any order. Sequence b runs steps 0..len-1;
// the reverse direction starts at step len-1; y is exactly 0 at steps >= len in
// every layer; h_n/c_n are the states after each sequence's last valid step
// (the initial state when len = 0).
// A zero initial state (h0 nullptr or all +0, finite weight_hh) skips step 0's
// recurrent product, which is exactly zero: same bits, half the weight reads of
// a one-step run (docs/ENGINE.md, "Step 0 from a zero state").

/// The inputs of one run. Pointers are borrowed for the duration of the call.
struct RunInput {
    const float* x = nullptr;         ///< input sequence (required)
    int seq_len = 0;                  ///< T >= 1
    int batch = 1;                    ///< B in [1, config.max_batch]
    bool batch_first = false;         ///< x and y are [B, T, ...]
    const int32_t* lengths = nullptr; ///< B valid lengths; nullptr = all T
    const float* h0 = nullptr;        ///< initial hidden states; nullptr = zeros
    const float* c0 = nullptr;        ///< initial cell states (LSTM); nullptr = zeros
};

/// Where a run writes. Any pointer may be nullptr to skip that output.
struct RunOutput {
    float* y = nullptr;    ///< output sequence
    float* h_n = nullptr;  ///< final hidden states
    float* c_n = nullptr;  ///< final cell states (LSTM)
};

/// Where one run's time went (Session::set_profiling, Stream::set_profiling). A worker's `seconds`
/// are those of its share of the run, waits included; `wait_seconds` of them
/// it spent waiting for other workers (the step barriers, a pipeline stage's
/// input, a helper's projection, a hand-over's join). Unequal `seconds -
/// wait_seconds` across workers mean unequal cores (another program on one,
/// a slower vCPU); waits that stay large with equal work mean synchronisation.
struct RunProfile {
    struct Worker {
        double seconds = 0;       ///< in its share of the run (0: it took no part)
        double wait_seconds = 0;  ///< of those, waiting for the others
    };
    double seconds = 0;            ///< the whole run, as its caller saw it
    std::vector<Worker> workers;   ///< one per worker of the model; [0] is the calling thread; empty: not profiled
};

/// "run 0.452 ms: worker 0 0.440 ms (0.031 waiting), worker 1 ...", or "not profiled".
std::string to_string(const RunProfile& profile);

/// Per-caller working memory for running a Model. Not thread-safe: use one per
/// thread. Keeps its model's data alive. Memory is allocated at construction
/// for max_batch and grows once if a longer sequence arrives, up to a segment's
/// worth of input projections (section 10); a run no longer and no wider than
/// one seen (with batch_first and y as then) allocates nothing, on any thread.
class Session {
public:
    explicit Session(const Model& model);
    ~Session();
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    /// Runs the whole sequence. Validates every field of `in` (and that `out`
    /// does not alias `in`); throws Error naming the field and value.
    void run(const RunInput& in, const RunOutput& out);

    /// While on (default off), each run records its RunProfile. Costs two clock
    /// reads per wait of each worker (about 0.05 us a step); never changes results.
    void set_profiling(bool on);
    /// The last run's profile since profiling was turned on; workers empty otherwise.
    const RunProfile& last_profile() const;

private:
    std::unique_ptr<detail::SessionImpl> impl_;
};

// ---------------------------------------------------------------------------
// [SECTION] 9. Streaming
// ---------------------------------------------------------------------------
// A Stream keeps the recurrent state of `batch` independent streams between
// calls, for real-time input (speech frames, tokens). Feeding a sequence in
// chunks gives bit for bit the same result as one run over the whole sequence.
// Bidirectional and reverse models need the future and are refused. Each push
// is a run of that many steps: set Config::tuning_seq_len to the usual chunk
// (1 for frame by frame) so the plan is chosen for such runs. A server's batch
// of live streams need not move in step: push with lengths gives each stream
// its own count of frames (0 for one with nothing new), and reset(b) starts a
// new sequence in slot b, each stream's results those of running it alone.

class Stream {
public:
    /// Creates a stream of `batch` in [1, max_batch] sequences with zero state.
    Stream(const Model& model, int batch = 1);
    ~Stream();
    Stream(Stream&&) noexcept;
    Stream& operator=(Stream&&) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    /// Feeds `frames` >= 1 steps x [frames, batch, E]; writes y [frames, batch, S]
    /// (y may be nullptr) and keeps the state.
    void push(const float* x, int frames, float* y);
    /// As push, but stream b takes only its first lengths[b] in [0, frames]
    /// frames of x (nullptr = all): a stream given 0 keeps its state, and its
    /// y rows past lengths[b] are 0. For live streams whose frames arrive
    /// unevenly; each stream's results are those of pushing it alone.
    void push(const float* x, int frames, float* y, const int32_t* lengths);
    /// Resets every state to zero.
    void reset();
    /// Resets stream `stream` in [0, batch) to zero state in every layer and
    /// keeps the others': a new sequence in a finished one's slot.
    void reset(int stream);
    /// Sets the states: h [L, batch, S], c [L, batch, H] (LSTM; nullptr = zeros).
    void set_state(const float* h, const float* c);
    /// Current hidden states [L, batch, S].
    const float* h() const;
    /// Current cell states [L, batch, H] (LSTM), else nullptr.
    const float* c() const;
    /// Number of streams.
    int batch() const;
    /// As Session's: while on, each push records its RunProfile.
    void set_profiling(bool on);
    /// The last push's profile since profiling was turned on; workers empty otherwise.
    const RunProfile& last_profile() const;

private:
    std::unique_ptr<detail::SessionImpl> impl_;
    std::vector<float> h_, c_;
    int batch_ = 1;
};

// ---------------------------------------------------------------------------
// [SECTION] 10. Threading contract and lifetimes
// ---------------------------------------------------------------------------
// - Model is immutable after construction: any number of threads may run the
//   same Model at once, each through its own Session or Stream. Results are
//   bit-identical to running them one after another.
// - A Model owns a pool of Config::threads workers (0 = one per physical
//   core, the big ones alone on a big.LITTLE chip, and the P-cores alone
//   on an Intel hybrid part with 4 or more, where the little ones
//   would slow every step more than they add (docs/ENGINE.md), at most the
//   process's cgroup CPU quota rounded up: a container
//   given 1.5 CPUs gets 2, one given 1 CPU gets 1, since two workers running
//   back to back in a 1-CPU quota stall for the rest of each 100 ms period;
//   an explicit count above it is logged as a warning; build_info() shows the
//   quota; an explicit count above the logical CPUs the process may run on
//   is lowered to them, since the extra workers could only take turns at
//   every step: Model::plan() says so and a log callback gets a warning; a
//   WorkerPool keeps the count it was made with): the calling thread of each run is worker 0, and workers 1..n-1
//   are threads created once and pinned one per core, fastest first (leaving
//   the core of the thread that built the pool to the callers, or a faster
//   one if that core is a little one; the cores other live
//   pools' workers hold last; past one per physical core, on the cores' SMT
//   siblings) when pin_threads is set;
//   a model whose plan needs one worker creates no thread and runs on the
//   caller. The cores are those the calling thread's affinity mask or the
//   main thread's allows (a thread the application pinned to one core does
//   not keep the workers off the others). A caller the OS has put on a
//   worker's core is moved off it for the run (its affinity mask is left as
//   it was); if its mask allows only such cores, that worker moves to a core
//   no worker holds (once; pinning() then names its new core); if there is none, the run stays on the caller
//   alone, and WorkerPool::pinning() / Model::plan() say the threads take
//   turns. Runs of one model share its pool and so execute one at a time.
//   For many concurrent small requests, batch them, or give each caller a
//   model with threads = 1. Where other programs keep every core busy, a run
//   on the pool now and then waits at its step barriers for their time
//   slices (tens of ms; docs/ENGINE.md, "The pool"): threads = 1 is steadier there.
// - Short runs (a Stream step, a few steps) run on the calling thread alone,
//   every worker's share in turn, when waking the pool would cost more than
//   the workers save: at most Config::serial_rows rows (steps x batch; -1 =
//   estimated from the plan's machine model for each power of two of the
//   batch, since a second core saves more per row at larger batches, shown by
//   Model::plan(); 0 = never). With -1, a short run that arrives back to back (within 50 us of
//   the session's previous run) or finds the workers awake pays no wake-up, only the
//   announcement of the run (measured once per process, ~1 us): it goes to the pool
//   unless the caller alone is faster even so. The results are bit-identical either way, and
//   runs on the caller alone do not queue for the pool.
// - A longer run that finds the workers idle starts on the calling thread,
//   every worker's share in turn, and the workers take over their shares at
//   the first step boundary after they have all woken, so the run does not
//   wait idle for the wake-up; if it ends first, it returns without them.
//   Again with the same bits. Where each worker's
//   input projection before step 0 is light (batch 1 with the projection
//   folded into the steps, or a few rows), and in a "critical path first"
//   plan (below), whose helpers only take what the caller would otherwise
//   do; docs/ENGINE.md says where else. Only where the caller alone
//   finishes a step within the workers' wake-up: with longer steps (large
//   hidden sizes; Model::plan() says so) such a run waits for the workers.
// - The plan's machine model uses this core's L2, L3 and FMA rates, how much
//   of the L3 it reads at the L3 rate (a hypervisor may report far more), and
//   what folding the input projection into a batch-1 step gains here,
//   measured by running the kernels on the first model of the process (tens
//   of ms); they decide where that fold is made (Config::fold_projection = -1).
// - Pools shared between models: set Config::pool to one WorkerPool in every
//   model that should use the same workers (e.g. an encoder and a decoder, or
//   several small models on a 2-core device), instead of each model creating
//   threads of its own. Such a model plans for Config::threads workers (0 =
//   all of the pool's; more than the pool has is an Error naming
//   Config.threads) and uses workers 0..n-1. Runs of all the models sharing a
//   pool execute one at a time. Worker p keeps partition p of every sharing
//   model's weights, so the models' recurrent weights share each core's L2.
//   Destroying the WorkerPool handle while models use it is safe: they hold
//   the workers.
// - A plan may keep a whole forward model's recurrence on worker 0 and let
//   every worker project the inputs in chunks of steps ahead of it ("critical
//   path first"; Model::plan() says so): where the input projection is most
//   of the work and a step gains little from a second core (an input wider
//   than a small hidden state). Same bits as any other plan.
// - Between runs, workers spin for ~50 us (so back-to-back requests start
//   fast), then nap in 20 us timed sleeps until Config::idle_nap_ms (10 by
//   default) after the last run (a run then reaches them within about a
//   nap, and its thread makes no system call to wake them; napping cost
//   ~30% of a core on a VM, less on bare metal), then sleep: an idle model
//   uses no CPU. idle_nap_ms = 0 saves that CPU (on battery, say) and costs
//   a run after a pause the wake-up (tens of us); WorkerPool::set_idle_nap_ms
//   changes a shared pool's window while it runs. Workers of a shared pool
//   that a model's runs do not use (n..) take no part in them: they nap out
//   their window after their own last run and sleep through the others'.
// - Session and Stream are not thread-safe; one thread at a time each.
// - Sessions and Streams hold a reference to their model's data: destroying
//   the Model object while they are alive is safe; the pool's threads end
//   when the last of them is gone.
// - Weights passed to Model are copied; free them whenever you like.
// - Pointers in RunInput/RunOutput are borrowed only during the call.
// - A run allocates nothing once its Session has seen sizes at least as
//   large, the same batch_first and y or not (the first run of a longer
//   sequence grows the buffers once). A
//   long run is computed segment by segment (at least 256 steps each, more
//   while 16 MiB of input projections hold them), with the same bits as one
//   pass, so a forward-only model's Session does not grow with the sequence
//   (batch_first runs are transposed a segment at a time). A model with a
//   reverse direction runs layer by layer, each direction in segments (the
//   reverse one from the end): only the outputs between its layers, which
//   the next layer needs whole, grow with the sequence (none with one
//   layer). int8 and bf16 dot-product kernels convert their input on the
//   stack, 64 KiB at a time, so no thread of a run allocates either: a
//   thread that runs models needs about 96 KiB of stack (checked with an
//   int8 and a bf16 model on a thread given exactly that).

// ---------------------------------------------------------------------------
// [SECTION] 11. Numerics
// ---------------------------------------------------------------------------
// - Arithmetic and states are float32; products accumulate in float32 with
//   fused multiply-adds, each output summed in one fixed order. So outputs
//   are identical across thread counts, batch compositions and stream chunk
//   sizes (on one machine; a CPU with a different SIMD width may round
//   differently in the last bit).
// - With activation_max_error = 0, tanh and sigmoid are accurate to a few ulp
//   and outputs match PyTorch's float32 results to about 1e-6 relative.
// - clip (ONNX) clamps every gate pre-activation, after peepholes, before its
//   activation; the cell state itself is not clipped.
// - hard_sigmoid gates are one fused multiply-add clamped to [0, 1] (after
//   clip); NaN passes through them, and through relu (cell_activation).
// - NaN in an input, an initial state or a weight makes exactly the outputs
//   that depend on it NaN, at every precision and thread count; the other
//   sequences of the batch and the earlier steps keep their values bit for
//   bit. An Inf follows IEEE arithmetic in f32 (a saturated gate, or NaN where
//   it meets -Inf or 0); with bf16 or int8 weights it may give NaN instead (an
//   int8 weight rounded to 0, or an Inf state quantised on AVX512-VNNI, makes
//   0 * Inf). Neither causes a crash or a hang, and a Stream is clean again
//   after reset(). test/test_reliability.cpp checks all of it.
// - Tiny and denormal values: int8 on AVX512-VNNI quantises a row of h whose
//   largest |h| is below 2^-100 after scaling it up by 2^100 (exactly), so its
//   error stays about 1e-2 of the outputs' size however small they are. bf16
//   on AVX512_BF16 computes its products (the input projection and the
//   recurrent ones) with vdpbf16ps, which treats denormal operands and
//   results as zero: there, values below ~1e-37 are accurate to ~1e-37
//   absolute only.

// ---------------------------------------------------------------------------
// [SECTION] 13. Sequence-to-sequence building blocks
// ---------------------------------------------------------------------------
// The pieces of an attention encoder-decoder (a chatbot, a translator) around
// the recurrent Model: token embeddings, dense layers, attention over encoder
// outputs, one decoder step, and beam search. Weights use PyTorch's layouts
// (nn.Embedding.weight [V, E], nn.Linear.weight [O, I]) and are copied at
// construction; Embedding, Dense, Attention and Decoder are immutable and
// cheap to copy (copies share the data), like Model. DecoderState is the
// per-caller part, like Stream: one thread at a time. Unlike Session::run,
// these calls allocate small scratch buffers as they go. samples/chatbot/ uses
// all of it; docs/CHATBOT.md explains the model.
//
// Layouts (S source steps, B sequences, He encoder features, Hd query size):
//   encoder outputs [S, B, He] time-major, as Session::run writes y
//   lengths [B] in [1, S]: positions s >= lengths[b] get exactly zero weight
//   context [B, He], attention weights [B, S] (each row sums to 1)
//
// Decoder step (Bahdanau order; h = top-layer state of the recurrent model):
//   context, weights = attention(h_{t-1}, encoder outputs)
//   h_t    = rnn([embedding(token_{t-1}) ; context], h_{t-1})
//   logits = output([h_t ; context])

/// Activation applied by a Dense layer after its product.
enum class Activation { none, tanh, relu, sigmoid };
const char* to_string(Activation activation);

namespace detail { struct EmbeddingImpl; struct DenseImpl; struct AttentionImpl; struct DecoderImpl; }

/// A token embedding table (nn.Embedding): row i is token i's vector.
class Embedding {
public:
    /// `table` [V, E], V, E >= 1, copied. Throws Error naming the shape otherwise.
    explicit Embedding(const Tensor& table);
    int vocab_size() const;  ///< V
    int dim() const;         ///< E
    /// out[i] <- row ids[i], out [n, E] (row stride `ld_out`, >= E; 0 = E). Throws Error
    /// naming the first id outside [0, V) before writing anything.
    void lookup(const int32_t* ids, int n, float* out, size_t ld_out = 0) const;

private:
    std::shared_ptr<const detail::EmbeddingImpl> impl_;
};

/// y = act(x·Wᵀ + b), a fully connected layer (nn.Linear and an activation).
class Dense {
public:
    /// `weight` [O, I], `bias` [O] or nullptr (zeros); copied and packed for the
    /// engine's kernels. Throws Error naming the tensor and its shape.
    Dense(const Tensor& weight, const Tensor* bias = nullptr, Activation activation = Activation::none);
    int in_features() const;   ///< I
    int out_features() const;  ///< O
    Activation activation() const;
    /// x [rows, I] -> y [rows, O], rows >= 0; y must not overlap x. Allocates a
    /// scratch block only when O is not a multiple of the SIMD width.
    void forward(const float* x, int rows, float* y) const;

private:
    std::shared_ptr<const detail::DenseImpl> impl_;
};

/// How a query is scored against each encoder output e.
///   dot:      score = h·e                            (Luong; Hd = He)
///   general:  score = h·(W e)                        (Luong; W [Hd, He] = nn.Linear(He, Hd).weight)
///   additive: score = v·tanh(Wq h + bq + Wk e + bk)   (Bahdanau; Wq [A, Hd], Wk [A, He], v [A])
enum class AttentionScore { dot, general, additive };
const char* to_string(AttentionScore score);

/// Attention over encoder outputs with a length mask; weights = softmax of the scores.
class Attention {
public:
    /// Luong dot attention over `size` = Hd = He features.
    static Attention dot(int size);
    /// Luong general: `w` [Hd, He]. A bias of that Linear is not needed: it adds the
    /// same amount to every position's score, which the softmax cancels.
    static Attention general(const Tensor& w);
    /// Bahdanau additive: `query` maps Hd -> A, `keys` maps He -> A (both Activation::none),
    /// `v` [A]. Throws Error naming the mismatched size.
    static Attention additive(const Dense& query, const Dense& keys, const Tensor& v);

    AttentionScore score() const;
    int query_size() const;    ///< Hd
    int encoder_size() const;  ///< He
    /// query [B, Hd], encoder outputs enc [S, B, He], lengths [B] (nullptr = all S):
    /// writes context [B, He] and, if not nullptr, weights [B, S]. Throws Error
    /// naming the field for S or B < 1 and for lengths outside [1, S].
    void attend(const float* query, const float* enc, int S, int B, const int32_t* lengths, float* context,
                float* weights = nullptr) const;

private:
    explicit Attention(std::shared_ptr<const detail::AttentionImpl> impl);
    std::shared_ptr<const detail::AttentionImpl> impl_;
};

/// An attention decoder: embedding, a forward recurrent model (GRU, LSTM or RNN,
/// any number of layers, input_size = E + He), attention (query = the top layer's
/// state, Hd = state_size), and the output layer (in_features = state_size + He,
/// out_features = V). Shares, never copies, the parts' weights.
class Decoder {
public:
    /// Throws Error naming the part whose size does not fit the others.
    Decoder(const Embedding& embedding, const Model& rnn, const Attention& attention, const Dense& output);
    int vocab_size() const;    ///< V, the output layer's size
    int encoder_size() const;  ///< He
    const Model& rnn() const;

private:
    friend class DecoderState;
    std::shared_ptr<const detail::DecoderImpl> impl_;
};

/// The per-hypothesis state of a Decoder: a Stream of `batch` rows (its own
/// recurrent state and scratch) plus a copy of the encoder outputs it attends to.
class DecoderState {
public:
    /// `batch` in [1, rnn.config().max_batch].
    DecoderState(const Decoder& decoder, int batch);
    /// Starts new sequences: enc [S, batch, He] and lengths [batch] (nullptr = all S)
    /// are copied; h0 [L, batch, Sd] and c0 [L, batch, H] (LSTM) are the initial
    /// decoder states (nullptr = zeros).
    void start(const float* enc, int S, const int32_t* lengths, const float* h0 = nullptr, const float* c0 = nullptr);
    /// One step for every row: tokens [batch] (the previous tokens) -> logits [batch, V];
    /// weights [batch, S] (attention of this step) if not nullptr. Throws Error naming
    /// a token outside [0, V) or a step before start().
    void step(const int32_t* tokens, float* logits, float* weights = nullptr);
    /// Row i takes the state (and encoder outputs) of row from[i], each in [0, batch).
    void reorder(const int32_t* from);
    int batch() const;
    int source_length() const;  ///< S of the last start(), 0 before
    /// The recurrent state, as Stream::h() / c(): [L, batch, Sd] and [L, batch, H].
    const Stream& stream() const;

private:
    std::shared_ptr<const detail::DecoderImpl> d_;
    Stream stream_;
    int batch_ = 1, S_ = 0;
    std::vector<float> enc_, x_, y_, ctx_, hc_, scratch_;
    std::vector<int32_t> lengths_;
};

/// Settings of beam_search. Scores are sums of log-probabilities (natural log);
/// a hypothesis of n tokens (its end token included) ranks by log_prob / n^alpha.
struct BeamOptions {
    int beam = 4;          ///< hypotheses kept per step, in [1, rnn max_batch]
    int max_length = 32;   ///< tokens generated at most (>= 1)
    float alpha = 0.0f;    ///< length normalisation exponent (>= 0); 0 = raw log-probability
    int start_token = 0;   ///< fed at the first step
    int end_token = 1;     ///< ends a hypothesis (included in tokens)
    int nbest = 1;         ///< hypotheses returned, in [1, beam]
};

/// One output sequence of beam_search.
struct Hypothesis {
    std::vector<int32_t> tokens;   ///< generated tokens (end token last when finished)
    float log_prob = 0.0f;         ///< Σ log p(token)
    float score = 0.0f;            ///< log_prob / tokens.size()^alpha, what the ranking uses
    bool finished = false;         ///< ended with end_token (else cut at max_length)
    std::vector<float> attention;  ///< [tokens.size(), S] weights of each step
};

/// Beam search for one source: enc [S, 1, He], h0 [L, 1, Sd] / c0 (nullptr = zeros).
/// Runs all live hypotheses of a step as one batch (a DecoderState of `beam` rows,
/// reordered between steps). An end token among a step's `beam` best candidates
/// ends that hypothesis. Stops when `beam` hypotheses have ended and no live one
/// scores above the beam-th best of them (exact for alpha = 0), or at max_length.
/// Returns the nbest best: finished hypotheses first, then (only if fewer than
/// nbest ended by max_length) unfinished ones; each group highest score first.
/// beam = 1 is greedy decoding.
/// Throws Error naming any invalid option.
std::vector<Hypothesis> beam_search(const Decoder& decoder, const float* enc, int S, const BeamOptions& options,
                                    const float* h0 = nullptr, const float* c0 = nullptr);

}  // namespace deeprnn

// ---------------------------------------------------------------------------
// [SECTION] 12. C API
// ---------------------------------------------------------------------------
// deeprnn_c.h declares a C interface to the same library, for C programs and
// FFIs (Python ctypes, C#, Rust): opaque model/session/stream handles, a plain
// deeprnn_config struct, status codes with a per-thread last-error message, no
// exceptions across the boundary. Its implementation is inside deeprnn.cpp.
// samples/python/ runs a model from Python; docs/PACKAGING.md covers building.

#endif  // DEEPRNN_HPP
