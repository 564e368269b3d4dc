//! The misuse sweep through the public Rust API: what the type system lets a
//! careless caller write. Views outliving a mutating call and objects used
//! after drop do not compile (the `compile_fail` examples of `TensorView`,
//! `KvView` and the pool module); what does compile is swept here: wrong
//! dtypes, ranks and shapes, lengths that disagree with the data, strides
//! that wrap or reach outside it, huge and negative counts, `u64` values past
//! `i64`, empty slices, pool calls while views are alive, paths with NUL
//! bytes. Each is an error naming the argument, never a panic or a crash,
//! and the object keeps working, unchanged.

mod common;

use common::{Host, custom, expect_err, snapshot};
use kvcache::{
    Cache, DType, DiskTier, ErrorCode, LayerOptions, Layout, Pool, PoolGroup, PoolLayer, Sequence,
    TensorRef, TierWrite, f16,
};

/// A 2-layer dynamic cache holding 3 tokens of batch 2, 2 heads, head_dim 4.
fn filled() -> Cache {
    let mut cache = custom([LayerOptions::dynamic(), LayerOptions::dynamic()]);
    let x = Host::tokens(2, 2, 0, 3, 4);
    for layer in 0..2 {
        cache.update(layer, &x.t(), &x.t()).unwrap();
    }
    cache
}

/// `op` fails with `code`, its message names every fragment, and the cache
/// is as before; then the cache still takes an update.
#[track_caller]
fn refused(
    cache: &mut Cache,
    code: ErrorCode,
    fragments: &[&str],
    op: impl FnOnce(&mut Cache) -> kvcache::Result<()>,
) {
    let before = snapshot(cache);
    let err = op(cache).expect_err("the call must fail");
    assert_eq!(err.code(), code, "{err}");
    for f in fragments {
        assert!(err.message().contains(f), "{err} does not name {f}");
    }
    assert_eq!(snapshot(cache), before, "a refused call changed the cache");
    let one = Host::tokens(2, 2, 100, 1, 4);
    let n = cache.seq_length(0).unwrap();
    cache.update(0, &one.t(), &one.t()).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), n + 1);
    cache.crop(-1).unwrap();
}

#[test]
fn tensors_that_disagree_with_their_data_are_refused_before_the_library() {
    let data = [0f32; 24];
    let cases: [(&[i64], &str); 6] = [
        (&[2, 2, 3, 3], "36 elements but data has 24"),
        (&[2, -2, 3, 4], "negative or overflowing"),
        (&[i64::MAX, 2, 1, 1], "negative or overflowing"),
        (&[1 << 40, 1 << 40, 1, 1], "negative or overflowing"),
        (&[1, 1, 1, 1, 1, 1, 1, 1, 1], "dimensions"),
        (&[i64::MIN, 1, 1, 1], "negative or overflowing"),
    ];
    for (shape, fragment) in cases {
        let err = TensorRef::new(&data, shape).expect_err("refused");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(
            err.message().contains(fragment),
            "{shape:?}: {err} lacks {fragment:?}"
        );
    }
    let strided: [(&[i64], &str); 5] = [
        (&[i64::MAX, 1, 1, 1], "reaches elements"),
        (&[1, 1, 1, -1], "reaches elements"), // backwards from element 0: before data
        (&[0, 0, 0, 8], "reaches elements"),  // element 3 * 8 = 24, one past data
        (&[1, 1, 1], "strides has 3 entries"),
        (
            &[i64::MIN, i64::MIN, i64::MIN, i64::MIN],
            "reaches elements",
        ),
    ];
    let shape = [2, 2, 2, 4];
    for (strides, fragment) in strided {
        let err = TensorRef::with_strides(&data, &shape, strides).expect_err("refused");
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
        assert!(
            err.message().contains(fragment),
            "{strides:?}: {err} lacks {fragment:?}"
        );
    }
    let bytes = [0u8; 17];
    let err = TensorRef::from_bytes(&bytes[1..], DType::F16, &[1, 1, 2, 4]).expect_err("refused");
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = TensorRef::from_bytes(&bytes, DType::F32, &[1, 1, 1, 4]).expect_err("refused");
    assert!(err.message().contains("bytes"), "{err}");
}

