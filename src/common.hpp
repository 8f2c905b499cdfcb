// common.hpp — small helpers every module uses: error formatting and checks.
#pragma once
#include "deeprnn.hpp"

#include <cstddef>
#include <cstdint>
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

}  // namespace detail
}  // namespace deeprnn
