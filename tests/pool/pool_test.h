/*
 * tests/pool/pool_test.h: helpers of the pool's tests (CPU pools: the
 * storage is host memory, so tests read the bytes directly).
 */
#ifndef KVC_TESTS_POOL_TEST_H
#define KVC_TESTS_POOL_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "test_util.h"

#define PT_MAX_SEQS 8

/* A pool of float32 layers: `groups` described by kind/block_size/num_blocks/window, one layer per entry of
   `layer_group` (heads 2, key dim 4, value dim 3; recurrent: conv 3x2, SSM 2x4x2). */
typedef struct pt_group {
  kvc_pool_group_kind kind;
  uint32_t block_size, num_blocks;
  int64_t window;
} pt_group;

/* The options of pt_pool, in `storage` (which they point into). */
typedef struct pt_options {
  kvc_pool_options o;
  kvc_pool_group_options g[8];
  kvc_pool_layer_options l[8];
} pt_options;

static TU_UNUSED void pt_options_fill(pt_options* storage, const pt_group* groups, uint32_t ng,
                                      const uint32_t* layer_group, uint32_t nl, kvc_pool_layout layout,
                                      uint32_t events, int caching) {
  kvc_pool_group_options* g = storage->g;
  kvc_pool_layer_options* l = storage->l;
  for (uint32_t i = 0; i < ng; i++) {
    kvc_pool_group_options x = KVC_POOL_GROUP_OPTIONS_INIT;
    x.kind = groups[i].kind;
    x.block_size = groups[i].block_size;
    x.num_blocks = groups[i].num_blocks;
    x.window = groups[i].window;
    g[i] = x;
  }
  for (uint32_t i = 0; i < nl; i++) {
    kvc_pool_layer_options x = KVC_POOL_LAYER_OPTIONS_INIT;
    x.group = layer_group[i];
    x.num_kv_heads = 2;
    x.key_head_dim = 4;
    if (groups[layer_group[i]].kind == KVC_POOL_GROUP_RECURRENT) {
      x.conv_dim = 3;
      x.conv_kernel = 2;
      x.ssm_state_size = 2;
    } else {
      x.value_head_dim = 3;
    }
    l[i] = x;
  }
  kvc_pool_options* o = &storage->o;
  kvc_pool_options_init(o);
  o->dtype = KVC_DTYPE_FLOAT32;
  o->num_groups = ng;
  o->groups = g;
  o->num_layers = nl;
  o->layers = l;
  o->layout = layout;
  o->hash_seed = "model-x";
  o->hash_seed_len = 7;
  o->event_capacity = events;
  o->enable_prefix_caching = caching;
}

/* A pool whose storage comes from `allocator` (NULL: the backend's memory). */
static TU_UNUSED kvc_error* pt_pool_with(kvc_pool** out, const pt_group* groups, uint32_t ng,
                                         const uint32_t* layer_group, uint32_t nl, kvc_pool_layout layout,
                                         uint32_t events, int caching, const kvc_allocator* allocator) {
  pt_options po;
  pt_options_fill(&po, groups, ng, layer_group, nl, layout, events, caching);
  po.o.allocator = allocator;
  return kvc_pool_create(&po.o, out);
}

/* The same on the backend's memory. */
static TU_UNUSED kvc_error* pt_pool(kvc_pool** out, const pt_group* groups, uint32_t ng, const uint32_t* layer_group,
                                    uint32_t nl, kvc_pool_layout layout, uint32_t events, int caching) {
  return pt_pool_with(out, groups, ng, layer_group, nl, layout, events, caching, NULL);
}

static TU_UNUSED kvc_pool_stats pt_stats(const kvc_pool* p, uint32_t g) {
  kvc_pool_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  kvc_error_destroy(kvc_pool_stats_get(p, g, &s));
  return s;
}

/* The padded table row of one sequence (CPU pool: the tensor is host memory). Returns its width. */
static TU_UNUSED int64_t pt_row(kvc_pool* p, const kvc_pool_sequence* s, uint32_t g, int32_t* row, int64_t cap) {
  kvc_pool_table t;
  kvc_error* e = kvc_pool_block_table(p, &s, 1, g, KVC_POOL_TABLE_PADDED, &t);
  if (e) {
    kvc_error_destroy(e);
    return -1;
  }
  int64_t w = t.table.shape[1];
  for (int64_t i = 0; i < w && i < cap; i++) row[i] = ((const int32_t*)t.table.data)[i];
  return w;
}

