/*
 * reference_model.c: see reference_model.h. Clarity over speed everywhere:
 * grids are rebuilt on every change, nothing is shared or reused.
 */
#include "reference_model.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- grids */

static void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size);
  if (!p) abort(); /* the model has no out-of-memory story; the fuzzer's inputs are tiny */
  return p;
}

static ref_grid grid_new(int64_t B, int64_t H, int64_t L) {
  ref_grid g = {B, H, L, NULL};
  g.tok = xcalloc((size_t)(B * H * L), sizeof(uint32_t));
  return g;
}

void ref_grid_free(ref_grid* g) {
  free(g->tok);
  g->tok = NULL;
  g->B = g->H = g->L = 0;
}

static uint32_t* at(const ref_grid* g, int64_t b, int64_t h, int64_t l) {
  return &g->tok[(b * g->H + h) * g->L + l];
}

static ref_grid grid_copy(const ref_grid* g) {
  ref_grid c = grid_new(g->B, g->H, g->L);
  memcpy(c.tok, g->tok, (size_t)(g->B * g->H * g->L) * sizeof(uint32_t));
  return c;
}

/* Positions [from, to) of `a` followed by every position of `b` (b may be NULL). */
static ref_grid grid_cat(const ref_grid* a, int64_t from, int64_t to, const ref_grid* b) {
  int64_t nb = b ? b->L : 0;
  ref_grid g = grid_new(a->B, a->H, (to - from) + nb);
  for (int64_t i = 0; i < a->B; i++)
    for (int64_t h = 0; h < a->H; h++) {
      for (int64_t l = from; l < to; l++) *at(&g, i, h, l - from) = *at(a, i, h, l);
      for (int64_t l = 0; l < nb; l++) *at(&g, i, h, (to - from) + l) = *at(b, i, h, l);
    }
  return g;
}

/* Replaces *g by positions [from, to) of itself. */
static void grid_keep(ref_grid* g, int64_t from, int64_t to) {
  ref_grid k = grid_cat(g, from, to, NULL);
  ref_grid_free(g);
  *g = k;
}

/* Replaces *g by its batch rows idx[0..n). */
static void grid_rows(ref_grid* g, const int64_t* idx, size_t n) {
  ref_grid r = grid_new((int64_t)n, g->H, g->L);
  for (size_t i = 0; i < n; i++)
    for (int64_t h = 0; h < g->H; h++)
      for (int64_t l = 0; l < g->L; l++) *at(&r, (int64_t)i, h, l) = *at(g, idx[i], h, l);
  ref_grid_free(g);
  *g = r;
}

/* ---------------------------------------------------------------- kinds */

int ref_is_static_kind(kvc_layer_kind k) {
  return k == KVC_LAYER_STATIC || k == KVC_LAYER_STATIC_SLIDING || k == KVC_LAYER_STATIC_CHUNKED ||
         k == KVC_LAYER_STATIC_INDEXED;
}

int ref_is_indexed_kind(kvc_layer_kind k) { return k == KVC_LAYER_DYNAMIC_INDEXED || k == KVC_LAYER_STATIC_INDEXED; }

/* What the K/V of a layer behaves as: an indexed kind is a dynamic or static layer plus its indexer. */
static kvc_layer_kind kv_kind(kvc_layer_kind k) {
  if (k == KVC_LAYER_DYNAMIC_INDEXED) return KVC_LAYER_DYNAMIC;
  if (k == KVC_LAYER_STATIC_INDEXED) return KVC_LAYER_STATIC;
  return k;
}

int ref_layer_has_batch(const ref_layer* L) { return L->initialized || L->ix_init; }

int ref_is_sliding_kind(kvc_layer_kind k) {
  return k == KVC_LAYER_DYNAMIC_SLIDING || k == KVC_LAYER_DYNAMIC_CHUNKED || k == KVC_LAYER_STATIC_SLIDING ||
         k == KVC_LAYER_STATIC_CHUNKED;
}

static int is_dyn_sliding(kvc_layer_kind k) {
  return k == KVC_LAYER_DYNAMIC_SLIDING || k == KVC_LAYER_DYNAMIC_CHUNKED;
}


int64_t ref_layer_capacity(const ref_layer* L) {
  switch (kv_kind(L->kind)) {
    case KVC_LAYER_DUMMY: return 0; /* stores nothing */
    case KVC_LAYER_STATIC: return L->max_cache_len;
    case KVC_LAYER_STATIC_SLIDING:
    case KVC_LAYER_STATIC_CHUNKED: return L->window < L->max_cache_len ? L->window : L->max_cache_len;
    case KVC_LAYER_DYNAMIC_SLIDING:
    case KVC_LAYER_DYNAMIC_CHUNKED: return L->window - 1;
    default: return -1;
  }
}

int64_t ref_layer_stored_length(const ref_layer* L) {
  return L->initialized ? L->stored.L : 0;
}

int ref_cache_all_dynamic(const ref_cache* c) {
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (ref_is_static_kind(c->layers[i].kind)) return 0;
  return 1;
}

static ref_layer layer_new(kvc_layer_kind kind, int64_t window, int64_t max_cache_len) {
  ref_layer L;
  memset(&L, 0, sizeof L);
  L.kind = kind;
  L.window = ref_is_sliding_kind(kind) ? window : 0;
  L.max_cache_len = ref_is_static_kind(kind) ? max_cache_len : 0;
  return L;
}

static void layer_init(ref_layer* L, int64_t B, int64_t H, int64_t Dk, int64_t Dv, kvc_dtype dtype) {
  L->initialized = 1;
  L->B = B;
  L->H = H;
  L->Dk = Dk;
  L->Dv = Dv;
  L->dtype = dtype;
  L->cum = 0;
  L->stored = grid_new(B, H, ref_is_static_kind(L->kind) ? ref_layer_capacity(L) : 0);
}

static void cache_push(ref_cache* c, ref_layer L) {
  ref_layer* grown = realloc(c->layers, (c->num_layers + 1) * sizeof(ref_layer));
  if (!grown) abort();
  c->layers = grown;
  c->layers[c->num_layers++] = L;
}

void ref_cache_free(ref_cache* c) {
  for (uint32_t i = 0; i < c->num_layers; i++) {
    ref_grid_free(&c->layers[i].stored);
    ref_grid_free(&c->layers[i].ix);
  }
  free(c->layers);
  memset(c, 0, sizeof *c);
}

void ref_cache_copy(const ref_cache* from, ref_cache* out) {
  memset(out, 0, sizeof *out);
  out->lazy = from->lazy;
  for (uint32_t i = 0; i < from->num_layers; i++) {
    ref_layer L = from->layers[i];
    L.stored = L.initialized ? grid_copy(&from->layers[i].stored) : (ref_grid){0, 0, 0, NULL};
    L.ix = L.ix_init ? grid_copy(&from->layers[i].ix) : (ref_grid){0, 0, 0, NULL};
    cache_push(out, L);
  }
}

/* -------------------------------------------------------------- presets */

