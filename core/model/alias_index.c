/*
 * core/model/alias_index.c: the memory a cache has handed out, kept between
 * updates, for the alias check of update inputs (ops_alias.c).
 *
 * That memory is every layer's store, the stored views and the views the
 * last update returned; an input overlapping it is copied before anything
 * moves. Sorting those spans on every update cost more than a decode step's
 * copies, and even recomputing them (six per layer) on every call made a
 * loop of per-layer kvc_cache_update calls quadratic in the layers. Yet they
 * change only when a store is allocated, freed or moved, the list of layers
 * changes, or a view is pointed outside its layer's store (a quantized
 * layer's working buffer, an offloaded layer's retired device copy): an
 * ordinary update writes into its stores and moves counters, and the views
 * it fills are windows of those stores (covered by the stores' spans). So
 * every site that does one of those things calls kvci_alias_index_touch,
 * and the next update recomputes the spans (sorting again only when they
 * differ); otherwise it reuses them. A view outside its store lasts until
 * the next update rewrites it, so while the spans include any, every update
 * recomputes them (as every update did before); in the steady state of the
 * plain kinds they include none, and the returned range (the last update's
 * layers) may move freely: the views it brings in are windows of stores.
 *
 * A missed touch would let an aliasing input through, so with the
 * environment variable KVC_CHECK_ALIAS_INDEX set (CTest sets it for every
 * test) each update also computes the index afresh and aborts when the kept
 * one differs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

typedef struct kvc_span_set {
  kvc_span* raw;    /* in layer order, as computed: what the next update compares against */
  kvc_span* sorted; /* sorted by start and merged: disjoint */
  size_t nraw, nsorted, cap;
} kvc_span_set;

typedef struct kvc_alias_index kvc_alias_index;
struct kvc_alias_index {
  kvc_span_set memory;  /* stores and views */
  kvc_span_set layers;  /* the layer structs */
  kvc_span* scratch;    /* where the update's raw spans are computed */
  size_t scratch_cap;
  int current;          /* 0: touched since the spans were computed */
  size_t view_spans;    /* spans of views outside their stores among them */
  /* The descriptor asked about last and the answer (kvci_alias_index_descriptor_in_layer): a per-layer update
     loop passes descriptors at the same addresses call after call (the caller's arrays, a binding's stack). */
  const void *last_shape, *last_strides;
  int last_known, last_in_layer;
};

static void add(kvc_span* at, size_t* n, kvc_span s) {
  if (s.lo < s.hi) at[(*n)++] = s;
}

int kvci_tensor_extent(const kvc_tensor* t, kvc_extent* out) {
  if (t->ndim != 4 || !t->shape) return 0;
  int64_t elem = (int64_t)t->dtype.bits / 8;
  if (!t->strides) { /* compact: the elements, one after another (the per-layer update's usual input) */
    const int64_t* s = t->shape;
    if (s[0] <= 0 || s[1] <= 0 || s[2] <= 0 || s[3] <= 0) return 0;
    out->lo = 0;
    out->hi = s[0] * s[1] * s[2] * s[3] * elem;
    return 1;
  }
  int64_t st[4], lo = 0, hi = 0;
  kvci_tensor_strides(t, st);
  for (int i = 0; i < 4; i++) {
    if (t->shape[i] <= 0) return 0;
    int64_t reach = (t->shape[i] - 1) * st[i];
    if (reach < 0) lo += reach;
    else hi += reach;
  }
  out->lo = lo * elem;
  out->hi = hi * elem + elem;
  return 1;
}

kvc_span kvci_span_at(const void* base, kvc_extent x) {
  kvc_span s = {0, 0};
  if (!base) return s;
  s.lo = (uintptr_t)base + (uintptr_t)x.lo; /* x.lo <= 0: wraps to the subtraction */
  s.hi = (uintptr_t)base + (uintptr_t)x.hi;
  return s;
}

kvc_span kvci_tensor_span(const kvc_tensor* t) {
  kvc_span none = {0, 0};
  kvc_extent x;
  return kvci_tensor_extent(t, &x) ? kvci_span_at(kvci_tensor_base(t), x) : none;
}

static kvc_span store_span(const void* p, const kvc_layer* l, int64_t d) {
  kvc_span s = {0, 0};
  if (!p) return s;
  s.lo = (uintptr_t)p;
  s.hi = s.lo + (uintptr_t)(l->batch * l->heads * l->cap * d) * l->elem;
  return s;
}

