#!/usr/bin/python3
"""Chooses the decoder's confidence floor on the validation set (never the test or noise sets):
runs the C++ program over the validation WAVs with each floor and prints word accuracy and
insertions (words reported beyond the reference), so the cost of a floor is measured.

  /usr/bin/python3 sweep_floor.py [--speech BUILD/deeprnn-speech] [--model DIR] [--floors 0,0.5,...]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from vocab import edit_distance  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speech", default=os.path.join(ROOT, "build", "deeprnn-speech"))
    ap.add_argument("--model", default=os.path.join(HERE, "..", "model"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--floors", default="0,0.3,0.4,0.5,0.6,0.7,0.8")
    ap.add_argument("--splits", default="valid",
                    help="validation splits, comma-separated (valid, rvalid); accuracy is given pooled and per split")
    args = ap.parse_args()
    rows, files = [], []
    for split in args.splits.split(","):
        if split not in ("valid", "rvalid"):
            sys.exit(f"sweep_floor: {split}: only validation splits (valid, rvalid) choose the floor")
        with open(os.path.join(args.data, split + ".jsonl")) as f:
            part = [json.loads(line) for line in f]
        rows += [dict(r, split=split) for r in part]
        files += [os.path.join(args.data, "wav", split, r["id"] + ".wav") for r in part]
    for floor in args.floors.split(","):
        out = subprocess.run([args.speech, "--model", args.model, "--min-confidence", floor] + files, check=True,
                             capture_output=True, text=True).stdout
        hyp, cur = {}, None
        for line in out.splitlines():
            if line.startswith("== "):
                cur = line[3:]
            elif line.startswith("words:"):
                hyp[cur] = line.split()[1:]
        words = errors = extra = 0
        per = {}  # split -> [errors, words]
        for r, path in zip(rows, files):
            got = hyp[os.path.basename(path)] if os.path.basename(path) in hyp else hyp[path]
            e = edit_distance(r["words"], got)
            errors += e
            words += len(r["words"])
            extra += max(0, len(got) - len(r["words"]))
            per.setdefault(r["split"], [0, 0])
            per[r["split"]][0] += e
            per[r["split"]][1] += len(r["words"])
        parts = ", ".join(f"{k} {100 * (1 - e / n):.2f}%" for k, (e, n) in per.items()) if len(per) > 1 else ""
        print(f"floor {floor}: {args.splits} word accuracy {100 * (1 - errors / words):.2f}% ({errors} errors on {words} "
              f"words{'; ' + parts if parts else ''}), {extra} words beyond the reference count", flush=True)


if __name__ == "__main__":
    main()
