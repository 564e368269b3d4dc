//! Every cache kind the C core has today: the presets and the custom layer
//! kinds, with transformers' semantics (what update returns, what is kept,
//! sequence lengths, mask sizes, max and usable lengths).

mod common;

use common::{Host, HostOf, custom, from_config, positions, val};
use kvcache::{
    Cache, DType, ErrorCode, InitOptions, LayerKind, LayerOptions, LayerType, ModelConfig, Preset,
    TensorRef, UpdateOptions, bf16, f16,
};

#[test]
fn lazy_dynamic_cache_grows_with_the_updated_layers() {
    let mut cache = Cache::new().unwrap();
    assert_eq!(cache.num_layers(), 0);
    assert_eq!(cache.seq_length(0).unwrap(), 0);
    assert_eq!(cache.max_length_all().unwrap(), -1);
    let ms = cache.mask_sizes(5, 3).unwrap();
    assert_eq!((ms.kv_length, ms.kv_offset), (5, 0));

    let x = Host::tokens(1, 2, 0, 3, 4);
    cache.update(2, &x.t(), &x.t()).unwrap();
    assert_eq!(cache.num_layers(), 3);
    assert!(!cache.layer_info(0).unwrap().is_initialized);
    assert_eq!(cache.seq_length(0).unwrap(), 0);
    assert_eq!(cache.seq_length(2).unwrap(), 3);
    assert_eq!(
        cache.layer_view(0).unwrap_err().code(),
        ErrorCode::InvalidState
    );
}

#[test]
fn dynamic_layers_store_every_token() {
    let config = ModelConfig::new(2);
    let mut cache = from_config(Preset::Dynamic, config, 0);
    assert_eq!(cache.num_layers(), 2);
    for layer in 0..2 {
        let info = cache.layer_info(layer).unwrap();
        assert_eq!(info.kind, LayerKind::Dynamic);
        assert_eq!(info.capacity, -1);
        assert!(!info.is_initialized && !info.is_sliding && !info.is_compileable);
    }
    let prompt = Host::tokens(2, 3, 0, 5, 4);
    let kv = cache.update(0, &prompt.t(), &prompt.t()).unwrap();
    assert_eq!(kv.key.shape(), &[2, 3, 5, 4]);
    assert_eq!(kv.seq_len(), 5);
    assert_eq!(positions(&kv.key, 1, 2), [0, 1, 2, 3, 4]);
    for t in 5..40 {
        let x = Host::tokens(2, 3, t, 1, 4);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        assert_eq!(positions(&kv.value, 1, 1), (0..=t).collect::<Vec<_>>());
        assert_eq!(kv.key.token::<f32>(1, 2, t).unwrap()[3], val(1, 2, t, 3));
    }
    assert_eq!(cache.seq_length(0).unwrap(), 40);
    assert_eq!(cache.seq_length(1).unwrap(), 0);
    assert_eq!(cache.max_length(0).unwrap(), -1);
    assert_eq!(cache.usable_length(10, 0).unwrap(), 40);
    let ms = cache.mask_sizes(3, 0).unwrap();
    assert_eq!((ms.kv_length, ms.kv_offset), (43, 0));
    let info = cache.layer_info(0).unwrap();
    assert_eq!(
        (
            info.batch_size,
            info.num_kv_heads,
            info.k_head_dim,
            info.v_head_dim
        ),
        (2, 3, 4, 4)
    );
    assert_eq!(
        (info.seq_length, info.stored_length, info.dtype),
        (40, 40, Some(DType::F32))
    );
    // The per-layer view is the same as the last update's.
    let view = cache.layer_view(0).unwrap();
    assert_eq!(positions(&view.key, 0, 0), (0..40).collect::<Vec<_>>());
    let head = view.key.head::<f32>(1, 2).unwrap();
    assert_eq!(head.len(), 40 * 4);
    assert_eq!(head[4 * 39 + 1], val(1, 2, 39, 1));
    let mem = cache.memory().unwrap();
    assert_eq!(mem.bytes_used, 2 * 2 * 3 * 40 * 4 * 4);
    assert!(mem.bytes_reserved >= mem.bytes_used);
    assert_eq!(mem.bytes_host + mem.bytes_quantized + mem.bytes_state, 0);
}

#[test]
fn keys_and_values_may_have_different_head_dims() {
    let mut cache = Cache::new().unwrap();
    let k = Host::tokens(1, 2, 0, 3, 8);
    let v = Host::tokens(1, 2, 0, 3, 4);
    let kv = cache.update(0, &k.t(), &v.t()).unwrap();
    assert_eq!((kv.key.shape()[3], kv.value.shape()[3]), (8, 4));
    let info = cache.layer_info(0).unwrap();
    assert_eq!((info.k_head_dim, info.v_head_dim), (8, 4));
}

