#!/usr/bin/env bash
# scripts/gpu-check-wheels.sh [PYTHON_VERSION] [DIR]: downloads the wheels scripts/gpu-check.sh installs on a GPU
# machine that reaches no network (SWIG, scikit-build-core and their dependencies, pytest, psutil), for that
# machine's CPython (default 3.12) on x86-64 Linux, into DIR (default .gpu-wheels/, ignored by git).
# Run it here, then bring DIR along with the tree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-3.12}"
dir="${2:-$root/.gpu-wheels}"
py="$root/.venv/bin/python"
[ -x "$py" ] || py=python3
mkdir -p "$dir"
"$py" -m pip download -q --disable-pip-version-check --only-binary=:all: --dest "$dir" \
  --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform linux_x86_64 --platform any \
  scikit-build-core swig pytest psutil
ls "$dir"
