#!/usr/bin/env bash
# Everything `make test` runs for the Go package, against an in-tree build:
#   bindings/go/scripts/test.sh [BUILD_DIR]        (default: build, relative to the repository)
# gofmt, go vet (with and without cgo), go test -race ./... (every cache kind,
# operation and error path, goroutines, finalizers, the godoc examples), the
# same under cgocheck2 (the cgo pointer rules, checked at every store), go
# test without cgo (the descriptive error), and a module outside the
# repository that requires the package through a replace and runs the
# README's example, and the same example built against an installed prefix
# (-tags kvcache_static, and shared with an $ORIGIN rpath) run after the
# prefix moved (relocated-install.sh). Exits non-zero on the first failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac

command -v go >/dev/null 2>&1 || { echo "go test: go is not installed (Go 1.24 or newer is needed)" >&2; exit 1; }
gov="$(go env GOVERSION | sed 's/^go//')"
printf '%s\n1.24\n' "$gov" | sort -C -V -r ||
  { echo "go test: Go $gov is too old; the package needs Go 1.24 or newer" >&2; exit 1; }
command -v pkg-config >/dev/null 2>&1 || { echo "go test: pkg-config is not installed" >&2; exit 1; }
# The toolchain must not be fetched from the network: go.mod asks for 1.24, which $gov satisfies.
export GOTOOLCHAIN=local

# shellcheck source=env.sh
source "$here/scripts/env.sh" "$build"
cd "$here"

echo "== gofmt"
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
  echo "gofmt: these files are not formatted:" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "== go vet"
go vet ./...
echo "== go vet (CGO_ENABLED=0)"
CGO_ENABLED=0 go vet ./...
echo "== go test -race ./..."
go test -race -count=1 ./...
# cgocheck2 checks every store of a Go pointer into C memory at run time:
# the arrays of tensors that UpdateAll and Step keep in C memory must point
# only to pinned Go memory.
echo "== go test ./... (GOEXPERIMENT=cgocheck2)"
GOEXPERIMENT=cgocheck2 go test -count=1 ./...
echo "== go test ./... (CGO_ENABLED=0)"
CGO_ENABLED=0 go test -count=1 ./...
echo "== a module outside the repository runs the README's example"
"$here/scripts/example-module.sh"
echo "== the same against an installed prefix, static and shared, after the prefix moved"
"$here/scripts/relocated-install.sh" "$build"
echo "go test: all Go checks passed"
