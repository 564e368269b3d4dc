/*
 * core/kinds/base/layer_dynamic_sliding.c: DynamicSlidingWindowLayer (docs/semantics.md, 'Dynamic sliding and chunked layers'), also
 * used for chunked attention with the chunk size as window.
 *
 * It keeps the last window-1 tokens (a query sees itself and the window-1
 * before it) and returns kept + new, so a long prefill returns the whole
 * prompt. The kept tokens stay where they are; only `start` moves, and the
 * store compacts when its end is reached.
 */
#include <inttypes.h>

#include "base_kinds.h"

/* Drops stored tokens older than the last window-1 (window 1 keeps none: see the differences doc). */
static void trim_to_window(kvc_layer* l) {
  int64_t keep = l->window - 1;
  if (l->end - l->start > keep) l->start = l->end - keep;
}

static kvc_region apply_update(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v, int64_t n,
                               const kvc_update_options* o) {
  (void)o;
  kvci_layer_write(c, l, k, v, l->end, NULL, n);
  kvc_region full = {l->start, l->end + n};
  l->end += n;
  l->cum += n;
  if (!l->record_past)
    trim_to_window(l);
  else if (full.end - full.begin > l->window - 1 + n)
    /* Recorded tokens older than the window are kept for a later crop, not attended to (transformers >= 5.2x). */
    full.begin = full.end - (l->window - 1 + n);
  return full;
}

static int64_t seq_length(const kvc_layer* l) { return l->cum; }
int64_t kvci_window_max_length(const kvc_layer* l) { return l->window; }

static void mask_sizes(const kvc_layer* l, int64_t q, int64_t* len, int64_t* off) {
  int64_t c = l->cum, w = l->window;
  *off = c - w + 1 > 0 ? c - w + 1 : 0;
  *len = c >= w ? w - 1 + q : c + q;
}

static kvc_error* check_crop(const kvc_layer* l, int64_t tokens) {
  if (l->cum < l->window) return NULL;
  if (!l->record_past)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "kvc_cache_crop: a %s layer (window %" PRId64 ") has seen %" PRId64
                   " tokens, reaching its window, and does not track past states; call "
                   "kvc_cache_activate_past_recording before the updates you may want to crop",
                   l->desc->name, l->window, l->cum);
  if (tokens > 0)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "kvc_cache_crop: tokens is %" PRId64 " but a %s layer that has reached its window (%" PRId64
                   ") can only be cropped by a negative number of tokens or 0",
                   tokens, l->desc->name, l->window);
  return NULL;
}

static void apply_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  int64_t len = kvci_layer_stored(l);
  if (l->cum >= l->window) {
    /* Recording past the window (checked): drop the last |tokens|, keep the last window-1 of the rest. */
    int64_t t = tokens == INT64_MIN ? INT64_MAX : -tokens; /* "remove everything" without overflow */
    l->end -= t < len ? t : len;
    trim_to_window(l);
    /* transformers lets the counter go negative here; a negative length means nothing, so clamp at 0. */
    l->cum = l->cum - t > 0 ? l->cum - t : 0;
    return;
  }
  if (!l->initialized) return;
  /* Below the window the counter follows what is stored, also after crop(0) (as transformers). */
  int64_t keep;
  if (kvci_dynamic_crop_keep(l, len, tokens, &keep)) l->end = l->start + keep;
  l->cum = l->end - l->start;
}

static void reset(const kvc_cache* c, kvc_layer* l) {
  (void)c;
  l->start = l->end = 0;
  l->cum = 0;
}

static int64_t initial_capacity(const kvc_layer* l, int64_t n) {
  int64_t cap = 2 * l->window;
  if (cap < l->window - 1 + n) cap = l->window - 1 + n;
  return cap < 16 ? 16 : cap;
}

/* Each store discipline fills the table with its own functions (the static ones through KVC_STATIC_STORE_OPS). */
const kvc_layer_ops kvc_dynamic_sliding_layer_ops = {
    .check_update = kvci_dynamic_check_update,
    .keep_for_update = kvci_dynamic_keep_for_update,
    .apply_update = apply_update,
    .seq_length = seq_length,
    .max_length = kvci_window_max_length,
    .mask_sizes = mask_sizes,
    .check_crop = check_crop,
    .apply_crop = apply_crop,
    .reset = reset,
    .initial_capacity = initial_capacity,
};

/* DynamicSlidingWindowLayer holds window - 1 tokens: the next token completes the window. */
int64_t kvci_capacity_window(const kvc_layer* l) { return l->window - 1; }

/* Without past recording every update trims the store to window - 1 tokens, which the next update's shift of the
 * kept tokens relies on. */
kvc_error* kvci_sliding_check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  int64_t stored = l->end - l->start;
  if (!l->record_past && stored > l->window - 1)
    return kvci_loaded_refuse(fn, where, "the stored tokens", stored,
                              "a %s layer (window %" PRId64 ") that does not record past states holds %" PRId64
                              " at most",
                              l->desc->name, l->window, l->window - 1);
  return NULL;
}

/* The sliding kind and its chunked twin: one store and table, the chunked one's window an attention chunk. */
#define KVC_DYNAMIC_SLIDING_KIND(ID, NAME, TRAITS)                                                      \
  {                                                                                                   \
    .id = ID, .name = NAME,                                                                           \
    .traits = KVC_TRAIT_HAS_KV | KVC_TRAIT_SLIDING | KVC_TRAIT_OFFLOADS | KVC_TRAIT_RECORDS_PAST | (TRAITS), \
    .ops = &kvc_dynamic_sliding_layer_ops, .capacity = kvci_capacity_window,                           \
    .check_loaded = kvci_sliding_check_loaded,                                                        \
  }

const kvc_kind kvc_dynamic_sliding_kind = KVC_DYNAMIC_SLIDING_KIND(KVC_LAYER_DYNAMIC_SLIDING, "dynamic sliding", 0);
/* ChunkedLayer. */
const kvc_kind kvc_dynamic_chunked_kind =
    KVC_DYNAMIC_SLIDING_KIND(KVC_LAYER_DYNAMIC_CHUNKED, "dynamic chunked", KVC_TRAIT_CHUNKED);
