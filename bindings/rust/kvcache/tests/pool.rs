//! The block pool from Rust: prefix reuse, copy-on-write, writes through the
//! slot mapping read back by gather, table and storage views, events whose
//! hashes are the block-hash chain, errors, and the view rules.

use kvcache::{
    BlockHash, DType, ErrorCode, Layout, Pool, PoolEvent, PoolGroup, PoolLayer, Sequence,
    SlotMapping, TensorRef, TensorView, bf16, block_hash_chain, block_hash_root,
};

const BLOCK: u32 = 4;
const HEADS: u32 = 2;
const DIM: u32 = 8;
const VDIM: u32 = 4;
const LAYERS: usize = 2;

fn pool_with(num_blocks: u32, seed: &[u8]) -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(BLOCK, num_blocks))
        .layers(std::iter::repeat_n(
            PoolLayer::attention(0, HEADS, DIM).value_head_dim(VDIM),
            LAYERS,
        ))
        .hash_seed(seed)
        .events(256)
        .build()
        .expect("a pool")
}

fn pool(num_blocks: u32) -> Pool {
    pool_with(num_blocks, b"test-model")
}

/// K and V of `n` tokens for every layer, distinct per layer, token and
/// element: `[n, heads, dim]` and `[n, heads, vdim]`, token-major.
struct Step {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    kshape: [i64; 3],
    vshape: [i64; 3],
}

impl Step {
    fn new(n: usize, start: f32) -> Step {
        let kn = n * (HEADS * DIM) as usize;
        let vn = n * (HEADS * VDIM) as usize;
        Step {
            keys: (0..LAYERS)
                .map(|l| (0..kn).map(|i| start + (l * 1000 + i) as f32).collect())
                .collect(),
            values: (0..LAYERS)
                .map(|l| (0..vn).map(|i| -start - (l * 1000 + i) as f32).collect())
                .collect(),
            kshape: [n as i64, i64::from(HEADS), i64::from(DIM)],
            vshape: [n as i64, i64::from(HEADS), i64::from(VDIM)],
        }
    }

    fn write(&self, pool: &Pool, slots: &[i64]) -> kvcache::Result<()> {
        let k: Vec<TensorRef<'_>> = self
            .keys
            .iter()
            .map(|d| TensorRef::new(d, &self.kshape).unwrap())
            .collect();
        let v: Vec<TensorRef<'_>> = self
            .values
            .iter()
            .map(|d| TensorRef::new(d, &self.vshape).unwrap())
            .collect();
        pool.write(&k, &v, slots)
    }

    /// Token-major `[n, heads, dim]` rows of one layer, appended to `other`'s.
    fn then(&self, other: &Step) -> Step {
        let n = (self.kshape[0] + other.kshape[0]) as usize;
        let cat = |a: &Vec<Vec<f32>>, b: &Vec<Vec<f32>>| -> Vec<Vec<f32>> {
            a.iter()
                .zip(b)
                .map(|(x, y)| x.iter().chain(y).copied().collect())
                .collect()
        };
        Step {
            keys: cat(&self.keys, &other.keys),
            values: cat(&self.values, &other.values),
            kshape: [n as i64, i64::from(HEADS), i64::from(DIM)],
            vshape: [n as i64, i64::from(HEADS), i64::from(VDIM)],
        }
    }
}

/// gather's `[1, heads, n, dim]` as write's token-major `[n, heads, dim]`.
fn token_major(x: &[f32], n: usize, dim: usize) -> Vec<f32> {
    let heads = HEADS as usize;
    let mut out = vec![0.0; x.len()];
    for h in 0..heads {
        for t in 0..n {
            for d in 0..dim {
                out[(t * heads + h) * dim + d] = x[(h * n + t) * dim + d];
            }
        }
    }
    out
}

