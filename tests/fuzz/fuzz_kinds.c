/*
 * fuzz_kinds.c: differential fuzzer of the cache kinds with state beyond
 * plain K/V (QUANTIZED, SINK, the LINEAR kinds with their recurrent states)
 * and of offloading, through the public ABI only.
 *
 * The input bytes are decoded into a sequence of operations on up to two
 * groups of caches. The members of a group are library caches that must
 * behave the same under the same calls, so each is the oracle of the
 * others:
 *  - a cache and its offloading twins: the same options with another
 *    offload mode (NONE, ALL, NON_SLIDING): views, queries and memory
 *    agree bit for bit, all but the tier fields;
 *  - a cache and its twin with incremental and compact quantized layers
 *    swapped: the same tokens, lengths, groups and returned views; a
 *    compact layer's stored view is the incremental one's residual;
 *  - a clone taken at a random point (it then receives the later
 *    operations too);
 *  - the stack of a cache's batch splits (and it may join the group);
 *  - a cache made by create_from_tensors and one made by create +
 *    update_all with the same tensors.
 * Every operation runs on every member; the error codes must agree, a call
 * that failed must have changed nothing (a snapshot of every observable
 * before it, cache_snapshot.h, equals the one after), and the views a call
 * returns must agree (and survive the queries that follow). Besides:
 *  - reorder, batch_select_indices and batch_repeat_interleave must leave
 *    every layer's stored view and states equal to the rows of the views
 *    read before (quantized layers: the dequantized history the cache
 *    returned is what gets permuted); batch_split's caches hold the row
 *    ranges, and stacking splits in any order holds those rows;
 *  - invariants on every member after every operation: info and views and
 *    lengths agree, mask_sizes(n) before an update equals the length the
 *    update returns, quantized_length <= seq_length with the residual the
 *    mode keeps, memory.bytes_quantized equals what the quantized lengths
 *    take, bytes_used equals the stored views, bytes_device + bytes_host ==
 *    bytes_reserved, only kinds that offload are offloaded, conv states hold
 *    K columns, has_previous_state agrees with itself;
 *  - no call returns KVC_ERROR_INTERNAL or runs out of memory, and every
 *    error has a message.
 * Random bad inputs (dtypes, shapes, NULLs, devices, out-of-range layers,
 * states and indices, bad option structs and RoPE tables) run the error
 * paths. Any divergence prints the trace of operations and aborts, which
 * libFuzzer reports as a crash. Leaks are LeakSanitizer's.
 *
 * Without libFuzzer (KVC_FUZZ_STANDALONE) the same target replays files and
 * runs pseudo-random inputs, see driver.c; it then also prints how often each
 * operation succeeded and failed.
 */
#define _POSIX_C_SOURCE 200809L /* opendir and stat, for the standalone replay */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

/* The build compiles one source per fuzz target (tests/fuzz/fuzz_<name>.c),
 * so the target's helpers are part of this translation unit (the reference
 * model for the types tensor_codec.c builds inputs from): kinds_state.c
 * holds the groups of caches, kinds_inputs.c makes options and inputs,
 * kinds_checks.c the invariants and row checks. */
#include "../common/cache_snapshot.c"
#include "op_stats.c"
#include "reader.c"
#include "reference_model.c"
#include "report.c"
#include "tensor_codec.c"
#include "kinds_state.c"
#include "kinds_checks.c"
#include "kinds_inputs.c"

#define FUZZ_TARGET_NAME "fuzz_kinds"
#include "driver.c"

/* ---------------------------------------------------------- statistics */

enum {
  OP_UPDATE,
  OP_UPDATE_FAULTY,
  OP_UPDATE_ALL,
  OP_CONV,
  OP_CONV_FAULTY,
  OP_REC,
  OP_REC_FAULTY,
  OP_CROP,
  OP_RECORD,
  OP_REORDER,
  OP_SELECT,
  OP_REPEAT,
  OP_SPLIT,
  OP_RESET,
  OP_CLONE,
  OP_OFFLOAD,
  OP_RESERVE,
  OP_EARLY_INIT,
  OP_QUERY,
  OP_CREATE,
  OP_CREATE_FROM_TENSORS,
  OP_DESTROY,
  OP_COUNT
};

static const char* const op_names[OP_COUNT] = {
    "update",
    "update (faults)",
    "update_all",
    "update_conv_state",
    "update_conv_state (faults)",
    "update_recurrent_state",
    "update_recurrent_state (faults)",
    "crop",
    "activate_past_recording",
    "reorder",
    "batch_select_indices",
    "batch_repeat_interleave",
    "batch_split",
    "reset",
    "clone",
    "offload/prefetch",
    "reserve",
    "early_initialization",
    "queries",
    "create",
    "create_from_tensors",
    "destroy"};

/* How often each operation is drawn (out of the sum): updates most, what ends a cache's life least. */
static const uint8_t op_weights[OP_COUNT] = {10, 2, 3, 5, 1, 3, 1, 2, 1, 2, 2, 2, 2, 1, 2, 2, 1, 1, 1, 1, 1, 1};

_Static_assert(OP_COUNT <= OPS_MAX, "op_stats.c counts OPS_MAX operations");
static int draw_op(uint8_t b) { return ops_draw(op_weights, OP_COUNT, b); }

#ifdef KVC_FUZZ_STANDALONE
/* How often each operation succeeded and failed: inputs that make every call fail would test little. */
static void print_summary(void) {
  ops_print_counts(op_names, OP_COUNT, 32);
}
#endif

static char g_last_message[160]; /* the last error's message, for -trace */

/* An error's code; its message must be there, and internal errors or running out of memory are findings. */
static kvc_code code_of(kvc_error* e, const char* what) {
  kvc_code k = kvc_error_code(e);
  if (e) {
    const char* msg = kvc_error_message(e);
    snprintf(g_last_message, sizeof g_last_message, "%s", msg ? msg : "");
    if (!msg || !msg[0]) fail("%s: error %s has an empty message", what, kvc_code_name(k));
    if (k == KVC_ERROR_INTERNAL || k == KVC_ERROR_OUT_OF_MEMORY || k == KVC_OK)
      fail("%s: returned %s (\"%s\")", what, kvc_code_name(k), msg);
  }
  kvc_error_destroy(e);
  return k;
}

/* ------------------------------------------------------- keeping groups */

static unsigned compare_flags(const group* g, int i) {
  return SNAP_IGNORE_RESERVED | (g->m[i].tier_id != g->m[0].tier_id ? SNAP_IGNORE_TIERS : 0u) |
         (g->m[i].flipped != g->m[0].flipped ? SNAP_IGNORE_QUANT_STORE : 0u);
}

/* Takes every member's snapshot again and checks the invariants and that the members agree. */
static void refresh(ctx* c, group* g) {
  char who[48], why[256];
  for (int i = 0; i < g->n; i++) {
    snap_free(&g->snap[i]);
    snap_take(g->m[i].c, &g->snap[i]);
    snprintf(who, sizeof who, "g%d.%s", gindex(c, g), mname(g, i));
    check_invariants(g, &g->snap[i], g->m[i].flipped, who);
  }
  for (int i = 1; i < g->n; i++) {
    if (!snap_equal(&g->snap[0], &g->snap[i], compare_flags(g, i), why, sizeof why))
      fail("g%d: %s and %s disagree: %s", gindex(c, g), mname(g, 0), mname(g, i), why);
    if (g->m[i].flipped != g->m[0].flipped) check_flipped_stores(g, i);
  }
}