/* Checks a sequence's table in group g against `want` (n entries). */
#define CHECK_ROW(p, s, g, ...)                                                           \
  do {                                                                                    \
    int32_t want_[] = {__VA_ARGS__};                                                      \
    int32_t got_[64];                                                                     \
    int64_t n_ = pt_row((p), (s), (g), got_, 64);                                         \
    if (CHECK_EQ_I64(n_, (int64_t)(sizeof want_ / sizeof want_[0])))                      \
      for (int64_t i_ = 0; i_ < n_; i_++) CHECK_EQ_I64(got_[i_], want_[i_]);              \
  } while (0)

/* A value unique to (layer, kv, token, head, dim): what writes put and gathers must give back. */
static TU_UNUSED float pt_value(uint32_t layer, int kv, int64_t token, int64_t head, int64_t dim) {
  return (float)(layer * 100000 + kv * 50000 + token * 100 + head * 10 + dim) + 0.5f;
}

/* Writes tokens [first, first + n) (values pt_value with token = first + i) of every attention layer through
   the slot mapping of one reserve (num_groups * n entries). */
static TU_UNUSED kvc_error* pt_write(kvc_pool* p, uint32_t nl, const int64_t* slots, int64_t first, int64_t n) {
  kvc_tensor k[8], v[8];
  int64_t kshape[3] = {n, 2, 4}, vshape[3] = {n, 2, 3};
  float* kb = (float*)malloc((size_t)(nl * n * 8) * sizeof(float));
  float* vb = (float*)malloc((size_t)(nl * n * 6) * sizeof(float));
  for (uint32_t l = 0; l < nl; l++) {
    for (int64_t t = 0; t < n; t++)
      for (int64_t h = 0; h < 2; h++) {
        for (int64_t d = 0; d < 4; d++) kb[(l * n + t) * 8 + h * 4 + d] = pt_value(l, 0, first + t, h, d);
        for (int64_t d = 0; d < 3; d++) vb[(l * n + t) * 6 + h * 3 + d] = pt_value(l, 1, first + t, h, d);
      }
    memset(&k[l], 0, sizeof k[l]);
    memset(&v[l], 0, sizeof v[l]);
    k[l].data = kb + l * n * 8;
    v[l].data = vb + l * n * 6;
    k[l].device.device_type = v[l].device.device_type = KVC_DEVICE_CPU;
    k[l].ndim = v[l].ndim = 3;
    k[l].dtype = v[l].dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
    k[l].shape = kshape;
    v[l].shape = vshape;
  }
  kvc_error* e = kvc_pool_write(p, k, v, nl, slots, (size_t)n);
  free(kb);
  free(vb);
  return e;
}

/* Gathers layer `layer` of s and counts the elements that differ from pt_value (token t of the sequence was
   written as token t). -1 when the gather fails. */
static TU_UNUSED long pt_gather_mismatches(const kvc_pool_sequence* s, uint32_t layer) {
  int64_t n = (int64_t)kvc_pool_sequence_length(s);
  int64_t ks[4] = {1, 2, n, 4}, vs[4] = {1, 2, n, 3};
  float* kb = (float*)calloc((size_t)(n * 8 + 1), sizeof(float));
  float* vb = (float*)calloc((size_t)(n * 6 + 1), sizeof(float));
  kvc_tensor k, v;
  memset(&k, 0, sizeof k);
  memset(&v, 0, sizeof v);
  k.data = kb;
  v.data = vb;
  k.device.device_type = v.device.device_type = KVC_DEVICE_CPU;
  k.ndim = v.ndim = 4;
  k.dtype = v.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
  k.shape = ks;
  v.shape = vs;
  kvc_error* e = kvc_pool_gather(s, layer, &k, &v);
  long bad = 0;
  if (e) {
    kvc_error_destroy(e);
    bad = -1;
  } else {
    for (int64_t h = 0; h < 2; h++)
      for (int64_t t = 0; t < n; t++) {
        for (int64_t d = 0; d < 4; d++) bad += kb[(h * n + t) * 4 + d] != pt_value(layer, 0, t, h, d);
        for (int64_t d = 0; d < 3; d++) bad += vb[(h * n + t) * 3 + d] != pt_value(layer, 1, t, h, d);
      }
  }
  free(kb);
  free(vb);
  return bad;
}

