/*
 * fuzz_ops.c: differential fuzzer of kvcache's public ABI.
 *
 * The input bytes are decoded into a sequence of operations on up to four
 * caches (plain caches of every layer kind and preset, and encoder-decoder
 * pairs). Each operation runs on the library and on the naive reference model
 * of reference_model.c; afterwards every observable of every live cache is
 * compared: error codes, returned and stored views (bit-exact, see
 * tensor_codec.h), lengths, mask sizes, layer info, memory accounting. Any
 * difference prints the trace of operations and aborts, which libFuzzer
 * reports as a crash.
 *
 * Without libFuzzer (KVC_FUZZ_STANDALONE, any C11 compiler) the same target
 * replays files and runs pseudo-random inputs, see driver.c.
 */
#define _POSIX_C_SOURCE 200809L /* opendir and stat, for the standalone replay */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

/* The build compiles one source per fuzz target (tests/fuzz/fuzz_<name>.c),
 * so the target's helpers are part of this translation unit. */
#include "observe.c"
#include "reader.c"
#include "reference_model.c"
#include "report.c"
#include "tensor_codec.c"

#define FUZZ_TARGET_NAME "fuzz_ops"
#include "driver.c"

#define MAX_SLOTS 4
#define MAX_LAYERS 8   /* lazy caches grow no further, plans repeat beyond */
#define MAX_BATCH 8
#define MAX_DYN_LEN 40 /* dynamic layers stop growing here (keeps inputs fast) */
#define MAX_OPS 200
#define MAX_SPLITS 16

static void* fz_calloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size);
  if (!p) abort();
  return p;
}

/* ------------------------------------------------------------ the state */

/* Shapes the fuzzer uses for layers that have none yet. */
typedef struct plan {
  int64_t B;
  int64_t H[MAX_LAYERS], Dk[MAX_LAYERS], Dv[MAX_LAYERS];
  kvc_dtype dtype;
} plan;

typedef struct slot {
  int used, is_ed;
  kvc_cache* cache; /* plain slot */
  ref_cache ref;
  kvc_encoder_decoder_cache* ed; /* encoder-decoder slot */
  ref_ed red;
  plan p, px; /* px: the cross-attention cache's plan */
} slot;

typedef struct ctx {
  reader r;
  slot s[MAX_SLOTS];
  uint32_t next_tok;
  int has_cuda;
} ctx;

/* One cache an operation acts on: a plain slot or one half of a pair. */
typedef struct target {
  kvc_cache* c;
  ref_cache* ref;
  plan* p;
  char name[16];
} target;

static int64_t layer_batch(const ref_cache* r) {
  for (uint32_t i = 0; i < r->num_layers; i++)
    if (r->layers[i].initialized) return r->layers[i].B;
  return 0;
}

/* The largest batch of any layer: what bounds repeat-interleave. */
static int64_t max_batch(const ref_cache* r) {
  int64_t b = 1;
  for (uint32_t i = 0; i < r->num_layers; i++)
    if (r->layers[i].initialized && r->layers[i].B > b) b = r->layers[i].B;
  return b;
}

static int64_t gen_batch(const target* t) {
  int64_t b = layer_batch(t->ref);
  return b ? b : t->p->B;
}

/* Shape of the next tokens of `layer`: the layer's own, or the plan's. */
static void layer_shape(const target* t, uint32_t layer, int64_t* B, int64_t* H, int64_t* Dk, int64_t* Dv,
                        kvc_dtype* dt) {
  if (layer < t->ref->num_layers && t->ref->layers[layer].initialized) {
    const ref_layer* L = &t->ref->layers[layer];
    *B = L->B;
    *H = L->H;
    *Dk = L->Dk;
    *Dv = L->Dv;
    *dt = L->dtype;
    return;
  }
  *B = gen_batch(t);
  *H = t->p->H[layer % MAX_LAYERS];
  *Dk = t->p->Dk[layer % MAX_LAYERS];
  *Dv = t->p->Dv[layer % MAX_LAYERS];
  *dt = t->p->dtype;
}

static target slot_target(ctx* c, int i, int cross) {
  target t;
  slot* s = &c->s[i];
  if (!s->is_ed) {
    t.c = s->cache;
    t.ref = &s->ref;
    t.p = &s->p;
    snprintf(t.name, sizeof t.name, "s%d", i);
  } else if (!cross) {
    t.c = kvc_encoder_decoder_cache_self_attention(s->ed);
    t.ref = &s->red.self;
    t.p = &s->p;
    snprintf(t.name, sizeof t.name, "s%d.self", i);
  } else {
    t.c = kvc_encoder_decoder_cache_cross_attention(s->ed);
    t.ref = &s->red.cross;
    t.p = &s->px;
    snprintf(t.name, sizeof t.name, "s%d.cross", i);
  }
  return t;
}

/* A used slot (or -1), chosen by the next byte. */
static int pick_used(ctx* c, int want_ed) {
  int start = rd(&c->r) % MAX_SLOTS;
  for (int k = 0; k < MAX_SLOTS; k++) {
    int i = (start + k) % MAX_SLOTS;
    if (c->s[i].used && (want_ed < 0 || c->s[i].is_ed == want_ed)) return i;
  }
  return -1;
}

static int pick_free(ctx* c) {
  for (int i = 0; i < MAX_SLOTS; i++)
    if (!c->s[i].used) return i;
  return -1;
}

static int pick_target(ctx* c, target* t) {
  int i = pick_used(c, -1);
  if (i < 0) return 0;
  *t = slot_target(c, i, c->s[i].is_ed && rd(&c->r) % 4 == 0);
  return 1;
}

static void slot_clear(slot* s) {
  if (s->is_ed) {
    kvc_encoder_decoder_cache_destroy(s->ed);
    ref_ed_free(&s->red);
  } else {
    kvc_cache_destroy(s->cache);
    ref_cache_free(&s->ref);
  }
  memset(s, 0, sizeof *s);
}

static void check_all(ctx* c) {
  for (int i = 0; i < MAX_SLOTS; i++) {
    slot* s = &c->s[i];
    char name[16];
    snprintf(name, sizeof name, "s%d", i);
    if (!s->used) continue;
    if (s->is_ed) check_ed(s->ed, &s->red, name);
    else check_cache(s->cache, &s->ref, name);
  }
}

/* ------------------------------------------------------- building inputs */

enum {
  F_NONE,
  F_BATCH,   /* key and value: batch + 1 */
  F_HEADS,   /* key and value: heads + 1 */
  F_KDIM,    /* key head_dim + 1 */
  F_VDIM,    /* value head_dim + 1 */
  F_DTYPE,   /* key and value: another dtype */
  F_VDTYPE,  /* value only: another dtype */
  F_NDIM,    /* key 3-D */
  F_NULLK,   /* key NULL */
  F_NULLV,   /* value NULL */
  F_DEVICE,  /* key on a CUDA device */
  F_VSEQ,    /* value has one token more than key */
  F_VHEADS,  /* value has one head more than key */
  F_BADTYPE, /* key and value of a type kvcache cannot store (int32) */
  F_KDIM0,   /* key head_dim 0 */
  F_SEQ0,    /* no new tokens */
  F_NODATA,  /* key data NULL */
  F_COUNT
};