/* Layer types as transformers derives them (docs/semantics.md, 'Layer types and presets', steps 1-2). */
static kvc_code derive_types(const kvc_model_config* cfg, kvc_layer_type** types, uint32_t* n) {
  if (cfg->struct_size != sizeof(kvc_model_config)) return KVC_ERROR_INVALID_ARGUMENT;
  if (cfg->num_hidden_layers < 1 || cfg->sliding_window < 0 || cfg->attention_chunk_size < 0)
    return KVC_ERROR_INVALID_ARGUMENT;
  if (cfg->num_kv_shared_layers >= cfg->num_hidden_layers) return KVC_ERROR_INVALID_ARGUMENT;
  kvc_layer_type* t = xcalloc(cfg->num_hidden_layers, sizeof *t);
  for (uint32_t i = 0; i < cfg->num_hidden_layers; i++) {
    if (cfg->layer_types) t[i] = cfg->layer_types[i];
    else if (cfg->sliding_window > 0) t[i] = KVC_LAYER_TYPE_SLIDING_ATTENTION;
    else if (cfg->attention_chunk_size > 0) t[i] = KVC_LAYER_TYPE_CHUNKED_ATTENTION;
    else t[i] = KVC_LAYER_TYPE_FULL_ATTENTION;
    int known = (t[i] >= KVC_LAYER_TYPE_FULL_ATTENTION && t[i] <= KVC_LAYER_TYPE_CHUNKED_ATTENTION) ||
                t[i] == KVC_LAYER_TYPE_DUMMY || t[i] == KVC_LAYER_TYPE_INDEXED_ATTENTION;
    if (!known) {
      free(t);
      return KVC_ERROR_INVALID_ARGUMENT;
    }
  }
  *types = t;
  *n = cfg->num_hidden_layers - cfg->num_kv_shared_layers;
  return KVC_OK;
}

/* DYNAMIC and STATIC presets. transformers 5.x shares one window kwarg in
 * which the chunk size overwrites the sliding window (docs/semantics.md, 'Layer types and presets', step 3);
 * kvcache gives each layer type its own parameter, as 4.57 did
 * (docs/differences-from-transformers.md, item 6). */
static kvc_code preset_by_types(const kvc_model_config* cfg, int is_static, int64_t M, ref_cache* out) {
  kvc_layer_type* t;
  uint32_t n;
  kvc_code code = derive_types(cfg, &t, &n);
  if (code) return code;
  for (uint32_t i = 0; i < n; i++) {
    kvc_layer_kind k;
    int64_t W = 0;
    if (t[i] == KVC_LAYER_TYPE_FULL_ATTENTION) {
      k = is_static ? KVC_LAYER_STATIC : KVC_LAYER_DYNAMIC;
    } else if (t[i] == KVC_LAYER_TYPE_INDEXED_ATTENTION) {
      k = is_static ? KVC_LAYER_STATIC_INDEXED : KVC_LAYER_DYNAMIC_INDEXED;
    } else if (t[i] == KVC_LAYER_TYPE_DUMMY) {
      k = KVC_LAYER_DUMMY; /* DummyLayer in both of transformers' mappings */
    } else if (t[i] == KVC_LAYER_TYPE_SLIDING_ATTENTION) {
      k = is_static ? KVC_LAYER_STATIC_SLIDING : KVC_LAYER_DYNAMIC_SLIDING;
      W = cfg->sliding_window;
    } else {
      k = is_static ? KVC_LAYER_STATIC_CHUNKED : KVC_LAYER_DYNAMIC_CHUNKED;
      W = cfg->attention_chunk_size;
    }
    if (ref_is_sliding_kind(k) && W < 1) {
      free(t);
      ref_cache_free(out);
      return KVC_ERROR_INVALID_ARGUMENT;
    }
    cache_push(out, layer_new(k, W, M));
  }
  free(t);
  return KVC_OK;
}

/* HYBRID and HYBRID_CHUNKED: layer_types (dummy and indexed layers as in the STATIC preset), else every
 * pattern-th layer full. */
static kvc_code preset_hybrid(const kvc_model_config* cfg, int chunked, int64_t M, ref_cache* out) {
  int64_t W = chunked && cfg->attention_chunk_size > 0 ? cfg->attention_chunk_size : cfg->sliding_window;
  if (W < 1) return KVC_ERROR_INVALID_ARGUMENT;
  kvc_layer_type* t;
  uint32_t n;
  kvc_code code = derive_types(cfg, &t, &n);
  if (code) return code;
  uint32_t P = cfg->sliding_window_pattern ? cfg->sliding_window_pattern : 2;
  kvc_layer_kind local = chunked ? KVC_LAYER_STATIC_CHUNKED : KVC_LAYER_STATIC_SLIDING;
  for (uint32_t i = 0; i < n; i++) {
    int full = cfg->layer_types ? t[i] == KVC_LAYER_TYPE_FULL_ATTENTION : (i + 1) % P == 0;
    kvc_layer_kind k = full ? KVC_LAYER_STATIC : local;
    if (cfg->layer_types && t[i] == KVC_LAYER_TYPE_DUMMY) k = KVC_LAYER_DUMMY;
    if (cfg->layer_types && t[i] == KVC_LAYER_TYPE_INDEXED_ATTENTION) k = KVC_LAYER_STATIC_INDEXED;
    cache_push(out, layer_new(k, W, M));
  }
  free(t);
  return KVC_OK;
}

static kvc_code preset_custom(const kvc_cache_options* o, ref_cache* out) {
  if (o->num_layers < 1 || !o->layers) return KVC_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < o->num_layers; i++) {
    const kvc_layer_options* l = &o->layers[i];
    if (l->struct_size != sizeof(kvc_layer_options)) return KVC_ERROR_INVALID_ARGUMENT;
    int known = (l->kind >= KVC_LAYER_DYNAMIC && l->kind <= KVC_LAYER_STATIC_CHUNKED) || l->kind == KVC_LAYER_DUMMY ||
                ref_is_indexed_kind(l->kind);
    if (!known) return KVC_ERROR_INVALID_ARGUMENT;
    if (ref_is_sliding_kind(l->kind) && l->window < 1) return KVC_ERROR_INVALID_ARGUMENT;
    if (ref_is_static_kind(l->kind) && l->max_cache_len < 1) return KVC_ERROR_INVALID_ARGUMENT;
  }
  for (uint32_t i = 0; i < o->num_layers; i++)
    cache_push(out, layer_new(o->layers[i].kind, o->layers[i].window, o->layers[i].max_cache_len));
  return KVC_OK;
}

