#!/usr/bin/env bash
# Source this to build the Go package against an in-tree build of the C library:
#   source bindings/go/scripts/env.sh [BUILD_DIR]      (default: build)
# It installs BUILD_DIR into BUILD_DIR/go-prefix (cmake --install: headers,
# libkvcache.so and the generated kvcache.pc) and exports PKG_CONFIG_PATH so
# that `#cgo pkg-config: kvcache` finds it, and CGO_LDFLAGS with an rpath so
# that test binaries and programs find libkvcache.so without LD_LIBRARY_PATH.
_kvc_go_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
_kvc_go_build="${1:-build}"
case "$_kvc_go_build" in /*) ;; *) _kvc_go_build="$_kvc_go_root/$_kvc_go_build" ;; esac
if [ ! -f "$_kvc_go_build/CMakeCache.txt" ]; then
  echo "env.sh: $_kvc_go_build is not a CMake build of kvcache; run: cmake -G Ninja -S . -B build && cmake --build build" >&2
  return 1 2>/dev/null || exit 1
fi
cmake --install "$_kvc_go_build" --prefix "$_kvc_go_build/go-prefix" >/dev/null || { return 1 2>/dev/null || exit 1; }
_kvc_go_pc="$(dirname "$(find "$_kvc_go_build/go-prefix" -name kvcache.pc -path '*/pkgconfig/*' | head -n 1)")"
export PKG_CONFIG_PATH="$_kvc_go_pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
_kvc_go_libdir="$(cd "$(PKG_CONFIG_PATH="$_kvc_go_pc" pkg-config --variable=libdir kvcache)" && pwd)"
export CGO_LDFLAGS="-Wl,-rpath,$_kvc_go_libdir${CGO_LDFLAGS:+ $CGO_LDFLAGS}"
export CGO_ENABLED=1
unset _kvc_go_root _kvc_go_build _kvc_go_pc _kvc_go_libdir
