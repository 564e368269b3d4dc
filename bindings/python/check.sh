#!/usr/bin/env bash
# Builds bindings/python into a Python environment and runs its pytest suite.
#   bindings/python/check.sh [PYTHON]     (default: the repository's .venv/bin/python)
# The environment needs the build requirements (scikit-build-core, swig: installed there so that pip builds
# offline, without build isolation) and the test requirements (pytest, numpy, torch, transformers, psutil,
# optimum-quanto and hqq for the quantized references): scripts/requirements-dev.txt lists them. JOBS sets
# the build's parallelism (default 2). The CMake build tree stays in bindings/python/build/, so a second run
# only recompiles what changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${1:-$root/.venv/bin/python}"
[ -x "$py" ] || { echo "check.sh: no Python at $py (make setup creates .venv)" >&2; exit 1; }
missing="$("$py" -c '
import importlib.util
need = ["scikit_build_core", "swig", "pytest", "numpy", "torch", "transformers"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))')"
if [ -n "$missing" ]; then
  echo "check.sh: $py lacks: $missing (see scripts/requirements-dev.txt)" >&2
  exit 1
fi
echo "== pip install bindings/python ($py)"
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" "$py" -m pip install -q --disable-pip-version-check \
  --no-build-isolation --no-deps --force-reinstall "$here"
cd "$here"
"$py" -c 'import kvcache; print("kvcache", kvcache.__version__, "from", kvcache.__file__)'
echo "== pytest bindings/python/tests"
exec "$py" -m pytest -q -rs -p no:cacheprovider tests
