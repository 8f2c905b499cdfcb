// npy.cpp — NumPy .npy reading and writing, strict about everything it reads.
//
// The parser works on a byte buffer so fuzzers and file loaders share it;
// every size is checked before it is used.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iomanip>
#include <limits>

namespace deeprnn {

int64_t Tensor::numel() const {
    // A negative dimension, or a product beyond int64, implies no valid count:
    // -1, which no data size matches (and no signed overflow).
    for (int64_t d : shape)
        if (d < 0) return -1;
    for (int64_t d : shape)
        if (d == 0) return 0;
    int64_t n = 1;
    for (int64_t d : shape) {
        if (n > std::numeric_limits<int64_t>::max() / d) return -1;
        n *= d;
    }
    return n;
}

namespace detail {

struct NpyArray {
    char kind = 'f';             // 'f' float, 'i' signed integer
    int item = 4;                // bytes per element
    std::vector<int64_t> shape;
    const unsigned char* data = nullptr;  // points into the caller's buffer
    int64_t count = 0;
};

static std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open '", path, "'");
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) fail("cannot read '", path, "'");
    return bytes;
}

// Value of key `key` in the header dict, as raw text up to the next top-level comma.
static std::string dict_value(const std::string& header, const std::string& key, const std::string& what) {
    const std::string quoted[2] = {"'" + key + "'", "\"" + key + "\""};
    size_t at = std::string::npos;
    for (const auto& q : quoted)
        if ((at = header.find(q)) != std::string::npos) {
            at += q.size();
            break;
        }
    if (at == std::string::npos) fail(what, ": header has no '", key, "'");
    at = header.find(':', at);
    if (at == std::string::npos) fail(what, ": header key '", key, "' has no value");
    ++at;
    while (at < header.size() && header[at] == ' ') ++at;
    size_t end = at;
    int depth = 0;
    for (; end < header.size(); ++end) {
        const char ch = header[end];
        if (ch == '(') ++depth;
        if (ch == ')') --depth;
        if ((ch == ',' && depth == 0) || ch == '}') break;
    }
    return header.substr(at, end - at);
}

static std::vector<int64_t> parse_shape(const std::string& text, const std::string& what) {
    if (text.size() < 2 || text.front() != '(' || text.back() != ')') fail(what, ": bad shape '", text, "'");
    std::vector<int64_t> shape;
    size_t i = 1;
    while (i < text.size() - 1) {
        while (i < text.size() - 1 && (text[i] == ' ' || text[i] == ',')) ++i;
        if (i >= text.size() - 1) break;
        if (text[i] < '0' || text[i] > '9') fail(what, ": bad shape '", text, "'");
        int64_t v = 0;
        while (i < text.size() - 1 && text[i] >= '0' && text[i] <= '9') {
            if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail(what, ": shape dimension too large");
            v = v * 10 + (text[i++] - '0');
        }
        shape.push_back(v);
        if (shape.size() > 8) fail(what, ": more than 8 dimensions");
    }
    return shape;
}

NpyArray parse_npy(const unsigned char* p, size_t n, const std::string& what) {
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (n < 10 || std::memcmp(p, magic, 6) != 0) fail(what, ": not a .npy file (bad magic)");
    const int major = p[6];
    if (major < 1 || major > 3) fail(what, ": unsupported .npy format version ", major);
    size_t hlen, hstart;
    if (major == 1) {
        hlen = p[8] | (p[9] << 8);
        hstart = 10;
    } else {
        if (n < 12) fail(what, ": truncated header");
        hlen = static_cast<size_t>(p[8]) | (static_cast<size_t>(p[9]) << 8) | (static_cast<size_t>(p[10]) << 16) |
               (static_cast<size_t>(p[11]) << 24);
        hstart = 12;
    }
    if (hlen > n - hstart) fail(what, ": header length ", hlen, " runs past the end of the file");
    const std::string header(reinterpret_cast<const char*>(p + hstart), hlen);

    NpyArray a;
    const std::string descr = dict_value(header, "descr", what);
    if (descr == "'<f4'") a = NpyArray{'f', 4, {}, nullptr, 0};
    else if (descr == "'<f8'") a = NpyArray{'f', 8, {}, nullptr, 0};
    else if (descr == "'<i4'") a = NpyArray{'i', 4, {}, nullptr, 0};
    else if (descr == "'<i8'") a = NpyArray{'i', 8, {}, nullptr, 0};
    else fail(what, ": dtype ", descr, " not supported (need little-endian f4, f8, i4 or i8)");
    const std::string order = dict_value(header, "fortran_order", what);
    if (order != "False") fail(what, ": fortran_order = ", order, " not supported (need C order)");
    a.shape = parse_shape(dict_value(header, "shape", what), what);
    a.count = 1;
    for (int64_t d : a.shape) {
        if (d != 0 && a.count > std::numeric_limits<int64_t>::max() / 8 / d) fail(what, ": shape too large");
        a.count *= d;
    }
    const size_t body = n - hstart - hlen;
    const uint64_t need = static_cast<uint64_t>(a.count) * a.item;
    if (body != need) fail(what, ": data is ", body, " bytes but shape ", shape_str(a.shape), " needs ", need);
    a.data = p + hstart + hlen;
    return a;
}

