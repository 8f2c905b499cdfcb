/* deeprnn_c.h — the C API of deeprnn, for C programs and foreign-function
 * interfaces (Python ctypes, C#, Rust, ...). The C++ manual, deeprnn.hpp, is
 * the reference for what every field means; this header adds only what C needs.
 *
 * Building: the implementation is inside deeprnn.cpp, so there is nothing
 * else to compile. From C, compile deeprnn.cpp with a C++17 compiler and link
 * with it:
 *     g++ -std=c++17 -O3 -c deeprnn.cpp
 *     gcc -std=c11 -O2 -c app.c && g++ app.o deeprnn.o -o app -lopenblas -lboost_thread
 * For an FFI, build a shared library (samples/python/ uses it):
 *     g++ -std=c++17 -O2 -shared -fPIC deeprnn.cpp -o libdeeprnn.so -lopenblas -lboost_thread
 *
 * Contracts:
 * - Every function that can fail returns a deeprnn_status; DEEPRNN_OK is 0.
 *   After a failure, deeprnn_last_error() says what failed, naming the
 *   argument or field and its value, e.g.
 *   "deeprnn_stream_push: x_count = 3: must be at least frames*batch*input_size = 8".
 * - No C++ exception crosses this API and nothing aborts on bad input: null
 *   pointers, bad sizes, bad configurations and malformed files all return a status.
 * - Handles are opaque and explicit: each *_create has a *_destroy (which
 *   accepts NULL). A failed *_create sets *out to NULL.
 * - Threads: a model may be used by any number of threads at once; a session
 *   or stream by one thread at a time. The last-error message is per thread.
 * - Lifetimes: sessions and streams keep their model's data alive, so a
 *   model may be destroyed before them. Weight buffers passed to
 *   deeprnn_model_create are copied. Input and output buffers are borrowed
 *   for the duration of a call only.
 * - Sizes: every buffer is passed with its length in elements (*_count),
 *   checked against what the call will read or write.
 * - ABI: structs and enums may grow between versions; compare
 *   deeprnn_version_number() with the version you built against.
 */
#ifndef DEEPRNN_C_H
#define DEEPRNN_C_H

#include <stddef.h>
#include <stdint.h>

#ifndef DEEPRNN_C_API
#if defined(__GNUC__)
#define DEEPRNN_C_API __attribute__((visibility("default")))
#else
#define DEEPRNN_C_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Result of every call that can fail. */
typedef enum deeprnn_status {
    DEEPRNN_OK = 0,
    DEEPRNN_ERROR_ARGUMENT = 1,      /* an argument, a config field or the weights are invalid */
    DEEPRNN_ERROR_FILE = 2,          /* a weight file cannot be read or is malformed */
    DEEPRNN_ERROR_OUT_OF_MEMORY = 3, /* an allocation failed */
    DEEPRNN_ERROR_INTERNAL = 4       /* a bug in deeprnn; the message says what */
} deeprnn_status;

/* Enumerations; the values equal the C++ enumerators' (deeprnn.hpp section 5). */
typedef enum deeprnn_cell { DEEPRNN_CELL_LSTM, DEEPRNN_CELL_GRU, DEEPRNN_CELL_RNN_TANH, DEEPRNN_CELL_RNN_RELU } deeprnn_cell;
typedef enum deeprnn_gru_variant { DEEPRNN_GRU_LINEAR_BEFORE_RESET, DEEPRNN_GRU_RESET_BEFORE_MATMUL } deeprnn_gru_variant;
typedef enum deeprnn_direction { DEEPRNN_FORWARD, DEEPRNN_REVERSE, DEEPRNN_BIDIRECTIONAL } deeprnn_direction;
typedef enum deeprnn_convention { DEEPRNN_TORCH, DEEPRNN_ONNX, DEEPRNN_KERAS } deeprnn_convention;
typedef enum deeprnn_backend { DEEPRNN_BACKEND_AUTO, DEEPRNN_BACKEND_CPU, DEEPRNN_BACKEND_CUDA } deeprnn_backend;
typedef enum deeprnn_tuning { DEEPRNN_TUNING_HEURISTIC, DEEPRNN_TUNING_CALIBRATE, DEEPRNN_TUNING_EXHAUSTIVE } deeprnn_tuning;
typedef enum deeprnn_weight_precision { DEEPRNN_WEIGHTS_F32, DEEPRNN_WEIGHTS_BF16, DEEPRNN_WEIGHTS_INT8 } deeprnn_weight_precision;
typedef enum deeprnn_gate_activation { DEEPRNN_GATES_SIGMOID, DEEPRNN_GATES_HARD_SIGMOID } deeprnn_gate_activation;
typedef enum deeprnn_cell_activation { DEEPRNN_CELL_ACTIVATION_TANH, DEEPRNN_CELL_ACTIVATION_RELU } deeprnn_cell_activation;
typedef enum deeprnn_log_level { DEEPRNN_LOG_DEBUG, DEEPRNN_LOG_INFO, DEEPRNN_LOG_WARNING } deeprnn_log_level;

