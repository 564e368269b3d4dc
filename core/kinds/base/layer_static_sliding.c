/*
 * core/kinds/base/layer_static_sliding.c: StaticSlidingWindowLayer (docs/semantics.md, 'Static sliding and chunked layers'), also used
 * for chunked attention. It holds M' = min(window, max_cache_len) tokens.
 *
 * transformers rolls the buffer by one slot per decoded token (O(M') per
 * step); here the window moves along a buffer of 2*M' slots and is compacted
 * once every M' steps, so steady decoding costs O(1) amortized and the
 * returned view is the same oldest-to-newest sequence.
 */
#include <inttypes.h>

#include "base_kinds.h"

static int is_full(const kvc_layer* l) { return l->cum >= l->slots; }

static kvc_error* check_update(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                               const kvc_update_options* o) {
  if (!o || !o->cache_position) return NULL;
  /*
   * Positions are absolute token positions; they pick slots only while the
   * window is not yet full (docs/semantics.md, 'Static sliding and chunked layers', case 4, as in 4.57). Once the window fills
   * or is full, the layer's own counter decides, and positions beyond the
   * window are normal.
   */
  if (!is_full(l) && l->cum + n <= l->slots) return kvci_check_positions(fn, index, l, n, o, l->slots);
  return kvci_check_positions(fn, index, l, n, o, INT64_MAX);
}

static kvc_region keep_for_update(const kvc_layer* l, int64_t n, const kvc_update_options* o, int64_t* append) {
  (void)o;
  *append = n;
  if (is_full(l)) return (kvc_region){l->start, l->end};
  if (l->cum + n > l->slots) return (kvc_region){0, l->cum};
  *append = 0; /* branch 4 writes inside the zero-padded window */
  return (kvc_region){0, l->slots};
}

static kvc_region apply_update(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v, int64_t n,
                               const kvc_update_options* o) {
  int64_t cum = l->cum, m = l->slots;
  l->cum += n;
  if (cum >= m) {
    /* Branches 1 and 2: already full. Return the previous tail (minus the oldest) plus the new tokens. */
    kvci_layer_write(c, l, k, v, l->end, NULL, n);
    kvc_region full = {l->start + 1, l->end + n};
    l->end += n;
    l->start = l->end - m;
    return full;
  }
  if (cum + n > m) {
    /* Branch 3: this call fills the window. Return everything; keep the last M'. */
    kvci_layer_write(c, l, k, v, cum, NULL, n);
    l->end = cum + n;
    l->start = l->end - m;
    return (kvc_region){0, cum + n};
  }
  /* Branch 4: still room. Return the whole zero-padded buffer. */
  if (o && o->cache_position)
    kvci_layer_write(c, l, k, v, 0, o->cache_position, n);
  else
    kvci_layer_write(c, l, k, v, cum, NULL, n);
  return (kvc_region){0, m};
}

static void mask_sizes(const kvc_layer* l, int64_t q, int64_t* len, int64_t* off) {
  int64_t c = l->cum, w = l->slots;
  *off = c - w + 1 > 0 ? c - w + 1 : 0;
  if (c >= w)
    *len = w + q - 1;
  else if (c + q > w)
    *len = c + q;
  else
    *len = w;
}

/*
 * crop (transformers 5.24): exact while the window has not moved (every token
 * seen is still in its slot); after that the evicted tokens are gone, and
 * transformers would rewind its counters over a rolled buffer.
 */
static kvc_error* check_crop(const kvc_layer* l, int64_t tokens) {
  if (tokens == 0 || l->cum <= l->slots) return NULL;
  return kvci_err(KVC_ERROR_INVALID_STATE,
                  "kvc_cache_crop: a %s layer holding %" PRId64 " slots has seen %" PRId64
                  " tokens, so its window has moved and the evicted tokens cannot be restored (tokens %" PRId64
                  "); crop it before it sees more tokens than it holds",
                  l->desc->name, l->slots, l->cum, tokens);
}

static void apply_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  l->cum = kvci_static_crop_counter(l->cum, tokens);
}

/* StaticSlidingWindowLayer.is_croppable (5.24): only a layer whose window never moves, max_cache_len <= window. */
/* Branch 4 writes inside [0, slots) of a store that initial_capacity made 2 x slots; once full, the store keeps
 * the last `slots` tokens (branches 1 to 3), which the next update's region is. */
kvc_error* kvci_static_sliding_check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  if (!l->initialized) return NULL;
  if (l->cap < l->slots)
    return kvci_loaded_refuse(fn, where, "the store's capacity", l->cap,
                              "a %s layer (max_cache_len %" PRId64 ", window %" PRId64 ") has %" PRId64
                              " slots at least",
                              l->desc->name, l->max_cache_len, l->window, l->slots);
  if (is_full(l) && l->end - l->start != l->slots)
    return kvci_loaded_refuse(fn, where, "the stored tokens", l->end - l->start,
                              "a full %s layer (%" PRId64 " tokens seen) keeps exactly its %" PRId64 " slots",
                              l->desc->name, l->cum, l->slots);
  return NULL;
}

static int is_croppable(const kvc_layer* l, uint32_t release) {
  return kvci_static_is_croppable(l, release) && l->max_cache_len <= l->window;
}

/* The static reset, and the window back at the front of the buffer. */
static void reset(const kvc_cache* c, kvc_layer* l) {
  kvci_static_reset(c, l);
  if (l->initialized) {
    l->start = 0;
    l->end = l->slots;
  }
}

static int64_t initial_capacity(const kvc_layer* l, int64_t n) {
  int64_t cap = 2 * l->slots;
  return cap < n ? n : cap;
}

const kvc_layer_ops kvc_static_sliding_layer_ops = {
    KVC_STATIC_STORE_OPS,
    .check_crop = check_crop,
    .reset = reset,
};

/* The sliding kind and its chunked twin (StaticSlidingWindowLayer with window = attention chunk size). */
#define KVC_STATIC_SLIDING_KIND(ID, NAME, TRAITS)                                                   \
  {                                                                                                \
    .id = ID, .name = NAME,                                                                        \
    .traits = KVC_TRAIT_HAS_KV | KVC_TRAIT_STATIC | KVC_TRAIT_SLIDING | KVC_TRAIT_OFFLOADS | (TRAITS), \
    .ops = &kvc_static_sliding_layer_ops, .capacity = kvci_capacity_slots, .is_croppable = is_croppable, \
    .check_loaded = kvci_static_sliding_check_loaded,                                            \
  }

const kvc_kind kvc_static_sliding_kind = KVC_STATIC_SLIDING_KIND(KVC_LAYER_STATIC_SLIDING, "static sliding", 0);
const kvc_kind kvc_static_chunked_kind =
    KVC_STATIC_SLIDING_KIND(KVC_LAYER_STATIC_CHUNKED, "static chunked", KVC_TRAIT_CHUNKED);