// Element i of an integer array, exactly.
static int64_t int_element(const NpyArray& a, int64_t i) {
    const unsigned char* q = a.data + i * a.item;
    if (a.item == 4) { int32_t v; std::memcpy(&v, q, 4); return v; }
    int64_t v;
    std::memcpy(&v, q, 8);
    return v;
}

// Element i as double, whatever the stored type.
static double element(const NpyArray& a, int64_t i) {
    const unsigned char* q = a.data + i * a.item;
    if (a.kind == 'f' && a.item == 4) { float v; std::memcpy(&v, q, 4); return v; }
    if (a.kind == 'f') { double v; std::memcpy(&v, q, 8); return v; }
    return static_cast<double>(int_element(a, i));
}

Tensor npy_to_tensor(const NpyArray& a, const std::string& what) {
    Tensor t;
    t.shape = a.shape;
    t.data.resize(static_cast<size_t>(a.count));
    for (int64_t i = 0; i < a.count; ++i) {
        if (a.kind == 'i') {
            const int64_t v = int_element(a, i);  // printed exactly, not as a rounded double
            if (v > 16777216 || v < -16777216)
                fail(what, ": element ", i, " = ", v, ": integer beyond 2^24 does not fit float32 exactly");
            t.data[i] = static_cast<float>(v);
        } else {
            t.data[i] = static_cast<float>(element(a, i));
        }
    }
    return t;
}

}  // namespace detail

Tensor load_npy(const std::string& path) {
    const std::string bytes = detail::read_file(path);
    const auto a = detail::parse_npy(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), path);
    return detail::npy_to_tensor(a, path);
}

std::vector<int32_t> load_npy_int(const std::string& path, std::vector<int64_t>* shape) {
    const std::string bytes = detail::read_file(path);
    const auto a = detail::parse_npy(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), path);
    std::vector<int32_t> out(static_cast<size_t>(a.count));
    for (int64_t i = 0; i < a.count; ++i) {
        if (a.kind == 'i') {
            const int64_t v = detail::int_element(a, i);
            if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
                detail::fail(path, ": element ", i, " = ", v, " is not a 32-bit integer");
            out[i] = static_cast<int32_t>(v);
            continue;
        }
        const double v = detail::element(a, i);
        if (!(v == std::floor(v)) || v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
            detail::fail(path, ": element ", i, " = ", std::setprecision(17), v, " is not a 32-bit integer");
        out[i] = static_cast<int32_t>(v);
    }
    if (shape) *shape = a.shape;
    return out;
}

void save_npy(const std::string& path, const Tensor& t) {
    if (static_cast<int64_t>(t.data.size()) != t.numel())
        detail::fail("save_npy('", path, "'): tensor has ", t.data.size(), " values but shape ",
                     detail::shape_str(t.shape), " needs ", t.numel());
    std::string shape = "(";
    for (size_t i = 0; i < t.shape.size(); ++i) shape += std::to_string(t.shape[i]) + (t.shape.size() == 1 ? "," : i + 1 < t.shape.size() ? ", " : "");
    shape += ")";
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    // Pad with spaces so the data starts on a 64-byte boundary, as NumPy does.
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    if (header.size() > 65535) detail::fail("save_npy('", path, "'): header too long");
    std::ofstream f(path, std::ios::binary);
    if (!f) detail::fail("cannot create '", path, "'");
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                   static_cast<unsigned char>(header.size() & 0xff),
                                   static_cast<unsigned char>(header.size() >> 8)};
    f.write(reinterpret_cast<const char*>(pre), 10);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    f.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * sizeof(float)));
    if (!f) detail::fail("cannot write '", path, "'");
}

Weights load_npy_dir(const std::string& dir) {
    DIR* d = opendir(dir.c_str());
    if (!d) detail::fail("cannot open directory '", dir, "'");
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) names.push_back(name);
    }
    closedir(d);
    Weights w;
    for (const auto& name : names) w[name.substr(0, name.size() - 4)] = load_npy(dir + "/" + name);
    return w;
}

}  // namespace deeprnn
