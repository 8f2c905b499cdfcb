#!/usr/bin/python3
"""Trains the chatbot sample's attention encoder-decoder and exports it for deeprnn.

Model (docs/CHATBOT.md): a shared token embedding (E); a bidirectional GRU
encoder (hidden He/2 per direction, outputs He); a bridge tanh(Linear) from the
encoder's two final states to the decoder's initial state; a GRU decoder whose
step is exactly deeprnn::DecoderState::step:
    context = additive_attention(h_{t-1}, encoder outputs, masked by length)
    h_t     = GRU([embedding(previous token) ; context], h_{t-1})
    logits  = out([h_t ; context])
Trained with teacher forcing and cross-entropy, Adam, one thread.

Export (OUT, default samples/chatbot/model/), PyTorch names, one .npy each:
  encoder/weight_ih_l0.npy ... (bidirectional GRU)   decoder/weight_ih_l0.npy ... (GRU)
  embedding.weight, bridge.weight, bridge.bias, attn_query.weight, attn_query.bias,
  attn_keys.weight, attn_v, out.weight, out.bias; vocab.txt; training.json;
  check/: a few test pairs with PyTorch's teacher-forced logits, for
  `deeprnn-chat --check` (C++ logits against PyTorch's on the same weights).
  /usr/bin/python3 train.py [--data DIR] [--out DIR] [--epochs N] [--minutes M]
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_data import tokenize  # noqa: E402

PAD, BOS, EOS = 0, 1, 2


class Seq2Seq(torch.nn.Module):
    def __init__(self, V, E, He, Hd, A):
        super().__init__()
        self.embedding = torch.nn.Embedding(V, E)
        self.encoder = torch.nn.GRU(E, He // 2, bidirectional=True)
        self.bridge = torch.nn.Linear(He, Hd)
        self.decoder = torch.nn.GRU(E + He, Hd)
        self.attn_query = torch.nn.Linear(Hd, A)
        self.attn_keys = torch.nn.Linear(He, A, bias=False)
        self.attn_v = torch.nn.Parameter(torch.empty(A).uniform_(-0.1, 0.1))
        self.out = torch.nn.Linear(Hd + He, V)

    def encode(self, src, lengths):  # src [S, B]
        packed = torch.nn.utils.rnn.pack_padded_sequence(self.embedding(src), lengths, enforce_sorted=False)
        y, h = self.encoder(packed)
        enc, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=src.shape[0])
        h0 = torch.tanh(self.bridge(torch.cat([h[0], h[1]], dim=1)))  # [B, Hd]
        return enc, h0

    def step(self, tok, h, enc, keys, mask):  # tok [B], h [B, Hd], enc [S, B, He], keys [S, B, A]
        scores = torch.tanh(keys + self.attn_query(h)[None]) @ self.attn_v  # [S, B]
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=0)
        ctx = (w[:, :, None] * enc).sum(0)
        y, h = self.decoder(torch.cat([self.embedding(tok), ctx], 1)[None], h[None])
        return self.out(torch.cat([y[0], ctx], 1)), h[0], w

    def forward(self, src, lengths, tgt_in):  # teacher forcing: logits [T, B, V]
        enc, h = self.encode(src, lengths)
        keys = self.attn_keys(enc)
        mask = torch.arange(src.shape[0])[:, None] < lengths[None]
        out = []
        for t in range(tgt_in.shape[0]):
            logits, h, _ = self.step(tgt_in[t], h, enc, keys, mask)
            out.append(logits)
        return torch.stack(out)


def load(path, vocab):
    index = {w: i for i, w in enumerate(vocab)}
    pairs = []
    for line in open(path):
        req, rep = line.rstrip("\n").split("\t")
        pairs.append(([index[t] for t in tokenize(req, index)], [index[t] for t in tokenize(rep, index)] + [EOS]))
    return pairs


def batch(pairs):
    S, T = max(len(p[0]) for p in pairs), max(len(p[1]) for p in pairs)
    src = torch.full((S, len(pairs)), PAD, dtype=torch.long)
    tgt = torch.full((T + 1, len(pairs)), PAD, dtype=torch.long)
    tgt[0] = BOS
    for b, (s, t) in enumerate(pairs):
        src[:len(s), b] = torch.tensor(s)
        tgt[1:len(t) + 1, b] = torch.tensor(t)
    return src, torch.tensor([len(p[0]) for p in pairs]), tgt


def save(out, name, tensor):
    path = os.path.join(out, name + ".npy")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, tensor.detach().numpy().astype(np.float32))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "model"))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--minutes", type=float, default=9.0, help="stop after this much training time")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    vocab = open(os.path.join(a.data, "vocab.txt")).read().split()
    train, test = load(os.path.join(a.data, "train.tsv"), vocab), load(os.path.join(a.data, "test.tsv"), vocab)
    sizes = dict(V=len(vocab), E=48, He=128, Hd=128, A=64)
    model = Seq2Seq(**sizes)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = time.time()
    for epoch in range(a.epochs):
        random.shuffle(train)
        train.sort(key=lambda p: len(p[0]) + random.random() * 4)  # similar lengths per batch
        batches = [train[i:i + 64] for i in range(0, len(train), 64)]
        random.shuffle(batches)
        total = 0.0
        for group in batches:
            src, lengths, tgt = batch(group)
            logits = model(src, lengths, tgt[:-1])
            loss = F.cross_entropy(logits.reshape(-1, len(vocab)), tgt[1:].reshape(-1), ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            total += loss.item()
        for g in opt.param_groups:
            g["lr"] *= 0.75
        print(f"epoch {epoch + 1}: loss {total / len(batches):.4f}, {time.time() - start:.0f} s", flush=True)
        if time.time() - start > a.minutes * 60:
            break

    model.eval()
    out = os.path.abspath(a.out)
    for name, p in model.encoder.named_parameters():
        save(out, "encoder/" + name, p)
    for name, p in model.decoder.named_parameters():
        save(out, "decoder/" + name, p)
    for name in ["embedding.weight", "bridge.weight", "bridge.bias", "attn_query.weight", "attn_query.bias",
                 "attn_keys.weight", "attn_v", "out.weight", "out.bias"]:
        save(out, name, dict(model.named_parameters())[name])
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    # Teacher-forced logits of a few test pairs, for deeprnn-chat --check.
    os.makedirs(os.path.join(out, "check"), exist_ok=True)
    with torch.no_grad():
        for i, pair in enumerate(test[:4]):
            src, lengths, tgt = batch([pair])
            np.save(os.path.join(out, "check", f"{i}_src.npy"), src[:, 0].numpy().astype(np.int32))
            np.save(os.path.join(out, "check", f"{i}_tgt.npy"), tgt[:, 0].numpy().astype(np.int32))
            save(out, f"check/{i}_logits", model(src, lengths, tgt[:-1])[:, 0])
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump({"sizes": sizes, "epochs": epoch + 1, "seconds": round(time.time() - start),
                   "final_loss": round(total / len(batches), 5), "seed": a.seed}, f, indent=1)
    print(f"train: exported to {out}")


if __name__ == "__main__":
    main()
