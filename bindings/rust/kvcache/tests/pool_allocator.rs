//! A pool whose blocks are memory Rust owns (`PoolBuilder::allocator`): a
//! `Vec<u8>` arena hands out every layer's K and V, the storage views point
//! into it, writes land there, and dropping the pool gives every byte back.

use std::sync::Arc;

use kvcache::{
    ALLOCATOR_ALIGNMENT, DType, ErrorCode, Layout, Pool, PoolGroup, PoolLayer, TensorRef,
};

mod common;
use common::expect_err;

#[path = "common/vec_arena.rs"]
mod vec_arena;
use vec_arena::VecArena;

fn builder(arena: &Arc<VecArena>) -> kvcache::PoolBuilder {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 8))
        .layers(std::iter::repeat_n(PoolLayer::attention(0, 2, 8), 2))
        .allocator(arena.clone())
}

#[test]
fn pool_storage_is_the_vec() {
    let arena = VecArena::new(1 << 16);
    let pool = builder(&arena).build().unwrap();
    assert_eq!(arena.state.lock().unwrap().allocs, 4); // K and V of two layers
    {
        let storage = pool.layer_storage(0, Layout::Nhd).unwrap();
        let keys = storage.keys();
        let bytes = 8 * 4 * 2 * 8 * 4;
        assert!(arena.holds(keys.data_ptr(), bytes));
        assert_eq!(keys.data_ptr() as usize % ALLOCATOR_ALIGNMENT, 0);
        // Zeroed by the library: the Vec started as 0xA5 bytes.
        let all = keys.to_vec::<f32>().unwrap();
        assert!(all.iter().all(|&x| x == 0.0));
    }
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[1, 2, 3]).unwrap();
    let kv: Vec<f32> = (0..3 * 2 * 8).map(|i| i as f32 + 0.5).collect();
    let shape = [3, 2, 8];
    let t = TensorRef::new(&kv, &shape).unwrap();
    pool.write(&[t, t], &[t, t], &slots).unwrap();
    seq.commit().unwrap();
    {
        let storage = pool.layer_storage(1, Layout::Nhd).unwrap();
        let keys = storage.keys().to_vec::<f32>().unwrap();
        assert!(keys.contains(&0.5)); // the write is in the Vec's memory
    }
    drop(seq);
    assert_eq!(arena.state.lock().unwrap().live.len(), 4); // still the pool's
    drop(pool);
    arena.assert_all_given_back("every allocation given back");
}

#[test]
fn a_refusing_allocator_fails_build_and_keeps_nothing() {
    for budget in 0..4 {
        let arena = VecArena::new(1 << 16);
        arena.state.lock().unwrap().budget = Some(budget);
        expect_err(
            builder(&arena).build(),
            ErrorCode::OutOfMemory,
            "caller's allocator",
        );
        arena.assert_all_given_back(&format!("budget {budget}"));
    }
}

#[test]
fn the_pool_keeps_its_allocator_alive() {
    let arena = VecArena::new(1 << 16);
    let pool = builder(&arena).build().unwrap();
    let weak = Arc::downgrade(&arena);
    drop(arena);
    assert!(weak.upgrade().is_some());
    drop(pool);
    assert!(weak.upgrade().is_none());
}
