/*
 * core/cache/presets.c: the layer lists of transformers' cache classes (docs/semantics.md,
 * 'Layer types and presets'), built from the parts of a model config that matter.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cache_ops.h"
#include "kinds/layer_quantized.h"

static const char* FN = "kvc_cache_create";

static const char* preset_name(kvc_preset p) {
  switch (p) {
    case KVC_PRESET_DYNAMIC: return "KVC_PRESET_DYNAMIC";
    case KVC_PRESET_STATIC: return "KVC_PRESET_STATIC";
    case KVC_PRESET_SLIDING_WINDOW: return "KVC_PRESET_SLIDING_WINDOW";
    case KVC_PRESET_HYBRID: return "KVC_PRESET_HYBRID";
    case KVC_PRESET_HYBRID_CHUNKED: return "KVC_PRESET_HYBRID_CHUNKED";
    case KVC_PRESET_QUANTIZED: return "KVC_PRESET_QUANTIZED";
    case KVC_PRESET_OFFLOADED: return "KVC_PRESET_OFFLOADED";
    case KVC_PRESET_OFFLOADED_STATIC: return "KVC_PRESET_OFFLOADED_STATIC";
    case KVC_PRESET_OFFLOADED_HYBRID: return "KVC_PRESET_OFFLOADED_HYBRID";
    case KVC_PRESET_SINK: return "KVC_PRESET_SINK";
    case KVC_PRESET_MAMBA: return "KVC_PRESET_MAMBA";
    case KVC_PRESET_HYBRID_MAMBA: return "KVC_PRESET_HYBRID_MAMBA";
    default: return "KVC_PRESET_CUSTOM";
  }
}

/* Layer types as transformers derives them (docs/semantics.md, 'Layer types and presets', steps 1-2). */
static kvc_error* layer_types(const kvc_model_config* c, kvc_layer_type* out, uint32_t* n) {
  for (uint32_t i = 0; i < c->num_hidden_layers; i++) {
    kvc_layer_type t;
    if (c->layer_types) {
      t = c->layer_types[i];
      if (t < KVC_LAYER_TYPE_FULL_ATTENTION || t > KVC_LAYER_TYPE_INDEXED_ATTENTION)
        return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                       "%s: config->layer_types[%u] is %d; valid types are KVC_LAYER_TYPE_FULL_ATTENTION (1) .. "
                       "KVC_LAYER_TYPE_INDEXED_ATTENTION (8)",
                       FN, i, (int)t);
    } else if (c->sliding_window > 0) {
      t = KVC_LAYER_TYPE_SLIDING_ATTENTION;
    } else if (c->attention_chunk_size > 0) {
      t = KVC_LAYER_TYPE_CHUNKED_ATTENTION;
    } else {
      t = KVC_LAYER_TYPE_FULL_ATTENTION;
    }
    out[i] = t;
  }
  *n = c->num_hidden_layers - c->num_kv_shared_layers;
  return NULL;
}

static kvc_error* check_config(kvc_preset p, const kvc_model_config* c) {
  if (!c)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->config is NULL but %s needs a model config", FN,
                   preset_name(p));
  if (c->num_hidden_layers < 1 || c->num_hidden_layers > 1u << 20)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: config->num_hidden_layers is %u; it must be in [1, 1048576]", FN,
                   c->num_hidden_layers);
  if (c->num_kv_shared_layers >= c->num_hidden_layers)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->num_kv_shared_layers is %u but must be less than num_hidden_layers (%u)", FN,
                   c->num_kv_shared_layers, c->num_hidden_layers);
  if (c->sliding_window < 0 || c->sliding_window > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: config->sliding_window is %" PRId64 "; use 0 for none or [1, 2^31)",
                   FN, c->sliding_window);
  if (c->attention_chunk_size < 0 || c->attention_chunk_size > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->attention_chunk_size is %" PRId64 "; use 0 for none or [1, 2^31)", FN,
                   c->attention_chunk_size);
  if (c->number_of_conv_states > 64)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: config->number_of_conv_states is %u; it must be in [0, 64]", FN,
                   c->number_of_conv_states);
  if (c->conv_kernel < 0 || c->conv_kernel > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: config->conv_kernel is %" PRId64 "; use 0 or [1, 2^31)", FN,
                   c->conv_kernel);
  return NULL;
}

