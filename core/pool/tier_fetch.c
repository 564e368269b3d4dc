/*
 * core/pool/tier_fetch.c: match_prefix's continuation in the tiers.
 *
 * Memory matched `matched` tokens; for every group the chain is computed
 * to the limit and the blocks memory lacks are asked of the tiers, a run of
 * consecutive missing blocks at a time (one pipelined get for a shared
 * tier), nearest tier first, the farther ones for what the nearer lacked.
 * Each value found is verified (its frame: key, size, layers, CRC-32C or,
 * in an authenticated tier, HMAC-SHA256); a
 * verified one is copied into a block taken as reserve takes them (free
 * ones, then evicting the least recently used) and cached there (a STORED
 * event: it is in memory now), so that the ordinary match then finds it,
 * with the rule "a whole number of blocks of every group" unchanged. A CPU
 * pool reads from a tier that can (the disk tier) straight into the block
 * instead, checking each chunk as it lands (read_into_block). The
 * group's blocks already in memory are held meanwhile, so taking a block
 * never evicts a part of the chain. A group stops at its first miss, a
 * value that does not verify, or when no block can be taken: never an
 * error.
 *
 * A recurrent group needs one checkpoint, at the end of the match, not a
 * run: its candidates are the boundaries past memory's farthest checkpoint
 * where a match can end (multiples of every group's block size, within
 * what the full groups reached); the tiers are asked which they hold (one
 * exists_many per tier) and the farthest is fetched, one state read.
 */
#include <stdlib.h>

#include "pool_internal.h"
#include "tier/tier_internal.h"

typedef struct fetch_buf {
  size_t payload, frame, cap; /* cap: blocks per batch */
  uint8_t* frames;
  kvc_tier_key* keys;
  void** values;
  const uint8_t** payloads;
  size_t* sizes;
  uint32_t* blocks;
  struct iovec* parts; /* a CPU pool's values land in their blocks: header, the block's parts, trailer */
} fetch_buf;

static void buf_free(kvc_pool* p, fetch_buf* f) {
  kvci_pool_stage_free(p, f->frames, f->cap * f->frame);
  free(f->keys); /* the start of the one block that holds every per-batch array (buf_open) */
}

static int buf_open(kvc_pool* p, uint32_t group, fetch_buf* f, size_t most) {
  memset(f, 0, sizeof *f);
  f->payload = kvci_pool_block_payload(p, group);
  f->frame = kvci_tier_frame_size_max(f->payload); /* a value of either mode fits: the wrong one is refused */
  f->cap = kvci_pool_stage_batch(f->frame);
  if (f->cap > most) f->cap = most;
  f->frames = kvci_pool_stage_alloc(p, f->cap * f->frame);
  /* One block for the per-batch arrays, widest alignment first: keys (a multiple of 8 bytes), then the
     pointers and sizes, the iovecs, the 32-bit block ids last. */
  _Static_assert(sizeof(kvc_tier_key) % sizeof(void*) == 0, "the arrays after the keys stay aligned");
  size_t n = f->cap, nparts = 2 + 2 * (size_t)p->groups[group].num_layers;
  uint8_t* block = malloc(n * (sizeof(*f->keys) + sizeof(*f->values) + sizeof(*f->payloads) + sizeof(*f->sizes) +
                               sizeof(*f->blocks)) +
                          nparts * sizeof(*f->parts));
  if (block) {
    f->keys = (kvc_tier_key*)block;
    f->values = (void**)(f->keys + n);
    f->payloads = (const uint8_t**)(f->values + n);
    f->sizes = (size_t*)(f->payloads + n);
    f->parts = (struct iovec*)(f->sizes + n);
    f->blocks = (uint32_t*)(f->parts + nparts);
  }
  if (f->frames && block) {
    for (size_t j = 0; j < f->cap; j++) f->values[j] = f->frames + j * f->frame;
    return 0;
  }
  buf_free(p, f);
  return -1;
}

