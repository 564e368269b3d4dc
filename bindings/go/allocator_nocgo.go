//go:build !cgo

package kvcache

import "unsafe"

// CArena needs C memory: without cgo NewCArena returns ErrCgoDisabled, so no arena exists.
type CArena struct{}

// NewCArena returns ErrCgoDisabled without cgo.
func NewCArena(uintptr) (*CArena, error) { return nil, ErrCgoDisabled }

// Alloc implements Allocator; never reached without cgo.
func (*CArena) Alloc(uintptr, uintptr, Device, uintptr) unsafe.Pointer { return nil }

// Free implements Allocator; never reached without cgo.
func (*CArena) Free(unsafe.Pointer, uintptr, Device, uintptr) {}

// Live reports nothing without cgo.
func (*CArena) Live() (int, uintptr) { return 0, 0 }

// BadFrees reports nothing without cgo.
func (*CArena) BadFrees() int { return 0 }

// Contains reports false without cgo.
func (*CArena) Contains(unsafe.Pointer, uintptr) bool { return false }

// Close does nothing without cgo.
func (*CArena) Close() error { return nil }
