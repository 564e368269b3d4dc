/*
 * tests/pool/test_internal_pool_fp8.c: fp8 e4m3 block storage
 * (KVC_POOL_STORAGE_FP8_E4M3, vLLM's kv_cache_dtype="fp8" with per-layer
 * k_scale and v_scale). The reference is the library's e4m3fn codec
 * (backends/quant_math/fp8.h), which test_internal_quant_fp8 checks against
 * torch for every float32: a block must hold exactly e4m3fn(x / scale) and a
 * gather give exactly float32(code) * scale, with a few of those facts
 * written out (saturation at 448, NaN, a rounding). Then what moves blocks
 * must move codes: fork and copy-on-write, a disk tier (whose fingerprint
 * keeps fp8 and dtype pools, and fp8 pools of other scales, apart), sequence
 * files; and bad options or inputs are refused naming the field, the value
 * and the rule, with the pool unchanged. With a shared block budget, fp8
 * and latent layers size the page by what they store (codes, K alone).
 */
#include "../tier/tier_test.h" /* first: it sets the feature macros */

#include "pool_layers_test.h"
#include "quant_math/fp8.h"

static float codec_kept(float x, float scale) { return kvc_qm_fp8_round_trip(x, scale); }

/* A pool of `m` keeps what it stores through a disk tier (9 tokens: 2 full blocks match) and a sequence file. */
static void check_round_trips(const pl_model* m, const char* tag) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, tag));
  CHECK_EQ_I64(pl_tier_round_trip(dir, m, m, 9), 8);
  tt_rmtree(dir);
  CHECK_OK(pl_file_round_trip(m, m, 7));
}

/* One full group of 4-token blocks: an fp8 layer, a dtype layer, an fp8 layer of another shape. */
static pl_model fp8_model(kvc_pool_layout layout) {
  pl_model m = {
      .groups = {{KVC_POOL_GROUP_FULL, 4, 12, 0}},
      .ng = 1,
      .layers = {{0, 2, 4, 3, KVC_POOL_STORAGE_FP8_E4M3, 0.25f, 3.0f},
                 {0, 2, 4, 3, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f},
                 {0, 1, 8, 8, KVC_POOL_STORAGE_FP8_E4M3, 1.0f, 0.0625f}},
      .nl = 3,
      .layout = layout,
  };
  return m;
}

/* The code at slot `slot` (head h, dim d) of layer l's K or V, read through the NHD view. */
static uint8_t code_at(kvc_pool* p, uint32_t l, int kv, int64_t slot, int64_t h, int64_t d) {
  kvc_kv v;
  kvc_error* e = kvc_pool_layer_storage(p, l, KVC_POOL_LAYOUT_NHD, &v);
  if (e) return kvc_error_destroy(e), 0xaa;
  const kvc_tensor* t = kv ? &v.value : &v.key;
  int64_t bs = t->shape[1];
  int64_t at = (slot / bs) * t->strides[0] + (slot % bs) * t->strides[1] + h * t->strides[2] + d * t->strides[3];
  return ((const uint8_t*)t->data)[at];
}

