/* test_capi.c — the C API, exercised from C (built as C11 with -Wall -Wextra
 * -Werror -pedantic; linked with the C++ compiler against deeprnn.cpp).
 *
 * Usage: test_capi DATA_DIR   (DATA_DIR = the repository's test/data)
 *
 * Checks: a model from a .safetensors file matches PyTorch's output for the
 * same weights (test/data/torch_lstm, tolerance 1e-5 as in test_fixtures.cpp:
 * float32 with different summation orders) and the .npz of the same weights
 * bit for bit; streaming frame by frame equals one run bit for bit; a model
 * from named buffers (a 1-unit tanh RNN) matches the formula computed here
 * with math.h's tanh (1e-6: a few float32 ulp); the log callback hears the
 * plan; and every null pointer, short buffer, bad field and bad file returns
 * an error status whose message names the culprit (hostile_arguments: every
 * handle and out-parameter, lengths outside [0, T], batch above max_batch,
 * zero-length sequences and NaN data, which is not an error).
 * Prints one line per failed check and "test_capi: N checks, N failed".
 */
#include "deeprnn_c.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks, failures;

#define CHECK(cond)                                                         \
    do {                                                                    \
        ++checks;                                                           \
        if (!(cond)) {                                                      \
            ++failures;                                                     \
            printf("%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                   \
    } while (0)

/* The call fails with `status` and the last error message contains `part`. */
#define CHECK_ERROR(call, status, part)                                                                        \
    do {                                                                                                       \
        deeprnn_status s_ = (call);                                                                            \
        ++checks;                                                                                              \
        if (s_ != (status) || !strstr(deeprnn_last_error(), (part))) {                                         \
            ++failures;                                                                                        \
            printf("%s:%d: %s gave %s \"%s\", expected %s naming '%s'\n", __FILE__, __LINE__, #call,           \
                   deeprnn_status_string(s_), deeprnn_last_error(), deeprnn_status_string(status), (part));    \
        }                                                                                                      \
    } while (0)

static char path_buf[4096];
static const char* data_path(const char* dir, const char* name) {
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

/* A little-endian float32 .npy file (format 1.0, C order): values and up to 3 dimensions. */
static float* read_npy(const char* path, int dims[3]) {
    FILE* f = fopen(path, "rb");
    unsigned char pre[10];
    char header[1024] = {0};
    float* data = NULL;
    size_t n = 1, hlen;
    int i, rank;
    if (!f) return NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre + 1, "NUMPY", 5) != 0 || pre[6] != 1) goto done;
    hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    if (hlen >= sizeof header || fread(header, 1, hlen, f) != hlen || !strstr(header, "'<f4'")) goto done;
    dims[0] = dims[1] = dims[2] = 1;
    rank = sscanf(strstr(header, "'shape': (") + 10, "%d, %d, %d", &dims[0], &dims[1], &dims[2]);
    for (i = 0; i < rank; ++i) n *= (size_t)dims[i];
    data = malloc(n * sizeof(float));
    if (data && fread(data, sizeof(float), n, f) != n) {
        free(data);
        data = NULL;
    }
done:
    fclose(f);
    return data;
}

static int plan_logged;
static void on_log(int level, const char* message, void* user) {
    if (level == DEEPRNN_LOG_INFO && strstr(message, "plan") && user == &plan_logged) plan_logged = 1;
}

/* The PyTorch LSTM fixture from weight files, run whole and streamed. */
static void file_models(const char* data) {
    deeprnn_config cfg = deeprnn_config_default();
    deeprnn_config resolved;
    deeprnn_model *model = NULL, *model_npz = NULL;
    deeprnn_session* session = NULL;
    deeprnn_stream* stream = NULL;
    deeprnn_run_input in;
    deeprnn_run_output out;
    int dims[3], ydims[3], E = 0, Y = 0, t;
    const char* plan = NULL;
    float *x = read_npy(data_path(data, "torch_lstm/input.npy"), dims), *want, *y, *y2;
    size_t n, i;
    double max_err = 0;

    want = read_npy(data_path(data, "torch_lstm/expected/output.npy"), ydims);
    CHECK(x != NULL && want != NULL);
    if (!x || !want) return;
    cfg.log = on_log;
    cfg.log_user = &plan_logged;
    cfg.tuning_seq_len = 7;
    CHECK(deeprnn_model_create_from_file(data_path(data, "weightfiles/torch_lstm.safetensors"), &cfg, &model) == DEEPRNN_OK);
    CHECK(deeprnn_last_error()[0] == '\0');
    CHECK(plan_logged);
    CHECK(deeprnn_model_create_from_file(data_path(data, "weightfiles/torch_lstm.npz"), NULL, &model_npz) == DEEPRNN_OK);
    {  /* an .onnx file's operator sets the cell, the convention and its attributes */
        deeprnn_model* gru = NULL;
        deeprnn_config got;
        CHECK(deeprnn_model_create_from_file(data_path(data, "onnx_gru_reverse/model.onnx"), NULL, &gru) == DEEPRNN_OK);
        CHECK(deeprnn_model_config(gru, &got) == DEEPRNN_OK);
        CHECK(got.cell == DEEPRNN_CELL_GRU && got.convention == DEEPRNN_ONNX && got.direction == DEEPRNN_REVERSE &&
              got.gru_variant == DEEPRNN_GRU_RESET_BEFORE_MATMUL && got.gate_activation == DEEPRNN_GATES_SIGMOID);
        deeprnn_model_destroy(gru);
    }
    {  /* HardSigmoid gates from the file, with its alpha and beta; a bad alpha named */
        deeprnn_model* hard = NULL;
        deeprnn_config got, cfg_hard = deeprnn_config_default();
        CHECK(deeprnn_model_create_from_file(data_path(data, "onnx_lstm_hard_sigmoid/model.onnx"), NULL, &hard) == DEEPRNN_OK);
        CHECK(deeprnn_model_config(hard, &got) == DEEPRNN_OK);
        CHECK(got.gate_activation == DEEPRNN_GATES_HARD_SIGMOID && got.hard_sigmoid_alpha == 0.25f &&
              got.hard_sigmoid_beta == 0.375f);
        deeprnn_model_destroy(hard);
        hard = NULL;
        cfg_hard.convention = DEEPRNN_KERAS;
        cfg_hard.gate_activation = DEEPRNN_GATES_HARD_SIGMOID;
        cfg_hard.hard_sigmoid_alpha = 0.0f;
        CHECK_ERROR(deeprnn_model_create_from_file(data_path(data, "keras_lstm_hard_sigmoid/weights"), &cfg_hard, &hard),
                    DEEPRNN_ERROR_ARGUMENT, "Config.hard_sigmoid_alpha");
        cfg_hard.hard_sigmoid_alpha = 0.2f;
        CHECK(deeprnn_model_create_from_file(data_path(data, "keras_lstm_hard_sigmoid/weights"), &cfg_hard, &hard) == DEEPRNN_OK);
        CHECK(deeprnn_model_config(hard, &got) == DEEPRNN_OK && got.gate_activation == DEEPRNN_GATES_HARD_SIGMOID);
        deeprnn_model_destroy(hard);
    }
    {  /* one module of a whole model's state_dict, by its prefix; without it, the error names the prefix */
        deeprnn_model* module = NULL;
        deeprnn_config got, cfg_module = deeprnn_config_default();
        CHECK_ERROR(deeprnn_model_create_from_file(data_path(data, "weightfiles/torch_module.safetensors"), NULL, &module),
                    DEEPRNN_ERROR_ARGUMENT, "weights_prefix");
        cfg_module.weights_prefix = "encoder.lstm.";
        CHECK(deeprnn_model_create_from_file(data_path(data, "weightfiles/torch_module.safetensors"), &cfg_module, &module) ==
              DEEPRNN_OK);
        CHECK(deeprnn_model_config(module, &got) == DEEPRNN_OK && got.hidden_size == 7 && got.weights_prefix == NULL);
        deeprnn_model_destroy(module);
        module = NULL;  /* the same module in a torch.save checkpoint */
        cfg_module.weights_prefix = "model.encoder.lstm.";
        CHECK(deeprnn_model_create_from_file(data_path(data, "weightfiles/checkpoint.pt"), &cfg_module, &module) == DEEPRNN_OK);
        deeprnn_model_destroy(module);
        module = NULL;
        CHECK_ERROR(deeprnn_model_create_from_file(data_path(data, "weightfiles/whole_module.pt"), NULL, &module),
                    DEEPRNN_ERROR_FILE, "state_dict");
    }
    {  /* Relu candidates from the file; from the config for Keras weights; a vanilla RNN refused by name */
        deeprnn_model* relu = NULL;
        deeprnn_config got, cfg_relu = deeprnn_config_default();
        CHECK(deeprnn_model_create_from_file(data_path(data, "onnx_lstm_relu/model.onnx"), NULL, &relu) == DEEPRNN_OK);
        CHECK(deeprnn_model_config(relu, &got) == DEEPRNN_OK);
        CHECK(got.cell_activation == DEEPRNN_CELL_ACTIVATION_RELU && got.gate_activation == DEEPRNN_GATES_SIGMOID);
        deeprnn_model_destroy(relu);
        relu = NULL;
        cfg_relu.convention = DEEPRNN_KERAS;
        cfg_relu.cell = DEEPRNN_CELL_GRU;
        cfg_relu.cell_activation = DEEPRNN_CELL_ACTIVATION_RELU;
        CHECK(deeprnn_model_create_from_file(data_path(data, "keras_gru_relu/weights"), &cfg_relu, &relu) == DEEPRNN_OK);
        CHECK(deeprnn_model_config(relu, &got) == DEEPRNN_OK && got.cell_activation == DEEPRNN_CELL_ACTIVATION_RELU);
        deeprnn_model_destroy(relu);
        relu = NULL;
        cfg_relu.cell_activation = 9;
        CHECK_ERROR(deeprnn_model_create_from_file(data_path(data, "keras_gru_relu/weights"), &cfg_relu, &relu),
                    DEEPRNN_ERROR_ARGUMENT, "Config.cell_activation");
    }
    {  /* a stack of two operators: whole (-1), or its second layer alone (index 1) */
        const char* stack = data_path(data, "onnx_export/torch_export_lstm_2layer/model.onnx");
        deeprnn_model *whole = NULL, *layer1 = NULL, *none = NULL;
        deeprnn_config a, b;
        CHECK(deeprnn_model_create_from_onnx(stack, -1, NULL, &whole) == DEEPRNN_OK);
        CHECK(deeprnn_model_create_from_onnx(stack, 1, NULL, &layer1) == DEEPRNN_OK);
        CHECK(deeprnn_model_config(whole, &a) == DEEPRNN_OK && deeprnn_model_config(layer1, &b) == DEEPRNN_OK);
        CHECK(a.num_layers == 2 && b.num_layers == 1 && b.input_size == a.hidden_size && b.hidden_size == a.hidden_size);
        CHECK(a.cell == DEEPRNN_CELL_LSTM && b.convention == DEEPRNN_ONNX);
        CHECK_ERROR(deeprnn_model_create_from_onnx(stack, 2, NULL, &none), DEEPRNN_ERROR_FILE,
                    "index = 2 but the graph has 2 recurrent operators");
        CHECK_ERROR(deeprnn_model_create_from_onnx(stack, -2, NULL, &none), DEEPRNN_ERROR_ARGUMENT, "index = -2");
        CHECK_ERROR(deeprnn_model_create_from_onnx(NULL, 0, NULL, &none), DEEPRNN_ERROR_ARGUMENT, "path = NULL");
        CHECK(none == NULL);
        deeprnn_model_destroy(whole);
        deeprnn_model_destroy(layer1);
    }
    CHECK(deeprnn_model_sizes(model, &E, &Y) == DEEPRNN_OK);
    CHECK(E == dims[2] && Y == ydims[2]);
    CHECK(deeprnn_model_config(model, &resolved) == DEEPRNN_OK);
    CHECK(resolved.input_size == E && resolved.hidden_size == Y && resolved.num_layers == 1);
    CHECK(resolved.direction == DEEPRNN_FORWARD && resolved.log == on_log);
    CHECK(resolved.tuning_seq_len == 7);
    CHECK(deeprnn_model_plan(model, &plan) == DEEPRNN_OK && plan && strstr(plan, "backend cpu") &&
          strstr(plan, "for 7-step runs"));
    CHECK(deeprnn_model_prefetch(model, 1) == DEEPRNN_OK);

    n = (size_t)dims[0] * dims[1] * Y;
    y = calloc(n, sizeof(float));
    y2 = calloc(n, sizeof(float));
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.x = x;
    in.x_count = (size_t)dims[0] * dims[1] * E;
    in.seq_len = dims[0];
    in.batch = dims[1];
    out.y = y;
    out.y_count = n;
    CHECK(deeprnn_session_create(model, &session) == DEEPRNN_OK);
    deeprnn_model_destroy(model); /* the session keeps the model's data alive */
    CHECK(deeprnn_session_run(session, &in, &out) == DEEPRNN_OK);
    for (i = 0; i < n; ++i) max_err = fmax(max_err, fabs(y[i] - want[i]));
    CHECK(max_err <= 1e-5);
    if (max_err > 1e-5) printf("  max abs error vs PyTorch: %g\n", max_err);
    deeprnn_session_destroy(session);

    CHECK(deeprnn_session_create(model_npz, &session) == DEEPRNN_OK);
    {  /* profiled: the same bits, and where the run's time went */
        double seconds = -1, workers_s[2 * 8];
        int workers = -1;
        CHECK(deeprnn_session_profile(session, &seconds, NULL, 0, &workers) == DEEPRNN_OK && workers == 0 && seconds == 0);
        CHECK(deeprnn_session_set_profiling(session, 1) == DEEPRNN_OK);
        out.y = y2;
        CHECK(deeprnn_session_run(session, &in, &out) == DEEPRNN_OK);
        CHECK(memcmp(y, y2, n * sizeof(float)) == 0);
        CHECK(deeprnn_session_profile(session, &seconds, workers_s, 8, &workers) == DEEPRNN_OK);
        CHECK(seconds > 0 && workers >= 1 && workers <= 8 && workers_s[0] > 0 && workers_s[1] >= 0 && workers_s[1] <= workers_s[0]);
        CHECK_ERROR(deeprnn_session_profile(session, NULL, NULL, 1, NULL), DEEPRNN_ERROR_ARGUMENT, "worker_seconds = NULL");
        CHECK_ERROR(deeprnn_session_profile(session, NULL, workers_s, -1, NULL), DEEPRNN_ERROR_ARGUMENT, "capacity = -1");
        CHECK_ERROR(deeprnn_session_set_profiling(NULL, 1), DEEPRNN_ERROR_ARGUMENT, "session = NULL");
        CHECK(deeprnn_session_set_profiling(session, 0) == DEEPRNN_OK);
    }
    out.y = y2;
    CHECK(deeprnn_session_run(session, &in, &out) == DEEPRNN_OK);
    CHECK(memcmp(y, y2, n * sizeof(float)) == 0);
    deeprnn_session_destroy(session);

    /* Frame by frame, then the whole sequence after a reset: both equal the run. */
    CHECK(deeprnn_stream_create(model_npz, dims[1], &stream) == DEEPRNN_OK);
    memset(y2, 0, n * sizeof(float));
    for (t = 0; t < dims[0]; ++t) {
        const size_t step_in = (size_t)dims[1] * E, step_out = (size_t)dims[1] * Y;
        CHECK(deeprnn_stream_push(stream, x + t * step_in, step_in, 1, y2 + t * step_out, step_out) == DEEPRNN_OK);
    }
    CHECK(memcmp(y, y2, n * sizeof(float)) == 0);
    CHECK(deeprnn_stream_reset(stream) == DEEPRNN_OK);
    {  /* profiled per push: the same bits, and the push's time */
        double seconds = -1, workers_s[2 * 8];
        int workers = -1;
        CHECK(deeprnn_stream_profile(stream, &seconds, NULL, 0, &workers) == DEEPRNN_OK && workers == 0 && seconds == 0);
        CHECK(deeprnn_stream_set_profiling(stream, 1) == DEEPRNN_OK);
        CHECK(deeprnn_stream_push(stream, x, in.x_count, dims[0], y2, n) == DEEPRNN_OK);
        CHECK(memcmp(y, y2, n * sizeof(float)) == 0);
        CHECK(deeprnn_stream_profile(stream, &seconds, workers_s, 8, &workers) == DEEPRNN_OK);
        CHECK(seconds > 0 && workers >= 1 && workers <= 8 && workers_s[0] > 0 && workers_s[1] >= 0 && workers_s[1] <= workers_s[0]);
        CHECK_ERROR(deeprnn_stream_profile(stream, NULL, NULL, 1, NULL), DEEPRNN_ERROR_ARGUMENT, "worker_seconds = NULL");
        CHECK_ERROR(deeprnn_stream_profile(NULL, NULL, NULL, 0, NULL), DEEPRNN_ERROR_ARGUMENT, "stream = NULL");
        CHECK_ERROR(deeprnn_stream_set_profiling(NULL, 1), DEEPRNN_ERROR_ARGUMENT, "stream = NULL");
        CHECK(deeprnn_stream_set_profiling(stream, 0) == DEEPRNN_OK);
    }

    {  /* every stream taking every frame equals the run; a stream taking none keeps its state */
        int32_t lengths[16];
        int b;
        CHECK(dims[1] <= 16);
        for (b = 0; b < dims[1] && b < 16; ++b) lengths[b] = dims[0];
        CHECK(deeprnn_stream_reset(stream) == DEEPRNN_OK);
        CHECK(deeprnn_stream_push_lengths(stream, x, in.x_count, dims[0], lengths, y2, n) == DEEPRNN_OK);
        CHECK(memcmp(y, y2, n * sizeof(float)) == 0);
        CHECK(deeprnn_stream_reset_one(stream, 0) == DEEPRNN_OK);
        for (b = 0; b < dims[1] && b < 16; ++b) lengths[b] = 0;
        lengths[0] = dims[0];
        CHECK(deeprnn_stream_push_lengths(stream, x, in.x_count, dims[0], lengths, y2, n) == DEEPRNN_OK);
        for (t = 0; t < dims[0]; ++t)  /* stream 0 restarted from zero: its rows are the run's again */
            CHECK(memcmp(y + ((size_t)t * dims[1]) * Y, y2 + ((size_t)t * dims[1]) * Y, (size_t)Y * sizeof(float)) == 0);
        lengths[0] = dims[0] + 1;
        CHECK_ERROR(deeprnn_stream_push_lengths(stream, x, in.x_count, dims[0], lengths, y2, n), DEEPRNN_ERROR_ARGUMENT,
                    "deeprnn_stream_push_lengths: Stream::push lengths[0]");
        CHECK_ERROR(deeprnn_stream_reset_one(stream, dims[1]), DEEPRNN_ERROR_ARGUMENT, "Stream::reset stream");
        CHECK_ERROR(deeprnn_stream_reset_one(NULL, 0), DEEPRNN_ERROR_ARGUMENT, "stream = NULL");
    }

    /* Short buffers and bad sizes, named. */
    CHECK_ERROR(deeprnn_stream_push(stream, x, (size_t)E - 1, 1, y2, n), DEEPRNN_ERROR_ARGUMENT, "x_count");
    CHECK_ERROR(deeprnn_stream_push(stream, x, in.x_count, dims[0], y2, 1), DEEPRNN_ERROR_ARGUMENT, "y_count");
    CHECK_ERROR(deeprnn_stream_push(stream, NULL, 0, 1, NULL, 0), DEEPRNN_ERROR_ARGUMENT, "x");
    CHECK_ERROR(deeprnn_stream_push(stream, x, in.x_count, 0, y2, n), DEEPRNN_ERROR_ARGUMENT, "frames");
    CHECK_ERROR(deeprnn_stream_push(NULL, x, in.x_count, 1, y2, n), DEEPRNN_ERROR_ARGUMENT, "stream = NULL");
    CHECK_ERROR(deeprnn_stream_reset(NULL), DEEPRNN_ERROR_ARGUMENT, "stream = NULL");
    deeprnn_stream_destroy(stream);
    CHECK(deeprnn_session_create(model_npz, &session) == DEEPRNN_OK);
    in.x_count = 1;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "in.x_count = 1");
    in.x_count = n;
    in.batch = 0;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "batch = 0");
    in.batch = dims[1];
    out.h_n = y2;
    out.h_n_count = 0;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "out.h_n_count = 0");
    CHECK_ERROR(deeprnn_session_run(session, NULL, &out), DEEPRNN_ERROR_ARGUMENT, "in = NULL");
    CHECK_ERROR(deeprnn_session_run(NULL, &in, &out), DEEPRNN_ERROR_ARGUMENT, "session = NULL");
    CHECK_ERROR(deeprnn_stream_create(model_npz, 0, &stream), DEEPRNN_ERROR_ARGUMENT, "batch");
    CHECK(stream == NULL);
    deeprnn_session_destroy(session);
    deeprnn_model_destroy(model_npz);
    free(x);
    free(want);
    free(y);
    free(y2);
}

