// capi.cpp — the C API (deeprnn_c.h): handles around the C++ classes.
//
// Every entry point runs its body inside guard(), which turns exceptions into
// a status and a thread-local message, so nothing is thrown across the C
// boundary. The C layer checks only what C++ cannot: null handles and the
// element counts of raw buffers. Everything else is the C++ API's own
// validation, whose messages already name the field.
#include "common.hpp"

#include "../deeprnn_c.h"

#include <memory>
#include <new>

// The C enums mirror the C++ ones value for value.
static_assert(DEEPRNN_CELL_RNN_RELU == static_cast<int>(deeprnn::Cell::rnn_relu), "deeprnn_cell");
static_assert(DEEPRNN_GRU_RESET_BEFORE_MATMUL == static_cast<int>(deeprnn::GruVariant::reset_before_matmul), "gru");
static_assert(DEEPRNN_BIDIRECTIONAL == static_cast<int>(deeprnn::Direction::bidirectional), "deeprnn_direction");
static_assert(DEEPRNN_KERAS == static_cast<int>(deeprnn::Convention::keras), "deeprnn_convention");
static_assert(DEEPRNN_BACKEND_CUDA == static_cast<int>(deeprnn::Backend::cuda), "deeprnn_backend");
static_assert(DEEPRNN_TUNING_EXHAUSTIVE == static_cast<int>(deeprnn::Tuning::exhaustive), "deeprnn_tuning");
static_assert(DEEPRNN_WEIGHTS_INT8 == static_cast<int>(deeprnn::WeightPrecision::int8), "deeprnn_weight_precision");
static_assert(DEEPRNN_LOG_WARNING == static_cast<int>(deeprnn::LogLevel::warning), "deeprnn_log_level");
static_assert(DEEPRNN_GATES_HARD_SIGMOID == static_cast<int>(deeprnn::GateActivation::hard_sigmoid), "deeprnn_gate_activation");
static_assert(DEEPRNN_CELL_ACTIVATION_RELU == static_cast<int>(deeprnn::CellActivation::relu), "deeprnn_cell_activation");

namespace {

// The C log callback, owned jointly by a model and everything created from
// it, because the C++ Config holds only a raw pointer to it.
struct CLog {
    deeprnn_log_callback fn;
    void* user;
};

void c_log(deeprnn::LogLevel level, const char* message, void* user) {
    const CLog* log = static_cast<const CLog*>(user);
    log->fn(static_cast<int>(level), message, log->user);
}

}  // namespace

struct deeprnn_pool {
    deeprnn::WorkerPool pool;
    std::string pinning;
};

struct deeprnn_model {
    deeprnn::Model model;
    std::shared_ptr<const CLog> log;
    std::string plan;
};

struct deeprnn_session {
    deeprnn::Model model;  // shares the data; gives the sizes for count checks
    deeprnn::Session session;
    std::shared_ptr<const CLog> log;
};

struct deeprnn_stream {
    deeprnn::Model model;
    deeprnn::Stream stream;
    std::shared_ptr<const CLog> log;
};

