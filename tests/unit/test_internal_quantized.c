/*
 * test_internal_quantized.c: the packed groups a QUANTIZED layer keeps in its
 * row buffers decode to exactly the dequantized values its store holds, in
 * both modes, and keep doing so after the operations that move rows (reorder,
 * select, repeat-interleave, split, stack, clone) or cut tokens (crop). The
 * outputs never read the groups back, so only this test can see them go
 * wrong.
 */
#include "test_quantized.h"

#include "cpu/quantize.h"
#include "half.h"
#include "internal.h"
#include "layer_quantized.h"
#include "quant_layout.h"

#define F32 KVC_DTYPE_FLOAT32

typedef struct decode_result {
  int64_t groups, mismatches;
} decode_result;

/* Decodes one record of `group` values and compares them with the store elements at flat store indices `at`. */
static void check_record(const kvc_layer* l, int which, const unsigned char* rec, int64_t group, const int64_t* at,
                         decode_result* r) {
  uint8_t codes[512];
  float out[512], scale, zero;
  if (group > 512) abort();
  /* A record is [scale][zero point][packed codes] (abi/backend/backend.h). */
  scale = kvci_load_f32_unaligned(l->dtype, rec);
  zero = kvci_load_f32_unaligned(l->dtype, rec + l->elem);
  kvci_unpack_codes(rec + 2 * l->elem, group, kvci_quant_opts(l)->nbits, codes);
  const kvc_quant_spec q = kvci_quant_spec(l, which);
  kvc_quantizer_spec spec = {(kvc_quantizer)q.quantizer, q.nbits, (kvc_dtype)q.dtype, q.axis};
  kvci_dequantize_groups(&spec, codes, &scale, &zero, 1, group, out);
  const void* base = which ? l->v : l->k;
  for (int64_t i = 0; i < group; i++)
    if (tu_f32_bits(out[i]) != tu_f32_bits(kvci_load_f32(l->dtype, base, at[i]))) {
      if (r->mismatches++ == 0)
        fprintf(TU_LOG, "  %s group %lld element %lld: decoded %.9g, store %.9g\n", which ? "value" : "key",
                (long long)r->groups, (long long)i, out[i], kvci_load_f32(l->dtype, base, at[i]));
    }
  r->groups++;
}

/* Incremental mode: unit u of row b holds tokens [u*ut, (u+1)*ut), [heads][groups per head] records. */
static decode_result decode_incremental(const kvc_layer* l) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  decode_result r = {0, 0};
  const int64_t g = kvci_quant_opts(l)->q_group_size;
  for (int w = 0; w < 2; w++) {
    int channel = kvci_quant_per_channel(kvci_quant_opts(l), w);
    int64_t d = w ? l->v_dim : l->k_dim, ut = channel ? g : 1, gph = channel ? d : d / g;
    int64_t rb = kvci_quant_record_bytes(l, g), at[512];
    for (int64_t b = 0; b < l->batch; b++)
      for (int64_t u = 0; u < x->units[w]; u++)
        for (int64_t h = 0; h < l->heads; h++)
          for (int64_t j = 0; j < gph; j++) {
            const unsigned char* rec = (const unsigned char*)x->rows[w].ptr + b * x->rows[w].row_bytes +
                                       u * x->unit_bytes[w] + (h * gph + j) * rb;
            for (int64_t i = 0; i < g; i++)
              at[i] = channel ? kvci_quant_store_index(l, w, b, h, l->start + u * ut + i, j)
                              : kvci_quant_store_index(l, w, b, h, l->start + u, j * g + i);
            check_record(l, w, rec, g, at, &r);
          }
  }
  return r;
}

/*
 * Transformers mode: row b holds, in the quantizer's group order, the groups
 * of transformers' grouping of the [B, H, S, D] tensor (S = quantized tokens)
 * that lie in row b. Which elements a group has is found by grouping a
 * tensor of element indices.
 */
static decode_result decode_transformers(const kvc_layer* l) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  decode_result r = {0, 0};
  for (int w = 0; w < 2; w++) {
    if (!x->rows[w].ptr || !x->units[w]) continue;
    int64_t d = w ? l->v_dim : l->k_dim, s = x->quantized;
    const int64_t shape[4] = {l->batch, l->heads, s, d};
    kvc_quant_layout lay;
    if (kvci_quant_layout_init(&lay, kvci_quant_opts(l)->quantizer, kvci_quant_axis(kvci_quant_opts(l), w), kvci_quant_opts(l)->q_group_size, shape))
      abort();
    int64_t numel = l->batch * l->heads * s * d, at[512];
    float* idx = (float*)malloc(sizeof(float) * (size_t)numel);
    float* grouped = (float*)malloc(sizeof(float) * (size_t)numel);
    int64_t* filled = (int64_t*)calloc((size_t)l->batch, sizeof(int64_t));
    if (!idx || !grouped || !filled || numel >= (1 << 24)) abort();
    for (int64_t e = 0; e < numel; e++) idx[e] = (float)e;
    kvci_quant_gather(&lay, idx, grouped);
    int64_t rb = kvci_quant_record_bytes(l, lay.group);
    for (int64_t k = 0; k < lay.ngroups; k++) {
      int64_t row = (int64_t)grouped[k * lay.group] / (l->heads * s * d);
      for (int64_t i = 0; i < lay.group; i++) {
        int64_t e = (int64_t)grouped[k * lay.group + i];
        int64_t bb = e / (l->heads * s * d), hh = e / (s * d) % l->heads, t = e / d % s, ee = e % d;
        at[i] = kvci_quant_store_index(l, w, bb, hh, l->start + t, ee);
      }
      const unsigned char* rec =
          (const unsigned char*)x->rows[w].ptr + row * x->rows[w].row_bytes + filled[row]++ * rb;
      check_record(l, w, rec, lay.group, at, &r);
    }
    free(idx);
    free(grouped);
    free(filled);
  }
  return r;
}