kvc_code ref_cache_create(const kvc_cache_options* o, ref_cache* out) {
  ref_cache c;
  memset(&c, 0, sizeof c);
  kvc_code code = KVC_OK;
  if (!o) {
    c.lazy = 1;
  } else if (o->struct_size != sizeof(kvc_cache_options)) {
    code = KVC_ERROR_INVALID_ARGUMENT;
  } else if (o->preset < KVC_PRESET_CUSTOM || o->preset > KVC_PRESET_HYBRID_CHUNKED) {
    code = KVC_ERROR_INVALID_ARGUMENT;
  } else if (o->preset == KVC_PRESET_CUSTOM) {
    code = preset_custom(o, &c);
  } else if (o->preset == KVC_PRESET_DYNAMIC) {
    if (!o->config) c.lazy = 1;
    else code = preset_by_types(o->config, 0, 0, &c);
  } else if (!o->config || o->max_cache_len < 1) {
    code = KVC_ERROR_INVALID_ARGUMENT;
  } else if (o->preset == KVC_PRESET_STATIC) {
    code = preset_by_types(o->config, 1, o->max_cache_len, &c);
  } else if (o->preset == KVC_PRESET_SLIDING_WINDOW) {
    kvc_layer_type* t;
    uint32_t n;
    if (o->config->sliding_window < 1) code = KVC_ERROR_INVALID_ARGUMENT;
    else if ((code = derive_types(o->config, &t, &n)) == KVC_OK) {
      for (uint32_t i = 0; i < n; i++)
        cache_push(&c, layer_new(KVC_LAYER_STATIC_SLIDING, o->config->sliding_window, o->max_cache_len));
      free(t);
    }
  } else {
    code = preset_hybrid(o->config, o->preset == KVC_PRESET_HYBRID_CHUNKED, o->max_cache_len, &c);
  }
  /* the device is looked up once the options are known to be valid; the
   * fuzzer only names devices this build lacks */
  if (!code && o && o->device.device_type != KVC_DEVICE_CPU) code = KVC_ERROR_NO_DEVICE;
  if (code) {
    ref_cache_free(&c);
    return code;
  }
  *out = c;
  return KVC_OK;
}

/* --------------------------------------------------------------- update */

static int valid_dtype(kvc_dtype d) {
  return d == KVC_DTYPE_FLOAT32 || d == KVC_DTYPE_FLOAT16 || d == KVC_DTYPE_BFLOAT16;
}

static kvc_code check_tensor(const ref_tensor* t) {
  if (!t->present) return KVC_ERROR_INVALID_ARGUMENT;
  if (!t->on_cpu) return KVC_ERROR_DEVICE_MISMATCH;
  if (t->ndim != 4) return KVC_ERROR_SHAPE_MISMATCH;
  if (!valid_dtype(t->dtype)) return KVC_ERROR_DTYPE_MISMATCH;
  if (t->shape[0] < 1 || t->shape[1] < 1 || t->shape[3] < 1) return KVC_ERROR_SHAPE_MISMATCH;
  if (t->no_data) return KVC_ERROR_INVALID_ARGUMENT;
  return KVC_OK;
}

static kvc_code check_input(const ref_layer* L, const ref_input* in) {
  const ref_tensor *k = &in->key, *v = &in->value;
  kvc_code code = check_tensor(k);
  if (!code) code = check_tensor(v);
  if (code) return code;
  if (k->dtype != v->dtype) return KVC_ERROR_DTYPE_MISMATCH;
  if (L && L->initialized && k->dtype != L->dtype) return KVC_ERROR_DTYPE_MISMATCH;
  if (k->shape[0] != v->shape[0] || k->shape[1] != v->shape[1] || k->shape[2] != v->shape[2])
    return KVC_ERROR_SHAPE_MISMATCH;
  /* indexer keys stored before the K/V's first update fix the layer's batch */
  if (L && !L->initialized && L->ix_init && k->shape[0] != L->B) return KVC_ERROR_SHAPE_MISMATCH;
  if (L && L->initialized &&
      (k->shape[0] != L->B || k->shape[1] != L->H || k->shape[3] != L->Dk || v->shape[3] != L->Dv))
    return KVC_ERROR_SHAPE_MISMATCH;
  return KVC_OK;
}

static kvc_code check_state(const ref_layer* L, int64_t n, const ref_positions* pos) {
  int has_pos = pos && pos->pos;
  if (has_pos) {
    if (!L || !ref_is_static_kind(L->kind)) return KVC_OK; /* ignored by dynamic layers, as in 4.57 */
    if (pos->count != (uint64_t)n) return KVC_ERROR_INVALID_ARGUMENT;
    /* Positions pick slots of a static layer, and of a static sliding layer
     * while the call leaves it not full ('Static sliding and chunked layers', case 4, as in 4.57); once the
     * window fills, the counter decides and positions are only sanity-checked. */
    int64_t cap = ref_layer_capacity(L);
    int picks_slots = kv_kind(L->kind) == KVC_LAYER_STATIC || L->cum + n <= cap;
    for (uint32_t i = 0; i < pos->count; i++)
      if (pos->pos[i] < 0 || (picks_slots && pos->pos[i] >= cap)) return KVC_ERROR_OUT_OF_RANGE;
    return KVC_OK;
  }
  if (L && kv_kind(L->kind) == KVC_LAYER_STATIC && L->cum + n > L->max_cache_len) return KVC_ERROR_OUT_OF_RANGE;
  return KVC_OK;
}

kvc_code ref_update_check(const ref_cache* c, uint32_t layer, const ref_input* in, const ref_positions* pos) {
  if (layer >= c->num_layers && !c->lazy) return KVC_ERROR_OUT_OF_RANGE;
  const ref_layer* L = layer < c->num_layers ? &c->layers[layer] : NULL;
  kvc_code code = check_input(L, in);
  if (code) return code;
  if (L && L->kind == KVC_LAYER_DUMMY) return KVC_ERROR_UNSUPPORTED; /* it stores nothing */
  return check_state(L, in->key.shape[2], pos); /* 0 new tokens is a valid, empty update */
}

static void update_dynamic(ref_layer* L, const ref_grid* nw, ref_grid* ret) {
  ref_grid full = grid_cat(&L->stored, 0, L->stored.L, nw);
  ref_grid_free(&L->stored);
  L->stored = full;
  if (ret) *ret = grid_copy(&full);
}

/* docs/semantics.md, 'Dynamic sliding and chunked layers': return the kept tail plus the new tokens, then keep the last
 * W-1 (kvcache: W == 1 keeps none). A recording layer keeps everything but
 * still returns only the last W-1 stored tokens plus the new ones, as
 * transformers 5.23 does (docs/differences-from-transformers.md). */
static void update_dynamic_sliding(ref_layer* L, const ref_grid* nw, ref_grid* ret) {
  int64_t len = L->stored.L, tail = len < L->window - 1 ? len : L->window - 1;
  ref_grid full = grid_cat(&L->stored, 0, len, nw);
  L->cum += nw->L;
  if (ret) *ret = grid_cat(&L->stored, len - tail, len, nw);
  int64_t keep = L->record ? full.L : (full.L < L->window - 1 ? full.L : L->window - 1);
  ref_grid_free(&L->stored);
  L->stored = grid_cat(&full, full.L - keep, full.L, NULL);
  ref_grid_free(&full);
}

static void write_slots(ref_layer* L, const ref_grid* nw, const int64_t* slots) {
  for (int64_t b = 0; b < L->B; b++)
    for (int64_t h = 0; h < L->H; h++)
      for (int64_t s = 0; s < nw->L; s++) *at(&L->stored, b, h, slots[s]) = *at(nw, b, h, s);
}