static void check_codes_and_gather(kvc_pool_layout layout, int per_layer) {
  pl_model m = fp8_model(layout);
  kvc_pool* p;
  kvc_pool_sequence* s;
  int32_t tok[10];
  REQUIRE_OK(pl_start(&m, tok, 10, 0, 0, &p, &s));
  kvc_kv v;
  REQUIRE_OK(kvc_pool_layer_storage(p, 0, layout, &v));
  CHECK_EQ_I64(v.key.dtype.code, KVC_TYPE_CODE_UINT);
  CHECK_EQ_I64(v.key.dtype.bits, 8);
  CHECK_EQ_I64(v.value.dtype.bits, 8);
  REQUIRE_OK(kvc_pool_layer_storage(p, 1, layout, &v));
  CHECK_EQ_I64(v.key.dtype.bits, 32);
  int64_t slots[10];
  REQUIRE_OK(kvc_pool_reserve(s, tok, 10, slots));
  REQUIRE_OK(pl_write(p, &m, slots, 0, 10, per_layer));
  REQUIRE_OK(kvc_pool_commit(s));
  /* Every element's stored byte is the codec's code of x / scale. */
  long bad = 0;
  for (uint32_t l = 0; l < m.nl; l += 2)
    for (int kv = 0; kv < 2; kv++) {
      const pl_layer* L = &m.layers[l];
      float scale = kv ? L->v_scale : L->k_scale;
      for (int64_t t = 0; t < 10; t++)
        for (int64_t h = 0; h < L->heads; h++)
          for (int64_t d = 0; d < (kv ? L->vdim : L->kdim); d++)
            bad += code_at(p, l, kv, slots[t], h, d) != kvci_fp8_e4m3fn_from_f32(pl_input(l, kv, t, h, d) / scale);
    }
  CHECK_EQ_I64(bad, 0);
  /* Facts, written out: 1000 / 0.25 saturates to 448 (0x7e); -1000 / 3 = -333.3 rounds to -320 (0xfa, the
     step is 32 there); a NaN stays NaN (0x7f); 1e-3 / 0.0625 = 0.016 rounds to the smallest normal 2^-6. */
  CHECK_EQ_I64(code_at(p, 0, 0, slots[2], 0, 0), 0x7e);
  CHECK_EQ_I64(code_at(p, 0, 1, slots[2], 1, 0), 0xfa);
  CHECK_EQ_I64(code_at(p, 0, 0, slots[3], 0, 1), 0x7f);
  CHECK_EQ_I64(code_at(p, 2, 1, slots[1], 0, 2), 0x08);
  /* A gather returns float32(code) * scale: exactly the codec's round trip. */
  pl_fp8_kept = codec_kept;
  CHECK_EQ_I64(pl_all_mismatches(s, &m), 0);
  int64_t ks[4] = {1, 2, 10, 4}, vs[4] = {1, 2, 10, 3};
  float kb[80], vb[60];
  kvc_tensor kt = tu_f32_view(kb, ks), vt = tu_f32_view(vb, vs);
  REQUIRE_OK(kvc_pool_gather(s, 0, &kt, &vt));
  CHECK_EQ_F64(kb[(0 * 10 + 2) * 4 + 0], 448.0 * 0.25);
  CHECK_EQ_F64(vb[(1 * 10 + 2) * 3 + 0], -320.0 * 3.0);
  CHECK(isnan(kb[(0 * 10 + 3) * 4 + 1]));
  kvc_pool_destroy(p);
}

static void test_codes_and_gather(void) {
  check_codes_and_gather(KVC_POOL_LAYOUT_NHD, 0);
  check_codes_and_gather(KVC_POOL_LAYOUT_HND, 0);
  check_codes_and_gather(KVC_POOL_LAYOUT_NHD, 1);
  check_codes_and_gather(KVC_POOL_LAYOUT_HND, 1);
}

/* The two writes store the same bytes (the per-layer write is the forward pass's, the other the batch form). */
static void test_write_forms_agree(void) {
  pl_model m = fp8_model(KVC_POOL_LAYOUT_HND);
  kvc_pool *a = NULL, *b = NULL;
  REQUIRE_OK(pl_pool(&m, &a));
  REQUIRE_OK(pl_pool(&m, &b));
  int32_t tok[7];
  pl_prompt(tok, 7);
  kvc_pool_sequence *sa = NULL, *sb = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(a, NULL, &sa));
  REQUIRE_OK(kvc_pool_sequence_create(b, NULL, &sb));
  REQUIRE_OK(pl_step(a, &m, sa, tok, 7, 0));
  REQUIRE_OK(pl_step(b, &m, sb, tok, 7, 1));
  pl_snapshot x = pl_take(a, &m);
  CHECK(pl_unchanged(b, &m, x));
  kvc_pool_destroy(a);
  kvc_pool_destroy(b);
}

