/*
 * update on every layer kind against a reference model of docs/semantics.md (dynamic,
 * dynamic sliding, static and static sliding layers): random sequences of update sizes, with each token's value
 * naming its absolute position. Before every update the mask sizes, usable
 * length and max length are checked against the view that update then
 * returns; after it, the stored view and the counters.
 */
#include "test_util.h"
#include "test_model.h"

#define NB 2
#define NH 3
#define DK 4
#define DV 2

static kvc_cache* cache_for(const model* m) {
  return tu_one_layer_cache(m->kind, m->window, m->max_cache_len);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

/* One checked update of n tokens on layer 0 of c. */
static int model_step(kvc_cache* c, model* m, int64_t n) {
  int64_t want_ret[512], want_st[512];
  int64_t nret = model_returned(m, n, want_ret);
  int ok = 1;

  int64_t len = -9, off = -9;
  ok &= CHECK_OK(kvc_cache_mask_sizes(c, n, 0, &len, &off));
  ok &= CHECK_EQ_I64(len, nret);
  ok &= CHECK_EQ_I64(off, want_ret[0]);

  int64_t maxlen = model_max_length(m), usable = -9;
  ok &= CHECK_EQ_I64(tu_max_len(c, 0), maxlen);
  ok &= CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), maxlen);
  ok &= CHECK_OK(kvc_cache_usable_length(c, n, 0, &usable));
  int64_t seq_before = m->cum;
  ok &= CHECK_EQ_I64(usable, (maxlen >= 0 && seq_before + n > maxlen) ? maxlen - n : seq_before);

  kvc_kv out;
  memset(&out, 0, sizeof out);
  if (!CHECK_OK(tu_update_tokens(c, 0, NB, NH, n, DK, DV, m->cum, NULL, &out))) return 0;
  ok &= CHECK_SHAPE(out.key, NB, NH, nret, DK);
  ok &= CHECK_SHAPE(out.value, NB, NH, nret, DV);
  ok &= CHECK_TOKENS(out, want_ret, nret);
  CHECK(out.key.strides == NULL || out.key.strides[3] == 1);

  m->cum += n;
  int64_t nst = model_stored(m, m->cum, want_st);
  kvc_kv st = tu_view(c, 0);
  ok &= CHECK_TOKENS(st, want_st, nst);
  kvc_layer_info li = tu_info(c, 0);
  ok &= CHECK_EQ_I64(li.stored_length, nst);
  ok &= CHECK_EQ_I64(li.seq_length, m->cum);
  ok &= CHECK_EQ_I64(tu_seq(c, 0), m->cum);
  return ok;
}

static void run_model(kvc_layer_kind kind, int64_t window, int64_t max_cache_len, int steps) {
  model m = model_new(kind, window, max_cache_len);
  kvc_cache* c = cache_for(&m);
  REQUIRE(c != NULL);
  for (int s = 0; s < steps; s++) {
    int64_t n;
    uint32_t r = rng() % 8;
    if (r < 5) n = 1;
    else if (r < 7) n = 2 + (int64_t)(rng() % 3);
    else n = 1 + (int64_t)(rng() % (uint32_t)(2 * (window > 0 ? window : 4) + 2));
    if (kind == KVC_LAYER_STATIC && m.cum + n > max_cache_len) n = max_cache_len - m.cum;
    if (n <= 0) break;
    if (m.cum + n > 400) break;
    if (!model_step(c, &m, n)) {
      fprintf(stderr, "    (kind %d, window %lld, max_cache_len %lld, step %d, n %lld, cum before %lld)\n", (int)kind,
              (long long)window, (long long)max_cache_len, s, (long long)n, (long long)m.cum);
      break;
    }
  }
  kvc_cache_destroy(c);
}

static void test_model_dynamic(void) {
  for (int rep = 0; rep < 4; rep++) run_model(KVC_LAYER_DYNAMIC, 0, 0, 40);
}

static void test_model_dynamic_sliding(void) {
  const int64_t windows[] = {2, 3, 4, 7, 16};
  for (size_t i = 0; i < sizeof windows / sizeof *windows; i++)
    for (int rep = 0; rep < 3; rep++) {
      run_model(KVC_LAYER_DYNAMIC_SLIDING, windows[i], 0, 40);
      run_model(KVC_LAYER_DYNAMIC_CHUNKED, windows[i], 0, 40);
    }
}