/* After a call every member made: the codes agree, and a failure changed nothing. */
static kvc_code settle(ctx* c, group* g, const kvc_code* codes, const char* what) {
  char why[256];
  for (int i = 1; i < g->n; i++)
    if (codes[i] != codes[0])
      fail("g%d: %s returned %s on %s but %s on %s", gindex(c, g), what, kvc_code_name(codes[i]), mname(g, i),
           kvc_code_name(codes[0]), mname(g, 0));
  trace(" -> %s", kvc_code_name(codes[0]));
  if (codes[0] != KVC_OK && g_echo_trace) trace(" (%s)", g_last_message);
  trace("\n");
  count_result(codes[0]);
  if (codes[0] == KVC_OK) {
    refresh(c, g);
    return KVC_OK;
  }
  for (int i = 0; i < g->n; i++) {
    cache_snap now;
    snap_take(g->m[i].c, &now);
    if (!snap_equal(&g->snap[i], &now, 0, why, sizeof why))
      fail("g%d: %s failed with %s but changed %s: %s", gindex(c, g), what, kvc_code_name(codes[0]), mname(g, i), why);
    snap_free(&now);
  }
  return codes[0];
}

static void member_drop(group* g, int i) {
  kvc_cache_destroy(g->m[i].c);
  snap_free(&g->snap[i]);
  for (int j = i; j + 1 < g->n; j++) {
    g->m[j] = g->m[j + 1];
    g->snap[j] = g->snap[j + 1];
  }
  g->n--;
  memset(&g->m[g->n], 0, sizeof g->m[0]);
  memset(&g->snap[g->n], 0, sizeof g->snap[0]);
}

/* Adds a cache to the group (dropping a random member other than m0 when full). */
static void member_add(ctx* c, group* g, kvc_cache* cache, int tier_id, int flipped, const char* how) {
  if (g->n == MAX_MEMBERS) member_drop(g, 1 + rd(&c->r) % (MAX_MEMBERS - 1));
  member* m = &g->m[g->n];
  m->c = cache;
  m->tier_id = tier_id;
  m->flipped = flipped;
  snprintf(m->how, sizeof m->how, "%s", how);
  snap_take(cache, &g->snap[g->n]);
  g->n++;
}

static void group_clear(group* g) {
  while (g->n > 0) member_drop(g, g->n - 1);
  memset(g, 0, sizeof *g);
}

/* ---------------------------------------------------------------- create */

static group* take_group(ctx* c) {
  for (int i = 0; i < MAX_GROUPS; i++)
    if (!c->g[i].used) return &c->g[i];
  group* g = &c->g[rd(&c->r) % MAX_GROUPS];
  trace("g%d: destroy (to make room)\n", gindex(c, g));
  group_clear(g);
  return g;
}

/*
 * Twins of a new cache: the same options with another offload mode (they
 * behave the same but for the tiers), or with incremental and compact
 * quantized layers swapped (the same tokens and returned views; only what
 * a quantized layer stores differs).
 */
static void add_twins(ctx* c, group* g) {
  reader* r = &c->r;
  if (g->opts.null_options || rare(r, 4)) return;
  kvc_offload mine = resolved_offload(&g->opts);
  int cand[4], ncand = 0;
  for (kvc_offload m = KVC_OFFLOAD_NONE; m <= KVC_OFFLOAD_NON_SLIDING; m++)
    if (m != mine) cand[ncand++] = m;
  opt_store probe = g->opts;
  if (flip_options(&probe)) cand[ncand++] = -1;
  int want = 1 + rd(r) % 2, first = rd(r) % ncand;
  for (int k = 0; k < ncand && g->n <= want; k++) {
    int m = cand[(first + k) % ncand];
    opt_store s = g->opts;
    opt_link(&s);
    kvc_code want_code = KVC_OK;
    char what[64], how[40];
    if (m < 0) {
      flip_options(&s);
      snprintf(what, sizeof what, "create with incremental and compact swapped (a twin)");
      snprintf(how, sizeof how, "compact/incremental twin");
    } else {
      s.o.offload = m;
      if (s.o.preset == KVC_PRESET_QUANTIZED && m != KVC_OFFLOAD_NONE) want_code = KVC_ERROR_UNSUPPORTED;
      snprintf(what, sizeof what, "create with offload %d (a twin)", m);
      snprintf(how, sizeof how, "offload %d twin", m);
    }
    kvc_cache* out = NULL;
    kvc_code got = code_of(kvc_cache_create(&s.o, &out), what);
    if (got != want_code)
      fail("g%d: %s returned %s, expected %s: options that create a cache create it with any valid offload or "
           "quantizer mode",
           gindex(c, g), what, kvc_code_name(got), kvc_code_name(want_code));
    if (got != KVC_OK) continue;
    trace("g%d: + %s\n", gindex(c, g), how);
    member_add(c, g, out, m < 0 ? g->m[0].tier_id : c->next_tier++, m < 0, how);
  }
}

static void op_create(ctx* c) {
  group* g = take_group(c);
  opt_store s;
  gen_options(c, &s);
  trace("g%d: create", gindex(c, g));
  describe_options(&s);
  kvc_cache* sentinel = (kvc_cache*)&s;
  kvc_cache* out = sentinel;
  kvc_code code = code_of(kvc_cache_create(opt_get(&s), &out), "create");
  trace(" -> %s\n", kvc_code_name(code));
  count_result(code);
  if (code != KVC_OK) {
    if (out != sentinel) fail("a failed cache_create wrote its out-parameter");
    return;
  }
  memset(g, 0, sizeof *g);
  g->used = 1;
  g->opts = s;
  opt_link(&g->opts);
  char how[40];
  snprintf(how, sizeof how, "offload %d", resolved_offload(&g->opts));
  member_add(c, g, out, c->next_tier++, 0, how);
  gen_plan(c, g);
  add_twins(c, g);
  refresh(c, g);
}