/* In a deeprnn_config shape field: take the value from the weights. */
#define DEEPRNN_FROM_WEIGHTS (-1)

/* Receives log messages (level is a deeprnn_log_level) on the thread that caused them. */
typedef void (*deeprnn_log_callback)(int level, const char* message, void* user);

/* Everything that shapes a model: deeprnn::Config as a plain C struct. Start
 * from deeprnn_config_default() so fields added later get their defaults.
 * Enumerated fields are ints holding the enum values above. */
typedef struct deeprnn_config {
    int cell;                     /* deeprnn_cell; default LSTM */
    int convention;               /* deeprnn_convention of the weight names; default TORCH */
    /* Shape: DEEPRNN_FROM_WEIGHTS (the default) infers the field from the
     * weights, as deeprnn::config_from_weights does; any other value is used as is. */
    int gru_variant;              /* deeprnn_gru_variant */
    int input_size;               /* E >= 1 */
    int hidden_size;              /* H >= 1 */
    int num_layers;               /* L >= 1 */
    int direction;                /* deeprnn_direction */
    int proj_size;                /* P: LSTM projection, 0 = none */
    int peepholes;                /* 0 or 1 (ONNX LSTM) */
    /* Run time. */
    float clip;                   /* ONNX cell clip; 0 = off */
    int max_batch;                /* largest batch of a run */
    int threads;                  /* worker threads, at most the logical CPUs; 0 = all physical cores */
    int pin_threads;              /* nonzero: pin workers to cores */
    double activation_max_error;  /* max abs error of tanh/sigmoid; 0 = float accuracy */
    int backend;                  /* deeprnn_backend */
    int tuning;                   /* deeprnn_tuning */
    double tuning_budget_seconds; /* time limit for calibration */
    const char* plan_cache_path;  /* NULL = in-memory only; copied */
    deeprnn_log_callback log;     /* NULL = silent */
    void* log_user;               /* passed to log unchanged */
    int weight_precision;         /* deeprnn_weight_precision of the recurrent weights; default F32 */
    struct deeprnn_pool* pool;    /* workers shared with other models (deeprnn_pool_create); NULL = the
                                   * model creates its own. deeprnn_model_config reports NULL. */
    long serial_rows;             /* runs of <= this many rows (steps x batch) on the calling thread
                                   * alone; -1 = the plan's estimate (default), 0 = never */
    int fold_projection;          /* batch 1: the input projection folded into the steps; -1 = where the
                                   * machine model says it pays (default), 0 = never, 1 = wherever allowed */
    double idle_nap_ms;           /* after a run, idle workers nap this long before they sleep (default 10);
                                   * 0 = sleep at once (saves CPU, a run after a pause pays the wake-up) */
    int tuning_seq_len;           /* steps of the run the plan is chosen for, ranked and timed (default 100) */
    int gate_activation;          /* deeprnn_gate_activation of LSTM/GRU gates; default SIGMOID; HARD_SIGMOID =
                                   * clamp(alpha*x + beta, 0, 1), Keras before 2.3 (from an ONNX file: the file's
                                   * unless set here) */
    float hard_sigmoid_alpha;     /* its slope, > 0 (default 0.2) */
    float hard_sigmoid_beta;      /* its offset (default 0.5) */
    int cell_activation;          /* deeprnn_cell_activation of LSTM/GRU candidates and LSTM's cell output;
                                   * default TANH; RELU = Keras activation='relu' (from an ONNX file: the
                                   * file's unless set here) */
    const char* weights_prefix;   /* NULL = every tensor; else only those named prefix + name, renamed name
                                   * (deeprnn::strip_prefix): one module of a whole model's state_dict, e.g.
                                   * "encoder.lstm."; ignored for .onnx files; deeprnn_model_config reports NULL */
} deeprnn_config;

/* One named float32 tensor, as a framework names its parameters (deeprnn.hpp section 6). */
typedef struct deeprnn_tensor {
    const char* name;      /* e.g. "weight_ih_l0" */
    const float* data;     /* product(shape) values, row-major */
    const int64_t* shape;  /* rank dimensions, outermost first */
    int rank;              /* 0 (a scalar) to 8 */
} deeprnn_tensor;

