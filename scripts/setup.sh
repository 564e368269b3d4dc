#!/usr/bin/env bash
# Prepare a machine to build and test kvcache; safe to run again and again.
#
# On Debian/Ubuntu it installs what is missing with apt-get (sudo only when
# not root), then makes the project's Python environment .venv. When all is
# present it only checks, which takes a few seconds: `make test` runs it on
# every call. Elsewhere it checks the tools and says what to install.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# Debian's "clang" is a versioned clang-N; libFuzzer and the sanitizer
# runtimes live in libclang-rt-N-dev, which must match that N.
clang_major() {
  if command -v clang >/dev/null 2>&1; then
    clang -dumpversion | cut -d. -f1
  else
    apt-cache depends clang 2>/dev/null |
      sed -n 's/^ *Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1
  fi
}

missing_debs() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
      printf '%s\n' "$pkg"
  done
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@" # sudo drops the environment: callers pass variables with env
  else
    die "need root or sudo to run: $*"
  fi
}

install_system_packages() {
  # redis-server (with redis-tools: redis-cli, redis-benchmark): the Redis tier's tests and bench start their own.
  local pkgs=(gcc g++ make clang llvm pkg-config ninja-build cmake binutils redis-server)
  # The Python that will run `python3 -m venv` needs ensurepip; on Debian it
  # comes from python3-venv unless python3 is a separately installed one.
  python3 -c 'import ensurepip' >/dev/null 2>&1 || pkgs+=(python3 python3-venv)
  local missing major
  missing="$(missing_debs "${pkgs[@]}")"
  major="$(command -v clang >/dev/null 2>&1 && clang_major || true)"
  [ -z "$major" ] || missing+=" $(missing_debs "libclang-rt-${major}-dev")"
  if [ -z "$major" ] || [ -n "${missing// /}" ]; then
    # A fresh image has no package lists; a stale one may name removed versions.
    log "updating package lists"
    as_root apt-get update -qq
    if [ -z "$major" ]; then
      major="$(clang_major)"
      [ -n "$major" ] || die "cannot tell which clang version this system has"
      missing+=" libclang-rt-${major}-dev"
    fi
    # shellcheck disable=SC2086
    log "installing:" $missing
    # shellcheck disable=SC2086
    as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
}

check_tools() {
  local tool absent=()
  for tool in cc c++ clang cmake ninja pkg-config nm readelf python3; do
    command -v "$tool" >/dev/null 2>&1 || absent+=("$tool")
  done
  [ "${#absent[@]}" -eq 0 ] || die "missing tools: ${absent[*]}"
  local v
  v="$(cmake --version | sed -n '1s/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')"
  printf '%s\n3.20\n' "$v" | sort -C -V -r || die "cmake 3.20 or newer is required (found ${v:-none})"
  # The Go binding: Go is a base toolchain of the machine (Debian's golang-go is too old to install instead).
  command -v go >/dev/null 2>&1 || die "go is missing: bindings/go needs Go 1.24 or newer (https://go.dev/dl)"
  v="$(go env GOVERSION 2>/dev/null | sed 's/^go//')"
  printf '%s\n1.24\n' "$v" | sort -C -V -r || die "Go 1.24 or newer is required for bindings/go (found ${v:-none})"
  # The Rust binding: cargo with rustfmt and clippy (rustup's components); bindgen finds Debian clang's libclang.
  command -v cargo >/dev/null 2>&1 || die "cargo is missing: bindings/rust needs Rust 1.85 or newer (https://rustup.rs)"
  if command -v rustup >/dev/null 2>&1; then
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
  fi
}

