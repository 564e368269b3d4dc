//! Linear-attention layers (ABI 0.2, docs/semantics.md, 'Linear-attention layers'): conv and SSM
//! states, the Mamba and hybrid presets, and the hybrid layer kinds.

mod common;

use common::{Host, custom, expect_err, from_config, snapshot};
use kvcache::{
    Cache, ConvUpdateOptions, ErrorCode, LayerKind, LayerOptions, LayerType, ModelConfig, Preset,
    TensorView,
};

/// Conv input [batch, channels, n] whose column j holds time first + j
/// (stored as time + 1, so that 0 is a zero-padded column) plus 100 * row.
fn columns(batch: i64, channels: i64, first: i64, n: i64) -> Host {
    let mut data = Vec::new();
    for b in 0..batch {
        for _c in 0..channels {
            for j in 0..n {
                data.push((first + j + 1 + 100 * b) as f32);
            }
        }
    }
    Host {
        data,
        shape: vec![batch, channels, n],
    }
}

/// The times of row 0, channel 0 of a conv view (-1 for a zero column).
fn times(view: &TensorView<'_>) -> Vec<i64> {
    let n = view.shape()[2];
    (0..n)
        .map(|j| view.get::<f32>(&[0, 0, j]).unwrap() as i64 - 1)
        .collect()
}

fn linear(states: u32, k: i64) -> Cache {
    custom([LayerOptions::linear(states).conv_kernel_size(k)])
}

/// docs/semantics.md, 'Linear conv state trace': K = 4, no recording.
#[test]
fn conv_state_trace_d7() {
    let mut cache = linear(1, 4);
    assert!(!cache.has_previous_state(Some(0), Some(0)).unwrap());
    let x = columns(1, 3, 0, 6);
    let full = cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new())
        .unwrap();
    assert_eq!(times(&full), [0, 1, 2, 3, 4, 5]); // no padding: 6 >= K
    let state = cache.state_view(0, 0).unwrap().conv.unwrap();
    assert_eq!(state.shape(), &[1, 3, 4]);
    assert_eq!(times(&state), [2, 3, 4, 5]);
    assert!(cache.has_previous_state(Some(0), Some(0)).unwrap());
    let x = columns(1, 3, 6, 1);
    let full = cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new())
        .unwrap();
    assert_eq!(times(&full), [2, 3, 4, 5, 6]);
    assert_eq!(
        times(&cache.state_view(0, 0).unwrap().conv.unwrap()),
        [3, 4, 5, 6]
    );

    // A prefill of 2 columns is left-padded to K.
    let mut cache = linear(1, 4);
    let x = columns(2, 2, 0, 2);
    let full = cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new())
        .unwrap();
    assert_eq!(times(&full), [-1, -1, 0, 1]);
    assert_eq!(full.get::<f32>(&[1, 1, 3]).unwrap(), 102.0);
}

/// docs/semantics.md, 'Legacy MambaCache conv trace': the legacy MambaCache protocol
/// with cache_position.
#[test]
fn conv_state_trace_d8_legacy_positions() {
    let mut cache = linear(1, 4);
    let x = columns(1, 2, 2, 4); // the last 4 of 6 prefill columns
    let prefill = [0, 1, 2, 3];
    let state = cache
        .update_conv_state(
            0,
            &x.t(),
            &ConvUpdateOptions::new().cache_position(&prefill),
        )
        .unwrap();
    assert_eq!(times(&state), [2, 3, 4, 5]);
    let x = columns(1, 2, 6, 1);
    let state = cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new().cache_position(&[4]))
        .unwrap();
    assert_eq!(times(&state), [3, 4, 5, 6]);
    let x = columns(1, 2, 7, 1);
    let state = cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new().cache_position(&[1]))
        .unwrap();
    assert_eq!(times(&state), [4, 7, 6, 3]); // rolled left, written at position 1
}

#[test]
fn kernel_size_from_the_first_input_or_the_options() {
    let mut cache = custom([LayerOptions::linear(2)]);
    let x = columns(1, 2, 0, 3);
    cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new())
        .unwrap();
    assert_eq!(cache.layer_info(0).unwrap().conv_kernel_size, 3);
    let y = columns(1, 2, 0, 1);
    let full = cache
        .update_conv_state(
            0,
            &y.t(),
            &ConvUpdateOptions::new().state_index(1).conv_kernel_size(5),
        )
        .unwrap();
    assert_eq!(full.shape(), &[1, 2, 5]);
}

