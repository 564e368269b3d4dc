/*
 * kinds_state.h: the state of fuzz_kinds.c: the reader of the input bytes,
 * the options a group of caches was created from, the shapes planned for
 * layers that have none yet, the groups and their members, and what the
 * operations ask of them (kinds, batches, shapes of the next inputs).
 */
#ifndef KVC_FUZZ_KINDS_STATE_H
#define KVC_FUZZ_KINDS_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/cache_snapshot.h"
#include "kvcache.h"
#include "reader.h"

#define MAX_GROUPS 2
#define MAX_MEMBERS 3
#define MAX_LAYERS 6 /* layers a plan describes; lazy caches are not grown further */
#define MAX_SPEC 4   /* layers of a custom cache or a config */
#define MAX_BATCH 6
#define MAX_LEN 40 /* stored tokens and recorded conv columns beyond which updates are skipped */
#define MAX_OPS 120
#define MAX_SPLITS 6
#define MAX_STACK 5


/* Options of a cache, with the pointers between its parts set by opt_link (the store may move). */
typedef struct opt_store {
  int null_options, has_config, has_types, has_cquant, null_layers;
  int has_lquant[MAX_SPEC];
  kvc_cache_options o;
  kvc_model_config cfg;
  kvc_layer_type types[MAX_SPEC];
  kvc_layer_options layers[MAX_SPEC];
  kvc_quant_options lquant[MAX_SPEC];
  kvc_quant_options cquant;
} opt_store;

/* Shapes the fuzzer gives a layer that has none yet. */
typedef struct lplan {
  int64_t H, Dk, Dv;
  int64_t C; /* conv channels */
  int rec_ndim;
  int64_t rec_shape[4]; /* [0] is the batch */
  kvc_dtype conv_dt, rec_dt;
} lplan;

/* One cache of a group, and how it came to be (for messages). */
typedef struct member {
  kvc_cache* c;
  int tier_id; /* members with the same id must agree on tiers too */
  int flipped; /* its quantized layers run compact mode where m0's run incremental mode, and the reverse */
  char how[40];
} member;

/* Library caches that must behave the same under the same calls; m[0] is the one the options created. */
typedef struct group {
  int used, n;
  member m[MAX_MEMBERS];
  cache_snap snap[MAX_MEMBERS]; /* every member as the last operation left it */
  opt_store opts;
  int64_t B; /* batch of layers that have none yet */
  kvc_dtype dtype;
  int narrow;
  lplan L[MAX_LAYERS];
  int rope_style; /* 0 no RoPE, 1 the whole table [T, dim], 2 this call's rows [batch, n, dim] */
  kvc_dtype rope_dt;
  int64_t rope_partial;
} group;

/* One input's run: its bytes, the groups, and counters that make every token and value new. */
typedef struct ctx {
  reader r;
  group g[MAX_GROUPS];
  uint32_t next_tok, next_val;
  int next_tier;
  int has_cuda;
} ctx;

/* The shape and dtype of the next K/V inputs of a layer. */
typedef struct geom {
  int64_t B, H, Dk, Dv;
  kvc_dtype dt;
} geom;

void* fz_calloc(size_t n, size_t size);
void opt_link(opt_store* s);
const kvc_cache_options* opt_get(const opt_store* s);
/* "mI (how it was made)", for messages; the last four results stay valid. */
const char* mname(const group* g, int i);
int gindex(const ctx* c, const group* g);
/* Incremental and compact modes quantize the same tokens the same way; a member may run the other one. */
kvc_quant_mode flip_mode(kvc_quant_mode m);
/* The quantizer options of layer `l` as the group's options gave them (for a flipped member, its mode). */
kvc_quant_options quant_of(const group* g, uint32_t l, int flipped);
int is_lazy(const group* g);
/* The kind a layer has, or would get when a lazy cache creates it (0: no such layer). */
kvc_layer_kind kind_of(const group* g, uint32_t l);
/* Whether any state pair of a LINEAR kind's layer has a conv or recurrent state. */
int state_allocated(const snap_layer* L);
/* Whether a batch operation must move this layer's rows: K/V holding tokens, or an allocated state. */
int takes_part(const snap_layer* L);
/* The batch of the layers a batch operation moves (-1: none, -2: they disagree). */
int64_t rows_batch(const cache_snap* s);
int64_t dtype_bytes(kvc_dtype d);
/* Kinds whose K/V may be in the host tier: the attention kinds of 0.1 and LINEAR_DYNAMIC. */
int is_offloading_kind(kvc_layer_kind k);
/* Whether layers of kind k store keys and values (all but LINEAR and DUMMY). */
int kind_has_kv(kvc_layer_kind k);
/* A dtype other than d (for dtype faults). */
kvc_dtype other_dtype(kvc_dtype d);
/* The shape of the next tokens of layer l: the layer's own, or the plan's. */
geom layer_geom(const group* g, uint32_t l);
int is_static_kind(kvc_layer_kind k);
int is_dynamic_sliding_kind(kvc_layer_kind k);
/* The largest batch of any layer or state (what bounds repeat-interleave). */
int64_t max_batch(const group* g);
/* The batch of new inputs: that of the layers holding rows, else the plan's. */
int64_t group_batch(const group* g);
/* The offload mode the options resolve to (KVC_OFFLOAD_DEFAULT: the preset's). */
kvc_offload resolved_offload(const opt_store* s);
/* Swaps incremental and compact mode in every quantized layer's options; 0 when no layer has either. */
int flip_options(opt_store* s);
/* State pair `st` of `layer` in m0's snapshot (NULL: no such pair). */
const snap_state* state_of(const group* g, uint32_t layer, uint32_t st);
/* The largest window of the cache's sink layers (0: none), what a RoPE table must cover. */
int64_t sink_window_max(const group* g);

#endif /* KVC_FUZZ_KINDS_STATE_H */
