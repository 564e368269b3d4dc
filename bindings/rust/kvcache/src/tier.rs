//! Tiers below a pool (`kvcache/tier.h`, docs/tiers.md): where blocks are
//! kept by their hash beyond memory.
//!
//! A [`DiskTier`] keeps blocks in a local directory (one file per block,
//! written to a temporary name and renamed; a restarted process finds them).
//! [`Pool::add_tier`] gives it to a pool, which then stores blocks in it
//! when they are committed ([`TierWrite::Commit`]: other processes and a
//! restarted one find them) or evicted from memory ([`TierWrite::Evict`]),
//! and whose [`Sequence::match_prefix`](crate::Sequence::match_prefix)
//! continues past the blocks found in memory with its tiers, nearest first.
//! A tier is a cache: its failures (I/O errors, corrupt values) are misses
//! or skipped stores, counted in [`TierStats`], never errors of the pool.
//!
//! ```
//! # fn main() -> kvcache::Result<()> {
//! use kvcache::{DType, DiskTier, Pool, PoolGroup, PoolLayer, TierWrite};
//! let dir = std::env::temp_dir().join(format!("kvcache-doc-tier-{}", std::process::id()));
//! let pool = Pool::builder(DType::F32)
//!     .group(PoolGroup::full(4, 8))
//!     .layer(PoolLayer::attention(0, 1, 8))
//!     .build()?;
//! pool.add_tier(DiskTier::new(&dir, 1 << 20)?, TierWrite::Commit)?;
//! assert_eq!(pool.tier_stats(0)?.puts, 0);
//! drop(pool);
//! std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```

use std::ffi::CString;
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{check, invalid_argument};
use crate::{Pool, Result, sys};

/// When a pool stores blocks in a tier (`kvc_tier_write_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TierWrite {
    /// When a block becomes cached: shared tiers; survives a restart.
    Commit,
    /// When a cached block is evicted from memory: capacity extension.
    Evict,
}

impl TierWrite {
    pub(crate) fn raw(self) -> sys::kvc_tier_write_policy {
        (match self {
            TierWrite::Commit => sys::KVC_TIER_WRITE_ON_COMMIT,
            TierWrite::Evict => sys::KVC_TIER_WRITE_ON_EVICT,
        }) as sys::kvc_tier_write_policy
    }
}

/// Counters of a tier (`kvc_tier_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TierStats {
    /// Values stored.
    pub puts: u64,
    /// Stores that failed or were refused (counted, never raised).
    pub put_failures: u64,
    /// Keys looked up.
    pub gets: u64,
    /// Of which were found and verified.
    pub hits: u64,
    /// Values found that did not verify (a miss): torn, flipped, or not
    /// authenticated by the tier's key.
    pub corrupt: u64,
    /// Bytes of the values stored.
    pub bytes_written: u64,
    /// Bytes of the values found.
    pub bytes_read: u64,
}

fn stats_of(tier: *const sys::kvc_tier) -> Result<TierStats> {
    let mut raw = sys::kvc_tier_stats {
        struct_size: std::mem::size_of::<sys::kvc_tier_stats>() as u32,
        ..Default::default()
    };
    // SAFETY: a live tier and an out-struct with struct_size set.
    check(unsafe { sys::kvc_tier_stats_get(tier, &mut raw) })?;
    Ok(TierStats {
        puts: raw.puts,
        put_failures: raw.put_failures,
        gets: raw.gets,
        hits: raw.hits,
        corrupt: raw.corrupt,
        bytes_written: raw.bytes_written,
        bytes_read: raw.bytes_read,
    })
}

/// A tier in a local directory (`kvc_disk_tier_create`), owned until
/// [`Pool::add_tier`] takes it; dropping it frees it.
#[derive(Debug)]
pub struct DiskTier {
    raw: NonNull<sys::kvc_tier>,
}

// SAFETY: a tier not given to a pool is used by whoever owns it, one thread at a time.
unsafe impl Send for DiskTier {}

impl DiskTier {
    /// A tier in `directory` (created if missing; several processes may
    /// share it) of at most `max_bytes` (the least recently used blocks go
    /// first; 0: no limit). Errors: InvalidArgument (an empty or non-UTF-8
    /// path, a NUL in it), `KVC_ERROR_IO` (the directory cannot be created or
    /// used).
    pub fn new(directory: impl AsRef<Path>, max_bytes: u64) -> Result<DiskTier> {
        DiskTier::create(directory.as_ref(), max_bytes, None)
    }

