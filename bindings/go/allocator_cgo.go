//go:build cgo

package kvcache

// The C side of Allocator: the library calls allocator_trampoline.c's
// functions, which call the exported functions below with the allocator's
// cgo.Handle as context. CArena: an Allocator over one block of C memory.

/*
#include <stdint.h>
#include <stdlib.h>
#include <kvcache.h>

void kvcgo_allocator_fill(kvc_allocator* a, uintptr_t handle, int library_releases);
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// An allocator of AllocatorAlignment is checked against the header at compile time.
var _ [AllocatorAlignment - C.KVC_ALLOCATOR_ALIGNMENT]byte
var _ [C.KVC_ALLOCATOR_ALIGNMENT - AllocatorAlignment]byte

//export kvcgoAlloc
func kvcgoAlloc(handle C.uintptr_t, bytes, align C.size_t, devType, devID C.int32_t, stream C.uintptr_t) unsafe.Pointer {
	a := cgo.Handle(handle).Value().(Allocator)
	return a.Alloc(uintptr(bytes), uintptr(align), Device{Type: DeviceType(devType), ID: int32(devID)}, uintptr(stream))
}

//export kvcgoFree
func kvcgoFree(handle C.uintptr_t, ptr unsafe.Pointer, bytes C.size_t, devType, devID C.int32_t, stream C.uintptr_t) {
	a := cgo.Handle(handle).Value().(Allocator)
	a.Free(ptr, uintptr(bytes), Device{Type: DeviceType(devType), ID: int32(devID)}, uintptr(stream))
}

//export kvcgoRelease
func kvcgoRelease(handle C.uintptr_t) {
	cgo.Handle(handle).Delete()
	releasedAllocators.Add(1)
}

// releasedAllocators counts the handles kvcgoRelease deleted (tests check that the last cache sharing an
// allocator releases it once).
var releasedAllocators atomic.Int64

// callAllocator is al as the library sees it for one create call (nil without one), in the call's arena, and
// what to pass the call's error through: when the call fails the handle is deleted here; when it succeeds the
// library owns the handle and kvcgoRelease deletes it after the last cache made from it (clones, splits,
// stacks and pairs, which Go does not see) is destroyed.
func (a *arena) callAllocator(al Allocator) (*C.kvc_allocator, func(error) error) {
	if al == nil {
		return nil, func(err error) error { return err }
	}
	h := cgo.NewHandle(al)
	c := (*C.kvc_allocator)(a.alloc(C.sizeof_kvc_allocator))
	C.kvcgo_allocator_fill(c, C.uintptr_t(h), 1)
	return c, func(err error) error {
		if err != nil {
			h.Delete()
		}
		return err
	}
}

// cAllocator is an Allocator as the library sees it: a kvc_allocator in C
// memory whose context is a handle of the Go value. release frees both, once
// the pool that used it is destroyed.
type cAllocator struct {
	c      *C.kvc_allocator
	handle cgo.Handle
}

func newCAllocator(a Allocator) *cAllocator {
	h := cgo.NewHandle(a)
	c := (*C.kvc_allocator)(C.malloc(C.sizeof_kvc_allocator))
	C.kvcgo_allocator_fill(c, C.uintptr_t(h), 0)
	return &cAllocator{c: c, handle: h}
}

func (a *cAllocator) release() {
	C.free(unsafe.Pointer(a.c))
	a.handle.Delete()
}

// CArena is an Allocator over one block of C memory (host memory: CPU pools
// only): bump allocation, so freed bytes are not reused; a pool allocates
// its storage once, which is what it is for. It counts what is live, so a
// test or an engine can check that Close gave every byte back.
type CArena struct {
	mu        sync.Mutex
	base      unsafe.Pointer
	size      uintptr
	used      uintptr
	live      map[uintptr]uintptr
	liveBytes uintptr
	badFrees  int
}

// NewCArena allocates size bytes of C memory (ErrOutOfMemory when it cannot).
func NewCArena(size uintptr) (*CArena, error) {
	var p unsafe.Pointer
	if size == 0 || C.posix_memalign(&p, AllocatorAlignment, C.size_t(size)) != 0 {
		return nil, newError(CodeOutOfMemory, "NewCArena: could not allocate the arena's C memory")
	}
	return &CArena{base: p, size: size, live: make(map[uintptr]uintptr)}, nil
}

// Alloc implements Allocator (the CPU only).
func (a *CArena) Alloc(bytes, align uintptr, device Device, stream uintptr) unsafe.Pointer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.base == nil || device.Type != DeviceCPU || align == 0 {
		return nil
	}
	at := (a.used + align - 1) &^ (align - 1)
	if at > a.size || bytes > a.size-at {
		return nil
	}
	a.used = at + bytes
	a.live[at] = bytes
	a.liveBytes += bytes
	return unsafe.Add(a.base, at)
}

// Free implements Allocator; a pointer it did not hand out (or with other bytes) is counted in BadFrees.
func (a *CArena) Free(ptr unsafe.Pointer, bytes uintptr, device Device, stream uintptr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := uintptr(ptr) - uintptr(a.base)
	if n, ok := a.live[at]; !ok || n != bytes {
		a.badFrees++
		return
	}
	delete(a.live, at)
	a.liveBytes -= bytes
}

// Live reports the allocations not given back yet and their bytes.
func (a *CArena) Live() (count int, bytes uintptr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.live), a.liveBytes
}

// BadFrees counts frees of pointers the arena did not hand out, or with other bytes than asked.
func (a *CArena) BadFrees() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.badFrees
}

// Contains reports whether [ptr, ptr+bytes) lies inside the arena.
func (a *CArena) Contains(ptr unsafe.Pointer, bytes uintptr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	off := uintptr(ptr) - uintptr(a.base)
	return uintptr(ptr) >= uintptr(a.base) && off <= a.size && bytes <= a.size-off
}

// Close frees the arena's memory. Refused (ErrInvalidState) while allocations are live: a pool still uses them.
func (a *CArena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.live) > 0 {
		return newError(CodeInvalidState, "CArena.Close: allocations are still live (close the pool first)")
	}
	if a.base != nil {
		C.free(a.base)
		a.base = nil
	}
	return nil
}
