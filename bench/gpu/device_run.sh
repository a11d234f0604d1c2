#!/usr/bin/env bash
# Runs the GPU suites, benchmarks and the logged-run replay on the GPU machine, from the
# repository root, with the binaries carried in .bundle/ (see bench/README.md).
#   device_run.sh [tests] [bench] [ncu] [trajectory] [parity] [variants] [throughput] [faults]
#                 [exportop] [model] [steps] [state] [seeds] [multigpu]
#                 (default: all but steps, state, seeds and multigpu)
# Figures and logs go to $OUT; everything is also packed into $OUT/results.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/crucible-out}
mkdir -p "$OUT/r"
parts=${*:-tests bench ncu trajectory parity variants throughput faults exportop model}
want() { [[ " $parts " == *" $1 "* ]]; }
cuda_lib=/usr/local/cuda-13.0/targets/x86_64-linux/lib
# Only crucible's own programs get the carried libraries (python3 and ncu keep the system's).
libs="$PWD/.bundle/lib:$cuda_lib:/usr/local/cuda/lib64"
run() { LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
# The binaries were built in /work/main: give them that path here, and their build/dev/bin.
if [ "$PWD" != /work/main ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
mkdir -p build/dev && ln -sfn ../../.bundle/bin build/dev/bin
B=.bundle/bin
R=$OUT/r
pack() { tar -C "$R" -czf "$OUT/results.tar.gz" .; }
# DEADLINE (seconds since the epoch): whatever this script still runs then is stopped and what
# was done is packed, so a command bounded by the device tool's limit still brings its results
# back; an invocation started past it does nothing. Several invocations in one command add to
# one $R.
watchdog=
# A process and every one below it, the parent first: this script's trap then runs as soon as
# the part it waits on ends (timeout runs its command in a process group of its own).
stop_tree() {
  local child children
  children=$(pgrep -P "$1")
  kill -TERM "$1" 2> /dev/null
  for child in $children; do [ "$child" = "$BASHPID" ] || stop_tree "$child"; done
}
if [ -n "${DEADLINE:-}" ]; then
  left=$((DEADLINE - $(date +%s)))
  if [ "$left" -le 5 ]; then echo "DEADLINE passed: skipping $parts"; exit 0; fi
  (sleep "$left"; echo "DEADLINE reached: stopping $parts"; stop_tree $$) &
  watchdog=$!
fi
trap 'exit 143' TERM
trap 'pack; [ -z "$watchdog" ] || kill "$watchdog" 2> /dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$R/gpu.txt"
date -u +%Y-%m-%dT%H:%M:%SZ > "$R/date.txt"
# cuBLASLt (the llm/linear reference) is loaded with dlopen from the library path above, or
# from $CRUCIBLE_CUBLASLT: say which copy this machine has.
ls -l $cuda_lib/libcublasLt.so.13 /usr/local/cuda/lib64/libcublasLt.so.13 2>&1 | tee "$R/cublaslt.txt"
step() { echo; echo "=== $* ($(date -u +%T))"; }
# FlashInfer, where carried (bench/gpu/flashinfer_carry.sh; carry [".whl"]): unpacked outside the
# tree, its JIT modules built from the start in the background (bench/gpu/flashinfer_build.py)
# while the steps before the parity harness run.
if [ -f .whl/flashinfer.tgz ]; then
  mkdir -p /tmp/flashinfer && tar xzf .whl/flashinfer.tgz -C /tmp/flashinfer
  export PYTHONPATH=/tmp/flashinfer${PYTHONPATH:+:$PYTHONPATH}
  export FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-workspace
  python3 bench/gpu/flashinfer_build.py > "$R/flashinfer_build.txt" 2>&1 &
fi

if want tests; then
  # TEST_SUITES picks some of the four suites (all by default); TASKS_CHECK=0 skips the last step.
  suites=${TEST_SUITES:-test_kernels_gpu test_runner_device test_gpu_corpus test_hacks}
  for suite in test_kernels_gpu test_runner_device; do
    [[ " $suites " == *" $suite "* ]] || continue
    step $suite
    run timeout 420 $B/$suite > "$R/$suite.txt" 2>&1
    echo "exit $?"; grep -E -A12 "ERROR" "$R/$suite.txt" | head -60; tail -3 "$R/$suite.txt"
  done
  for suite in test_gpu_corpus test_hacks; do
    [[ " $suites " == *" $suite "* ]] || continue
    step $suite
    # The server's log lines (stderr) go to their own file: written to the same pipe as the
    # table they could land inside one of its rows.
    run timeout 300 $B/$suite > "$R/$suite.txt" 2> "$R/$suite.log"
    echo "exit $?"; grep -E "^\| |^[a-z_]+ +[a-z_]+ +|ERROR|FAILED|test cases|assertions" "$R/$suite.txt" | tail -45
  done
  # Every task's checks, including scoring reference and example solution on this GPU.
  [ "${TASKS_CHECK:-1}" = 0 ] || {
  step "crucible tasks check --all"
  run timeout 300 $B/crucible --home "$PWD" tasks check --all > "$R/tasks_check.txt" 2>&1
  echo "tasks check exit $?" | tee -a "$R/tasks_check.txt"; tail -2 "$R/tasks_check.txt"; }
fi
if want bench; then
  # The default (a case is timed until its median's 95 % CI is within 1 %, at most 1 s), then
  # two shorter per-case budgets for throughput-bound training.
  for cap in ${BENCH_CAPS:-1000 100 30}; do
    step "crucible-bench-gpu, at most $cap ms per case"
    run timeout ${BENCH_TIMEOUT:-300} $B/crucible-bench-gpu --home "$PWD" --steps 10 --time-cap-ms $cap --json "$R/gpu_bench_cap$cap.json" 2>&1 | tee "$R/gpu_bench_cap$cap.txt" | tail -14
  done
fi
if want ncu; then
  # rms_norm_kernel as llm/rms_norm's reference launches it at 4096 tokens (128 threads). Run
  # after `throughput` with THROUGHPUT_UNDER_LOAD=1, the single steps' reference times of that
  # case (alone and beside the training mix) are held against ncu's too.
  step "CUPTI vs ncu"
  run timeout 60 $B/crucible-kernel-timing --threads 128 --reps 200 > "$R/cupti.json"
  LD_LIBRARY_PATH="$libs" timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:rms \
    $B/crucible-kernel-timing --no-cupti --threads 128 --reps 200 > "$R/ncu.csv" 2> "$R/ncu.err"
  steps=()
  [ -f "$R/throughput.json" ] && steps=("$R/throughput.json" prefill_4096)
  python3 bench/gpu/compare_ncu.py "$R/cupti.json" "$R/ncu.csv" "$R/ncu_compare.json" "${steps[@]}"
fi
if want trajectory; then
  cap=${TRAJECTORY_CAP_MS:-250}
  step "eval of the examples"
  run timeout 120 $B/crucible eval examples/trajectories/solutions.jsonl -o "$R/eval_examples" 2>&1 | tail -15
  step "logged run: serve + eval --server, $cap ms per case"
  python3 bench/gpu/trajectory_samples.py > "$R/samples.jsonl"
  run $B/crucible serve --bind tcp://127.0.0.1:55800 --log "$R/run.log" --time-cap-ms "$cap" > "$R/serve.txt" 2>&1 &
  server=$!
  sleep 4
  run timeout 400 $B/crucible eval "$R/samples.jsonl" --server tcp://127.0.0.1:55800 -j 1 -o "$R/eval_run" 2>&1 | tail -12
  kill -TERM $server; wait $server
  step "replay: re-measure every logged step"
  run timeout 400 $B/crucible replay "$R/run.log" --time-cap-ms "$cap" -j 1 --rows 20 -o "$R/replay.json" 2>&1 | tail -45
  step "replay --rescore with kevin"
  run $B/crucible replay "$R/run.log" --rescore --reward '{"preset": "kevin"}' -o "$R/rescore.json" --rows 5 2>&1 | tail -12
fi
if want parity; then
  step "reference parity: crucible's reference times, PyTorch eager and torch.compile"
  # PARITY_ANCHORS (e.g. "flashinfer") times only those anchors beside the reference.
  only="${PARITY_TASKS:+--tasks $PARITY_TASKS} ${PARITY_CASES:+--cases $PARITY_CASES}"
  only+="${PARITY_ANCHORS:+ --anchors $PARITY_ANCHORS}"
  CRUCIBLE_LIBRARY_PATH="$libs" python3 bench/gpu/parity.py --references "$R/refs.jsonl" $only
  run timeout 300 $B/crucible eval "$R/refs.jsonl" -o "$R/refs_eval" -j 1 2>&1 | tail -4
  CRUCIBLE_LIBRARY_PATH="$libs" PYTHONUNBUFFERED=1 timeout 400 python3 bench/gpu/parity.py \
    --crucible "$R/refs_eval/results.jsonl" --json "$R/parity.json" $only 2>&1 | tail -60
fi
if want variants; then
  step "reference design variants, each against its reference"
  # VARIANT_TASKS and VARIANT_NAMES (e.g. "reference pooled_lists") pick the variants.
  python3 bench/gpu/variants.py ${VARIANT_TASKS:+--tasks $VARIANT_TASKS} \
    ${VARIANT_NAMES:+--names $VARIANT_NAMES} > "$R/variants.jsonl"
  # VARIANT_TIME_CAP_MS shortens each timing case (eval's default: 1 s); VARIANT_TIMEOUT
  # bounds each eval. VARIANT_SEEDS scores them again on other draws of the visible cases
  # (eval --seed; seed 1, the default, goes to variants_eval, seed N to variants_eval_seedN).
  for seed in ${VARIANT_SEEDS:-1}; do
    dir=variants_eval; [ "$seed" = 1 ] || dir=variants_eval_seed$seed
    run timeout ${VARIANT_TIMEOUT:-300} $B/crucible eval "$R/variants.jsonl" -o "$R/$dir" -j 1 \
      --seed "$seed" ${VARIANT_TIME_CAP_MS:+--time-cap-ms $VARIANT_TIME_CAP_MS} 2>&1 | tail -2
  done
fi
if want seeds; then
  # Every reference (SEED_TASKS: some) scored as a sample on several draws of its visible cases
  # (SEEDS, default "1 2 3"; SEED_TIME_CAP_MS per timing case, default 100; SEED_TIMEOUT per
  # eval, default 240 s), one compile cache for all: bench/gpu/seed_spread.py's summary.
  step "references on several draws of their visible cases: ${SEEDS:-1 2 3}"
  CRUCIBLE_LIBRARY_PATH="$libs" python3 bench/gpu/seed_spread.py --references "$R/seed_refs.jsonl" \
    ${SEED_TASKS:+--tasks $SEED_TASKS}
  runs=()
  for seed in ${SEEDS:-1 2 3}; do
    run timeout ${SEED_TIMEOUT:-240} $B/crucible eval "$R/seed_refs.jsonl" -o "$R/seeds/$seed" \
      -j 1 --seed "$seed" --time-cap-ms "${SEED_TIME_CAP_MS:-100}" \
      --compile-cache "$R/seeds/cache" 2>&1 | tail -1
    runs+=("$seed=$R/seeds/$seed/results.jsonl")
  done
  python3 bench/gpu/seed_spread.py --json "$R/seed_spread.json" "${runs[@]}" 2>&1 | tail -30
  rm -rf "$R/seeds/cache"
fi
if want steps; then
  step "the sampling reference, step by step"
  timeout 300 python3 bench/gpu/sampling_steps.py --json "$R/sampling_steps.json" 2>&1 | tail -40
fi
if want state; then
  # The sampler's forms (one block a row), each row's state after every step on the GPU
  # (bench/gpu/sampling_state.py --gpu-only; STATE_VARIANTS, STATE_CASES): set beside their host
  # emulation (bench/results/sampling_state_host.json) with --compare afterwards.
  step "the sampling kernel's state per step on the GPU"
  timeout ${STATE_TIMEOUT:-300} python3 bench/gpu/sampling_state.py --gpu-only \
    --variants ${STATE_VARIANTS:-reference load_ahead pooled_lists reference_pooled wide_lists} \
    --cases ${STATE_CASES:-batch_8_qwen batch_32_llama flat_8_qwen} --json "$R/sampling_state.json" 2>&1 | tail -60
fi
if want throughput; then
  # The training mix (bench/gpu/training_mix.py) through one crucible serve at 1, 8 and 64
  # requests in flight, then single correct rms_norm steps. THROUGHPUT_SERVE_ARGS passes serve
  # options (e.g. "--time-cap-ms 100"); the server's defaults otherwise. THROUGHPUT_RUNNERS
  # ("1,4") compares runner processes per GPU, one server each; THROUGHPUT_UNDER_LOAD=1 adds
  # the single steps' speedup spread alone and with the mix in flight beside them.
  step "throughput: training mix at 1, 8 and 64 in flight ${THROUGHPUT_SERVE_ARGS:-}"
  CRUCIBLE_LIBRARY_PATH="$libs" PYTHONUNBUFFERED=1 timeout ${THROUGHPUT_TIMEOUT:-540} python3 bench/gpu/throughput.py \
    $B/crucible --count "${THROUGHPUT_COUNT:-200}" --single-steps "${THROUGHPUT_SINGLE:-20}" \
    --serve-args "${THROUGHPUT_SERVE_ARGS:-}" --work "$R/throughput" \
    --runners "${THROUGHPUT_RUNNERS:-}" ${THROUGHPUT_UNDER_LOAD:+--under-load} \
    --concurrency "${THROUGHPUT_CONCURRENCY:-1,8,64}" \
    --json "$R/throughput.json" 2>&1 | tee "$R/throughput.txt" | tail -30
  # The server's log and the evals' per-sample results stay; the big per-run files do not.
  find "$R/throughput" \( -name compile-cache -o -name 'single_*' -o -name report.html \) \
    -prune -exec rm -rf {} + 2>/dev/null || true
fi
if want faults; then
  # How long a fault takes to be reported (the deadline floor must stay above it).
  step "fault latency: traps and wild stores in example solutions"
  python3 bench/gpu/fault_latency.py --samples > "$R/faults.jsonl"
  run timeout 200 $B/crucible eval "$R/faults.jsonl" -o "$R/faults_eval" -j 1 2>&1 | tail -2
  python3 bench/gpu/fault_latency.py --results "$R/faults_eval/results.jsonl" --json "$R/fault_latency.json"
fi
if want multigpu; then
  # The training mix through one server on both GPUs and two servers behind a Pool, against one
  # GPU; one kernel rescored on each GPU; steady steps beside a hang and a crash (issue 23). The
  # Python client's packages travel as wheels (bench/gpu/fetch_wheels.sh .whl client).
  step "multi-GPU: the training mix on ${MULTI_GPU_GPUS:-0,1}"
  if ! python3 -c "import zmq, msgpack" 2> /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/client-site .whl/pyzmq-*.whl .whl/msgpack-*.whl
    export PYTHONPATH=/tmp/client-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  CRUCIBLE_LIBRARY_PATH="$libs" PYTHONUNBUFFERED=1 timeout ${MULTI_GPU_TIMEOUT:-540} python3 bench/gpu/multi_gpu.py \
    $B/crucible --gpus "${MULTI_GPU_GPUS:-0,1}" --count "${MULTI_GPU_COUNT:-200}" \
    --in-flight "${MULTI_GPU_IN_FLIGHT:-64}" --rescore "${MULTI_GPU_RESCORE:-20}" \
    --fault-steps "${MULTI_GPU_FAULT_STEPS:-15}" --work "$R/multi_gpu" \
    --json "$R/multi_gpu.json" 2>&1 | tee "$R/multi_gpu.txt" | tail -40
  find "$R/multi_gpu" -name compile-cache -prune -exec rm -rf {} + 2>/dev/null || true
fi
if want exportop; then
  # `crucible export-op`: references exported as PyTorch ops, held to the PyTorch composites.
  step "export-op: exported references against the composites"
  CRUCIBLE_LIBRARY_PATH="$libs" timeout ${EXPORTOP_TIMEOUT:-300} python3 bench/gpu/export_op_check.py \
    --json "$R/export_op.json" 2>&1 | tee "$R/export_op.txt" | tail -20
fi
if want model; then
  # The model check (docs/models.md): every task the Llama decode and prefill steps call, its
  # example solution and its own reference as candidates, judged inside the step of each model.
  samples="$R/model_samples"
  mkdir -p "$samples/llm"
  for task in ${MODEL_TASKS:-fused_add_rms_norm linear rotary_embedding reshape_and_cache_flash paged_decode_attention flash_attn_varlen_prefill silu_and_mul}; do
    cp "tasks/llm/$task/solution.cu" "$samples/llm/$task.cu"
    mkdir -p "$samples/llm/$task"
    reference=$(sed -n 's/^source *= *"\(.*\)"/\1/p' "tasks/llm/$task/task.toml" | head -1)
    [ -n "$reference" ] && cp "$reference" "$samples/llm/$task/reference.cu"
  done
  for model in ${MODEL_NAMES:-stories260K llama3_8b llama3_8b_prefill}; do
    step "eval --model $model"
    run timeout ${MODEL_TIMEOUT:-400} $B/crucible eval "$samples" --model "$model" -j 1 \
      --time-cap-ms ${MODEL_TIME_CAP_MS:-200} -o "$R/model_$model" 2>&1 | tail -25
    python3 bench/gpu/model_check_summary.py "$R/model_$model/results.jsonl" | tee "$R/model_$model.txt"
    # Only the records and the summary come back (the output folder's file count is limited).
    mv "$R/model_$model/results.jsonl" "$R/model_$model.jsonl"
    mv "$R/model_$model/summary.json" "$R/model_${model}_summary.json"
    rm -rf "$R/model_$model"
  done
  rm -rf "$samples"
fi
