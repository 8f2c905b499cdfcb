#!/usr/bin/env bash
# run_suite.sh DIR [deeprnn_bench options...]
# Runs DIR/deeprnn_bench and keeps its table in DIR/results.md and DIR/results.csv.
set -euo pipefail
dir=$1
shift
"$dir/deeprnn_bench" --csv "$dir/results.csv" "$@" | tee "$dir/results.md"
echo "results: $dir/results.md, $dir/results.csv"
