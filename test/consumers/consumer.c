/* consumer.c — a third-party C program using deeprnn's C API, built by the
 * find_package consumer (.ci/consumers.sh): CMake must link it with the C++
 * runtime by itself. Runs the same 1-unit tanh RNN as consumer.cpp from named
 * buffers. Prints one line; exit 0 = OK. */
#include <deeprnn_c.h>

#include <math.h>
#include <stdio.h>

static int fail(const char* what) {
    printf("consumer (C): %s: %s\n", what, deeprnn_last_error());
    return 1;
}

int main(void) {
    const float w_ih = 0.5f, w_hh = -0.25f, x[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    const int64_t shape[2] = {1, 1};
    const deeprnn_tensor tensors[2] = {{"weight_ih_l0", &w_ih, shape, 2}, {"weight_hh_l0", &w_hh, shape, 2}};
    deeprnn_config cfg = deeprnn_config_default();
    deeprnn_model* model;
    deeprnn_stream* stream;
    float y[4];
    double h = 0;
    int t;
    cfg.cell = DEEPRNN_CELL_RNN_TANH;
    cfg.threads = 1;
    if (deeprnn_model_create(tensors, 2, &cfg, &model) != DEEPRNN_OK) return fail("deeprnn_model_create");
    if (deeprnn_stream_create(model, 1, &stream) != DEEPRNN_OK) return fail("deeprnn_stream_create");
    if (deeprnn_stream_push(stream, x, 4, 4, y, 4) != DEEPRNN_OK) return fail("deeprnn_stream_push");
    deeprnn_stream_destroy(stream);
    deeprnn_model_destroy(model);
    for (t = 0; t < 4; ++t) {
        h = tanh(0.5 * x[t] - 0.25 * h);
        if (fabs(y[t] - h) > 1e-6) {
            printf("consumer (C): y[%d] = %.9g, expected %.9g\n", t, y[t], h);
            return 1;
        }
    }
    printf("consumer (C): deeprnn %s OK\n", deeprnn_version());
    return 0;
}
