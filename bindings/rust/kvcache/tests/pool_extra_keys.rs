//! A pool sequence's extra keys (adapter key, multimodal items;
//! `docs/block-hash.md` version 2) from Rust: the pool's hashes against
//! `block_hash_v2_vectors.txt`, sharing only with equal keys, and bad keys
//! refused with the pool unchanged.

use kvcache::{
    BlockHash, DType, ErrorCode, MultimodalItem, POOL_BLOCK_HASH_VERSION, Pool, PoolEvent,
    PoolGroup, PoolLayer, SequenceKeys, block_hash, block_hash_root,
};

mod common;
use common::{bytes, hash_list, item_hashes, items, list, rows, token_list};

/// The vectors, compiled in: the test needs no path at run time.
const VECTORS: &str = include_str!("../../../../tests/pool/block_hash_v2_vectors.txt");
const BLOCK: u32 = 4;

fn pool(block_size: u32, num_blocks: u32, seed: &[u8]) -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(block_size, num_blocks))
        .layers([PoolLayer::attention(0, 1, 2)])
        .hash_seed(seed)
        .events(256)
        .build()
        .expect("a pool")
}

fn stored(pool: &Pool) -> Vec<BlockHash> {
    pool.events()
        .expect("events")
        .into_iter()
        .filter_map(|e| match e {
            PoolEvent::BlockStored { block_hash, .. } => Some(block_hash),
            _ => None,
        })
        .collect()
}

#[test]
fn v2_vectors() {
    for f in rows(VECTORS, "pool", 10, 9) {
        let (seed, salt, adapter) = (bytes(f[2]), bytes(f[3]), bytes(f[4]));
        let hashes = item_hashes(f[5]);
        let items = items(f[5], &hashes);
        let bs: usize = f[6].parse().unwrap();
        let tokens = token_list(f[7]);
        let extras: Vec<Vec<u8>> = list(f[8]).iter().map(|e| bytes(e)).collect();
        let want = hash_list(f[9]);
        assert_eq!(
            (want.len(), extras.len()),
            (tokens.len() / bs, tokens.len() / bs)
        );

        let p = pool(bs as u32, (tokens.len() / bs + 2) as u32, &seed);
        let keys = SequenceKeys {
            salt: &salt,
            adapter_key: &adapter,
            mm_items: &items,
            ..Default::default()
        };
        let mut seq = p.sequence_with_keys(&keys).expect("sequence");
        seq.reserve(&tokens).expect("reserve");
        seq.commit().expect("commit");
        assert_eq!(stored(&p), want, "{}", f[1]);
        // kvc_block_hash over EXTRAS gives the same chain.
        let mut parent = block_hash_root(&seed, &salt).expect("root");
        for (i, h) in want.iter().enumerate() {
            parent = block_hash(&parent, &tokens[i * bs..(i + 1) * bs], &extras[i]).expect("block");
            assert_eq!(&parent, h, "{} block {i}", f[1]);
        }
    }
}

fn fill(pool: &Pool, tokens: &[i32], keys: &SequenceKeys) {
    let mut seq = pool.sequence_with_keys(keys).expect("sequence");
    seq.reserve(tokens).expect("reserve");
    seq.commit().expect("commit");
}

fn matched(pool: &Pool, tokens: &[i32], keys: &SequenceKeys) -> usize {
    let mut seq = pool.sequence_with_keys(keys).expect("sequence");
    seq.match_prefix(tokens).expect("match")
}

#[test]
fn equal_tokens_share_only_with_equal_keys() {
    let p = pool(BLOCK, 64, b"m");
    let none = SequenceKeys::default();
    let item = |hash: &'static [u8], offset, length| {
        [MultimodalItem {
            hash,
            offset,
            length,
        }]
    };
    let (cat, dog) = (item(b"sha256:cat", 0, 8), item(b"sha256:dog", 0, 8));
    let with = |items| SequenceKeys {
        mm_items: items,
        ..Default::default()
    };
    let tokens: Vec<i32> = [32000; 8].into_iter().chain(0..24).collect(); // placeholders, then text
    fill(&p, &tokens, &with(&cat));
    assert_eq!(matched(&p, &tokens, &with(&dog)), 0);
    assert_eq!(matched(&p, &tokens, &none), 0);
    assert_eq!(
        matched(&p, &tokens, &with(&cat)),
        tokens.len() - BLOCK as usize
    );

    let adapter = |key| SequenceKeys {
        adapter_key: key,
        ..Default::default()
    };
    let text: Vec<i32> = (100..132).collect();
    fill(&p, &text, &adapter(b"lora:a"));
    assert_eq!(matched(&p, &text, &adapter(b"lora:b")), 0);
    assert_eq!(matched(&p, &text, &none), 0);
    assert_eq!(
        matched(&p, &text, &adapter(b"lora:a")),
        text.len() - BLOCK as usize
    );

    // An image at [9, 11): the two blocks before it are shared whatever the image.
    let text: Vec<i32> = (200..232).collect();
    let (cat, dog) = (item(b"sha256:cat", 9, 2), item(b"sha256:dog", 9, 2));
    fill(&p, &text, &with(&cat));
    assert_eq!(matched(&p, &text, &with(&dog)), 8);
    assert_eq!(POOL_BLOCK_HASH_VERSION, 2);
}

#[test]
fn bad_keys_name_the_value_and_change_nothing() {
    let p = pool(BLOCK, 16, b"m");
    fill(&p, &[1, 2, 3, 4, 5], &SequenceKeys::default());
    p.events().expect("events");
    let before = p.stats(0).expect("stats");
    let big = [7u8; 1025];
    let it = |hash, offset, length| MultimodalItem {
        hash,
        offset,
        length,
    };
    let cases: Vec<(Vec<MultimodalItem>, &[u8], &[&str])> = vec![
        (
            vec![it(b"a", 0, 4), it(b"b", 2, 4)],
            b"",
            &["mm_items[1].offset is 2", "must not overlap"],
        ),
        (
            vec![it(b"a", 8, 4), it(b"b", 0, 4)],
            b"",
            &["mm_items[1].offset is 0", "sorted by offset"],
        ),
        (vec![it(b"a", 0, 0)], b"", &["mm_items[0].length is 0"]),
        (
            vec![it(b"", 0, 1)],
            b"",
            &["mm_items[0].hash_len is 0", "1 to 1024 bytes"],
        ),
        (
            vec![it(b"a", 1 << 40, 1)],
            b"",
            &["covers tokens [1099511627776", "2^40"],
        ),
        (vec![], &big, &["adapter_key_len is 1025", "at most 1024"]),
    ];
    for (items, adapter_key, needles) in cases {
        let keys = SequenceKeys {
            mm_items: &items,
            adapter_key,
            ..Default::default()
        };
        let Err(err) = p.sequence_with_keys(&keys) else {
            panic!("{needles:?}: accepted")
        };
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        for n in needles {
            assert!(err.message().contains(n), "{:?} lacks {n}", err.message());
        }
        assert_eq!(p.stats(0).expect("stats"), before);
        assert!(p.events().expect("events").is_empty());
    }
}
