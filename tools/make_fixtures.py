#!/usr/bin/python3
"""Generate the golden test fixtures of deeprnn under test/data/.

Run from anywhere with Debian's Python (needs python3-torch, python3-onnx, numpy):

    /usr/bin/python3 tools/make_fixtures.py

Each case gets a directory test/data/<case>/ holding

    weights/*.npy   the weight tensors, named and laid out as the case's convention
                    (torch, onnx or keras) names them; float32, C order, little-endian
    input.npy       float32 input sequence
    lengths.npy     optional valid lengths (int32 or int64, as the case says)
    h0.npy, c0.npy  optional initial states, in the convention's layout
    args            one line: the deeprnn-run arguments, without --out; paths are
                    relative to the case directory
    expected/*.npy  the files deeprnn-run must write (float32)

plus test/data/MANIFEST (one case name per line) and test/data/README.md.

Where expected outputs come from
  * torch cases: PyTorch nn.LSTM / nn.GRU / nn.RNN in float32 (pack_padded_sequence
    with enforce_sorted=False when lengths are given).
  * onnx cases: ONNX's reference code onnx.backend.test.case.node.{lstm,gru,rnn}
    (LSTM_Helper, GRU_Helper, RNN_Helper).  Those helpers only run a single
    forward direction over a full batch, so this script drives them one sequence
    and one direction at a time (see run_onnx_helpers).  ONNX "clip" is not
    implemented by the helpers: clip cases use the float64 reference below.
  * keras cases: Keras is not installed.  The weights are converted to Keras
    layout and the expected outputs are PyTorch's for the same network; a GRU
    with reset_after=False has no PyTorch counterpart and uses ONNX's GRU_Helper
    with linear_before_reset=0 instead.
  * Every case is also computed by an independent float64 numpy reference
    (reference_forward), written from the operator definitions, and the script
    asserts framework-vs-reference max abs diff < 1e-5 wherever a framework
    produced the expected files.
"""

import dataclasses
import os
import warnings
import shutil
import sys
import zlib
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

# numpy >= 1.24 removed np.float, which ONNX 1.12's test-case package still uses.
np.float = float  # noqa: E305  (must precede the onnx imports)

import onnx  # noqa: E402
import torch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.backend.test.case.node.gru import GRU_Helper  # noqa: E402
from onnx.backend.test.case.node.lstm import LSTM_Helper  # noqa: E402
from onnx.backend.test.case.node.rnn import RNN_Helper  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "test", "data")

TOLERANCE = 1e-5       # framework (float32) vs float64 reference, max abs diff
WEIGHT_SCALE = 0.6     # weights ~ U(-0.6, 0.6): activations stay out of saturation
INPUT_SCALE = 1.0      # inputs and initial states ~ U(-1, 1)

# ---------------------------------------------------------------------------
# Gate names and per-convention gate orders (deeprnn.hpp, section 6).
# Internally every weight is kept per named gate:
#   LSTM: i (input), f (forget), c (cell candidate; PyTorch "g", ONNX "c"), o (output)
#   GRU:  z (update), r (reset), h (candidate; PyTorch "n", ONNX/Keras "h")
#   RNN:  h (the single gate)
# ---------------------------------------------------------------------------
GATES = {"lstm": "ifco", "gru": "zrh", "rnn": "h"}
GATE_ORDER = {
    "torch": {"lstm": "ifco", "gru": "rzh", "rnn": "h"},   # i,f,g,o / r,z,n
    "onnx": {"lstm": "iofc", "gru": "zrh", "rnn": "h"},    # i,o,f,c / z,r,h
    "keras": {"lstm": "ifco", "gru": "zrh", "rnn": "h"},   # i,f,c,o / z,r,h
}


def family(cell: str) -> str:
    """lstm, gru or rnn (rnn_tanh and rnn_relu share their weight layout)."""
    return "rnn" if cell.startswith("rnn") else cell


# ---------------------------------------------------------------------------
# Case description
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    name: str
    conv: str                        # torch | onnx | keras
    cell: str                        # lstm | gru | rnn_tanh | rnn_relu
    E: int                           # input features
    H: int                           # hidden size
    T: int                           # time steps
    B: int                           # batch
    desc: str                        # what the case covers (README)
    layers: int = 1
    direction: str = "forward"       # forward | reverse | bidirectional
    proj: int = 0                    # PyTorch proj_size (LSTM)
    bias: bool = True                # write biases (torch bias=False / ONNX without B)
    peepholes: bool = False          # ONNX P tensor
    clip: float = 0.0                # ONNX cell clip; 0 = off
    lengths: Optional[Tuple[int, ...]] = None
    lengths_dtype: str = "int64"
    h0: bool = False
    c0: bool = False
    batch_first: bool = False        # --batch-first (torch batch_first / ONNX layout=1)
    gru_variant: Optional[str] = None  # explicit --gru-variant; None = convention default
    constants: bool = False          # ONNX file: W, R, B as Constant operators (B through an Identity)
    weight_dtype: str = "float32"    # float16 | bfloat16: weights rounded to it, and so stored in model.onnx
    gates: str = "sigmoid"           # LSTM/GRU gate activation: sigmoid | hard_sigmoid (Keras < 2.3)
    hard_alpha: float = 0.2          # hard_sigmoid = clip(hard_alpha * x + hard_beta, 0, 1)
    hard_beta: float = 0.5
    cell_act: str = "tanh"           # LSTM/GRU candidate (and LSTM cell output) activation: tanh | relu
    cell_module: bool = False        # torch: weights named as nn.LSTMCell / GRUCell / RNNCell's (no _l0), run by one

    # -- derived properties --------------------------------------------------
    @property
    def dirs(self) -> List[str]:
        """Direction of each direction index d (0 = forward first, as PyTorch/ONNX)."""
        return {"forward": ["forward"], "reverse": ["reverse"],
                "bidirectional": ["forward", "reverse"]}[self.direction]

    @property
    def S(self) -> int:
        """State/output size of one direction."""
        return self.proj or self.H

    @property
    def lbr(self) -> bool:
        """GRU linear-before-reset?  Defaults: torch/keras yes, onnx no."""
        if self.gru_variant is not None:
            return self.gru_variant == "linear-before-reset"
        return self.conv != "onnx"

    @property
    def io_batch_first(self) -> bool:
        """Are input and output [B, T, ...]?  Keras is batch-first without a flag."""
        return self.batch_first or self.conv == "keras"

    def args(self) -> str:
        """The deeprnn-run command line of this case (without --out)."""
        a = ["--cell", self.cell, "--convention", self.conv,
             "--weights", "weights", "--input", "input.npy"]
        if self.layers > 1:
            a += ["--layers", str(self.layers)]
        if self.direction == "bidirectional":
            # Both spellings are accepted by deeprnn-run; the onnx cases use the
            # ONNX-style one, torch/keras the PyTorch-style flag.
            a += ["--direction", "bidirectional"] if self.conv == "onnx" else ["--bidirectional"]
        elif self.direction == "reverse":
            a += ["--direction", "reverse"]
        if self.proj:
            a += ["--proj", str(self.proj)]
        if self.clip:
            a += ["--clip", repr(self.clip)]
        if self.gru_variant:
            a += ["--gru-variant", self.gru_variant]
        if self.gates != "sigmoid":
            a += ["--gates", self.gates]
            if (self.hard_alpha, self.hard_beta) != (0.2, 0.5):
                a += ["--hard-sigmoid-alpha", repr(self.hard_alpha), "--hard-sigmoid-beta", repr(self.hard_beta)]
        if self.cell_act != "tanh":
            a += ["--cell-activation", self.cell_act]
        return " ".join(a + self.data_args())

    def args_onnx(self) -> str:
        """The same run from model.onnx (onnx cases): the flags the file carries go."""
        return " ".join(["--onnx", "model.onnx", "--input", "input.npy"] + self.data_args())

    def data_args(self) -> List[str]:
        """The flags of the run's data rather than of the model."""
        a = []
        if self.batch_first:
            a += ["--batch-first"]
        if self.lengths is not None:
            a += ["--lengths", "lengths.npy"]
        if self.h0:
            a += ["--h0", "h0.npy"]
        if self.c0:
            a += ["--c0", "c0.npy"]
        return a


