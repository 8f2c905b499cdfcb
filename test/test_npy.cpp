// The .npy reader and writer: round trips, every accepted dtype and format
// version (files written byte by byte here, not by the code under test), and
// an error naming the file and the fault for every malformed input. Files live
// in a fresh mkdtemp directory per test, removed afterwards.
#include <boost/test/unit_test.hpp>

#include "deeprnn.hpp"
#include "expect_error.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

// A fresh temporary directory (mkdtemp), removed with its content at the end of the test.
struct TempDir {
    std::string dir;
    TempDir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/deeprnn_npy_XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        BOOST_REQUIRE_MESSAGE(mkdtemp(buf.data()) != nullptr, "mkdtemp failed for " << tmpl);
        dir = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
    std::string path(const std::string& name) const { return dir + "/" + name; }
};

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    BOOST_REQUIRE_MESSAGE(f.good(), "cannot write " << path);
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The header dict as NumPy writes it.
std::string dict(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

// A complete .npy file: magic, version major.0, header length (2 bytes for 1.0,
// 4 for 2.0/3.0), header padded with spaces and '\n' to a 64-byte boundary, data.
std::string npy_file(int major, const std::string& header_dict, const std::string& data) {
    const size_t pre = major == 1 ? 10 : 12;
    std::string header = header_dict;
    const size_t unpadded = pre + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    std::string out = "\x93NUMPY";
    out += static_cast<char>(major);
    out += '\0';
    const size_t n = header.size();
    out += static_cast<char>(n & 0xff);
    out += static_cast<char>((n >> 8) & 0xff);
    if (major != 1) {
        out += static_cast<char>((n >> 16) & 0xff);
        out += static_cast<char>((n >> 24) & 0xff);
    }
    return out + header + data;
}

// Raw little-endian bytes of values (the test hosts are little-endian).
template <typename T>
std::string raw(std::initializer_list<T> values) {
    std::string s(values.size() * sizeof(T), '\0');
    size_t at = 0;
    for (T v : values) {
        std::memcpy(&s[at], &v, sizeof(T));
        at += sizeof(T);
    }
    return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(npy)

// save_npy then load_npy gives back the same shape and bit-identical data, for
// 0-d, 1-d, 3-d and zero-size shapes, including NaN, infinities and -0.
BOOST_AUTO_TEST_CASE(round_trip) {
    TempDir tmp;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    struct Case {
        std::vector<int64_t> shape;
        std::vector<float> data;
    };
    std::vector<Case> cases = {
        {{}, {3.5f}},
        {{5}, {1.0f, -0.0f, inf, -inf, nan}},
        {{2, 3, 4}, {}},
        {{2, 0, 3}, {}},
        {{0}, {}},
        {{1, 1}, {1e-45f}},  // a denormal
    };
    for (int i = 0; i < 24; ++i) cases[2].data.push_back(0.25f * static_cast<float>(i) - 3.0f);
    int k = 0;
    for (const auto& c : cases) {
        deeprnn::Tensor t;
        t.shape = c.shape;
        t.data = c.data;
        const std::string path = tmp.path("t" + std::to_string(k++) + ".npy");
        deeprnn::save_npy(path, t);
        const deeprnn::Tensor back = deeprnn::load_npy(path);
        BOOST_TEST(back.shape == c.shape);
        BOOST_TEST(same_bits(back.data, c.data));
    }
}

// save_npy writes format 1.0, '<f4', C order, the NumPy shape spelling, and
// pads the header so the data starts on a 64-byte boundary.
BOOST_AUTO_TEST_CASE(save_format) {
    TempDir tmp;
    deeprnn::Tensor t;
    t.shape = {5};
    t.data = {1, 2, 3, 4, 5};
    deeprnn::save_npy(tmp.path("a.npy"), t);
    const std::string b = read_bytes(tmp.path("a.npy"));
    BOOST_REQUIRE(b.size() > 10);
    BOOST_TEST(b.compare(0, 6, "\x93NUMPY") == 0);
    BOOST_TEST(int(b[6]) == 1);
    BOOST_TEST(int(b[7]) == 0);
    const size_t hlen = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    BOOST_TEST((10 + hlen) % 64 == 0u);
    BOOST_TEST(b.size() == 10 + hlen + 5 * sizeof(float));
    const std::string header = b.substr(10, hlen);
    BOOST_TEST(header.find("'descr': '<f4'") != std::string::npos);
    BOOST_TEST(header.find("'fortran_order': False") != std::string::npos);
    BOOST_TEST(header.find("'shape': (5,)") != std::string::npos);
    BOOST_TEST(header.back() == '\n');
    t.shape = {};
    t.data = {1};
    deeprnn::save_npy(tmp.path("s.npy"), t);
    BOOST_TEST(read_bytes(tmp.path("s.npy")).find("'shape': ()") != std::string::npos);
    t.shape = {2, 1, 1};
    t.data = {1, 2};
    deeprnn::save_npy(tmp.path("m.npy"), t);
    BOOST_TEST(read_bytes(tmp.path("m.npy")).find("'shape': (2, 1, 1)") != std::string::npos);
}

// f8 files are read and rounded to float32.
BOOST_AUTO_TEST_CASE(read_f8) {
    TempDir tmp;
    write_bytes(tmp.path("d.npy"), npy_file(1, dict("<f8", "(2, 2)"), raw<double>({1.5, -2.25, 0.1, 1e-3})));
    const auto t = deeprnn::load_npy(tmp.path("d.npy"));
    BOOST_TEST(t.shape == std::vector<int64_t>({2, 2}));
    BOOST_TEST(same_bits(t.data, {1.5f, -2.25f, static_cast<float>(0.1), static_cast<float>(1e-3)}));
}

// i4 and i8 files are read as exact floats, up to +-2^24 inclusive.
BOOST_AUTO_TEST_CASE(read_integers) {
    TempDir tmp;
    write_bytes(tmp.path("i4.npy"), npy_file(1, dict("<i4", "(5,)"), raw<int32_t>({-16777216, -1, 0, 7, 16777216})));
    write_bytes(tmp.path("i8.npy"), npy_file(1, dict("<i8", "(1, 5)"), raw<int64_t>({-16777216, -1, 0, 7, 16777216})));
    const std::vector<float> want = {-16777216.0f, -1.0f, 0.0f, 7.0f, 16777216.0f};
    const auto a = deeprnn::load_npy(tmp.path("i4.npy"));
    BOOST_TEST(a.shape == std::vector<int64_t>({5}));
    BOOST_TEST(same_bits(a.data, want));
    const auto b = deeprnn::load_npy(tmp.path("i8.npy"));
    BOOST_TEST(b.shape == std::vector<int64_t>({1, 5}));
    BOOST_TEST(same_bits(b.data, want));
}

// Format versions 2.0 and 3.0 (4-byte header length) are read like 1.0.
BOOST_AUTO_TEST_CASE(versions_2_and_3) {
    TempDir tmp;
    for (int major : {2, 3}) {
        const std::string p = tmp.path("v" + std::to_string(major) + ".npy");
        write_bytes(p, npy_file(major, dict("<f4", "(3,)"), raw<float>({1.0f, 2.0f, -3.0f})));
        const auto t = deeprnn::load_npy(p);
        BOOST_TEST(t.shape == std::vector<int64_t>({3}));
        BOOST_TEST(same_bits(t.data, {1.0f, 2.0f, -3.0f}));
    }
}

// load_npy_int reads i4, i8 and whole-number f4/f8 into int32, with the shape.
BOOST_AUTO_TEST_CASE(load_int_valid) {
    TempDir tmp;
    std::vector<int64_t> shape;
    write_bytes(tmp.path("a.npy"), npy_file(1, dict("<i4", "(4,)"), raw<int32_t>({-5, 0, 2147483647, -2147483647 - 1})));
    BOOST_TEST(deeprnn::load_npy_int(tmp.path("a.npy"), &shape) ==
               std::vector<int32_t>({-5, 0, 2147483647, -2147483647 - 1}));
    BOOST_TEST(shape == std::vector<int64_t>({4}));
    write_bytes(tmp.path("b.npy"), npy_file(1, dict("<i8", "(2, 1)"), raw<int64_t>({3, 2147483647})));
    BOOST_TEST(deeprnn::load_npy_int(tmp.path("b.npy"), &shape) == std::vector<int32_t>({3, 2147483647}));
    BOOST_TEST(shape == std::vector<int64_t>({2, 1}));
    write_bytes(tmp.path("c.npy"), npy_file(1, dict("<f4", "(3,)"), raw<float>({1.0f, -2.0f, 3.0f})));
    BOOST_TEST(deeprnn::load_npy_int(tmp.path("c.npy")) == std::vector<int32_t>({1, -2, 3}));
    write_bytes(tmp.path("d.npy"), npy_file(1, dict("<f8", "()"), raw<double>({1e9})));
    BOOST_TEST(deeprnn::load_npy_int(tmp.path("d.npy"), &shape) == std::vector<int32_t>({1000000000}));
    BOOST_TEST(shape.empty());
}

// load_npy_int refuses non-integral floats, NaN, and values beyond int32,
// naming the file, the element index and its exact value.
BOOST_AUTO_TEST_CASE(load_int_rejects) {
    TempDir tmp;
    const std::string p = tmp.path("x.npy");
    write_bytes(p, npy_file(1, dict("<f4", "(2,)"), raw<float>({1.0f, 2.5f})));
    expect_error([&] { deeprnn::load_npy_int(p); }, {p, "element 1", "2.5"});
    write_bytes(p, npy_file(1, dict("<f8", "(1,)"), raw<double>({std::nan("")})));
    expect_error([&] { deeprnn::load_npy_int(p); }, {p, "element 0", "nan"});
    write_bytes(p, npy_file(1, dict("<f8", "(1,)"), raw<double>({16777216.5})));
    expect_error([&] { deeprnn::load_npy_int(p); }, {p, "element 0", "16777216.5"});
    write_bytes(p, npy_file(1, dict("<i8", "(3,)"), raw<int64_t>({1, 2, 3000000000})));
    expect_error([&] { deeprnn::load_npy_int(p); }, {p, "element 2", "3000000000"});
    write_bytes(p, npy_file(1, dict("<i8", "(1,)"), raw<int64_t>({-2147483649LL})));
    expect_error([&] { deeprnn::load_npy_int(p); }, {p, "element 0", "-2147483649"});
    write_bytes(p, npy_file(1, dict("<f4", "(1,)"), raw<float>({3e9f})));
    expect_error([&] { deeprnn::load_npy_int(p); }, {p, "element 0", "3000000000"});
}

// A missing file is named.
BOOST_AUTO_TEST_CASE(missing_file) {
    TempDir tmp;
    const std::string p = tmp.path("nope.npy");
    expect_error([&] { deeprnn::load_npy(p); }, {"cannot open", p});
    expect_error([&] { deeprnn::load_npy_int(p); }, {"cannot open", p});
}

// Wrong magic, a file too short for the preamble, and an empty file.
BOOST_AUTO_TEST_CASE(bad_magic) {
    TempDir tmp;
    const std::string p = tmp.path("m.npy");
    std::string b = npy_file(1, dict("<f4", "(1,)"), raw<float>({1.0f}));
    b[1] = 'X';
    write_bytes(p, b);
    expect_error([&] { deeprnn::load_npy(p); }, {p, "bad magic"});
    write_bytes(p, "\x93NUMPY\x01");
    expect_error([&] { deeprnn::load_npy(p); }, {p, "bad magic"});
    write_bytes(p, "");
    expect_error([&] { deeprnn::load_npy(p); }, {p, "bad magic"});
    write_bytes(p, "PK\x03\x04 this is a zip (.npz), not a .npy");
    expect_error([&] { deeprnn::load_npy(p); }, {p, "bad magic"});
}

// Format versions other than 1.0–3.0 are refused, naming the version.
BOOST_AUTO_TEST_CASE(unsupported_version) {
    TempDir tmp;
    const std::string p = tmp.path("v.npy");
    for (int major : {0, 4, 255}) {
        std::string b = npy_file(1, dict("<f4", "(1,)"), raw<float>({1.0f}));
        b[6] = static_cast<char>(major);
        write_bytes(p, b);
        expect_error([&] { deeprnn::load_npy(p); }, {p, "version " + std::to_string(major)});
    }
}

// A header length running past the end of the file, for 2- and 4-byte lengths,
// and a 2.0 file too short to hold its 4-byte length.
BOOST_AUTO_TEST_CASE(header_length_past_end) {
    TempDir tmp;
    const std::string p = tmp.path("h.npy");
    std::string b = npy_file(1, dict("<f4", "(1,)"), raw<float>({1.0f}));
    b[8] = '\xff';
    b[9] = '\xff';
    write_bytes(p, b);
    expect_error([&] { deeprnn::load_npy(p); }, {p, "header length 65535", "past the end"});
    b = npy_file(2, dict("<f4", "(1,)"), raw<float>({1.0f}));
    b[8] = b[9] = b[10] = b[11] = '\xff';
    write_bytes(p, b);
    expect_error([&] { deeprnn::load_npy(p); }, {p, "header length 4294967295", "past the end"});
    write_bytes(p, std::string("\x93NUMPY\x02\x00\x10\x00\x00", 11));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "truncated header"});
}