static const char* fault_name(int f) {
  static const char* n[] = {"none", "batch", "heads", "kdim", "vdim", "dtype", "vdtype",
                            "ndim", "nullk", "nullv", "device", "vseq", "vheads",
                            "badtype", "kdim0", "seq0", "nodata"};
  return f >= 0 && f < F_COUNT ? n[f] : "?";
}

/* The tensors and tokens of one layer's update. */
typedef struct gen_input {
  ref_input in;
  ref_grid tok;
  codec_tensor k, v;
  int64_t Dk, Dv;
  kvc_dtype dt;
} gen_input;

static kvc_dtype other_dtype(kvc_dtype d) {
  return d == KVC_DTYPE_BFLOAT16 ? KVC_DTYPE_FLOAT32 : d + 1;
}

static void gen_make(ctx* c, const target* t, uint32_t layer, int64_t n, int fault, int lk, int lv, gen_input* g) {
  int64_t B, H, Dk, Dv;
  kvc_dtype dt;
  memset(g, 0, sizeof *g);
  layer_shape(t, layer, &B, &H, &Dk, &Dv, &dt);
  ref_tensor* k = &g->in.key;
  ref_tensor* v = &g->in.value;
  k->present = v->present = 1;
  k->on_cpu = v->on_cpu = 1;
  k->ndim = v->ndim = 4;
  k->dtype = v->dtype = dt;
  int64_t kb = B, kh = H, vh = H, vs = n, dk = Dk, dv = Dv;
  switch (fault) {
    case F_BATCH: kb = B + 1; break;
    case F_HEADS: kh = vh = H + 1; break;
    case F_KDIM: dk = Dk + 1; break;
    case F_VDIM: dv = Dv + 1; break;
    case F_DTYPE: k->dtype = v->dtype = other_dtype(dt); break;
    case F_VDTYPE: v->dtype = other_dtype(dt); break;
    case F_NDIM: k->ndim = 3; break;
    case F_NULLK: k->present = 0; break;
    case F_NULLV: v->present = 0; break;
    case F_DEVICE: k->on_cpu = 0; break;
    case F_VSEQ: vs = n + 1; break;
    case F_VHEADS: vh = H + 1; break;
    case F_BADTYPE: k->dtype = v->dtype = KVC_DTYPE_UNSET; break;
    case F_KDIM0: dk = 0; break;
    case F_SEQ0: n = vs = 0; break;
    case F_NODATA: k->no_data = 1; break;
    default: break;
  }
  const int64_t ks[4] = {kb, kh, n, dk}, vsh[4] = {kb, vh, vs, dv};
  codec_build_kv(&g->k, &g->v, k, v, ks, vsh, &g->tok, n, &c->next_tok, fault != F_NONE, lk, lv, 0);
  g->in.tok = g->tok.tok;
  g->Dk = Dk;
  g->Dv = Dv;
  g->dt = dt;
}

static void gen_free(gen_input* g) {
  codec_free(&g->k);
  codec_free(&g->v);
  ref_grid_free(&g->tok);
}

static const kvc_tensor* gen_key(gen_input* g) {
  return g->in.key.present ? &g->k.t : NULL;
}

static const kvc_tensor* gen_value(gen_input* g) {
  return g->in.value.present ? &g->v.t : NULL;
}

/* Whether an update of n tokens would push a dynamic layer past MAX_DYN_LEN. */
static int too_long(const ref_cache* r, uint32_t layer, int64_t n) {
  if (layer >= r->num_layers || ref_is_static_kind(r->layers[layer].kind)) return 0;
  return r->layers[layer].stored.L + n > MAX_DYN_LEN;
}

/* ---------------------------------------------------------------- create */

typedef struct opt_store {
  int null_options;
  kvc_cache_options o;
  kvc_model_config cfg;
  kvc_layer_type types[8];
  kvc_layer_options layers[8];
} opt_store;

static void gen_options(ctx* c, opt_store* s) {
  reader* r = &c->r;
  memset(s, 0, sizeof *s);
  kvc_cache_options_init(&s->o);
  kvc_model_config_init(&s->cfg);
  int which = rd(r) % 16;
  if (which == 0) {
    s->null_options = 1;
    return;
  }
  static const kvc_preset presets[] = {KVC_PRESET_DYNAMIC, KVC_PRESET_DYNAMIC, KVC_PRESET_DYNAMIC,
                                       KVC_PRESET_STATIC, KVC_PRESET_STATIC, KVC_PRESET_SLIDING_WINDOW,
                                       KVC_PRESET_HYBRID, KVC_PRESET_HYBRID_CHUNKED};
  s->o.preset = which <= 8 ? presets[which - 1] : KVC_PRESET_CUSTOM;
  s->o.max_cache_len = rd(r) % 16 == 0 ? 0 : rd_range(r, 1, 8);
  if (s->o.preset == KVC_PRESET_CUSTOM) {
    s->o.num_layers = (uint32_t)rd_range(r, 1, 4);
    s->o.layers = s->layers;
    for (uint32_t i = 0; i < s->o.num_layers; i++) {
      kvc_layer_options_init(&s->layers[i]);
      s->layers[i].kind = (kvc_layer_kind)rd_range(r, 1, 6);
      s->layers[i].window = rd_range(r, 1, 6);
      s->layers[i].max_cache_len = rd_range(r, 1, 8);
      switch (rd(r) % 32) { /* rare invalid layer options */
        case 0: s->layers[i].window = 0; break;
        case 1: s->layers[i].max_cache_len = 0; break;
        case 2: s->layers[i].kind = rd(r) % 2 ? 0 : 1000; break; /* no such kind (ids only grow: far above them) */
        case 3: s->layers[i].struct_size = 4; break;
        default: break;
      }
    }
  } else if (!(s->o.preset == KVC_PRESET_DYNAMIC && rd(r) % 3 == 0)) {
    s->o.config = &s->cfg;
    s->cfg.num_hidden_layers = (uint32_t)rd_range(r, 1, 5);
    s->cfg.sliding_window = rd(r) % 7;
    s->cfg.attention_chunk_size = rd(r) % 7;
    s->cfg.sliding_window_pattern = rd(r) % 4;
    if (rd(r) % 4 == 0) s->cfg.num_kv_shared_layers = rd(r) % s->cfg.num_hidden_layers;
    if (rd(r) % 2) {
      s->cfg.layer_types = s->types;
      for (uint32_t i = 0; i < s->cfg.num_hidden_layers; i++) {
        kvc_layer_type t = (kvc_layer_type)rd_range(r, 1, 3);
        /* hybrid presets mix full layers with their own local kind only */
        if (s->o.preset == KVC_PRESET_HYBRID && t == KVC_LAYER_TYPE_CHUNKED_ATTENTION)
          t = KVC_LAYER_TYPE_SLIDING_ATTENTION;
        if (s->o.preset == KVC_PRESET_HYBRID_CHUNKED && t == KVC_LAYER_TYPE_SLIDING_ATTENTION)
          t = KVC_LAYER_TYPE_CHUNKED_ATTENTION;
        s->types[i] = t;
      }
    }
  }
  switch (rd(r) % 64) { /* rare invalid cache options */
    case 0: s->o.struct_size += 8; break;
    case 1: s->o.preset = KVC_PRESET_HYBRID_MAMBA + 1; break; /* no such preset (9 is one since 0.2) */
    case 2:
      if (!c->has_cuda) s->o.device.device_type = KVC_DEVICE_CUDA;
      break;
    case 3: s->cfg.struct_size = 5; break;
    default: break;
  }
}

