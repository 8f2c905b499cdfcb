#!/usr/bin/python3
"""Where an exported model's word errors are, on the validation splits (never test): substitutions,
deletions and insertions, each by cause, from the model's greedy CTC output (the PyTorch replica of
fit_check.py, which gives exactly the C++ program's transcripts at its default floor 0), and a sweep
of a constant offset added to the blank logit before the arg-max (a decode-only lever; 0 is the
program's decoder; negative values make words fire more easily, positive values less).

Each hypothesis is aligned with what was *spoken* (make_data.py's tokens: the words and any
out-of-vocabulary filler word), where leaving a filler out costs nothing and a word heard on a filler
costs one (so the total is exactly the usual edit distance to the words). Causes:
  insertion:    on a filler (a filler heard as a vocabulary word), a repeat (the word before or
                after it in the reference), other
  deletion:     a repeated word (the same word just before or after it: CTC needs a blank between them),
                next to a filler, in a joined utterance, in a paused one
  substitution: next to a filler, in a joined utterance, in a paused one
and the words deleted or substituted by their position among the utterance's words (only, first,
middle, last), joined and paused.

  /usr/bin/python3 error_breakdown.py [--model DIR] [--splits valid,rvalid] [--offsets -1,-0.5,0,0.5,1]

A model whose labels.txt has labels after the vocabulary's (a filler label, train.py --filler-label)
is decoded with them left out of the transcript, as the C++ program does.
"""
import argparse
import collections
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fit_check import add_common_args, conditions, load_replica, replica_logits  # noqa: E402
from train import features  # noqa: E402
from vocab import LABELS, edit_distance  # noqa: E402


def decode(logits, offset=0.0, skip=()):
    """Greedy CTC over logits [T, K] (numpy) with `offset` added to the blank's logit; labels in `skip`
    (e.g. a filler label) are decoded like words and then left out of the transcript."""
    z = logits.copy()
    z[:, 0] += offset
    out, prev = [], 0
    for k in z.argmax(-1).tolist():
        if k != 0 and k != prev and k not in skip:
            out.append(k)
        prev = k
    return out