# ---------------------------------------------------------------------------
# Random parameters, kept per named gate
# ---------------------------------------------------------------------------
# params[layer][d] = {"W": {gate: [H, E_k]}, "R": {gate: [H, S]},
#                     "bW": {gate: [H]}, "bR": {gate: [H]},
#                     "P": {i,o,f: [H]} or None, "proj": [P, H] or None}
Params = List[List[dict]]


def uniform(rng, shape, scale=WEIGHT_SCALE):
    return rng.uniform(-scale, scale, size=shape).astype(np.float32)


def make_params(rng, case: Case) -> Params:
    fam = family(case.cell)
    H, S, D = case.H, case.S, len(case.dirs)
    # Keras has a single bias per gate except for GRU reset_after=True, so the
    # recurrent bias is zero there; the PyTorch/ONNX runs then see exactly the
    # same network as Keras would.
    recurrent_bias = case.bias and not (case.conv == "keras" and not (fam == "gru" and case.lbr))
    zeros = np.zeros(H, np.float32)
    params = []
    # hard_sigmoid's clamps start at |x| = 2.5: larger weights so some gates reach them.
    ws = WEIGHT_SCALE * (2.5 if case.gates == "hard_sigmoid" else 1.0)
    for k in range(case.layers):
        e_k = case.E if k == 0 else D * S
        layer = []
        for _ in range(D):
            p = {"W": {g: uniform(rng, (H, e_k), ws) for g in GATES[fam]},
                 "R": {g: uniform(rng, (H, S), ws) for g in GATES[fam]},
                 "bW": {g: uniform(rng, H) if case.bias else zeros for g in GATES[fam]},
                 "bR": {g: uniform(rng, H) if recurrent_bias else zeros for g in GATES[fam]},
                 "P": {g: uniform(rng, H) for g in "iof"} if case.peepholes else None,
                 "proj": uniform(rng, (case.proj, H)) if case.proj else None}
            layer.append(p)
        params.append(layer)
    if case.weight_dtype != "float32":  # every weight exact in the narrower type
        for layer in params:
            for p in layer:
                for key, v in p.items():
                    if isinstance(v, dict):
                        p[key] = {g: round_to(a, case.weight_dtype) for g, a in v.items()}
                    elif v is not None:
                        p[key] = round_to(v, case.weight_dtype)
    return params


def round_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to float16 or bfloat16 (to nearest even), as float32."""
    if dtype == "float16":
        return a.astype(np.float16).astype(np.float32)
    return (bfloat16_bits(a).astype(np.uint32) << 16).view(np.float32)


def bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """The bfloat16 nearest (ties to even) to each float32 of a, as uint16 bits."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def stack(gate_dict: dict, order: str) -> np.ndarray:
    """Concatenate per-gate arrays along axis 0 in the given gate order."""
    return np.concatenate([gate_dict[g] for g in order], axis=0)


# ---------------------------------------------------------------------------
# One helper per convention: named-gate parameters -> that convention's tensors
# ---------------------------------------------------------------------------
def torch_tensors(case: Case, params: Params) -> Dict[str, np.ndarray]:
    """PyTorch state_dict names: weight_ih_l{k}[_reverse], ..., weight_hr_l{k}."""
    order = GATE_ORDER["torch"][family(case.cell)]
    out = {}
    for k, layer in enumerate(params):
        for d, p in enumerate(layer):
            sfx = f"_l{k}" + ("_reverse" if d == 1 else "")
            out["weight_ih" + sfx] = stack(p["W"], order)
            out["weight_hh" + sfx] = stack(p["R"], order)
            if case.bias:
                out["bias_ih" + sfx] = stack(p["bW"], order)
                out["bias_hh" + sfx] = stack(p["bR"], order)
            if p["proj"] is not None:
                out["weight_hr" + sfx] = p["proj"]
    if case.cell_module:  # nn.LSTMCell / GRUCell / RNNCell: one layer, no suffix
        assert case.layers == 1 and case.direction == "forward" and not case.proj
        out = {k[:-len("_l0")]: v for k, v in out.items()}
    return out


def run_torch_cell(case: Case, params: Params, x, h0, c0):
    """PyTorch nn.LSTMCell / GRUCell / RNNCell in float32, stepped over time
    by hand (no lengths), loaded from the cell's own state_dict names."""
    fam = family(case.cell)
    assert case.lengths is None and not case.io_batch_first
    kw = dict(input_size=case.E, hidden_size=case.H, bias=case.bias)
    mod = {"lstm": lambda: torch.nn.LSTMCell(**kw), "gru": lambda: torch.nn.GRUCell(**kw),
           "rnn": lambda: torch.nn.RNNCell(nonlinearity=case.cell[4:], **kw)}[fam]()
    mod.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in torch_tensors(case, params).items()}, strict=True)
    h, c = torch.from_numpy(h0[0].copy()), torch.from_numpy(c0[0].copy())
    ys = []
    with torch.no_grad():
        for t in range(x.shape[0]):
            xt = torch.from_numpy(x[t].copy())
            if fam == "lstm":
                h, c = mod(xt, (h, c))
            else:
                h = mod(xt, h)
            ys.append(h.numpy().copy())
    c_n = c.numpy()[None] if fam == "lstm" else c0.copy()
    return np.stack(ys), h.numpy()[None], c_n


def onnx_tensors(case: Case, params: Params) -> Dict[str, np.ndarray]:
    """ONNX operator inputs W [D,G*H,E], R [D,G*H,H], B [D,2*G*H], P [D,3H] (i,o,f)."""
    assert len(params) == 1, "an ONNX operator is one layer"
    order = GATE_ORDER["onnx"][family(case.cell)]
    layer = params[0]
    out = {"W": np.stack([stack(p["W"], order) for p in layer]),
           "R": np.stack([stack(p["R"], order) for p in layer])}
    if case.bias:
        out["B"] = np.stack([np.concatenate([stack(p["bW"], order), stack(p["bR"], order)])
                             for p in layer])
    if case.peepholes:
        out["P"] = np.stack([stack(p["P"], "iof") for p in layer])
    return out