/* docs/semantics.md, 'Static layers' (the counter, and explicit cache_position). */
static void update_static(ref_layer* L, const ref_grid* nw, const ref_positions* pos, ref_grid* ret) {
  int64_t* slots = xcalloc((size_t)nw->L, sizeof *slots);
  for (int64_t s = 0; s < nw->L; s++) slots[s] = pos && pos->pos ? pos->pos[s] : L->cum + s;
  write_slots(L, nw, slots);
  if (pos && pos->pos) {
    for (int64_t s = 0; s < nw->L; s++)
      if (slots[s] + 1 > L->cum) L->cum = slots[s] + 1;
  } else {
    L->cum += nw->L;
  }
  free(slots);
  if (ret) *ret = grid_copy(&L->stored);
}

/* docs/semantics.md, 'Static sliding and chunked layers', the four branches. */
static void update_static_sliding(ref_layer* L, const ref_grid* nw, const ref_positions* pos, ref_grid* ret) {
  int64_t cap = ref_layer_capacity(L), c = L->cum, n = nw->L;
  L->cum += n;
  if (c < cap && c + n <= cap) { /* still not full: write in place, return the buffer */
    int64_t* slots = xcalloc((size_t)n, sizeof *slots);
    for (int64_t s = 0; s < n; s++) slots[s] = pos && pos->pos ? pos->pos[s] : c + s;
    write_slots(L, nw, slots);
    free(slots);
    if (ret) *ret = grid_copy(&L->stored);
    return;
  }
  if (c >= cap && n == 0) { /* the branch-2 formula with nothing new: the buffer minus its oldest */
    if (ret) *ret = grid_cat(&L->stored, 1, cap, NULL);
    return;
  }
  ref_grid full;
  if (c >= cap) full = grid_cat(&L->stored, 1, cap, nw); /* full already: drop the oldest */
  else full = grid_cat(&L->stored, 0, c, nw);            /* becomes full with this call */
  ref_grid_free(&L->stored);
  L->stored = grid_cat(&full, full.L - cap, full.L, NULL);
  if (c >= cap && n == 1) { /* steady decoding returns the rolled buffer */
    ref_grid_free(&full);
    if (ret) *ret = grid_copy(&L->stored);
    return;
  }
  if (ret) *ret = full;
  else ref_grid_free(&full);
}

static void ensure_layers(ref_cache* c, uint32_t n) {
  while (c->num_layers < n) cache_push(c, layer_new(KVC_LAYER_DYNAMIC, 0, 0));
}

static void apply_update(ref_cache* c, uint32_t layer, const ref_input* in, const ref_positions* pos,
                         ref_grid* ret) {
  ensure_layers(c, layer + 1);
  ref_layer* L = &c->layers[layer];
  const int64_t* ks = in->key.shape;
  if (!L->initialized) layer_init(L, ks[0], ks[1], ks[3], in->value.shape[3], in->key.dtype);
  ref_grid nw = {ks[0], ks[1], ks[2], (uint32_t*)in->tok};
  switch (kv_kind(L->kind)) {
    case KVC_LAYER_DYNAMIC: update_dynamic(L, &nw, ret); break;
    case KVC_LAYER_DYNAMIC_SLIDING:
    case KVC_LAYER_DYNAMIC_CHUNKED: update_dynamic_sliding(L, &nw, ret); break;
    case KVC_LAYER_STATIC: update_static(L, &nw, pos, ret); break;
    default: update_static_sliding(L, &nw, pos, ret); break;
  }
}

kvc_code ref_update(ref_cache* c, uint32_t layer, const ref_input* in, const ref_positions* pos, ref_grid* ret) {
  kvc_code code = ref_update_check(c, layer, in, pos);
  if (code) return code;
  apply_update(c, layer, in, pos, ret);
  return KVC_OK;
}

kvc_code ref_update_all(ref_cache* c, uint32_t n, const ref_input* ins, const ref_positions* pos,
                        ref_grid* rets) {
  if (n < 1) return KVC_ERROR_INVALID_ARGUMENT;
  if (n > c->num_layers && !c->lazy) return KVC_ERROR_OUT_OF_RANGE;
  for (uint32_t i = 0; i < n; i++) {
    kvc_code code = ref_update_check(c, i, &ins[i], pos);
    if (code) return code;
  }
  for (uint32_t i = 0; i < n; i++) apply_update(c, i, &ins[i], pos, rets ? &rets[i] : NULL);
  return KVC_OK;
}

/* ------------------------------------------------------- update_indexer */

kvc_code ref_update_indexer_check(const ref_cache* c, uint32_t layer, const ref_tensor* x) {
  if (layer >= c->num_layers) return KVC_ERROR_OUT_OF_RANGE; /* it never creates layers */
  const ref_layer* L = &c->layers[layer];
  if (!ref_is_indexed_kind(L->kind) || !x->present) return KVC_ERROR_INVALID_ARGUMENT;
  if (x->ndim != 3) return KVC_ERROR_SHAPE_MISMATCH;
  if (!valid_dtype(x->dtype)) return KVC_ERROR_DTYPE_MISMATCH;
  if (!x->on_cpu) return KVC_ERROR_DEVICE_MISMATCH;
  if (x->shape[0] < 1 || x->shape[1] < 0 || x->shape[2] < 1) return KVC_ERROR_SHAPE_MISMATCH;
  if (x->no_data && x->shape[1] > 0) return KVC_ERROR_INVALID_ARGUMENT;
  if (L->ix_init && x->dtype != L->ix_dtype) return KVC_ERROR_DTYPE_MISMATCH;
  if (L->ix_init && x->shape[2] != L->ix_D) return KVC_ERROR_SHAPE_MISMATCH;
  if (ref_layer_has_batch(L) && x->shape[0] != L->B) return KVC_ERROR_SHAPE_MISMATCH;
  if (ref_is_static_kind(L->kind) && (L->ix_init ? L->ix_cum : 0) + x->shape[1] > L->max_cache_len)
    return KVC_ERROR_OUT_OF_RANGE;
  return KVC_OK;
}

/* docs/semantics.md, 'Indexed layers': the first call fixes dtype and width; dynamic appends and returns every
 * key, static writes at its own counter and returns the whole zero-initialized buffer. */
kvc_code ref_update_indexer(ref_cache* c, uint32_t layer, const ref_tensor* x, const uint32_t* tok, ref_grid* ret) {
  kvc_code code = ref_update_indexer_check(c, layer, x);
  if (code) return code;
  ref_layer* L = &c->layers[layer];
  int stat = ref_is_static_kind(L->kind);
  if (!L->ix_init) {
    L->ix_init = 1;
    L->ix_dtype = x->dtype;
    L->ix_D = x->shape[2];
    L->B = x->shape[0];
    L->ix = grid_new(L->B, 1, stat ? L->max_cache_len : 0);
    L->ix_cum = 0;
  }
  ref_grid nw = {x->shape[0], 1, x->shape[1], (uint32_t*)tok};
  if (stat) {
    for (int64_t b = 0; b < nw.B; b++)
      for (int64_t s = 0; s < nw.L; s++) *at(&L->ix, b, 0, L->ix_cum + s) = *at(&nw, b, 0, s);
    L->ix_cum += nw.L;
  } else {
    ref_grid all = grid_cat(&L->ix, 0, L->ix.L, &nw);
    ref_grid_free(&L->ix);
    L->ix = all;
  }
  if (ret) *ret = grid_copy(&L->ix);
  return KVC_OK;
}