static decode_result decode(const kvc_cache* c) {
  const kvc_layer* l = c->layers[0];
  return kvci_quant_opts(l)->mode == KVC_QUANT_MODE_INCREMENTAL ? decode_incremental(l) : decode_transformers(l);
}

/* Every group decodes to the store (and there are `min_groups` of them at least). */
#define CHECK_DECODES(c, min_groups)                 \
  do {                                               \
    decode_result r_ = decode(c);                    \
    CHECK_EQ_I64(r_.mismatches, 0);                  \
    CHECK(r_.groups >= (min_groups));                \
  } while (0)

static const tq_setting SETTINGS[] = {
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, -1, 4, 3},
    {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 3, 0, 1, 4, 2},
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 2, 0, 0, 8, 3},
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, -1, -1, 2, 3},
    {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 1, 1, 8, 3},
};

static void test_groups_follow_every_operation(void) {
  static const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  for (size_t i = 0; i < sizeof SETTINGS / sizeof SETTINGS[0]; i++)
    for (int di = 0; di < 3; di++) {
      const tq_setting* set = &SETTINGS[i];
      kvc_dtype dt = dts[di];
      kvc_cache* c = tq_cache(set, 1);
      REQUIRE(c);
      tq_rng rng = {i * 10 + (uint64_t)di};
      const int64_t B = 4, H = 2, D = 8;
      REQUIRE_OK(tq_update(c, 0, dt, B, H, 7, D, D, &rng, NULL, NULL, NULL));
      for (int s = 0; s < 6; s++) REQUIRE_OK(tq_update(c, 0, dt, B, H, 1, D, D, &rng, NULL, NULL, NULL));
      CHECK_DECODES(c, 8);
      static const int64_t beams[4] = {3, 3, 1, 0}, pick[4] = {1, 2, 2, 0};
      REQUIRE_OK(kvc_cache_reorder(c, beams, 4));
      CHECK_DECODES(c, 8);
      REQUIRE_OK(kvc_cache_batch_select_indices(c, pick, 4));
      CHECK_DECODES(c, 8);
      REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 2));
      CHECK_EQ_I64(c->layers[0]->batch, 8);
      CHECK_DECODES(c, 16);
      for (int s = 0; s < 3; s++) REQUIRE_OK(tq_update(c, 0, dt, 8, H, 1, D, D, &rng, NULL, NULL, NULL));
      CHECK_DECODES(c, 16);

      kvc_cache* splits[2] = {NULL, NULL};
      size_t count = 0;
      REQUIRE_OK(kvc_cache_batch_split(c, 8, 4, splits, 2, &count));
      CHECK_DECODES(splits[0], 8);
      CHECK_DECODES(splits[1], 8);
      kvc_cache* stacked = NULL;
      REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)splits, 2, &stacked));
      CHECK_DECODES(stacked, 16);
      kvc_cache* clone = NULL;
      REQUIRE_OK(kvc_cache_clone(stacked, &clone));
      CHECK_DECODES(clone, 16);
      /* A crop into the quantized tokens: incremental layers keep the groups of whole kept units. */
      REQUIRE_OK(kvc_cache_crop(clone, -6));
      CHECK_DECODES(clone, 0);
      for (int s = 0; s < 6; s++) REQUIRE_OK(tq_update(clone, 0, dt, 8, H, 1, D, D, &rng, NULL, NULL, NULL));
      CHECK_DECODES(clone, 16);
      TU_DESTROY(clone, stacked, splits[0], splits[1], c);
    }
}

/* Groups across batch rows (HQQ axis 0 over several rows) are not kept; the store alone holds that history. */
static void test_groups_across_rows_not_kept(void) {
  tq_setting set = {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 4, 3};
  tq_rng rng = {5};
  kvc_cache* c = tq_cache_holding(&set, 1, &rng, 2, 2, 4, 4, 4);
  REQUIRE(c);
  const kvc_quant_ext* x = kvci_quant_ext_of(c->layers[0]);
  CHECK(x->rows[0].ptr == NULL && x->rows[1].ptr == NULL);
  CHECK_EQ_I64(x->quantized, 4);
  CHECK_EQ_U64(tu_memory(c).bytes_quantized, 0);
  kvc_cache_destroy(c);
  /* One row: the same grouping stays within it, and is kept. */
  c = tq_cache(&set, 1);
  REQUIRE(c);
  REQUIRE_OK(tq_update(c, 0, F32, 1, 2, 4, 4, 4, &rng, NULL, NULL, NULL));
  CHECK_DECODES(c, 8);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_groups_follow_every_operation);
  TU_RUN(test_groups_across_rows_not_kept);
  return tu_finish();
}
