#!/usr/bin/env bash
# cache_traffic.sh — weight traffic per step, counted by valgrind's cachegrind
# (docs/BENCHMARKS.md, "Weight traffic per step (cachegrind)").
#
#   bench/cache_traffic.sh BUILD_DIR [options]     (make bench-cache CACHE_ARGS='...')
#
# BUILD_DIR holds cache_traffic (make build/bench/cache/cache_traffic). For every
# hidden size and implementation it runs one process per sequence length under
# cachegrind, with the simulated hierarchy set to one Zen 5 core (D1 48 KiB 12-way,
# LL = the core's L2, 1 MiB 16-way, 64 B lines), and divides the difference in
# read misses between the two lengths by the difference in steps: what grows with
# the sequence, i.e. the steady-state traffic of one step. Start-up, weight
# generation, packing and first touch are the same in both runs and cancel.
# Single-threaded by default (cachegrind simulates one cache for the whole process
# and runs threads one at a time). Markdown on stdout; raw counts in
# BUILD_DIR/cache_traffic.csv. A benchmark: no assertion is made on the counts.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/cache_traffic.sh BUILD_DIR [options]
  --hidden LIST   hidden sizes, comma-separated; default 64,128,256,512
  --half-of LIST  also, for each H here, deeprnn with round(H/sqrt 2) hidden units: its W_hh has
                  the bytes of one worker's block when an H model is split over 2 workers
                  (G*(H/2)*H floats), a stand-in for one core of two; default 256,512; "" for none
  --seq T1,T2     the two sequence lengths; default 50,100
  --impl LIST     deeprnn,framework,onednn-any,onednn-ldigo (default; unavailable ones are skipped)
  --cell CELL     lstm (default) or gru
  --input E       input size; default 64
  --batch B       batch size; default 1
  --threads N     threads for every implementation; default 1 (see docs before raising it)
  --l2 BYTES      simulated LL size; default 1048576 (one Zen 5 core's L2)
EOF
}

[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
dir=$1; shift
hidden=64,128,256,512 half_of=256,512 seqs=50,100 impls=deeprnn,framework,onednn-any,onednn-ldigo
cell=lstm input=64 batch=1 threads=1 l2=1048576
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { usage >&2; exit 2; }
    case "$1" in
        --hidden) hidden=$2 ;; --half-of) half_of=$2 ;; --seq) seqs=$2 ;; --impl) impls=$2 ;;
        --cell) cell=$2 ;; --input) input=$2 ;; --batch) batch=$2 ;; --threads) threads=$2 ;; --l2) l2=$2 ;;
        *) usage >&2; exit 2 ;;
    esac
    shift 2