/* A fork shares the blocks; the first write into the shared partial block copies its codes first. */
static void test_fork_copy_on_write(void) {
  pl_model m = fp8_model(KVC_POOL_LAYOUT_NHD);
  pl_fp8_kept = codec_kept;
  kvc_pool* p;
  kvc_pool_sequence *a, *b = NULL;
  int32_t tok[8];
  REQUIRE_OK(pl_start(&m, tok, 8, 6, 1, &p, &a)); /* a full block and half of one */
  REQUIRE_OK(kvc_pool_fork(a, &b));
  uint64_t used = pt_stats(p, 0).used_blocks;
  REQUIRE_OK(pl_step(p, &m, b, tok + 6, 1, 1));
  CHECK_EQ_U64(pt_stats(p, 0).used_blocks, used + 1); /* the partial block was copied */
  CHECK_EQ_I64(pl_all_mismatches(a, &m), 0);
  CHECK_EQ_I64(pl_all_mismatches(b, &m), 0);
  REQUIRE_OK(pl_step(p, &m, a, tok + 6, 2, 0));
  CHECK_EQ_I64(pl_all_mismatches(a, &m), 0);
  CHECK_EQ_I64(pl_all_mismatches(b, &m), 0);
  kvc_pool_destroy(p);
}

/* Tiers hold the codes; their fingerprint keeps pools whose blocks mean other values apart. */
static void test_tier(void) {
  pl_fp8_kept = codec_kept;
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "fp8"));
  pl_model m = fp8_model(KVC_POOL_LAYOUT_NHD);
  CHECK_EQ_I64(pl_tier_round_trip(dir, &m, &m, 9), 8);
  pl_model plain = m, rescaled = m;
  plain.layers[0].storage = plain.layers[2].storage = KVC_POOL_STORAGE_DTYPE;
  plain.layers[0].k_scale = plain.layers[0].v_scale = plain.layers[2].v_scale = 1.0f;
  rescaled.layers[2].v_scale = 0.125f;
  CHECK_EQ_I64(pl_tier_round_trip(dir, &m, &plain, 9), 0);
  CHECK_EQ_I64(pl_tier_round_trip(dir, &m, &rescaled, 9), 0);
  tt_rmtree(dir);
  /* The fingerprint and payload from options equal the pool's; fp8 and dtype pools differ. */
  pt_options po;
  pl_options(&m, &po);
  uint8_t from_options[32], from_pool[32], of_plain[32];
  kvc_pool *p = NULL, *q = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  REQUIRE_OK(pl_pool(&plain, &q));
  CHECK_OK(kvc_pool_options_fingerprint(&po.o, from_options));
  CHECK_OK(kvc_pool_fingerprint(p, from_pool));
  CHECK_OK(kvc_pool_fingerprint(q, of_plain));
  CHECK(!memcmp(from_options, from_pool, 32));
  CHECK(memcmp(from_pool, of_plain, 32) != 0);
  uint32_t layers;
  /* per 4-token block: fp8 2x4 + 2x3 codes, float32 (2x4 + 2x3) x 4 bytes, fp8 8 + 8 codes */
  CHECK_EQ_U64(pl_block_payload(&m, 0, &layers), 4 * (14 + 14 * 4 + 16));
  CHECK_EQ_U64(layers, 3);
  kvc_pool_destroy(p);
  kvc_pool_destroy(q);
}

static void test_file(void) {
  pl_fp8_kept = codec_kept;
  pl_model m = fp8_model(KVC_POOL_LAYOUT_HND);
  CHECK_OK(pl_file_round_trip(&m, &m, 11));
  pl_model plain = m, rescaled = m;
  plain.layers[0].storage = plain.layers[2].storage = KVC_POOL_STORAGE_DTYPE;
  plain.layers[0].k_scale = plain.layers[0].v_scale = plain.layers[2].v_scale = 1.0f;
  rescaled.layers[0].k_scale = 0.5f;
  CHECK_REFUSED(pl_file_round_trip(&m, &plain, 11), KVC_ERROR_INVALID_ARGUMENT, "layers' storage");
  CHECK_REFUSED(pl_file_round_trip(&plain, &m, 11), KVC_ERROR_INVALID_ARGUMENT, "layers' storage");
  CHECK_REFUSED(pl_file_round_trip(&m, &rescaled, 11), KVC_ERROR_INVALID_ARGUMENT, "layer 0: k_scale");
}

