//! Caches and pools move between threads, distinct ones work concurrently,
//! and one shared behind a `Mutex` serves several threads (the C rule: one
//! thread at a time per handle, overlapping calls refused with
//! `KVC_ERROR_BUSY`; distinct handles independent).

mod common;

use std::sync::{Arc, Mutex};

use common::{Host, from_config, positions};
use kvcache::{
    Cache, DType, EncoderDecoderCache, ErrorCode, ModelConfig, Pool, PoolGroup, PoolLayer, Preset,
    TensorRef,
};

fn assert_send<T: Send>() {}

#[test]
fn handles_are_send() {
    assert_send::<Cache>();
    assert_send::<EncoderDecoderCache>();
    assert_send::<&mut kvcache::CacheRef>();
    assert_send::<kvcache::Error>();
    assert_send::<kvcache::TensorRef<'static>>();
}

#[test]
fn distinct_caches_run_concurrently() {
    let workers: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let mut cache = from_config(Preset::Dynamic, ModelConfig::new(2), 0);
                for t in 0..200 {
                    let x = Host::tokens(1, 2, t, 1, 8);
                    for layer in 0..2 {
                        cache.update(layer, &x.t(), &x.t()).unwrap();
                    }
                }
                cache.crop(-(i as i64)).unwrap();
                cache
            })
        })
        .collect();
    for (i, worker) in workers.into_iter().enumerate() {
        let cache = worker.join().unwrap();
        assert_eq!(cache.seq_length(1).unwrap(), 200 - i as i64);
        assert_eq!(
            positions(&cache.layer_view(0).unwrap().key, 0, 1)[..3],
            [0, 1, 2]
        );
    }
}

#[test]
fn one_cache_shared_behind_a_mutex() {
    let cache = Arc::new(Mutex::new(Cache::new().unwrap()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                for t in 0..50 {
                    let x = Host::tokens(1, 1, t, 1, 4);
                    cache.lock().unwrap().update(0, &x.t(), &x.t()).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(cache.lock().unwrap().seq_length(0).unwrap(), 200);
}

/// A pool behind the caller's own `Mutex` still works (the form before
/// `Pool` was `Sync`; tests/scheduler.rs shares it without one): threads
/// take turns, and the library's `KVC_ERROR_BUSY` cannot arise.
#[test]
fn one_pool_shared_behind_a_mutex() {
    let pool = Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 256))
        .layer(PoolLayer::attention(0, 2, 4))
        .build()
        .unwrap();
    let free = pool.stats(0).unwrap().free_blocks;
    let pool = Arc::new(Mutex::new(pool));
    let workers: Vec<_> = (0..4)
        .map(|i: i32| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                for round in 0..10 {
                    let pool = pool.lock().unwrap();
                    let mut seq = pool.sequence().unwrap();
                    let tokens: Vec<i32> = (0..6).map(|t| 1000 * i + 10 * round + t).collect();
                    let slots = seq.reserve(&tokens).unwrap();
                    let k: Vec<f32> = (0..6 * 2 * 4).map(|x| (i * 100_000 + x) as f32).collect();
                    let shape = [6, 2, 4];
                    let kt = TensorRef::new(&k, &shape).unwrap();
                    pool.write(&[kt], &[kt], slots.group(0)).unwrap();
                    seq.commit().unwrap();
                    let (keys, _) = seq.gather::<f32>(0).unwrap();
                    // gather is [1, heads, n, dim]: head 0, token 0 is element 0 of the write.
                    assert_eq!(keys[0], (i * 100_000) as f32);
                    assert_eq!(seq.len(), 6);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let pool = pool.lock().unwrap();
    pool.clear_cache().unwrap();
    assert_eq!(pool.stats(0).unwrap().free_blocks, free);
}

#[test]
fn busy_is_a_code_of_its_own() {
    assert_eq!(ErrorCode::from_raw(13), Some(ErrorCode::Busy));
    assert_eq!(ErrorCode::Busy.raw(), 13);
    assert_eq!(ErrorCode::Busy.name(), "KVC_ERROR_BUSY");
}
