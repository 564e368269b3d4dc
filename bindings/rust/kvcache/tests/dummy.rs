//! `LayerKind::Dummy` (transformers 5.23's `DummyLayer`): the presets build it
//! for `LayerType::Dummy`; it stores nothing, refuses updates and leaves
//! every other operation to the layers that hold K/V.

mod common;

use common::{Host, assert_kind_raw, custom, from_config};
use kvcache::{ErrorCode, LayerKind, LayerOptions, LayerType, ModelConfig, Preset};

#[test]
fn kind_and_type_round_trip_through_raw() {
    assert_kind_raw(LayerKind::Dummy, 15);
    assert_eq!(LayerType::Dummy.raw(), 7);
}

#[test]
fn presets_build_dummy_layers() {
    for preset in [Preset::Dynamic, Preset::Static] {
        let cache = from_config(
            preset,
            ModelConfig::new(2).layer_types([LayerType::FullAttention, LayerType::Dummy]),
            8,
        );
        assert_eq!(cache.layer_info(1).unwrap().kind, LayerKind::Dummy);
        assert_eq!(cache.max_length(1).unwrap(), -1);
    }
}

#[test]
fn dummy_layer_stores_nothing() {
    let mut cache = custom([LayerOptions::dummy(), LayerOptions::dynamic()]);
    let x = Host::tokens(2, 1, 0, 3, 4);
    let err = cache.update(0, &x.t(), &x.t()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unsupported);
    assert!(
        err.to_string().contains("layer 0 is a dummy layer"),
        "{err}"
    );
    cache.update(1, &x.t(), &x.t()).unwrap();
    // Layer 0 is "the cache": the first layer with K/V answers.
    assert_eq!(cache.seq_length(0).unwrap(), 3);
    assert!(cache.is_croppable(Some(0)).unwrap());
    cache.crop(-1).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 2);
    let info = cache.layer_info(0).unwrap();
    assert!(!info.is_initialized);
    assert!(info.is_compileable);
    assert_eq!(
        cache.layer_view(0).unwrap_err().code(),
        ErrorCode::Unsupported
    );
}
