/*
 * core/cache/offload.c: offloading, a property of the cache (docs/semantics.md, 'Offloading').
 *
 * An offloaded layer keeps its store (K and V) in the backend's host tier;
 * every other field stays as it is, so every operation keeps working on it,
 * and the stores operations allocate for it go to the same tier
 * (kvci_store_alloc_tier). Only updates and kvc_cache_offload/prefetch move a
 * layer between the tiers.
 *
 * An update of layer i on an offloading cache does what transformers'
 * Cache.update does: bring layer i to the device tier (normally the previous
 * update prefetched it already), prefetch the next offloadable layer (the
 * first j > i, wrapping to the first one overall), write, then offload layer
 * i. A move copies only the stored region [start, end) into a store of the
 * same capacity, so slots, counters and the views' layout are the same in
 * both tiers. The slots outside the stored region are not part of a layer's
 * contents (a compaction leaves stale tokens there too, and zeroes them
 * itself where a static kind shows them, kvci_layer_reserve), so an offload's
 * host store is not zeroed first: on a GPU that zeroing is a kernel writing
 * the whole store across the bus, which halved the offload's bandwidth.
 *
 * The views an update returns point into the device store the layer had
 * while it was written. That store is "retired", not freed, when the layer is
 * offloaded right after, and freed at the next update (or offload, prefetch,
 * destroy): views stay valid until the next mutating call, as everywhere.
 * update_all returns views of every layer it updates, so all their device
 * stores stay alive until the next call: at its end the whole cache is in
 * device memory once more. The per-layer kvc_cache_update, which a model's
 * forward pass uses (as transformers does), holds one retired store at a time.
 *
 * A failed call changes nothing: kvci_offload_prepare plans every move of the
 * call and allocates every buffer those moves need (sized for the capacities
 * the stores reach in the room phase) before any store grows or anything is
 * written; the moves themselves fail only when the device does, which
 * poisons the cache (backend_fault.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"

/* A planned move of one layer's store into (k, v), in the other tier. */
typedef struct tier_move {
  uint32_t layer;
  int64_t cap; /* the layer's capacity when the move runs */
  uint32_t step; /* 3j: before the j-th updated layer's write, ensure it is on the device; 3j+1: prefetch; 3j+2: after
                    the write, offload */
  int to_host;
  void* k;
  void* v;
} tier_move;

typedef struct retired_store {
  void* k;
  void* v;
  uint64_t bytes;
} retired_store;

typedef struct offload_state {
  /* Device stores of layers the last update offloaded, kept for its views. */
  retired_store* retired;
  size_t nretired, cap_retired;
  uint64_t retired_bytes;
  /* The plan of the update in progress, and scratch that prepare reuses from call to call. */
  tier_move* moves;
  size_t nmoves, next, cap_moves;
  uint32_t first;
  unsigned char* tier; /* simulated tier per layer while planning */
  size_t cap_tier;
  /* A prefetch was issued that no tier_wait has covered yet: on a GPU it runs on a side stream (see
   * kvci_offload_settle). */
  _Atomic int prefetch_pending; /* const calls settle it, and const calls may run together (kvcache.h) */
} offload_state;

int kvci_offload_layer_takes_part(kvc_offload mode, const kvc_layer* l) {
  if (mode != KVC_OFFLOAD_ALL && mode != KVC_OFFLOAD_NON_SLIDING) return 0;
  if (!kvci_layer_is(l, KVC_TRAIT_OFFLOADS)) return 0; /* see the kinds' descriptors */
  return !(mode == KVC_OFFLOAD_NON_SLIDING && kvci_layer_is(l, KVC_TRAIT_SLIDING));
}

uint64_t kvci_offload_retired_bytes(const kvc_cache* c) {
  const offload_state* st = (const offload_state*)c->offload_state;
  return st ? st->retired_bytes : 0;
}