def keras_tensors(case: Case, params: Params) -> Dict[str, np.ndarray]:
    """Keras kernel [E,G*H], recurrent_kernel [H,G*H], bias [G*H] or [2,G*H]
    (GRU reset_after=True); prefix l{k}_ / l{k}_reverse_ unless one forward layer."""
    fam = family(case.cell)
    order = GATE_ORDER["keras"][fam]
    two_biases = fam == "gru" and case.lbr      # reset_after=True
    single = len(params) == 1 and len(params[0]) == 1
    out = {}
    for k, layer in enumerate(params):
        for d, p in enumerate(layer):
            pre = "" if single else f"l{k}_" + ("reverse_" if d == 1 else "")
            out[pre + "kernel"] = stack(p["W"], order).T
            out[pre + "recurrent_kernel"] = stack(p["R"], order).T
            if case.bias:
                if two_biases:
                    out[pre + "bias"] = np.stack([stack(p["bW"], order), stack(p["bR"], order)])
                else:
                    assert not stack(p["bR"], order).any(), "Keras has no recurrent bias here"
                    out[pre + "bias"] = stack(p["bW"], order)
    return out


CONVENTION_TENSORS = {"torch": torch_tensors, "onnx": onnx_tensors, "keras": keras_tensors}


# ---------------------------------------------------------------------------
# Independent float64 reference (operator definitions of PyTorch / ONNX / Keras)
# ---------------------------------------------------------------------------
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class HardSigmoid:
    """hard_sigmoid gates, counting how many values the clamps changed."""

    def __init__(self, alpha: float, beta: float):
        self.alpha, self.beta, self.total, self.clamped = alpha, beta, 0, 0

    def __call__(self, pre: np.ndarray) -> np.ndarray:
        v = self.alpha * pre + self.beta
        self.total += v.size
        self.clamped += int(np.sum((v < 0) | (v > 1)))
        return np.clip(v, 0.0, 1.0)


class Relu:
    """relu candidates, counting how many values it zeroed."""

    def __init__(self):
        self.total, self.zeroed = 0, 0

    def __call__(self, pre: np.ndarray) -> np.ndarray:
        self.total += pre.size
        self.zeroed += int(np.sum(pre < 0))
        return np.maximum(pre, 0.0)


def candidate_of(case) -> Callable:
    """The case's candidate activation: tanh, or a Relu that counts its zeros."""
    return Relu() if case.cell_act == "relu" else np.tanh


def gate_of(case) -> Callable:
    """The case's gate activation: sigmoid, or a HardSigmoid that counts its clamps."""
    return HardSigmoid(case.hard_alpha, case.hard_beta) if case.gates == "hard_sigmoid" else sigmoid


class ClipStats:
    """Counts how many gate pre-activations the clip actually changed."""

    def __init__(self, clip: float):
        self.clip, self.total, self.clipped = clip, 0, 0

    def __call__(self, pre: np.ndarray) -> np.ndarray:
        if not self.clip:
            return pre
        self.total += pre.size
        self.clipped += int(np.sum(np.abs(pre) > self.clip))
        return np.clip(pre, -self.clip, self.clip)


def reference_step(cell: str, p: dict, x, h, c, lbr: bool, clip: ClipStats, gate=sigmoid, act=np.tanh):
    """One time step of one sequence (1-D vectors), float64; gate is the
    activation of the LSTM / GRU gates (sigmoid, or a HardSigmoid), act that
    of their candidates and LSTM's cell output (tanh, or a Relu).

    clip() is applied to every gate pre-activation after peephole terms, before
    the gate's activation; the cell state is never clipped (ONNX Runtime)."""
    f64 = lambda a: a.astype(np.float64)  # noqa: E731

    def lin(g, hh=h):  # W_g x + b_Wg + R_g hh + b_Rg
        return f64(p["W"][g]) @ x + f64(p["bW"][g]) + f64(p["R"][g]) @ hh + f64(p["bR"][g])

    fam = family(cell)
    if fam == "lstm":
        peep = {g: (f64(p["P"][g]) if p["P"] is not None else 0.0) for g in "iof"}
        i = gate(clip(lin("i") + peep["i"] * c))
        f = gate(clip(lin("f") + peep["f"] * c))
        g = act(clip(lin("c")))
        c_new = f * c + i * g
        o = gate(clip(lin("o") + peep["o"] * c_new))   # output peephole sees c_t
        h_new = o * act(c_new)
        if p["proj"] is not None:
            h_new = f64(p["proj"]) @ h_new
        return h_new, c_new
    if fam == "gru":
        z = gate(clip(lin("z")))
        r = gate(clip(lin("r")))
        xw = f64(p["W"]["h"]) @ x + f64(p["bW"]["h"])
        if lbr:   # n = tanh(Wx + b_in + r * (U h + b_hn))
            n = act(clip(xw + r * (f64(p["R"]["h"]) @ h + f64(p["bR"]["h"]))))
        else:     # n = tanh(Wx + b_in + U (r * h) + b_hn)
            n = act(clip(xw + f64(p["R"]["h"]) @ (r * h) + f64(p["bR"]["h"])))
        return (1.0 - z) * n + z * h, c
    pre = clip(lin("h"))
    return (np.tanh(pre) if cell == "rnn_tanh" else np.maximum(pre, 0.0)), c


def reference_forward(case: Case, params: Params, x, lengths, h0, c0, clip: ClipStats, gate=sigmoid, act=np.tanh):
    """Whole network in float64.  x [T,B,E]; h0 [L*D,B,S]; c0 [L*D,B,H].
    Returns y [T,B,D*S], h_n [L*D,B,S], c_n [L*D,B,H] (PyTorch time-major layout).

    Sequence b runs steps 0..len-1; a reverse direction starts at len-1; y is 0
    at steps >= len in every layer; final states are taken at the last valid
    step (the initial state when len = 0)."""
    T, B, _ = x.shape
    D, S, H = len(case.dirs), case.S, case.H
    hn = np.zeros((case.layers * D, B, S))
    cn = np.zeros((case.layers * D, B, H))
    inp = x.astype(np.float64)
    for k, layer in enumerate(params):
        outs = []
        for d, p in enumerate(layer):
            idx = k * D + d
            y = np.zeros((T, B, S))
            for b in range(B):
                h, c = h0[idx, b].astype(np.float64), c0[idx, b].astype(np.float64)
                steps = range(lengths[b])
                if case.dirs[d] == "reverse":
                    steps = reversed(steps)
                for t in steps:
                    h, c = reference_step(case.cell, p, inp[t, b], h, c, case.lbr, clip, gate, act)
                    y[t, b] = h
                hn[idx, b], cn[idx, b] = h, c
            outs.append(y)
        inp = np.concatenate(outs, axis=-1)
    return inp, hn, cn


