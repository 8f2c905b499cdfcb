#!/usr/bin/python3
"""Measures the speech sample by running the C++ program (not PyTorch).

  test set     word accuracy = 1 - (substitutions + deletions + insertions) / words,
               over the held-out voices, with a breakdown by noise and voice
  noise set    words reported on noise-only input (must be 0)
  threads      transcripts with --threads 1 and 2 must be identical, and so must
               every output value of a few files (--outputs, compared bit for bit)
  word times   on correctly transcribed utterances spoken with pauses, the
               printed start/end against the clean signal's speech segments
  speed        real-time factor and p50/p99 per-frame compute time

Writes the numbers to samples/speech/train/results.json; exits 1 if a quality
bar fails (accuracy < 95%, any word on noise, threads differ).

  /usr/bin/python3 evaluate.py [--speech BUILD/deeprnn-speech] [--model DIR] [--data DIR]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from vocab import edit_distance  # noqa: E402

WORD = re.compile(r"^\s+([0-9.]+) -\s+([0-9.]+)\s+(\S+)\s+\(([0-9.]+)\)$")


PRECISION = "f32"  # --precision: the weight precision every run uses
FLOOR = []  # --min-confidence P, if given (default: the program's own default)


def run(speech, model, files, threads):
    """Transcribes `files` in one process; returns {path: [(word, start, end)]} and the summary lines."""
    out = subprocess.run([speech, "--model", model, "--threads", str(threads), "--precision", PRECISION] + FLOOR + files, check=True,
                         capture_output=True, text=True).stdout
    result, current, summary = {}, None, []
    for line in out.splitlines():
        if line.startswith("== "):
            current = line[3:]
            result[current] = []
        elif (m := WORD.match(line)) and current is not None:
            result[current].append((m.group(3), float(m.group(1)), float(m.group(2))))
        elif line.startswith("real-time factor") or line.startswith("compute per"):
            summary.append(line)
    return result, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speech", default=os.path.join(ROOT, "build", "deeprnn-speech"))
    ap.add_argument("--model", default=os.path.join(HERE, "..", "model"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=os.path.join(HERE, "results.json"))
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16", "int8"],
                    help="recurrent weight precision of the runs (docs/PRECISION.md)")
    ap.add_argument("--min-confidence", default="", help="decoder confidence floor (default: the program's)")
    args = ap.parse_args()
    global PRECISION, FLOOR
    PRECISION = args.precision
    FLOOR = ["--min-confidence", args.min_confidence] if args.min_confidence else []

    def rows(split):
        with open(os.path.join(args.data, split + ".jsonl")) as f:
            return [json.loads(line) for line in f]

    def wav(split, r):
        return os.path.join(args.data, "wav", split, r["id"] + ".wav")

    test, noise = rows("test"), rows("noise")
    test_files = [wav("test", r) for r in test]
    hyp1, summary1 = run(args.speech, args.model, test_files, 1)
    hyp2, _ = run(args.speech, args.model, test_files, 2)

    words = errors = sentences_ok = 0
    by = collections.defaultdict(lambda: [0, 0])  # key -> [errors, words]
    start_err, end_err = [], []
    for r, path in zip(test, test_files):
        got = [w for w, _, _ in hyp1[path]]
        e = edit_distance(r["words"], got)
        words += len(r["words"])
        errors += e
        sentences_ok += e == 0
        for key in (f"noise {r['noise']}", "snr < 10 dB" if r["noise"] != "none" and r["snr"] < 10 else None,
                    f"voice +{r['voice'].split('+')[1]}", f"accent {r['voice'].split('+')[0]}",
                    "with filler word" if len(r["tokens"]) > len(r["words"]) else None,
                    "joined words" if not r["paused"] else "paused words"):
            if key:
                by[key][0] += e
                by[key][1] += len(r["words"])
        # Word times, where one clean speech segment per word makes the truth unambiguous.
        if e == 0 and r["paused"] and len(r["tokens"]) == len(r["words"]) and len(r["segments"]) == len(got):
            for (_, s, t), (a, b) in zip(hyp1[path], r["segments"]):
                start_err.append(s - (a * 160 + 200) / 16000)
                end_err.append(t - (b * 160 + 200) / 16000)
    accuracy = 1 - errors / words

    noise_files = [wav("noise", r) for r in noise]
    noise_hyp, _ = run(args.speech, args.model, noise_files, 1)
    hallucinated = sum(len(v) for v in noise_hyp.values())

    same_transcripts = hyp1 == hyp2
    same_outputs = True
    with tempfile.TemporaryDirectory() as tmp:
        for path in test_files[:5]:
            got = []
            for threads in (1, 2):
                o = os.path.join(tmp, f"{threads}.npy")
                subprocess.run([args.speech, "--model", args.model, "--threads", str(threads), "--precision", PRECISION,
                                "--outputs", o, path],
                               check=True, capture_output=True)
                got.append(np.load(o))
            same_outputs &= got[0].shape == got[1].shape and got[0].tobytes() == got[1].tobytes()

    res = {
        "test_utterances": len(test), "test_words": words, "word_errors": errors,
        "word_accuracy": round(accuracy, 4), "utterance_accuracy": round(sentences_ok / len(test), 4),
        "noise_files": len(noise), "noise_seconds": round(sum(r["noise_seconds"] for r in noise), 1),
        "noise_words_hallucinated": hallucinated,
        "threads_1_vs_2_identical_transcripts": same_transcripts, "threads_1_vs_2_identical_outputs": same_outputs,
        "word_time_error_ms": {
            "utterances_words": len(start_err),
            "start_median_abs": round(1000 * float(np.median(np.abs(start_err))), 1) if start_err else None,
            "end_median_abs": round(1000 * float(np.median(np.abs(end_err))), 1) if end_err else None,
            "start_p90_abs": round(1000 * float(np.percentile(np.abs(start_err), 90)), 1) if start_err else None,
            "end_p90_abs": round(1000 * float(np.percentile(np.abs(end_err), 90)), 1) if end_err else None},
        "breakdown_word_accuracy": {k: round(1 - v[0] / v[1], 4) for k, v in sorted(by.items()) if v[1]},
        "speed_test_set_threads_1": summary1,
    }
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    ok = accuracy >= 0.95 and hallucinated == 0 and same_transcripts and same_outputs
    print(f"evaluate: word accuracy {100 * accuracy:.2f}% on {words} words ({len(test)} utterances, held-out voices); "
          f"{hallucinated} words on {len(noise)} noise-only files; threads 1 vs 2 "
          f"{'identical' if same_transcripts and same_outputs else 'DIFFERENT'}; the quality bar "
          f"(95%, 0 words, identical): {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
