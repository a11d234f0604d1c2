#!/usr/bin/env bash
# Runs the GPU suites and benchmarks on the GPU machine, from the repository root, with the
# binaries carried in .bundle/ (see bench/README.md). Results go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/crucible-out}
mkdir -p "$OUT"
cuda_lib=/usr/local/cuda-13.0/targets/x86_64-linux/lib
# Only crucible's own programs get the carried libraries (python3 and ncu keep the system's).
libs="$PWD/.bundle/lib:$cuda_lib:/usr/local/cuda/lib64"
run() { LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
# The binaries were built in /work/main: give them that path here, and their build/dev/bin.
if [ "$PWD" != /work/main ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
mkdir -p build/dev && ln -sfn ../../.bundle/bin build/dev/bin
B=.bundle/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
date -u +%Y-%m-%dT%H:%M:%SZ > "$OUT/date.txt"

step() { echo; echo "=== $*"; }
step test_kernels_gpu
run timeout 120 $B/test_kernels_gpu 2>&1 | tail -4 | tee "$OUT/test_kernels_gpu.txt"
step test_gpu_corpus
run timeout 420 $B/test_gpu_corpus 2>&1 | grep -v "^20[0-9][0-9]-" | tee "$OUT/test_gpu_corpus.txt" | tail -40
if [ "${1:-}" != "tests-only" ]; then
  step crucible-bench-gpu
  run timeout 400 $B/crucible-bench-gpu --home "$PWD" --steps 10 --json "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.txt"
  step "crucible-bench-gpu, fast timing"
  run timeout 300 $B/crucible-bench-gpu --home "$PWD" --steps 10 --time-cap-ms 150 --json "$OUT/gpu_bench_fast.json" 2>&1 | tee "$OUT/gpu_bench_fast.txt"
  [ "${1:-}" = "no-ncu" ] && exit 0
  step "CUPTI vs ncu"
  run timeout 60 $B/crucible-kernel-timing --reps 200 > "$OUT/cupti.json"
  LD_LIBRARY_PATH="$libs" timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:rms \
    $B/crucible-kernel-timing --no-cupti --reps 200 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  python3 bench/gpu/compare_ncu.py "$OUT/cupti.json" "$OUT/ncu.csv" "$OUT/ncu_compare.json"
fi
