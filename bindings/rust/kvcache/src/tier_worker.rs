//! The pool's tier worker (`kvcache/tier.h`, "Tiers off the step", since
//! 0.7): stores into the tiers are queued and made by a thread of the pool,
//! so a commit never waits for a tier; a match's lookups can start early
//! ([`Sequence::prefetch`]) and be collected later ([`Prefetch::collect`]).
//!
//! ```
//! # fn main() -> kvcache::Result<()> {
//! use kvcache::{DType, Pool, PoolGroup, PoolLayer, TierWorkerOptions};
//! let pool = Pool::builder(DType::F32)
//!     .group(PoolGroup::full(4, 8))
//!     .layer(PoolLayer::attention(0, 1, 8))
//!     .build()?;
//! pool.start_tier_worker(&TierWorkerOptions::default())?;
//! assert!(pool.tier_worker_stats()?.running);
//! pool.stop_tier_worker(0)?;
//! # Ok(())
//! # }
//! ```

use std::ptr::NonNull;

use crate::error::check;
use crate::pool::Sequence;
use crate::{Pool, Result, sys};

/// Options of [`Pool::start_tier_worker`] (`kvc_tier_worker_options`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierWorkerOptions {
    /// Batches queued at most (a commit's stores of one group are one); 0 = 256.
    pub max_jobs: u32,
    /// Staged bytes queued at most; 0 = 256 MiB.
    pub max_bytes: u64,
    /// How long the queued stores may still run when the pool is dropped.
    pub drain_timeout_ms: u32,
    /// Queue [`PoolEvent::Tier`](crate::PoolEvent::Tier) events.
    pub events: bool,
}

impl Default for TierWorkerOptions {
    /// `KVC_TIER_WORKER_OPTIONS_INIT`.
    fn default() -> Self {
        TierWorkerOptions {
            max_jobs: 256,
            max_bytes: 256 << 20,
            drain_timeout_ms: 1000,
            events: false,
        }
    }
}

/// What the tier worker did since it started (`kvc_tier_worker_stats`; all 0
/// without a worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TierWorkerStats {
    /// A worker runs.
    pub running: bool,
    /// Batches queued or in flight now.
    pub pending_jobs: u64,
    /// Their staged bytes.
    pub pending_bytes: u64,
    /// Blocks whose stores were queued.
    pub blocks_queued: u64,
    /// Blocks not queued: the queue was full.
    pub blocks_dropped: u64,
    /// Queued blocks dropped at shutdown, past the drain timeout.
    pub blocks_abandoned: u64,
    /// Prefetches started.
    pub prefetches: u64,
    /// Collected before their lookups were done: nothing of them was used.
    pub prefetches_late: u64,
    /// Dropped without a collect.
    pub prefetches_abandoned: u64,
    /// Tier events beyond the event capacity since a pull.
    pub events_lost: u64,
}

impl Pool {
    /// Starts the pool's tier worker: from then on stores into its tiers are
    /// queued (bounded by `options`; beyond that they are dropped and
    /// counted in [`TierStats::dropped`](crate::TierStats::dropped)) and made
    /// by a thread of the pool. Errors: InvalidState (a worker runs already).
    pub fn start_tier_worker(&self, options: &TierWorkerOptions) -> Result<()> {
        let raw = sys::kvc_tier_worker_options {
            struct_size: std::mem::size_of::<sys::kvc_tier_worker_options>() as u32,
            max_jobs: options.max_jobs,
            max_bytes: options.max_bytes,
            drain_timeout_ms: options.drain_timeout_ms,
            events: u32::from(options.events),
        };
        let _held = self.lock();
        // SAFETY: a live pool and options borrowed for the call.
        check(unsafe { sys::kvc_pool_start_tier_worker(self.as_ptr(), &raw) })
    }

