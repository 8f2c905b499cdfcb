#!/bin/sh
# Retrains the speech sample from scratch, reproducibly (seeded throughout):
#   1. builds build/deeprnn-speech (its --features-only mode featurises the data)
#   2. synthesises the data with espeak-ng + sox into samples/speech/train/data/
#   3. trains the LSTM with PyTorch (three stages) and exports it to samples/speech/model/
#   4. writes the bundled demo recording samples/speech/demo.wav + demo.txt
#   5. evaluates with the C++ program: samples/speech/train/results.json
# Needs: tools/install-deps speech-train. Takes about 1.5 hours on 2 busy cores (see docs/SPEECH.md).
# Run from anywhere: samples/speech/train/train.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"
tools/install-deps speech-train
make --no-print-directory build/deeprnn-speech
# One PyTorch thread and one BLAS thread: on a shared 2-core machine more threads spin and run slower.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
/usr/bin/python3 "$here/make_data.py"
# Three stages: 14 epochs from scratch; 8 more from the exported stage-1 model; then 24 more from
# the stage-2 model with mel warping and SpecAugment-style masks (unseen voices).
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --out "$here/data/stage1"
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --init "$here/data/stage1" --epochs 8 --lr 2e-3 \
    --out "$here/data/stage2"
/usr/bin/python3 "$here/train.py" --speech build/deeprnn-speech --init "$here/data/stage2" --epochs 24 --lr 2e-3 \
    --warp 0.12 --masks 8
/usr/bin/python3 "$here/make_demo.py"
/usr/bin/python3 "$here/evaluate.py" --speech build/deeprnn-speech
