/*
 * kinds_state.c: see kinds_state.h.
 */
#include "kinds_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void* fz_calloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size);
  if (!p) abort();
  return p;
}

void opt_link(opt_store* s) {
  s->o.config = s->has_config ? &s->cfg : NULL;
  s->cfg.layer_types = s->has_types ? s->types : NULL;
  s->o.quant = s->has_cquant ? &s->cquant : NULL;
  s->o.layers = s->o.preset == KVC_PRESET_CUSTOM && !s->null_layers ? s->layers : NULL;
  for (int i = 0; i < MAX_SPEC; i++) s->layers[i].quant = s->has_lquant[i] ? &s->lquant[i] : NULL;
}

const kvc_cache_options* opt_get(const opt_store* s) { return s->null_options ? NULL : &s->o; }

const char* mname(const group* g, int i) {
  static char buf[4][64];
  static int k;
  char* b = buf[k++ % 4];
  snprintf(b, sizeof buf[0], "m%d (%s)", i, g->m[i].how);
  return b;
}

int gindex(const ctx* c, const group* g) { return (int)(g - c->g); }

/* Incremental and compact modes quantize the same tokens the same way; a member may run the other one. */
kvc_quant_mode flip_mode(kvc_quant_mode m) {
  return m == KVC_QUANT_MODE_INCREMENTAL ? KVC_QUANT_MODE_COMPACT
         : m == KVC_QUANT_MODE_COMPACT   ? KVC_QUANT_MODE_INCREMENTAL
                                         : m;
}

/* The quantizer options of layer `l` as the group's options gave them (for a flipped member, its mode). */
kvc_quant_options quant_of(const group* g, uint32_t l, int flipped) {
  kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
  const opt_store* s = &g->opts;
  if (s->null_options) return q;
  if (s->o.preset == KVC_PRESET_CUSTOM) {
    if (l < s->o.num_layers && s->has_lquant[l]) q = s->lquant[l];
  } else if (s->has_cquant) {
    q = s->cquant;
  }
  if (flipped) q.mode = flip_mode(q.mode);
  return q;
}

int is_lazy(const group* g) {
  const opt_store* o = &g->opts;
  if (o->null_options) return 1;
  return !o->has_config &&
         (o->o.preset == KVC_PRESET_DYNAMIC || o->o.preset == KVC_PRESET_OFFLOADED || o->o.preset == KVC_PRESET_SINK);
}

/* The kind a layer has, or would get when a lazy cache creates it (0: no such layer). */
kvc_layer_kind kind_of(const group* g, uint32_t l) {
  const cache_snap* s = &g->snap[0];
  if (l < s->num_layers) return s->layers[l].info.kind;
  if (!is_lazy(g)) return 0;
  return !g->opts.null_options && g->opts.o.preset == KVC_PRESET_SINK ? KVC_LAYER_SINK : KVC_LAYER_DYNAMIC;
}

int state_allocated(const snap_layer* L) {
  for (uint32_t i = 0; i < L->num_states; i++)
    if (L->states[i].conv.ndim || L->states[i].rec.ndim) return 1;
  return 0;
}

/* Whether a batch operation must move this layer's rows: K/V holding tokens, or an allocated state. */
int takes_part(const snap_layer* L) {
  const kvc_layer_info* I = &L->info;
  if (I->kind != KVC_LAYER_LINEAR && I->is_initialized && I->seq_length > 0) return 1;
  return state_allocated(L);
}

/* The batch of the layers a batch operation moves (-1: none, -2: they disagree). */
int64_t rows_batch(const cache_snap* s) {
  int64_t b = -1;
  for (uint32_t l = 0; l < s->num_layers; l++) {
    const snap_layer* L = &s->layers[l];
    int64_t x = -1;
    if (L->info.kind != KVC_LAYER_LINEAR && L->info.is_initialized) x = L->info.batch_size;
    for (uint32_t i = 0; i < L->num_states && x < 0; i++) {
      if (L->states[i].conv.ndim) x = L->states[i].conv.shape[0];
      if (L->states[i].rec.ndim) x = L->states[i].rec.shape[0];
    }
    if (x < 0) continue;
    if (b >= 0 && x != b) return -2;
    b = x;
  }
  return b;
}

int64_t dtype_bytes(kvc_dtype d) { return d == KVC_DTYPE_FLOAT32 ? 4 : 2; }

int is_offloading_kind(kvc_layer_kind k) {
  return (k >= KVC_LAYER_DYNAMIC && k <= KVC_LAYER_STATIC_CHUNKED) || k == KVC_LAYER_LINEAR_DYNAMIC ||
         k == KVC_LAYER_DYNAMIC_INDEXED || k == KVC_LAYER_STATIC_INDEXED;
}

int kind_has_kv(kvc_layer_kind k) { return k != KVC_LAYER_LINEAR && k != KVC_LAYER_DUMMY; }

