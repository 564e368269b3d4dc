//go:build cgo

package kvcache

// The pool's calls into the C library (kvcache/pool.h). Options live in C
// memory for the call (arena), tensors in C arrays with their Go memory
// pinned (tensorArrays); token ids, slots, handle arrays, events and stats
// cross as Go memory that holds no Go pointers.

/*
#include <stdlib.h>
#include <string.h>
#include <kvcache.h>

// A stream is a driver handle, not memory (see kvcgo_set_stream).
static kvc_error* kvcgo_pool_set_stream(kvc_pool* p, uintptr_t stream) { return kvc_pool_set_stream(p, (void*)stream); }

static kvc_error* kvcgo_pool_stats(const kvc_pool* p, uint32_t group, kvc_pool_stats* out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  return kvc_pool_stats_get(p, group, out);
}

// Sequence handles cross as an array of pointers to C memory, which cgo
// does not need to inspect.
static kvc_error* kvcgo_pool_blocks_needed(const kvc_pool* p, char* seqs, const uint64_t* new_tokens, size_t n,
                                           uint64_t* out) {
  return kvc_pool_blocks_needed(p, (const kvc_pool_sequence* const*)seqs, new_tokens, n, out);
}

static kvc_error* kvcgo_pool_block_table(kvc_pool* p, char* seqs, size_t n, uint32_t group, int32_t format,
                                         char* out) {
  return kvc_pool_block_table(p, (const kvc_pool_sequence* const*)seqs, n, group, format, (kvc_pool_table*)out);
}

static kvc_error* kvcgo_pool_layer_storage(const kvc_pool* p, uint32_t layer, int32_t layout, char* out) {
  return kvc_pool_layer_storage(p, layer, layout, (kvc_kv*)out);
}

static kvc_error* kvcgo_pool_recurrent_state(kvc_pool_sequence* s, uint32_t layer, char* conv, char* ssm) {
  return kvc_pool_recurrent_state(s, layer, (kvc_tensor*)conv, (kvc_tensor*)ssm);
}

static kvc_error* kvcgo_pool_write(kvc_pool* p, char* keys, char* values, uint32_t n, const int64_t* slots,
                                   size_t num_tokens) {
  return kvc_pool_write(p, (const kvc_tensor*)keys, (const kvc_tensor*)values, n, slots, num_tokens);
}

static kvc_error* kvcgo_pool_write_layer(kvc_pool* p, uint32_t layer, char* key, char* value, const int64_t* slots,
                                         size_t num_tokens) {
  return kvc_pool_write_layer(p, layer, (const kvc_tensor*)key, (const kvc_tensor*)value, slots, num_tokens);
}

static kvc_error* kvcgo_pool_reserve_batch(kvc_pool* p, char* seqs, size_t n, const int32_t* tokens,
                                           const uint64_t* num_tokens, int64_t* slots, size_t* reserved) {
  return kvc_pool_reserve_batch(p, (kvc_pool_sequence* const*)seqs, n, tokens, num_tokens, slots, reserved);
}

static kvc_error* kvcgo_pool_commit_batch(kvc_pool* p, char* seqs, size_t n) {
  return kvc_pool_commit_batch(p, (kvc_pool_sequence* const*)seqs, n);
}

static kvc_error* kvcgo_pool_gather(const kvc_pool_sequence* s, uint32_t layer, char* keys, char* values) {
  return kvc_pool_gather(s, layer, (const kvc_tensor*)keys, (const kvc_tensor*)values);
}
*/
import "C"

import (
	"unsafe"
)

func pool(p unsafe.Pointer) *C.kvc_pool             { return (*C.kvc_pool)(p) }
func poolSeq(p unsafe.Pointer) *C.kvc_pool_sequence { return (*C.kvc_pool_sequence)(p) }

// cPoolCreate also returns what frees the pool's allocator (nil without one), to call after cPoolDestroy.
func cPoolCreate(o *PoolOptions) (unsafe.Pointer, func(), error) {
	var a arena
	defer a.free()
	c := cPoolOptions(&a, o)
	var release func()
	if o.Allocator != nil {
		ca := newCAllocator(o.Allocator)
		c.allocator = ca.c
		release = ca.release
	}
	var out *C.kvc_pool
	if err := takeError(C.kvc_pool_create(c, &out)); err != nil {
		if release != nil {
			release()
		}
		return nil, nil, err
	}
	return unsafe.Pointer(out), release, nil
}

// cPoolOptionsFingerprint is kvc_pool_options_fingerprint (ModelFingerprint).
func cPoolOptionsFingerprint(o *PoolOptions) ([BlockHashSize]byte, error) {
	var a arena
	defer a.free()
	var fp [BlockHashSize]byte
	err := takeError(C.kvc_pool_options_fingerprint(cPoolOptions(&a, o), (*C.uint8_t)(unsafe.Pointer(&fp[0]))))
	return fp, err
}

