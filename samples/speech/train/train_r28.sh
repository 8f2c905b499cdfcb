#!/bin/sh
# The twenty-eighth round's runs (docs/SPEECH.md, "What is left"): fresh training utterances for the bundled 2x512
# model at 40 ms steps. RUN selects one; each starts from the twenty-sixth round's run (data/r21-512s4/, which
# `HIDDEN=512 STACK=4 train_r21.sh` makes: train.sh's stage 1 and stage 2):
#   RUN=s3same   a stage 3 on stage 2's own data (data-joined/): 8 epochs at peak 5e-4      -> data/r28-s3a/
#   RUN=s3fresh  the same stage 3 on 12,000 utterances stage 2 never saw (data-new/, train-12000..23999,
#                make_data.py --first 12000)                                                 -> data/r28-s3b/
#   RUN=union16  stage 2 again from stage 1, on both (data-union/: 24,000 utterances, data-joined/ and
#                data-new/ linked together) for 16 epochs: the same updates as s3fresh's 24 + 8 -> data/r28-u16/
# data-new/ is what `make_data.py --data data-joined --train 24000 --paused-train 0.35` would add to data-joined/
# (utterance N is drawn from its own seeded generator, whatever the split's size). Each run's wall time is in
# OUT/t0..t1 (seconds since the epoch).
set -eu
. "$(dirname "$0")/setup.sh"
run=${RUN:?RUN=s3same, s3fresh or union16}
src="$here/data/r21-512s4"
common="--speech build/deeprnn-speech --stack 4 --hidden 512 --running-mean 300 --procs 2 --matmul auto"
aug="--warp 0.18 --masks 8 --valid valid,rvalid"
new="$here/data-new"
[ "$run" = s3same ] || [ -f "$new/train.jsonl" ] || /usr/bin/python3 "$here/make_data.py" --data "$new" --splits train \
    --train 12000 --first 12000 --paused-train 0.35 --jobs 2
if [ "$run" = union16 ] && [ ! -f "$here/data-union/train.jsonl" ]; then
    u="$here/data-union"
    mkdir -p "$u/wav/train" "$u/feat-rm300/train"
    cat "$here/data-joined/train.jsonl" "$new/train.jsonl" > "$u/train.jsonl"
    for d in "$here/data-joined" "$new"; do
        find "$d/wav/train" -name '*.wav' -exec ln -sf -t "$u/wav/train" {} +
        [ ! -d "$d/feat-rm300/train" ] || find "$d/feat-rm300/train" -name '*.npy' -exec ln -sf -t "$u/feat-rm300/train" {} +
    done
fi
case "$run" in
    s3same) out="$here/data/r28-s3a"; args="--init $src/stage2 --train-data $here/data-joined --epochs 8 --lr 5e-4" ;;
    s3fresh) out="$here/data/r28-s3b"; args="--init $src/stage2 --train-data $new --epochs 8 --lr 5e-4" ;;
    union16) out="$here/data/r28-u16"; args="--init $src/stage1 --train-data $here/data-union --epochs 16 --lr 2e-3" ;;
    *) echo "train_r28.sh: RUN=$run is not s3same, s3fresh or union16" >&2; exit 2 ;;
esac
stage=stage3
[ "$run" != union16 ] || stage=stage2
mkdir -p "$out"
date +%s > "$out/t0"
# shellcheck disable=SC2086
/usr/bin/python3 "$here/train.py" $common $args --batch 64 $aug --out "$out/$stage" --keep-epochs "$out/epochs"
date +%s > "$out/t1"
