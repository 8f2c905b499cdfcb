// impl_onednn.cpp — oneDNN's RNN primitives (built when BENCH_HAVE_DNNL is 1).
//
// oneDNN layouts: src/dst [T, N, C] (tnc); weights [L, D, I, G, O] (ldigo);
// bias [L, D, G, O] (ldgo). Gate order: LSTM i, f, c~, o (as PyTorch); GRU
// u(=z), r, o(=n), and the linear-before-reset GRU has a 4th bias row b_hn.
//
// Besides f32, oneDNN's own reduced precisions, the peers of deeprnn-bf16 and
// deeprnn-int8 (docs/PRECISION.md): "onednn-bf16" (activations and weights in
// bf16, bias f32: its avx512_core_bf16 kernels) and "onednn-int8" (u8
// activations, s8 weights with a scale per gate and output unit, bias f32;
// LSTM only in oneDNN 2.6). Both quantise what deeprnn keeps in f32 (x, h,
// and for int8 the input weights too), so their outputs are checked against
// looser bounds.
#include "impls.hpp"

#include <stdexcept>

#if BENCH_HAVE_DNNL

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>

namespace bench {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr memory::data_type f32 = memory::data_type::f32;
constexpr memory::data_type bf16 = memory::data_type::bf16;
constexpr memory::data_type u8 = memory::data_type::u8;
constexpr memory::data_type s8 = memory::data_type::s8;

// The data types of one oneDNN configuration, and for int8 its quantisation:
// activations u8 = data_scale * x + data_shift, weights s8 = w * weight_scale
// of their gate and output unit (shared by the layer and iteration weights).
struct Precision {
    memory::data_type data = f32, weights = f32;
    float data_scale = 1, data_shift = 0;
    std::vector<float> weight_scales;  // [L * G * H], int8 only
    dnnl::primitive_attr attr() const {
        dnnl::primitive_attr a;
        if (weights == s8) {
            a.set_rnn_data_qparams(data_scale, data_shift);
            a.set_rnn_weights_qparams((1 << 3) | (1 << 4), weight_scales);  // per gate (dim 3) and unit (dim 4)
        }
        return a;
    }
};

// oneDNN gate index -> PyTorch gate index.
int torch_gate(CellKind cell, int gate) {
    static const int gru[] = {1, 0, 2};  // u=z, r, o=n
    return cell == CellKind::gru ? gru[gate] : gate;
}

// PyTorch W [G*H, I] of every layer -> ldigo [L, 1, I, G, H].
std::vector<float> to_ldigo(const Problem& p, bool recurrent) {
    const Workload& w = p.work;
    const int G = gate_count(w.cell), H = w.hidden, I = recurrent ? H : w.input;
    std::vector<float> out(std::size_t(w.layers) * I * G * H);
    for (int l = 0; l < w.layers; ++l) {
        const std::vector<float>& src = recurrent ? p.layers[l].w_hh : p.layers[l].w_ih;
        float* dst = &out[std::size_t(l) * I * G * H];
        for (int i = 0; i < I; ++i)
            for (int g = 0; g < G; ++g)
                for (int h = 0; h < H; ++h)
                    dst[(std::size_t(i) * G + g) * H + h] = src[(std::size_t(torch_gate(w.cell, g)) * H + h) * I + i];
    }
    return out;
}

// Bias [L, 1, G(+1), H]: b_ih + b_hh; the LBR GRU keeps b_in and b_hn apart.
std::vector<float> to_bias(const Problem& p) {
    const Workload& w = p.work;
    const int G = gate_count(w.cell), H = w.hidden, rows = w.cell == CellKind::gru ? G + 1 : G;
    std::vector<float> out(std::size_t(w.layers) * rows * H);
    for (int l = 0; l < w.layers; ++l) {
        const LayerWeights& lw = p.layers[l];
        float* dst = &out[std::size_t(l) * rows * H];
        for (int g = 0; g < G; ++g)
            for (int h = 0; h < H; ++h) {
                const int src = torch_gate(w.cell, g) * H + h;
                const bool split = w.cell == CellKind::gru && g == 2;
                dst[g * H + h] = lw.b_ih[src] + (split ? 0.0f : lw.b_hh[src]);
                if (split) dst[G * H + h] = lw.b_hh[src];
            }
    }
    return out;
}

// int8 writes f32 outputs (oneDNN's u8 in, f32 out configuration); bf16 writes bf16.
dnnl::rnn_primitive_desc_base make_pd(const Workload& w, const dnnl::engine& eng, tag weights_tag, const Precision& pr) {
    const memory::dim T = w.seq, N = w.batch, C = w.input, H = w.hidden, L = w.layers;
    const memory::dim G = gate_count(w.cell);
    if (L > 1 && C != H) throw std::runtime_error("oneDNN multi-layer RNN needs input == hidden");
    const memory::data_type out = pr.data == u8 ? f32 : pr.data;
    const memory::desc src({T, N, C}, pr.data, tag::tnc), dst({T, N, H}, out, tag::tnc), none;
    const memory::desc w_layer({L, 1, C, G, H}, pr.weights, weights_tag), w_iter({L, 1, H, G, H}, pr.weights, weights_tag);
    const auto fwd = dnnl::prop_kind::forward_inference;
    const auto dir = dnnl::rnn_direction::unidirectional_left2right;
    if (w.cell == CellKind::lstm) {
        const memory::desc bias({L, 1, G, H}, f32, tag::ldgo);
        dnnl::lstm_forward::desc d(fwd, dir, src, none, none, w_layer, w_iter, bias, dst, none, none);
        return dnnl::lstm_forward::primitive_desc(d, pr.attr(), eng);
    }
    if (pr.weights == s8) throw std::runtime_error("oneDNN 2.6 has no int8 linear-before-reset GRU");
    const memory::desc bias({L, 1, G + 1, H}, f32, tag::ldgo);
    dnnl::lbr_gru_forward::desc d(fwd, dir, src, none, w_layer, w_iter, bias, dst, none);
    return dnnl::lbr_gru_forward::primitive_desc(d, pr.attr(), eng);
}

// Scales for int8: x and h (|h| < 1) share the data scale; each (gate, unit)
// column of the layer and iteration weights its own, from its largest |w|.
Precision int8_precision(const Problem& p, const std::vector<float>& w_layer, const std::vector<float>& w_iter) {
    const Workload& w = p.work;
    const int G = gate_count(w.cell), H = w.hidden;
    Precision pr;
    pr.data = u8;
    pr.weights = s8;
    float most = 1;
    for (float v : p.x) most = std::max(most, std::fabs(v));
    pr.data_scale = 127.0f / most;
    pr.data_shift = 128;
    pr.weight_scales.assign(std::size_t(w.layers) * G * H, 0.0f);
    auto widest = [&](const std::vector<float>& ldigo, int I) {
        for (int l = 0; l < w.layers; ++l)
            for (int i = 0; i < I; ++i)
                for (int gh = 0; gh < G * H; ++gh) {
                    float& m = pr.weight_scales[std::size_t(l) * G * H + gh];
                    m = std::max(m, std::fabs(ldigo[(std::size_t(l) * I + i) * G * H + gh]));
                }
    };
    widest(w_layer, w.input);
    widest(w_iter, H);
    for (float& s : pr.weight_scales) s = s > 0 ? 127.0f / s : 1.0f;
    return pr;
}

class OneDnn final : public Impl {
public:
    OneDnn(const Problem& p, tag weights_tag, const std::string& name, const Precision& pr = Precision())
        : Impl(name), pr_(pr), pd_(make_pd(p.work, eng_, weights_tag, pr)), prim_(pd_) {
        const Workload& w = p.work;
        const memory::dims dims_layer = {w.layers, 1, w.input, gate_count(w.cell), w.hidden};
        const memory::dims dims_iter = {w.layers, 1, w.hidden, gate_count(w.cell), w.hidden};
        src_ = memory(pd_.src_desc(), eng_);
        convert_input(p.x);
        dst_ = memory(pd_.dst_desc(), eng_);
        bias_plain_ = to_bias(p);
        args_ = {{DNNL_ARG_SRC_LAYER, src_},
                 {DNNL_ARG_DST_LAYER, dst_},
                 {DNNL_ARG_WEIGHTS_LAYER, packed(dims_layer, to_ldigo(p, false), pd_.weights_desc())},
                 {DNNL_ARG_WEIGHTS_ITER, packed(dims_iter, to_ldigo(p, true), pd_.weights_iter_desc())},
                 {DNNL_ARG_BIAS, memory(pd_.bias_desc(), eng_, bias_plain_.data())},
                 {DNNL_ARG_SCRATCHPAD, memory(pd_.scratchpad_desc(), eng_)}};
    }