// Big-endian, half-precision and boolean dtypes are refused, naming the dtype.
BOOST_AUTO_TEST_CASE(unsupported_dtype) {
    TempDir tmp;
    const std::string p = tmp.path("d.npy");
    for (const char* descr : {">f4", "<f2", "|b1", "<u4", "<c8"}) {
        write_bytes(p, npy_file(1, dict(descr, "(2,)"), std::string(16, '\0')));
        expect_error([&] { deeprnn::load_npy(p); }, {p, "dtype", std::string("'") + descr + "'"});
    }
}

// Fortran-order arrays are refused, naming the field and its value.
BOOST_AUTO_TEST_CASE(fortran_order) {
    TempDir tmp;
    const std::string p = tmp.path("f.npy");
    write_bytes(p, npy_file(1, dict("<f4", "(2, 2)", "True"), raw<float>({1, 2, 3, 4})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "fortran_order", "True"});
}

// Malformed header dicts: missing keys, and shapes that are not a tuple of
// non-negative integers are named as they appear.
BOOST_AUTO_TEST_CASE(bad_header) {
    TempDir tmp;
    const std::string p = tmp.path("s.npy");
    // {shape text, what the message quotes}: a list's value ends at its first comma.
    const std::pair<const char*, const char*> shapes[] = {
        {"(2, x)", "'(2, x)'"}, {"[2, 2]", "'[2"}, {"(-1,)", "'(-1,)'"}, {"(2.0,)", "'(2.0,)'"}, {"4", "'4'"}, {"(", "'("}};
    for (const auto& s : shapes) {
        write_bytes(p, npy_file(1, dict("<f4", s.first), raw<float>({1, 2, 3, 4})));
        expect_error([&] { deeprnn::load_npy(p); }, {p, "bad shape", s.second});
    }
    write_bytes(p, npy_file(1, "{'descr': '<f4', 'fortran_order': False, }", raw<float>({1})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "no 'shape'"});
    write_bytes(p, npy_file(1, "{'fortran_order': False, 'shape': (1,), }", raw<float>({1})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "no 'descr'"});
    write_bytes(p, npy_file(1, dict("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), raw<float>({1})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "more than 8 dimensions"});
    write_bytes(p, npy_file(1, dict("<f4", "(4294967296, 4294967296)"), raw<float>({1})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "shape too large"});
    write_bytes(p, npy_file(1, dict("<f4", "(99999999999999999999,)"), raw<float>({1})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "too large"});
}

// Data shorter than the shape needs, and trailing bytes after it, both refused
// with the byte counts and the shape.
BOOST_AUTO_TEST_CASE(data_size_mismatch) {
    TempDir tmp;
    const std::string p = tmp.path("z.npy");
    write_bytes(p, npy_file(1, dict("<f4", "(4,)"), raw<float>({1, 2, 3})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "data is 12 bytes", "[4]", "needs 16"});
    write_bytes(p, npy_file(1, dict("<f4", "(4,)"), raw<float>({1, 2, 3, 4, 5})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "data is 20 bytes", "[4]", "needs 16"});
    write_bytes(p, npy_file(1, dict("<f8", "(2, 2)"), raw<double>({1, 2, 3}) + "x"));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "data is 25 bytes", "[2, 2]", "needs 32"});
    write_bytes(p, npy_file(1, dict("<i4", "(2, 0)"), "\x01"));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "data is 1 bytes", "[2, 0]", "needs 0"});
}

