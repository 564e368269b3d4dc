#!/usr/bin/env bash
# The Go binding's decode-append benchmark against a build of the C library,
# rows written into the benchmarks' results.json:
#   bindings/go/scripts/bench.sh [BUILD_DIR] [RESULTS_JSON]
# (defaults: build and BUILD_DIR/bench/results.json). $KVC_BENCH_ARGS passes
# options to the program (--reps N, --steps N, --context TOKENS), as for the
# C benchmarks. Prints SKIPPED and exits 0 when Go is not installed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
json="${2:-$build/bench/results.json}"
case "$json" in /*) ;; *) json="$PWD/$json" ;; esac
read -r -a extra <<<"${KVC_BENCH_ARGS:-}"

if ! command -v go >/dev/null 2>&1; then
  echo "SKIPPED: the Go binding's benchmark needs Go 1.24 or newer"
  exit 0
fi
export GOTOOLCHAIN=local
# shellcheck source=env.sh
source "$here/scripts/env.sh" "$build"
cd "$here"
go build -o "$build/bench/kvcache-go-bench" ./cmd/kvcache-bench
"$build/bench/kvcache-go-bench" --json "$json" "${extra[@]}"
