#!/usr/bin/python3
"""Trains the speech sample's model and exports it for deeprnn.

Input: the utterances written by make_data.py. Features come from the C++
program itself (`deeprnn-speech --features-only`), so training and serving
share one feature implementation and cannot drift.

Frame stacking (--stack S, 3 in the current recipe): the LSTM steps once per S
10 ms frames, on the S frames concatenated in order (a reshape of [T, 40] to
[T // S, 40 S], dropping a last incomplete group), exactly as the C++ program
stacks them; --features-only writes unstacked 10 ms frames, so the training-only
augmentations (mel warping, masks) work on 40 filters and stacking comes after.

Running-mean normalisation (--running-mean N, 300 in the current recipe): each 10 ms
log-mel frame minus the causal mean of the last N frames (itself included), computed
by the C++ program (`--features-only --running-mean N`, cached in feat-rmN/); the
export writes features.txt ("running-mean N"), which tells the program to do the same
when it serves the model. Without it the features are raw log-mel, as before.

Model: 2-layer unidirectional LSTM (40 S stacked log-mel in, hidden 128) and a linear
layer with 22 outputs: 21 CTC logits (blank + 20 words) and one
speech-activity logit (trained on the clean signal's speech frames; the
program uses it only to time words). Loss: CTC + 0.2 x binary cross-entropy
+ 1.0 x per-frame word-class cross-entropy of a training-only head (gets CTC off
its all-blank plateau; not exported).

Export (OUT, default samples/speech/model/): the LSTM as PyTorch names it,
one .npy per tensor (weight_ih_l0.npy, ...), with the feature mean and standard
deviation folded into weight_ih_l0 / bias_ih_l0 so the program feeds raw
(or running-mean-normalised) log-mel; output.weight.npy [22, H], output.bias.npy [22]; labels.txt; and
training.json with the settings and the validation result.

Data parallelism (--procs N): N processes (forked after the data are loaded; each 1 PyTorch
thread, and 1 BLAS thread as setup.sh sets) take contiguous shares of every batch, in the same
batch order and with the same augmentation draws as one process; each normalises its losses
by the whole batch's counts and the gradients are summed across processes (gloo on 127.0.0.1)
once a step, so every process holds the same model, the recipe of --procs 1 up to float
summation order. Process 0 validates, logs and exports.

Dropout (--dropout P, 0 in the current recipe): in training only, on the LSTM's input features, between
its layers and on its last layer's output (before the output layers); evaluation and export run the model
in eval mode, where dropout is the identity, so the exported tensors and the C++ program are unchanged.

Filler label (--filler-label; not in train.sh's recipe, tried in the fourteenth round): the
out-of-vocabulary filler words that make_data.py speaks now and then become a CTC target of their own,
<filler>, the last of the model's labels (so 23 outputs: blank, 20 words, <filler>, speech activity),
and their frames its class in the per-frame loss; without it they are trained as nothing (blank, class
0). Validation and the decoders leave the label out of the transcript (the C++ program skips every label
in angle brackets after the blank), so word accuracy is measured on the words alone.

Renderings (--train-data A,B and --final-data / --final-epochs; sixteenth round): make_data.py's train
splits with different --paused-train shares hold the same utterances (ids, words, voices, noise) and differ
only in which are spoken with pauses. Given several, every epoch takes each utterance from one of them,
drawn uniformly from a stream of its own (seed + 1), so the model hears both renderings of an utterance over
the epochs; --final-data names the renderings of the last --final-epochs epochs instead. The feature mean
and standard deviation come from the first --train-data directory. One directory, and no --final-data,
trains exactly as before.

Every epoch (--keep-epochs DIR): each epoch's model is also exported, the same way, to
DIR/e01, DIR/e02, ... (5.4 MB each at 2x320), so that average.py can average any of them
afterwards. The feature mean and standard deviation are computed once, before the first
epoch, so every epoch's export folds the same normalisation into layer 0.

  /usr/bin/python3 train.py [--data DIR] [--train-data DIR[,DIR...]] [--final-data DIR[,DIR...] --final-epochs N] [--out DIR] [--speech BUILD/deeprnn-speech] [--epochs N] [--procs N]
                            [--keep-epochs DIR]
"""
import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from vocab import FILLER, LABELS, edit_distance  # noqa: E402
import fast_lstm  # noqa: E402

