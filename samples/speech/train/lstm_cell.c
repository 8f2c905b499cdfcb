/* One LSTM step's element-wise work for fast_lstm.py, forward and backward, as one C call each.
 *
 * Why C: in PyTorch each step's cell is about a dozen element-wise ops, each a pass over memory and a
 * Python-level dispatch; here it is one call (one pass for the cell, and one for each bf16 conversion).
 * fast_lstm.py compiles this file on first use (cc -O3 -ffast-math, so the loops vectorise through glibc's
 * vector expf/tanhf) twice: REAL = float for training and
 * REAL = double for check_fast_lstm.py's exactness check.
 *
 * Layouts are PyTorch's: gates i, f, g, o, each [B, H] row-major inside a [B, 4H] row. bf16 buffers
 * (uint16_t) hold the operands of the next matrix product, so PyTorch converts nothing per step; they are
 * only used in the float build (fast_lstm.py passes NULL and 0 otherwise). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef REAL
#define REAL float
#define EXP expf
#define TANH tanhf
#endif

static inline float bf16_to_float(uint16_t v) {
    const uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float v) { /* round to nearest even, as PyTorch's .to(bfloat16) */
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The clamp keeps exp finite: -ffast-math divides by a reciprocal estimate and a Newton step, which turns
 * 1 / inf into 0 * inf = NaN. Beyond +-80 the sigmoid is 0 or 1 to within 2e-35. */
static inline REAL sigmoid(REAL x) {
    x = x < -80 ? -80 : x > 80 ? 80 : x;
    return 1 / (1 + EXP(-x));
}

/* acc[k] += rec[k] for k < n, rec REAL or bf16. A pass of its own: GCC 12 does not vectorise a loop that
 * mixes the 16-bit loads with the cell's 32-bit work, and the cell is the cost. */
static void add_product(REAL *restrict acc, const void *restrict rec, int rec_bf16, ptrdiff_t n) {
    if (rec_bf16) {
        const uint16_t *r = rec;
        for (ptrdiff_t k = 0; k < n; ++k) acc[k] += bf16_to_float(r[k]);
    } else {
        const REAL *r = rec;
        for (ptrdiff_t k = 0; k < n; ++k) acc[k] += r[k];
    }
}

/* dst[k] = src[k] rounded to bf16, for k < n: its own pass, for the same reason. */
static void store_bf16(uint16_t *restrict dst, const REAL *restrict src, ptrdiff_t n) {
    for (ptrdiff_t k = 0; k < n; ++k) dst[k] = float_to_bf16((float)src[k]);
}

static void forward_rows(const REAL *restrict pre, const REAL *restrict c_prev, REAL *restrict acts,
                         REAL *restrict c, REAL *restrict tc, REAL *restrict h, int B, int H) {
    for (int b = 0; b < B; ++b) {
        const ptrdiff_t g0 = (ptrdiff_t)b * 4 * H, s0 = (ptrdiff_t)b * H;
        for (int j = 0; j < H; ++j) {
            const ptrdiff_t k = g0 + j, s = s0 + j;
            const REAL i = sigmoid(pre[k]), f = sigmoid(pre[k + H]), g = TANH(pre[k + 2 * H]);
            const REAL o = sigmoid(pre[k + 3 * H]);
            acts[k] = i; acts[k + H] = f; acts[k + 2 * H] = g; acts[k + 3 * H] = o;
            const REAL cv = f * c_prev[s] + i * g, t = TANH(cv);
            c[s] = cv; tc[s] = t; h[s] = o * t;
        }
    }
}

static void backward_rows(const REAL *restrict dh, REAL *restrict dc, const REAL *restrict acts,
                          const REAL *restrict c_prev, const REAL *restrict tc, REAL *restrict dg, int B, int H) {
    for (int b = 0; b < B; ++b) {
        const ptrdiff_t g0 = (ptrdiff_t)b * 4 * H, s0 = (ptrdiff_t)b * H;
        for (int j = 0; j < H; ++j) {
            const ptrdiff_t k = g0 + j, s = s0 + j;
            const REAL i = acts[k], f = acts[k + H], g = acts[k + 2 * H], o = acts[k + 3 * H], t = tc[s];
            const REAL dcv = dc[s] + dh[s] * o * (1 - t * t);
            const REAL di = dcv * g * i * (1 - i), df = dcv * c_prev[s] * f * (1 - f);
            const REAL dgg = dcv * i * (1 - g * g), dout = dh[s] * t * o * (1 - o);
            dg[k] = di; dg[k + H] = df; dg[k + 2 * H] = dgg; dg[k + 3 * H] = dout;
            dc[s] = dcv * f;
        }
    }
}

/* Forward step. pre [B,4H]: in, x_t W_ih^T + biases; rec [B,4H]: h_{t-1} W_hh^T (REAL or bf16), added to pre
 * in place. Writes acts [B,4H] (i, f, g, o after their nonlinearities), c and tc = tanh(c) [B,H], h [B,H],
 * and h_bf16 (h rounded to bf16) unless NULL. */
void lstm_forward_step(REAL *pre, const void *rec, int rec_bf16, const REAL *c_prev, REAL *acts, REAL *c,
                       REAL *tc, REAL *h, uint16_t *h_bf16, int B, int H) {
    add_product(pre, rec, rec_bf16, (ptrdiff_t)B * 4 * H);
    forward_rows(pre, c_prev, acts, c, tc, h, B, H);
    if (h_bf16) store_bf16(h_bf16, h, (ptrdiff_t)B * H);
}

/* Backward step. dy [B,H]: the loss's gradient at h_t from above; rec [B,H]: dG_{t+1} W_hh, the gradient
 * at h_t through the next step (REAL or bf16; NULL at the last step); dh [B,H]: scratch, their sum. dc [B,H]: in, the gradient at c_t through the next step; out, at c_{t-1}. Writes dg [B,4H], the
 * gradients of the gate pre-activations, and dg_bf16 (rounded to bf16) unless NULL. */
void lstm_backward_step(const REAL *dy, const void *rec, int rec_bf16, REAL *dh, REAL *dc, const REAL *acts,
                        const REAL *c_prev, const REAL *tc, REAL *dg, uint16_t *dg_bf16, int B, int H) {
    memcpy(dh, dy, sizeof *dh * (size_t)B * (size_t)H);
    if (rec) add_product(dh, rec, rec_bf16, (ptrdiff_t)B * H);
    backward_rows(dh, dc, acts, c_prev, tc, dg, B, H);
    if (dg_bf16) store_bf16(dg_bf16, dg, (ptrdiff_t)B * 4 * H);
}