namespace {

using deeprnn::detail::fail;

thread_local std::string last_error;

// A load_weights failure, reported as DEEPRNN_ERROR_FILE.
struct FileError : deeprnn::Error {
    using deeprnn::Error::Error;
};

deeprnn_status failed(deeprnn_status status, const char* function, const char* message) noexcept {
    try {
        last_error = std::string(function) + ": " + message;
    } catch (...) {
        last_error.clear();  // no memory for the message; the status still tells
    }
    return status;
}

template <typename Body>
deeprnn_status guard(const char* function, Body&& body) noexcept {
    try {
        body();
        last_error.clear();
        return DEEPRNN_OK;
    } catch (const FileError& e) {
        return failed(DEEPRNN_ERROR_FILE, function, e.what());
    } catch (const deeprnn::Error& e) {
        return failed(DEEPRNN_ERROR_ARGUMENT, function, e.what());
    } catch (const std::bad_alloc&) {
        return failed(DEEPRNN_ERROR_OUT_OF_MEMORY, function, "out of memory");
    } catch (const std::exception& e) {
        return failed(DEEPRNN_ERROR_INTERNAL, function, e.what());
    } catch (...) {
        return failed(DEEPRNN_ERROR_INTERNAL, function, "unknown exception");
    }
}

void require_ptr(const void* p, const char* name) {
    if (!p) fail(name, " = NULL: required");
}

// An out-parameter handle: required, and NULL until the call succeeds.
template <typename T>
void require_out(T** out, const char* name) {
    require_ptr(out, name);
    *out = nullptr;
}

// Unless p is NULL, a buffer of `count` elements must hold the product of `dims`.
void require_count(const void* p, const char* field, size_t count, std::initializer_list<size_t> dims,
                   const char* formula) {
    if (!p) return;
    size_t need = 1;
    for (size_t d : dims)
        if (__builtin_mul_overflow(need, d, &need)) fail(field, " = ", count, ": ", formula, " overflows size_t");
    if (count < need) fail(field, " = ", count, ": must be at least ", formula, " = ", need);
}

// A RunProfile into deeprnn_session_profile's / deeprnn_stream_profile's outputs.
void copy_profile(const deeprnn::RunProfile& p, double* seconds, double* worker_seconds, int capacity, int* workers) {
    if (capacity < 0) fail("capacity = ", capacity, ": must be >= 0");
    if (capacity > 0) require_ptr(worker_seconds, "worker_seconds");
    if (seconds) *seconds = p.seconds;
    for (size_t w = 0; w < p.workers.size() && w < static_cast<size_t>(capacity); ++w) {
        worker_seconds[2 * w] = p.workers[w].seconds;
        worker_seconds[2 * w + 1] = p.workers[w].wait_seconds;
    }
    if (workers) *workers = static_cast<int>(p.workers.size());
}

deeprnn_config from_cpp(const deeprnn::Config& c, const CLog* log) {
    deeprnn_config r;
    r.cell = static_cast<int>(c.cell);
    r.convention = static_cast<int>(c.convention);
    r.gru_variant = static_cast<int>(c.gru_variant);
    r.input_size = c.input_size;
    r.hidden_size = c.hidden_size;
    r.num_layers = c.num_layers;
    r.direction = static_cast<int>(c.direction);
    r.proj_size = c.proj_size;
    r.peepholes = c.peepholes;
    r.clip = c.clip;
    r.max_batch = c.max_batch;
    r.threads = c.threads;
    r.pin_threads = c.pin_threads;
    r.activation_max_error = c.activation_max_error;
    r.backend = static_cast<int>(c.backend);
    r.tuning = static_cast<int>(c.tuning);
    r.tuning_budget_seconds = c.tuning_budget_seconds;
    r.tuning_seq_len = c.tuning_seq_len;
    r.plan_cache_path = c.plan_cache_path.empty() ? nullptr : c.plan_cache_path.c_str();
    r.log = log ? log->fn : nullptr;
    r.log_user = log ? log->user : nullptr;
    r.weight_precision = static_cast<int>(c.weight_precision);
    r.pool = nullptr;  // the C handle may be gone; the model keeps the workers
    r.weights_prefix = nullptr;  // the model keeps only the module's tensors
    r.serial_rows = c.serial_rows;
    r.fold_projection = c.fold_projection;
    r.idle_nap_ms = c.idle_nap_ms;
    r.gate_activation = static_cast<int>(c.gate_activation);
    r.hard_sigmoid_alpha = c.hard_sigmoid_alpha;
    r.hard_sigmoid_beta = c.hard_sigmoid_beta;
    r.cell_activation = static_cast<int>(c.cell_activation);
    return r;
}

// Out-of-range enum values pass through the casts; validate() names them.
deeprnn::Config to_cpp(const deeprnn_config& c, const deeprnn::Weights& weights) {
    using namespace deeprnn;
    const int from = DEEPRNN_FROM_WEIGHTS;
    Config r;
    if (c.gru_variant == from || c.input_size == from || c.hidden_size == from || c.num_layers == from ||
        c.direction == from || c.proj_size == from || c.peepholes == from)
        r = config_from_weights(static_cast<Cell>(c.cell), static_cast<Convention>(c.convention), weights);
    r.cell = static_cast<Cell>(c.cell);
    r.convention = static_cast<Convention>(c.convention);
    if (c.gru_variant != from) r.gru_variant = static_cast<GruVariant>(c.gru_variant);
    if (c.input_size != from) r.input_size = c.input_size;
    if (c.hidden_size != from) r.hidden_size = c.hidden_size;
    if (c.num_layers != from) r.num_layers = c.num_layers;
    if (c.direction != from) r.direction = static_cast<Direction>(c.direction);
    if (c.proj_size != from) r.proj_size = c.proj_size;
    if (c.peepholes != from) r.peepholes = c.peepholes != 0;
    r.clip = c.clip;
    r.max_batch = c.max_batch;
    r.threads = c.threads;
    r.pin_threads = c.pin_threads != 0;
    r.activation_max_error = c.activation_max_error;
    r.backend = static_cast<Backend>(c.backend);
    r.tuning = static_cast<Tuning>(c.tuning);
    r.tuning_budget_seconds = c.tuning_budget_seconds;
    r.tuning_seq_len = c.tuning_seq_len;
    r.plan_cache_path = c.plan_cache_path ? c.plan_cache_path : "";
    r.weight_precision = static_cast<WeightPrecision>(c.weight_precision);
    if (c.pool) r.pool = c.pool->pool;
    r.serial_rows = c.serial_rows;
    r.fold_projection = c.fold_projection;
    r.idle_nap_ms = c.idle_nap_ms;
    r.gate_activation = static_cast<GateActivation>(c.gate_activation);
    r.hard_sigmoid_alpha = c.hard_sigmoid_alpha;
    r.hard_sigmoid_beta = c.hard_sigmoid_beta;
    r.cell_activation = static_cast<CellActivation>(c.cell_activation);
    return r;
}

deeprnn_model* new_model(const deeprnn_config* config, const deeprnn::Weights& all) {
    const deeprnn_config c = config ? *config : deeprnn_config_default();
    const deeprnn::Weights module = c.weights_prefix ? deeprnn::strip_prefix(all, c.weights_prefix) : deeprnn::Weights();
    const deeprnn::Weights& weights = c.weights_prefix ? module : all;
    deeprnn::Config cfg = to_cpp(c, weights);
    std::shared_ptr<CLog> log;
    if (c.log) {
        log = std::make_shared<CLog>(CLog{c.log, c.log_user});
        cfg.log = c_log;
        cfg.log_user = log.get();
    }
    deeprnn::Model model(cfg, weights);
    const std::string plan = model.plan();
    return new deeprnn_model{std::move(model), std::move(log), plan};
}

// A model of the weights load_onnx read, with the operator's `from_file`
// settings: its cell and convention, and every field left at
// DEEPRNN_FROM_WEIGHTS (the GRU variant and direction among them); its clip
// unless config gives one, its gates unless config asks for hard_sigmoid, and
// its candidates' activation unless config asks for relu.
deeprnn_model* new_onnx_model(const deeprnn_config* config, const deeprnn::Weights& weights, const deeprnn::Config& from_file) {
    deeprnn_config c = config ? *config : deeprnn_config_default();
    c.weights_prefix = nullptr;  // load_onnx named them
    c.cell = static_cast<int>(from_file.cell);
    c.convention = DEEPRNN_ONNX;
    if (c.gru_variant == DEEPRNN_FROM_WEIGHTS) c.gru_variant = static_cast<int>(from_file.gru_variant);
    if (c.direction == DEEPRNN_FROM_WEIGHTS) c.direction = static_cast<int>(from_file.direction);
    if (c.clip == 0) c.clip = from_file.clip;
    if (c.gate_activation == DEEPRNN_GATES_SIGMOID) {
        c.gate_activation = static_cast<int>(from_file.gate_activation);
        c.hard_sigmoid_alpha = from_file.hard_sigmoid_alpha;
        c.hard_sigmoid_beta = from_file.hard_sigmoid_beta;
    }
    if (c.cell_activation == DEEPRNN_CELL_ACTIVATION_TANH) c.cell_activation = static_cast<int>(from_file.cell_activation);
    return new_model(&c, weights);
}

// The tensors of a weight file (load_onnx's with onnx_config), its faults reported as DEEPRNN_ERROR_FILE.
deeprnn::Weights read_file(const std::string& path, deeprnn::Config* onnx_config, int onnx_index) {
    try {
        return onnx_config ? deeprnn::load_onnx(path, onnx_config, onnx_index) : deeprnn::load_weights(path);
    } catch (const deeprnn::Error& e) {
        throw FileError(e.what());
    }
}

}  // namespace

