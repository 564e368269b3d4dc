//! EncoderDecoderCache: the cross-attention protocol and the operations on
//! both caches.

mod common;

use common::{Host, custom, expect_err, from_config, positions, snapshot};
use kvcache::{Cache, EncoderDecoderCache, ErrorCode, LayerOptions, ModelConfig, Preset};

fn pair(layers: u32) -> EncoderDecoderCache {
    let config = ModelConfig::new(layers);
    EncoderDecoderCache::new(
        from_config(Preset::Dynamic, config.clone(), 0),
        from_config(Preset::Dynamic, config, 0),
    )
    .unwrap()
}

/// Two decoder steps over a 5-position encoder output, batch `batch`.
fn run(cache: &mut EncoderDecoderCache, batch: i64, steps: i64) {
    let encoder = Host::tokens(batch, 2, 100, 5, 4);
    for step in 0..steps {
        let x = Host::tokens(batch, 2, step, 1, 4);
        for layer in 0..cache.self_attention().num_layers() {
            cache
                .self_attention_mut()
                .update(layer, &x.t(), &x.t())
                .unwrap();
            let cross = (!cache.is_updated(layer).unwrap()).then(|| encoder.t());
            let kv = cache
                .update_cross(layer, cross.as_ref(), cross.as_ref())
                .unwrap();
            assert_eq!(positions(&kv.key, 0, 1), [100, 101, 102, 103, 104]);
        }
    }
}

#[test]
fn cross_attention_is_computed_once() {
    let mut cache = pair(2);
    assert!(!cache.is_updated(0).unwrap());
    assert!(!cache.is_updated(9).unwrap()); // beyond the layers
    run(&mut cache, 1, 3);
    assert!(cache.is_updated(0).unwrap() && cache.is_updated(1).unwrap());
    assert_eq!(cache.self_attention().seq_length(1).unwrap(), 3);
    assert_eq!(cache.cross_attention().seq_length(1).unwrap(), 5);
    // Once updated, new cross K/V are ignored.
    let other = Host::tokens(1, 2, 500, 7, 4);
    let kv = cache
        .update_cross(0, Some(&other.t()), Some(&other.t()))
        .unwrap();
    assert_eq!(kv.key.shape()[2], 5);
    // Not yet updated and no tensors: refused, nothing changes.
    let mut fresh = pair(1);
    let before = snapshot(fresh.cross_attention());
    expect_err(
        fresh.update_cross(0, None, None),
        ErrorCode::InvalidArgument,
        "kvc_encoder_decoder_cache_update_cross",
    );
    assert_eq!(snapshot(fresh.cross_attention()), before);
    assert!(!fresh.is_updated(0).unwrap());
}

#[test]
fn is_updated_starts_from_the_cross_cache_contents() {
    let encoder = Host::tokens(1, 1, 0, 3, 2);
    let cross = Cache::builder(Preset::Dynamic)
        .build_from_tensors(&[encoder.t()], &[encoder.t()])
        .unwrap();
    let cache = EncoderDecoderCache::new(Cache::new().unwrap(), cross).unwrap();
    assert!(cache.is_updated(0).unwrap());
    assert!(!cache.is_updated(1).unwrap());
}

#[test]
fn crop_touches_only_self_attention() {
    let mut cache = pair(1);
    run(&mut cache, 1, 4);
    cache.crop(-3).unwrap();
    assert_eq!(cache.self_attention().seq_length(0).unwrap(), 1);
    assert_eq!(cache.cross_attention().seq_length(0).unwrap(), 5);
}

