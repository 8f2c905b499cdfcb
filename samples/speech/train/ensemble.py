#!/usr/bin/python3
"""Word accuracy of an ensemble of exported models on the validation splits (never test): each model's
CTC log-posteriors (the PyTorch replica of fit_check.py, which gives exactly the C++ program's
transcripts for one model) averaged frame by frame, then greedy CTC. Every model alone is reported
first, then the ensemble, by split and pooled. An experiment tool: the C++ program serves one model.

  /usr/bin/python3 ensemble.py --models DIR,DIR[,...] [--splits valid,rvalid] [--mean logp|p]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fit_check import add_common_args, load_replica, replica_logits  # noqa: E402
from train import features, greedy  # noqa: E402
from vocab import LABELS, edit_distance  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="comma-separated exported model directories")
    add_common_args(ap, "valid,rvalid", model=False)
    ap.add_argument("--mean", choices=["logp", "p"], default="logp", help="average log-posteriors or posteriors")
    args = ap.parse_args()
    torch.set_num_threads(1)
    replicas = [load_replica(m) for m in args.models.split(",")]
    K = len(LABELS)
    for r in replicas:
        if r[3] != LABELS:
            sys.exit(f"ensemble: every model must have the vocabulary's labels ({r[3]})")
    rm = {r[2]["running_mean"] for r in replicas}
    if len(rm) != 1:
        sys.exit(f"ensemble: the models were trained on different features (running means {sorted(rm)})")
    running_mean = rm.pop()
    names = [os.path.basename(os.path.normpath(m)) for m in args.models.split(",")] + ["ensemble"]
    total = np.zeros((len(names), 2))
    for split in args.splits.split(","):
        rows = [json.loads(line) for line in open(os.path.join(args.data, split + ".jsonl"))]
        rows = [r for r in rows if r["words"]]
        feats = features(args.speech, args.data, split, rows, running_mean)
        errs = np.zeros((len(names), 2))
        for r, f in zip(rows, feats):
            ref = [LABELS.index(w) for w in r["words"]]
            logps = [replica_logits(rep, f)[:, :K].log_softmax(-1) for rep in replicas]
            comb = torch.stack(logps).mean(0) if args.mean == "logp" else torch.stack(logps).exp().mean(0).log()
            for i, lp in enumerate(logps + [comb]):
                errs[i] += (edit_distance(ref, greedy(lp, len(lp))), len(ref))
        total += errs
        print(f"{split}: " + ", ".join(f"{n} {100 * (1 - e / w):.2f}%" for n, (e, w) in zip(names, errs)), flush=True)
    print("pooled: " + ", ".join(f"{n} {100 * (1 - e / w):.2f}% ({int(e)} errors)" for n, (e, w) in zip(names, total)))


if __name__ == "__main__":
    main()
