/*
 * tests/pool/pool_layers_test.h: pools whose layers differ from each other
 * (head counts, dims, fp8 storage, latent groups without V), for the tests
 * of fp8 storage and latent groups. Float32 pools on the CPU: the storage is
 * host memory, read directly. Inputs come from pl_input; a gather must give
 * back, per element, what the layer stores of it (`pl_kept`).
 */
#ifndef KVC_TESTS_POOL_LAYERS_TEST_H
#define KVC_TESTS_POOL_LAYERS_TEST_H

#include <math.h>

#include "../persist/persist_test.h" /* ps_buffer: a sequence file in memory */
#include "pool_test.h"

typedef struct pl_layer {
  uint32_t group, heads, kdim, vdim; /* vdim 0: a latent layer */
  kvc_pool_storage storage;
  float k_scale, v_scale;
} pl_layer;

typedef struct pl_model {
  pt_group groups[4];
  uint32_t ng;
  pl_layer layers[8];
  uint32_t nl;
  kvc_pool_layout layout;
  uint64_t shared_budget_bytes; /* 0: each group its num_blocks */
} pl_model;

/* The options of `m` into `po` (events on, prefix caching on). */
static TU_UNUSED void pl_options(const pl_model* m, pt_options* po) {
  uint32_t lg[8];
  for (uint32_t i = 0; i < m->nl; i++) lg[i] = m->layers[i].group;
  pt_options_fill(po, m->groups, m->ng, lg, m->nl, m->layout, 64, 1);
  po->o.shared_budget_bytes = m->shared_budget_bytes;
  for (uint32_t i = 0; i < m->nl; i++) {
    const pl_layer* l = &m->layers[i];
    kvc_pool_layer_options* x = &po->l[i];
    x->num_kv_heads = l->heads;
    x->key_head_dim = l->kdim;
    x->value_head_dim = l->vdim;
    x->storage = l->storage;
    x->k_scale = l->k_scale;
    x->v_scale = l->v_scale;
  }
}

static TU_UNUSED kvc_error* pl_pool(const pl_model* m, kvc_pool** out) {
  pt_options po;
  pl_options(m, &po);
  return kvc_pool_create(&po.o, out);
}

/*
 * The input of (layer, kv, token, head, dim): signed values over a few binades, with some that an fp8 layer
 * saturates (1000), some it stores as subnormal codes (1e-3), and a NaN (token 3, head 0, dim 1).
 */
static TU_UNUSED float pl_input(uint32_t layer, int kv, int64_t token, int64_t h, int64_t d) {
  if (token == 3 && h == 0 && d == 1) return NAN;
  if (d == 0 && token % 5 == 2) return kv ? -1000.0f : 1000.0f;
  if (d == 2 && token % 4 == 1) return 1e-3f * (float)(1 + h);
  int64_t k = (token * 7 + h * 3 + d * 5 + layer * 11 + kv * 13) % 61 - 30;
  return (float)k * 0.37f + (float)layer * 0.01f;
}

/* What a layer keeps of input x: x (the pool's dtype), or an fp8 layer's decoded code (the test says how). */
typedef float (*pl_kept_fn)(float x, float scale);
static TU_UNUSED pl_kept_fn pl_fp8_kept;

static TU_UNUSED float pl_kept(const pl_layer* l, int kv, float x) {
  if (l->storage != KVC_POOL_STORAGE_FP8_E4M3) return x;
  return pl_fp8_kept(x, kv ? l->v_scale : l->k_scale);
}

static TU_UNUSED int pl_same(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

/* Inputs of tokens [first, first + n) of every layer: K [n, heads, kdim], V [n, heads, vdim] (none when latent). */
typedef struct pl_inputs {
  float* buf[8][2];
  int64_t shape[8][2][3];
  kvc_tensor t[8][2];
} pl_inputs;

static TU_UNUSED void pl_inputs_make(pl_inputs* in, const pl_model* m, int64_t first, int64_t n) {
  memset(in, 0, sizeof *in);
  for (uint32_t li = 0; li < m->nl; li++) {
    const pl_layer* l = &m->layers[li];
    for (int kv = 0; kv < (l->vdim ? 2 : 1); kv++) {
      int64_t d = kv ? l->vdim : l->kdim;
      float* b = (float*)malloc((size_t)(n * l->heads * d + 1) * sizeof(float));
      for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < l->heads; h++)
          for (int64_t x = 0; x < d; x++) b[(t * l->heads + h) * d + x] = pl_input(li, kv, first + t, h, x);
      int64_t* s = in->shape[li][kv];
      s[0] = n, s[1] = l->heads, s[2] = d;
      in->buf[li][kv] = b;
      in->t[li][kv] = t3(b, s);
    }
  }
}

static TU_UNUSED void pl_inputs_free(pl_inputs* in) {
  for (int i = 0; i < 8; i++) free(in->buf[i][0]), free(in->buf[i][1]);
}

/* Writes tokens [first, first + n) of every layer through `slots` (one reserve's mapping): kvc_pool_write, or
   kvc_pool_write_layer layer by layer. Latent layers pass no V. */