static uint64_t store_bytes(const kvc_layer* l) {
  return (uint64_t)(l->batch * l->heads * l->cap * (l->k_dim + l->v_dim)) * l->elem;
}

static offload_state* state_of(kvc_cache* c) {
  if (!c->offload_state) c->offload_state = calloc(1, sizeof(offload_state));
  return (offload_state*)c->offload_state;
}

/* Grows a scratch array to hold `want` items of `size` bytes (contents kept); -1 when out of memory. */
static int grow(void** arr, size_t* cap, size_t want, size_t size) {
  if (want <= *cap) return 0;
  void* p = realloc(*arr, want * size);
  if (!p) return -1;
  *arr = p;
  *cap = want;
  return 0;
}

/*
 * Copies the layer's stored region into (k, v), a store of the same geometry
 * in the other tier, and makes it the layer's store. The old store is
 * returned through old_k/old_v for the caller to free or retire.
 */
static void move_store(const kvc_cache* c, kvc_layer* l, void* k, void* v, int to_host, void** old_k, void** old_v) {
  for (int which = 0; which < 2; which++) {
    int64_t d = which ? l->v_dim : l->k_dim, st[4];
    kvci_store_strides(l, which, st);
    int64_t shape[4] = {l->batch, l->heads, l->end - l->start, d};
    size_t off = (size_t)(l->start * d) * l->elem;
    if (!to_host && c->offload_state) ((offload_state*)c->offload_state)->prefetch_pending = 1;
    KVCI_BE(c, copy_tier_4d, to_host, (char*)(which ? v : k) + off, st,
            (const char*)(which ? l->v : l->k) + off, st, shape, l->elem);
  }
  *old_k = l->k;
  *old_v = l->v;
  kvci_alias_index_touch(c);
  l->k = k;
  l->v = v;
  l->offloaded = to_host;
  kvci_layer_sync_view(l);
}

/* ------------------------------------------------------------ update path */

/* The layer transformers' prefetch(i) picks: the first offloadable j >= i, else the first one overall. */
static int64_t prefetch_target(const kvc_cache* c, uint32_t i) {
  for (uint32_t j = i; j < c->num_layers; j++)
    if (c->layers[j]->offloadable) return j;
  for (uint32_t j = 0; j < i && j < c->num_layers; j++)
    if (c->layers[j]->offloadable) return j;
  return -1; /* transformers raises here (list.index); a cache without offloadable layers simply never moves */
}

static void free_plan_buffers(const kvc_cache* c, offload_state* st) {
  for (size_t m = st->next; m < st->nmoves; m++) kvci_store_free(c, st->moves[m].to_host, st->moves[m].k, st->moves[m].v);
  st->nmoves = st->next = 0;
}

static void plan(offload_state* st, uint32_t layer, uint32_t step, int to_host) {
  tier_move* m = &st->moves[st->nmoves++];
  m->layer = layer;
  m->step = step;
  m->to_host = to_host;
  m->k = m->v = NULL;
  st->tier[layer] = (unsigned char)to_host;
}

/* The capacity layer `i` will have in the write phase: updated layers may grow in the room phase, after prepare. */
static int64_t capacity_at_write(const kvc_cache* c, uint32_t i, uint32_t first, uint32_t count, const kvc_tensor* keys,
                                 const kvc_update_options* o) {
  const kvc_layer* l = c->layers[i];
  if (i < first || i - first >= count) return l->cap;
  int64_t append = 0;
  kvc_region keep = l->ops->keep_for_update(l, keys[i - first].shape[2], o, &append);
  return kvci_layer_reserved_capacity(l, keep, append);
}

