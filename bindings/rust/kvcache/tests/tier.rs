//! Tiers below the pool from Rust (DiskTier, Pool::add_tier): a restart
//! matches from disk and gathers the original bytes, another fingerprint
//! never shares, eviction to disk and back, and bad input refused.
use kvcache::{
    DType, DiskTier, ErrorCode, Layout, Pool, PoolGroup, PoolLayer, TensorRef, TierWrite,
};

const BLOCK: u32 = 4;
const HEADS: u32 = 2;
const DIM: u32 = 8;

fn pool(num_blocks: u32, layout: Layout) -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(BLOCK, num_blocks))
        .layers(std::iter::repeat_n(PoolLayer::attention(0, HEADS, DIM), 2))
        .hash_seed(b"tier-test")
        .layout(layout)
        .build()
        .expect("a pool")
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kvcache-rust-tier-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Computes `tokens` (reserve, write distinct K/V per layer and token, commit).
fn compute(pool: &Pool, seq: &mut kvcache::Sequence<'_>, tokens: &[i32], start: f32) {
    let n = tokens.len();
    let slots = seq.reserve(tokens).unwrap();
    let data: Vec<Vec<f32>> = (0..2)
        .map(|l| {
            (0..n * (HEADS * DIM) as usize)
                .map(|i| start + (l * 1000 + i) as f32)
                .collect()
        })
        .collect();
    let shape = [n as i64, i64::from(HEADS), i64::from(DIM)];
    let k: Vec<TensorRef<'_>> = data
        .iter()
        .map(|d| TensorRef::new(d, &shape).unwrap())
        .collect();
    pool.write(&k, &k, &slots).unwrap();
    seq.commit().unwrap();
}

const PROMPT: [i32; 17] = [5, 9, 2, 7, 1, 8, 3, 3, 4, 6, 0, 11, 12, 13, 14, 15, 16];

#[test]
fn a_restart_matches_from_disk_with_the_original_bytes() {
    let dir = temp_dir("restart");
    let first = pool(16, Layout::Nhd);
    first
        .add_tier(DiskTier::new(&dir, 1 << 20).unwrap(), TierWrite::Commit)
        .unwrap();
    let mut seq = first.sequence().unwrap();
    compute(&first, &mut seq, &PROMPT[..16], 0.0);
    let want = seq.gather::<f32>(1).unwrap();
    assert_eq!(first.tier_stats(0).unwrap().puts, 4);
    let fp = first.fingerprint().unwrap();
    drop(seq);
    drop(first);

    let again = pool(16, Layout::Nhd);
    again
        .add_tier(DiskTier::new(&dir, 0).unwrap(), TierWrite::Commit)
        .unwrap();
    assert_eq!(again.fingerprint().unwrap(), fp);
    let mut seq = again.sequence().unwrap();
    assert_eq!(seq.match_prefix(&PROMPT).unwrap(), 16);
    assert_eq!(seq.gather::<f32>(1).unwrap(), want);
    let st = again.tier_stats(0).unwrap();
    assert_eq!((st.hits, st.corrupt), (4, 0));
    drop(seq);
    drop(again);

    let other = pool(16, Layout::Hnd); // another fingerprint: never shares
    other
        .add_tier(DiskTier::new(&dir, 0).unwrap(), TierWrite::Commit)
        .unwrap();
    assert_ne!(other.fingerprint().unwrap(), fp);
    let mut seq = other.sequence().unwrap();
    assert_eq!(seq.match_prefix(&PROMPT).unwrap(), 0);
    drop(seq);
    drop(other);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn evicted_blocks_come_back_from_disk() {
    let dir = temp_dir("evict");
    let p = pool(5, Layout::Hnd);
    let tier = DiskTier::new(&dir, 0).unwrap();
    assert_eq!(tier.stats().unwrap().puts, 0);
    p.add_tier(tier, TierWrite::Evict).unwrap();
    let mut a = p.sequence().unwrap();
    compute(&p, &mut a, &PROMPT[..16], 0.0);
    let want = a.gather::<f32>(0).unwrap();
    drop(a);
    let mut b = p.sequence().unwrap();
    let other: Vec<i32> = (100..116).collect();
    compute(&p, &mut b, &other, 7.0);
    drop(b);
    assert_eq!(p.tier_stats(0).unwrap().puts, 4);
    let mut c = p.sequence().unwrap();
    assert_eq!(c.match_prefix(&PROMPT).unwrap(), 16);
    assert_eq!(c.gather::<f32>(0).unwrap(), want);
    drop(c);
    drop(p);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_refused() {
    assert_eq!(
        DiskTier::new("", 0).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    let dir = temp_dir("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = DiskTier::new(&file, 0).unwrap_err();
    assert!(
        err.message().contains("cannot be created or used"),
        "{}",
        err.message()
    );
    let p = pool(8, Layout::Nhd);
    assert_eq!(p.tier_stats(0).unwrap_err().code(), ErrorCode::OutOfRange);
    p.add_tier(DiskTier::new(&dir, 0).unwrap(), TierWrite::Commit)
        .unwrap();
    assert_eq!(p.tier_stats(1).unwrap_err().code(), ErrorCode::OutOfRange);
    drop(p);
    std::fs::remove_dir_all(&dir).unwrap();
}
