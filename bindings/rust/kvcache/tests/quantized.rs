//! Quantized layers (ABI 0.2, docs/semantics.md, 'Quantized layers'): QuantizedCache with the quanto and
//! HQQ quantizers, in incremental and transformers mode.

mod common;

use common::{Host, custom, expect_err, snapshot, update_copied};
use kvcache::{
    Cache, ErrorCode, LayerKind, LayerOptions, LayerType, ModelConfig, Offload, Preset, QuantMode,
    QuantOptions, Quantizer, TensorView,
};

const DIM: i64 = 8;

/// Token t, head h, channel d: values spread over [0, 1) within each token,
/// so each per-token group of 8 has a range below 1.
fn token_values(batch: i64, first: i64, tokens: i64) -> Host {
    let mut data = Vec::new();
    for b in 0..batch {
        for h in 0..2 {
            for t in first..first + tokens {
                for d in 0..DIM {
                    let x = ((t * 7 + d * 3 + h * 5 + b * 11) % 17) as f32 / 17.0;
                    data.push(t as f32 + x);
                }
            }
        }
    }
    Host {
        data,
        shape: vec![batch, 2, tokens, DIM],
    }
}

fn quantized_cache(quant: QuantOptions) -> Cache {
    Cache::builder(Preset::Quantized)
        .config(ModelConfig::new(2))
        .quant(quant)
        .build()
        .unwrap()
}

/// Every token of `view` equals the expected one within `tolerance`, and
/// the newest `exact` tokens are bit-exact.
fn check_tokens(view: &TensorView<'_>, batch: i64, total: i64, exact: i64, tolerance: f32) {
    let want = token_values(batch, 0, total);
    let got = view.to_vec::<f32>().unwrap();
    assert_eq!(view.shape(), &[batch, 2, total, DIM]);
    for (i, (g, w)) in got.iter().zip(&want.data).enumerate() {
        let t = (i as i64 / DIM) % total;
        if t >= total - exact {
            assert_eq!(g, w, "token {t} is in the residual and must be exact");
        } else {
            assert!((g - w).abs() <= tolerance, "token {t}: {g} vs {w}");
        }
    }
}

#[test]
fn incremental_quanto_keeps_a_full_precision_residual() {
    let quant = QuantOptions::new()
        .nbits(4)
        .q_group_size(DIM)
        .residual_length(4);
    let mut cache = quantized_cache(quant);
    let info = cache.layer_info(1).unwrap();
    assert_eq!(info.kind, LayerKind::Quantized);
    let prompt = token_values(1, 0, 3);
    let kv = cache.update(0, &prompt.t(), &prompt.t()).unwrap();
    check_tokens(&kv.key, 1, 3, 3, 0.0);
    // One step of 4-bit quantization of a group with range < 1: error <= 1/15 / 2.
    let step = 1.0 / 15.0;
    for t in 3..20 {
        let x = token_values(1, t, 1);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        check_tokens(&kv.key, 1, t + 1, 4, step / 2.0 + 1e-3);
        check_tokens(&kv.value, 1, t + 1, 4, step / 2.0 + 1e-3);
    }
    let info = cache.layer_info(0).unwrap();
    assert_eq!(info.seq_length, 20);
    assert_eq!(info.quantized_length, 16); // all but the residual, quantized once
    let mem = cache.memory().unwrap();
    assert!(mem.bytes_quantized > 0);
    assert_eq!(cache.mask_sizes(1, 0).unwrap().kv_length, 21);
    // The stored view is what the last update returned.
    check_tokens(
        &cache.layer_view(0).unwrap().key,
        1,
        20,
        4,
        step / 2.0 + 1e-3,
    );
}

#[test]
fn transformers_mode_follows_its_flush_timeline() {
    let quant = QuantOptions::new()
        .mode(QuantMode::Transformers)
        .q_group_size(DIM)
        .residual_length(4);
    let mut cache = quantized_cache(quant);
    let prompt = token_values(1, 0, 3);
    let kv = cache.update(0, &prompt.t(), &prompt.t()).unwrap();
    check_tokens(&kv.key, 1, 3, 3, 0.0); // the prefill comes back unquantized
    assert_eq!(cache.layer_info(0).unwrap().quantized_length, 3);
    // The residual holds 1, 2, 3 tokens; at the 4th step (R - 1 held) everything
    // (3 quantized + 3 residual + 1 new) is quantized again.
    for (t, quantized) in [(3, 3), (4, 3), (5, 3), (6, 7), (7, 7)] {
        let x = token_values(1, t, 1);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        assert_eq!(kv.key.shape()[2], t + 1);
        assert_eq!(
            cache.layer_info(0).unwrap().quantized_length,
            quantized,
            "after token {t}"
        );
    }
    assert_eq!(cache.seq_length(0).unwrap(), 8);
}

