//go:build cgo

package kvcache

// The cgo side of host_memory.go. The three calls take and return integers
// and never call back into Go.

/*
#cgo noescape kvc_host_memory_set_retention
#cgo nocallback kvc_host_memory_set_retention
#cgo noescape kvc_host_memory_release
#cgo nocallback kvc_host_memory_release
#cgo noescape kvc_host_memory_retained
#cgo nocallback kvc_host_memory_retained
#include "kvcache.h"
*/
import "C"

func cHostMemorySetRetention(maxBytes uint64) uint64 {
	return uint64(C.kvc_host_memory_set_retention(C.uint64_t(maxBytes)))
}

func cHostMemoryRelease() uint64  { return uint64(C.kvc_host_memory_release()) }
func cHostMemoryRetained() uint64 { return uint64(C.kvc_host_memory_retained()) }
