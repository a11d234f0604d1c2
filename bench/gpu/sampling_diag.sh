#!/usr/bin/env bash
# GPU check of llm/top_k_top_p_sampling_from_logits (about 90 s on one GPU):
#  1. test_kernels_gpu on this task only: the reference and the example solution on every case
#     small enough for the float64 oracle, judged by the sampling checker with values revealed
#     (a failure names the row, the token and the reason);
#  2. the server path that failed on 2026-12-02 (test_gpu_corpus, reference scored against
#     itself): `crucible eval` scores REPEATS copies of the reference and one of the example
#     solution for each seed in SEEDS (the hidden cases' inputs are fixed by their seeds, so the
#     copies repeat them; the seeds change the visible cases), and every sample's correctness
#     runs are summarised: passed of checked, and each failing run's case, run and problems.
# The fix is confirmed when step 1 reports no failure and every sample of step 2 is `ok` with
# 28 of 28 correctness runs passed.
# Run from the repository root on the GPU machine with the binaries in .bundle/ (as
# bench/gpu/device_run.sh does): bash bench/gpu/sampling_diag.sh. Output goes to
# $OUT/sampling_diag (and the summary to stdout).
set -uo pipefail
OUT=${OUT:-/tmp/crucible-out}
R=$OUT/sampling_diag
mkdir -p "$R"
TASK=llm/top_k_top_p_sampling_from_logits
REPEATS=${REPEATS:-2}
SEEDS=${SEEDS:-1 7}
cuda_lib=/usr/local/cuda-13.0/targets/x86_64-linux/lib
libs="$PWD/.bundle/lib:$cuda_lib:/usr/local/cuda/lib64"
run() { LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
# The binaries were built in /work/main: give them that path here, and their build/dev/bin
# (only where there is none: a checkout with its own build keeps it).
if [ "$PWD" != /work/main ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
[ -e build/dev/bin ] || { mkdir -p build/dev && ln -s ../../.bundle/bin build/dev/bin; }
B=${B:-.bundle/bin}
step() { echo; echo "=== $* ($(date -u +%T))"; }

step "test_kernels_gpu, $TASK only"
CRUCIBLE_GPU_TASKS=$TASK run timeout 40 "$B/test_kernels_gpu" \
  -tc="*every reference and example solution*" > "$R/references.txt" 2>&1
echo "exit $?"
grep -E "top_k_top_p|ERROR|test cases|assertions" "$R/references.txt" | tail -30

for seed in $SEEDS; do
  step "crucible eval: $REPEATS x reference + example solution, seed $seed"
  python3 - "$R/samples_$seed.jsonl" "$REPEATS" <<'EOF'
import json, sys
path, repeats = sys.argv[1], int(sys.argv[2])
task = "llm/top_k_top_p_sampling_from_logits"
reference = open("kernels/" + task + ".cu").read()
solution = open("tasks/" + task + "/solution.cu").read()
with open(path, "w") as out:
    for i in range(repeats):
        out.write(json.dumps({"task": task, "source": reference, "meta": {"what": f"reference {i + 1}"}}) + "\n")
    out.write(json.dumps({"task": task, "source": solution, "meta": {"what": "example solution"}}) + "\n")
EOF
  rm -rf "$R/eval_$seed"
  run timeout 60 "$B/crucible" --home "$PWD" eval "$R/samples_$seed.jsonl" -t "$TASK" \
    --seed "$seed" -j 1 --compile-workers 2 --time-cap-ms 20 -o "$R/eval_$seed" \
    > "$R/eval_$seed.txt" 2>&1
  echo "exit $?"
  python3 - "$R/eval_$seed/results.jsonl" <<'EOF'
import json, sys
try:
    lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
except OSError as e:
    sys.exit(f"no results: {e}")
for r in lines:
    c = r.get("result", {}).get("correctness", {}) or {}
    print(f'{r.get("meta", {}).get("what", "?"):18} {r["status"]:12} correctness '
          f'{c.get("passed", "?")}/{c.get("checked", "?")} of {c.get("total", "?")}  '
          f'{r.get("message", "")[:160]}')
    for run in c.get("runs", []):
        if not run.get("pass", True):
            print(f'    failed: {run.get("case")} run {run.get("run")}: {run.get("problems")}')
EOF
done
