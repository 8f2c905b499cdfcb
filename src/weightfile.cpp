// weightfile.cpp — weight files: .safetensors, NumPy .npz, and load_weights.
//
// Each format has a parser over a byte buffer (parse_safetensors, parse_npz),
// shared by the file loaders and by fuzzers. Every length, offset, dtype and
// name is checked before the bytes it points to are read, and arithmetic on
// file-supplied numbers is overflow-checked. The loaders memory-map the file
// (MappedFile unmaps on every path out, errors included).
//
// An .npz is a zip of .npy members: each member goes through npy.cpp's
// parse_npy and npy_to_tensor (defined above this module in the amalgamation),
// and so does every F32/F64/I32/I64 safetensors tensor.
#include "common.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace deeprnn {
namespace detail {

static uint64_t le(const unsigned char* p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// A whole file, read-only: memory-mapped, or read into memory where mapping
// fails (e.g. a file system without mmap).
class MappedFile {
public:
    explicit MappedFile(const std::string& path) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("cannot open '", path, "': ", std::generic_category().message(errno));
        struct stat st;
        const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
        if (regular && st.st_size > 0) {
            void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
            if (p != MAP_FAILED) {
                map_ = p;
                data_ = static_cast<const unsigned char*>(p);
                size_ = static_cast<size_t>(st.st_size);
            }
        }
        ::close(fd);  // a mapping outlives its descriptor
        if (!regular) fail("'", path, "' is not a regular file");
        if (!map_ && st.st_size > 0) {
            copy_ = read_file(path);
            data_ = reinterpret_cast<const unsigned char*>(copy_.data());
            size_ = copy_.size();
        }
    }
    ~MappedFile() {
        if (map_) ::munmap(map_, size_);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    const unsigned char* data() const { return data_; }
    size_t size() const { return size_; }

private:
    void* map_ = nullptr;
    std::string copy_;
    const unsigned char* data_ = nullptr;
    size_t size_ = 0;
};

// ---- safetensors --------------------------------------------------------------
// Layout: u64 little-endian N, then N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// then the data; offsets are relative to the data's start, and the tensors
// tile the data exactly (no gaps, no overlaps, nothing after the last), as
// the reference implementation requires.

// Reader for the JSON subset a safetensors header uses: objects, strings,
// non-negative integers, arrays of them. Nesting is fixed by the format, so
// there is no recursion a crafted file could deepen.
class HeaderReader {
public:
    HeaderReader(const char* p, size_t n, const std::string& what) : begin_(p), p_(p), end_(p + n), what_(what) {}

    [[noreturn]] void error(const std::string& problem) const {
        fail(what_, ": header: ", problem, " at byte ", 8 + (p_ - begin_));
    }
    void space() {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
    }
    bool eat(char c) {
        space();
        if (p_ < end_ && *p_ == c) return ++p_, true;
        return false;
    }
    void expect(char c) {
        if (!eat(c)) error(cat("expected '", c, "'"));
    }
    bool at_end() {
        space();
        return p_ == end_;
    }

    // Calls on_key(key) for each key of an object; on_key reads the value.
    template <typename OnKey>
    void object(OnKey on_key) {
        expect('{');
        if (eat('}')) return;
        do {
            const std::string key = string();
            expect(':');
            on_key(key);
        } while (eat(','));
        expect('}');
    }

    std::string string() {
        expect('"');
        std::string s;
        while (p_ < end_ && *p_ != '"') {
            const unsigned char c = static_cast<unsigned char>(*p_++);
            if (c < 0x20) error("control character in a string");
            if (c != '\\') {
                s += static_cast<char>(c);
                continue;
            }
            if (p_ == end_) break;
            const char e = *p_++;
            switch (e) {
                case '"': case '\\': case '/': s += e; break;
                case 'b': s += '\b'; break;
                case 'f': s += '\f'; break;
                case 'n': s += '\n'; break;
                case 'r': s += '\r'; break;
                case 't': s += '\t'; break;
                case 'u': utf8(s); break;
                default: error(cat("bad escape '\\", e, "'"));
            }
        }
        if (p_ == end_) error("unterminated string");
        ++p_;
        return s;
    }

    uint64_t integer() {
        space();
        if (p_ == end_ || *p_ < '0' || *p_ > '9') error("expected a non-negative integer");
        uint64_t v = 0;
        while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
            if (v > (UINT64_MAX - 9) / 10) error("integer too large");
            v = v * 10 + static_cast<uint64_t>(*p_++ - '0');
        }
        if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) error("expected an integer, found a fraction");
        return v;
    }

