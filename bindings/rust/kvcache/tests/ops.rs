//! The cache operations: update_all, crop, past recording, reorder, batch
//! repeat/select/split/stack, reserve, reset, clone.

mod common;

use common::{Host, custom, from_config, positions, snapshot, val};
use kvcache::{Cache, ErrorCode, LayerOptions, ModelConfig, Preset, TensorRef, ViewBuffer};

fn dynamic(layers: u32) -> Cache {
    from_config(Preset::Dynamic, ModelConfig::new(layers), 0)
}

/// Rows whose tokens are tagged by batch row: row b of token t holds val(b, h, t, d).
fn prefill(cache: &mut Cache, layers: u32, batch: i64, tokens: i64) {
    let x = Host::tokens(batch, 2, 0, tokens, 4);
    for layer in 0..layers {
        cache.update(layer, &x.t(), &x.t()).unwrap();
    }
}

/// The batch row each stored row came from (read from the tags).
fn rows(cache: &Cache, layer: u32) -> Vec<i64> {
    let kv = cache.layer_view(layer).unwrap();
    (0..kv.key.shape()[0])
        .map(|b| kv.key.get::<f32>(&[b, 0, 0, 0]).unwrap() as i64 / 1_000_000)
        .collect()
}

#[test]
fn update_all_updates_every_layer_or_none() {
    let mut cache = dynamic(3);
    let mut views = ViewBuffer::with_layers(3);
    let xs: Vec<Host> = (0..3).map(|_| Host::tokens(1, 2, 0, 4, 4)).collect();
    let keys: Vec<TensorRef> = xs.iter().map(Host::t).collect();
    let kv = cache.update_all(&keys, &keys, &mut views).unwrap();
    assert_eq!(kv.len(), 3);
    assert!(kv.iter().all(|v| v.seq_len() == 4));
    for t in 4..8 {
        let x = Host::tokens(1, 2, t, 1, 4);
        let keys = [x.t(), x.t(), x.t()];
        let kv = cache.update_all(&keys, &keys, &mut views).unwrap();
        assert_eq!(positions(&kv[2].key, 0, 1), (0..=t).collect::<Vec<_>>());
    }
    // A bad tensor in the last layer: no layer changes.
    let before = snapshot(&cache);
    let good = Host::tokens(1, 2, 8, 1, 4);
    let bad = Host::tokens(1, 3, 8, 1, 4);
    let keys = [good.t(), good.t(), bad.t()];
    let err = cache.update_all(&keys, &keys, &mut views).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ShapeMismatch);
    assert_eq!(snapshot(&cache), before);
    // Fewer layers than the cache has: only those.
    let keys = [good.t()];
    cache.update_all(&keys, &keys, &mut views).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 9);
    assert_eq!(cache.seq_length(1).unwrap(), 8);
}

#[test]
fn crop_removes_and_keeps_tokens() {
    let mut cache = dynamic(2);
    prefill(&mut cache, 2, 1, 10);
    cache.crop(0).unwrap(); // no-op on full attention
    assert_eq!(cache.seq_length(1).unwrap(), 10);
    cache.crop(-3).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 7);
    assert_eq!(
        positions(&cache.layer_view(1).unwrap().key, 0, 0),
        (0..7).collect::<Vec<_>>()
    );
    cache.crop(4).unwrap(); // legacy absolute length
    assert_eq!(cache.seq_length(1).unwrap(), 4);
    cache.crop(-100).unwrap(); // more than there is: empties
    assert_eq!(cache.seq_length(0).unwrap(), 0);
    assert_eq!(cache.layer_view(0).unwrap().key.shape()[2], 0);
    // And the layer takes new tokens again.
    let x = Host::tokens(1, 2, 0, 1, 4);
    cache.update(0, &x.t(), &x.t()).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 1);
}

