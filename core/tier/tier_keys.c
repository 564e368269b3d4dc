/*
 * core/tier/tier_keys.c: blocks by key (kvcache/tier.h, 'Key-level
 * access'): exists, get and put without a pool.
 *
 * The values are the pool's own (frame.c, frame_mac.c): a put frames and
 * seals the caller's payload exactly as a pool's store does, a get opens a
 * value exactly as a pool's fetch does, so an engine and a pool of the same
 * model share a tier. Each call is one call of the store (one pipeline per
 * Redis node), so it keeps the store's deadline; everything the store does
 * wrong is a miss, counted in the tier's stats, never an error.
 */
#include <stdlib.h>
#include <string.h>

#include "tier_internal.h"

/* The checks every call shares: an error naming the argument, or NULL. */
static kvc_error* check_keys(const char* fn, const kvc_tier* tier, const kvc_tier_key* keys, size_t count,
                             const void* out, const char* out_name) {
  if (!tier) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tier is NULL", fn);
  if (!count) return NULL;
  if (!keys) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: keys is NULL but count is %zu", fn, count);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but count is %zu", fn, out_name, count);
  for (size_t i = 0; i < count; i++)
    if (keys[i].reserved)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: keys[%zu].reserved is %u; it is 0", fn, i, keys[i].reserved);
  return NULL;
}

static kvc_error* check_block(const char* fn, size_t count, size_t payload_size, uint32_t num_layers,
                              const void* const* payloads) {
  if (!payload_size || payload_size > (size_t)KVC_TIER_PAYLOAD_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: payload_size is %zu; it is 1 to KVC_TIER_PAYLOAD_MAX (%zu) "
                    "bytes", fn, payload_size, (size_t)KVC_TIER_PAYLOAD_MAX);
  if (!num_layers)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_layers is 0; it is the layer count of the block's group "
                    "(at least 1)", fn);
  for (size_t i = 0; i < count; i++)
    if (!payloads[i]) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: payloads[%zu] is NULL", fn, i);
  return NULL;
}

/*
 * A tier keeps the frames of its last call by key for the next (fresh memory costs a page fault per page: a get
 * of 32 MiB took twice as long as match_prefix without it), up to this size; a larger call's are freed after it.
 */
#define STAGE_KEEP_BYTES ((size_t)64 << 20)

/* One call's values: `count` frames of `frame` bytes (in the tier's kept buffer), their pointers and sizes. */
typedef struct staging {
  kvc_tier* tier;
  void** values;
  size_t* sizes;
} staging;

static void stage_free(staging* s) {
  kvc_tier* t = s->tier;
  if (t->stage_bytes > STAGE_KEEP_BYTES) {
    free(t->stage);
    t->stage = NULL;
    t->stage_bytes = 0;
  }
  free(s->values);
  free(s->sizes);
}

static kvc_error* stage_alloc(const char* fn, kvc_tier* t, staging* s, size_t count, size_t frame) {
  s->tier = t;
  size_t bytes = count <= SIZE_MAX / frame ? count * frame : SIZE_MAX;
  if (bytes > t->stage_bytes) {
    free(t->stage);
    t->stage = bytes == SIZE_MAX ? NULL : malloc(bytes);
    t->stage_bytes = t->stage ? bytes : 0;
  }
  s->values = malloc(count * sizeof *s->values);
  s->sizes = malloc(count * sizeof *s->sizes);
  if (!t->stage || !s->values || !s->sizes) {
    stage_free(s);
    return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: %zu values of %zu bytes could not be staged", fn, count, frame);
  }
  for (size_t i = 0; i < count; i++) s->values[i] = t->stage + i * frame;
  return NULL;
}

kvc_error* kvc_tier_exists(kvc_tier* tier, const kvc_tier_key* keys, size_t count, uint8_t* found,
                           size_t* found_count) {
  static const char* FN = "kvc_tier_exists";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(tier), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_pool_guard(tier ? tier->owner : NULL), FN);
  kvc_error* e = check_keys(FN, tier, keys, count, found, "found");
  if (e) return e;
  if (!tier->ops.exists_many)
    return kvci_err(KVC_ERROR_UNSUPPORTED, "%s: tier '%s' has no exists_many (a store brought through kvc_tier_ops "
                    "of struct_size 32, or with exists_many NULL); use kvc_tier_get_blocks", FN, tier->name);
  kvci_tier_lock(tier);
  size_t n = kvci_tier_exists_many(tier, keys, found, count);
  kvci_tier_unlock(tier);
  if (found_count) *found_count = n;
  return NULL;
}

kvc_error* kvc_tier_get_blocks(kvc_tier* tier, const kvc_tier_key* keys, size_t count, size_t payload_size,
                               uint32_t num_layers, void* const* payloads, uint8_t* found, size_t* found_count) {
  static const char* FN = "kvc_tier_get_blocks";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(tier), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_pool_guard(tier ? tier->owner : NULL), FN);
  kvc_error* e = check_keys(FN, tier, keys, count, found, "found");
  if (!e && count && !payloads) e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: payloads is NULL", FN);
  if (!e && count) e = check_block(FN, count, payload_size, num_layers, (const void* const*)payloads);
  if (e || !count) {
    if (!e && found_count) *found_count = 0;
    return e;
  }
  size_t frame = kvci_tier_frame_size_max(payload_size); /* a value of either mode fits: the wrong one is refused */
  staging s;
  if ((e = stage_alloc(FN, tier, &s, count, frame))) return e;
  kvci_tier_lock(tier);
  kvci_tier_get_all(tier, keys, s.values, frame, s.sizes, count);
  kvci_tier_unlock(tier);
  size_t n = 0, corrupt = 0;
  for (size_t i = 0; i < count; i++) {
    const uint8_t* p =
        s.sizes[i] ? kvci_tier_value_open(tier, s.values[i], s.sizes[i], &keys[i], payload_size, num_layers) : NULL;
    corrupt += s.sizes[i] && !p;
    found[i] = p != NULL;
    if (!p) continue;
    memcpy(payloads[i], p, payload_size);
    n++;
  }
  kvci_tier_count(tier, (kvci_tier_counts){.hits = n, .corrupt = corrupt});
  stage_free(&s);
  if (found_count) *found_count = n;
  return NULL;
}

kvc_error* kvc_tier_put_blocks(kvc_tier* tier, const kvc_tier_key* keys, size_t count, size_t payload_size,
                               uint32_t num_layers, const void* const* payloads, size_t* stored) {
  static const char* FN = "kvc_tier_put_blocks";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(tier), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_pool_guard(tier ? tier->owner : NULL), FN);
  kvc_error* e = check_keys(FN, tier, keys, count, payloads, "payloads");
  if (!e && count) e = check_block(FN, count, payload_size, num_layers, payloads);
  if (e || !count) {
    if (!e && stored) *stored = 0;
    return e;
  }
  size_t frame = kvci_tier_value_size(tier, payload_size);
  staging s;
  if ((e = stage_alloc(FN, tier, &s, count, frame))) return e;
  for (size_t i = 0; i < count; i++) {
    uint8_t* v = s.values[i];
    memcpy(v + KVCI_TIER_HEADER_SIZE, payloads[i], payload_size);
    kvci_tier_value_seal(tier, v, &keys[i], payload_size, num_layers);
    s.sizes[i] = frame;
  }
  kvci_tier_lock(tier);
  size_t n = kvci_tier_put_many(tier, keys, (const void* const*)s.values, s.sizes, count);
  kvci_tier_unlock(tier);
  stage_free(&s);
  if (stored) *stored = n;
  return NULL;
}