// cPoolOptionsBlockPayload is kvc_pool_options_block_payload (ModelBlockPayload).
func cPoolOptionsBlockPayload(o *PoolOptions, group uint32) (int, uint32, error) {
	var a arena
	defer a.free()
	var size C.size_t
	var layers C.uint32_t
	err := takeError(C.kvc_pool_options_block_payload(cPoolOptions(&a, o), C.uint32_t(group), &size, &layers))
	return int(size), uint32(layers), err
}

// cPoolOptions fills kvc_pool_options in C memory of a (valid until a is freed).
func cPoolOptions(a *arena, o *PoolOptions) *C.kvc_pool_options {
	c := (*C.kvc_pool_options)(a.alloc(C.sizeof_kvc_pool_options))
	C.kvc_pool_options_init(c)
	c.dtype = C.kvc_dtype(o.DType)
	if o.Device != (Device{}) {
		c.device.device_type = C.kvc_device_type(o.Device.Type)
		c.device.device_id = C.int32_t(o.Device.ID)
	}
	if n := len(o.Groups); n > 0 {
		groups := unsafe.Slice((*C.kvc_pool_group_options)(a.alloc(uintptr(n)*C.sizeof_kvc_pool_group_options)), n)
		for i, g := range o.Groups {
			groups[i] = C.kvc_pool_group_options{
				struct_size: C.sizeof_kvc_pool_group_options, kind: C.kvc_pool_group_kind(g.Kind),
				block_size: C.uint32_t(g.BlockSize), num_blocks: C.uint32_t(g.NumBlocks), window: C.int64_t(g.Window),
			}
		}
		c.groups = &groups[0]
	}
	c.num_groups = C.uint32_t(len(o.Groups))
	if n := len(o.Layers); n > 0 {
		layers := unsafe.Slice((*C.kvc_pool_layer_options)(a.alloc(uintptr(n)*C.sizeof_kvc_pool_layer_options)), n)
		for i, l := range o.Layers {
			layers[i] = C.kvc_pool_layer_options{
				struct_size: C.sizeof_kvc_pool_layer_options, group: C.uint32_t(l.Group),
				num_kv_heads: C.uint32_t(l.NumKVHeads), key_head_dim: C.uint32_t(l.KeyHeadDim),
				value_head_dim: C.uint32_t(l.ValueHeadDim), conv_dim: C.uint32_t(l.ConvDim),
				conv_kernel: C.uint32_t(l.ConvKernel), ssm_state_size: C.uint32_t(l.SSMStateSize),
				storage: C.kvc_pool_storage(l.Storage), k_scale: C.float(l.cScale(l.KScale)),
				v_scale: C.float(l.cScale(l.VScale)),
			}
		}
		c.layers = &layers[0]
	}
	c.num_layers = C.uint32_t(len(o.Layers))
	c.layout = C.kvc_pool_layout(o.Layout)
	if n := len(o.HashSeed); n > 0 {
		seed := unsafe.Slice((*byte)(a.alloc(uintptr(n))), n)
		copy(seed, o.HashSeed)
		c.hash_seed = unsafe.Pointer(&seed[0])
		c.hash_seed_len = C.size_t(n)
	}
	c.enable_prefix_caching = 1
	if o.DisablePrefixCaching {
		c.enable_prefix_caching = 0
	}
	c.event_capacity = C.uint32_t(o.EventCapacity)
	c.shared_budget_bytes = C.uint64_t(o.SharedBudgetBytes)
	c.hash_mode = C.kvc_pool_hash_mode(o.HashMode)
	return c
}

func cPoolDestroy(p unsafe.Pointer) { C.kvc_pool_destroy(pool(p)) }

func cPoolSetStream(p unsafe.Pointer, stream uintptr) error {
	return takeError(C.kvcgo_pool_set_stream(pool(p), C.uintptr_t(stream)))
}

func cPoolStats(p unsafe.Pointer, group uint32) (PoolStats, error) {
	var s C.kvc_pool_stats
	if err := takeError(C.kvcgo_pool_stats(pool(p), C.uint32_t(group), &s)); err != nil {
		return PoolStats{}, err
	}
	return PoolStats{
		Group: uint32(s.group), NumBlocks: uint64(s.num_blocks), FreeBlocks: uint64(s.free_blocks),
		CachedBlocks: uint64(s.cached_blocks), UsedBlocks: uint64(s.used_blocks), PinnedBlocks: uint64(s.pinned_blocks),
		PrefixQueries: uint64(s.prefix_queries), PrefixHits: uint64(s.prefix_hits), Evictions: uint64(s.evictions),
	}, nil
}

