/*
 * core/tier/tier_internal.h: a tier as the pool sees it (kvcache/tier.h is
 * the contract, docs/tiers.md the bytes).
 *
 * A kvc_tier is a program's kvc_tier_ops (or the built-in disk tier's) with
 * the counters of kvc_tier_stats around them: the wrapper counts what the
 * store reports (puts, bytes), the framing (frame.c) what the pool finds
 * when it verifies a value (hits, corrupt).
 */
#ifndef KVC_CORE_TIER_INTERNAL_H
#define KVC_CORE_TIER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "internal.h"
#include "kvcache/tier.h"
#include "pool/hmac_sha256.h"

/* An authenticated tier's key (frame_mac.c), prepared for HMAC-SHA256; keyed 0: frames carry a CRC-32C only. */
typedef struct kvci_tier_auth {
  int keyed;
  kvci_hmac_sha256_key key;
} kvci_tier_auth;

/*
 * A store that reads a value straight into the caller's memory, with no staging copy (the disk tier), in two
 * steps so that the caller takes that memory between them without the tier's lock (taking a pool block may evict
 * one, which may store it in this very tier): find() looks key's value up (1: found, its size in *size and a
 * handle; 0: a miss); then either read() reads it into `parts` in order (lengths summing to its size), a chunk
 * small enough to stay in a core's L2 at a time, calling landed(arg, chunk, bytes) right after each chunk lands so
 * the caller checks it while it is hot (0, or -1: the read failed or came up short), or drop() lets it go. Both
 * end the handle. The bytes are unverified until the caller's check says otherwise.
 */
typedef void (*kvci_tier_landed_fn)(void* arg, const void* bytes, size_t len);
typedef struct kvci_tier_direct {
  int (*find)(void* ctx, const kvc_tier_key* key, size_t* size, intptr_t* handle);
  int (*read)(void* ctx, intptr_t handle, const struct iovec* parts, size_t count, kvci_tier_landed_fn landed,
              void* arg);
  void (*drop)(void* ctx, intptr_t handle);
} kvci_tier_direct;

struct kvc_tier {
  kvc_tier_ops ops;
  void* ctx;
  const kvci_tier_direct* direct; /* NULL: values come through get_many only */
  char* name;
  const kvc_pool* owner; /* the pool it was given to (kvc_pool_add_tier), else NULL */
  kvc_tier_stats stats;
  kvci_tier_auth auth; /* wiped when the tier is destroyed */
  kvci_guard guard; /* kvc_tier_stats_get and kvc_pool_add_tier; a given tier's stats are the pool's (guard.h) */
  /* tier_keys.c: the frames of the last call by key, kept for the next (fresh memory costs a fault per page) */
  uint8_t* stage;
  size_t stage_bytes;
  /*
   * A pool's tier worker (core/pool/tier_worker.c) calls the store from its own thread. `lock` is held around
   * every call of the store (kvci_tier_lock: the pool's lookups, the key-level calls and the worker take it; a
   * store's connection is one caller's at a time); `stats_lock` around every change to `stats` and its copy in
   * kvc_tier_stats_get, never during a call of the store, so counting never waits for a slow tier.
   * Uncontended without a worker.
   */
  pthread_mutex_t lock;
  pthread_mutex_t stats_lock;
};

static inline void kvci_tier_lock(kvc_tier* t) { pthread_mutex_lock(&t->lock); }
static inline void kvci_tier_unlock(kvc_tier* t) { pthread_mutex_unlock(&t->lock); }

/* tier.c: the store's calls with their counters, under the tier's lock (the caller's). A store's answer is
   clamped to `count`. */
size_t kvci_tier_put_many(kvc_tier* t, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                          size_t count);
/* Counts the pool and its worker add to a tier's (what the store's calls count themselves is above). */
typedef struct kvci_tier_counts {
  uint64_t hits, corrupt; /* the caller verified what a lookup found */
  uint64_t put_failures;  /* stores skipped before the store was called (no staging memory) */
  uint64_t queued, dropped; /* blocks handed to a pool's tier worker; of those, never stored */
} kvci_tier_counts;
void kvci_tier_count(kvc_tier* t, kvci_tier_counts c);
/* t->direct's steps (t->direct not NULL) with their counters: a find is a get, a read that landed its bytes. Each
   under the caller's lock. */
int kvci_tier_find(kvc_tier* t, const kvc_tier_key* key, size_t* size, intptr_t* handle);
int kvci_tier_read_found(kvc_tier* t, intptr_t handle, size_t size, const struct iovec* parts, size_t count,
                         kvci_tier_landed_fn landed, void* arg);
/* Looks up `count` keys; returns the leading run found (sizes[i] > 0); the caller verifies and counts hits. */
size_t kvci_tier_get_many(kvc_tier* t, const kvc_tier_key* keys, void* const* values, size_t capacity,
                          size_t* sizes, size_t count);

/*
 * Looks up every one of `count` keys (blocks by key, tier_keys.c): sizes[i] is each value's size, 0 for a miss,
 * whatever run the store reports; a store that stops at its first miss leaves the rest misses. Counts gets and
 * bytes; the caller verifies and counts hits.
 */