/* create_from_tensors against create + update_all of the same tensors. */
static void op_create_from_tensors(ctx* c) {
  group* g = take_group(c);
  reader* r = &c->r;
  memset(g, 0, sizeof *g);
  gen_options(c, &g->opts);
  opt_link(&g->opts);
  gen_plan(c, g); /* kinds unknown yet: the plan's generic shapes */
  uint32_t n = (uint32_t)rd_range(r, 1, MAX_SPEC);
  int64_t ntok = rd_range(r, 1, 6);
  int fault = rare(r, 8) ? (int)rd_range(r, 1, F_COUNT - 1) : F_NONE;
  if (fault == F_NULLK || fault == F_NULLV) fault = F_NONE; /* arrays of tensors cannot hold NULL */
  uint32_t fault_layer = rd(r) % n;
  trace("g%d: create_from_tensors", gindex(c, g));
  describe_options(&g->opts);
  trace(" layers=%u tokens=%lld fault=%s@%u", n, (long long)ntok, fault_name(fault), fault_layer);
  kv_input in[MAX_SPEC];
  kvc_tensor keys[MAX_SPEC], values[MAX_SPEC];
  for (uint32_t l = 0; l < n; l++) {
    geom x = {g->B, g->L[l].H, g->L[l].Dk, g->L[l].Dv, g->dtype};
    kv_make(c, g, x, ntok, l == fault_layer ? fault : F_NONE, rd(r) % LAYOUT_COUNT, LAYOUT_COMPACT, &in[l]);
    keys[l] = in[l].k.t;
    values[l] = in[l].v.t;
  }
  const kvc_cache_options* o = opt_get(&g->opts);
  kvc_cache* sentinel = (kvc_cache*)g;
  kvc_cache *a = sentinel, *b = NULL;
  kvc_code ca = code_of(kvc_cache_create_from_tensors(o, n, keys, values, &a), "create_from_tensors");
  kvc_code cb = code_of(kvc_cache_create(o, &b), "create (for update_all)");
  if (cb == KVC_OK) {
    cb = code_of(kvc_cache_update_all(b, n, keys, values, NULL, NULL), "update_all (after create)");
    if (cb != KVC_OK) {
      kvc_cache_destroy(b);
      b = NULL;
    }
  }
  for (uint32_t l = 0; l < n; l++) kv_free(&in[l]);
  trace(" -> %s\n", kvc_code_name(ca));
  count_result(ca);
  if (ca != cb)
    fail("create_from_tensors returned %s but create + update_all %s", kvc_code_name(ca), kvc_code_name(cb));
  if (ca != KVC_OK) {
    if (a != sentinel) fail("a failed create_from_tensors wrote its out-parameter");
    memset(g, 0, sizeof *g);
    return;
  }
  g->used = 1;
  /* Tiers may differ: create_from_tensors fills the layers without the offloading update path, as
   * transformers' DynamicCache(ddp_cache_data) does. */
  member_add(c, g, a, c->next_tier++, 0, "from tensors");
  member_add(c, g, b, c->next_tier++, 0, "create + update_all");
  refresh(c, g);
}

static void op_destroy(ctx* c, group* g) {
  trace("g%d: destroy\n", gindex(c, g));
  count_result(KVC_OK);
  group_clear(g);
}

/* ---------------------------------------------------------------- update */

/* The returned views of one member, and what they held when returned. */
typedef struct returned {
  kvc_kv kv;
  snap_tensor k, v;
} returned;

static void returned_take(returned* r, const kvc_kv* kv) {
  r->kv = *kv;
  int bad = 0, bad2 = 0;
  snap_tensor_take(&kv->key, &r->k, &bad);
  snap_tensor_take(&kv->value, &r->v, &bad2);
  if (bad || bad2) fail("a returned view is malformed (ndim, shape or data NULL)");
}

static void returned_free(returned* r) {
  snap_tensor_free(&r->k);
  snap_tensor_free(&r->v);
}

/* The views member 0 got still hold the same (queries must not invalidate them). */
static void returned_recheck(const returned* r, const char* what) {
  snap_tensor k, v;
  char why[160];
  snap_tensor_take(&r->kv.key, &k, NULL);
  snap_tensor_take(&r->kv.value, &v, NULL);
  if (!snap_tensor_equal(&r->k, &k, 0, why, sizeof why)) fail("%s: returned keys changed under queries: %s", what, why);
  if (!snap_tensor_equal(&r->v, &v, 0, why, sizeof why))
    fail("%s: returned values changed under queries: %s", what, why);
  snap_tensor_free(&k);
  snap_tensor_free(&v);
}

static void returned_compare(const group* g, int i, const returned* a, const returned* b, const char* what) {
  char why[160];
  if (!snap_tensor_equal(&a->k, &b->k, 0, why, sizeof why))
    fail("%s: returned keys of %s and %s differ: %s", what, mname(g, 0), mname(g, i), why);
  if (!snap_tensor_equal(&a->v, &b->v, 0, why, sizeof why))
    fail("%s: returned values of %s and %s differ: %s", what, mname(g, 0), mname(g, i), why);
}

/* mask_sizes(n) asked before an update is the length of the keys and values it returned. */
static void check_mask_promise(int64_t kv_length, const returned* r, uint32_t layer, int64_t n, const char* what) {
  if (r->k.ndim != 4 || r->v.ndim != 4) fail("%s: returned views of layer %u are not 4-D", what, layer);
  if (kv_length < 0) return; /* not promised */
  if (r->k.shape[2] != kv_length || r->v.shape[2] != kv_length)
    fail("%s: layer %u returned %lld keys and %lld values, but mask_sizes(%lld) said %lld before the update", what,
         layer, (long long)r->k.shape[2], (long long)r->v.shape[2], (long long)n, (long long)kv_length);
}

/* Whether updating `layer` with n tokens would grow it past MAX_LEN. */
static int too_long(const group* g, uint32_t layer, int64_t n) {
  const cache_snap* s = &g->snap[0];
  return layer < s->num_layers && s->layers[layer].info.stored_length + n > MAX_LEN;
}

/* A layer to update: one with K/V most of the time, now and then a LINEAR or DUMMY one or one past the end. */
static uint32_t pick_layer(ctx* c, const group* g) {
  const cache_snap* s = &g->snap[0];
  uint32_t nl = s->num_layers;
  uint8_t lb = rd(&c->r);
  uint32_t layer = lb % 16 == 15 ? nl + lb / 16 % 2 : (uint32_t)(lb / 16 % (nl ? nl : 1));
  for (uint32_t k = 0; lb % 16 < 14 && k < nl && layer < nl && !kind_has_kv(s->layers[layer].info.kind); k++)
    layer = (layer + 1) % nl;
  if (is_lazy(g)) layer %= MAX_LAYERS;
  return layer;
}

static void op_update(ctx* c, group* g, int faulty) {
  reader* r = &c->r;
  uint32_t layer = pick_layer(c, g);
  geom x = layer_geom(g, layer);
  kvc_layer_kind kind = kind_of(g, layer);
  int64_t n = rare(r, 8) ? 0 : rd_range(r, 1, 6);
  if (kind == KVC_LAYER_SINK && rd(r) % 2) { /* mostly a shift that can keep a token */
    const cache_snap* s = &g->snap[0];
    int64_t w = layer < s->num_layers ? s->layers[layer].info.window : g->opts.o.window_length;
    int64_t k = layer < s->num_layers ? s->layers[layer].info.num_sink_tokens : g->opts.o.num_sink_tokens;
    if (w - k - 1 >= 1) n = rd_range(r, 1, w - k - 1);
  }
  int fault = faulty && rd(r) % 2 ? (int)rd_range(r, 1, F_COUNT - 1) : F_NONE;
  int lk = rd(r) % LAYOUT_COUNT, lv = rd(r) % LAYOUT_COUNT;
  int want_out = rd(r) % 4 != 0;
  if (too_long(g, layer, n)) return;
  trace("g%d: update layer %u n=%lld [%lld,%lld,*,%lld|%lld] %s fault=%s layout=%d/%d%s", gindex(c, g), layer,
        (long long)n, (long long)x.B, (long long)x.H, (long long)x.Dk, (long long)x.Dv, codec_dtype_name(x.dt),
        fault_name(fault), lk, lv, want_out ? "" : " out=NULL");
  kv_input in;
  kv_make(c, g, x, n, fault, lk, lv, &in);
  upd_opts u;
  gen_update_options(c, g, layer, x, n, faulty && fault == F_NONE, &u);
  kvc_code codes[MAX_MEMBERS];
  returned ret[MAX_MEMBERS];
  int64_t mlen[MAX_MEMBERS];
  memset(ret, 0, sizeof ret);
  for (int i = 0; i < g->n; i++) {
    int64_t off = 0;
    mlen[i] = -1;
    kvc_error_destroy(kvc_cache_mask_sizes(g->m[i].c, n, layer, &mlen[i], &off));
    if (!mask_promised(&g->snap[i], layer)) mlen[i] = -1;
    kvc_kv out, before;
    memset(&out, 0xA5, sizeof out);
    before = out;
    codes[i] = code_of(kvc_cache_update(g->m[i].c, layer, kv_key(&in), kv_value(&in), u.use ? &u.o : NULL,
                                        want_out ? &out : NULL),
                       "update");
    if (codes[i] != KVC_OK && memcmp(&out, &before, sizeof out)) fail("a failed update wrote its out-parameter");
    if (codes[i] == KVC_OK && want_out) returned_take(&ret[i], &out);
  }
  kv_free(&in);
  opts_free(&u);
  if (settle(c, g, codes, "update") == KVC_OK && want_out) {
    for (int i = 0; i < g->n; i++) {
      if (i) returned_compare(g, i, &ret[0], &ret[i], "update");
      check_mask_promise(mlen[i], &ret[i], layer, n, "update");
    }
    returned_recheck(&ret[0], "update");
  }
  for (int i = 0; i < g->n; i++) returned_free(&ret[i]);
}

