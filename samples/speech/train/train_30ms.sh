#!/bin/sh
# The fifth round's experiment (docs/SPEECH-HISTORY.md, "Fifth round"): a low-frame-rate model, 3 stacked 10 ms
# log-mel frames per LSTM step (30 ms steps), 2x192, trained from scratch in three stages:
#   1. 8 epochs on the named-voice utterances of the training data (--named-only), batch 32, peak 3e-3
#   2. 14 epochs on all of it from stage 1, batch 64, peak 2e-3, mel warping and masks, selected on
#      valid + rvalid (held-out random voices)
#   3. 8 more epochs at peak 1e-3 from stage 2
# It did not beat the bundled model on validation, so it writes to samples/speech/train/data/lfr/ and
# leaves samples/speech/model/ alone. About 22 minutes of data (skipped when present) and ~40 minutes of
# training on 2 busy cores.
# Run from anywhere: samples/speech/train/train_30ms.sh
set -eu
. "$(dirname "$0")/setup.sh"  # $here, $root (the working directory), dependencies, build/deeprnn-speech
[ -f "$here/data/rvalid.jsonl" ] || /usr/bin/python3 "$here/make_data.py" --jobs 2
out="$here/data/lfr"
common="--speech build/deeprnn-speech --stack 3 --hidden 192"
/usr/bin/python3 "$here/train.py" $common --named-only --epochs 8 --batch 32 --lr 3e-3 --out "$out/stage1"
/usr/bin/python3 "$here/train.py" $common --init "$out/stage1" --epochs 14 --batch 64 --lr 2e-3 \
    --warp 0.1 --masks 8 --valid valid,rvalid --out "$out/stage2"
/usr/bin/python3 "$here/train.py" $common --init "$out/stage2" --epochs 8 --batch 64 --lr 1e-3 \
    --warp 0.1 --masks 8 --valid valid,rvalid --out "$out/stage3"
/usr/bin/python3 "$here/sweep_floor.py" --speech build/deeprnn-speech --model "$out/stage3" --splits valid,rvalid --floors 0
