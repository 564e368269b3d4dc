#!/usr/bin/env bash
# tests/gpu/gpu_check_dry_run.sh: scripts/gpu-check.sh cannot rot on machines without a GPU. It must parse
# (bash -n; shellcheck where installed), and its --dry-run must list every step the GPU machine runs (the card's
# build and tests, memcheck, racecheck and synccheck, the shipped all-architecture build with its SASS and forced
# PTX JIT runs, the Python tests, the torch graph capture and two-GPU scripts, the benchmarks), run nothing and
# write nothing. The torch scripts must compile. CTest: gpu_check_dry_run.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
script="$root/scripts/gpu-check.sh"
fail=0
bad() { echo "gpu_check_dry_run: $*" >&2; fail=1; }

bash -n "$script" || bad "bash -n rejects $script"
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck -S error "$script" || bad "shellcheck reports errors in $script"
else
  echo "gpu_check_dry_run: shellcheck SKIPPED: not installed (bash -n only)"
fi
for py in torch_graph_capture.py torch_two_gpu_contexts.py; do
  python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$root/tests/gpu/$py" || bad "$py does not parse"
done

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
listing="$(bash "$script" --dry-run "$out/run")"
rc=$?
[ "$rc" -eq 0 ] || bad "--dry-run exited $rc"
[ ! -e "$out/run" ] || bad "--dry-run wrote $out/run"
for want in "step build " "step ctest " "step memcheck:" "step racecheck:" "step synccheck:" "step build-all " \
            "KVC_CUDA_ARCHITECTURES=all" "step images-all " "step ctest-all-sass " "step ctest-all-ptx-jit " \
            "CUDA_FORCE_PTX_JIT=1" "step python-tests " "step torch-graph-capture " "torch_graph_capture.py" \
            "step two-gpu-contexts " "torch_two_gpu_contexts.py" "step bench-gpu " "nothing was run"; do
  grep -qF -- "$want" <<<"$listing" || bad "the dry run lists no '$want'"
done
steps="$(grep -c '^step ' <<<"$listing")"
echo "gpu_check_dry_run: $steps steps listed"
[ "$fail" -eq 0 ] && echo "gpu_check_dry_run: passed"
exit "$fail"
