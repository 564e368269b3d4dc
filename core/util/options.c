/*
 * core/util/options.c: the init functions of every option struct, for languages
 * without macros, and the reading of option structs that grew.
 *
 * A struct grows only at its end. A caller compiled against an older header
 * passes an older struct_size; we copy the bytes it has and keep the defaults
 * for the rest, so old programs keep working with a newer library.
 */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "options.h"

/* Each init function sets *o to its struct's INIT macro (NULL is ignored). */
#define KVC_DEFINE_INIT(name, type, init) \
  void name(type* o) {                    \
    if (o) *o = (type)init;               \
  }
KVC_DEFINE_INIT(kvc_layer_options_init, kvc_layer_options, KVC_LAYER_OPTIONS_INIT)
KVC_DEFINE_INIT(kvc_model_config_init, kvc_model_config, KVC_MODEL_CONFIG_INIT)
KVC_DEFINE_INIT(kvc_cache_options_init, kvc_cache_options, KVC_CACHE_OPTIONS_INIT)
KVC_DEFINE_INIT(kvc_init_options_init, kvc_init_options, KVC_INIT_OPTIONS_INIT)
KVC_DEFINE_INIT(kvc_update_options_init, kvc_update_options, KVC_UPDATE_OPTIONS_INIT)
KVC_DEFINE_INIT(kvc_quant_options_init, kvc_quant_options, KVC_QUANT_OPTIONS_INIT)
KVC_DEFINE_INIT(kvc_conv_update_options_init, kvc_conv_update_options, KVC_CONV_UPDATE_OPTIONS_INIT)
KVC_DEFINE_INIT(kvc_pool_sequence_options_init, kvc_pool_sequence_options, KVC_POOL_SEQUENCE_OPTIONS_INIT)
KVC_DEFINE_INIT(kvc_pool_vllm_batch_options_init, kvc_pool_vllm_batch_options, KVC_POOL_VLLM_BATCH_OPTIONS_INIT)
#undef KVC_DEFINE_INIT

/* The published sizes (the header lists them too); the last is the current one. */
#define KVC_CHECK_SIZE(type, size) _Static_assert(sizeof(type) == (size), #type " changed size")
static const uint32_t LAYER_OPTIONS_SIZES[] = {24, 56};
static const uint32_t MODEL_CONFIG_SIZES[] = {40, 56};
static const uint32_t CACHE_OPTIONS_SIZES[] = {48, 80, 88, 96};
static const uint32_t UPDATE_OPTIONS_SIZES[] = {24, 48};
static const uint32_t QUANT_OPTIONS_SIZES[] = {40};
static const uint32_t DISK_TIER_OPTIONS_SIZES[] = {32, 48};
static const uint32_t POOL_SEQUENCE_OPTIONS_SIZES[] = {24, 56, 80};
KVC_CHECK_SIZE(kvc_layer_options, 56);
KVC_CHECK_SIZE(kvc_model_config, 56);
KVC_CHECK_SIZE(kvc_cache_options, 96);
KVC_CHECK_SIZE(kvc_update_options, 48);
KVC_CHECK_SIZE(kvc_quant_options, 40);
KVC_CHECK_SIZE(kvc_disk_tier_options, 48);
KVC_CHECK_SIZE(kvc_pool_sequence_options, 80);
KVC_CHECK_SIZE(kvc_pool_mm_item, 32);
KVC_CHECK_SIZE(kvc_layer_info, 128);
KVC_CHECK_SIZE(kvc_memory_info, 56);
KVC_CHECK_SIZE(kvc_conv_update_options, 32);

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int published(uint32_t got, const uint32_t* sizes, int n) {
  for (int i = 0; i < n; i++)
    if (got == sizes[i]) return 1;
  return 0;
}

static kvc_error* size_error(const char* fn, const char* arg, uint32_t got, const uint32_t* sizes, int n) {
  char list[96];
  size_t at = 0;
  list[0] = '\0';
  for (int i = 0; i < n && at < sizeof list; i++) {
    int w = snprintf(list + at, sizeof list - at, "%s%u", i ? ", " : "", sizes[i]);
    if (w < 0) break;
    at += (size_t)w;
  }
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                 "%s: %s.struct_size is %u but this library knows only %s; "
                 "initialize the struct with its _INIT macro or init function",
                 fn, arg, got, list);
}