/* ----------------------------------------------------------------- crop */

static int64_t seq_of(const ref_layer* L) {
  if (!L->initialized) return 0;
  return kv_kind(L->kind) == KVC_LAYER_DYNAMIC ? L->stored.L : L->cum;
}

static kvc_code crop_check_layer(const ref_layer* L, int64_t x) {
  /* transformers 5.24: a static layer crops; a static sliding one only while its window has not moved. */
  if (ref_is_static_kind(L->kind))
    return kv_kind(L->kind) != KVC_LAYER_STATIC && x != 0 && L->cum > ref_layer_capacity(L) ? KVC_ERROR_INVALID_STATE
                                                                                              : KVC_OK;
  if (!L->initialized || !is_dyn_sliding(L->kind) || L->cum < L->window) return KVC_OK;
  if (!L->record || x > 0) return KVC_ERROR_INVALID_STATE;
  return KVC_OK;
}

/* docs/semantics.md, 'Dynamic layers': negative removes, zero keeps, positive is an absolute length. */
static void crop_dynamic(ref_layer* L, int64_t x) {
  int64_t len = L->stored.L;
  if (x > 0) {
    if (x < len) grid_keep(&L->stored, 0, x);
  } else if (x < 0) {
    int64_t t = x == INT64_MIN ? INT64_MAX : -x;
    grid_keep(&L->stored, 0, t >= len ? 0 : len - t);
  }
}

/* docs/semantics.md, 'Static layers': the counter moves back (clamped at 0; positive: the absolute length), the slots stay. */
static int64_t cropped_counter(int64_t cum, int64_t x) {
  int64_t keep = x > 0 ? x : x == INT64_MIN ? 0 : cum + x;
  return x != 0 && keep < cum ? (keep < 0 ? 0 : keep) : cum;
}

static void crop_static(ref_layer* L, int64_t x) { L->cum = cropped_counter(L->cum, x); }

/* docs/semantics.md, 'Indexed layers': after the K/V, the dynamic indexer loses tokens as a dynamic layer does
 * (positive: the absolute length), the static one moves its own counter back as a static layer does. */
static void crop_indexer(ref_layer* L, int64_t x) {
  if (!L->ix_init || x == 0) return;
  if (ref_is_static_kind(L->kind)) {
    L->ix_cum = cropped_counter(L->ix_cum, x);
    return;
  }
  int64_t len = L->ix.L, keep = x > 0 ? x : (x < -len ? 0 : len + x);
  if (keep < len) grid_keep(&L->ix, 0, keep);
}

static void crop_kv(ref_layer* L, int64_t x) {
  if (!L->initialized) return; /* kvcache: cropping a layer that never saw a token is a no-op */
  if (ref_is_static_kind(L->kind)) {
    crop_static(L, x);
    return;
  }
  if (!is_dyn_sliding(L->kind)) {
    crop_dynamic(L, x);
    return;
  }
  if (L->cum < L->window) {
    crop_dynamic(L, x);
    L->cum = L->stored.L;
    return;
  }
  /* window reached, recording: stored[-(W-1)-t : -t] with Python's clamping */
  int64_t len = L->stored.L, keep = L->window - 1;
  int64_t t = x == INT64_MIN ? INT64_MAX : -x;
  int64_t end = t >= len ? 0 : len - t;
  int64_t start = end > keep ? end - keep : 0;
  grid_keep(&L->stored, start, end);
  L->cum = t >= L->cum ? 0 : L->cum - t; /* kvcache clamps at 0 where transformers goes negative */
}

static void crop_layer(ref_layer* L, int64_t x) {
  crop_kv(L, x);
  crop_indexer(L, x);
}

kvc_code ref_crop_check(const ref_cache* c, int64_t x) {
  for (uint32_t i = 0; i < c->num_layers; i++) {
    kvc_code code = crop_check_layer(&c->layers[i], x);
    if (code) return code;
  }
  return KVC_OK;
}

kvc_code ref_crop(ref_cache* c, int64_t x) {
  kvc_code code = ref_crop_check(c, x);
  if (code) return code;
  for (uint32_t i = 0; i < c->num_layers; i++) crop_layer(&c->layers[i], x);
  return KVC_OK;
}

kvc_code ref_activate_past_recording(ref_cache* c) {
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (is_dyn_sliding(c->layers[i].kind)) c->layers[i].record = 1;
  return KVC_OK;
}

/* ---------------------------------------------------------- batch moves */

/* K/V that batch operations move: transformers skips layers that hold nothing. */
static int holds_tokens(const ref_layer* L) { return L->initialized && seq_of(L) > 0; }

/* Layers batch operations act on: K/V holding tokens, or stored indexer keys (a layer's rows move together). */
static int moves_rows(const ref_layer* L) { return holds_tokens(L) || L->ix_init; }

/* Row b of L becomes its former row idx[b]. An initialized K/V holding no token follows the new batch only
 * when the batch changes (its slots are not moved: kvcache keeps one batch per layer, transformers moves a
 * store only when it holds tokens). */
static void move_layer_rows(ref_layer* L, const int64_t* idx, size_t n, int same_batch) {
  if (holds_tokens(L)) {
    grid_rows(&L->stored, idx, n);
  } else if (L->initialized && !same_batch) {
    ref_grid z = grid_new((int64_t)n, L->H, L->stored.L);
    ref_grid_free(&L->stored);
    L->stored = z;
  }
  if (L->ix_init) grid_rows(&L->ix, idx, n);
  L->B = (int64_t)n;
}

static kvc_code check_indices(const ref_cache* c, const int64_t* idx, size_t count) {
  if (count < 1 || !idx) return KVC_ERROR_INVALID_ARGUMENT;
  /* As transformers, only layers that hold tokens index anything. */
  for (size_t i = 0; i < count; i++)
    for (uint32_t l = 0; l < c->num_layers; l++)
      if (moves_rows(&c->layers[l]) && (idx[i] < 0 || idx[i] >= c->layers[l].B)) return KVC_ERROR_OUT_OF_RANGE;
  return KVC_OK;
}

static void take_rows(ref_cache* c, const int64_t* idx, size_t count) {
  int same_batch = 1;
  for (uint32_t l = 0; l < c->num_layers; l++)
    if (moves_rows(&c->layers[l]) && c->layers[l].B != (int64_t)count) same_batch = 0;
  for (uint32_t l = 0; l < c->num_layers; l++)
    if (moves_rows(&c->layers[l])) move_layer_rows(&c->layers[l], idx, count, same_batch);
}

kvc_code ref_reorder_check(const ref_cache* c, const int64_t* idx, size_t count) {
  return check_indices(c, idx, count);
}

/* Reorder and select_indices: the rows of idx taken when `checked` (their check's code) is KVC_OK. */
static kvc_code take_rows_checked(ref_cache* c, kvc_code checked, const int64_t* idx, size_t count) {
  if (checked) return checked;
  take_rows(c, idx, count);
  return KVC_OK;
}

kvc_code ref_reorder(ref_cache* c, const int64_t* idx, size_t count) {
  return take_rows_checked(c, ref_reorder_check(c, idx, count), idx, count);
}

