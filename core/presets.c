/*
 * core/presets.c: the layer lists of transformers' cache classes (spec A.10,
 * A.12, A.13, C.8-C.10), built from the parts of a model config that matter.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

static const char* FN = "kvc_cache_create";

static const char* preset_name(kvc_preset p) {
  switch (p) {
    case KVC_PRESET_DYNAMIC: return "KVC_PRESET_DYNAMIC";
    case KVC_PRESET_STATIC: return "KVC_PRESET_STATIC";
    case KVC_PRESET_SLIDING_WINDOW: return "KVC_PRESET_SLIDING_WINDOW";
    case KVC_PRESET_HYBRID: return "KVC_PRESET_HYBRID";
    case KVC_PRESET_HYBRID_CHUNKED: return "KVC_PRESET_HYBRID_CHUNKED";
    default: return "KVC_PRESET_CUSTOM";
  }
}

static kvc_error* check_layer(uint32_t i, const kvc_layer_options* l) {
  char arg[48];
  snprintf(arg, sizeof arg, "options->layers[%u]", i);
  kvc_error* e = kvc_check_struct_size(FN, arg, l->struct_size, sizeof(kvc_layer_options));
  if (e) return e;
  if (!kvc_kind_is_valid(l->kind))
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].kind is %d; valid kinds are KVC_LAYER_DYNAMIC (1) .. "
                   "KVC_LAYER_STATIC_CHUNKED (6)",
                   FN, i, (int)l->kind);
  if (kvc_kind_is_sliding(l->kind) && (l->window < 1 || l->window > INT32_MAX))
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].window is %" PRId64 "; a %s layer needs window in [1, 2^31)", FN, i,
                   l->window, kvc_kind_name(l->kind));
  if (kvc_kind_is_static(l->kind) && (l->max_cache_len < 1 || l->max_cache_len > INT32_MAX))
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].max_cache_len is %" PRId64 "; a %s layer needs max_cache_len in [1, 2^31)",
                   FN, i, l->max_cache_len, kvc_kind_name(l->kind));
  return NULL;
}

/* Layer types as transformers derives them (A.10 steps 1-2). */
static kvc_error* layer_types(const kvc_model_config* c, kvc_layer_type* out, uint32_t* n) {
  for (uint32_t i = 0; i < c->num_hidden_layers; i++) {
    kvc_layer_type t;
    if (c->layer_types) {
      t = c->layer_types[i];
      if (t < KVC_LAYER_TYPE_FULL_ATTENTION || t > KVC_LAYER_TYPE_CHUNKED_ATTENTION)
        return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                       "%s: config->layer_types[%u] is %d; valid types are KVC_LAYER_TYPE_FULL_ATTENTION (1), "
                       "_SLIDING_ATTENTION (2) and _CHUNKED_ATTENTION (3)",
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
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->config is NULL but %s needs a model config", FN,
                   preset_name(p));
  kvc_error* e = kvc_check_struct_size(FN, "options->config", c->struct_size, sizeof(kvc_model_config));
  if (e) return e;
  if (c->num_hidden_layers < 1 || c->num_hidden_layers > 1u << 20)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: config->num_hidden_layers is %u; it must be in [1, 1048576]", FN,
                   c->num_hidden_layers);
  if (c->num_kv_shared_layers >= c->num_hidden_layers)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->num_kv_shared_layers is %u but must be less than num_hidden_layers (%u)", FN,
                   c->num_kv_shared_layers, c->num_hidden_layers);
  if (c->sliding_window < 0 || c->sliding_window > INT32_MAX)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: config->sliding_window is %" PRId64 "; use 0 for none or [1, 2^31)",
                   FN, c->sliding_window);
  if (c->attention_chunk_size < 0 || c->attention_chunk_size > INT32_MAX)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->attention_chunk_size is %" PRId64 "; use 0 for none or [1, 2^31)", FN,
                   c->attention_chunk_size);
  return NULL;
}

