package kvcache

// The library's own host memory (kvcache/allocator.h, kvc_host_memory_*):
// CPU caches and pools made without CacheOptions.Allocator or
// PoolOptions.Allocator keep their stores in it. A block of 1 MiB or more is
// mapped aligned to 2 MiB and advised as huge pages, and when its cache or
// pool is closed the library keeps it for the next block of about the same
// size (no smaller, at most a quarter larger): a restore, a load or a new
// cache of the same model then writes into memory that is already faulted in.
// A kept block goes back to the kernel after 10 seconds without reuse, when
// keeping it would pass the retention limit, and on ReleaseHostMemory. The
// limit is $KVC_HOST_MEMORY_RETAIN (bytes, read once) or the smaller of 1 GiB and an eighth of the
// machine's memory until SetHostMemoryRetention sets it.
//
// These functions are process-wide, not tied to a cache: they never fail and
// may be called from any goroutine at any time. GPU memory is not affected.
// Without cgo there is no library: they do nothing and return 0.

// SetHostMemoryRetention sets the most bytes kept aside for reuse and returns
// the previous limit (kvc_host_memory_set_retention). Blocks kept past the new
// limit are given back at once, the oldest first; 0 keeps nothing and gives
// back what is kept now.
func SetHostMemoryRetention(maxBytes uint64) uint64 { return cHostMemorySetRetention(maxBytes) }

// ReleaseHostMemory gives every kept block back to the kernel and returns the
// bytes given back (kvc_host_memory_release). The retention limit is
// unchanged.
func ReleaseHostMemory() uint64 { return cHostMemoryRelease() }

// HostMemoryRetained returns the bytes kept aside for reuse now
// (kvc_host_memory_retained); blocks idle past their time are given back
// first.
func HostMemoryRetained() uint64 { return cHostMemoryRetained() }