static void gen_plan(ctx* c, plan* p) {
  reader* r = &c->r;
  p->B = rd_range(r, 1, 4);
  p->dtype = (kvc_dtype)rd_range(r, 1, 3);
  int64_t H = rd_range(r, 1, 3), Dk = rd_range(r, 1, 4);
  int64_t Dv = rd(r) % 2 ? Dk : rd_range(r, 1, 4);
  uint8_t vary = rd(r);
  for (int l = 0; l < MAX_LAYERS; l++) {
    uint32_t h = (vary * 131u + (uint32_t)l) * 2654435761u;
    int v = vary % 4 == 0;
    p->H[l] = v ? 1 + h % 3 : H;
    p->Dk[l] = v ? 1 + (h >> 8) % 4 : Dk;
    p->Dv[l] = v ? 1 + (h >> 16) % 4 : Dv;
  }
}

static void describe_options(const opt_store* s) {
  if (s->null_options) {
    trace(" options=NULL");
    return;
  }
  const kvc_cache_options* o = &s->o;
  trace(" preset=%d M=%lld", o->preset, (long long)o->max_cache_len);
  if (o->struct_size != sizeof *o) trace(" struct_size=%u", o->struct_size);
  if (o->device.device_type != KVC_DEVICE_CPU) trace(" device=%d", o->device.device_type);
  if (o->preset == KVC_PRESET_CUSTOM) {
    trace(" layers=[");
    for (uint32_t i = 0; i < o->num_layers; i++)
      trace("%s{kind %d W %lld M %lld%s}", i ? " " : "", o->layers[i].kind, (long long)o->layers[i].window,
            (long long)o->layers[i].max_cache_len, o->layers[i].struct_size != sizeof(kvc_layer_options) ? " bad size" : "");
    trace("]");
  } else if (o->config) {
    const kvc_model_config* g = o->config;
    trace(" config{layers %u sw %lld chunk %lld pattern %u shared %u%s", g->num_hidden_layers,
          (long long)g->sliding_window, (long long)g->attention_chunk_size, g->sliding_window_pattern,
          g->num_kv_shared_layers, g->struct_size != sizeof *g ? " bad size" : "");
    if (g->layer_types) {
      trace(" types");
      for (uint32_t i = 0; i < g->num_hidden_layers; i++) trace(" %d", g->layer_types[i]);
    }
    trace("}");
  }
}

static void describe_plan(const plan* p) {
  trace(" plan{B %lld %s H %lld Dk %lld Dv %lld ...}", (long long)p->B, codec_dtype_name(p->dtype),
        (long long)p->H[0], (long long)p->Dk[0], (long long)p->Dv[0]);
}

/* A created cache goes to slot i; a failed creation must have left its out-parameter (sentinel) alone. */
/* Puts a plain cache, its reference (now the slot's) and its plan into slot i. */
static slot* slot_put(ctx* c, int i, kvc_cache* cache, const ref_cache* ref, const plan* p) {
  slot* s = &c->s[i];
  memset(s, 0, sizeof *s);
  s->used = 1;
  s->cache = cache;
  s->ref = *ref;
  s->p = *p;
  return s;
}

static void slot_take(ctx* c, int i, kvc_code want, kvc_cache* out, const kvc_cache* sentinel, const char* what,
                      const ref_cache* ref, const plan* p) {
  if (want != KVC_OK) {
    if (out != sentinel) fail("a failed %s wrote its out-parameter", what);
    return;
  }
  slot_put(c, i, out, ref, p);
}

/* The options (*o: NULL or &s->o) and plan of a new cache, and what the reference makes of them. */
static kvc_code gen_cache(ctx* c, opt_store* s, plan* p, const kvc_cache_options** o, ref_cache* ref) {
  gen_options(c, s);
  gen_plan(c, p);
  *o = s->null_options ? NULL : &s->o;
  return ref_cache_create(*o, ref);
}

static void op_create(ctx* c) {
  int i = pick_free(c);
  if (i < 0) {
    i = rd(&c->r) % MAX_SLOTS;
    trace("s%d: destroy (to make room)\n", i);
    slot_clear(&c->s[i]);
  }
  opt_store s;
  plan p;
  const kvc_cache_options* o;
  ref_cache ref;
  kvc_code want = gen_cache(c, &s, &p, &o, &ref);
  trace("s%d: create", i);
  describe_options(&s);
  describe_plan(&p);
  trace(" -> %s\n", kvc_code_name(want));
  kvc_cache* sentinel = (kvc_cache*)&s;
  kvc_cache* out = sentinel;
  expect_code(kvc_cache_create(o, &out), want, "cache_create");
  slot_take(c, i, want, out, sentinel, "cache_create", &ref, &p);
}

static void op_create_from_tensors(ctx* c) {
  int i = pick_free(c);
  if (i < 0) return;
  opt_store s;
  plan p;
  const kvc_cache_options* o;
  ref_cache ref;
  kvc_code want = gen_cache(c, &s, &p, &o, &ref);
  uint32_t n = (uint32_t)rd_range(&c->r, 1, 4);
  int64_t ntok = rd_range(&c->r, 1, 9);
  int fault = rd(&c->r) % 8 == 0 ? (int)rd_range(&c->r, 1, F_COUNT - 1) : F_NONE;
  if (fault == F_NULLK || fault == F_NULLV) fault = F_NONE; /* arrays of tensors cannot hold NULL */
  uint32_t fault_layer = rd(&c->r) % n;
  gen_input g[4];
  kvc_tensor keys[4], values[4];
  ref_input ins[4];
  ref_cache empty;
  memset(&empty, 0, sizeof empty);
  empty.lazy = 1;
  target t = {NULL, want == KVC_OK ? &ref : &empty, &p, ""};
  for (uint32_t l = 0; l < n; l++) {
    gen_make(c, &t, l, ntok, l == fault_layer ? fault : F_NONE, rd(&c->r) % LAYOUT_COUNT, LAYOUT_COMPACT, &g[l]);
    ins[l] = g[l].in;
    keys[l] = g[l].k.t;
    values[l] = g[l].v.t;
  }
  if (want == KVC_OK) {
    want = ref_update_all(&ref, n, ins, NULL, NULL);
    if (want != KVC_OK) ref_cache_free(&ref);
  }
  trace("s%d: create_from_tensors", i);
  describe_options(&s);
  describe_plan(&p);
  trace(" layers=%u tokens=%lld fault=%s@%u -> %s\n", n, (long long)ntok, fault_name(fault), fault_layer,
        kvc_code_name(want));
  kvc_cache* sentinel = (kvc_cache*)&s;
  kvc_cache* out = sentinel;
  expect_code(kvc_cache_create_from_tensors(o, n, keys, values, &out), want, "create_from_tensors");
  for (uint32_t l = 0; l < n; l++) gen_free(&g[l]);
  slot_take(c, i, want, out, sentinel, "create_from_tensors", &ref, &p);
}