kvc_code ref_repeat_interleave_check(const ref_cache* c, int64_t r) {
  if (!ref_cache_all_dynamic(c)) return KVC_ERROR_UNSUPPORTED;
  if (r < 1) return KVC_ERROR_INVALID_ARGUMENT;
  return KVC_OK;
}

kvc_code ref_repeat_interleave(ref_cache* c, int64_t r) {
  kvc_code code = ref_repeat_interleave_check(c, r);
  if (code || r == 1) return code;
  for (uint32_t l = 0; l < c->num_layers; l++) {
    ref_layer* L = &c->layers[l];
    if (!moves_rows(L)) continue;
    size_t n = (size_t)(L->B * r);
    int64_t* idx = xcalloc(n, sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = (int64_t)i / r;
    move_layer_rows(L, idx, n, 0);
    free(idx);
  }
  return KVC_OK;
}

kvc_code ref_select_indices_check(const ref_cache* c, const int64_t* idx, size_t count) {
  if (!ref_cache_all_dynamic(c)) return KVC_ERROR_UNSUPPORTED;
  return check_indices(c, idx, count);
}

kvc_code ref_select_indices(ref_cache* c, const int64_t* idx, size_t count) {
  return take_rows_checked(c, ref_select_indices_check(c, idx, count), idx, count);
}

/* ---------------------------------------------------------------- split */

kvc_code ref_batch_split_check(const ref_cache* c, int64_t full, int64_t split, size_t capacity, size_t* count) {
  if (split < 1) return KVC_ERROR_INVALID_ARGUMENT;
  /* The cache's batch is that of its initialized layers: without one, or
   * when they disagree, there is no batch to split. */
  int64_t B = -1;
  for (uint32_t l = 0; l < c->num_layers; l++) {
    if (!ref_layer_has_batch(&c->layers[l])) continue;
    if (B >= 0 && c->layers[l].B != B) return KVC_ERROR_INVALID_STATE;
    B = c->layers[l].B;
  }
  if (B < 0) return KVC_ERROR_INVALID_STATE;
  if (full != B) return KVC_ERROR_INVALID_ARGUMENT;
  size_t n = (size_t)((full + split - 1) / split);
  if (capacity < n) return KVC_ERROR_INVALID_ARGUMENT;
  if (count) *count = n;
  return KVC_OK;
}

kvc_code ref_batch_split(const ref_cache* c, int64_t full, int64_t split, ref_cache* out, size_t capacity,
                         size_t* count) {
  size_t n;
  kvc_code code = ref_batch_split_check(c, full, split, capacity, &n);
  if (code) return code;
  for (size_t s = 0; s < n; s++) {
    int64_t from = (int64_t)s * split, to = from + split < full ? from + split : full;
    ref_cache_copy(c, &out[s]);
    int64_t* idx = xcalloc((size_t)(to - from), sizeof *idx);
    for (int64_t i = from; i < to; i++) idx[i - from] = i;
    for (uint32_t l = 0; l < out[s].num_layers; l++) {
      ref_layer* L = &out[s].layers[l];
      if (L->initialized) grid_rows(&L->stored, idx, (size_t)(to - from));
      if (L->ix_init) grid_rows(&L->ix, idx, (size_t)(to - from));
      if (ref_layer_has_batch(L)) L->B = to - from;
    }
    free(idx);
  }
  *count = n;
  return KVC_OK;
}

/* Why two layers cannot be stacked (KVC_OK if they can). The splits must
 * agree on everything but the batch, counters included
 * (docs/differences-from-transformers.md, item 12); each disagreement has
 * the code of its kind, checked in this order. */
/* The indexer keys of two indexed layers: present in both or neither, then dtype, width, length (the static
 * counter) and capacity (a static layer's max_cache_len; the dynamic store of the few tokens the fuzzer writes
 * never outgrows its first 64 slots). */
static kvc_code indexer_mismatch(const ref_layer* a, const ref_layer* b) {
  if (a->ix_init != b->ix_init) return KVC_ERROR_INVALID_STATE;
  if (!a->ix_init) return KVC_OK;
  if (a->ix_dtype != b->ix_dtype) return KVC_ERROR_DTYPE_MISMATCH;
  int stat = ref_is_static_kind(a->kind);
  int64_t la = stat ? a->ix_cum : a->ix.L, lb = stat ? b->ix_cum : b->ix.L;
  int64_t ca = stat ? a->max_cache_len : 64, cb = stat ? b->max_cache_len : 64;
  return a->ix_D != b->ix_D || la != lb || ca != cb ? KVC_ERROR_INVALID_STATE : KVC_OK;
}

static kvc_code stack_mismatch(const ref_layer* a, const ref_layer* b) {
  if (a->kind != b->kind) return KVC_ERROR_INVALID_ARGUMENT;
  if (ref_is_indexed_kind(a->kind)) {
    kvc_code code = indexer_mismatch(a, b);
    if (code) return code;
  }
  if (a->window != b->window || a->max_cache_len != b->max_cache_len) return KVC_ERROR_INVALID_ARGUMENT;
  if (a->initialized != b->initialized) return KVC_ERROR_INVALID_STATE;
  if (!a->initialized) return KVC_OK;
  if (a->dtype != b->dtype) return KVC_ERROR_DTYPE_MISMATCH;
  if (a->H != b->H || a->Dk != b->Dk || a->Dv != b->Dv) return KVC_ERROR_SHAPE_MISMATCH;
  if (a->stored.L != b->stored.L) return KVC_ERROR_INVALID_ARGUMENT;
  if (a->cum != b->cum || a->record != b->record) return KVC_ERROR_INVALID_STATE;
  return KVC_OK;
}

/* The K/V grids (indexer 0) or indexer grids of layer l of every split, one after the other along the batch. */
static void stack_grid(const ref_cache* const* splits, size_t count, uint32_t l, int indexer, int64_t B,
                       ref_grid* out) {
  const ref_grid* first = indexer ? &splits[0]->layers[l].ix : &splits[0]->layers[l].stored;
  ref_grid g = grid_new(B, first->H, first->L);
  int64_t row = 0;
  for (size_t s = 0; s < count; s++) {
    const ref_grid* src = indexer ? &splits[s]->layers[l].ix : &splits[s]->layers[l].stored;
    for (int64_t b = 0; b < src->B; b++, row++)
      for (int64_t h = 0; h < src->H; h++)
        for (int64_t i = 0; i < src->L; i++) *at(&g, row, h, i) = *at(src, b, h, i);
  }
  ref_grid_free(out);
  *out = g;
}

kvc_code ref_from_batch_splits(const ref_cache* const* splits, size_t count, ref_cache* out) {
  if (count < 1 || !splits) return KVC_ERROR_INVALID_ARGUMENT;
  for (size_t s = 0; s < count; s++) {
    if (!splits[s]) return KVC_ERROR_INVALID_ARGUMENT;
    if (splits[s]->num_layers != splits[0]->num_layers) return KVC_ERROR_INVALID_ARGUMENT;
    for (uint32_t l = 0; l < splits[0]->num_layers; l++) {
      kvc_code code = stack_mismatch(&splits[0]->layers[l], &splits[s]->layers[l]);
      if (code) return code;
    }
  }
  ref_cache_copy(splits[0], out);
  for (uint32_t l = 0; l < out->num_layers; l++) {
    ref_layer* L = &out->layers[l];
    if (!ref_layer_has_batch(L)) continue;
    int64_t B = 0;
    for (size_t s = 0; s < count; s++) B += splits[s]->layers[l].B;
    if (L->initialized) stack_grid(splits, count, l, 0, B, &L->stored);
    if (L->ix_init) stack_grid(splits, count, l, 1, B, &L->ix);
    L->B = B;
  }
  return KVC_OK;
}

/* ---------------------------------------------------------- reset, init */

/* kvcache empties dynamic layers (transformers zeroes them and keeps the length). An indexer is dropped by a
 * dynamic layer (uninitialized again; the batch stays the K/V's, if any) and zeroed by a static one. */
kvc_code ref_reset(ref_cache* c) {
  for (uint32_t l = 0; l < c->num_layers; l++) {
    ref_layer* L = &c->layers[l];
    if (L->initialized) {
      L->cum = 0;
      if (ref_is_static_kind(L->kind)) memset(L->stored.tok, 0, (size_t)(L->B * L->H * L->stored.L) * 4);
      else grid_keep(&L->stored, 0, 0);
    }
    if (!L->ix_init) continue;
    if (ref_is_static_kind(L->kind)) {
      memset(L->ix.tok, 0, (size_t)(L->ix.B * L->ix.L) * 4);
      L->ix_cum = 0;
    } else {
      ref_grid_free(&L->ix);
      L->ix_init = 0;
      if (!L->initialized) L->B = 0;
    }
  }
  return KVC_OK;
}

kvc_code ref_early_initialization(ref_cache* c, const kvc_init_options* o) {
  if (!o || o->struct_size != sizeof(kvc_init_options)) return KVC_ERROR_INVALID_ARGUMENT;
  if (o->batch_size < 1 || !valid_dtype(o->dtype) || o->v_head_dim < 0) return KVC_ERROR_INVALID_ARGUMENT;
  if (!o->num_kv_heads_per_layer && o->num_kv_heads < 1) return KVC_ERROR_INVALID_ARGUMENT;
  if (!o->head_dim_per_layer && o->k_head_dim < 1) return KVC_ERROR_INVALID_ARGUMENT;
  for (uint32_t l = 0; l < c->num_layers; l++) { /* layer by layer; a dummy layer's entries are not read */
    const ref_layer* L = &c->layers[l];
    if (L->kind == KVC_LAYER_DUMMY) continue;
    if (o->num_kv_heads_per_layer && o->num_kv_heads_per_layer[l] < 1) return KVC_ERROR_INVALID_ARGUMENT;
    if (o->head_dim_per_layer && o->head_dim_per_layer[l] < 1) return KVC_ERROR_INVALID_ARGUMENT;
    /* stored indexer keys fix the batch the K/V must take */
    if (!L->initialized && L->ix_init && o->batch_size != L->B) return KVC_ERROR_SHAPE_MISMATCH;
  }
  for (uint32_t l = 0; l < c->num_layers; l++) {
    ref_layer* L = &c->layers[l];
    if (L->initialized || L->kind == KVC_LAYER_DUMMY) continue;
    int64_t H = o->num_kv_heads_per_layer ? o->num_kv_heads_per_layer[l] : o->num_kv_heads;
    int64_t Dk = o->head_dim_per_layer ? o->head_dim_per_layer[l] : o->k_head_dim;
    int64_t Dv = o->head_dim_per_layer ? Dk : (o->v_head_dim ? o->v_head_dim : Dk);
    layer_init(L, o->batch_size, H, Dk, Dv, o->dtype);
  }
  return KVC_OK;
}

/* -------------------------------------------------------------- queries */

int64_t ref_seq_length(const ref_cache* c, uint32_t layer) {
  return layer < c->num_layers ? seq_of(&c->layers[layer]) : 0;
}

kvc_code ref_query_layer(const ref_cache* c, uint32_t* layer) {
  if (*layer >= c->num_layers || c->layers[*layer].kind != KVC_LAYER_DUMMY) return KVC_OK;
  if (*layer != 0) return KVC_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (c->layers[i].kind != KVC_LAYER_DUMMY) {
      *layer = i;
      return KVC_OK;
    }
  return KVC_ERROR_INVALID_ARGUMENT;
}

kvc_code ref_cache_seq_length(const ref_cache* c, uint32_t layer, int64_t* out) {
  kvc_code code = ref_query_layer(c, &layer);
  if (!code) *out = ref_seq_length(c, layer);
  return code;
}

static int64_t layer_max_length(const ref_layer* L) {
  if (kv_kind(L->kind) == KVC_LAYER_DYNAMIC || L->kind == KVC_LAYER_DUMMY) return -1;
  if (is_dyn_sliding(L->kind)) return L->window;
  return ref_layer_capacity(L);
}

int64_t ref_max_length(const ref_cache* c, int32_t layer) {
  if (layer == KVC_ALL_LAYERS) {
    int64_t m = -1;
    for (uint32_t i = 0; i < c->num_layers; i++)
      if (layer_max_length(&c->layers[i]) > m) m = layer_max_length(&c->layers[i]);
    return m;
  }
  if (layer < 0 || (uint32_t)layer >= c->num_layers) return -1;
  return layer_max_length(&c->layers[layer]);
}

int64_t ref_usable_length(const ref_cache* c, int64_t n, uint32_t layer) {
  int64_t max = layer < c->num_layers ? layer_max_length(&c->layers[layer]) : -1;
  int64_t seq = ref_seq_length(c, layer);
  if (max >= 0 && seq + n > max) return max - n;
  return seq;
}

kvc_code ref_mask_sizes(const ref_cache* c, int64_t q, uint32_t layer, int64_t* len, int64_t* off) {
  *len = q;
  *off = 0;
  if (layer >= c->num_layers) return KVC_OK;
  kvc_code code = ref_query_layer(c, &layer);
  if (code) return code;
  const ref_layer* L = &c->layers[layer];
  int64_t cum = L->initialized ? L->cum : 0;
  kvc_layer_kind k = kv_kind(L->kind);
  if (k == KVC_LAYER_DYNAMIC) {
    *len = seq_of(L) + q;
  } else if (is_dyn_sliding(L->kind)) {
    int64_t W = L->window;
    *off = cum - W + 1 > 0 ? cum - W + 1 : 0;
    *len = cum >= W ? W - 1 + q : cum + q;
  } else if (k == KVC_LAYER_STATIC) {
    *len = L->max_cache_len;
  } else {
    int64_t Wm = ref_layer_capacity(L);
    *off = cum - Wm + 1 > 0 ? cum - Wm + 1 : 0;
    if (cum >= Wm) *len = Wm + q - 1;
    else if (Wm < cum + q) *len = cum + q;
    else *len = Wm;
  }
  return KVC_OK;
}

kvc_code ref_batch_size(const ref_cache* c, int64_t* out) {
  int64_t b = -1;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const ref_layer* L = &c->layers[i];
    if (!ref_is_static_kind(L->kind) || !L->initialized) continue;
    if (b >= 0 && L->B != b) return KVC_ERROR_INVALID_STATE;
    b = L->B;
  }
  *out = b;
  return KVC_OK;
}