fn assert_holds(seq: &Sequence, step: &Step) {
    let n = seq.len();
    for layer in 0..LAYERS {
        let (k, v) = seq.gather::<f32>(layer as u32).unwrap();
        assert_eq!(
            token_major(&k, n, DIM as usize),
            step.keys[layer],
            "keys of layer {layer}"
        );
        assert_eq!(
            token_major(&v, n, VDIM as usize),
            step.values[layer],
            "values of layer {layer}"
        );
    }
}

fn prefill(pool: &Pool, seq: &mut Sequence, tokens: &[i32], start: f32) -> (SlotMapping, Step) {
    let slots = seq.reserve(tokens).unwrap();
    let step = Step::new(tokens.len(), start);
    step.write(pool, &slots).unwrap();
    seq.commit().unwrap();
    (slots, step)
}

#[test]
fn write_through_the_slot_mapping_then_gather_equals_the_input() {
    let pool = pool(16);
    let mut seq = pool.sequence().unwrap();
    let tokens: Vec<i32> = (100..111).collect(); // two full blocks and a partial one
    let (slots, mut all) = prefill(&pool, &mut seq, &tokens, 0.0);
    assert_eq!((slots.num_groups(), slots.num_tokens()), (1, 11));
    assert_eq!(
        slots
            .group(0)
            .iter()
            .map(|s| s % i64::from(BLOCK))
            .collect::<Vec<_>>(),
        [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2]
    );
    assert_eq!((seq.len(), seq.committed()), (11, 11));
    assert_holds(&seq, &all);
    let mut decode = SlotMapping::default();
    for t in 0..5 {
        seq.reserve_into(&[200 + t], &mut decode).unwrap();
        let step = Step::new(1, 0.5 + t as f32);
        step.write(&pool, &decode).unwrap();
        seq.commit().unwrap();
        all = all.then(&step);
    }
    assert_holds(&seq, &all);
    // caller memory of the wrong size is refused before the library is called
    let mut short = vec![0.0f32; 3];
    let mut v = vec![0.0f32; 16 * (HEADS * VDIM) as usize];
    let err = seq.gather_into(0, &mut short, &mut v).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert_eq!(
        seq.gather::<f32>(2).unwrap_err().code(),
        ErrorCode::OutOfRange
    );
    assert_eq!(
        seq.gather::<bf16>(0).unwrap_err().code(),
        ErrorCode::DtypeMismatch
    );
}

#[test]
fn bf16_pools_round_trip_bytes() {
    let pool = Pool::builder(DType::BF16)
        .group(PoolGroup::full(BLOCK, 8))
        .layer(PoolLayer::attention(0, 1, 2))
        .build()
        .unwrap();
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[1, 2, 3]).unwrap();
    let data: Vec<bf16> = (0..6)
        .map(|i| bf16::from_f32(i as f32 * 0.5 - 1.0))
        .collect();
    let shape = [3, 1, 2];
    let t = TensorRef::new(&data, &shape).unwrap();
    pool.write(&[t], &[t], &slots).unwrap();
    let (k, v) = seq.gather::<bf16>(0).unwrap();
    assert_eq!(k, data); // one head: [1, 1, 3, 2] is the same order
    assert_eq!(v, data);
}

#[test]
fn a_prefix_shared_between_two_sequences_hits() {
    let pool = pool(16);
    let prompt: Vec<i32> = (1..14).collect(); // three full blocks
    let mut first = pool.sequence().unwrap();
    let (_, step) = prefill(&pool, &mut first, &prompt, 0.0);
    let before = pool.stats(0).unwrap();
    let mut second = pool.sequence().unwrap();
    assert_eq!(second.match_prefix(&prompt).unwrap(), 12);
    assert_eq!((second.len(), second.committed()), (12, 12));
    let after = pool.stats(0).unwrap();
    assert_eq!(after.prefix_hits - before.prefix_hits, 3);
    assert_eq!(after.used_blocks, before.used_blocks);
    {
        let table = pool.block_table(&[&first, &second], 0).unwrap();
        let rows = table.rows().unwrap();
        assert_eq!(rows[0][..3], rows[1][..3]);
        assert_eq!(rows[1][3], 0); // padding
    }
    let (k, _) = second.gather::<f32>(0).unwrap();
    assert_eq!(
        token_major(&k, 12, DIM as usize),
        step.keys[0][..12 * (HEADS * DIM) as usize]
    );
    let mut third = pool.sequence().unwrap();
    let other: Vec<i32> = prompt[..8].iter().copied().chain([99; 6]).collect();
    assert_eq!(third.match_prefix(&other).unwrap(), 8);
    // a different salt is another tenant: nothing is shared
    let mut tenant = pool.sequence_with_salt(b"tenant-b").unwrap();
    assert_eq!(tenant.match_prefix(&prompt).unwrap(), 0);
}

