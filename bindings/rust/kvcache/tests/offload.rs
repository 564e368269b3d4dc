//! Offloading (ABI 0.2, docs/semantics.md, 'Offloading'): the offloaded presets move layers to the
//! host tier in transformers' order, and offload/prefetch move them by hand.

mod common;

use common::{Host, expect_err, from_config, snapshot, update_copied};
use kvcache::{Cache, ErrorCode, LayerType, ModelConfig, Offload, Preset};

fn tiers(cache: &Cache) -> String {
    (0..cache.num_layers())
        .map(|l| {
            if cache.layer_info(l).unwrap().is_offloaded {
                '1'
            } else {
                '0'
            }
        })
        .collect()
}

#[test]
fn offloaded_cache_follows_transformers_order() {
    let mut cache = from_config(Preset::Offloaded, ModelConfig::new(2), 0);
    let mut plain = from_config(Preset::Dynamic, ModelConfig::new(2), 0);
    // Before layer i is updated the next offloadable layer is prefetched; after it, i is offloaded.
    let expected = ["10", "01", "10", "01", "10", "01"];
    for (step, want) in expected.iter().enumerate() {
        let layer = (step % 2) as u32;
        let x = Host::tokens(1, 2, (step / 2) as i64, 1, 4);
        let (a, _) = update_copied(&mut cache, layer, &x);
        let (b, _) = update_copied(&mut plain, layer, &x);
        assert_eq!(a, b, "an offloaded cache returns what a plain one does");
        assert_eq!(tiers(&cache), *want, "after step {step}");
    }
    let mem = cache.memory().unwrap();
    assert!(mem.bytes_host > 0);
    assert_eq!(mem.bytes_device + mem.bytes_host, mem.bytes_reserved);
    assert_eq!(snapshot(&cache).contents, snapshot(&plain).contents);
}

#[test]
fn offload_and_prefetch_by_hand() {
    let mut cache = from_config(Preset::Dynamic, ModelConfig::new(2), 0);
    let x = Host::tokens(1, 2, 0, 5, 4);
    cache.update(0, &x.t(), &x.t()).unwrap();
    let before = snapshot(&cache).contents;
    cache.offload(0).unwrap();
    assert_eq!(tiers(&cache), "10");
    cache.offload(0).unwrap(); // already there
    cache.offload(1).unwrap(); // not initialized: left as it is
    assert_eq!(tiers(&cache), "10");
    assert!(cache.memory().unwrap().bytes_host > 0);
    cache.prefetch(0).unwrap();
    assert_eq!(tiers(&cache), "00");
    assert_eq!(snapshot(&cache).contents, before);
    let unchanged = snapshot(&cache);
    expect_err(cache.offload(2), ErrorCode::OutOfRange, "kvc_cache_offload");
    expect_err(
        cache.prefetch(2),
        ErrorCode::OutOfRange,
        "kvc_cache_prefetch",
    );
    assert_eq!(snapshot(&cache), unchanged);
}

#[test]
fn offloaded_presets_and_modes() {
    let config = ModelConfig::new(2)
        .layer_types([LayerType::SlidingAttention, LayerType::FullAttention])
        .sliding_window(4);
    // OffloadedStaticCache and OffloadedHybridCache keep sliding layers on the device.
    for preset in [Preset::OffloadedStatic, Preset::OffloadedHybrid] {
        let mut cache = from_config(preset, config.clone(), 8);
        for layer in 0..2 {
            let x = Host::tokens(1, 1, 0, 2, 2);
            cache.update(layer, &x.t(), &x.t()).unwrap();
        }
        assert_eq!(tiers(&cache), "01", "{preset:?}");
    }
    // Any preset can offload; Off turns an offloaded preset's offloading off.
    let mut all = Cache::builder(Preset::Dynamic)
        .config(config.clone())
        .offload(Offload::All)
        .build()
        .unwrap();
    let mut off = Cache::builder(Preset::Offloaded)
        .config(config)
        .offload(Offload::Off)
        .build()
        .unwrap();
    for layer in 0..2 {
        let x = Host::tokens(1, 1, 0, 2, 2);
        all.update(layer, &x.t(), &x.t()).unwrap();
        off.update(layer, &x.t(), &x.t()).unwrap();
    }
    assert_eq!(tiers(&all), "01");
    assert_eq!(tiers(&off), "00");
    // A clone keeps the tiers and the contents (it may hold less scratch memory).
    let copy = all.try_clone().unwrap();
    let (a, b) = (snapshot(&copy), snapshot(&all));
    assert_eq!((a.infos, a.contents), (b.infos, b.contents));
    assert_eq!(a.memory.bytes_used, b.memory.bytes_used);
}