size_t kvci_pool_tiers_lookup(kvc_tier* const* tiers, uint32_t num_tiers, uint32_t num_layers,
                              const kvc_tier_key* keys, void* const* values, size_t frame, size_t* sizes,
                              size_t payload, const uint8_t** payloads, size_t count) {
  size_t done = 0;
  for (uint32_t t = 0; t < num_tiers && done < count; t++) {
    kvc_tier* tier = tiers[t];
    kvci_tier_lock(tier); /* a pool's tier worker may be inside this tier's store (tier_worker.c) */
    size_t got = kvci_tier_get_many(tier, keys + done, values + done, frame, sizes + done, count - done);
    kvci_tier_unlock(tier);
    size_t ok = 0;
    while (ok < got && (payloads[done + ok] = kvci_tier_value_open(tier, values[done + ok], sizes[done + ok],
                                                                    &keys[done + ok], payload, num_layers)))
      ok++;
    kvci_tier_count(tier, (kvci_tier_counts){.hits = ok, .corrupt = ok < got});
    done += ok;
  }
  return done;
}

/*
 * Looks up keys [from, from + count) of the batch in `tiers`, through the staging frames; the leading run found
 * and verified is copied into blocks taken for it (f->blocks). Returns that run's length.
 */
static size_t fill_staged(kvc_pool* p, uint32_t group, fetch_buf* f, kvc_tier* const* tiers, uint32_t num_tiers,
                          size_t from, size_t count) {
  size_t found = kvci_pool_tiers_lookup(tiers, num_tiers, p->groups[group].num_layers, f->keys + from,
                                        f->values + from, f->frame, f->sizes + from, f->payload, f->payloads + from,
                                        count);
  uint32_t* blocks = f->blocks + from;
  for (size_t j = 0; j < found; j++) blocks[j] = kvci_pool_block_take(p, group);
  if (found && kvci_pool_stage_in(p, group, blocks, found, f->payloads + from)) {
    for (size_t j = 0; j < found; j++) kvci_pool_block_release(&p->groups[group], blocks[j]);
    return 0;
  }
  return found;
}

static void land_check(void* arg, const void* bytes, size_t len) { kvci_tier_check_update(arg, bytes, len); }

/*
 * Key j of the batch from `tier` straight into a block of a CPU pool (tier_internal.h's direct reads): 1 when
 * f->blocks[j] holds it, verified; else 0, with *corrupt set when a value was found but did not verify. The block
 * is taken once the tier has found a value of the right size, outside the tier's lock (taking one may evict
 * another, which may be stored in this tier); the header and trailer land in small buffers, the payload in the
 * block, checked chunk by chunk as it lands. A value that then fails its check gives its block back to the free
 * list unpublished (its bytes are no block's contents), though taking it may have evicted the LRU's oldest block.
 */
static int read_into_block(kvc_pool* p, uint32_t group, fetch_buf* f, kvc_tier* tier, size_t j, int* corrupt) {
  const kvc_tier_key* key = &f->keys[j];
  size_t want = kvci_tier_value_size(tier, f->payload), size = 0;
  intptr_t handle;
  kvci_tier_lock(tier); /* a pool's tier worker may be inside this tier's store (tier_worker.c) */
  int found = kvci_tier_find(tier, key, &size, &handle);
  if (found && size != want) tier->direct->drop(tier->ctx, handle);
  kvci_tier_unlock(tier);
  if (!found || size != want) {
    *corrupt |= found; /* what a get would have found and refused */
    return 0;
  }
  uint8_t header[KVCI_TIER_HEADER_SIZE], trailer[KVCI_TIER_MAC_SIZE];
  uint32_t block = kvci_pool_block_take(p, group);
  struct iovec* parts = f->parts;
  size_t n = 0;
  parts[n++] = (struct iovec){header, KVCI_TIER_HEADER_SIZE};
  n += kvci_pool_block_parts(p, group, block, parts + n);
  parts[n++] = (struct iovec){trailer, want - KVCI_TIER_HEADER_SIZE - f->payload};
  kvci_tier_check check;
  kvci_tier_check_begin(&check, tier, f->payload);
  kvci_tier_lock(tier);
  int ok = !kvci_tier_read_found(tier, handle, size, parts, n, land_check, &check);
  kvci_tier_unlock(tier);
  ok = ok && kvci_tier_check_end(&check, header, trailer, key, f->payload, p->groups[group].num_layers);
  if (!ok) {
    kvci_pool_block_release(&p->groups[group], block);
    *corrupt = 1;
    return 0;
  }
  f->blocks[j] = block;
  return 1;
}