# The model's labels: the blank and the words, and with --filler-label a filler label after them
# (use_filler_label()); K CTC classes incl. blank at 0; output K is speech activity.
LAB = list(LABELS)
K = len(LAB)
FILLER_ID = None  # the filler label's index, with --filler-label: trained on fillers, left out of transcripts


def use_filler_label():
    global LAB, K, FILLER_ID
    LAB = LABELS + [FILLER]
    K = len(LAB)
    FILLER_ID = LAB.index(FILLER)
N_MELS = 40


class Net(torch.nn.Module):
    def __init__(self, hidden, layers, inputs, dropout=0.0):
        super().__init__()
        # dropout (training only; identity in eval mode, so the export is unchanged): on the LSTM's input
        # features, between its layers (nn.LSTM's own dropout) and on its last layer's output. At 0 no
        # dropout is constructed or called, so the model and its random draws are exactly those of before.
        self.dropout = dropout
        self.lstm = torch.nn.LSTM(inputs, hidden, layers, dropout=dropout if layers > 1 else 0.0)
        self.drop = torch.nn.Dropout(dropout) if dropout > 0 else None  # no parameters: the state_dict is unchanged
        self.output = torch.nn.Linear(hidden, K + 1)
        self.frames = torch.nn.Linear(hidden, K)  # training aid only: per-frame word classes; not exported

    matmul = torch.float32  # the LSTM's products in training: bfloat16 runs fast_lstm (--matmul)

    def forward(self, x):  # x [T, B, 40 S], already normalised
        if self.drop is not None:
            x = self.drop(x)
        if self.training and self.matmul != torch.float32:
            y = fast_lstm.lstm(x, self.lstm, self.matmul)
        else:  # evaluation always: the f32 model, as exported and served
            y, _ = self.lstm(x)
        if self.drop is not None:
            y = self.drop(y)
        return self.output(y), self.frames(y)


def features(speech, data, split, rows, running_mean=0):
    """Runs the C++ extractor over the split's WAVs that have no .npy yet."""
    out = os.path.join(data, f"feat-rm{running_mean}" if running_mean else "feat", split)
    extra = ["--running-mean", str(running_mean)] if running_mean else []
    os.makedirs(out, exist_ok=True)
    todo = [os.path.join(data, "wav", split, r["id"] + ".wav") for r in rows
            if not os.path.exists(os.path.join(out, r["id"] + ".npy"))]
    # Two extractors at a time (the recipes' two cores): 24,000 utterances take about 45 s on one.
    chunks = [todo[i:i + 500] for i in range(0, len(todo), 500)]
    for pair in (chunks[i:i + 2] for i in range(0, len(chunks), 2)):
        running = [(subprocess.Popen([speech, "--features-only", out] + extra + c), c) for c in pair]
        for proc, c in running:
            if proc.wait():
                sys.exit(f"train.py: {speech} --features-only failed (exit {proc.returncode}) on {c[0]} .. {c[-1]}")
    return [np.load(os.path.join(out, r["id"] + ".npy")) for r in rows]


RANDOM_VOICE = re.compile(r"^r[0-9]+$")


def load(speech, data, split, named_only=False, running_mean=0):
    with open(os.path.join(data, split + ".jsonl")) as f:
        rows = [json.loads(line) for line in f]
    if named_only:  # the curriculum's first stage: leave out the utterances with a random voice variant
        rows = [r for r in rows if not RANDOM_VOICE.match(r["voice"].split("+")[1] if "+" in r["voice"] else "")]
    feats = features(speech, data, split, rows, running_mean)
    items = []
    for r, x in zip(rows, feats):
        vad = np.zeros(len(x), np.float32)
        for a, b in r["segments"]:
            vad[a:b + 1] = 1.0
        # Per-frame word classes where the clean signal has one speech segment per spoken token
        # (pauses between words); -100 (ignored) elsewhere. Fillers (without --filler-label) and silence are
        # class 0; with --filler-label fillers are its class.
        cls = np.full(len(x), -100, np.int64)
        if len(r["segments"]) == len(r["tokens"]):
            cls[:] = 0
            for (a, b), w in zip(r["segments"], r["tokens"]):
                cls[a:b + 1] = LABELS.index(w) if w in LABELS else (FILLER_ID or 0)
        # CTC targets: the words; with --filler-label every spoken token, fillers as the filler label.
        tgt = [LABELS.index(w) if w in LABELS else FILLER_ID for w in r["tokens"]] if FILLER_ID \
            else [LABELS.index(w) for w in r["words"]]
        items.append((x.astype(np.float32), tgt, vad, r, cls))
    return items