/* Copies the caller's bytes over the defaults already in `out`. */
static kvc_error* read_struct(const char* fn, const char* arg, const void* in, uint32_t got, void* out, size_t full,
                              const uint32_t* sizes, int n) {
  if (!published(got, sizes, n)) return size_error(fn, arg, got, sizes, n);
  memcpy(out, in, got < full ? got : full);
  *(uint32_t*)out = (uint32_t)full;
  return NULL;
}

kvc_error* kvci_read_layer_options(const char* fn, const char* arg, const kvc_layer_options* in, kvc_layer_options* out) {
  *out = (kvc_layer_options)KVC_LAYER_OPTIONS_INIT;
  return read_struct(fn, arg, in, in->struct_size, out, sizeof *out, LAYER_OPTIONS_SIZES, COUNT(LAYER_OPTIONS_SIZES));
}

const kvc_layer_options* kvci_layer_options_at(const kvc_layer_options* layers, uint32_t i) {
  /* An older caller's array has elements of its own (smaller) size. */
  size_t stride = published(layers[0].struct_size, LAYER_OPTIONS_SIZES, COUNT(LAYER_OPTIONS_SIZES))
                      ? layers[0].struct_size
                      : sizeof(kvc_layer_options);
  return (const kvc_layer_options*)((const char*)layers + (size_t)i * stride);
}

kvc_error* kvci_read_model_config(const char* fn, const char* arg, const kvc_model_config* in, kvc_model_config* out) {
  *out = (kvc_model_config)KVC_MODEL_CONFIG_INIT;
  return read_struct(fn, arg, in, in->struct_size, out, sizeof *out, MODEL_CONFIG_SIZES, COUNT(MODEL_CONFIG_SIZES));
}

kvc_error* kvci_read_cache_options(const char* fn, const char* arg, const kvc_cache_options* in, kvc_cache_options* out) {
  *out = (kvc_cache_options)KVC_CACHE_OPTIONS_INIT;
  return read_struct(fn, arg, in, in->struct_size, out, sizeof *out, CACHE_OPTIONS_SIZES, COUNT(CACHE_OPTIONS_SIZES));
}

kvc_error* kvci_read_update_options(const char* fn, const char* arg, const kvc_update_options* in,
                                   kvc_update_options* out) {
  *out = (kvc_update_options)KVC_UPDATE_OPTIONS_INIT;
  return read_struct(fn, arg, in, in->struct_size, out, sizeof *out, UPDATE_OPTIONS_SIZES, COUNT(UPDATE_OPTIONS_SIZES));
}

kvc_error* kvci_read_quant_options(const char* fn, const char* arg, const kvc_quant_options* in, kvc_quant_options* out) {
  *out = (kvc_quant_options)KVC_QUANT_OPTIONS_INIT;
  return read_struct(fn, arg, in, in->struct_size, out, sizeof *out, QUANT_OPTIONS_SIZES, COUNT(QUANT_OPTIONS_SIZES));
}

kvc_error* kvci_read_disk_tier_options(const char* fn, const char* arg, const kvc_disk_tier_options* in,
                                      kvc_disk_tier_options* out) {
  *out = (kvc_disk_tier_options)KVC_DISK_TIER_OPTIONS_INIT;
  return read_struct(fn, arg, in, in->struct_size, out, sizeof *out, DISK_TIER_OPTIONS_SIZES,
                     COUNT(DISK_TIER_OPTIONS_SIZES));
}

kvc_error* kvci_read_pool_sequence_options(const char* fn, const char* arg, const kvc_pool_sequence_options* in,
                                          kvc_pool_sequence_options* out) {
  *out = (kvc_pool_sequence_options)KVC_POOL_SEQUENCE_OPTIONS_INIT;
  return read_struct(fn, arg, in, in->struct_size, out, sizeof *out, POOL_SEQUENCE_OPTIONS_SIZES,
                     COUNT(POOL_SEQUENCE_OPTIONS_SIZES));
}

kvc_error* kvci_out_struct_size(const char* fn, const char* arg, uint32_t got, const uint32_t* sizes, int n,
                               size_t* write) {
  if (!published(got, sizes, n)) return size_error(fn, arg, got, sizes, n);
  *write = got;
  return NULL;
}