#[test]
fn past_recording_lets_sliding_layers_roll_back() {
    let mut cache = custom([LayerOptions::dynamic_sliding(4), LayerOptions::dynamic()]);
    cache.activate_past_recording().unwrap();
    let prompt = Host::tokens(1, 1, 0, 6, 2);
    cache.update(0, &prompt.t(), &prompt.t()).unwrap();
    cache.update(1, &prompt.t(), &prompt.t()).unwrap();
    // Speculative tokens 6, 7, 8; two are rejected.
    let draft = Host::tokens(1, 1, 6, 3, 2);
    let kv = cache.update(0, &draft.t(), &draft.t()).unwrap();
    assert_eq!(positions(&kv.key, 0, 0), [3, 4, 5, 6, 7, 8]);
    cache.update(1, &draft.t(), &draft.t()).unwrap();
    cache.crop(-2).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 7);
    assert_eq!(cache.seq_length(1).unwrap(), 7);
    assert_eq!(
        positions(&cache.layer_view(0).unwrap().key, 0, 0),
        [4, 5, 6]
    );
    let x = Host::tokens(1, 1, 7, 1, 2);
    let kv = cache.update(0, &x.t(), &x.t()).unwrap();
    assert_eq!(positions(&kv.key, 0, 0), [4, 5, 6, 7]);
    assert!(cache.layer_info(0).unwrap().records_past);
    // Positive crops are refused on a recording sliding layer past its window.
    assert_eq!(cache.crop(2).unwrap_err().code(), ErrorCode::InvalidState);
}

#[test]
fn reorder_moves_rows_for_beam_search() {
    let mut cache = dynamic(2);
    prefill(&mut cache, 2, 4, 3);
    cache.reorder(&[0, 0, 2, 2]).unwrap();
    assert_eq!(rows(&cache, 0), [0, 0, 2, 2]);
    assert_eq!(rows(&cache, 1), [0, 0, 2, 2]);
    cache.reorder(&[3, 2, 1, 0]).unwrap();
    assert_eq!(rows(&cache, 1), [2, 2, 0, 0]);
    // The token contents move with the rows.
    let kv = cache.layer_view(0).unwrap();
    assert_eq!(kv.value.get::<f32>(&[0, 1, 2, 3]).unwrap(), val(2, 1, 2, 3));
    // Fewer indices than rows: a new batch size.
    cache.reorder(&[1]).unwrap();
    assert_eq!(rows(&cache, 0), [2]);
    assert_eq!(cache.layer_info(0).unwrap().batch_size, 1);
}

#[test]
fn repeat_interleave_and_select_indices() {
    let mut cache = dynamic(1);
    prefill(&mut cache, 1, 2, 2);
    cache.batch_repeat_interleave(3).unwrap();
    assert_eq!(rows(&cache, 0), [0, 0, 0, 1, 1, 1]);
    cache.batch_select_indices(&[5, 0, 3]).unwrap();
    assert_eq!(rows(&cache, 0), [1, 0, 1]);
    assert_eq!(cache.seq_length(0).unwrap(), 2);
}

#[test]
fn batch_split_and_stack_round_trip() {
    let mut cache = dynamic(2);
    prefill(&mut cache, 2, 5, 3);
    let splits = cache.batch_split(5, 2).unwrap();
    assert_eq!(splits.len(), 3);
    assert_eq!(rows(&splits[0], 0), [0, 1]);
    assert_eq!(rows(&splits[1], 1), [2, 3]);
    assert_eq!(rows(&splits[2], 0), [4]);
    assert_eq!(splits[2].seq_length(1).unwrap(), 3);
    // Splits are independent deep copies.
    let mut first = splits[0].try_clone().unwrap();
    first.crop(-1).unwrap();
    assert_eq!(splits[0].seq_length(0).unwrap(), 3);
    let stacked = Cache::from_batch_splits(&splits).unwrap();
    assert_eq!(rows(&stacked, 1), [0, 1, 2, 3, 4]);
    assert_eq!(snapshot(&stacked), snapshot(&cache));
    // Borrowed handles work as well.
    let refs: Vec<&kvcache::CacheRef> = splits.iter().map(|s| &**s).collect();
    let again = Cache::from_batch_splits(&refs).unwrap();
    assert_eq!(rows(&again, 0), [0, 1, 2, 3, 4]);
    // Splits that disagree cannot be stacked.
    let err = Cache::from_batch_splits(&[&*splits[0], &*first]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(
        err.message().contains("kvc_cache_from_batch_splits"),
        "{err}"
    );
    // full_batch_size must be the batch size.
    let err = cache.batch_split(4, 2).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("kvc_cache_batch_split"));
    let err = cache.batch_split(5, 0).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    // A cache without an initialized layer has no batch to split.
    let empty = dynamic(1);
    assert_eq!(
        empty.batch_split(1, 1).unwrap_err().code(),
        ErrorCode::InvalidState
    );
    assert!(Cache::from_batch_splits::<Cache>(&[]).is_err());
}