/* A 1-unit tanh RNN from named buffers: h_t = tanh(0.5 x_t + 0.1 - 0.25 h_{t-1}). */
static void buffer_model(void) {
    const float w_ih = 0.5f, w_hh = -0.25f, b_ih = 0.1f, b_hh = 0.0f;
    const int64_t one[2] = {1, 1};
    deeprnn_tensor tensors[4] = {{"weight_ih_l0", &w_ih, one, 2}, {"weight_hh_l0", &w_hh, one, 2},
                                 {"bias_ih_l0", &b_ih, one, 1}, {"bias_hh_l0", &b_hh, one, 1}};
    deeprnn_config cfg = deeprnn_config_default();
    deeprnn_model* model = NULL;
    deeprnn_stream* stream = NULL;
    const float x[5] = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f};
    float y[5];
    double h = 0, max_err = 0;
    int t;

    cfg.cell = DEEPRNN_CELL_RNN_TANH;
    cfg.threads = 1;
    CHECK(deeprnn_model_create(tensors, 4, &cfg, &model) == DEEPRNN_OK);
    CHECK(deeprnn_stream_create(model, 1, &stream) == DEEPRNN_OK);
    CHECK(deeprnn_stream_push(stream, x, 5, 5, y, 5) == DEEPRNN_OK);
    for (t = 0; t < 5; ++t) {
        h = tanh(0.5 * x[t] + (double)0.1f - 0.25 * h);
        max_err = fmax(max_err, fabs(y[t] - h));
    }
    CHECK(max_err <= 1e-6);
    deeprnn_stream_destroy(stream);
    deeprnn_model_destroy(model);

    /* Bad tensors and configurations, named. */
    CHECK_ERROR(deeprnn_model_create(NULL, 1, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "tensors = NULL");
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, NULL), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    tensors[1].name = NULL;
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "tensors[1].name = NULL");
    tensors[1].name = "weight_ih_l0";
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "'weight_ih_l0': appears twice");
    tensors[1].name = "weight_hh_l0";
    tensors[2].rank = 9;
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "tensors[2].rank = 9");
    tensors[2].rank = 1;
    tensors[3].data = NULL;
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "tensors[3].data = NULL");
    tensors[3].data = &b_hh;
    CHECK_ERROR(deeprnn_model_create(tensors + 1, 3, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "'weight_ih_l0' is missing");
    cfg.hidden_size = 0;
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "hidden_size = 0");
    cfg.hidden_size = DEEPRNN_FROM_WEIGHTS;
    cfg.cell = 42;
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "cell = 42");
    cfg.cell = DEEPRNN_CELL_RNN_TANH;
    cfg.weight_precision = 3;
    CHECK_ERROR(deeprnn_model_create(tensors, 4, &cfg, &model), DEEPRNN_ERROR_ARGUMENT, "weight_precision = 3");
    CHECK(model == NULL);
    cfg.weight_precision = DEEPRNN_WEIGHTS_INT8;
    CHECK(deeprnn_model_create(tensors, 4, &cfg, &model) == DEEPRNN_OK);
    deeprnn_model_destroy(model);
}

