/*
 * tests/pool/test_pool_write_layer.c: kvc_pool_write_layer, one layer's K/V
 * of a step through the step's slot mapping. Writing every layer with it, in
 * the order of a forward pass, leaves the storage byte for byte as one
 * kvc_pool_write of the same step does (both layouts, a full, a sliding and
 * a recurrent group, two sequences in one mapping with padding). Every
 * refusal names its argument and leaves the pool unchanged, including the
 * refusals a reused slot mapping check must still make: a row edited in
 * place, and a row whose block was released after it was accepted.
 */
#include "pool_test.h"

static const pt_group GROUPS[] = {{KVC_POOL_GROUP_FULL, 2, 10, 0},
                                  {KVC_POOL_GROUP_SLIDING, 2, 10, 3},
                                  {KVC_POOL_GROUP_RECURRENT, 2, 6, 0}};
static const uint32_t LAYER_GROUP[] = {0, 1, 2, 0, 1};
#define NG 3
#define NL 5
#define MAX_TOKENS 16

/* Inputs of one step: K [n, 2, 4] and V [n, 2, 3] per layer, token t of the step holding pt_value(first + t). */
typedef struct step_inputs {
  float k[NL][MAX_TOKENS * 8], v[NL][MAX_TOKENS * 6];
  int64_t ks[3], vs[3];
  kvc_tensor kt[NL], vt[NL];
} step_inputs;

static void inputs_make(step_inputs* in, int64_t first, int64_t n) {
  memset(in, 0, sizeof *in);
  in->ks[0] = in->vs[0] = n;
  in->ks[1] = in->vs[1] = 2;
  in->ks[2] = 4;
  in->vs[2] = 3;
  for (uint32_t l = 0; l < NL; l++) {
    for (int64_t t = 0; t < n; t++)
      for (int64_t h = 0; h < 2; h++) {
        for (int64_t d = 0; d < 4; d++) in->k[l][t * 8 + h * 4 + d] = pt_value(l, 0, first + t, h, d);
        for (int64_t d = 0; d < 3; d++) in->v[l][t * 6 + h * 3 + d] = pt_value(l, 1, first + t, h, d);
      }
    in->kt[l] = t3(in->k[l], in->ks);
    in->vt[l] = t3(in->v[l], in->vs);
  }
}

/* Every attention layer's storage bytes, and each group's counters. */
typedef struct storage_snapshot {
  float k[NL][10 * 2 * 2 * 4], v[NL][10 * 2 * 2 * 3];
  kvc_pool_stats stats[NG];
} storage_snapshot;

static void take(storage_snapshot* s, kvc_pool* p) {
  memset(s, 0, sizeof *s);
  for (uint32_t l = 0; l < NL; l++) {
    if (GROUPS[LAYER_GROUP[l]].kind == KVC_POOL_GROUP_RECURRENT) continue;
    kvc_kv kv;
    kvc_pool_layout layout = KVC_POOL_LAYOUT_NHD;
    kvc_error* e = kvc_pool_layer_storage(p, l, layout, &kv);
    if (!CHECK_OK(e)) return;
    /* The views may be strided (an HND pool seen as NHD): the buffer itself is what is compared. */
    memcpy(s->k[l], kv.key.data, sizeof s->k[l]);
    memcpy(s->v[l], kv.value.data, sizeof s->v[l]);
  }
  for (uint32_t g = 0; g < NG; g++) s->stats[g] = pt_stats(p, g);
}

#define CHECK_STORAGE_UNCHANGED(p, before)              \
  do {                                                  \
    storage_snapshot now_;                              \
    take(&now_, (p));                                   \
    CHECK(memcmp(&now_, &(before), sizeof now_) == 0);  \
  } while (0)

/* Reserves n0 and n1 tokens for seqs[0] and [1] and lays their slots out as one mapping of a batch of
   n0 + n1 + 1 tokens, the last one padding (-1 in every group), as an engine pads a batch. */
static kvc_error* reserve_batch_of_two(kvc_pool_sequence* const* seqs, const int32_t* tokens, int64_t n0, int64_t n1,
                                       int64_t* slots) {
  int64_t n = n0 + n1 + 1, one[NG * MAX_TOKENS], counts[2] = {n0, n1};
  for (int i = 0, at = 0; i < 2; at += (int)counts[i], i++) {
    kvc_error* e = kvc_pool_reserve(seqs[i], tokens, (size_t)counts[i], one);
    if (e) return e;
    for (int g = 0; g < NG; g++) memcpy(slots + g * n + at, one + g * counts[i], (size_t)counts[i] * sizeof(int64_t));
  }
  for (int g = 0; g < NG; g++) slots[g * n + n - 1] = -1;
  return NULL;
}

