#!/usr/bin/env bash
# Runs the benchmarks of an existing build and checks the performance claims.
#   bench/run.sh [BUILDDIR]        (default: build; `make bench` passes its Release build)
# Results: BUILDDIR/bench/results.json (or $KVC_BENCH_JSON), a JSON array of
# {"bench", "impl", "metric", "value", "unit"} rows. Extra arguments for the C
# programs can be given in $KVC_BENCH_ARGS (e.g. "--reps 31"), for the
# transformers benchmark in $KVC_BENCH_TRANSFORMERS_ARGS; $PYTHON picks its
# interpreter (default: the conformance venv, if it has torch and transformers).
# GPU rows (bench_gpu and bench/bench_transformers_gpu.py, whose arguments go in
# $KVC_BENCH_TRANSFORMERS_GPU_ARGS) run where a CUDA device is present; the build
# must then have bench_gpu (-DKVC_CUDA=ON). Elsewhere they print "GPU rows: SKIPPED".
# bench_host_issue (the core's host cost of issuing a decode step) runs against the emulated device plugin
# in $KVC_BENCH_EMULATED_DIR (default BUILDDIR/tests/gpu/emulated; `make bench` builds one); without one it
# prints SKIPPED.
# bench_pool (the paged pool, CPU) runs everywhere; its GPU rows are bench_gpu's gpu_pool_write.
# bench_tier (the disk tier, CPU pool) runs everywhere, in a directory next to the results file.
# bench_redis_tier starts its own redis-server; without redis-server installed it prints SKIPPED.
# bench_tier_prefix (prefix hit from a tier against recomputing with the demo's decoder) runs everywhere; its
# Redis row needs redis-server (SKIPPED without).
# bench_persist writes its files next to the results (or in $KVC_BENCH_PERSIST_DIR); its arguments go in
# $KVC_BENCH_PERSIST_ARGS.
# Exit status: 0 when every acceptance check holds, 1 otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
JSON=${KVC_BENCH_JSON:-$BUILD/bench/results.json}
read -r -a EXTRA <<< "${KVC_BENCH_ARGS:-}"

find_bin() { # name -> path of the built program
    for p in "$BUILD/bench/$1" "$BUILD/$1"; do
        if [ -x "$p" ]; then echo "$p"; return 0; fi
    done
    echo "bench/run.sh: $1 not found in $BUILD; build first (cmake --build $BUILD)" >&2
    exit 1
}

if [ -f "$BUILD/CMakeCache.txt" ]; then
    type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
    case "$type" in
        Release|RelWithDebInfo) ;;
        *) echo "WARNING: $BUILD is a '${type:-no build type}' build; timings of unoptimised code mean little" ;;
    esac
fi

mkdir -p "$(dirname "$JSON")"
rm -f "$JSON"

echo "== bench_decode"
"$(find_bin bench_decode)" --json "$JSON" "${EXTRA[@]}"
echo
echo "== bench_reorder"
"$(find_bin bench_reorder)" --json "$JSON" "${EXTRA[@]}"
echo
echo "== bench_rows_batch (the pool's step write: the CPU backend's copy_rows_batch against memcpy)"
"$(find_bin bench_rows_batch)" --json "$JSON" "${EXTRA[@]}"
echo
echo "== Go (bindings/go: Step.Update, UpdateAll and Update against C in one process)"
bash "$ROOT/bindings/go/scripts/bench.sh" "$BUILD" "$JSON"
echo
echo "== Rust (bindings/rust: safe API and raw ABI)"
if command -v cargo >/dev/null 2>&1; then
    json_abs="$(cd "$(dirname "$JSON")" && pwd)/$(basename "$JSON")"
    (cd "$ROOT/bindings/rust" && cargo bench -q -p kvcache-rs --bench decode -- --json "$json_abs" "${EXTRA[@]}")
    RUST_BENCH=1
else
    echo "SKIPPED: the Rust benchmark needs cargo"