#[test]
fn reserve_allocates_once_and_exactly() {
    let mut cache = dynamic(2);
    cache.reserve(64).unwrap();
    prefill(&mut cache, 2, 1, 4);
    let reserved = cache.memory().unwrap().bytes_reserved;
    assert_eq!(reserved, 2 * 2 * 64 * 2 * 4 * 4); // layers, K+V, tokens, heads, dim, f32
    let before = cache.layer_view(0).unwrap().key.data_ptr();
    for t in 4..64 {
        let x = Host::tokens(1, 2, t, 1, 4);
        cache.update(0, &x.t(), &x.t()).unwrap();
    }
    let view = cache.layer_view(0).unwrap();
    assert_eq!(view.key.data_ptr(), before); // never moved
    assert_eq!(cache.memory().unwrap().bytes_reserved, reserved);
    // Never shrinks; and must be in [0, 2^31).
    cache.reserve(1).unwrap();
    assert_eq!(cache.memory().unwrap().bytes_reserved, reserved);
    assert_eq!(
        cache.reserve(-1).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn reset_empties_every_layer() {
    let mut cache = custom([LayerOptions::dynamic(), LayerOptions::static_(4)]);
    prefill(&mut cache, 2, 1, 3);
    cache.reset().unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 0);
    assert_eq!(cache.seq_length(1).unwrap(), 0);
    // Dynamic layers stay initialized (empty); static buffers are zeroed.
    assert_eq!(cache.layer_view(0).unwrap().key.shape()[2], 0);
    let kv = cache.layer_view(1).unwrap();
    assert!(kv.key.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
    prefill(&mut cache, 2, 1, 2);
    assert_eq!(cache.seq_length(1).unwrap(), 2);
}

#[test]
fn clones_are_independent() {
    let mut cache = dynamic(2);
    prefill(&mut cache, 2, 2, 3);
    let mut copy = cache.try_clone().unwrap();
    assert_eq!(snapshot(&copy), snapshot(&cache));
    let x = Host::tokens(2, 2, 3, 1, 4);
    copy.update(0, &x.t(), &x.t()).unwrap();
    copy.reorder(&[1, 1]).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 3);
    assert_eq!(rows(&cache, 0), [0, 1]);
    assert_eq!(rows(&copy, 0), [1, 1]);
    drop(cache);
    assert_eq!(copy.seq_length(0).unwrap(), 4);
}

#[test]
fn views_outlive_nothing_but_can_be_copied_into_another_cache() {
    let mut a = dynamic(1);
    prefill(&mut a, 1, 1, 5);
    let mut b = Cache::new().unwrap();
    {
        let kv = a.layer_view(0).unwrap();
        b.update(0, &kv.key.as_input(), &kv.value.as_input())
            .unwrap();
    }
    a.crop(-5).unwrap();
    assert_eq!(
        positions(&b.layer_view(0).unwrap().key, 0, 1),
        [0, 1, 2, 3, 4]
    );
}

#[test]
fn raw_handles_round_trip() {
    let cache = dynamic(1);
    let raw = cache.into_raw();
    // SAFETY: `raw` came from into_raw and is used by nothing else.
    let cache = unsafe { Cache::from_raw(raw) };
    assert_eq!(cache.num_layers(), 1);
    assert_eq!(cache.as_ptr(), raw.cast_const());
    assert!(format!("{cache:?}").contains("num_layers"));
}
