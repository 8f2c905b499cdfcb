#!/usr/bin/env bash
# update_docs.sh DIR [deeprnn_bench options...]
# Runs the suite (binaries in DIR), redraws docs/bench_*.png and replaces the
# generated part of docs/BENCHMARKS.md (between the results:begin/end markers).
# The prose around it is written by hand: re-read it against the new numbers.
set -euo pipefail
dir=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
doc=$root/docs/BENCHMARKS.md
grep -q '<!-- results:begin -->' "$doc" && grep -q '<!-- results:end -->' "$doc" ||
    { echo "update_docs: $doc lacks the results markers" >&2; exit 1; }
"$root/bench/run_suite.sh" "$dir" "$@"
"$root/bench/plot.sh" "$dir/results.csv" "$root/docs"
awk -v table="$dir/results.md" '
    /<!-- results:begin -->/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
    /<!-- results:end -->/ { skip = 0 }
    !skip { print }' "$doc" > "$doc.tmp"
mv "$doc.tmp" "$doc"
echo "updated: $doc"
