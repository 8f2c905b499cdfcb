"""A faster CPU training path for train.py's LSTM: the same function as torch.nn.LSTM (gate order i, f, g, o,
zero initial state, no packing), with a backward written for how a CPU spends its time.

Why: PyTorch 1.13's CPU LSTM records every step's ops for autograd, so its backward computes each step's
weight gradient as a small product of its own and adds it to the running sum (180 adds of a 1.6 MB matrix
a batch at 2x320), and each step's cell is a dozen element-wise ops. Here:
- the input projections of all steps are one large product before the step loop, and the weight gradients
  of all steps two large products after the backward loop;
- each step is one recurrent product (PyTorch) and one C call for the cell (lstm_cell.c, compiled on its
  first use with the system's C compiler), forward and backward.

Matrix products in bfloat16 (lstm(..., dtype=torch.bfloat16)): the products take bf16 operands and accumulate in
f32 (oneDNN's kernels, on AMX tiles or AVX-512 BF16 where the CPU has them); the cell state, the gate
activations, the gradients and the weights themselves stay f32, so it is mixed-precision training, and
the exported model is an ordinary f32 model. The C step writes the next product's bf16 operand itself, so
nothing is converted per step. Only meant for CPUs with those instructions (bf16_matmul_is_fast()); elsewhere
train.py keeps torch.nn.LSTM in f32. Measured on the Xeon VM: docs/SPEECH-HISTORY.md, "Twentieth round" (the products)
and "Twenty-first round" (the C step).
"""
import ctypes
import os
import subprocess
import tempfile

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def bf16_matmul_is_fast():
    """True where this CPU multiplies bf16 in hardware (AMX or AVX-512 BF16), read from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


_CELLS = {}


def _cells():
    """lstm_cell.c built twice, {torch.float32: float build, torch.float64: double build}, on first use (so
    importing this module needs no compiler), into a temporary directory (removed once loaded: the mapping
    stays). -march=native: it runs only on the machine that built it."""
    if _CELLS:
        return _CELLS
    cc = os.environ.get("CC", "cc")
    built = {}
    with tempfile.TemporaryDirectory(prefix="fast_lstm") as tmp:
        for dtype, defines in ((torch.float32, []), (torch.float64, ["-DREAL=double", "-DEXP=exp", "-DTANH=tanh"])):
            so = os.path.join(tmp, f"lstm_cell_{str(dtype)[6:]}.so")
            cmd = [cc, "-std=c11", "-O3", "-ffast-math", "-march=native", "-shared", "-fPIC", *defines,
                   os.path.join(_HERE, "lstm_cell.c"), "-o", so, "-lm"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"fast_lstm.py: cannot compile lstm_cell.c ({' '.join(cmd)}):\n{done.stderr}")
            built[dtype] = ctypes.CDLL(so)
    _CELLS.update(built)
    return _CELLS


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


class _Layer(torch.autograd.Function):
    """One unidirectional LSTM layer over the whole sequence: x [T, B, E] -> h [T, B, H].

    Saves for backward what the backward step multiplies by: the gate activations, c and tanh(c) of every
    step, and the layer's inputs and h (in bf16 too when the products are bf16, as the weight gradients'
    operands)."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, b_ih, b_hh, dtype):
        T, B, _ = x.shape
        H = w_hh.shape[1]
        real = x.dtype
        half = dtype == torch.bfloat16 and real == torch.float32  # products in bf16
        op = dtype if half else real
        cell = _cells()[real].lstm_forward_step
        x_op = x.to(op)
        proj = (x_op.reshape(T * B, -1) @ w_ih.t().to(op)).to(real).add_(b_ih + b_hh).view(T, B, 4 * H)
        hs = x.new_zeros(T + 1, B, H)  # h_0 .. h_T
        hs_op = x.new_zeros(T + 1, B, H, dtype=torch.bfloat16) if half else hs  # the products' copy of h
        cs = x.new_zeros(T + 1, B, H)  # c_0 .. c_T
        acts = x.new_empty(T, B, 4 * H)  # i, f, g, o after their nonlinearities
        tcs = x.new_empty(T, B, H)  # tanh(c_1) .. tanh(c_T)
        rec = x.new_empty(B, 4 * H, dtype=op)
        w_hh_t = w_hh.t().to(op)  # converted once, not per step
        for t in range(T):
            torch.mm(hs_op[t], w_hh_t, out=rec)
            cell(_ptr(proj[t]), _ptr(rec), int(half), _ptr(cs[t]), _ptr(acts[t]), _ptr(cs[t + 1]), _ptr(tcs[t]),
                 _ptr(hs[t + 1]), _ptr(hs_op[t + 1]) if half else None, B, H)
        ctx.save_for_backward(x_op, w_ih, w_hh, hs_op, cs, acts, tcs)
        ctx.dtype, ctx.half = dtype, half
        return hs[1:]

    @staticmethod
    def backward(ctx, dy):
        x_op, w_ih, w_hh, hs_op, cs, acts, tcs = ctx.saved_tensors
        half = ctx.half
        dy = dy.contiguous()
        T, B, H = dy.shape
        real = dy.dtype
        op = torch.bfloat16 if half else real
        cell = _cells()[real].lstm_backward_step
        dgates = dy.new_empty(T, B, 4 * H)  # gradients of the gate pre-activations
        dgates_op = dy.new_empty(T, B, 4 * H, dtype=op) if half else dgates
        w_hh_op = w_hh.to(op)
        rec = dy.new_empty(B, H, dtype=op)  # dG_{t+1} W_hh
        dh = dy.new_empty(B, H)  # the C step's scratch
        dc = dy.new_zeros(B, H)
        for t in reversed(range(T)):
            cell(_ptr(dy[t]), _ptr(rec) if t < T - 1 else None, int(half), _ptr(dh), _ptr(dc), _ptr(acts[t]), _ptr(cs[t]),
                 _ptr(tcs[t]), _ptr(dgates[t]), _ptr(dgates_op[t]) if half else None, B, H)
            if t:
                torch.mm(dgates_op[t], w_hh_op, out=rec)
        flat = dgates_op.view(T * B, 4 * H)
        # layer 0's input (the features) needs no gradient: skip that product
        dx = (flat @ w_ih.to(op)).to(real).view(T, B, -1) if ctx.needs_input_grad[0] else None
        dw_ih = (flat.t() @ x_op.reshape(T * B, -1)).to(real)
        dw_hh = (flat.t() @ hs_op[:-1].reshape(T * B, H)).to(real)
        db = dgates.view(T * B, 4 * H).sum(0)
        return dx, dw_ih, dw_hh, db, db, None


def lstm(x, module, dtype=torch.float32):
    """Runs the torch.nn.LSTM `module` (unidirectional, no dropout, batch_first=False, zero initial state)
    on x [T, B, E] through _Layer, with its own parameters: the same outputs as module(x)[0], to float
    rounding (products in `dtype`; float32 or float64 data)."""
    if module.bidirectional or module.batch_first or module.proj_size or (module.dropout and module.training):
        raise ValueError("fast_lstm.lstm: only a unidirectional, time-major LSTM without projection or dropout")
    if x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"fast_lstm.lstm: x must be float32 or float64, not {x.dtype}")
    x = x.contiguous()
    for k in range(module.num_layers):
        x = _Layer.apply(x, getattr(module, f"weight_ih_l{k}"), getattr(module, f"weight_hh_l{k}"),
                         getattr(module, f"bias_ih_l{k}"), getattr(module, f"bias_hh_l{k}"), dtype)
    return x
