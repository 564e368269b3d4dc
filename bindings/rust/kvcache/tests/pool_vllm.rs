//! A pool in vLLM's hash mode and its events in vLLM's wire form from Rust
//! (docs/block-hash.md, 'vLLM's hash'; docs/pool.md, 'Events in vLLM's
//! form'): the block hashes against `vllm_hash_vectors.txt` (written by
//! vLLM's own functions), and `Pool::events_vllm`'s bytes for
//! `make_vllm_event_vectors.py`'s scenario against `vllm_event_vectors.txt`
//! (vLLM's encoder's bytes; the Python and Go tests compare with the same file).

use kvcache::{
    BlockHash, DType, ErrorCode, HashMode, Pool, PoolEvent, PoolGroup, PoolLayer, SequenceKeys,
    VllmBatchOptions,
};

mod common;
use common::{bytes, hash_list, item_hashes, items, rows, token_list};

const HASH_VECTORS: &str = include_str!("../../../../tests/pool/vllm_hash_vectors.txt");
const EVENT_VECTORS: &str = include_str!("../../../../tests/pool/vllm_event_vectors.txt");

fn vllm_pool(block_size: u32, usable: u32, seed: &[u8]) -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(block_size, usable + 1))
        .layers([PoolLayer::attention(0, 1, 2)])
        .hash_seed(seed)
        .events(4096)
        .hash_mode(HashMode::Vllm)
        .build()
        .expect("a pool")
}

fn append(seq: &mut kvcache::Sequence, tokens: &[i32]) {
    seq.reserve(tokens).expect("reserve");
    seq.commit().expect("commit");
}

#[test]
fn hash_vectors() {
    for f in rows(HASH_VECTORS, "vllm", 11, 15) {
        let (seed, salt, name, path) = (bytes(f[2]), bytes(f[3]), bytes(f[4]), bytes(f[5]));
        let ids = item_hashes(f[6]);
        let items = items(f[6], &ids);
        let bs: usize = f[7].parse().unwrap();
        let tokens = token_list(f[8]);
        let none_hash: BlockHash = bytes(f[9]).try_into().unwrap();
        let want = hash_list(f[10]);
        let p = vllm_pool(bs as u32, (tokens.len() / bs + 2) as u32, &seed);
        let keys = SequenceKeys {
            salt: &salt,
            adapter_key: &name,
            adapter_path: &path,
            mm_items: &items,
            ..Default::default()
        };
        let mut seq = p.sequence_with_keys(&keys).expect("sequence");
        if !tokens.is_empty() {
            append(&mut seq, &tokens);
        }
        let mut parent = none_hash;
        let mut got = Vec::new();
        for e in p.events().expect("events") {
            let PoolEvent::BlockStored {
                block_hash,
                parent_hash,
                ..
            } = e
            else {
                panic!("{}: {e:?}", f[1]);
            };
            assert_eq!(parent_hash, parent, "{}", f[1]);
            parent = block_hash;
            got.push(block_hash);
        }
        assert_eq!(got, want, "{}", f[1]);
    }
}

/// `make_vllm_event_vectors.py`'s scenario.
fn scenario(p: &Pool) {
    let mut a = p
        .sequence_with_keys(&SequenceKeys {
            adapter_key: b"sql-lora",
            adapter_path: b"/adapters/sql",
            adapter_id: 3,
            ..Default::default()
        })
        .expect("a");
    append(&mut a, &[1, 2, 3, 4, 5, 6]);
    append(&mut a, &[7, 8]);
    {
        let mut b = p.sequence().expect("b");
        append(&mut b, &(1..9).collect::<Vec<_>>());
    }
    let mut c = p.sequence().expect("c");
    append(&mut c, &(50..54).collect::<Vec<_>>());
    let mut d = p.sequence().expect("d");
    append(&mut d, &(60..64).collect::<Vec<_>>());
    drop(c);
    p.clear_cache().expect("clear");
    drop(a);
    drop(d);
}

#[test]
fn event_vectors() {
    for f in rows(EVENT_VECTORS, "batch", 6, 2) {
        let p = vllm_pool(4, 4, b"");
        scenario(&p);
        let rank: i64 = f[3].parse().unwrap();
        let options = VllmBatchOptions {
            ts: f[4].parse().unwrap(),
            int_hashes: f[2] == "1",
            data_parallel_rank: u32::try_from(rank).ok(),
        };
        assert_eq!(
            p.events_vllm(&options).expect("batch"),
            bytes(f[5]),
            "{}",
            f[1]
        );
        // Drained: [ts, [], rank or nil].
        assert_eq!(p.events_vllm(&options).expect("empty").len(), 12);
    }
}

#[test]
fn bad_keys_refused() {
    let p = vllm_pool(4, 4, b"");
    let Err(err) = p.sequence_with_keys(&SequenceKeys {
        adapter_key: b"\xff",
        ..Default::default()
    }) else {
        panic!("a non-UTF-8 adapter key was accepted");
    };
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("adapter_key is not UTF-8"), "{err}");
    let options = VllmBatchOptions {
        ts: f64::NAN,
        ..Default::default()
    };
    let err = p.events_vllm(&options).expect_err("refused");
    assert!(err.message().contains("ts is nan"), "{err}");
}
