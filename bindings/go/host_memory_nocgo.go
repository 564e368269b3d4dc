//go:build !cgo

package kvcache

// Without cgo there is no library and no memory of its to keep.

func cHostMemorySetRetention(uint64) uint64 { return 0 }
func cHostMemoryRelease() uint64            { return 0 }
func cHostMemoryRetained() uint64           { return 0 }