#[test]
fn dynamic_sliding_layers_keep_the_last_window_minus_one_tokens() {
    for (kind, layer) in [
        (LayerKind::DynamicSliding, LayerOptions::dynamic_sliding(4)),
        (LayerKind::DynamicChunked, LayerOptions::dynamic_chunked(4)),
    ] {
        let mut cache = custom([layer]);
        let info = cache.layer_info(0).unwrap();
        assert_eq!((info.kind, info.window, info.capacity), (kind, 4, 3));
        assert!(info.is_sliding);
        assert_eq!(info.is_chunked, kind == LayerKind::DynamicChunked);
        assert_eq!(cache.max_length(0).unwrap(), 4);
        // A prefill longer than the window returns the whole prompt.
        let prompt = Host::tokens(1, 1, 0, 6, 2);
        let kv = cache.update(0, &prompt.t(), &prompt.t()).unwrap();
        assert_eq!(positions(&kv.key, 0, 0), [0, 1, 2, 3, 4, 5]);
        assert_eq!(
            positions(&cache.layer_view(0).unwrap().key, 0, 0),
            [3, 4, 5]
        );
        assert_eq!(cache.seq_length(0).unwrap(), 6); // tokens seen
        for t in 6..12 {
            let ms = cache.mask_sizes(1, 0).unwrap();
            assert_eq!((ms.kv_length, ms.kv_offset), (4, t - 3));
            let x = Host::tokens(1, 1, t, 1, 2);
            let kv = cache.update(0, &x.t(), &x.t()).unwrap();
            assert_eq!(positions(&kv.key, 0, 0), [t - 3, t - 2, t - 1, t]);
        }
        let info = cache.layer_info(0).unwrap();
        assert_eq!((info.seq_length, info.stored_length), (12, 3));
        // get_usable_length: bounded, and 12 + 2 > 4.
        assert_eq!(cache.usable_length(2, 0).unwrap(), 2);
        // Cropping past the window needs past recording.
        assert_eq!(cache.crop(-1).unwrap_err().code(), ErrorCode::InvalidState);
    }
}

#[test]
fn static_layers_return_the_whole_buffer() {
    let mut cache = custom([LayerOptions::static_(6)]);
    let info = cache.layer_info(0).unwrap();
    assert_eq!(
        (info.kind, info.max_cache_len, info.capacity),
        (LayerKind::Static, 6, 6)
    );
    assert!(info.is_compileable && !info.is_initialized);
    let prompt = Host::tokens(1, 2, 0, 2, 4);
    let kv = cache.update(0, &prompt.t(), &prompt.t()).unwrap();
    assert_eq!(kv.key.shape(), &[1, 2, 6, 4]);
    assert!(kv.key.is_contiguous());
    let all = kv.key.as_slice::<f32>().unwrap();
    assert_eq!(all.len(), 2 * 6 * 4);
    assert_eq!(all[4], val(0, 0, 1, 0));
    assert!(all[2 * 4..6 * 4].iter().all(|&x| x == 0.0)); // unwritten slots are zero
    for t in 2..6 {
        let x = Host::tokens(1, 2, t, 1, 4);
        cache.update(0, &x.t(), &x.t()).unwrap();
    }
    assert_eq!(cache.seq_length(0).unwrap(), 6);
    assert_eq!(
        positions(&cache.layer_view(0).unwrap().key, 0, 1),
        [0, 1, 2, 3, 4, 5]
    );
    assert_eq!(cache.max_length(0).unwrap(), 6);
    assert_eq!(cache.batch_size().unwrap(), Some(1));
    // Full: one more token overflows, and nothing changes.
    let x = Host::tokens(1, 2, 6, 1, 4);
    let err = cache.update(0, &x.t(), &x.t()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfRange);
    assert_eq!(cache.seq_length(0).unwrap(), 6);
    // Static layers crop by moving their counter back (transformers 5.24); no batch_select_indices.
    assert!(cache.is_croppable(None).unwrap());
    cache.crop(-1).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 5);
    assert_eq!(cache.query_offset(0).unwrap(), 5);
    assert_eq!(
        cache.batch_select_indices(&[0]).unwrap_err().code(),
        ErrorCode::Unsupported
    );
    assert_eq!(
        cache.batch_repeat_interleave(2).unwrap_err().code(),
        ErrorCode::Unsupported
    );
}