/* Two models on one deeprnn_pool, the pool destroyed first: the same outputs
 * as a model with its own workers. */
static void shared_pool(void) {
    enum { H = 256, E = 8, T = 6 };
    static float w_ih[H * E], w_hh[H * H], x[T * E], y_own[T * H], y_shared[T * H];
    const int64_t ih[2] = {H, E}, hh[2] = {H, H};
    deeprnn_tensor tensors[2] = {{"weight_ih_l0", w_ih, ih, 2}, {"weight_hh_l0", w_hh, hh, 2}};
    deeprnn_config cfg = deeprnn_config_default();
    deeprnn_pool* pool = NULL;
    deeprnn_model *own = NULL, *a = NULL, *b = NULL;
    deeprnn_session *s_own = NULL, *s_b = NULL;
    deeprnn_run_input in;
    deeprnn_run_output out;
    const char* pinning = NULL;
    int i, threads = 0;
    for (i = 0; i < H * E; ++i) w_ih[i] = (float)((i * 37 % 101) / 500.0 - 0.1);
    for (i = 0; i < H * H; ++i) w_hh[i] = (float)((i * 53 % 97) / 1500.0 - 0.032);
    for (i = 0; i < T * E; ++i) x[i] = (float)((i * 29 % 13) / 6.0 - 1.0);
    cfg.cell = DEEPRNN_CELL_RNN_TANH;
    cfg.threads = 2;
    cfg.max_batch = 1;
    CHECK_ERROR(deeprnn_pool_create(2, 1, NULL), DEEPRNN_ERROR_ARGUMENT, "pool = NULL");
    CHECK_ERROR(deeprnn_pool_create(-3, 1, &pool), DEEPRNN_ERROR_ARGUMENT, "threads = -3");
    CHECK(pool == NULL);
    CHECK_ERROR(deeprnn_pool_info(NULL, &threads, NULL), DEEPRNN_ERROR_ARGUMENT, "pool = NULL");
    CHECK(deeprnn_pool_create(2, 1, &pool) == DEEPRNN_OK);
    CHECK(deeprnn_pool_info(pool, &threads, &pinning) == DEEPRNN_OK && threads == 2 && pinning && *pinning);
    CHECK(cfg.idle_nap_ms == 10.0);
    CHECK(cfg.tuning_seq_len == 100);
    CHECK_ERROR(deeprnn_pool_set_idle_nap_ms(NULL, 1.0), DEEPRNN_ERROR_ARGUMENT, "pool = NULL");
    CHECK_ERROR(deeprnn_pool_set_idle_nap_ms(pool, -2.0), DEEPRNN_ERROR_ARGUMENT, "idle_nap_ms = -2");
    CHECK(deeprnn_pool_set_idle_nap_ms(pool, 0.0) == DEEPRNN_OK);
    CHECK(deeprnn_pool_set_idle_nap_ms(pool, 10.0) == DEEPRNN_OK);
    CHECK(deeprnn_model_create(tensors, 2, &cfg, &own) == DEEPRNN_OK);
    cfg.pool = pool;
    CHECK(deeprnn_model_create(tensors, 2, &cfg, &a) == DEEPRNN_OK);
    CHECK(deeprnn_model_create(tensors, 2, &cfg, &b) == DEEPRNN_OK);
    cfg.threads = 3;
    CHECK_ERROR(deeprnn_model_create(tensors, 2, &cfg, NULL), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    {
        deeprnn_model* too_many = NULL;
        CHECK_ERROR(deeprnn_model_create(tensors, 2, &cfg, &too_many), DEEPRNN_ERROR_ARGUMENT,
                    "Config.threads = 3: exceeds the 2 workers of Config.pool");
    }
    deeprnn_pool_destroy(pool); /* the models keep the workers */
    deeprnn_model_destroy(a);
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.x = x;
    in.x_count = T * E;
    in.seq_len = T;
    in.batch = 1;
    out.y = y_own;
    out.y_count = T * H;
    CHECK(deeprnn_session_create(own, &s_own) == DEEPRNN_OK && deeprnn_session_run(s_own, &in, &out) == DEEPRNN_OK);
    out.y = y_shared;
    CHECK(deeprnn_session_create(b, &s_b) == DEEPRNN_OK && deeprnn_session_run(s_b, &in, &out) == DEEPRNN_OK);
    CHECK(memcmp(y_own, y_shared, sizeof y_own) == 0);
    deeprnn_session_destroy(s_own);
    deeprnn_session_destroy(s_b);
    deeprnn_model_destroy(own);
    deeprnn_model_destroy(b);
    deeprnn_pool_destroy(NULL);
}

/* hostile_arguments' valid run: x [T = 3, B = 1, E = 2] into y [3, 1, 1], nothing else set. */
static void plain_run(deeprnn_run_input* in, deeprnn_run_output* out, const float* x, float* y) {
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    in->x = x;
    in->x_count = 6;
    in->seq_len = 3;
    in->batch = 1;
    out->y = y;
    out->y_count = 3;
}

/* Hostile arguments (issue #10): null handles and out-parameters, sizes out of
 * range, short buffers, bad lengths, NaN and zero-length sequences, on a
 * 1-unit tanh RNN with two inputs (y_t = tanh(0.5 x0 - 0.5 x1 - 0.25 y_{t-1})).
 * Every failure returns DEEPRNN_ERROR_ARGUMENT naming the argument or field and
 * its value, sets an out-handle to NULL and leaves the session usable; NaN is
 * data, not an error: it reaches the outputs that depend on it. */
static void hostile_arguments(void) {
    const float w_ih[2] = {0.5f, -0.5f}, w_hh = -0.25f;
    const int64_t ih_shape[2] = {1, 2}, hh_shape[2] = {1, 1}, bad_shape[2] = {-1, 2};
    deeprnn_tensor tensors[2] = {{"weight_ih_l0", w_ih, ih_shape, 2}, {"weight_hh_l0", &w_hh, hh_shape, 2}};
    deeprnn_config cfg = deeprnn_config_default();
    deeprnn_model *model = NULL, *other = NULL;
    deeprnn_session* session = NULL;
    deeprnn_stream* stream = NULL;
    deeprnn_config resolved;
    deeprnn_run_input in;
    deeprnn_run_output out;
    float x[6] = {1.0f, 0.0f, 0.5f, 0.5f, -1.0f, 2.0f}; /* [T = 3, B = 1, E = 2] or [T = 1.5, B = 2] */
    float y[6], h[2], c[2] = {0.0f, 0.0f}, h0[2] = {0.25f, -0.75f};
    int32_t lengths[2] = {1, 4};
    double want = 0;
    int t;

    cfg.cell = DEEPRNN_CELL_RNN_TANH;
    cfg.threads = 1;
    cfg.max_batch = 2;
    CHECK(deeprnn_model_create(tensors, 2, &cfg, &model) == DEEPRNN_OK);
    if (!model) return;

    /* Handles and out-parameters; a failed create leaves NULL behind, not garbage. */
    session = (deeprnn_session*)(void*)&checks;
    CHECK_ERROR(deeprnn_session_create(NULL, &session), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    CHECK(session == NULL);
    CHECK_ERROR(deeprnn_session_create(model, NULL), DEEPRNN_ERROR_ARGUMENT, "session = NULL");
    stream = (deeprnn_stream*)(void*)&checks;
    CHECK_ERROR(deeprnn_stream_create(NULL, 1, &stream), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    CHECK(stream == NULL);
    CHECK_ERROR(deeprnn_stream_create(model, 1, NULL), DEEPRNN_ERROR_ARGUMENT, "stream = NULL");
    CHECK_ERROR(deeprnn_stream_create(model, 3, &stream), DEEPRNN_ERROR_ARGUMENT, "Stream batch = 3");
    CHECK(strstr(deeprnn_last_error(), "max_batch = 2") != NULL);
    CHECK(stream == NULL);
    CHECK_ERROR(deeprnn_model_config(model, NULL), DEEPRNN_ERROR_ARGUMENT, "config = NULL");
    CHECK_ERROR(deeprnn_model_plan(model, NULL), DEEPRNN_ERROR_ARGUMENT, "plan = NULL");
    CHECK_ERROR(deeprnn_model_prefetch(model, 3), DEEPRNN_ERROR_ARGUMENT, "Model::prefetch batch = 3");
    CHECK_ERROR(deeprnn_model_prefetch(NULL, 1), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    CHECK(deeprnn_model_sizes(model, NULL, NULL) == DEEPRNN_OK); /* both optional */
    CHECK(deeprnn_model_config(model, &resolved) == DEEPRNN_OK && resolved.input_size == 2 && resolved.max_batch == 2);

    /* Tensors: no shape, an invalid shape, none at all. */
    tensors[0].shape = NULL;
    CHECK_ERROR(deeprnn_model_create(tensors, 2, &cfg, &other), DEEPRNN_ERROR_ARGUMENT, "tensors[0].shape = NULL");
    tensors[0].shape = bad_shape;
    CHECK_ERROR(deeprnn_model_create(tensors, 2, &cfg, &other), DEEPRNN_ERROR_ARGUMENT, "tensors[0].shape = [-1, 2]");
    tensors[0].shape = ih_shape;
    CHECK_ERROR(deeprnn_model_create(NULL, 0, &cfg, &other), DEEPRNN_ERROR_ARGUMENT, "'weight_hh_l0' is missing");
    CHECK(other == NULL);

    /* Session::run through C: every field validated, nothing written on failure. */
    CHECK(deeprnn_session_create(model, &session) == DEEPRNN_OK);
    plain_run(&in, &out, x, y);
    CHECK_ERROR(deeprnn_session_run(session, &in, NULL), DEEPRNN_ERROR_ARGUMENT, "out = NULL");
    in.x = NULL;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunInput.x = null");
    in.x = x;
    in.seq_len = 0;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunInput.seq_len = 0");
    in.seq_len = -2;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunInput.seq_len = -2");
    in.seq_len = 1;
    in.batch = 3; /* above max_batch = 2; x holds 1 * 3 * 2 values */
    out.y_count = 6;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunInput.batch = 3");
    CHECK(strstr(deeprnn_last_error(), "max_batch = 2") != NULL);
    in.batch = 2;
    in.lengths = lengths; /* lengths[1] = 4 > seq_len = 1 */
    in.lengths_count = 2;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunInput.lengths[1] = 4");
    lengths[1] = -1;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunInput.lengths[1] = -1");
    lengths[1] = 1;
    in.lengths_count = 1;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "in.lengths_count = 1");
    in.lengths_count = 2;
    in.h0 = h0;
    in.h0_count = 1;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "in.h0_count = 1");
    in.h0_count = 2;
    in.c0 = c;
    in.c0_count = 2;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunInput.c0 = set");
    CHECK(strstr(deeprnn_last_error(), "rnn_tanh") != NULL);
    in.c0 = NULL;
    in.c0_count = 0;
    out.c_n = c;
    out.c_n_count = 2;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "RunOutput.c_n = set");
    out.c_n = NULL;
    out.h_n = h;
    out.h_n_count = 1;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "out.h_n_count = 1");
    out.h_n_count = 2;
    out.y_count = 1;
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "out.y_count = 1");
    out.y_count = 2;
    out.y = x + 1; /* y over x */
    CHECK_ERROR(deeprnn_session_run(session, &in, &out), DEEPRNN_ERROR_ARGUMENT, "overlaps");
    out.y = y;

    /* Zero-length sequence 0 next to sequence 1 of length 1, with initial states:
     * y of sequence 0 is exactly 0 and its h_n is its h0. */
    lengths[0] = 0;
    y[0] = y[1] = h[0] = h[1] = -7.0f;
    CHECK(deeprnn_session_run(session, &in, &out) == DEEPRNN_OK);
    CHECK(deeprnn_last_error()[0] == '\0');
    CHECK(y[0] == 0.0f && h[0] == h0[0]);
    want = tanh(0.5 * x[2] - 0.5 * x[3] - 0.25 * h0[1]);
    CHECK(fabs(y[1] - want) <= 1e-6 && h[1] == y[1]);

    /* NaN is data: sequence 1 gets NaN, sequence 0 is untouched. */
    lengths[0] = lengths[1] = 1;
    x[3] = NAN;
    CHECK(deeprnn_session_run(session, &in, &out) == DEEPRNN_OK);
    CHECK(isnan(y[1]) && isnan(h[1]));
    CHECK(fabs(y[0] - tanh(0.5 * x[0] - 0.5 * x[1] - 0.25 * h0[0])) <= 1e-6);
    x[3] = 0.5f;

    /* After all of that, a plain run still matches the formula. */
    plain_run(&in, &out, x, y);
    CHECK(deeprnn_session_run(session, &in, &out) == DEEPRNN_OK);
    want = 0;
    for (t = 0; t < 3; ++t) {
        want = tanh(0.5 * x[2 * t] - 0.5 * x[2 * t + 1] - 0.25 * want);
        CHECK(fabs(y[t] - want) <= 1e-6);
    }

    /* Streams: no x, y may be NULL, a short y. */
    CHECK(deeprnn_stream_create(model, 2, &stream) == DEEPRNN_OK);
    CHECK_ERROR(deeprnn_stream_push(stream, NULL, 4, 1, y, 2), DEEPRNN_ERROR_ARGUMENT, "Stream::push x = null");
    CHECK(deeprnn_stream_push(stream, x, 4, 1, NULL, 0) == DEEPRNN_OK);
    CHECK_ERROR(deeprnn_stream_push(stream, x, 4, 1, y, 1), DEEPRNN_ERROR_ARGUMENT, "y_count = 1");
    CHECK_ERROR(deeprnn_stream_push(stream, x, 4, -1, y, 2), DEEPRNN_ERROR_ARGUMENT, "Stream::push frames = -1");
    deeprnn_stream_destroy(stream);
    deeprnn_session_destroy(session);
    deeprnn_model_destroy(model);
}

