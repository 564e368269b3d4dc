//! Sink layers (ABI 0.2, SinkCache, docs/semantics.md, 'Sink layers'): the first tokens plus the
//! most recent ones, with the kept keys re-rotated when RoPE tables are given.

mod common;

use common::{Host, custom, expect_err, snapshot};
use kvcache::{Cache, ErrorCode, LayerKind, LayerOptions, Preset, TensorRef, UpdateOptions};

/// A 1-head, 1-channel tensor of the listed token ids.
fn ids(tokens: &[i64]) -> Host {
    Host {
        data: tokens.iter().map(|&t| t as f32).collect(),
        shape: vec![1, 1, tokens.len() as i64, 1],
    }
}

fn stored(view: &kvcache::TensorView<'_>) -> Vec<i64> {
    view.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&x| x as i64)
        .collect()
}

fn sink_cache(window: i64, sinks: i64) -> Cache {
    Cache::builder(Preset::Sink)
        .window_length(window)
        .num_sink_tokens(sinks)
        .build()
        .unwrap()
}

/// docs/semantics.md, 'Sink layer trace': window 6, 2 sink tokens.
#[test]
fn keeps_the_sinks_and_the_most_recent_tokens() {
    let mut cache = sink_cache(6, 2);
    assert_eq!(cache.num_layers(), 0); // lazy
    let steps: [(&[i64], usize, &[i64]); 5] = [
        (&[0, 1, 2, 3], 4, &[0, 1, 2, 3]),
        (&[4], 5, &[0, 1, 2, 3, 4]),
        (&[5], 6, &[0, 1, 2, 3, 4, 5]),
        (&[6], 6, &[0, 1, 3, 4, 5, 6]),
        (&[7, 8], 6, &[0, 1, 5, 6, 7, 8]),
    ];
    for (new, len, want) in steps {
        assert_eq!(
            cache.mask_sizes(new.len() as i64, 0).unwrap().kv_length,
            len as i64
        );
        let x = ids(new);
        let kv = cache.update(0, &x.t(), &x.t()).unwrap();
        assert_eq!(stored(&kv.key), want);
        assert_eq!(stored(&kv.value), want);
    }
    assert_eq!(
        stored(&cache.layer_view(0).unwrap().key),
        [0, 1, 5, 6, 7, 8]
    );
    assert_eq!(cache.seq_length(0).unwrap(), 6);
    assert_eq!(cache.max_length(0).unwrap(), 6);
    assert_eq!(cache.usable_length(1, 0).unwrap(), 5);
    let info = cache.layer_info(0).unwrap();
    assert_eq!(info.kind, LayerKind::Sink);
    assert_eq!(
        (info.window, info.num_sink_tokens, info.capacity),
        (6, 2, 6)
    );
    assert!(info.is_sliding);
}