/* The inputs of one run; see deeprnn::RunInput for layouts. Zero-initialise, then set. */
typedef struct deeprnn_run_input {
    const float* x;          /* [T, B, E] ([B, T, E] with batch_first); required */
    size_t x_count;
    int seq_len;             /* T >= 1 */
    int batch;               /* B in [1, max_batch] */
    int batch_first;         /* nonzero: x and y are batch-major */
    const int32_t* lengths;  /* B valid lengths in [0, T]; NULL = all T */
    size_t lengths_count;
    const float* h0;         /* [L*D, B, S] initial hidden states; NULL = zeros */
    size_t h0_count;
    const float* c0;         /* [L*D, B, H] initial cell states (LSTM); NULL = zeros */
    size_t c0_count;
} deeprnn_run_input;

/* Where a run writes; NULL skips an output. */
typedef struct deeprnn_run_output {
    float* y;                /* [T, B, D*S] */
    size_t y_count;
    float* h_n;              /* [L*D, B, S] */
    size_t h_n_count;
    float* c_n;              /* [L*D, B, H] (LSTM) */
    size_t c_n_count;
} deeprnn_run_output;

typedef struct deeprnn_pool deeprnn_pool;       /* worker threads shared by models (deeprnn::WorkerPool) */
typedef struct deeprnn_model deeprnn_model;     /* immutable network */
typedef struct deeprnn_session deeprnn_session; /* per-thread memory for whole-sequence runs */
typedef struct deeprnn_stream deeprnn_stream;   /* recurrent state of `batch` live streams */

/* Version string ("0.1.0") and integer (major*10000 + minor*100 + patch) of the library. */
DEEPRNN_C_API const char* deeprnn_version(void);
DEEPRNN_C_API int deeprnn_version_number(void);
/* Build and machine facts, one per line (deeprnn::build_info); static storage. */
DEEPRNN_C_API const char* deeprnn_build_info(void);
/* A static name for a status, e.g. "DEEPRNN_ERROR_FILE". */
DEEPRNN_C_API const char* deeprnn_status_string(deeprnn_status status);
/* Message of this thread's last failed call ("" after a success); valid until its next call. */
DEEPRNN_C_API const char* deeprnn_last_error(void);

/* The defaults: LSTM, PyTorch names, every shape field DEEPRNN_FROM_WEIGHTS. */
DEEPRNN_C_API deeprnn_config deeprnn_config_default(void);

/* Creates `threads` pinned (if pin_threads) workers that models share through
 * deeprnn_config.pool; 0 = one per physical core. Runs of the models sharing
 * a pool execute one at a time. The pool may be destroyed while models use
 * it: they keep the workers until the last of them is destroyed. */
DEEPRNN_C_API deeprnn_status deeprnn_pool_create(int threads, int pin_threads, deeprnn_pool** pool);
DEEPRNN_C_API void deeprnn_pool_destroy(deeprnn_pool* pool);
/* Sets how long the pool's idle workers nap after a run, in ms (default 10; 0 = they sleep
 * at once, in [0, 10000]), at any time and from any thread (deeprnn::WorkerPool::set_idle_nap_ms). */
DEEPRNN_C_API deeprnn_status deeprnn_pool_set_idle_nap_ms(deeprnn_pool* pool, double idle_nap_ms);
/* Number of workers, and how they are pinned (lives as long as the pool); either pointer may be NULL. */
DEEPRNN_C_API deeprnn_status deeprnn_pool_info(const deeprnn_pool* pool, int* threads, const char** pinning);

/* Creates a model from a weight file or directory (deeprnn::load_weights: .safetensors,
 * .npz, .npy, or a directory of .npy). config NULL means deeprnn_config_default().
 * From an .onnx file (deeprnn::load_onnx: its LSTM, GRU or RNN operator, or a stack
 * of them) the operator sets cell and convention, every DEEPRNN_FROM_WEIGHTS field (GRU variant and
 * direction among them), and clip unless config's is nonzero. */
DEEPRNN_C_API deeprnn_status deeprnn_model_create_from_file(const char* path, const deeprnn_config* config,
                                                            deeprnn_model** model);
/* As create_from_file on an .onnx file (any name), with deeprnn::load_onnx's index: -1 the
 * graph's recurrent operator or stack, k >= 0 its k-th recurrent operator alone (e.g. an
 * encoder's or a decoder's); an index past the graph's operators is DEEPRNN_ERROR_FILE. */
