#!/usr/bin/python3
"""Compares the named espeak-ng voice variants of the test and validation splits with the
ranges of make_data.random_variant (the random training voices), attribute by attribute,
and prints what falls outside them. Analysis only: it reads the variant files and prints;
nothing it reads goes into training data or a model.

  /usr/bin/python3 compare_variants.py [--data DIR]   (DIR/voices.json: written by make_data.py)
"""
import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = "/usr/lib/x86_64-linux-gnu/espeak-ng-data/voices/!v/"
# make_data.random_variant's ranges, in percent of the default formant (frequency, height, width).
FREQ = {0: (70, 140), 1: (72, 143), 2: (72, 143), 3: (72, 143)}  # F1-F3: tract 0.8-1.3 x jitter 0.9-1.1
FREQ_HIGH = (64, 162.5)  # F4-F8: tract x 0.8-1.25
KNOWN = {"language", "name", "gender", "breath", "breathw", "roughness", "flutter", "tone", "echo", "klatt",
         "formant", "pitch", "consonants", "voicing"}


def outside(path):
    found, f13 = [], {}
    for line in open(path, errors="replace"):
        t = line.split("//")[0].split()
        if not t or t[0].startswith("#"):
            continue
        key, args = t[0], t[1:]
        try:
            n = [float(a) for a in args]
        except ValueError:
            n = []
        if key == "formant" and len(n) >= 3:
            k, freq, height, width = int(n[0]), n[1], n[2], n[3] if len(n) > 3 else 100
            lo, hi = FREQ.get(k, FREQ_HIGH)
            hlo, hhi = (0, 200) if k in (0, 6, 7, 8) else (40, 170)
            if k in (1, 2, 3):
                f13[k] = freq
            if not lo <= freq <= hi:
                found.append(f"F{k} frequency {freq:.0f}% (random voices {lo}-{hi}%)")
            if not hlo <= height <= hhi:
                found.append(f"F{k} height {height:.0f}% ({hlo}-{hhi}%)")
            if not 60 <= width <= 200:
                found.append(f"F{k} width {width:.0f}% (60-200%)")
        elif key == "pitch" and len(n) >= 2 and not (55 <= n[0] <= 260 and n[0] <= n[1] <= 2.2 * n[0]):
            found.append(f"pitch {' '.join(args)} (base 55-260 Hz, top 1-2.2 x base)")
        elif key == "consonants" and n and (not 50 <= n[0] <= 150 or (len(n) > 1 and not 40 <= n[1] <= 150)):
            found.append(f"consonants {' '.join(args)} (50-150, 40-150)")
        elif key == "voicing" and n and not 5 <= n[0] <= 150:
            found.append(f"voicing {' '.join(args)} (5-150)")
        elif key == "echo" and len(n) >= 2 and (n[0] > 150 or n[1] > 50):
            found.append(f"echo {' '.join(args)} (0-150, 0-50)")
        elif key not in KNOWN:
            found.append(f"{key} {' '.join(args)} (never varied)")
    if len(f13) == 3 and max(f13.values()) / min(f13.values()) > 1.1 / 0.9 + 1e-9:
        found.append("F1-F3 not scaled together (" + "/".join(f"{f13[k]:.0f}" for k in (1, 2, 3)) + "%)")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    args = ap.parse_args()
    with open(os.path.join(args.data, "voices.json")) as f:
        splits = json.load(f)
    for split in ("test", "valid"):
        for name in splits[split]:
            print(f"{split:5} {name:12} " + ("; ".join(outside(VARIANTS + name)) or "all within the ranges"))


if __name__ == "__main__":
    main()