/// Quarter-turn RoPE: position p is turned by p * pi / 2, so a key kept
/// while the window shifts by one is turned back by a quarter:
/// (x1, x2) -> (x2, -x1), exactly.
#[test]
fn kept_keys_are_re_rotated() {
    let mut cache = custom([LayerOptions::sink(4, 1)]);
    let quarter_cos = |p: i64| [1.0f32, 0.0, -1.0, 0.0][(p % 4) as usize];
    let quarter_sin = |p: i64| [0.0f32, 1.0, 0.0, -1.0][(p % 4) as usize];
    let rows = 16;
    let cos: Vec<f32> = (0..rows).flat_map(|p| [quarter_cos(p); 2]).collect();
    let sin: Vec<f32> = (0..rows).flat_map(|p| [quarter_sin(p); 2]).collect();
    let table = [rows, 2];
    let (cos, sin) = (
        TensorRef::new(&cos, &table).unwrap(),
        TensorRef::new(&sin, &table).unwrap(),
    );
    let options = UpdateOptions::new().rope(&cos, &sin);
    // Key of token t: (t + 1, 10 (t + 1)); values are not rotated.
    let key = |tokens: &[i64]| Host {
        data: tokens
            .iter()
            .flat_map(|&t| [(t + 1) as f32, 10.0 * (t + 1) as f32])
            .collect(),
        shape: vec![1, 1, tokens.len() as i64, 2],
    };
    let k = key(&[0, 1, 2, 3]);
    cache.update_with(0, &k.t(), &k.t(), &options).unwrap();
    let k = key(&[4]);
    let kv = cache.update_with(0, &k.t(), &k.t(), &options).unwrap();
    // [sink 0, rot(2), rot(3), 4]
    assert_eq!(
        kv.key.to_vec::<f32>().unwrap(),
        [1.0, 10.0, 30.0, -3.0, 40.0, -4.0, 5.0, 50.0]
    );
    assert_eq!(
        kv.value.to_vec::<f32>().unwrap(),
        [1.0, 10.0, 3.0, 30.0, 4.0, 40.0, 5.0, 50.0]
    );
    let k = key(&[5]);
    let kv = cache.update_with(0, &k.t(), &k.t(), &options).unwrap();
    // [sink 0, rot(rot(3)), rot(4), 5]
    assert_eq!(
        kv.key.to_vec::<f32>().unwrap(),
        [1.0, 10.0, -4.0, -40.0, 50.0, -5.0, 6.0, 60.0]
    );
}

#[test]
fn sink_layers_support_batch_operations_and_clone() {
    let mut cache = sink_cache(4, 1);
    let x = Host::tokens(3, 1, 0, 6, 2);
    cache.update(0, &x.t(), &x.t()).unwrap();
    let y = Host::tokens(3, 1, 6, 1, 2);
    cache.update(0, &y.t(), &y.t()).unwrap();
    let copy = cache.try_clone().unwrap();
    assert_eq!(snapshot(&copy), snapshot(&cache));
    cache.reorder(&[2, 2, 0]).unwrap();
    let kv = cache.layer_view(0).unwrap();
    assert_eq!(
        kv.key.get::<f32>(&[0, 0, 0, 0]).unwrap() as i64 / 1_000_000,
        2
    );
    assert_eq!(kv.key.shape()[2], 4);
    cache.reset().unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 0);
}

#[test]
fn sink_options_are_validated() {
    const FN: &str = "kvc_cache_create";
    for (window, sinks) in [(2, 2), (0, 0), (4, -1)] {
        let r = Cache::builder(Preset::Sink)
            .window_length(window)
            .num_sink_tokens(sinks)
            .build();
        expect_err(r, ErrorCode::InvalidArgument, FN);
        let r = Cache::builder(Preset::Custom)
            .layer(LayerOptions::sink(window, sinks))
            .build();
        expect_err(r, ErrorCode::InvalidArgument, FN);
    }
    // RoPE tables must come in pairs; refused before anything changes.
    let mut cache = sink_cache(4, 1);
    let x = ids(&[0, 1]);
    cache.update(0, &x.t(), &x.t()).unwrap();
    let before = snapshot(&cache);
    let cos = [1.0f32; 8];
    let table = [4, 2];
    let cos = TensorRef::new(&cos, &table).unwrap();
    let mut raw = *UpdateOptions::new().as_raw();
    raw.rope_cos = cos.as_raw();
    // Only cos: the safe builder always sets both, so go through the raw ABI.
    let y = ids(&[2]);
    let (yk, yv) = (y.t(), y.t());
    let mut out = kvcache::sys::kvc_kv::default();
    // SAFETY: every pointer is valid for the call.
    let err = unsafe {
        kvcache::sys::kvc_cache_update(
            cache.as_mut_ptr(),
            0,
            yk.as_raw(),
            yv.as_raw(),
            &raw,
            &mut out,
        )
    };
    assert!(!err.is_null());
    // SAFETY: a live error object, freed by from_raw.
    let err = unsafe { kvcache::Error::from_raw(err) };
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert_eq!(snapshot(&cache), before);
}
