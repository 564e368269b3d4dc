/*
 * replay_quantized.c: the conformance operations of QuantizedCache
 * (transformers 5.23, docs/semantics.md, 'Quantized layers'; generate_quantized.py, generate_fp8.py):
 *
 *   qcreate S BACKEND NLAYERS NBITS AXIS_KEY AXIS_VALUE GROUP RESIDUAL
 *       quanto|hqq: kvc_cache_create with KVC_PRESET_QUANTIZED, a config of
 *       NLAYERS layers, and kvc_quant_options {BACKEND, NBITS, axes,
 *       q_group_size GROUP, residual_length RESIDUAL} in
 *       KVC_QUANT_MODE_TRANSFORMERS;
 *       fp8: NLAYERS KVC_LAYER_QUANTIZED_FP8 layers (KVC_PRESET_CUSTOM); the
 *       five group-wise fields are 0 ("not given": transformers refuses them)
 *   qlayout S N
 *       N layers, each of the slot's quantized kind with kvc_cache_max_length -1
 *
 * Updates, sequence lengths, mask sizes, reorder, reset and clone use the
 * core operations of replay.c.
 */
#include <string.h>

#include "replay.h"

/* QuantizedCache("fp8", config): every layer an FP8 layer, no options. */
static void create_fp8(replay* r, slot* s, int64_t layers) {
  kvc_layer_options l[MAX_LAYERS];
  for (int64_t i = 0; i < layers; i++) {
    kvc_layer_options_init(&l[i]);
    l[i].kind = KVC_LAYER_QUANTIZED_FP8;
  }
  kvc_cache_options o;
  kvc_cache_options_init(&o);
  o.preset = KVC_PRESET_CUSTOM;
  o.num_layers = (uint32_t)layers;
  o.layers = l;
  create_in(r, s, &o);
}

static void op_qcreate(replay* r) {
  slot* s = slot_at(r, num(r));
  char* backend = tok(r);
  int64_t layers = num(r), nbits = num(r), axis_key = num(r), axis_value = num(r), group = num(r),
          residual = num(r);
  if (layers < 1 || layers > MAX_LAYERS) malformed(r, "layer count");
  if (is(backend, "fp8")) {
    if (nbits || axis_key || axis_value || group || residual) malformed(r, "fp8 takes no group-wise options");
    if (runnable(r)) create_fp8(r, s, layers);
    return;
  }
  kvc_quant_options q;
  kvc_quant_options_init(&q);
  if (is(backend, "quanto"))
    q.quantizer = KVC_QUANTIZER_QUANTO;
  else if (is(backend, "hqq"))
    q.quantizer = KVC_QUANTIZER_HQQ;
  else
    malformed(r, "backend: quanto, hqq or fp8");
  if (!runnable(r)) return;
  q.mode = KVC_QUANT_MODE_TRANSFORMERS;
  q.nbits = (int32_t)nbits;
  q.axis_key = (int32_t)axis_key;
  q.axis_value = (int32_t)axis_value;
  q.q_group_size = group;
  q.residual_length = residual;
  kvc_model_config cfg;
  kvc_model_config_init(&cfg);
  cfg.num_hidden_layers = (uint32_t)layers;
  kvc_cache_options o;
  kvc_cache_options_init(&o);
  o.preset = KVC_PRESET_QUANTIZED;
  o.config = &cfg;
  o.quant = &q;
  create_in(r, s, &o);
}

/* The slot's quantized kind is its first layer's (QUANTIZED or QUANTIZED_FP8); every layer must have it. */
static int quantized_row(replay* r, kvc_cache* c, int64_t i, const kvc_layer_info* info, const void* arg) {
  (void)arg;
  int64_t m = 0;
  kvc_layer_info first;
  memset(&first, 0, sizeof first);
  first.struct_size = sizeof first;
  if (!must(r, kvc_cache_max_length(c, (int32_t)i, &m), "kvc_cache_max_length")) return 0;
  if (!must(r, kvc_cache_layer_info(c, 0, &first), "kvc_cache_layer_info")) return 0;
  int quantized = info->kind == KVC_LAYER_QUANTIZED || info->kind == KVC_LAYER_QUANTIZED_FP8;
  if (!quantized || info->kind != first.kind || info->is_sliding || m != -1)
    fail(r, "layer %lld: kind %d, is_sliding %d, max_length %lld; expected a quantized layer (%d or %d, as layer 0), "
         "0, -1",
         (long long)i, (int)info->kind, (int)info->is_sliding, (long long)m, (int)KVC_LAYER_QUANTIZED,
         (int)KVC_LAYER_QUANTIZED_FP8);
  return 1;
}

static void op_qlayout(replay* r) {
  int64_t si = num(r);
  vint n = expected_num(r);
  each_layer(r, si, n, quantized_row, NULL);
}

const replay_op replay_ops_quantized[] = {{"qcreate", op_qcreate}, {"qlayout", op_qlayout}, {NULL, NULL}};