static void test_model_static(void) {
  const int64_t lens[] = {1, 4, 9, 64};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
    for (int rep = 0; rep < 3; rep++) run_model(KVC_LAYER_STATIC, 0, lens[i], 40);
}

static void test_model_static_sliding(void) {
  const int64_t wm[][2] = {{1, 8}, {2, 8}, {4, 4}, {4, 100}, {100, 5}, {7, 7}, {16, 30}};
  for (size_t i = 0; i < sizeof wm / sizeof *wm; i++)
    for (int rep = 0; rep < 3; rep++) {
      run_model(KVC_LAYER_STATIC_SLIDING, wm[i][0], wm[i][1], 40);
      run_model(KVC_LAYER_STATIC_CHUNKED, wm[i][0], wm[i][1], 40);
    }
}

/* Each case of 'Static sliding and chunked layers' reached on purpose, with the returned view checked against the model. */
static void test_static_sliding_branches(void) {
  model m = model_new(KVC_LAYER_STATIC_SLIDING, 5, 10);
  kvc_cache* c = cache_for(&m);
  REQUIRE(c != NULL);
  CHECK(model_step(c, &m, 2)); /* 4: still not full */
  CHECK(model_step(c, &m, 3)); /* 4: exactly full, returns the buffer */
  CHECK(model_step(c, &m, 1)); /* 1: full, one token: roll */
  CHECK(model_step(c, &m, 1));
  CHECK(model_step(c, &m, 3)); /* 2: full, several tokens */
  kvc_cache_destroy(c);

  m = model_new(KVC_LAYER_STATIC_SLIDING, 5, 10);
  c = cache_for(&m);
  REQUIRE(c != NULL);
  CHECK(model_step(c, &m, 8)); /* 3 with c == 0: the prompt itself */
  CHECK(model_step(c, &m, 1));
  kvc_cache_destroy(c);

  m = model_new(KVC_LAYER_STATIC_SLIDING, 5, 10);
  c = cache_for(&m);
  REQUIRE(c != NULL);
  CHECK(model_step(c, &m, 3));
  CHECK(model_step(c, &m, 4)); /* 3 with c > 0: buffer[:c] + new */
  CHECK(model_step(c, &m, 2));
  kvc_cache_destroy(c);
}

/* A cache of every kind, updated layer by layer and through update_all, ends identical. */
static const kvc_layer_options* mixed_layers(void) {
  static kvc_layer_options l[6];
  static const int64_t wm[6][2] = {{0, 0}, {3, 0}, {4, 0}, {0, 12}, {3, 12}, {5, 12}}; /* window, max_cache_len */
  return tu_layers(l, 6, TU_SIX_KINDS, wm);
}

static void make_step(tu_tensor* k, tu_tensor* v, int64_t n, int64_t first) {
  for (int i = 0; i < 6; i++) {
    tu_tensor_tokens(&k[i], NB, NH, n, DK, first, 0);
    tu_tensor_tokens(&v[i], NB, NH, n, DV, first, 1);
  }
}

static void to_arrays(const tu_tensor* k, const tu_tensor* v, kvc_tensor* ka, kvc_tensor* va, int count) {
  for (int i = 0; i < count; i++) {
    ka[i] = k[i].t;
    va[i] = v[i].t;
  }
}

static void free_step(tu_tensor* k, tu_tensor* v) {
  tu_tensors_free(k, v, 6);
}