done
bin=$dir/cache_traffic
[ -x "$bin" ] || { echo "cache_traffic.sh: $bin not built (make $bin)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "cache_traffic.sh: valgrind not found (apt-get install valgrind)" >&2; exit 2; }
IFS=, read -r t1 t2 <<<"$seqs"
if [ -z "${t2:-}" ] || [ "$t2" -le "$t1" ]; then echo "cache_traffic.sh: --seq needs T1,T2 with T2 > T1" >&2; exit 2; fi
gates=4; [ "$cell" = gru ] && gates=3

# Hidden sizes to run: --hidden, plus round(H/sqrt 2) for --half-of, in increasing order.
declare -A stands_for=()
sizes=${hidden//,/ }
for h in ${half_of//,/ }; do
    hp=$(awk -v h="$h" 'BEGIN { printf "%d", h / sqrt(2) + 0.5 }')
    stands_for[$hp]=$h
    sizes="$sizes $hp"
done
sizes=$(tr ' ' '\n' <<<"$sizes" | grep . | sort -n -u | tr '\n' ' ')

out=$dir/cachegrind
mkdir -p "$out"
csv=$dir/cache_traffic.csv
echo "cell,input,hidden,batch,seq,threads,impl,Ir,Dr,D1mr,DLmr,Dw,D1mw,DLmw" >"$csv"

# One process under cachegrind; prints "Ir Dr D1mr DLmr Dw D1mw DLmw" (or "n/a").
run_one() {  # impl hidden seq
    local file=$out/cg.$cell-$input-$2-$batch-$3.t$threads.$1.out rc=0
    OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
        valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=49152,12,64 --LL="$l2",16,64 \
        --cachegrind-out-file="$file" "$bin" --impl "$1" --cell "$cell" --input "$input" --hidden "$2" \
        --batch "$batch" --seq "$3" --threads "$threads" >"$file.log" 2>&1 || rc=$?
    if [ "$rc" = 3 ]; then echo n/a; return; fi
    [ "$rc" = 0 ] || { echo "cache_traffic.sh: $1 H=$2 T=$3 failed, see $file.log" >&2; exit 1; }
    # events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
    awk '/^summary:/ { print $2, $5, $6, $7, $8, $9, $10 }' "$file"
}

echo "**cache_traffic.sh**, $(date -u '+%Y-%m-%d %H:%M UTC'), $(valgrind --version)"
echo
echo "- command: \`bench/cache_traffic.sh $dir --hidden $hidden --half-of \"$half_of\" --seq $seqs --impl $impls --cell $cell --input $input --batch $batch --threads $threads --l2 $l2\`"
echo "- simulated: D1 48 KiB 12-way, LL $((l2 / 1024)) KiB 16-way, 64 B lines; one cache for the whole process"
valgrind --tool=none -q "$bin" --info | sed 's/^/- under valgrind: /'
echo "- per step = (count at T=$t2 - count at T=$t1) / $((t2 - t1)); misses are read misses (loads), x 64 B per line"
echo
echo "| cell E-H-B | W_hh | impl | weights the impl reads per step | D1 read misses / step | = KiB from L2 / step | LL read misses / step | = KiB from beyond L2 / step | beyond-L2 bytes / weight bytes |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
for h in $sizes; do
    whh=$((gates * h * h * 4))
    label="$cell $input-$h-$batch"
    run_impls=${impls//,/ }
    if [ -n "${stands_for[$h]:-}" ] && ! grep -qx deeprnn <<<"${impls//,/$'\n'}"; then continue; fi
    if [ -n "${stands_for[$h]:-}" ] && ! grep -qx "$h" <<<"${hidden//,/$'\n'}"; then
        # Only deeprnn's partition is known: all gates of H/2 units by all H inputs, same worker every step.
        label="$label = 1 worker of 2 at H=${stands_for[$h]}"
        run_impls=deeprnn
    fi
    for impl in $run_impls; do
        a=$(run_one "$impl" "$h" "$t1")
        [ "$a" = n/a ] && continue
        b=$(run_one "$impl" "$h" "$t2")
        for t in "$t1:$a" "$t2:$b"; do
            echo "$cell,$input,$h,$batch,${t%%:*},$threads,$impl,$(tr ' ' , <<<"${t#*:}")" >>"$csv"
        done
        case $impl in
            framework) weights=$((gates * h * (input + h) * 4)) ;;  # [x_t h] x [W_ih; W_hh] every step
            *) weights=$whh ;;                                      # W_ih once per sequence
        esac
        awk -v a="$a" -v b="$b" -v steps=$((t2 - t1)) -v label="$label" -v whh="$whh" -v impl="$impl" \
            -v weights="$weights" 'BEGIN {
            split(a, x, " "); split(b, y, " ")
            d1 = (y[3] - x[3]) / steps; ll = (y[4] - x[4]) / steps
            printf "| %s | %d KiB | %s | %d KiB | %.0f | %.0f | %.0f | %.1f | %.2f |\n", label, whh / 1024, impl,
                weights / 1024, d1, d1 * 64 / 1024, ll, ll * 64 / 1024, ll * 64 / weights
        }'
    done
done
echo
echo "Raw counts: $csv; cachegrind files: $out/ (cg_annotate FILE for a per-function breakdown)."