#[test]
fn wrong_dtypes_ranks_and_shapes_leave_the_cache_unchanged() {
    let mut cache = filled();
    let good = Host::tokens(2, 2, 0, 1, 4);
    let half: Vec<f16> = good.data.iter().map(|&x| f16::from_f32(x)).collect();
    let three = [2, 2, 4];
    let five = [1, 2, 2, 1, 4];
    let heads = [2, 4, 1, 2];
    let batch = [1, 2, 2, 4];
    let zero_dim = [2, 2, 2, 0];
    refused(&mut cache, ErrorCode::DtypeMismatch, &["key"], |c| {
        let k = TensorRef::new(&half, &good.shape).unwrap();
        c.update(0, &k, &good.t()).map(drop)
    });
    refused(&mut cache, ErrorCode::DtypeMismatch, &["value"], |c| {
        let v = TensorRef::new(&half, &good.shape).unwrap();
        c.update(0, &good.t(), &v).map(drop)
    });
    for (shape, fragment) in [
        (&three[..], "key.ndim"),
        (&five[..], "key.ndim"),
        (&heads[..], "key"),
        (&batch[..], "batch"),
    ] {
        refused(&mut cache, ErrorCode::ShapeMismatch, &[fragment], |c| {
            let k = TensorRef::new(&good.data[..shape.iter().product::<i64>() as usize], shape)
                .unwrap();
            c.update(0, &k, &k).map(drop)
        });
    }
    refused(&mut cache, ErrorCode::ShapeMismatch, &["head_dim"], |c| {
        let k = TensorRef::new::<f32>(&[], &zero_dim).unwrap();
        c.update(0, &k, &k).map(drop)
    });
    // Key and value of different lengths.
    let two = Host::tokens(2, 2, 0, 2, 4);
    refused(&mut cache, ErrorCode::ShapeMismatch, &["value"], |c| {
        c.update(0, &good.t(), &two.t()).map(drop)
    });
    // Zero new tokens change nothing.
    let before = snapshot(&cache);
    let empty_shape = [2, 2, 0, 4];
    let empty = TensorRef::new::<f32>(&[], &empty_shape).unwrap();
    cache.update(0, &empty, &empty).unwrap();
    assert_eq!(snapshot(&cache), before);
}

#[test]
fn huge_and_negative_counts() {
    let mut cache = filled();
    for layer in [2, u32::MAX] {
        refused(&mut cache, ErrorCode::OutOfRange, &["layer"], |c| {
            let x = Host::tokens(2, 2, 0, 1, 4);
            c.update(layer, &x.t(), &x.t()).map(drop)
        });
        refused(&mut cache, ErrorCode::OutOfRange, &["layer"], |c| {
            c.layer_view(layer).map(drop)
        });
    }
    for n in [i64::MAX, i64::MIN, 1 << 62, -1] {
        refused(&mut cache, ErrorCode::InvalidArgument, &["tokens"], |c| {
            c.reserve(n)
        });
        refused(
            &mut cache,
            ErrorCode::InvalidArgument,
            &["query_length"],
            |c| c.mask_sizes(n, 0).map(drop),
        );
        refused(&mut cache, ErrorCode::InvalidArgument, &["repeats"], |c| {
            c.batch_repeat_interleave(n)
        });
        refused(
            &mut cache,
            ErrorCode::InvalidArgument,
            &["full_batch_size"],
            |c| c.batch_split(n, 1).map(drop),
        );
    }
    for n in [0, -1, i64::MIN] {
        refused(
            &mut cache,
            ErrorCode::InvalidArgument,
            &["split_size"],
            |c| c.batch_split(2, n).map(drop),
        );
    }
    // A split past the batch is one cache of every row (its count must not overflow).
    assert_eq!(cache.batch_split(2, i64::MAX).unwrap().len(), 1);
    for idx in [&[2, 0][..], &[-1, 0], &[i64::MAX, 0], &[i64::MIN, 1]] {
        refused(&mut cache, ErrorCode::OutOfRange, &["beam_idx"], |c| {
            c.reorder(idx)
        });
        refused(&mut cache, ErrorCode::OutOfRange, &["indices"], |c| {
            c.batch_select_indices(idx)
        });
    }
    refused(&mut cache, ErrorCode::InvalidArgument, &["beam_idx"], |c| {
        c.reorder(&[])
    });
    refused(&mut cache, ErrorCode::InvalidArgument, &["indices"], |c| {
        c.batch_select_indices(&[])
    });
    // transformers' crop at the extremes: past the end keeps all, very negative drops all.
    cache.crop(i64::MAX).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 3);
    cache.crop(i64::MIN).unwrap();
    assert_eq!(cache.seq_length(0).unwrap(), 0);
}