#[test]
fn static_layers_accept_an_explicit_cache_position() {
    let mut cache = custom([LayerOptions::static_(8)]);
    let x = Host::tokens(1, 1, 0, 2, 2);
    let positions_written = [3, 6];
    let kv = cache
        .update_with(
            0,
            &x.t(),
            &x.t(),
            &UpdateOptions::new().cache_position(&positions_written),
        )
        .unwrap();
    assert_eq!(kv.key.get::<f32>(&[0, 0, 3, 0]).unwrap(), val(0, 0, 0, 0));
    assert_eq!(kv.key.get::<f32>(&[0, 0, 6, 1]).unwrap(), val(0, 0, 1, 1));
    assert_eq!(kv.key.get::<f32>(&[0, 0, 4, 0]).unwrap(), 0.0);
    assert_eq!(cache.seq_length(0).unwrap(), 7);
    // A position beyond max_cache_len is refused.
    let y = Host::tokens(1, 1, 0, 1, 2);
    let err = cache
        .update_with(
            0,
            &y.t(),
            &y.t(),
            &UpdateOptions::new().cache_position(&[8]),
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfRange);
    // As many positions as new tokens.
    let err = cache
        .update_with(
            0,
            &y.t(),
            &y.t(),
            &UpdateOptions::new().cache_position(&[1, 2]),
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
}

#[test]
fn static_sliding_layers_roll_their_window() {
    for (kind, layer) in [
        (
            LayerKind::StaticSliding,
            LayerOptions::static_sliding(4, 16),
        ),
        (
            LayerKind::StaticChunked,
            LayerOptions::static_chunked(4, 16),
        ),
    ] {
        let mut cache = custom([layer]);
        let info = cache.layer_info(0).unwrap();
        assert_eq!(
            (info.kind, info.window, info.max_cache_len, info.capacity),
            (kind, 4, 16, 4)
        );
        assert_eq!(cache.max_length(0).unwrap(), 4);
        // Not full: the zero-padded buffer, mask (4, 0).
        let x = Host::tokens(1, 1, 0, 2, 2);
        let ms = cache.mask_sizes(2, 0).unwrap();
        assert_eq!((ms.kv_length, ms.kv_offset), (4, 0));
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        assert_eq!(kv.key.shape()[2], 4);
        assert_eq!(kv.key.get::<f32>(&[0, 0, 1, 0]).unwrap(), val(0, 0, 1, 0));
        assert_eq!(kv.key.get::<f32>(&[0, 0, 3, 0]).unwrap(), 0.0);
        for t in 2..10 {
            let x = Host::tokens(1, 1, t, 1, 2);
            let kv = cache.update(0, &x.t(), &x.t()).unwrap();
            if t >= 3 {
                assert_eq!(positions(&kv.key, 0, 0), [t - 3, t - 2, t - 1, t]);
            }
        }
        assert_eq!(cache.seq_length(0).unwrap(), 10);
        // A multi-token update on a full layer returns the previous tail plus the new tokens.
        let x = Host::tokens(1, 1, 10, 2, 2);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        assert_eq!(positions(&kv.key, 0, 0), [7, 8, 9, 10, 11]);
        assert_eq!(
            positions(&cache.layer_view(0).unwrap().key, 0, 0),
            [8, 9, 10, 11]
        );
    }
}

#[test]
fn presets_build_transformers_layer_patterns() {
    use LayerKind::*;
    let kinds = |cache: &Cache| -> Vec<LayerKind> {
        (0..cache.num_layers())
            .map(|l| cache.layer_info(l).unwrap().kind)
            .collect()
    };
    let types = [
        LayerType::SlidingAttention,
        LayerType::FullAttention,
        LayerType::ChunkedAttention,
        LayerType::FullAttention,
    ];
    let config = ModelConfig::new(4)
        .layer_types(types)
        .sliding_window(8)
        .attention_chunk_size(16);
    let dynamic = from_config(Preset::Dynamic, config.clone(), 0);
    assert_eq!(
        kinds(&dynamic),
        [DynamicSliding, Dynamic, DynamicChunked, Dynamic]
    );
    // Each layer its own size (transformers 4.57 and 5.23).
    assert_eq!(dynamic.layer_info(0).unwrap().window, 8);
    assert_eq!(dynamic.layer_info(2).unwrap().window, 16);

    let stat = from_config(Preset::Static, config, 32);
    assert_eq!(kinds(&stat), [StaticSliding, Static, StaticChunked, Static]);
    assert_eq!(stat.max_length_all().unwrap(), 32);

    let sliding = from_config(
        Preset::SlidingWindow,
        ModelConfig::new(3).sliding_window(8),
        32,
    );
    assert_eq!(
        kinds(&sliding),
        [StaticSliding, StaticSliding, StaticSliding]
    );

    // HybridCache without layer types: every second layer is full attention.
    let hybrid = from_config(Preset::Hybrid, ModelConfig::new(4).sliding_window(8), 32);
    assert_eq!(
        kinds(&hybrid),
        [StaticSliding, Static, StaticSliding, Static]
    );
    let hybrid3 = from_config(
        Preset::Hybrid,
        ModelConfig::new(3)
            .sliding_window(8)
            .sliding_window_pattern(3),
        32,
    );
    assert_eq!(kinds(&hybrid3), [StaticSliding, StaticSliding, Static]);

    let chunked = from_config(
        Preset::HybridChunked,
        ModelConfig::new(2).attention_chunk_size(8),
        32,
    );
    assert_eq!(kinds(&chunked), [StaticChunked, Static]);

    // Without layer types: all sliding when sliding_window is set.
    let all_sliding = from_config(Preset::Dynamic, ModelConfig::new(2).sliding_window(8), 0);
    assert_eq!(kinds(&all_sliding), [DynamicSliding, DynamicSliding]);

    // The last num_kv_shared_layers layers get no cache.
    let shared = from_config(
        Preset::Dynamic,
        ModelConfig::new(5).num_kv_shared_layers(2),
        0,
    );
    assert_eq!(shared.num_layers(), 3);
}

#[test]
fn every_dtype_round_trips_bit_exactly() {
    let x = Host::tokens(1, 2, 0, 3, 4);
    let halfs = HostOf::<f16>::convert(&x, f16::from_f32);
    let bhalfs = HostOf::<bf16>::convert(&x, |v| bf16::from_f32(v / 1e4));
    let mut a = Cache::new().unwrap();
    let kv = a.update(0, &halfs.t(), &halfs.t()).unwrap();
    assert_eq!(kv.key.dtype(), Some(DType::F16));
    assert_eq!(kv.key.to_vec::<f16>().unwrap(), halfs.data);
    assert_eq!(
        kv.key.get::<f32>(&[0, 0, 0, 0]).unwrap_err().code(),
        ErrorCode::DtypeMismatch
    );
    let mut b = Cache::new().unwrap();
    let kv = b.update(0, &bhalfs.t(), &bhalfs.t()).unwrap();
    assert_eq!(kv.value.to_vec::<bf16>().unwrap(), bhalfs.data);
    assert_eq!(b.layer_info(0).unwrap().dtype, Some(DType::BF16));
    // Raw bytes of a dtype are accepted as well.
    let words: Vec<u16> = bhalfs.data.iter().map(|x| x.to_bits()).collect();
    // SAFETY: reading u16 storage as bytes.
    let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 2) };
    let t = TensorRef::from_bytes(bytes, DType::BF16, &bhalfs.shape).unwrap();
    let kv = b.update(0, &t, &t).unwrap();
    assert_eq!(kv.key.shape()[2], 6);
    assert_eq!(
        kv.key.token::<bf16>(0, 1, 5).unwrap(),
        &bhalfs.data[(3 + 2) * 4..(3 + 3) * 4]
    );
}