// load_npy refuses integers beyond 2^24 in magnitude (not exact in float32),
// naming the exact value.
BOOST_AUTO_TEST_CASE(integers_beyond_2_24) {
    TempDir tmp;
    const std::string p = tmp.path("i.npy");
    write_bytes(p, npy_file(1, dict("<i4", "(2,)"), raw<int32_t>({1, 16777217})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "16777217"});
    write_bytes(p, npy_file(1, dict("<i4", "(1,)"), raw<int32_t>({-16777217})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "-16777217"});
    write_bytes(p, npy_file(1, dict("<i8", "(1,)"), raw<int64_t>({int64_t(1) << 40})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "1099511627776"});
    write_bytes(p, npy_file(1, dict("<i8", "(1,)"), raw<int64_t>({std::numeric_limits<int64_t>::min()})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "-9223372036854775808"});
    write_bytes(p, npy_file(1, dict("<i8", "(1,)"), raw<int64_t>({std::numeric_limits<int64_t>::max()})));
    expect_error([&] { deeprnn::load_npy(p); }, {p, "9223372036854775807"});
}

// save_npy refuses a tensor whose data disagrees with its shape (including
// shapes with negative dimensions) and names an uncreatable path.
BOOST_AUTO_TEST_CASE(save_errors) {
    TempDir tmp;
    deeprnn::Tensor t;
    t.shape = {2, 2};
    t.data = {1, 2, 3};
    const std::string p = tmp.path("bad.npy");
    expect_error([&] { deeprnn::save_npy(p, t); }, {p, "3 values", "[2, 2]", "needs 4"});
    t.shape = {-1, -3};  // product 3 == data size, still not a shape
    expect_error([&] { deeprnn::save_npy(p, t); }, {p, "[-1, -3]"});
    t.shape = {3};
    const std::string q = tmp.path("no/such/dir/x.npy");
    expect_error([&] { deeprnn::save_npy(q, t); }, {"cannot create", q});
}

