#!/usr/bin/env bash
# kvcache as a dependency: a project that takes the source tree with add_subdirectory (as FetchContent does)
# gets the libraries and no test, benchmark, example or fuzzer target, and its program links and runs.
#   tests/consumer/check_subproject.sh SOURCE_DIR WORK_DIR [C flags of the build, e.g. sanitizers]
set -euo pipefail
src="$(cd "${1:?usage: check_subproject.sh SOURCE_DIR WORK_DIR [FLAGS]}" && pwd)"
work="${2:?usage: check_subproject.sh SOURCE_DIR WORK_DIR [FLAGS]}"
flags="${3:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$work"
mkdir -p "$work"
# Only the libraries are asked for; the GPU plugins stay off here, as their defaults are.
cmake -G Ninja -S "$here" -B "$work/build" -DKVC_CONSUMER_MODE=subdirectory -DKVC_SOURCE_DIR="$src" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
# Every output of the build (Ninja's list: "path: rule"; objects' paths name their targets), CMake's own files (absolute) aside.
ninja -C "$work/build" -t targets all | sed 's/: .*//' | grep -v '^/' >"$work/outputs.txt"
unwanted="$(grep -E '(^|/)(tests|bench|examples|fuzz)/|(^|/)(CMakeFiles/)?(test_|bench_|example_|fuzz_|conformance|abi_layout|header_|kvc_emulated)[^/]*$|(^|/)(Continuous|Experimental|Nightly)' "$work/outputs.txt" || true)"
if [ -n "$unwanted" ]; then
  echo "check_subproject: add_subdirectory defines targets a dependency must not build:" >&2
  echo "$unwanted" | head -20 >&2
  exit 1
fi
for want in kvcache/libkvcache.so kvcache/libkvcache.a consumer_app; do
  grep -qx "$want" "$work/outputs.txt" || { echo "check_subproject: the build makes no $want" >&2; exit 1; }
done
if [ -f "$work/build/CTestTestfile.cmake" ] && grep -q add_test -r "$work/build" --include=CTestTestfile.cmake; then
  echo "check_subproject: the consumer's build has CTest tests of kvcache" >&2
  exit 1
fi
echo "outputs: $(grep -vc '\.o$' "$work/outputs.txt") besides objects, none of a test, bench, example or fuzzer"
cmake --build "$work/build" >"$work/build.log" || { tail -30 "$work/build.log"; exit 1; }
echo "built: $(grep -c 'Building C' "$work/build.log") C files"
"$work/build/consumer_app"