kvc_error* kvci_offload_prepare(const kvc_call* call, kvc_cache* c, uint32_t first, uint32_t count, const kvc_tensor* keys,
                               const kvc_update_options* o) {
  offload_state* st = (offload_state*)c->offload_state;
  if (st) free_plan_buffers(c, st);
  /* transformers' DynamicCache(ddp_cache_data) fills its layers directly, without the offloading update path. */
  int offloading = c->offload != KVC_OFFLOAD_NONE && !(call->flags & KVC_CALL_FILLS_LAYERS);
  int any = offloading;
  for (uint32_t j = 0; j < count && !any; j++) any = c->layers[first + j]->offloaded;
  if (!any) return NULL; /* nothing moves: no allocation on the hot path of a cache that does not offload */

  if (!(st = state_of(c))) return kvci_err_oom();
  int failed = grow((void**)&st->moves, &st->cap_moves, 3 * (size_t)count, sizeof(tier_move)) ||
               grow((void**)&st->tier, &st->cap_tier, c->num_layers, 1);
  if (failed) return kvci_err_oom();
  for (uint32_t i = 0; i < c->num_layers; i++) st->tier[i] = (unsigned char)(c->layers[i]->offloaded != 0);

  /* Replay transformers' order on the simulated tiers; every move gets its own destination store. */
  size_t offloads = 0;
  for (uint32_t j = 0; j < count; j++) {
    uint32_t u = first + j;
    if (st->tier[u]) plan(st, u, 3 * j, 0);
    int64_t p = offloading ? prefetch_target(c, u + 1) : -1;
    if (p >= 0 && st->tier[p]) plan(st, (uint32_t)p, 3 * j + 1, 0);
    if (offloading && c->layers[u]->offloadable) {
      plan(st, u, 3 * j + 2, 1);
      offloads++;
    }
  }
  /* Offloads retire device stores in the write phase, where nothing may fail: room for them now. */
  failed = grow((void**)&st->retired, &st->cap_retired, st->nretired + offloads, sizeof(retired_store));
  for (size_t m = 0; !failed && m < st->nmoves; m++) {
    tier_move* mv = &st->moves[m];
    const kvc_layer* l = c->layers[mv->layer];
    mv->cap = capacity_at_write(c, mv->layer, first, count, keys, o);
    failed = kvci_store_alloc_to_fill(c, mv->to_host, l->batch, l->heads, mv->cap, l->k_dim, l->v_dim, l->elem,
                                     &mv->k, &mv->v);
  }
  if (failed) {
    free_plan_buffers(c, st);
    return kvci_err_oom();
  }
  st->first = first;
  st->next = 0;
  return NULL;
}

void kvci_offload_abort(kvc_cache* c) {
  offload_state* st = (offload_state*)c->offload_state;
  if (st) free_plan_buffers(c, st);
}

static void retire(offload_state* st, void* k, void* v, uint64_t bytes) {
  retired_store* r = &st->retired[st->nretired++]; /* room reserved by prepare */
  r->k = k;
  r->v = v;
  r->bytes = bytes;
  st->retired_bytes += bytes;
}

void kvci_offload_release_retired_state(kvc_cache* c) {
  offload_state* st = (offload_state*)c->offload_state;
  if (!st) return;
  for (size_t i = 0; i < st->nretired; i++) kvci_store_free(c, 0, st->retired[i].k, st->retired[i].v);
  st->nretired = 0;
  st->retired_bytes = 0;
}

/* Runs the planned moves of `step`. */
static void run_step(kvc_cache* c, offload_state* st, uint32_t step) {
  while (st->next < st->nmoves && st->moves[st->next].step == step) {
    tier_move* m = &st->moves[st->next++];
    kvc_layer* l = c->layers[m->layer];
    uint64_t bytes = store_bytes(l);
    void *old_k, *old_v;
    if (m->cap != l->cap) {
      /* Only kvci_layer_reserve changes a capacity, and prepare sized the buffer for it: never taken. Staying
       * in the current tier beats writing past the buffer. */
      kvci_store_free(c, m->to_host, m->k, m->v);
      m->k = m->v = NULL;
      continue;
    }
    move_store(c, l, m->k, m->v, m->to_host, &old_k, &old_v);
    m->k = m->v = NULL;
    if (m->to_host)
      retire(st, old_k, old_v, bytes); /* the views this update returns point there */
    else
      kvci_store_free(c, 1, old_k, old_v);
  }
}

