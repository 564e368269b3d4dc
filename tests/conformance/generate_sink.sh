#!/usr/bin/env bash
# Regenerates the SinkCache vectors (tests/conformance/vectors/v452_sink*.kvv).
# SinkCache was removed after transformers 4.52 (a stub raising in 4.53-4.57,
# deleted in 5.0), so these vectors come from the newest 4.52 release. It
# shares the torch of .venv-torch through a .pth file, as generate.sh does
# for the other older versions; run generate.sh first (it makes .venv-torch).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
TF_452=${TF_452:-4.52.4}
OUT=${1:-$HERE/vectors}

site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

BASE=$HERE/.venv-torch
if [ ! -x "$BASE/bin/python" ]; then
    echo "generate_sink.sh: $BASE is missing; run generate.sh first (it installs torch there)" >&2
    exit 1
fi
TORCH_SITE=$(site_packages "$BASE")

dir=$HERE/.venv-tf$TF_452
if [ ! -x "$dir/bin/python" ]; then "$PY" -m venv "$dir"; fi
"$dir/bin/python" -m pip install --quiet "transformers==$TF_452" numpy
echo "$TORCH_SITE" > "$(site_packages "$dir")/zz_shared_torch.pth"

mkdir -p "$OUT"
"$dir/bin/python" "$HERE/generate_sink.py" --out "$OUT"