#[test]
fn strided_and_broadcast_inputs_are_copied_as_seen() {
    // A [1, 2, 3, 4] key stored head-major but passed through transposed strides.
    let seq_major = Host::from_fn(&[3, 2, 4], |i| i as f32); // [seq, heads, dim]
    let shape = [1, 2, 3, 4];
    let strides = [24, 4, 8, 1]; // [b, h, s, d] over the [s, h, d] storage
    let t = TensorRef::with_strides(&seq_major.data, &shape, &strides).unwrap();
    let mut cache = Cache::new().unwrap();
    let kv = cache.update(0, &t, &t).unwrap();
    // key[0, h, s, d] = storage[s, h, d]
    assert_eq!(
        kv.key.get::<f32>(&[0, 1, 2, 3]).unwrap(),
        (2 * 8 + 4 + 3) as f32
    );
    // Broadcast: every head the same values.
    let one = [7.0f32, 8.0];
    let t = TensorRef::with_strides(&one, &[1, 2, 1, 2], &[0, 0, 0, 1]).unwrap();
    let mut cache = Cache::new().unwrap();
    let kv = cache.update(0, &t, &t).unwrap();
    assert_eq!(kv.key.to_vec::<f32>().unwrap(), [7.0, 8.0, 7.0, 8.0]);
}

