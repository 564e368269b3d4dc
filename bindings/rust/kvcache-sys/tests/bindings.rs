//! src/bindings.rs must be exactly what bindgen makes of the headers now.
//!
//! Regenerate it after a header change with
//! `KVCACHE_SYS_BLESS=1 cargo test -p kvcache-sys --test bindings`.

use std::io::Write;
use std::path::Path;

#[allow(dead_code)]
mod config {
    include!("../bindgen_config.rs");
}

/// Printed past the test harness's output capture, so that a skip is seen.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[test]
fn pregenerated_bindings_match_a_fresh_generation() {
    let include_dir = Path::new(env!("KVCACHE_SYS_INCLUDE_DIR"));
    let committed_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bindings.rs");

    // bindgen loads libclang at run time and panics when there is none.
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let generated = std::panic::catch_unwind(|| config::kvcache_bindings(include_dir).generate());
    std::panic::set_hook(previous_hook);
    let fresh = match generated {
        Ok(Ok(bindings)) => bindings.to_string(),
        Ok(Err(e)) => panic!("bindgen failed on {}: {e}", include_dir.display()),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            if message.contains("libclang") {
                say(&format!(
                    "SKIPPED: pregenerated_bindings_match_a_fresh_generation: bindgen needs \
                     libclang, which is not installed ({message}); install libclang (Debian: \
                     libclang1 / clang) or set LIBCLANG_PATH"
                ));
                return;
            }
            std::panic::resume_unwind(payload);
        }
    };

    if std::env::var_os("KVCACHE_SYS_BLESS").is_some() {
        std::fs::write(&committed_path, &fresh).expect("cannot write src/bindings.rs");
        say(&format!("wrote {}", committed_path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&committed_path).expect("src/bindings.rs");
    if committed != fresh {
        let line = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(fresh.lines().count()));
        panic!(
            "src/bindings.rs differs from a fresh generation from {} (first at line {}:\n  \
             committed: {:?}\n  fresh:     {:?}).\nRegenerate it with \
             `KVCACHE_SYS_BLESS=1 cargo test -p kvcache-sys --test bindings`.",
            include_dir.display(),
            line + 1,
            committed.lines().nth(line).unwrap_or("<end of file>"),
            fresh.lines().nth(line).unwrap_or("<end of file>"),
        );
    }
}