    /// [`DiskTier::new`] with an authentication key (16 to 256 random
    /// bytes, copied; docs/tiers.md, "Authenticated tiers"). Since 0.7.
    /// Without a key, whoever can write the directory can serve K/V to
    /// every pool reading it; with one, every block carries an HMAC-SHA256
    /// and blocks written without the key, or moved under another block's
    /// file, are misses (counted in [`TierStats::corrupt`]). Keyed and
    /// keyless tiers do not read each other's blocks. Errors: as `new`, and
    /// InvalidArgument for a key of another length.
    pub fn authenticated(
        directory: impl AsRef<Path>,
        max_bytes: u64,
        auth_key: &[u8],
    ) -> Result<DiskTier> {
        DiskTier::create(directory.as_ref(), max_bytes, Some(auth_key))
    }

    fn create(path: &Path, max_bytes: u64, auth_key: Option<&[u8]>) -> Result<DiskTier> {
        let text = path.to_str().ok_or_else(|| {
            invalid_argument(format!("DiskTier::new: directory {path:?} is not UTF-8"))
        })?;
        let c = CString::new(text).map_err(|_| {
            invalid_argument(format!(
                "DiskTier::new: directory {text:?} contains a NUL byte"
            ))
        })?;
        let options = sys::kvc_disk_tier_options {
            struct_size: std::mem::size_of::<sys::kvc_disk_tier_options>() as u32,
            directory: c.as_ptr(),
            max_bytes,
            reserved: 0,
            auth_key: auth_key.map_or(std::ptr::null(), <[u8]>::as_ptr),
            auth_key_len: auth_key.map_or(0, <[u8]>::len),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid options for the call; `raw` receives an owned tier.
        check(unsafe { sys::kvc_disk_tier_create(&options, &mut raw) })?;
        Ok(DiskTier {
            raw: NonNull::new(raw).expect("kvcache: kvc_disk_tier_create returned NULL"),
        })
    }

    /// The tier's counters.
    pub fn stats(&self) -> Result<TierStats> {
        stats_of(self.raw.as_ptr())
    }

    /// The raw handle, for calling `kvcache_sys` directly.
    pub fn as_ptr(&self) -> *mut sys::kvc_tier {
        self.raw.as_ptr()
    }
}

impl Drop for DiskTier {
    fn drop(&mut self) {
        // SAFETY: an owned tier, freed once.
        unsafe { sys::kvc_tier_destroy(self.raw.as_ptr()) };
    }
}

impl Pool {
    /// Gives `tier` to the pool (which frees it with itself), after the
    /// tiers added before: match_prefix asks them in that order. On error
    /// the tier is dropped.
    pub fn add_tier(&self, tier: DiskTier, write: TierWrite) -> Result<()> {
        let _held = self.lock();
        // SAFETY: a live pool and an owned tier; on success the pool owns it.
        check(unsafe { sys::kvc_pool_add_tier(self.as_ptr(), tier.as_ptr(), write.raw()) })?;
        std::mem::forget(tier);
        Ok(())
    }

    /// The counters of the pool's tier `index` (order of [`Pool::add_tier`]).
    /// Errors: OutOfRange past the last tier.
    pub fn tier_stats(&self, index: u32) -> Result<TierStats> {
        // The tier's counters are part of the pool (docs/threads.md).
        let _held = self.lock();
        // SAFETY: a live pool; the tier it returns is the pool's, read at once.
        let tier = unsafe { sys::kvc_pool_tier(self.as_ptr(), index) };
        if tier.is_null() {
            return Err(crate::Error::new(
                crate::ErrorCode::OutOfRange,
                format!(
                    "tier_stats: index is {index} but the pool has {} tiers",
                    self.tier_count_held()
                ),
            ));
        }
        stats_of(tier)
    }

    /// The pool's model fingerprint: the first part of every tier key.
    pub fn fingerprint(&self) -> Result<[u8; crate::BLOCK_HASH_SIZE]> {
        let mut out = [0u8; crate::BLOCK_HASH_SIZE];
        let _held = self.lock();
        // SAFETY: a live pool and a 32-byte buffer.
        check(unsafe { sys::kvc_pool_fingerprint(self.as_ptr(), out.as_mut_ptr()) })?;
        Ok(out)
    }
}
