//! Finds or builds the kvcache C library and selects the bindings.
//!
//! Order:
//!  1. `KVCACHE_SYS_USE_PKG_CONFIG=1`, or the `bundled` feature turned off: the
//!     installed library, through pkg-config, in the ABI-compatible version
//!     range `>= 0.2, < 1` (linked as pkg-config says, normally shared).
//!  2. Otherwise (the default): the C sources of this repository (or of
//!     `KVCACHE_SYS_SOURCE_DIR`) built with CMake and linked statically.
//!
//! The bindings are the pre-generated `src/bindings.rs` unless the `bindgen`
//! feature asks for a fresh generation from the headers that were found.
//!
//! Metadata for dependent build scripts: `DEP_KVCACHE_INCLUDE` (the header
//! directory), `DEP_KVCACHE_ROOT` (the CMake output directory, bundled builds)
//! and `DEP_KVCACHE_STATIC` (`1` when linked statically).

use std::env;
use std::path::{Path, PathBuf};

#[cfg(feature = "bindgen")]
mod config {
    include!("bindgen_config.rs");
}

/// The ABI-compatible versions: the major number is the ABI promise (see
/// kvcache/version.h), and these bindings need the 0.2 structs.
const PKG_CONFIG_RANGE: std::ops::Range<&str> = "0.2".."1";

fn env_flag(name: &str) -> bool {
    println!("cargo:rerun-if-env-changed={name}");
    matches!(env::var(name), Ok(v) if !v.is_empty() && v != "0")
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kvcache_sys_generated)");
    let use_pkg_config = env_flag("KVCACHE_SYS_USE_PKG_CONFIG") || !cfg!(feature = "bundled");
    let include_dir = if use_pkg_config {
        system_library()
    } else {
        bundled_library()
    };
    println!("cargo:include={}", include_dir.display());
    // For tests/layout.rs, which compiles a C program against the same header.
    println!(
        "cargo:rustc-env=KVCACHE_SYS_INCLUDE_DIR={}",
        include_dir.display()
    );
    bindings(&include_dir);
}

fn system_library() -> PathBuf {
    let lib = pkg_config::Config::new()
        .range_version(PKG_CONFIG_RANGE)
        .probe("kvcache")
        .unwrap_or_else(|e| {
            panic!(
                "kvcache-sys: no installed kvcache {} .. {} found through pkg-config: {e}\n\
                 Install kvcache (`make install PREFIX=...` in its repository, then put \
                 PREFIX/lib/pkgconfig on PKG_CONFIG_PATH), or build the bundled sources: \
                 enable the `bundled` feature and unset KVCACHE_SYS_USE_PKG_CONFIG.",
                PKG_CONFIG_RANGE.start, PKG_CONFIG_RANGE.end
            )
        });
    println!("cargo:static=0");
    lib.include_paths
        .iter()
        .find(|p| p.join("kvcache.h").is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "kvcache-sys: pkg-config found kvcache {} but none of its include paths {:?} holds kvcache.h",
                lib.version, lib.include_paths
            )
        })
}

#[cfg(not(feature = "bundled"))]
fn bundled_library() -> PathBuf {
    unreachable!("the bundled build needs the `bundled` feature")
}

#[cfg(feature = "bundled")]
fn bundled_library() -> PathBuf {
    println!("cargo:rerun-if-env-changed=KVCACHE_SYS_SOURCE_DIR");
    let src = match env::var_os("KVCACHE_SYS_SOURCE_DIR") {
        Some(dir) => PathBuf::from(dir),
        // bindings/rust/kvcache-sys -> the repository root.
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.."),
    };
    let src = src.canonicalize().unwrap_or(src);
    if !src.join("CMakeLists.txt").is_file() || !src.join("abi/include/kvcache.h").is_file() {
        panic!(
            "kvcache-sys: {} does not hold the kvcache sources (CMakeLists.txt and \
             abi/include/kvcache.h). Set KVCACHE_SYS_SOURCE_DIR to a kvcache checkout, or use an \
             installed library with KVCACHE_SYS_USE_PKG_CONFIG=1.",
            src.display()
        );
    }
    for part in [
        "CMakeLists.txt",
        "cmake",
        "abi",
        "core",
        "backends",
        "kvcache.pc.in",
    ] {
        println!("cargo:rerun-if-changed={}", src.join(part).display());
    }
    let dst = cmake::Config::new(&src)
        .define("BUILD_TESTING", "OFF")
        .define("KVC_SANITIZE", "OFF")
        .build_target("kvcache_static")
        .build();
    let lib_dir = dst.join("build");
    if !lib_dir.join("libkvcache.a").is_file() {
        panic!(
            "kvcache-sys: CMake finished but {} has no libkvcache.a",
            lib_dir.display()
        );
    }
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=static=kvcache");
    // What kvcache.pc lists as Libs.private.
    for lib in ["m", "pthread", "dl"] {
        println!("cargo:rustc-link-lib={lib}");
    }
    println!("cargo:root={}", dst.display());
    println!("cargo:static=1");
    src.join("abi/include")
}

#[cfg(not(feature = "bindgen"))]
fn bindings(_include_dir: &Path) {}

#[cfg(feature = "bindgen")]
fn bindings(include_dir: &Path) {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let generated = config::kvcache_bindings(include_dir)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "kvcache-sys: bindgen failed on {}: {e}",
                include_dir.display()
            )
        });
    generated
        .write_to_file(out.join("bindings.rs"))
        .expect("kvcache-sys: cannot write the generated bindings");
    println!("cargo:rustc-cfg=kvcache_sys_generated");
}