/* ---------------------------------------------------------------- update */

static void op_update(ctx* c, int allow_faults) {
  target t;
  if (!pick_target(c, &t)) return;
  reader* r = &c->r;
  uint32_t nl = t.ref->num_layers;
  uint8_t lb = rd(r);
  uint32_t layer = lb % 8 == 0 ? nl + lb / 8 % 2 : (uint32_t)(lb / 8 % (nl ? nl : 1));
  if (t.ref->lazy && layer >= MAX_LAYERS) layer %= MAX_LAYERS;
  int64_t n = rd_range(r, 1, 9);
  int fault = allow_faults && rd(r) % 3 == 0 ? (int)rd_range(r, 1, F_COUNT - 1) : F_NONE;
  int lk = rd(r) % LAYOUT_COUNT, lv = rd(r) % LAYOUT_COUNT;
  int want_out = rd(r) % 4 != 0;
  uint8_t pos_mode = rd(r);
  if (layer >= nl && !t.ref->lazy) fault = F_NONE; /* one error at a time: which comes first is not specified */
  if (too_long(t.ref, layer, n)) {
    trace("%s: update layer %u n=%lld skipped (dynamic layer at the length cap)\n", t.name, layer, (long long)n);
    return;
  }
  gen_input g;
  gen_make(c, &t, layer, n, fault, lk, lv, &g);

  /* cache_position: on static layers contiguous slots from the counter or
   * from anywhere (sometimes with a wrong count); on dynamic layers, which
   * ignore it, the positions a 4.57 model would pass */
  int64_t pos[10] = {0};
  ref_positions rp = {NULL, 0};
  kvc_update_options opts;
  kvc_update_options_init(&opts);
  const kvc_update_options* op = NULL;
  int bad_opts = 0;
  const ref_layer* TL = layer < nl ? &t.ref->layers[layer] : NULL;
  if (TL && ref_is_static_kind(TL->kind) && pos_mode % 4 == 0) {
    int64_t start = (pos_mode >> 2) % 2 ? TL->cum : (pos_mode >> 3) % (ref_layer_capacity(TL) + 2);
    for (int64_t s = 0; s < n; s++) pos[s] = start + s;
    rp.pos = pos;
    rp.count = (uint32_t)n + ((pos_mode >> 6) == 3 ? 1 : 0);
    opts.cache_position = pos;
    opts.cache_position_length = rp.count;
    op = &opts;
  } else if (TL && !ref_is_static_kind(TL->kind) && pos_mode % 16 == 2) {
    for (int64_t s = 0; s < n; s++) pos[s] = ref_seq_length(t.ref, layer) + s;
    rp.pos = pos;
    rp.count = (uint32_t)n;
    opts.cache_position = pos;
    opts.cache_position_length = rp.count;
    op = &opts;
  } else if (pos_mode % 8 == 1) {
    op = &opts; /* explicit defaults */
  }
  kvc_code want = ref_update_check(t.ref, layer, &g.in, &rp);
  ref_grid ret = {0, 0, 0, NULL};
  if (want == KVC_OK && !op && pos_mode == 0xff) { /* an options struct of unknown size */
    opts.struct_size = 3;
    op = &opts;
    bad_opts = 1;
    want = KVC_ERROR_INVALID_ARGUMENT;
  } else {
    want = ref_update(t.ref, layer, &g.in, &rp, want_out ? &ret : NULL);
  }
  trace("%s: update layer %u n=%lld shape[%lld,%lld,*,%lld|%lld] %s fault=%s layout=%d/%d", t.name, layer,
        (long long)n, (long long)g.in.key.shape[0], (long long)g.in.key.shape[1], (long long)g.in.key.shape[3],
        (long long)g.in.value.shape[3], codec_dtype_name(g.in.key.dtype), fault_name(fault), lk, lv);
  if (rp.pos) trace(" cache_position=%lld..+%u", (long long)pos[0], rp.count);
  if (bad_opts) trace(" options.struct_size=3");
  trace("%s -> %s\n", want_out ? "" : " out=NULL", kvc_code_name(want));

  kvc_kv out, before;
  memset(&out, 0xA5, sizeof out);
  before = out;
  expect_code(kvc_cache_update(t.c, layer, gen_key(&g), gen_value(&g), op, want_out ? &out : NULL), want,
              "update");
  if (want != KVC_OK) {
    if (want_out && memcmp(&out, &before, sizeof out)) fail("a failed update wrote its out-parameter");
  } else if (want_out) {
    const ref_layer* L = &t.ref->layers[layer];
    check_views(&out, &ret, L->Dk, L->Dv, L->dtype, "update's returned views");
    check_all(c); /* queries do not mutate: the returned views must survive them */
    check_views(&out, &ret, L->Dk, L->Dv, L->dtype, "update's returned views after queries");
  }
  ref_grid_free(&ret);
  gen_free(&g);
}

static void op_update_all(ctx* c) {
  target t;
  if (!pick_target(c, &t)) return;
  reader* r = &c->r;
  uint32_t nl = t.ref->num_layers;
  uint32_t n = t.ref->lazy ? (uint32_t)rd_range(r, 1, 4) : (uint32_t)(1 + rd(r) % (nl + 1));
  int64_t ntok = rd_range(r, 1, 9);
  int fault = rd(r) % 6 == 0 ? (int)rd_range(r, 1, F_COUNT - 1) : F_NONE;
  uint32_t fault_layer = rd(r) % n;
  int want_out = rd(r) % 4 != 0;
  uint8_t pos_mode = rd(r);
  if (fault == F_NULLK || fault == F_NULLV || (n > nl && !t.ref->lazy)) fault = F_NONE;
  for (uint32_t l = 0; l < n; l++)
    if (too_long(t.ref, l, ntok)) {
      trace("%s: update_all skipped (a dynamic layer is at the length cap)\n", t.name);
      return;
    }
  gen_input* g = fz_calloc(n, sizeof *g);
  kvc_tensor* keys = fz_calloc(n, sizeof *keys);
  kvc_tensor* values = fz_calloc(n, sizeof *values);
  ref_input* ins = fz_calloc(n, sizeof *ins);
  ref_grid* rets = fz_calloc(n, sizeof *rets);
  kvc_kv* outs = fz_calloc(n, sizeof *outs);
  for (uint32_t l = 0; l < n; l++) {
    gen_make(c, &t, l, ntok, l == fault_layer ? fault : F_NONE, rd(r) % LAYOUT_COUNT, rd(r) % LAYOUT_COUNT, &g[l]);
    keys[l] = g[l].k.t;
    values[l] = g[l].v.t;
    ins[l] = g[l].in;
  }
  int all_static = n <= nl;
  for (uint32_t l = 0; l < n && all_static; l++) all_static = ref_is_static_kind(t.ref->layers[l].kind);
  int64_t pos[10] = {0};
  ref_positions rp = {NULL, 0};
  kvc_update_options opts;
  kvc_update_options_init(&opts);
  if (all_static && pos_mode % 3 == 0) {
    int64_t start = (pos_mode >> 2) % 2 ? t.ref->layers[0].cum : (pos_mode >> 3) % 9;
    for (int64_t s = 0; s < ntok; s++) pos[s] = start + s;
    rp.pos = pos;
    rp.count = (uint32_t)ntok;
    opts.cache_position = pos;
    opts.cache_position_length = rp.count;
  }
  kvc_code want = ref_update_all(t.ref, n, ins, &rp, want_out ? rets : NULL);
  trace("%s: update_all layers=%u n=%lld fault=%s@%u%s", t.name, n, (long long)ntok, fault_name(fault), fault_layer,
        want_out ? "" : " out=NULL");
  if (rp.pos) trace(" cache_position=%lld..", (long long)pos[0]);
  trace(" -> %s\n", kvc_code_name(want));
  memset(outs, 0xA5, n * sizeof *outs);
  kvc_kv first = outs[0];
  expect_code(kvc_cache_update_all(t.c, n, keys, values, rp.pos ? &opts : NULL, want_out ? outs : NULL), want,
              "update_all");
  if (want != KVC_OK) {
    if (want_out && memcmp(&outs[0], &first, sizeof first)) fail("a failed update_all wrote its out-parameter");
  } else if (want_out) {
    for (uint32_t l = 0; l < n; l++) {
      const ref_layer* L = &t.ref->layers[l];
      char what[64];
      snprintf(what, sizeof what, "update_all's returned views of layer %u", l);
      check_views(&outs[l], &rets[l], L->Dk, L->Dv, L->dtype, what);
    }
  }
  for (uint32_t l = 0; l < n; l++) {
    gen_free(&g[l]);
    ref_grid_free(&rets[l]);
  }
  free(g);
  free(keys);
  free(values);
  free(ins);
  free(rets);
  free(outs);
}