static TU_UNUSED kvc_error* pl_write(kvc_pool* p, const pl_model* m, const int64_t* slots, int64_t first, int64_t n,
                                     int per_layer) {
  pl_inputs in;
  pl_inputs_make(&in, m, first, n);
  kvc_tensor k[8], v[8];
  memset(v, 0, sizeof v);
  for (uint32_t l = 0; l < m->nl; l++) k[l] = in.t[l][0], v[l] = in.t[l][1];
  kvc_error* e = NULL;
  if (!per_layer)
    e = kvc_pool_write(p, k, v, m->nl, slots, (size_t)n);
  for (uint32_t l = 0; per_layer && !e && l < m->nl; l++)
    e = kvc_pool_write_layer(p, l, &k[l], m->layers[l].vdim ? &v[l] : NULL, slots, (size_t)n);
  pl_inputs_free(&in);
  return e;
}

/* Reserve, write and commit `n` tokens of `tokens` for s. */
static TU_UNUSED kvc_error* pl_step(kvc_pool* p, const pl_model* m, kvc_pool_sequence* s, const int32_t* tokens,
                                    int64_t n, int per_layer) {
  int64_t* slots = (int64_t*)malloc((size_t)(m->ng * n) * sizeof(int64_t));
  int64_t first = (int64_t)kvc_pool_sequence_length(s);
  kvc_error* e = kvc_pool_reserve(s, tokens, (size_t)n, slots);
  if (!e) e = pl_write(p, m, slots, first, n, per_layer);
  if (!e) e = kvc_pool_commit(s);
  free(slots);
  return e;
}

/* Gathers `layer` of s and counts the elements that differ from what the layer keeps of pl_input (token t of the
   sequence written as token t); -1 when the gather fails. */
