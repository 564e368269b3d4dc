#!/usr/bin/env bash
# The Rust bindings' checks, as `make test` runs them: formatting, clippy with
# warnings as errors, and every test (unit, integration, doc) with the dlpack
# feature, the examples, the documentation with warnings as errors (without
# features and with all of them), then a build with freshly generated bindings
# when libclang exists.
# Jobs: $JOBS (default 2). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v cargo >/dev/null 2>&1; then
    echo "rust: SKIPPED: cargo is not installed (install Rust with rustup)"
    exit 0
fi
export CARGO_BUILD_JOBS=${JOBS:-2}
features=(--workspace --features kvcache-rs/dlpack)

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy "${features[@]}" --all-targets -- -D warnings
echo "== cargo test"
cargo test "${features[@]}" --no-fail-fast
echo "== examples"
cargo run -q -p kvcache-rs --example decode >/dev/null
cargo run -q -p kvcache-rs --example beam_search >/dev/null
echo "examples decode and beam_search ran"
# The documentation builds without a warning (broken links included) with no
# feature and with every feature: links to feature-gated items must not
# break either build.
echo "== cargo doc (no features)"
RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps --workspace

# kvcache-sys's `bindgen` feature needs libclang at build time.
if ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* \
    ${LIBCLANG_PATH:+"$LIBCLANG_PATH"/libclang*.so*} >/dev/null 2>&1; then
    echo "== cargo check --features kvcache-sys/bindgen"
    cargo check -p kvcache-rs --features kvcache-sys/bindgen
    # Every feature but kvcache-sys/system, which needs an installed kvcache (package.sh builds with it).
    echo "== cargo doc with every feature but kvcache-sys/system"
    RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps --workspace --features kvcache-rs/dlpack,kvcache-sys/bindgen
else
    echo "rust: SKIPPED: the build with kvcache-sys/bindgen needs libclang, which is not installed"
    echo "== cargo doc with every feature but kvcache-sys/bindgen (which needs libclang) and kvcache-sys/system"
    RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps --workspace --features kvcache-rs/dlpack
fi
echo "rust: all checks passed"