# ---------------------------------------------------------------------------
# Frameworks
# ---------------------------------------------------------------------------
def run_torch(case: Case, params: Params, x, lengths, h0, c0):
    """PyTorch nn.LSTM/GRU/RNN in float32.  Inputs/outputs in time-major layout;
    the module itself runs batch_first when the case is batch-first, so PyTorch's
    own batch_first handling is what produces the expected files.

    pack_padded_sequence refuses length 0, so sequences of length 0 are left out
    of the PyTorch run; their outputs are 0 and their final states the initial
    ones (the documented deeprnn semantics; the float64 reference checks it)."""
    fam = family(case.cell)
    assert case.direction != "reverse", "PyTorch has no reverse-only layer"
    kw = dict(input_size=case.E, hidden_size=case.H, num_layers=case.layers, bias=case.bias,
              batch_first=case.io_batch_first, bidirectional=case.direction == "bidirectional")
    if fam == "lstm":
        mod = torch.nn.LSTM(proj_size=case.proj, **kw)
    elif fam == "gru":
        mod = torch.nn.GRU(**kw)
    else:
        mod = torch.nn.RNN(nonlinearity=case.cell[4:], **kw)
    # strict=True: the tensor names we write are exactly PyTorch's parameter names.
    mod.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in
                         torch_tensors(case, params).items()}, strict=True)
    mod.eval()

    keep = [b for b in range(x.shape[1]) if lengths[b] > 0]
    T = x.shape[0]
    bdim = 0 if case.io_batch_first else 1
    xs = torch.from_numpy(x[:, keep].copy())
    if case.io_batch_first:
        xs = xs.transpose(0, 1).contiguous()
    hx = torch.from_numpy(h0[:, keep].copy())
    if fam == "lstm":
        hx = (hx, torch.from_numpy(c0[:, keep].copy()))
    with torch.no_grad():
        if case.lengths is None:
            out, hn = mod(xs, hx)
        else:
            packed = torch.nn.utils.rnn.pack_padded_sequence(
                xs, torch.tensor([lengths[b] for b in keep], dtype=torch.int64),
                batch_first=case.io_batch_first, enforce_sorted=False)
            out, hn = mod(packed, hx)
            out, _ = torch.nn.utils.rnn.pad_packed_sequence(
                out, batch_first=case.io_batch_first, total_length=T)
    out = out.numpy()
    if bdim == 0:
        out = out.transpose(1, 0, 2)
    hn, cn = (hn if fam == "lstm" else (hn, None))
    y = np.zeros((T, x.shape[1], out.shape[2]), np.float32)
    y[:, keep] = out
    h_n, c_n = h0.copy(), c0.copy()
    h_n[:, keep] = hn.numpy()
    if cn is not None:
        c_n[:, keep] = cn.numpy()
    return y, h_n, c_n


def run_onnx_helpers(case: Case, tensors: Dict[str, np.ndarray], x, lengths, h0, c0):
    """ONNX reference helpers (onnx.backend.test.case.node), driven one sequence
    and one direction at a time, since the ONNX 1.12 helpers implement neither
    bidirectional/reverse, sequence_lens, nor a correct Y_h for layout=1:
      * reverse direction = the helper run on the time-reversed valid prefix,
        whose outputs are put back in original time order;
      * sequence_lens = the helper run on x[:len] of that sequence only; steps
        past len stay 0, Y_h is the helper's last state (initial_h if len = 0);
      * layout=1 is a pure transposition, done by the caller (the 1.12 helper's
        layout=1 takes Y_h from the direction axis and sizes its default
        initial state by T instead of B).
    The LSTM helper does not return Y_c: its output activation h(C) is wrapped to
    record the cell state C of each step.  ONNX RNN activations=['Relu'] is the
    helper with its activation f replaced by Relu; relu candidates (LSTM
    [Sigmoid, Relu, Relu], GRU [Sigmoid, Relu]) replace g (and LSTM's h).
    Returns y [T,B,D*H], h_n [D,B,H], c_n [D,B,H] (PyTorch layout)."""
    fam = family(case.cell)
    helper_cls = {"lstm": LSTM_Helper, "gru": GRU_Helper, "rnn": RNN_Helper}[fam]
    T, B, _ = x.shape
    D, H = len(case.dirs), case.H
    y = np.zeros((T, B, D, H), np.float32)
    h_n, c_n = h0.copy(), c0.copy()
    for d, direction in enumerate(case.dirs):
        for b in range(B):
            n = lengths[b]
            if n == 0:
                continue
            xs = x[:n, b:b + 1]
            if direction == "reverse":
                xs = xs[::-1]
            kw = dict(X=np.ascontiguousarray(xs), W=tensors["W"][d:d + 1],
                      R=tensors["R"][d:d + 1], initial_h=h0[d:d + 1, b:b + 1])
            if "B" in tensors:
                kw["B"] = tensors["B"][d:d + 1]
            if fam == "lstm":
                kw["initial_c"] = c0[d:d + 1, b:b + 1]
                if "P" in tensors:
                    kw["P"] = tensors["P"][d:d + 1]
            if fam == "gru":
                # The helper squeezes axis 0 of every parameter: pass a [1] array.
                kw["linear_before_reset"] = np.array([int(case.lbr)])
            helper = helper_cls(**kw)
            cells = []
            out_act = (lambda v: np.maximum(v, 0)) if case.cell_act == "relu" else np.tanh
            if fam == "lstm":
                helper.h = lambda C, cells=cells, out_act=out_act: (cells.append(C), out_act(C))[1]
            if case.cell_act == "relu":
                helper.g = lambda v: np.maximum(v, 0)
            if case.cell == "rnn_relu":
                helper.f = lambda v: np.maximum(v, 0)
            Y, Y_h = helper.step()                  # Y [n,1,1,H], Y_h [1,1,H]
            ys = Y[:, 0, 0]
            if direction == "reverse":
                ys = ys[::-1]
            y[:n, b, d] = ys
            h_n[d, b] = Y_h[0, 0]
            if fam == "lstm":
                c_n[d, b] = cells[-1][0]
    return y.reshape(T, B, D * H), h_n, c_n


# ---------------------------------------------------------------------------
# Layouts of the files deeprnn-run writes / reads
# ---------------------------------------------------------------------------
def expected_files(case: Case, y, h_n, c_n) -> Dict[str, np.ndarray]:
    """Time-major PyTorch-layout results -> the case convention's output files."""
    lstm = family(case.cell) == "lstm"
    if case.conv == "onnx":
        T, B, _ = y.shape
        D = len(case.dirs)
        Y = y.reshape(T, B, D, case.H).transpose(0, 2, 1, 3)      # [T,D,B,H]
        out = {"Y": Y, "Y_h": h_n, "Y_c": c_n}
        if case.batch_first:                                        # layout = 1
            out = {"Y": Y.transpose(2, 0, 1, 3), "Y_h": h_n.transpose(1, 0, 2),
                   "Y_c": c_n.transpose(1, 0, 2)}
        if not lstm:
            del out["Y_c"]
        return out
    out = {"output": y.transpose(1, 0, 2) if case.io_batch_first else y,
           "h_n": h_n, "c_n": c_n}
    if not lstm:
        del out["c_n"]
    return out