kvc_dtype other_dtype(kvc_dtype d) { return d == KVC_DTYPE_BFLOAT16 ? KVC_DTYPE_FLOAT32 : d + 1; }

/* The shape of the next tokens of layer l: the layer's own, or the plan's. */
geom layer_geom(const group* g, uint32_t l) {
  const lplan* p = &g->L[l % MAX_LAYERS];
  geom x = {g->B, p->H, p->Dk, p->Dv, g->dtype};
  const cache_snap* s = &g->snap[0];
  if (l >= s->num_layers) return x;
  const snap_layer* L = &s->layers[l];
  const kvc_layer_info* I = &L->info;
  if (I->kind != KVC_LAYER_LINEAR && I->is_initialized) {
    x.B = I->batch_size;
    x.H = I->num_kv_heads;
    x.Dk = I->k_head_dim;
    x.Dv = I->v_head_dim;
    x.dt = I->dtype;
  } else if (state_allocated(L)) {
    x.B = I->batch_size;
  }
  return x;
}

int is_static_kind(kvc_layer_kind k) {
  return k == KVC_LAYER_STATIC || k == KVC_LAYER_STATIC_SLIDING || k == KVC_LAYER_STATIC_CHUNKED ||
         k == KVC_LAYER_LINEAR_STATIC || k == KVC_LAYER_LINEAR_STATIC_SLIDING || k == KVC_LAYER_STATIC_INDEXED;
}

int is_dynamic_sliding_kind(kvc_layer_kind k) {
  return k == KVC_LAYER_DYNAMIC_SLIDING || k == KVC_LAYER_DYNAMIC_CHUNKED || k == KVC_LAYER_LINEAR_DYNAMIC_SLIDING;
}

/* The largest batch of any layer or state (what bounds repeat-interleave). */
int64_t max_batch(const group* g) {
  const cache_snap* s = &g->snap[0];
  int64_t b = g->B;
  for (uint32_t l = 0; l < s->num_layers; l++) {
    const snap_layer* L = &s->layers[l];
    if (L->info.batch_size > b) b = L->info.batch_size;
    for (uint32_t i = 0; i < L->num_states; i++) {
      if (L->states[i].conv.ndim && L->states[i].conv.shape[0] > b) b = L->states[i].conv.shape[0];
      if (L->states[i].rec.ndim && L->states[i].rec.shape[0] > b) b = L->states[i].rec.shape[0];
    }
  }
  return b;
}

int64_t group_batch(const group* g) {
  int64_t b = rows_batch(&g->snap[0]);
  return b > 0 ? b : g->B;
}

kvc_offload resolved_offload(const opt_store* s) {
  if (s->null_options || s->o.offload != KVC_OFFLOAD_DEFAULT) return s->null_options ? KVC_OFFLOAD_NONE : s->o.offload;
  switch (s->o.preset) {
    case KVC_PRESET_OFFLOADED: return KVC_OFFLOAD_ALL;
    case KVC_PRESET_OFFLOADED_STATIC:
    case KVC_PRESET_OFFLOADED_HYBRID: return KVC_OFFLOAD_NON_SLIDING;
    default: return KVC_OFFLOAD_NONE;
  }
}

/* Swaps incremental and compact mode in every quantized layer's options; 0 when no layer has either. */
int flip_options(opt_store* s) {
  int any = 0;
  if (s->null_options) return 0;
  for (uint32_t i = 0; i < MAX_SPEC + 1; i++) {
    int is_layer = s->o.preset == KVC_PRESET_CUSTOM && i < s->o.num_layers && i < MAX_SPEC &&
                   s->layers[i].kind == KVC_LAYER_QUANTIZED;
    int is_cache = s->o.preset == KVC_PRESET_QUANTIZED && i == MAX_SPEC;
    if (!is_layer && !is_cache) continue;
    int* has = is_cache ? &s->has_cquant : &s->has_lquant[i];
    kvc_quant_options* q = is_cache ? &s->cquant : &s->lquant[i];
    if (!*has) {
      *has = 1;
      kvc_quant_options_init(q);
    }
    kvc_quant_mode m = flip_mode(q->mode);
    any |= m != q->mode;
    q->mode = m;
  }
  opt_link(s);
  return any;
}

const snap_state* state_of(const group* g, uint32_t layer, uint32_t st) {
  const cache_snap* s = &g->snap[0];
  if (layer >= s->num_layers || st >= s->layers[layer].num_states) return NULL;
  return &s->layers[layer].states[st];
}

int64_t sink_window_max(const group* g) {
  int64_t w = 0;
  const cache_snap* s = &g->snap[0];
  for (uint32_t l = 0; l < s->num_layers; l++)
    if (s->layers[l].info.kind == KVC_LAYER_SINK && s->layers[l].info.window > w) w = s->layers[l].info.window;
  if (!g->opts.null_options && g->opts.o.preset == KVC_PRESET_SINK && g->opts.o.window_length > w)
    w = g->opts.o.window_length;
  return w;
}