static void op_update_all(ctx* c, group* g) {
  reader* r = &c->r;
  uint32_t nl = g->snap[0].num_layers;
  uint32_t n = is_lazy(g) ? (uint32_t)rd_range(r, 1, 4) : (uint32_t)(1 + rd(r) % (nl ? nl : 1)) + (uint32_t)rare(r, 8);
  int64_t ntok = rare(r, 8) ? 0 : rd_range(r, 1, 4);
  int fault = rare(r, 6) ? (int)rd_range(r, 1, F_COUNT - 1) : F_NONE;
  uint32_t fault_layer = rd(r) % n;
  int want_out = rd(r) % 4 != 0;
  if (fault == F_NULLK || fault == F_NULLV || (n > nl && !is_lazy(g))) fault = F_NONE;
  for (uint32_t l = 0; l < n; l++)
    if (too_long(g, l, ntok)) return;
  trace("g%d: update_all layers=%u n=%lld fault=%s@%u%s", gindex(c, g), n, (long long)ntok, fault_name(fault),
        fault_layer, want_out ? "" : " out=NULL");
  kv_input* in = fz_calloc(n, sizeof *in);
  kvc_tensor* keys = fz_calloc(n, sizeof *keys);
  kvc_tensor* values = fz_calloc(n, sizeof *values);
  for (uint32_t l = 0; l < n; l++) {
    kv_make(c, g, layer_geom(g, l), ntok, l == fault_layer ? fault : F_NONE, rd(r) % LAYOUT_COUNT,
            rd(r) % LAYOUT_COUNT, &in[l]);
    keys[l] = in[l].k.t;
    values[l] = in[l].v.t;
  }
  upd_opts u;
  gen_update_options(c, g, 0, layer_geom(g, 0), ntok, fault == F_NONE && rare(r, 4), &u);
  kvc_code codes[MAX_MEMBERS];
  returned* ret = fz_calloc((size_t)MAX_MEMBERS * n, sizeof *ret);
  int64_t* mlen = fz_calloc((size_t)MAX_MEMBERS * n, sizeof *mlen);
  kvc_kv* outs = fz_calloc(n, sizeof *outs);
  for (int i = 0; i < g->n; i++) {
    for (uint32_t l = 0; l < n; l++) {
      int64_t off = 0;
      mlen[i * n + l] = -1;
      kvc_error_destroy(kvc_cache_mask_sizes(g->m[i].c, ntok, l, &mlen[i * n + l], &off));
      if (!mask_promised(&g->snap[i], l)) mlen[i * n + l] = -1;
    }
    memset(outs, 0xA5, n * sizeof *outs);
    kvc_kv first = outs[0];
    codes[i] = code_of(
        kvc_cache_update_all(g->m[i].c, n, keys, values, u.use ? &u.o : NULL, want_out ? outs : NULL), "update_all");
    if (codes[i] != KVC_OK && memcmp(&outs[0], &first, sizeof first))
      fail("a failed update_all wrote its out-parameter");
    if (codes[i] == KVC_OK && want_out)
      for (uint32_t l = 0; l < n; l++) returned_take(&ret[i * n + l], &outs[l]);
  }
  for (uint32_t l = 0; l < n; l++) kv_free(&in[l]);
  opts_free(&u);
  if (settle(c, g, codes, "update_all") == KVC_OK && want_out) {
    for (int i = 0; i < g->n; i++)
      for (uint32_t l = 0; l < n; l++) {
        if (i) returned_compare(g, i, &ret[l], &ret[i * n + l], "update_all");
        check_mask_promise(mlen[i * n + l], &ret[i * n + l], l, ntok, "update_all");
      }
    /* update_all's views of every layer stay valid until the next mutating call. */
    for (uint32_t l = 0; l < n; l++) returned_recheck(&ret[l], "update_all");
  }
  for (int i = 0; i < MAX_MEMBERS * (int)n; i++) returned_free(&ret[i]);
  free(ret);
  free(mlen);
  free(outs);
  free(in);
  free(keys);
  free(values);
}

/* ------------------------------------------------------ recurrent state */

/* A linear layer most of the time (another or one past the end for the error paths). */
static uint32_t pick_linear_layer(ctx* c, const group* g) {
  const cache_snap* s = &g->snap[0];
  uint8_t b = rd(&c->r);
  if (b % 8 != 0)
    for (uint32_t k = 0; k < s->num_layers; k++) {
      uint32_t l = (b / 8 + k) % s->num_layers;
      if (snap_kind_is_linear(s->layers[l].info.kind)) return l;
    }
  return s->num_layers ? (uint32_t)(b / 8 % (s->num_layers + 1)) : 0;
}

/* A state pair of `layer`, now and then one past the last (its errors). */
static uint32_t pick_state(ctx* c, group* g, uint32_t layer) {
  const cache_snap* s = &g->snap[0];
  uint32_t nst = layer < s->num_layers && s->layers[layer].info.num_states ? s->layers[layer].info.num_states : 1;
  return (uint32_t)(rd(&c->r) % (nst + (uint32_t)rare(&c->r, 8)));
}