def align(tokens, words, hyp):
    """Minimum-cost alignment of hyp (label indices) with the spoken tokens (strings; fillers are the
    ones that are not in LABELS). Returns a list of (op, ref_index_in_tokens or None, hyp word or None),
    op in ok, sub, del, ins, filler (a word heard on a filler), skip (a filler left out)."""
    ref = [LABELS.index(t) if t in LABELS else -1 for t in tokens]
    n, m = len(ref), len(hyp)
    INF = 10 ** 9
    d = [[INF] * (m + 1) for _ in range(n + 1)]
    d[0][0] = 0
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 and j == 0:
                continue
            best = INF
            if i > 0:  # token i-1 unmatched
                best = min(best, d[i - 1][j] + (0 if ref[i - 1] < 0 else 1))
            if j > 0:  # hyp j-1 inserted
                best = min(best, d[i][j - 1] + 1)
            if i > 0 and j > 0:
                best = min(best, d[i - 1][j - 1] + (0 if ref[i - 1] == hyp[j - 1] else 1))
            d[i][j] = best
    ops, i, j = [], n, m
    while i > 0 or j > 0:  # prefers, on ties: match/substitution/filler, then deletion, then insertion
        if i > 0 and j > 0 and d[i][j] == d[i - 1][j - 1] + (0 if ref[i - 1] == hyp[j - 1] else 1):
            op = "ok" if ref[i - 1] == hyp[j - 1] else ("filler" if ref[i - 1] < 0 else "sub")
            ops.append((op, i - 1, hyp[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and d[i][j] == d[i - 1][j] + (0 if ref[i - 1] < 0 else 1):
            ops.append(("skip" if ref[i - 1] < 0 else "del", i - 1, None))
            i -= 1
        else:
            ops.append(("ins", i - 1 if i > 0 else None, hyp[j - 1]))
            j -= 1
    ops.reverse()
    cost = sum(op not in ("ok", "skip") for op, _, _ in ops)
    assert cost == edit_distance([LABELS.index(w) for w in words], hyp), (tokens, hyp, ops)
    return ops


def position(k, n):
    """Where word k of an utterance of n words is: only, first, middle or last."""
    return "only" if n == 1 else "first" if k == 0 else "last" if k == n - 1 else "middle"


def positions(r, ops):
    """(words, errors): Counters of an utterance's words and of its deleted or substituted words, by their
    position among its words and joined / paused."""
    tokens, joined = r["tokens"], "joined" if not r["paused"] else "paused"
    words_idx = [k for k, t in enumerate(tokens) if t in LABELS]
    key = lambda i: f"{position(words_idx.index(i), len(words_idx))}, {joined}"  # noqa: E731
    return (collections.Counter(key(i) for i in words_idx),
            collections.Counter(key(i) for op, i, _ in ops if op in ("del", "sub")))


def causes(r, ops):
    """Counter of error causes for one utterance, from its alignment (align)."""
    tokens = r["tokens"]
    words_idx = [k for k, t in enumerate(tokens) if t in LABELS]
    c = collections.Counter()
    joined = "joined" if not r["paused"] else "paused"

    def by_filler(i):  # the token before or after token i is a filler
        return any(0 <= k < len(tokens) and tokens[k] not in LABELS for k in (i - 1, i + 1))
    for op, i, h in ops:
        if op == "filler":
            c["insertion: on a filler"] += 1
        elif op == "ins":
            near = set()
            for k in (i, (i + 1) if i is not None else 0):  # the reference words around the insertion
                if k is not None and 0 <= k < len(tokens) and tokens[k] in LABELS:
                    near.add(LABELS.index(tokens[k]))
            c["insertion: repeat of a neighbour" if h in near else "insertion: other"] += 1
        elif op == "del":
            pos = words_idx.index(i)
            rep = any(0 <= k < len(r["words"]) and r["words"][k] == tokens[i] for k in (pos - 1, pos + 1))
            c["deletion: repeated word" if rep else "deletion: next to a filler" if by_filler(i)
              else f"deletion: {joined}"] += 1
        elif op == "sub":
            c["substitution: next to a filler" if by_filler(i) else f"substitution: {joined}"] += 1
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, "valid,rvalid")
    ap.add_argument("--offsets", default="-2,-1.5,-1,-0.75,-0.5,-0.25,0,0.25,0.5,0.75,1,1.5,2")
    args = ap.parse_args()
    for split in args.splits.split(","):
        if split not in ("valid", "rvalid", "train"):
            sys.exit(f"error_breakdown: {split}: validation splits only (valid, rvalid; or train)")
    torch.set_num_threads(1)
    replica = load_replica(args.model)
    info, labels = replica[2], replica[3]
    if labels[:len(LABELS)] != LABELS:
        sys.exit(f"error_breakdown: {args.model}/labels.txt does not start with the vocabulary's labels")
    skip = tuple(range(len(LABELS), len(labels)))  # extra labels (a filler label) are not words
    K = len(labels)
    data = {}
    for split in args.splits.split(","):
        rows = [json.loads(line) for line in open(os.path.join(args.data, split + ".jsonl"))]
        out = []
        for r, f in zip(rows, features(args.speech, args.data, split, rows, info["running_mean"])):
            out.append(replica_logits(replica, f)[:, :K].numpy())
        data[split] = (rows, out)

    # 1. the breakdown at the program's decoder (offset 0)
    total, pos_words, pos_errors = collections.Counter(), collections.Counter(), collections.Counter()
    for split, (rows, logits) in data.items():
        c, cond = collections.Counter(), collections.defaultdict(lambda: [0, 0])
        words = 0
        for r, z in zip(rows, logits):
            hyp = decode(z, 0.0, skip)
            ops = align(r["tokens"], r["words"], hyp)
            e = causes(r, ops)
            w, pe = positions(r, ops)
            pos_words, pos_errors = pos_words + w, pos_errors + pe
            c += e
            words += len(r["words"])
            for key in conditions(r):
                cond[key][0] += sum(e.values())
                cond[key][1] += len(r["words"])
        c["words"] = words
        total += c
        print(f"{split}: " + ", ".join(f"{k} {100 * (1 - e / n):.2f}% ({e}/{n})" for k, (e, n) in cond.items()))
        for name, cc in ((split, c),):
            errs = sum(v for k, v in cc.items() if k != "words")
            print(f"  {errs} errors in {cc['words']} words ({100 * (1 - errs / cc['words']):.2f}%): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(cc.items()) if k != "words"))
    if len(data) > 1:
        errs = sum(v for k, v in total.items() if k != "words")
        print(f"pooled: {errs} errors in {total['words']} words ({100 * (1 - errs / total['words']):.2f}%): "
              + ", ".join(f"{k} {v}" for k, v in sorted(total.items()) if k != "words"))
        for kind in ("substitution", "deletion", "insertion"):
            print(f"  {kind}s: {sum(v for k, v in total.items() if k.startswith(kind))}")
    print("words deleted or substituted, by position in the utterance: " + ", ".join(
        f"{k} {pos_errors[k]}/{n} ({100 * pos_errors[k] / n:.1f}%)" for k, n in sorted(pos_words.items())))

    # 2. the blank offset
    for off in [float(o) for o in args.offsets.split(",")]:
        per, pe, pw = [], 0, 0
        for split, (rows, logits) in data.items():
            e = sum(edit_distance([LABELS.index(w) for w in r["words"]], decode(z, off, skip)) for r, z in zip(rows, logits))
            n = sum(len(r["words"]) for r in rows)
            per.append(f"{split} {100 * (1 - e / n):.2f}% ({e})")
            pe, pw = pe + e, pw + n
        print(f"blank offset {off:+.2f}: pooled {100 * (1 - pe / pw):.2f}% ({pe} errors); " + ", ".join(per), flush=True)


if __name__ == "__main__":
    main()
