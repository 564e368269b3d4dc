/*
 * core/query_offset.c: where the queries of the next forward start
 * (transformers' Cache.get_query_offset, 5.14) and what MtpCache (5.14) and
 * DFlashCache (5.15) add to it and to the mask sizes. They are DynamicCaches
 * whose model runs its queries ahead of (MTP) or over more tokens than (DFlash)
 * the keys the cache holds; here they are a rule of any cache
 * (kvc_cache_options.query_offset_rule).
 */
#include <inttypes.h>

#include "internal.h"

kvc_error* kvci_query_offset_check(const char* fn, kvc_query_offset_rule rule) {
  if (rule == KVC_QUERY_OFFSET_PLAIN || rule == KVC_QUERY_OFFSET_MTP || rule == KVC_QUERY_OFFSET_DFLASH) return NULL;
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                  "%s: options->query_offset_rule is %d; valid rules are 0 (plain), 1 (MTP), 2 (DFlash)", fn,
                  (int)rule);
}

/* MtpCache: queries of depth k (layer k) run k + 1 tokens ahead. DFlashCache: the accepted tokens come on top. */
static int64_t added_offset(const kvc_cache* c, uint32_t layer) {
  if (c->query_offset_rule == KVC_QUERY_OFFSET_MTP) return (int64_t)layer + 1;
  if (c->query_offset_rule == KVC_QUERY_OFFSET_DFLASH) return c->accepted_tokens;
  return 0;
}

void kvci_query_offset_mask(const kvc_cache* c, uint32_t layer, int64_t* kv_length, int64_t* kv_offset) {
  if (c->query_offset_rule == KVC_QUERY_OFFSET_MTP) *kv_offset += added_offset(c, layer);
  if (c->query_offset_rule == KVC_QUERY_OFFSET_DFLASH) *kv_length += added_offset(c, layer);
}

kvc_error* kvc_cache_query_offset(const kvc_cache* c, uint32_t layer, int64_t* out) {
  KVCI_GUARD_SHARED(kvci_guard_of(c), "kvc_cache_query_offset");
  int64_t seq = 0;
  kvc_error* e = kvci_cache_check_query("kvc_cache_query_offset", c, out);
  if (!e) e = kvc_cache_seq_length(c, layer, &seq); /* its rules (and messages) for linear layers */
  if (e) return e;
  *out = seq + added_offset(c, layer);
  return NULL;
}

kvc_error* kvc_cache_set_previous_accepted_tokens(kvc_cache* c, int64_t tokens) {
  static const char* FN = "kvc_cache_set_previous_accepted_tokens";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  if (c->query_offset_rule != KVC_QUERY_OFFSET_DFLASH)
    return kvci_err(KVC_ERROR_UNSUPPORTED,
                    "%s: the cache's query_offset_rule is %d; only a DFlash cache (KVC_QUERY_OFFSET_DFLASH) counts "
                    "accepted tokens",
                    FN, (int)c->query_offset_rule);
  if (tokens < 0 || tokens > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tokens is %" PRId64 "; it must be in [0, 2^31)", FN, tokens);
  c->accepted_tokens = tokens;
  return NULL;
}