/* ------------------------------------------------------- other cache ops */

static int64_t gen_crop(reader* r) {
  uint8_t b = rd(r);
  switch (b % 16) {
    case 0: return -100;
    case 1: return INT64_MIN;
    case 2: return 1000;
    default: return (int64_t)(int8_t)rd(r) % 12;
  }
}

static void op_crop(ctx* c) {
  target t;
  if (!pick_target(c, &t)) return;
  int64_t x = gen_crop(&c->r);
  kvc_code want = ref_crop(t.ref, x);
  trace("%s: crop %lld -> %s\n", t.name, (long long)x, kvc_code_name(want));
  expect_code(kvc_cache_crop(t.c, x), want, "crop");
}

/* An operation of the whole cache without arguments (`what`), on the reference and the cache alike. */
static void op_whole(ctx* c, const char* what, kvc_code (*ref_op)(ref_cache*), kvc_error* (*op)(kvc_cache*)) {
  target t;
  if (!pick_target(c, &t)) return;
  kvc_code want = ref_op(t.ref);
  trace("%s: %s -> %s\n", t.name, what, kvc_code_name(want));
  expect_code(op(t.c), want, what);
}

static void op_activate(ctx* c) {
  op_whole(c, "activate_past_recording", ref_activate_past_recording, kvc_cache_activate_past_recording);
}

/* Indices in [0, B), now and then one out of range. */
static size_t gen_indices(reader* r, int64_t B, int keep_count, int64_t* idx) {
  size_t count = keep_count || rd(r) % 3 ? (size_t)B : (size_t)rd_range(r, 1, 5);
  if (count > MAX_BATCH) count = MAX_BATCH;
  for (size_t i = 0; i < count; i++) idx[i] = rd(r) % B;
  uint8_t bad = rd(r);
  if (bad % 16 == 0) idx[bad / 16 % count] = bad % 32 ? B : -1;
  return count;
}

static void trace_indices(const int64_t* idx, size_t count) {
  trace(" [");
  for (size_t i = 0; i < count; i++) trace("%s%lld", i ? " " : "", (long long)idx[i]);
  trace("]");
}

/* An operation on batch indices (`what`: reorder, batch_select_indices), on the reference and the cache alike. */
static void op_indices(ctx* c, const char* what, kvc_code (*ref_op)(ref_cache*, const int64_t*, size_t),
                       kvc_error* (*op)(kvc_cache*, const int64_t*, size_t)) {
  target t;
  if (!pick_target(c, &t)) return;
  int64_t idx[MAX_BATCH];
  size_t count = gen_indices(&c->r, gen_batch(&t), 0, idx);
  kvc_code want = ref_op(t.ref, idx, count);
  trace("%s: %s", t.name, what);
  trace_indices(idx, count);
  trace(" -> %s\n", kvc_code_name(want));
  expect_code(op(t.c, idx, count), want, what);
}

static void op_reorder(ctx* c) { op_indices(c, "reorder", ref_reorder, kvc_cache_reorder); }

static int64_t gen_repeats(reader* r, int64_t B) {
  int64_t rep = rd(r) % 4;
  if (rep > 0 && B * rep > MAX_BATCH) rep = 1;
  return rep;
}

static void op_repeat(ctx* c) {
  target t;
  if (!pick_target(c, &t)) return;
  int64_t rep = gen_repeats(&c->r, max_batch(t.ref) > t.p->B ? max_batch(t.ref) : t.p->B);
  kvc_code want = ref_repeat_interleave(t.ref, rep);
  trace("%s: batch_repeat_interleave %lld -> %s\n", t.name, (long long)rep, kvc_code_name(want));
  expect_code(kvc_cache_batch_repeat_interleave(t.c, rep), want, "batch_repeat_interleave");
}

static void op_select(ctx* c) {
  op_indices(c, "batch_select_indices", ref_select_indices, kvc_cache_batch_select_indices);
}

static void op_reset(ctx* c) { op_whole(c, "reset", ref_reset, kvc_cache_reset); }

/* Puts a new plain cache into a free slot, or checks and frees it. */
static void adopt(ctx* c, kvc_cache* cache, ref_cache* ref, const plan* p, const char* what) {
  int i = pick_free(c);
  char name[48];
  snprintf(name, sizeof name, "%s (new cache)", what);
  check_cache(cache, ref, name);
  if (i < 0 || layer_batch(ref) > MAX_BATCH) { /* keep batches small: inputs stay fast */
    kvc_cache_destroy(cache);
    ref_cache_free(ref);
    return;
  }
  trace("  -> kept as s%d\n", i);
  slot* s = slot_put(c, i, cache, ref, p);
  s->p.B = layer_batch(ref) ? layer_batch(ref) : p->B;
}

static void op_clone(ctx* c) {
  int i = pick_used(c, -1);
  if (i < 0) return;
  slot* s = &c->s[i];
  if (s->is_ed && rd(&c->r) % 2) {
    trace("s%d: encoder_decoder clone -> KVC_OK\n", i);
    kvc_encoder_decoder_cache* out = NULL;
    expect_code(kvc_encoder_decoder_cache_clone(s->ed, &out), KVC_OK, "encoder_decoder clone");
    ref_ed copy;
    ref_ed_copy(&s->red, &copy);
    check_ed(out, &copy, "clone");
    int f = pick_free(c);
    if (f < 0) {
      kvc_encoder_decoder_cache_destroy(out);
      ref_ed_free(&copy);
      return;
    }
    trace("  -> kept as s%d\n", f);
    slot* d = &c->s[f];
    *d = *s;
    d->ed = out;
    d->red = copy;
    return;
  }
  target t = slot_target(c, i, s->is_ed && rd(&c->r) % 2);
  trace("%s: clone -> KVC_OK\n", t.name);
  kvc_cache* out = NULL;
  expect_code(kvc_cache_clone(t.c, &out), KVC_OK, "clone");
  ref_cache copy;
  ref_cache_copy(t.ref, &copy);
  adopt(c, out, &copy, t.p, "clone");
}