#[test]
fn batch_operations_act_on_both_caches() {
    let mut cache = pair(1);
    run(&mut cache, 3, 2);
    let row = |c: &kvcache::CacheRef| -> Vec<i64> {
        let kv = c.layer_view(0).unwrap();
        (0..kv.key.shape()[0])
            .map(|b| kv.key.get::<f32>(&[b, 0, 0, 0]).unwrap() as i64 / 1_000_000)
            .collect()
    };
    cache.reorder(&[2, 0, 0]).unwrap();
    assert_eq!(row(cache.self_attention()), [2, 0, 0]);
    assert_eq!(row(cache.cross_attention()), [2, 0, 0]);
    cache.batch_select_indices(&[0, 1]).unwrap();
    assert_eq!(row(cache.cross_attention()), [2, 0]);
    cache.batch_repeat_interleave(2).unwrap();
    assert_eq!(row(cache.self_attention()), [2, 2, 0, 0]);
    let splits = cache.batch_split(4, 3).unwrap();
    assert_eq!(splits.len(), 2);
    assert_eq!(row(splits[1].cross_attention()), [0]);
    assert!(splits[1].is_updated(0).unwrap());
    let stacked = EncoderDecoderCache::from_batch_splits(&[&splits[0], &splits[1]]).unwrap();
    assert_eq!(row(stacked.self_attention()), [2, 2, 0, 0]);
    assert!(stacked.is_updated(0).unwrap());
    // Errors from either cache leave both unchanged.
    let before = (
        snapshot(cache.self_attention()),
        snapshot(cache.cross_attention()),
    );
    expect_err(
        cache.reorder(&[4, 0, 0, 0]),
        ErrorCode::OutOfRange,
        "kvc_encoder_decoder_cache_reorder",
    );
    expect_err(
        cache.batch_select_indices(&[9]),
        ErrorCode::OutOfRange,
        "kvc_encoder_decoder_cache_batch_select_indices",
    );
    expect_err(
        cache.batch_repeat_interleave(0),
        ErrorCode::InvalidArgument,
        "kvc_encoder_decoder_cache_batch_repeat_interleave",
    );
    expect_err(
        cache.batch_split(3, 1).map(drop),
        ErrorCode::InvalidArgument,
        "kvc_encoder_decoder_cache_batch_split",
    );
    assert_eq!(
        (
            snapshot(cache.self_attention()),
            snapshot(cache.cross_attention())
        ),
        before
    );
    assert!(EncoderDecoderCache::from_batch_splits(&[]).is_err());
}

#[test]
fn batch_operations_need_dynamic_caches() {
    let static_self = custom([LayerOptions::static_(8)]);
    let mut cache = EncoderDecoderCache::new(static_self, Cache::new().unwrap()).unwrap();
    run(&mut cache, 2, 1);
    let before = snapshot(cache.self_attention());
    expect_err(
        cache.batch_repeat_interleave(2),
        ErrorCode::Unsupported,
        "kvc_encoder_decoder_cache_batch_repeat_interleave",
    );
    expect_err(
        cache.crop(-1),
        ErrorCode::Unsupported,
        "kvc_encoder_decoder_cache_crop",
    );
    assert_eq!(snapshot(cache.self_attention()), before);
    // Reorder works on static layers too.
    cache.reorder(&[1, 0]).unwrap();
}

#[test]
fn reset_and_clone() {
    let mut cache = pair(2);
    run(&mut cache, 1, 2);
    let copy = cache.try_clone().unwrap();
    cache.reset().unwrap();
    assert!(!cache.is_updated(0).unwrap());
    assert_eq!(cache.self_attention().seq_length(0).unwrap(), 0);
    assert_eq!(cache.cross_attention().seq_length(0).unwrap(), 0);
    assert!(copy.is_updated(1).unwrap());
    assert_eq!(copy.self_attention().seq_length(1).unwrap(), 2);
    run(&mut cache, 1, 1);
    assert!(format!("{cache:?}").contains("EncoderDecoderCache"));
    let raw = copy.into_raw();
    // SAFETY: from into_raw, used by nothing else.
    let copy = unsafe { EncoderDecoderCache::from_raw(raw) };
    assert_eq!(copy.as_ptr(), raw.cast_const());
}