    /// Stops the tier worker: queued stores run for up to `drain_timeout_ms`,
    /// the rest are dropped. Without a worker it does nothing.
    pub fn stop_tier_worker(&self, drain_timeout_ms: u32) -> Result<()> {
        let _held = self.lock();
        // SAFETY: a live pool.
        check(unsafe { sys::kvc_pool_stop_tier_worker(self.as_ptr(), drain_timeout_ms) })
    }

    /// The running tier worker's counters.
    pub fn tier_worker_stats(&self) -> Result<TierWorkerStats> {
        let mut raw = sys::kvc_tier_worker_stats {
            struct_size: std::mem::size_of::<sys::kvc_tier_worker_stats>() as u32,
            ..Default::default()
        };
        let _held = self.lock();
        // SAFETY: a live pool and an out-struct with struct_size set.
        check(unsafe { sys::kvc_pool_tier_worker_stats(self.as_ptr(), &mut raw) })?;
        Ok(TierWorkerStats {
            running: raw.running != 0,
            pending_jobs: raw.pending_jobs,
            pending_bytes: raw.pending_bytes,
            blocks_queued: raw.blocks_queued,
            blocks_dropped: raw.blocks_dropped,
            blocks_abandoned: raw.blocks_abandoned,
            prefetches: raw.prefetches,
            prefetches_late: raw.prefetches_late,
            prefetches_abandoned: raw.prefetches_abandoned,
            events_lost: raw.events_lost,
        })
    }
}

/// A match's tier lookups started early ([`Sequence::prefetch`]). Dropped
/// without a [`collect`](Self::collect), its lookups are abandoned.
pub struct Prefetch {
    raw: NonNull<sys::kvc_pool_prefetch>,
    pool: Pool,
}

// As for Sequence (pool.rs), on purpose: each handle type states its own
// thread-safety argument next to it.
// SAFETY: every call on the handle holds its pool's lock (a prefetch is part
// of its pool, as a sequence is).
unsafe impl Send for Prefetch {}
// SAFETY: as above; no method takes `&self`.
unsafe impl Sync for Prefetch {}

impl Sequence {
    /// Starts the tier lookups [`match_prefix`](Self::match_prefix) of
    /// `tokens` would make, in the pool's tier worker; collect them later
    /// into this (still empty) sequence. Without a worker, collecting is
    /// `match_prefix`.
    pub fn prefetch(&mut self, tokens: &[i32]) -> Result<Prefetch> {
        let pool = self.pool().clone();
        let _held = pool.begin("kvc_pool_prefetch_start")?;
        let mut out = std::ptr::null_mut();
        // SAFETY: a live sequence; `tokens` is borrowed (copied) for the call.
        check(unsafe {
            sys::kvc_pool_prefetch_start(self.as_ptr(), tokens.as_ptr(), tokens.len(), &mut out)
        })?;
        let raw = NonNull::new(out).expect("kvc_pool_prefetch_start succeeded without a handle");
        drop(_held);
        Ok(Prefetch { raw, pool })
    }
}

impl Prefetch {
    /// Waits up to `timeout_ms` for the lookups, copies the blocks found into
    /// the pool and matches the prefix into `sequence` (empty) from memory
    /// alone; returns the tokens matched, as `match_prefix`. Errors:
    /// InvalidState (collected already).
    pub fn collect(&mut self, sequence: &mut Sequence, timeout_ms: u32) -> Result<usize> {
        let _held = self.pool.begin("kvc_pool_prefetch_collect")?;
        let mut matched = 0u64;
        // SAFETY: a live prefetch and sequence, both of a pool whose lock is held.
        check(unsafe {
            sys::kvc_pool_prefetch_collect(
                self.raw.as_ptr(),
                sequence.as_ptr(),
                timeout_ms,
                &mut matched,
            )
        })?;
        Ok(matched as usize)
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        let _held = self.pool.lock();
        // SAFETY: we own the prefetch; its pool is alive (we hold a handle) and locked.
        unsafe { sys::kvc_pool_prefetch_destroy(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetch").field("raw", &self.raw).finish()
    }
}
