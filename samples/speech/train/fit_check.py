#!/usr/bin/python3
"""How well an exported model fits its own training data: greedy-CTC word accuracy of the model
(a PyTorch replica of the exported LSTM + output layer, on the C++ program's running-mean
features, featurising any utterance that has none yet) on N random utterances of each split,
training utterances unaugmented, with the conditions of make_data.py that cost the most.
docs/SPEECH-HISTORY.md, "Older rounds' \"What is left\"", quotes it for the twelfth round's model.

  /usr/bin/python3 fit_check.py [--model DIR] [--splits train,valid,rvalid] [--n 2000]
"""
import argparse
import collections
import json
import os
import random
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train  # noqa: E402
from train import features, greedy  # noqa: E402
from vocab import FILLER, LABELS, edit_distance  # noqa: E402


def load_replica(model):
    """The exported model as PyTorch runs it: (lstm, weights, training.json, labels.txt's labels)."""
    info = json.load(open(os.path.join(model, "training.json")))
    w = {f[:-4]: torch.from_numpy(np.load(os.path.join(model, f))) for f in os.listdir(model) if f.endswith(".npy")}
    labels = [line for line in open(os.path.join(model, "labels.txt")).read().split("\n") if line]
    lstm = torch.nn.LSTM(w["weight_ih_l0"].shape[1], info["hidden"], info["layers"])
    for name, p in lstm.named_parameters():
        p.data.copy_(w[name])  # the export folded the feature normalisation into layer 0
    return lstm, w, info, labels


def replica_logits(replica, f):
    """Output-layer logits [steps, outputs] of one utterance's features f [frames, 40], stacked as the program does."""
    lstm, w, info, _ = replica
    S = info["stack"]
    n = len(f) // S
    x = torch.from_numpy(np.ascontiguousarray(f[:n * S].reshape(n, -1), dtype=np.float32))[:, None]
    with torch.no_grad():
        return lstm(x)[0][:, 0] @ w["output.weight"].T + w["output.bias"]


def add_common_args(ap, splits, model=True):
    """The options every replica-based analysis tool takes: --model (unless model is False), --data,
    --speech and --splits (default `splits`)."""
    if model:
        ap.add_argument("--model", default=os.path.join(HERE, "..", "model"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--speech", default=os.path.join(HERE, "..", "..", "..", "build", "deeprnn-speech"))
    ap.add_argument("--splits", default=splits)


def conditions(r):
    """The make_data.py conditions an utterance falls under, "all" first."""
    snr = r.get("snr")
    return ["all", "joined" if not r["paused"] else "paused",
            "filler" if len(r["tokens"]) > len(r["words"]) else "no filler",
            "SNR < 10 dB" if snr is not None and snr < 10 else "SNR >= 10 dB or none",
            "reverberated" if r.get("reverb") else "dry",
            ">= 200 words/min" if r["speed"] >= 200 else "< 200 words/min"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, "train,valid,rvalid")
    ap.add_argument("--n", type=int, default=2000, help="random utterances per split (seeded)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    replica = load_replica(args.model)
    info, labels = replica[2], replica[3]
    if labels == LABELS + [FILLER]:  # train.py --filler-label: greedy() leaves the filler label out
        train.use_filler_label()
    elif labels != LABELS:
        sys.exit(f"fit_check: {args.model}/labels.txt is neither the vocabulary's labels nor those and {FILLER}")
    for split in args.splits.split(","):
        rows = [json.loads(line) for line in open(os.path.join(args.data, split + ".jsonl"))]
        rows = [r for r in random.Random(0).sample(rows, min(args.n, len(rows))) if r["words"]]
        feats = features(args.speech, args.data, split, rows, info["running_mean"])
        agg = collections.defaultdict(lambda: [0, 0])
        for r, f in zip(rows, feats):
            logits = replica_logits(replica, f)
            ref = [LABELS.index(word) for word in r["words"]]
            err = edit_distance(ref, greedy(logits, len(logits)))
            for key in conditions(r):
                agg[key][0] += err
                agg[key][1] += len(ref)
        print(f"{split} ({len(rows)} utterances): " + ", ".join(
            f"{k} {100 * (1 - e / n):.2f}% ({n} words)" for k, (e, n) in agg.items()), flush=True)


if __name__ == "__main__":
    main()