/* Reserve + write + commit of `n` tokens (ids from `tokens`), the step of a serving loop. */
static TU_UNUSED kvc_error* pt_step(kvc_pool* p, uint32_t ng, uint32_t nl, kvc_pool_sequence* s,
                                    const int32_t* tokens, int64_t n) {
  int64_t* slots = (int64_t*)malloc((size_t)(ng * n) * sizeof(int64_t));
  int64_t first = (int64_t)kvc_pool_sequence_length(s);
  kvc_error* e = kvc_pool_reserve(s, tokens, (size_t)n, slots);
  if (!e) e = pt_write(p, nl, slots, first, n);
  if (!e) e = kvc_pool_commit(s);
  free(slots);
  return e;
}

/* The error of `e` is `code` and its message holds `what`; destroys it. */
static TU_UNUSED int err_is(kvc_error* e, kvc_code code, const char* what, const char* expr, const char* file,
                            int line) {
  tu_checks_total++;
  const char* msg = e ? kvc_error_message(e) : "";
  int ok = e && kvc_error_code(e) == code && strstr(msg, what);
  if (!ok) {
    tu_failures_total++;
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s gave %s (\"%s\"), expected %s naming '%s'\n", file, line,
            tu_current_test, expr, kvc_code_name(kvc_error_code(e)), msg, kvc_code_name(code), what);
  }
  kvc_error_destroy(e);
  return ok;
}
#define CHECK_REFUSED(expr, code, what) err_is((expr), (code), (what), #expr, __FILE__, __LINE__)

/* A float32 [d0, d1, d2] tensor in host memory. */
static TU_UNUSED kvc_tensor t3(float* data, int64_t* shape) {
  kvc_tensor t = tu_f32_view(data, shape);
  t.ndim = 3;
  return t;
}

/* The options of a float32 pool of one group (`kind`, `num_blocks` blocks of `bs` tokens) and one layer (`heads` heads
   of key dim `kdim`, no value dim set), in `storage`, which they point into: the caller sets the rest. */
typedef struct pt_single {
  kvc_pool_options o;
  kvc_pool_group_options g;
  kvc_pool_layer_options l;
} pt_single;

static TU_UNUSED void pt_single_fill(pt_single* s, kvc_pool_group_kind kind, uint32_t bs, uint32_t num_blocks,
                                     uint32_t heads, uint32_t kdim) {
  s->g = (kvc_pool_group_options)KVC_POOL_GROUP_OPTIONS_INIT;
  s->g.kind = kind;
  s->g.block_size = bs;
  s->g.num_blocks = num_blocks;
  s->l = (kvc_pool_layer_options)KVC_POOL_LAYER_OPTIONS_INIT;
  s->l.num_kv_heads = heads;
  s->l.key_head_dim = kdim;
  s->o = (kvc_pool_options)KVC_POOL_OPTIONS_INIT;
  s->o.dtype = KVC_DTYPE_FLOAT32;
  s->o.num_groups = 1;
  s->o.groups = &s->g;
  s->o.num_layers = 1;
  s->o.layers = &s->l;
}

/* A pool of one full group (`usable` blocks of bs tokens), one layer, events on, hashed in `mode` with `seed`. */
static TU_UNUSED kvc_error* pt_one_group(kvc_pool_hash_mode mode, uint32_t bs, uint32_t usable, const void* seed,
                                         size_t seed_len, kvc_pool** out) {
  pt_single s;
  pt_single_fill(&s, KVC_POOL_GROUP_FULL, bs, usable + 1, 1, 2);
  s.o.hash_seed = seed;
  s.o.hash_seed_len = seed_len;
  s.o.event_capacity = 4096;
  s.o.hash_mode = mode;
  return kvc_pool_create(&s.o, out);
}

/* Reserves `n` tokens for s and commits them. */
static TU_UNUSED kvc_error* pt_append(kvc_pool_sequence* s, const int32_t* tokens, size_t n) {
  int64_t* slots = (int64_t*)malloc((n + 1) * sizeof(int64_t));
  if (!slots) abort();
  kvc_error* e = kvc_pool_reserve(s, tokens, n, slots);
  free(slots);
  return e ? e : kvc_pool_commit(s);
}

/* Tokens a new sequence with options `o` matches of `tokens` (n of them); UINT64_MAX when a call fails. */
static TU_UNUSED uint64_t pt_matched(kvc_pool* p, const kvc_pool_sequence_options* o, const int32_t* tokens, size_t n) {
  kvc_pool_sequence* s = NULL;
  uint64_t m = UINT64_MAX;
  if (CHECK_OK(kvc_pool_sequence_create(p, o, &s))) CHECK_OK(kvc_pool_match_prefix(s, tokens, n, &m));
  kvc_pool_sequence_destroy(s);
  return m;
}

#endif /* KVC_TESTS_POOL_TEST_H */
