#!/bin/sh
# The recipe of the model bundled until the sixth round (2x192 at 10 ms steps, 85.28% test word accuracy;
# docs/SPEECH.md). It exports to samples/speech/model/ and so replaces the bundled model: keep a copy.
# Retrains the speech sample from scratch, reproducibly (seeded throughout):
#   1. builds build/deeprnn-speech (its --features-only mode featurises the data)
#   2. synthesises the previous data set (named espeak-ng voice variants only) into
#      samples/speech/train/data/named/ and trains stages 1-3 on it
#   3. synthesises the current data set (mostly random voices, more filler words; and rvalid, held-out
#      random voices for validation) into samples/speech/train/data/ and trains stages 4-6 on it, from
#      the stage-3 model, then widens the model to 2x192 and trains stages 7-8; exports to
#      samples/speech/model/
#   4. writes the bundled demo recording samples/speech/demo.wav + demo.txt
#   5. evaluates with the C++ program: samples/speech/train/results.json
# Needs: tools/install-deps speech-train. Takes about 3.7 hours on 2 busy cores (see docs/SPEECH.md).
# Run from anywhere: samples/speech/train/train_10ms.sh
set -eu
. "$(dirname "$0")/setup.sh"  # $here, $root (the working directory), dependencies, build/deeprnn-speech
named="$here/data/named"
/usr/bin/python3 "$here/make_data.py" --jobs 2 --named-only --train 10000 --splits train,valid --data "$named"
# Stages 1-3 (named voices): 14 epochs from scratch; 8 more from the exported stage-1 model; then 24 more
# from the stage-2 model with mel warping and SpecAugment-style masks (unseen voices).
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --data "$named" --out "$here/data/stage1"
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --data "$named" --init "$here/data/stage1" \
    --epochs 8 --lr 2e-3 --out "$here/data/stage2"
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --data "$named" --init "$here/data/stage2" \
    --epochs 24 --lr 2e-3 --warp 0.12 --masks 8 --out "$here/data/stage3"
# Stages 4-6: the current data (a random voice for 75% of training utterances), from the stage-3 model:
# 14 epochs (peak 2e-3), then 8 more at peak 1e-3, then 6 more at peak 5e-4.
/usr/bin/python3 "$here/make_data.py" --jobs 2
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --init "$here/data/stage3" \
    --epochs 14 --batch 64 --lr 2e-3 --warp 0.1 --masks 8 --out "$here/data/stage4"
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --init "$here/data/stage4" \
    --epochs 8 --batch 64 --lr 1e-3 --warp 0.1 --masks 8 --out "$here/data/stage5"
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --init "$here/data/stage5" \
    --epochs 6 --batch 64 --lr 5e-4 --warp 0.1 --masks 8 --out "$here/data/stage6"
# Stages 7-8: the stage-6 model widened to 2x192 (function-preserving: the new units start cut off from the
# old ones and from the output), selected on valid + rvalid (held-out random voices): the first 2 epochs
# of a 12-epoch schedule at peak 1e-3 (that run was cut short for time), then 5 epochs at peak 5e-4.
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --init "$here/data/stage6" --hidden 192 \
    --epochs 12 --stop-after 2 --batch 64 --lr 1e-3 --warp 0.1 --masks 8 --valid valid,rvalid --out "$here/data/stage7"
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --init "$here/data/stage7" --hidden 192 \
    --epochs 5 --batch 64 --lr 5e-4 --warp 0.1 --masks 8 --valid valid,rvalid
/usr/bin/python3 "$here/make_demo.py"
/usr/bin/python3 "$here/evaluate.py" --speech build/deeprnn-speech
