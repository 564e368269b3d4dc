/*
 * core/pool/tier_options.c: what a tier needs of a model without a pool
 * (kvc_pool_options_fingerprint, kvc_pool_options_block_payload), for a
 * program that uses tiers by key (kvcache/tier.h, 'Key-level access').
 *
 * The options are checked as kvc_pool_create checks them and read as it
 * normalises them (pool.c's alloc_storage): an attention layer's value head
 * dim 0 is its key head dim and its recurrent sizes do not count; a
 * recurrent layer's value head dim does not count. So the fingerprint and
 * the block sizes equal those of a pool created with the same options
 * (tests/tier/test_tier_keys.c compares them).
 */
#include <stdlib.h>

#include "pool_internal.h"

static int is_recurrent(const kvc_pool_options* o, uint32_t g) {
  return o->groups[g].kind == KVC_POOL_GROUP_RECURRENT;
}

static kvci_model_group options_group(const void* src, uint32_t g) {
  const kvc_pool_group_options* go = &((const kvc_pool_options*)src)->groups[g];
  return (kvci_model_group){go->kind, go->block_size, go->window};
}

static kvci_model_layer options_layer(const void* src, uint32_t i) {
  const kvc_pool_options* o = src;
  const kvc_pool_layer_options* lo = &o->layers[i];
  kvci_model_layer l = {lo->group, lo->num_kv_heads, lo->key_head_dim, 0, 0, 0, 0, lo->storage,
                        {lo->k_scale, lo->v_scale}};
  if (is_recurrent(o, lo->group)) {
    l.conv_dim = lo->conv_dim;
    l.conv_kernel = lo->conv_kernel;
    l.dstate = lo->ssm_state_size;
  } else if (o->groups[lo->group].kind != KVC_POOL_GROUP_LATENT) {
    l.vdim = lo->value_head_dim ? lo->value_head_dim : lo->key_head_dim;
  }
  return l;
}

kvc_error* kvc_pool_options_fingerprint(const kvc_pool_options* caller, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  static const char* FN = "kvc_pool_options_fingerprint";
  if (!caller) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options is NULL; pass a kvc_pool_options", FN);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvc_pool_options read;
  kvc_pool_layer_options* layers;
  kvc_error* e = kvci_pool_options_read(FN, caller, &read, &layers);
  if (e) return e;
  const kvc_pool_options* options = &read;
  const kvci_model m = {options->dtype,      options->layout,  options->num_groups,       options->num_layers,
                        options,             options_group,    options_layer,             options->hash_seed,
                        options->hash_seed_len};
  kvci_model_fingerprint(&m, out);
  free(layers);
  return NULL;
}

kvc_error* kvc_pool_options_block_payload(const kvc_pool_options* caller, uint32_t group, size_t* payload_size,
                                          uint32_t* num_layers) {
  static const char* FN = "kvc_pool_options_block_payload";
  if (!caller) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options is NULL; pass a kvc_pool_options", FN);
  if (!payload_size || !num_layers)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", FN, payload_size ? "num_layers" : "payload_size");
  kvc_pool_options read;
  kvc_pool_layer_options* layers;
  kvc_error* e = kvci_pool_options_read(FN, caller, &read, &layers);
  if (e) return e;
  const kvc_pool_options* options = &read;
  if (group >= options->num_groups) {
    free(layers);
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: group is %u; the options have %u group(s)", FN, group,
                    options->num_groups);
  }
  /* As kvci_pool_block_payload sums a pool's layers: K and V (conv and SSM state) of every layer of the group. */
  const kvc_pool_group_options* g = &options->groups[group];
  size_t elem = kvc_dtype_size(options->dtype), bytes = 0;
  uint32_t n = 0;
  for (uint32_t i = 0; i < options->num_layers; i++) {
    if (options->layers[i].group != group) continue;
    kvci_model_layer l = options_layer(options, i);
    int64_t k = is_recurrent(options, group) ? l.conv_dim * l.conv_kernel : (int64_t)g->block_size * l.heads * l.kdim;
    int64_t v = is_recurrent(options, group) ? l.heads * l.kdim * l.dstate : (int64_t)g->block_size * l.heads * l.vdim;
    /* An fp8 layer's blocks hold one-byte codes (recurrent layers never are fp8). */
    bytes += (size_t)(k + v) * (l.storage == KVC_POOL_STORAGE_FP8_E4M3 ? 1 : elem);
    n++;
  }
  free(layers);
  *payload_size = bytes;
  *num_layers = n;
  return NULL;
}
