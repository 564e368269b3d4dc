//go:build cgo

package kvcache

// The tiers' calls into the C library (kvcache/tier.h). The directory
// crosses as a C string freed after the call; stats and fingerprints as Go
// memory that holds no Go pointers; tier handles are C memory.

/*
#include <stdlib.h>
#include <string.h>
#include <kvcache.h>

static kvc_error* kvcgo_disk_tier_create(const char* dir, uint64_t max_bytes, const uint8_t* key, size_t key_len,
                                         kvc_tier** out) {
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  o.max_bytes = max_bytes;
  o.auth_key = key;
  o.auth_key_len = key_len;
  return kvc_disk_tier_create(&o, out);
}

static kvc_error* kvcgo_tier_stats(const kvc_tier* t, kvc_tier_stats* out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  return kvc_tier_stats_get(t, out);
}

// kvc_pool_tier's result stays in C: NULL (past the end) is reported as such.
static kvc_error* kvcgo_pool_tier_stats(const kvc_pool* p, uint32_t index, kvc_tier_stats* out, int* found) {
  const kvc_tier* t = kvc_pool_tier(p, index);
  *found = t != NULL;
  return t ? kvcgo_tier_stats(t, out) : NULL;
}

// Payloads cross as one Go buffer (no Go pointers in it); the per-key pointers are made here, in C memory, for
// the call only (cgo forbids Go memory holding pointers to Go memory).
static void** kvcgo_payload_ptrs(uint8_t* base, size_t count, size_t size) {
  void** p = malloc((count ? count : 1) * sizeof *p);
  for (size_t i = 0; p && i < count; i++) p[i] = base + i * size;
  return p;
}

static kvc_error* kvcgo_tier_get_blocks(kvc_tier* t, const kvc_tier_key* keys, size_t count, size_t size,
                                        uint32_t layers, uint8_t* base, uint8_t* found) {
  void** p = kvcgo_payload_ptrs(base, count, size);
  if (!p) return kvc_tier_get_blocks(t, keys, count, size, layers, NULL, found, NULL); // out of memory: refused
  kvc_error* e = kvc_tier_get_blocks(t, keys, count, size, layers, p, found, NULL);
  free(p);
  return e;
}

static kvc_error* kvcgo_tier_put_blocks(kvc_tier* t, const kvc_tier_key* keys, size_t count, size_t size,
                                        uint32_t layers, uint8_t* base, size_t* stored) {
  void** p = kvcgo_payload_ptrs(base, count, size);
  if (!p) return kvc_tier_put_blocks(t, keys, count, size, layers, NULL, stored);
  kvc_error* e = kvc_tier_put_blocks(t, keys, count, size, layers, (const void* const*)p, stored);
  free(p);
  return e;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

func tier(t unsafe.Pointer) *C.kvc_tier { return (*C.kvc_tier)(t) }

// authKey crosses as a copy in C memory (nil: NULL, no key; empty: a pointer with length 0, which the library refuses).
func cDiskTierCreate(directory string, maxBytes uint64, authKey []byte) (unsafe.Pointer, error) {
	if err := noNUL("NewDiskTier", "directory", directory); err != nil {
		return nil, err
	}
	dir := C.CString(directory)
	defer C.free(unsafe.Pointer(dir))
	var a arena
	defer a.free()
	key := a.bytes(authKey)
	var out *C.kvc_tier
	err := takeError(C.kvcgo_disk_tier_create(dir, C.uint64_t(maxBytes), key, C.size_t(len(authKey)), &out))
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

func cTierDestroy(t unsafe.Pointer) { C.kvc_tier_destroy(tier(t)) }

func goTierStats(s *C.kvc_tier_stats) TierStats {
	return TierStats{
		Puts: uint64(s.puts), PutFailures: uint64(s.put_failures), Gets: uint64(s.gets), Hits: uint64(s.hits),
		Corrupt: uint64(s.corrupt), BytesWritten: uint64(s.bytes_written), BytesRead: uint64(s.bytes_read),
		Queued: uint64(s.queued), Dropped: uint64(s.dropped),
	}
}

func cTierStats(t unsafe.Pointer) (TierStats, error) {
	var s C.kvc_tier_stats
	if err := takeError(C.kvcgo_tier_stats(tier(t), &s)); err != nil {
		return TierStats{}, err
	}
	return goTierStats(&s), nil
}

func cPoolAddTier(p, t unsafe.Pointer, write TierWrite) error {
	return takeError(C.kvc_pool_add_tier(pool(p), tier(t), C.kvc_tier_write_policy(write)))
}

func cPoolTierStats(p unsafe.Pointer, index uint32) (TierStats, error) {
	var s C.kvc_tier_stats
	var found C.int
	if err := takeError(C.kvcgo_pool_tier_stats(pool(p), C.uint32_t(index), &s, &found)); err != nil {
		return TierStats{}, err
	}
	if found == 0 {
		return TierStats{}, newError(CodeOutOfRange, fmt.Sprintf("TierStats: index %d is past the pool's tiers", index))
	}
	return goTierStats(&s), nil
}

func cPoolFingerprint(p unsafe.Pointer) ([BlockHashSize]byte, error) {
	var fp [BlockHashSize]byte
	err := takeError(C.kvc_pool_fingerprint(pool(p), (*C.uint8_t)(unsafe.Pointer(&fp[0]))))
	return fp, err
}

// cKeys converts the keys to C's layout in Go memory (no pointers in it: legal to pass).
func cKeys(keys []TierKey) []C.kvc_tier_key {
	out := make([]C.kvc_tier_key, len(keys))
	for i, k := range keys {
		for j := 0; j < BlockHashSize; j++ {
			out[i].fingerprint[j] = C.uint8_t(k.Fingerprint[j])
			out[i].block_hash[j] = C.uint8_t(k.BlockHash[j])
		}
		out[i].group = C.uint32_t(k.Group)
	}
	return out
}

func keysPtr(k []C.kvc_tier_key) *C.kvc_tier_key {
	if len(k) == 0 {
		return nil
	}
	return &k[0]
}

func u8Ptr(b []byte) *C.uint8_t { return (*C.uint8_t)(bytesPtr(b)) }

func bools(found []byte) []bool {
	out := make([]bool, len(found))
	for i, f := range found {
		out[i] = f != 0
	}
	return out
}

func cTierExists(t unsafe.Pointer, keys []TierKey) ([]bool, error) {
	k := cKeys(keys)
	found := make([]byte, len(keys))
	err := takeError(C.kvc_tier_exists(tier(t), keysPtr(k), C.size_t(len(k)), u8Ptr(found), nil))
	if err != nil {
		return nil, err
	}
	return bools(found), nil
}

func cTierGetBlocks(t unsafe.Pointer, keys []TierKey, buf []byte, size int, layers uint32) ([]bool, error) {
	k := cKeys(keys)
	found := make([]byte, len(keys))
	err := takeError(C.kvcgo_tier_get_blocks(tier(t), keysPtr(k), C.size_t(len(k)), C.size_t(size),
		C.uint32_t(layers), u8Ptr(buf), u8Ptr(found)))
	if err != nil {
		return nil, err
	}
	return bools(found), nil
}

func cTierPutBlocks(t unsafe.Pointer, keys []TierKey, buf []byte, size int, layers uint32) (int, error) {
	k := cKeys(keys)
	var stored C.size_t
	err := takeError(C.kvcgo_tier_put_blocks(tier(t), keysPtr(k), C.size_t(len(k)), C.size_t(size),
		C.uint32_t(layers), u8Ptr(buf), &stored))
	return int(stored), err
}