fi
echo
echo "== Python (bindings/python: kvcache vs transformers' DynamicCache/StaticCache, torch CPU)"
if [ -x "$ROOT/.venv/bin/python" ] && "$ROOT/.venv/bin/python" -c 'import torch, transformers, scikit_build_core' >/dev/null 2>&1; then
    CMAKE_BUILD_PARALLEL_LEVEL=2 "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check \
        --no-build-isolation --no-deps "$ROOT/bindings/python"
    "$ROOT/.venv/bin/python" "$ROOT/bench/bench_python.py" --json "$JSON" ${KVC_BENCH_PYTHON_ARGS:-}
    "$ROOT/.venv/bin/python" "$ROOT/bench/bench_python_call.py" --json "$JSON"
    # A Python scheduler's step over 256 pool sequences (reserve_batch / commit_batch) against the C step.
    "$ROOT/.venv/bin/python" "$ROOT/bench/bench_pool_python.py" --c-bench "$(find_bin bench_pool_step)" --json "$JSON"
    PY_BENCH=1
else
    echo "SKIPPED: the Python benchmark needs .venv with torch, transformers and scikit-build-core (make setup)"
fi
echo
echo "== bench_host_issue (host cost of issuing one update_all step, emulated device)"
EMU_DIR=${KVC_BENCH_EMULATED_DIR:-$BUILD/tests/gpu/emulated}
if [ -f "$EMU_DIR/libkvcache-cuda.so" ]; then
    KVC_BACKEND_PATH="$EMU_DIR" "$(find_bin bench_host_issue)" --json "$JSON" "${EXTRA[@]}"
else
    echo "bench_host_issue: SKIPPED: no emulated device plugin in $EMU_DIR (make emulated-plugin builds one)"
fi
echo
echo "== bench_quantized"
"$(find_bin bench_quantized)" --json "$JSON" "${EXTRA[@]}"
echo
echo "== bench_pool (the paged pool on the CPU: scheduling, partial blocks, fork, step write)"
"$(find_bin bench_pool)" --json "$JSON" "${EXTRA[@]}"
echo
echo "== bench_pool_budget (a hybrid model's serving loop: one block budget shared by the groups against per-group"
echo "   budgets of the same memory: blocks in use, admitted sequences, step time, medians)"
"$(find_bin bench_pool_budget)" --json "$JSON"
echo "== bench_persist (cache files: save and restore against plain write/read of the same bytes, same disk)"
# A 1 GiB cache by default; $KVC_BENCH_PERSIST_ARGS overrides (e.g. "--context 1024 --reps 3": 128 MiB).
read -r -a PERSIST_ARGS <<< "${KVC_BENCH_PERSIST_ARGS:-}"
"$(find_bin bench_persist)" --json "$JSON" "${PERSIST_ARGS[@]}"
echo
echo "== bench_tier (the pool's disk tier against a plain write/read of the same bytes in the same directory)"
"$(find_bin bench_tier)" --json "$JSON" "${EXTRA[@]}"
echo
echo "== bench_tier_keys (key-only lookup by kvc_tier_exists against match_prefix, disk and Redis tiers)"
"$(find_bin bench_tier_keys)" --json "$JSON" "${EXTRA[@]}"
echo
echo "== bench_redis_tier (the Redis tier: runs of 2 MiB blocks against raw pipelined SET/GET and redis-benchmark)"
if command -v redis-server >/dev/null 2>&1; then
    "$(find_bin bench_redis_tier)" --json "$JSON" "${EXTRA[@]}"
    REDIS_BENCH=1
else
    echo "bench_redis_tier: SKIPPED: redis-server is not installed (scripts/setup.sh installs it)"
fi
echo
echo "== bench_tier_prefix (a prompt's K/V from the disk or Redis tier after a restart against recomputing it"
echo "   with the demo's tiny decoder; it starts its own redis-server, and says SKIPPED for that row without one)"
"$(find_bin bench_tier_prefix)" --json "$JSON" "${EXTRA[@]}"
echo