def onnx_model(case: Case, tensors: Dict[str, np.ndarray]) -> bytes:
    """The case's operator as an ONNX model file (for load_onnx): its weights
    as initializers, W and R as raw_data and B and P as float_data (both
    encodings ONNX allows), X and the case's states and lengths as graph
    inputs; checked by onnx.checker. With case.constants, the weights are
    Constant operators instead, and B reaches the operator through an
    Identity (as converters other than PyTorch's write them)."""
    fam = family(case.cell)
    op = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}[fam]
    D = len(case.dirs)
    inits = []
    for name, t in tensors.items():
        # W, R as raw_data; B, P as int32_data (make_tensor rounds the values,
        # already exact, and stores each one's 16 bits)
        if case.weight_dtype == "float16":
            inits.append(numpy_helper.from_array(t.astype(np.float16), name) if name in ("W", "R") else
                         helper.make_tensor(name, TensorProto.FLOAT16, t.shape, t.ravel().tolist()))
        elif case.weight_dtype == "bfloat16":
            inits.append(helper.make_tensor(name, TensorProto.BFLOAT16, t.shape, bfloat16_bits(t).tobytes(), raw=True)
                         if name in ("W", "R") else
                         helper.make_tensor(name, TensorProto.BFLOAT16, t.shape, t.ravel().tolist()))
        elif name in ("W", "R"):
            inits.append(numpy_helper.from_array(t.astype(np.float32), name))
        else:
            inits.append(helper.make_tensor(name, TensorProto.FLOAT, t.shape, t.astype(np.float32).ravel().tolist()))
    nodes = []
    if case.constants:
        for t in inits:
            source = t.name + "_constant" if t.name == "B" else t.name
            nodes.append(helper.make_node("Constant", [], [source], name=source, value=t))
            if source != t.name:
                nodes.append(helper.make_node("Identity", [source], [t.name], name=t.name + "_identity"))
        inits = []
    seq_shape = ["B", "T", case.E] if case.batch_first else ["T", "B", case.E]
    state_shape = ["B", D, case.H] if case.batch_first else [D, "B", case.H]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, seq_shape)]
    names = ["X", "W", "R", "B" if "B" in tensors else "", "", "", "", "P" if "P" in tensors else ""]
    if case.lengths is not None:
        names[4] = "sequence_lens"
        graph_inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, ["B"]))
    if case.h0:
        names[5] = "initial_h"
        graph_inputs.append(helper.make_tensor_value_info("initial_h", TensorProto.FLOAT, state_shape))
    if case.c0:
        names[6] = "initial_c"
        graph_inputs.append(helper.make_tensor_value_info("initial_c", TensorProto.FLOAT, state_shape))
    while names and not names[-1]:
        names.pop()
    attrs = {"hidden_size": case.H, "direction": case.direction}
    if case.clip:
        attrs["clip"] = case.clip
    if fam == "gru":
        attrs["linear_before_reset"] = int(case.lbr)
    if case.cell == "rnn_relu":
        attrs["activations"] = ["Relu"] * D
    if case.batch_first:
        attrs["layout"] = 1
    if case.gates == "hard_sigmoid" or case.cell_act == "relu":
        gate, cand = "HardSigmoid" if case.gates == "hard_sigmoid" else "Sigmoid", "Relu" if case.cell_act == "relu" else "Tanh"
        attrs["activations"] = ([gate, cand, cand] if fam == "lstm" else [gate, cand]) * D
        if case.gates == "hard_sigmoid" and (case.hard_alpha, case.hard_beta) != (0.2, 0.5):
            attrs["activation_alpha"] = [case.hard_alpha] * D
            attrs["activation_beta"] = [case.hard_beta] * D
    outputs = ["Y", "Y_h"] + (["Y_c"] if fam == "lstm" else [])
    nodes.append(helper.make_node(op, names, outputs, name=case.name, **attrs))
    y_shape = ["B", "T", D, case.H] if case.batch_first else ["T", D, "B", case.H]
    graph_outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, y_shape if o == "Y" else state_shape)
                     for o in outputs]
    graph = helper.make_graph(nodes, case.name, graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, producer_name="deeprnn make_fixtures.py",
                              opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def state_file(case: Case, s: np.ndarray) -> np.ndarray:
    """Initial state [L*D,B,S] -> file layout (ONNX layout=1 is [B,D,H])."""
    return s.transpose(1, 0, 2) if case.conv == "onnx" and case.batch_first else s


def save(path: str, a: np.ndarray, dtype: str = "<f4") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, np.ascontiguousarray(a, dtype=dtype))


# ---------------------------------------------------------------------------
# One case, end to end
# ---------------------------------------------------------------------------
def build_case(case: Case) -> Tuple[str, str]:
    """Generate, compute, cross-check and write one case.
    Returns (source of the expected outputs, cross-check summary)."""
    fam = family(case.cell)
    assert case.E <= 9 and case.H <= 9 and case.T <= 7 and case.B <= 3
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))   # per-case seed
    params = make_params(rng, case)
    LD = case.layers * len(case.dirs)
    x = uniform(rng, (case.T, case.B, case.E), INPUT_SCALE)           # time-major
    h0 = uniform(rng, (LD, case.B, case.S), INPUT_SCALE) if case.h0 else \
        np.zeros((LD, case.B, case.S), np.float32)
    c0 = uniform(rng, (LD, case.B, case.H), INPUT_SCALE) if case.c0 else \
        np.zeros((LD, case.B, case.H), np.float32)
    lengths = list(case.lengths) if case.lengths is not None else [case.T] * case.B

    # Framework result (None for clip and hard_sigmoid gates: no framework here implements them).
    gate, act = gate_of(case), candidate_of(case)
    if case.clip or case.gates != "sigmoid":
        what = "ONNX clip" if case.clip else "hard_sigmoid gates"
        framework, source = None, f"float64 reference ({what}: no framework implements it)"
    elif case.conv == "onnx" or (case.conv == "keras" and fam == "gru" and not case.lbr) or case.cell_act == "relu":
        # PyTorch has no relu LSTM or GRU; ONNX's helpers take relu for g and h.
        framework = run_onnx_helpers(case, onnx_tensors(case, params), x, lengths, h0, c0)
        source = "ONNX " + {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}[fam] + "_Helper"
        if case.conv == "keras":
            source += (f" (linear_before_reset={int(case.lbr)}, Keras weights converted)" if fam == "gru"
                       else " (Keras weights converted)")
        if case.cell_act == "relu":
            source += " with Relu candidates"
    else:
        if case.cell_module:
            framework = run_torch_cell(case, params, x, h0, c0)
        else:
            framework = run_torch(case, params, x, lengths, h0, c0)
        source = "PyTorch nn." + {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}[fam] + ("Cell" if case.cell_module else "")
        if case.lengths is not None:
            source += " + pack_padded_sequence"
        if case.conv == "keras":
            source += " (weights converted to Keras layout)"

    clip = ClipStats(case.clip)
    ref = reference_forward(case, params, x, lengths, h0, c0, clip, gate, act)
    if case.cell_act == "relu":  # relu must bite: some candidates zeroed, outputs far from tanh's
        tanh_ref = reference_forward(dataclasses.replace(case, cell_act="tanh"), params, x, lengths, h0, c0,
                                     ClipStats(case.clip), gate_of(case))
        relu_effect = float(np.max(np.abs(tanh_ref[0] - ref[0])))
        assert 0 < act.zeroed < act.total and relu_effect > 1e-3, (case.name, act.zeroed, act.total, relu_effect)

    if framework is not None:
        diff = max(float(np.max(np.abs(f.astype(np.float64) - r)))
                   for f, r in zip(framework, ref))
        assert diff < TOLERANCE, f"{case.name}: framework vs reference diff {diff:.3g}"
        check = f"{diff:.2e}"
        if case.cell_act == "relu":
            check += f"; {act.zeroed}/{act.total} candidates zeroed by relu; relu changes y by up to {relu_effect:.2f}"
        result = framework
    else:
        # No framework for clip or hard_sigmoid gates: check that the same
        # weights without them agree with the ONNX helper (so the weights and
        # layout are right) and that each really bites (some, not all, values
        # beyond the clip's bound or the gates' clamps).
        if case.clip:
            assert 0 < clip.clipped < clip.total, (case.name, clip.clipped, clip.total)
        if case.gates != "sigmoid":
            assert 0 < gate.clamped < gate.total, (case.name, gate.clamped, gate.total)
        plain_case = dataclasses.replace(case, clip=0.0, gates="sigmoid")
        plain_ref = reference_forward(plain_case, params, x, lengths, h0, c0, ClipStats(0), act=candidate_of(case))
        helper = run_onnx_helpers(plain_case, onnx_tensors(case, params), x, lengths, h0, c0)
        diff = max(float(np.max(np.abs(f.astype(np.float64) - r)))
                   for f, r in zip(helper, plain_ref))
        assert diff < TOLERANCE, f"{case.name}: plain helper vs reference diff {diff:.3g}"
        effect = float(np.max(np.abs(plain_ref[0] - ref[0])))
        assert effect > 1e-3, f"{case.name}: {what} has no visible effect"
        if case.clip:
            check = (f"reference only; unclipped helper diff {diff:.2e}; "
                     f"{clip.clipped}/{clip.total} pre-activations clipped; "
                     f"clip changes y by up to {effect:.2f}")
        else:
            check = (f"reference only; sigmoid helper diff {diff:.2e}; "
                     f"{gate.clamped}/{gate.total} gates clamped; "
                     f"hard_sigmoid changes y by up to {effect:.2f}")
        result = ref

    # Write the case directory.
    root = os.path.join(DATA, case.name)
    shutil.rmtree(root, ignore_errors=True)
    for name, t in CONVENTION_TENSORS[case.conv](case, params).items():
        save(os.path.join(root, "weights", name + ".npy"), t)
    save(os.path.join(root, "input.npy"), x.transpose(1, 0, 2) if case.io_batch_first else x)
    if case.lengths is not None:
        save(os.path.join(root, "lengths.npy"), np.array(case.lengths),
             "<i8" if case.lengths_dtype == "int64" else "<i4")
    if case.h0:
        save(os.path.join(root, "h0.npy"), state_file(case, h0))
    if case.c0:
        save(os.path.join(root, "c0.npy"), state_file(case, c0))
    for name, t in expected_files(case, *result).items():
        save(os.path.join(root, "expected", name + ".npy"), t)
    with open(os.path.join(root, "args"), "w") as f:
        f.write(case.args() + "\n")
    if case.conv == "onnx":  # the same operator as a model file, which carries what the flags say
        with open(os.path.join(root, "model.onnx"), "wb") as f:
            f.write(onnx_model(case, CONVENTION_TENSORS[case.conv](case, params)))
        with open(os.path.join(root, "args_onnx"), "w") as f:
            f.write(case.args_onnx() + "\n")
    return source, check


