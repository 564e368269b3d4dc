#!/usr/bin/env bash
# scripts/gpu-check.sh [--dry-run | --list] [OUT]: everything a machine with an NVIDIA GPU can show about kvcache,
# in one run.
#
#   1. builds with the machine's own CUDA toolkit (nvcc on PATH, else /usr/local/cuda/bin) for the card's own
#      architecture (nvidia-smi's compute capability), Release, $JOBS jobs (default 16);
#   2. runs every CTest test of that build;
#   3. runs compute-sanitizer over every gpu-labelled test: memcheck (leak check included), racecheck (shared
#      memory hazards) and synccheck (barrier use);
#   3b. builds what the project ships, KVC_CUDA_ARCHITECTURES=all (SASS for every architecture nvcc lists plus
#      PTX of the lowest), lists its images (cuobjdump), and runs the gpu-labelled tests on it twice: as loaded
#      (the card's SASS) and with CUDA_FORCE_PTX_JIT=1 (the driver compiles the PTX: what a card newer than the
#      toolkit runs);
#   4. builds the Python package with the machine's python3 (torch and transformers already installed there)
#      from wheels in $KVC_WHEELS (default .gpu-wheels/, made beforehand by scripts/gpu-check-wheels.sh on a
#      machine with a network: SWIG, scikit-build-core, pytest, psutil), and runs its tests on torch CUDA
#      tensors (tests/test_gpu.py);
#   4b. captures CUDA graphs through torch of an offloaded cache's update and of a pool's step write and block
#      table, and replays them (tests/gpu/torch_graph_capture.py); where nvidia-smi lists two GPUs or more, checks
#      that a process using GPU 1 only holds no context on GPU 0 (tests/gpu/torch_two_gpu_contexts.py), else
#      prints that step as SKIPPED;
#   5. runs the GPU benchmarks (bench_gpu, then transformers' caches and the Python binding on the same GPU);
#      bench_gpu's gpu_rows_batch is the pool's step write (copy_rows_batch), whose bytes and alignment
#      test_gpu_backend_ops_cuda (step 2, and under memcheck in step 3) checks against the CPU backend.
#
# Every log, results.json (the bench rows plus one "gpu_check" row per step) and summary.txt go into OUT
# (default docs/gpu-runs/<date>/). Each step has a time limit; a step that fails or times out is recorded and the
# next one still runs. Steps 1 to 3 and 4 to 5 take about five minutes on an H100 or H200; step 3b's build for
# every architecture takes a few minutes more, and the sanitizers' racecheck and synccheck runs are slower than
# memcheck. Exit status: 0 when every step passed, 1 otherwise. Nothing here reaches the network.
#
# --dry-run (or --list) prints every step with its time limit, log and command, and runs nothing: no GPU,
# toolkit or build is needed for it (CTest's gpu_check_dry_run runs it, so the script cannot rot unseen).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dry=0
case "${1:-}" in
  --dry-run | --list) dry=1; shift ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "gpu-check: unknown option $1 (--dry-run, --list, --help)" >&2; exit 2 ;;
esac
out="${1:-$root/docs/gpu-runs/$(date -u +%Y-%m-%d)}"
jobs="${JOBS:-16}"
wheels="${KVC_WHEELS:-$root/.gpu-wheels}"
build="$root/build-gpu-check"
build_all="$root/build-gpu-check-all"
failed=0
if [ "$dry" -eq 1 ]; then
  summary=/dev/null steps_json=/dev/null
  echo "gpu-check --dry-run: the steps a run would take (logs in $out)"
else
  mkdir -p "$out"
  out="$(cd "$out" && pwd)"
  summary="$out/summary.txt"
  : >"$summary"
  steps_json="$out/steps.jsonl"
  : >"$steps_json"
fi

say() { echo "$*" | tee -a "$summary"; }

# step NAME LIMIT_SECONDS LOG COMMAND...: runs COMMAND with its output in OUT/LOG, records status and seconds.
# Under --dry-run it prints the step and returns 0.
step() {
  local name="$1" limit="$2" log="$out/$3"
  shift 3
  if [ "$dry" -eq 1 ]; then
    printf 'step %-28s limit %4ss  log %s\n    %s\n' "$name" "$limit" "$(basename "$log")" "$*"
    return 0
  fi
  local t0 rc t1
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(python3 -c "print(round($t1 - $t0, 1))")
  local status=passed
  [ "$rc" -eq 0 ] || status=failed
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && status="timed out after ${limit}s"
  [ "$rc" -eq 0 ] || failed=1
  say "$(printf '%-22s %-24s %6ss  (%s)' "$name" "$status" "$secs" "$(basename "$log")")"
  printf '{"bench": "gpu_check", "impl": "%s", "metric": "exit_status", "value": %d, "unit": "rc"}\n' "$name" "$rc" >>"$steps_json"
  printf '{"bench": "gpu_check", "impl": "%s", "metric": "seconds", "value": %s, "unit": "s"}\n' "$name" "$secs" >>"$steps_json"
  return "$rc"
}

