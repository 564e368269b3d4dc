/*
 * observe.h: compares everything a caller can observe of a cache with the
 * reference model, and fails (report.h) at the first difference.
 */
#ifndef KVC_FUZZ_OBSERVE_H
#define KVC_FUZZ_OBSERVE_H

#include "kvcache.h"
#include "reference_model.h"

/* A key/value pair of views against the tokens `g` (head dims Dk, Dv). */
void check_views(const kvc_kv* kv, const ref_grid* g, int64_t Dk, int64_t Dv, kvc_dtype dt, const char* what);
/* Every layer's info and stored views, lengths, mask sizes, usable lengths
 * (also beyond the layers), batch size and memory of one cache. */
void check_cache(const kvc_cache* c, const ref_cache* r, const char* name);
/* Both caches of a pair and its is_updated flags. */
void check_ed(const kvc_encoder_decoder_cache* ed, const ref_ed* r, const char* name);

#endif /* KVC_FUZZ_OBSERVE_H */
