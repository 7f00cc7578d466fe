#!/usr/bin/env bash
# On the GPU machine: where a batch-1 round's time goes, kernel by kernel (fma, 4-bit g32, real shape;
# docs/receipts/cuda-decode-batch1.md "Session 14: ncu of a batch-1 round"). nsys (if present; the H200 had
# none in session 14): every kernel node of the graphs with start/end; ncu: per-kernel occupancy, DRAM
# throughput and warp stalls from launch SKIP (default 700: inside the second round) on, COUNT kernels (the
# 240 s timeout stopped session 14's at 30, about one and a half layers). Kernels are profiled one at a time
# (no programmatic overlap), so durations are each kernel's alone.
# FAMILY=tensor profiles the tensor family instead of fma.
# Usage: DS_PREBUILT=.dev/X/prebuilt.tar.xz tools/device/cuda_round_profile.sh (bundle_prebuilt.sh; carry .dev/X)
set -uo pipefail
out=${OUT:-/tmp/out}/prof; mkdir -p "$out"
b=/tmp/pb; [ -x $b/cuda_model_check ] || { mkdir -p $b && tar -xJf "${DS_PREBUILT:-.dev/X/prebuilt.tar.xz}" -C $b; }
export LD_LIBRARY_PATH=$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
cfg=${BENCH_CONFIG:-.dev/X/flashnext-large-config.json}
bench="$b/cuda_model_check . --no-checks --lean-bench --bench $cfg --encoding 4:32 --streams 1 --mtp-reps 0"
t0=$(date +%s); say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
say "nsys: ${NSYS:-none}; ncu: $(command -v ncu || echo none)"
if [ -n "$NSYS" ]; then
  DS_CUDA_DECODE_PRODUCTS=${FAMILY:-fma} timeout 150 $NSYS profile --cuda-graph-trace=node -t cuda -o /tmp/round --force-overwrite true \
    $bench --rounds 4 > "$out/nsys-run.log" 2>&1; say "nsys rc=$?"
  timeout 60 $NSYS stats -r cuda_gpu_trace -f csv -o /tmp/trace /tmp/round.nsys-rep > "$out/nsys-stats.log" 2>&1
  say "nsys stats rc=$?"; ls /tmp/trace* >> "$out/summary.txt" 2>&1
  f=$(ls /tmp/trace*.csv 2>/dev/null | head -1); [ -n "$f" ] && tail -n 3000 "$f" | xz -9 > "$out/trace-tail.csv.xz"
fi
DS_CUDA_DECODE_PRODUCTS=${FAMILY:-fma} timeout 240 ncu --clock-control none -k "regex:^(?!fill_)" --launch-skip ${SKIP:-700} --launch-count ${COUNT:-60} \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis \
  -o /tmp/ncu_round $bench --rounds 3 > "$out/ncu-run.log" 2>&1; say "ncu rc=$?"
ncu --import /tmp/ncu_round.ncu-rep --page details --csv 2>/dev/null | xz -9 > "$out/ncu-details.csv.xz"
ncu --import /tmp/ncu_round.ncu-rep --page raw --csv --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread 2>/dev/null > "$out/ncu-raw.csv"
say "ncu export done: $(wc -l < "$out/ncu-raw.csv") rows"
