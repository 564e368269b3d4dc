/*
 * core/ops_alias.c: update inputs that point into the cache's own memory.
 *
 * A caller may pass back a view the cache returned (copying layer 0's keys
 * into layer 1, re-feeding a prefix). The update may grow or compact stores,
 * release the device copies kept for offloaded layers and reuse working
 * buffers before it reads its inputs, so such an input would be read after its
 * bytes moved. Inputs that overlap any memory the cache has handed out (every
 * layer's store and its stored and last-returned views) are therefore copied
 * into a buffer of their own before anything changes. A view's shape and
 * strides arrays live in the layer too, and change when that layer is
 * written: an input whose descriptor points there gets its own copy of them
 * (an update_all that feeds layer 0's returned keys to layer 1 reads them
 * after layer 0 is written).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct span {
  uintptr_t lo, hi; /* [lo, hi); lo == hi: no bytes */
} span;

/* The bytes a 4-D tensor's elements cover (strides may be negative). */
static span tensor_span(const kvc_tensor* t) {
  span s = {0, 0};
  const char* base = (const char*)kvci_tensor_base(t);
  if (!base || t->ndim != 4 || !t->shape) return s;
  int64_t st[4], lo = 0, hi = 0;
  kvci_tensor_strides(t, st);
  for (int i = 0; i < 4; i++) {
    if (t->shape[i] <= 0) return s;
    int64_t reach = (t->shape[i] - 1) * st[i];
    if (reach < 0) lo += reach;
    else hi += reach;
  }
  size_t elem = (size_t)t->dtype.bits / 8u;
  s.lo = (uintptr_t)(base + lo * (int64_t)elem);
  s.hi = (uintptr_t)(base + hi * (int64_t)elem) + elem;
  return s;
}

static span store_span(const void* p, const kvc_layer* l, int64_t d) {
  span s = {0, 0};
  if (!p) return s;
  s.lo = (uintptr_t)p;
  s.hi = s.lo + (uintptr_t)(l->batch * l->heads * l->cap * d) * l->elem;
  return s;
}


/* Whether the tensor's shape or strides array lives in one of the cache's layers. */
static int descriptor_owned(const kvc_cache* c, const kvc_tensor* t) {
  for (uint32_t i = 0; i < c->num_layers; i++) {
    uintptr_t lo = (uintptr_t)c->layers[i], hi = lo + sizeof(kvc_layer);
    uintptr_t a = (uintptr_t)t->shape, b = (uintptr_t)t->strides;
    if ((a >= lo && a < hi) || (b && b >= lo && b < hi)) return 1;
  }
  return 0;
}

/*
 * The memory the cache has handed out views of, as spans sorted by start and merged, built once per update
 * so that checking an input costs a binary search instead of a pass over every layer.
 */
#define OWNED_ON_STACK 384 /* 64 layers: no allocation per update for usual models */
typedef struct owned_spans {
  span* at;
  size_t n;
  span local[OWNED_ON_STACK];
} owned_spans;

static void owned_free(owned_spans* o) {
  if (o->at != o->local) free(o->at);
}

static int cmp_span(const void* a, const void* b) {
  uintptr_t x = ((const span*)a)->lo, y = ((const span*)b)->lo;
  return x < y ? -1 : x > y;
}

static void add(span* at, size_t* n, span s) {
  if (s.lo < s.hi) at[(*n)++] = s;
}

static int owned_build(const kvc_cache* c, owned_spans* o) {
  o->n = 0;
  size_t need = 6 * (size_t)c->num_layers;
  o->at = need <= OWNED_ON_STACK ? o->local : (span*)malloc(sizeof(span) * need);
  if (!o->at) return -1;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (l->initialized) {
      add(o->at, &o->n, store_span(l->k, l, l->k_dim));
      add(o->at, &o->n, store_span(l->v, l, l->v_dim));
    }
    add(o->at, &o->n, tensor_span(&l->views[0].key));
    add(o->at, &o->n, tensor_span(&l->views[0].value));
  }
  /* What the last update returned may live outside the stores (an offloaded layer's retired device copy, a
   * quantized layer's working buffer) until the next update; older returns point at memory already freed,
   * which an input may legitimately occupy now. */
  for (uint32_t i = c->returned_first; i < c->returned_first + c->returned_count && i < c->num_layers; i++) {
    add(o->at, &o->n, tensor_span(&c->layers[i]->views[1].key));
    add(o->at, &o->n, tensor_span(&c->layers[i]->views[1].value));
  }
  qsort(o->at, o->n, sizeof(span), cmp_span);
  size_t m = 0; /* merge overlapping spans, so the spans are disjoint and sorted by both ends */
  for (size_t i = 0; i < o->n; i++) {
    if (m && o->at[i].lo < o->at[m - 1].hi) {
      if (o->at[i].hi > o->at[m - 1].hi) o->at[m - 1].hi = o->at[i].hi;
    } else {
      o->at[m++] = o->at[i];
    }
  }
  o->n = m;
  return 0;
}

