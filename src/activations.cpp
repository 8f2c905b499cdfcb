// activations.cpp — scalar reference activations (placeholder until the SIMD
// continued-fraction kernels land).
#include "activations.hpp"

#include <cmath>

namespace deeprnn {
namespace detail {

static void tanh_libm(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

static void sigmoid_libm(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

Activations select_activations(double /*max_abs_error*/) {
    Activations a;
    a.isa = "scalar";
    a.terms = 0;
    a.max_abs_error = 2e-7;
    a.tanh = tanh_libm;
    a.sigmoid = sigmoid_libm;
    return a;
}

}  // namespace detail
}  // namespace deeprnn
