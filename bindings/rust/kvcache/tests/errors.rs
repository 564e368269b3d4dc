//! Bad input for every entry point: the error carries the C code and a
//! message naming the function, and the cache is exactly as before.

mod common;

use common::{Host, custom, expect_err, from_config, snapshot};
use kvcache::{
    Cache, DType, DataType, Device, ErrorCode, InitOptions, LayerOptions, LayerType, ModelConfig,
    Preset, QuantOptions, TensorRef, UpdateOptions, ViewBuffer,
};

/// A 2-layer dynamic cache holding 3 tokens of batch 2 in layer 0 and a
/// static layer holding 2 tokens.
fn filled() -> Cache {
    let mut cache = custom([LayerOptions::dynamic(), LayerOptions::static_(4)]);
    let x = Host::tokens(2, 2, 0, 3, 4);
    cache.update(0, &x.t(), &x.t()).unwrap();
    let y = Host::tokens(2, 2, 0, 2, 4);
    cache.update(1, &y.t(), &y.t()).unwrap();
    cache
}

/// Runs `op` on a filled cache, checks its error and that nothing changed.
#[track_caller]
fn refused(code: ErrorCode, function: &str, op: impl FnOnce(&mut Cache) -> kvcache::Result<()>) {
    let mut cache = filled();
    let before = snapshot(&cache);
    expect_err(op(&mut cache), code, function);
    assert_eq!(snapshot(&cache), before, "{function} changed the cache");
}

#[test]
fn create_rejects_bad_options() {
    const FN: &str = "kvc_cache_create";
    // (why it is refused, the builder, what else the message says)
    let cases = [
        (
            "static presets need max_cache_len",
            Cache::builder(Preset::Static).config(ModelConfig::new(2)),
            "",
        ),
        (
            "the sliding-window preset needs a window",
            Cache::builder(Preset::SlidingWindow)
                .config(ModelConfig::new(2))
                .max_cache_len(8),
            "",
        ),
        (
            "a custom sliding layer of window 0",
            Cache::builder(Preset::Custom).layer(LayerOptions::dynamic_sliding(0)),
            "",
        ),
        (
            "a custom static layer of 0 slots",
            Cache::builder(Preset::Custom).layer(LayerOptions::static_(0)),
            "",
        ),
        ("custom without layers", Cache::builder(Preset::Custom), ""),
        (
            "an unknown layer kind",
            Cache::builder(Preset::Custom)
                .layer(LayerOptions::new(kvcache::LayerKind::Unknown(99))),
            "",
        ),
        (
            "a config needs layers",
            Cache::builder(Preset::Dynamic).config(ModelConfig::new(0)),
            "",
        ),
        (
            "layer types need one entry per layer (checked by the binding)",
            Cache::builder(Preset::Dynamic)
                .config(ModelConfig::new(3).layer_types([LayerType::FullAttention])),
            "layer_types",
        ),
        (
            "sliding layer types without a window",
            Cache::builder(Preset::Dynamic)
                .config(ModelConfig::new(1).layer_types([LayerType::SlidingAttention])),
            "",
        ),
        (
            "every layer shares KV: nothing to cache",
            Cache::builder(Preset::Dynamic).config(ModelConfig::new(2).num_kv_shared_layers(2)),
            "",
        ),
        (
            "quantizer options are validated at creation",
            Cache::builder(Preset::Quantized)
                .config(ModelConfig::new(1))
                .quant(QuantOptions::new().nbits(3)),
            "nbits",
        ),
    ];
    for (why, builder, also) in cases {
        let msg = expect_err(builder.build(), ErrorCode::InvalidArgument, FN);
        assert!(msg.contains(also), "{why}: {msg}");
    }
    // No CUDA device here (or no CUDA backend built): an error value, not a crash.
    if !kvcache::features().contains(kvcache::Features::CUDA) {
        let r = Cache::builder(Preset::Dynamic)
            .device(Device::cuda(0))
            .build();
        expect_err(r, ErrorCode::NoDevice, FN);
    }
}

#[test]
fn create_from_tensors_rejects_bad_tensors() {
    let good = Host::tokens(1, 2, 0, 3, 4);
    let flat = Host::from_fn(&[2, 3, 4], |i| i as f32);
    let r = Cache::builder(Preset::Dynamic)
        .build_from_tensors(&[good.t(), flat.t()], &[good.t(), flat.t()]);
    expect_err(r, ErrorCode::ShapeMismatch, "kvc_cache_create_from_tensors").contains("ndim");
    let r = Cache::builder(Preset::Static)
        .config(ModelConfig::new(1))
        .max_cache_len(2)
        .build_from_tensors(&[good.t()], &[good.t()]);
    expect_err(r, ErrorCode::OutOfRange, "kvc_cache_create_from_tensors");
}