// load_npy_dir: a missing directory is named; in a directory mixing .npy files
// and others, only *.npy are loaded (named without the extension), the rest ignored.
BOOST_AUTO_TEST_CASE(load_dir) {
    TempDir tmp;
    expect_error([&] { deeprnn::load_npy_dir(tmp.path("missing")); }, {"cannot open directory", tmp.path("missing")});
    BOOST_TEST(deeprnn::load_npy_dir(tmp.dir).empty());
    deeprnn::Tensor a, b;
    a.shape = {2};
    a.data = {1, 2};
    b.shape = {1, 1};
    b.data = {3};
    deeprnn::save_npy(tmp.path("weight_ih_l0.npy"), a);
    deeprnn::save_npy(tmp.path("W.npy"), b);
    write_bytes(tmp.path("notes.txt"), "not a tensor");
    write_bytes(tmp.path("W.npy.bak"), "garbage");
    write_bytes(tmp.path("model.npz"), "PK garbage");
    write_bytes(tmp.path("npy"), "garbage");
    write_bytes(tmp.path(".npy"), "garbage");  // no name before the extension
    const deeprnn::Weights w = deeprnn::load_npy_dir(tmp.dir);
    BOOST_TEST(w.size() == 2u);
    BOOST_REQUIRE(w.count("weight_ih_l0") == 1u);
    BOOST_REQUIRE(w.count("W") == 1u);
    BOOST_TEST(w.at("weight_ih_l0").shape == a.shape);
    BOOST_TEST(same_bits(w.at("weight_ih_l0").data, a.data));
    BOOST_TEST(w.at("W").shape == b.shape);
    BOOST_TEST(same_bits(w.at("W").data, b.data));
    // A malformed .npy in the directory is an error naming that file.
    write_bytes(tmp.path("broken.npy"), "garbage");
    expect_error([&] { deeprnn::load_npy_dir(tmp.dir); }, {"broken.npy", "bad magic"});
}

BOOST_AUTO_TEST_SUITE_END()
