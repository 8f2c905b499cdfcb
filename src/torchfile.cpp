// torchfile.cpp — PyTorch's torch.save files (.pt, .pth), read without Python
// and without running them.
//
// torch.save (PyTorch >= 1.6) writes a zip of stored members: <dir>/data.pkl,
// a pickle of the saved object, whose tensors name their storages by key, and
// <dir>/data/<key>, each storage's raw little-endian bytes. A pickle is a
// program for Python's stack machine; here it is read as data. The opcodes of
// protocols 2-4 that build dicts, lists, tuples, strings and numbers are
// interpreted; of the calls a pickle makes, three are evaluated here, by
// name, and nothing is ever looked up or run: collections.OrderedDict (a
// dict), torch._utils._rebuild_tensor_v2 (a tensor: a view of a storage) and
// _rebuild_parameter (an nn.Parameter: its tensor). Any other call yields an
// opaque value that is skipped, so a hostile file can only fail or load less.
//
// Every floating-point tensor reachable from the saved object through dicts
// becomes a float32 Tensor named by its path of keys joined with "." (a
// checkpoint {"model": model.state_dict(), "epoch": 3} gives
// "model.lstm.weight_ih_l0"); integer and bool tensors, lists and everything
// else are skipped.
#include "common.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace deeprnn {
namespace detail {

namespace {

// A Python value the pickle built. Values live in the Unpickler's arena and
// refer to each other by pointer, so a pickle that shares or nests an object
// in itself makes no copies and no ownership cycles.
struct PyValue {
    enum Kind { none, boolean, integer, real, text, tuple, list, dict, global, storage, tensor, opaque } kind = none;
    int64_t i = 0;                 // integer, boolean; storage: element count
    std::string s;                 // text; global: "module.name"; storage: key
    std::vector<PyValue*> items;   // tuple, list; dict: key, value, key, value, ...
    // storage: its element type; tensor: its storage and view.
    int elem_bytes = 0;
    char dtype = 0;                // 'f' f32, 'd' f64, 'h' f16, 'b' bf16; 0: not floating point
    PyValue* of = nullptr;         // tensor: its storage
    int64_t offset = 0;            // tensor: first element in the storage
    std::vector<int64_t> sizes, strides;
};

class Unpickler {
public:
    Unpickler(const unsigned char* p, size_t n, const std::string& what) : p_(p), n_(n), what_(what) {}

    PyValue* run() {
        for (;;) {
            const unsigned char op = byte();
            if (op == '.') {  // STOP
                PyValue* result = pop();
                if (!stack_.empty()) bad("STOP leaves ", stack_.size(), " values on the stack");
                return result;
            }
            step(op);
        }
    }

private:
    template <class... A>
    [[noreturn]] void bad(const A&... parts) const {
        fail(what_, ": pickle byte ", at_, ": ", parts...);
    }

    const unsigned char* take(size_t k) {
        if (n_ - at_ < k) fail(what_, ": pickle ends inside an opcode at byte ", at_, "; truncated or corrupt");
        const unsigned char* q = p_ + at_;
        at_ += k;
        return q;
    }
    unsigned char byte() { return *take(1); }
    uint64_t le(size_t k) {
        const unsigned char* q = take(k);
        uint64_t v = 0;
        for (size_t j = k; j-- > 0;) v = (v << 8) | q[j];
        return v;
    }
    std::string bytes(uint64_t k) {
        if (k > n_ - at_) bad("a string of ", k, " bytes runs past the pickle");
        return std::string(reinterpret_cast<const char*>(take(static_cast<size_t>(k))), static_cast<size_t>(k));
    }
    std::string line() {
        std::string s;
        for (char c; (c = static_cast<char>(byte())) != '\n';) s += c;
        return s;
    }