#[test]
fn update_rejects_bad_tensors() {
    const FN: &str = "kvc_cache_update";
    let heads3 = Host::tokens(2, 3, 3, 1, 4);
    refused(ErrorCode::ShapeMismatch, FN, |c| {
        c.update(0, &heads3.t(), &heads3.t()).map(drop)
    });
    let batch1 = Host::tokens(1, 2, 3, 1, 4);
    refused(ErrorCode::ShapeMismatch, FN, |c| {
        c.update(0, &batch1.t(), &batch1.t()).map(drop)
    });
    let dim8 = Host::tokens(2, 2, 3, 1, 8);
    refused(ErrorCode::ShapeMismatch, FN, |c| {
        c.update(0, &dim8.t(), &dim8.t()).map(drop)
    });
    let good = Host::tokens(2, 2, 3, 1, 4);
    // Key and value disagree on the number of tokens.
    let two = Host::tokens(2, 2, 3, 2, 4);
    refused(ErrorCode::ShapeMismatch, FN, |c| {
        c.update(0, &good.t(), &two.t()).map(drop)
    });
    let three_d = Host::from_fn(&[2, 2, 4], |_| 0.0);
    refused(ErrorCode::ShapeMismatch, FN, |c| {
        c.update(0, &three_d.t(), &three_d.t()).map(drop)
    });
    let halves: Vec<kvcache::f16> = good
        .data
        .iter()
        .map(|&x| kvcache::f16::from_f32(x))
        .collect();
    refused(ErrorCode::DtypeMismatch, FN, |c| {
        let t = TensorRef::new(&halves, &good.shape)?;
        c.update(0, &t, &t).map(drop)
    });
    // A dtype kvcache cannot store at all.
    let ints = vec![0i32; good.data.len()];
    refused(ErrorCode::DtypeMismatch, FN, |c| {
        let int32 = DataType {
            code: DataType::CODE_INT,
            bits: 32,
            lanes: 1,
        };
        // SAFETY: host memory of good.shape's elements, i32.
        let t = unsafe {
            TensorRef::from_raw_parts(
                ints.as_ptr().cast(),
                Device::CPU,
                int32,
                &good.shape,
                None,
                0,
            )
        };
        c.update(0, &t, &t).map(drop)
    });
    // A tensor on another device than the cache (never read: it is refused first).
    refused(ErrorCode::DeviceMismatch, FN, |c| {
        // SAFETY: the library refuses the device before touching the data.
        let t = unsafe {
            TensorRef::from_raw_parts(
                good.data.as_ptr().cast(),
                Device::cuda(0),
                DType::F32.data_type(),
                &good.shape,
                None,
                0,
            )
        };
        c.update(0, &t, &t).map(drop)
    });
    // A static layer that would overflow.
    let three = Host::tokens(2, 2, 2, 3, 4);
    refused(ErrorCode::OutOfRange, FN, |c| {
        c.update(1, &three.t(), &three.t()).map(drop)
    });
    // A layer index beyond a non-lazy cache.
    refused(ErrorCode::OutOfRange, FN, |c| {
        c.update(2, &good.t(), &good.t()).map(drop)
    });
    // A wrong count of positions, and positions outside the static layer.
    refused(ErrorCode::InvalidArgument, FN, |c| {
        c.update_with(
            1,
            &good.t(),
            &good.t(),
            &UpdateOptions::new().cache_position(&[2, 3]),
        )
        .map(drop)
    });
    refused(ErrorCode::OutOfRange, FN, |c| {
        c.update_with(
            1,
            &good.t(),
            &good.t(),
            &UpdateOptions::new().cache_position(&[-1]),
        )
        .map(drop)
    });
}

