#!/usr/bin/python3
"""Measures the chatbot sample by running the C++ program on the held-out test set.

Runs `deeprnn-chat --batch --scores` over every test request, greedy (beam 1)
and with beam 4, and reports:
  exact match  reply == the expected reply (bar: >= 90%)
  slot copy    slot values (spelled words: numbers, times, names) of the expected
               reply that appear in the produced reply (bar: >= 98%)
  beam >= greedy  the beam's best score is never below greedy's, per request
and `deeprnn-chat --check` (C++ logits against PyTorch's on the same weights).
Writes the numbers to MODEL/evaluation.json; exits 1 if a bar is missed.
  /usr/bin/python3 evaluate.py [--chat build/deeprnn-chat] [--model DIR] [--data DIR]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def run(chat, model, beam, requests, precision):
    out = subprocess.run([chat, "--model", model, "--batch", "--scores", "--beam", str(beam), "--precision", precision],
                         input="\n".join(requests) + "\n", capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t", 1) for line in out.splitlines()]
    assert len(rows) == len(requests), f"{len(rows)} replies for {len(requests)} requests"
    return [(float(s), r.strip()) for s, r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chat", default=os.path.join(ROOT, "build", "deeprnn-chat"))
    ap.add_argument("--model", default=os.path.join(HERE, "..", "model"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16", "int8"],
                    help="weight precision of the GRUs; other than f32 writes evaluation_<precision>.json")
    a = ap.parse_args()
    vocab = set(open(os.path.join(a.model, "vocab.txt")).read().split())
    pairs = [line.rstrip("\n").split("\t") for line in open(os.path.join(a.data, "test.tsv"))]
    requests = [p[0] for p in pairs]
    greedy, beam = run(a.chat, a.model, 1, requests, a.precision), run(a.chat, a.model, 4, requests, a.precision)
    result = {"test_pairs": len(pairs), "precision": a.precision}
    for name, got in (("greedy", greedy), ("beam4", beam)):
        exact = sum(r == want for (_, r), (_, want) in zip(got, pairs))
        slots = copied = 0
        for (_, r), (_, want) in zip(got, pairs):
            produced = r.split()
            for w in want.split():
                if w not in vocab:
                    slots += 1
                    copied += w in produced
        result[name] = {"exact_match": round(exact / len(pairs), 4), "slot_copy": round(copied / max(slots, 1), 4),
                        "slots": slots}
    result["beam_below_greedy"] = sum(b[0] < g[0] - 1e-4 for b, g in zip(beam, greedy))
    check = subprocess.run([a.chat, "--model", a.model, "--check"], capture_output=True, text=True)
    result["check"] = check.stdout.strip()
    print(json.dumps(result, indent=1))
    name = "evaluation.json" if a.precision == "f32" else f"evaluation_{a.precision}.json"
    with open(os.path.join(a.model, name), "w") as f:
        json.dump(result, f, indent=1)
    ok = (result["beam4"]["exact_match"] >= 0.9 and result["beam4"]["slot_copy"] >= 0.98
          and result["beam_below_greedy"] == 0 and check.returncode == 0)
    print("evaluate:", "all bars met" if ok else "a bar is missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
