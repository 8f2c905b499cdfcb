// activations.hpp — tanh, sigmoid and relu over float arrays, chosen once per model.
//
// The engine calls activations through an Activations table picked at model
// creation from the requested accuracy and the CPU's instruction set, so the
// hot loops never branch on either.
#pragma once
#include <cstdint>

namespace deeprnn {
namespace detail {

struct Activations {
    const char* isa = "scalar";   // SIMD path in use: "avx512", "avx2", "sse2", "neon", "scalar"
    int terms = 0;                // continued-fraction terms of tanh (0 = libm)
    double max_abs_error = 0;     // measured bound for this choice
    void (*tanh)(const float* x, float* y, int64_t n) = nullptr;     // y may equal x
    void (*sigmoid)(const float* x, float* y, int64_t n) = nullptr;  // y may equal x
};

// The fastest table whose tanh/sigmoid error is at most max_abs_error
// (0 = float accuracy). Never fails: tighter requests get the most accurate table.
Activations select_activations(double max_abs_error);

}  // namespace detail
}  // namespace deeprnn
