#!/usr/bin/env bash
# plot.sh RESULTS.csv OUTDIR — draws OUTDIR/bench_hidden.png and OUTDIR/bench_batch.png
# from deeprnn_bench's CSV with gnuplot: median latency of each implementation
# (and the roofline floor) against hidden size (DeepCPU Table 1, input 64,
# batch 1, 100 steps) and against batch size (input = hidden = 256, 100 steps),
# one panel per cell and thread count.
set -euo pipefail
csv=$1
out=$2
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
impls="deeprnn framework onednn-any onednn-ldigo"

# series NAME X-COLUMN CONDITION: one file per cell, thread count and implementation
# holding "x median_ms" sorted by x; the floor comes from the deeprnn rows.
series() {
    local name=$1 xcol=$2 cond=$3
    awk -F, -v dir="$data" -v name="$name" -v xcol="$xcol" "NR > 1 && \$2 ~ /^t1-/ && \$18 == \"\" && ($cond) {
        base = dir \"/\" name \"_\" \$1 \"_\" \$8 \"_\"
        print \$xcol, \$10 > (base \$9 \".dat\")
        if (\$9 == \"deeprnn\") print \$xcol, \$15 > (base \"floor.dat\")
    }" "$csv"
    for f in "$data/$name"_*.dat; do sort -n -o "$f" "$f"; done
}
series hidden 4 '$3 == 64 && $5 == 1 && $6 == 100'
series batch 5 '$3 == 256 && $4 == 256 && $6 == 100'

# panels NAME XLABEL TITLE XAXIS: a 2x2 grid (LSTM, GRU) x (1 thread, 2 threads).
panels() {
    gnuplot <<EOF
set terminal pngcairo size 1200,900 font "sans,10"
set output "$out/bench_$1.png"
set datafile separator " "
set multiplot layout 2,2 title "$3 (median of interleaved samples; lower is better)"
set logscale xy
$4
set xlabel "$2"
set ylabel "ms per forward pass"
set grid
set key bottom right opaque box
impls = "$impls"
do for [cell in "lstm gru"] {
  do for [thr in "1 2"] {
    set title sprintf("%s, %s thread%s", cell, thr, thr eq "1" ? "" : "s")
    plot for [impl in impls] sprintf("$data/$1_%s_%s_%s.dat", cell, thr, impl) using 1:2 with linespoints title impl, \
         sprintf("$data/$1_%s_%s_floor.dat", cell, thr) using 1:2 with lines dashtype 2 lc "black" title "roofline floor"
  }
}
unset multiplot
EOF
}
panels hidden "hidden size (input 64, batch 1, 100 steps)" "Latency vs hidden size" \
    "set xrange [40:1600]; set xtics (64, 256, 1024)"
panels batch "batch size (input = hidden = 256, 100 steps)" "Latency vs batch size" \
    "set xrange [0.8:25]; set xtics (1, 2, 5, 10, 20)"
echo "plots: $out/bench_hidden.png, $out/bench_batch.png"
