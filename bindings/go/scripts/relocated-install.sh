#!/usr/bin/env bash
# A Go program outside the module tree, built against an installed kvcache, keeps running once the prefix moves:
#   - static (-tags kvcache_static: libkvcache.a through kvcache-static.pc): the binary needs no libkvcache;
#   - shared (pkg-config's kvcache.pc), installed into PREFIX/bin with CGO_LDFLAGS=-Wl,-rpath,$ORIGIN/../lib.
# The program is the README's example.
#   bindings/go/scripts/relocated-install.sh BUILD_DIR      (a CMake build of kvcache; installed to a temp prefix)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:?usage: relocated-install.sh BUILD_DIR}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
fail() { echo "relocated-install: $*" >&2; exit 1; }
module="$(sed -n 's/^module //p' "$here/go.mod")"
# Only what this script sets: no in-tree rpath or pkg-config path from env.sh.
unset CGO_LDFLAGS PKG_CONFIG_PATH
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=1

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
pc="$(dirname "$(find "$prefix" -name kvcache.pc -path '*/pkgconfig/*' | head -n 1)")"
libdir_rel="$(basename "$(dirname "$pc")")"

mkdir "$tmp/app"
awk '/^```go$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$root/README.md" >"$tmp/app/main.go"
[ -s "$tmp/app/main.go" ] || fail "no \`\`\`go block in README.md"
cd "$tmp/app"
go mod init example.com/kvcache-relocated >/dev/null 2>&1
go mod edit -require="$module@v0.0.0" -replace="$module=$here"

# Go's build cache keys a cgo package by its sources and CGO_* variables, not by what pkg-config printed: a
# package built by an earlier run would link the library at that run's (removed) prefix. The prefix's include
# directory in CGO_CFLAGS (where the headers are anyway) makes the key this run's.
export CGO_CFLAGS="-O2 -g -I$prefix/include"
PKG_CONFIG_PATH="$pc" go build -tags kvcache_static -o "$tmp/app-static" .
if readelf -d "$tmp/app-static" | grep -q 'NEEDED.*libkvcache'; then
  fail "the kvcache_static build still needs libkvcache.so"
fi
mkdir -p "$prefix/bin"
# shellcheck disable=SC2016 # $ORIGIN is the loader's, not the shell's
PKG_CONFIG_PATH="$pc" CGO_LDFLAGS='-Wl,-rpath,$ORIGIN/../'"$libdir_rel" go build -o "$prefix/bin/app-shared" .
readelf -d "$prefix/bin/app-shared" | grep -q 'NEEDED.*libkvcache\.so\.' || fail "the shared build does not need libkvcache"
echo "static: $(du -h "$tmp/app-static" | cut -f1), needs $(readelf -d "$tmp/app-static" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
echo "shared: needs $(readelf -d "$prefix/bin/app-shared" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"

mkdir "$tmp/elsewhere"
mv "$prefix" "$tmp/elsewhere/prefix"
want="layer 1 attends to 1 keys"
# grep reads all of the output: with -q it would stop at the line, and the program's next write would die of
# SIGPIPE, which pipefail reports as a failure.
runs() { "$1" | grep -x "$want" >/dev/null; }
runs "$tmp/app-static" || fail "the static program does not run once the prefix moved"
runs "$tmp/elsewhere/prefix/bin/app-shared" || fail "the shared program does not run once its prefix moved"
rm -rf "$tmp/elsewhere"
runs "$tmp/app-static" || fail "the static program does not run without the prefix"
echo "relocated-install: both programs run from the moved prefix; the static one without it too"