/* A latent (MLA) layer stored as fp8: one row per token, one scale. */
static void test_latent_fp8(void) {
  pl_fp8_kept = codec_kept;
  pl_model m = {
      .groups = {{KVC_POOL_GROUP_LATENT, 4, 10, 0}},
      .ng = 1,
      .layers = {{0, 1, 12, 0, KVC_POOL_STORAGE_FP8_E4M3, 0.5f, 1.0f},
                 {0, 1, 12, 0, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f}},
      .nl = 2,
  };
  kvc_pool* p;
  kvc_pool_sequence* s;
  int32_t tok[6];
  REQUIRE_OK(pl_start(&m, tok, 6, 6, 1, &p, &s));
  CHECK_EQ_I64(pl_all_mismatches(s, &m), 0);
  CHECK_EQ_I64(code_at(p, 0, 0, 4 + 2, 0, 0), 0x7e); /* token 2 holds 1000: 2000 saturates */
  kvc_pool_destroy(p);
  check_round_trips(&m, "fp8-latent");
  /* A latent layer has no V: its v_scale stays 1. */
  m.layers[0].v_scale = 2.0f;
  CHECK_REFUSED(pl_pool(&m, &p), KVC_ERROR_INVALID_ARGUMENT, "layers[0].v_scale is 2; it must be 1 in a latent");
}

/*
 * A shared budget over an fp8 full group and a latent group. Group 0's block: fp8 K and V of 2x4 codes per token
 * (32 + 32 bytes) and float K and V of 1x4 (64 + 64): 192. Group 1's: an fp8 latent row of 12 codes (48) and a
 * float one of 8 (128): 176, no V. The page is 192: counting fp8 elements at the dtype's 4 bytes, or a latent
 * layer's absent V, would make it larger and the budget fewer pages.
 */
static void test_shared_budget(void) {
  pl_fp8_kept = codec_kept;
  pl_model m = {
      .groups = {{KVC_POOL_GROUP_FULL, 4, 0, 0}, {KVC_POOL_GROUP_LATENT, 4, 0, 0}},
      .ng = 2,
      .layers = {{0, 2, 4, 4, KVC_POOL_STORAGE_FP8_E4M3, 0.25f, 3.0f},
                 {1, 1, 12, 0, KVC_POOL_STORAGE_FP8_E4M3, 0.5f, 1.0f},
                 {0, 1, 4, 4, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f},
                 {1, 1, 8, 0, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f}},
      .nl = 4,
      .layout = KVC_POOL_LAYOUT_HND,
      .shared_budget_bytes = 9 * 192 + 191,
  };
  kvc_pool* p = NULL;
  REQUIRE_OK(pl_pool(&m, &p));
  CHECK_EQ_U64(pt_stats(p, 0).num_blocks, 8);
  CHECK_EQ_U64(pt_stats(p, 1).num_blocks, 8);
  kvc_kv v;
  REQUIRE_OK(kvc_pool_layer_storage(p, 0, KVC_POOL_LAYOUT_NHD, &v));
  CHECK_EQ_I64(v.key.strides[0], 192); /* a page of codes */
  REQUIRE_OK(kvc_pool_layer_storage(p, 3, KVC_POOL_LAYOUT_NHD, &v));
  CHECK_EQ_I64(v.key.strides[0], 48); /* a page of floats */
  CHECK(v.value.data == NULL);
  int32_t tok[16];
  pl_prompt(tok, 16);
  kvc_pool_sequence *a = NULL, *b = NULL, *c = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(pl_step(p, &m, a, tok, 8, 0)); /* 2 + 2 pages, full and committed: cached once a is gone */
  CHECK_EQ_I64(pl_all_mismatches(a, &m), 0);
  kvc_pool_sequence_destroy(a);
  int32_t other[16];
  for (int i = 0; i < 16; i++) other[i] = tok[i] + 1000;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  REQUIRE_OK(pl_step(p, &m, b, other, 10, 1)); /* 3 + 3 pages: 4 free, 2 of a's cached ones evicted */
  CHECK_EQ_I64(pl_all_mismatches(b, &m), 0);
  kvc_pool_stats s0 = pt_stats(p, 0), s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.evictions + s1.evictions, 2);
  CHECK_EQ_U64(s0.free_blocks, 0);
  /* The fork shares b's pages; its first token copies the partial block of each group into the last 2 pages. */
  REQUIRE_OK(kvc_pool_fork(b, &c));
  REQUIRE_OK(pl_step(p, &m, c, other + 10, 1, 0));
  s0 = pt_stats(p, 0);
  s1 = pt_stats(p, 1);
  CHECK_EQ_U64(s0.evictions + s1.evictions, 4);
  CHECK_EQ_U64(s0.cached_blocks + s1.cached_blocks, 0);
  CHECK_EQ_U64(s0.used_blocks + s1.used_blocks, 8);
  CHECK_EQ_I64(pl_all_mismatches(b, &m), 0);
  CHECK_EQ_I64(pl_all_mismatches(c, &m), 0);
  REQUIRE_OK(pl_step(p, &m, b, other + 10, 2, 1)); /* into b's own partial blocks */
  CHECK_EQ_I64(pl_all_mismatches(b, &m), 0);
  CHECK_EQ_I64(pl_all_mismatches(c, &m), 0);
  /* A next block for both groups does not fit: refused, nothing changed. */
  int64_t slots[2 * 4];
  CHECK_REFUSED(kvc_pool_reserve(c, other + 11, 4, slots), KVC_ERROR_OUT_OF_MEMORY, "shared budget");
  CHECK_EQ_U64(kvc_pool_sequence_length(c), 11);
  CHECK_EQ_U64(pt_stats(p, 0).used_blocks + pt_stats(p, 1).used_blocks, 8);
  CHECK_EQ_I64(pl_all_mismatches(b, &m), 0);
  CHECK_EQ_I64(pl_all_mismatches(c, &m), 0);
  kvc_pool_sequence_destroy(b);
  kvc_pool_sequence_destroy(c);
  kvc_pool_destroy(p);
  check_round_trips(&m, "fp8-shared");
}