/*
 * Looks up `count` (<= cap) blocks in the tiers, nearest first, the farther ones for what the nearer lacked, and
 * fills blocks taken for the leading run found and verified (f->blocks); returns its length. A CPU pool's values
 * land in their blocks where a tier can read them there (the disk tier); others pass through the staging frames.
 */
static size_t fill_blocks(kvc_pool* p, uint32_t group, fetch_buf* f, size_t count) {
  if (p->device.device_type != KVC_DEVICE_CPU) return fill_staged(p, group, f, p->tiers, p->num_tiers, 0, count);
  size_t done = 0;
  for (uint32_t t = 0; t < p->num_tiers && done < count; t++) {
    kvc_tier* tier = p->tiers[t];
    size_t before = done;
    if (!tier->direct) {
      done += fill_staged(p, group, f, &p->tiers[t], 1, done, count - done);
      continue;
    }
    int corrupt = 0;
    while (done < count && read_into_block(p, group, f, tier, done, &corrupt)) done++;
    kvci_tier_count(tier, (kvci_tier_counts){.hits = done - before, .corrupt = (uint64_t)corrupt});
  }
  return done;
}

/* Fetches the run hashes[from, to) of a group into fresh cached blocks; returns how many leading ones it did. */
static uint64_t fetch_run(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, uint32_t gi, fetch_buf* f,
                          uint64_t from, uint64_t to) {
  kvci_pool_group* g = &p->groups[gi];
  kvci_pool_seq_group* sg = &s->groups[gi];
  uint64_t at = from;
  while (at < to) {
    size_t n = (size_t)(to - at < f->cap ? to - at : f->cap);
    if (n > kvci_pool_available(g)) n = (size_t)kvci_pool_available(g);
    if (!n) break;
    for (size_t j = 0; j < n; j++) kvci_pool_tier_key(p, gi, sg->hashes[at + j], &f->keys[j]);
    size_t found = fill_blocks(p, gi, f, n);
    for (size_t j = 0; j < found; j++) {
      uint64_t i = at + j;
      kvci_pool_block_cache(p, gi, f->blocks[j], s, tokens, i);
      kvci_pool_block_release(g, f->blocks[j]); /* cached, unreferenced: the match takes it from the LRU */
    }
    at += found;
    if (found < n) break;
  }
  return at - from;
}

/* A group's part: returns the blocks it added; *reach is the first block index neither in memory nor fetched. */
static uint64_t fetch_group(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, uint32_t gi, uint64_t limit,
                            uint64_t* reach) {
  kvci_pool_group* g = &p->groups[gi];
  kvci_pool_seq_group* sg = &s->groups[gi];
  uint64_t n = limit / g->block_size, added = 0;
  *reach = 0;
  if (!n) return 0;
  kvci_pool_chain(s, tokens, g->block_size, 0, n, sg->hashes);
  uint32_t* held = calloc((size_t)n, sizeof(uint32_t));
  if (!held) return 0;
  for (uint64_t i = 0; i < n; i++)
    if ((held[i] = kvci_pool_map_find(g, sg->hashes[i]))) kvci_pool_block_ref(g, held[i]);
  fetch_buf f;
  uint64_t i = 0;
  while (i < n && held[i]) i++;
  if (i < n && !buf_open(p, gi, &f, (size_t)(n - i))) {
    while (i < n) {
      uint64_t end = i;
      while (end < n && !held[end]) end++;
      uint64_t got = fetch_run(p, s, tokens, gi, &f, i, end);
      added += got;
      i += got;
      if (i < end) break;
      while (i < n && held[i]) i++;
    }
    buf_free(p, &f);
  }
  *reach = i;
  for (uint64_t k = n; k-- > 0;)
    if (held[k]) kvci_pool_block_release(g, held[k]);
  free(held);
  return added;
}

