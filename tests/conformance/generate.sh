#!/usr/bin/env bash
# Regenerates tests/conformance/vectors/ by running transformers' own cache
# classes. Several transformers versions are needed because some behaviours the
# library mirrors exist only in older releases (see docs/conformance.md). The
# 5.x families are written by TF_NEW and by TF_PREV and merged
# (merge_releases.py): one file where both wrote the same, both where they differ.
# One torch install is shared: the older-version venvs see it through a .pth
# file placed after their own site-packages.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
TF_NEW=${TF_NEW:-5.24.0}
TF_PREV=${TF_PREV:-5.23.0}
TF_457=${TF_457:-4.57.6}
TF_453=${TF_453:-4.53.3}
OUT=${1:-$HERE/vectors}

site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

make_venv() { # dir, pip args...
    local dir=$1; shift
    if [ ! -x "$dir/bin/python" ]; then "$PY" -m venv "$dir"; fi
    "$dir/bin/python" -m pip install --quiet "$@"
}

BASE=$HERE/.venv-torch
QUANTO_VERSION=${QUANTO_VERSION:-0.2.7}
HQQ_VERSION=${HQQ_VERSION:-0.2.8.post1}
make_venv "$BASE" "torch==$TORCH_VERSION" "transformers==$TF_NEW" numpy \
    "optimum-quanto==$QUANTO_VERSION" "hqq==$HQQ_VERSION"
TORCH_SITE=$(site_packages "$BASE")

for v in "$TF_PREV" "$TF_457" "$TF_453"; do
    dir=$HERE/.venv-tf$v
    make_venv "$dir" "transformers==$v" numpy
    echo "$TORCH_SITE" > "$(site_packages "$dir")/zz_shared_torch.pth"
done

mkdir -p "$OUT"
# The 5.x families, once per release, then merged into $OUT.
V5_TMP=$(mktemp -d)
trap 'rm -rf "$V5_TMP"' EXIT
v5_families() { # python, out dir
    "$1" "$HERE/generate.py" --suite v5 --out "$2"
    # The quantizers' arithmetic (read by tests/unit/test_internal_quantizers.c, not by the replay).
    "$1" "$HERE/generate_quant_math.py" --out "$2"
    "$1" "$HERE/generate_quantized.py" --out "$2"
    # Offloaded caches: transformers' own offloading path with stand-in streams (it needs CUDA otherwise).
    "$1" "$HERE/generate_offload.py" --out "$2"
    # Linear-attention (recurrent state) layers.
    "$1" "$HERE/generate_linear.py" --suite v5 --out "$2"
    # FP8 quantized cache (transformers' Fp8QuantizedLayer): torch's e4m3fn arithmetic for the unit test, and the
    # cache vectors.
    "$1" "$HERE/generate_fp8_table.py" --out "$2"
    "$1" "$HERE/generate_fp8.py" --out "$2"
    # Indexed layers (update_indexer) and dummy layers among attention layers.
    "$1" "$HERE/generate_indexed.py" --out "$2"
}
v5_families "$BASE/bin/python" "$V5_TMP/new"
v5_families "$HERE/.venv-tf$TF_PREV/bin/python" "$V5_TMP/prev"
"$BASE/bin/python" "$HERE/merge_releases.py" "$V5_TMP/new" "$V5_TMP/prev" "$OUT"
"$HERE/.venv-tf$TF_457/bin/python" "$HERE/generate.py" --suite v457 --out "$OUT"
"$HERE/.venv-tf$TF_453/bin/python" "$HERE/generate.py" --suite v453 --out "$OUT"
"$HERE/generate_sink.sh" "$OUT"
# Legacy recurrent-state caches: MambaCache (4.53), Jamba's hybrid cache (4.57).
"$HERE/.venv-tf$TF_457/bin/python" "$HERE/generate_linear.py" --suite v457 --out "$OUT"
"$HERE/.venv-tf$TF_453/bin/python" "$HERE/generate_linear.py" --suite v453 --out "$OUT"
