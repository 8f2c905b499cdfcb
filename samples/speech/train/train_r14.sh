#!/bin/sh
# The fourteenth round's experiment (docs/SPEECH-HISTORY.md, "Fourteenth round"): train.sh's recipe with an
# explicit filler label (train.py --filler-label: every out-of-vocabulary filler word is a CTC target of
# its own, <filler>, which the decoders leave out of the transcript), in both stages; everything else
# as train.sh. Writes to samples/speech/train/data/r14/ (not to the bundled model).
# Measured (fourteenth round): 80.3 minutes wall (20.0 + 60.3) on the 2-core machine shared with a CI
# run's compiles; stage 2's best epoch 87.20% pooled valid + rvalid (89.12% / 85.26%) against the
# bundled model's 88.66%, test 90.74% against 92.37%: worse, not bundled. To score it:
#   evaluate.py --model samples/speech/train/data/r14/stage2 --out samples/speech/train/data/r14/results.json
# Run from anywhere: samples/speech/train/train_r14.sh
set -eu
. "$(dirname "$0")/setup.sh"  # $here, $root (the working directory), dependencies, build/deeprnn-speech
[ -f "$here/data/noise.jsonl" ] || /usr/bin/python3 "$here/make_data.py" --jobs 2
out="$here/data/r14"
common="--speech build/deeprnn-speech --stack 3 --hidden 320 --running-mean 300 --procs 2 --filler-label"
/usr/bin/python3 "$here/train.py" $common --named-only --epochs 12 --batch 16 --lr 3e-3 --frame-weight 3 \
    --valid valid,rvalid --out "$out/stage1"
/usr/bin/python3 "$here/train.py" $common --init "$out/stage1" --epochs 24 --batch 64 --lr 2e-3 \
    --warp 0.18 --masks 8 --valid valid,rvalid --out "$out/stage2" --keep-epochs "$out/epochs"