static TU_UNUSED long pl_gather_mismatches(const kvc_pool_sequence* s, const pl_model* m, uint32_t layer) {
  const pl_layer* l = &m->layers[layer];
  int64_t n = (int64_t)kvc_pool_sequence_length(s);
  int parts = l->vdim ? 2 : 1;
  int64_t shape[2][4] = {{1, l->heads, n, l->kdim}, {1, l->heads, n, l->vdim}};
  float* b[2] = {NULL, NULL};
  kvc_tensor t[2];
  for (int kv = 0; kv < parts; kv++) {
    b[kv] = (float*)calloc((size_t)(n * l->heads * shape[kv][3] + 1), sizeof(float));
    t[kv] = tu_f32_view(b[kv], shape[kv]);
  }
  kvc_error* e = kvc_pool_gather(s, layer, &t[0], parts == 2 ? &t[1] : NULL);
  long bad = 0;
  if (e) {
    fprintf(TU_LOG, "pl_gather_mismatches: %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
    bad = -1;
  }
  for (int kv = 0; !e && kv < parts; kv++)
    for (int64_t h = 0; h < l->heads; h++)
      for (int64_t tok = 0; tok < n; tok++)
        for (int64_t d = 0; d < shape[kv][3]; d++)
          bad += !pl_same(b[kv][(h * n + tok) * shape[kv][3] + d], pl_kept(l, kv, pl_input(layer, kv, tok, h, d)));
  free(b[0]);
  free(b[1]);
  return bad;
}

/* Every layer of s gathers what it keeps. */
static TU_UNUSED long pl_all_mismatches(const kvc_pool_sequence* s, const pl_model* m) {
  long bad = 0;
  for (uint32_t l = 0; l < m->nl; l++) {
    long b = pl_gather_mismatches(s, m, l);
    if (b < 0) return -1;
    bad += b;
  }
  return bad;
}

/* A copy of every layer's storage bytes (K then V), to show that a refused call changed nothing. */
typedef struct pl_snapshot {
  unsigned char* bytes;
  size_t len;
} pl_snapshot;

static TU_UNUSED size_t pl_view_bytes(const kvc_tensor* t) {
  if (!t->data) return 0;
  size_t n = t->dtype.bits / 8;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

static TU_UNUSED pl_snapshot pl_take(const kvc_pool* p, const pl_model* m) {
  pl_snapshot s = {NULL, 0};
  for (int pass = 0; pass < 2; pass++) {
    size_t at = 0;
    for (uint32_t l = 0; l < m->nl; l++) {
      kvc_kv kv;
      kvc_error* e = kvc_pool_layer_storage(p, l, m->layout, &kv);
      if (e) {
        kvc_error_destroy(e);
        continue;
      }
      const kvc_tensor* t[2] = {&kv.key, &kv.value};
      for (int k = 0; k < 2; k++) {
        size_t n = pl_view_bytes(t[k]);
        if (pass && n) memcpy(s.bytes + at, t[k]->data, n);
        at += n;
      }
    }
    if (!pass) s.bytes = (unsigned char*)malloc(at + 1), s.len = at;
  }
  return s;
}

/* Whether the storage still holds the snapshot's bytes; frees the snapshot. */
static TU_UNUSED int pl_unchanged(const kvc_pool* p, const pl_model* m, pl_snapshot before) {
  pl_snapshot now = pl_take(p, m);
  int same = now.len == before.len && !memcmp(now.bytes, before.bytes, now.len);
  free(now.bytes);
  free(before.bytes);
  return same;
}

/* The prompt of the tier and file tests: token i is 3 + i * 5 % 97. */
static TU_UNUSED void pl_prompt(int32_t* tokens, size_t n) {
  for (size_t i = 0; i < n; i++) tokens[i] = 3 + (int32_t)(i * 5 % 97);
}

/* A pool of `m` with one sequence that holds the first `n` of the `len` prompt tokens written into `tokens`
   (computed and committed with pl_step; none when n is 0). */
static TU_UNUSED kvc_error* pl_start(const pl_model* m, int32_t* tokens, size_t len, int64_t n, int per_layer,
                                     kvc_pool** p, kvc_pool_sequence** s) {
  pl_prompt(tokens, len);
  *p = NULL;
  *s = NULL;
  kvc_error* e = pl_pool(m, p);
  if (!e) e = kvc_pool_sequence_create(*p, NULL, s);
  if (!e && n) e = pl_step(*p, m, *s, tokens, n, per_layer);
  return e;
}

/* The bytes of one block of group `group` in a file or tier, and the layers they cover, from the options of `m`. */
static TU_UNUSED size_t pl_block_payload(const pl_model* m, uint32_t group, uint32_t* layers) {
  pt_options po;
  pl_options(m, &po);
  size_t payload = 0;
  *layers = 0;
  CHECK_OK(kvc_pool_options_block_payload(&po.o, group, &payload, layers));
  return payload;
}

/*
 * A pool of `writer` with a disk tier on `dir` (WRITE_ON_COMMIT) computes and commits the first `n` (<= 64)
 * prompt tokens and is destroyed; a new pool of `reader` with a tier on the same directory then matches the
 * prompt. Returns the tokens matched (-1: a call failed); a match's sequence must gather what `reader` keeps.
 */
static TU_UNUSED int64_t pl_tier_round_trip(const char* dir, const pl_model* writer, const pl_model* reader,
                                            size_t n) {
  int32_t tok[64];
  pl_prompt(tok, n);
  kvc_pool* p = NULL;
  kvc_pool_sequence* s = NULL;
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  kvc_tier* t = NULL;
  if (!CHECK_OK(pl_pool(writer, &p))) return -1;
  if (!CHECK_OK(kvc_disk_tier_create(&o, &t)) || !CHECK_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT)) ||
      !CHECK_OK(kvc_pool_sequence_create(p, NULL, &s)) || !CHECK_OK(pl_step(p, writer, s, tok, (int64_t)n, 0))) {
    kvc_pool_destroy(p);
    return -1;
  }
  kvc_pool_destroy(p); /* the tier and the sequence with it */
  p = NULL, s = NULL, t = NULL;
  uint64_t matched = 0;
  int64_t result = -1;
  if (CHECK_OK(pl_pool(reader, &p)) && CHECK_OK(kvc_disk_tier_create(&o, &t)) &&
      CHECK_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT)) && CHECK_OK(kvc_pool_sequence_create(p, NULL, &s)) &&
      CHECK_OK(kvc_pool_match_prefix(s, tok, n, &matched))) {
    result = (int64_t)matched;
    if (matched) CHECK_EQ_I64(pl_all_mismatches(s, reader), 0);
  }
  if (!p) kvc_tier_destroy(t);
  kvc_pool_destroy(p);
  return result;
}

/* Saves a sequence of `writer` (the first `n` prompt tokens, committed) to memory and loads it into a pool of
   `reader`: NULL and the loaded sequence gathering what `reader` keeps, or the load's error. */
static TU_UNUSED kvc_error* pl_file_round_trip(const pl_model* writer, const pl_model* reader, size_t n) {
  int32_t tok[64];
  pl_prompt(tok, n);
  kvc_pool *a = NULL, *b = NULL;
  kvc_pool_sequence *s = NULL, *t = NULL;
  ps_buffer f = {NULL, 0, 0};
  kvc_error* e = pl_pool(writer, &a);
  if (!e) e = kvc_pool_sequence_create(a, NULL, &s);
  if (!e) e = pl_step(a, writer, s, tok, (int64_t)n, 1);
  if (!e) e = kvc_pool_sequence_save_to(s, ps_buffer_write, &f, NULL);
  if (!e) e = pl_pool(reader, &b);
  if (!e) e = kvc_pool_sequence_load_buffer(b, f.data, f.len, &t);
  if (!e) {
    CHECK_EQ_U64(kvc_pool_sequence_length(t), n);
    CHECK_EQ_I64(pl_all_mismatches(t, reader), 0);
  }
  free(f.data);
  kvc_pool_destroy(a);
  kvc_pool_destroy(b);
  return e;
}

#endif /* KVC_TESTS_POOL_LAYERS_TEST_H */