static void test_update_all_equals_per_layer(void) {
  kvc_cache* a = tu_custom_cache(6, mixed_layers());
  kvc_cache* b = tu_custom_cache(6, mixed_layers());
  REQUIRE(a && b);
  const int64_t sizes[] = {4, 1, 1, 2, 1, 2}; /* 11 of the static layer's 12 slots */
  int64_t first = 0;
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    tu_tensor k[6], v[6];
    kvc_tensor ka[6], va[6];
    make_step(k, v, sizes[s], first);
    to_arrays(k, v, ka, va, 6);
    kvc_kv out_all[6];
    REQUIRE_OK(kvc_cache_update_all(a, 6, ka, va, NULL, out_all));
    /* copy the returned tokens before b's updates (a's views stay valid: a is not touched) */
    for (uint32_t i = 0; i < 6; i++) {
      kvc_kv one;
      REQUIRE_OK(kvc_cache_update(b, i, &ka[i], &va[i], NULL, &one));
      tu_tensor_snap x, y;
      tu_tensor_snap_take(&out_all[i].key, &x);
      tu_tensor_snap_take(&one.key, &y);
      CHECK(tu_tensor_snap_equal(&x, &y, i, "returned key"));
      free(x.bytes);
      free(y.bytes);
      tu_tensor_snap_take(&out_all[i].value, &x);
      tu_tensor_snap_take(&one.value, &y);
      CHECK(tu_tensor_snap_equal(&x, &y, i, "returned value"));
      free(x.bytes);
      free(y.bytes);
    }
    free_step(k, v);
    first += sizes[s];
  }
  CHECK_CACHES_EQUAL(a, b);
  /* NULL out is allowed */
  tu_tensor k[6], v[6];
  kvc_tensor ka[6], va[6];
  make_step(k, v, 1, first);
  to_arrays(k, v, ka, va, 6);
  CHECK_OK(kvc_cache_update_all(a, 6, ka, va, NULL, NULL));
  CHECK_EQ_I64(tu_seq(a, 0), first + 1);
  free_step(k, v);
  TU_DESTROY(a, b);
}

/* One bad layer (last, or in the middle) fails the whole call and changes nothing. */
static void test_update_all_all_or_nothing(void) {
  kvc_cache* a = tu_custom_cache(6, mixed_layers());
  REQUIRE(a != NULL);
  tu_tensor k[6], v[6];
  kvc_tensor ka[6], va[6];
  make_step(k, v, 10, 0);
  to_arrays(k, v, ka, va, 6);
  REQUIRE_OK(kvc_cache_update_all(a, 6, ka, va, NULL, NULL));
  free_step(k, v);

  tu_snapshot before, after;
  snapshot(a, &before);
  /* the static layer (12 slots, 10 used) would overflow with 3 more tokens */
  make_step(k, v, 3, 10);
  to_arrays(k, v, ka, va, 6);
  CHECK_ERR(kvc_cache_update_all(a, 6, ka, va, NULL, NULL), KVC_ERROR_OUT_OF_RANGE);
  snapshot(a, &after);
  CHECK_SNAPSHOT_EQUAL(&before, &after);
  snapshot_free(&after);
  free_step(k, v);

  /* a head count mismatch on layer 5 only */
  make_step(k, v, 1, 10);
  to_arrays(k, v, ka, va, 6);
  tu_tensor bad_k, bad_v;
  tu_tensor_tokens(&bad_k, NB, NH + 1, 1, DK, 10, 0);
  tu_tensor_tokens(&bad_v, NB, NH + 1, 1, DV, 10, 1);
  ka[5] = bad_k.t;
  va[5] = bad_v.t;
  CHECK_ERR(kvc_cache_update_all(a, 6, ka, va, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH);
  snapshot(a, &after);
  CHECK_SNAPSHOT_EQUAL(&before, &after);
  snapshot_free(&after);
  tu_tensor_free(&bad_k);
  tu_tensor_free(&bad_v);
  free_step(k, v);
  snapshot_free(&before);
  kvc_cache_destroy(a);
}

/* A lazy cache gets its layers from update_all, and none from a failing one. */
static void test_update_all_lazy(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  tu_tensor k[6], v[6];
  kvc_tensor ka[6], va[6];
  make_step(k, v, 2, 0);
  to_arrays(k, v, ka, va, 6);
  tu_tensor bad;
  tu_tensor_make(&bad, KVC_DTYPE_FLOAT16, NB, NH, 2, DV, NULL);
  kvc_tensor bad_v[6];
  memcpy(bad_v, va, sizeof va);
  bad_v[2] = bad.t; /* value dtype differs from its key */
  CHECK_FAILS(kvc_cache_update_all(c, 3, ka, bad_v, NULL, NULL));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  REQUIRE_OK(kvc_cache_update_all(c, 3, ka, va, NULL, NULL));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 3);
  for (uint32_t i = 0; i < 3; i++) {
    kvc_kv st = tu_view(c, i);
    CHECK_KV_SEQ(st, 0, 1);
  }
  tu_tensor_free(&bad);
  free_step(k, v);
  kvc_cache_destroy(c);
}