#[test]
fn recurrent_state_is_copied_in_place() {
    let mut cache = linear(2, 4);
    let views = cache.state_view(0, 1).unwrap();
    assert!(views.conv.is_none() && views.recurrent.is_none());
    let a = Host::from_fn(&[2, 3, 4], |i| i as f32);
    let first = cache
        .update_recurrent_state(0, 1, &a.t())
        .unwrap()
        .data_ptr();
    let b = Host::from_fn(&[2, 3, 4], |i| 100.0 + i as f32);
    let view = cache.update_recurrent_state(0, 1, &b.t()).unwrap();
    assert_eq!(view.data_ptr(), first);
    assert_eq!(view.as_slice::<f32>().unwrap(), &b.data[..]);
    let views = cache.state_view(0, 1).unwrap();
    assert_eq!(views.recurrent.unwrap().to_vec::<f32>().unwrap(), b.data);
    assert!(views.conv.is_none());
    // Only conv updates count as a previous state.
    assert!(!cache.has_previous_state(Some(0), Some(1)).unwrap());
    assert!(cache.memory().unwrap().bytes_state >= 2 * 3 * 4 * 4);
    // Up to 6 dimensions, batch first.
    let six = Host::from_fn(&[2, 1, 2, 1, 3, 2], |i| i as f32);
    let view = cache.update_recurrent_state(0, 0, &six.t()).unwrap();
    assert_eq!(view.ndim(), 6);
}

#[test]
fn mamba_preset_has_only_linear_layers() {
    let mut cache = from_config(
        Preset::Mamba,
        ModelConfig::new(3).number_of_conv_states(2).conv_kernel(4),
        0,
    );
    assert_eq!(cache.num_layers(), 3);
    for layer in 0..3 {
        let info = cache.layer_info(layer).unwrap();
        assert_eq!(info.kind, LayerKind::Linear);
        assert_eq!((info.num_states, info.conv_kernel_size), (2, 4));
        assert!(info.is_linear && info.is_compileable && !info.is_initialized);
        assert_eq!(cache.max_length(layer).unwrap(), -1);
    }
    // No attention layer: no sequence length, no K/V.
    expect_err(
        cache.seq_length(0),
        ErrorCode::InvalidArgument,
        "kvc_cache_seq_length",
    );
    assert_eq!(cache.seq_length(3).unwrap(), 0);
    let x = columns(1, 3, 0, 1);
    let full = cache
        .update_conv_state(2, &x.t(), &ConvUpdateOptions::new().state_index(1))
        .unwrap();
    assert_eq!(times(&full), [-1, -1, -1, 0]);
    assert!(cache.has_previous_state(None, Some(1)).unwrap()); // the last linear layer is 2
    assert!(!cache.has_previous_state(None, None).unwrap()); // its state 0 is untouched
    assert!(!cache.has_previous_state(Some(0), Some(1)).unwrap());
    assert!(!cache.has_previous_state(Some(9), Some(0)).unwrap());
    expect_err(
        cache.layer_view(2),
        ErrorCode::Unsupported,
        "kvc_cache_layer_view",
    );
    let kv = Host::tokens(1, 1, 0, 1, 2);
    let before = snapshot(&cache);
    expect_err(
        cache.update(0, &kv.t(), &kv.t()).map(drop),
        ErrorCode::Unsupported,
        "kvc_cache_update",
    );
    assert_eq!(snapshot(&cache), before);
    assert_eq!(cache.batch_size().unwrap(), None);
}