    std::vector<uint64_t> integers() {
        std::vector<uint64_t> v;
        expect('[');
        if (eat(']')) return v;
        do {
            if (v.size() == 8) error("more than 8 values");
            v.push_back(integer());
        } while (eat(','));
        expect(']');
        return v;
    }

private:
    unsigned hex4() {
        if (end_ - p_ < 4) error("truncated \\u escape");
        unsigned v = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = *p_++;
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) error("bad \\u escape");
            v = v * 16 + static_cast<unsigned>(d);
        }
        return v;
    }
    // \uXXXX (a surrogate pair for code points above U+FFFF) appended as UTF-8.
    void utf8(std::string& s) {
        unsigned cp = hex4();
        if (cp >= 0xDC00 && cp <= 0xDFFF) error("lone low surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') error("lone high surrogate");
            p_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp < 0x80) {
            s += static_cast<char>(cp);
        } else if (cp < 0x800) {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            s += static_cast<char>(0xE0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            s += static_cast<char>(0xF0 | (cp >> 18));
            s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }

    const char* begin_;
    const char* p_;
    const char* end_;
    const std::string& what_;
};

struct SafetensorsEntry {
    std::string name, dtype;
    std::vector<uint64_t> shape, offsets;
};

// Bytes per element of the dtypes deeprnn converts; 0 for any other.
static int dtype_bytes(const std::string& dtype) {
    if (dtype == "F32" || dtype == "I32") return 4;
    if (dtype == "F64" || dtype == "I64") return 8;
    if (dtype == "F16" || dtype == "BF16") return 2;
    return 0;
}

Weights parse_safetensors(const unsigned char* p, size_t n, const std::string& what) {
    if (n < 8) fail(what, ": ", n, " bytes: too short for a .safetensors file (needs an 8-byte header length)");
    const uint64_t hlen = le(p, 8);
    if (hlen > n - 8) fail(what, ": header length ", hlen, " runs past the end of the file (", n, " bytes); truncated or not .safetensors");
    HeaderReader json(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(hlen), what);
    std::vector<SafetensorsEntry> entries;
    json.object([&](const std::string& name) {
        if (name == "__metadata__") {  // free-form strings; checked, then ignored
            json.object([&](const std::string&) { json.string(); });
            return;
        }
        for (const auto& e : entries)
            if (e.name == name) json.error(cat("tensor '", name, "' appears twice"));
        SafetensorsEntry e;
        e.name = name;
        bool dtype = false, shape = false, offsets = false;
        json.object([&](const std::string& key) {
            if (key == "dtype" && !dtype) e.dtype = json.string(), dtype = true;
            else if (key == "shape" && !shape) e.shape = json.integers(), shape = true;
            else if (key == "data_offsets" && !offsets) e.offsets = json.integers(), offsets = true;
            else json.error(cat("tensor '", name, "': unexpected or repeated key '", key, "'"));
        });
        if (!dtype || !shape || !offsets) json.error(cat("tensor '", name, "' lacks dtype, shape or data_offsets"));
        entries.push_back(std::move(e));
    });
    if (!json.at_end()) json.error("trailing bytes after the header object");

    // Every entry checked against the data before any tensor is read.
    const uint64_t data_size = n - 8 - hlen;
    for (const auto& e : entries) {
        const std::string t = cat(what, ": tensor '", e.name, "'");
        const int item = dtype_bytes(e.dtype);
        if (!item) fail(t, ": dtype ", e.dtype, " not supported (need F32, F64, F16, BF16, I32 or I64)");
        if (e.offsets.size() != 2) fail(t, ": data_offsets has ", e.offsets.size(), " values, expected 2");
        uint64_t bytes = static_cast<uint64_t>(item);
        for (uint64_t d : e.shape)
            if (d > INT64_MAX || __builtin_mul_overflow(bytes, d, &bytes)) fail(t, ": shape ", shape_str(e.shape), " is too large");
        const uint64_t begin = e.offsets[0], end = e.offsets[1];
        if (begin > end || end > data_size)
            fail(t, ": data_offsets [", begin, ", ", end, "] outside the ", data_size, "-byte data section; truncated or corrupt");
        if (end - begin != bytes)
            fail(t, ": data_offsets [", begin, ", ", end, "] hold ", end - begin, " bytes but ", e.dtype, " ",
                 shape_str(e.shape), " needs ", bytes);
    }
    std::vector<const SafetensorsEntry*> order;
    for (const auto& e : entries) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](auto a, auto b) { return a->offsets < b->offsets; });
    uint64_t covered = 0;
    for (const auto* e : order) {
        if (e->offsets[0] != covered)
            fail(what, ": tensor '", e->name, "' starts at data offset ", e->offsets[0], ", expected ", covered,
                 " (tensors must tile the data section without gaps or overlaps)");
        covered = e->offsets[1];
    }
    if (covered != data_size)
        fail(what, ": ", data_size - covered, " bytes after the last tensor; corrupt or not .safetensors");

    Weights w;
    const unsigned char* data = p + 8 + hlen;
    for (const auto& e : entries) {
        const std::string t = cat(what, ": tensor '", e.name, "'");
        NpyArray a;
        a.kind = e.dtype[0] == 'I' ? 'i' : 'f';
        a.item = dtype_bytes(e.dtype);
        a.shape.assign(e.shape.begin(), e.shape.end());  // each dimension checked <= INT64_MAX
        a.data = data + e.offsets[0];
        a.count = static_cast<int64_t>((e.offsets[1] - e.offsets[0]) / a.item);
        if (a.item != 2) {
            w[e.name] = npy_to_tensor(a, t);
            continue;
        }
        Tensor& out = w[e.name];
        out.shape = a.shape;
        out.data.resize(static_cast<size_t>(a.count));
        for (int64_t i = 0; i < a.count; ++i) {
            const uint16_t v = static_cast<uint16_t>(le(a.data + 2 * i, 2));
            out.data[i] = e.dtype == "F16" ? half_to_float(v) : bf16_to_float(v);
        }
    }
    return w;
}

