#!/usr/bin/python3
"""Checks fast_lstm.py against torch.nn.LSTM (train.py's --matmul bf16 path; analysis only, not a test of
the library): outputs and every gradient, on random data at train.py's stage-2 shape scaled down.

- float64 (lstm_cell.c's double build), products in float64: must agree to 1e-12 (the same function;
  only summation order differs).
- float32, products in float32: must agree to 1e-5 (the same function in single precision; the C step's
  vector expf/tanhf differ from PyTorch's in the last bits, and the recurrence carries it).
- float32 inputs, products in bfloat16: the relative error of each gradient (max |a - b| / max |a|) is
  printed; bf16 keeps 8 significant bits, so a few 1e-3 is what mixed precision costs, not a bug. The
  check fails above 3e-2 (an error in the backward would give O(1)).
- saturated gates (inputs scaled by 1e4 and 1e30): every output and gradient finite, and with f32 products
  the outputs within 1e-5 of torch.nn.LSTM's (a -ffast-math reciprocal of an infinite exp gave NaN before the C step clamped it).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fast_lstm  # noqa: E402


def grads(model, x, dy, fast, dtype):
    y = fast_lstm.lstm(x, model, dtype) if fast else model(x)[0]
    return [y] + list(torch.autograd.grad((y * dy).sum(), [x] + list(model.parameters())))


def compare(dtype_data, dtype_mm, limit):
    torch.manual_seed(1)
    model = torch.nn.LSTM(24, 32, 2).to(dtype_data)
    x = torch.randn(30, 4, 24, dtype=dtype_data, requires_grad=True)
    dy = torch.randn(30, 4, 32, dtype=dtype_data)
    ref, got = grads(model, x, dy, False, dtype_mm), grads(model, x, dy, True, dtype_mm)
    names = ["output", "d input"] + [f"d {n}" for n, _ in model.named_parameters()]
    worst = 0.0
    for name, a, b in zip(names, ref, got):
        err = ((a - b).abs().max() / a.abs().max()).item()
        worst = max(worst, err)
        print(f"  {name:16s} relative error {err:.2e}")
    print(f"{dtype_data} data, {dtype_mm} products: worst {worst:.2e} (limit {limit:.0e})")
    return worst <= limit


def saturated(scale):
    torch.manual_seed(2)
    model = torch.nn.LSTM(8, 16, 1)
    x = (torch.randn(5, 2, 8) * scale).requires_grad_()
    ref = model(x)[0]
    worst = 0.0
    for dtype in (torch.float32, torch.bfloat16):
        y = fast_lstm.lstm(x, model, dtype)
        g = torch.autograd.grad(y.sum(), [x] + list(model.parameters()))
        if not all(torch.isfinite(t).all() for t in [y, *g]):
            print(f"inputs x {scale:g}, {dtype} products: a NaN or an infinity")
            return False
        if dtype == torch.float32:  # bf16 operands this large round to values whose products no longer cancel
            worst = (y - ref).abs().max().item()
    print(f"inputs x {scale:g}: all finite; f32 products: outputs within {worst:.1e} (limit 1e-5)")
    return worst <= 1e-5


ok = all([saturated(1e4), saturated(1e30), compare(torch.float64, torch.float32, 1e-12), compare(torch.float32, torch.float32, 1e-5),
          compare(torch.float32, torch.bfloat16, 3e-2)])
sys.exit(0 if ok else "check_fast_lstm.py: fast_lstm.py disagrees with torch.nn.LSTM")