static void op_early_init(ctx* c) {
  target t;
  if (!pick_target(c, &t)) return;
  reader* r = &c->r;
  kvc_init_options o;
  kvc_init_options_init(&o);
  int64_t heads[MAX_LAYERS * 2], dims[MAX_LAYERS * 2];
  uint32_t nl = t.ref->num_layers;
  o.batch_size = gen_batch(&t);
  o.num_kv_heads = t.p->H[0];
  o.k_head_dim = t.p->Dk[0];
  o.v_head_dim = t.p->Dv[0] == t.p->Dk[0] && rd(r) % 2 ? 0 : t.p->Dv[0];
  o.dtype = t.p->dtype;
  uint8_t m = rd(r);
  if (nl > 0 && nl <= MAX_LAYERS * 2 && m % 3 == 0) {
    for (uint32_t l = 0; l < nl; l++) heads[l] = t.p->H[l % MAX_LAYERS];
    o.num_kv_heads_per_layer = heads;
  }
  if (nl > 0 && nl <= MAX_LAYERS * 2 && m % 5 == 0) {
    for (uint32_t l = 0; l < nl; l++) dims[l] = t.p->Dk[l % MAX_LAYERS];
    o.head_dim_per_layer = dims;
    o.v_head_dim = 0;
  }
  switch (rd(r) % 16) { /* rare invalid options */
    case 0: o.batch_size = 0; break;
    case 1: o.dtype = KVC_DTYPE_UNSET; break;
    case 2:
      if (!o.head_dim_per_layer) o.k_head_dim = 0;
      break;
    case 3: o.struct_size = 8; break;
    default: break;
  }
  kvc_code want = ref_early_initialization(t.ref, &o);
  trace("%s: early_initialization B=%lld H=%lld%s Dk=%lld%s Dv=%lld %s%s -> %s\n", t.name, (long long)o.batch_size,
        (long long)o.num_kv_heads, o.num_kv_heads_per_layer ? "(per layer)" : "", (long long)o.k_head_dim,
        o.head_dim_per_layer ? "(per layer)" : "", (long long)o.v_head_dim, codec_dtype_name(o.dtype),
        o.struct_size != sizeof o ? " bad struct_size" : "", kvc_code_name(want));
  expect_code(kvc_cache_early_initialization(t.c, &o), want, "early_initialization");
}

/* ------------------------------------------------------ split and stack */

static void op_split(ctx* c) {
  int i = pick_used(c, -1);
  if (i < 0) return;
  reader* r = &c->r;
  target t = slot_target(c, i, c->s[i].is_ed && rd(r) % 4 == 0);
  int64_t B = gen_batch(&t);
  int64_t full = rd(r) % 16 == 0 ? B + 1 : B, split = rd(r) % 32 == 0 ? 0 : rd_range(r, 1, 4);
  size_t need = split > 0 ? (size_t)((full + split - 1) / split) : 1;
  size_t cap = rd(r) % 8 == 0 ? need - 1 : need + rd(r) % 2;
  int mode = rd(r) % 4;
  if (cap > MAX_SPLITS) return;
  ref_cache refs[MAX_SPLITS];
  size_t want_count = 0;
  kvc_code want = ref_batch_split(t.ref, full, split, refs, cap, &want_count);
  trace("%s: batch_split full=%lld split=%lld capacity=%zu -> %s\n", t.name, (long long)full, (long long)split, cap,
        kvc_code_name(want));
  kvc_cache* out[MAX_SPLITS];
  split_outputs_mark(out, MAX_SPLITS);
  size_t count = SPLIT_COUNT_UNSET;
  expect_code(kvc_cache_batch_split(t.c, full, split, out, cap, &count), want, "batch_split");
  if (want != KVC_OK) {
    split_outputs_untouched(out, MAX_SPLITS, count);
    return;
  }
  if (count != want_count) fail("batch_split made %zu splits, reference %zu", count, want_count);
  for (size_t k = 0; k < count; k++) {
    char name[32];
    snprintf(name, sizeof name, "split %zu", k);
    check_cache(out[k], &refs[k], name);
  }
  /* stack them again: all in order, reversed, a prefix, or with a stranger */
  const kvc_cache* in[MAX_SPLITS + 1];
  const ref_cache* rin[MAX_SPLITS + 1];
  size_t n = count;
  for (size_t k = 0; k < count; k++) {
    size_t from = mode == 1 ? count - 1 - k : k;
    in[k] = out[from];
    rin[k] = &refs[from];
  }
  if (mode == 2) n = 1 + (size_t)rd(r) % count;
  if (mode == 3) {
    int j = pick_used(c, 0);
    if (j >= 0) {
      in[n] = c->s[j].cache;
      rin[n] = &c->s[j].ref;
      n++;
    }
  }
  ref_cache stacked;
  kvc_code want2 = ref_from_batch_splits(rin, n, &stacked);
  trace("  from_batch_splits of %zu (mode %d) -> %s\n", n, mode, kvc_code_name(want2));
  kvc_cache* res = (kvc_cache*)&stacked;
  expect_code(kvc_cache_from_batch_splits(in, n, &res), want2, "from_batch_splits");
  if (want2 != KVC_OK) {
    if (res != (kvc_cache*)&stacked) fail("a failed from_batch_splits wrote its out-parameter");
  } else {
    adopt(c, res, &stacked, t.p, "from_batch_splits");
  }
  size_t keep = rd(r) % 2 ? 0 : count; /* now and then one split lives on */
  for (size_t k = 0; k < count; k++) {
    if (k == keep) {
      adopt(c, out[k], &refs[k], t.p, "split");
      continue;
    }
    kvc_cache_destroy(out[k]);
    ref_cache_free(&refs[k]);
  }
}

static void op_destroy(ctx* c) {
  int i = pick_used(c, -1);
  if (i < 0) return;
  trace("s%d: destroy\n", i);
  slot_clear(&c->s[i]);
}

/* ------------------------------------------------------- encoder-decoder */

