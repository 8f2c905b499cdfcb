#!/bin/sh
# Regenerates the chatbot sample's model: data, training (~6 minutes on one
# core), export to samples/chatbot/model/, then the evaluation through the C++
# program. Needs PyTorch (apt-get install python3-torch python3-numpy).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
/usr/bin/python3 "$here/make_data.py"
/usr/bin/python3 "$here/train.py" "$@"
make -C "$root" --no-print-directory build/deeprnn-chat
/usr/bin/python3 "$here/evaluate.py"