#[test]
fn update_all_is_all_or_nothing() {
    const FN: &str = "kvc_cache_update_all";
    let good = Host::tokens(2, 2, 3, 1, 4);
    let bad = Host::tokens(2, 2, 3, 1, 8);
    let mut views = ViewBuffer::new();
    refused(ErrorCode::ShapeMismatch, FN, |c| {
        c.update_all(&[good.t(), bad.t()], &[good.t(), bad.t()], &mut views)
            .map(drop)
    });
    let mut views = ViewBuffer::new();
    refused(ErrorCode::InvalidArgument, FN, |c| {
        c.update_all(&[good.t(), good.t()], &[good.t()], &mut views)
            .map(drop)
    });
    let mut views = ViewBuffer::new();
    refused(ErrorCode::OutOfRange, FN, |c| {
        let k = [good.t(), good.t(), good.t()];
        c.update_all(&k, &k, &mut views).map(drop)
    });
    let mut views = ViewBuffer::new();
    // Layer 1 (static) refuses position 9, so layer 0 is not updated either.
    refused(ErrorCode::OutOfRange, FN, |c| {
        let k = [good.t(), good.t()];
        c.update_all_with(
            &k,
            &k,
            &UpdateOptions::new().cache_position(&[9]),
            &mut views,
        )
        .map(drop)
    });
}

#[test]
fn queries_reject_bad_indices() {
    let cache = filled();
    let before = snapshot(&cache);
    expect_err(
        cache.layer_info(2),
        ErrorCode::OutOfRange,
        "kvc_cache_layer_info",
    );
    expect_err(
        cache.layer_view(7),
        ErrorCode::OutOfRange,
        "kvc_cache_layer_view",
    );
    expect_err(
        cache.usable_length(-1, 0),
        ErrorCode::InvalidArgument,
        "kvc_cache_usable_length",
    );
    expect_err(
        cache.usable_length(1 << 31, 0),
        ErrorCode::InvalidArgument,
        "kvc_cache_usable_length",
    );
    expect_err(
        cache.mask_sizes(-1, 0),
        ErrorCode::InvalidArgument,
        "kvc_cache_mask_sizes",
    );
    // Beyond the layers: transformers' answers, not errors.
    assert_eq!(cache.seq_length(9).unwrap(), 0);
    assert_eq!(cache.max_length(9).unwrap(), -1);
    assert_eq!(cache.max_length(u32::MAX).unwrap(), -1);
    let ms = cache.mask_sizes(4, 9).unwrap();
    assert_eq!((ms.kv_length, ms.kv_offset), (4, 0));
    assert_eq!(snapshot(&cache), before);
    // An uninitialized layer has no view.
    let fresh = from_config(Preset::Dynamic, ModelConfig::new(1), 0);
    expect_err(
        fresh.layer_view(0),
        ErrorCode::InvalidState,
        "kvc_cache_layer_view",
    );
}

#[test]
fn batch_size_needs_agreeing_static_layers() {
    let mut cache = custom([LayerOptions::static_(4), LayerOptions::static_(4)]);
    assert_eq!(cache.batch_size().unwrap(), None);
    let one = Host::tokens(1, 1, 0, 1, 2);
    let two = Host::tokens(2, 1, 0, 1, 2);
    cache.update(0, &one.t(), &one.t()).unwrap();
    cache.update(1, &two.t(), &two.t()).unwrap();
    let before = snapshot(&cache);
    expect_err(
        cache.batch_size(),
        ErrorCode::InvalidState,
        "kvc_cache_batch_size",
    );
    assert_eq!(snapshot(&cache), before);
}

#[test]
fn early_initialization_rejects_bad_options() {
    const FN: &str = "kvc_cache_early_initialization";
    let mut cache = custom([LayerOptions::static_(4), LayerOptions::static_(4)]);
    let before = snapshot(&cache);
    for options in [
        InitOptions::new(0, 1, 4, DType::F32),
        InitOptions::new(1, 0, 4, DType::F32),
        InitOptions::new(1, 1, 0, DType::F32),
        InitOptions::new(1, 1, 4, DType::F32).v_head_dim(-1),
        InitOptions::new(1, 1, 4, DType::F32).head_dim_per_layer(&[4, 0]),
    ] {
        expect_err(
            cache.early_initialization(&options),
            ErrorCode::InvalidArgument,
            FN,
        );
        assert_eq!(snapshot(&cache), before);
    }
}