/* Two pools stepped alike: `whole` written by kvc_pool_write, `layered` by kvc_pool_write_layer per layer. */
static void compare_layouts(kvc_pool_layout layout) {
  kvc_pool *whole = NULL, *layered = NULL;
  REQUIRE_OK(pt_pool(&whole, GROUPS, NG, LAYER_GROUP, NL, layout, 0, 1));
  REQUIRE_OK(pt_pool(&layered, GROUPS, NG, LAYER_GROUP, NL, layout, 0, 1));
  kvc_pool_sequence *a[2] = {NULL, NULL}, *b[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    REQUIRE_OK(kvc_pool_sequence_create(whole, NULL, &a[i]));
    REQUIRE_OK(kvc_pool_sequence_create(layered, NULL, &b[i]));
  }
  int32_t tokens[MAX_TOKENS];
  for (int i = 0; i < MAX_TOKENS; i++) tokens[i] = 7 + i;
  /* A prefill of 5 and 3 tokens, then single-token steps, both sequences in one padded mapping. */
  int64_t per_seq[2] = {5, 3};
  for (int step = 0; step < 6; step++) {
    int64_t n0 = step ? 1 : per_seq[0], n1 = step ? 1 : per_seq[1], n = n0 + n1 + 1;
    int64_t slots_a[NG * MAX_TOKENS], slots_b[NG * MAX_TOKENS];
    int64_t first0 = (int64_t)kvc_pool_sequence_length(a[0]);
    REQUIRE_OK(reserve_batch_of_two(a, tokens, n0, n1, slots_a));
    REQUIRE_OK(reserve_batch_of_two(b, tokens, n0, n1, slots_b));
    for (int i = 0; i < NG * n; i++) CHECK_EQ_I64(slots_a[i], slots_b[i]);
    static step_inputs in;
    inputs_make(&in, first0 + 100 * step, n);
    REQUIRE_OK(kvc_pool_write(whole, in.kt, in.vt, NL, slots_a, (size_t)n));
    for (uint32_t l = 0; l < NL; l++) {
      if (GROUPS[LAYER_GROUP[l]].kind == KVC_POOL_GROUP_RECURRENT) continue;
      REQUIRE_OK(kvc_pool_write_layer(layered, l, &in.kt[l], &in.vt[l], slots_b, (size_t)n));
    }
    for (int i = 0; i < 2; i++) {
      REQUIRE_OK(kvc_pool_commit(a[i]));
      REQUIRE_OK(kvc_pool_commit(b[i]));
    }
    static storage_snapshot x, y;
    take(&x, whole);
    take(&y, layered);
    CHECK(memcmp(x.k, y.k, sizeof x.k) == 0);
    CHECK(memcmp(x.v, y.v, sizeof x.v) == 0);
  }
  kvc_pool_destroy(whole);
  kvc_pool_destroy(layered);
}

static void test_per_layer_writes_equal_one_write_nhd(void) { compare_layouts(KVC_POOL_LAYOUT_NHD); }
static void test_per_layer_writes_equal_one_write_hnd(void) { compare_layouts(KVC_POOL_LAYOUT_HND); }

/* Tokens written per layer land where a gather of the sequence finds them. */
static void test_per_layer_writes_gather_back(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_pool(&p, GROUPS, NG, LAYER_GROUP, NL, KVC_POOL_LAYOUT_HND, 0, 1));
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  int32_t tokens[4] = {1, 2, 3, 4};
  int64_t slots[NG * 4];
  REQUIRE_OK(kvc_pool_reserve(s, tokens, 4, slots));
  static step_inputs in;
  inputs_make(&in, 0, 4);
  for (uint32_t l = 0; l < NL; l++)
    if (l != 2) REQUIRE_OK(kvc_pool_write_layer(p, l, &in.kt[l], &in.vt[l], slots, 4));
  CHECK_EQ_I64(pt_gather_mismatches(s, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(s, 3), 0);
  CHECK_EQ_I64(pt_gather_mismatches(s, 1), 0);
  kvc_pool_destroy(p);
}

static void test_refusals_leave_the_pool_unchanged(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_pool(&p, GROUPS, NG, LAYER_GROUP, NL, KVC_POOL_LAYOUT_NHD, 0, 1));
  kvc_pool_sequence *s = NULL, *t = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &t));
  int32_t tokens[4] = {1, 2, 3, 4};
  int64_t slots[NG * 2], spare[NG * 2];
  REQUIRE_OK(kvc_pool_reserve(s, tokens, 2, slots)); /* block 1 of groups 0 and 1: slots 2, 3 */
  REQUIRE_OK(kvc_pool_reserve(t, tokens, 2, spare)); /* block 2: slots 4, 5 */
  static step_inputs in;
  inputs_make(&in, 0, 2);
  storage_snapshot before;
  take(&before, p);
  int64_t w[NG * 2];
  int64_t bad[3] = {2, 2, 5};
  float* none = NULL;
