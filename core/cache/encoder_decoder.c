/* core/cache/encoder_decoder.c: EncoderDecoderCache (docs/semantics.md, 'Encoder-decoder caches'): two caches and per-layer is_updated. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"

struct kvc_encoder_decoder_cache {
  kvc_cache* self_attention;
  kvc_cache* cross_attention;
  uint8_t* is_updated; /* one flag per cross-attention layer slot */
  uint32_t num_flags;
  kvci_guard guard; /* the pair's calls; each half has its own (guard.h) */
};

static kvc_error* check_ed(const char* fn, const kvc_encoder_decoder_cache* c) {
  if (!c) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  return NULL;
}

/* The prologue of a query: a cache and a non-NULL out (as kvci_cache_check_query). */
static kvc_error* check_ed_query(const char* fn, const kvc_encoder_decoder_cache* c, const void* out) {
  kvc_error* e = check_ed(fn, c);
  if (e) return e;
  return out ? NULL : kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
}

/* An inner call's error, said in the words of the function the caller called. */
static kvc_error* rewrap(const char* fn, const char* which, kvc_error* e) {
  if (!e || e == kvci_err_oom()) return e;
  kvc_error* w = kvci_err(kvc_error_code(e), "%s (%s): %s", fn, which, kvc_error_message(e));
  kvc_error_destroy(e);
  return w;
}

void kvci_encdec_parts(const kvc_encoder_decoder_cache* c, kvc_cache** self, kvc_cache** cross, uint8_t** flags,
                       uint32_t* num_flags) {
  *self = c->self_attention;
  *cross = c->cross_attention;
  *flags = c->is_updated;
  *num_flags = c->num_flags;
}

kvci_guard* kvci_encdec_guard(const kvc_encoder_decoder_cache* c, int part) {
  if (!c) return NULL;
  return part == 0 ? kvci_guard_of(c) : kvci_guard_of(part == 1 ? c->self_attention : c->cross_attention);
}

void kvci_encdec_set_flags(kvc_encoder_decoder_cache* c, uint8_t* flags, uint32_t num_flags) {
  free(c->is_updated);
  c->is_updated = flags;
  c->num_flags = num_flags;
}

/* Makes room for flags up to `layer` (lazy cross caches grow). */
static kvc_error* ensure_flags(kvc_encoder_decoder_cache* c, uint32_t n) {
  if (n <= c->num_flags) return NULL;
  uint8_t* f = (uint8_t*)realloc(c->is_updated, n);
  if (!f) return kvci_err_oom();
  memset(f + c->num_flags, 0, n - c->num_flags);
  c->is_updated = f;
  c->num_flags = n;
  return NULL;
}

kvc_error* kvci_encdec_wrap(kvc_cache* self, kvc_cache* cross, const uint8_t* flags, uint32_t nflags,
                           kvc_encoder_decoder_cache** out) {
  kvc_encoder_decoder_cache* c = (kvc_encoder_decoder_cache*)calloc(1, sizeof(*c));
  if (!c) return kvci_err_oom();
  c->self_attention = self;
  c->cross_attention = cross;
  if (ensure_flags(c, nflags)) {
    free(c);
    return kvci_err_oom();
  }
  if (nflags) memcpy(c->is_updated, flags, nflags);
  *out = c;
  return NULL;
}

kvc_error* kvc_encoder_decoder_cache_create(kvc_cache* self, kvc_cache* cross, kvc_encoder_decoder_cache** out) {
  static const char* FN = "kvc_encoder_decoder_cache_create";
  if (!self || !cross)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass two caches", FN,
                   self ? "cross_attention" : "self_attention");
  if (self == cross)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: self_attention and cross_attention are the same cache; pass two distinct caches", FN);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  uint32_t n = cross->num_layers;
  uint8_t* flags = (uint8_t*)calloc(n ? n : 1, 1);
  if (!flags) return kvci_err_oom();
  for (uint32_t i = 0; i < n; i++) {
    /* A layer without K/V (dummy, linear) other than 0 has no sequence length: not updated. */
    int64_t s = 0;
    kvc_error_destroy(kvc_cache_seq_length(cross, i, &s));
    flags[i] = s > 0;
  }
  kvc_error* e = kvci_encdec_wrap(self, cross, flags, n, out);
  free(flags);
  return e;
}

void kvc_encoder_decoder_cache_destroy(kvc_encoder_decoder_cache* c) {
  kvci_guard_retire(kvci_guard_of(c), "kvc_encoder_decoder_cache_destroy");
  if (!c) return;
  kvc_cache_destroy(c->self_attention);
  kvc_cache_destroy(c->cross_attention);
  free(c->is_updated);
  free(c);
}

