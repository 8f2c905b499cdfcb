// consumer.cpp — a third-party C++ program using deeprnn, built by every
// packaging route .ci/consumers.sh checks (add_subdirectory, find_package,
// pkg-config, make install). It checks that header and library agree on the
// version (and, for CMake, that the package version agrees too) and runs a
// 1-unit tanh RNN whose outputs it computes itself. Prints one line; exit 0 = OK.
#include <deeprnn.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

#ifndef ROUTE
#define ROUTE "two files"
#endif

int main() try {
    if (deeprnn::version_number() != DEEPRNN_VERSION_NUMBER) {
        std::printf("consumer (%s): header %d but library %d\n", ROUTE, DEEPRNN_VERSION_NUMBER, deeprnn::version_number());
        return 1;
    }
#ifdef PACKAGE_VERSION  // what CMake's deeprnnConfigVersion.cmake said
    if (std::strcmp(PACKAGE_VERSION, deeprnn::version()) != 0) {
        std::printf("consumer (%s): package version %s but library %s\n", ROUTE, PACKAGE_VERSION, deeprnn::version());
        return 1;
    }
#endif
    deeprnn::Weights w;
    w["weight_ih_l0"] = deeprnn::Tensor{{1, 1}, {0.5f}};
    w["weight_hh_l0"] = deeprnn::Tensor{{1, 1}, {-0.25f}};
    deeprnn::Config cfg = deeprnn::config_from_weights(deeprnn::Cell::rnn_tanh, deeprnn::Convention::torch, w);
    cfg.threads = 1;
    deeprnn::Model model(cfg, w);
    deeprnn::Stream stream(model);
    const float x[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    float y[4];
    stream.push(x, 4, y);
    double h = 0;
    for (int t = 0; t < 4; ++t) {
        h = std::tanh(0.5 * x[t] - 0.25 * h);
        if (std::fabs(y[t] - h) > 1e-6) {  // a few float32 ulp
            std::printf("consumer (%s): y[%d] = %.9g, expected %.9g\n", ROUTE, t, y[t], h);
            return 1;
        }
    }
    std::printf("consumer (%s): deeprnn %s OK\n", ROUTE, deeprnn::version());
    return 0;
} catch (const deeprnn::Error& e) {
    std::printf("consumer (%s): %s\n", ROUTE, e.what());
    return 1;
}