static void files_and_handles(const char* data) {
    deeprnn_model* model = NULL;
    deeprnn_session* session = NULL;
    deeprnn_config cfg = deeprnn_config_default();
    CHECK_ERROR(deeprnn_model_create_from_file(NULL, NULL, &model), DEEPRNN_ERROR_ARGUMENT, "path = NULL");
    CHECK_ERROR(deeprnn_model_create_from_file("x.npz", NULL, NULL), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    CHECK_ERROR(deeprnn_model_create_from_file(data_path(data, "absent.safetensors"), NULL, &model), DEEPRNN_ERROR_FILE,
                "absent.safetensors");
    CHECK_ERROR(deeprnn_model_create_from_file(data_path(data, "weightfiles/compressed.npz"), NULL, &model),
                DEEPRNN_ERROR_FILE, "np.savez_compressed");
    cfg.convention = DEEPRNN_ONNX;
    CHECK_ERROR(deeprnn_model_create_from_file(data_path(data, "weightfiles/torch_lstm.npz"), &cfg, &model),
                DEEPRNN_ERROR_ARGUMENT, "'W' is missing");
    CHECK(model == NULL);
    CHECK_ERROR(deeprnn_session_create(NULL, &session), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    CHECK_ERROR(deeprnn_model_sizes(NULL, NULL, NULL), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    CHECK_ERROR(deeprnn_model_config(NULL, &cfg), DEEPRNN_ERROR_ARGUMENT, "model = NULL");
    CHECK_ERROR(deeprnn_model_plan(NULL, NULL), DEEPRNN_ERROR_ARGUMENT, "plan = NULL");
    deeprnn_model_destroy(NULL);
    deeprnn_session_destroy(NULL);
    deeprnn_stream_destroy(NULL);
}

int main(int argc, char** argv) {
    int major = -1, minor = -1, patch = -1;
    const deeprnn_config d = deeprnn_config_default();
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATA_DIR (the repository's test/data)\n", argv[0]);
        return 2;
    }
    CHECK(sscanf(deeprnn_version(), "%d.%d.%d", &major, &minor, &patch) == 3);
    CHECK(deeprnn_version_number() == major * 10000 + minor * 100 + patch);
    CHECK(strstr(deeprnn_build_info(), deeprnn_version()) != NULL);
    CHECK(strcmp(deeprnn_status_string(DEEPRNN_ERROR_FILE), "DEEPRNN_ERROR_FILE") == 0);
    CHECK(d.cell == DEEPRNN_CELL_LSTM && d.convention == DEEPRNN_TORCH && d.hidden_size == DEEPRNN_FROM_WEIGHTS);
    CHECK(d.max_batch >= 1 && d.pin_threads == 1 && d.log == NULL && d.plan_cache_path == NULL);

    file_models(argv[1]);
    buffer_model();
    shared_pool();
    files_and_handles(argv[1]);
    hostile_arguments();
    printf("test_capi: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
