/*
 * replay_offload.c: the conformance operations of offloading caches
 * (transformers 5.x Cache(offloading=True), docs/semantics.md, 'The cache as a whole'; generate_offload.py):
 *
 *   ocreate S MODE OPTS   kvc_cache_create with OPTS as for `create`, offloading:
 *                         MODE `all` (KVC_OFFLOAD_ALL: offload_only_non_sliding=False),
 *                         `nonsliding` (KVC_OFFLOAD_NON_SLIDING), or `preset`: the OFFLOADED_*
 *                         preset of OPTS' preset with KVC_OFFLOAD_DEFAULT (lazy or dynamic ->
 *                         KVC_PRESET_OFFLOADED, static -> KVC_PRESET_OFFLOADED_STATIC,
 *                         hybrid_chunked -> KVC_PRESET_OFFLOADED_HYBRID)
 *   tiers S N T1..TN      the layer count, then per layer whether its K/V is in the host tier
 *                         (kvc_layer_info.is_offloaded): 1 or 0; -1 where transformers' layer
 *                         holds nothing, which is not checked
 *
 * Every other operation (update, views, queries, crop, batch operations,
 * clone, ...) is the core's, so each returned and stored view of an
 * offloading cache is compared bit for bit with what transformers returned.
 */
#include <stdio.h>
#include <string.h>

#include "replay.h"

static void op_ocreate(replay* r) {
  slot* s = slot_at(r, num(r));
  char* mode = tok(r);
  optspec o;
  parse_options(r, &o);
  if (!runnable(r)) return;
  if (is(mode, "all")) {
    o.options.offload = KVC_OFFLOAD_ALL;
  } else if (is(mode, "nonsliding")) {
    o.options.offload = KVC_OFFLOAD_NON_SLIDING;
  } else if (is(mode, "preset")) {
    kvc_preset p = o.options.preset;
    o.options.preset = p == KVC_PRESET_DYNAMIC  ? KVC_PRESET_OFFLOADED
                       : p == KVC_PRESET_STATIC ? KVC_PRESET_OFFLOADED_STATIC
                       : p == KVC_PRESET_HYBRID_CHUNKED ? KVC_PRESET_OFFLOADED_HYBRID
                                                        : -1;
    if (o.options.preset < 0) {
      malformed(r, "no offloaded preset for these options");
      return;
    }
  } else {
    malformed(r, "offload mode");
    return;
  }
  create_in(r, s, &o.options);
}

/* -1: transformers' layer holds nothing, so there is no tier to compare. */
static int tier_row(replay* r, kvc_cache* c, int64_t i, const kvc_layer_info* info, const void* arg) {
  const vint* tiers = arg;
  (void)c;
  if (tiers[i].v >= 0) check_layer_int(r, i, "is_offloaded", info->is_offloaded, tiers[i]);
  return 1;
}

static void op_tiers(replay* r) {
  int64_t si = num(r);
  int64_t count;
  vint n = expected_layer_count(r, &count);
  vint tiers[MAX_LAYERS];
  for (int64_t i = 0; i < count; i++) tiers[i] = expected_num(r);
  each_layer(r, si, n, tier_row, tiers);
}

const replay_op replay_ops_offload[] = {{"ocreate", op_ocreate}, {"tiers", op_tiers}, {NULL, NULL}};
