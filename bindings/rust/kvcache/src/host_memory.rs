//! The library's own host memory, shared by the whole process (C header
//! `kvcache/allocator.h`, `kvc_host_memory_*`).
//!
//! CPU caches and pools that were built without an [`Allocator`](crate::Allocator)
//! keep their stores in memory of the library's. A block of 1 MiB or more is
//! mapped aligned to 2 MiB and advised as huge pages, and when its cache or
//! pool is dropped the library keeps it for the next block of about the same
//! size (no smaller, at most a quarter larger): a restore, a load or a new
//! cache of the same model then writes into memory that is already faulted
//! in. A kept block goes back to the kernel after 10 seconds without reuse,
//! when keeping it would pass the retention limit, and on [`release`]. The
//! limit is `$KVC_HOST_MEMORY_RETAIN` (bytes, read once) or the smaller of 1 GiB and an eighth of the
//! machine's memory until [`set_retention`] sets it.
//!
//! These functions are process-wide, not tied to a cache: they never fail and
//! may be called from any thread at any time. GPU memory is not affected.
//!
//! ```
//! // A long-lived process that wants memory back as soon as caches are dropped:
//! let previous = kvcache::host_memory::set_retention(0);
//! assert_eq!(kvcache::host_memory::retained(), 0);
//! kvcache::host_memory::set_retention(previous); // keep blocks for reuse again
//! ```

use kvcache_sys as sys;

/// Sets the most bytes kept aside for reuse and returns the previous limit
/// (`kvc_host_memory_set_retention`). Blocks kept past the new limit are given
/// back at once, the oldest first; `0` keeps nothing and gives back what is
/// kept now.
pub fn set_retention(max_bytes: u64) -> u64 {
    // SAFETY: takes a plain integer, never fails; thread-safe.
    unsafe { sys::kvc_host_memory_set_retention(max_bytes) }
}

/// Gives every kept block back to the kernel and returns the bytes given back
/// (`kvc_host_memory_release`). The retention limit is unchanged.
pub fn release() -> u64 {
    // SAFETY: no arguments, never fails; thread-safe.
    unsafe { sys::kvc_host_memory_release() }
}

/// The bytes kept aside for reuse now (`kvc_host_memory_retained`); blocks
/// idle past their time are given back first.
pub fn retained() -> u64 {
    // SAFETY: no arguments, never fails; thread-safe.
    unsafe { sys::kvc_host_memory_retained() }
}