/* Queries do not mutate: views returned by update stay valid and unchanged across them. */
static void test_views_survive_queries(void) {
  kvc_cache* c = tu_custom_cache(6, mixed_layers());
  REQUIRE(c != NULL);
  kvc_kv out[6];
  for (uint32_t i = 0; i < 6; i++) REQUIRE_OK(tu_update_tokens(c, i, NB, NH, 5, DK, DV, 0, NULL, &out[i]));
  tu_snapshot s;
  for (int rep = 0; rep < 3; rep++) {
    snapshot(c, &s); /* every query there is */
    kvc_cache* d = NULL;
    REQUIRE_OK(kvc_cache_clone(c, &d)); /* the source of a clone is const too */
    kvc_cache* parts[2] = {NULL, NULL};
    size_t count = 0;
    REQUIRE_OK(kvc_cache_batch_split(c, NB, 1, parts, 2, &count));
    TU_DESTROY(parts[0], parts[1], d);
    snapshot_free(&s);
  }
  /* the last update's view of every layer, in the order each kind returns */
  CHECK_KV_SEQ(out[0], 0, 1, 2, 3, 4);
  CHECK_KV_SEQ(out[1], 0, 1, 2, 3, 4);
  CHECK_KV_SEQ(out[2], 0, 1, 2, 3, 4);
  CHECK_KV_SEQ(out[3], 0, 1, 2, 3, 4, -1, -1, -1, -1, -1, -1, -1);
  CHECK_KV_SEQ(out[4], 0, 1, 2, 3, 4);
  CHECK_KV_SEQ(out[5], 0, 1, 2, 3, 4);
  kvc_cache_destroy(c);
}

/* A custom cache has a fixed layer list: no layer appears on update. */
static void test_update_layer_index(void) {
  kvc_cache* c = tu_custom_cache(6, mixed_layers());
  REQUIRE(c != NULL);
  CHECK_ERR(tu_update_tokens(c, 6, NB, NH, 1, DK, DV, 0, NULL, NULL), KVC_ERROR_OUT_OF_RANGE);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 6);
  kvc_cache_destroy(c);
}

/* transformers 4.57 static layers write at explicit cache_position slots. */
static void test_static_cache_position(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC, 0, 6);
  REQUIRE(c != NULL);
  kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
  TU_POSITIONS(o, 3, 1);
  kvc_kv out;
  REQUIRE_OK(tu_update_list(c, 0, NB, NH, DK, DV, TU_LIST(30, 10), 2, &o, &out));
  CHECK_KV_SEQ(out, -1, 10, -1, 30, -1, -1);
  CHECK_EQ_I64(tu_seq(c, 0), 4); /* max(counter, largest written position + 1) */
  TU_POSITIONS(o, 5);
  REQUIRE_OK(tu_update_list(c, 0, NB, NH, DK, DV, TU_LIST(50), 1, &o, &out));
  CHECK_KV_SEQ(out, -1, 10, -1, 30, -1, 50);
  TU_POSITIONS(o, 1);
  REQUIRE_OK(tu_update_list(c, 0, NB, NH, DK, DV, TU_LIST(11), 1, &o, &out)); /* overwrite */
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, -1, 11, -1, 30, -1, 50);
  CHECK_EQ_I64(tu_seq(c, 0), 6);
  TU_POSITIONS(o, 6); /* beyond max_cache_len */
  CHECK_ERR(tu_update_list(c, 0, NB, NH, DK, DV, TU_LIST(60), 1, &o, NULL), KVC_ERROR_OUT_OF_RANGE);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, -1, 11, -1, 30, -1, 50);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_model_dynamic);
  TU_RUN(test_model_dynamic_sliding);
  TU_RUN(test_model_static);
  TU_RUN(test_model_static_sliding);
  TU_RUN(test_static_sliding_branches);
  TU_RUN(test_update_all_equals_per_layer);
  TU_RUN(test_update_all_all_or_nothing);
  TU_RUN(test_update_all_lazy);
  TU_RUN(test_views_survive_queries);
  TU_RUN(test_update_layer_index);
  TU_RUN(test_static_cache_position);
  return tu_finish();
}
