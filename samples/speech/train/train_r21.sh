#!/bin/sh
# The twenty-first round's run (docs/SPEECH-HISTORY.md): train.sh's two training stages at --hidden ${HIDDEN:-448}
# with bf16 products and the C cell step (fast_lstm.py, lstm_cell.c), into data/r21-$HIDDEN/, or at
# --stack ${STACK:-3} (10 ms frames a model step) into data/r21-${HIDDEN}s${STACK} when STACK is set,
# with --layers ${LAYERS:-2} (suffix l$LAYERS on the directory when LAYERS is set), and with ${EPOCHS:-24} epochs
# of stage 2 (suffix e$EPOCHS when EPOCHS is set; the thirtieth round's run, train.sh's recipe at 2x448:
# HIDDEN=448 STACK=4 EPOCHS=16).
# Each stage's wall time is in OUT/t0..t2 (seconds since the epoch). Needs train.sh's data (data/, data-joined/).
set -eu
. "$(dirname "$0")/setup.sh"
hidden=${HIDDEN:-448}
out="$here/data/r21-$hidden${STACK:+s$STACK}${LAYERS:+l$LAYERS}${EPOCHS:+e$EPOCHS}"
common="--speech build/deeprnn-speech --stack ${STACK:-3} --hidden $hidden --layers ${LAYERS:-2} --running-mean 300 --procs 2 --matmul auto"
mkdir -p "$out"
date +%s > "$out/t0"
/usr/bin/python3 "$here/train.py" $common --named-only --epochs 12 --batch 16 --lr 3e-3 --frame-weight 3 \
    --valid valid,rvalid --out "$out/stage1"
date +%s > "$out/t1"
/usr/bin/python3 "$here/train.py" $common --init "$out/stage1" --train-data "$here/data-joined" --epochs ${EPOCHS:-24} --batch 64 \
    --lr 2e-3 --warp 0.18 --masks 8 --valid valid,rvalid --out "$out/stage2" --keep-epochs "$out/epochs"
date +%s > "$out/t2"
