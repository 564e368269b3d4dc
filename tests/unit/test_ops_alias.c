/*
 * test_ops_alias.c: an update whose key/value are views of the same cache
 * (re-feeding what it returned, copying one layer's keys into another). The
 * update may grow or compact stores, release offloaded layers' device copies
 * and reuse working buffers before it reads its inputs; the library copies
 * such inputs first, so the result must equal feeding a private copy.
 * Run under ASan, a read of moved or freed bytes is also reported.
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define H 2
#define D 4

/* A compact float32 copy of a view (shape [b, H, s, D]); the caller frees data. */
static kvc_tensor copy_of(const kvc_tensor* v, int64_t* shape, float** data) {
  int64_t n = v->shape[0] * v->shape[1] * v->shape[2] * v->shape[3];
  *data = (float*)malloc(sizeof(float) * (size_t)(n ? n : 1));
  tu_read_view(v, *data);
  memcpy(shape, v->shape, sizeof(int64_t) * 4);
  return tu_f32_view(*data, shape);
}

static kvc_tensor fresh(float* data, int64_t* shape, int64_t s, float base) {
  shape[0] = 1, shape[1] = H, shape[2] = s, shape[3] = D;
  for (int64_t i = 0; i < H * s * D; i++) data[i] = base + (float)i * 0.25f;
  return tu_f32_view(data, shape);
}

static void strides_of(const kvc_tensor* t, int64_t out[4]) {
  if (t->strides) {
    memcpy(out, t->strides, sizeof(int64_t) * 4);
    return;
  }
  out[3] = 1;
  for (int i = 2; i >= 0; i--) out[i] = out[i + 1] * t->shape[i + 1];
}

static int views_equal(const kvc_kv* a, const kvc_kv* b) {
  int64_t na = tu_numel(&a->key), nb = tu_numel(&b->key);
  if (na != nb || memcmp(a->key.shape, b->key.shape, sizeof(int64_t) * 4) != 0) return 0;
  float* x = (float*)malloc(sizeof(float) * (size_t)(na ? na : 1));
  float* y = (float*)malloc(sizeof(float) * (size_t)(na ? na : 1));
  tu_read_view(&a->key, x);
  tu_read_view(&b->key, y);
  int eq = memcmp(x, y, sizeof(float) * (size_t)na) == 0;
  tu_read_view(&a->value, x);
  tu_read_view(&b->value, y);
  eq = eq && memcmp(x, y, sizeof(float) * (size_t)na) == 0;
  free(x);
  free(y);
  return eq;
}

/*
 * Feeds `steps` updates of layer 0 whose inputs are the last `take` tokens of
 * what the previous update returned, to `c` as views and to `ref` (the same
 * kind of cache) as private copies; every return must agree.
 */
static void refeed(kvc_cache* c, kvc_cache* ref, int steps, int64_t take) {
  float buf[H * 6 * D];
  int64_t shape[4];
  kvc_tensor x = fresh(buf, shape, 6, 1.0f);
  kvc_kv a, b;
  REQUIRE_OK(kvc_cache_update(c, 0, &x, &x, NULL, &a));
  REQUIRE_OK(kvc_cache_update(ref, 0, &x, &x, NULL, &b));
  for (int s = 0; s < steps; s++) {
    /* The last `take` tokens of the returned view, as a strided view into the cache. */
    int64_t n = a.key.shape[2] < take ? a.key.shape[2] : take;
    int64_t sub_shape[4] = {a.key.shape[0], a.key.shape[1], n, a.key.shape[3]};
    int64_t ks[4], vs[4];
    strides_of(&a.key, ks);
    strides_of(&a.value, vs);
    kvc_tensor kv = a.key, vv = a.value;
    kv.shape = vv.shape = sub_shape;
    kv.strides = ks;
    vv.strides = vs;
    kv.byte_offset += (uint64_t)((a.key.shape[2] - n) * ks[2]) * 4u;
    vv.byte_offset += (uint64_t)((a.value.shape[2] - n) * vs[2]) * 4u;
    int64_t s1[4], s2[4];
    float *d1, *d2;
    kvc_tensor kc = copy_of(&kv, s1, &d1), vc = copy_of(&vv, s2, &d2);
    REQUIRE_OK(kvc_cache_update(c, 0, &kv, &vv, NULL, &a));
    REQUIRE_OK(kvc_cache_update(ref, 0, &kc, &vc, NULL, &b));
    free(d1);
    free(d2);
    if (!CHECK(views_equal(&a, &b))) return;
  }
}

