#!/usr/bin/env bash
# Builds bindings/python into a Python environment and runs its pytest suite.
#   bindings/python/check.sh [PYTHON]     (default: the repository's .venv/bin/python)
# The environment needs the build requirements (scikit-build-core, swig: installed there so that pip builds
# offline, without build isolation) and the test requirements (pytest, numpy, torch, transformers, psutil,
# optimum-quanto and hqq for the quantized references): scripts/requirements-dev.txt lists them. JOBS sets
# the build's parallelism (default 2). The CMake build tree stays in bindings/python/build/, so a second run
# only recompiles what changed. The transformers tests then run once more under each transformers release in
# .venv-transformers/ (scripts/transformers-releases.txt).
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
echo "== pytest bindings/python/tests (transformers $("$py" -c 'import transformers; print(transformers.__version__)'))"
"$py" -m pytest -q -rs -p no:cacheprovider tests
# The drop-in's tests again under each transformers release installed beside the environment's own
# (scripts/transformers-releases.txt, put there by scripts/setup.sh): that release first on PYTHONPATH.
for release_dir in "$root"/.venv-transformers/*/; do
  [ -f "$release_dir/.stamp" ] || continue
  release="$(basename "$release_dir")"
  echo "== pytest bindings/python/tests/test_transformers_*.py (transformers $release)"
  # The quanto reference of the quantized cache (about a minute of optimum-quanto on 2 cores) runs only above.
  PYTHONPATH="${release_dir%/}${PYTHONPATH:+:$PYTHONPATH}" "$py" -m pytest -q -rs -p no:cacheprovider \
    -k "not quantized_cache_generates_the_same_tokens[quanto" tests/test_transformers_*.py
done