# ---- the machine ---------------------------------------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
nvcc_path="$(command -v nvcc || true)"
sanitizer="$(command -v compute-sanitizer || true)"
[ -n "$sanitizer" ] || [ ! -x /usr/local/cuda/bin/compute-sanitizer ] || sanitizer=/usr/local/cuda/bin/compute-sanitizer
arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1 || true
  echo "nvcc: ${nvcc_path:-none}"; [ -z "$nvcc_path" ] || nvcc --version | tail -n2
  echo "compute-sanitizer: ${sanitizer:-none}"
  echo "python3: $(command -v python3) $(python3 -c 'import sys; print(sys.version.split()[0])')"
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "| transformers", transformers.__version__)' 2>&1
  echo "cmake: $(cmake --version | head -n1)"
} >"$([ "$dry" -eq 1 ] && echo /dev/null || echo "$out/machine.txt")" 2>&1
if [ "$dry" -eq 1 ]; then
  nvcc_path="${nvcc_path:-nvcc}" sanitizer="${sanitizer:-compute-sanitizer}" arch="${arch:-<compute capability of the card>}"
else
  say "gpu-check: $(head -n2 "$out/machine.txt" | tr '\n' ' ')"
  say "logs in $out"
  if [ -z "$nvcc_path" ] || [ -z "$arch" ]; then
    say "gpu-check: needs nvcc (PATH or /usr/local/cuda/bin) and a GPU that nvidia-smi reports (see machine.txt)"
    exit 1
  fi
fi
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"

# ---- 1. build ------------------------------------------------------------------------------------------------
step build 240 build.log bash -c "
  cmake -G Ninja -S '$root' -B '$build' -DCMAKE_BUILD_TYPE=Release -DKVC_CUDA=ON -DKVC_HIP=OFF \
        -DCMAKE_CUDA_COMPILER='$nvcc_path' -DKVC_CUDA_ARCHITECTURES='$arch' &&
  cmake --build '$build' -j '$jobs'" || { say "gpu-check: the build failed; nothing else can run"; exit 1; }
export KVC_BACKEND_PATH="$build"

# ---- 2. every CTest test -------------------------------------------------------------------------------------
step ctest 240 ctest.log ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 200 \
  --output-junit "$out/ctest-junit.xml"
[ "$dry" -eq 1 ] || grep -E "tests passed|SKIPPED|Not Run|\*\*\*" "$out/ctest.log" | tee -a "$summary" >/dev/null
# On this machine a skipped CUDA test means the plugin could not reach the card: that is a failure here.
if [ "$dry" -eq 0 ] && grep -qE "test_gpu_[a-z_]+_cuda .*Skipped" "$out/ctest.log"; then
  say "ctest: CUDA tests were SKIPPED on a machine with a GPU (see ctest.log for the reason)"
  failed=1
fi

# ---- 3. compute-sanitizer over the gpu-labelled tests --------------------------------------------------------
# gpu_tests BUILD: one line per gpu-labelled test of BUILD: its environment (the CTest ENVIRONMENT property), a
# tab, its command. Under --dry-run (no build yet) one placeholder line.
gpu_tests() {
  if [ "$dry" -eq 1 ]; then
    printf 'KVC_BACKEND_PATH=%s\t%s\n' "$1" "$1/tests/gpu/<each-gpu-labelled-test>"
    return
  fi
  ctest --test-dir "$1" -L '^gpu$' --show-only=json-v1 2>/dev/null | python3 -c '
import json, shlex, sys
for t in json.load(sys.stdin).get("tests", []):
    env = [v for p in t.get("properties", []) if p["name"] == "ENVIRONMENT" for v in p["value"]]
    print(shlex.join(env) + "\t" + shlex.join(t["command"]))'
}
# memcheck with the leak check; racecheck: shared-memory hazards between a block's threads; synccheck: barriers
# reached by part of a block, or with a mask that leaves threads out.
sanitizer_args() {
  case "$1" in
    memcheck) echo "--tool memcheck --leak-check full" ;;
    racecheck) echo "--tool racecheck --racecheck-report hazard" ;;
    synccheck) echo "--tool synccheck" ;;
  esac
}
if [ -n "$sanitizer" ]; then
  list="${TMPDIR:-/tmp}/gpu-check-tests.$$"
  [ "$dry" -eq 1 ] || list="$out/gpu-tests.txt"
  gpu_tests "$build" >"$list"
  for tool in memcheck racecheck synccheck; do
    while IFS=$'\t' read -r env cmd; do
      [ -n "$cmd" ] || continue
      name="$(basename "${cmd%% *}")"
      step "$tool:$name" 200 "$tool-$name.log" \
        bash -c "env $env '$sanitizer' $(sanitizer_args "$tool") --error-exitcode 3 $cmd"
      [ "$dry" -eq 1 ] || grep -E "ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY" "$out/$tool-$name.log" |
        sed "s/^/  $tool $name: /" | tee -a "$summary" >/dev/null
    done <"$list"
  done
  [ "$dry" -eq 0 ] || rm -f "$list"
