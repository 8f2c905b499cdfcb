#!/usr/bin/python3
"""Write a trained PyTorch RNN's weights to a file deeprnn loads.

deeprnn reads .safetensors and NumPy .npz (np.savez) weight files whose tensor
names are the training framework's own (deeprnn.hpp, section 6). For PyTorch
these are the state_dict names of nn.LSTM / nn.GRU / nn.RNN: weight_ih_l0,
weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse, weight_hr_l0.

From Python, with the trained module at hand:

    sys.path.insert(0, "tools"); from export_torch import export
    export(model.rnn, "model.safetensors")       # or "model.npz"

From the shell, with a state dict saved by torch.save(model.state_dict(), "m.pt"):

    /usr/bin/python3 tools/export_torch.py m.pt model.safetensors --prefix rnn.

(--prefix keeps only the tensors of that submodule and strips the prefix, so
"rnn.weight_ih_l0" becomes "weight_ih_l0".) Then, in C++:

    deeprnn::Weights w = deeprnn::load_weights("model.safetensors");
    deeprnn::Config cfg = deeprnn::config_from_weights(deeprnn::Cell::lstm, deeprnn::Convention::torch, w);

The safetensors package writes the file when it is installed; otherwise this
script writes the format itself (it is small: an 8-byte little-endian header
length, a JSON header naming each tensor's dtype, shape and byte range, then
the raw little-endian data). bfloat16 tensors stay BF16 in .safetensors
(deeprnn widens them to float32); .npz has no bfloat16 and gets float32.

    /usr/bin/python3 tools/export_torch.py --fixtures

rewrites test/data/weightfiles/, the fixtures of test/test_weightfile.cpp,
from the .npy cases under test/data/ (run it after tools/make_fixtures.py).
"""

import argparse
import io
import json
import os
import struct
import sys

import numpy as np

try:
    import torch
except ImportError:  # only needed for torch tensors and .pt files
    torch = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# numpy dtype (kind + bytes) -> safetensors dtype, for the dtypes deeprnn reads.
DTYPES = {"f2": "F16", "f4": "F32", "f8": "F64", "i4": "I32", "i8": "I64"}


def _raw(value):
    """(safetensors dtype, shape, little-endian bytes) of a torch tensor or numpy array."""
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous()
        if value.dtype == torch.bfloat16:
            return "BF16", list(value.shape), value.view(torch.int16).numpy().astype("<i2").tobytes()
        value = value.numpy()
    a = np.asarray(value)  # not ascontiguousarray: it turns a scalar into shape [1]
    key = a.dtype.kind + str(a.dtype.itemsize)
    if key not in DTYPES:
        raise ValueError(f"dtype {a.dtype} is not one deeprnn reads (float16/32/64, int32/64, bfloat16)")
    return DTYPES[key], list(a.shape), a.astype(a.dtype.newbyteorder("<")).tobytes()


def save_safetensors(tensors, path, metadata=None):
    """Writes {name: tensor or array} as .safetensors; metadata is {str: str}."""
    try:
        from safetensors.numpy import save_file
    except ImportError:
        save_file = None
    if save_file is not None and not any(torch is not None and isinstance(t, torch.Tensor)
                                         and t.dtype == torch.bfloat16 for t in tensors.values()):
        save_file({k: _as_numpy(v).copy(order="C") for k, v in tensors.items()}, path, metadata)
        return
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, data = _raw(tensors[name])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def _as_numpy(value):
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    return np.asarray(value)


def save_npz(tensors, path):
    """Writes {name: tensor or array} with np.savez (stored, not compressed: deeprnn has no zlib)."""
    with open(path, "wb") as f:
        np.savez(f, **{k: _as_numpy(v) for k, v in tensors.items()})


def export(model, path, prefix=""):
    """Writes a module's (or a state dict's) tensors under `prefix`, with the prefix stripped."""
    state = model.state_dict() if hasattr(model, "state_dict") else dict(model)
    tensors = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not tensors:
        raise ValueError(f"no tensors under prefix '{prefix}' (names: {', '.join(state)})")
    if path.endswith(".safetensors"):
        save_safetensors(tensors, path, {"format": "pt"})
    elif path.endswith(".npz"):
        save_npz(tensors, path)
    else:
        raise ValueError(f"{path}: the file name must end in .safetensors or .npz")
    return sorted(tensors)