#[test]
fn hqq_and_per_channel_quanto() {
    let hqq = QuantOptions::new()
        .quantizer(Quantizer::Hqq)
        .nbits(8)
        .axis_key(1)
        .axis_value(1)
        .q_group_size(DIM)
        .residual_length(2);
    let mut cache = quantized_cache(hqq);
    for t in 0..10 {
        let x = token_values(2, t, 1);
        cache.update(1, &x.t(), &x.t()).unwrap();
    }
    // 8 bits: two steps of 1/255 at most (HQQ moves the zero point).
    check_tokens(
        &cache.layer_view(1).unwrap().value,
        2,
        10,
        2,
        2.0 / 255.0 + 1e-3,
    );
    assert_eq!(cache.layer_info(1).unwrap().quantized_length, 8);

    // quanto axis -1: one channel over q_group_size tokens, quantized a block at a time.
    let per_channel = QuantOptions::new()
        .nbits(2)
        .axis_key(-1)
        .q_group_size(4)
        .residual_length(2);
    let mut cache = quantized_cache(per_channel);
    for t in 0..12 {
        let x = token_values(1, t, 1);
        cache.update(0, &x.t(), &x.t()).unwrap();
    }
    let info = cache.layer_info(0).unwrap();
    assert_eq!(info.seq_length, 12);
    assert_eq!(info.quantized_length % 4, 0);
    assert!(info.quantized_length >= 8, "{info:?}");
}

#[test]
fn quantized_layers_take_part_in_every_operation() {
    let quant = QuantOptions::new().q_group_size(DIM).residual_length(2);
    let mut cache = custom([LayerOptions::quantized(quant)]);
    for t in 0..8 {
        let x = token_values(3, t, 1);
        cache.update(0, &x.t(), &x.t()).unwrap();
    }
    let copy = cache.try_clone().unwrap();
    assert_eq!(snapshot(&copy), snapshot(&cache));
    // Crop reaches into the quantized tokens.
    cache.crop(-3).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 5);
    assert_eq!(cache.layer_view(0).unwrap().key.shape()[2], 5);
    // Beam reorder moves quantized rows too: row 0 becomes former row 2.
    let before = copy.layer_view(0).unwrap().key.to_vec::<f32>().unwrap();
    let mut reordered = copy.try_clone().unwrap();
    reordered.reorder(&[2, 1, 0]).unwrap();
    let after = reordered
        .layer_view(0)
        .unwrap()
        .key
        .to_vec::<f32>()
        .unwrap();
    let row = (2 * 8 * DIM) as usize;
    assert_eq!(&after[..row], &before[2 * row..]);
    reordered.batch_select_indices(&[1]).unwrap();
    reordered.batch_repeat_interleave(2).unwrap();
    assert_eq!(reordered.layer_info(0).unwrap().batch_size, 2);
    let splits = copy.batch_split(3, 1).unwrap();
    let stacked = Cache::from_batch_splits(&splits).unwrap();
    assert_eq!(snapshot(&stacked).contents, snapshot(&copy).contents);
    cache.reset().unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 0);
    assert_eq!(cache.layer_info(0).unwrap().quantized_length, 0);
}

#[test]
fn quantized_options_are_validated() {
    const FN: &str = "kvc_cache_create";
    for quant in [
        QuantOptions::new().nbits(3),
        QuantOptions::new().quantizer(Quantizer::Hqq).nbits(5),
        QuantOptions::new().axis_key(1),
        QuantOptions::new().quantizer(Quantizer::Hqq).axis_value(-1),
        QuantOptions::new().q_group_size(0),
        QuantOptions::new().residual_length(-1),
    ] {
        let r = Cache::builder(Preset::Quantized)
            .config(ModelConfig::new(1))
            .quant(quant)
            .build();
        expect_err(r, ErrorCode::InvalidArgument, FN);
        let r = Cache::builder(Preset::Custom)
            .layer(LayerOptions::quantized(quant))
            .build();
        expect_err(r, ErrorCode::InvalidArgument, FN);
    }
    // Only full attention layers, and no offloading.
    let r = Cache::builder(Preset::Quantized)
        .config(
            ModelConfig::new(2)
                .layer_types([LayerType::FullAttention, LayerType::SlidingAttention])
                .sliding_window(4),
        )
        .build();
    expect_err(r, ErrorCode::InvalidArgument, FN);
    let r = Cache::builder(Preset::Quantized)
        .config(ModelConfig::new(1))
        .offload(Offload::All)
        .build();
    expect_err(r, ErrorCode::Unsupported, FN);
    // Incremental per-token groups need head_dim % q_group_size == 0: refused, unchanged.
    let mut cache = quantized_cache(QuantOptions::new().q_group_size(3));
    let before = snapshot(&cache);
    let x = token_values(1, 0, 2);
    expect_err(
        cache.update(0, &x.t(), &x.t()).map(drop),
        ErrorCode::InvalidArgument,
        "kvc_cache_update",
    );
    assert_eq!(snapshot(&cache), before);
}

#[test]
fn compact_mode_returns_what_incremental_mode_returns() {
    let quant = |mode| {
        QuantOptions::new()
            .mode(mode)
            .nbits(4)
            .q_group_size(DIM)
            .residual_length(4)
    };
    let mut inc = quantized_cache(quant(QuantMode::Incremental));
    let mut cmp = quantized_cache(quant(QuantMode::Compact));
    let prompt = token_values(1, 0, 12);
    let (a, _) = update_copied(&mut inc, 0, &prompt);
    let (b, _) = update_copied(&mut cmp, 0, &prompt);
    assert_eq!(a, b);
    for t in 12..40 {
        let x = token_values(1, t, 1);
        let (_, a) = update_copied(&mut inc, 0, &x);
        let (_, b) = update_copied(&mut cmp, 0, &x);
        assert_eq!(a, b, "step {t}");
    }
    assert_eq!(cmp.layer_info(0).unwrap().quantized_length, 36);
}