/* The offloading a preset uses when the caller leaves KVC_OFFLOAD_DEFAULT. */
static kvc_error* resolve_offload(const kvc_cache_options* o, kvc_offload* out) {
  kvc_offload m = o->offload;
  if (m < KVC_OFFLOAD_DEFAULT || m > KVC_OFFLOAD_NON_SLIDING)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->offload is %d; use KVC_OFFLOAD_DEFAULT (0), _NONE (1), _ALL (2) or _NON_SLIDING (3)",
                   FN, (int)m);
  if (m == KVC_OFFLOAD_DEFAULT) {
    switch (o->preset) {
      case KVC_PRESET_OFFLOADED: m = KVC_OFFLOAD_ALL; break; /* DynamicCache: offload_only_non_sliding=False */
      case KVC_PRESET_OFFLOADED_STATIC:
      case KVC_PRESET_OFFLOADED_HYBRID: m = KVC_OFFLOAD_NON_SLIDING; break;
      default: m = KVC_OFFLOAD_NONE; break;
    }
  }
  if (m != KVC_OFFLOAD_NONE && o->preset == KVC_PRESET_QUANTIZED)
    return kvci_err(KVC_ERROR_UNSUPPORTED,
                   "%s: options->offload is %d but KVC_PRESET_QUANTIZED does not offload (transformers' "
                   "QuantizedCache has no offloading); use KVC_OFFLOAD_DEFAULT or KVC_OFFLOAD_NONE",
                   FN, (int)o->offload);
  *out = m;
  return NULL;
}

/* The quant options of the cache, kept for the layers' specs (which point at it). */
static _Thread_local kvc_quant_options preset_quant;

