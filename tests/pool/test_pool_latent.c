/*
 * tests/pool/test_pool_latent.c: latent groups (KVC_POOL_GROUP_LATENT, the
 * MLA cache of DeepSeek V2/V3: one row per token, the compressed latent and
 * the rope key, and no V), alone and beside a full-attention group. Writes
 * (every layer, and layer by layer with no value), gathers, the storage
 * views (a K view of one head, no V), prefix matching, fork and
 * copy-on-write, a disk tier and sequence files give back the rows written;
 * bad options and inputs are refused naming the field, the value and the
 * rule, with the pool unchanged.
 */
#include "../tier/tier_test.h" /* first: it sets the feature macros */

#include "pool_layers_test.h"

/* A latent group (rows of 10 and 6) beside a full group, blocks of 4 tokens. (The models of this test and of
   test_internal_pool_fp8.c are written the same way on purpose: each is its own data, groups and layers.) */
static pl_model hybrid(kvc_pool_layout layout) {
  pl_model m = {
      .groups = {{KVC_POOL_GROUP_LATENT, 4, 12, 0}, {KVC_POOL_GROUP_FULL, 4, 12, 0}},
      .ng = 2,
      .layers = {{0, 1, 10, 0, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f},
                 {1, 2, 4, 3, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f},
                 {0, 1, 6, 0, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f}},
      .nl = 3,
      .layout = layout,
  };
  return m;
}

/* Only latent layers (DeepSeek V3's 61 layers, in small). */
static pl_model latent_only(void) {
  pl_model m = {
      .groups = {{KVC_POOL_GROUP_LATENT, 4, 10, 0}},
      .ng = 1,
      .layers = {{0, 1, 9, 0, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f},
                 {0, 1, 9, 0, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f}},
      .nl = 2,
  };
  return m;
}

static void check_write_gather(kvc_pool_layout layout, int per_layer) {
  pl_model m = hybrid(layout);
  kvc_pool* p;
  kvc_pool_sequence* s;
  int32_t tok[9];
  REQUIRE_OK(pl_start(&m, tok, 9, 5, per_layer, &p, &s));
  REQUIRE_OK(pl_step(p, &m, s, tok + 5, 4, per_layer));
  kvc_kv v;
  REQUIRE_OK(kvc_pool_layer_storage(p, 0, layout, &v));
  CHECK_EQ_I64(v.key.ndim, 4);
  CHECK_EQ_I64(v.key.shape[0], 12);
  CHECK_EQ_I64(v.key.shape[1] * v.key.shape[2], 4); /* block_size tokens of one head */
  CHECK_EQ_I64(v.key.shape[3], 10);
  CHECK(v.value.data == NULL);
  CHECK_EQ_I64(v.value.ndim, 0);
  CHECK_EQ_I64(pl_all_mismatches(s, &m), 0);
  /* The row of token 6 sits at its slot: block table entry 1, offset 2. */
  int32_t row[4];
  REQUIRE(pt_row(p, s, 0, row, 4) == 3);
  const float* k = (const float*)v.key.data;
  int64_t at = row[1] * v.key.strides[0] + 2 * (layout == KVC_POOL_LAYOUT_NHD ? v.key.strides[1] : v.key.strides[2]);
  long bad = 0;
  for (int64_t d = 0; d < 10; d++) bad += !pl_same(k[at + d], pl_input(0, 0, 6, 0, d));
  CHECK_EQ_I64(bad, 0);
  kvc_pool_destroy(p);
}

static void test_write_gather(void) {
  check_write_gather(KVC_POOL_LAYOUT_NHD, 0);
  check_write_gather(KVC_POOL_LAYOUT_HND, 0);
  check_write_gather(KVC_POOL_LAYOUT_NHD, 1);
  check_write_gather(KVC_POOL_LAYOUT_HND, 1);
}

/* A pool of latent layers only: kvc_pool_write takes no values at all. */
static void test_latent_only_write(void) {
  pl_model m = latent_only();
  kvc_pool* p;
  kvc_pool_sequence* s;
  int32_t tok[6];
  REQUIRE_OK(pl_start(&m, tok, 6, 0, 0, &p, &s));
  int64_t slots[6];
  REQUIRE_OK(kvc_pool_reserve(s, tok, 6, slots));
  pl_inputs in;
  pl_inputs_make(&in, &m, 0, 6);
  kvc_tensor k[2] = {in.t[0][0], in.t[1][0]};
  CHECK_OK(kvc_pool_write(p, k, NULL, 2, slots, 6));
  pl_inputs_free(&in);
  CHECK_EQ_I64(pl_all_mismatches(s, &m), 0);
  kvc_pool_destroy(p);
}

