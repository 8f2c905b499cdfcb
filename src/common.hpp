// common.hpp — small helpers every module uses: error formatting and checks.
#pragma once
#include "deeprnn.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

namespace deeprnn {
namespace detail {

// Builds a message from any streamable parts: fail("Config.hidden_size = ", h, ": ...").
template <typename... Parts>
std::string cat(const Parts&... parts) {
    std::ostringstream s;
    (s << ... << parts);
    return s.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    throw Error(cat(parts...));
}

// Throws "<field> = <value>: <rule...>" unless ok. The message is built only
// on failure, so checks in run() cost no allocation.
template <typename V, typename... Rule>
void require(bool ok, const char* field, const V& value, const Rule&... rule) {
    if (!ok) fail(field, " = ", value, ": ", rule...);
}

// Config::threads and WorkerPool's largest thread count.
constexpr int kMaxThreads = 1024;

inline bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Shape printed as [2, 3, 4], for messages.
template <typename Shape>
std::string shape_str(const Shape& shape) {
    std::ostringstream s;
    s << '[';
    for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    s << ']';
    return s.str();
}

// IEEE half and bfloat16 bits -> float, exactly (weights stored 16-bit in
// .safetensors and ONNX files).
inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const int exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000 | (mant << 13);  // Inf, NaN
    } else if (exp != 0) {
        bits = sign | static_cast<uint32_t>(exp - 15 + 127) << 23 | (mant << 13);
    } else if (mant == 0) {
        bits = sign;  // +-0
    } else {          // subnormal: normalise the mantissa
        int e = 1;
        while (!(mant & 0x400)) mant <<= 1, --e;
        bits = sign | static_cast<uint32_t>(e - 15 + 127) << 23 | ((mant & 0x3FF) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
inline float bf16_to_float(uint16_t v) {  // the top half of a float32
    const uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace detail
}  // namespace deeprnn