func cPoolClearCache(p unsafe.Pointer) error { return takeError(C.kvc_pool_clear_cache(pool(p))) }
func cPoolUnpinAll(p unsafe.Pointer) error   { return takeError(C.kvc_pool_unpin_all(pool(p))) }

func cPoolSequenceCreate(p unsafe.Pointer, keys SequenceKeys) (unsafe.Pointer, error) {
	// The options point at the keys: all in C memory (cgo's rule for Go
	// memory passed to C: no Go pointers inside).
	var a arena
	defer a.free()
	o := (*C.kvc_pool_sequence_options)(a.alloc(C.sizeof_kvc_pool_sequence_options))
	o.struct_size = C.sizeof_kvc_pool_sequence_options
	o.salt, o.salt_len = arenaBytes(&a, keys.Salt)
	o.adapter_key, o.adapter_key_len = arenaBytes(&a, keys.AdapterKey)
	o.adapter_path, o.adapter_path_len = arenaBytes(&a, keys.AdapterPath)
	o.adapter_id = C.int64_t(keys.AdapterID)
	if n := len(keys.MMItems); n > 0 {
		items := unsafe.Slice((*C.kvc_pool_mm_item)(a.alloc(uintptr(n)*C.sizeof_kvc_pool_mm_item)), n)
		for i, it := range keys.MMItems {
			items[i].hash, items[i].hash_len = arenaBytes(&a, it.Hash)
			items[i].offset, items[i].length = C.uint64_t(it.Offset), C.uint64_t(it.Length)
		}
		o.mm_items, o.num_mm_items = &items[0], C.size_t(n)
	}
	var out *C.kvc_pool_sequence
	if err := takeError(C.kvc_pool_sequence_create(pool(p), o, &out)); err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

// arenaBytes copies b into the arena: the pointer and length C reads (nil and 0 for none).
func arenaBytes(a *arena, b []byte) (unsafe.Pointer, C.size_t) {
	if len(b) == 0 {
		return nil, 0
	}
	buf := unsafe.Slice((*byte)(a.alloc(uintptr(len(b)))), len(b))
	copy(buf, b)
	return unsafe.Pointer(&buf[0]), C.size_t(len(b))
}

func cPoolSequenceDestroy(s unsafe.Pointer) { C.kvc_pool_sequence_destroy(poolSeq(s)) }

func cPoolSequenceLength(s unsafe.Pointer) uint64 {
	return uint64(C.kvc_pool_sequence_length(poolSeq(s)))
}

func cPoolSequenceCommitted(s unsafe.Pointer) uint64 {
	return uint64(C.kvc_pool_sequence_committed(poolSeq(s)))
}

func cPoolMatchPrefix(s unsafe.Pointer, tokens []int32) (uint64, error) {
	var n C.uint64_t
	err := takeError(C.kvc_pool_match_prefix(poolSeq(s), tokensPtr(tokens), C.size_t(len(tokens)), &n))
	return uint64(n), err
}

func cPoolReserve(s unsafe.Pointer, tokens []int32, slots []int64) error {
	var out *C.int64_t
	if len(slots) > 0 {
		out = (*C.int64_t)(unsafe.Pointer(&slots[0]))
	}
	return takeError(C.kvc_pool_reserve(poolSeq(s), tokensPtr(tokens), C.size_t(len(tokens)), out))
}

func cPoolCommit(s unsafe.Pointer) error { return takeError(C.kvc_pool_commit(poolSeq(s))) }

func cPoolFork(s unsafe.Pointer) (unsafe.Pointer, error) {
	var out *C.kvc_pool_sequence
	if err := takeError(C.kvc_pool_fork(poolSeq(s), &out)); err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

func cPoolTruncate(s unsafe.Pointer, n uint64) error {
	return takeError(C.kvc_pool_truncate(poolSeq(s), C.uint64_t(n)))
}

func cPoolPin(s unsafe.Pointer) error { return takeError(C.kvc_pool_sequence_pin(poolSeq(s))) }

func seqsPtr(seqs []unsafe.Pointer) *C.char {
	if len(seqs) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&seqs[0]))
}

func cPoolBlocksNeeded(p unsafe.Pointer, seqs []unsafe.Pointer, newTokens []uint64, out []uint64) error {
	var nt *C.uint64_t
	if len(newTokens) > 0 {
		nt = (*C.uint64_t)(unsafe.Pointer(&newTokens[0]))
	}
	return takeError(C.kvcgo_pool_blocks_needed(pool(p), seqsPtr(seqs), nt, C.size_t(len(seqs)),
		(*C.uint64_t)(unsafe.Pointer(&out[0]))))
}

