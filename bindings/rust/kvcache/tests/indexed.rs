//! `LayerKind::DynamicIndexed` / `LayerKind::StaticIndexed` (transformers'
//! `DynamicIndexedLayer` and `StaticIndexedLayer`) with `Cache::update_indexer`
//! and `Cache::indexer_view`: the presets build them for
//! `LayerType::IndexedAttention`; the indexer keys follow update, crop and
//! reset; refusals leave the cache unchanged.

mod common;

use common::{assert_kind_raw, custom, from_config};
use kvcache::{ErrorCode, LayerKind, LayerOptions, LayerType, ModelConfig, Preset, TensorRef};

#[test]
fn kinds_and_type_round_trip_through_raw() {
    assert_kind_raw(LayerKind::DynamicIndexed, 16);
    assert_kind_raw(LayerKind::StaticIndexed, 17);
    assert_eq!(LayerType::IndexedAttention.raw(), 8);
}

#[test]
fn presets_build_indexed_layers() {
    for (preset, kind) in [
        (Preset::Dynamic, LayerKind::DynamicIndexed),
        (Preset::Static, LayerKind::StaticIndexed),
    ] {
        let cache = from_config(
            preset,
            ModelConfig::new(2)
                .layer_types([LayerType::FullAttention, LayerType::IndexedAttention]),
            8,
        );
        assert_eq!(cache.layer_info(1).unwrap().kind, kind);
    }
}

#[test]
fn dynamic_indexer_appends_crops_and_resets() {
    let mut cache = custom([LayerOptions::dynamic_indexed(), LayerOptions::dynamic()]);
    assert!(cache.indexer_view(0).unwrap().is_none());
    let x: Vec<f32> = (0..2 * 3 * 2).map(|v| v as f32).collect(); // [batch 2, 3 tokens, width 2]
    let shape = [2, 3, 2];
    let all = cache
        .update_indexer(0, &TensorRef::new(&x, &shape).unwrap())
        .unwrap();
    assert_eq!(all.shape(), &[2, 3, 2]);
    assert_eq!(all.to_vec::<f32>().unwrap(), x);
    cache.crop(-1).unwrap();
    let view = cache.indexer_view(0).unwrap().unwrap();
    assert_eq!(view.shape(), &[2, 2, 2]);
    assert_eq!(
        view.to_vec::<f32>().unwrap(),
        [0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0]
    );
    // A layer that is not indexed: refused, nothing changed.
    let err = cache
        .update_indexer(1, &TensorRef::new(&x, &shape).unwrap())
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(
        err.to_string().contains("layer 1 is a dynamic layer"),
        "{err}"
    );
    let wide = [0.0f32; 2 * 3];
    let err = cache
        .update_indexer(0, &TensorRef::new(&wide, &[2, 1, 3]).unwrap())
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ShapeMismatch);
    assert_eq!(cache.indexer_view(0).unwrap().unwrap().shape(), &[2, 2, 2]);
    cache.reset().unwrap();
    assert!(cache.indexer_view(0).unwrap().is_none());
}

#[test]
fn static_indexer_writes_at_its_counter() {
    let mut cache = custom([LayerOptions::static_indexed(3)]);
    let x = [1.0f32, 2.0];
    let all = cache
        .update_indexer(0, &TensorRef::new(&x, &[1, 2, 1]).unwrap())
        .unwrap();
    assert_eq!(all.to_vec::<f32>().unwrap(), [1.0, 2.0, 0.0]);
    let err = cache
        .update_indexer(0, &TensorRef::new(&x, &[1, 2, 1]).unwrap())
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfRange);
    assert_eq!(
        cache
            .indexer_view(0)
            .unwrap()
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [1.0, 2.0, 0.0]
    );
}