// ---- npz ----------------------------------------------------------------------
// A zip archive (PKWARE APPNOTE) of NAME.npy members. The central directory,
// found through the end record, is the authority on names, sizes and where
// each local header is; the local header only tells where the data starts.

// One member of a zip archive, stored (not compressed): its name and bytes.
struct ZipMember {
    std::string name;
    const unsigned char* data;
    size_t size;
};

static uint32_t crc32(const unsigned char* p, size_t n) {
    static const auto table = [] {
        std::vector<uint32_t> t(256);
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// The members of the zip archive p[0, n), in central-directory order, each
// CRC-checked; compressed members are refused (`deflate_hint` says what to do
// instead), and a file that is no zip is "not <kind> file".
std::vector<ZipMember> stored_zip_members(const unsigned char* p, size_t n, const std::string& what, const char* kind,
                                          const char* deflate_hint) {
    const bool zip_magic = n >= 4 && le(p, 4) == 0x04034b50;
    // The end record is 22 bytes plus a comment of at most 65535, at the very end.
    size_t eocd = n;
    if (n >= 22)
        for (size_t i = n - 22, lowest = i - std::min<size_t>(i, 65535);; --i) {
            if (le(p + i, 4) == 0x06054b50 && i + 22 + le(p + i + 20, 2) == n) {
                eocd = i;
                break;
            }
            if (i == lowest) break;
        }
    if (eocd == n)
        fail(what, zip_magic ? ": zip end record missing; the file is truncated" : cat(": not ", kind, " file (no zip signature)"));
    const unsigned char* end = p + eocd;
    if (le(end + 4, 2) != 0 || le(end + 6, 2) != 0) fail(what, ": multi-disk zip archives are not supported");
    const uint64_t count = le(end + 10, 2), cd_size = le(end + 12, 4), cd_off = le(end + 16, 4);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF)
        fail(what, ": zip64 archive (over 4 GiB or 65535 members) is not supported");
    if (cd_off > eocd || cd_size > eocd - cd_off)
        fail(what, ": central directory [", cd_off, ", +", cd_size, ") lies outside the archive; truncated or corrupt");

    std::vector<ZipMember> members;
    uint64_t at = cd_off;
    const uint64_t cd_end = cd_off + cd_size;
    for (uint64_t k = 0; k < count; ++k) {
        if (cd_end - at < 46 || le(p + at, 4) != 0x02014b50)
            fail(what, ": central directory entry ", k, " of ", count, " is missing or corrupt");
        const unsigned char* c = p + at;
        const uint64_t name_len = le(c + 28, 2), extra_len = le(c + 30, 2), comment_len = le(c + 32, 2);
        if (cd_end - at - 46 < name_len + extra_len + comment_len)
            fail(what, ": central directory entry ", k, " runs past the directory; corrupt");
        const std::string member(reinterpret_cast<const char*>(c + 46), static_cast<size_t>(name_len));
        at += 46 + name_len + extra_len + comment_len;

        const std::string m = cat(what, ": member '", member, "'");
        const uint64_t flags = le(c + 8, 2), method = le(c + 10, 2), crc = le(c + 16, 4);
        const uint64_t csize = le(c + 20, 4), usize = le(c + 24, 4), local = le(c + 42, 4);
        if (flags & 1) fail(m, " is encrypted");
        if (method == 8) fail(m, " is deflate-compressed", deflate_hint);
        if (method != 0) fail(m, ": zip compression method ", method, " not supported (need stored members)");
        if (csize == 0xFFFFFFFF || usize == 0xFFFFFFFF || local == 0xFFFFFFFF)
            fail(m, ": zip64 member (over 4 GiB) is not supported");
        if (csize != usize) fail(m, ": stored member has compressed size ", csize, " != size ", usize, "; corrupt");
        if (local > eocd || eocd - local < 30 || le(p + local, 4) != 0x04034b50)
            fail(m, ": local header at offset ", local, " is missing or corrupt");
        const uint64_t local_name = le(p + local + 26, 2), data = local + 30 + local_name + le(p + local + 28, 2);
        if (data > eocd || eocd - data < csize)
            fail(m, ": data [", data, ", +", csize, ") runs past the archive; truncated or corrupt");
        if (local_name != name_len || std::memcmp(p + local + 30, member.data(), member.size()) != 0)
            fail(m, ": local header names a different member; corrupt");
        if (crc32(p + data, static_cast<size_t>(csize)) != crc) fail(m, ": CRC-32 mismatch; the file is corrupt");
        members.push_back({member, p + data, static_cast<size_t>(csize)});
    }
    return members;
}

Weights parse_npz(const unsigned char* p, size_t n, const std::string& what) {
    Weights w;
    for (const ZipMember& z : stored_zip_members(p, n, what, "a .npz",
                                                  " (np.savez_compressed); deeprnn reads only stored members: "
                                                  "save with np.savez, or use .safetensors")) {
        const std::string m = cat(what, ": member '", z.name, "'");
        if (!ends_with(z.name, ".npy") || z.name.size() == 4) fail(m, " is not a NAME.npy array");
        const std::string name = z.name.substr(0, z.name.size() - 4);
        if (w.count(name)) fail(m, ": array '", name, "' appears twice");
        w[name] = npy_to_tensor(parse_npy(z.data, z.size, m), m);
    }
    return w;
}

}  // namespace detail