kvc_error* kvci_preset_layers(const kvc_cache_options* o, kvc_layer_options** out, uint32_t* count, int* lazy,
                             kvc_layer_options* lazy_spec, kvc_offload* offload) {
  kvc_preset p = o->preset;
  *lazy = 0;
  *lazy_spec = (kvc_layer_options)KVC_LAYER_OPTIONS_INIT;
  if (p < KVC_PRESET_CUSTOM || p > KVC_PRESET_HYBRID_MAMBA)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->preset is %d; valid presets are KVC_PRESET_CUSTOM (0) .. KVC_PRESET_HYBRID_MAMBA (12)",
                   FN, (int)p);
  kvc_error* e = resolve_offload(o, offload);
  if (e) return e;
  if (p == KVC_PRESET_CUSTOM) {
    if (o->num_layers > 0 && !o->layers)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->layers is NULL but options->num_layers is %u", FN,
                     o->num_layers);
    if (o->num_layers == 0)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: options->num_layers is 0; a KVC_PRESET_CUSTOM cache needs at least one layer", FN);
    kvc_layer_options* l = (kvc_layer_options*)malloc(sizeof(*l) * o->num_layers);
    if (!l) return kvci_err_oom();
    for (uint32_t i = 0; i < o->num_layers; i++) {
      char arg[48];
      snprintf(arg, sizeof arg, "options->layers[%u]", i);
      e = kvci_read_layer_options(FN, arg, kvci_layer_options_at(o->layers, i), &l[i]);
      if (!e) e = kvci_kind_check_options(FN, i, &l[i]);
      if (e) {
        free(l);
        return e;
      }
    }
    *out = l;
    *count = o->num_layers;
    return NULL;
  }
  if (p == KVC_PRESET_SINK) {
    if (o->num_sink_tokens < 0 || o->num_sink_tokens >= INT32_MAX)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->num_sink_tokens is %" PRId64 "; it must be in [0, 2^31 - 1)",
                     FN, o->num_sink_tokens);
    if (o->window_length <= o->num_sink_tokens || o->window_length > INT32_MAX)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: options->window_length is %" PRId64 " but KVC_PRESET_SINK needs it in [num_sink_tokens + 1, "
                     "2^31) with num_sink_tokens %" PRId64,
                     FN, o->window_length, o->num_sink_tokens);
    lazy_spec->kind = KVC_LAYER_SINK;
    lazy_spec->window = o->window_length;
    lazy_spec->num_sink_tokens = o->num_sink_tokens;
  }
  if ((p == KVC_PRESET_DYNAMIC || p == KVC_PRESET_OFFLOADED || p == KVC_PRESET_SINK) && !o->config) {
    *lazy = 1;
    *out = NULL;
    *count = 0;
    return NULL;
  }
  if (!o->config)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->config is NULL but %s needs a model config", FN,
                   preset_name(p));
  kvc_model_config cfg;
  e = kvci_read_model_config(FN, "options->config", o->config, &cfg);
  if (!e) e = check_config(p, &cfg);
  if (e) return e;
  const kvc_model_config* c = &cfg;
  if (p == KVC_PRESET_QUANTIZED) {
    e = kvci_quant_read_checked(FN, "options->quant", o->quant, &preset_quant);
    if (e) return e;
  }
  if (p == KVC_PRESET_HYBRID_MAMBA && !c->layer_types)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->layer_types is NULL but KVC_PRESET_HYBRID_MAMBA needs it (LINEAR_ATTENTION for mamba "
                   "layers, FULL_ATTENTION for attention layers)",
                   FN);
  /* The offloaded presets are their base presets with offloading. */
  if (p == KVC_PRESET_OFFLOADED) p = KVC_PRESET_DYNAMIC;
  if (p == KVC_PRESET_OFFLOADED_STATIC) p = KVC_PRESET_STATIC;
  if (p == KVC_PRESET_OFFLOADED_HYBRID) p = KVC_PRESET_HYBRID_CHUNKED;
  int is_static = p == KVC_PRESET_STATIC || p == KVC_PRESET_SLIDING_WINDOW || p == KVC_PRESET_HYBRID ||
                  p == KVC_PRESET_HYBRID_CHUNKED;
  if (is_static && (o->max_cache_len < 1 || o->max_cache_len > INT32_MAX))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->max_cache_len is %" PRId64 "; %s needs max_cache_len in [1, 2^31)", FN,
                   o->max_cache_len, preset_name(p));
  if ((p == KVC_PRESET_SLIDING_WINDOW || p == KVC_PRESET_HYBRID) && c->sliding_window < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->sliding_window is %" PRId64 " but %s requires a model config with sliding window "
                   "attention (sliding_window >= 1)",
                   FN, c->sliding_window, preset_name(p));
  if (p == KVC_PRESET_HYBRID_CHUNKED && c->attention_chunk_size < 1 && c->sliding_window < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->attention_chunk_size and config->sliding_window are both 0 but "
                   "KVC_PRESET_HYBRID_CHUNKED needs one of them",
                   FN);

  kvc_layer_type* types = (kvc_layer_type*)malloc(sizeof(*types) * c->num_hidden_layers);
  if (!types) return kvci_err_oom();
  uint32_t n = 0;
  e = layer_types(c, types, &n);
  if (e) {
    free(types);
    return e;
  }
  if (p == KVC_PRESET_QUANTIZED) {
    /* transformers builds num_hidden_layers layers (not truncated) and refuses anything but full attention. */
    n = c->num_hidden_layers;
    for (uint32_t i = 0; i < n; i++)
      if (types[i] != KVC_LAYER_TYPE_FULL_ATTENTION) {
        int t = (int)types[i];
        free(types);
        return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                       "%s: config layer %u is not full attention (type %d); KVC_PRESET_QUANTIZED is only supported "
                       "for models with only full attention layers",
                       FN, i, t);
      }
  }
  uint32_t pattern = c->sliding_window_pattern ? c->sliding_window_pattern : 2;
  for (uint32_t i = 0; i < n; i++) {
    if (p == KVC_PRESET_SLIDING_WINDOW) types[i] = KVC_LAYER_TYPE_SLIDING_ATTENTION;
    if (p == KVC_PRESET_MAMBA) types[i] = KVC_LAYER_TYPE_LINEAR_ATTENTION;
    if ((p == KVC_PRESET_HYBRID || p == KVC_PRESET_HYBRID_CHUNKED) && !c->layer_types) {
      int windowed = (i + 1) % pattern != 0;
      kvc_layer_type w = p == KVC_PRESET_HYBRID ? KVC_LAYER_TYPE_SLIDING_ATTENTION : KVC_LAYER_TYPE_CHUNKED_ATTENTION;
      types[i] = windowed ? w : KVC_LAYER_TYPE_FULL_ATTENTION;
    }
  }
  kvc_layer_options* l = (kvc_layer_options*)malloc(sizeof(*l) * n);
  if (!l) {
    free(types);
    return kvci_err_oom();
  }
  for (uint32_t i = 0; i < n; i++) {
    kvc_layer_options lo = KVC_LAYER_OPTIONS_INIT;
    lo.max_cache_len = is_static ? o->max_cache_len : 0;
    int64_t sliding = c->sliding_window, chunk = c->attention_chunk_size;
    /* HybridChunkedCache (legacy) takes its window from sliding_window when there is no chunk size. */
    if (p == KVC_PRESET_HYBRID_CHUNKED && chunk < 1) chunk = sliding;
    lo.num_states = c->number_of_conv_states;
    lo.conv_kernel_size = c->conv_kernel;
    switch (types[i]) {
      case KVC_LAYER_TYPE_LINEAR_ATTENTION: lo.kind = KVC_LAYER_LINEAR; break;
      case KVC_LAYER_TYPE_DUMMY: lo.kind = KVC_LAYER_DUMMY; break; /* DummyLayer in both of transformers' mappings */
      case KVC_LAYER_TYPE_INDEXED_ATTENTION: lo.kind = is_static ? KVC_LAYER_STATIC_INDEXED : KVC_LAYER_DYNAMIC_INDEXED; break;
      case KVC_LAYER_TYPE_HYBRID: lo.kind = is_static ? KVC_LAYER_LINEAR_STATIC : KVC_LAYER_LINEAR_DYNAMIC; break;
      case KVC_LAYER_TYPE_HYBRID_SLIDING:
        lo.kind = is_static ? KVC_LAYER_LINEAR_STATIC_SLIDING : KVC_LAYER_LINEAR_DYNAMIC_SLIDING;
        lo.window = sliding;
        break;
      case KVC_LAYER_TYPE_SLIDING_ATTENTION:
        lo.kind = is_static ? KVC_LAYER_STATIC_SLIDING : KVC_LAYER_DYNAMIC_SLIDING;
        lo.window = sliding;
        break;
      case KVC_LAYER_TYPE_CHUNKED_ATTENTION:
        lo.kind = is_static ? KVC_LAYER_STATIC_CHUNKED : KVC_LAYER_DYNAMIC_CHUNKED;
        lo.window = chunk;
        break;
      default: lo.kind = is_static ? KVC_LAYER_STATIC : KVC_LAYER_DYNAMIC; break;
    }
    if (p == KVC_PRESET_QUANTIZED) {
      lo.kind = KVC_LAYER_QUANTIZED;
      lo.quant = &preset_quant;
    }
    if (p == KVC_PRESET_SINK) {
      lo.kind = KVC_LAYER_SINK;
      lo.window = o->window_length;
      lo.num_sink_tokens = o->num_sink_tokens;
    }
    if ((kvci_kind_find(lo.kind)->traits & KVC_TRAIT_SLIDING) && lo.window < 1) {
      kvc_error* err = kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                               "%s: layer %u is %s attention but config->%s is 0; set it to the window size", FN, i,
                               types[i] == KVC_LAYER_TYPE_CHUNKED_ATTENTION ? "chunked" : "sliding",
                               types[i] == KVC_LAYER_TYPE_CHUNKED_ATTENTION ? "attention_chunk_size" : "sliding_window");
      free(types);
      free(l);
      return err;
    }
    l[i] = lo;
  }
  free(types);
  *out = l;
  *count = n;
  return NULL;
}