fn pool() -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 8))
        .layers(std::iter::repeat_n(PoolLayer::attention(0, 2, 8), 2))
        .hash_seed(b"misuse")
        .build()
        .unwrap()
}

/// The observable state of a sequence and its pool.
fn state(pool: &Pool, seq: &Sequence) -> String {
    format!(
        "{} {} {:?}",
        seq.len(),
        seq.committed(),
        pool.stats(0).unwrap()
    )
}

#[test]
fn pool_calls_with_bad_arguments_change_nothing() {
    let pool = pool();
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[1]).unwrap();
    let k = vec![0f32; 16];
    let shape = [1, 2, 8];
    let kv = [
        TensorRef::new(&k, &shape).unwrap(),
        TensorRef::new(&k, &shape).unwrap(),
    ];
    let half = vec![f16::from_f32(0.0); 16];
    let hv = [
        TensorRef::new(&half, &shape).unwrap(),
        TensorRef::new(&half, &shape).unwrap(),
    ];
    let wrong_shape = [2, 2, 4];
    let wk = TensorRef::new(&k, &wrong_shape).unwrap();
    let before = state(&pool, &seq);
    let check = |r: kvcache::Result<()>, code: ErrorCode, fragment: &str| {
        let err = r.expect_err("the call must fail");
        assert_eq!(err.code(), code, "{err}");
        assert!(err.message().contains(fragment), "{err} lacks {fragment}");
    };
    check(
        pool.write(&kv[..1], &kv[..1], slots.group(0)),
        ErrorCode::InvalidArgument,
        "layers",
    );
    check(
        pool.write(&kv, &kv, &[i64::MAX]),
        ErrorCode::InvalidArgument,
        "slot_mapping[0]",
    );
    check(
        pool.write(&kv, &kv, &[i64::MIN]),
        ErrorCode::InvalidArgument,
        "slot_mapping[0]",
    );
    check(
        pool.write(&kv, &kv, &[-1, -1]),
        ErrorCode::ShapeMismatch,
        "keys[0]",
    );
    check(
        pool.write(&hv, &hv, slots.group(0)),
        ErrorCode::DtypeMismatch,
        "keys[0]",
    );
    check(
        pool.write(&[wk, wk], &kv, slots.group(0)),
        ErrorCode::ShapeMismatch,
        "keys[0]",
    );
    check(
        pool.stats(u32::MAX).map(drop),
        ErrorCode::OutOfRange,
        "group",
    );
    check(
        pool.layer_storage(u32::MAX, Layout::Nhd).map(drop),
        ErrorCode::OutOfRange,
        "layer",
    );
    check(
        pool.block_table(&[&seq], u32::MAX).map(drop),
        ErrorCode::OutOfRange,
        "group",
    );
    check(
        pool.tier_stats(u32::MAX).map(drop),
        ErrorCode::OutOfRange,
        "index",
    );
    check(
        pool.blocks_needed(&[&seq], &[usize::MAX]).map(drop),
        ErrorCode::InvalidArgument,
        "new_tokens[0]",
    );
    check(
        pool.blocks_needed(&[&seq], &[]).map(drop),
        ErrorCode::InvalidArgument,
        "new_tokens",
    );
    check(
        pool.load_sequence("/tmp/a\0b").map(drop),
        ErrorCode::InvalidArgument,
        "NUL",
    );
    check(seq.save("/tmp/a\0b"), ErrorCode::InvalidArgument, "NUL");
    check(
        seq.gather::<f32>(u32::MAX).map(drop),
        ErrorCode::OutOfRange,
        "layer",
    );
    check(seq.gather::<f16>(0).map(drop), ErrorCode::DtypeMismatch, "");
    let mut small = [0f32; 3];
    check(
        seq.gather_into(0, &mut small, &mut [0f32; 3]),
        ErrorCode::InvalidArgument,
        "keys",
    );
    check(
        seq.recurrent_state(0).map(drop),
        ErrorCode::InvalidArgument,
        "recurrent",
    );
    assert_eq!(state(&pool, &seq), before);
    let mut seq2 = pool.sequence().unwrap();
    for tokens in [&[-1][..], &[1, i32::MIN]] {
        check(
            seq2.reserve(tokens).map(drop),
            ErrorCode::InvalidArgument,
            "tokens[",
        );
        check(
            seq2.match_prefix(tokens).map(drop),
            ErrorCode::InvalidArgument,
            "tokens[",
        );
    }
    check(
        seq2.reserve(&vec![1; 10_000]).map(drop),
        ErrorCode::OutOfMemory,
        "group 0",
    );
    // Counts past i64: the library takes them as u64 and says what they are.
    for n in [usize::MAX, 1 << 63, 2] {
        check(seq.truncate(n), ErrorCode::OutOfRange, "num_tokens");
    }
    assert_eq!(state(&pool, &seq), before);
    pool.write(&kv, &kv, slots.group(0)).unwrap(); // still works
    seq.commit().unwrap();
    assert_eq!(seq.committed(), 1);
}

