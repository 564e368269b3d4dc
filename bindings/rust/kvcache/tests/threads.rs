//! Caches move between threads, and distinct caches work concurrently (the
//! C rule: one thread at a time per handle, distinct handles independent).

mod common;

use std::sync::{Arc, Mutex};

use common::{Host, positions};
use kvcache::{Cache, EncoderDecoderCache, ModelConfig, Preset};

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
                let mut cache = Cache::builder(Preset::Dynamic)
                    .config(ModelConfig::new(2))
                    .build()
                    .unwrap();
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
