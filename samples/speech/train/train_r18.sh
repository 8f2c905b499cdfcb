#!/bin/sh
# The eighteenth round's experiment (docs/SPEECH-HISTORY.md, "Eighteenth round"): train.sh's stage 1, then two
# stage-2 variants side by side (--procs 1 each, one per core), each otherwise as train.sh's stage 2:
#   mixed/: every epoch draws each utterance's rendering from data-joined/ (35% paused) or data/ (60%)
#   final/: data-joined/ for 18 epochs, then data/'s renderings for the last 6
# Measured (eighteenth round, Xeon VM): stage 1 19.0 min, stage 2 24 epochs of 158-193 s each, side by side;
# pooled valid + rvalid (C++ program) final 89.47%, mixed 88.86% against the bundled 89.96%: not bundled.
# Writes to samples/speech/train/data/r18/ (not to the bundled model). To score a variant:
#   evaluate.py --model samples/speech/train/data/r18/mixed --out samples/speech/train/data/r18/mixed.json
# Run from anywhere: samples/speech/train/train_r18.sh
set -eu
. "$(dirname "$0")/setup.sh"  # $here, $root (the working directory), dependencies, build/deeprnn-speech
[ -f "$here/data/noise.jsonl" ] || /usr/bin/python3 "$here/make_data.py" --jobs 2
[ -f "$here/data-joined/train.jsonl" ] || /usr/bin/python3 "$here/make_data.py" --data "$here/data-joined" \
    --splits train --paused-train 0.35 --jobs 2
out="$here/data/r18"
common="--speech build/deeprnn-speech --stack 3 --hidden 320 --running-mean 300"
/usr/bin/python3 "$here/train.py" $common --procs 2 --named-only --epochs 12 --batch 16 --lr 3e-3 --frame-weight 3 \
    --valid valid,rvalid --out "$out/stage1"
stage2="$common --procs 1 --init $out/stage1 --epochs 24 --batch 64 --lr 2e-3 --warp 0.18 --masks 8 --valid valid,rvalid"
/usr/bin/python3 "$here/train.py" $stage2 --train-data "$here/data-joined,$here/data" \
    --out "$out/mixed" --keep-epochs "$out/mixed-epochs" > "$out/mixed.log" 2>&1 &
/usr/bin/python3 "$here/train.py" $stage2 --train-data "$here/data-joined" --final-data "$here/data" --final-epochs 6 \
    --out "$out/final" --keep-epochs "$out/final-epochs" > "$out/final.log" 2>&1 &
wait