    PyValue* make(PyValue::Kind kind) {
        arena_.push_back(std::make_unique<PyValue>());
        arena_.back()->kind = kind;
        return arena_.back().get();
    }
    PyValue* push(PyValue* v) {
        stack_.push_back(v);
        return v;
    }
    PyValue* pop() {
        if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) bad("pops an empty stack");
        PyValue* v = stack_.back();
        stack_.pop_back();
        return v;
    }
    PyValue* top(PyValue::Kind kind, const char* op) {
        if (stack_.size() <= (marks_.empty() ? 0 : marks_.back()) || stack_.back()->kind != kind)
            bad(op, " needs a ", kind == PyValue::dict ? "dict" : "list", " below its operands");
        return stack_.back();
    }
    std::vector<PyValue*> pop_mark() {
        if (marks_.empty()) bad("no MARK to pop to");
        std::vector<PyValue*> v(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
        stack_.resize(marks_.back());
        marks_.pop_back();
        return v;
    }
    PyValue* tuple(std::vector<PyValue*> items) {
        PyValue* t = make(PyValue::tuple);
        t->items = std::move(items);
        return t;
    }
    PyValue* integer(int64_t i) {
        PyValue* v = make(PyValue::integer);
        v->i = i;
        return v;
    }
    void memoize(uint64_t index) {
        if (stack_.empty()) bad("memoizes an empty stack");
        memo_[index] = stack_.back();
    }
    PyValue* recall(uint64_t index) {
        const auto it = memo_.find(index);
        if (it == memo_.end()) bad("memo ", index, " was never stored");
        return it->second;
    }

    void step(unsigned char op) {
        switch (op) {
            case 0x80:  // PROTO
                if (byte() > 5) bad("pickle protocol above 5");
                break;
            case 0x95: take(8); break;  // FRAME: a length hint
            case '(': marks_.push_back(stack_.size()); break;  // MARK
            case '0': pop(); break;  // POP
            case '1': pop_mark(); break;  // POP_MARK
            case 'N': push(make(PyValue::none)); break;
            case 0x88: case 0x89: push(make(PyValue::boolean))->i = op == 0x88; break;  // NEWTRUE, NEWFALSE
            case 'K': push(integer(static_cast<int64_t>(le(1)))); break;  // BININT1
            case 'M': push(integer(static_cast<int64_t>(le(2)))); break;  // BININT2
            case 'J': push(integer(static_cast<int32_t>(le(4)))); break;  // BININT
            case 0x8a: {  // LONG1: little-endian two's complement of n bytes
                const size_t k = byte();
                if (k > 8) bad("an integer of ", k, " bytes");
                uint64_t v = k ? le(k) : 0;
                if (k && k < 8 && (v >> (8 * k - 1)) & 1) v |= ~uint64_t{0} << (8 * k);  // sign-extend
                push(integer(static_cast<int64_t>(v)));
                break;
            }
            case 'G': take(8), push(make(PyValue::real)); break;  // BINFLOAT: a number no tensor needs
            case 'X': push(make(PyValue::text))->s = bytes(le(4)); break;     // BINUNICODE
            case 0x8c: push(make(PyValue::text))->s = bytes(le(1)); break;    // SHORT_BINUNICODE
            case 0x8d: push(make(PyValue::text))->s = bytes(le(8)); break;    // BINUNICODE8
            case 'B': push(make(PyValue::opaque))->s = bytes(le(4)); break;   // BINBYTES
            case 'C': push(make(PyValue::opaque))->s = bytes(le(1)); break;   // SHORT_BINBYTES
            case ')': push(make(PyValue::tuple)); break;                      // EMPTY_TUPLE
            case ']': push(make(PyValue::list)); break;                       // EMPTY_LIST
            case '}': push(make(PyValue::dict)); break;                       // EMPTY_DICT
            case 't': push(tuple(pop_mark())); break;                         // TUPLE
            case 0x85: case 0x86: case 0x87: {                                // TUPLE1, 2, 3
                std::vector<PyValue*> items(static_cast<size_t>(op - 0x84));
                for (size_t k = items.size(); k-- > 0;) items[k] = pop();
                push(tuple(std::move(items)));
                break;
            }
            case 'q': memoize(le(1)); break;             // BINPUT
            case 'r': memoize(le(4)); break;             // LONG_BINPUT
            case 0x94: memoize(memo_.size()); break;     // MEMOIZE
            case 'h': push(recall(le(1))); break;        // BINGET
            case 'j': push(recall(le(4))); break;        // LONG_BINGET
            case 'c': {                                  // GLOBAL "module\nname\n"
                PyValue* g = make(PyValue::global);
                g->s = line();
                g->s += "." + line();
                push(g);
                break;
            }
            case 0x93: {  // STACK_GLOBAL
                PyValue* name = pop();
                PyValue* module = pop();
                if (name->kind != PyValue::text || module->kind != PyValue::text) bad("STACK_GLOBAL of non-strings");
                push(make(PyValue::global))->s = module->s + "." + name->s;
                break;
            }
            case 'R': case 0x81: {  // REDUCE: callable(*args); NEWOBJ: cls.__new__(cls, *args)
                PyValue* args = pop();
                PyValue* callable = pop();
                push(call(callable, args));
                break;
            }
            case 'Q': push(storage(pop())); break;  // BINPERSID
            case 'b': pop(); break;                 // BUILD: an object's state (OrderedDict's _metadata), not needed
            case 's': {                             // SETITEM
                PyValue* v = pop();
                PyValue* k = pop();
                PyValue* d = top(PyValue::dict, "SETITEM");
                d->items.push_back(k);
                d->items.push_back(v);
                break;
            }
            case 'u': {  // SETITEMS
                std::vector<PyValue*> kv = pop_mark();
                if (kv.size() % 2) bad("SETITEMS with an odd number of values");
                PyValue* d = top(PyValue::dict, "SETITEMS");
                d->items.insert(d->items.end(), kv.begin(), kv.end());
                break;
            }
            case 'a': {  // APPEND
                PyValue* v = pop();
                top(PyValue::list, "APPEND")->items.push_back(v);
                break;
            }
            case 'e': {  // APPENDS
                std::vector<PyValue*> vs = pop_mark();
                PyValue* l = top(PyValue::list, "APPENDS");
                l->items.insert(l->items.end(), vs.begin(), vs.end());
                break;
            }
            default: bad("opcode 0x", "0123456789abcdef"[op >> 4], "0123456789abcdef"[op & 15], " is not one torch.save writes");
        }
    }

    // The three calls evaluated here; any other gives an opaque value.
    PyValue* call(PyValue* callable, PyValue* args) {
        if (callable->kind != PyValue::global || args->kind != PyValue::tuple) return make(PyValue::opaque);
        const std::string& f = callable->s;
        const std::vector<PyValue*>& a = args->items;
        if (f == "collections.OrderedDict") return make(PyValue::dict);
        if (f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state")
            return a.empty() ? make(PyValue::opaque) : a[0];
        if (f != "torch._utils._rebuild_tensor_v2") return make(PyValue::opaque);
        // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
        if (a.size() < 4 || a[0]->kind != PyValue::storage || a[1]->kind != PyValue::integer ||
            a[2]->kind != PyValue::tuple || a[3]->kind != PyValue::tuple || a[2]->items.size() != a[3]->items.size())
            bad("_rebuild_tensor_v2 without (storage, offset, size, stride)");
        if (a[2]->items.size() > 16) bad("a tensor of ", a[2]->items.size(), " dimensions");
        PyValue* t = make(PyValue::tensor);
        t->of = a[0];
        t->offset = a[1]->i;
        for (size_t d = 0; d < a[2]->items.size(); ++d) {
            if (a[2]->items[d]->kind != PyValue::integer || a[3]->items[d]->kind != PyValue::integer)
                bad("a tensor's size or stride is not an integer");
            t->sizes.push_back(a[2]->items[d]->i);
            t->strides.push_back(a[3]->items[d]->i);
        }
        return t;
    }

    // A persistent id: ("storage", storage type, key, location, element count).
    PyValue* storage(PyValue* pid) {
        if (pid->kind != PyValue::tuple || pid->items.size() < 5 || pid->items[0]->kind != PyValue::text ||
            pid->items[0]->s != "storage" || pid->items[1]->kind != PyValue::global || pid->items[2]->kind != PyValue::text ||
            pid->items[4]->kind != PyValue::integer || pid->items[4]->i < 0)
            bad("a persistent id that is not (\"storage\", type, key, location, count)");
        static const struct { const char* type; char dtype; int bytes; } kTypes[] = {
            {"torch.FloatStorage", 'f', 4}, {"torch.DoubleStorage", 'd', 8}, {"torch.HalfStorage", 'h', 2},
            {"torch.BFloat16Storage", 'b', 2}, {"torch.LongStorage", 0, 8}, {"torch.IntStorage", 0, 4},
            {"torch.ShortStorage", 0, 2}, {"torch.CharStorage", 0, 1}, {"torch.ByteStorage", 0, 1},
            {"torch.BoolStorage", 0, 1}};
        PyValue* st = make(PyValue::storage);
        st->s = pid->items[2]->s;
        st->i = pid->items[4]->i;
        for (const auto& t : kTypes)
            if (pid->items[1]->s == t.type) {
                st->dtype = t.dtype;
                st->elem_bytes = t.bytes;
            }
        return st;  // a type not listed: not floating point, skipped like the integer ones
    }

    const unsigned char* p_;
    size_t n_, at_ = 0;
    const std::string what_;
    std::vector<std::unique_ptr<PyValue>> arena_;
    std::vector<PyValue*> stack_;
    std::vector<size_t> marks_;
    std::unordered_map<uint64_t, PyValue*> memo_;
};

// A tensor's values as float32: the view (offset, sizes, strides) of its
// storage's bytes, which `data` holds (`bytes` of them), checked first.
Tensor materialize(const PyValue& t, const unsigned char* data, size_t bytes, const std::string& name) {
    const PyValue& st = *t.of;
    const uint64_t count = static_cast<uint64_t>(st.i), width = static_cast<uint64_t>(st.elem_bytes);
    if (bytes / width < count)
        fail(name, ": its storage holds ", bytes, " bytes, fewer than its ", count, " elements of ", width);
    // Each element lies inside the storage, and (no overlapping views) there
    // are no more of them than it holds, so memory stays within the file's size.
    Tensor out;
    out.shape = t.sizes;
    if (t.offset < 0) fail(name, ": negative storage offset ", t.offset);
    for (size_t d = 0; d < t.sizes.size(); ++d)
        if (t.sizes[d] < 0 || t.strides[d] < 0 || t.sizes[d] > (int64_t{1} << 40) || t.strides[d] > (int64_t{1} << 40))
            fail(name, ": size ", t.sizes[d], " or stride ", t.strides[d], " out of range");
    uint64_t numel = 1, last = static_cast<uint64_t>(t.offset);
    if (std::find(t.sizes.begin(), t.sizes.end(), 0) != t.sizes.end()) numel = 0;
    for (size_t d = 0; d < t.sizes.size() && numel; ++d) {  // divisions, so nothing overflows
        const uint64_t size = static_cast<uint64_t>(t.sizes[d]), stride = static_cast<uint64_t>(t.strides[d]);
        if (size > count / numel) fail(name, ": more elements than its storage's ", count);
        numel *= size;
        if (last >= count || (size > 1 && stride > (count - 1 - last) / (size - 1)))
            fail(name, ": its view (offset ", t.offset, ", dimension ", d, ": size ", size, ", stride ", stride,
                 ") reaches past its storage's ", count, " elements");
        last += (size - 1) * stride;
    }
    if (numel && last >= count) fail(name, ": its view reaches element ", last, " of a storage of ", count);
    out.data.resize(static_cast<size_t>(numel));
    std::vector<int64_t> index(t.sizes.size(), 0);
    for (uint64_t k = 0; k < numel; ++k) {
        uint64_t e = static_cast<uint64_t>(t.offset);
        for (size_t d = 0; d < index.size(); ++d) e += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(t.strides[d]);
        const unsigned char* q = data + e * width;
        uint64_t bits = 0;
        for (uint64_t j = width; j-- > 0;) bits = (bits << 8) | q[j];
        float& v = out.data[static_cast<size_t>(k)];
        switch (st.dtype) {
            case 'f': { const uint32_t b = static_cast<uint32_t>(bits); std::memcpy(&v, &b, 4); break; }
            case 'd': { double x; std::memcpy(&x, &bits, 8); v = static_cast<float>(x); break; }
            case 'h': v = half_to_float(static_cast<uint16_t>(bits)); break;
            default: v = bf16_to_float(static_cast<uint16_t>(bits)); break;
        }
        for (size_t d = index.size(); d-- > 0;) {  // the next index in row-major order
            if (++index[d] < t.sizes[d]) break;
            index[d] = 0;
        }
    }
    return out;
}

}  // namespace

Weights parse_torch(const unsigned char* p, size_t n, const std::string& what) {
    if (n >= 2 && p[0] == 0x80 && p[1] == 0x02)
        fail(what, ": a torch.save file of the legacy format (PyTorch < 1.6, or _use_new_zipfile_serialization=False); "
                   "load and save it again with a current PyTorch");
    std::map<std::string, const ZipMember*> members;
    const std::vector<ZipMember> all = stored_zip_members(p, n, what, "a torch.save", " (torch.save writes stored members)");
    std::string dir;
    for (const ZipMember& z : all) {
        members[z.name] = &z;
        const size_t slash = z.name.find('/');
        if (slash != std::string::npos && z.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
            if (!dir.empty()) fail(what, ": two pickles, '", dir, "data.pkl' and '", z.name, "'");
            dir = z.name.substr(0, slash + 1);
        }
    }
    if (dir.empty()) fail(what, ": no <dir>/data.pkl member; not a torch.save file");
    if (const auto it = members.find(dir + "byteorder"); it != members.end() &&
                                                         std::string(reinterpret_cast<const char*>(it->second->data), it->second->size) != "little")
        fail(what, ": storages in byte order '", std::string(reinterpret_cast<const char*>(it->second->data), it->second->size),
             "'; deeprnn reads little-endian files");
    const ZipMember& pickle = *members[dir + "data.pkl"];
    Unpickler u(pickle.data, pickle.size, cat(what, ": ", pickle.name));
    const PyValue* root = u.run();

    // Tensors reachable through dicts, named by their keys' path; each dict
    // visited once, so a pickle that shares a dict cannot multiply the work.
    Weights w;
    std::unordered_set<const PyValue*> seen;
    const auto walk = [&](const auto& self, const PyValue& d, const std::string& prefix, int depth) -> void {
        if (depth > 64) fail(what, ": dicts nested more than 64 deep, at '", prefix, "'");
        if (!seen.insert(&d).second) return;
        for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
            const PyValue &key = *d.items[k], &v = *d.items[k + 1];
            if (key.kind != PyValue::text && key.kind != PyValue::integer) continue;
            const std::string name = prefix + (key.kind == PyValue::text ? key.s : std::to_string(key.i));
            if (v.kind == PyValue::dict) self(self, v, name + ".", depth + 1);
            if (v.kind != PyValue::tensor || v.of->dtype == 0) continue;
            const auto m = members.find(dir + "data/" + v.of->s);
            if (m == members.end()) fail(what, ": tensor '", name, "' names storage '", v.of->s, "', which the file lacks");
            if (w.count(name)) fail(what, ": tensor '", name, "' appears twice");
            w[name] = materialize(v, m->second->data, m->second->size, cat(what, ": tensor '", name, "'"));
        }
    };
    if (root->kind == PyValue::dict) walk(walk, *root, "", 0);
    if (w.empty())
        fail(what, ": holds no floating-point tensors in dicts (a whole pickled model? save its state_dict: "
                   "torch.save(model.state_dict(), path))");
    return w;
}

}  // namespace detail

Weights load_torch(const std::string& path) {
    const detail::MappedFile f(path);
    return detail::parse_torch(f.data(), f.size(), path);
}

}  // namespace deeprnn