static void op_ed_create(ctx* c) {
  reader* r = &c->r;
  int a = pick_used(c, 0);
  if (a < 0) return;
  int b = pick_used(c, 0);
  if (b < 0) return;
  if (a == b && rd(r) % 4) { /* mostly a real pair, when there is one */
    for (int k = 1; k < MAX_SLOTS && b == a; k++)
      if (c->s[(a + k) % MAX_SLOTS].used && !c->s[(a + k) % MAX_SLOTS].is_ed) b = (a + k) % MAX_SLOTS;
    if (a == b) return;
  }
  kvc_encoder_decoder_cache* sentinel = (kvc_encoder_decoder_cache*)&a;
  kvc_encoder_decoder_cache* out = sentinel;
  if (a == b || rd(r) % 16 == 0) {
    int null_one = a != b;
    trace("s%d: encoder_decoder_create(%s) -> KVC_ERROR_INVALID_ARGUMENT\n", a,
          null_one ? "self, NULL" : "same cache twice");
    expect_code(kvc_encoder_decoder_cache_create(c->s[a].cache, null_one ? NULL : c->s[a].cache, &out),
                KVC_ERROR_INVALID_ARGUMENT, "encoder_decoder_create");
    if (out != sentinel) fail("a failed encoder_decoder_create wrote its out-parameter");
    return;
  }
  trace("s%d: encoder_decoder_create(self s%d, cross s%d) -> KVC_OK\n", a, a, b);
  expect_code(kvc_encoder_decoder_cache_create(c->s[a].cache, c->s[b].cache, &out), KVC_OK,
              "encoder_decoder_create");
  slot* s = &c->s[a];
  plan px = c->s[b].p;
  px.B = s->p.B;
  ref_ed_create(&s->ref, &c->s[b].ref, &s->red);
  s->is_ed = 1;
  s->cache = NULL;
  s->ed = out;
  s->px = px;
  memset(&c->s[b], 0, sizeof c->s[b]);
}

static void op_ed_update_cross(ctx* c) {
  int i = pick_used(c, 1);
  if (i < 0) return;
  reader* r = &c->r;
  slot* s = &c->s[i];
  target t = slot_target(c, i, 1);
  uint32_t nl = s->red.cross.num_layers;
  uint32_t layer = (uint32_t)(rd(r) % (nl + 2));
  if (s->red.cross.lazy && layer >= MAX_LAYERS) layer %= MAX_LAYERS;
  int64_t n = rd_range(r, 1, 9);
  uint8_t m = rd(r);
  int null_tensors = m % 4 == 0;
  int fault = m % 8 == 1 ? (int)rd_range(r, 1, F_COUNT - 1) : F_NONE;
  int want_out = m % 8 != 2;
  if (layer >= nl && !s->red.cross.lazy) null_tensors = 0, fault = F_NONE; /* one error at a time */
  gen_input g;
  gen_make(c, &t, layer, n, fault, LAYOUT_COMPACT, LAYOUT_COMPACT, &g);
  ref_grid ret = {0, 0, 0, NULL};
  kvc_code want = ref_ed_update_cross(&s->red, layer, null_tensors ? NULL : &g.in, want_out ? &ret : NULL);
  trace("s%d: update_cross layer %u n=%lld%s fault=%s -> %s\n", i, layer, (long long)n,
        null_tensors ? " key=value=NULL" : "", fault_name(fault), kvc_code_name(want));
  kvc_kv out, before;
  memset(&out, 0xA5, sizeof out);
  before = out;
  expect_code(kvc_encoder_decoder_cache_update_cross(s->ed, layer, null_tensors ? NULL : gen_key(&g),
                                                     null_tensors ? NULL : gen_value(&g), want_out ? &out : NULL),
              want, "update_cross");
  if (want != KVC_OK) {
    if (want_out && memcmp(&out, &before, sizeof out)) fail("a failed update_cross wrote its out-parameter");
  } else if (want_out) {
    const ref_layer* L = &s->red.cross.layers[layer];
    check_views(&out, &ret, L->Dk, L->Dv, L->dtype, "update_cross's returned views");
  }
  ref_grid_free(&ret);
  gen_free(&g);
}

static int64_t ed_batch(const slot* s) {
  int64_t a = layer_batch(&s->red.self), b = layer_batch(&s->red.cross);
  if (!a) a = s->p.B;
  if (!b) b = a;
  return a < b ? a : b;
}

static void op_ed_split(ctx* c, int i) {
  reader* r = &c->r;
  slot* s = &c->s[i];
  int64_t B = layer_batch(&s->red.self) ? layer_batch(&s->red.self) : ed_batch(s);
  int64_t full = rd(r) % 16 == 0 ? B + 1 : B, split = rd_range(r, 1, 4);
  size_t need = (size_t)((full + split - 1) / split);
  size_t cap = rd(r) % 8 == 0 ? need - 1 : need;
  if (cap > MAX_SPLITS) return;
  ref_ed refs[MAX_SPLITS];
  size_t want_count = 0;
  kvc_code want = ref_ed_batch_split(&s->red, full, split, refs, cap, &want_count);
  trace("s%d: encoder_decoder batch_split full=%lld split=%lld capacity=%zu -> %s\n", i, (long long)full,
        (long long)split, cap, kvc_code_name(want));
  kvc_encoder_decoder_cache* out[MAX_SPLITS];
  for (size_t k = 0; k < MAX_SPLITS; k++) out[k] = (kvc_encoder_decoder_cache*)&out[k];
  size_t count = SPLIT_COUNT_UNSET;
  expect_code(kvc_encoder_decoder_cache_batch_split(s->ed, full, split, out, cap, &count), want,
              "encoder_decoder batch_split");
  if (want != KVC_OK) {
    if (count != SPLIT_COUNT_UNSET) fail("a failed encoder_decoder batch_split wrote *count");
    for (size_t k = 0; k < MAX_SPLITS; k++)
      if (out[k] != (kvc_encoder_decoder_cache*)&out[k])
        fail("a failed encoder_decoder batch_split wrote out[%zu]", k);
    return;
  }
  if (count != want_count) fail("encoder_decoder batch_split made %zu splits, reference %zu", count, want_count);
  const kvc_encoder_decoder_cache* in[MAX_SPLITS];
  const ref_ed* rin[MAX_SPLITS];
  for (size_t k = 0; k < count; k++) {
    char name[32];
    snprintf(name, sizeof name, "ed split %zu", k);
    check_ed(out[k], &refs[k], name);
    in[k] = out[k];
    rin[k] = &refs[k];
  }
  ref_ed stacked;
  kvc_code want2 = ref_ed_from_batch_splits(rin, count, &stacked);
  trace("  encoder_decoder from_batch_splits of %zu -> %s\n", count, kvc_code_name(want2));
  kvc_encoder_decoder_cache* res = NULL;
  expect_code(kvc_encoder_decoder_cache_from_batch_splits(in, count, &res), want2,
              "encoder_decoder from_batch_splits");
  if (want2 == KVC_OK) {
    check_ed(res, &stacked, "stacked");
    kvc_encoder_decoder_cache_destroy(res);
    ref_ed_free(&stacked);
  }
  for (size_t k = 0; k < count; k++) {
    kvc_encoder_decoder_cache_destroy(out[k]);
    ref_ed_free(&refs[k]);
  }
}

/* op_indices on the encoder-decoder pair in slot i (`what`: its reorder or batch_select_indices). */
static void ed_indices(ctx* c, int i, const char* what, kvc_code (*ref_op)(ref_ed*, const int64_t*, size_t),
                       kvc_error* (*op)(kvc_encoder_decoder_cache*, const int64_t*, size_t)) {
  slot* s = &c->s[i];
  int64_t idx[MAX_BATCH];
  size_t count = gen_indices(&c->r, ed_batch(s), 0, idx);
  kvc_code want = ref_op(&s->red, idx, count);
  trace("s%d: %s", i, what);
  trace_indices(idx, count);
  trace(" -> %s\n", kvc_code_name(want));
  expect_code(op(s->ed, idx, count), want, what);
}

