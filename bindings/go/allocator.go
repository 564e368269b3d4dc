package kvcache

import "unsafe"

// Allocator provides a pool's K/V storage (kvc_allocator, kvcache/allocator.h):
// with PoolOptions.Allocator set, NewPool takes every layer's K and V buffer
// (all its blocks) from it once, and Close gives each back once, with the
// bytes and device it was asked for. The library zeroes what it takes.
//
// The memory must not be Go memory: the C library keeps the pointers for the
// pool's lifetime, which the cgo rules forbid for Go memory. Use C memory
// (CArena), or device memory of the pool's device. Alloc is asked for
// AllocatorAlignment-byte alignment and returns nil when it cannot serve the
// request (NewPool then fails with ErrOutOfMemory and keeps nothing). The
// methods are called from inside NewPool and Close, on their goroutine, and
// must not call the pool.
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