/* A view's span, or nothing when it is a window of its layer's store (`store`: that store's pointer). */
static kvc_span view_span(const kvc_tensor* t, const void* store) {
  kvc_span none = {0, 0};
  return t->data && t->data == store ? none : kvci_tensor_span(t);
}

static int cmp_span(const void* a, const void* b) {
  uintptr_t x = ((const kvc_span*)a)->lo, y = ((const kvc_span*)b)->lo;
  return x < y ? -1 : x > y;
}

static int grow(kvc_span** p, size_t n) {
  kvc_span* q = (kvc_span*)realloc(*p, sizeof(kvc_span) * (n ? n : 1));
  if (!q) return -1;
  *p = q;
  return 0;
}

/* Makes `set` hold the raw spans raw[0..n): nothing to do when they are those of last time. -1: out of memory. */
static int set_refresh(kvc_span_set* set, const kvc_span* raw, size_t n) {
  if (n == set->nraw && (n == 0 || !memcmp(raw, set->raw, sizeof(kvc_span) * n))) return 0;
  if (n > set->cap) {
    if (grow(&set->raw, n) || grow(&set->sorted, n)) {
      set->nraw = set->nsorted = 0; /* stale contents must not match next time */
      set->cap = 0;
      return -1;
    }
    set->cap = n;
  }
  memcpy(set->raw, raw, sizeof(kvc_span) * n);
  memcpy(set->sorted, raw, sizeof(kvc_span) * n);
  set->nraw = n;
  qsort(set->sorted, n, sizeof(kvc_span), cmp_span);
  size_t m = 0; /* merge overlapping spans, so the spans are disjoint and sorted by both ends */
  for (size_t i = 0; i < n; i++) {
    if (m && set->sorted[i].lo < set->sorted[m - 1].hi) {
      if (set->sorted[i].hi > set->sorted[m - 1].hi) set->sorted[m - 1].hi = set->sorted[i].hi;
    } else {
      set->sorted[m++] = set->sorted[i];
    }
  }
  set->nsorted = m;
  return 0;
}

/* Whether `s` overlaps one of the set's spans: the last span starting before s.hi decides. */
static int set_overlaps(const kvc_span_set* set, kvc_span s) {
  if (s.lo >= s.hi) return 0;
  /* Sorted and disjoint: outside the hull of the set (a caller's buffer is rarely between the stores) nothing
     overlaps, without the search. */
  if (!set->nsorted || s.hi <= set->sorted[0].lo || s.lo >= set->sorted[set->nsorted - 1].hi) return 0;
  size_t lo = 0, hi = set->nsorted;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (set->sorted[mid].lo < s.hi) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && set->sorted[lo - 1].hi > s.lo;
}

static int scratch_reserve(kvc_alias_index* x, size_t n) {
  if (n <= x->scratch_cap) return 0;
  if (grow(&x->scratch, n)) return -1;
  x->scratch_cap = n;
  return 0;
}

/* Computes the spans of what `c` has handed out into `mem` and `lay`, using x's scratch; *views: how many of
 * them are views outside their stores. -1: out of memory. */
static int compute(const kvc_cache* c, kvc_alias_index* x, kvc_span_set* mem, kvc_span_set* lay, size_t* views) {
  size_t n = 0, stores = 0;
  if (scratch_reserve(x, 6 * (size_t)c->num_layers)) return -1;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (l->initialized) {
      add(x->scratch, &n, store_span(l->k, l, l->k_dim));
      add(x->scratch, &n, store_span(l->v, l, l->v_dim));
      stores = n;
    }
    add(x->scratch, &n, view_span(&l->views[0].key, l->k));
    add(x->scratch, &n, view_span(&l->views[0].value, l->v));
    *views += n - stores;
    stores = n;
  }
  /* What the last update returned may live outside the stores (an offloaded layer's retired device copy, a
   * quantized layer's working buffer) until the next update; older returns point at memory already freed,
   * which an input may legitimately occupy now. */
  for (uint32_t i = c->returned_first; i < c->returned_first + c->returned_count && i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    add(x->scratch, &n, view_span(&l->views[1].key, l->k));
    add(x->scratch, &n, view_span(&l->views[1].value, l->v));
  }
  *views += n - stores;
  x->last_known = 0; /* the layer structs may have moved */
  if (set_refresh(mem, x->scratch, n)) return -1;
  n = 0;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    kvc_span s = {(uintptr_t)c->layers[i], (uintptr_t)c->layers[i] + sizeof(kvc_layer)};
    add(x->scratch, &n, s);
  }
  return set_refresh(lay, x->scratch, n);
}

