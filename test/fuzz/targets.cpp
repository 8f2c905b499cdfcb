// The fuzz targets' bodies, compiled once with the whole engine (the amalgamation
// is one translation unit, and the parsers' buffer-level entry points live in its
// detail namespaces). Each fuzz_<name>.cpp is a one-line libFuzzer entry point.
//
// Contract checked: on any bytes a parser returns or throws deeprnn::Error (never
// another exception, never a crash, leak or sanitizer report). Anything else
// escapes and libFuzzer reports it.
#include "../../deeprnn.cpp"

#include <cstring>

namespace {

using deeprnn::Config;
using deeprnn::Error;

// Small, bounded sizes: the fuzzer explores shapes, not big matrices.
struct Bytes {
    const uint8_t* p;
    size_t n;
    uint8_t next() {
        if (!n) return 0;
        --n;
        return *p++;
    }
};

// A configuration from the first bytes of the input; every field may be invalid.
Config config_from(Bytes& b) {
    Config c;
    c.cell = static_cast<deeprnn::Cell>(b.next() % 5);  // 4 is out of range on purpose
    c.gru_variant = static_cast<deeprnn::GruVariant>(b.next() % 2);
    c.convention = static_cast<deeprnn::Convention>(b.next() % 3);
    c.input_size = static_cast<int8_t>(b.next()) % 9;
    c.hidden_size = static_cast<int8_t>(b.next()) % 9;
    c.num_layers = static_cast<int8_t>(b.next()) % 4;
    c.direction = static_cast<deeprnn::Direction>(b.next() % 3);
    c.proj_size = static_cast<int8_t>(b.next()) % 9;
    const uint8_t flags = b.next();
    c.peepholes = flags & 1;
    c.clip = (flags & 2) ? static_cast<float>(static_cast<int8_t>(b.next())) : 0.0f;
    if (flags & 4) c.clip = std::numeric_limits<float>::quiet_NaN();
    c.weight_precision = static_cast<deeprnn::WeightPrecision>(b.next() % 4);  // 3 is out of range
    c.max_batch = static_cast<int8_t>(b.next()) % 9;
    c.threads = 1;  // no thread pool per input: the fuzzer runs millions
    c.pin_threads = false;
    c.activation_max_error = (flags & 8) ? 1e-3 : 0.0;
    if (flags & 16) {  // hard_sigmoid gates, alpha from 0 (invalid) to 0.6 or NaN
        c.gate_activation = deeprnn::GateActivation::hard_sigmoid;
        c.hard_sigmoid_alpha = (flags & 32) ? std::numeric_limits<float>::quiet_NaN() : 0.15f * static_cast<float>(b.next() % 5);
    }
    if (flags & 64)  // relu candidates; with 128, an out-of-range value
        c.cell_activation = static_cast<deeprnn::CellActivation>((flags & 128) ? 2 : 1);
    c.backend = deeprnn::Backend::cpu;
    return c;
}

}  // namespace

int fuzz_npy(const uint8_t* data, size_t size) {
    try {
        const auto a = deeprnn::detail::parse_npy(data, size, "fuzz.npy");
        (void)deeprnn::detail::npy_to_tensor(a, "fuzz.npy");
    } catch (const Error&) {
    }
    return 0;
}

int fuzz_safetensors(const uint8_t* data, size_t size) {
    try {
        (void)deeprnn::detail::parse_safetensors(data, size, "fuzz.safetensors");
    } catch (const Error&) {
    }
    return 0;
}

int fuzz_npz(const uint8_t* data, size_t size) {
    try {
        (void)deeprnn::detail::parse_npz(data, size, "fuzz.npz");
    } catch (const Error&) {
    }
    return 0;
}