void kvci_tier_get_all(kvc_tier* t, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                       size_t count);
/* The store's exists_many (not NULL): found[i] 0 or 1; returns how many were found. */
size_t kvci_tier_exists_many(kvc_tier* t, const kvc_tier_key* keys, uint8_t* found, size_t count);

/* frame.c: the value of a block (docs/tiers.md). */
#define KVCI_TIER_FRAME_MAGIC "KVTB" /* the first four bytes of every value */
#define KVCI_TIER_FRAME_VERSION 1u
#define KVCI_TIER_HEADER_SIZE 96u /* magic 4, version 4, key 72, payload length 8, layers 4, reserved 4 */
#define KVCI_TIER_TRAILER_SIZE 4u /* CRC-32C of header and payload */
static inline size_t kvci_tier_frame_size(size_t payload) {
  return KVCI_TIER_HEADER_SIZE + payload + KVCI_TIER_TRAILER_SIZE;
}
/* Writes the header at out[0..HEADER_SIZE) for a payload already at out + HEADER_SIZE, then the CRC after it. */
void kvci_tier_frame_seal(uint8_t* out, const kvc_tier_key* key, size_t payload, uint32_t num_layers);
/*
 * Whether `value` (`size` bytes) is the frame of `key` with a payload of `payload` bytes over `num_layers`
 * layers and an intact CRC. Returns the payload's start, or NULL.
 */
const uint8_t* kvci_tier_frame_open(const uint8_t* value, size_t size, const kvc_tier_key* key, size_t payload,
                                    uint32_t num_layers);

/* Writes the 96-byte header of a frame of `version` (docs/tiers.md) for (key, payload, num_layers). */
void kvci_tier_frame_header(uint8_t h[KVCI_TIER_HEADER_SIZE], uint32_t version, const kvc_tier_key* key,
                            size_t payload, uint32_t num_layers);

/*
 * frame_mac.c: the value of a block in a given tier: a keyless tier's frames are the ones above (version 1,
 * CRC-32C); an authenticated tier's are version 2, with an HMAC-SHA256 of header and payload under the tier's
 * key in place of the CRC (docs/tiers.md, 'Authenticated tiers'). Each mode refuses the other's frames.
 */
#define KVCI_TIER_FRAME_VERSION_MAC 2u
#define KVCI_TIER_MAC_SIZE 32u
/* The largest value of a payload in any tier: what a buffer that receives a value of either mode holds. */
static inline size_t kvci_tier_frame_size_max(size_t payload) {
  return KVCI_TIER_HEADER_SIZE + payload + KVCI_TIER_MAC_SIZE;
}
/* Checks an authentication key given as `arg` (auth_key, with `arg`_len) to `fn`: NULL, or an error naming it. */
kvc_error* kvci_tier_auth_check(const char* fn, const char* arg, const uint8_t* key, size_t len);
/* Gives `t` the key (checked before; len 0: no key). */
void kvci_tier_auth_set(kvc_tier* t, const uint8_t* key, size_t len);
/* The size of the value of a `payload`-byte block in tier `t`. */
size_t kvci_tier_value_size(const kvc_tier* t, size_t payload);
/* Seals a value for `t` as kvci_tier_frame_seal does (payload already at out + HEADER_SIZE). */
void kvci_tier_value_seal(const kvc_tier* t, uint8_t* out, const kvc_tier_key* key, size_t payload,
                          uint32_t num_layers);
/* kvci_tier_frame_open for a value found in `t`: the payload's start, or NULL (a miss counted corrupt). */
const uint8_t* kvci_tier_value_open(const kvc_tier* t, const uint8_t* value, size_t size, const kvc_tier_key* key,
                                    size_t payload, uint32_t num_layers);
/*
 * A value's check computed as its bytes land (a tier that reads straight into a block, kvci_tier_direct): its
 * CRC-32C, or in an authenticated tier its MAC, over the header and payload, fed in order, in pieces of any size.
 */
typedef struct kvci_tier_check {
  const kvc_tier* tier;
  size_t left; /* header and payload bytes not fed yet: the trailer is not checked over */
  uint32_t crc;
  kvci_hmac_sha256_ctx mac;
} kvci_tier_check;
void kvci_tier_check_begin(kvci_tier_check* c, const kvc_tier* t, size_t payload);
void kvci_tier_check_update(kvci_tier_check* c, const void* bytes, size_t len);
/* Whether the value fed is key's frame in c's tier: `header` as it must be, `trailer` the check of all bytes fed. */
int kvci_tier_check_end(kvci_tier_check* c, const uint8_t* header, const uint8_t* trailer, const kvc_tier_key* key,
                        size_t payload, uint32_t num_layers);

/* Whether a value sealed for `a` is the value for `b` too (both keyless, or the same key). */
int kvci_tier_same_seal(const kvc_tier* a, const kvc_tier* b);

/* The key's bytes as docs/tiers.md writes them (72 bytes, little-endian). */
#define KVCI_TIER_KEY_SIZE 72u
void kvci_tier_key_encode(const kvc_tier_key* key, uint8_t out[KVCI_TIER_KEY_SIZE]);

#endif /* KVC_CORE_TIER_INTERNAL_H */
