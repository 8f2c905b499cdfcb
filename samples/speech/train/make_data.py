#!/usr/bin/python3
"""Synthesises the speech sample's training, validation and test data.

Every utterance is spoken by Debian's espeak-ng (one of 8 English accents x one
of its ~100 voice variants, at a random speed and pitch) as one to five words of
the vocabulary, sometimes with an out-of-vocabulary filler word, either joined
or separated by pauses. sox then resamples it to 16 kHz, sometimes adds reverb or
a band limit, pads silence around it, mixes in noise (white, pink, brown,
band-limited, fluctuating, mains hum) at a random SNR (training 0-30 dB,
validation and test 5-30 dB) and sets a random peak level (-35 to -1 dBFS).

Training utterances (not validation or test) mostly use a random voice instead:
a voice variant file of their own, drawn from wide ranges of espeak-ng's documented
voice attributes (formants, pitch, breath/whisper, roughness, flutter, tone, echo,
Klatt synthesis; with --stress-share also vowel lengths, amplitudes and intonation;
see random_variant), spoken through a private espeak-ng data
directory; training also has more filler words (45% of utterances; 40 filler
words, 20 of them heard only in training) and speeds of 100-250 words/min.
--named-only writes the previous data set instead (named variants only).

The split is by voice variant: the test and validation variants are never heard
in training, in any accent, and the random voices are not derived from them. Everything is drawn from seeded generators keyed by
split and utterance number, so the data are the same on every run and with any
number of workers.

Writes under DATA (default samples/speech/train/data/):
  wav/SPLIT/ID.wav           16 kHz mono 16-bit
  SPLIT.jsonl                one line per utterance: id, words, what was spoken,
                             voice, speed, pitch, noise, snr, level, and the
                             speech segments (frame ranges) of the clean signal
Splits: train, valid, test (held-out named voices), rvalid (held-out random voices: a
random voice variant for every utterance, from a generator of its own that training
never uses; a second validation split, for model selection on outlier-like voices)
and noise (noise only, no speech).

  /usr/bin/python3 make_data.py [--data DIR] [--train N] [--first N] [--jobs J] [--splits S,...] [--paused-train P]
                                [--named-only] [--train-voices all|named] [--wide-formants P] [--stress-share P]
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
SIZES = {"train": 12000, "valid": 500, "rvalid": 500, "test": 1000, "noise": 100}
SPLIT_SEED = 8
N_TEST_VARIANTS, N_VALID_VARIANTS = 16, 8
# Training only: most training utterances get a voice variant of their own, drawn at random
# (random_variant below); the rest use the named training variants. More OOV filler words too.
P_RANDOM_VOICE = 0.75
P_FILLER_TRAIN = 0.3
# More out-of-vocabulary words, heard only in training (as fillers, like FILLERS).
EXTRA_FILLERS = ["hey", "set", "open", "close", "light", "time", "channel", "play", "next", "back", "call",
                 "home", "start", "alarm", "radio", "kitchen", "timer", "yellow", "new", "later"]
# Random voices: the share with independent, widely drawn vowel formants F1-F3 (--wide-formants;
# 0 = none, the bundled model's data), and their range (fractions of the default; random_variant).
WIDE_FORMANTS = 0.0
WIDE_F13 = (0.4, 1.8)
# Random voices: the share that also draw their prosody (--stress-share; 0 = none, the bundled
# model's data): vowel lengths (stressAdd, -30..250 per stress level), vowel amplitudes (stressAmp,
# 10..40) and intonation (1-4). The ranges span the named *training* variants' values.
STRESS_SHARE = 0.0
# Training only: the share of utterances spoken with pauses between the words (--paused-train; the rest
# are joined). Validation and test stay at PAUSED.
PAUSED = 0.6
PAUSED_TRAIN = PAUSED
ESPEAK_SYSTEM_DATA = "/usr/lib/x86_64-linux-gnu/espeak-ng-data"


def variants():
    """espeak-ng's voice variants (the part after '+' in -v en-us+NAME), sorted."""
    out = subprocess.run(["espeak-ng", "--voices=variant"], check=True, capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines()[1:]:
        at = line.find("!v/")
        if at >= 0:
            names.append(line[at + 3:].split("  ")[0].strip())
    return sorted(set(names))


def espeak_data_dir():
    """The system's espeak-ng-data directory (for the private copy random voices live in)."""
    for d in (ESPEAK_SYSTEM_DATA, "/usr/share/espeak-ng-data", "/usr/lib/espeak-ng-data"):
        if os.path.isdir(os.path.join(d, "voices", "!v")):
            return d
    sys.exit("make_data: cannot find espeak-ng-data/voices/!v")


def private_espeak(data):
    """DATA/espeak/wPID/espeak-ng-data, one per worker process: symbolic links to the system's
    espeak-ng-data, except that voices/!v is a directory of our own that holds only the random voice
    being spoken (espeak-ng lists at most 350 voices). espeak-ng --path=DATA/espeak/wPID then finds
    `-v en-us+rNAME` there. (The named variants are not linked into it.)"""
    root = os.path.join(data, "espeak", f"w{os.getpid()}")
    d = os.path.join(root, "espeak-ng-data")
    os.makedirs(os.path.join(d, "voices", "!v"), exist_ok=True)
    system = espeak_data_dir()
    for name in os.listdir(system):
        if name != "voices" and not os.path.lexists(os.path.join(d, name)):
            os.symlink(os.path.join(system, name), os.path.join(d, name))
    for name in os.listdir(os.path.join(system, "voices")):
        if name != "!v" and not os.path.lexists(os.path.join(d, "voices", name)):
            os.symlink(os.path.join(system, "voices", name), os.path.join(d, "voices", name))
    return root


def random_variant(rng, name):
    """A fresh espeak-ng voice variant file (text), drawn from wide ranges of the attributes that
    espeak-ng's voice documentation (docs/voices.md: pitch, formant, echo, tone, flutter, roughness,
    voicing, consonants, breath, breathw) describes, around its documented defaults. The ranges come
    from that documentation, not from any variant file; `klatt` (the Klatt synthesiser) takes only
    the values that training variants use (1, 2, 4, 6), and the prosody of a STRESS_SHARE of the
    voices (stressAdd, stressAmp, intonation; no range documented) spans the named training
    variants' values. Used for training utterances and rvalid's own generator."""
    lines = ["language variant", f"name {name}", f"gender {rng.choice(['male', 'female'])}"]
    base = rng.uniform(55, 260)  # docs: default 82 118 (base Hz, top of range Hz)
    lines.append(f"pitch {base:.0f} {base * rng.uniform(1.0, 2.2):.0f}")
    tract = math.exp(rng.uniform(math.log(0.8), math.log(1.3)))  # one vocal-tract scale for F1-F3...
    # ...except in a "wide" voice (WIDE_FORMANTS of them), whose vowel formants F1, F2 and F3 are drawn
    # independently, log-uniformly over WIDE_F13 of the default: the span of F1-F3 over the named
    # *training* variants (50-145%), widened by a factor 1.25 at each end (docs/SPEECH-HISTORY.md, seventh round).
    wide = WIDE_FORMANTS > 0 and rng.random() < WIDE_FORMANTS  # no draw at 0: the data stay as they were
    for k in range(9):
        if 1 <= k <= 3 and wide:
            freq = 100 * math.exp(rng.uniform(math.log(WIDE_F13[0]), math.log(WIDE_F13[1])))
        elif 1 <= k <= 3:
            freq = 100 * tract * rng.uniform(0.9, 1.1)  # ...with a little independent jitter
        elif k == 0:
            freq = 100 * rng.uniform(0.7, 1.4)
        else:
            freq = 100 * tract * rng.uniform(0.8, 1.25)
        height = rng.uniform(0, 200) if k in (0, 6, 7, 8) else rng.uniform(40, 170)
        width = rng.uniform(60, 200)
        lines.append(f"formant {k} {freq:.0f} {height:.0f} {width:.0f}")
    kind = rng.choices(["normal", "breathy", "whisper"], weights=[65, 20, 15])[0]
    if kind == "normal":
        voicing = rng.uniform(60, 150)
    elif kind == "breathy":
        voicing = rng.uniform(30, 90)
    else:
        voicing = rng.uniform(5, 35)
    lines.append(f"voicing {voicing:.0f}")
    if kind != "normal":
        lo, hi = (5, 45) if kind == "breathy" else (30, 90)
        lines.append("breath " + " ".join(f"{rng.uniform(lo, hi) * (1 - 0.1 * j):.0f}" for j in range(8)))
        lines.append("breathw " + " ".join(f"{rng.uniform(100, 450):.0f}" for _ in range(8)))
    lines.append(f"consonants {rng.uniform(50, 150):.0f} {rng.uniform(40, 150):.0f}")
    if rng.random() < 0.6:
        lines.append(f"roughness {rng.randint(0, 7)}")
    if rng.random() < 0.6:
        lines.append(f"flutter {rng.uniform(0, 40):.0f}")
    if rng.random() < 0.5:  # docs default: tone 600 170 1200 135 2000 110
        f1, f2, f3 = sorted(rng.uniform(200, 4000) for _ in range(3))
        lines.append("tone " + " ".join(f"{f:.0f} {rng.uniform(60, 255):.0f}" for f in (f1, f2, f3)))
    if rng.random() < 0.25:
        lines.append(f"echo {rng.uniform(0, 150):.0f} {rng.uniform(0, 50):.0f}")
    if rng.random() < 0.15:
        lines.append(f"klatt {rng.choice([1, 2, 4, 6])}")
    if STRESS_SHARE > 0 and rng.random() < STRESS_SHARE:  # no draw at 0: the data stay as they were
        lines.append("stressAdd " + " ".join(f"{rng.uniform(-30, 250):.0f}" for _ in range(8)))
        lines.append("stressAmp " + " ".join(f"{rng.uniform(10, 40):.0f}" for _ in range(8)))
        lines.append(f"intonation {rng.randint(1, 4)}")
    return "\n".join(lines) + "\n"


def voice_split():
    """Variants per split: test and valid variants never appear in train."""
    v = variants()
    random.Random(SPLIT_SEED).shuffle(v)
    test, valid = v[:N_TEST_VARIANTS], v[N_TEST_VARIANTS:N_TEST_VARIANTS + N_VALID_VARIANTS]
    train = [""] + v[N_TEST_VARIANTS + N_VALID_VARIANTS:]  # "" = the accent's own default voice
    return {"train": train, "valid": valid, "rvalid": [], "test": test, "noise": []}


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


NOISE_STREAM = 90 * RATE  # a kept stream: every stretch noise_cmd can start (60 s) and 30 s of it
_streams = {}  # this worker's kept streams: noise command without its file and length -> int16 samples


def write_noise(kind, n, out, rng, keep):
    """Writes noise_cmd's stretch of noise to `out`, drawing from rng exactly as noise_cmd does.
    keep: cut it from a 90 s stream that this worker synthesises once per noise command (kinds without
    random rates: all but fluctuating) instead of having sox synthesise, for every utterance, the up to
    60 s it then trims: that was over half of the data's time (thirtieth round, docs/SPEECH.md). A kept
    stretch holds the same noise samples; only sox's dither (at most 2 in 32768: sox dithers from a file's
    first sample) and, for hum, the scale of its `gain -n` (the stream's peak, not the stretch's) differ,
    and make() sets the level of every noise by its RMS. Training data only: validation and test stay
    byte for byte what every earlier round evaluated on."""
    cmd = noise_cmd(kind, n, out, rng)
    skip = int(cmd[-1][:-1])
    at = cmd.index("synth") + 1  # the length; the file is just before "synth"
    if not keep or "tremolo" in cmd or skip + n > NOISE_STREAM:
        sh(cmd)
        return
    key = tuple(cmd[:at - 2] + cmd[at + 1:-2])
    if key not in _streams:
        tmp = out + ".stream.wav"
        sh(cmd[:at - 2] + [tmp, "synth", f"{NOISE_STREAM}s"] + cmd[at + 1:-2])
        with wave.open(tmp, "rb") as w:
            _streams[key] = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        os.remove(tmp)
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(_streams[key][skip:skip + n].tobytes())


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


def plan(split, i, voices, named_only=False):
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
    u["paused"] = rng.random() < (PAUSED_TRAIN if split == "train" else PAUSED)  # one draw either way
    u["noise"] = "none" if split == "noise" and i % 10 == 0 else rng.choice(NOISES[1:] if split == "noise" else NOISES)
    lo = 0 if split == "train" else 5  # training also sees 0-5 dB, for margin; tests stop at 5 dB
    u["snr"] = round(rng.uniform(lo, 30), 1)
    u["level"] = round(rng.uniform(-35, -1), 1)  # peak dBFS
    u["reverb"] = rng.randint(10, 60) if rng.random() < 0.3 else 0
    u["band"] = rng.choice(["", "", "", "", f"lowpass {rng.randint(3000, 7000)}", f"highpass {rng.randint(80, 300)}"])
    u["lead"] = round(rng.uniform(0.1, 0.8), 2)
    u["trail"] = round(rng.uniform(0.3, 0.8), 2)
    u["noise_seconds"] = round(rng.uniform(2, 6), 2)
    if split == "train" and not named_only:  # own generator: the valid, test and noise plans stay exactly as they were
        vrng = random.Random(f"deeprnn-speech/train-voice/{i}")
        if u["words"] and vrng.random() < P_FILLER_TRAIN and len(u["tokens"]) == len(u["words"]):
            u["tokens"].insert(vrng.randint(0, len(u["tokens"])), vrng.choice(FILLERS + EXTRA_FILLERS))
        if vrng.random() < P_RANDOM_VOICE:
            name = f"r{i:05d}"
            u["variant_text"] = random_variant(vrng, name)
            u["voice"] = u["voice"].split("+")[0] + "+" + name
        u["speed"] = vrng.randint(100, 250)
    if split == "rvalid":  # held-out random voices: their own generator, never used for training
        vrng = random.Random(f"deeprnn-speech/rvalid-voice/{i}")
        name = f"v{i:05d}"
        u["variant_text"] = random_variant(vrng, name)
        u["voice"] = u["voice"].split("+")[0] + "+" + name
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
    split, i, voices, data, named_only, skip_random = job
    u = plan(split, i, voices, named_only)
    if skip_random and "variant_text" in u:
        return None  # planned (so nothing else changes), not synthesised: --train-voices named
    rng = u.pop("rng")
    out = os.path.join(data, "wav", split, u["id"] + ".wav")
    tmp = os.path.join(data, "tmp")
    clean, noise = os.path.join(tmp, u["id"] + ".clean.wav"), os.path.join(tmp, u["id"] + ".noise.wav")
    try:
        if u["tokens"]:
            text = ssml(u["tokens"], u["paused"], rng)
            u["spoken"] = text
            cmd = ["espeak-ng"]
            if "variant_text" in u:  # a random voice: its file goes into this worker's private espeak-ng data
                root = private_espeak(data)
                variant = os.path.join(root, "espeak-ng-data", "voices", "!v", u["voice"].split("+")[1])
                with open(variant, "w") as f:
                    f.write(u["variant_text"])
                cmd.append("--path=" + root)
            try:
                raw = sh(cmd + ["-v", u["voice"], "-s", str(u["speed"]), "-p", str(u["pitch"]), "-m", "--stdout",
                                text])
            finally:
                if "variant_text" in u:
                    os.remove(variant)
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
            write_noise(u["noise"], n, noise, rng, keep=split == "train")
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
    ap.add_argument("--first", type=int, default=0,
                    help="number of the first training utterance: --first 12000 --train 12000 writes 12,000 "
                         "utterances that the default split does not hold (fresh data for a later stage)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel workers (espeak-ng and sox mostly wait on I/O)")
    ap.add_argument("--splits", default="train,valid,rvalid,test,noise")
    ap.add_argument("--wide-formants", type=float, default=0.0,
                    help="share of random voices with independent F1-F3 over 40-180%% of the default (docs/SPEECH-HISTORY.md, seventh round)")
    ap.add_argument("--stress-share", type=float, default=0.0,
                    help="share of random voices that also draw vowel lengths, amplitudes and intonation "
                         "(docs/SPEECH-HISTORY.md, twenty-third round)")
    ap.add_argument("--paused-train", type=float, default=PAUSED,
                    help="share of training utterances with pauses between the words (the rest joined; "
                         "validation and test: %(default)s)")
    ap.add_argument("--named-only", action="store_true",
                    help="the previous data set: named training variants only, 15%% fillers, 120-220 words/min "
                         "(stages 1-3 of the bundled model were trained on it; use with --train 10000)")
    ap.add_argument("--train-voices", choices=["all", "named"], default="all",
                    help="named: synthesise only the training utterances that keep a named voice (the quarter "
                         "train.py --named-only trains on; every one of them exactly as with 'all'), not those "
                         "with a random voice variant: train.sh's stage 1 needs no more from data/")
    args = ap.parse_args()
    global WIDE_FORMANTS, STRESS_SHARE, PAUSED_TRAIN
    for name, share in (("--wide-formants", args.wide_formants), ("--stress-share", args.stress_share)):
        if not 0.0 <= share <= 1.0:
            sys.exit(f"make_data.py: {name} {share} is not a share between 0 and 1")
    WIDE_FORMANTS = args.wide_formants
    STRESS_SHARE = args.stress_share
    if not 0.0 <= args.paused_train <= 1.0:
        sys.exit(f"make_data.py: --paused-train {args.paused_train} is not a share between 0 and 1")
    PAUSED_TRAIN = args.paused_train
    if args.first < 0:
        sys.exit(f"make_data.py: --first {args.first} is not an utterance number (0 or more)")
    sizes = dict(SIZES, train=args.train)
    split_voices = voice_split()
    os.makedirs(os.path.join(args.data, "tmp"), exist_ok=True)
    with open(os.path.join(args.data, "voices.json"), "w") as f:
        json.dump({k: v for k, v in split_voices.items() if k != "noise"}, f, indent=1)
    for split in args.splits.split(","):
        os.makedirs(os.path.join(args.data, "wav", split), exist_ok=True)
        skip_random = split == "train" and args.train_voices == "named"
        first = args.first if split == "train" else 0
        jobs = [(split, i, split_voices[split], args.data, args.named_only, skip_random)
                for i in range(first, first + sizes[split])]
        rows = []
        with Pool(args.jobs) as pool:
            for k, u in enumerate(pool.imap(make, jobs, chunksize=8)):
                if u is not None:
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
