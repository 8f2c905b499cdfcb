#!/usr/bin/python3
"""Writes the bundled demo recording, samples/speech/demo.wav, and its expected
words, samples/speech/demo.txt.

A held-out voice (en-us+Alicia: the Alicia variant is a test voice, never
heard in training) says "yes — go left — stop — three seven nine — off" with
pauses, in a small room (reverb), over fluctuating fan-like noise and mains hum
at about 12 dB SNR. 16 kHz mono 16-bit, about 8 seconds. Same tools as the
training data (espeak-ng, sox); fixed settings, so it is the same on every run.

  /usr/bin/python3 make_demo.py
"""
import math
import os
import random
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_data  # noqa: E402

VOICE, SPEED, PITCH = "en-us+Alicia", 150, 55
GROUPS = [["yes"], ["go", "left"], ["stop"], ["three", "seven", "nine"], ["off"]]
PAUSES_MS = [900, 800, 1000, 900]
SNR_DB, LEVEL_DB = 12, -3


def main():
    out_dir = os.path.join(HERE, "..")
    if VOICE.split("+")[1] not in make_data.voice_split()["test"]:
        sys.exit(f"make_demo: {VOICE} is not a held-out test voice")
    ssml = "<speak>" + "".join(
        (f'<break time="{PAUSES_MS[i - 1]}ms"/>' if i else "") + " ".join(g) for i, g in enumerate(GROUPS)) + "</speak>"
    rng = random.Random("deeprnn-speech/demo")
    with tempfile.TemporaryDirectory() as tmp:
        clean, fan, hum = (os.path.join(tmp, n) for n in ("clean.wav", "fan.wav", "hum.wav"))
        raw = make_data.sh(["espeak-ng", "-v", VOICE, "-s", str(SPEED), "-p", str(PITCH), "-m", "--stdout", ssml])
        make_data.sh(["sox", "-t", "wav", "-", "-b", "16", "-c", "1", clean, "rate", "16000", "reverb", "20",
                      "pad", "0.6", "0.8"], stdin=raw)
        x = make_data.read_wav(clean)
        make_data.sh(make_data.noise_cmd("fluctuating", len(x), fan, rng))
        make_data.sh(make_data.noise_cmd("hum", len(x), hum, rng))
        e = make_data.frame_energy(x)
        on = np.zeros(len(e), bool)
        for a, b in make_data.speech_segments(x):
            on[a:b + 1] = True
        s_rms = math.sqrt(float(e[on].mean()))
        rms = lambda p: math.sqrt(float((make_data.read_wav(p) ** 2).mean()))  # noqa: E731
        fan_v = s_rms / rms(fan) / 10 ** (SNR_DB / 20)
        hum_v = s_rms / rms(hum) / 10 ** ((SNR_DB + 10) / 20)
        wav = os.path.join(out_dir, "demo.wav")
        make_data.sh(["sox", "-m", "-v", "1", clean, "-v", f"{fan_v:.6g}", fan, "-v", f"{hum_v:.6g}", hum,
                      "-b", "16", wav, "gain", "-n", str(LEVEL_DB)])
    with open(os.path.join(out_dir, "demo.txt"), "w") as f:
        f.write(" ".join(w for g in GROUPS for w in g) + "\n")
    print(f"make_demo: wrote {os.path.abspath(wav)} ({len(x) / 16000:.2f} s) and demo.txt")


if __name__ == "__main__":
    main()
