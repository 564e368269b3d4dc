//! A cache whose K/V stores are memory Rust owns (`CacheBuilder::allocator`): the views point into a
//! `Vec<u8>` arena, clones and splits share it and keep it alive, refusals and panics are errors that
//! leave the cache as it was, and a failed build keeps nothing.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use kvcache::{
    ALLOCATOR_ALIGNMENT, Allocator, Cache, CacheBuilder, Device, EncoderDecoderCache, ErrorCode,
    KvView, LayerOptions, Preset, TensorRef,
};

mod common;
use common::expect_err;

#[path = "common/vec_arena.rs"]
mod vec_arena;
use vec_arena::VecArena;

const HEADS: i64 = 2;
const DIM: i64 = 4;

/// A dynamic, a static (16 slots) and a sliding (window 4) layer: three store layouts.
fn builder(arena: &Arc<VecArena>) -> CacheBuilder {
    Cache::builder(Preset::Custom)
        .layers([
            LayerOptions::dynamic(),
            LayerOptions::static_(16),
            LayerOptions::dynamic_sliding(4),
        ])
        .allocator(arena.clone())
}

/// `tokens` tokens for batch 1 whose values are `first + i`.
fn tokens(tokens: i64, first: f32) -> Vec<f32> {
    (0..HEADS * tokens * DIM)
        .map(|i| first + i as f32)
        .collect()
}

fn update(cache: &mut Cache, layer: u32, data: &[f32]) -> kvcache::Result<()> {
    let shape = [1, HEADS, data.len() as i64 / (HEADS * DIM), DIM];
    let t = TensorRef::new(data, &shape)?;
    cache.update(layer, &t, &t).map(|_| ())
}

fn view_in(arena: &VecArena, kv: &KvView<'_>) -> bool {
    [&kv.key, &kv.value].iter().all(|t| {
        let [b, h, s, d] = t.shape()[..] else {
            return false;
        };
        let strides = t.strides();
        let last = (b - 1) * strides[0] + (h - 1) * strides[1] + (s - 1) * strides[2] + d;
        let first = t.data_ptr().wrapping_byte_add(t.byte_offset() as usize);
        arena.holds(first, last as usize * 4)
    })
}