#[test]
fn fork_and_copy_on_write_keep_the_bytes() {
    let pool = pool(16);
    let mut parent = pool.sequence().unwrap();
    let (_, step) = prefill(&pool, &mut parent, &[0, 1, 2, 3, 4, 5], 0.0);
    let mut child = parent.fork().unwrap();
    let shared = pool
        .block_table(&[&parent, &child], 0)
        .unwrap()
        .rows()
        .unwrap();
    assert_eq!(shared[0], shared[1]);
    let partial = i64::from(shared[0][1]);
    let (slots, k1) = prefill(&pool, &mut child, &[42], 0.25);
    assert_ne!(
        slots[0] / i64::from(BLOCK),
        partial,
        "the shared partial block is copied first"
    );
    let (slots, k2) = prefill(&pool, &mut parent, &[43], 0.75);
    assert_eq!(
        slots[0] / i64::from(BLOCK),
        partial,
        "the parent holds the only reference now"
    );
    assert_holds(&child, &step.then(&k1));
    assert_holds(&parent, &step.then(&k2));
}

#[test]
fn table_views_padded_and_csr() {
    let pool = pool(16);
    let mut a = pool.sequence().unwrap();
    let mut b = pool.sequence().unwrap();
    let sa = a.reserve(&[0; 9]).unwrap(); // three blocks, the last holding one token
    let sb = b.reserve(&[0; 4]).unwrap(); // one full block
    let mut blocks_a: Vec<i32> = sa.iter().map(|s| (s / i64::from(BLOCK)) as i32).collect();
    blocks_a.dedup();
    let block_b = (sb[0] / i64::from(BLOCK)) as i32;
    {
        let table = pool.block_table(&[&a, &b], 0).unwrap();
        assert_eq!(table.table().shape(), &[2, 3]);
        assert_eq!(
            table.rows().unwrap(),
            [blocks_a.clone(), vec![block_b, 0, 0]]
        );
    }
    let csr = pool.block_table_csr(&[&a, &b], 0).unwrap();
    let (indptr, indices, last) = csr.to_vecs().unwrap();
    assert_eq!(indptr, [0, 3, 4]);
    assert_eq!(indices, [blocks_a, vec![block_b]].concat());
    assert_eq!(last, [1, 4]);
}

#[test]
fn layer_storage_in_both_layouts() {
    for layout in [Layout::Nhd, Layout::Hnd] {
        let pool = Pool::builder(DType::F32)
            .group(PoolGroup::full(BLOCK, 16))
            .layers(std::iter::repeat_n(
                PoolLayer::attention(0, HEADS, DIM).value_head_dim(VDIM),
                LAYERS,
            ))
            .layout(layout)
            .build()
            .unwrap();
        let mut seq = pool.sequence().unwrap();
        let (slots, step) = prefill(&pool, &mut seq, &[7; 6], 0.0);
        let nhd = pool.layer_storage(1, Layout::Nhd).unwrap();
        let hnd = pool.layer_storage(1, Layout::Hnd).unwrap();
        assert_eq!(
            nhd.keys().shape(),
            &[16, i64::from(BLOCK), i64::from(HEADS), i64::from(DIM)]
        );
        assert_eq!(
            hnd.keys().shape(),
            &[16, i64::from(HEADS), i64::from(BLOCK), i64::from(DIM)]
        );
        assert_eq!(nhd.values().shape()[3], i64::from(VDIM));
        assert_eq!(nhd.keys().data_ptr(), hnd.keys().data_ptr());
        assert_eq!(nhd.keys().is_contiguous(), layout == Layout::Nhd);
        for (i, &slot) in slots.iter().enumerate() {
            let (block, offset) = (slot / i64::from(BLOCK), slot % i64::from(BLOCK));
            for h in 0..i64::from(HEADS) {
                for d in 0..i64::from(DIM) {
                    let want =
                        step.keys[1][(i * HEADS as usize + h as usize) * DIM as usize + d as usize];
                    assert_eq!(nhd.keys().get::<f32>(&[block, offset, h, d]).unwrap(), want);
                    assert_eq!(hnd.keys().get::<f32>(&[block, h, offset, d]).unwrap(), want);
                }
            }
        }
    }
}

