//! Blocks by key from Rust (Tier::exists, get_blocks, put_blocks;
//! PoolBuilder::fingerprint and block_payload): round trips on a disk tier,
//! a pool's blocks read by key and blocks put by key matched by a pool (the
//! keys from the builder and the router's hash chain), misses for another
//! size, and bad arguments refused with nothing stored. The Redis tier's are
//! in redis_tier.rs (they need its server).
mod common;

use common::{commit_tokens, per_layer};
use kvcache::{
    DType, DiskTier, ErrorCode, Pool, PoolBuilder, PoolGroup, PoolLayer, Tier, TierKey, TierWrite,
    block_hash_chain, block_hash_root,
};

const BLOCK: u32 = 4;
const HEADS: u32 = 2;
const DIM: u32 = 8;
const SEED: &[u8] = b"keys-test";

fn builder() -> PoolBuilder {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(BLOCK, 16))
        .layers(std::iter::repeat_n(PoolLayer::attention(0, HEADS, DIM), 2))
        .hash_seed(SEED)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kvcache-rust-keys-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn key(i: u8) -> TierKey {
    TierKey {
        fingerprint: [7; 32],
        block_hash: [i; 32],
        group: u32::from(i % 2),
    }
}

#[test]
fn the_builders_fingerprint_is_the_pools() {
    let fp = builder().fingerprint().unwrap();
    let pool = builder().build().unwrap();
    assert_eq!(pool.fingerprint().unwrap(), fp);
    assert_ne!(builder().hash_seed(b"other").fingerprint().unwrap(), fp);
    let (size, layers) = builder().block_payload(0).unwrap();
    assert_eq!(
        (size, layers),
        ((2 * 2 * BLOCK * HEADS * DIM * 4) as usize, 2)
    );
    let e = builder().block_payload(1).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.message().contains("group is 1"), "{}", e.message());
}

#[test]
fn round_trip_on_disk() {
    let dir = temp_dir("round");
    let mut tier = DiskTier::new(&dir, 0).unwrap();
    let keys: Vec<TierKey> = (0..4).map(key).collect();
    let payloads: Vec<Vec<u8>> = (0..4u8)
        .map(|i| (0..200u32).map(|j| (j as u8) ^ i).collect())
        .collect();
    assert_eq!(tier.exists(&keys).unwrap(), vec![false; 4]);
    assert_eq!(
        tier.put_blocks(&[keys[1], keys[2]], &[&payloads[1], &payloads[2]], 3)
            .unwrap(),
        2
    );
    assert_eq!(tier.exists(&keys).unwrap(), vec![false, true, true, false]);
    let mut bufs = vec![vec![0u8; 200]; 4];
    let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    assert_eq!(
        tier.get_blocks(&keys, &mut views, 3).unwrap(),
        vec![false, true, true, false]
    );
    assert_eq!(bufs[1], payloads[1]);
    assert_eq!(bufs[2], payloads[2]);
    let mut short = vec![0u8; 199];
    assert_eq!(
        tier.get_blocks(&keys[1..2], &mut [short.as_mut_slice()], 3)
            .unwrap(),
        vec![false]
    );
    let stats = Tier::stats(&tier).unwrap();
    assert_eq!((stats.puts, stats.hits, stats.corrupt), (2, 2, 1));
    drop(tier);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pool_and_a_key_reader_share_blocks() {
    let (a, b) = (temp_dir("pool-a"), temp_dir("pool-b"));
    let tokens: Vec<i32> = (100..113).collect(); // three full blocks and one token
    let fp = builder().fingerprint().unwrap();
    let (size, layers) = builder().block_payload(0).unwrap();
    let root = block_hash_root(SEED, b"").unwrap();
    let keys: Vec<TierKey> = block_hash_chain(&root, &tokens, BLOCK)
        .unwrap()
        .into_iter()
        .map(|h| TierKey {
            fingerprint: fp,
            block_hash: h,
            group: 0,
        })
        .collect();
    {
        let pool = builder().build().unwrap();
        pool.add_tier(DiskTier::new(&a, 0).unwrap(), TierWrite::Commit)
            .unwrap();
        let mut seq = pool.sequence().unwrap();
        let data = per_layer(2, tokens.len() * (HEADS * DIM) as usize, |_, i| i as f32);
        commit_tokens(&pool, &mut seq, &tokens, &data, HEADS, DIM);
    }
    let mut reader = DiskTier::new(&a, 0).unwrap();
    assert_eq!(reader.exists(&keys).unwrap(), vec![true; 3]);
    let mut bufs = vec![vec![0u8; size]; 3];
    let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|v| v.as_mut_slice()).collect();
    assert_eq!(
        reader.get_blocks(&keys, &mut views, layers).unwrap(),
        vec![true; 3]
    );
    // NHD: block 1 of layer 0 starts with K of token 4, head 0, dim 0.
    assert_eq!(
        f32::from_ne_bytes(bufs[1][..4].try_into().unwrap()),
        (4 * HEADS * DIM) as f32
    );
    let mut writer = DiskTier::new(&b, 0).unwrap();
    let payloads: Vec<&[u8]> = bufs.iter().map(|v| v.as_slice()).collect();
    assert_eq!(writer.put_blocks(&keys, &payloads, layers).unwrap(), 3);
    let pool = builder().build().unwrap();
    pool.add_tier(DiskTier::new(&b, 0).unwrap(), TierWrite::Commit)
        .unwrap();
    let mut seq = pool.sequence().unwrap();
    assert_eq!(seq.match_prefix(&tokens).unwrap(), 12);
    drop((seq, pool, reader, writer));
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn bad_arguments_are_refused_and_nothing_is_stored() {
    let dir = temp_dir("bad");
    let mut tier = DiskTier::new(&dir, 0).unwrap();
    let keys = [key(1), key(2)];
    let e = tier.put_blocks(&keys, &[b"abcd", b"abc"], 1).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(
        e.message().contains("payloads[1] is 3 bytes"),
        "{}",
        e.message()
    );
    let e = tier.put_blocks(&keys[..1], &[b"abcd"], 0).unwrap_err();
    assert!(e.message().contains("num_layers is 0"), "{}", e.message());
    let e = tier.put_blocks(&keys[..1], &[b""], 1).unwrap_err();
    assert!(e.message().contains("payload_size is 0"), "{}", e.message());
    let mut one = [0u8; 4];
    let e = tier
        .get_blocks(&keys, &mut [one.as_mut_slice()], 1)
        .unwrap_err();
    assert!(
        e.message().contains("1 payload buffers for 2 keys"),
        "{}",
        e.message()
    );
    assert_eq!(tier.exists(&[]).unwrap(), Vec::<bool>::new());
    let stats = Tier::stats(&tier).unwrap();
    assert_eq!((stats.puts, stats.put_failures, stats.gets), (0, 0, 0));
    drop(tier);
    let _ = std::fs::remove_dir_all(&dir);
}
