// engine.cpp — packing and the forward pass.
//
// Each layer-direction runs in two phases (DeepCPU's time-independent and
// time-dependent phases): first the input projection of every step as one
// large product, then the recurrence, one small product and one fused cell
// update per step.
#include "engine.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace deeprnn {
namespace detail {

int gates_per_cell(Cell cell) {
    switch (cell) {
        case Cell::lstm: return 4;
        case Cell::gru: return 3;
        default: return 1;
    }
}

static PackedLayer pack_layer(const Config& cfg, int in, RawLayer r) {
    const int H = cfg.hidden_size, G = gates_per_cell(cfg.cell);
    PackedLayer p;
    p.in = in;
    p.w_ih = std::move(r.w_ih);
    p.w_hh = std::move(r.w_hh);
    p.w_hr = std::move(r.w_hr);
    p.peep = std::move(r.peep);
    p.b_x.assign(static_cast<size_t>(G) * H, 0.0f);
    for (size_t j = 0; j < r.b_ih.size(); ++j) p.b_x[j] += r.b_ih[j];
    // Every recurrent bias joins the input projection except GRU
    // linear-before-reset's b_hn, which is multiplied by r.
    const bool keep_hn = cfg.cell == Cell::gru && cfg.gru_variant == GruVariant::linear_before_reset;
    const size_t fold = keep_hn ? static_cast<size_t>(2) * H : p.b_x.size();
    for (size_t j = 0; j < r.b_hh.size() && j < fold; ++j) p.b_x[j] += r.b_hh[j];
    if (keep_hn) {
        p.b_hn.assign(H, 0.0f);
        if (!r.b_hh.empty()) std::copy(r.b_hh.begin() + 2 * H, r.b_hh.end(), p.b_hn.begin());
    }
    return p;
}

std::shared_ptr<const ModelImpl> build_model(const Config& cfg, std::vector<RawLayer> raw) {
    validate(cfg);
    auto m = std::make_shared<ModelImpl>();
    m->cfg = cfg;
    m->G = gates_per_cell(cfg.cell);
    m->H = cfg.hidden_size;
    m->S = state_size(cfg);
    m->D = num_directions(cfg);
    m->L = cfg.num_layers;
    m->act = select_activations(cfg.activation_max_error);
    if (raw.size() != static_cast<size_t>(m->L * m->D))
        fail("internal: ", raw.size(), " layer-directions for num_layers=", m->L, " D=", m->D);
    for (int i = 0; i < m->L * m->D; ++i) {
        const int in = i < m->D ? cfg.input_size : m->D * m->S;
        m->layers.push_back(pack_layer(cfg, in, std::move(raw[i])));
    }
    return m;
}

SessionImpl::SessionImpl(std::shared_ptr<const ModelImpl> model) : m_(std::move(model)) {
    const ModelImpl& m = *m_;
    const size_t B = m.cfg.max_batch;
    hg_.resize(B * m.G * m.H);
    hraw_.resize(B * m.H);
    hnew_.resize(B * m.S);
    rh_.resize(B * m.S);
    h_state_.resize(static_cast<size_t>(m.L) * m.D * B * m.S);
    c_state_.resize(static_cast<size_t>(m.L) * m.D * B * m.H);
    reserve_rows(B);
}

// Buffers that scale with T*B grow here, once, to the largest run seen.
void SessionImpl::reserve_rows(size_t rows) {
    if (rows <= rows_) return;
    const ModelImpl& m = *m_;
    try {
        xproj_.resize(rows * m.G * m.H);
        if (m.L > 1) layer_out_[0].resize(rows * m.D * m.S);
        if (m.L > 2) layer_out_[1].resize(rows * m.D * m.S);
    } catch (const std::bad_alloc&) {
        fail("out of memory for a run of ", rows, " steps x sequences (", rows * m.G * m.H * sizeof(float), " bytes of gates)");
    }
    rows_ = rows;
}

float* SessionImpl::staging_in(size_t n) {
    if (stage_in_.size() < n) stage_in_.resize(n);
    return stage_in_.data();
}

float* SessionImpl::staging_out(size_t n) {
    if (stage_out_.size() < n) stage_out_.resize(n);
    return stage_out_.data();
}

// C[rows, n] (+)= A[rows, k] · W[n, k]^T, row-major; beta selects overwrite or accumulate.
static void matmul_wt(int rows, int n, int k, const float* A, int lda, const float* W, float beta, float* C,
                      int ldc) {
    if (rows == 1 && ldc == n) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, W, k, A, 1, beta, C, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, k, 1.0f, A, lda, W, k, beta, C, ldc);
    }
}

static int valid_steps(const int32_t* lengths, int b, int T) { return lengths ? lengths[b] : T; }

void SessionImpl::forward(const float* x, int T, int B, const int32_t* lengths, float* y, float* h, float* c) {
    const ModelImpl& m = *m_;
    reserve_rows(static_cast<size_t>(T) * B);
    const size_t hs = static_cast<size_t>(B) * m.S, cs = static_cast<size_t>(B) * m.H;
    const float* in = x;
    for (int l = 0; l < m.L; ++l) {
        // The last layer writes to y, or to scratch when the caller wants only states.
        float* out = l < m.L - 1 ? layer_out_[l % 2].data()
                                 : (y ? y : staging_out(static_cast<size_t>(T) * B * m.D * m.S));
        for (int d = 0; d < m.D; ++d) {
            const int i = l * m.D + d;
            run_direction(l, d, in, T, B, lengths, out, h + i * hs, c ? c + i * cs : nullptr);
        }
        if (lengths) {
            // Padded steps give exactly zero, in every layer.
            const size_t w = static_cast<size_t>(m.D) * m.S;
            for (int b = 0; b < B; ++b)
                for (int t = lengths[b]; t < T; ++t) std::fill_n(out + (static_cast<size_t>(t) * B + b) * w, w, 0.0f);
        }
        in = out;
    }
}