static void op_conv(ctx* c, group* g, int faulty) {
  reader* r = &c->r;
  uint32_t layer = pick_linear_layer(c, g), st = pick_state(c, g, layer);
  const snap_state* S = state_of(g, layer, st);
  const cache_snap* s = &g->snap[0];
  geom x = layer_geom(g, layer);
  const lplan* p = &g->L[layer % MAX_LAYERS];
  int64_t B = x.B, C = p->C, K = 0, len = 0;
  kvc_dtype dt = p->conv_dt;
  if (S && S->conv.ndim == 3) {
    C = S->conv.shape[1];
    len = S->conv.shape[2];
    dt = S->conv.dtype.code == KVC_TYPE_CODE_BFLOAT ? KVC_DTYPE_BFLOAT16
         : S->conv.dtype.bits == 16                 ? KVC_DTYPE_FLOAT16
                                                    : KVC_DTYPE_FLOAT32;
  }
  if (layer < s->num_layers) K = s->layers[layer].info.conv_kernel_size;
  int64_t n = rare(r, 8) ? 0 : rd_range(r, 1, 4);
  uint8_t mode = rd(r);
  kvc_conv_update_options o;
  kvc_conv_update_options_init(&o);
  o.state_index = st;
  int use_opts = st != 0 || mode % 3 != 0;
  int64_t pos[8], start = 0;
  if (mode % 4 == 1) {
    o.conv_kernel_size = mode / 4 % 3 == 0 ? (K ? K : rd_range(r, 1, 4)) : mode / 4 % 3 == 1 ? 0 : rd_range(r, 1, 5);
  } else if (mode % 4 == 2) { /* the legacy MambaCache protocol: prefill at 0..K-1, then one column */
    int64_t k = K ? K : rd_range(r, 1, 4);
    if (!S || S->conv.ndim == 0) n = k;
    start = S && S->conv.ndim ? rd_range(r, -1, k) : 0;
    if (n > 8) n = 8;
    for (int64_t i = 0; i < n; i++) pos[i] = start + i;
    o.cache_position = pos;
    o.cache_position_length = (uint32_t)n + (uint32_t)rare(r, 16);
    use_opts = 1;
  }
  trace("g%d: update_conv_state layer %u state %u n=%lld [%lld,%lld,*] %s", gindex(c, g), layer, st, (long long)n,
        (long long)B, (long long)C, codec_dtype_name(dt));
  if (o.conv_kernel_size) trace(" K=%lld", (long long)o.conv_kernel_size);
  if (o.cache_position) trace(" cache_position=%lld..+%u", (long long)start, o.cache_position_length);
  int fault = faulty ? (int)(rd(r) % 13) : 0;
  int64_t shape[4] = {B, C, n, 1};
  int ndim = 3, null_x = 0;
  kvc_dtype xdt = dt;
  switch (fault) {
    case 1: shape[1] = C + 1; trace(" fault=channels"); break;
    case 2: shape[0] = B + 1; trace(" fault=batch"); break;
    case 3: xdt = other_dtype(dt); trace(" fault=dtype"); break;
    case 4: ndim = 4; trace(" fault=ndim"); break;
    case 5: null_x = 1; trace(" fault=x NULL"); break;
    case 6: o.struct_size = 3; use_opts = 1; trace(" fault=struct_size"); break;
    case 7: o.conv_kernel_size = -1; use_opts = 1; trace(" fault=K<0"); break;
    case 8: o.cache_position = NULL; o.cache_position_length = 1; use_opts = 1; trace(" fault=positions NULL"); break;
    case 9: xdt = KVC_DTYPE_UNSET; trace(" fault=int32"); break;
    case 10: o.conv_kernel_size = (K ? K : 2) + 1; use_opts = 1; trace(" fault=K+1"); break;
    default: break;
  }
  if (len + n > MAX_LEN) {
    trace(" skipped (long)\n");
    return;
  }
  nd_tensor xt;
  nd_make(c, &xt, xdt, ndim, shape, (int)(rd(r) % ND_LAYOUTS));
  if (fault == 11) {
    xt.t.device.device_type = KVC_DEVICE_CUDA;
    trace(" fault=device");
  } else if (fault == 12) { /* refused with columns; with none (n 0) a valid input */
    xt.t.data = NULL;
    trace(" data=NULL");
  }
  int want_out = rd(r) % 4 != 0;
  kvc_code codes[MAX_MEMBERS];
  snap_tensor ret[MAX_MEMBERS];
  kvc_tensor out0;
  memset(&out0, 0, sizeof out0);
  memset(ret, 0, sizeof ret);
  for (int i = 0; i < g->n; i++) {
    kvc_tensor out, before;
    memset(&out, 0xA5, sizeof out);
    before = out;
    codes[i] = code_of(kvc_cache_update_conv_state(g->m[i].c, layer, null_x ? NULL : &xt.t, use_opts ? &o : NULL,
                                                   want_out ? &out : NULL),
                       "update_conv_state");
    if (codes[i] != KVC_OK && memcmp(&out, &before, sizeof out)) fail("a failed update_conv_state wrote its output");
    if (codes[i] == KVC_OK && want_out) {
      int bad = 0;
      snap_tensor_take(&out, &ret[i], &bad);
      if (bad || ret[i].ndim != 3) fail("update_conv_state returned a malformed view");
      if (i == 0) out0 = out;
    }
  }
  nd_free(&xt);
  if (settle(c, g, codes, "update_conv_state") == KVC_OK) {
    const snap_state* now = state_of(g, layer, st);
    if (!now || now->conv.ndim != 3 || !now->prev)
      fail("update_conv_state succeeded but conv state %u of layer %u is not allocated with a previous state", st,
           layer);
    char why[160];
    for (int i = 1; want_out && i < g->n; i++)
      if (!snap_tensor_equal(&ret[0], &ret[i], 0, why, sizeof why))
        fail("update_conv_state: returned views of %s and %s differ: %s", mname(g, 0), mname(g, i), why);
    if (want_out) {
      snap_tensor again;
      snap_tensor_take(&out0, &again, NULL);
      if (!snap_tensor_equal(&ret[0], &again, 0, why, sizeof why))
        fail("update_conv_state: the returned view changed under queries: %s", why);
      snap_tensor_free(&again);
    }
  }
  for (int i = 0; i < g->n; i++) snap_tensor_free(&ret[i]);
}

static void op_rec(ctx* c, group* g, int faulty) {
  reader* r = &c->r;
  uint32_t layer = pick_linear_layer(c, g), st = pick_state(c, g, layer);
  const snap_state* S = state_of(g, layer, st);
  const lplan* p = &g->L[layer % MAX_LAYERS];
  int64_t shape[8] = {layer_geom(g, layer).B, p->rec_shape[1], p->rec_shape[2], p->rec_shape[3], 1, 1, 1, 1};
  int ndim = p->rec_ndim;
  kvc_dtype dt = p->rec_dt;
  if (S && S->rec.ndim) {
    ndim = S->rec.ndim;
    for (int d = 0; d < ndim; d++) shape[d] = S->rec.shape[d];
    dt = S->rec.dtype.code == KVC_TYPE_CODE_BFLOAT ? KVC_DTYPE_BFLOAT16
         : S->rec.dtype.bits == 16                ? KVC_DTYPE_FLOAT16
                                                  : KVC_DTYPE_FLOAT32;
  }
  int fault = faulty ? (int)(rd(r) % 9) : 0;
  int null_x = 0;
  switch (fault) {
    case 1: if (ndim > 1) shape[1] += 1; else shape[0] += 1; break;
    case 2: shape[0] += 1; break;
    case 3: dt = other_dtype(dt); break;
    case 4: ndim = ndim < 6 ? ndim + 1 : 7; break;
    case 5: null_x = 1; break;
    case 6: dt = KVC_DTYPE_UNSET; break;
    case 7: shape[ndim - 1] = 0; break;
    default: break;
  }
  trace("g%d: update_recurrent_state layer %u state %u ndim %d [%lld,%lld,...] %s fault=%d", gindex(c, g), layer, st,
        ndim, (long long)shape[0], (long long)shape[1], codec_dtype_name(dt), fault);
  nd_tensor xt;
  nd_make(c, &xt, dt, ndim, shape, (int)(rd(r) % ND_LAYOUTS));
  if (fault == 8) xt.t.data = NULL;
  int want_out = rd(r) % 4 != 0;
  kvc_code codes[MAX_MEMBERS];
  snap_tensor ret[MAX_MEMBERS];
  memset(ret, 0, sizeof ret);
  for (int i = 0; i < g->n; i++) {
    kvc_tensor out, before;
    memset(&out, 0xA5, sizeof out);
    before = out;
    codes[i] = code_of(kvc_cache_update_recurrent_state(g->m[i].c, layer, st, null_x ? NULL : &xt.t,
                                                        want_out ? &out : NULL),
                       "update_recurrent_state");
    if (codes[i] != KVC_OK && memcmp(&out, &before, sizeof out))
      fail("a failed update_recurrent_state wrote its output");
    if (codes[i] == KVC_OK && want_out) {
      int bad = 0;
      snap_tensor_take(&out, &ret[i], &bad);
      if (bad) fail("update_recurrent_state returned a malformed view");
    }
  }
  if (settle(c, g, codes, "update_recurrent_state") == KVC_OK) {
    const snap_state* now = state_of(g, layer, st);
    snap_tensor in;
    snap_tensor_take(&xt.t, &in, NULL);
    char why[160];
    if (!now || !snap_tensor_equal(&now->rec, &in, 0, why, sizeof why))
      fail("update_recurrent_state: the state of layer %u, pair %u, is not the input: %s", layer, st,
           now ? why : "no state");
    for (int i = 0; want_out && i < g->n; i++)
      if (!snap_tensor_equal(&ret[i], &in, 0, why, sizeof why))
        fail("update_recurrent_state: the view returned to %s is not the input: %s", mname(g, i), why);
    snap_tensor_free(&in);
  }
  nd_free(&xt);
  for (int i = 0; i < g->n; i++) snap_tensor_free(&ret[i]);
}

