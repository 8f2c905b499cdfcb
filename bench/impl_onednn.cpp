// impl_onednn.cpp — oneDNN's RNN primitives (built when BENCH_HAVE_DNNL is 1).
//
// oneDNN layouts: src/dst [T, N, C] (tnc); weights [L, D, I, G, O] (ldigo);
// bias [L, D, G, O] (ldgo). Gate order: LSTM i, f, c~, o (as PyTorch); GRU
// u(=z), r, o(=n), and the linear-before-reset GRU has a 4th bias row b_hn.
#include "impls.hpp"

#if BENCH_HAVE_DNNL

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <unordered_map>

namespace bench {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr memory::data_type f32 = memory::data_type::f32;

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

dnnl::rnn_primitive_desc_base make_pd(const Workload& w, const dnnl::engine& eng, tag weights_tag) {
    const memory::dim T = w.seq, N = w.batch, C = w.input, H = w.hidden, L = w.layers;
    const memory::dim G = gate_count(w.cell);
    if (L > 1 && C != H) throw std::runtime_error("oneDNN multi-layer RNN needs input == hidden");
    const memory::desc src({T, N, C}, f32, tag::tnc), dst({T, N, H}, f32, tag::tnc), none;
    const memory::desc w_layer({L, 1, C, G, H}, f32, weights_tag), w_iter({L, 1, H, G, H}, f32, weights_tag);
    const auto fwd = dnnl::prop_kind::forward_inference;
    const auto dir = dnnl::rnn_direction::unidirectional_left2right;
    if (w.cell == CellKind::lstm) {
        const memory::desc bias({L, 1, G, H}, f32, tag::ldgo);
        dnnl::lstm_forward::desc d(fwd, dir, src, none, none, w_layer, w_iter, bias, dst, none, none);
        return dnnl::lstm_forward::primitive_desc(d, eng);
    }
    const memory::desc bias({L, 1, G + 1, H}, f32, tag::ldgo);
    dnnl::lbr_gru_forward::desc d(fwd, dir, src, none, w_layer, w_iter, bias, dst, none);
    return dnnl::lbr_gru_forward::primitive_desc(d, eng);
}

class OneDnn final : public Impl {
public:
    OneDnn(const Problem& p, tag weights_tag, const std::string& name)
        : Impl(name), pd_(make_pd(p.work, eng_, weights_tag)), prim_(pd_) {
        const Workload& w = p.work;
        const memory::dims dims_layer = {w.layers, 1, w.input, gate_count(w.cell), w.hidden};
        const memory::dims dims_iter = {w.layers, 1, w.hidden, gate_count(w.cell), w.hidden};
        src_ = memory(pd_.src_desc(), eng_, const_cast<float*>(p.x.data()));
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

    const float* output() const override { return static_cast<const float*>(dst_.get_data_handle()); }

private:
    static memory::desc plain(const memory::desc& d) { return memory::desc(d.dims(), f32, tag::ldigo); }

    // Copies plain ldigo weights into the layout the primitive chose (once).
    memory packed(const memory::dims& dims, std::vector<float> ldigo, const memory::desc& want) {
        memory user({dims, f32, tag::ldigo}, eng_, ldigo.data());
        memory out(want, eng_);
        dnnl::reorder(user, out).execute(stream_, user, out);
        stream_.wait();
        return out;
    }

    dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream_{eng_};
    dnnl::rnn_primitive_desc_base pd_;
    dnnl::primitive prim_;
    memory src_, dst_;
    std::vector<float> bias_plain_;
    std::unordered_map<int, memory> args_;
};

}  // namespace

std::vector<ImplPtr> make_onednn(const Problem& p) {
    std::vector<ImplPtr> out;
    auto any = std::make_unique<OneDnn>(p, tag::any, "onednn-any");
    if (!any->uses_plain_weights()) out.push_back(std::move(any));
    out.push_back(std::make_unique<OneDnn>(p, tag::ldigo, "onednn-ldigo"));
    return out;
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
bool have_onednn() { return false; }
std::string onednn_info() { return "oneDNN not found at build time: skipped"; }
void set_onednn_threads(int) {}
}  // namespace bench

#endif
