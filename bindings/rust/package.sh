#!/usr/bin/env bash
# The crates as crates.io would get them: copies the C sources into kvcache-sys (copy_c_sources.sh), runs
# `cargo publish --workspace --dry-run` (packages both crates and builds each from its package alone, kvcache-rs
# against the packaged kvcache-sys), `cargo package --workspace` for the .crate files, checks that the packaged
# C sources are the repository's, then builds and runs the README's Rust example in a new crate outside the
# repository that depends on nothing but the unpacked .crate files (kvcache-rs by path, kvcache-sys through
# [patch.crates-io]). Given a CMake build of kvcache, the outside crate is built once more with kvcache-sys's
# `system` feature against that build installed to a prefix (pkg-config) and run.
#   bindings/rust/package.sh [BUILD_DIR]      Jobs: $JOBS (default 2). Exits non-zero on any failure.
set -euo pipefail
build="${1:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"
export CARGO_BUILD_JOBS=${JOBS:-2}
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"

echo "== copy_c_sources.sh"
./copy_c_sources.sh
# --allow-dirty: the check is of what would be published from this tree, committed or not.
echo "== cargo publish --workspace --dry-run"
# The dry run serves kvcache-sys to kvcache-rs from a registry of its own under target/package, and cargo unpacks
# it into $CARGO_HOME/registry/src once per name and version: a copy unpacked by an earlier run of this version
# (older sources, same path) would be built instead of this one, and so would a kvcache-sys an earlier run compiled
# (cargo never rebuilds a registry crate of an unchanged version). Remove those copies, and verify in a target
# directory of its own that starts empty.
rm -rf "$here/target/package" "$here/target/publish-check"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
for crate in kvcache-sys kvcache-rs; do
  rm -rf "$cargo_home"/registry/src/*/"$crate-$version" "$cargo_home"/registry/cache/*/"$crate-$version.crate"
done
CARGO_TARGET_DIR="$here/target/publish-check" cargo publish --workspace --dry-run --allow-dirty
rm -rf "$here/target/publish-check"
echo "== cargo package --workspace"
# Each crate's build from its package alone was just verified by the dry run.
cargo package --workspace --allow-dirty --no-verify
crates="$here/target/package"
for crate in kvcache-sys kvcache-rs; do
  [ -f "$crates/$crate-$version.crate" ] || { echo "package.sh: no $crates/$crate-$version.crate" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$crates/kvcache-sys-$version.crate" -C "$tmp"
tar -xzf "$crates/kvcache-rs-$version.crate" -C "$tmp"
./copy_c_sources.sh --check "$tmp/kvcache-sys-$version/csrc"

echo "== a crate outside the repository runs the README's example from the packaged crates"
mkdir -p "$tmp/outside/src"
awk '/^```rust$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$root/README.md" >"$tmp/outside/src/main.rs"
[ -s "$tmp/outside/src/main.rs" ] || { echo "package.sh: no \`\`\`rust block in README.md" >&2; exit 1; }
cat >"$tmp/outside/Cargo.toml" <<TOML
[package]
name = "outside"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
kvcache-rs = { path = "$tmp/kvcache-rs-$version" }

[patch.crates-io]
kvcache-sys = { path = "$tmp/kvcache-sys-$version" }
TOML
# Its own target directory under this one's: nothing built from the repository's sources is reused.
(cd "$tmp/outside" && CARGO_TARGET_DIR="$here/target/outside" cargo run -q) | tee "$tmp/out.txt"
grep -qx "layer 1 attends to 1 keys" "$tmp/out.txt" || { echo "package.sh: the example did not run" >&2; exit 1; }
if [ -n "$build" ]; then
  case "$build" in /*) ;; *) build="$root/$build" ;; esac
  echo "== the same with kvcache-sys/system: an installed kvcache through pkg-config"
  cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
  pc="$(dirname "$(find "$tmp/prefix" -name kvcache.pc -path '*/pkgconfig/*' | head -n 1)")"
  sed -i 's|^kvcache-rs = .*|kvcache-rs = { path = "'"$tmp/kvcache-rs-$version"'" }\nkvcache-sys = { version = "'"$version"'", features = ["system"] }|' \
    "$tmp/outside/Cargo.toml"
  (cd "$tmp/outside" && PKG_CONFIG_PATH="$pc" CARGO_TARGET_DIR="$here/target/outside-system" cargo build -q)
  exe="$here/target/outside-system/debug/outside"
  readelf -d "$exe" | grep -q 'NEEDED.*libkvcache\.so' || { echo "package.sh: the system build does not link libkvcache.so" >&2; exit 1; }
  LD_LIBRARY_PATH="$(dirname "$pc")" "$exe" | grep -qx "layer 1 attends to 1 keys" ||
    { echo "package.sh: the system build did not run" >&2; exit 1; }
  echo "the system build linked the installed libkvcache.so and ran the example"
fi
echo "rust packaging: both crates package and publish (dry run); the outside crate ran the README's example"
