"""A faster CPU training path for train.py's LSTM: the same function as torch.nn.LSTM (gate order i, f, g, o,
zero initial state, no packing), with a backward written for how a CPU spends its time.

Why: PyTorch 1.13's CPU LSTM records every step's ops for autograd, so its backward computes each step's
weight gradient as a small product of its own and adds it to the running sum (180 adds of a 1.6 MB matrix
a batch at 2x320). Here the step loop in backward carries only what depends on the previous step (the
gate gradients and dh = dG W_hh); the weight gradients of all steps are two large products after the loop,
and the input projections of all steps one large product before it.

Matrix products in bfloat16 (lstm(..., dtype=torch.bfloat16)): the products take bf16 operands and accumulate in
f32 (oneDNN's kernels, on AMX tiles or AVX-512 BF16 where the CPU has them); the cell state, the gate
activations, the gradients and the weights themselves stay f32, so it is mixed-precision training, and
the exported model is an ordinary f32 model. Only meant for CPUs with those instructions
(bf16_matmul_is_fast()); elsewhere train.py keeps f32. With f32 products this layer only ties
torch.nn.LSTM (measured on the Xeon VM, docs/SPEECH.md, "Twentieth round"): the gain is bf16's.
"""
import torch


def bf16_matmul_is_fast():
    """True where this CPU multiplies bf16 in hardware (AMX or AVX-512 BF16), read from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def _mm(a, b, dtype):
    """a @ b with operands in `dtype` and a result in a's type (float64 tensors, as in the tests, stay
    float64 throughout)."""
    if dtype == torch.float32 or a.dtype == torch.float64:
        return a @ b
    return (a.to(dtype) @ b.to(dtype)).to(a.dtype)


class _Layer(torch.autograd.Function):
    """One unidirectional LSTM layer over the whole sequence: x [T, B, E] -> h [T, B, H].

    The step loops are what Python pays for op by op, so everything that does not depend on the previous
    step is done outside them, over all steps at once: the input projections before the forward loop, and
    after it the factors the backward loop multiplies by (pq: the derivatives of i, f, g's pre-activations
    times what each is multiplied with in the cell; oq: o's times tanh(c); cq: o (1 - tanh(c)^2)), so the
    backward step is two multiplications into the gate gradients, the running dc, and dh = dG W_hh."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, b_ih, b_hh, dtype):
        T, B, _ = x.shape
        H = w_hh.shape[1]
        proj = (_mm(x.reshape(T * B, -1), w_ih.t(), dtype) + (b_ih + b_hh)).view(T, B, 4 * H)
        hs = x.new_zeros(T + 1, B, H)  # h_0 .. h_T
        cs = x.new_zeros(T + 1, B, H)  # c_0 .. c_T
        acts = x.new_empty(T, B, 4 * H)  # i, f, g, o after their nonlinearities
        w_hh_t = w_hh.t().to(dtype) if x.dtype == torch.float32 else w_hh.t()  # converted once, not per step
        for t in range(T):
            g = proj[t].add_(_mm(hs[t], w_hh_t, dtype))
            a = acts[t]
            torch.sigmoid(g, out=a)  # g's slice is overwritten by its tanh next: one op fewer than three slices
            torch.tanh(g[:, 2 * H:3 * H], out=a[:, 2 * H:3 * H])
            i, f, gg, o = a.split(H, 1)
            torch.addcmul(f * cs[t], i, gg, out=cs[t + 1])
            torch.mul(o, torch.tanh(cs[t + 1]), out=hs[t + 1])
        i, f, gg, o = acts.split(H, 2)
        tc = torch.tanh(cs[1:])
        pq = torch.cat([gg * i * (1 - i), cs[:-1] * f * (1 - f), i * (1 - gg * gg)], 2)  # [T, B, 3H]
        oq = tc * o * (1 - o)
        cq = o * (1 - tc * tc)
        ctx.save_for_backward(x, w_ih, w_hh, hs, f.contiguous(), pq, oq, cq)
        ctx.dtype = dtype
        return hs[1:]

    @staticmethod
    def backward(ctx, dy):
        x, w_ih, w_hh, hs, fs, pq, oq, cq = ctx.saved_tensors
        dtype = ctx.dtype
        T, B, H = dy.shape
        dgates = dy.new_empty(T, B, 4 * H)  # gradients of the gate pre-activations
        w_hh_c = w_hh.to(dtype) if x.dtype == torch.float32 else w_hh
        dh = dy.new_zeros(B, H)
        dc = dy.new_zeros(B, H)
        for t in reversed(range(T)):
            dh = dh + dy[t]
            dc = torch.addcmul(dc, dh, cq[t])
            d = dgates[t]
            p = pq[t]
            for k in range(3):  # i, f, g (one broadcast multiplication into the strided slices is slower)
                torch.mul(p[:, k * H:(k + 1) * H], dc, out=d[:, k * H:(k + 1) * H])
            torch.mul(dh, oq[t], out=d[:, 3 * H:])  # o
            dc = dc * fs[t]
            dh = _mm(d, w_hh_c, dtype)
        flat = dgates.view(T * B, 4 * H)
        dx = _mm(flat, w_ih, dtype).view(T, B, -1)
        dw_ih = _mm(flat.t(), x.reshape(T * B, -1), dtype)
        dw_hh = _mm(flat.t(), hs[:-1].reshape(T * B, H), dtype)
        db = flat.sum(0)
        return dx, dw_ih, dw_hh, db, db, None


def lstm(x, module, dtype=torch.float32):
    """Runs the torch.nn.LSTM `module` (unidirectional, no dropout, batch_first=False, zero initial state)
    on x [T, B, E] through _Layer, with its own parameters: the same outputs as module(x)[0], to float
    rounding (products in `dtype`)."""
    if module.bidirectional or module.batch_first or module.proj_size or (module.dropout and module.training):
        raise ValueError("fast_lstm.lstm: only a unidirectional, time-major LSTM without projection or dropout")
    for k in range(module.num_layers):
        x = _Layer.apply(x, getattr(module, f"weight_ih_l{k}"), getattr(module, f"weight_hh_l{k}"),
                         getattr(module, f"bias_ih_l{k}"), getattr(module, f"bias_hh_l{k}"), dtype)
    return x