// A zip's CRC would stop the fuzzer at the first changed byte of the pickle,
// so when the first byte is odd the harness wraps the rest, as data.pkl, in a
// valid zip beside a 16-float storage "0" (the unpickler and the tensor views
// are then reachable); when even, the bytes are the whole file.
int fuzz_torch(const uint8_t* data, size_t size) {
    std::string file(reinterpret_cast<const char*>(data), size);
    if (size && (data[0] & 1)) {
        const auto le = [](uint64_t v, int n) {
            std::string s;
            for (int i = 0; i < n; ++i) s += static_cast<char>(v >> (8 * i));
            return s;
        };
        std::string out, central;
        const std::pair<std::string, std::string> members[] = {{"a/data.pkl", file.substr(1)}, {"a/data/0", std::string(64, '\x3f')}};
        for (const auto& [name, bytes] : members) {
            const uint32_t crc = deeprnn::detail::crc32(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
            const std::string fields = le(0, 2) + le(0, 2) + le(0, 4) + le(crc, 4) + le(bytes.size(), 4) + le(bytes.size(), 4) +
                                       le(name.size(), 2) + le(0, 2);
            central += "PK\x01\x02" + le(20, 2) + le(20, 2) + fields + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 4) +
                       le(out.size(), 4) + name;
            out += "PK\x03\x04" + le(20, 2) + fields + name + bytes;
        }
        file = out + central + "PK\x05\x06" + le(0, 4) + le(2, 2) + le(2, 2) + le(central.size(), 4) + le(out.size(), 4) + le(0, 2);
    }
    try {
        (void)deeprnn::detail::parse_torch(reinterpret_cast<const unsigned char*>(file.data()), file.size(), "fuzz.pt");
    } catch (const Error&) {
    }
    return 0;
}

// With a Config, so the attributes and config_from_weights run on what parsed.
int fuzz_onnx(const uint8_t* data, size_t size) {
    try {
        Config config;
        (void)deeprnn::detail::parse_onnx(data, size, "fuzz.onnx", -1, &config);
    } catch (const Error&) {
    }
    return 0;
}

// The cache's checksum would stop the fuzzer at the first line, so when the
// first byte is odd the harness appends a valid end line to the body: the
// parser's line grammar is then reachable. A parsed file must round-trip.
int fuzz_plan_cache(const uint8_t* data, size_t size) {
    namespace sched = deeprnn::detail::sched;
    sched::MachineId machine;
    machine.cpu = "fuzz";
    machine.l1d = 32768;
    std::string text(reinterpret_cast<const char*>(data), size);
    if (size && (data[0] & 1)) {
        text.erase(0, 1);
        size_t lines = 0;
        for (char ch : text) lines += ch == '\n';
        const size_t entries = lines >= 3 ? lines - 3 : 0;
        text += deeprnn::detail::cat("end entries=", entries, " fnv1a64=",
                                     sched::hex16(sched::fnv1a64(text.data(), text.size())), "\n");
    }
    const sched::PlanFile f = sched::parse_plan_cache(text.data(), text.size(), "fuzz", machine);
    if (f.ok) {
        const std::string again = sched::serialize_plan_cache(f.entries, "fuzz", machine);
        const sched::PlanFile g = sched::parse_plan_cache(again.data(), again.size(), "fuzz", machine);
        if (!g.ok || g.entries.size() != f.entries.size()) __builtin_trap();
    }
    return 0;
}

// Configuration validation and weight import by name: a configuration from the
// first bytes, weights from a safetensors body in the rest. Model must accept or
// throw Error; an accepted model must run one step.
int fuzz_config(const uint8_t* data, size_t size) {
    Bytes b{data, size};
    const Config c = config_from(b);
    try {
        deeprnn::validate(c);
    } catch (const Error&) {
        return 0;
    }
    deeprnn::Weights w;
    try {
        w = deeprnn::detail::parse_safetensors(b.p, b.n, "fuzz.safetensors");
    } catch (const Error&) {
        return 0;
    }
    try {
        const deeprnn::Model m(c, w);
        std::vector<float> x(static_cast<size_t>(c.input_size), 0.5f);
        std::vector<float> y(static_cast<size_t>(m.output_size()));
        deeprnn::Session session(m);
        deeprnn::RunInput in;
        in.x = x.data();
        in.seq_len = 1;
        deeprnn::RunOutput out;
        out.y = y.data();
        session.run(in, out);
    } catch (const Error&) {
    }
    return 0;
}