static void op_ed_misc(ctx* c) {
  int i = pick_used(c, 1);
  if (i < 0) return;
  reader* r = &c->r;
  slot* s = &c->s[i];
  kvc_code want;
  switch (rd(r) % 6) {
    case 0: {
      int64_t x = gen_crop(r);
      want = ref_ed_crop(&s->red, x);
      trace("s%d: encoder_decoder crop %lld -> %s\n", i, (long long)x, kvc_code_name(want));
      expect_code(kvc_encoder_decoder_cache_crop(s->ed, x), want, "encoder_decoder crop");
      break;
    }
    case 1: ed_indices(c, i, "encoder_decoder reorder", ref_ed_reorder, kvc_encoder_decoder_cache_reorder); break;
    case 2: {
      int64_t mb = max_batch(&s->red.self) > max_batch(&s->red.cross) ? max_batch(&s->red.self) : max_batch(&s->red.cross);
      int64_t rep = gen_repeats(r, mb > s->p.B ? mb : s->p.B);
      want = ref_ed_repeat_interleave(&s->red, rep);
      trace("s%d: encoder_decoder batch_repeat_interleave %lld -> %s\n", i, (long long)rep, kvc_code_name(want));
      expect_code(kvc_encoder_decoder_cache_batch_repeat_interleave(s->ed, rep), want,
                  "encoder_decoder batch_repeat_interleave");
      break;
    }
    case 3:
      ed_indices(c, i, "encoder_decoder batch_select_indices", ref_ed_select_indices,
                 kvc_encoder_decoder_cache_batch_select_indices);
      break;
    case 4: op_ed_split(c, i); break;
    default:
      want = ref_ed_reset(&s->red);
      trace("s%d: encoder_decoder reset -> %s\n", i, kvc_code_name(want));
      expect_code(kvc_encoder_decoder_cache_reset(s->ed), want, "encoder_decoder reset");
      break;
  }
}

/* Queries with arguments the per-operation check does not use. */
static void op_query(ctx* c) {
  target t;
  if (!pick_target(c, &t)) return;
  reader* r = &c->r;
  int64_t q = rd_range(r, 1, 20), nw = rd_range(r, 0, 20);
  uint32_t layer = (uint32_t)(rd(r) % (t.ref->num_layers + 1));
  int64_t len = -7, off = -7, wl, wo, v = -7;
  trace("%s: queries q=%lld new=%lld layer %u\n", t.name, (long long)q, (long long)nw, layer);
  ref_mask_sizes(t.ref, q, layer, &wl, &wo);
  expect_code(kvc_cache_mask_sizes(t.c, q, layer, &len, &off), KVC_OK, "mask_sizes");
  if (len != wl || off != wo)
    fail("%s: mask_sizes(q=%lld, layer %u) = (%lld, %lld), reference (%lld, %lld)", t.name, (long long)q, layer,
         (long long)len, (long long)off, (long long)wl, (long long)wo);
  expect_code(kvc_cache_usable_length(t.c, nw, layer, &v), KVC_OK, "usable_length");
  if (v != ref_usable_length(t.ref, nw, layer))
    fail("%s: usable_length(%lld, layer %u) = %lld, reference %lld", t.name, (long long)nw, layer, (long long)v,
         (long long)ref_usable_length(t.ref, nw, layer));
  v = -7;
  expect_code(kvc_cache_seq_length(t.c, UINT32_MAX, &v), KVC_OK, "seq_length(UINT32_MAX)");
  if (v != 0) fail("%s: seq_length(UINT32_MAX) = %lld, want 0", t.name, (long long)v);
  expect_code(kvc_cache_mask_sizes(t.c, -q, layer, &len, &off), KVC_ERROR_INVALID_ARGUMENT, "mask_sizes(q < 0)");
  expect_code(kvc_cache_usable_length(t.c, -1 - nw, layer, &v), KVC_ERROR_INVALID_ARGUMENT, "usable_length(new < 0)");
  expect_code(kvc_cache_max_length(t.c, -1 - (int32_t)q, &v), KVC_ERROR_OUT_OF_RANGE, "max_length(layer < -1)");
  if (v != 0) fail("a failed query wrote its out-parameter");
  if (t.ref->num_layers == 0) return;
  kvc_layer_info info;
  memset(&info, 0x11, sizeof info);
  info.struct_size = 3;
  kvc_layer_info before = info;
  expect_code(kvc_cache_layer_info(t.c, 0, &info), KVC_ERROR_INVALID_ARGUMENT, "layer_info with struct_size 3");
  if (memcmp(&info, &before, sizeof info)) fail("a failed layer_info wrote its out-parameter");
}

/* ----------------------------------------------------------------- driver */

enum {
  OP_UPDATE,
  OP_UPDATE2,
  OP_UPDATE3,
  OP_UPDATE_FAULTY,
  OP_UPDATE_ALL,
  OP_UPDATE_ALL2,
  OP_CROP,
  OP_CROP2,
  OP_ACTIVATE,
  OP_REORDER,
  OP_REPEAT,
  OP_SELECT,
  OP_SPLIT,
  OP_RESET,
  OP_CLONE,
  OP_EARLY_INIT,
  OP_CREATE,
  OP_CREATE_FROM_TENSORS,
  OP_DESTROY,
  OP_ED_CREATE,
  OP_ED_UPDATE_CROSS,
  OP_ED_MISC,
  OP_QUERY,
  OP_COUNT
};

static void run_op(ctx* c, int op) {
  switch (op) {
    case OP_UPDATE:
    case OP_UPDATE2:
    case OP_UPDATE3: op_update(c, 0); break;
    case OP_UPDATE_FAULTY: op_update(c, 1); break;
    case OP_UPDATE_ALL:
    case OP_UPDATE_ALL2: op_update_all(c); break;
    case OP_CROP:
    case OP_CROP2: op_crop(c); break;
    case OP_ACTIVATE: op_activate(c); break;
    case OP_REORDER: op_reorder(c); break;
    case OP_REPEAT: op_repeat(c); break;
    case OP_SELECT: op_select(c); break;
    case OP_SPLIT: op_split(c); break;
    case OP_RESET: op_reset(c); break;
    case OP_CLONE: op_clone(c); break;
    case OP_EARLY_INIT: op_early_init(c); break;
    case OP_CREATE: op_create(c); break;
    case OP_CREATE_FROM_TENSORS: op_create_from_tensors(c); break;
    case OP_DESTROY: op_destroy(c); break;
    case OP_ED_CREATE: op_ed_create(c); break;
    case OP_ED_UPDATE_CROSS: op_ed_update_cross(c); break;
    case OP_ED_MISC: op_ed_misc(c); break;
    default: op_query(c); break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ctx c;
  FUZZ_START_INPUT(c, data, size);
  op_create(&c);
  check_all(&c);
  for (int ops = 0; ops < MAX_OPS && c.r.i < c.r.n; ops++) {
    run_op(&c, rd(&c.r) % OP_COUNT);
    check_all(&c);
  }
  for (int i = 0; i < MAX_SLOTS; i++)
    if (c.s[i].used) slot_clear(&c.s[i]);
  return 0;
}