/* ------------------------------------------------------- batch operations */

/* Indices in [0, B), now and then one out of range. */
static size_t gen_indices(reader* r, int64_t B, int64_t* idx, int* valid) {
  size_t count = rd(r) % 3 ? (size_t)B : (size_t)rd_range(r, 1, 5);
  if (count > MAX_BATCH) count = MAX_BATCH;
  for (size_t i = 0; i < count; i++) idx[i] = rd(r) % B;
  *valid = 1;
  uint8_t bad = rd(r);
  if (bad % 16 == 15) {
    idx[bad / 16 % count] = bad % 32 ? B : -1;
    *valid = 0;
  }
  return count;
}

static void trace_indices(const int64_t* idx, size_t count) {
  trace(" [");
  for (size_t i = 0; i < count; i++) trace("%s%lld", i ? " " : "", (long long)idx[i]);
  trace("]");
}

enum { BATCH_REORDER, BATCH_SELECT, BATCH_REPEAT };

static void op_batch(ctx* c, group* g, int which) {
  reader* r = &c->r;
  int64_t B = group_batch(g), idx[MAX_BATCH * 4], rows[MAX_BATCH * 4];
  int64_t nrows = 0, rep = 0;
  size_t count = 0;
  int valid = 1;
  static const char* names[] = {"reorder", "batch_select_indices", "batch_repeat_interleave"};
  trace("g%d: %s", gindex(c, g), names[which]);
  if (which == BATCH_REPEAT) {
    rep = rd(r) % 4;
    if (rep > 0 && max_batch(g) * rep > MAX_BATCH) rep = 1;
    valid = rep >= 1;
    trace(" %lld", (long long)rep);
  } else {
    count = gen_indices(r, B, idx, &valid);
    memcpy(rows, idx, count * sizeof *idx);
    nrows = (int64_t)count;
    trace_indices(idx, count);
  }
  cache_snap before;
  snap_take(g->m[0].c, &before);
  kvc_code codes[MAX_MEMBERS];
  for (int i = 0; i < g->n; i++) {
    kvc_cache* m = g->m[i].c;
    if (which == BATCH_REORDER) codes[i] = code_of(kvc_cache_reorder(m, idx, count), names[which]);
    else if (which == BATCH_SELECT) codes[i] = code_of(kvc_cache_batch_select_indices(m, idx, count), names[which]);
    else codes[i] = code_of(kvc_cache_batch_repeat_interleave(m, rep), names[which]);
  }
  /* A valid reorder of a cache whose moving layers share the batch works on every kind. */
  if (which == BATCH_REORDER && valid && rows_batch(&before) == B && codes[0] != KVC_OK)
    fail("reorder with valid indices of a batch of %lld failed with %s", (long long)B, kvc_code_name(codes[0]));
  if (settle(c, g, codes, names[which]) == KVC_OK) {
    check_rows(&before, &g->snap[0], which == BATCH_REPEAT ? NULL : rows, which == BATCH_REPEAT ? rep : nrows,
               names[which]);
    g->B = which == BATCH_REPEAT ? g->B * rep : nrows;
  }
  snap_free(&before);
}

static void op_split(ctx* c, group* g) {
  reader* r = &c->r;
  int src = rd(r) % g->n;
  const cache_snap* S = &g->snap[src];
  int64_t B = rows_batch(S), full = B;
  if (B < 1) full = g->B; /* no batch to split, or layers that disagree: an error */
  else if (rare(r, 16)) full = B + 1;
  int64_t split = rd_range(r, 1, 3);
  size_t need = (size_t)((full + split - 1) / split), cap = rare(r, 8) ? need - 1 : need;
  if (cap > MAX_SPLITS) return;
  trace("g%d: batch_split of %s full=%lld split=%lld capacity=%zu", gindex(c, g), mname(g, src), (long long)full,
        (long long)split, cap);
  kvc_cache* out[MAX_SPLITS];
  split_outputs_mark(out, MAX_SPLITS);
  size_t count = SPLIT_COUNT_UNSET;
  kvc_code code = code_of(kvc_cache_batch_split(g->m[src].c, full, split, out, cap, &count), "batch_split");
  trace(" -> %s\n", kvc_code_name(code));
  count_result(code);
  char why[256];
  cache_snap now;
  snap_take(g->m[src].c, &now);
  if (!snap_equal(S, &now, 0, why, sizeof why)) fail("batch_split changed the cache it split: %s", why);
  snap_free(&now);
  if (B >= 1 && full == B && cap >= need && code != KVC_OK)
    fail("batch_split of a cache with batch %lld into %lld failed with %s", (long long)B, (long long)split,
         kvc_code_name(code));
  if (code != KVC_OK) {
    split_outputs_untouched(out, MAX_SPLITS, count);
    return;
  }
  if (count != need) fail("batch_split made %zu caches, expected %zu", count, need);
  for (size_t k = 0; k < count; k++) {
    cache_snap part;
    snap_take(out[k], &part);
    int64_t first = (int64_t)k * split, n = B - first < split ? B - first : split;
    check_split(S, &part, first, n, k);
    char who[32];
    snprintf(who, sizeof who, "split %zu", k);
    check_invariants(g, &part, g->m[src].flipped, who);
    snap_free(&part);
  }
  /* Stack: all in order (the source again), reversed, or any choice with repeats: the rows they hold. */
  uint8_t mode = rd(r);
  const kvc_cache* pick[MAX_STACK];
  int64_t rows[MAX_STACK * MAX_BATCH], nrows = 0;
  size_t np = 0;
  if (mode % 3 == 0 || count == 1) {
    for (size_t k = 0; k < count && k < MAX_STACK; k++) pick[np++] = out[k];
  } else if (mode % 3 == 1) {
    for (size_t k = 0; k < count && k < MAX_STACK; k++) pick[np++] = out[count - 1 - k];
  } else {
    np = (size_t)rd_range(r, 1, MAX_STACK - 1);
    for (size_t k = 0; k < np; k++) pick[k] = out[rd(r) % count];
  }
  trace("  from_batch_splits of [");
  for (size_t k = 0; k < np; k++) {
    size_t which = 0;
    while (out[which] != pick[k]) which++;
    int64_t first = (int64_t)which * split, n = B - first < split ? B - first : split;
    for (int64_t i = 0; i < n; i++) rows[nrows++] = first + i;
    trace("%s%zu", k ? " " : "", which);
  }
  trace("]");
  kvc_cache* stacked = NULL;
  code = code_of(kvc_cache_from_batch_splits(pick, np, &stacked), "from_batch_splits");
  trace(" -> %s\n", kvc_code_name(code));
  if (code != KVC_OK) fail("from_batch_splits of splits of one cache failed with %s", kvc_code_name(code));
  cache_snap st;
  snap_take(stacked, &st);
  check_invariants(g, &st, g->m[src].flipped, "stacked");
  check_rows(S, &st, rows, nrows, "from_batch_splits");
  int in_order = nrows == B;
  for (int64_t i = 0; in_order && i < nrows; i++) in_order = rows[i] == i;
  if (in_order && !snap_equal(S, &st, SNAP_IGNORE_RESERVED | SNAP_IGNORE_TIERS, why, sizeof why))
    fail("the stack of all splits in order differs from %s: %s", mname(g, src), why);
  snap_free(&st);
  if (in_order && src == 0 && mode / 4 % 2) {
    trace("g%d: + the stack joins\n", gindex(c, g));
    member_add(c, g, stacked, c->next_tier++, g->m[src].flipped, "stack of splits");
  } else {
    kvc_cache_destroy(stacked);
  }
  for (size_t k = 0; k < count; k++) kvc_cache_destroy(out[k]);
  refresh(c, g);
}