    /// True when oneDNN keeps the plain ldigo layout for both weight tensors.
    bool uses_plain_weights() const {
        return pd_.weights_desc() == plain(pd_.weights_desc()) && pd_.weights_iter_desc() == plain(pd_.weights_iter_desc());
    }

    void run() override {
        prim_.execute(stream_, args_);
        stream_.wait();
    }

    // bf16 outputs are widened here, after the timed runs.
    const float* output() const override {
        if (pd_.dst_desc().data_type() != bf16) return static_cast<const float*>(dst_.get_data_handle());
        const auto* b = static_cast<const uint16_t*>(dst_.get_data_handle());
        out_f32_.resize(pd_.dst_desc().get_size() / sizeof(uint16_t));
        for (std::size_t i = 0; i < out_f32_.size(); ++i) {
            const uint32_t bits = uint32_t(b[i]) << 16;
            std::memcpy(&out_f32_[i], &bits, sizeof(float));
        }
        return out_f32_.data();
    }

private:
    memory::desc plain(const memory::desc& d) const { return memory::desc(d.dims(), pr_.weights, tag::ldigo); }

    // x in the primitive's data type (once): bf16 by a reorder, u8 by the data qparams.
    void convert_input(const std::vector<float>& x) {
        if (pr_.data == u8) {
            auto* q = static_cast<uint8_t*>(src_.get_data_handle());
            for (std::size_t i = 0; i < x.size(); ++i)
                q[i] = uint8_t(std::clamp(std::nearbyint(pr_.data_scale * x[i] + pr_.data_shift), 0.0f, 255.0f));
            return;
        }
        memory user({src_.get_desc().dims(), f32, tag::tnc}, eng_, const_cast<float*>(x.data()));
        dnnl::reorder(user, src_).execute(stream_, user, src_);
        stream_.wait();
    }