#[test]
fn hybrid_presets_and_layer_types() {
    use LayerKind::*;
    let types = [
        LayerType::LinearAttention,
        LayerType::LinearAttention,
        LayerType::FullAttention,
        LayerType::LinearAttention,
    ];
    let mut jamba = from_config(
        Preset::HybridMamba,
        ModelConfig::new(4).layer_types(types).conv_kernel(3),
        0,
    );
    let kinds: Vec<_> = (0..4).map(|l| jamba.layer_info(l).unwrap().kind).collect();
    assert_eq!(kinds, [Linear, Linear, Dynamic, Linear]);
    let x = Host::tokens(2, 1, 0, 5, 2);
    jamba.update(2, &x.t(), &x.t()).unwrap();
    assert_eq!(jamba.seq_length(0).unwrap(), 5); // redirected to the attention layer
    expect_err(
        jamba.has_previous_state(Some(2), None),
        ErrorCode::InvalidArgument,
        "kvc_cache_has_previous_state",
    );
    // The preset needs layer types.
    let r = Cache::builder(Preset::HybridMamba)
        .config(ModelConfig::new(2))
        .build();
    expect_err(r, ErrorCode::InvalidArgument, "kvc_cache_create");

    let types = [
        LayerType::Hybrid,
        LayerType::HybridSliding,
        LayerType::LinearAttention,
        LayerType::FullAttention,
    ];
    let config = ModelConfig::new(4).layer_types(types).sliding_window(4);
    let dynamic = from_config(Preset::Dynamic, config.clone(), 0);
    let kinds: Vec<_> = (0..4)
        .map(|l| dynamic.layer_info(l).unwrap().kind)
        .collect();
    assert_eq!(
        kinds,
        [LinearDynamic, LinearDynamicSliding, Linear, Dynamic]
    );
    let stat = from_config(Preset::Static, config, 8);
    let kinds: Vec<_> = (0..4).map(|l| stat.layer_info(l).unwrap().kind).collect();
    assert_eq!(kinds, [LinearStatic, LinearStaticSliding, Linear, Static]);
    // is_linear (transformers 5.24's Cache.is_linear): only the layers without K/V.
    let linear: Vec<_> = (0..4)
        .map(|l| dynamic.layer_info(l).unwrap().is_linear)
        .collect();
    assert_eq!(linear, [false, false, true, false]);
}

#[test]
fn hybrid_layers_hold_kv_and_states() {
    let mut cache = custom([LayerOptions::new(LayerKind::LinearDynamic).conv_kernel_size(2)]);
    let x = Host::tokens(2, 2, 0, 3, 4);
    let kv = cache.update(0, &x.t(), &x.t()).unwrap();
    assert_eq!(kv.key.shape(), &[2, 2, 3, 4]);
    let c = columns(2, 3, 0, 2);
    cache
        .update_conv_state(0, &c.t(), &ConvUpdateOptions::new())
        .unwrap();
    let s = Host::from_fn(&[2, 5], |i| i as f32);
    cache.update_recurrent_state(0, 0, &s.t()).unwrap();
    // Batch operations move K/V rows and state rows together.
    cache.reorder(&[1, 1]).unwrap();
    let views = cache.state_view(0, 0).unwrap();
    assert_eq!(views.conv.unwrap().get::<f32>(&[0, 0, 1]).unwrap(), 102.0);
    assert_eq!(
        views.recurrent.unwrap().to_vec::<f32>().unwrap(),
        [5.0, 6.0, 7.0, 8.0, 9.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    );
    let kv = cache.layer_view(0).unwrap();
    assert_eq!(
        kv.key.get::<f32>(&[0, 0, 0, 0]).unwrap() as i64 / 1_000_000,
        1
    );
    let copy = cache.try_clone().unwrap();
    assert_eq!(
        copy.state_view(0, 0)
            .unwrap()
            .recurrent
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        cache
            .state_view(0, 0)
            .unwrap()
            .recurrent
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    );
    let splits = cache.batch_split(2, 1).unwrap();
    assert_eq!(splits.len(), 2);
    assert_eq!(
        splits[1]
            .state_view(0, 0)
            .unwrap()
            .recurrent
            .unwrap()
            .shape(),
        &[1, 5]
    );
    cache.reset().unwrap();
    assert!(!cache.has_previous_state(Some(0), None).unwrap());
}

#[test]
fn recording_lets_conv_states_roll_back() {
    let mut cache = linear(1, 2);
    // Crop needs past recording.
    expect_err(cache.crop(0), ErrorCode::InvalidState, "kvc_cache_crop");
    cache.activate_past_recording().unwrap();
    let x = columns(1, 1, 0, 3);
    let full = cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new())
        .unwrap();
    assert_eq!(times(&full), [0, 1, 2]); // recording: no padding, nothing dropped
    let y = columns(1, 1, 3, 1);
    cache
        .update_conv_state(0, &y.t(), &ConvUpdateOptions::new())
        .unwrap();
    assert_eq!(
        times(&cache.state_view(0, 0).unwrap().conv.unwrap()),
        [0, 1, 2, 3]
    );
    cache.crop(-1).unwrap();
    assert_eq!(
        times(&cache.state_view(0, 0).unwrap().conv.unwrap()),
        [1, 2]
    );
    expect_err(cache.crop(1), ErrorCode::InvalidState, "kvc_cache_crop");
}

