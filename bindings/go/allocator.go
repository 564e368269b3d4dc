package kvcache

import "unsafe"

// Allocator provides a pool's or a cache's K/V storage (kvc_allocator,
// kvcache/allocator.h): with PoolOptions.Allocator set, NewPool takes every
// layer's K and V buffer (all its blocks) from it once, and Close gives each
// back once, with the bytes and device it was asked for; with
// CacheOptions.Allocator set, a cache's layers take their stores from it as
// they are first written and grow, and give them back when they grow and
// when the last cache holding them is closed. The library zeroes what it takes.
//
// The memory must not be Go memory: the C library keeps the pointers for the
// pool's or cache's lifetime, which the cgo rules forbid for Go memory. Use C
// memory (CArena), or device memory of the pool's or cache's device. Alloc is
// asked for AllocatorAlignment-byte alignment and returns nil when it cannot
// serve the request (the call that needed it then fails with ErrOutOfMemory
// and keeps nothing). The methods are called from inside the pool's or
// cache's calls, on their goroutine, and must not call that pool or cache.
// Caches made from one another (Clone, BatchSplit, FromBatchSplits) share the
// allocator and may be used from different goroutines at once: it must then
// be safe for concurrent use (CArena is).
type Allocator interface {
	// Alloc returns bytes (> 0) aligned to align on device, ordered on
	// stream (a cudaStream_t as uintptr; 0 on the CPU), or nil.
	Alloc(bytes, align uintptr, device Device, stream uintptr) unsafe.Pointer
	// Free takes back a pointer Alloc returned. Work issued on stream
	// before may still read it: free stream-ordered, or synchronise first.
	Free(ptr unsafe.Pointer, bytes uintptr, device Device, stream uintptr)
}

// AllocatorAlignment is the alignment the library asks of every allocation
// (KVC_ALLOCATOR_ALIGNMENT).
const AllocatorAlignment = 256
