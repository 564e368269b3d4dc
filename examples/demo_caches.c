/*
 * examples/demo_caches.c: the caches of the demo's table, each built the way
 * a user of that transformers class would: a preset and a model config.
 */
#include <stddef.h>

#include "demo.h"

static const kvc_layer_type sss_f[N_LAYERS] = {KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION,
                                               KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION};
/* Jamba-like: Mamba layers with attention in between. */
static const kvc_layer_type mfmf[N_LAYERS] = {KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION,
                                              KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION};

static kvc_cache* create(kvc_cache_options* opt, const char* what) {
  kvc_cache* cache = NULL;
  check(kvc_cache_create(opt, &cache), what);
  return cache;
}

static kvc_cache* create_preset(kvc_preset preset, const kvc_model_config* config, int64_t max_cache_len) {
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = preset;
  opt.config = config;
  opt.max_cache_len = max_cache_len;
  return create(&opt, "kvc_cache_create");
}

static kvc_model_config config_of(const kvc_layer_type* types) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = N_LAYERS;
  cfg.layer_types = types;
  return cfg;
}

/* DynamicCache(): no layers until the first update creates them. */
kvc_cache* make_dynamic(void) { return create_preset(KVC_PRESET_DYNAMIC, NULL, 0); }

/* DynamicCache(config=...) with layer_types: sliding layers keep window-1 tokens. */
kvc_cache* make_dynamic_sliding(void) {
  kvc_model_config cfg = config_of(sss_f);
  cfg.sliding_window = WINDOW;
  return create_preset(KVC_PRESET_DYNAMIC, &cfg, 0);
}

/* StaticCache(config, max_cache_len): fixed buffers, allocated at the first update. */
kvc_cache* make_static(void) {
  kvc_model_config cfg = config_of(NULL);
  return create_preset(KVC_PRESET_STATIC, &cfg, MAX_LEN);
}

/* SlidingWindowCache: every layer a fixed ring of `window` slots. */
kvc_cache* make_sliding_window(void) {
  kvc_model_config cfg = config_of(NULL);
  cfg.sliding_window = WINDOW;
  return create_preset(KVC_PRESET_SLIDING_WINDOW, &cfg, MAX_LEN);
}

/* HybridCache (Gemma 2/3): every 4th layer full attention, the rest sliding. */
kvc_cache* make_hybrid(void) {
  kvc_model_config cfg = config_of(NULL);
  cfg.sliding_window = WINDOW;
  cfg.sliding_window_pattern = 4;
  return create_preset(KVC_PRESET_HYBRID, &cfg, MAX_LEN);
}

/* HybridChunkedCache (Llama 4): every 4th layer full attention, the rest chunked. */
kvc_cache* make_hybrid_chunked(void) {
  kvc_model_config cfg = config_of(NULL);
  cfg.attention_chunk_size = WINDOW;
  cfg.sliding_window_pattern = 4;
  return create_preset(KVC_PRESET_HYBRID_CHUNKED, &cfg, MAX_LEN);
}

/* A custom cache, layer by layer: three growing chunked layers and a full one. */
kvc_cache* make_custom_chunked(void) {
  kvc_layer_options layers[N_LAYERS];
  for (int l = 0; l < N_LAYERS; l++) {
    kvc_layer_options_init(&layers[l]);
    layers[l].kind = l < 3 ? KVC_LAYER_DYNAMIC_CHUNKED : KVC_LAYER_DYNAMIC;
    layers[l].window = l < 3 ? WINDOW : 0;
  }
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_CUSTOM;
  opt.num_layers = N_LAYERS;
  opt.layers = layers;
  return create(&opt, "kvc_cache_create (custom)");
}

/* OffloadedCache (DynamicCache(offloading=True)): every layer waits in the host tier between its updates. */
kvc_cache* make_offloaded(void) { return create_preset(KVC_PRESET_OFFLOADED, NULL, 0); }

/* OffloadedStaticCache: StaticCache whose full-attention layers are offloaded. */
kvc_cache* make_offloaded_static(void) {
  kvc_model_config cfg = config_of(NULL);
  return create_preset(KVC_PRESET_OFFLOADED_STATIC, &cfg, MAX_LEN);
}

/* OffloadedHybridCache (Llama 4): HybridChunkedCache; the chunked layers stay on the device. */
kvc_cache* make_offloaded_hybrid(void) {
  kvc_model_config cfg = config_of(NULL);
  cfg.attention_chunk_size = WINDOW;
  cfg.sliding_window_pattern = 4;
  return create_preset(KVC_PRESET_OFFLOADED_HYBRID, &cfg, MAX_LEN);
}

/*
 * QuantizedCache: 4-bit codes in groups of one head vector (HEAD_DIM
 * consecutive channels of one token: quanto axis 0, HQQ axis 1) and a
 * full-precision residual of QUANT_RESIDUAL tokens.
 */
static kvc_cache* make_quantized(kvc_quantizer quantizer, kvc_quant_mode mode) {
  kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
  q.quantizer = quantizer;
  q.mode = mode;
  q.nbits = QUANT_NBITS;
  q.axis_key = q.axis_value = quantizer == KVC_QUANTIZER_HQQ ? 1 : 0;
  q.q_group_size = HEAD_DIM;
  q.residual_length = QUANT_RESIDUAL;
  kvc_model_config cfg = config_of(NULL);
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_QUANTIZED;
  opt.config = &cfg;
  opt.quant = &q;
  return create(&opt, "kvc_cache_create (quantized)");
}

kvc_cache* make_quanto_incremental(void) { return make_quantized(KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL); }
kvc_cache* make_quanto_transformers(void) { return make_quantized(KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS); }
kvc_cache* make_hqq_incremental(void) { return make_quantized(KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL); }
kvc_cache* make_hqq_transformers(void) { return make_quantized(KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS); }

/* SinkCache(window_length=WINDOW, num_sink_tokens=SINK_TOKENS): lazy, layers appear as they are updated. */
kvc_cache* make_sink(void) {
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_SINK;
  opt.window_length = WINDOW;
  opt.num_sink_tokens = SINK_TOKENS;
  return create(&opt, "kvc_cache_create (sink)");
}

/* MambaCache: a conv state and a recurrent state per layer, no K/V. */
kvc_cache* make_mamba(void) {
  kvc_model_config cfg = config_of(NULL);
  cfg.conv_kernel = CONV_K;
  return create_preset(KVC_PRESET_MAMBA, &cfg, 0);
}

/* HybridMambaAttentionDynamicCache (Jamba): states for the Mamba layers, dynamic K/V for the attention ones. */
kvc_cache* make_hybrid_mamba(void) {
  kvc_model_config cfg = config_of(mfmf);
  cfg.conv_kernel = CONV_K;
  return create_preset(KVC_PRESET_HYBRID_MAMBA, &cfg, 0);
}