#[test]
fn operations_reject_bad_arguments() {
    refused(
        ErrorCode::Unsupported,
        "kvc_cache_set_previous_accepted_tokens",
        |c| c.set_previous_accepted_tokens(1),
    );
    refused(ErrorCode::OutOfRange, "kvc_cache_reorder", |c| {
        c.reorder(&[0, 2])
    });
    refused(ErrorCode::OutOfRange, "kvc_cache_reorder", |c| {
        c.reorder(&[-1, 0])
    });
    refused(ErrorCode::InvalidArgument, "kvc_cache_reorder", |c| {
        c.reorder(&[])
    });
    refused(
        ErrorCode::Unsupported,
        "kvc_cache_batch_repeat_interleave",
        |c| c.batch_repeat_interleave(2),
    );
    refused(
        ErrorCode::Unsupported,
        "kvc_cache_batch_select_indices",
        |c| c.batch_select_indices(&[0]),
    );
    refused(ErrorCode::InvalidArgument, "kvc_cache_reserve", |c| {
        c.reserve(-5)
    });
    refused(ErrorCode::InvalidArgument, "kvc_cache_reserve", |c| {
        c.reserve(1 << 31)
    });
    refused(ErrorCode::InvalidArgument, "kvc_cache_batch_split", |c| {
        c.batch_split(3, 1).map(drop)
    });

    // On dynamic layers only: repeats >= 1, indices inside the batch.
    let mut cache = Cache::new().unwrap();
    let x = Host::tokens(2, 1, 0, 2, 2);
    cache.update(0, &x.t(), &x.t()).unwrap();
    let before = snapshot(&cache);
    expect_err(
        cache.batch_repeat_interleave(0),
        ErrorCode::InvalidArgument,
        "kvc_cache_batch_repeat_interleave",
    );
    expect_err(
        cache.batch_select_indices(&[2]),
        ErrorCode::OutOfRange,
        "kvc_cache_batch_select_indices",
    );
    expect_err(
        cache.batch_select_indices(&[-1]),
        ErrorCode::OutOfRange,
        "kvc_cache_batch_select_indices",
    );
    assert_eq!(snapshot(&cache), before);

    // Sliding layers past their window cannot be cropped without recording.
    let mut sliding = custom([LayerOptions::dynamic_sliding(3)]);
    let x = Host::tokens(1, 1, 0, 5, 2);
    sliding.update(0, &x.t(), &x.t()).unwrap();
    let before = snapshot(&sliding);
    expect_err(sliding.crop(-1), ErrorCode::InvalidState, "kvc_cache_crop");
    assert_eq!(snapshot(&sliding), before);
}

#[test]
fn tensor_constructors_check_their_input() {
    let data = [0.0f32; 6];
    let e = TensorRef::new(&data, &[1, 2, 4]).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.message().contains("TensorRef::new"));
    assert!(TensorRef::new(&data, &[-1, -6]).is_err());
    assert!(TensorRef::new(&data, &[1, 1, 1, 1, 1, 1, 6]).is_err());
    assert!(TensorRef::with_strides(&data, &[2, 3], &[3]).is_err());
    assert!(TensorRef::with_strides(&data, &[2, 3], &[-3, 1]).is_err());
    assert!(TensorRef::with_strides(&data, &[2, 3], &[4, 1]).is_err());
    assert!(TensorRef::with_strides(&data, &[0, 3], &[100, 1]).is_ok());
    let bytes = [0u8; 13];
    assert!(TensorRef::from_bytes(&bytes[..12], DType::F32, &[4]).is_err());
    let aligned = [0u32; 4];
    // SAFETY: reading u32 storage as bytes.
    let b = unsafe { std::slice::from_raw_parts(aligned.as_ptr().cast::<u8>(), 16) };
    assert!(TensorRef::from_bytes(&b[1..13], DType::F32, &[3]).is_err()); // misaligned
    assert!(TensorRef::from_bytes(b, DType::F32, &[4]).is_ok());
}

#[test]
fn errors_are_values_with_code_and_message() {
    let err = Cache::new().unwrap().layer_info(0).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfRange);
    assert_eq!(err.code().name(), "KVC_ERROR_OUT_OF_RANGE");
    assert_eq!(ErrorCode::from_raw(err.raw_code()), Some(err.code()));
    assert_eq!(ErrorCode::from_raw(0), None);
    assert_eq!(ErrorCode::from_raw(1234), Some(ErrorCode::Unknown(1234)));
    for raw in 1..=11 {
        let code = ErrorCode::from_raw(raw).unwrap();
        assert_eq!(code.raw(), raw);
        assert!(code.name().starts_with("KVC_ERROR_"));
        assert_ne!(code.name(), "KVC_ERROR_UNKNOWN");
        assert_eq!(code.to_string(), code.name());
    }
    let shown = err.to_string();
    assert!(shown.contains("kvc_cache_layer_info") && shown.ends_with("(KVC_ERROR_OUT_OF_RANGE)"));
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err.clone());
    assert_eq!(boxed.to_string(), shown);
    assert!(format!("{err:?}").contains("OutOfRange"));
}