# ---------------------------------------------------------------------------
# The cases (sizes kept tiny: E, H <= 9, T <= 7, B <= 3)
# ---------------------------------------------------------------------------
CASES = [
    # --- PyTorch convention -------------------------------------------------
    Case("torch_lstm", "torch", "lstm", E=5, H=7, T=6, B=3,
         desc="single-layer LSTM, gate order i,f,g,o"),
    Case("torch_gru", "torch", "gru", E=4, H=6, T=5, B=2,
         desc="single-layer GRU (r,z,n; linear-before-reset default)"),
    Case("torch_rnn_tanh", "torch", "rnn_tanh", E=3, H=5, T=7, B=2,
         desc="single-layer Elman RNN, tanh"),
    Case("torch_rnn_relu", "torch", "rnn_relu", E=6, H=4, T=5, B=3,
         desc="single-layer Elman RNN, relu"),
    Case("torch_lstm_2layer", "torch", "lstm", E=5, H=6, T=5, B=2, layers=2,
         desc="2 stacked LSTM layers (layer 1 input = H)"),
    Case("torch_gru_bidir_2layer", "torch", "gru", E=4, H=5, T=6, B=3, layers=2,
         direction="bidirectional",
         desc="2-layer bidirectional GRU (layer 1 input = 2H; h_n index = layer*2+dir)"),
    Case("torch_lstm_bidir_proj", "torch", "lstm", E=5, H=7, T=5, B=2, proj=3,
         direction="bidirectional",
         desc="bidirectional LSTM with proj_size=3 (output 2P, h_n [2,B,P], c_n [2,B,H])"),
    Case("torch_lstm_proj_2layer", "torch", "lstm", E=4, H=6, T=5, B=2, proj=4, layers=2,
         desc="2-layer LSTM with proj_size=4 (layer 1 input = P)"),
    Case("torch_lstm_bidir_lengths", "torch", "lstm", E=5, H=6, T=7, B=3,
         direction="bidirectional", lengths=(4, 0, 7), lengths_dtype="int64",
         desc="bidirectional LSTM, unsorted int64 lengths with a 0 and a full T"),
    Case("torch_gru_lengths", "torch", "gru", E=3, H=7, T=5, B=3,
         lengths=(2, 5, 4), lengths_dtype="int32",
         desc="GRU with unsorted int32 lengths"),
    Case("torch_lstm_batch_first", "torch", "lstm", E=4, H=5, T=6, B=3, batch_first=True,
         desc="LSTM with --batch-first (input [B,T,E], output [B,T,H])"),
    Case("torch_lstm_h0c0_bidir_2layer", "torch", "lstm", E=3, H=5, T=4, B=2, layers=2,
         direction="bidirectional", h0=True, c0=True,
         desc="2-layer bidirectional LSTM with given h0/c0 [4,B,H]"),
    Case("torch_gru_h0", "torch", "gru", E=5, H=7, T=5, B=2, h0=True,
         desc="GRU with given h0 [1,B,H]"),
    Case("torch_rnn_tanh_bidir_lengths", "torch", "rnn_tanh", E=4, H=6, T=6, B=3,
         direction="bidirectional", lengths=(2, 6, 4), lengths_dtype="int64",
         desc="bidirectional tanh RNN with unsorted int64 lengths"),
    Case("torch_lstm_b1_t1", "torch", "lstm", E=5, H=7, T=1, B=1,
         desc="edge case B=1, T=1"),
    Case("torch_gru_nobias", "torch", "gru", E=4, H=5, T=5, B=2, bias=False,
         desc="GRU with bias=False (no bias files)"),
    Case("torch_lstm_proj_bidir_lengths_h0c0", "torch", "lstm", E=4, H=5, T=5, B=3,
         proj=2, direction="bidirectional", lengths=(5, 1, 3), lengths_dtype="int32",
         h0=True, c0=True,
         desc="projection + bidirectional + int32 lengths + h0 [2,B,P] / c0 [2,B,H]"),
    # --- ONNX convention ----------------------------------------------------
    Case("onnx_lstm", "onnx", "lstm", E=5, H=7, T=6, B=3,
         desc="LSTM forward, gate order i,o,f,c, B = [Wb, Rb]"),
    Case("onnx_lstm_peepholes", "onnx", "lstm", E=4, H=6, T=5, B=2, peepholes=True,
         desc="LSTM with peepholes P [1,3H] (i,o,f)"),
    Case("onnx_lstm_reverse", "onnx", "lstm", E=5, H=6, T=6, B=2, direction="reverse",
         desc='LSTM direction="reverse" (single reverse layer)'),
    Case("onnx_lstm_bidir", "onnx", "lstm", E=4, H=5, T=5, B=3, direction="bidirectional",
         desc="bidirectional LSTM (Y [T,2,B,H], Y_h/Y_c [2,B,H])"),
    Case("onnx_gru", "onnx", "gru", E=5, H=7, T=6, B=2,
         desc="GRU z,r,h, default linear_before_reset=0 (reset-before-matmul)"),
    Case("onnx_gru_lbr", "onnx", "gru", E=4, H=6, T=5, B=3,
         gru_variant="linear-before-reset", desc="GRU linear_before_reset=1"),
    Case("onnx_gru_reverse", "onnx", "gru", E=3, H=5, T=6, B=2, direction="reverse",
         desc='GRU direction="reverse"'),
    Case("onnx_rnn_tanh", "onnx", "rnn_tanh", E=4, H=7, T=5, B=2,
         desc="RNN, default activation Tanh"),
    Case("onnx_rnn_relu", "onnx", "rnn_relu", E=5, H=4, T=6, B=3,
         desc="RNN with activations=['Relu']"),
    Case("onnx_lstm_initial_states", "onnx", "lstm", E=4, H=5, T=5, B=2, peepholes=True,
         h0=True, c0=True, desc="LSTM with initial_h/initial_c [1,B,H] and peepholes"),
    Case("onnx_lstm_layout1", "onnx", "lstm", E=5, H=6, T=5, B=3, batch_first=True,
         desc="LSTM layout=1 (--batch-first): X [B,T,E], Y [B,T,1,H], Y_h/Y_c [B,1,H]"),
    Case("onnx_lstm_layout1_bidir_init", "onnx", "lstm", E=3, H=5, T=4, B=2,
         batch_first=True, direction="bidirectional", h0=True, c0=True,
         desc="layout=1 + bidirectional + initial_h/initial_c [B,2,H]"),
    Case("onnx_lstm_clip", "onnx", "lstm", E=5, H=6, T=5, B=2, peepholes=True, clip=0.5,
         desc="LSTM clip=0.5 with peepholes (clamp after peephole terms)"),
    Case("onnx_gru_clip", "onnx", "gru", E=4, H=5, T=5, B=2, clip=0.5,
         gru_variant="linear-before-reset",
         desc="GRU clip=0.5, linear_before_reset=1 (candidate clamped as a whole)"),
    Case("onnx_lstm_seqlens", "onnx", "lstm", E=4, H=5, T=7, B=3,
         direction="bidirectional", lengths=(3, 7, 0), lengths_dtype="int32",
         desc="bidirectional LSTM with sequence_lens (int32) incl. 0 and T"),
    Case("torch_lstmcell", "torch", "lstm", E=5, H=6, T=5, B=2, cell_module=True, h0=True, c0=True,
         desc="nn.LSTMCell's state_dict (weight_ih, weight_hh, bias_ih, bias_hh: no _l0), stepped over time"),
    Case("torch_grucell", "torch", "gru", E=4, H=5, T=5, B=2, cell_module=True,
         desc="nn.GRUCell's state_dict, stepped over time"),
    Case("torch_rnncell_relu", "torch", "rnn_relu", E=3, H=4, T=5, B=2, cell_module=True, bias=False,
         desc="nn.RNNCell(nonlinearity='relu', bias=False)'s state_dict, stepped over time"),
    Case("onnx_lstm_nob", "onnx", "lstm", E=4, H=6, T=5, B=2, bias=False,
         desc="LSTM without the optional B input"),
    Case("onnx_gru_constants", "onnx", "gru", E=4, H=5, T=5, B=2, constants=True,
         desc="GRU whose model.onnx holds W, R, B as Constant operators, B through an Identity"),
    Case("onnx_lstm_float16", "onnx", "lstm", E=4, H=5, T=5, B=2, peepholes=True, weight_dtype="float16",
         desc="LSTM whose model.onnx stores the weights as FLOAT16 (W, R raw_data; B, P int32_data)"),
    Case("onnx_gru_bfloat16", "onnx", "gru", E=5, H=4, T=5, B=2, weight_dtype="bfloat16",
         desc="GRU whose model.onnx stores the weights as BFLOAT16 (W, R raw_data; B int32_data)"),
    Case("onnx_lstm_hard_sigmoid", "onnx", "lstm", E=5, H=5, T=6, B=2, direction="bidirectional",
         gates="hard_sigmoid", hard_alpha=0.25, hard_beta=0.375,
         desc="bidirectional LSTM with activations HardSigmoid, Tanh, Tanh (activation_alpha 0.25, _beta 0.375)"),
    Case("onnx_lstm_relu", "onnx", "lstm", E=4, H=5, T=6, B=3, direction="bidirectional", cell_act="relu",
         lengths=(6, 2, 4), lengths_dtype="int32",
         desc="bidirectional LSTM with activations Sigmoid, Relu, Relu (as converters write Keras activation='relu'), lengths"),
    # --- Keras convention ---------------------------------------------------
    Case("keras_lstm", "keras", "lstm", E=5, H=7, T=6, B=3,
         desc="Keras LSTM i,f,c,o; kernel [E,4H], bias [4H]; batch-first I/O"),
    Case("keras_gru", "keras", "gru", E=4, H=6, T=5, B=2,
         desc="Keras GRU reset_after=True (bias [2,3H], z,r,h)"),
    Case("keras_gru_reset_before", "keras", "gru", E=5, H=5, T=6, B=2,
         gru_variant="reset-before-matmul",
         desc="Keras GRU reset_after=False (bias [3H], --gru-variant reset-before-matmul)"),
    Case("keras_lstm_2layer", "keras", "lstm", E=4, H=5, T=5, B=2, layers=2,
         desc="2 stacked Keras LSTMs, prefixes l0_ / l1_"),
    Case("keras_gru_bidir", "keras", "gru", E=3, H=6, T=5, B=3, direction="bidirectional",
         desc="Bidirectional(GRU) (concat merge), prefixes l0_ / l0_reverse_"),
    Case("keras_lstm_hard_sigmoid", "keras", "lstm", E=5, H=6, T=6, B=2, gates="hard_sigmoid",
         desc="Keras < 2.3 LSTM: recurrent_activation='hard_sigmoid' (clip(0.2x + 0.5, 0, 1))"),
    Case("keras_gru_hard_sigmoid", "keras", "gru", E=4, H=5, T=6, B=2, gru_variant="reset-before-matmul",
         gates="hard_sigmoid", desc="Keras < 2.3 GRU defaults: reset_after=False, recurrent_activation='hard_sigmoid'"),
    Case("keras_lstm_relu", "keras", "lstm", E=5, H=6, T=6, B=2, cell_act="relu",
         desc="Keras LSTM(activation='relu'): relu candidate and cell output, sigmoid gates"),
    Case("keras_gru_relu", "keras", "gru", E=4, H=5, T=6, B=2, cell_act="relu",
         desc="Keras GRU(activation='relu'), reset_after=True: relu candidate"),
]


