#!/usr/bin/python3
"""Synthesises the speech sample's training, validation and test data.

Every utterance is spoken by Debian's espeak-ng (one of 8 English accents x one
of its ~100 voice variants, at a random speed and pitch) as one to five words of
the vocabulary, sometimes with an out-of-vocabulary filler word, either joined
or separated by pauses. sox then resamples it to 16 kHz, sometimes adds reverb or
a band limit, pads silence around it, mixes in noise (white, pink, brown,
band-limited, fluctuating, mains hum) at a random SNR (training 0-30 dB,
validation and test 5-30 dB) and sets a random peak level (-35 to -1 dBFS).

The split is by voice variant: the test and validation variants are never heard
in training, in any accent. Everything is drawn from seeded generators keyed by
split and utterance number, so the data are the same on every run and with any
number of workers.

Writes under DATA (default samples/speech/train/data/):
  wav/SPLIT/ID.wav           16 kHz mono 16-bit
  SPLIT.jsonl                one line per utterance: id, words, what was spoken,
                             voice, speed, pitch, noise, snr, level, and the
                             speech segments (frame ranges) of the clean signal
Splits: train, valid, test (held-out voices) and noise (noise only, no speech).

  /usr/bin/python3 make_data.py [--data DIR] [--train N] [--jobs J]
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import wave
from multiprocessing import Pool

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from vocab import VOCAB  # noqa: E402

# Out-of-vocabulary words spoken now and then: the model must stay silent on them.
FILLERS = ["please", "hello", "the", "computer", "music", "what", "maybe", "okay", "very", "number",
           "turn", "volume", "again", "about", "house", "window", "lamp", "cancel", "today", "and"]
ACCENTS = ["en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029",
           "en-us-nyc"]
NOISES = ["none", "white", "pink", "brown", "band", "fluctuating", "hum"]
RATE, HOP, WIN = 16000, 160, 400
SIZES = {"train": 10000, "valid": 500, "test": 1000, "noise": 100}
SPLIT_SEED = 8
N_TEST_VARIANTS, N_VALID_VARIANTS = 16, 8


def variants():
    """espeak-ng's voice variants (the part after '+' in -v en-us+NAME), sorted."""
    out = subprocess.run(["espeak-ng", "--voices=variant"], check=True, capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines()[1:]:
        at = line.find("!v/")
        if at >= 0:
            names.append(line[at + 3:].split("  ")[0].strip())
    return sorted(set(names))


def voice_split():
    """Variants per split: test and valid variants never appear in train."""
    v = variants()
    random.Random(SPLIT_SEED).shuffle(v)
    test, valid = v[:N_TEST_VARIANTS], v[N_TEST_VARIANTS:N_TEST_VARIANTS + N_VALID_VARIANTS]
    train = [""] + v[N_TEST_VARIANTS + N_VALID_VARIANTS:]  # "" = the accent's own default voice
    return {"train": train, "valid": valid, "test": test, "noise": []}


def read_wav(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float64) / 32768.0


def frame_energy(x):
    n = max(0, (len(x) - WIN) // HOP + 1)
    if n == 0:
        return np.zeros(0)
    idx = np.arange(WIN)[None, :] + HOP * np.arange(n)[:, None]
    return (x[idx] ** 2).mean(axis=1)


def speech_segments(x):
    """[first, last] frame ranges where the clean signal is within 35 dB of its loudest frame
    (the speech-activity targets; also the reference for word times)."""
    e = frame_energy(x)
    if len(e) == 0 or e.max() <= 0:
        return []
    on = e > e.max() * 10 ** (-35 / 10)
    segs, start = [], None
    for k, v in enumerate(on):
        if v and start is None:
            start = k
        if not v and start is not None:
            segs.append([start, k - 1])
            start = None
    if start is not None:
        segs.append([start, len(on) - 1])
    merged = []  # a stop consonant's closure (up to 80 ms) is not a pause
    for a, b in segs:
        if merged and a - merged[-1][1] <= 8:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    return merged


def sh(cmd, stdin=None):
    """Runs a command; sox runs with -R (repeatable: its noise and dither are the same on every run)."""
    if cmd[0] == "sox" and "-R" not in cmd:
        cmd = ["sox", "-R"] + cmd[1:]
    r = subprocess.run(cmd, input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.decode(errors='replace')}")
    return r.stdout


def noise_cmd(kind, n, out, rng):
    """sox -R makes the same noise on every call, so each utterance cuts its own stretch of it."""
    skip = rng.randint(0, 60 * RATE)
    return noise_synth(kind, n + skip, out, rng) + ["trim", f"{skip}s"]


def noise_synth(kind, n, out, rng):
    base = ["sox", "-r", str(RATE), "-n", "-b", "16", "-c", "1", out, "synth", f"{n}s"]
    if kind == "white":
        return base + ["whitenoise"]
    if kind == "pink":
        return base + ["pinknoise"]
    if kind == "brown":
        return base + ["brownnoise"]
    if kind == "band":
        centre = rng.choice([200, 400, 800, 1500, 3000])
        return base + ["pinknoise", "band", str(centre), str(centre // 2)]
    if kind == "fluctuating":
        return base + ["pinknoise", "tremolo", f"{rng.uniform(0.2, 4):.2f}", str(rng.randint(30, 90))]
    if kind == "hum":
        f = rng.choice([50, 60])
        return base + ["sine", str(f), "synth", "sine", "mix", str(3 * f), "synth", "sine", "mix", str(5 * f),
                       "synth", "whitenoise", "mix", "gain", "-n", "-3"]
    raise ValueError(kind)


def plan(split, i, voices):
    """Everything random about utterance i of `split`, from its own seeded generator."""
    rng = random.Random(f"deeprnn-speech/{split}/{i}")
    u = {"id": f"{split}-{i:05d}", "rng": rng}
    if split == "noise" or (split == "train" and rng.random() < 0.06):
        u["words"], u["tokens"] = [], []
    else:
        n = rng.choices([1, 2, 3, 4, 5], weights=[30, 25, 20, 15, 10])[0]
        words = [rng.choice(VOCAB) for _ in range(n)]
        tokens = list(words)
        if rng.random() < 0.15:
            tokens.insert(rng.randint(0, len(tokens)), rng.choice(FILLERS))
        u["words"], u["tokens"] = words, tokens
    u["voice"] = rng.choice(ACCENTS) + (("+" + v) if (v := rng.choice(voices or [""])) else "")
    u["speed"] = rng.randint(120, 220)
    u["pitch"] = rng.randint(15, 85)
    u["paused"] = rng.random() < 0.6
    u["noise"] = "none" if split == "noise" and i % 10 == 0 else rng.choice(NOISES[1:] if split == "noise" else NOISES)
    lo = 0 if split == "train" else 5  # training also sees 0-5 dB, for margin; tests stop at 5 dB
    u["snr"] = round(rng.uniform(lo, 30), 1)
    u["level"] = round(rng.uniform(-35, -1), 1)  # peak dBFS
    u["reverb"] = rng.randint(10, 60) if rng.random() < 0.3 else 0
    u["band"] = rng.choice(["", "", "", "", f"lowpass {rng.randint(3000, 7000)}", f"highpass {rng.randint(80, 300)}"])
    u["lead"] = round(rng.uniform(0.1, 0.8), 2)
    u["trail"] = round(rng.uniform(0.3, 0.8), 2)
    u["noise_seconds"] = round(rng.uniform(2, 6), 2)
    return u


def ssml(tokens, paused, rng):
    if not tokens:
        return ""
    parts = [tokens[0]]
    for t in tokens[1:]:
        parts.append(f'<break time="{rng.randint(150, 800)}ms"/>' if paused else " ")
        parts.append(t)
    return "<speak>" + "".join(parts) + "</speak>"


def make(job):
    split, i, voices, data = job
    u = plan(split, i, voices)
    rng = u.pop("rng")
    out = os.path.join(data, "wav", split, u["id"] + ".wav")
    tmp = os.path.join(data, "tmp")
    clean, noise = os.path.join(tmp, u["id"] + ".clean.wav"), os.path.join(tmp, u["id"] + ".noise.wav")
    try:
        if u["tokens"]:
            text = ssml(u["tokens"], u["paused"], rng)
            u["spoken"] = text
            raw = sh(["espeak-ng", "-v", u["voice"], "-s", str(u["speed"]), "-p", str(u["pitch"]), "-m", "--stdout", text])
            effects = ["rate", str(RATE)]
            if u["band"]:
                effects += u["band"].split()
            if u["reverb"]:
                effects += ["reverb", str(u["reverb"])]
            effects += ["pad", str(u["lead"]), str(u["trail"])]
            sh(["sox", "-t", "wav", "-", "-b", "16", "-c", "1", clean] + effects, stdin=raw)
            x = read_wav(clean)
        else:
            x = np.zeros(int(u["noise_seconds"] * RATE))
        u["segments"] = speech_segments(x)
        n = len(x)
        if u["noise"] == "none":
            if u["tokens"]:
                sh(["sox", clean, out, "gain", "-n", str(u["level"])])
            else:
                sh(["sox", "-r", str(RATE), "-n", "-b", "16", "-c", "1", out, "trim", "0", f"{n}s"])  # digital silence
        else:
            sh(noise_cmd(u["noise"], n, noise, rng))
            nz = read_wav(noise)
            n_rms = math.sqrt(max(1e-12, float((nz ** 2).mean())))
            if u["tokens"]:
                e = frame_energy(x)
                on = np.zeros(len(e), bool)
                for a, b in u["segments"]:
                    on[a:b + 1] = True
                s_rms = math.sqrt(max(1e-12, float(e[on].mean()))) if on.any() else 1e-6
                vol = s_rms / n_rms / 10 ** (u["snr"] / 20)
                sh(["sox", "-m", "-v", "1", clean, "-v", f"{vol:.6g}", noise, out, "gain", "-n", str(u["level"])])
            else:
                sh(["sox", noise, out, "gain", "-n", str(u["level"])])
    finally:
        for f in (clean, noise):
            if os.path.exists(f):
                os.remove(f)
    return u


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--train", type=int, default=SIZES["train"], help="training utterances")
    ap.add_argument("--jobs", type=int, default=3, help="parallel workers (espeak-ng and sox mostly wait on I/O)")
    ap.add_argument("--splits", default="train,valid,test,noise")
    args = ap.parse_args()
    sizes = dict(SIZES, train=args.train)
    split_voices = voice_split()
    os.makedirs(os.path.join(args.data, "tmp"), exist_ok=True)
    with open(os.path.join(args.data, "voices.json"), "w") as f:
        json.dump({k: v for k, v in split_voices.items() if k != "noise"}, f, indent=1)
    for split in args.splits.split(","):
        os.makedirs(os.path.join(args.data, "wav", split), exist_ok=True)
        jobs = [(split, i, split_voices[split], args.data) for i in range(sizes[split])]
        rows = []
        with Pool(args.jobs) as pool:
            for k, u in enumerate(pool.imap(make, jobs, chunksize=8)):
                rows.append(u)
                if (k + 1) % 1000 == 0:
                    print(f"make_data: {split} {k + 1}/{len(jobs)}", flush=True)
        with open(os.path.join(args.data, split + ".jsonl"), "w") as f:
            for u in rows:
                f.write(json.dumps(u) + "\n")
        n_words = sum(len(u["words"]) for u in rows)
        print(f"make_data: {split}: {len(rows)} utterances, {n_words} words, voices {len(split_voices[split])} "
              f"variants x {len(ACCENTS)} accents", flush=True)


if __name__ == "__main__":
    main()