#[test]
fn views_block_the_calls_that_would_invalidate_them() {
    let pool = pool(16);
    let mut seq = pool.sequence().unwrap();
    seq.reserve(&[1, 2, 3]).unwrap();
    let table = pool.block_table(&[&seq], 0).unwrap();
    let err = seq.reserve(&[4]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    assert!(
        err.message().contains("kvc_pool_reserve") && err.message().contains("1 view"),
        "{err}"
    );
    assert_eq!(seq.len(), 3);
    // the next table of the same group and format would rewrite it; the other format is another buffer
    let err = pool.block_table(&[&seq], 0).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    assert!(err.message().contains("previous table of group 0"), "{err}");
    drop(pool.block_table_csr(&[&seq], 0).unwrap());
    assert_eq!(pool.events().unwrap_err().code(), ErrorCode::InvalidState);
    // the serving step: a write while the table is alive
    Step::new(1, 0.0).write(&pool, &[-1]).unwrap();
    // creating a sequence changes the pool too
    assert_eq!(pool.sequence().unwrap_err().code(), ErrorCode::InvalidState);
    drop(table);
    // a sequence dropped while a view lives is released when the view goes
    let mut other = pool.sequence().unwrap();
    other.reserve(&[9; 5]).unwrap();
    let storage = pool.layer_storage(0, Layout::Nhd).unwrap();
    assert_eq!(pool.stats(0).unwrap().used_blocks, 3);
    drop(other); // deferred: a view is alive
    assert_eq!(pool.stats(0).unwrap().used_blocks, 3);
    let err = Step::new(1, 0.0).write(&pool, &[-1]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState);
    assert!(err.message().contains("layer-storage"), "{err}");
    drop(storage);
    assert_eq!(pool.stats(0).unwrap().used_blocks, 1);
    Step::new(1, 0.0).write(&pool, &[-1]).unwrap();
}

#[test]
fn tables_of_several_groups_coexist() {
    let pool = Pool::builder(DType::F32)
        .group(PoolGroup::full(BLOCK, 16))
        .group(PoolGroup::sliding(2, 16, 4))
        .layer(PoolLayer::attention(0, HEADS, DIM))
        .layer(PoolLayer::attention(1, HEADS, DIM))
        .build()
        .unwrap();
    let mut seq = pool.sequence().unwrap();
    let slots = seq.reserve(&[0; 6]).unwrap();
    let blocks = |group: u32, size: i64| {
        let mut b: Vec<i32> = slots
            .group(group)
            .iter()
            .map(|s| (s / size) as i32)
            .collect();
        b.dedup();
        b
    };
    let full = pool.block_table(&[&seq], 0).unwrap();
    let sliding = pool.block_table(&[&seq], 1).unwrap();
    assert_eq!(full.rows().unwrap(), [blocks(0, i64::from(BLOCK))]);
    assert_eq!(sliding.rows().unwrap(), [blocks(1, 2)]);
    drop(full);
    // one is still alive: a reserve would invalidate it
    assert_eq!(
        seq.reserve(&[1]).unwrap_err().code(),
        ErrorCode::InvalidState
    );
    drop(sliding);
    seq.reserve(&[1]).unwrap();
}

#[test]
fn events_carry_the_block_hash_chain() {
    let (seed, salt) = (b"llama-3-8b".as_slice(), b"tenant-7".as_slice());
    let pool = pool_with(16, seed);
    let tokens = [5, 1, 70000, 3, 9, 2, 6, 4, 11, 12];
    {
        let mut seq = pool.sequence_with_salt(salt).unwrap();
        prefill(&pool, &mut seq, &tokens, 0.0);
    }
    let root = block_hash_root(seed, salt).unwrap();
    let chain = block_hash_chain(&root, &tokens, BLOCK).unwrap();
    assert_eq!(chain.len(), 2);
    let events = pool.events().unwrap();
    let expected: Vec<(u64, BlockHash, BlockHash)> =
        vec![(1, chain[0], root), (2, chain[1], chain[0])];
    let got: Vec<(u64, BlockHash, BlockHash)> = events
        .iter()
        .map(|e| match *e {
            PoolEvent::BlockStored {
                id,
                group: 0,
                block_hash,
                parent_hash,
                num_tokens: BLOCK,
                ..
            } => (id, block_hash, parent_hash),
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    assert_eq!(got, expected);
    assert!(pool.events().unwrap().is_empty());
    {
        let mut big = pool.sequence().unwrap();
        big.reserve(&[0; 15 * BLOCK as usize]).unwrap(); // evicts both cached blocks
    }
    let mut removed: Vec<BlockHash> = pool
        .events()
        .unwrap()
        .iter()
        .map(|e| match *e {
            PoolEvent::BlockRemoved { block_hash, .. } => block_hash,
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    removed.sort();
    let mut stored = chain.to_vec();
    stored.sort();
    assert_eq!(removed, stored);
    pool.clear_cache().unwrap();
    assert_eq!(pool.events().unwrap(), [PoolEvent::AllCleared { id: 5 }]);
}

fn temp_file(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "kvcache-rust-pool-{}-{tag}.kvc",
        std::process::id()
    ))
}

#[test]
fn a_saved_sequence_loads_into_a_fresh_pool_with_its_bytes_and_cached_prefix() {
    let (a, b) = (pool(16), pool(16));
    let tokens: Vec<i32> = (300..311).collect(); // two full blocks and a partial one
    let mut seq = a.sequence().unwrap();
    let (_, first) = prefill(&a, &mut seq, &tokens[..6], 0.0);
    let (_, rest) = prefill(&a, &mut seq, &tokens[6..], 0.25);
    let path = temp_file("round-trip");
    seq.save(&path).unwrap();
    let mut loaded = b.load_sequence(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!((loaded.len(), loaded.committed()), (11, 11));
    assert!(loaded.pool().same_pool(&b) && !loaded.pool().same_pool(&a));
    assert_holds(&loaded, &first.then(&rest));
    let mut request = b.sequence().unwrap(); // the committed full blocks are cached in the new pool
    assert_eq!(request.match_prefix(&tokens).unwrap(), 8);
    drop(request);
    // Both keep stepping alike.
    let (_, more) = prefill(&a, &mut seq, &[400, 401], 0.5);
    prefill(&b, &mut loaded, &[400, 401], 0.5);
    assert_eq!(loaded.len(), 13);
    assert_holds(&loaded, &first.then(&rest).then(&more));
    drop(loaded);
    assert_eq!(b.stats(0).unwrap().used_blocks, 0);
}

#[test]
fn a_pool_of_another_layout_or_without_room_refuses_a_sequence_file_unchanged() {
    let a = pool(16);
    let mut seq = a.sequence().unwrap();
    prefill(&a, &mut seq, &(0..11).collect::<Vec<i32>>(), 0.0);
    let path = temp_file("refused");
    seq.save(&path).unwrap();
    let wider = Pool::builder(DType::F32)
        .group(PoolGroup::full(2 * BLOCK, 16))
        .layers(std::iter::repeat_n(
            PoolLayer::attention(0, HEADS, DIM).value_head_dim(VDIM),
            LAYERS,
        ))
        .hash_seed(b"test-model")
        .build()
        .unwrap();
    let (small, other_seed) = (pool(3), pool_with(16, b"other-model"));
    let cases = [
        (
            &wider,
            ErrorCode::InvalidArgument,
            "group 0: block_size 4 (file) vs 8 (pool)",
        ),
        (&small, ErrorCode::OutOfMemory, "group 0"),
        (&other_seed, ErrorCode::InvalidArgument, "hash seed"),
    ];
    for (target, code, words) in cases {
        let before = target.stats(0).unwrap();
        let err = target.load_sequence(&path).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(err.message().contains(words), "{err}");
        assert_eq!(target.stats(0).unwrap(), before);
    }
    let mut data = std::fs::read(&path).unwrap();
    let middle = data.len() / 2;
    data[middle] ^= 0x40;
    std::fs::write(&path, &data).unwrap();
    let before = a.stats(0).unwrap();
    assert_eq!(a.load_sequence(&path).unwrap_err().code(), ErrorCode::Io);
    std::fs::remove_file(&path).unwrap();
    let err = a.load_sequence(&path).unwrap_err();
    assert!(
        err.code() == ErrorCode::Io && err.message().contains("cannot open"),
        "{err}"
    );
    assert_eq!(a.stats(0).unwrap(), before);
    assert_eq!((seq.len(), seq.committed()), (11, 11));
    let unwritable = std::env::temp_dir()
        .join("kvcache-no-such-dir")
        .join("seq.kvc");
    assert_eq!(seq.save(&unwritable).unwrap_err().code(), ErrorCode::Io);
}

#[test]
fn out_of_blocks_is_out_of_memory_and_changes_nothing() {
    let pool = pool(4); // three usable blocks
    let mut seq = pool.sequence().unwrap();
    seq.reserve(&[1, 2, 3, 4, 5]).unwrap();
    let before = pool.stats(0).unwrap();
    let err = seq.reserve(&[0; 10]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::OutOfMemory);
    assert!(
        err.message().contains("group 0 needs 2 more blocks"),
        "{err}"
    );
    assert_eq!(pool.stats(0).unwrap(), before);
    assert_eq!(seq.len(), 5);
    assert_eq!(pool.blocks_needed(&[&seq], &[10]).unwrap(), [2]);
    assert!(pool.stats(0).unwrap().available_blocks() < 2);
}

#[test]
fn bad_input_names_the_value_and_changes_nothing() {
    let pool = pool(16);
    let mut seq = pool.sequence().unwrap();
    seq.reserve(&[1, 2, 3]).unwrap();
    let err = seq.reserve(&[4, -5, 6]).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("tokens[1] is -5"), "{err}");
    assert_eq!(
        seq.reserve(&[]).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        seq.match_prefix(&[1, 2]).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(seq.truncate(4).unwrap_err().code(), ErrorCode::OutOfRange);
    assert_eq!((seq.len(), seq.committed()), (3, 0));
    let step = Step::new(1, 0.0);
    let err = step.write(&pool, &[10_000]).unwrap_err();
    assert!(err.message().contains("is 10000"), "{err}");
    let k: Vec<TensorRef<'_>> = step
        .keys
        .iter()
        .map(|d| TensorRef::new(d, &step.kshape).unwrap())
        .collect();
    let err = pool.write(&k[..1], &k[..1], &[-1]).unwrap_err();
    assert!(err.message().contains("2 layers"), "{err}");
    assert_eq!(
        pool.layer_storage(2, Layout::Nhd).unwrap_err().code(),
        ErrorCode::OutOfRange
    );
    assert_eq!(
        pool.block_table(&[&seq], 3).unwrap_err().code(),
        ErrorCode::OutOfRange
    );
    assert_eq!(pool.stats(1).unwrap_err().code(), ErrorCode::OutOfRange);
    let other = pool_with(8, b"another");
    let stranger = other.sequence().unwrap();
    let err = pool.block_table(&[&seq, &stranger], 0).unwrap_err();
    assert!(
        err.message()
            .contains("sequences[1] belongs to another pool"),
        "{err}"
    );
    let err = Pool::builder(DType::F32)
        .group(PoolGroup::full(0, 8))
        .layer(PoolLayer::attention(0, 1, 4))
        .build();
    let err = err.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("groups[0].block_size is 0"), "{err}");
}

#[test]
fn dropping_a_sequence_releases_its_blocks_and_pins_survive() {
    let pool = pool(8);
    let system: Vec<i32> = (0..8).collect();
    {
        let mut seq = pool.sequence().unwrap();
        prefill(&pool, &mut seq, &system, 0.0);
        seq.pin().unwrap();
        let child = seq.fork().unwrap();
        assert_eq!(pool.stats(0).unwrap().used_blocks, 2);
        drop(child);
    }
    let stats = pool.stats(0).unwrap();
    // pinned blocks are cached but not evictable: counted apart
    assert_eq!(
        (stats.used_blocks, stats.cached_blocks, stats.pinned_blocks),
        (0, 0, 2)
    );
    {
        let mut big = pool.sequence().unwrap();
        assert_eq!(
            big.reserve(&[0; 28]).unwrap_err().code(),
            ErrorCode::OutOfMemory
        );
    }
    let mut seq = pool.sequence().unwrap();
    assert_eq!(
        seq.match_prefix(&[system.as_slice(), &[1]].concat())
            .unwrap(),
        8
    );
    drop(seq);
    pool.unpin_all().unwrap();
    assert_eq!(pool.stats(0).unwrap().pinned_blocks, 0);
}

#[test]
fn recurrent_checkpoints_restore_the_state_of_a_matched_prefix() {
    let pool = Pool::builder(DType::F32)
        .group(PoolGroup::full(BLOCK, 16))
        .group(PoolGroup::recurrent(BLOCK, 8))
        .layer(PoolLayer::attention(0, HEADS, DIM))
        .layer(PoolLayer::recurrent(1, 5, 4, 2, 3, 6))
        .build()
        .unwrap();
    let prompt: Vec<i32> = (20..33).collect();
    let step = |seq: &mut Sequence, tokens: &[i32], fill: f32| {
        let slots = seq.reserve(tokens).unwrap();
        assert!(slots.group(1).iter().all(|&s| s == -1));
        let data = vec![fill; tokens.len() * (HEADS * DIM) as usize];
        let shape = [tokens.len() as i64, i64::from(HEADS), i64::from(DIM)];
        let t = TensorRef::new(&data, &shape).unwrap();
        pool.write(&[t, TensorRef::empty()], &[t, TensorRef::empty()], &slots)
            .unwrap();
        let mut state = seq.recurrent_state(1).unwrap();
        assert_eq!(state.conv().shape(), &[1, 5, 4]);
        assert_eq!(state.ssm().shape(), &[1, 2, 3, 6]);
        state.conv_mut::<f32>().unwrap().fill(fill);
        state.ssm_mut::<f32>().unwrap().fill(-fill);
        drop(state);
        seq.commit().unwrap();
    };
    {
        let mut seq = pool.sequence().unwrap();
        step(&mut seq, &prompt[..4], 1.0);
        step(&mut seq, &prompt[4..8], 2.0);
        step(&mut seq, &prompt[8..10], 3.0);
        assert_eq!(seq.truncate(6).unwrap_err().code(), ErrorCode::InvalidState);
    }
    let mut again = pool.sequence().unwrap();
    assert_eq!(again.match_prefix(&prompt).unwrap(), 8);
    let state = again.recurrent_state(1).unwrap();
    let all = |view: TensorView<'_>, want: f32| {
        let got = view.to_vec::<f32>().unwrap();
        assert!(got.iter().all(|&x| x == want), "{got:?} is not all {want}");
    };
    all(state.conv(), 2.0);
    all(state.ssm(), -2.0);
}