# ---------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------
README_HEAD = """\
# deeprnn golden test fixtures

Generated by `tools/make_fixtures.py`; do not edit by hand. Regenerate with

    /usr/bin/python3 tools/make_fixtures.py

(Debian packages python3-torch 1.13, python3-onnx 1.12, python3-numpy; the
script is deterministic: every case seeds numpy from the CRC32 of its name.)
The script rewrites every case directory, `MANIFEST` and this file.

## Format

One directory per case, `test/data/<case>/`:

| file | content |
| --- | --- |
| `weights/*.npy` | weight tensors named and laid out by the case's convention (`weight_ih_l0`, ... / `W`, `R`, `B`, `P` / `kernel`, `recurrent_kernel`, `bias` with `l0_`, `l1_`, `l0_reverse_` prefixes); float32, C order, little-endian |
| `input.npy` | float32 input: `[T,B,E]`, or `[B,T,E]` with `--batch-first` and for every keras case |
| `lengths.npy` | optional valid lengths, int32 or int64 as listed below |
| `h0.npy`, `c0.npy` | optional initial states: torch/keras `[L*D,B,S]` / `[L*D,B,H]`; onnx `[D,B,H]`, or `[B,D,H]` with layout=1 |
| `args` | one line: the `deeprnn-run` arguments without `--out`; paths relative to the case directory (the test prefixes the case directory to `--weights/--onnx/--input/--lengths/--h0/--c0` and adds `--out`) |
| `onnx_export/<name>/` | not cases of MANIFEST: files PyTorch's `torch.onnx.export` wrote (stacked and bidirectional layers, one operator a layer), with `input.npy`, `args_onnx` and the module's own outputs in `expected/` (ONNX layout; `Y_h` of every layer, `[L*D, B, H]`) |
| `model.onnx`, `args_onnx` | onnx cases: the same operator as an ONNX model file (onnx.helper, checked by onnx.checker; W and R as raw_data, B and P as float_data), and the arguments that run it from that file (`--onnx`) against the same expected outputs |
| `expected/*.npy` | float32 files `deeprnn-run` must write: torch/keras `output`, `h_n`, `c_n` (LSTM); onnx `Y`, `Y_h`, `Y_c` (LSTM) |

`MANIFEST` lists the case names, one per line.

## Where the expected outputs come from

* **torch**: PyTorch `nn.LSTM` / `nn.GRU` / `nn.RNN` in float32, loaded with
  `load_state_dict(strict=True)` from exactly the tensors written to `weights/`;
  lengths through `pack_padded_sequence(enforce_sorted=False)` and
  `pad_packed_sequence(total_length=T)`. PyTorch refuses length 0, so a
  length-0 sequence is left out of the PyTorch run and gets zero outputs and
  final state = initial state (deeprnn's documented rule).
* **onnx**: ONNX 1.12's reference helpers `LSTM_Helper`, `GRU_Helper`,
  `RNN_Helper` (`onnx.backend.test.case.node`). They only run one forward
  direction over a full batch, so the script runs them per direction and per
  sequence: reverse = helper on the time-reversed valid prefix; sequence_lens =
  helper on that sequence's first `len` steps (steps past the end stay 0,
  `Y_h`/`Y_c` = last valid step, initial state for length 0); layout=1 = a
  transposition (the 1.12 helper's own layout=1 is unusable: its `Y_h` indexes
  the direction axis, and its default initial state has T rows instead of B).
  `Y_c` is recorded from the helper's output activation `h(C)`.
  `activations=['Relu']` = the RNN helper with its activation replaced by Relu. **clip** is implemented by no framework: the clip cases come from
  the script's float64 reference (every gate pre-activation, after peephole
  terms, clamped to [-clip, clip] before its activation, as ONNX Runtime does;
  the cell state is not clipped). For those the script also checks that the
  same weights without clip match the ONNX helper, and that the clip changes
  the output.
* **keras** (Keras is not installed): weights converted to Keras layout
  (kernels transposed, gates reordered, GRU reset_after=True bias `[2,3H]`;
  LSTM and reset_after=False GRU have a single bias, so the recurrent bias of
  the generating network is zero); expected outputs from PyTorch for the same
  network, laid out batch-first. GRU reset_after=False has no PyTorch
  counterpart: ONNX `GRU_Helper` with linear_before_reset=0. Keras defaults
  assumed: activation tanh, recurrent_activation sigmoid, Bidirectional
  merge_mode concat (reverse outputs aligned to input time).
* Every case is also computed by an independent float64 numpy reference in the
  script; it asserts framework-vs-reference max abs difference < 1e-5.

## Cases

| case | args | expected from | covers |
| --- | --- | --- | --- |
"""


