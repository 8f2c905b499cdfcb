#!/bin/sh
# The twentieth round's runs (docs/SPEECH-HISTORY.md):
#   train_r20.sh        train.sh's two training stages with the LSTM's products in bfloat16 where the CPU
#                       multiplies bf16 in hardware (--matmul auto, fast_lstm.py), into data/r20/
#   train_r20.sh wide   then stage 2 alone at hidden 384 from that stage 1 (train.py widens it), into data/r20w/
# Each stage's wall time is in OUT/t0..t2 (seconds since the epoch). Needs train.sh's data (data/, data-joined/).
set -eu
. "$(dirname "$0")/setup.sh"
common="--speech build/deeprnn-speech --stack 3 --running-mean 300 --procs 2 --matmul auto"
stage2="--train-data $here/data-joined --epochs 24 --batch 64 --lr 2e-3 --warp 0.18 --masks 8 --valid valid,rvalid"
if [ "${1:-}" = wide ]; then
    out="$here/data/r20w"
    mkdir -p "$out"
    date +%s > "$out/t1"
    /usr/bin/python3 "$here/train.py" $common --hidden 384 --init "$here/data/r20/stage1" $stage2 \
        --out "$out/stage2" --keep-epochs "$out/epochs"
    date +%s > "$out/t2"
    exit 0
fi
out="$here/data/r20"
mkdir -p "$out"
date +%s > "$out/t0"
/usr/bin/python3 "$here/train.py" $common --hidden 320 --named-only --epochs 12 --batch 16 --lr 3e-3 --frame-weight 3 \
    --valid valid,rvalid --out "$out/stage1"
date +%s > "$out/t1"
/usr/bin/python3 "$here/train.py" $common --hidden 320 --init "$out/stage1" $stage2 --out "$out/stage2" \
    --keep-epochs "$out/epochs"
date +%s > "$out/t2"