/* Prefix reuse and copy-on-write work on latent blocks as on full ones. */
static void test_match_fork(void) {
  pl_model m = hybrid(KVC_POOL_LAYOUT_NHD);
  kvc_pool* p;
  kvc_pool_sequence *a, *b = NULL, *c = NULL;
  int32_t tok[10];
  REQUIRE_OK(pl_start(&m, tok, 10, 9, 1, &p, &a));
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_match_prefix(b, tok, 10, &matched));
  CHECK_EQ_U64(matched, 8);
  CHECK_EQ_U64(pt_stats(p, 0).prefix_hits, 2);
  CHECK_EQ_I64(pl_all_mismatches(b, &m), 0);
  REQUIRE_OK(kvc_pool_fork(a, &c));
  uint64_t used = pt_stats(p, 0).used_blocks;
  REQUIRE_OK(pl_step(p, &m, c, tok + 9, 1, 1));
  CHECK_EQ_U64(pt_stats(p, 0).used_blocks, used + 1); /* the shared partial latent block was copied */
  CHECK_EQ_I64(pl_all_mismatches(a, &m), 0);
  CHECK_EQ_I64(pl_all_mismatches(c, &m), 0);
  kvc_pool_destroy(p);
}

static void test_tier_and_file(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "latent"));
  pl_model m = hybrid(KVC_POOL_LAYOUT_HND);
  CHECK_EQ_I64(pl_tier_round_trip(dir, &m, &m, 9), 8);
  /* The same shapes as a full group: another model, never shared. */
  pl_model full = m;
  full.groups[0].kind = KVC_POOL_GROUP_FULL;
  full.layers[0].vdim = 10;
  full.layers[2].vdim = 6;
  CHECK_EQ_I64(pl_tier_round_trip(dir, &m, &full, 9), 0);
  tt_rmtree(dir);
  uint32_t layers;
  CHECK_EQ_U64(pl_block_payload(&m, 0, &layers), 4 * (10 + 6) * sizeof(float)); /* rows only, no V */
  CHECK_EQ_U64(layers, 2);
  CHECK_OK(pl_file_round_trip(&m, &m, 10));
  CHECK_REFUSED(pl_file_round_trip(&m, &full, 10), KVC_ERROR_INVALID_ARGUMENT, "group 0: kind");
}

static void test_refusals(void) {
  pl_model m = hybrid(KVC_POOL_LAYOUT_NHD);
  kvc_pool* sentinel = (kvc_pool*)&m;
  kvc_pool* out = sentinel;
  pl_model bad = m;
  bad.layers[2].heads = 2;
  CHECK_REFUSED(pl_pool(&bad, &out), KVC_ERROR_INVALID_ARGUMENT,
                "layers[2].num_kv_heads is 2; it must be 1 in a latent group");
  bad = m;
  bad.layers[0].vdim = 10;
  CHECK_REFUSED(pl_pool(&bad, &out), KVC_ERROR_INVALID_ARGUMENT,
                "layers[0].value_head_dim is 10; it must be 0 in a latent group");
  bad = m;
  bad.groups[0].window = 4;
  CHECK_REFUSED(pl_pool(&bad, &out), KVC_ERROR_INVALID_ARGUMENT, "groups[0].window is 4; it must be 0 for a latent");
  bad = m;
  bad.groups[0].kind = 6;
  CHECK_REFUSED(pl_pool(&bad, &out), KVC_ERROR_INVALID_ARGUMENT, "groups[0].kind is 6; it must be");
  CHECK(out == sentinel);

  kvc_pool* p;
  kvc_pool_sequence* s;
  int32_t tok[5];
  REQUIRE_OK(pl_start(&m, tok, 5, 4, 0, &p, &s));
  int64_t slots[2];
  REQUIRE_OK(kvc_pool_reserve(s, tok + 4, 1, slots));
  pl_snapshot before = pl_take(p, &m);
  pl_inputs in;
  pl_inputs_make(&in, &m, 4, 1);
  kvc_tensor k[3] = {in.t[0][0], in.t[1][0], in.t[2][0]}, v[3] = {in.t[0][1], in.t[1][1], in.t[2][1]};
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, &k[0], &v[1], slots, 1), KVC_ERROR_INVALID_ARGUMENT,
                "value is set but layer 0 is in group 0, a latent group");
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, &k[2], NULL, slots, 1), KVC_ERROR_SHAPE_MISMATCH, "key has shape [1, 1, 6]");
  CHECK_REFUSED(kvc_pool_write_layer(p, 1, &k[1], NULL, slots, 1), KVC_ERROR_INVALID_ARGUMENT, "value is NULL");
  CHECK_REFUSED(kvc_pool_write(p, k, NULL, 3, slots, 1), KVC_ERROR_INVALID_ARGUMENT, "values is NULL");
  int64_t gs[4] = {1, 1, 4, 10};
  float g[40];
  kvc_tensor gk = tu_f32_view(g, gs), gv = gk;
  CHECK_REFUSED(kvc_pool_gather(s, 0, &gk, &gv), KVC_ERROR_INVALID_ARGUMENT, "values is set but layer 0 is in group 0");
  CHECK(pl_unchanged(p, &m, before));
  CHECK_OK(kvc_pool_write(p, k, v, 3, slots, 1)); /* latent entries of v are ignored: zeroed here */
  pl_inputs_free(&in);
  CHECK_OK(kvc_pool_commit(s));
  CHECK_EQ_I64(pl_all_mismatches(s, &m), 0);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_write_gather);
  TU_RUN(test_latent_only_write);
  TU_RUN(test_match_fork);
  TU_RUN(test_tier_and_file);
  TU_RUN(test_refusals);
  return tu_finish();
}