def make_fixtures():
    """test/data/weightfiles/: the .npy cases of test/data/ in other formats, plus edge cases."""
    out = os.path.join(REPO, "test", "data", "weightfiles")
    os.makedirs(out, exist_ok=True)

    def case(name):
        d = os.path.join(REPO, "test", "data", name, "weights")
        return {f[:-4]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".npy")}

    save_safetensors(case("torch_lstm"), os.path.join(out, "torch_lstm.safetensors"), {"format": "pt"})
    save_npz(case("torch_lstm"), os.path.join(out, "torch_lstm.npz"))
    # A whole model's state_dict: the LSTM under "encoder.lstm.", beside other modules' tensors.
    module = {"encoder.lstm." + k: v for k, v in case("torch_lstm").items()}
    module["encoder.embedding.weight"] = np.arange(12, dtype=np.float32).reshape(4, 3)
    module["head.weight"], module["head.bias"] = np.ones((2, 7), np.float32), np.zeros(2, np.float32)
    save_safetensors(module, os.path.join(out, "torch_module.safetensors"), {"format": "pt"})
    save_safetensors(case("onnx_gru"), os.path.join(out, "onnx_gru.safetensors"))
    # torch.save files (read by deeprnn::load_torch): the torch_lstm case's
    # state_dict from a real nn.LSTM; a training checkpoint holding it under
    # "model.encoder.lstm." beside an optimizer's state, numbers, strings,
    # integer tensors and tensor views of every floating dtype; a whole
    # pickled module and the legacy format, both refused.
    lstm_sd = case("torch_lstm")
    lstm = torch.nn.LSTM(lstm_sd["weight_ih_l0"].shape[1], lstm_sd["weight_hh_l0"].shape[1])
    lstm.load_state_dict({k: torch.from_numpy(v) for k, v in lstm_sd.items()})
    torch.save(lstm.state_dict(), os.path.join(out, "torch_lstm.pt"))
    torch.save(lstm.state_dict(), os.path.join(out, "torch_lstm_protocol4.pt"), pickle_protocol=4)  # FRAME, MEMOIZE, STACK_GLOBAL
    torch.manual_seed(0)
    head = torch.nn.Linear(3, 2)
    adam = torch.optim.Adam(head.parameters())
    head(torch.ones(1, 3)).sum().backward()
    adam.step()
    a = torch.arange(-12, 12, dtype=torch.float32).reshape(6, 4) / 8  # exact in f16 and bf16
    model = {"encoder.lstm." + k: v for k, v in lstm.state_dict().items()}
    model.update({"head." + k: v for k, v in head.state_dict().items()})
    model["bn.num_batches_tracked"] = torch.tensor(7)  # int64: skipped
    torch.save({"epoch": 3, "lr": 1e-3, "note": "trained", "sizes": (6, 4), "flags": [True, None],
                "model": model, "optimizer": adam.state_dict(), "ids": torch.arange(5),
                "views": {"a": a, "t": a.t(), "slice": a[1:4, 1:3], "f16": a.half(), "bf16": a.bfloat16(),
                          "f64": a.double(), "scalar": a[2, 3].clone()}},
               os.path.join(out, "checkpoint.pt"))
    torch.save(head, os.path.join(out, "whole_module.pt"))
    legacy = io.BytesIO()  # its storage keys differ from run to run: keep the magic number, all deeprnn reads
    torch.save(lstm.state_dict(), legacy, _use_new_zipfile_serialization=False)
    with open(os.path.join(out, "legacy.pt"), "wb") as f:
        f.write(legacy.getvalue()[:32])
    save_npz(case("keras_lstm_2layer"), os.path.join(out, "keras_lstm_2layer.npz"))
    with open(os.path.join(out, "compressed.npz"), "wb") as f:  # must be refused
        np.savez_compressed(f, W=np.ones((2, 3), np.float32))
    # Every dtype deeprnn converts, with values whose float32 images the test knows.
    save_safetensors({
        "f16": np.array([1.0, -2.5, 65504.0, 2.0 ** -24, -0.0, np.inf], np.float16),  # max, smallest subnormal
        "bf16": torch.tensor([[1.0, -3.0], [2.0 ** 100, 0.15625]], dtype=torch.bfloat16),
        "f64": np.array([0.1, -1e30], np.float64),  # rounded to nearest float32
        "i32": np.array([[-7], [16777216]], np.int32),
        "i64": np.array(-16777216, np.int64),  # a scalar: shape []
    }, os.path.join(out, "dtypes.safetensors"))
    for f in sorted(os.listdir(out)):
        print(f"{os.path.getsize(os.path.join(out, f)):6d}  test/data/weightfiles/{f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("state_dict", nargs="?", help="a file written by torch.save(model.state_dict()) (or a module)")
    ap.add_argument("out", nargs="?", help="output file: NAME.safetensors or NAME.npz")
    ap.add_argument("--prefix", default="", help="keep tensors under this prefix and strip it, e.g. 'rnn.'")
    ap.add_argument("--fixtures", action="store_true", help="regenerate test/data/weightfiles/")
    args = ap.parse_args()
    if args.fixtures:
        make_fixtures()
        return 0
    if not args.state_dict or not args.out:
        ap.error("need STATE_DICT and OUT (or --fixtures)")
    if torch is None:
        sys.exit("export_torch: PyTorch is not installed (apt-get install python3-torch)")
    names = export(torch.load(args.state_dict, map_location="cpu"), args.out, args.prefix)
    print(f"{args.out}: {len(names)} tensors: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