#[test]
fn state_calls_reject_bad_input() {
    let mut cache = custom([
        LayerOptions::linear(1).conv_kernel_size(4),
        LayerOptions::dynamic(),
    ]);
    let x = columns(1, 3, 0, 2);
    cache
        .update_conv_state(0, &x.t(), &ConvUpdateOptions::new())
        .unwrap();
    let before = snapshot(&cache);
    let conv = "kvc_cache_update_conv_state";
    let none = ConvUpdateOptions::new();
    expect_err(
        cache.update_conv_state(1, &x.t(), &none).map(drop),
        ErrorCode::InvalidArgument,
        conv,
    );
    expect_err(
        cache.update_conv_state(2, &x.t(), &none).map(drop),
        ErrorCode::OutOfRange,
        conv,
    );
    expect_err(
        cache
            .update_conv_state(0, &x.t(), &ConvUpdateOptions::new().state_index(1))
            .map(drop),
        ErrorCode::OutOfRange,
        conv,
    );
    let channels = columns(1, 4, 2, 1);
    expect_err(
        cache.update_conv_state(0, &channels.t(), &none).map(drop),
        ErrorCode::ShapeMismatch,
        conv,
    );
    let halves: Vec<kvcache::f16> = x.data.iter().map(|&v| kvcache::f16::from_f32(v)).collect();
    let h = kvcache::TensorRef::new(&halves, &x.shape).unwrap();
    expect_err(
        cache.update_conv_state(0, &h, &none).map(drop),
        ErrorCode::DtypeMismatch,
        conv,
    );
    expect_err(
        cache
            .update_conv_state(0, &x.t(), &ConvUpdateOptions::new().cache_position(&[0]))
            .map(drop),
        ErrorCode::InvalidArgument,
        conv,
    );
    let rec = "kvc_cache_update_recurrent_state";
    let s = Host::from_fn(&[1, 2], |i| i as f32);
    expect_err(
        cache.update_recurrent_state(1, 0, &s.t()).map(drop),
        ErrorCode::InvalidArgument,
        rec,
    );
    expect_err(
        cache.update_recurrent_state(0, 3, &s.t()).map(drop),
        ErrorCode::OutOfRange,
        rec,
    );
    let seven = Host::from_fn(&[1, 1, 1, 1, 1, 1, 1], |_| 0.0);
    let seven = kvcache::TensorRef::new(&seven.data, &seven.shape);
    assert!(seven.is_err()); // more than 6 dimensions never reaches the library
    assert_eq!(snapshot(&cache), before);
    expect_err(
        cache.state_view(1, 0).map(drop),
        ErrorCode::InvalidArgument,
        "kvc_cache_state_view",
    );
    expect_err(
        cache.state_view(0, 1).map(drop),
        ErrorCode::OutOfRange,
        "kvc_cache_state_view",
    );
    expect_err(
        cache.has_previous_state(Some(1), None),
        ErrorCode::InvalidArgument,
        "kvc_cache_has_previous_state",
    );
    let plain = Cache::new().unwrap();
    expect_err(
        plain.has_previous_state(None, None),
        ErrorCode::InvalidArgument,
        "kvc_cache_has_previous_state",
    );
    // Indices that cannot be an int32 are refused by the binding.
    assert_eq!(
        cache
            .has_previous_state(Some(u32::MAX), None)
            .unwrap_err()
            .code(),
        ErrorCode::OutOfRange
    );
}