    // Copies plain f32 ldigo weights into the layout and type the primitive chose (once).
    memory packed(const memory::dims& dims, std::vector<float> ldigo, const memory::desc& want) {
        memory user({dims, f32, tag::ldigo}, eng_, ldigo.data());
        memory out(want, eng_);
        dnnl::reorder(user, out, pr_.attr()).execute(stream_, user, out);
        stream_.wait();
        return out;
    }

    Precision pr_;
    dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream_{eng_};
    dnnl::rnn_primitive_desc_base pd_;
    dnnl::primitive prim_;
    memory src_, dst_;
    std::vector<float> bias_plain_;
    std::unordered_map<int, memory> args_;
    mutable std::vector<float> out_f32_;
};

}  // namespace

std::vector<ImplPtr> make_onednn(const Problem& p) {
    std::vector<ImplPtr> out;
    auto any = std::make_unique<OneDnn>(p, tag::any, "onednn-any");
    if (!any->uses_plain_weights()) out.push_back(std::move(any));
    out.push_back(std::make_unique<OneDnn>(p, tag::ldigo, "onednn-ldigo"));
    return out;
}

ImplPtr make_onednn_reduced(const Problem& p, deeprnn::WeightPrecision precision) {
    if (precision == deeprnn::WeightPrecision::bf16) {
        Precision pr;
        pr.data = pr.weights = bf16;
        return std::make_unique<OneDnn>(p, tag::any, "onednn-bf16", pr);
    }
    return std::make_unique<OneDnn>(p, tag::any, "onednn-int8", int8_precision(p, to_ldigo(p, false), to_ldigo(p, true)));
}

bool have_onednn() { return true; }

std::string onednn_info() {
    const dnnl_version_t* v = dnnl_version();
    const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB" : "other";
    const char* isa = "below avx2";
    switch (dnnl::get_effective_cpu_isa()) {
        case dnnl::cpu_isa::avx2: isa = "avx2"; break;
        case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
        case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
        case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
        case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
        case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
        default: break;
    }
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           ", CPU runtime " + runtime + ", ISA " + isa;
}

void set_onednn_threads(int threads) { omp_set_num_threads(threads); }

}  // namespace bench

#else  // oneDNN absent: the benchmark runs without it.

namespace bench {
std::vector<ImplPtr> make_onednn(const Problem&) { return {}; }
ImplPtr make_onednn_reduced(const Problem&, deeprnn::WeightPrecision) { throw std::runtime_error("oneDNN not found at build time"); }
bool have_onednn() { return false; }
std::string onednn_info() { return "oneDNN not found at build time: skipped"; }
void set_onednn_threads(int) {}
}  // namespace bench

#endif