func cPoolWrite(p unsafe.Pointer, keys, values unsafe.Pointer, n int, slots []int64, numTokens int) error {
	var sp *C.int64_t
	if len(slots) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&slots[0]))
	}
	return takeError(C.kvcgo_pool_write(pool(p), charp(keys), charp(values), C.uint32_t(n), sp, C.size_t(numTokens)))
}

func cPoolWriteLayer(p unsafe.Pointer, layer uint32, key, value unsafe.Pointer, slots []int64, numTokens int) error {
	var sp *C.int64_t
	if len(slots) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&slots[0]))
	}
	return takeError(C.kvcgo_pool_write_layer(pool(p), C.uint32_t(layer), charp(key), charp(value), sp,
		C.size_t(numTokens)))
}

func cPoolReserveBatch(p unsafe.Pointer, seqs []unsafe.Pointer, tokens []int32, numTokens []uint64,
	slots []int64) (int, error) {
	var nt *C.uint64_t
	if len(numTokens) > 0 {
		nt = (*C.uint64_t)(unsafe.Pointer(&numTokens[0]))
	}
	var sp *C.int64_t
	if len(slots) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&slots[0]))
	}
	var reserved C.size_t
	err := takeError(C.kvcgo_pool_reserve_batch(pool(p), seqsPtr(seqs), C.size_t(len(seqs)), tokensPtr(tokens), nt,
		sp, &reserved))
	return int(reserved), err
}

func cPoolCommitBatch(p unsafe.Pointer, seqs []unsafe.Pointer) error {
	return takeError(C.kvcgo_pool_commit_batch(pool(p), seqsPtr(seqs), C.size_t(len(seqs))))
}

func cPoolLayerStorage(p unsafe.Pointer, layer uint32, layout PoolLayout, out *ckv) error {
	return takeError(C.kvcgo_pool_layer_storage(pool(p), C.uint32_t(layer), C.int32_t(layout), kvOut(out)))
}

func cPoolBlockTable(p unsafe.Pointer, seqs []unsafe.Pointer, group uint32, format tableFormat, out *ctable) error {
	return takeError(C.kvcgo_pool_block_table(pool(p), seqsPtr(seqs), C.size_t(len(seqs)), C.uint32_t(group),
		C.int32_t(format), (*C.char)(unsafe.Pointer(out))))
}

func cPoolGather(s unsafe.Pointer, layer uint32, keys, values unsafe.Pointer) error {
	return takeError(C.kvcgo_pool_gather(poolSeq(s), C.uint32_t(layer), charp(keys), charp(values)))
}

func cPoolRecurrentState(s unsafe.Pointer, layer uint32, conv, ssm *ctensor) error {
	return takeError(C.kvcgo_pool_recurrent_state(poolSeq(s), C.uint32_t(layer), tensorOut(conv), tensorOut(ssm)))
}

func cPoolEventsPullVLLM(p unsafe.Pointer, o VLLMBatchOptions) ([]byte, error) {
	var c C.kvc_pool_vllm_batch_options
	C.kvc_pool_vllm_batch_options_init(&c)
	c.ts = C.double(o.TS)
	if o.DataParallelRank != nil {
		c.data_parallel_rank = C.int64_t(*o.DataParallelRank)
	}
	if o.IntHashes {
		c.int_hashes = 1
	}
	var size C.size_t
	if err := takeError(C.kvc_pool_events_pull_vllm(pool(p), &c, nil, 0, &size)); err != nil {
		return nil, err
	}
	// C memory: the library writes into it without Go pointers crossing.
	buf := C.malloc(size + 1)
	if buf == nil {
		return nil, newError(CodeOutOfMemory, "EventsVLLM: no memory for the batch")
	}
	defer C.free(buf)
	if err := takeError(C.kvc_pool_events_pull_vllm(pool(p), &c, buf, size, &size)); err != nil {
		return nil, err
	}
	return C.GoBytes(buf, C.int(size)), nil
}

func cPoolEventsPull(p unsafe.Pointer, buf []PoolEvent) (int, error) {
	raw := make([]C.kvc_pool_event, len(buf))
	var n C.size_t
	if err := takeError(C.kvc_pool_events_pull(pool(p), &raw[0], C.size_t(len(raw)), &n)); err != nil {
		return 0, err
	}
	for i := 0; i < int(n); i++ {
		e := &raw[i]
		buf[i] = PoolEvent{
			ID: uint64(e.id), Kind: PoolEventKind(e.kind), Group: uint32(e.group),
			NumTokens: uint32(e.num_tokens), BlockID: uint32(e.block_id),
		}
		for j := range BlockHashSize {
			buf[i].BlockHash[j] = byte(e.block_hash[j])
			buf[i].ParentHash[j] = byte(e.parent_hash[j])
		}
	}
	return int(n), nil
}
