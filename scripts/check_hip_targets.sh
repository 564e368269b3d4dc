#!/usr/bin/env bash
# Usage: check_hip_targets.sh <clang++> <out dir> <target>...
#
# Compiles the HIP plugin's kernels (backends/gpu: every translation unit
# with kernels) for each AMD target with a current clang, whose front end
# compiles HIP for targets Debian's hipcc 5.2 (clang 15) rejects: gfx942
# (MI300X), gfx950 (MI350), gfx1100 (RDNA 3), gfx1201 (RDNA 4). Each
# target's device code is compiled to assembly and assembled into an object
# file; nothing is linked, because Debian's ROCm device libraries (5.2) have
# no bitcode for gfx942 and later (-nogpulib): the objects keep their calls
# into those libraries (threadIdx, __syncthreads and pow in HIP 5.2's
# headers) undefined. Fails when any target fails, and when a kernel source
# uses a warp-level operation, whose meaning changes between wave64 (gfx9)
# and wave32 (gfx10 and later) targets (gpu_vendor.h).
set -euo pipefail
[ "$#" -ge 3 ] || { echo "usage: $0 <clang++> <out dir> <target>..." >&2; exit 2; }
clang="$1" out="$2"
shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gpu="$root/backends/gpu"
units=(gpu_backend gpu_rope gpu_quant) # gpu_exec.cpp has no kernels
mkdir -p "$out"

# ---- 1. no warp-level operation in the kernels' sources (comments stripped) ----------------------------------
warp_names='\b(__shfl\w*|__ballot\w*|__any|__all|__activemask|__syncwarp|__lane_id|__match_\w+|__reduce_\w+_sync|warpSize|__AMDGCN_WAVEFRONT_SIZE|__AMDGCN_WAVEFRONT_SIZE__)\b'
bad=0
for f in "$gpu"/*.cuh "$gpu"/*.cpp "$gpu"/*.h "$root"/backends/quant_math/*.h; do
  if hits="$(perl -0pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$f" | grep -oP "$warp_names" | sort -u | tr "\n" " ")"; then
    echo "FAIL: ${f#"$root"/} uses a warp-level name, whose meaning differs between wave64 and wave32 targets: $hits"
    bad=1
  fi
done

# ---- 2. every kernel unit for every target, two compilers at a time (KVC_HIP_CHECK_JOBS) -----------------------
flags=(-x hip -std=c++17 -O3 -fPIC --offload-device-only -nogpulib --rocm-path=/usr -ffp-contract=off
       -fno-gpu-flush-denormals-to-zero -fhip-fp32-correctly-rounded-divide-sqrt -Wall -Wextra -Werror
       "-I$root/abi/include" "-I$root/abi/backend" "-I$root/backends" "-I$gpu")

# Compiles <unit> for <target> with HIP 5.2's headers told the target's wave size; says ok or FAIL.
compile_one() {
  local unit="$1" target="$2" wave="$3"
  local asm="$out/$unit-$target.s" obj="$out/$unit-$target.o"
  rm -f "$asm" "$obj"
  if "$clang" "${flags[@]}" --offload-arch="$target" "-D__AMDGCN_WAVEFRONT_SIZE=$wave" -S "$gpu/$unit.cpp" -o "$asm" &&
     "$clang" -x assembler --target=amdgcn-amd-amdhsa -mcpu="$target" -c "$asm" -o "$obj"; then
    local kernels
    kernels="$(grep -c '^\s*\.amdhsa_kernel ' "$asm" || true)"
    if [ "$kernels" -gt 0 ]; then
      echo "ok: $unit for $target (wave$wave): $kernels kernels"
      return 0
    fi
    echo "FAIL: $unit for $target: compiled, but the object holds no kernel"
  else
    echo "FAIL: $unit for $target"
  fi
  return 1
}

jobs="${KVC_HIP_CHECK_JOBS:-2}" running=0 logs=()
for target in "$@"; do
  # HIP 5.2's headers define warpSize from this macro, which current clang (22) no longer predefines. The
  # kernels never read it (step 1); it is the target's default wave size, for the headers' sake.
  case "$target" in
    gfx9*) wave=64 ;;
    gfx1[0-9]*) wave=32 ;;
    *) echo "FAIL: $target: no known wave size (gfx9: 64, gfx10 and later: 32)"; bad=1; continue ;;
  esac
  for unit in "${units[@]}"; do
    logs+=("$out/$unit-$target.log")
    compile_one "$unit" "$target" "$wave" >"$out/$unit-$target.log" 2>&1 &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
      wait -n || bad=1
      running=$((running - 1))
    fi
  done
done
while [ "$running" -gt 0 ]; do
  wait -n || bad=1
  running=$((running - 1))
done
[ "${#logs[@]}" -eq 0 ] || cat "${logs[@]}"
exit "$bad"
