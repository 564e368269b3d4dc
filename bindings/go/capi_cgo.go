//go:build cgo

package kvcache

// The cgo side: the only file that includes kvcache.h. Go memory crosses to
// C only as arguments of a call (data pointers, pointer-free descriptors,
// out-parameters); the shims below turn descriptors into kvc_tensor structs
// on the C stack, so the library never sees a Go pointer inside Go memory
// and never keeps one. Arrays of tensors live in C memory (tensorArrays),
// with the Go memory they point to pinned.
//
// Every call that may allocate or free a layer's K/V store comes in two
// shims: one marked nocallback (with noescape, what keeps Update free of Go
// allocations), and a *_cb twin that is not, for caches made with
// CacheOptions.Allocator, whose stores come from Go callbacks (a callback
// from a nocallback call panics). Cache.callsBack picks one.

/*
#cgo noescape kvcgo_update
#cgo nocallback kvcgo_update
#cgo noescape kvcgo_update_compact
#cgo nocallback kvcgo_update_compact
#cgo noescape kvcgo_update_opts
#cgo nocallback kvcgo_update_opts
#cgo noescape kvcgo_update_all
#cgo nocallback kvcgo_update_all
#cgo noescape kvcgo_update_cross
#cgo nocallback kvcgo_update_cross
#cgo noescape kvcgo_update_conv_state
#cgo nocallback kvcgo_update_conv_state
#cgo noescape kvcgo_update_recurrent_state
#cgo nocallback kvcgo_update_recurrent_state
#cgo noescape kvcgo_early_init
#cgo nocallback kvcgo_early_init
#cgo noescape kvcgo_layer_view
#cgo nocallback kvcgo_layer_view
#cgo noescape kvc_cache_seq_length
#cgo nocallback kvc_cache_seq_length
#cgo noescape kvc_cache_max_length
#cgo nocallback kvc_cache_max_length
#cgo noescape kvc_cache_usable_length
#cgo nocallback kvc_cache_usable_length
#cgo noescape kvc_cache_mask_sizes
#cgo nocallback kvc_cache_mask_sizes
#cgo noescape kvc_cache_batch_size
#cgo nocallback kvc_cache_batch_size
#cgo noescape kvcgo_layer_info
#cgo nocallback kvcgo_layer_info
#cgo noescape kvcgo_memory
#cgo nocallback kvcgo_memory
#cgo noescape kvc_cache_reorder
#cgo nocallback kvc_cache_reorder
#cgo noescape kvc_cache_batch_select_indices
#cgo nocallback kvc_cache_batch_select_indices
#cgo noescape kvcgo_state_view
#cgo nocallback kvcgo_state_view
#cgo noescape kvc_cache_has_previous_state
#cgo nocallback kvc_cache_has_previous_state
#cgo nocallback kvc_cache_crop
#cgo noescape kvc_block_hash_root
#cgo nocallback kvc_block_hash_root
#cgo noescape kvc_block_hash
#cgo nocallback kvc_block_hash
#cgo noescape kvc_block_hash_chain
#cgo nocallback kvc_block_hash_chain
#cgo nocallback kvc_cache_num_layers

#include <stdlib.h>
#include <string.h>
#include <kvcache.h>

#define KVCGO_MAX_DIMS 6

// An input tensor without its data pointer: no pointers, so Go memory
// holding it may be passed to C.
typedef struct kvcgo_desc {
  int32_t ndim;
  int32_t device_type;
  int32_t device_id;
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
  int32_t has_strides;
  int32_t present;
  int64_t shape[KVCGO_MAX_DIMS];
  int64_t strides[KVCGO_MAX_DIMS];
  uint64_t byte_offset;
} kvcgo_desc;

// kvc_update_options without its pointers.
typedef struct kvcgo_uopts {
  uint32_t cache_position_length;
  int32_t has_cache_position;
  int64_t partial_rotation_size;
  kvcgo_desc cos, sin;
} kvcgo_uopts;

// kvc_conv_update_options without its pointer.
typedef struct kvcgo_conv_opts {
  uint32_t state_index;
  int32_t has_cache_position;
  int64_t conv_kernel_size;
  uint32_t cache_position_length;
  int32_t present;
} kvcgo_conv_opts;

// kvc_init_options without its pointers.
typedef struct kvcgo_init {
  int64_t batch_size, num_kv_heads, k_head_dim, v_head_dim;
  int32_t dtype;
  int32_t has_heads, has_dims;
} kvcgo_init;

// A stream is a driver handle, not memory: Go holds it as an integer, and this shim makes it a pointer on the
// C side, so that cgo's pointer checks never see it.
static kvc_error* kvcgo_set_stream(kvc_cache* c, uintptr_t stream) { return kvc_cache_set_stream(c, (void*)stream); }
static uintptr_t kvcgo_stream(const kvc_cache* c) { return (uintptr_t)kvc_cache_stream(c); }
static const kvc_tensor* kvcgo_tensor(kvc_tensor* t, char* data, const kvcgo_desc* d) {
  if (!d->present) return NULL;
  t->data = data;
  t->device.device_type = d->device_type;
  t->device.device_id = d->device_id;
  t->ndim = d->ndim;
  t->dtype.code = d->code;
  t->dtype.bits = d->bits;
  t->dtype.lanes = d->lanes;
  t->shape = (int64_t*)d->shape;
  t->strides = d->has_strides ? (int64_t*)d->strides : NULL;
  t->byte_offset = d->byte_offset;
  return t;
}

static kvc_error* kvcgo_update(kvc_cache* c, uint32_t layer, char* kdata, char* vdata, const kvcgo_desc* kd,
                               const kvcgo_desc* vd, char* out) {
  kvc_tensor k, v;
  return kvc_cache_update(c, layer, kvcgo_tensor(&k, kdata, kd), kvcgo_tensor(&v, vdata, vd), NULL, (kvc_kv*)out);
}

// The common update: a compact key and value in host memory, no options.
// Both shapes and dtypes in one pointer-free struct.
typedef struct kvcgo_pair {
  int64_t shape[2][KVCGO_MAX_DIMS];
  int32_t ndim[2];
  uint8_t code[2];
  uint8_t bits[2];
  uint16_t lanes[2];
} kvcgo_pair;

static void kvcgo_compact(kvc_tensor* t, char* data, const kvcgo_pair* d, int i) {
  t->data = data;
  t->device.device_type = KVC_DEVICE_CPU;
  t->device.device_id = 0;
  t->ndim = d->ndim[i];
  t->dtype.code = d->code[i];
  t->dtype.bits = d->bits[i];
  t->dtype.lanes = d->lanes[i];
  t->shape = (int64_t*)d->shape[i];
  t->strides = NULL;
  t->byte_offset = 0;
}

// The handle crosses as char* (it is C memory): cgo checks every argument
// of a pointer type it cannot see into, an incomplete struct included.
static kvc_error* kvcgo_update_compact(char* c, uint32_t layer, char* kdata, char* vdata, const kvcgo_pair* d,
                                       char* out) {
  kvc_tensor k, v;
  kvcgo_compact(&k, kdata, d, 0);
  kvcgo_compact(&v, vdata, d, 1);
  return kvc_cache_update((kvc_cache*)c, layer, &k, &v, NULL, (kvc_kv*)out);
}

static void kvcgo_uopts_build(kvc_update_options* o, kvc_tensor* cos, kvc_tensor* sin, const kvcgo_uopts* u,
                              const int64_t* cache_position, char* cos_data, char* sin_data) {
  kvc_update_options_init(o);
  o->cache_position = u->has_cache_position ? cache_position : NULL;
  o->cache_position_length = u->cache_position_length;
  o->rope_cos = kvcgo_tensor(cos, cos_data, &u->cos);
  o->rope_sin = kvcgo_tensor(sin, sin_data, &u->sin);
  o->partial_rotation_size = u->partial_rotation_size;
}

static kvc_error* kvcgo_update_opts(kvc_cache* c, uint32_t layer, char* kdata, char* vdata, const kvcgo_desc* kd,
                                    const kvcgo_desc* vd, const kvcgo_uopts* u, const int64_t* cache_position,
                                    char* cos_data, char* sin_data, char* out) {
  kvc_tensor k, v, cos, sin;
  kvc_update_options o;
  kvcgo_uopts_build(&o, &cos, &sin, u, cache_position, cos_data, sin_data);
  return kvc_cache_update(c, layer, kvcgo_tensor(&k, kdata, kd), kvcgo_tensor(&v, vdata, vd), &o, (kvc_kv*)out);
}

static kvc_error* kvcgo_update_all(char* handle, uint32_t n, char* keys, char* values, const kvcgo_uopts* u,
                                   const int64_t* cache_position, char* cos_data, char* sin_data, char* out) {
  kvc_cache* c = (kvc_cache*)handle;
  if (!u) return kvc_cache_update_all(c, n, (const kvc_tensor*)keys, (const kvc_tensor*)values, NULL, (kvc_kv*)out);
  kvc_tensor cos, sin;
  kvc_update_options o;
  kvcgo_uopts_build(&o, &cos, &sin, u, cache_position, cos_data, sin_data);
  return kvc_cache_update_all(c, n, (const kvc_tensor*)keys, (const kvc_tensor*)values, &o, (kvc_kv*)out);
}

static kvc_error* kvcgo_update_cross(kvc_encoder_decoder_cache* c, uint32_t layer, char* kdata, char* vdata,
                                     const kvcgo_desc* kd, const kvcgo_desc* vd, char* out) {
  kvc_tensor k, v;
  return kvc_encoder_decoder_cache_update_cross(c, layer, kvcgo_tensor(&k, kdata, kd), kvcgo_tensor(&v, vdata, vd),
                                                (kvc_kv*)out);
}

static kvc_error* kvcgo_update_conv_state(kvc_cache* c, uint32_t layer, char* xdata, const kvcgo_desc* xd,
                                          const kvcgo_conv_opts* co, const int64_t* cache_position, char* out) {
  kvc_tensor x;
  kvc_conv_update_options o;
  kvc_conv_update_options_init(&o);
  if (co->present) {
    o.state_index = co->state_index;
    o.conv_kernel_size = co->conv_kernel_size;
    o.cache_position = co->has_cache_position ? cache_position : NULL;
    o.cache_position_length = co->cache_position_length;
  }
  return kvc_cache_update_conv_state(c, layer, kvcgo_tensor(&x, xdata, xd), co->present ? &o : NULL,
                                     (kvc_tensor*)out);
}

static kvc_error* kvcgo_update_recurrent_state(kvc_cache* c, uint32_t layer, uint32_t state_index, char* sdata,
                                               const kvcgo_desc* sd, char* out) {
  kvc_tensor s;
  return kvc_cache_update_recurrent_state(c, layer, state_index, kvcgo_tensor(&s, sdata, sd), (kvc_tensor*)out);
}

static kvc_error* kvcgo_update_indexer(kvc_cache* c, uint32_t layer, char* xdata, const kvcgo_desc* xd, char* out) {
  kvc_tensor x;
  return kvc_cache_update_indexer(c, layer, kvcgo_tensor(&x, xdata, xd), (kvc_tensor*)out);
}

static kvc_error* kvcgo_indexer_view(const kvc_cache* c, uint32_t layer, char* out) {
  return kvc_cache_indexer_view(c, layer, (kvc_tensor*)out);
}

static kvc_error* kvcgo_early_init(kvc_cache* c, const kvcgo_init* g, const int64_t* heads, const int64_t* dims) {
  kvc_init_options o;
  kvc_init_options_init(&o);
  o.batch_size = g->batch_size;
  o.num_kv_heads = g->num_kv_heads;
  o.k_head_dim = g->k_head_dim;
  o.v_head_dim = g->v_head_dim;
  o.dtype = g->dtype;
  o.num_kv_heads_per_layer = g->has_heads ? heads : NULL;
  o.head_dim_per_layer = g->has_dims ? dims : NULL;
  return kvc_cache_early_initialization(c, &o);
}

static kvc_error* kvcgo_layer_info(const kvc_cache* c, uint32_t layer, kvc_layer_info* out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  return kvc_cache_layer_info(c, layer, out);
}

// Views and out-structs cross as char*: cgo checks the memory behind each
// unsafe.Pointer or pointer-holding argument on every call, which costs more
// than the call itself on the hot path; these are pointer-free at the call
// (data arrays of floats, zeroed out-structs) by construction.
static kvc_error* kvcgo_layer_view(const kvc_cache* c, uint32_t layer, char* out) {
  return kvc_cache_layer_view(c, layer, (kvc_kv*)out);
}

static kvc_error* kvcgo_state_view(const kvc_cache* c, uint32_t layer, uint32_t state, char* conv, char* rec) {
  return kvc_cache_state_view(c, layer, state, (kvc_tensor*)conv, (kvc_tensor*)rec);
}

static kvc_error* kvcgo_memory(const kvc_cache* c, kvc_memory_info* out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  return kvc_cache_memory(c, out);
}

// The callback twins (see the top of the file): the same calls under names cgo does not mark nocallback.
static kvc_error* kvcgo_update_cb(kvc_cache* c, uint32_t layer, char* kdata, char* vdata, const kvcgo_desc* kd,
                                  const kvcgo_desc* vd, char* out) {
  return kvcgo_update(c, layer, kdata, vdata, kd, vd, out);
}
static kvc_error* kvcgo_update_compact_cb(char* c, uint32_t layer, char* kdata, char* vdata, const kvcgo_pair* d,
                                          char* out) {
  return kvcgo_update_compact(c, layer, kdata, vdata, d, out);
}
static kvc_error* kvcgo_update_opts_cb(kvc_cache* c, uint32_t layer, char* kdata, char* vdata, const kvcgo_desc* kd,
                                       const kvcgo_desc* vd, const kvcgo_uopts* u, const int64_t* cache_position,
                                       char* cos_data, char* sin_data, char* out) {
  return kvcgo_update_opts(c, layer, kdata, vdata, kd, vd, u, cache_position, cos_data, sin_data, out);
}
static kvc_error* kvcgo_update_all_cb(char* handle, uint32_t n, char* keys, char* values, const kvcgo_uopts* u,
                                      const int64_t* cache_position, char* cos_data, char* sin_data, char* out) {
  return kvcgo_update_all(handle, n, keys, values, u, cache_position, cos_data, sin_data, out);
}
static kvc_error* kvcgo_update_cross_cb(kvc_encoder_decoder_cache* c, uint32_t layer, char* kdata, char* vdata,
                                        const kvcgo_desc* kd, const kvcgo_desc* vd, char* out) {
  return kvcgo_update_cross(c, layer, kdata, vdata, kd, vd, out);
}
static kvc_error* kvcgo_early_init_cb(kvc_cache* c, const kvcgo_init* g, const int64_t* heads, const int64_t* dims) {
  return kvcgo_early_init(c, g, heads, dims);
}
static kvc_error* kvcgo_reorder_cb(kvc_cache* c, const int64_t* idx, size_t n) { return kvc_cache_reorder(c, idx, n); }
static kvc_error* kvcgo_select_indices_cb(kvc_cache* c, const int64_t* idx, size_t n) {
  return kvc_cache_batch_select_indices(c, idx, n);
}
static kvc_error* kvcgo_crop_cb(kvc_cache* c, int64_t tokens) { return kvc_cache_crop(c, tokens); }
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// Compile-time checks: the Go mirrors have the C layouts. Each pair of
// arrays has a negative length, which does not compile, unless the two sides
// are equal (a list of checks, alike on purpose; the constants are checked in
// constcheck_cgo.go).
var (
	_ [unsafe.Sizeof(tdesc{}) - C.sizeof_kvcgo_desc]byte
	_ [C.sizeof_kvcgo_desc - unsafe.Sizeof(tdesc{})]byte
	_ [unsafe.Offsetof(tdesc{}.shape) - unsafe.Offsetof(C.kvcgo_desc{}.shape)]byte
	_ [unsafe.Offsetof(C.kvcgo_desc{}.shape) - unsafe.Offsetof(tdesc{}.shape)]byte
	_ [unsafe.Offsetof(tdesc{}.byteOffset) - unsafe.Offsetof(C.kvcgo_desc{}.byte_offset)]byte
	_ [unsafe.Offsetof(C.kvcgo_desc{}.byte_offset) - unsafe.Offsetof(tdesc{}.byteOffset)]byte
	_ [unsafe.Offsetof(tdesc{}.present) - unsafe.Offsetof(C.kvcgo_desc{}.present)]byte
	_ [unsafe.Offsetof(C.kvcgo_desc{}.present) - unsafe.Offsetof(tdesc{}.present)]byte
	_ [unsafe.Offsetof(tdesc{}.lanes) - unsafe.Offsetof(C.kvcgo_desc{}.lanes)]byte
	_ [unsafe.Offsetof(C.kvcgo_desc{}.lanes) - unsafe.Offsetof(tdesc{}.lanes)]byte

	_ [unsafe.Sizeof(uopts{}) - C.sizeof_kvcgo_uopts]byte
	_ [C.sizeof_kvcgo_uopts - unsafe.Sizeof(uopts{})]byte
	_ [unsafe.Offsetof(uopts{}.sin) - unsafe.Offsetof(C.kvcgo_uopts{}.sin)]byte
	_ [unsafe.Offsetof(C.kvcgo_uopts{}.sin) - unsafe.Offsetof(uopts{}.sin)]byte
	_ [unsafe.Offsetof(uopts{}.partialRotationSize) - unsafe.Offsetof(C.kvcgo_uopts{}.partial_rotation_size)]byte
	_ [unsafe.Offsetof(C.kvcgo_uopts{}.partial_rotation_size) - unsafe.Offsetof(uopts{}.partialRotationSize)]byte

	_ [unsafe.Sizeof(convOpts{}) - C.sizeof_kvcgo_conv_opts]byte
	_ [C.sizeof_kvcgo_conv_opts - unsafe.Sizeof(convOpts{})]byte
	_ [unsafe.Offsetof(convOpts{}.cachePositionLength) - unsafe.Offsetof(C.kvcgo_conv_opts{}.cache_position_length)]byte
	_ [unsafe.Offsetof(C.kvcgo_conv_opts{}.cache_position_length) - unsafe.Offsetof(convOpts{}.cachePositionLength)]byte

	_ [unsafe.Sizeof(cpair{}) - C.sizeof_kvcgo_pair]byte
	_ [C.sizeof_kvcgo_pair - unsafe.Sizeof(cpair{})]byte
	_ [unsafe.Offsetof(cpair{}.ndim) - unsafe.Offsetof(C.kvcgo_pair{}.ndim)]byte
	_ [unsafe.Offsetof(C.kvcgo_pair{}.ndim) - unsafe.Offsetof(cpair{}.ndim)]byte
	_ [unsafe.Offsetof(cpair{}.code) - unsafe.Offsetof(C.kvcgo_pair{}.code)]byte
	_ [unsafe.Offsetof(C.kvcgo_pair{}.code) - unsafe.Offsetof(cpair{}.code)]byte
	_ [unsafe.Offsetof(cpair{}.bits) - unsafe.Offsetof(C.kvcgo_pair{}.bits)]byte
	_ [unsafe.Offsetof(C.kvcgo_pair{}.bits) - unsafe.Offsetof(cpair{}.bits)]byte
	_ [unsafe.Offsetof(cpair{}.lanes) - unsafe.Offsetof(C.kvcgo_pair{}.lanes)]byte
	_ [unsafe.Offsetof(C.kvcgo_pair{}.lanes) - unsafe.Offsetof(cpair{}.lanes)]byte

	_ [unsafe.Sizeof(ctensor{}) - C.sizeof_kvc_tensor]byte
	_ [C.sizeof_kvc_tensor - unsafe.Sizeof(ctensor{})]byte
	_ [unsafe.Offsetof(ctensor{}.ndim) - unsafe.Offsetof(C.kvc_tensor{}.ndim)]byte
	_ [unsafe.Offsetof(C.kvc_tensor{}.ndim) - unsafe.Offsetof(ctensor{}.ndim)]byte
	_ [unsafe.Offsetof(ctensor{}.lanes) - unsafe.Offsetof(C.kvc_tensor{}.dtype) - 2]byte
	_ [unsafe.Offsetof(C.kvc_tensor{}.dtype) + 2 - unsafe.Offsetof(ctensor{}.lanes)]byte
	_ [unsafe.Offsetof(ctensor{}.shape) - unsafe.Offsetof(C.kvc_tensor{}.shape)]byte
	_ [unsafe.Offsetof(C.kvc_tensor{}.shape) - unsafe.Offsetof(ctensor{}.shape)]byte
	_ [unsafe.Offsetof(ctensor{}.strides) - unsafe.Offsetof(C.kvc_tensor{}.strides)]byte
	_ [unsafe.Offsetof(C.kvc_tensor{}.strides) - unsafe.Offsetof(ctensor{}.strides)]byte
	_ [unsafe.Offsetof(ctensor{}.byteOffset) - unsafe.Offsetof(C.kvc_tensor{}.byte_offset)]byte
	_ [unsafe.Offsetof(C.kvc_tensor{}.byte_offset) - unsafe.Offsetof(ctensor{}.byteOffset)]byte
	_ [unsafe.Sizeof(ckv{}) - C.sizeof_kvc_kv]byte
	_ [C.sizeof_kvc_kv - unsafe.Sizeof(ckv{})]byte

	_ [unsafe.Sizeof(ctable{}) - C.sizeof_kvc_pool_table]byte
	_ [C.sizeof_kvc_pool_table - unsafe.Sizeof(ctable{})]byte
	_ [unsafe.Offsetof(ctable{}.lastPageLen) - unsafe.Offsetof(C.kvc_pool_table{}.last_page_len)]byte
	_ [unsafe.Offsetof(C.kvc_pool_table{}.last_page_len) - unsafe.Offsetof(ctable{}.lastPageLen)]byte

	_ [maxDims - C.KVCGO_MAX_DIMS]byte
	_ [C.KVCGO_MAX_DIMS - maxDims]byte
)

// cAvailable reports whether the library can be used; with cgo it always
// can (a missing library fails at link or load time, before any Go code).
func cAvailable() error { return nil }

func cVersion() uint32                { return uint32(C.kvc_version()) }
func cVersionString() string          { return C.GoString(C.kvc_version_string()) }
func cFeatures() uint64               { return uint64(C.kvc_features()) }
func cCodeName(c Code) string         { return C.GoString(C.kvc_code_name(C.kvc_code(c))) }
func cDTypeSize(d DType) int          { return int(C.kvc_dtype_size(C.kvc_dtype(d))) }
func cAlloc(n uintptr) unsafe.Pointer { return C.calloc(1, C.size_t(n)) }
func cFree(p unsafe.Pointer)          { C.free(p) }

func cDTypeToDataType(d DType) DataType {
	t := C.kvc_dtype_to_data_type(C.kvc_dtype(d))
	return DataType{Code: uint8(t.code), Bits: uint8(t.bits), Lanes: uint16(t.lanes)}
}

func cDTypeFromDataType(t DataType) DType {
	return DType(C.kvc_dtype_from_data_type(C.kvc_data_type{code: C.uint8_t(t.Code), bits: C.uint8_t(t.Bits), lanes: C.uint16_t(t.Lanes)}))
}

// takeError converts a returned kvc_error into an *Error and frees it, in
// the call that received it.
func takeError(e *C.kvc_error) error {
	if e == nil {
		return nil
	}
	err := &Error{Code: Code(C.kvc_error_code(e)), Message: C.GoString(C.kvc_error_message(e))}
	C.kvc_error_destroy(e)
	return err
}

// ------------------------------------------------------------------ options

func goQuant(q *C.kvc_quant_options) QuantOptions {
	return QuantOptions{
		Quantizer: Quantizer(q.quantizer), Mode: QuantMode(q.mode), NBits: int32(q.nbits),
		AxisKey: int32(q.axis_key), AxisValue: int32(q.axis_value),
		QGroupSize: int64(q.q_group_size), ResidualLength: int64(q.residual_length),
	}
}

func cDefaultQuantOptions() QuantOptions {
	var q C.kvc_quant_options
	C.kvc_quant_options_init(&q)
	return goQuant(&q)
}

func cDefaultModelConfig() ModelConfig {
	var m C.kvc_model_config
	C.kvc_model_config_init(&m)
	return ModelConfig{
		NumHiddenLayers: uint32(m.num_hidden_layers), SlidingWindow: int64(m.sliding_window),
		AttentionChunkSize: int64(m.attention_chunk_size), NumKVSharedLayers: uint32(m.num_kv_shared_layers),
		SlidingWindowPattern: uint32(m.sliding_window_pattern), NumberOfConvStates: uint32(m.number_of_conv_states),
		ConvKernel: int64(m.conv_kernel),
	}
}

func cDefaultLayerOptions() LayerOptions {
	var l C.kvc_layer_options
	C.kvc_layer_options_init(&l)
	return LayerOptions{
		Kind: LayerKind(l.kind), Window: int64(l.window), MaxCacheLen: int64(l.max_cache_len),
		NumSinkTokens: int64(l.num_sink_tokens), NumStates: uint32(l.num_states), ConvKernelSize: int64(l.conv_kernel_size),
	}
}

func cDefaultCacheOptions() CacheOptions {
	var o C.kvc_cache_options
	C.kvc_cache_options_init(&o)
	return CacheOptions{
		Preset: Preset(o.preset), MaxCacheLen: int64(o.max_cache_len),
		Device:  Device{Type: DeviceType(o.device.device_type), ID: int32(o.device.device_id)},
		Offload: Offload(o.offload), WindowLength: int64(o.window_length), NumSinkTokens: int64(o.num_sink_tokens),
		TransformersRelease: uint32(o.transformers_release), QueryOffsetRule: QueryOffsetRule(o.query_offset_rule),
	}
}

func cDefaultInitOptions() InitOptions {
	var o C.kvc_init_options
	C.kvc_init_options_init(&o)
	return InitOptions{
		BatchSize: int64(o.batch_size), NumKVHeads: int64(o.num_kv_heads), KHeadDim: int64(o.k_head_dim),
		VHeadDim: int64(o.v_head_dim), DType: DType(o.dtype),
	}
}

func cDefaultUpdateOptions() UpdateOptions {
	var o C.kvc_update_options
	C.kvc_update_options_init(&o)
	return UpdateOptions{PartialRotationSize: int64(o.partial_rotation_size)}
}

func cDefaultConvUpdateOptions() ConvUpdateOptions {
	var o C.kvc_conv_update_options
	C.kvc_conv_update_options_init(&o)
	return ConvUpdateOptions{StateIndex: uint32(o.state_index), ConvKernelSize: int64(o.conv_kernel_size)}
}

// arena is C memory for the option structs of one call, freed after it.
type arena struct{ ptrs []unsafe.Pointer }

func (a *arena) alloc(n uintptr) unsafe.Pointer {
	if n == 0 {
		n = 1
	}
	p := C.calloc(1, C.size_t(n))
	if p == nil {
		panic("kvcache: out of C memory for an options struct")
	}
	a.ptrs = append(a.ptrs, p)
	return p
}

func (a *arena) free() {
	for _, p := range a.ptrs {
		C.free(p)
	}
}

func (a *arena) quant(q *QuantOptions) *C.kvc_quant_options {
	if q == nil {
		return nil
	}
	c := (*C.kvc_quant_options)(a.alloc(C.sizeof_kvc_quant_options))
	C.kvc_quant_options_init(c)
	c.quantizer = C.kvc_quantizer(q.Quantizer)
	c.mode = C.kvc_quant_mode(q.Mode)
	c.nbits = C.int32_t(q.NBits)
	c.axis_key = C.int32_t(q.AxisKey)
	c.axis_value = C.int32_t(q.AxisValue)
	c.q_group_size = C.int64_t(q.QGroupSize)
	c.residual_length = C.int64_t(q.ResidualLength)
	return c
}

func (a *arena) cacheOptions(o *CacheOptions) (*C.kvc_cache_options, error) {
	if o == nil {
		return nil, nil
	}
	if m := o.Config; m != nil && m.LayerTypes != nil && uint64(len(m.LayerTypes)) != uint64(m.NumHiddenLayers) {
		// The library reads num_hidden_layers entries.
		return nil, newError(CodeInvalidArgument, fmt.Sprintf(
			"New: Config.LayerTypes has %d entries but Config.NumHiddenLayers is %d; give one type per layer",
			len(m.LayerTypes), m.NumHiddenLayers))
	}
	c := (*C.kvc_cache_options)(a.alloc(C.sizeof_kvc_cache_options))
	C.kvc_cache_options_init(c)
	c.preset = C.kvc_preset(o.Preset)
	c.max_cache_len = C.int64_t(o.MaxCacheLen)
	if o.Device != (Device{}) {
		c.device.device_type = C.kvc_device_type(o.Device.Type)
		c.device.device_id = C.int32_t(o.Device.ID)
	}
	c.quant = a.quant(o.Quant)
	c.offload = C.kvc_offload(o.Offload)
	c.window_length = C.int64_t(o.WindowLength)
	c.num_sink_tokens = C.int64_t(o.NumSinkTokens)
	c.transformers_release = C.uint32_t(o.TransformersRelease)
	c.query_offset_rule = C.kvc_query_offset_rule(o.QueryOffsetRule)
	if m := o.Config; m != nil {
		cfg := (*C.kvc_model_config)(a.alloc(C.sizeof_kvc_model_config))
		C.kvc_model_config_init(cfg)
		cfg.num_hidden_layers = C.uint32_t(m.NumHiddenLayers)
		if len(m.LayerTypes) > 0 {
			types := unsafe.Slice((*C.kvc_layer_type)(a.alloc(uintptr(len(m.LayerTypes))*4)), len(m.LayerTypes))
			for i, t := range m.LayerTypes {
				types[i] = C.kvc_layer_type(t)
			}
			cfg.layer_types = &types[0]
		}
		cfg.sliding_window = C.int64_t(m.SlidingWindow)
		cfg.attention_chunk_size = C.int64_t(m.AttentionChunkSize)
		cfg.num_kv_shared_layers = C.uint32_t(m.NumKVSharedLayers)
		cfg.sliding_window_pattern = C.uint32_t(m.SlidingWindowPattern)
		cfg.number_of_conv_states = C.uint32_t(m.NumberOfConvStates)
		cfg.conv_kernel = C.int64_t(m.ConvKernel)
		c.config = cfg
	}
	if n := len(o.Layers); n > 0 {
		layers := unsafe.Slice((*C.kvc_layer_options)(a.alloc(uintptr(n)*C.sizeof_kvc_layer_options)), n)
		for i := range o.Layers {
			l, g := &layers[i], &o.Layers[i]
			C.kvc_layer_options_init(l)
			l.kind = C.kvc_layer_kind(g.Kind)
			l.window = C.int64_t(g.Window)
			l.max_cache_len = C.int64_t(g.MaxCacheLen)
			l.quant = a.quant(g.Quant)
			l.num_sink_tokens = C.int64_t(g.NumSinkTokens)
			l.num_states = C.uint32_t(g.NumStates)
			l.conv_kernel_size = C.int64_t(g.ConvKernelSize)
		}
		c.layers = &layers[0]
	}
	if uint64(len(o.Layers)) > math.MaxUint32 {
		c.num_layers = math.MaxUint32
	} else {
		c.num_layers = C.uint32_t(len(o.Layers))
	}
	return c, nil
}

// ------------------------------------------------------------------- caches

func cache(p unsafe.Pointer) *C.kvc_cache { return (*C.kvc_cache)(p) }

func cCreate(o *CacheOptions) (unsafe.Pointer, error) {
	var a arena
	defer a.free()
	co, err := a.cacheOptions(o)
	if err != nil {
		return nil, err
	}
	settle := a.cacheAllocator(o, co)
	var out *C.kvc_cache
	if err := settle(takeError(C.kvc_cache_create(co, &out))); err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

// cacheAllocator sets co.allocator from o.Allocator (callAllocator) and returns what settles it with the
// create call's error.
func (a *arena) cacheAllocator(o *CacheOptions, co *C.kvc_cache_options) func(error) error {
	if o == nil {
		return func(err error) error { return err }
	}
	c, settle := a.callAllocator(o.Allocator)
	co.allocator = c
	return settle
}

func cCreateFromTensors(o *CacheOptions, n int, keys, values unsafe.Pointer) (unsafe.Pointer, error) {
	var a arena
	defer a.free()
	co, err := a.cacheOptions(o)
	if err != nil {
		return nil, err
	}
	settle := a.cacheAllocator(o, co)
	var out *C.kvc_cache
	err = settle(takeError(C.kvc_cache_create_from_tensors(co, C.uint32_t(n),
		(*C.kvc_tensor)(keys), (*C.kvc_tensor)(values), &out)))
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

func cClone(p unsafe.Pointer) (unsafe.Pointer, error) {
	var out *C.kvc_cache
	if err := takeError(C.kvc_cache_clone(cache(p), &out)); err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

func cDestroy(p unsafe.Pointer) { C.kvc_cache_destroy(cache(p)) }

func cEarlyInit(p unsafe.Pointer, cb bool, o *InitOptions) error {
	g := C.kvcgo_init{
		batch_size: C.int64_t(o.BatchSize), num_kv_heads: C.int64_t(o.NumKVHeads),
		k_head_dim: C.int64_t(o.KHeadDim), v_head_dim: C.int64_t(o.VHeadDim), dtype: C.int32_t(o.DType),
	}
	// The library reads one entry per layer: fewer would be read past.
	n := int(C.kvc_cache_num_layers(cache(p)))
	var heads, dims *C.int64_t
	if o.NumKVHeadsPerLayer != nil {
		if len(o.NumKVHeadsPerLayer) < n {
			return newError(CodeInvalidArgument, "EarlyInitialization: NumKVHeadsPerLayer has fewer entries than the cache has layers")
		}
		g.has_heads = 1
		if len(o.NumKVHeadsPerLayer) > 0 {
			heads = (*C.int64_t)(&o.NumKVHeadsPerLayer[0])
		}
	}
	if o.HeadDimPerLayer != nil {
		if len(o.HeadDimPerLayer) < n {
			return newError(CodeInvalidArgument, "EarlyInitialization: HeadDimPerLayer has fewer entries than the cache has layers")
		}
		g.has_dims = 1
		if len(o.HeadDimPerLayer) > 0 {
			dims = (*C.int64_t)(&o.HeadDimPerLayer[0])
		}
	}
	if cb {
		return takeError(C.kvcgo_early_init_cb(cache(p), &g, heads, dims))
	}
	return takeError(C.kvcgo_early_init(cache(p), &g, heads, dims))
}

func cNumLayers(p unsafe.Pointer) uint32 { return uint32(C.kvc_cache_num_layers(cache(p))) }

func cLayerInfo(p unsafe.Pointer, layer uint32, out *LayerInfo) error {
	var i C.kvc_layer_info
	if err := takeError(C.kvcgo_layer_info(cache(p), C.uint32_t(layer), &i)); err != nil {
		return err
	}
	*out = LayerInfo{
		Kind: LayerKind(i.kind), Window: int64(i.window), MaxCacheLen: int64(i.max_cache_len),
		Capacity: int64(i.capacity), IsInitialized: i.is_initialized != 0, IsSliding: i.is_sliding != 0,
		IsChunked: i.is_chunked != 0, IsCompileable: i.is_compileable != 0, RecordsPast: i.records_past != 0,
		DType: DType(i.dtype), BatchSize: int64(i.batch_size), NumKVHeads: int64(i.num_kv_heads),
		KHeadDim: int64(i.k_head_dim), VHeadDim: int64(i.v_head_dim), SeqLength: int64(i.seq_length),
		StoredLength: int64(i.stored_length), IsLinear: i.is_linear != 0, IsOffloaded: i.is_offloaded != 0,
		HasPreviousState: i.has_previous_state != 0, NumStates: uint32(i.num_states),
		ConvKernelSize: int64(i.conv_kernel_size), NumSinkTokens: int64(i.num_sink_tokens),
		QuantizedLength: int64(i.quantized_length),
	}
	return nil
}

func cLayerView(p unsafe.Pointer, layer uint32, out *ckv) error {
	return takeError(C.kvcgo_layer_view(cache(p), C.uint32_t(layer), kvOut(out)))
}

func cSeqLength(p unsafe.Pointer, layer uint32) (int64, error) {
	var n C.int64_t
	err := takeError(C.kvc_cache_seq_length(cache(p), C.uint32_t(layer), &n))
	return int64(n), err
}

func cMaxLength(p unsafe.Pointer, layer int32) (int64, error) {
	var n C.int64_t
	err := takeError(C.kvc_cache_max_length(cache(p), C.int32_t(layer), &n))
	return int64(n), err
}

func cUsableLength(p unsafe.Pointer, newLen int64, layer uint32) (int64, error) {
	var n C.int64_t
	err := takeError(C.kvc_cache_usable_length(cache(p), C.int64_t(newLen), C.uint32_t(layer), &n))
	return int64(n), err
}

func cMaskSizes(p unsafe.Pointer, q int64, layer uint32) (int64, int64, error) {
	var l, o C.int64_t
	err := takeError(C.kvc_cache_mask_sizes(cache(p), C.int64_t(q), C.uint32_t(layer), &l, &o))
	return int64(l), int64(o), err
}

func cQueryOffset(p unsafe.Pointer, layer uint32) (int64, error) {
	var n C.int64_t
	err := takeError(C.kvc_cache_query_offset(cache(p), C.uint32_t(layer), &n))
	return int64(n), err
}

func cIsCroppable(p unsafe.Pointer, layer int32) (bool, error) {
	var v C.uint8_t
	err := takeError(C.kvc_cache_is_croppable(cache(p), C.int32_t(layer), &v))
	return v != 0, err
}

func cSetPreviousAcceptedTokens(p unsafe.Pointer, tokens int64) error {
	return takeError(C.kvc_cache_set_previous_accepted_tokens(cache(p), C.int64_t(tokens)))
}

func cBatchSize(p unsafe.Pointer) (int64, error) {
	var n C.int64_t
	err := takeError(C.kvc_cache_batch_size(cache(p), &n))
	return int64(n), err
}

func cMemory(p unsafe.Pointer, out *MemoryInfo) error {
	var m C.kvc_memory_info
	if err := takeError(C.kvcgo_memory(cache(p), &m)); err != nil {
		return err
	}
	*out = MemoryInfo{
		BytesReserved: uint64(m.bytes_reserved), BytesUsed: uint64(m.bytes_used), BytesDevice: uint64(m.bytes_device),
		BytesHost: uint64(m.bytes_host), BytesQuantized: uint64(m.bytes_quantized), BytesState: uint64(m.bytes_state),
	}
	return nil
}

func desc(d *tdesc) *C.kvcgo_desc { return (*C.kvcgo_desc)(unsafe.Pointer(d)) }

// charp passes a pointer to memory that holds no Go pointers as char*, which
// cgo does not need to inspect (see the C side).
func charp(p unsafe.Pointer) *C.char { return (*C.char)(p) }
func kvOut(o *ckv) *C.char           { return (*C.char)(unsafe.Pointer(o)) }

// The calls with a callback twin take cb (Cache.callsBack) and hand it to a *CB function when set. Those copy
// the Go memory they pass (descriptors, out-structs) to the heap first: a Go callback may move the goroutine's
// stack under C, and the copies keep the arguments of the nocallback path from escaping, so Update without an
// allocator still allocates nothing.

func cUpdate(p unsafe.Pointer, cb bool, layer uint32, kdata, vdata unsafe.Pointer, kd, vd *tdesc, out *ckv) error {
	if cb {
		return cUpdateCB(p, layer, kdata, vdata, *kd, *vd, out)
	}
	return takeError(C.kvcgo_update(cache(p), C.uint32_t(layer), charp(kdata), charp(vdata), desc(kd), desc(vd), kvOut(out)))
}

func cUpdateCB(p unsafe.Pointer, layer uint32, kdata, vdata unsafe.Pointer, kd, vd tdesc, out *ckv) error {
	o := new(ckv)
	defer func() { *out = *o }()
	return takeError(C.kvcgo_update_cb(cache(p), C.uint32_t(layer), charp(kdata), charp(vdata), desc(&kd), desc(&vd), kvOut(o)))
}

func cUpdateCompact(p unsafe.Pointer, cb bool, layer uint32, kdata, vdata unsafe.Pointer, d *cpair, out *ckv) error {
	if cb {
		return cUpdateCompactCB(p, layer, kdata, vdata, *d, out)
	}
	return takeError(C.kvcgo_update_compact(charp(p), C.uint32_t(layer), charp(kdata), charp(vdata),
		(*C.kvcgo_pair)(unsafe.Pointer(d)), kvOut(out)))
}

func cUpdateCompactCB(p unsafe.Pointer, layer uint32, kdata, vdata unsafe.Pointer, d cpair, out *ckv) error {
	o := new(ckv)
	defer func() { *out = *o }()
	return takeError(C.kvcgo_update_compact_cb(charp(p), C.uint32_t(layer), charp(kdata), charp(vdata),
		(*C.kvcgo_pair)(unsafe.Pointer(&d)), kvOut(o)))
}

func cUpdateOpts(p unsafe.Pointer, cb bool, layer uint32, kdata, vdata unsafe.Pointer, kd, vd *tdesc, u *uopts,
	cp *int64, cos, sin unsafe.Pointer, out *ckv) error {
	if cb {
		return cUpdateOptsCB(p, layer, kdata, vdata, *kd, *vd, *u, cp, cos, sin, out)
	}
	return takeError(C.kvcgo_update_opts(cache(p), C.uint32_t(layer), charp(kdata), charp(vdata), desc(kd), desc(vd),
		(*C.kvcgo_uopts)(unsafe.Pointer(u)), (*C.int64_t)(cp), charp(cos), charp(sin), kvOut(out)))
}

func cUpdateOptsCB(p unsafe.Pointer, layer uint32, kdata, vdata unsafe.Pointer, kd, vd tdesc, u uopts, cp *int64,
	cos, sin unsafe.Pointer, out *ckv) error {
	o := new(ckv)
	defer func() { *out = *o }()
	return takeError(C.kvcgo_update_opts_cb(cache(p), C.uint32_t(layer), charp(kdata), charp(vdata), desc(&kd),
		desc(&vd), (*C.kvcgo_uopts)(unsafe.Pointer(&u)), (*C.int64_t)(cp), charp(cos), charp(sin), kvOut(o)))
}

// cUpdateAll's arrays are C memory (tensorArrays); u is the one Go struct it passes.
func cUpdateAll(p unsafe.Pointer, cb bool, n uint32, keys, values unsafe.Pointer, u *uopts, cp *int64,
	cos, sin unsafe.Pointer, out unsafe.Pointer) error {
	if cb {
		var uc *uopts
		if u != nil {
			uc = new(uopts)
			*uc = *u
		}
		return takeError(C.kvcgo_update_all_cb(charp(p), C.uint32_t(n), charp(keys), charp(values),
			(*C.kvcgo_uopts)(unsafe.Pointer(uc)), (*C.int64_t)(cp), charp(cos), charp(sin), charp(out)))
	}
	return takeError(C.kvcgo_update_all(charp(p), C.uint32_t(n), charp(keys), charp(values),
		(*C.kvcgo_uopts)(unsafe.Pointer(u)), (*C.int64_t)(cp), charp(cos), charp(sin), charp(out)))
}

func cCrop(p unsafe.Pointer, cb bool, tokens int64) error {
	if cb {
		return takeError(C.kvcgo_crop_cb(cache(p), C.int64_t(tokens)))
	}
	return takeError(C.kvc_cache_crop(cache(p), C.int64_t(tokens)))
}

func cActivatePastRecording(p unsafe.Pointer) error {
	return takeError(C.kvc_cache_activate_past_recording(cache(p)))
}

func cReorder(p unsafe.Pointer, cb bool, idx *int64, n int) error {
	if cb {
		return takeError(C.kvcgo_reorder_cb(cache(p), (*C.int64_t)(idx), C.size_t(n)))
	}
	return takeError(C.kvc_cache_reorder(cache(p), (*C.int64_t)(idx), C.size_t(n)))
}

func cRepeatInterleave(p unsafe.Pointer, r int64) error {
	return takeError(C.kvc_cache_batch_repeat_interleave(cache(p), C.int64_t(r)))
}

func cSelectIndices(p unsafe.Pointer, cb bool, idx *int64, n int) error {
	if cb {
		return takeError(C.kvcgo_select_indices_cb(cache(p), (*C.int64_t)(idx), C.size_t(n)))
	}
	return takeError(C.kvc_cache_batch_select_indices(cache(p), (*C.int64_t)(idx), C.size_t(n)))
}

func handlesPtr(h []unsafe.Pointer) **C.kvc_cache {
	if len(h) == 0 {
		return nil
	}
	return (**C.kvc_cache)(unsafe.Pointer(&h[0]))
}

func cBatchSplit(p unsafe.Pointer, full, split int64, out []unsafe.Pointer) (int, error) {
	var n C.size_t
	err := takeError(C.kvc_cache_batch_split(cache(p), C.int64_t(full), C.int64_t(split), handlesPtr(out),
		C.size_t(len(out)), &n))
	return int(n), err
}

func cFromBatchSplits(splits []unsafe.Pointer) (unsafe.Pointer, error) {
	var out *C.kvc_cache
	err := takeError(C.kvc_cache_from_batch_splits(handlesPtr(splits), C.size_t(len(splits)), &out))
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

func cReserve(p unsafe.Pointer, tokens int64) error {
	return takeError(C.kvc_cache_reserve(cache(p), C.int64_t(tokens)))
}

func cReset(p unsafe.Pointer) error { return takeError(C.kvc_cache_reset(cache(p))) }

func cSetStream(p unsafe.Pointer, stream uintptr) error {
	return takeError(C.kvcgo_set_stream(cache(p), C.uintptr_t(stream)))
}

func cStream(p unsafe.Pointer) uintptr { return uintptr(C.kvcgo_stream(cache(p))) }

func cOffload(p unsafe.Pointer, layer uint32) error {
	return takeError(C.kvc_cache_offload(cache(p), C.uint32_t(layer)))
}

func cPrefetch(p unsafe.Pointer, layer uint32) error {
	return takeError(C.kvc_cache_prefetch(cache(p), C.uint32_t(layer)))
}

func tensorOut(t *ctensor) *C.char { return (*C.char)(unsafe.Pointer(t)) }

func cUpdateConvState(p unsafe.Pointer, layer uint32, xdata unsafe.Pointer, xd *tdesc, o *convOpts, cp *int64,
	out *ctensor) error {
	return takeError(C.kvcgo_update_conv_state(cache(p), C.uint32_t(layer), charp(xdata), desc(xd),
		(*C.kvcgo_conv_opts)(unsafe.Pointer(o)), (*C.int64_t)(cp), tensorOut(out)))
}

func cUpdateRecurrentState(p unsafe.Pointer, layer, state uint32, sdata unsafe.Pointer, sd *tdesc, out *ctensor) error {
	return takeError(C.kvcgo_update_recurrent_state(cache(p), C.uint32_t(layer), C.uint32_t(state), charp(sdata), desc(sd),
		tensorOut(out)))
}

func cStateView(p unsafe.Pointer, layer, state uint32, conv, rec *ctensor) error {
	return takeError(C.kvcgo_state_view(cache(p), C.uint32_t(layer), C.uint32_t(state), tensorOut(conv),
		tensorOut(rec)))
}

func cUpdateIndexer(p unsafe.Pointer, layer uint32, xdata unsafe.Pointer, xd *tdesc, out *ctensor) error {
	return takeError(C.kvcgo_update_indexer(cache(p), C.uint32_t(layer), charp(xdata), desc(xd), tensorOut(out)))
}

func cIndexerView(p unsafe.Pointer, layer uint32, out *ctensor) error {
	return takeError(C.kvcgo_indexer_view(cache(p), C.uint32_t(layer), tensorOut(out)))
}

func cHasPreviousState(p unsafe.Pointer, layer, state int32) (bool, error) {
	var b C.int
	err := takeError(C.kvc_cache_has_previous_state(cache(p), C.int32_t(layer), C.int32_t(state), &b))
	return b != 0, err
}

// -------------------------------------------------------- encoder-decoder

func edCache(p unsafe.Pointer) *C.kvc_encoder_decoder_cache { return (*C.kvc_encoder_decoder_cache)(p) }

func edHandlesPtr(h []unsafe.Pointer) **C.kvc_encoder_decoder_cache {
	if len(h) == 0 {
		return nil
	}
	return (**C.kvc_encoder_decoder_cache)(unsafe.Pointer(&h[0]))
}

func cEDCreate(self, cross unsafe.Pointer) (unsafe.Pointer, error) {
	var out *C.kvc_encoder_decoder_cache
	if err := takeError(C.kvc_encoder_decoder_cache_create(cache(self), cache(cross), &out)); err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

func cEDDestroy(p unsafe.Pointer) { C.kvc_encoder_decoder_cache_destroy(edCache(p)) }

func cEDSelf(p unsafe.Pointer) unsafe.Pointer {
	return unsafe.Pointer(C.kvc_encoder_decoder_cache_self_attention(edCache(p)))
}

func cEDCross(p unsafe.Pointer) unsafe.Pointer {
	return unsafe.Pointer(C.kvc_encoder_decoder_cache_cross_attention(edCache(p)))
}

func cEDIsUpdated(p unsafe.Pointer, layer uint32) (bool, error) {
	var b C.int32_t
	err := takeError(C.kvc_encoder_decoder_cache_is_updated(edCache(p), C.uint32_t(layer), &b))
	return b != 0, err
}

func cEDUpdateCross(p unsafe.Pointer, cb bool, layer uint32, kdata, vdata unsafe.Pointer, kd, vd *tdesc, out *ckv) error {
	if cb {
		return cEDUpdateCrossCB(p, layer, kdata, vdata, *kd, *vd, out)
	}
	return takeError(C.kvcgo_update_cross(edCache(p), C.uint32_t(layer), charp(kdata), charp(vdata), desc(kd), desc(vd), kvOut(out)))
}

func cEDUpdateCrossCB(p unsafe.Pointer, layer uint32, kdata, vdata unsafe.Pointer, kd, vd tdesc, out *ckv) error {
	o := new(ckv)
	defer func() { *out = *o }()
	return takeError(C.kvcgo_update_cross_cb(edCache(p), C.uint32_t(layer), charp(kdata), charp(vdata), desc(&kd),
		desc(&vd), kvOut(o)))
}

func cEDCrop(p unsafe.Pointer, tokens int64) error {
	return takeError(C.kvc_encoder_decoder_cache_crop(edCache(p), C.int64_t(tokens)))
}

func cEDReorder(p unsafe.Pointer, idx *int64, n int) error {
	return takeError(C.kvc_encoder_decoder_cache_reorder(edCache(p), (*C.int64_t)(idx), C.size_t(n)))
}

func cEDRepeatInterleave(p unsafe.Pointer, r int64) error {
	return takeError(C.kvc_encoder_decoder_cache_batch_repeat_interleave(edCache(p), C.int64_t(r)))
}

func cEDSelectIndices(p unsafe.Pointer, idx *int64, n int) error {
	return takeError(C.kvc_encoder_decoder_cache_batch_select_indices(edCache(p), (*C.int64_t)(idx), C.size_t(n)))
}

func cEDBatchSplit(p unsafe.Pointer, full, split int64, out []unsafe.Pointer) (int, error) {
	var n C.size_t
	err := takeError(C.kvc_encoder_decoder_cache_batch_split(edCache(p), C.int64_t(full), C.int64_t(split),
		edHandlesPtr(out), C.size_t(len(out)), &n))
	return int(n), err
}

func cEDFromBatchSplits(splits []unsafe.Pointer) (unsafe.Pointer, error) {
	var out *C.kvc_encoder_decoder_cache
	err := takeError(C.kvc_encoder_decoder_cache_from_batch_splits(edHandlesPtr(splits), C.size_t(len(splits)), &out))
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

func cEDReset(p unsafe.Pointer) error {
	return takeError(C.kvc_encoder_decoder_cache_reset(edCache(p)))
}

func cEDClone(p unsafe.Pointer) (unsafe.Pointer, error) {
	var out *C.kvc_encoder_decoder_cache
	if err := takeError(C.kvc_encoder_decoder_cache_clone(edCache(p), &out)); err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

// ---------------------------------------------------------------- block hash

// bytesPtr passes a byte slice's memory (which holds no Go pointers); nil for an empty slice, as the library
// accepts NULL with a length of 0.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

func tokensPtr(t []int32) *C.int32_t { return (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(t))) }

func hashPtr(h *[BlockHashSize]byte) *C.uint8_t { return (*C.uint8_t)(unsafe.Pointer(h)) }

func cBlockHashRoot(seed, salt []byte) (out [BlockHashSize]byte, err error) {
	if err = checkVersion(); err == nil {
		err = takeError(C.kvc_block_hash_root(bytesPtr(seed), C.size_t(len(seed)), bytesPtr(salt), C.size_t(len(salt)),
			hashPtr(&out)))
	}
	return out, err
}

func cBlockHash(parent *[BlockHashSize]byte, tokens []int32, extra []byte) (out [BlockHashSize]byte, err error) {
	if err = checkVersion(); err == nil {
		err = takeError(C.kvc_block_hash(hashPtr(parent), tokensPtr(tokens), C.size_t(len(tokens)), bytesPtr(extra),
			C.size_t(len(extra)), hashPtr(&out)))
	}
	return out, err
}

func cBlockHashChain(root *[BlockHashSize]byte, tokens []int32, blockSize uint32) ([][BlockHashSize]byte, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	full := 0
	if blockSize > 0 { // 0 is the library's to refuse, with its message
		full = len(tokens) / int(blockSize)
	}
	out := make([][BlockHashSize]byte, full)
	var count C.size_t
	err := takeError(C.kvc_block_hash_chain(hashPtr(root), tokensPtr(tokens), C.size_t(len(tokens)), C.uint32_t(blockSize),
		(*[BlockHashSize]C.uint8_t)(unsafe.Pointer(unsafe.SliceData(out))), C.size_t(full), &count))
	if err != nil {
		return nil, err
	}
	return out[:count], nil
}
