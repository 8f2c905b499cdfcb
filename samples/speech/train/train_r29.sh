#!/bin/sh
# The twenty-ninth round's runs (docs/SPEECH.md, "What is left"): can the bundled recipe (train.sh: 2x512 at 40 ms
# steps, stage 2 on the 24,000 utterances of data-joined/) spend less compute for the hour? RUN selects one; each
# is train.sh's stage 2 from train.sh's own stage 1 (data/rm300/stage1, which a run of train.sh leaves), changed
# as named:
#   RUN=e12   12 epochs instead of 16                                                       -> data/r29-e12/
#             (the round ran this one as train.sh itself, end to end, into data/rm300/stage2)
#   RUN=crop  16 epochs, each utterance cut every epoch to 10..40 frames of silence before and after its
#             speech (train.py --crop-silence 40: about 30% fewer frames an epoch)         -> data/r29-crop/
#   RUN=e16   16 epochs, unchanged: train.sh's stage 2 from this stage 1                    -> data/r29-e16/
# Each run's wall time is in OUT/t0..t1 (seconds since the epoch).
set -eu
. "$(dirname "$0")/setup.sh"
run=${RUN:?RUN=e12, crop or e16}
common="--speech build/deeprnn-speech --stack 4 --hidden 512 --running-mean 300 --procs 2 --matmul auto"
case "$run" in
    e12) args="--epochs 12" ;;
    crop) args="--epochs 16 --crop-silence 40" ;;
    e16) args="--epochs 16" ;;
    *) echo "train_r29.sh: RUN=$run is not e12, crop or e16" >&2; exit 2 ;;
esac
out="$here/data/r29-$run"
[ -f "$here/data/rm300/stage1/training.json" ] || { echo "train_r29.sh: run train.sh first (its stage 1)" >&2; exit 2; }
mkdir -p "$out"
date +%s > "$out/t0"
# shellcheck disable=SC2086
/usr/bin/python3 "$here/train.py" $common --init "$here/data/rm300/stage1" --train-data "$here/data-joined" $args \
    --batch 64 --lr 2e-3 --warp 0.18 --masks 8 --valid valid,rvalid --out "$out/stage2" --keep-epochs "$out/epochs"
date +%s > "$out/t1"