else
  say "compute-sanitizer      SKIPPED: no compute-sanitizer on PATH or in /usr/local/cuda/bin"
  failed=1
fi

# ---- 3b. the build the project ships: every architecture, SASS and PTX ---------------------------------------
if step build-all 900 build-all.log bash -c "
  cmake -G Ninja -S '$root' -B '$build_all' -DCMAKE_BUILD_TYPE=Release -DKVC_CUDA=ON -DKVC_HIP=OFF \
        -DCMAKE_CUDA_COMPILER='$nvcc_path' -DKVC_CUDA_ARCHITECTURES=all &&
  cmake --build '$build_all' -j '$jobs'"; then
  cuobjdump=cuobjdump
  case "$nvcc_path" in */*) cuobjdump="$(dirname "$nvcc_path")/cuobjdump" ;; esac
  step images-all 60 images-all.log bash -c "'$cuobjdump' --list-elf --list-ptx '$build_all/libkvcache-cuda.so'"
  step ctest-all-sass 300 ctest-all-sass.log env KVC_BACKEND_PATH="$build_all" \
    ctest --test-dir "$build_all" -L '^gpu$' --output-on-failure --timeout 250
  # The driver JIT-compiles the plugin's PTX (of the lowest architecture) instead of loading the card's SASS.
  step ctest-all-ptx-jit 300 ctest-all-ptx-jit.log env KVC_BACKEND_PATH="$build_all" CUDA_FORCE_PTX_JIT=1 \
    ctest --test-dir "$build_all" -L '^gpu$' --output-on-failure --timeout 250
else
  say "build-all: the shipped build failed; its tests cannot run"
fi

# ---- 4. the Python package on torch CUDA tensors -------------------------------------------------------------
# pip --target folders rather than a virtual environment: a system Python may lack ensurepip, and an
# externally managed one refuses installs into itself; torch and transformers are the system's own.
deps="$build/python-deps" pkg="$build/python-pkg"
py=python3
if [ -d "$wheels" ] || [ "$dry" -eq 1 ]; then
  need="$(python3 -c '
import importlib.util
print(" ".join(p for m, p in [("scikit_build_core", "scikit-build-core"), ("pytest", "pytest"), ("psutil", "psutil")]
               if importlib.util.find_spec(m) is None), "swig")')"
  step python-deps 120 python-deps.log python3 -m pip install -q --disable-pip-version-check --no-index \
    --find-links "$wheels" --target "$deps" $need
  step python-build 180 python-build.log env PATH="$deps/bin:$PATH" PYTHONPATH="$deps" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
    python3 -m pip install --disable-pip-version-check --no-index --no-build-isolation --no-deps --target "$pkg" \
    "$root/bindings/python"
  step python-tests 180 pytest-gpu.log bash -c "cd '$root/bindings/python' &&
    PYTHONPATH='$pkg:$deps' python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu.py"
  [ "$dry" -eq 1 ] || tail -n 3 "$out/pytest-gpu.log" | sed 's/^/  /' | tee -a "$summary" >/dev/null
  export PYTHONPATH="$pkg:$deps"
else
  say "python                 SKIPPED: no wheel folder $wheels (scripts/gpu-check-wheels.sh makes it)"
  failed=1
fi

# ---- 4b. CUDA graphs through torch, and two GPUs --------------------------------------------------------------
# Each script prints SKIPPED (exit 0) where torch has no CUDA device or kvcache no CUDA caches: on this machine
# that is a failure, as a skipped CUDA test is above.
torch_step() {
  local name="$1" script="$2"
  step "$name" 180 "$name.log" python3 "$root/tests/gpu/$script"
  [ "$dry" -eq 1 ] && return
  sed 's/^/  /' "$out/$name.log" | grep -E "PASS|FAIL|REFUSED|SKIPPED" | tee -a "$summary" >/dev/null
  if grep -q "^SKIPPED" "$out/$name.log"; then failed=1; fi
}
torch_step torch-graph-capture torch_graph_capture.py
if [ "$dry" -eq 1 ] || [ "${gpus:-0}" -ge 2 ]; then
  torch_step two-gpu-contexts torch_two_gpu_contexts.py
else
  say "two-gpu-contexts       SKIPPED: nvidia-smi lists ${gpus:-0} GPU(s); the check needs two"
fi

# ---- 5. the GPU benchmarks -----------------------------------------------------------------------------------
[ "$dry" -eq 1 ] || rm -f "$out/results.json"
step bench-gpu 240 bench-gpu.log "$build/bench/bench_gpu" --json "$out/results.json"
step bench-transformers 240 bench-transformers.log bash -c "cd '$root/bench' && $py bench_transformers_gpu.py --json '$out/results.json'"

# ---- results.json and the summary ----------------------------------------------------------------------------
if [ "$dry" -eq 1 ]; then
  echo "gpu-check --dry-run: nothing was run"
  exit 0
fi
python3 - "$out" <<'EOF' | tee -a "$summary"
import json, os, sys
out = sys.argv[1]
path = os.path.join(out, "results.json")
rows = json.load(open(path)) if os.path.exists(path) else []
rows += [json.loads(l) for l in open(os.path.join(out, "steps.jsonl")) if l.strip()]
json.dump(rows, open(path, "w"), indent=0)
value = {(r["bench"], r["impl"], r["metric"]): r["value"] for r in rows}
def show(label, key, fmt="{:.2f}"):
    v = value.get(key)
    print(f"{label:<52} {fmt.format(v) if v is not None else 'not measured'}")
print("-- numbers the issue asks for")
show("D2H offload / pinned cudaMemcpyAsync (>= 0.8)", ("gpu_offload", "kvcache-cuda", "d2h_fraction_of_pinned"))
show("H2D prefetch / pinned cudaMemcpyAsync (>= 0.8)", ("gpu_offload", "kvcache-cuda", "h2d_fraction_of_pinned"))
for ctx in ("1k", "8k", "32k"):
    show(f"host ns to issue a 32-layer update_all at {ctx} (<= 8000)",
         ("gpu_decode_step", "kvcache-cuda", f"step_host_ns_dynamic_{ctx}"), "{:.0f}")
show("offloaded 32-layer step at 8k, kvcache (ns)", ("gpu_decode_step", "kvcache-cuda", "step_ns_offloaded_8k"), "{:.0f}")
show("offloaded 32-layer step at 8k, transformers (ns)", ("gpu_decode_step", "transformers-offloaded", "step_ns_8k"), "{:.0f}")
show("compact quantized step's dequantization / D2D traffic rate", ("gpu_dequant", "kvcache-cuda", "compact_step_fraction_of_d2d"))
show("update_all copies / the card's D2D bandwidth", ("gpu_d2d", "kvcache-cuda", "d2d_fraction_of_peak"))
print("-- the pool's step write (copy_rows_batch: test_gpu_backend_ops_cuda above; bench_gpu's gpu_rows_batch)")
show("256-seq x 32-layer step write NHD / D2D memcpy (x)", ("gpu_rows_batch", "kvcache-cuda", "step_nhd_ratio_to_memcpy"))
show("256-seq x 32-layer step write HND / D2D memcpy (x)", ("gpu_rows_batch", "kvcache-cuda", "step_hnd_ratio_to_memcpy"))
show("host ns to issue that step write (NHD)", ("gpu_rows_batch", "kvcache-cuda", "step_nhd_host_ns"), "{:.0f}")
show("4096-token prefill write (staged) / D2D memcpy (x)", ("gpu_rows_batch", "kvcache-cuda", "prefill_ratio_to_memcpy"))
show("launches of that prefill write captured in a graph", ("gpu_rows_batch", "kvcache-cuda", "graph_launches_prefill"), "{:.0f}")
EOF
if [ "$failed" -eq 0 ]; then say "gpu-check: every step passed"; else say "gpu-check: some steps failed (see above)"; fi
exit "$failed"