/* -------------------------------------------------------- other mutations */

static int64_t gen_crop(reader* r) {
  uint8_t b = rd(r);
  switch (15 - b % 16) {
    case 0: return -100;
    case 1: return INT64_MIN;
    case 2: return 1000;
    default: return (int64_t)(int8_t)rd(r) % 12;
  }
}

static void run_simple(ctx* c, group* g, int op) {
  reader* r = &c->r;
  kvc_code codes[MAX_MEMBERS];
  int64_t arg = 0;
  kvc_init_options io;
  int64_t heads[MAX_LAYERS + 4], hdims[MAX_LAYERS + 4];
  const char* what = op_names[op];
  trace("g%d: %s", gindex(c, g), what);
  if (op == OP_CROP) {
    arg = gen_crop(r);
    trace(" %lld", (long long)arg);
  } else if (op == OP_RESERVE) {
    arg = rare(r, 16) ? -1 : rd(r) % 48;
    trace(" %lld", (long long)arg);
  } else if (op == OP_EARLY_INIT) {
    kvc_init_options_init(&io);
    io.batch_size = group_batch(g);
    io.num_kv_heads = g->L[0].H;
    io.k_head_dim = g->L[0].Dk;
    io.v_head_dim = rd(r) % 2 ? 0 : g->L[0].Dv;
    io.dtype = g->dtype;
    uint32_t nl = g->snap[0].num_layers;
    if (rd(r) % 3 == 0) {
      for (uint32_t l = 0; l < nl && l < MAX_LAYERS + 4; l++) heads[l] = g->L[l % MAX_LAYERS].H;
      io.num_kv_heads_per_layer = heads;
    }
    if (rd(r) % 3 == 0) {
      for (uint32_t l = 0; l < nl && l < MAX_LAYERS + 4; l++) hdims[l] = g->L[l % MAX_LAYERS].Dk;
      io.head_dim_per_layer = hdims;
    }
    switch (9 - rd(r) % 10) {
      case 0: io.batch_size = 0; break;
      case 1: io.dtype = KVC_DTYPE_UNSET; break;
      case 2: io.k_head_dim = 0; io.head_dim_per_layer = NULL; break;
      case 3: io.struct_size = 7; break;
      default: break;
    }
    trace(" B=%lld H=%lld Dk=%lld Dv=%lld %s%s%s", (long long)io.batch_size, (long long)io.num_kv_heads,
          (long long)io.k_head_dim, (long long)io.v_head_dim, codec_dtype_name(io.dtype),
          io.num_kv_heads_per_layer ? " per-layer heads" : "", io.head_dim_per_layer ? " per-layer dims" : "");
  }
  for (int i = 0; i < g->n; i++) {
    kvc_cache* m = g->m[i].c;
    switch (op) {
      case OP_CROP: codes[i] = code_of(kvc_cache_crop(m, arg), what); break;
      case OP_RECORD: codes[i] = code_of(kvc_cache_activate_past_recording(m), what); break;
      case OP_RESET: codes[i] = code_of(kvc_cache_reset(m), what); break;
      case OP_RESERVE: codes[i] = code_of(kvc_cache_reserve(m, arg), what); break;
      default: codes[i] = code_of(kvc_cache_early_initialization(m, &io), what); break;
    }
  }
  settle(c, g, codes, what);
}

static void op_clone(ctx* c, group* g) {
  int src = rd(&c->r) % g->n;
  trace("g%d: clone %s", gindex(c, g), mname(g, src));
  kvc_cache* out = NULL;
  kvc_code code = code_of(kvc_cache_clone(g->m[src].c, &out), "clone");
  trace(" -> %s\n", kvc_code_name(code));
  count_result(code);
  if (code != KVC_OK) fail("clone failed with %s", kvc_code_name(code));
  char why[256], how[40];
  cache_snap now, cl;
  snap_take(g->m[src].c, &now);
  if (!snap_equal(&g->snap[src], &now, 0, why, sizeof why)) fail("clone changed its source: %s", why);
  snap_take(out, &cl);
  if (!snap_equal(&now, &cl, SNAP_IGNORE_RESERVED, why, sizeof why)) fail("a clone differs from its source: %s", why);
  snap_free(&now);
  snap_free(&cl);
  snprintf(how, sizeof how, "clone of %s", g->m[src].how);
  member_add(c, g, out, g->m[src].tier_id, g->m[src].flipped, how);
  refresh(c, g);
}

