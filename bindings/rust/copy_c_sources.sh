#!/usr/bin/env bash
# Copies the C sources that kvcache-sys compiles into kvcache-sys/csrc/, so that the packaged crate (cargo
# package, crates.io) builds without this repository around it:
#   bindings/rust/copy_c_sources.sh           make csrc/ the repository's files, exactly
#   bindings/rust/copy_c_sources.sh --check [CSRC]   exit 1, naming the files, when csrc/ (or CSRC: that of an
#                                                    unpacked .crate) differs from them
# csrc/ is not committed (.gitignore): the repository is its one source, and package.sh runs this first.
# In the repository, build.rs compiles the repository's own files when csrc/ is absent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dest="$here/kvcache-sys/csrc"

# The library as kvcache-sys builds it (build.rs): the public and backend headers, the core with its
# folders, the CPU backend and the shared quantizer arithmetic. No GPU plugin, test or CMake file.
list_sources() {
  cd "$root"
  find abi/include abi/backend -name '*.h'
  find core backends/cpu backends/quant_math \( -name '*.c' -o -name '*.h' \)
  find backends -maxdepth 1 -name '*.h'
}

if [ "${1:-}" = "--check" ]; then
  dest="${2:-$dest}"
  [ -d "$dest" ] || { echo "copy_c_sources: $dest is missing; run $0" >&2; exit 1; }
  stale="$(cd "$root" && list_sources | sort | while read -r f; do
    cmp -s "$f" "$dest/$f" || echo "$f"; done)"
  extra="$(cd "$dest" && find . -type f | sed 's|^\./||' | sort | comm -23 - <(cd "$root" && list_sources | sort))"
  if [ -n "$stale$extra" ]; then
    echo "copy_c_sources: $dest differs from the repository (run $0):" >&2
    printf '%s\n' $stale $extra | sed 's/^/  /' >&2
    exit 1
  fi
  echo "copy_c_sources: $dest is current ($(cd "$dest" && find . -type f | wc -l) files)"
  exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
(list_sources) | while read -r f; do
  mkdir -p "$dest/$(dirname "$f")"
  cp "$root/$f" "$dest/$f"
done
echo "copy_c_sources: $(find "$dest" -type f | wc -l) files in $dest"