void kvci_offload_before_update_state(kvc_cache* c, uint32_t layer) {
  offload_state* st = (offload_state*)c->offload_state;
  if (!st || st->next >= st->nmoves) return;
  uint32_t j = layer - st->first;
  run_step(c, st, 3 * j);
  /* The write comes next: it must see this layer's data, whichever call prefetched it (transformers makes the
   * default stream wait for the prefetch stream here). The prefetch issued after it overlaps with the write. */
  KVCI_BE0(c, tier_wait);
  st->prefetch_pending = 0;
  run_step(c, st, 3 * j + 1);
}

void kvci_offload_settle(const kvc_cache* c) {
  offload_state* st = (offload_state*)c->offload_state;
  if (!st || !st->prefetch_pending) return;
  KVCI_BE0(c, tier_wait);
  st->prefetch_pending = 0;
}

kvc_error* kvci_cache_check_settled(const char* fn, const kvc_cache* c) {
  kvc_error* e = kvci_cache_check(fn, c);
  if (!e) kvci_offload_settle(c);
  return e;
}

void kvci_offload_after_update_state(kvc_cache* c, uint32_t layer) {
  offload_state* st = (offload_state*)c->offload_state;
  if (!st || st->next >= st->nmoves) return;
  run_step(c, st, 3 * (layer - st->first) + 2);
}

void kvci_offload_free_state(kvc_cache* c) {
  offload_state* st = (offload_state*)c->offload_state;
  if (!st) return;
  kvci_offload_release_retired(c);
  free_plan_buffers(c, st);
  free(st->retired);
  free(st->moves);
  free(st->tier);
  free(st);
  c->offload_state = NULL;
}

/* ------------------------------------------------------- explicit moves */

/* Moves a layer to the other tier now, for kvc_cache_offload/prefetch. */
static kvc_error* move_now(const char* fn, kvc_cache* c, kvc_layer* l, int to_host) {
  void *k, *v, *old_k, *old_v;
  kvci_offload_settle(c); /* the layer may be the one the last update prefetched */
  if (kvci_store_alloc_to_fill(c, to_host, l->batch, l->heads, l->cap, l->k_dim, l->v_dim, l->elem, &k, &v))
    return kvci_err_oom();
  /* Both are mutating calls: the views of the last update end here, and their device stores go. */
  kvci_offload_release_retired(c);
  move_store(c, l, k, v, to_host, &old_k, &old_v);
  kvci_store_free(c, !to_host, old_k, old_v);
  if (!to_host) {
    KVCI_BE0(c, tier_wait);
    if (c->offload_state) ((offload_state*)c->offload_state)->prefetch_pending = 0;
  }
  return kvci_cache_result(fn, c, NULL);
}

kvc_error* kvc_cache_offload(kvc_cache* c, uint32_t layer) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), "kvc_cache_offload");
  kvc_error* e = kvci_cache_check_layer("kvc_cache_offload", c, layer);
  if (e) return e;
  kvc_layer* l = c->layers[layer];
  if (l->offloaded || !l->initialized || !kvci_layer_is(l, KVC_TRAIT_OFFLOADS)) return NULL;
  return move_now("kvc_cache_offload", c, l, 1);
}

kvc_error* kvc_cache_prefetch(kvc_cache* c, uint32_t layer) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), "kvc_cache_prefetch");
  kvc_error* e = kvci_cache_check_layer("kvc_cache_prefetch", c, layer);
  if (e) return e;
  kvc_layer* l = c->layers[layer];
  if (!l->offloaded) return NULL;
  return move_now("kvc_cache_prefetch", c, l, 0);
}