/* Options: every refusal names the field, the value and the rule; `out` stays untouched. */
static void test_option_refusals(void) {
  pl_model m = fp8_model(KVC_POOL_LAYOUT_NHD);
  kvc_pool* sentinel = (kvc_pool*)&m;
  kvc_pool* out = sentinel;
  pt_options po;
  pl_options(&m, &po);
  po.l[1].storage = 9;
  CHECK_REFUSED(kvc_pool_create(&po.o, &out), KVC_ERROR_INVALID_ARGUMENT,
                "layers[1].storage is 9; it must be KVC_POOL_STORAGE_DTYPE (0) or KVC_POOL_STORAGE_FP8_E4M3 (1)");
  pl_options(&m, &po);
  po.l[0].k_scale = 0.0f;
  CHECK_REFUSED(kvc_pool_create(&po.o, &out), KVC_ERROR_INVALID_ARGUMENT,
                "layers[0].k_scale is 0; an fp8 layer's scale must be finite and > 0");
  pl_options(&m, &po);
  po.l[2].v_scale = NAN;
  CHECK_REFUSED(kvc_pool_create(&po.o, &out), KVC_ERROR_INVALID_ARGUMENT, "layers[2].v_scale is nan");
  pl_options(&m, &po);
  po.l[0].k_scale = -INFINITY;
  CHECK_REFUSED(kvc_pool_create(&po.o, &out), KVC_ERROR_INVALID_ARGUMENT, "layers[0].k_scale is -inf");
  pl_options(&m, &po);
  po.l[1].v_scale = 2.0f;
  CHECK_REFUSED(kvc_pool_create(&po.o, &out), KVC_ERROR_INVALID_ARGUMENT,
                "layers[1].v_scale is 2; it must be 1 unless storage is KVC_POOL_STORAGE_FP8_E4M3");
  /* A recurrent group's states stay in the dtype. */
  pl_model r = m;
  r.groups[1] = (pt_group){KVC_POOL_GROUP_RECURRENT, 4, 6, 0};
  r.ng = 2;
  r.layers[1].group = 1;
  r.layers[1].vdim = 0;
  r.layers[1].storage = KVC_POOL_STORAGE_FP8_E4M3;
  CHECK_REFUSED(pl_pool(&r, &out), KVC_ERROR_INVALID_ARGUMENT,
                "layers[1].storage is KVC_POOL_STORAGE_FP8_E4M3 but the layer is in a recurrent group");
  /* The options functions refuse what create refuses. */
  pl_options(&m, &po);
  po.l[0].k_scale = -1.0f;
  uint8_t fp[32];
  CHECK_REFUSED(kvc_pool_options_fingerprint(&po.o, fp), KVC_ERROR_INVALID_ARGUMENT, "layers[0].k_scale is -1");
  CHECK(out == sentinel);
}