#[test]
fn stores_and_views_are_the_callers_memory() {
    let arena = VecArena::new(1 << 20);
    let mut cache = builder(&arena).build().unwrap();
    assert_eq!(arena.state.lock().unwrap().allocs, 0); // layers allocate at their first update
    for layer in 0..3 {
        update(&mut cache, layer, &tokens(3, 0.0)).unwrap();
        let kv = cache.layer_view(layer).unwrap();
        assert!(view_in(&arena, &kv), "layer {layer}");
    }
    assert_eq!(arena.state.lock().unwrap().live.len(), 6);
    // The dynamic layer grows past its first store: the new one is the arena's too, the old one went back.
    for step in 0..70 {
        update(&mut cache, 0, &tokens(1, step as f32)).unwrap();
    }
    let kv = cache.layer_view(0).unwrap();
    assert!(view_in(&arena, &kv));
    assert_eq!(kv.key.shape()[2], 73);
    assert_eq!(kv.key.to_vec::<f32>().unwrap()[..4], [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(arena.state.lock().unwrap().live.len(), 6);
    drop(cache);
    arena.assert_all_given_back("every store given back");
}

#[test]
fn clones_splits_and_pairs_keep_the_allocator_alive() {
    let arena = VecArena::new(1 << 20);
    let weak = Arc::downgrade(&arena);
    let mut cache = builder(&arena).build().unwrap();
    let data: Vec<f32> = (0..2 * HEADS * 3 * DIM).map(|i| i as f32).collect();
    let t = TensorRef::new(&data, &[2, HEADS, 3, DIM]).unwrap();
    for layer in 0..3 {
        cache.update(layer, &t, &t).unwrap();
    }
    let mut copy = cache.try_clone().unwrap();
    let mut rows = cache.batch_split(2, 1).unwrap();
    let pair = EncoderDecoderCache::new(cache.try_clone().unwrap(), Cache::new().unwrap()).unwrap();
    let pair_copy = pair.try_clone().unwrap();
    drop((cache, pair, arena));
    assert!(weak.upgrade().is_some(), "the clones still use it");
    // A clone grows after its source is gone: the allocator is still there to ask.
    let more = tokens(40, 0.0);
    let t = TensorRef::new(&more, &[1, HEADS, 40, DIM]).unwrap();
    rows[1].update(0, &t, &t).unwrap();
    let t2 = TensorRef::new(&data, &[2, HEADS, 3, DIM]).unwrap();
    copy.update(0, &t2, &t2).unwrap();
    let stacked = Cache::from_batch_splits(&rows).unwrap_err(); // lengths differ now
    assert_eq!(stacked.code(), ErrorCode::InvalidArgument);
    let arena = weak.upgrade().unwrap();
    assert!(view_in(&arena, &rows[1].layer_view(0).unwrap()));
    assert!(view_in(
        &arena,
        &pair_copy.self_attention().layer_view(0).unwrap()
    ));
    drop(arena);
    drop((copy, rows));
    assert!(weak.upgrade().is_some(), "the pair's clone still uses it");
    drop(pair_copy);
    assert!(weak.upgrade().is_none(), "released with the last cache");
}

#[test]
fn a_refusal_is_out_of_memory_and_changes_nothing() {
    let arena = VecArena::new(1 << 20);
    let mut cache = builder(&arena).build().unwrap();
    update(&mut cache, 0, &tokens(3, 0.0)).unwrap();
    let before = cache.layer_view(0).unwrap().key.to_vec::<f32>().unwrap();
    arena.state.lock().unwrap().budget = Some(0);
    // A first update of layer 1 and a growth of layer 0 both need memory.
    expect_err(
        update(&mut cache, 1, &tokens(3, 0.0)),
        ErrorCode::OutOfMemory,
        "caller's allocator",
    );
    let err = update(&mut cache, 0, &tokens(100, 0.0)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfMemory);
    assert_eq!(cache.seq_length(0).unwrap(), 3);
    assert_eq!(cache.seq_length(1).unwrap(), 0);
    assert_eq!(
        cache.layer_view(0).unwrap().key.to_vec::<f32>().unwrap(),
        before
    );
    arena.state.lock().unwrap().budget = None;
    update(&mut cache, 1, &tokens(3, 0.0)).unwrap();
    drop(cache);
    assert!(arena.state.lock().unwrap().live.is_empty());
}

#[test]
fn a_failed_build_keeps_nothing() {
    let arena = VecArena::new(1 << 16);
    // A static preset without a model config is refused by the library after it saw the allocator.
    expect_err(
        Cache::builder(Preset::Static)
            .max_cache_len(8)
            .allocator(arena.clone())
            .build(),
        ErrorCode::InvalidArgument,
        "options->config",
    );
    assert_eq!(
        Arc::strong_count(&arena),
        1,
        "the failed build dropped its reference"
    );
}

/// Panics in `alloc`, hands out misaligned memory in `free`'s stead: both must be refusals.
struct Misbehaving {
    panic: bool,
    arena: Arc<VecArena>,
}

// SAFETY: what it hands out comes from the arena (misaligned on purpose, which the library refuses).
// (Its signatures repeat the trait's, as every implementation does.)
unsafe impl Allocator for Misbehaving {
    fn alloc(
        &self,
        bytes: usize,
        align: usize,
        device: Device,
        stream: *mut c_void,
    ) -> Option<NonNull<u8>> {
        assert!(!self.panic, "an allocator that panics");
        let p = self.arena.alloc(bytes + align, align, device, stream)?;
        // SAFETY: inside the allocation just made (align extra bytes).
        NonNull::new(unsafe { p.as_ptr().add(8) })
    }

    unsafe fn free(&self, ptr: NonNull<u8>, bytes: usize, device: Device, stream: *mut c_void) {
        // SAFETY: undoes alloc's offset; the arena's free only counts.
        unsafe {
            let p = NonNull::new_unchecked(ptr.as_ptr().sub(8));
            self.arena
                .free(p, bytes + ALLOCATOR_ALIGNMENT, device, stream)
        }
    }
}

#[test]
fn panics_and_misaligned_memory_are_refusals() {
    for panic in [true, false] {
        let arena = VecArena::new(1 << 16);
        let allocator = Arc::new(Misbehaving {
            panic,
            arena: arena.clone(),
        });
        let mut cache = Cache::builder(Preset::Custom)
            .layer(LayerOptions::dynamic())
            .allocator(allocator)
            .build()
            .unwrap();
        let err = update(&mut cache, 0, &tokens(2, 0.0)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::OutOfMemory, "panic: {panic}");
        assert_eq!(cache.seq_length(0).unwrap(), 0);
        drop(cache);
        arena.assert_all_given_back(&format!(
            "panic: {panic}: the misaligned pointer was given back"
        ));
    }
}
