#!/usr/bin/env bash
# Usage: gpu_cmake_flags.sh [cuda] [hip]   (default: both)
#
# Prints the CMake options that build the named GPU backend plugins where
# their toolchains are on this machine, and turn them off where they are
# not (an explicit OFF, so that a build tree configured before does not
# keep a plugin whose toolchain has gone):
#   cuda  nvcc on PATH, or the CUDA toolkit scripts/setup.sh installs into
#         .venv (scripts/requirements-gpu.txt)
#   hip   hipcc on PATH or in /opt/rocm/bin (Debian: hipcc, libamdhip64-dev)
# Compiling needs no GPU; the Makefile passes these to `make build`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

want=("$@")
[ "${#want[@]}" -gt 0 ] || want=(cuda hip)

has_nvcc() {
  command -v nvcc >/dev/null 2>&1 && return 0
  local nvcc
  for nvcc in "$root"/.venv/lib/python3.*/site-packages/nvidia/cu13/bin/nvcc; do
    [ -x "$nvcc" ] && return 0
  done
  return 1
}

has_hipcc() {
  command -v hipcc >/dev/null 2>&1 || [ -x /opt/rocm/bin/hipcc ]
}

flags=()
for which in "${want[@]}"; do
  case "$which" in
    cuda) if has_nvcc; then flags+=(-DKVC_CUDA=ON); else flags+=(-DKVC_CUDA=OFF); fi ;;
    hip) if has_hipcc; then flags+=(-DKVC_HIP=ON); else flags+=(-DKVC_HIP=OFF); fi ;;
    *) echo "gpu_cmake_flags: unknown backend '$which' (cuda, hip)" >&2; exit 2 ;;
  esac
done
printf '%s\n' "${flags[*]}"