#[test]
fn pool_views_block_the_calls_that_would_invalidate_them() {
    let pool = pool();
    let mut seq = pool.sequence().unwrap();
    seq.reserve(&[1, 2, 3]).unwrap();
    {
        let table = pool.block_table(&[&seq], 0).unwrap();
        let before = state(&pool, &seq);
        let err = seq
            .reserve(&[4])
            .expect_err("refused while the table is alive");
        assert_eq!(err.code(), ErrorCode::InvalidState, "{err}");
        let err = pool.sequence().map(drop).expect_err("refused too");
        assert_eq!(err.code(), ErrorCode::InvalidState, "{err}");
        assert_eq!(state(&pool, &seq), before);
        assert_eq!(table.rows().unwrap()[0].len(), 1);
    }
    {
        let storage = pool.layer_storage(0, Layout::Nhd).unwrap();
        let k = vec![0f32; 16];
        let shape = [1, 2, 8];
        let kv = [
            TensorRef::new(&k, &shape).unwrap(),
            TensorRef::new(&k, &shape).unwrap(),
        ];
        let err = pool
            .write(&kv, &kv, &[4])
            .expect_err("refused while storage is alive");
        assert!(err.message().contains("layer-storage view"), "{err}");
        assert_eq!(storage.keys().shape(), &[8, 4, 2, 8]);
    }
    seq.reserve(&[4]).unwrap(); // every view dropped: the pool works on
    assert_eq!(seq.len(), 4);
}

#[test]
fn paths_and_tiers() {
    let mut cache = filled();
    let dir = std::env::temp_dir().join(format!("kvc-misuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("a");
    let bad = format!("{}\0b", cut.display());
    refused(&mut cache, ErrorCode::InvalidArgument, &["NUL"], |c| {
        c.save(&bad)
    });
    refused(&mut cache, ErrorCode::InvalidArgument, &["NUL"], |c| {
        c.restore(&bad)
    });
    expect_err(Cache::load(&bad), ErrorCode::InvalidArgument, "NUL");
    expect_err(DiskTier::new(&bad, 0), ErrorCode::InvalidArgument, "NUL");
    assert!(!cut.exists(), "something was made under the cut name");
    expect_err(
        DiskTier::new("", 0),
        ErrorCode::InvalidArgument,
        "directory",
    );
    let file = dir.join("file");
    std::fs::write(&file, b"x").unwrap();
    expect_err(DiskTier::new(&file, 0), ErrorCode::Io, "directory");
    let pool = pool();
    let tier = DiskTier::new(dir.join("t"), u64::MAX).unwrap(); // no limit worth the name: fine
    pool.add_tier(tier, TierWrite::Commit).unwrap();
    expect_err(pool.tier_stats(1), ErrorCode::OutOfRange, "1");
    pool.tier_stats(0).unwrap();
    drop(pool);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[should_panic(expected = "group 4294967295 is out of range for 1 groups")]
fn a_slot_mapping_group_out_of_range_panics_naming_it() {
    let pool = pool();
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[1, 2]).unwrap();
    assert_eq!(slots.group(0).len(), 2);
    let _ = slots.group(u32::MAX); // indexing past the groups: a panic, as slices do, not an overflow
}