Weights load_safetensors(const std::string& path) {
    const detail::MappedFile f(path);
    return detail::parse_safetensors(f.data(), f.size(), path);
}

Weights load_npz(const std::string& path) {
    const detail::MappedFile f(path);
    return detail::parse_npz(f.data(), f.size(), path);
}

Weights strip_prefix(Weights weights, const std::string& prefix) {
    Weights out;
    for (auto it = weights.begin(); it != weights.end();) {
        auto next = std::next(it);
        if (it->first.compare(0, prefix.size(), prefix) == 0) {
            auto node = weights.extract(it);
            node.key() = node.key().substr(prefix.size());
            out.insert(std::move(node));
        }
        it = next;
    }
    return out;
}

Weights load_weights(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
        detail::fail("load_weights: cannot open '", path, "': ", std::generic_category().message(errno));
    if (S_ISDIR(st.st_mode)) return load_npy_dir(path);
    if (detail::ends_with(path, ".safetensors")) return load_safetensors(path);
    if (detail::ends_with(path, ".npz")) return load_npz(path);
    if (detail::ends_with(path, ".pt") || detail::ends_with(path, ".pth")) return load_torch(path);
    if (detail::ends_with(path, ".onnx")) return load_onnx(path);
    if (detail::ends_with(path, ".npy")) {
        const std::string file = path.substr(path.find_last_of('/') + 1);  // npos + 1 == 0
        return Weights{{file.substr(0, file.size() - 4), load_npy(path)}};
    }
    detail::fail("load_weights: '", path, "': unknown kind of weight file (need .safetensors, .npz, .pt, .pth, .npy, .onnx or a directory of .npy files; load_torch reads a torch.save file of any name)");
}

}  // namespace deeprnn
