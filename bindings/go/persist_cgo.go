//go:build cgo

package kvcache

// The cgo side of cache files (persist.go): paths cross as C strings freed
// after the call.

/*
#include <stdlib.h>
#include "kvcache.h"
*/
import "C"

import "unsafe"

// withPath calls f with path as a C string. The functions below are alike on
// purpose: one per C function, each a line through withPath.
func withPath(path string, f func(*C.char) *C.kvc_error) error {
	if err := noNUL("kvcache", "path", path); err != nil {
		return err
	}
	s := C.CString(path)
	defer C.free(unsafe.Pointer(s))
	return takeError(f(s))
}

func cSave(p unsafe.Pointer, path string) error {
	return withPath(path, func(s *C.char) *C.kvc_error { return C.kvc_cache_save(cache(p), s, nil) })
}

func cRestore(p unsafe.Pointer, path string) error {
	return withPath(path, func(s *C.char) *C.kvc_error { return C.kvc_cache_restore(cache(p), s) })
}

// loadOptions is o as C takes it.
func loadOptions(o LoadOptions) C.kvc_load_options {
	var c C.kvc_load_options
	C.kvc_load_options_init(&c)
	c.max_bytes = C.uint64_t(o.MaxBytes)
	return c
}

func cLoad(path string, o LoadOptions) (unsafe.Pointer, error) {
	var out *C.kvc_cache
	opts := loadOptions(o)
	err := withPath(path, func(s *C.char) *C.kvc_error { return C.kvc_cache_load(s, &opts, &out) })
	return unsafe.Pointer(out), err
}

func cEDSave(p unsafe.Pointer, path string) error {
	return withPath(path, func(s *C.char) *C.kvc_error { return C.kvc_encoder_decoder_cache_save(edCache(p), s, nil) })
}

func cEDRestore(p unsafe.Pointer, path string) error {
	return withPath(path, func(s *C.char) *C.kvc_error { return C.kvc_encoder_decoder_cache_restore(edCache(p), s) })
}

func cEDLoad(path string, o LoadOptions) (unsafe.Pointer, error) {
	var out *C.kvc_encoder_decoder_cache
	opts := loadOptions(o)
	err := withPath(path, func(s *C.char) *C.kvc_error { return C.kvc_encoder_decoder_cache_load(s, &opts, &out) })
	return unsafe.Pointer(out), err
}

func cPoolSequenceSave(s unsafe.Pointer, path string) error {
	return withPath(path, func(c *C.char) *C.kvc_error { return C.kvc_pool_sequence_save(poolSeq(s), c, nil) })
}

func cPoolSequenceLoad(p unsafe.Pointer, path string) (unsafe.Pointer, error) {
	var out *C.kvc_pool_sequence
	err := withPath(path, func(c *C.char) *C.kvc_error { return C.kvc_pool_sequence_load(pool(p), c, &out) })
	return unsafe.Pointer(out), err
}