static kvc_cache* make(kvc_layer_kind kind, int64_t window, int64_t max_len, kvc_offload offload) {
  kvc_layer_options l = tu_layer(kind, window, max_len);
  kvc_layer_options layers[2] = {l, l};
  return tu_custom_offload_cache(2, layers, offload);
}

static void test_dynamic_growth(void) { /* the store doubles under the input several times */
  kvc_cache *c = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_DEFAULT), *r = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_DEFAULT);
  refeed(c, r, 12, 5);
  TU_DESTROY(c, r);
}

static void test_sliding_compaction(void) { /* the window compacts under the input */
  kvc_cache *c = make(KVC_LAYER_DYNAMIC_SLIDING, 5, 0, KVC_OFFLOAD_DEFAULT),
            *r = make(KVC_LAYER_DYNAMIC_SLIDING, 5, 0, KVC_OFFLOAD_DEFAULT);
  refeed(c, r, 40, 3);
  TU_DESTROY(c, r);
}

static void test_offloaded(void) { /* the device copy the views point at is released by the next update */
  kvc_cache *c = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_ALL), *r = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_ALL);
  refeed(c, r, 10, 4);
  TU_DESTROY(c, r);
}

/* Feeds the view `v` of cache c to both of its layers in one update_all, and a copy of it to both layers of
 * the reference r; the views each returns (a, b) must be equal. */
static void feed_both_layers(kvc_cache* c, kvc_cache* r, kvc_kv v, kvc_kv a[2], kvc_kv b[2]) {
  int64_t s1[4], s2[4];
  float *d1, *d2;
  kvc_tensor kc = copy_of(&v.key, s1, &d1), vc = copy_of(&v.value, s2, &d2);
  kvc_tensor ks[2] = {v.key, v.key}, vs[2] = {v.value, v.value};
  kvc_tensor kr[2] = {kc, kc}, vr[2] = {vc, vc};
  REQUIRE_OK(kvc_cache_update_all(c, 2, ks, vs, NULL, a));
  REQUIRE_OK(kvc_cache_update_all(r, 2, kr, vr, NULL, b));
  free(d1);
  free(d2);
  CHECK(views_equal(&a[0], &b[0]));
  CHECK(views_equal(&a[1], &b[1]));
}

static void test_across_layers(void) { /* layer 0's returned keys become layer 1's input in one update_all */
  kvc_cache *c = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_DEFAULT), *r = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_DEFAULT);
  float buf[H * 6 * D];
  int64_t shape[4];
  kvc_tensor x = fresh(buf, shape, 6, 2.0f);
  kvc_kv a[2], b[2];
  kvc_tensor xs[2] = {x, x};
  REQUIRE_OK(kvc_cache_update_all(c, 2, xs, xs, NULL, a));
  REQUIRE_OK(kvc_cache_update_all(r, 2, xs, xs, NULL, b));
  for (int s = 0; s < 6; s++) {
    feed_both_layers(c, r, a[0], a, b);
  }
  TU_DESTROY(c, r);
}

/*
 * The cache keeps what it handed out between updates and rebuilds that only when stores or views changed
 * (core/alias_index.c): stores moved by another operation between two updates must be seen by the next
 * one. kvc_cache_reserve moves every store to one slot more than it holds; then layer 1's stored view
 * feeds both layers, so both stores grow (move again) under that input.
 */
static void test_stores_moved_between_updates(void) {
  kvc_cache *c = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_DEFAULT), *r = make(KVC_LAYER_DYNAMIC, 0, 0, KVC_OFFLOAD_DEFAULT);
  enum { PROMPT = 80 }; /* more than the 64 slots a store starts with */
  float* buf = (float*)malloc(sizeof(float) * H * PROMPT * D);
  int64_t shape[4];
  kvc_tensor x = fresh(buf, shape, PROMPT, 3.0f);
  kvc_tensor xs[2] = {x, x};
  kvc_kv a[2], b[2];
  for (int i = 0; i < 2; i++) { /* the second update finds the stores the first one allocated */
    REQUIRE_OK(kvc_cache_update_all(c, 2, xs, xs, NULL, a));
    REQUIRE_OK(kvc_cache_update_all(r, 2, xs, xs, NULL, b));
  }
  for (int round = 0; round < 3; round++) {
    REQUIRE_OK(kvc_cache_reserve(c, tu_view(c, 1).key.shape[2] + 1)); /* every store moves */
    feed_both_layers(c, r, tu_view(c, 1), a, b);
  }
  free(buf);
  TU_DESTROY(c, r);
}

int main(void) {
  TU_RUN(test_dynamic_growth);
  TU_RUN(test_sliding_compaction);
  TU_RUN(test_offloaded);
  TU_RUN(test_across_layers);
  TU_RUN(test_stores_moved_between_updates);
  return tu_finish();
}