/* Whether `s` overlaps one of the owned spans: the last span starting before s.hi decides. */
static int owned_overlaps(const owned_spans* o, span s) {
  if (s.lo >= s.hi) return 0;
  size_t lo = 0, hi = o->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (o->at[mid].lo < s.hi) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && o->at[lo - 1].hi > s.lo;
}

/* A compact copy of `t` in memory of the cache's device; -1 when out of memory. */
static int copy_out(const kvc_cache* c, const kvc_tensor* t, kvc_tensor* out, void** owned, int64_t* shape) {
  size_t elem = (size_t)t->dtype.bits / 8u;
  size_t bytes = (size_t)(t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3]) * elem;
  void* p = c->backend->alloc_zeroed(c->backend->ctx, &c->exec, bytes);
  if (!p) return -1;
  int64_t src[4], dst[4] = {t->shape[1] * t->shape[2] * t->shape[3], t->shape[2] * t->shape[3], t->shape[3], 1};
  kvci_tensor_strides(t, src);
  c->backend->copy_4d(c->backend->ctx, &c->exec, p, dst, kvci_tensor_base(t), src, t->shape, elem);
  *out = *t;
  memcpy(shape, t->shape, sizeof(int64_t) * 4);
  out->shape = shape;
  out->data = p;
  out->byte_offset = 0;
  out->strides = NULL;
  *owned = p;
  return 0;
}

void kvci_update_inputs_free(const kvc_cache* c, kvc_update_inputs* in) {
  for (uint32_t i = 0; in->owned && i < 2 * in->count; i++)
    if (in->owned[i]) c->backend->free(c->backend->ctx, &c->exec, in->owned[i]);
  free(in->owned);
  free(in->copies);
  free(in->dims);
  memset(in, 0, sizeof *in);
}

kvc_error* kvci_update_inputs_unalias(const kvc_cache* c, uint32_t count, const kvc_tensor* keys,
                                     const kvc_tensor* values, kvc_update_inputs* in) {
  memset(in, 0, sizeof *in);
  in->keys = keys;
  in->values = values;
  in->count = count;
  if (c->num_layers == 0) return NULL; /* nothing handed out yet */
  owned_spans own;
  if (owned_build(c, &own)) return kvci_err_oom();
  int any = 0;
  for (uint32_t j = 0; j < 2 * count && !any; j++) {
    const kvc_tensor* t = j < count ? &keys[j] : &values[j - count];
    any = descriptor_owned(c, t) || owned_overlaps(&own, tensor_span(t));
  }
  if (!any) { /* the common case */
    owned_free(&own);
    return NULL;
  }
  in->copies = (kvc_tensor*)malloc(sizeof(kvc_tensor) * 2 * count);
  in->owned = (void**)calloc(2 * (size_t)count, sizeof(void*));
  in->dims = (int64_t*)malloc(sizeof(int64_t) * 8 * 2 * (size_t)count);
  if (!in->copies || !in->owned || !in->dims) {
    owned_free(&own);
    kvci_update_inputs_free(c, in);
    return kvci_err_oom();
  }
  for (uint32_t j = 0; j < 2 * count; j++) {
    const kvc_tensor* t = j < count ? &keys[j] : &values[j - count];
    int64_t* shape = in->dims + 8 * (size_t)j;
    in->copies[j] = *t;
    if (owned_overlaps(&own, tensor_span(t))) {
      if (copy_out(c, t, &in->copies[j], &in->owned[j], shape)) {
        owned_free(&own);
        kvci_update_inputs_free(c, in);
        return kvci_err_oom();
      }
    } else if (descriptor_owned(c, t)) { /* the data is the caller's, the descriptor ours */
      memcpy(shape, t->shape, sizeof(int64_t) * 4);
      in->copies[j].shape = shape;
      if (t->strides) {
        memcpy(shape + 4, t->strides, sizeof(int64_t) * 4);
        in->copies[j].strides = shape + 4;
      }
    }
  }
  owned_free(&own);
  in->keys = in->copies;
  in->values = in->copies + count;
  return NULL;
}
