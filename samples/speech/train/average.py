#!/usr/bin/python3
"""Checkpoint averaging: writes to OUT the element-wise mean (in float64, saved as float32) of every
.npy over the given exported model directories, e.g. the epochs that `train.py --keep-epochs DIR`
keeps (DIR/e01, DIR/e02, ...), with labels.txt, features.txt and training.json copied from the last
directory given; training.json records which directories were averaged ("averaged") and sets
"valid_wer" to null (measure the average with sweep_floor.py). --best K averages the K directories
whose training.json has the lowest "valid_wer" (ties: the later directory).

Averaging exported weights is averaging trained ones: the export folds the feature normalisation
into layer 0 linearly (W / s, b - (W / s) m) with one mean m and deviation s per run (train.py
computes them once, before the first epoch), so the mean of folded weights is the folded mean of the
weights, up to float rounding.

  /usr/bin/python3 average.py --out DIR [--best K] MODEL_DIR...
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="exported model directories (train.py --out or --keep-epochs)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--best", type=int, default=0, help="average only the K of them best on validation")
    args = ap.parse_args()
    models = [os.path.normpath(d) for d in args.models]
    info = {d: json.load(open(os.path.join(d, "training.json"))) for d in models}
    if args.best:
        ranked = sorted(range(len(models)), key=lambda i: (info[models[i]]["valid_wer"], -i))
        models = [models[i] for i in sorted(ranked[:args.best])]
    names = sorted(f for f in os.listdir(models[0]) if f.endswith(".npy"))
    for d in models:
        if sorted(f for f in os.listdir(d) if f.endswith(".npy")) != names:
            sys.exit(f"average.py: {d} does not hold the same weights as {models[0]}")
        for f in ("labels.txt", "features.txt"):
            a, b = (os.path.join(m, f) for m in (models[0], d))
            if os.path.exists(a) != os.path.exists(b) or os.path.exists(a) and open(a).read() != open(b).read():
                sys.exit(f"average.py: {d} differs from {models[0]} in {f}")
    os.makedirs(args.out, exist_ok=True)
    for f in names:
        mean = sum(np.load(os.path.join(d, f)).astype(np.float64) for d in models) / len(models)
        np.save(os.path.join(args.out, f), mean.astype(np.float32))
    last = models[-1]
    for f in ("labels.txt", "features.txt"):
        if os.path.exists(os.path.join(last, f)):
            shutil.copyfile(os.path.join(last, f), os.path.join(args.out, f))
        elif os.path.exists(os.path.join(args.out, f)):  # a model without features.txt is served on raw log-mel
            os.remove(os.path.join(args.out, f))
    meta = dict(info[last], valid_wer=None,
                averaged=[os.path.basename(d) for d in models], averaged_valid_wer=[info[d]["valid_wer"] for d in models])
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"average.py: {len(models)} models ({', '.join(meta['averaged'])}) -> {args.out}")


if __name__ == "__main__":
    main()
