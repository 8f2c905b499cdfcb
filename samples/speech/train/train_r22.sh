#!/bin/sh
# The twenty-second round's run (docs/SPEECH-HISTORY.md): train.sh's stage 2 at 2x448 with a wider warp on a share of
# the utterances (WARP, default 0.25, on SHARE, default 0.6, of them), from the twenty-first round's stage 1
# (data/r21-448/stage1, which train.sh's first stage reproduces bit for bit), into data/r22-$WARP-$SHARE/
# (SEED, default 8 as train.sh: stage 2's batch order and augmentation draws; other seeds add -s$SEED).
# Stage 2's wall time is in OUT/t1..t2 (seconds since the epoch).
set -eu
. "$(dirname "$0")/setup.sh"
warp=${WARP:-0.25}
share=${SHARE:-0.6}
seed=${SEED:-8}
out="$here/data/r22-$warp-$share"
[ "$seed" = 8 ] || out="$out-s$seed"
common="--speech build/deeprnn-speech --stack 3 --hidden 448 --running-mean 300 --procs 2 --matmul auto"
mkdir -p "$out"
date +%s > "$out/t1"
/usr/bin/python3 "$here/train.py" $common --init "$here/data/r21-448/stage1" --train-data "$here/data-joined" --epochs 24 \
    --batch 64 --lr 2e-3 --seed "$seed" --warp "$warp" --warp-share "$share" --masks 8 --valid valid,rvalid --out "$out/stage2" \
    --keep-epochs "$out/epochs"
date +%s > "$out/t2"