echo "== transformers (CPU, torch)"
PY=""
# The newest transformers first: the conformance environment's main venv.
for cand in ${PYTHON:-} "$ROOT"/tests/conformance/.venv-torch/bin/python "$ROOT"/tests/conformance/.venv*/bin/python \
    "$ROOT"/.venv/bin/python python3; do
    if [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 &&
        "$cand" -c 'import torch, transformers' >/dev/null 2>&1; then
        PY=$cand
        break
    fi
done
if [ -n "$PY" ]; then
    echo "python: $PY"
    "$PY" "$ROOT/bench/bench_transformers.py" --json "$JSON" ${KVC_BENCH_TRANSFORMERS_ARGS:-}
else
    echo "SKIPPED: transformers bench needs torch, run tests/conformance/generate.sh first"
fi
echo

echo "== GPU (bench_gpu: the CUDA backend; transformers' caches and the Python binding on the same GPU)"
# A CUDA device is there when nvidia-smi lists one or torch sees one; the plugin bench_gpu and the Python
# binding load is the one this build made (KVC_BACKEND_PATH, unless set already; never the emulated test device).
GPU_PY=""
for cand in ${PYTHON:-} "$ROOT"/.venv/bin/python "$ROOT"/tests/conformance/.venv-torch/bin/python python3; do
    if [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 &&
        "$cand" -c 'import torch, transformers' >/dev/null 2>&1; then
        GPU_PY=$cand
        break
    fi
done
gpu_why=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    :
elif [ -n "$GPU_PY" ] && "$GPU_PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    :
else
    gpu_why="no CUDA device: nvidia-smi lists none"
    [ -z "$GPU_PY" ] || gpu_why="$gpu_why and torch.cuda.is_available() is False"
fi
GPU_MISSING=""
if [ -n "$gpu_why" ]; then
    echo "GPU rows: SKIPPED: $gpu_why"
elif [ ! -x "$BUILD/bench/bench_gpu" ]; then
    GPU_MISSING="a CUDA device is present but $BUILD has no bench/bench_gpu: configure with -DKVC_CUDA=ON"
    echo "GPU rows: $GPU_MISSING"
else
    if [ -z "${KVC_BACKEND_PATH:-}" ]; then
        plugin=$(find "$BUILD" -name libkvcache-cuda.so -not -path '*/tests/gpu/*' -print -quit)
        [ -n "$plugin" ] && export KVC_BACKEND_PATH="$(cd "$(dirname "$plugin")" && pwd)"
    fi
    echo "plugin directory: ${KVC_BACKEND_PATH:-the directory of libkvcache}"
    "$BUILD/bench/bench_gpu" --json "$JSON" "${EXTRA[@]}"
    echo
    if [ -n "$GPU_PY" ]; then
        echo "python: $GPU_PY"
        "$GPU_PY" "$ROOT/bench/bench_transformers_gpu.py" --json "$JSON" ${KVC_BENCH_TRANSFORMERS_GPU_ARGS:-}
    else
        echo "SKIPPED: the transformers GPU rows need a Python with torch and transformers (make setup)"
    fi
    GPU_BENCH=1
fi
echo

# value BENCH IMPL METRIC: the value of one row of results.json (one object per line).
value() {
    grep -F "\"bench\": \"$1\", \"impl\": \"$2\", \"metric\": \"$3\"," "$JSON" |
        sed -n 's/.*"value": \([^,]*\),.*/\1/p' | head -n 1 || true
}

num() { if [ -n "$1" ]; then awk -v x="$1" 'BEGIN { printf "%.0f", x }'; else echo "-"; fi; }

fail=0
check() { # description, awk condition over x, value
    local desc=$1 cond=$2 x=$3
    if [ -z "$x" ]; then
        echo "FAIL  $desc: no value in $JSON"
        fail=1
    elif awk -v x="$x" "BEGIN { exit !($cond) }"; then
        echo "PASS  $desc: $x"
    else
        echo "FAIL  $desc: $x"
        fail=1
    fi
}

echo "== acceptance"
check "append@32k / append@1k <= 1.2 (decode step cost independent of context)" \
    "x <= 1.2" "$(value decode_append kvcache-c append_32k_over_1k)"
check "32 x kvc_cache_update / one kvc_cache_update_all of the same 32-layer step, 1k, CPU time <= 1.2 (the per-layer path)" \
    "x <= 1.2" "$(value decode_append kvcache-c append_loop_over_append_cpu_1k)"
check "reorder {0,0,2,2}: rows moved, derived from timings, within 2 +- 0.5" \
    "x >= 1.5 && x <= 2.5" "$(value beam_reorder kvcache-c reorder_rows_moved_derived)"
check "reorder identity / one-row reorder <= 0.05 (unchanged rows are not copied)" \
    "x <= 0.05" "$(value beam_reorder kvcache-c reorder_identity_over_1row)"
r1=$(value beam_reorder kvcache-c reorder_ns_1rows)
r3=$(value beam_reorder kvcache-c reorder_ns_3rows)
check "reorder time 3 rows / 1 row within 3 +- 1 (time scales with moved rows)" \
    "x >= 2 && x <= 4" "$(awk -v a="$r3" -v b="$r1" 'BEGIN { if (b > 0) printf "%.3f", a / b }')"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.3f", a / b }'; }
bf16=$(value quantized_memory kvcache-c bytes_per_token_bf16)
check "quantized 4-bit (quanto g64) bytes per token / bf16 <= 0.30 (scales included, residual excluded)" \
    "x <= 0.30" "$(ratio "$(value quantized_memory kvcache-c bytes_per_token_quanto4_g64)" "$bf16")"
check "quantized 2-bit (quanto g64) bytes per token / bf16 <= 0.18" \
    "x <= 0.18" "$(ratio "$(value quantized_memory kvcache-c bytes_per_token_quanto2_g64)" "$bf16")"
check "quantized incremental step cost @32k / @1k <= 1.2 (history never re-quantized)" \
    "x <= 1.2" "$(value quantized_update kvcache-c incremental_32k_over_1k)"
shared=$(value pool_budget shared admitted_sequences_median)
best=$(value pool_budget per_group_best admitted_sequences_median)
check "pool budget: sequences admitted with one shared budget / the best per-group split of the same memory >= 1" \
    "x >= 1" "$( [ -n "$shared" ] && [ -n "$best" ] && awk -v a="$shared" -v b="$best" 'BEGIN { print a / b }')"
check "pool: scheduling one decode step of 256 running sequences (match + reserve + commit + release) < 50 us" \
    "x < 50000" "$(value pool_schedule kvcache-c step_ns_256_llama)"
if [ -n "${REDIS_BENCH:-}" ]; then
    check "redis tier: put GB/s of 2 MiB-block runs / raw pipelined SET through the same client >= 0.75" \
        "x >= 0.75" "$(value redis_tier kvcache-c put_over_raw)"
    check "redis tier: get GB/s of 2 MiB-block runs / raw pipelined GET through the same client >= 0.75" \
        "x >= 0.75" "$(value redis_tier kvcache-c get_over_raw)"
fi
for pg in llama_full hybrid_full hybrid_sliding; do
    check "pool: slots lost to partial blocks, per sequence and group ($pg), at most < 1 block" \
        "x < 1" "$(value pool_partial kvcache-c "waste_max_blocks_$pg")"
done
if [ -n "${RUST_BENCH:-}" ]; then
    check "Rust safe API: binding cost per append <= 5% of the C append (update_all, 1k)" \
        "x <= 0.05" "$(value decode_append kvcache-rust append_binding_share_of_c_1k)"
    check "Rust safe API: binding cost per append <= 5% of the C append (32 x update, 1k)" \
        "x <= 0.05" "$(value decode_append kvcache-rust append_loop_binding_share_of_c_1k)"
fi
if [ -n "${PY_BENCH:-}" ]; then
    check "Python: kvcache update@8k >= 10x faster than transformers' DynamicCache.update (same tensors)" \
        "x >= 10" "$(value python_update kvcache-python dynamic_over_kvcache_8k)"
    check "Python: a scheduler's step over 256 pool sequences (reserve_batch + commit_batch) / the C step <= 3" \
        "x <= 3" "$(value pool_step_python kvcache-python cpu_ratio_to_c_batch)"
fi
if command -v go >/dev/null 2>&1; then
    check "Go binding: Step.Update / C update_all in one process, 1k <= 1.10" \
        "x <= 1.10" "$(value decode_append kvcache-go append_overhead_vs_c_1k)"
fi
if [ -n "$GPU_MISSING" ]; then
    echo "FAIL  GPU rows: $GPU_MISSING"
    fail=1
elif [ -n "${GPU_BENCH:-}" ]; then
    check "GPU: kernel launches per update_all step of a static cache == 1 (counted in its CUDA graph)" \
        "x == 1" "$(value gpu_launches kvcache-cuda launches_per_step_static_update_all)"
    check "GPU: kvcache's device copies >= 0.80 of the card's measured D2D bandwidth" \
        "x >= 0.80" "$(value gpu_d2d kvcache-cuda d2d_fraction_of_peak)"
    check "GPU: compact quantized step (dequantizes the 8k history) >= 0.80 of the D2D traffic rate" \
        "x >= 0.80" "$(value gpu_dequant kvcache-cuda compact_step_fraction_of_d2d)"
    check "GPU: update@8k >= 10x faster than transformers' DynamicCache (one step, all 32 layers)" "x >= 10" \
        "$(ratio "$(value gpu_decode_step transformers-dynamic step_ns_8k)" \
            "$(value gpu_decode_step kvcache-cuda step_ns_dynamic_8k)")"
    for dt in bf16 fp16; do
        if [ "$(value gpu_pool_write kvcache-cuda "write_capturable_$dt")" = 1 ]; then
            check "GPU pool: kernel launches per kvc_pool_write of all 32 layers ($dt) == 1 (counted in a captured graph)" \
                "x == 1" "$(value gpu_pool_write kvcache-cuda "kernels_per_write_$dt")"
        else
            echo "NOTE  GPU pool: kvc_pool_write ($dt) could not be captured into a graph; launches not counted (bench_gpu says why)"
        fi
    done
fi
echo "bytes moved per {0,0,2,2} reorder: $(num "$(value beam_reorder kvcache-c reorder_bytes_moved)")" \
    "(derived from timings: $(num "$(value beam_reorder kvcache-c reorder_bytes_moved_derived)"))"

echo
echo "== kvcache-c vs memcpy and transformers (median ns; last column: transformers / kvcache-c)"
speedup() { if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0fx", a / b; else print "-" }'; else echo "-"; fi; }
printf "%-26s %14s %14s %16s %10s\n" metric kvcache-c memcpy transformers speedup
row() { # bench metric
    local c m t
    c=$(value "$1" kvcache-c "$2"); m=$(value "$1" memcpy "$2"); t=$(value "$1" transformers "$2")
    printf "%-26s %14s %14s %16s %10s\n" "$2" "$(num "$c")" "$(num "$m")" "$(num "$t")" "$(speedup "$t" "$c")"
}
for m in append_ns_per_token_1k append_ns_per_token_8k append_ns_per_token_32k; do row decode_append $m; done
echo "append / memcpy (target <= 2): $(for l in 1k 8k 32k; do
    printf '%s %s  ' "$l" "$(value decode_append kvcache-c "append_ratio_to_memcpy_$l")"; done)"
echo "append / memcpy into the cache's own slots: $(for l in 1k 8k 32k; do
    printf '%s %s  ' "$l" "$(value decode_append kvcache-c "append_ratio_to_slot_memcpy_$l")"; done)"
hi=$(value host_issue kvcache-emulated core_issue_ns)
[ -z "$hi" ] || echo "host issue of one 32-layer update_all step on the emulated device (core only): $(num "$hi") ns"
for m in reorder_ns_0rows reorder_ns_1rows reorder_ns_2rows reorder_ns_3rows; do row beam_reorder $m; done
echo
echo "== pool (CPU, one thread; median ns)"
r2() { if [ -n "$1" ]; then awk -v x="$1" 'BEGIN { printf "%.2f", x }'; else echo "-"; fi; }
for model in llama hybrid; do
    echo "schedule one step of 256 sequences, $model: $(num "$(value pool_schedule kvcache-c "step_ns_256_$model")") ns" \
        "(release $(num "$(value pool_schedule kvcache-c "release_ns_256_$model")")," \
        "match $(num "$(value pool_schedule kvcache-c "match_ns_256_$model")")," \
        "reserve $(num "$(value pool_schedule kvcache-c "reserve_ns_256_$model")")," \
        "commit $(num "$(value pool_schedule kvcache-c "commit_ns_256_$model")"))"
done
echo "fork of a 2k-token sequence: $(num "$(value pool_fork kvcache-c fork_ns_2k)") ns;" \
    "a fork's first token (copy-on-write of a 2 MiB block): $(num "$(value pool_fork kvcache-c fork_first_token_cow_ns_2k)") ns"
for dt in bf16 fp16; do
    echo "step write 256 x 32 layers x K,V ($dt): kvc_pool_write $(num "$(value pool_write kvcache-c "step_ns_256x32_$dt")") ns," \
        "memcpy $(num "$(value pool_write memcpy "step_ns_256x32_$dt")"), slot memcpy $(num "$(value pool_write slot-memcpy "step_ns_256x32_$dt")");" \
        "write / memcpy $(r2 "$(value pool_write kvcache-c "write_over_memcpy_$dt")")," \
        "/ slot memcpy $(r2 "$(value pool_write kvcache-c "write_over_slot_memcpy_$dt")");" \
        "in thread CPU time $(r2 "$(value pool_write kvcache-c "write_over_memcpy_cpu_$dt")")," \
        "$(r2 "$(value pool_write kvcache-c "write_over_slot_memcpy_cpu_$dt")")"
done
if [ -n "${GPU_BENCH:-}" ]; then
    echo
    echo "== GPU: one decode step, all 32 layers (median ns of GPU time; last column: transformers' DynamicCache / kvcache-c)"
    printf "%-8s %12s %12s %12s %12s %14s %14s %9s\n" context kvcache-c kvc-static kvc-python \
        tf-dynamic tf-static tf-offloaded speedup
    for ctx in 1k 8k 32k; do
        c=$(value gpu_decode_step kvcache-cuda "step_ns_dynamic_$ctx")
        t=$(value gpu_decode_step transformers-dynamic "step_ns_$ctx")
        printf "%-8s %12s %12s %12s %12s %14s %14s %9s\n" "$ctx" "$(num "$c")" \
            "$(num "$(value gpu_decode_step kvcache-cuda "step_ns_static_$ctx")")" \
            "$(num "$(value gpu_decode_step kvcache-python-cuda "step_ns_update_all_$ctx")")" "$(num "$t")" \
            "$(num "$(value gpu_decode_step transformers-static "step_ns_$ctx")")" \
            "$(num "$(value gpu_decode_step transformers-offloaded "step_ns_$ctx")")" "$(speedup "$t" "$c")"
    done
    echo "D2D: kvcache $(value gpu_d2d kvcache-cuda d2d_gbps_update_all_prefill_8k) GB/s," \
        "cudaMemcpyAsync $(value gpu_d2d cuda-memcpy d2d_gbps) GB/s"
    for dt in bf16 fp16; do
        echo "pool step write ($dt): kvc_pool_write $(num "$(value gpu_pool_write kvcache-cuda "step_ns_256x32_$dt")") ns," \
            "cudaMemcpyAsync $(num "$(value gpu_pool_write cuda-memcpy "step_ns_256x32_$dt")") ns," \
            "ratio $(r2 "$(value gpu_pool_write kvcache-cuda "write_over_memcpy_$dt")")"
    done
    echo "offload (pinned): H2D kvcache $(value gpu_offload kvcache-cuda h2d_gbps_prefetch) GB/s vs" \
        "$(value gpu_offload cuda-memcpy h2d_gbps_pinned); D2H kvcache $(value gpu_offload kvcache-cuda d2h_gbps_offload)" \
        "GB/s vs $(value gpu_offload cuda-memcpy d2h_gbps_pinned)"
fi
echo "results: $JSON"
if [ $fail -ne 0 ]; then
    echo "bench: some acceptance checks FAILED"
    exit 1
fi
echo "bench: all acceptance checks passed"