kvc_cache* kvc_encoder_decoder_cache_self_attention(kvc_encoder_decoder_cache* c) {
  return c ? c->self_attention : NULL;
}

kvc_cache* kvc_encoder_decoder_cache_cross_attention(kvc_encoder_decoder_cache* c) {
  return c ? c->cross_attention : NULL;
}

kvc_error* kvc_encoder_decoder_cache_is_updated(const kvc_encoder_decoder_cache* c, uint32_t layer, int32_t* out) {
  static const char* FN = "kvc_encoder_decoder_cache_is_updated";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = check_ed_query(FN, c, out);
  if (e) return e;
  *out = layer < c->num_flags ? c->is_updated[layer] : 0;
  return NULL;
}

kvc_error* kvc_encoder_decoder_cache_update_cross(kvc_encoder_decoder_cache* c, uint32_t layer, const kvc_tensor* key,
                                                  const kvc_tensor* value, kvc_kv* out) {
  static const char* FN = "kvc_encoder_decoder_cache_update_cross";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  KVCI_GUARD_LEND(kvci_encdec_guard(c, 1), FN); /* the halves: the pair calls them */
  KVCI_GUARD_LEND(kvci_encdec_guard(c, 2), FN);
  kvc_error* e = check_ed(FN, c);
  if (e) return e;
  if (layer < c->num_flags && c->is_updated[layer]) {
    /* Computed at an earlier step: reuse the stored K/V, ignore the inputs. */
    if (out) return kvc_cache_layer_view(c->cross_attention, layer, out);
    return NULL;
  }
  if (!key || !value)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: %s is NULL but cross-attention layer %u is not computed yet; pass the encoder's K/V", FN,
                   key ? "value" : "key", layer);
  /* Validate the index before growing the flags: a bad index must not allocate. */
  if (layer >= (c->cross_attention->lazy ? (1u << 20) : c->cross_attention->num_layers))
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %u but the cross-attention cache has %s%u layers", FN, layer,
                   c->cross_attention->lazy ? "at most " : "", c->cross_attention->lazy ? (1u << 20) : c->cross_attention->num_layers);
  if ((e = ensure_flags(c, layer + 1))) return e;
  kvc_kv tmp;
  if ((e = kvc_cache_update(c->cross_attention, layer, key, value, NULL, &tmp))) return rewrap(FN, "cross-attention cache", e);
  c->is_updated[layer] = 1;
  /* The first step attends to what the update returned (for a sliding cross layer more than it keeps). */
  if (out) *out = tmp;
  return NULL;
}

static kvc_error* require_dynamic_pair(const char* fn, const kvc_encoder_decoder_cache* c) {
  if (!kvci_cache_all_dynamic(c->self_attention) || !kvci_cache_all_dynamic(c->cross_attention))
    return kvci_err(KVC_ERROR_UNSUPPORTED,
                   "%s: this operation is only defined when both caches are dynamic, got a %s self-attention cache "
                   "and a %s cross-attention cache",
                   fn, kvci_cache_all_dynamic(c->self_attention) ? "dynamic" : "static",
                   kvci_cache_all_dynamic(c->cross_attention) ? "dynamic" : "static");
  return NULL;
}

kvc_error* kvci_batch_check_indices(const char* fn, const kvc_cache* c, const char* arg, const int64_t* idx,
                                   size_t count);
kvc_error* kvci_batch_check_repeats(const char* fn, const kvc_cache* c, int64_t repeats);

typedef enum { PAIR_CROP, PAIR_REORDER, PAIR_SELECT, PAIR_REPEAT } pair_op;

static kvc_error* pair_check(const char* fn, const kvc_cache* x, pair_op op, const int64_t* idx, size_t count,
                             int64_t repeats) {
  switch (op) {
    case PAIR_REORDER: return kvci_batch_check_indices(fn, x, "beam_idx", idx, count);
    case PAIR_SELECT: return kvci_batch_check_indices(fn, x, "indices", idx, count);
    default: return kvci_batch_check_repeats(fn, x, repeats);
  }
}

static kvc_error* pair_apply(kvc_cache* x, pair_op op, const int64_t* idx, size_t count, int64_t repeats) {
  switch (op) {
    case PAIR_REORDER: return kvc_cache_reorder(x, idx, count);
    case PAIR_SELECT: return kvc_cache_batch_select_indices(x, idx, count);
    default: return kvc_cache_batch_repeat_interleave(x, repeats);
  }
}