#define LAYER_REFUSED(set, code, what)                             \
  do {                                                             \
    memcpy(w, slots, sizeof w);                                    \
    kvc_tensor k_ = in.kt[3], v_ = in.vt[3];                       \
    set;                                                           \
    CHECK_REFUSED(kvc_pool_write_layer(p, 3, &k_, &v_, w, 2), code, what); \
    CHECK_STORAGE_UNCHANGED(p, before);                            \
  } while (0)
  LAYER_REFUSED(w[0] = 20, KVC_ERROR_INVALID_ARGUMENT, "slot_mapping[0] (token 0 of group 0) is 20");
  LAYER_REFUSED(w[1] = 1, KVC_ERROR_INVALID_ARGUMENT, "null block");
  LAYER_REFUSED(w[1] = 12, KVC_ERROR_INVALID_ARGUMENT, "no sequence holds");
  LAYER_REFUSED(w[1] = 2, KVC_ERROR_INVALID_ARGUMENT, "slot 2 appears twice in group 0");
  LAYER_REFUSED(k_.shape = bad, KVC_ERROR_SHAPE_MISMATCH, "key has shape [2, 2, 5]");
  LAYER_REFUSED(v_.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT16), KVC_ERROR_DTYPE_MISMATCH, "value is");
  LAYER_REFUSED(k_.device.device_type = KVC_DEVICE_CUDA, KVC_ERROR_DEVICE_MISMATCH, "key");
  LAYER_REFUSED(k_.ndim = 4, KVC_ERROR_SHAPE_MISMATCH, "key.ndim");
  LAYER_REFUSED(v_.data = none, KVC_ERROR_INVALID_ARGUMENT, "value");
#undef LAYER_REFUSED
  /* Group 1's row is what layer 1 reads: a bad slot there refuses layer 1, not layer 3 (group 0). */
  memcpy(w, slots, sizeof w);
  w[2 + 1] = 2;
  CHECK_REFUSED(kvc_pool_write_layer(p, 1, &in.kt[1], &in.vt[1], w, 2), KVC_ERROR_INVALID_ARGUMENT,
                "slot 2 appears twice in group 1");
  CHECK_REFUSED(kvc_pool_write_layer(p, 5, &in.kt[1], &in.vt[1], slots, 2), KVC_ERROR_OUT_OF_RANGE, "layer is 5");
  CHECK_REFUSED(kvc_pool_write_layer(p, 2, &in.kt[1], &in.vt[1], slots, 2), KVC_ERROR_INVALID_ARGUMENT, "recurrent");
  CHECK_REFUSED(kvc_pool_write_layer(NULL, 0, &in.kt[0], &in.vt[0], slots, 2), KVC_ERROR_INVALID_ARGUMENT, "pool");
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, NULL, &in.vt[0], slots, 2), KVC_ERROR_INVALID_ARGUMENT, "key is NULL");
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, &in.kt[0], NULL, slots, 2), KVC_ERROR_INVALID_ARGUMENT, "value is NULL");
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, &in.kt[0], &in.vt[0], NULL, 2), KVC_ERROR_INVALID_ARGUMENT,
                "slot_mapping is NULL");
  CHECK_STORAGE_UNCHANGED(p, before);

  /* The accepted row is remembered; an edit of the same array in place is checked again... */
  REQUIRE_OK(kvc_pool_write_layer(p, 0, &in.kt[0], &in.vt[0], slots, 2));
  storage_snapshot written;
  take(&written, p);
  int64_t edited[NG * 2];
  memcpy(edited, slots, sizeof edited);
  REQUIRE_OK(kvc_pool_write_layer(p, 3, &in.kt[3], &in.vt[3], edited, 2));
  take(&written, p);
  edited[1] = edited[0];
  CHECK_REFUSED(kvc_pool_write_layer(p, 3, &in.kt[3], &in.vt[3], edited, 2), KVC_ERROR_INVALID_ARGUMENT,
                "appears twice");
  CHECK_STORAGE_UNCHANGED(p, written);
  /* ...a failed check forgets it (the next call with the good row checks and writes)... */
  CHECK_OK(kvc_pool_write_layer(p, 3, &in.kt[3], &in.vt[3], slots, 2));
  /* ...and a row accepted before its block was released is refused after. */
  int64_t stale[NG * 2];
  memcpy(stale, spare, sizeof stale);
  CHECK_OK(kvc_pool_write_layer(p, 0, &in.kt[0], &in.vt[0], stale, 2));
  kvc_pool_sequence_destroy(t);
  take(&written, p);
  CHECK_REFUSED(kvc_pool_write_layer(p, 3, &in.kt[3], &in.vt[3], stale, 2), KVC_ERROR_INVALID_ARGUMENT,
                "no sequence holds");
  CHECK_STORAGE_UNCHANGED(p, written);
  /* No tokens: nothing to write, nothing refused (a NULL mapping is fine then). */
  int64_t ks0[3] = {0, 2, 4}, vs0[3] = {0, 2, 3};
  kvc_tensor k0 = t3(in.k[0], ks0), v0 = t3(in.v[0], vs0);
  CHECK_OK(kvc_pool_write_layer(p, 0, &k0, &v0, NULL, 0));
  CHECK_STORAGE_UNCHANGED(p, written);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_per_layer_writes_equal_one_write_nhd);
  TU_RUN(test_per_layer_writes_equal_one_write_hnd);
  TU_RUN(test_per_layer_writes_gather_back);
  TU_RUN(test_refusals_leave_the_pool_unchanged);
  return tu_finish();
}