def write_readme(rows) -> None:
    with open(os.path.join(DATA, "README.md"), "w") as f:
        f.write(README_HEAD)
        for case, source in rows:
            extra = ""
            if case.lengths is not None:
                extra = f" lengths {list(case.lengths)} ({case.lengths_dtype})."
            f.write(f"| `{case.name}` | `{case.args()}` | {source} | {case.desc}.{extra} "
                    f"E={case.E} H={case.H} T={case.T} B={case.B} |\n")


# PyTorch's own ONNX export (torch.onnx.export, opset 14, constant folding
# on, its default): files as a user's look, stacks included (one operator a
# layer, with Squeeze, or Transpose + Reshape for two directions, between
# them). Expected outputs: the module's own, in ONNX's layout. Not in
# MANIFEST: each runs only from its file (args_onnx).
EXPORTS = [
    ("torch_export_lstm_2layer", lambda: torch.nn.LSTM(4, 6, num_layers=2), 5, 2),
    ("torch_export_gru_3layer_bidir", lambda: torch.nn.GRU(5, 7, num_layers=3, bidirectional=True), 6, 3),
    ("torch_export_rnn_relu_2layer_bidir",
     lambda: torch.nn.RNN(3, 5, num_layers=2, bidirectional=True, nonlinearity="relu"), 4, 2),
]


def build_export(name: str, make, T: int, B: int) -> None:
    root = os.path.join(DATA, "onnx_export", name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "expected"))
    torch.manual_seed(zlib.crc32(name.encode()))
    module = make().eval()
    x = torch.rand(T, B, module.input_size) * 2 - 1
    path = os.path.join(root, "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), path, input_names=["X"], opset_version=14)
    onnx.checker.check_model(onnx.load(path))
    with torch.no_grad():
        y, state = module(x)
    h, c = state if isinstance(state, tuple) else (state, None)
    D, H = (2 if module.bidirectional else 1), module.hidden_size
    save(os.path.join(root, "input.npy"), x.numpy())
    save(os.path.join(root, "expected", "Y.npy"), y.numpy().reshape(T, B, D, H).transpose(0, 2, 1, 3))
    save(os.path.join(root, "expected", "Y_h.npy"), h.numpy())     # [L*D, B, H]
    if c is not None:
        save(os.path.join(root, "expected", "Y_c.npy"), c.numpy())
    with open(os.path.join(root, "args_onnx"), "w") as f:
        f.write("--onnx model.onnx --input input.npy\n")


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    os.makedirs(DATA, exist_ok=True)

    # Remove cases of a previous run that no longer exist.
    manifest = os.path.join(DATA, "MANIFEST")
    if os.path.exists(manifest):
        with open(manifest) as f:
            for old in f.read().split():
                if old not in names:
                    shutil.rmtree(os.path.join(DATA, old), ignore_errors=True)

    rows = []
    print(f"{'case':40s} {'expected from':55s} cross-check (max abs diff)")
    for case in CASES:
        source, check = build_case(case)
        rows.append((case, source))
        print(f"{case.name:40s} {source:55s} {check}")
    with open(manifest, "w") as f:
        f.write("\n".join(names) + "\n")
    write_readme(rows)
    shutil.rmtree(os.path.join(DATA, "onnx_export"), ignore_errors=True)
    for name, make, T, B in EXPORTS:
        build_export(name, make, T, B)
        print(f"{name:40s} PyTorch's torch.onnx.export; expected from the module itself")

    total = sum(os.path.getsize(os.path.join(dp, fn))
                for dp, _, fns in os.walk(DATA) for fn in fns)
    print(f"\n{len(CASES)} cases written to {DATA} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
