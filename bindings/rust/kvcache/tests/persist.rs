//! Cache files: save, load and restore round trips (the copies then take the
//! same updates as the original), and the errors.

mod common;

use common::{Host, expect_err, from_config, snapshot};
use kvcache::{Cache, EncoderDecoderCache, ErrorCode, LoadOptions, ModelConfig, Preset};

fn path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kvcache-rust-{}-{tag}.kvc", std::process::id()))
}

fn step(cache: &mut Cache, layers: u32, first: i64, tokens: i64) {
    let x = Host::tokens(2, 2, first, tokens, 8);
    for layer in 0..layers {
        cache.update(layer, &x.t(), &x.t()).unwrap();
    }
}

/// Everything the caches report but working memory (`bytes_reserved`), which a file does not carry.
fn assert_same(a: &Cache, b: &Cache) {
    let (x, y) = (snapshot(a), snapshot(b));
    assert_eq!(x.num_layers, y.num_layers);
    assert_eq!(x.infos, y.infos);
    assert_eq!(x.contents, y.contents);
    assert_eq!(x.max_length_all, y.max_length_all);
    assert_eq!(x.memory.bytes_used, y.memory.bytes_used);
}

#[test]
fn round_trips_then_same_updates() {
    let builders: Vec<Box<dyn Fn() -> Cache>> = vec![
        Box::new(|| Cache::new().unwrap()),
        Box::new(|| from_config(Preset::Static, ModelConfig::new(2), 16)),
        Box::new(|| {
            let config = ModelConfig::new(2).sliding_window(4);
            from_config(Preset::SlidingWindow, config, 16)
        }),
    ];
    for (i, make) in builders.iter().enumerate() {
        let mut cache = make();
        step(&mut cache, 2, 0, 5);
        let file = path(&format!("roundtrip-{i}"));
        cache.save(&file).unwrap();
        let mut loaded = Cache::load(&file).unwrap();
        let mut restored = make();
        restored.restore(&file).unwrap();
        assert_same(&cache, &loaded);
        assert_same(&cache, &restored);
        for t in 0..3 {
            for c in [&mut cache, &mut loaded, &mut restored] {
                step(c, 2, 5 + t, 1);
            }
            assert_same(&cache, &loaded);
            assert_same(&cache, &restored);
        }
        std::fs::remove_file(&file).unwrap();
    }
}

#[test]
fn errors_name_the_difference_and_leave_the_cache() {
    let build = |len: i64| from_config(Preset::Static, ModelConfig::new(1), len);
    let mut cache = build(8);
    step(&mut cache, 1, 0, 3);
    let file = path("errors");
    cache.save(&file).unwrap();
    let mut other = build(9);
    step(&mut other, 1, 7, 2);
    let before = snapshot(&other);
    let message = expect_err(
        other.restore(&file),
        ErrorCode::InvalidArgument,
        "kvc_cache_restore",
    );
    assert!(
        message.contains("layer 0: max_cache_len 8 (file) vs 9 (cache)"),
        "{message}"
    );
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[200] ^= 0xFF;
    std::fs::write(&file, &bytes).unwrap();
    let message = expect_err(other.restore(&file), ErrorCode::Io, "kvc_cache_restore");
    assert!(message.contains("corrupted"), "{message}");
    bytes[200] ^= 0xFF;
    bytes[8] = 2;
    std::fs::write(&file, &bytes).unwrap();
    let message = expect_err(
        Cache::load(&file),
        ErrorCode::VersionMismatch,
        "kvc_cache_load",
    );
    assert!(
        message.contains("format version 2 (file) vs 1 (reader)"),
        "{message}"
    );
    bytes[8] = 1;
    std::fs::write(&file, &bytes[..100]).unwrap();
    expect_err(Cache::load(&file), ErrorCode::Io, "kvc_cache_load");
    assert_eq!(snapshot(&other), before);
    std::fs::remove_file(&file).unwrap();
    expect_err(Cache::load(&file), ErrorCode::Io, "cannot open");
}

#[test]
fn encoder_decoder_round_trip() {
    let mut ed = EncoderDecoderCache::new(Cache::new().unwrap(), Cache::new().unwrap()).unwrap();
    let x = Host::tokens(1, 2, 0, 3, 4);
    ed.self_attention_mut().update(0, &x.t(), &x.t()).unwrap();
    let kt = x.t();
    ed.update_cross(0, Some(&kt), Some(&kt)).unwrap();
    let file = path("encdec");
    ed.save(&file).unwrap();
    let back = EncoderDecoderCache::load(&file).unwrap();
    assert_eq!(
        snapshot(back.self_attention()),
        snapshot(ed.self_attention())
    );
    assert_eq!(
        snapshot(back.cross_attention()),
        snapshot(ed.cross_attention())
    );
    assert_eq!(back.is_updated(0).unwrap(), ed.is_updated(0).unwrap());
    let mut fresh = EncoderDecoderCache::new(Cache::new().unwrap(), Cache::new().unwrap()).unwrap();
    fresh.restore(&file).unwrap();
    assert_eq!(
        snapshot(fresh.cross_attention()),
        snapshot(ed.cross_attention())
    );
    std::fs::remove_file(&file).unwrap();
}

/// `max_bytes` bounds what a file may make a load allocate: a static cache of 16 slots, 2 layers of 2 x 2 x 16 x
/// (8 + 8) f32, declares 4 KiB per layer.
#[test]
fn load_with_max_bytes_refuses_a_file_declaring_more() {
    let mut cache = from_config(Preset::Static, ModelConfig::new(2), 16);
    step(&mut cache, 2, 0, 3);
    let file = path("max-bytes");
    cache.save(&file).unwrap();
    let layer: u64 = 2 * 2 * 16 * 16 * 4;
    let exact = Cache::load_with(&file, &LoadOptions::new().max_bytes(2 * layer)).unwrap();
    assert_same(&cache, &exact);
    let err = Cache::load_with(&file, &LoadOptions::new().max_bytes(2 * layer - 1)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfMemory);
    let want = format!("layer 1 declares {layer} bytes of key/value stores");
    assert!(err.message().contains(&want), "{}", err.message());
    assert!(
        err.message()
            .contains(&format!("options->max_bytes ({})", 2 * layer - 1))
    );
    assert_same(
        &cache,
        &Cache::load_with(&file, &LoadOptions::new()).unwrap(),
    ); // 0: no limit

    let ed = EncoderDecoderCache::new(exact, Cache::load(&file).unwrap()).unwrap();
    ed.save(&file).unwrap();
    let err = EncoderDecoderCache::load_with(&file, &LoadOptions::new().max_bytes(3 * layer))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfMemory);
    assert!(
        err.message().contains("cross-attention layer 1 declares"),
        "{}",
        err.message()
    );
    EncoderDecoderCache::load_with(&file, &LoadOptions::new().max_bytes(4 * layer)).unwrap();
    std::fs::remove_file(&file).unwrap();
}