/* kvc_cache_offload / kvc_cache_prefetch: only tiers change. */
static void op_offload(ctx* c, group* g) {
  reader* r = &c->r;
  uint32_t nl = g->snap[0].num_layers;
  uint32_t layer = (uint32_t)(rd(r) % (nl + 1));
  int prefetch = rd(r) % 2;
  trace("g%d: %s layer %u", gindex(c, g), prefetch ? "prefetch" : "offload", layer);
  kvc_code codes[MAX_MEMBERS];
  cache_snap before[MAX_MEMBERS];
  for (int i = 0; i < g->n; i++) {
    snap_take(g->m[i].c, &before[i]);
    codes[i] = code_of(prefetch ? kvc_cache_prefetch(g->m[i].c, layer) : kvc_cache_offload(g->m[i].c, layer),
                       prefetch ? "prefetch" : "offload");
  }
  if ((codes[0] == KVC_OK) != (layer < nl))
    fail("%s of layer %u of %u returned %s", prefetch ? "prefetch" : "offload", layer, nl, kvc_code_name(codes[0]));
  if (settle(c, g, codes, prefetch ? "prefetch" : "offload") == KVC_OK) {
    char why[256];
    for (int i = 0; i < g->n; i++) {
      if (!snap_equal(&before[i], &g->snap[i], SNAP_IGNORE_RESERVED | SNAP_IGNORE_TIERS, why, sizeof why))
        fail("%s of layer %u changed more than tiers on %s: %s", prefetch ? "prefetch" : "offload", layer,
             mname(g, i), why);
      const kvc_layer_info* I = &g->snap[i].layers[layer].info;
      if (prefetch && I->is_offloaded) fail("layer %u is still offloaded after prefetch on %s", layer, mname(g, i));
      if (!prefetch && !I->is_offloaded && I->is_initialized && is_offloading_kind(I->kind))
        fail("layer %u (kind %d) is not offloaded after offload on %s", layer, I->kind, mname(g, i));
    }
  }
  for (int i = 0; i < g->n; i++) snap_free(&before[i]);
}

/* Queries with bad arguments: errors, no writes, nothing changed. */
static void op_query(ctx* c, group* g) {
  reader* r = &c->r;
  kvc_cache* m = g->m[rd(r) % g->n].c;
  uint32_t nl = g->snap[0].num_layers;
  uint32_t layer = (uint32_t)(rd(r) % (nl + 1));
  trace("g%d: bad queries layer %u\n", gindex(c, g), layer);
  int v = -7;
  code_of(kvc_cache_has_previous_state(m, -2, 0, &v), "has_previous_state(layer -2)");
  if (code_of(kvc_cache_has_previous_state(m, (int32_t)layer, -2, &v), "has_previous_state(state -2)") == KVC_OK)
    fail("has_previous_state(state -2) succeeded");
  if (v != -7) fail("a failed has_previous_state wrote its output");
  kvc_tensor cv, rv, cv0, rv0;
  memset(&cv, 0x3C, sizeof cv);
  memset(&rv, 0x3C, sizeof rv);
  cv0 = cv;
  rv0 = rv;
  uint32_t st = layer < nl ? g->snap[0].layers[layer].info.num_states : 0;
  kvc_code k = code_of(kvc_cache_state_view(m, layer, st + (rd(r) % 2 ? 0 : 5), &cv, &rv), "state_view");
  if (k == KVC_OK && (layer >= nl || st == 0)) fail("state_view of a pair beyond the layer's succeeded");
  if (k != KVC_OK && (memcmp(&cv, &cv0, sizeof cv) || memcmp(&rv, &rv0, sizeof rv)))
    fail("a failed state_view wrote its outputs");
  kvc_layer_info info, before;
  memset(&info, 0x11, sizeof info);
  info.struct_size = 3;
  before = info;
  if (nl && code_of(kvc_cache_layer_info(m, 0, &info), "layer_info(struct_size 3)") == KVC_OK)
    fail("layer_info with struct_size 3 succeeded");
  if (memcmp(&info, &before, sizeof info)) fail("a failed layer_info wrote its out-parameter");
  int64_t len = -7, off = -7;
  if (code_of(kvc_cache_mask_sizes(m, -1, layer, &len, &off), "mask_sizes(-1)") == KVC_OK)
    fail("mask_sizes(-1) succeeded");
  kvc_memory_info mem;
  memset(&mem, 0, sizeof mem);
  mem.struct_size = 9;
  if (code_of(kvc_cache_memory(m, &mem), "memory(struct_size 9)") == KVC_OK) fail("memory with struct_size 9 succeeded");
  count_result(KVC_OK);
  char why[256];
  for (int i = 0; i < g->n; i++) {
    cache_snap now;
    snap_take(g->m[i].c, &now);
    if (!snap_equal(&g->snap[i], &now, 0, why, sizeof why)) fail("queries changed %s: %s", mname(g, i), why);
    snap_free(&now);
  }
}

/* ----------------------------------------------------------------- driver */

static group* pick_group(ctx* c) {
  int start = rd(&c->r) % MAX_GROUPS;
  for (int k = 0; k < MAX_GROUPS; k++)
    if (c->g[(start + k) % MAX_GROUPS].used) return &c->g[(start + k) % MAX_GROUPS];
  return NULL;
}

/* A used group whose cache has a linear layer (NULL: none has). */
static group* pick_linear_group(ctx* c, group* g) {
  for (int k = 0; k < MAX_GROUPS; k++) {
    group* h = &c->g[(gindex(c, g) + k) % MAX_GROUPS];
    const cache_snap* s = &h->snap[0];
    for (uint32_t l = 0; h->used && l < s->num_layers; l++)
      if (snap_kind_is_linear(s->layers[l].info.kind)) return h;
  }
  return NULL;
}

/* A state operation: on a cache with linear layers; without one, now and then (its errors), else an update. */
static void op_state(ctx* c, group* g, int conv, int faulty) {
  group* h = pick_linear_group(c, g);
  if (!h && !rare(&c->r, 4)) {
    g_op = OP_UPDATE;
    op_update(c, g, faulty);
    return;
  }
  if (conv)
    op_conv(c, h ? h : g, faulty);
  else
    op_rec(c, h ? h : g, faulty);
}

static void run_op(ctx* c, int op) {
  g_op = op;
  if (op == OP_CREATE) {
    op_create(c);
    return;
  }
  if (op == OP_CREATE_FROM_TENSORS) {
    op_create_from_tensors(c);
    return;
  }
  group* g = pick_group(c);
  if (!g) {
    g_op = OP_CREATE;
    op_create(c);
    return;
  }
  switch (op) {
    case OP_UPDATE: op_update(c, g, 0); break;
    case OP_UPDATE_FAULTY: op_update(c, g, 1); break;
    case OP_UPDATE_ALL: op_update_all(c, g); break;
    case OP_CONV: op_state(c, g, 1, 0); break;
    case OP_CONV_FAULTY: op_state(c, g, 1, 1); break;
    case OP_REC: op_state(c, g, 0, 0); break;
    case OP_REC_FAULTY: op_state(c, g, 0, 1); break;
    case OP_REORDER: op_batch(c, g, BATCH_REORDER); break;
    case OP_SELECT: op_batch(c, g, BATCH_SELECT); break;
    case OP_REPEAT: op_batch(c, g, BATCH_REPEAT); break;
    case OP_SPLIT: op_split(c, g); break;
    case OP_CLONE: op_clone(c, g); break;
    case OP_OFFLOAD: op_offload(c, g); break;
    case OP_QUERY: op_query(c, g); break;
    case OP_DESTROY: op_destroy(c, g); break;
    default: run_simple(c, g, op); break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ctx c;
  FUZZ_START_INPUT(c, data, size);
  g_fail_title = "kvcache differential fuzzer of the kinds: library caches that must agree do not";
#ifdef KVC_FUZZ_STANDALONE
  g_fuzz_summary = print_summary;
#endif
  g_op = OP_CREATE;
  op_create(&c);
  for (int ops = 0; ops < MAX_OPS && c.r.i < c.r.n; ops++) run_op(&c, draw_op(rd(&c.r)));
  for (int i = 0; i < MAX_GROUPS; i++)
    if (c.g[i].used) group_clear(&c.g[i]);
  return 0;
}
