/*
 * core/kinds/base/layer_static.c: StaticLayer (docs/semantics.md, 'Static layers'): max_cache_len pre-allocated
 * slots, written at an internal counter (transformers >= 5.3) or at explicit
 * cache positions (transformers 4.57). Update returns the whole buffer;
 * unwritten slots are zero and must be masked.
 */
#include <inttypes.h>

#include "base_kinds.h"

kvc_error* kvci_check_positions(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                               const kvc_update_options* o, int64_t limit) {
  if (!o || !o->cache_position) return NULL;
  if ((int64_t)o->cache_position_length != n)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->cache_position_length is %u but %" PRId64
                   " new tokens were given for layer %u; pass one position per new token",
                   fn, o->cache_position_length, n, index);
  for (int64_t j = 0; j < n; j++) {
    int64_t p = o->cache_position[j];
    if (p < 0 || p >= limit)
      return kvci_err(KVC_ERROR_OUT_OF_RANGE,
                     "%s: options->cache_position[%" PRId64 "] is %" PRId64 " but layer %u (%s) has %" PRId64
                     " slots; positions must be in [0, %" PRId64 ")",
                     fn, j, p, index, l->desc->name, limit, limit);
  }
  return NULL;
}

static kvc_error* check_update(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                               const kvc_update_options* o) {
  if (o && o->cache_position) return kvci_check_positions(fn, index, l, n, o, l->slots);
  if (l->cum + n > l->slots)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE,
                   "%s: static layer %u holds %" PRId64 " of max_cache_len %" PRId64
                   " tokens; %" PRId64 " more would overflow it (a static cache never grows)",
                   fn, index, l->cum, l->slots, n);
  return NULL;
}

static kvc_region keep_for_update(const kvc_layer* l, int64_t n, const kvc_update_options* o, int64_t* append) {
  (void)n; (void)o;
  *append = 0; /* writes land inside the buffer: a static layer never moves or grows */
  return (kvc_region){0, l->slots};
}

static kvc_region apply_update(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v, int64_t n,
                               const kvc_update_options* o) {
  if (o && o->cache_position) {
    kvci_layer_write(c, l, k, v, 0, o->cache_position, n);
    for (int64_t j = 0; j < n; j++)
      if (o->cache_position[j] + 1 > l->cum) l->cum = o->cache_position[j] + 1;
  } else {
    kvci_layer_write(c, l, k, v, l->cum, NULL, n);
    l->cum += n;
  }
  return (kvc_region){0, l->slots};
}

/* Shared with the static sliding layer: tokens seen (the counter), and its slots. */
int64_t kvci_static_seq_length(const kvc_layer* l) { return l->cum; }
int64_t kvci_static_max_length(const kvc_layer* l) { return l->slots; }

static void mask_sizes(const kvc_layer* l, int64_t q, int64_t* len, int64_t* off) {
  (void)q;
  *len = l->slots;
  *off = 0;
}

/*
 * crop (transformers 5.24): the counter moves back and the slots stay as they
 * are; the next update overwrites them. Negative: tokens to remove (clamped
 * at 0, difference 3); positive: the legacy absolute length, as the dynamic
 * kinds take it (transformers raises RuntimeError).
 */
int64_t kvci_static_crop_counter(int64_t cum, int64_t tokens) {
  if (tokens == 0) return cum;
  int64_t keep = tokens > 0 ? tokens : cum + tokens;
  if (keep < 0) keep = 0;
  return keep < cum ? keep : cum;
}

static void apply_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  l->cum = kvci_static_crop_counter(l->cum, tokens);
}

/* Shared with the static sliding layer: a zeroed buffer and a new counter. */
void kvci_static_reset(const kvc_cache* c, kvc_layer* l) {
  if (l->initialized) kvci_layer_zero(c, l, (kvc_region){0, l->cap});
  l->cum = 0;
}

static int64_t initial_capacity(const kvc_layer* l, int64_t n) {
  (void)n;
  return l->slots;
}

const kvc_layer_ops kvc_static_layer_ops = {
    KVC_STATIC_STORE_OPS,
    .check_crop = kvci_crop_allowed,
    .reset = kvci_static_reset,
};

int64_t kvci_capacity_slots(const kvc_layer* l) { return l->slots; }

/* Every static update writes inside [0, slots) of a store allocated with exactly that many (initial_capacity). */
kvc_error* kvci_static_check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  if (l->initialized && l->cap != l->slots)
    return kvci_loaded_refuse(fn, where, "the store's capacity", l->cap,
                              "a %s layer (max_cache_len %" PRId64 ", window %" PRId64 ") has exactly %" PRId64
                              " slots",
                              l->desc->name, l->max_cache_len, l->window, l->slots);
  return NULL;
}

/* StaticLayer.is_croppable: True since 5.24 (5.23: False, it had no crop). */
int kvci_static_is_croppable(const kvc_layer* l, uint32_t release) {
  (void)l;
  return release == 0 || release >= 52400;
}

const kvc_kind kvc_static_kind = {
    .id = KVC_LAYER_STATIC,
    .name = "static",
    .traits = KVC_TRAIT_HAS_KV | KVC_TRAIT_STATIC | KVC_TRAIT_OFFLOADS,
    .ops = &kvc_static_layer_ops,
    .capacity = kvci_capacity_slots,
    .is_croppable = kvci_static_is_croppable,
    .check_loaded = kvci_static_check_loaded,
};