# The fuzz suite needs libFuzzer, which clang finds only with the runtime
# package of its own version; prove it links instead of trusting package names.
check_libfuzzer() {
  local tmp
  tmp="$(mktemp -d)"
  if ! printf 'int LLVMFuzzerTestOneInput(const char*d, unsigned long n){(void)d;(void)n;return 0;}\n' |
      clang -fsanitize=fuzzer,address,undefined -x c - -o "$tmp/fuzz_probe" 2>"$tmp/log"; then
    cat "$tmp/log" >&2
    rm -rf "$tmp"
    die "clang cannot link libFuzzer; install libclang-rt-$(clang_major)-dev (or your system's equivalent)"
  fi
  rm -rf "$tmp"
}

# .venv holds the Python tools of tests and bindings; scripts/requirements-dev.txt
# names them. A stamp of that file's hash keeps the fast path free of pip.
setup_venv() {
  local req="scripts/requirements-dev.txt" stamp=".venv/.requirements-dev.sha256" want
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return
  fi
  if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    python3 -m venv .venv
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip ||
    log "warning: could not upgrade pip in .venv; continuing with the bundled one"
  if grep -qv '^[[:space:]]*\(#.*\)\?$' "$req"; then
    log "installing $req into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"
  fi
  printf '%s\n' "$want" >"$stamp"
}

