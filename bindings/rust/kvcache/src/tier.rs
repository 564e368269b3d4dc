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
    /// Blocks the pool asked its tier worker to store here (since 0.7).
    pub queued: u64,
    /// Of those, never given to the store: the queue was full, or shutdown
    /// (since 0.7).
    pub dropped: u64,
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
        queued: raw.queued,
        dropped: raw.dropped,
    })
}

/// The key of one block in a tier (`kvc_tier_key`, docs/tiers.md): the
/// model's fingerprint ([`Pool::fingerprint`], or
/// [`PoolBuilder::fingerprint`](crate::PoolBuilder::fingerprint) without a
/// pool), the block's hash ([`block_hash_chain`](crate::block_hash_chain):
/// it covers the tokens, everything before them and the salt) and the
/// group. Since 0.7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TierKey {
    /// The model fingerprint.
    pub fingerprint: [u8; crate::BLOCK_HASH_SIZE],
    /// The block hash.
    pub block_hash: [u8; crate::BLOCK_HASH_SIZE],
    /// The block's group.
    pub group: u32,
}

impl TierKey {
    fn raw(&self) -> sys::kvc_tier_key {
        sys::kvc_tier_key {
            fingerprint: self.fingerprint,
            block_hash: self.block_hash,
            group: self.group,
            reserved: 0,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A tier this program holds ([`DiskTier`], [`RedisTier`](crate::RedisTier)):
/// given to a pool with [`Pool::add_tier`], or used by key without a pool
/// (`kvcache/tier.h`, "Key-level access"; docs/tiers.md, "Blocks by key").
/// The values are those a pool of the same model reads and writes,
/// checksummed or authenticated as the tier says. Everything the tier does
/// wrong (not stored, another size, a forged value, a dead or slow Redis
/// node, within its deadline) is a miss, never an error; errors are the
/// caller's (InvalidArgument naming the argument). Since 0.7.
pub trait Tier: sealed::Sealed {
    /// The raw handle, for calling `kvcache_sys` directly.
    fn as_ptr(&self) -> *mut sys::kvc_tier;

    /// Whether each key has a value in the tier, without fetching values
    /// (`kvc_tier_exists`: a stat per key on disk, one pipeline of EXISTS per
    /// Redis node). Existence only: a value that does not verify is a miss
    /// of [`get_blocks`](Self::get_blocks).
    fn exists(&mut self, keys: &[TierKey]) -> Result<Vec<bool>> {
        let raw = raw_keys(keys);
        let mut found = vec![0u8; keys.len()];
        // SAFETY: a live tier this program owns (&mut: one call at a time), `keys.len()` keys and answers.
        check(unsafe {
            sys::kvc_tier_exists(
                self.as_ptr(),
                raw.as_ptr(),
                raw.len(),
                found.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(answers(found))
    }

    /// Loads the blocks of `keys` into `buffers` (one per key, all of the
    /// payload's size) and says which were found and verified
    /// (`kvc_tier_get_blocks`); a miss's buffer may have been written.
    /// `num_layers` is the layer count the values were stored with.
    fn get_blocks(
        &mut self,
        keys: &[TierKey],
        buffers: &mut [&mut [u8]],
        num_layers: u32,
    ) -> Result<Vec<bool>> {
        let size = payload_size("get_blocks", keys.len(), buffers.iter().map(|b| b.len()))?;
        let raw = raw_keys(keys);
        let ptrs: Vec<*mut std::ffi::c_void> =
            buffers.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
        let mut found = vec![0u8; keys.len()];
        // SAFETY: a live tier this program owns; every buffer holds `size` writable bytes for the call.
        check(unsafe {
            sys::kvc_tier_get_blocks(
                self.as_ptr(),
                raw.as_ptr(),
                raw.len(),
                size,
                num_layers,
                ptrs.as_ptr(),
                found.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(answers(found))
    }

    // put_blocks mirrors get_blocks on purpose: the two C calls take the same
    // leading arguments.

    /// Stores `payloads` (one per key, all of one size) under `keys`, framed
    /// and sealed as the tier's values are (`kvc_tier_put_blocks`); returns
    /// how many the store took.
    fn put_blocks(
        &mut self,
        keys: &[TierKey],
        payloads: &[&[u8]],
        num_layers: u32,
    ) -> Result<usize> {
        let size = payload_size("put_blocks", keys.len(), payloads.iter().map(|b| b.len()))?;
        let raw = raw_keys(keys);
        let ptrs: Vec<*const std::ffi::c_void> =
            payloads.iter().map(|b| b.as_ptr().cast()).collect();
        let mut stored = 0usize;
        // SAFETY: a live tier this program owns; every payload holds `size` readable bytes for the call.
        check(unsafe {
            sys::kvc_tier_put_blocks(
                self.as_ptr(),
                raw.as_ptr(),
                raw.len(),
                size,
                num_layers,
                ptrs.as_ptr(),
                &mut stored,
            )
        })?;
        Ok(stored)
    }

    /// The tier's counters.
    fn stats(&self) -> Result<TierStats> {
        stats_of(self.as_ptr())
    }

    /// Gives up the handle (for [`Pool::add_tier`]).
    #[doc(hidden)]
    fn into_raw(self) -> NonNull<sys::kvc_tier>
    where
        Self: Sized;
}

fn raw_keys(keys: &[TierKey]) -> Vec<sys::kvc_tier_key> {
    keys.iter().map(TierKey::raw).collect()
}

/// The C call's 0/1 answers as booleans.
fn answers(found: Vec<u8>) -> Vec<bool> {
    found.into_iter().map(|f| f != 0).collect()
}

/// The one payload size of a call: every buffer's (the C call takes one size for all).
fn payload_size(
    what: &str,
    keys: usize,
    mut sizes: impl ExactSizeIterator<Item = usize>,
) -> Result<usize> {
    if sizes.len() != keys {
        return Err(invalid_argument(format!(
            "{what}: {} payload buffers for {keys} keys; give one per key",
            sizes.len()
        )));
    }
    let first = sizes.next().unwrap_or(0);
    for (i, n) in sizes.enumerate() {
        if n != first {
            return Err(invalid_argument(format!(
                "{what}: payloads[{}] is {n} bytes but payloads[0] is {first}; the blocks of one call have one size",
                i + 1
            )));
        }
    }
    Ok(first)
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

impl sealed::Sealed for DiskTier {}

impl Tier for DiskTier {
    fn as_ptr(&self) -> *mut sys::kvc_tier {
        self.raw.as_ptr()
    }

    fn into_raw(self) -> NonNull<sys::kvc_tier> {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

/// An owned tier handle of any kind (the Redis tier's, from `redis_tier.rs`).
#[derive(Debug)]
pub(crate) struct OwnedTier {
    pub(crate) raw: NonNull<sys::kvc_tier>,
}

// SAFETY: a tier not given to a pool is used by whoever owns it, one thread at a time.
unsafe impl Send for OwnedTier {}

impl Drop for OwnedTier {
    fn drop(&mut self) {
        // SAFETY: an owned tier, freed once.
        unsafe { sys::kvc_tier_destroy(self.raw.as_ptr()) };
    }
}

impl OwnedTier {
    pub(crate) fn release(self) -> NonNull<sys::kvc_tier> {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

pub(crate) use sealed::Sealed as TierSealed;

impl Drop for DiskTier {
    fn drop(&mut self) {
        // SAFETY: an owned tier, freed once.
        unsafe { sys::kvc_tier_destroy(self.raw.as_ptr()) };
    }
}

impl Pool {
    /// Gives `tier` (a [`DiskTier`] or, since 0.7, a
    /// [`RedisTier`](crate::RedisTier)) to the pool (which frees it with
    /// itself), after the tiers added before: match_prefix asks them in that
    /// order. On error the tier is dropped.
    pub fn add_tier(&self, tier: impl Tier, write: TierWrite) -> Result<()> {
        let _held = self.lock();
        let raw = OwnedTier {
            raw: tier.into_raw(),
        };
        // SAFETY: a live pool and an owned tier; on success the pool owns it.
        check(unsafe { sys::kvc_pool_add_tier(self.as_ptr(), raw.raw.as_ptr(), write.raw()) })?;
        raw.release();
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
