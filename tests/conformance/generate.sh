#!/usr/bin/env bash
# Regenerates tests/conformance/vectors/ by running transformers' own cache
# classes. Three transformers versions are needed because some behaviours the
# library mirrors exist only in older releases (see docs/conformance.md).
# One torch install is shared: the older-version venvs see it through a .pth
# file placed after their own site-packages.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
TF_NEW=${TF_NEW:-5.23.0}
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

for v in "$TF_457" "$TF_453"; do
    dir=$HERE/.venv-tf$v
    make_venv "$dir" "transformers==$v" numpy
    echo "$TORCH_SITE" > "$(site_packages "$dir")/zz_shared_torch.pth"
done

mkdir -p "$OUT"
"$BASE/bin/python" "$HERE/generate.py" --suite v5 --out "$OUT"
# The quantizers' arithmetic (read by tests/unit/test_internal_quantizers.c, not by the replay).
"$BASE/bin/python" "$HERE/generate_quant_math.py" --out "$OUT"
"$BASE/bin/python" "$HERE/generate_quantized.py" --out "$OUT"
# Offloaded caches: transformers' own offloading path with stand-in streams (it needs CUDA otherwise).
"$BASE/bin/python" "$HERE/generate_offload.py" --out "$OUT"
"$HERE/.venv-tf$TF_457/bin/python" "$HERE/generate.py" --suite v457 --out "$OUT"
"$HERE/.venv-tf$TF_453/bin/python" "$HERE/generate.py" --suite v453 --out "$OUT"
"$HERE/generate_sink.sh" "$OUT"
# Linear-attention (recurrent state) layers: current layers, legacy MambaCache (4.53), Jamba's hybrid cache (4.57).
"$BASE/bin/python" "$HERE/generate_linear.py" --suite v5 --out "$OUT"
"$HERE/.venv-tf$TF_457/bin/python" "$HERE/generate_linear.py" --suite v457 --out "$OUT"
"$HERE/.venv-tf$TF_453/bin/python" "$HERE/generate_linear.py" --suite v453 --out "$OUT"
# FP8 quantized cache (transformers' Fp8QuantizedLayer): torch's e4m3fn arithmetic for the unit test, and the
# cache vectors (written to vectors/pending/ until kvcache has the layer kind).
"$BASE/bin/python" "$HERE/generate_fp8_table.py" --out "$OUT"
"$BASE/bin/python" "$HERE/generate_fp8.py" --out "$OUT"
