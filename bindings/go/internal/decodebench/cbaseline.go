package decodebench

// The C baseline: bench/bench_decode.c's timed loop, compiled into this
// process, so that the binding's cost is measured against the library called
// from C in the same run, interleaved repetition by repetition, reading the
// very same step data (the Go buffer, pinned, so that C may keep pointers to
// it). It uses only the public API.

/*
#cgo pkg-config: kvcache
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <kvcache.h>

#define CB_LAYERS 32
#define CB_HEADS 8
#define CB_DIM 128
#define CB_TOKEN_ELEMS ((size_t)CB_HEADS * CB_DIM)

typedef struct cb_bench {
  int steps;
  uint16_t* bytes;       // [steps][LAYERS][2][TOKEN_ELEMS], as bench_decode
  int64_t shape[4];
  kvc_tensor* keys;      // [steps][LAYERS]
  kvc_tensor* values;
  kvc_kv out[CB_LAYERS];
} cb_bench;

static double cb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static kvc_tensor cb_tensor(void* data, int64_t* shape) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = KVC_DEVICE_CPU;
  t.ndim = 4;
  t.dtype = kvc_dtype_to_data_type(KVC_DTYPE_BFLOAT16);
  t.shape = shape;
  return t;
}

// data: the Go side's step data, pinned by the caller until cb_free.
static cb_bench* cb_new(int steps, uint16_t* data) {
  cb_bench* b = calloc(1, sizeof *b);
  b->steps = steps;
  b->bytes = data;
  b->shape[0] = 1, b->shape[1] = CB_HEADS, b->shape[2] = 1, b->shape[3] = CB_DIM;
  b->keys = malloc((size_t)steps * CB_LAYERS * sizeof(kvc_tensor));
  b->values = malloc((size_t)steps * CB_LAYERS * sizeof(kvc_tensor));
  for (int s = 0; s < steps; s++)
    for (int l = 0; l < CB_LAYERS; l++) {
      uint16_t* src = b->bytes + (((size_t)s * CB_LAYERS + l) * 2) * CB_TOKEN_ELEMS;
      b->keys[s * CB_LAYERS + l] = cb_tensor(src, b->shape);
      b->values[s * CB_LAYERS + l] = cb_tensor(src + CB_TOKEN_ELEMS, b->shape);
    }
  return b;
}

static void cb_free(cb_bench* b) {
  free(b->keys), free(b->values), free(b);
}

// One repetition: steps single-token steps, ns per token; -1 on error.
static double cb_time_steps(cb_bench* b, kvc_cache* cache, int use_update_all) {
  double t0 = cb_now_ns();
  for (int s = 0; s < b->steps; s++) {
    const kvc_tensor* k = &b->keys[s * CB_LAYERS];
    const kvc_tensor* v = &b->values[s * CB_LAYERS];
    if (use_update_all) {
      kvc_error* e = kvc_cache_update_all(cache, CB_LAYERS, k, v, NULL, b->out);
      if (e) { kvc_error_destroy(e); return -1; }
    } else {
      for (uint32_t l = 0; l < CB_LAYERS; l++) {
        kvc_error* e = kvc_cache_update(cache, l, &k[l], &v[l], NULL, &b->out[l]);
        if (e) { kvc_error_destroy(e); return -1; }
      }
    }
  }
  return (cb_now_ns() - t0) / b->steps;
}

// One step s (all layers), for testing.B; 0 or -1.
static int cb_step(cb_bench* b, kvc_cache* cache, int s, int use_update_all) {
  const kvc_tensor* k = &b->keys[s * CB_LAYERS];
  const kvc_tensor* v = &b->values[s * CB_LAYERS];
  kvc_error* e = NULL;
  if (use_update_all) {
    e = kvc_cache_update_all(cache, CB_LAYERS, k, v, NULL, b->out);
  } else {
    for (uint32_t l = 0; l < CB_LAYERS && !e; l++) e = kvc_cache_update(cache, l, &k[l], &v[l], NULL, &b->out[l]);
  }
  if (e) { kvc_error_destroy(e); return -1; }
  return 0;
}

static kvc_cache* cb_make_cache(int64_t context, int64_t reserve, const uint16_t* k, const uint16_t* v) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = CB_LAYERS;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.config = &cfg;
  kvc_cache* cache = NULL;
  kvc_error* e = kvc_cache_create(&opt, &cache);
  if (e) { kvc_error_destroy(e); return NULL; }
  e = kvc_cache_reserve(cache, reserve);
  if (e) { kvc_error_destroy(e); kvc_cache_destroy(cache); return NULL; }
  int64_t shape[4] = {1, CB_HEADS, context, CB_DIM};
  kvc_tensor keys[CB_LAYERS], values[CB_LAYERS];
  for (int l = 0; l < CB_LAYERS; l++) {
    keys[l] = cb_tensor((void*)k, shape);
    values[l] = cb_tensor((void*)v, shape);
  }
  e = kvc_cache_update_all(cache, CB_LAYERS, keys, values, NULL, NULL);
  if (e) { kvc_error_destroy(e); kvc_cache_destroy(cache); return NULL; }
  return cache;
}

static int cb_crop(kvc_cache* cache, int64_t tokens) {
  kvc_error* e = kvc_cache_crop(cache, tokens);
  if (e) { kvc_error_destroy(e); return -1; }
  return 0;
}

static int64_t cb_seq_length(kvc_cache* cache) {
  int64_t n = -1;
  kvc_error* e = kvc_cache_seq_length(cache, 0, &n);
  if (e) { kvc_error_destroy(e); return -1; }
  return n;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// CBaseline runs bench_decode's loop from C on caches of its own.
type CBaseline struct {
	b   *C.cb_bench
	pin runtime.Pinner
}

// CCache is a cache the C baseline created and prefilled.
type CCache struct {
	p       *C.kvc_cache
	context int64
}

// NewCBaseline points the C loop at d's step data, which it pins until
// Close.
func NewCBaseline(d *Data) *CBaseline {
	b := &CBaseline{}
	b.pin.Pin(&d.stepBytes[0])
	b.b = C.cb_new(C.int(d.Steps), (*C.uint16_t)(unsafe.Pointer(&d.stepBytes[0])))
	return b
}

// Close frees the C side and unpins the data.
func (b *CBaseline) Close() {
	C.cb_free(b.b)
	b.pin.Unpin()
}

// NewCache makes a 32-layer DynamicCache in C, reserved for context + steps
// tokens and prefilled with context tokens (the same bytes as the Go side's
// prefill).
func (b *CBaseline) NewCache(d *Data, context int64) (*CCache, error) {
	k, v := d.prefillBytes(context)
	p := C.cb_make_cache(C.int64_t(context), C.int64_t(context+int64(d.Steps)), (*C.uint16_t)(unsafe.Pointer(&k[0])), (*C.uint16_t)(unsafe.Pointer(&v[0])))
	if p == nil {
		return nil, fmt.Errorf("C baseline: cannot create and prefill a cache of %d tokens", context)
	}
	return &CCache{p: p, context: context}, nil
}

// TimeSteps times one repetition (all steps) from C, in ns per token, then
// crops the steps off again (not timed).
func (b *CBaseline) TimeSteps(c *CCache, updateAll bool) (float64, error) {
	mode := C.int(0)
	if updateAll {
		mode = 1
	}
	ns := float64(C.cb_time_steps(b.b, c.p, mode))
	if ns < 0 {
		return 0, fmt.Errorf("C baseline: an update failed")
	}
	if C.cb_crop(c.p, -C.int64_t(b.b.steps)) != 0 || int64(C.cb_seq_length(c.p)) != c.context {
		return 0, fmt.Errorf("C baseline: crop back to %d tokens failed", c.context)
	}
	return ns, nil
}

// Step runs step s (all layers) from C.
func (b *CBaseline) Step(c *CCache, s int, updateAll bool) error {
	mode := C.int(0)
	if updateAll {
		mode = 1
	}
	if C.cb_step(b.b, c.p, C.int(s), mode) != 0 {
		return fmt.Errorf("C baseline: step %d failed", s)
	}
	return nil
}

// CropBack removes everything beyond the prefill.
func (c *CCache) CropBack() error {
	n := int64(C.cb_seq_length(c.p))
	if n < c.context || C.cb_crop(c.p, -C.int64_t(n-c.context)) != 0 {
		return fmt.Errorf("C baseline: crop back from %d to %d tokens failed", n, c.context)
	}
	return nil
}

// Close frees the cache.
func (c *CCache) Close() { C.kvc_cache_destroy(c.p) }