/* 0.6's 40-byte layer entries are read with their own stride (storage in the dtype); mixed sizes are refused. */
static void test_published_layer_size(void) {
  pl_model m = fp8_model(KVC_POOL_LAYOUT_NHD);
  pt_options po;
  pl_options(&m, &po);
  enum { OLD = 40 };
  _Alignas(8) unsigned char old[3 * OLD];
  for (int i = 0; i < 3; i++) {
    po.l[i].struct_size = OLD;
    memcpy(old + i * OLD, &po.l[i], OLD);
  }
  po.o.layers = (const kvc_pool_layer_options*)(const void*)old;
  kvc_pool* p = NULL;
  if (CHECK_OK(kvc_pool_create(&po.o, &p))) {
    kvc_kv v;
    CHECK_OK(kvc_pool_layer_storage(p, 2, KVC_POOL_LAYOUT_NHD, &v));
    CHECK_EQ_I64(v.key.shape[2], 1); /* layer 2's own shape: read at the 40-byte stride */
    CHECK_EQ_I64(v.key.shape[3], 8);
    CHECK_EQ_I64(v.key.dtype.bits, 32);
    kvc_pool_destroy(p);
  }
  ((kvc_pool_layer_options*)(void*)(old + OLD))->struct_size = 56;
  CHECK_REFUSED(kvc_pool_create(&po.o, &p), KVC_ERROR_INVALID_ARGUMENT,
                "layers[1].struct_size is 56 but layers[0]'s is 40");
}

/* A refused write moves no byte. */
static void test_write_refusals(void) {
  pl_model m = fp8_model(KVC_POOL_LAYOUT_NHD);
  pl_fp8_kept = codec_kept;
  kvc_pool* p;
  kvc_pool_sequence* s;
  int32_t tok[5];
  REQUIRE_OK(pl_start(&m, tok, 5, 4, 0, &p, &s));
  int64_t slot;
  REQUIRE_OK(kvc_pool_reserve(s, tok + 4, 1, &slot));
  pl_snapshot before = pl_take(p, &m);
  uint16_t half[8] = {0};
  int64_t ks[3] = {1, 2, 4}, vs[3] = {1, 2, 3};
  float kf[8] = {0}, vf[6] = {0};
  kvc_tensor k = t3(kf, ks), v = t3(vf, vs);
  kvc_tensor kh = k;
  kh.data = half;
  kh.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT16);
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, &kh, &v, &slot, 1), KVC_ERROR_DTYPE_MISMATCH,
                "key is float16 but the pool stores float32");
  int64_t bad = 4 * 12;
  CHECK_REFUSED(kvc_pool_write_layer(p, 0, &k, &v, &bad, 1), KVC_ERROR_INVALID_ARGUMENT, "slot_mapping[0]");
  CHECK(pl_unchanged(p, &m, before));
  REQUIRE_OK(pl_write(p, &m, &slot, 4, 1, 1)); /* the refused token, written */
  REQUIRE_OK(kvc_pool_commit(s));
  CHECK_EQ_I64(pl_all_mismatches(s, &m), 0);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_codes_and_gather);
  TU_RUN(test_write_forms_agree);
  TU_RUN(test_fork_copy_on_write);
  TU_RUN(test_tier);
  TU_RUN(test_file);
  TU_RUN(test_latent_fp8);
  TU_RUN(test_shared_budget);
  TU_RUN(test_option_refusals);
  TU_RUN(test_published_layer_size);
  TU_RUN(test_write_refusals);
  return tu_finish();
}
