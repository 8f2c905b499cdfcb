#!/bin/sh
# The twenty-third round's run (docs/SPEECH-HISTORY.md): wider voice coverage in the random training voices.
# Regenerates train.sh's joined training split into data-r23/ with a share of the random voices drawing
# F1-F3 independently (WIDE, default 0.2) and a share drawing their prosody (STRESS, default 0.5: vowel
# lengths, amplitudes, intonation), then runs train.sh's stage 2 at 2x448 on it from the twenty-first
# round's stage 1 (data/r21-448/stage1, which train.sh's first stage reproduces bit for bit: stage 1 trains
# on the named voices only, which these options do not change), into data/r23-$WIDE-$STRESS/.
# Validation is on data/'s valid and rvalid, unchanged. Wall times (seconds since the epoch) in OUT/t0..t2.
set -eu
. "$(dirname "$0")/setup.sh"
wide=${WIDE:-0.2}
stress=${STRESS:-0.5}
seed=${SEED:-8}
train="$here/data-r23-$wide-$stress"
out="$here/data/r23-$wide-$stress"
[ "$seed" = 8 ] || out="$out-s$seed"
mkdir -p "$out"
date +%s > "$out/t0"
[ -f "$train/train.jsonl" ] || /usr/bin/python3 "$here/make_data.py" --data "$train" --splits train --paused-train 0.35 \
    --wide-formants "$wide" --stress-share "$stress" --jobs 2
common="--speech build/deeprnn-speech --stack 3 --hidden 448 --running-mean 300 --procs 2 --matmul auto"
date +%s > "$out/t1"
/usr/bin/python3 "$here/train.py" $common --init "$here/data/r21-448/stage1" --train-data "$train" --epochs 24 \
    --batch 64 --lr 2e-3 --seed "$seed" --warp 0.18 --masks 8 --valid valid,rvalid --out "$out/stage2" \
    --keep-epochs "$out/epochs"
date +%s > "$out/t2"
