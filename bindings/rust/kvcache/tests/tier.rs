//! Tiers below the pool from Rust (DiskTier, Pool::add_tier): a restart
//! matches from disk and gathers the original bytes, another fingerprint
//! never shares, eviction to disk and back, and bad input refused.
mod common;

use common::{commit_tokens, per_layer};
use kvcache::{DType, DiskTier, ErrorCode, Layout, Pool, PoolGroup, PoolLayer, TierWrite};

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

/// A 16-block pool whose tier, written on commit, is the disk tier in `dir`
/// (at most `max_bytes`; 0: no limit).
fn on_disk(layout: Layout, dir: &std::path::Path, max_bytes: u64) -> Pool {
    let p = pool(16, layout);
    p.add_tier(DiskTier::new(dir, max_bytes).unwrap(), TierWrite::Commit)
        .unwrap();
    p
}

/// Computes `tokens` (reserve, write distinct K/V per layer and token, commit).
fn compute(pool: &Pool, seq: &mut kvcache::Sequence, tokens: &[i32], start: f32) {
    let data = per_layer(2, tokens.len() * (HEADS * DIM) as usize, |l, i| {
        start + (l * 1000 + i) as f32
    });
    commit_tokens(pool, seq, tokens, &data, HEADS, DIM);
}

const PROMPT: [i32; 17] = [5, 9, 2, 7, 1, 8, 3, 3, 4, 6, 0, 11, 12, 13, 14, 15, 16];

#[test]
fn a_restart_matches_from_disk_with_the_original_bytes() {
    let dir = temp_dir("restart");
    let first = on_disk(Layout::Nhd, &dir, 1 << 20);
    let mut seq = first.sequence().unwrap();
    compute(&first, &mut seq, &PROMPT[..16], 0.0);
    let want = seq.gather::<f32>(1).unwrap();
    assert_eq!(first.tier_stats(0).unwrap().puts, 4);
    let fp = first.fingerprint().unwrap();
    drop(seq);
    drop(first);

    let again = on_disk(Layout::Nhd, &dir, 0);
    assert_eq!(again.fingerprint().unwrap(), fp);
    let mut seq = again.sequence().unwrap();
    assert_eq!(seq.match_prefix(&PROMPT).unwrap(), 16);
    assert_eq!(seq.gather::<f32>(1).unwrap(), want);
    let st = again.tier_stats(0).unwrap();
    assert_eq!((st.hits, st.corrupt), (4, 0));
    drop(seq);
    drop(again);

    let other = on_disk(Layout::Hnd, &dir, 0); // another fingerprint: never shares
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

const KEY_A: &[u8] = b"a disk tier key of 32 bytes, A..";
const KEY_B: &[u8] = b"a disk tier key of 32 bytes, B..";

/// A pool with a disk tier on `dir` (keyed when `key` is given).
fn pool_on(dir: &std::path::Path, key: Option<&[u8]>) -> Pool {
    let p = pool(16, Layout::Nhd);
    let tier = match key {
        Some(k) => DiskTier::authenticated(dir, 0, k).unwrap(),
        None => DiskTier::new(dir, 0).unwrap(),
    };
    p.add_tier(tier, TierWrite::Commit).unwrap();
    p
}

/// Layer 1's K and V as gathered.
type Gathered = (Vec<f32>, Vec<f32>);

/// Matches PROMPT in a new pool on `dir`: (tokens matched, hits, corrupt, layer 1's K/V when matched).
fn match_on(dir: &std::path::Path, key: Option<&[u8]>) -> (usize, u64, u64, Option<Gathered>) {
    let p = pool_on(dir, key);
    let mut seq = p.sequence().unwrap();
    let m = seq.match_prefix(&PROMPT).unwrap();
    let kv = (m > 0).then(|| seq.gather::<f32>(1).unwrap());
    drop(seq);
    let st = p.tier_stats(0).unwrap();
    (m, st.hits, st.corrupt, kv)
}

fn fill(dir: &std::path::Path, key: Option<&[u8]>) -> Gathered {
    let p = pool_on(dir, key);
    let mut seq = p.sequence().unwrap();
    compute(&p, &mut seq, &PROMPT[..16], 0.0);
    seq.gather::<f32>(1).unwrap()
}

#[test]
fn an_authenticated_tier_reads_its_own_key_only() {
    let (keyed, keyless) = (temp_dir("auth-keyed"), temp_dir("auth-keyless"));
    let want = fill(&keyed, Some(KEY_A));
    fill(&keyless, None);
    let (m, hits, corrupt, kv) = match_on(&keyed, Some(KEY_A));
    assert_eq!((m, hits, corrupt), (16, 4, 0));
    assert_eq!(kv.unwrap(), want);
    for (dir, key) in [
        (&keyed, Some(KEY_B)),
        (&keyed, None),
        (&keyless, Some(KEY_A)),
    ] {
        let (m, hits, corrupt, _) = match_on(dir, key);
        assert_eq!((m, hits, corrupt), (0, 0, 1), "{dir:?} {key:?}");
    }
    assert_eq!(match_on(&keyless, None).0, 16); // keyless tiers as before
    std::fs::remove_dir_all(&keyed).unwrap();
    std::fs::remove_dir_all(&keyless).unwrap();
}

/// The block files under `dir`, sorted.
fn block_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap() {
        let sub = sub.unwrap().path();
        if sub.is_dir() {
            for f in std::fs::read_dir(&sub).unwrap() {
                files.push(f.unwrap().path());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn an_authenticated_frame_moved_under_another_key_misses() {
    let dir = temp_dir("auth-moved");
    fill(&dir, Some(KEY_A));
    let files = block_files(&dir);
    assert_eq!(files.len(), 4);
    let data: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(data.iter().all(|d| d[4] == 2)); // frame version 2: authenticated
    for (i, f) in files.iter().enumerate() {
        // The next block's K/V and MAC under this block's header key.
        let mut forged = data[(i + 1) % 4].clone();
        forged[8..80].copy_from_slice(&data[i][8..80]);
        std::fs::write(f, forged).unwrap();
    }
    let (m, hits, corrupt, _) = match_on(&dir, Some(KEY_A));
    assert_eq!((m, hits, corrupt), (0, 0, 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_auth_keys_are_refused() {
    let dir = temp_dir("auth-bad");
    for (key, want) in [
        (
            &[7u8; 15][..],
            "auth_key_len is 15; an authentication key is 16 to 256 bytes",
        ),
        (&[7u8; 257][..], "auth_key_len is 257"),
        (&[][..], "auth_key_len is 0"),
    ] {
        let err = DiskTier::authenticated(&dir, 0, key).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        assert!(err.message().contains(want), "{}", err.message());
    }
    DiskTier::authenticated(&dir, 0, &[7u8; 16]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
