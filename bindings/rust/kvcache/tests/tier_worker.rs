//! The pool's tier worker from Rust (Pool::start_tier_worker,
//! Sequence::prefetch, Prefetch::collect): stores are queued and counted
//! with their events, a prefetch collects the original bytes, a dropped one
//! is abandoned, and a second worker is refused.
mod common;

use common::{commit_tokens, per_layer};
use kvcache::{
    DType, DiskTier, ErrorCode, Pool, PoolEvent, PoolGroup, PoolLayer, TierOutcome,
    TierWorkerOptions, TierWrite,
};

fn pool() -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(4, 16))
        .layers(std::iter::repeat_n(PoolLayer::attention(0, 2, 8), 2))
        .hash_seed(b"tier-worker-test")
        .events(64)
        .build()
        .expect("a pool")
}

fn compute(pool: &Pool, seq: &mut kvcache::Sequence, tokens: &[i32]) {
    let data = per_layer(2, tokens.len() * 16, |l, i| (l * 1000 + i) as f32);
    commit_tokens(pool, seq, tokens, &data, 2, 8);
}

const PROMPT: [i32; 17] = [5, 9, 2, 7, 1, 8, 3, 3, 4, 6, 0, 11, 12, 13, 14, 15, 16];

#[test]
fn stores_are_queued_and_a_prefetch_collects_them() {
    let dir = std::env::temp_dir().join(format!("kvcache-rust-tier-worker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let first = pool();
    first
        .add_tier(DiskTier::new(&dir, 0).unwrap(), TierWrite::Commit)
        .unwrap();
    let options = TierWorkerOptions {
        events: true,
        ..TierWorkerOptions::default()
    };
    first.start_tier_worker(&options).unwrap();
    assert_eq!(
        first.start_tier_worker(&options).unwrap_err().code(),
        ErrorCode::InvalidState
    );
    let mut seq = first.sequence().unwrap();
    compute(&first, &mut seq, &PROMPT[..16]);
    let want = seq.gather::<f32>(1).unwrap();
    drop(seq);
    first.stop_tier_worker(10_000).unwrap();
    let st = first.tier_stats(0).unwrap();
    assert_eq!((st.queued, st.puts, st.dropped), (4, 4, 0));
    let stored = first
        .events()
        .unwrap()
        .iter()
        .filter(|e| {
            matches!(
                e,
                PoolEvent::Tier {
                    outcome: TierOutcome::Stored,
                    tier: 0,
                    ..
                }
            )
        })
        .count();
    assert_eq!(stored, 4);
    drop(first);

    let again = pool();
    again
        .add_tier(DiskTier::new(&dir, 0).unwrap(), TierWrite::Commit)
        .unwrap();
    again
        .start_tier_worker(&TierWorkerOptions::default())
        .unwrap();
    let mut seq = again.sequence().unwrap();
    let mut pf = seq.prefetch(&PROMPT).unwrap();
    assert_eq!(pf.collect(&mut seq, 10_000).unwrap(), 16);
    assert_eq!(seq.gather::<f32>(1).unwrap(), want);
    let mut other = again.sequence().unwrap();
    assert_eq!(
        pf.collect(&mut other, 0).unwrap_err().code(),
        ErrorCode::InvalidState
    );
    drop(pf);
    // Started and dropped without a collect: abandoned.
    let abandoned = other.prefetch(&PROMPT).unwrap();
    drop(abandoned);
    let ws = again.tier_worker_stats().unwrap();
    assert!(ws.running);
    assert_eq!(ws.prefetches, 2);
    drop(seq);
    drop(other);
    drop(again);
    std::fs::remove_dir_all(&dir).unwrap();
}
