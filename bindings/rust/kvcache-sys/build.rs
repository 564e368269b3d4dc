//! Finds or builds the kvcache C library and selects the bindings.
//!
//! Order:
//!  1. The `system` feature, or `KVCACHE_SYS_USE_PKG_CONFIG=1`, or the
//!     `bundled` feature turned off: the installed library, through pkg-config,
//!     in the ABI-compatible version range `>= 0.2, < 1` (linked as pkg-config
//!     says, normally shared).
//!  2. Otherwise (the default, `bundled`): the C sources compiled with the `cc`
//!     crate and linked statically. The sources are `KVCACHE_SYS_SOURCE_DIR`,
//!     else the repository around this crate, else the crate's own `csrc/`
//!     (what a packaged crate carries: `copy_c_sources.sh` fills it).
//!
//! The bindings are the pre-generated `src/bindings.rs` unless the `bindgen`
//! feature asks for a fresh generation from the headers that were found.
//!
//! Metadata for dependent build scripts: `DEP_KVCACHE_INCLUDE` (the header
//! directory), `DEP_KVCACHE_ROOT` (where the static library was built, bundled
//! builds) and `DEP_KVCACHE_STATIC` (`1` when linked statically).

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
    let use_pkg_config = cfg!(feature = "system")
        || env_flag("KVCACHE_SYS_USE_PKG_CONFIG")
        || !cfg!(feature = "bundled");
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
                 enable the `bundled` feature (the default) without `system`, and unset \
                 KVCACHE_SYS_USE_PKG_CONFIG.",
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

/// Where the C sources are: KVCACHE_SYS_SOURCE_DIR, else the repository when this crate is the one in it
/// (bindings/rust/kvcache-sys: never a csrc/ copy that an edit of the repository made stale), else the
/// crate's csrc/ (a packaged crate).
#[cfg(feature = "bundled")]
fn source_root() -> PathBuf {
    println!("cargo:rerun-if-env-changed=KVCACHE_SYS_SOURCE_DIR");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repository = manifest.join("../../..");
    let in_repository = repository.join("abi/include/kvcache.h").is_file()
        && repository
            .join("bindings/rust/kvcache-sys")
            .canonicalize()
            .ok()
            == manifest.canonicalize().ok();
    let src = if let Some(dir) = env::var_os("KVCACHE_SYS_SOURCE_DIR") {
        PathBuf::from(dir)
    } else if in_repository {
        repository
    } else {
        manifest.join("csrc")
    };
    let src = src.canonicalize().unwrap_or(src);
    if !src.join("abi/include/kvcache.h").is_file() || !src.join("core").is_dir() {
        panic!(
            "kvcache-sys: {} does not hold the kvcache sources (abi/include/kvcache.h and core/). \
             Set KVCACHE_SYS_SOURCE_DIR to a kvcache checkout, or use an installed library with the \
             `system` feature or KVCACHE_SYS_USE_PKG_CONFIG=1.",
            src.display()
        );
    }
    src
}

/// Every `.c` file under `dir`, in a stable order (the archive's member order).
#[cfg(feature = "bundled")]
fn c_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("kvcache-sys: cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("kvcache-sys: directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            c_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "c") {
            out.push(path);
        }
    }
}

#[cfg(feature = "bundled")]
fn bundled_library() -> PathBuf {
    let src = source_root();
    // What CMake's kvcache_objects compiles (CMakeLists.txt): the core and its folders, the CPU backend.
    let mut sources = Vec::new();
    c_files(&src.join("core"), &mut sources);
    c_files(&src.join("backends/cpu"), &mut sources);
    for part in ["abi", "core", "backends/cpu", "backends/quant_math"] {
        println!("cargo:rerun-if-changed={}", src.join(part).display());
    }
    let mut build = cc::Build::new();
    build
        .files(&sources)
        .std("c11")
        .include(src.join("abi/include"))
        .include(src.join("core"))
        .include(src.join("abi/backend"))
        .include(src.join("backends"))
        .define("KVC_BUILDING_LIBRARY", None)
        .define("KVC_BACKEND_DL", "1")
        .flag_if_supported("-fvisibility=hidden")
        .pic(true)
        .warnings(false);
    build.compile("kvcache");
    for lib in ["m", "pthread", "dl"] {
        println!("cargo:rustc-link-lib={lib}");
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:root={}", out.display());
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