/*
 * Applies `op` to both caches. Both are validated first (doing the op on a
 * clone would double the memory of every beam step), so a bad argument
 * changes nothing; only an allocation failure in the second cache could leave
 * the first one done, and then the error says so.
 */
static kvc_error* both(const char* fn, kvc_encoder_decoder_cache* c, pair_op op, const int64_t* idx, size_t count,
                       int64_t repeats) {
  kvc_error* e = pair_check(fn, c->self_attention, op, idx, count, repeats);
  if (!e) e = pair_check(fn, c->cross_attention, op, idx, count, repeats);
  if (e) return e;
  e = pair_apply(c->self_attention, op, idx, count, repeats);
  if (e) return rewrap(fn, "self-attention cache", e);
  e = pair_apply(c->cross_attention, op, idx, count, repeats);
  return rewrap(fn, "cross-attention cache, after the self-attention cache was updated", e);
}

/*
 * The body of the pair's mutating entry points: the pair and its halves entered (the pair calls the halves'
 * public entry points), the arguments checked, then `op` (crop: the self-attention cache only, `repeats`
 * carrying the token count). Every op but a reorder needs both caches dynamic.
 */
static kvc_error* mutate_pair(const char* fn, kvc_encoder_decoder_cache* c, pair_op op, const int64_t* idx,
                              size_t count, int64_t repeats) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), fn);
  KVCI_GUARD_LEND(kvci_encdec_guard(c, 1), fn);
  KVCI_GUARD_LEND(kvci_encdec_guard(c, 2), fn);
  kvc_error* e = check_ed(fn, c);
  if (!e && op != PAIR_REORDER) e = require_dynamic_pair(fn, c);
  if (e) return e;
  if (op == PAIR_CROP) return rewrap(fn, "self-attention cache", kvc_cache_crop(c->self_attention, repeats));
  return both(fn, c, op, idx, count, repeats);
}

kvc_error* kvc_encoder_decoder_cache_crop(kvc_encoder_decoder_cache* c, int64_t tokens) {
  return mutate_pair("kvc_encoder_decoder_cache_crop", c, PAIR_CROP, NULL, 0, tokens);
}

kvc_error* kvc_encoder_decoder_cache_reorder(kvc_encoder_decoder_cache* c, const int64_t* beam_idx, size_t count) {
  return mutate_pair("kvc_encoder_decoder_cache_reorder", c, PAIR_REORDER, beam_idx, count, 0);
}

kvc_error* kvc_encoder_decoder_cache_batch_repeat_interleave(kvc_encoder_decoder_cache* c, int64_t repeats) {
  return mutate_pair("kvc_encoder_decoder_cache_batch_repeat_interleave", c, PAIR_REPEAT, NULL, 0, repeats);
}

kvc_error* kvc_encoder_decoder_cache_batch_select_indices(kvc_encoder_decoder_cache* c, const int64_t* indices,
                                                          size_t count) {
  return mutate_pair("kvc_encoder_decoder_cache_batch_select_indices", c, PAIR_SELECT, indices, count, 0);
}

kvc_error* kvc_encoder_decoder_cache_batch_split(const kvc_encoder_decoder_cache* c, int64_t full_batch_size,
                                                 int64_t split_size, kvc_encoder_decoder_cache** out, size_t capacity,
                                                 size_t* count) {
  static const char* FN = "kvc_encoder_decoder_cache_batch_split";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  KVCI_GUARD_SHARED(kvci_encdec_guard(c, 1), FN); /* the halves: the pair calls them */
  KVCI_GUARD_SHARED(kvci_encdec_guard(c, 2), FN);
  kvc_error* e = check_ed(FN, c);
  if (!e) e = require_dynamic_pair(FN, c);
  if (e) return e;
  if (!out || !count) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", FN, out ? "count" : "out");
  size_t n = capacity;
  kvc_cache** selfs = (kvc_cache**)calloc(n ? n : 1, sizeof(*selfs));
  kvc_cache** crosses = (kvc_cache**)calloc(n ? n : 1, sizeof(*crosses));
  kvc_encoder_decoder_cache** made = (kvc_encoder_decoder_cache**)calloc(n ? n : 1, sizeof(*made));
  size_t ns = 0, nc = 0;
  if (!selfs || !crosses || !made) e = kvci_err_oom();
  if (!e) e = rewrap(FN, "self-attention cache", kvc_cache_batch_split(c->self_attention, full_batch_size, split_size, selfs, capacity, &ns));
  if (!e) e = rewrap(FN, "cross-attention cache", kvc_cache_batch_split(c->cross_attention, full_batch_size, split_size, crosses, capacity, &nc));
  if (!e && ns != nc)
    e = kvci_err(KVC_ERROR_INVALID_STATE, "%s: the self-attention cache splits into %zu caches but the cross-attention "
                "cache into %zu", FN, ns, nc);
  size_t made_n = 0;
  for (size_t i = 0; !e && i < ns; i++) {
    e = kvci_encdec_wrap(selfs[i], crosses[i], c->is_updated, c->num_flags, &made[i]);
    if (!e) made_n++;
  }
  if (e) {
    for (size_t i = 0; i < made_n; i++) {
      free(made[i]->is_updated);
      free(made[i]);
    }
    for (size_t i = 0; i < ns; i++) kvc_cache_destroy(selfs ? selfs[i] : NULL);
    for (size_t i = 0; i < nc; i++) kvc_cache_destroy(crosses ? crosses[i] : NULL);
    free(selfs), free(crosses), free(made);
    return e;
  }
  for (size_t i = 0; i < ns; i++) out[i] = made[i];
  *count = ns;
  free(selfs), free(crosses), free(made);
  return NULL;
}