/* Fetches the checkpoint of boundary `index` of a recurrent group into a cached slot; 1 when it did. */
static int fetch_state(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, uint32_t gi, uint64_t index) {
  kvci_pool_group* g = &p->groups[gi];
  const kvci_pool_seq_group* sg = &s->groups[gi];
  fetch_buf f;
  if (buf_open(p, gi, &f, 1)) return 0;
  kvci_pool_tier_key(p, gi, sg->hashes[index], &f.keys[0]);
  int got = fill_blocks(p, gi, &f, 1) == 1;
  if (got) {
    kvci_pool_block_cache(p, gi, f.blocks[0], s, tokens, index);
    kvci_pool_block_release(g, f.blocks[0]); /* cached: the match restores it from the LRU */
  }
  buf_free(p, &f);
  return got;
}

/* The farthest of `count` candidate boundaries (`at`, ascending) some tier says it holds; count when none does. A
   tier without exists_many cannot tell: its answer is the farthest candidate, which its get then settles. */
static size_t farthest_held(kvc_pool* p, uint32_t gi, const kvc_pool_sequence* s, const uint64_t* at, size_t count) {
  kvc_tier_key* keys = malloc(count * sizeof(*keys));
  uint8_t* found = malloc(count);
  size_t best = count;
  for (size_t j = 0; keys && found && j < count; j++) kvci_pool_tier_key(p, gi, s->groups[gi].hashes[at[j]], &keys[j]);
  for (uint32_t t = 0; keys && found && t < p->num_tiers; t++) {
    kvc_tier* tier = p->tiers[t];
    if (!tier->ops.exists_many) {
      best = count - 1;
      break;
    }
    kvci_tier_exists_many(tier, keys, found, count);
    for (size_t j = count; j-- > 0 && (best == count || j > best);)
      if (found[j]) {
        best = j;
        break;
      }
    if (best == count - 1) break;
  }
  free(keys);
  free(found);
  return best;
}

/* A recurrent group's part (see the top): 1 when a checkpoint was fetched. */
static int fetch_checkpoint(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, uint32_t gi, uint64_t limit) {
  kvci_pool_group* g = &p->groups[gi];
  kvci_pool_seq_group* sg = &s->groups[gi];
  uint64_t n = limit / g->block_size, step = kvci_pool_match_step(p, limit), first = 0;
  /* A slot for the checkpoint and, unless the sequence has one, one for the live state the match restores into. */
  if (!n || step > limit || kvci_pool_available(g) < (sg->live ? 1u : 2u)) return 0;
  kvci_pool_chain(s, tokens, g->block_size, 0, n, sg->hashes);
  for (uint64_t i = n; i-- > 0;)
    if (kvci_pool_map_find(g, sg->hashes[i])) {
      first = i + 1;
      break;
    }
  uint64_t* at = malloc((size_t)(n - first + 1) * sizeof(uint64_t));
  size_t count = 0;
  for (uint64_t i = first; at && i < n; i++)
    if ((i + 1) * g->block_size % step == 0) at[count++] = i;
  size_t best = count ? farthest_held(p, gi, s, at, count) : 0;
  int got = best < count && fetch_state(p, s, tokens, gi, at[best]);
  free(at);
  return got;
}

int kvci_pool_tiers_fetch(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, uint64_t limit,
                          uint64_t matched) {
  (void)matched;
  uint64_t added = 0;
  /* Full groups first: each caps what the others need at its first miss. */
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t gi = 0; gi < p->num_groups && limit; gi++) {
      const kvci_pool_group* g = &p->groups[gi];
      if (kvci_pool_keeps_all(g) != (pass == 0)) continue;
      if (kvci_pool_is_recurrent(g)) {
        added += (uint64_t)fetch_checkpoint(p, s, tokens, gi, limit);
        continue;
      }
      uint64_t reach;
      added += fetch_group(p, s, tokens, gi, limit, &reach);
      if (kvci_pool_keeps_all(g) && reach * g->block_size < limit) limit = reach * g->block_size;
    }
  return added != 0;
}