#[test]
fn early_initialization_allocates_every_layer() {
    let mut cache = from_config(Preset::Static, ModelConfig::new(2), 4);
    let dims = [8, 16];
    cache
        .early_initialization(
            &InitOptions::new(2, 3, 0, DType::F16)
                .head_dim_per_layer(&dims)
                .v_head_dim(0),
        )
        .unwrap();
    for (layer, dim) in [(0u32, 8), (1, 16)] {
        let info = cache.layer_info(layer).unwrap();
        assert!(info.is_initialized);
        assert_eq!(
            (info.batch_size, info.num_kv_heads, info.k_head_dim),
            (2, 3, dim)
        );
        assert_eq!(info.dtype, Some(DType::F16));
        let kv = cache.layer_view(layer).unwrap();
        assert_eq!(kv.key.shape(), &[2, 3, 4, dim]);
        assert!(
            kv.key
                .to_vec::<f16>()
                .unwrap()
                .iter()
                .all(|x| x.to_f32() == 0.0)
        );
    }
    assert_eq!(cache.seq_length(0).unwrap(), 0);
    // Updates must now match what was initialized.
    let x = Host::tokens(2, 3, 0, 1, 8);
    let err = cache.update(0, &x.t(), &x.t()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::DtypeMismatch);
    let x = HostOf::<f16>::convert(&x, f16::from_f32);
    cache.update(0, &x.t(), &x.t()).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 1);
    // Per-layer arrays need one entry per layer.
    let mut other = custom([LayerOptions::static_(4), LayerOptions::static_(4)]);
    let err = other
        .early_initialization(&InitOptions::new(1, 1, 4, DType::F32).num_kv_heads_per_layer(&[1]))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("num_kv_heads_per_layer"), "{err}");
    assert!(!other.layer_info(0).unwrap().is_initialized);
}

#[test]
fn caches_can_be_built_from_legacy_tensors() {
    let l0 = Host::tokens(1, 2, 0, 3, 4);
    let l1 = Host::tokens(1, 2, 0, 5, 4);
    let cache = Cache::builder(Preset::Dynamic)
        .build_from_tensors(&[l0.t(), l1.t()], &[l0.t(), l1.t()])
        .unwrap();
    assert_eq!(cache.num_layers(), 2);
    assert_eq!(cache.seq_length(0).unwrap(), 3);
    assert_eq!(cache.seq_length(1).unwrap(), 5);
    assert_eq!(
        positions(&cache.layer_view(1).unwrap().value, 0, 1),
        [0, 1, 2, 3, 4]
    );
    let err = Cache::builder(Preset::Dynamic)
        .build_from_tensors(&[l0.t(), l1.t()], &[l0.t()])
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("kvc_cache_create_from_tensors"));
}

#[test]
fn views_report_layout_and_device() {
    let mut cache = Cache::new().unwrap();
    cache.reserve(16).unwrap();
    let x = Host::tokens(2, 3, 0, 5, 4);
    let kv = cache.update(0, &x.t(), &x.t()).unwrap();
    let key = kv.key;
    assert_eq!(key.ndim(), 4);
    assert_eq!(key.numel(), 2 * 3 * 5 * 4);
    assert_eq!(key.device(), kvcache::Device::CPU);
    assert_eq!(key.data_type(), DType::F32.data_type());
    assert_eq!(key.stride(3), 1);
    assert_eq!(key.stride(2), 4);
    assert_eq!(key.strides().len(), 4);
    assert!(!key.data_ptr().is_null());
    // Reserved storage of 16 tokens: rows are 16 tokens apart, so not compact.
    assert!(!key.is_contiguous());
    assert_eq!(
        key.as_slice::<f32>().unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(key.to_vec::<f32>().unwrap(), x.data);
    assert_eq!(
        key.get::<f32>(&[2, 0, 0, 0]).unwrap_err().code(),
        ErrorCode::OutOfRange
    );
    assert_eq!(
        key.get::<f32>(&[0, 0, 0]).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        key.head::<f32>(0, 3).unwrap_err().code(),
        ErrorCode::OutOfRange
    );
    assert_eq!(
        key.token::<f32>(0, 0, 5).unwrap_err().code(),
        ErrorCode::OutOfRange
    );
    let input = key.as_input();
    assert_eq!(input.shape(), key.shape());
    assert!(format!("{key:?}").contains("shape"));
}