kvc_error* kvc_encoder_decoder_cache_from_batch_splits(const kvc_encoder_decoder_cache* const* splits, size_t count,
                                                       kvc_encoder_decoder_cache** out) {
  static const char* FN = "kvc_encoder_decoder_cache_from_batch_splits";
  if (!splits || count == 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s; pass at least one split", FN,
                   splits ? "count is 0" : "splits is NULL");
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  const kvc_cache** selfs = (const kvc_cache**)calloc(count, sizeof(*selfs));
  const kvc_cache** crosses = (const kvc_cache**)calloc(count, sizeof(*crosses));
  kvc_error* e = (!selfs || !crosses) ? kvci_err_oom() : NULL;
  for (size_t i = 0; !e && i < count; i++) {
    if (!splits[i]) e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: splits[%zu] is NULL", FN, i);
    if (!e) e = require_dynamic_pair(FN, splits[i]);
    if (!e) {
      selfs[i] = splits[i]->self_attention;
      crosses[i] = splits[i]->cross_attention;
    }
  }
  kvc_cache *s = NULL, *x = NULL;
  if (!e) e = rewrap(FN, "self-attention caches", kvc_cache_from_batch_splits(selfs, count, &s));
  if (!e) e = rewrap(FN, "cross-attention caches", kvc_cache_from_batch_splits(crosses, count, &x));
  if (!e) e = kvci_encdec_wrap(s, x, splits[0]->is_updated, splits[0]->num_flags, out);
  if (e) {
    kvc_cache_destroy(s);
    kvc_cache_destroy(x);
  }
  free(selfs);
  free(crosses);
  return e;
}

kvc_error* kvc_encoder_decoder_cache_reset(kvc_encoder_decoder_cache* c) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), "kvc_encoder_decoder_cache_reset");
  KVCI_GUARD_LEND(kvci_encdec_guard(c, 1), "kvc_encoder_decoder_cache_reset"); /* the halves: the pair calls them */
  KVCI_GUARD_LEND(kvci_encdec_guard(c, 2), "kvc_encoder_decoder_cache_reset");
  kvc_error* e = check_ed("kvc_encoder_decoder_cache_reset", c);
  if (e) return e;
  kvc_cache_reset(c->self_attention);
  kvc_cache_reset(c->cross_attention);
  if (c->num_flags) memset(c->is_updated, 0, c->num_flags);
  return NULL;
}

kvc_error* kvc_encoder_decoder_cache_clone(const kvc_encoder_decoder_cache* c, kvc_encoder_decoder_cache** out) {
  static const char* FN = "kvc_encoder_decoder_cache_clone";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  KVCI_GUARD_SHARED(kvci_encdec_guard(c, 1), FN); /* the halves: the pair calls them */
  KVCI_GUARD_SHARED(kvci_encdec_guard(c, 2), FN);
  kvc_error* e = check_ed_query(FN, c, out);
  if (e) return e;
  kvc_cache *s = NULL, *x = NULL;
  e = kvc_cache_clone(c->self_attention, &s);
  if (!e) e = kvc_cache_clone(c->cross_attention, &x);
  if (!e) e = kvci_encdec_wrap(s, x, c->is_updated, c->num_flags, out);
  if (e) {
    kvc_cache_destroy(s);
    kvc_cache_destroy(x);
  }
  return e;
}