kvc_error* kvc_preset_layers(const kvc_cache_options* o, kvc_layer_options** out, uint32_t* count, int* lazy) {
  kvc_preset p = o->preset;
  *lazy = 0;
  if (p == KVC_PRESET_CUSTOM) {
    if (o->num_layers > 0 && !o->layers)
      return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->layers is NULL but options->num_layers is %u", FN,
                     o->num_layers);
    if (o->num_layers == 0)
      return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: options->num_layers is 0; a KVC_PRESET_CUSTOM cache needs at least one layer", FN);
    for (uint32_t i = 0; i < o->num_layers; i++) {
      kvc_error* e = check_layer(i, &o->layers[i]);
      if (e) return e;
    }
    kvc_layer_options* l = (kvc_layer_options*)malloc(sizeof(*l) * o->num_layers);
    if (!l) return kvc_err_oom();
    for (uint32_t i = 0; i < o->num_layers; i++) l[i] = o->layers[i];
    *out = l;
    *count = o->num_layers;
    return NULL;
  }
  if (p < KVC_PRESET_CUSTOM || p > KVC_PRESET_HYBRID_CHUNKED)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->preset is %d; valid presets are KVC_PRESET_CUSTOM (0) .. KVC_PRESET_HYBRID_CHUNKED (5)",
                   FN, (int)p);
  if (p == KVC_PRESET_DYNAMIC && !o->config) {
    *lazy = 1;
    *out = NULL;
    *count = 0;
    return NULL;
  }
  kvc_error* e = check_config(p, o->config);
  if (e) return e;
  const kvc_model_config* c = o->config;
  int is_static = p != KVC_PRESET_DYNAMIC;
  if (is_static && (o->max_cache_len < 1 || o->max_cache_len > INT32_MAX))
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->max_cache_len is %" PRId64 "; %s needs max_cache_len in [1, 2^31)", FN,
                   o->max_cache_len, preset_name(p));
  if ((p == KVC_PRESET_SLIDING_WINDOW || p == KVC_PRESET_HYBRID) && c->sliding_window < 1)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->sliding_window is %" PRId64 " but %s requires a model config with sliding window "
                   "attention (sliding_window >= 1)",
                   FN, c->sliding_window, preset_name(p));
  if (p == KVC_PRESET_HYBRID_CHUNKED && c->attention_chunk_size < 1 && c->sliding_window < 1)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: config->attention_chunk_size and config->sliding_window are both 0 but "
                   "KVC_PRESET_HYBRID_CHUNKED needs one of them",
                   FN);

  kvc_layer_type* types = (kvc_layer_type*)malloc(sizeof(*types) * c->num_hidden_layers);
  if (!types) return kvc_err_oom();
  uint32_t n = 0;
  e = layer_types(c, types, &n);
  if (e) {
    free(types);
    return e;
  }
  uint32_t pattern = c->sliding_window_pattern ? c->sliding_window_pattern : 2;
  for (uint32_t i = 0; i < n; i++) {
    if (p == KVC_PRESET_SLIDING_WINDOW) types[i] = KVC_LAYER_TYPE_SLIDING_ATTENTION;
    if ((p == KVC_PRESET_HYBRID || p == KVC_PRESET_HYBRID_CHUNKED) && !c->layer_types) {
      int windowed = (i + 1) % pattern != 0;
      kvc_layer_type w = p == KVC_PRESET_HYBRID ? KVC_LAYER_TYPE_SLIDING_ATTENTION : KVC_LAYER_TYPE_CHUNKED_ATTENTION;
      types[i] = windowed ? w : KVC_LAYER_TYPE_FULL_ATTENTION;
    }
  }
  kvc_layer_options* l = (kvc_layer_options*)malloc(sizeof(*l) * n);
  if (!l) {
    free(types);
    return kvc_err_oom();
  }
  for (uint32_t i = 0; i < n; i++) {
    kvc_layer_options lo = KVC_LAYER_OPTIONS_INIT;
    lo.max_cache_len = is_static ? o->max_cache_len : 0;
    int64_t sliding = c->sliding_window, chunk = c->attention_chunk_size;
    /* HybridChunkedCache (legacy) takes its window from sliding_window when there is no chunk size. */
    if (p == KVC_PRESET_HYBRID_CHUNKED && chunk < 1) chunk = sliding;
    switch (types[i]) {
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
    if (kvc_kind_is_sliding(lo.kind) && lo.window < 1) {
      kvc_error* err = kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                               "%s: layer %u is %s attention but config->%s is 0; set it to the window size", FN, i,
                               types[i] == KVC_LAYER_TYPE_SLIDING_ATTENTION ? "sliding" : "chunked",
                               types[i] == KVC_LAYER_TYPE_SLIDING_ATTENTION ? "sliding_window" : "attention_chunk_size");
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
