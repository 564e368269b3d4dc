/*
 * replay_quantized.c: the conformance operations of QuantizedCache
 * (transformers 5.23, spec A.8, A.14; generate_quantized.py):
 *
 *   qcreate S BACKEND NLAYERS NBITS AXIS_KEY AXIS_VALUE GROUP RESIDUAL
 *       kvc_cache_create with KVC_PRESET_QUANTIZED, a config of NLAYERS
 *       layers, and kvc_quant_options {BACKEND quanto|hqq, NBITS, axes,
 *       q_group_size GROUP, residual_length RESIDUAL} in
 *       KVC_QUANT_MODE_TRANSFORMERS
 *   qlayout S N
 *       N layers, each QUANTIZED with kvc_cache_max_length -1
 *
 * Updates, sequence lengths, mask sizes, reorder, reset and clone use the
 * core operations of replay.c.
 */
#include <string.h>

#include "replay.h"

static void op_qcreate(replay* r) {
  slot* s = slot_at(r, num(r));
  char* backend = tok(r);
  int64_t layers = num(r), nbits = num(r), axis_key = num(r), axis_value = num(r), group = num(r),
          residual = num(r);
  kvc_quant_options q;
  kvc_quant_options_init(&q);
  if (is(backend, "quanto"))
    q.quantizer = KVC_QUANTIZER_QUANTO;
  else if (is(backend, "hqq"))
    q.quantizer = KVC_QUANTIZER_HQQ;
  else
    malformed(r, "backend: quanto or hqq");
  if (layers < 1 || layers > MAX_LAYERS) malformed(r, "layer count");
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

static int quantized_row(replay* r, kvc_cache* c, int64_t i, const kvc_layer_info* info, const void* arg) {
  (void)arg;
  int64_t m = 0;
  if (!must(r, kvc_cache_max_length(c, (int32_t)i, &m), "kvc_cache_max_length")) return 0;
  if (info->kind != KVC_LAYER_QUANTIZED || info->is_sliding || m != -1)
    fail(r, "layer %lld: kind %d, is_sliding %d, max_length %lld; expected a quantized layer (%d), 0, -1",
         (long long)i, (int)info->kind, (int)info->is_sliding, (long long)m, (int)KVC_LAYER_QUANTIZED);
  return 1;
}

static void op_qlayout(replay* r) {
  int64_t si = num(r);
  vint n = expected_num(r);
  each_layer(r, si, n, quantized_row, NULL);
}

const replay_op replay_ops_quantized[] = {{"qcreate", op_qcreate}, {"qlayout", op_qlayout}, {NULL, NULL}};