void SessionImpl::run_direction(int layer, int dir, const float* in, int T, int B, const int32_t* lengths,
                                float* out, float* h, float* c) {
    const ModelImpl& m = *m_;
    const PackedLayer& p = m.layers[layer * m.D + dir];
    const int GH = m.G * m.H, S = m.S, H = m.H;
    const bool reverse = dir == 1 || m.cfg.direction == Direction::reverse;
    const size_t out_w = static_cast<size_t>(m.D) * S;

    // Phase 1: every step's input projection, biases included, in one product.
    const int rows = T * B;
    for (int r = 0; r < rows; ++r) std::memcpy(&xproj_[static_cast<size_t>(r) * GH], p.b_x.data(), GH * sizeof(float));
    matmul_wt(rows, GH, p.in, in, p.in, p.w_ih.data(), 1.0f, xproj_.data(), GH);

    // Phase 2: the recurrence.
    for (int s = 0; s < T; ++s) {
        matmul_wt(B, GH, S, h, S, p.w_hh.data(), 0.0f, hg_.data(), GH);
        step_cells(p, s, T, B, lengths, reverse, h, c);
        const float* hfinal = hnew_.data();
        if (!p.w_hr.empty()) {
            matmul_wt(B, S, H, hraw_.data(), H, p.w_hr.data(), 0.0f, hnew_.data(), S);
        }
        for (int b = 0; b < B; ++b) {
            const int len = valid_steps(lengths, b, T);
            if (s >= len) continue;  // finished: state frozen, output zeroed later
            const int t = reverse ? len - 1 - s : s;
            std::memcpy(h + static_cast<size_t>(b) * S, hfinal + static_cast<size_t>(b) * S, S * sizeof(float));
            std::memcpy(out + (static_cast<size_t>(t) * B + b) * out_w + static_cast<size_t>(dir) * S,
                        hfinal + static_cast<size_t>(b) * S, S * sizeof(float));
        }
    }
}

// The element-wise half of step s for every active sequence; writes the new
// state to hnew_ (or, with projection, its input to hraw_).
void SessionImpl::step_cells(const PackedLayer& p, int s, int T, int B, const int32_t* lengths, bool reverse,
                             float* h, float* c) {
    const ModelImpl& m = *m_;
    const int GH = m.G * m.H, S = m.S, H = m.H;
    const bool projected = !p.w_hr.empty();
    auto args_for = [&](int b) {
        const int len = valid_steps(lengths, b, T);
        const int t = reverse ? len - 1 - s : s;
        CellArgs a;
        a.n = H;
        a.stride = H;
        a.xg = &xproj_[(static_cast<size_t>(t) * B + b) * GH];
        a.hg = &hg_[static_cast<size_t>(b) * GH];
        a.h_prev = h + static_cast<size_t>(b) * S;
        a.c = c ? c + static_cast<size_t>(b) * H : nullptr;
        a.h = projected ? &hraw_[static_cast<size_t>(b) * H] : &hnew_[static_cast<size_t>(b) * S];
        a.peep = p.peep.empty() ? nullptr : p.peep.data();
        a.peep_stride = H;
        a.b_hn = p.b_hn.empty() ? nullptr : p.b_hn.data();
        a.rh = &rh_[static_cast<size_t>(b) * S];
        a.clip = m.cfg.clip;
        return a;
    };
    auto active = [&](int b) { return s < valid_steps(lengths, b, T); };

    switch (m.cfg.cell) {
        case Cell::lstm:
            for (int b = 0; b < B; ++b)
                if (active(b)) lstm_cell(m.act, args_for(b));
            break;
        case Cell::rnn_tanh:
        case Cell::rnn_relu:
            for (int b = 0; b < B; ++b)
                if (active(b)) rnn_cell(m.act, args_for(b), m.cfg.cell == Cell::rnn_relu);
            break;
        case Cell::gru:
            if (m.cfg.gru_variant == GruVariant::linear_before_reset) {
                for (int b = 0; b < B; ++b)
                    if (active(b)) gru_lbr_cell(m.act, args_for(b));
                break;
            }
            // Reset-before-matmul has a product inside the step: U_n · (r*h).
            for (int b = 0; b < B; ++b) {
                if (active(b))
                    gru_rbm_gates(m.act, args_for(b));
                else
                    std::fill_n(&rh_[static_cast<size_t>(b) * S], S, 0.0f);
            }
            matmul_wt(B, H, S, rh_.data(), S, p.w_hh.data() + static_cast<size_t>(2) * H * S, 0.0f,
                      &hg_[static_cast<size_t>(2) * H], GH);
            for (int b = 0; b < B; ++b)
                if (active(b)) gru_rbm_cell(m.act, args_for(b));
            break;
    }
}

}  // namespace detail
}  // namespace deeprnn