/* ------------------------------------------------------ encoder-decoder */

static void set_flag(ref_ed* ed, uint32_t layer, uint8_t v) {
  if (layer >= ed->num_flags) {
    uint8_t* grown = realloc(ed->updated, layer + 1);
    if (!grown) abort();
    memset(grown + ed->num_flags, 0, layer + 1 - ed->num_flags);
    ed->updated = grown;
    ed->num_flags = layer + 1;
  }
  ed->updated[layer] = v;
}

void ref_ed_create(ref_cache* self, ref_cache* cross, ref_ed* out) {
  memset(out, 0, sizeof *out);
  out->self = *self;
  out->cross = *cross;
  memset(self, 0, sizeof *self);
  memset(cross, 0, sizeof *cross);
  for (uint32_t i = 0; i < out->cross.num_layers; i++) { /* kvc_cache_seq_length of each layer; a refusal reads 0 */
    int64_t seq = 0;
    ref_cache_seq_length(&out->cross, i, &seq);
    set_flag(out, i, seq > 0);
  }
}

void ref_ed_free(ref_ed* ed) {
  ref_cache_free(&ed->self);
  ref_cache_free(&ed->cross);
  free(ed->updated);
  memset(ed, 0, sizeof *ed);
}

void ref_ed_copy(const ref_ed* from, ref_ed* out) {
  memset(out, 0, sizeof *out);
  ref_cache_copy(&from->self, &out->self);
  ref_cache_copy(&from->cross, &out->cross);
  for (uint32_t i = 0; i < from->num_flags; i++) set_flag(out, i, from->updated[i]);
}