def batches(items, batch, rng):
    """Length-sorted batches (little padding), in random order."""
    order = sorted(range(len(items)), key=lambda i: len(items[i][0]))
    groups = [order[i:i + batch] for i in range(0, len(order), batch)]
    rng.shuffle(groups)
    return groups


def mel_centres():
    """Centre frequencies (Hz) of the C++ extractor's 40 HTK-mel filters, 20 Hz - 8 kHz."""
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    pts = np.linspace(mel(20.0), mel(8000.0), N_MELS + 2)[1:-1]
    return 700.0 * (10.0 ** (pts / 2595.0) - 1.0)


CENTRES = mel_centres()


def augment(f, arng, warp, masks, warp_share=1.0):
    """Training-only augmentation of one utterance's raw log-mel [T, 40].
    warp: vocal-tract-length-like warping; each filter reads the spectrum at its centre
    frequency x alpha (alpha uniform in 1 +- warp), by linear interpolation between filters.
    warp_share < 1: only that share of the utterances is warped (one more draw each; at 1 the
    draws are those of the code before the option).
    masks: SpecAugment-style, 2 frequency masks of 0..5 filters and 2 time masks of
    0..masks frames, set to the utterance's mean log-mel."""
    if warp > 0 and (warp_share >= 1.0 or arng.random() < warp_share):
        alpha = arng.uniform(1.0 - warp, 1.0 + warp)
        pos = np.interp(np.clip(CENTRES * alpha, CENTRES[0], CENTRES[-1]), CENTRES, np.arange(N_MELS))
        i0 = np.minimum(np.floor(pos).astype(int), N_MELS - 2)
        w = (pos - i0).astype(np.float32)
        f = f[:, i0] * (1 - w) + f[:, i0 + 1] * w
    if masks > 0:
        f = f.copy()
        fill = f.mean()
        for _ in range(2):
            width = arng.integers(0, 6)
            a = arng.integers(0, N_MELS - width + 1)
            f[:, a:a + width] = fill
        for _ in range(2):
            width = min(int(arng.integers(0, masks + 1)), len(f) // 10)
            a = arng.integers(0, len(f) - width + 1)
            f[a:a + width] = fill
    return f


def stack_frames(a, stack, reduce=None):
    """[T, ...] 10 ms frames -> [T // stack, ...] model steps: the frames of a step concatenated in order (the C++
    program's stacking), or reduced over the step by `reduce` (labels)."""
    n = len(a) // stack
    a = a[:n * stack].reshape((n, stack) + a.shape[1:])
    return a.reshape(n, -1) if reduce is None else reduce(a)


def collate(items, idx, mean, std, stack, feats=None):
    """mean, std: per log-mel filter [40] (the same for every frame of a stack); feats: the utterances'
    log-mel if not items' own (augmented)."""
    T = max(len(items[i][0]) for i in idx) // stack
    x = np.zeros((T, len(idx), N_MELS * stack), np.float32)
    vad = np.zeros((T, len(idx)), np.float32)
    mask = np.zeros((T, len(idx)), np.float32)
    cls = np.full((T, len(idx)), -100, np.int64)
    lens, targets, tlens = [], [], []
    for b, i in enumerate(idx):
        f, tgt, v, _, c = items[i]
        if feats is not None:
            f = feats[b]
        f = stack_frames((f - mean) / std, stack)
        v = stack_frames(v, stack, lambda a: a.max(1))  # a step is speech if any of its frames is
        c = stack_frames(c, stack, lambda a: a[:, stack // 2])  # the word class of its middle frame
        x[:len(f), b] = f
        vad[:len(f), b] = v
        cls[:len(f), b] = c
        mask[:len(f), b] = 1
        lens.append(len(f))
        targets += tgt
        tlens.append(len(tgt))
    return (torch.from_numpy(x), torch.tensor(lens), torch.tensor(targets, dtype=torch.long), torch.tensor(tlens),
            torch.from_numpy(vad), torch.from_numpy(mask), torch.from_numpy(cls))


def greedy(logits, n):
    """Greedy CTC over the first K outputs; the filler label (--filler-label), like the blank, is not a word."""
    best = logits[:n, :K].argmax(-1).tolist()
    out, prev = [], 0
    for k in best:
        if k != 0 and k != prev and k != FILLER_ID:
            out.append(k)
        prev = k
    return out


def evaluate(net, items, mean, std, stack, share=(0, 1)):
    """(word errors, words) of greedy decoding over `items`, in fixed batches of 64: of every share[1]-th
    batch from the share[0]-th, so that processes can split the work and add their counts (the same batches
    as one process's, so the same numbers)."""
    net.eval()
    errors = words = 0
    with torch.no_grad():
        for idx in batches(items, 64, random.Random(0))[share[0]::share[1]]:
            x, lens = collate(items, idx, mean, std, stack)[:2]
            out, _ = net(x)
            for b, i in enumerate(idx):
                ref = [LABELS.index(w) for w in items[i][3]["words"]]
                errors += edit_distance(ref, greedy(out[:, b], lens[b]))
                words += len(ref)
    net.train()
    return errors, words


def validate(net, valid_parts, mean, std, stack, rank, procs):
    """The pooled word error rate over the validation splits and {split: its rate} (empty for one split).
    Every process decodes a share of each split's batches (twentieth round and before: process 0 alone, the
    pooled set and then each split again, while the other waited)."""
    counts = torch.tensor([evaluate(net, part, mean, std, stack, (rank, procs)) for _, part in valid_parts],
                          dtype=torch.float64)
    if procs > 1:
        dist.all_reduce(counts)
    rate = lambda c: (c[0] / max(1.0, c[1])).item()  # noqa: E731
    return rate(counts.sum(0)), ({split: rate(c) for (split, _), c in zip(valid_parts, counts)}
                                 if len(valid_parts) > 1 else {})


def widen(old, fresh, h0, hidden, name):
    """Embeds a tensor of a model with hidden size h0 into one of hidden size `hidden` >= h0 so that
    the wider model computes exactly what the narrower one did: the old units keep their weights
    (in each of the four gate blocks i, f, g, o), the new units keep their fresh random rows, and
    every weight from a new unit into an old unit or into the output layer is zero (it still gets a
    gradient, since the new units' outputs are not zero)."""
    if h0 == hidden:
        return old
    new = fresh.astype(np.float64).copy()
    if name.startswith("lstm."):  # rows: 4 gate blocks of h0 -> 4 blocks of hidden
        cols = old.shape[1] if old.ndim == 2 else None
        for g in range(4):
            rows_old, rows_new = slice(g * h0, (g + 1) * h0), slice(g * hidden, g * hidden + h0)
            if old.ndim == 1:
                new[rows_new] = old[rows_old]
            else:
                new[rows_new, :] = 0.0
                new[rows_new, :cols] = old[rows_old]
        return new
    if name == "output.weight":  # [K + 1, h0] -> [K + 1, hidden]
        new[:, :] = 0.0
        new[:, :h0] = old
        return new
    return old  # output.bias


def export(net, mean, std, out, info, running_mean=0):  # mean, std: per input of the LSTM (40 S)
    os.makedirs(out, exist_ok=True)
    settings = os.path.join(out, "features.txt")  # the program's feature settings; none: raw log-mel
    if running_mean:
        with open(settings, "w") as f:
            f.write(f"running-mean {running_mean}\n")
    elif os.path.exists(settings):
        os.remove(settings)
    sd = {k: v.detach().double().numpy() for k, v in net.state_dict().items()}
    for name, value in sd.items():
        if not name.startswith("lstm."):
            continue
        name = name[len("lstm."):]
        if name == "weight_ih_l0":  # W((x - m) / s) = (W / s) x - W (m / s)
            value = value / std[None, :]
        if name == "bias_ih_l0":
            value = value - (sd["lstm.weight_ih_l0"] / std[None, :]) @ mean
        np.save(os.path.join(out, name + ".npy"), value.astype(np.float32))
    np.save(os.path.join(out, "output.weight.npy"), sd["output.weight"].astype(np.float32))
    np.save(os.path.join(out, "output.bias.npy"), sd["output.bias"].astype(np.float32))
    with open(os.path.join(out, "labels.txt"), "w") as f:
        f.write("\n".join(LAB) + "\n")
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump(info, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--train-data", default="", metavar="DIR[,DIR...]",
                    help="take the train split from DIR instead of --data (validation stays in --data), e.g. "
                         "make_data.py --paused-train's data; several: renderings of one split, each epoch drawing "
                         "every utterance's rendering from them uniformly")
    ap.add_argument("--final-data", default="", metavar="DIR[,DIR...]",
                    help="renderings of the train split for the last --final-epochs epochs instead of --train-data's")
    ap.add_argument("--final-epochs", type=int, default=0,
                    help="how many of the last epochs train on --final-data (0: none)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "model"))
    ap.add_argument("--speech", default=os.path.join(ROOT, "build", "deeprnn-speech"))
    ap.add_argument("--epochs", type=int, default=14)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--stack", type=int, default=1,
                    help="10 ms frames stacked into one LSTM step (3: a 120-value vector every 30 ms)")
    ap.add_argument("--running-mean", type=int, default=0,
                    help="subtract the causal mean of the last N 10 ms frames from the log-mel (0: raw log-mel)")
    ap.add_argument("--named-only", action="store_true",
                    help="train only on the utterances spoken by named voice variants (a curriculum's first stage)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--frame-weight", type=float, default=1.0,
                    help="weight of the per-frame word-class loss that gets CTC off its all-blank plateau")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1,
                    help="PyTorch threads (1: on a busy 2-core machine, more threads spin and run slower)")
    ap.add_argument("--procs", type=int, default=1,
                    help="data-parallel processes of 1 thread each (2 uses both cores of a 2-core machine)")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--warp", type=float, default=0.0, help="mel warping: alpha uniform in 1 +- WARP (0: off)")
    ap.add_argument("--warp-share", type=float, default=1.0,
                    help="share of the utterances warped (the others keep their voice; 1: all)")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout on the LSTM's inputs, between its layers and on its output, in training only (0: off)")
    ap.add_argument("--matmul", choices=["f32", "bf16", "auto"], default="f32",
                    help="the LSTM's matrix products in training: f32 (torch.nn.LSTM), bf16 (fast_lstm.py, mixed "
                         "precision), auto (bf16 where the CPU multiplies bf16 in hardware, else f32)")
    ap.add_argument("--crop-silence", type=int, default=0, metavar="N",
                    help="training-only: cut each utterance to 10..N frames of silence before and after its speech, "
                         "drawn every epoch (0: off; crop_silence)")
    ap.add_argument("--masks", type=int, default=0, help="SpecAugment-style masks; longest time mask in frames (0: off)")
    ap.add_argument("--aug-from", type=int, default=1,
                    help="first epoch (1-based) that uses --warp/--masks; earlier epochs are not augmented")
    ap.add_argument("--filler-label", action="store_true",
                    help="train out-of-vocabulary filler words as a CTC label of their own, " + FILLER +
                         " (exported last in labels.txt; decoders leave it out of the transcript)")
    ap.add_argument("--init", default="", help="start from this exported model directory (a second stage)")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="run only the first N epochs of the --epochs schedule (0: all; how a cut-short stage is repeated)")
    ap.add_argument("--valid", default="valid",
                    help="validation splits for model selection, comma-separated (their words pooled), e.g. valid,rvalid")
    ap.add_argument("--keep-epochs", default="", metavar="DIR",
                    help="also export every epoch's model to DIR/e01, DIR/e02, ... (for average.py)")
    args = ap.parse_args()
    torch.set_num_threads(1 if args.procs > 1 else args.threads)
    t_start = time.time()
    if args.filler_label:
        use_filler_label()

    if (args.final_epochs > 0) != bool(args.final_data) or not 0 <= args.final_epochs <= args.epochs:
        sys.exit(f"train.py: --final-data and --final-epochs go together, with 0 < --final-epochs <= --epochs "
                 f"(got --final-data '{args.final_data}', --final-epochs {args.final_epochs}, --epochs {args.epochs})")
    if not 0.0 <= args.warp_share <= 1.0:
        sys.exit(f"train.py: --warp-share is a share of the utterances, in [0, 1]; got {args.warp_share}")
    if args.crop_silence and args.crop_silence < 10:
        sys.exit(f"train.py: --crop-silence keeps 10..N frames of silence, so N is 0 (off) or at least 10; "
                 f"got {args.crop_silence}")
    if args.matmul != "f32" and args.dropout > 0:
        sys.exit(f"train.py: --matmul {args.matmul} (fast_lstm.py) has no dropout; got --dropout {args.dropout}")
    main_dirs = (args.train_data or args.data).split(",")
    final_dirs = args.final_data.split(",") if args.final_data else []
    loaded = {d: load(args.speech, d, "train", args.named_only, args.running_mean)
              for d in dict.fromkeys(main_dirs + final_dirs)}
    train = loaded[main_dirs[0]]
    for d, items in loaded.items():  # renderings of one split: the same utterances, word for word, in one order
        if [(it[3]["id"], it[3]["words"]) for it in items] != [(it[3]["id"], it[3]["words"]) for it in train]:
            sys.exit(f"train.py: {d}'s train split is not a rendering of {main_dirs[0]}'s (other utterances or words)")
    renderings = ([loaded[d] for d in main_dirs], [loaded[d] for d in final_dirs])
    valid_parts = [(split, load(args.speech, args.data, split, running_mean=args.running_mean))
                   for split in args.valid.split(",")]
    valid = [it for _, part in valid_parts for it in part]
    allf = np.concatenate([it[0] for it in train])
    mean, std = allf.mean(0).astype(np.float64), allf.std(0).astype(np.float64) + 1e-3
    print(f"train: {len(train)} utterances, {len(allf)} frames ({len(allf) / 360000:.2f} h); valid: {len(valid)}; "
          f"features {time.time() - t_start:.0f} s", flush=True)
    hours = len(allf) / 360000
    del allf
    if args.procs == 1:
        fit(0, args, renderings, valid_parts, mean, std, hours, t_start)
    else:  # forked, so the processes share the loaded features
        with socket.socket() as sock:  # a free port on the loopback for the processes to meet
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        try:
            torch.multiprocessing.start_processes(fit, (args, renderings, valid_parts, mean, std, hours, t_start, port),
                                                  nprocs=args.procs, start_method="fork")
        except torch.multiprocessing.ProcessExitedException as e:  # its own message, if any, is printed above
            sys.exit(f"train.py: {e}")


def epoch_items(renderings, rng):
    """The train split of one epoch: each utterance from one of its renderings, drawn uniformly (one
    rendering: no draw, so a single --train-data trains exactly as before renderings existed)."""
    if len(renderings) == 1:
        return renderings[0]
    return [renderings[rng.randrange(len(renderings))][i] for i in range(len(renderings[0]))]


def crop_silence(items, most, stack, crng):
    """Training-only: each utterance with speech cut to a random 10..`most` frames (at most what it has) before
    its first and after its last speech frame, the start kept on the stacking grid; utterances without speech
    stay whole. The silence around an utterance is over a third of its frames (lead 0.1-0.8 s, trail 0.3-0.8 s,
    make_data.py), and the recurrent products cost per frame. Twenty-ninth round (docs/SPEECH.md): 16 epochs at
    40 took a quarter off each epoch and reached what 12 uncropped epochs did, at the same compute."""
    out = []
    for f, tgt, v, r, c in items:
        on = np.flatnonzero(v)
        if len(on) == 0:
            out.append((f, tgt, v, r, c))
            continue
        a = max(0, on[0] - int(crng.integers(10, most + 1))) // stack * stack
        b = min(len(f), on[-1] + 1 + int(crng.integers(10, most + 1)))
        out.append((f[a:b], tgt, v[a:b], r, c[a:b]))
    return out


def fit(rank, args, renderings, valid_parts, mean, std, hours, t_start, port=0):
    """Trains (process `rank` of args.procs) and exports the model (process 0)."""
    train = renderings[0][0]
    rendering_rng = random.Random(args.seed + 1)  # its own stream: the batch order's draws stay as they were
    procs, lead = args.procs, rank == 0
    if procs > 1:
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=procs)
    torch.manual_seed(args.seed)  # the same initial model in every process
    rng = random.Random(args.seed)
    arng = np.random.default_rng(args.seed) if args.warp > 0 or args.masks > 0 else None
    mean32, std32 = mean.astype(np.float32), std.astype(np.float32)
    S = args.stack
    mean, std = np.tile(mean, S), np.tile(std, S)  # per LSTM input, for export and --init

    net = Net(args.hidden, args.layers, N_MELS * S, args.dropout)
    net.matmul = torch.bfloat16 if args.matmul == "bf16" or (args.matmul == "auto" and fast_lstm.bf16_matmul_is_fast()) \
        else torch.float32
    if args.dropout > 0 and rank > 0:  # each process its own dropout masks (process 0 draws those of --procs 1)
        torch.manual_seed(args.seed + 1000 * rank)
    previous = None
    if args.init:  # continue from an exported model: unfold the normalisation that export folded in
        w = {f[:-4]: np.load(os.path.join(args.init, f)).astype(np.float64)
             for f in os.listdir(args.init) if f.endswith(".npy")}
        sd = net.state_dict()
        h0 = w["weight_hh_l0"].shape[1]
        rm_path = os.path.join(args.init, "features.txt")
        init_rm = int(open(rm_path).read().split()[1]) if os.path.exists(rm_path) else 0
        if init_rm != args.running_mean:
            sys.exit(f"train.py: {args.init} was trained with --running-mean {init_rm}, not {args.running_mean}")
        if w["weight_ih_l0"].shape[1] != N_MELS * S:
            sys.exit(f"train.py: {args.init} takes {w['weight_ih_l0'].shape[1]} inputs, not {N_MELS * S} (--stack {S})")
        if w["output.bias"].shape[0] != K + 1:
            sys.exit(f"train.py: {args.init} has {w['output.bias'].shape[0] - 1} labels, not {K}"
                     + (" (--filler-label)" if FILLER_ID else ""))
        if h0 > args.hidden:
            sys.exit(f"train.py: {args.init} has hidden size {h0}, more than --hidden {args.hidden}")
        for name in sd:
            if name.startswith("lstm."):
                v = w[name[len("lstm."):]]
                if name == "lstm.weight_ih_l0":
                    v = v * std[None, :]
                if name == "lstm.bias_ih_l0":
                    v = v + w["weight_ih_l0"] @ mean
                sd[name] = torch.from_numpy(widen(v, sd[name].numpy(), h0, args.hidden, name).astype(np.float32))
            elif name.startswith("output."):
                sd[name] = torch.from_numpy(widen(w[name], sd[name].numpy(), h0, args.hidden, name).astype(np.float32))
        net.load_state_dict(sd)
        with open(os.path.join(args.init, "training.json")) as f:
            previous = json.load(f)
        wer, parts = validate(net, valid_parts, mean32, std32, S, rank, procs)
        if lead:
            print(f"continuing from {args.init} (hidden {h0} -> {args.hidden}): valid word error rate "
                  f"{100 * wer:.2f}% " + " ".join(f"{split} {100 * r:.2f}%" for split, r in parts.items()), flush=True)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    steps = args.epochs * ((len(train) + args.batch - 1) // args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.15)
    best, best_state, history = 2.0, None, []

    def settings(history, wer):  # training.json
        return {"labels": LAB, "filler_label": FILLER_ID is not None, "hidden": args.hidden, "layers": args.layers, "stack": S,
                "named_only": args.named_only, "running_mean": args.running_mean, "epochs": args.epochs,
                "stop_after": args.stop_after, "batch": args.batch, "lr": args.lr, "seed": args.seed, "threads": args.threads,
                "procs": procs, "train_data": ",".join(os.path.basename(os.path.normpath(d))
                                                     for d in (args.train_data or args.data).split(",")),
                "final_data": ",".join(os.path.basename(os.path.normpath(d)) for d in args.final_data.split(",") if d),
                "final_epochs": args.final_epochs,
                "warp": args.warp, "warp_share": args.warp_share, "masks": args.masks, "crop_silence": args.crop_silence,
                "dropout": args.dropout,
                "matmul": str(net.matmul).replace("torch.", ""), "aug_from": args.aug_from, "frame_weight": args.frame_weight,
                "train_utterances": len(train), "train_hours": round(hours, 2),
                "valid": args.valid, "valid_wer": round(wer, 4), "history": history, "torch": torch.__version__,
                "minutes": round((time.time() - t_start) / 60, 1), "init": args.init and os.path.basename(
                    os.path.normpath(args.init)), "previous_stage": previous}

    def save(state, history, what):  # exported on every improvement, so a cut-short run leaves its best model
        net_state = {k: v.clone() for k, v in net.state_dict().items()}
        net.load_state_dict(state)
        export(net, mean, std, args.out, settings(history, best), args.running_mean)
        net.load_state_dict(net_state)
        print(f"exported ({what}) to {os.path.abspath(args.out)}: best valid word error rate {100 * best:.2f}%, "
              f"{(time.time() - t_start) / 60:.1f} min in all", flush=True)
    if 0 < len(train) % args.batch < procs:
        sys.exit(f"train.py: the last batch ({len(train) % args.batch} utterances) is smaller than --procs {procs}")
    for epoch in range(min(args.epochs, args.stop_after) if args.stop_after > 0 else args.epochs):
        t0, total, n = time.time(), 0.0, 0
        final = epoch >= args.epochs - args.final_epochs if args.final_epochs else False
        train = epoch_items(renderings[1] if final else renderings[0], rendering_rng)
        if args.crop_silence:  # its own generator, the same in every process: the other draws stay as they were
            train = crop_silence(train, args.crop_silence, S, np.random.default_rng([args.seed, 2, epoch]))
        for idx in batches(train, args.batch, rng):
            aug = arng if epoch + 1 >= args.aug_from else None
            # Every process draws every utterance's augmentation, in batch order, and keeps its share.
            feats = [augment(train[i][0], aug, args.warp, args.masks, args.warp_share) for i in idx] if aug else None
            mine = slice(rank * len(idx) // procs, (rank + 1) * len(idx) // procs)
            x, lens, targets, tlens, vad, mask, cls = collate(train, idx[mine], mean32, std32, S, feats and feats[mine])
            counts = torch.stack([mask.sum(), (cls != -100).sum().float()])  # model steps, labelled ones
            if procs > 1:
                dist.all_reduce(counts)  # the whole batch's, which normalise the losses as in one process
            out, frames = net(x)
            logp = out[:, :, :K].log_softmax(-1)
            ctc = F.ctc_loss(logp, targets, lens, tlens, blank=0, reduction="sum", zero_infinity=True) / len(idx)
            bce = (F.binary_cross_entropy_with_logits(out[:, :, K], vad, reduction="none") * mask).sum() / counts[0]
            ce = F.cross_entropy(frames.reshape(-1, K), cls.reshape(-1), ignore_index=-100, reduction="sum") / counts[1]
            loss = ctc + 0.2 * bce + args.frame_weight * ce
            opt.zero_grad()
            loss.backward()
            terms = torch.stack([loss, ctc, bce, ce]).detach()
            if procs > 1:  # the batch's gradient and loss: the sums of the processes' shares, in one message
                grads = [p.grad for p in net.parameters()] + [terms]
                flat = torch.cat([g.reshape(-1) for g in grads])
                dist.all_reduce(flat)
                for g, part in zip(grads, flat.split([g.numel() for g in grads])):
                    g.copy_(part.view_as(g))
            torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            opt.step()
            sched.step()
            total += terms[0].item()
            n += 1
            if n % 100 == 0 and lead:
                print(f"  step {n}: ctc {terms[1].item():.3f}, speech {terms[2].item():.3f}, frames {terms[3].item():.3f} "
                      f"({time.time() - t0:.0f} s)", flush=True)
        wer, parts = validate(net, valid_parts, mean32, std32, S, rank, procs)
        parts = {split: round(r, 4) for split, r in parts.items()}
        if not lead:
            continue
        history.append({"epoch": epoch + 1, "loss": round(total / n, 4), "valid_wer": round(wer, 4),
                        "seconds": round(time.time() - t0, 1), **({"valid_parts": parts} if parts else {})})
        print(f"epoch {epoch + 1}/{args.epochs}: loss {total / n:.4f}, valid word error rate {100 * wer:.2f}% "
              f"{parts if parts else ''}({time.time() - t0:.0f} s)", flush=True)
        if args.keep_epochs:  # every epoch's model, exported the same way, for averaging (average.py)
            export(net, mean, std, os.path.join(args.keep_epochs, f"e{epoch + 1:02d}"), settings(history, wer),
                   args.running_mean)
        if wer <= best:
            best, best_state = wer, {k: v.clone() for k, v in net.state_dict().items()}
            save(best_state, history, "best so far")
    # No export at all if no epoch ran or no epoch's validation error reached the initial best (200%): say so,
    # rather than fail on the missing state.
    failed = lead and best_state is None
    if lead and not failed:
        net.load_state_dict(best_state)
        save(best_state, history, "final")
    if procs > 1:
        dist.destroy_process_group()
    if failed:
        sys.exit(f"train.py: no model exported to {os.path.abspath(args.out)}: "
                 + (f"no epoch's validation word error rate was at or below {100 * best:.0f}% (the lowest: "
                    f"{100 * min(h['valid_wer'] for h in history):.2f}%)" if history else "no epoch ran"))


if __name__ == "__main__":
    main()