extern "C" {

const char* deeprnn_version(void) { return deeprnn::version(); }
int deeprnn_version_number(void) { return deeprnn::version_number(); }

const char* deeprnn_build_info(void) {
    static const std::string info = [] {
        try {
            return deeprnn::build_info();
        } catch (...) {
            return std::string("deeprnn ") + deeprnn::version() + "\n(build info unavailable)\n";
        }
    }();
    return info.c_str();
}

const char* deeprnn_status_string(deeprnn_status status) {
    switch (status) {
        case DEEPRNN_OK: return "DEEPRNN_OK";
        case DEEPRNN_ERROR_ARGUMENT: return "DEEPRNN_ERROR_ARGUMENT";
        case DEEPRNN_ERROR_FILE: return "DEEPRNN_ERROR_FILE";
        case DEEPRNN_ERROR_OUT_OF_MEMORY: return "DEEPRNN_ERROR_OUT_OF_MEMORY";
        case DEEPRNN_ERROR_INTERNAL: return "DEEPRNN_ERROR_INTERNAL";
    }
    return "unknown deeprnn_status";
}

const char* deeprnn_last_error(void) { return last_error.c_str(); }

deeprnn_config deeprnn_config_default(void) {
    deeprnn_config c = from_cpp(deeprnn::Config(), nullptr);  // the C++ defaults, written once
    c.gru_variant = c.input_size = c.hidden_size = c.num_layers = c.direction = c.proj_size = c.peepholes =
        DEEPRNN_FROM_WEIGHTS;
    return c;
}

deeprnn_status deeprnn_model_create_from_file(const char* path, const deeprnn_config* config, deeprnn_model** model) {
    return guard(__func__, [&] {
        require_out(model, "model");
        require_ptr(path, "path");
        deeprnn::Config from_file;
        if (!deeprnn::detail::ends_with(path, ".onnx")) *model = new_model(config, read_file(path, nullptr, -1));
        else *model = new_onnx_model(config, read_file(path, &from_file, -1), from_file);
    });
}

deeprnn_status deeprnn_model_create_from_onnx(const char* path, int index, const deeprnn_config* config,
                                              deeprnn_model** model) {
    return guard(__func__, [&] {
        require_out(model, "model");
        require_ptr(path, "path");
        if (index < -1) fail("index = ", index, ": need -1 or an operator's index (>= 0)");
        deeprnn::Config from_file;
        *model = new_onnx_model(config, read_file(path, &from_file, index), from_file);
    });
}

deeprnn_status deeprnn_model_create(const deeprnn_tensor* tensors, size_t count, const deeprnn_config* config,
                                    deeprnn_model** model) {
    return guard(__func__, [&] {
        require_out(model, "model");
        if (count) require_ptr(tensors, "tensors");
        deeprnn::Weights weights;
        for (size_t i = 0; i < count; ++i) {
            const deeprnn_tensor& t = tensors[i];
            const std::string field = deeprnn::detail::cat("tensors[", i, "]");
            require_ptr(t.name, (field + ".name").c_str());
            if (t.rank < 0 || t.rank > 8) fail(field, ".rank = ", t.rank, ": must be in [0, 8]");
            if (t.rank) require_ptr(t.shape, (field + ".shape").c_str());
            deeprnn::Tensor tensor;
            tensor.shape.assign(t.shape, t.shape + t.rank);
            const int64_t n = tensor.numel();  // -1 for negative or overflowing shapes
            if (n < 0) fail(field, ".shape = ", deeprnn::detail::shape_str(tensor.shape), ": not a valid shape");
            if (n) require_ptr(t.data, (field + ".data").c_str());
            tensor.data.assign(t.data, t.data + n);
            if (!weights.emplace(t.name, std::move(tensor)).second)
                fail(field, ".name = '", t.name, "': appears twice");
        }
        *model = new_model(config, weights);
    });
}

deeprnn_status deeprnn_pool_create(int threads, int pin_threads, deeprnn_pool** pool) {
    return guard(__func__, [&] {
        require_out(pool, "pool");
        deeprnn::WorkerPool p(threads, pin_threads != 0);
        std::string pinning = p.pinning();
        *pool = new deeprnn_pool{std::move(p), std::move(pinning)};
    });
}

void deeprnn_pool_destroy(deeprnn_pool* pool) { delete pool; }

deeprnn_status deeprnn_pool_set_idle_nap_ms(deeprnn_pool* pool, double idle_nap_ms) {
    return guard(__func__, [&] {
        require_ptr(pool, "pool");
        pool->pool.set_idle_nap_ms(idle_nap_ms);
    });
}

deeprnn_status deeprnn_pool_info(const deeprnn_pool* pool, int* threads, const char** pinning) {
    return guard(__func__, [&] {
        require_ptr(pool, "pool");
        if (threads) *threads = pool->pool.threads();
        if (pinning) *pinning = pool->pinning.c_str();
    });
}

void deeprnn_model_destroy(deeprnn_model* model) { delete model; }

deeprnn_status deeprnn_model_config(const deeprnn_model* model, deeprnn_config* config) {
    return guard(__func__, [&] {
        require_ptr(model, "model");
        require_ptr(config, "config");
        *config = from_cpp(model->model.config(), model->log.get());
    });
}

deeprnn_status deeprnn_model_sizes(const deeprnn_model* model, int* input_size, int* output_size) {
    return guard(__func__, [&] {
        require_ptr(model, "model");
        if (input_size) *input_size = model->model.config().input_size;
        if (output_size) *output_size = model->model.output_size();
    });
}

deeprnn_status deeprnn_model_plan(const deeprnn_model* model, const char** plan) {
    return guard(__func__, [&] {
        require_out(plan, "plan");
        require_ptr(model, "model");
        *plan = model->plan.c_str();
    });
}

deeprnn_status deeprnn_model_prefetch(const deeprnn_model* model, int batch) {
    return guard(__func__, [&] {
        require_ptr(model, "model");
        model->model.prefetch(batch);
    });
}

deeprnn_status deeprnn_session_create(const deeprnn_model* model, deeprnn_session** session) {
    return guard(__func__, [&] {
        require_out(session, "session");
        require_ptr(model, "model");
        *session = new deeprnn_session{model->model, deeprnn::Session(model->model), model->log};
    });
}

void deeprnn_session_destroy(deeprnn_session* session) { delete session; }

deeprnn_status deeprnn_session_set_profiling(deeprnn_session* session, int on) {
    return guard(__func__, [&] {
        require_ptr(session, "session");
        session->session.set_profiling(on != 0);
    });
}

deeprnn_status deeprnn_session_profile(const deeprnn_session* session, double* seconds, double* worker_seconds,
                                       int capacity, int* workers) {
    return guard(__func__, [&] {
        require_ptr(session, "session");
        copy_profile(session->session.last_profile(), seconds, worker_seconds, capacity, workers);
    });
}

deeprnn_status deeprnn_session_run(deeprnn_session* session, const deeprnn_run_input* in,
                                   const deeprnn_run_output* out) {
    return guard(__func__, [&] {
        require_ptr(session, "session");
        require_ptr(in, "in");
        require_ptr(out, "out");
        const deeprnn::Config& c = session->model.config();
        if (in->seq_len >= 1 && in->batch >= 1) {  // else the C++ check names seq_len or batch
            const size_t T = in->seq_len, B = in->batch, E = c.input_size, H = c.hidden_size;
            const size_t D = deeprnn::num_directions(c), S = deeprnn::state_size(c), LD = c.num_layers * D;
            require_count(in->x, "in.x_count", in->x_count, {T, B, E}, "seq_len*batch*input_size");
            require_count(in->lengths, "in.lengths_count", in->lengths_count, {B}, "batch");
            require_count(in->h0, "in.h0_count", in->h0_count, {LD, B, S}, "layers*directions*batch*state_size");
            require_count(in->c0, "in.c0_count", in->c0_count, {LD, B, H}, "layers*directions*batch*hidden_size");
            require_count(out->y, "out.y_count", out->y_count, {T, B, D * S}, "seq_len*batch*output_size");
            require_count(out->h_n, "out.h_n_count", out->h_n_count, {LD, B, S}, "layers*directions*batch*state_size");
            require_count(out->c_n, "out.c_n_count", out->c_n_count, {LD, B, H}, "layers*directions*batch*hidden_size");
        }
        deeprnn::RunInput ri;
        ri.x = in->x;
        ri.seq_len = in->seq_len;
        ri.batch = in->batch;
        ri.batch_first = in->batch_first != 0;
        ri.lengths = in->lengths;
        ri.h0 = in->h0;
        ri.c0 = in->c0;
        deeprnn::RunOutput ro;
        ro.y = out->y;
        ro.h_n = out->h_n;
        ro.c_n = out->c_n;
        session->session.run(ri, ro);
    });
}

deeprnn_status deeprnn_stream_create(const deeprnn_model* model, int batch, deeprnn_stream** stream) {
    return guard(__func__, [&] {
        require_out(stream, "stream");
        require_ptr(model, "model");
        *stream = new deeprnn_stream{model->model, deeprnn::Stream(model->model, batch), model->log};
    });
}

void deeprnn_stream_destroy(deeprnn_stream* stream) { delete stream; }

// Both pushes, their errors under the caller's name.
static deeprnn_status push_stream(const char* function, deeprnn_stream* stream, const float* x, size_t x_count, int frames,
                                  const int32_t* lengths, float* y, size_t y_count) {
    return guard(function, [&] {
        require_ptr(stream, "stream");
        const deeprnn::Config& c = stream->model.config();
        if (frames >= 1) {  // else the C++ check names frames
            const size_t F = frames, B = stream->stream.batch();
            require_count(x, "x_count", x_count, {F, B, static_cast<size_t>(c.input_size)}, "frames*batch*input_size");
            require_count(y, "y_count", y_count, {F, B, static_cast<size_t>(deeprnn::state_size(c))},
                          "frames*batch*state_size");
        }
        stream->stream.push(x, frames, y, lengths);
    });
}

deeprnn_status deeprnn_stream_push(deeprnn_stream* stream, const float* x, size_t x_count, int frames, float* y,
                                   size_t y_count) {
    return push_stream(__func__, stream, x, x_count, frames, nullptr, y, y_count);
}

deeprnn_status deeprnn_stream_push_lengths(deeprnn_stream* stream, const float* x, size_t x_count, int frames,
                                           const int32_t* lengths, float* y, size_t y_count) {
    return push_stream(__func__, stream, x, x_count, frames, lengths, y, y_count);
}

deeprnn_status deeprnn_stream_reset(deeprnn_stream* stream) {
    return guard(__func__, [&] {
        require_ptr(stream, "stream");
        stream->stream.reset();
    });
}

deeprnn_status deeprnn_stream_reset_one(deeprnn_stream* stream, int index) {
    return guard(__func__, [&] {
        require_ptr(stream, "stream");
        stream->stream.reset(index);
    });
}

deeprnn_status deeprnn_stream_set_profiling(deeprnn_stream* stream, int on) {
    return guard(__func__, [&] {
        require_ptr(stream, "stream");
        stream->stream.set_profiling(on != 0);
    });
}

deeprnn_status deeprnn_stream_profile(const deeprnn_stream* stream, double* seconds, double* worker_seconds, int capacity,
                                      int* workers) {
    return guard(__func__, [&] {
        require_ptr(stream, "stream");
        copy_profile(stream->stream.last_profile(), seconds, worker_seconds, capacity, workers);
    });
}

}  // extern "C"
