//! `kvcache::host_memory`: a dropped CPU cache's large stores are kept for
//! reuse, `release` gives them back, and a retention of 0 keeps nothing.
//!
//! The kept memory is process-wide, so this binary holds one test: tests of
//! one binary run on parallel threads, and another test's caches would change
//! the counts.

use kvcache::{Cache, LayerOptions, Preset, TensorRef, host_memory};

const HEADS: i64 = 4;
const DIM: i64 = 64;
/// One static layer of 4 heads x 1024 slots x 64 dims of f32: 1 MiB per K and
/// V store, the smallest block the library keeps.
const SLOTS: i64 = 1024;
const STORES_BYTES: u64 = 2 * (HEADS * SLOTS * DIM * 4) as u64;

/// A cache whose K and V stores exist: a static layer allocates them at its
/// first update.
fn cache_with_large_stores() -> Cache {
    let mut cache = Cache::builder(Preset::Custom)
        .layers([LayerOptions::static_(SLOTS)])
        .build()
        .expect("a static cache");
    let data = vec![1.0f32; (HEADS * 3 * DIM) as usize];
    let t = TensorRef::new(&data, &[1, HEADS, 3, DIM]).expect("a tensor");
    cache.update(0, &t, &t).expect("update");
    cache
}

#[test]
fn dropped_stores_are_kept_released_and_not_kept_under_a_zero_limit() {
    // Start from nothing kept, under a known limit (the default depends on the machine).
    let first = host_memory::set_retention(0);
    assert_eq!(host_memory::retained(), 0, "a limit of 0 keeps nothing");
    let limit = 1 << 30;
    assert_eq!(
        host_memory::set_retention(limit),
        0,
        "set_retention returns the previous limit"
    );

    drop(cache_with_large_stores());
    let kept = host_memory::retained();
    assert!(
        kept >= STORES_BYTES,
        "a dropped cache's 1 MiB stores are kept: {kept} bytes kept, {STORES_BYTES} expected at least"
    );
    assert_eq!(
        host_memory::release(),
        kept,
        "release gives back what was kept"
    );
    assert_eq!(host_memory::retained(), 0);
    assert_eq!(host_memory::release(), 0, "nothing left to give back");

    // Kept stores serve the next cache of the same shape.
    drop(cache_with_large_stores());
    let kept = host_memory::retained();
    let reuser = cache_with_large_stores();
    assert!(
        host_memory::retained() < kept,
        "the new stores came from the kept ones"
    );
    drop(reuser);

    assert_eq!(
        host_memory::set_retention(0),
        limit,
        "set_retention returns the previous limit"
    );
    assert_eq!(
        host_memory::retained(),
        0,
        "a limit of 0 gives back what was kept"
    );
    drop(cache_with_large_stores());
    assert_eq!(
        host_memory::retained(),
        0,
        "under a limit of 0 nothing is kept"
    );

    host_memory::set_retention(first);
}
