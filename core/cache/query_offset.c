/*
 * core/cache/query_offset.c: where the queries of the next forward start
 * (transformers' Cache.get_query_offset, 5.14) and what MtpCache (5.14) and
 * DFlashCache (5.15) add to it and to the mask sizes. They are DynamicCaches
 * whose model runs its queries ahead of (MTP) or over more tokens than (DFlash)
 * the keys the cache holds; here they are a rule of any cache
 * (kvc_cache_options.query_offset_rule).
 */
#include <inttypes.h>

#include "cache_ops.h"

kvc_error* kvci_query_offset_check(const char* fn, kvc_query_offset_rule rule) {
  if (rule == KVC_QUERY_OFFSET_PLAIN || rule == KVC_QUERY_OFFSET_MTP || rule == KVC_QUERY_OFFSET_DFLASH) return NULL;
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                  "%s: options->query_offset_rule is %d; valid rules are 0 (plain), 1 (MTP), 2 (DFlash)", fn,
                  (int)rule);
}

/* MtpCache: queries of depth k (layer k) run k + 1 tokens ahead. DFlashCache: the accepted tokens come on top. */
int64_t kvci_query_offset_added(const kvc_cache* c, uint32_t layer) {
  if (c->query_offset_rule == KVC_QUERY_OFFSET_MTP) return (int64_t)layer + 1;
  if (c->query_offset_rule == KVC_QUERY_OFFSET_DFLASH) return c->accepted_tokens;
  return 0;
}

void kvci_query_offset_mask(const kvc_cache* c, uint32_t layer, int64_t* kv_length, int64_t* kv_offset) {
  if (c->query_offset_rule == KVC_QUERY_OFFSET_MTP) *kv_offset += kvci_query_offset_added(c, layer);
  if (c->query_offset_rule == KVC_QUERY_OFFSET_DFLASH) *kv_length += kvci_query_offset_added(c, layer);
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