# Side-by-side transformers releases for the Python binding's tests (scripts/transformers-releases.txt): each in
# .venv-transformers/<release>/, selected by PYTHONPATH, without torch (about 120 MB and a few seconds each). A
# stamp of the release's line keeps the fast path free of pip; folders of releases no longer listed are removed.
setup_transformers_releases() {
  local list="scripts/transformers-releases.txt" dir=".venv-transformers" line release extras want dest
  mkdir -p "$dir"
  local keep=()
  while read -r line; do
    line="${line%%#*}"
    read -r release extras <<<"$line" || true
    [ -n "${release:-}" ] || continue
    keep+=("$release")
    dest="$dir/$release"
    want="$(printf '%s\n' "$line" | sha256sum | cut -d' ' -f1)"
    if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$want" ]; then
      continue
    fi
    log "installing transformers $release into $dest"
    rm -rf "$dest" "$dest.tmp"
    # shellcheck disable=SC2086
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --target "$dest.tmp" \
      "transformers==$release" $extras
    PYTHONPATH="$dest.tmp" .venv/bin/python -c "
import sys, transformers, transformers.cache_utils
sys.exit(0 if transformers.__version__ == '$release' else 'imported transformers %s' % transformers.__version__)" ||
      die "transformers $release in $dest.tmp does not import"
    printf '%s\n' "$want" >"$dest.tmp/.stamp"
    mv "$dest.tmp" "$dest"
  done <"$list"
  local old
  for old in "$dir"/*; do
    [ -d "$old" ] || continue
    case " ${keep[*]} " in *" $(basename "$old") "*) ;; *) log "removing $old (not listed in $list)"; rm -rf "$old" ;; esac
  done
}

# vLLM's wheel for the tests that run vLLM's own classes on the CPU (its KV offloading's secondary tiers, its
# events): the release scripts/vllm-release.txt names, installed --no-deps into .venv-vllm/<release>/ with the
# pure-Python (or prebuilt) packages the imported modules need, and used by .venv's Python (its torch) through
# PYTHONPATH. No CUDA, no engine: those modules alone. A stamp of the file's hash keeps the fast path free of pip;
# folders of other releases are removed.
install_vllm_wheel() {
  local list="scripts/vllm-release.txt" dir=".venv-vllm" release want dest
  release="$(sed -n 's/#.*//; s/[[:space:]]//g; /./{p;q}' "$list")"
  [ -n "$release" ] || die "$list names no vLLM release"
  dest="$dir/$release"
  want="$(sha256sum "$list" | cut -d' ' -f1)"
  mkdir -p "$dir"
  local old
  for old in "$dir"/*; do
    [ -d "$old" ] && [ "$old" != "$dest" ] && { log "removing $old (not $list's release)"; rm -rf "$old"; }
  done
  if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$want" ]; then
    return
  fi
  # What vllm.v1.kv_offload.tiering's imports reach, beyond .venv's torch and numpy (found by importing it).
  local needs=(aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 apache-tvm-ffi==0.1.15.post2 attrs==26.1.0
    cachetools==8.0.3 cbor2==6.3.0 certifi==2026.10.19.post1 cloudpickle==3.1.3 frozenlist==1.8.0 llguidance==1.9.1
    msgspec==0.23.0 multidict==7.2.1 pillow==13.0.0 prometheus-client==0.26.0 propcache==0.5.4 py-cpuinfo==9.0.0
    pybase64==1.5.1 pyzmq==27.3.0 requests==2.34.2 urllib3==2.8.0 uvloop==0.23.0 xgrammar==0.2.9 yarl==1.25.1)
  log "installing vllm $release into $dest"
  rm -rf "$dest" "$dest.tmp"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --target "$dest.tmp" \
    "vllm==$release" "${needs[@]}"
  PYTHONPATH="$dest.tmp" .venv/bin/python -c "
import sys, vllm.v1.kv_offload.tiering.spec
from importlib.metadata import version
sys.exit(0 if version('vllm') == '$release' else 'found vllm %s' % version('vllm'))" >/dev/null 2>&1 ||
    die "vllm $release in $dest.tmp does not import (PYTHONPATH=$dest.tmp .venv/bin/python -c 'import vllm.v1.kv_offload.tiering.spec')"
  printf '%s\n' "$want" >"$dest.tmp/.stamp"
  mv "$dest.tmp" "$dest"
}

# The GPU toolchains that build the backend plugins (CMake's KVC_CUDA and
# KVC_HIP; `make build` turns them on where these are present): HIP 5.2 from
# Debian (hipcc, libamdhip64-dev and their clang 15: 26 packages, about 340 MB)
# and the CUDA 13 compiler from NVIDIA's pip packages into .venv
# (scripts/requirements-gpu.txt: nvcc, its front and back ends and the CCCL
# headers, about 240 MB; the runtime is torch's already). About 20 s on a
# fresh machine. Neither needs a GPU: they only compile. A stamp of the
# requirements' hash keeps the fast path free of pip. With HIP, clang-22 and
# lld-22 (Debian 12's security updates carry them): the gpu_hip_targets test
# compiles the kernels with them for the AMD targets hipcc 5.2 rejects
# (gfx942, gfx950, gfx1100, gfx1201).
install_gpu_toolchains() {
  if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    local arch missing
    arch="$(dpkg --print-architecture)"
    if [ "$arch" != amd64 ]; then
      log "HIP toolchain: Debian packages hipcc for amd64 only, this is $arch; the HIP plugin is not built"
    else
      missing="$(missing_debs hipcc libamdhip64-dev clang-22 lld-22)"
      if [ -n "$missing" ]; then
        log "updating package lists"
        as_root apt-get update -qq
        # shellcheck disable=SC2086
        log "installing the HIP toolchain:" $missing
        # shellcheck disable=SC2086
        as_root env DEBIAN_FRONTEND=noninteractive \
          apt-get install -y -qq --no-install-recommends $missing >/dev/null
      fi
    fi
  fi
  local req="scripts/requirements-gpu.txt" stamp=".venv/.requirements-gpu.sha256" want
  want="$(cat scripts/requirements-dev.txt "$req" | sha256sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return
  fi
  log "installing $req into .venv (the CUDA toolkit)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"
  local nvcc
  nvcc="$(ls .venv/lib/python3.*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n 1)"
  if [ -z "$nvcc" ] || ! "$nvcc" --version >/dev/null; then
    die "$req installed but .venv has no nvcc that runs (expected site-packages/nvidia/cu13/bin/nvcc)"
  fi
  printf '%s\n' "$want" >"$stamp"
}

if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  install_system_packages
else
  log "not a Debian-like system: checking tools only"
fi
check_tools
check_libfuzzer
setup_venv
setup_transformers_releases
install_vllm_wheel
install_gpu_toolchains
log "ok"