DEEPRNN_C_API deeprnn_status deeprnn_model_create_from_onnx(const char* path, int index, const deeprnn_config* config,
                                                            deeprnn_model** model);
/* Creates a model from `count` named tensors (copied). config NULL means the defaults. */
DEEPRNN_C_API deeprnn_status deeprnn_model_create(const deeprnn_tensor* tensors, size_t count,
                                                  const deeprnn_config* config, deeprnn_model** model);
DEEPRNN_C_API void deeprnn_model_destroy(deeprnn_model* model);
/* The model's complete configuration, shapes resolved; strings live as long as the model. */
DEEPRNN_C_API deeprnn_status deeprnn_model_config(const deeprnn_model* model, deeprnn_config* config);
/* Features per input step (E) and per output step (D*S); either pointer may be NULL. */
DEEPRNN_C_API deeprnn_status deeprnn_model_sizes(const deeprnn_model* model, int* input_size, int* output_size);
/* The execution plan chosen at creation (deeprnn::Model::plan); lives as long as the model. */
DEEPRNN_C_API deeprnn_status deeprnn_model_plan(const deeprnn_model* model, const char** plan);
/* A hint that a run of `batch` sequences is coming (deeprnn::Model::prefetch): wakes the
 * model's workers, each reading its own weights back into its cache, and returns at once. */
DEEPRNN_C_API deeprnn_status deeprnn_model_prefetch(const deeprnn_model* model, int batch);

/* Whole sequences: one session per thread. */
DEEPRNN_C_API deeprnn_status deeprnn_session_create(const deeprnn_model* model, deeprnn_session** session);
DEEPRNN_C_API void deeprnn_session_destroy(deeprnn_session* session);
DEEPRNN_C_API deeprnn_status deeprnn_session_run(deeprnn_session* session, const deeprnn_run_input* in,
                                                 const deeprnn_run_output* out);
/* While on (default off), each run records where its time went (deeprnn::Session::set_profiling). */
DEEPRNN_C_API deeprnn_status deeprnn_session_set_profiling(deeprnn_session* session, int on);
/* The last profiled run (deeprnn::RunProfile): *seconds its time; per worker w < capacity,
 * worker_seconds[2*w] its seconds in the run and [2*w+1] those it waited for the others;
 * *workers the model's workers (0: not profiled). Any output pointer may be NULL. */
DEEPRNN_C_API deeprnn_status deeprnn_session_profile(const deeprnn_session* session, double* seconds,
                                                     double* worker_seconds, int capacity, int* workers);

/* Streaming (forward-only models): frames in, outputs out, state kept between calls.
 * Feeding a sequence in pieces gives bit for bit the result of one run. */
DEEPRNN_C_API deeprnn_status deeprnn_stream_create(const deeprnn_model* model, int batch, deeprnn_stream** stream);
DEEPRNN_C_API void deeprnn_stream_destroy(deeprnn_stream* stream);
/* x [frames, batch, E] in; y [frames, batch, S] out (y may be NULL). */
DEEPRNN_C_API deeprnn_status deeprnn_stream_push(deeprnn_stream* stream, const float* x, size_t x_count, int frames,
                                                 float* y, size_t y_count);
/* As deeprnn_stream_push, but stream b takes only its first lengths[b] in [0, frames] frames
 * (lengths: batch values, NULL = all); a stream given 0 keeps its state; its y rows past them are 0. */
DEEPRNN_C_API deeprnn_status deeprnn_stream_push_lengths(deeprnn_stream* stream, const float* x, size_t x_count,
                                                         int frames, const int32_t* lengths, float* y, size_t y_count);
/* Sets every state back to zero. */
DEEPRNN_C_API deeprnn_status deeprnn_stream_reset(deeprnn_stream* stream);
/* Sets stream `index` in [0, batch) back to zero state in every layer; the others keep theirs. */
DEEPRNN_C_API deeprnn_status deeprnn_stream_reset_one(deeprnn_stream* stream, int index);
/* As deeprnn_session_set_profiling / deeprnn_session_profile, per push (deeprnn::Stream::set_profiling). */
DEEPRNN_C_API deeprnn_status deeprnn_stream_set_profiling(deeprnn_stream* stream, int on);
DEEPRNN_C_API deeprnn_status deeprnn_stream_profile(const deeprnn_stream* stream, double* seconds,
                                                    double* worker_seconds, int capacity, int* workers);

#ifdef __cplusplus
}
#endif

#endif /* DEEPRNN_C_H */