int ref_ed_is_updated(const ref_ed* ed, uint32_t layer) {
  return layer < ed->num_flags && ed->updated[layer];
}

kvc_code ref_ed_update_cross(ref_ed* ed, uint32_t layer, const ref_input* in, ref_grid* ret) {
  if (ref_ed_is_updated(ed, layer)) {
    /* the stored K/V is returned (when asked for); a dummy layer 0 counts as updated when the first attention
     * layer holds tokens (is_updated comes from the redirected seq_length, as in transformers) but has none */
    if (ed->cross.layers[layer].kind == KVC_LAYER_DUMMY) return ret ? KVC_ERROR_UNSUPPORTED : KVC_OK;
    if (ret) *ret = grid_copy(&ed->cross.layers[layer].stored);
    return KVC_OK;
  }
  if (!in) return KVC_ERROR_INVALID_ARGUMENT;
  kvc_code code = ref_update(&ed->cross, layer, in, NULL, ret);
  if (code == KVC_OK) set_flag(ed, layer, 1);
  return code;
}

static void copy_flags(ref_ed* out, const ref_ed* from) {
  free(out->updated);
  out->updated = NULL;
  out->num_flags = 0;
  for (uint32_t l = 0; l < from->num_flags; l++) set_flag(out, l, from->updated[l]);
}

static int ed_dynamic(const ref_ed* ed) {
  return ref_cache_all_dynamic(&ed->self) && ref_cache_all_dynamic(&ed->cross);
}

kvc_code ref_ed_crop(ref_ed* ed, int64_t x) {
  if (!ed_dynamic(ed)) return KVC_ERROR_UNSUPPORTED;
  return ref_crop(&ed->self, x);
}

/* Reorder and select_indices of a pair: `check` on both halves, then `take` on both when neither refused. */
static kvc_code ed_take_rows(ref_ed* ed, kvc_code (*check)(const ref_cache*, const int64_t*, size_t),
                             kvc_code (*take)(ref_cache*, const int64_t*, size_t), const int64_t* idx, size_t count) {
  kvc_code code = check(&ed->self, idx, count);
  if (!code) code = check(&ed->cross, idx, count);
  if (code) return code;
  take(&ed->self, idx, count);
  take(&ed->cross, idx, count);
  return KVC_OK;
}

kvc_code ref_ed_reorder(ref_ed* ed, const int64_t* idx, size_t count) {
  return ed_take_rows(ed, ref_reorder_check, ref_reorder, idx, count);
}

kvc_code ref_ed_repeat_interleave(ref_ed* ed, int64_t r) {
  if (!ed_dynamic(ed)) return KVC_ERROR_UNSUPPORTED;
  kvc_code code = ref_repeat_interleave_check(&ed->self, r);
  if (code) return code;
  ref_repeat_interleave(&ed->self, r);
  ref_repeat_interleave(&ed->cross, r);
  return KVC_OK;
}

kvc_code ref_ed_select_indices(ref_ed* ed, const int64_t* idx, size_t count) {
  if (!ed_dynamic(ed)) return KVC_ERROR_UNSUPPORTED;
  return ed_take_rows(ed, ref_select_indices_check, ref_select_indices, idx, count);
}

kvc_code ref_ed_batch_split(const ref_ed* ed, int64_t full, int64_t split, ref_ed* out, size_t capacity,
                            size_t* count) {
  if (!ed_dynamic(ed)) return KVC_ERROR_UNSUPPORTED;
  size_t n;
  kvc_code code = ref_batch_split_check(&ed->self, full, split, capacity, &n);
  if (!code) code = ref_batch_split_check(&ed->cross, full, split, capacity, &n);
  if (code) return code;
  ref_cache* selfs = xcalloc(n, sizeof *selfs);
  ref_cache* crosses = xcalloc(n, sizeof *crosses);
  ref_batch_split(&ed->self, full, split, selfs, n, &n);
  ref_batch_split(&ed->cross, full, split, crosses, n, &n);
  for (size_t i = 0; i < n; i++) {
    ref_ed_create(&selfs[i], &crosses[i], &out[i]);
    copy_flags(&out[i], ed);
  }
  free(selfs);
  free(crosses);
  *count = n;
  return KVC_OK;
}

kvc_code ref_ed_from_batch_splits(const ref_ed* const* splits, size_t count, ref_ed* out) {
  if (count < 1 || !splits) return KVC_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < count; i++)
    if (!ed_dynamic(splits[i])) return KVC_ERROR_UNSUPPORTED;
  const ref_cache** selfs = xcalloc(count, sizeof *selfs);
  const ref_cache** crosses = xcalloc(count, sizeof *crosses);
  for (size_t i = 0; i < count; i++) {
    selfs[i] = &splits[i]->self;
    crosses[i] = &splits[i]->cross;
  }
  ref_cache s, x;
  kvc_code code = ref_from_batch_splits(selfs, count, &s);
  if (!code) {
    code = ref_from_batch_splits(crosses, count, &x);
    if (code) ref_cache_free(&s);
  }
  free(selfs);
  free(crosses);
  if (code) return code;
  ref_ed_create(&s, &x, out);
  copy_flags(out, splits[0]);
  return KVC_OK;
}

kvc_code ref_ed_reset(ref_ed* ed) {
  ref_reset(&ed->self);
  ref_reset(&ed->cross);
  for (uint32_t i = 0; i < ed->num_flags; i++) ed->updated[i] = 0;
  return KVC_OK;
}