static int set_equal(const kvc_span_set* a, const kvc_span_set* b) {
  return a->nsorted == b->nsorted && (!a->nsorted || !memcmp(a->sorted, b->sorted, sizeof(kvc_span) * a->nsorted));
}

static void set_free(kvc_span_set* set) {
  free(set->raw);
  free(set->sorted);
}

int kvci_alias_index_verify(const kvc_cache* c) {
  kvc_alias_index* x = c->alias_index;
  if (!x || !x->current) return 0; /* nothing kept: the next refresh computes afresh anyway */
  kvc_span_set mem = {0}, lay = {0};
  size_t views = 0;
  int rc = compute(c, x, &mem, &lay, &views);
  if (rc == 0) rc = set_equal(&mem, &x->memory) && set_equal(&lay, &x->layers) ? 0 : 1;
  else rc = 0; /* out of memory: nothing proven either way */
  set_free(&mem);
  set_free(&lay);
  return rc;
}

void kvci_alias_index_touch(const kvc_cache* c) {
  if (c->alias_index) c->alias_index->current = 0;
}

int kvci_alias_index_refresh(kvc_cache* c) {
  kvc_alias_index* x = c->alias_index;
  if (!x && !(x = c->alias_index = (kvc_alias_index*)calloc(1, sizeof(*x)))) return -1;
  if (!x->current || x->view_spans) {
    x->current = 0; /* until computed in full */
    x->view_spans = 0;
    if (compute(c, x, &x->memory, &x->layers, &x->view_spans)) return -1;
    x->current = 1;
  }
  if (c->check_alias_index && kvci_alias_index_verify(c)) {
    fprintf(stderr, "kvcache: internal error: the alias index kept since the last update differs from the memory "
                    "the cache has handed out (a store or view changed without kvci_alias_index_touch)\n");
    abort();
  }
  return 0;
}

int kvci_alias_index_overlaps(const kvc_cache* c, kvc_span s) {
  return c->alias_index && set_overlaps(&c->alias_index->memory, s);
}

int kvci_alias_index_in_layer(const kvc_cache* c, const void* p) {
  kvc_span s = {(uintptr_t)p, (uintptr_t)p + 1};
  return p && c->alias_index && set_overlaps(&c->alias_index->layers, s);
}

int kvci_alias_index_descriptor_in_layer(const kvc_cache* c, const void* shape, const void* strides) {
  kvc_alias_index* x = c->alias_index;
  if (x && x->last_known && x->last_shape == shape && x->last_strides == strides) return x->last_in_layer;
  int in = kvci_alias_index_in_layer(c, shape) || kvci_alias_index_in_layer(c, strides);
  if (x) {
    x->last_shape = shape, x->last_strides = strides;
    x->last_in_layer = in;
    x->last_known = 1;
  }
  return in;
}

/* In this file, with the lookups it makes, so that the per-input tests of an update (the common case: none
   aliases) are inlined rather than several calls per input. */
int kvci_alias_index_inputs_alias(const kvc_cache* c, uint32_t count, const kvc_tensor* keys,
                                  const kvc_tensor* values) {
  int any = 0;
  /* Inputs usually share one descriptor: it is looked up, and the extent of its elements around the data
   * pointer computed, once (the caller's arrays do not change during the call; ndim is checked to be 4). */
  const int64_t *shape_seen = NULL, *strides_seen = NULL;
  uint8_t bits_seen = 0;
  kvc_extent extent = {0, 0};
  int has_extent = 0;
  for (uint32_t j = 0; j < 2 * count && !any; j++) {
    const kvc_tensor* t = j < count ? &keys[j] : &values[j - count];
    if (j == 0 || t->shape != shape_seen || t->strides != strides_seen || t->dtype.bits != bits_seen) {
      any = kvci_alias_index_descriptor_in_layer(c, t->shape, t->strides);
      shape_seen = t->shape;
      strides_seen = t->strides;
      bits_seen = t->dtype.bits;
      has_extent = kvci_tensor_extent(t, &extent);
    }
    kvc_span s = {0, 0};
    if (has_extent) s = kvci_span_at(kvci_tensor_base(t), extent);
    any = any || kvci_alias_index_overlaps(c, s);
  }
  return any;
}

void kvci_alias_index_free(kvc_cache* c) {
  kvc_alias_index* x = c->alias_index;
  if (!x) return;
  set_free(&x->memory);
  set_free(&x->layers);
  free(x->scratch);
  free(x);
  c->alias_index = NULL;
}
