#!/usr/bin/env python3
"""Writes samples/quickstart/model/: a 2-layer PyTorch-convention LSTM
(input 40, hidden 96) with seeded random weights, as .npy files named the way
torch.nn.LSTM names its parameters, plus one input sequence [T=100, B=1, 40].

The weights are untrained: the quickstart shows loading, running and timing,
not a task. Needs only NumPy: /usr/bin/python3 samples/quickstart/make_model.py
"""
import os
import numpy as np

E, H, L, T = 40, 96, 2, 100
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model")
os.makedirs(here, exist_ok=True)
rng = np.random.default_rng(20261122)
bound = 1.0 / np.sqrt(H)  # torch.nn.LSTM's default init range
for layer in range(L):
    inp = E if layer == 0 else H
    shapes = {f"weight_ih_l{layer}": (4 * H, inp), f"weight_hh_l{layer}": (4 * H, H),
              f"bias_ih_l{layer}": (4 * H,), f"bias_hh_l{layer}": (4 * H,)}
    for name, shape in shapes.items():
        np.save(os.path.join(here, name + ".npy"), rng.uniform(-bound, bound, shape).astype(np.float32))
np.save(os.path.join(here, "..", "input.npy"), rng.standard_normal((T, 1, E)).astype(np.float32))
