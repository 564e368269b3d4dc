/*
 * vllm_pool.h: a pool in vLLM's hash mode for the tests of tests/pool
 * (test_pool_vllm_hash.c, test_pool_vllm_events.c): one full group, one
 * layer, events on, on the CPU. Static: one translation unit per test.
 */
#ifndef KVC_TESTS_POOL_VLLM_POOL_H
#define KVC_TESTS_POOL_VLLM_POOL_H

#include <stdlib.h>

#include "kvcache.h"
#include "test_util.h"

static TU_UNUSED kvc_error* vp_pool(kvc_pool_hash_mode mode, uint32_t bs, uint32_t usable, const void* seed,
                                    size_t seed_len, kvc_pool** out) {
  kvc_pool_group_options g = KVC_POOL_GROUP_OPTIONS_INIT;
  g.block_size = bs;
  g.num_blocks = usable + 1;
  kvc_pool_layer_options l = KVC_POOL_LAYER_OPTIONS_INIT;
  l.num_kv_heads = 1;
  l.key_head_dim = 2;
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_FLOAT32;
  o.num_groups = 1;
  o.groups = &g;
  o.num_layers = 1;
  o.layers = &l;
  o.hash_seed = seed;
  o.hash_seed_len = seed_len;
  o.event_capacity = 4096;
  o.hash_mode = mode;
  return kvc_pool_create(&o, out);
}

/* Reserves `n` tokens for s and commits them. */
static TU_UNUSED kvc_error* vp_append(kvc_pool_sequence* s, const int32_t* tokens, size_t n) {
  int64_t* slots = (int64_t*)malloc((n + 1) * sizeof(int64_t));
  if (!slots) abort();
  kvc_error* e = kvc_pool_reserve(s, tokens, n, slots);
  free(slots);
  return e ? e : kvc_pool_commit(s);
}

#endif /* KVC_TESTS_POOL_VLLM_POOL_H */
