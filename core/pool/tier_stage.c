/*
 * core/pool/tier_stage.c: a block's bytes between the pool's storage and
 * host memory, for its tiers (docs/tiers.md gives the payload's order: per
 * layer of the group, in the group's layer order, K then V, each block's
 * elements as the layout stores them; a block is contiguous in either
 * layout).
 *
 * A CPU pool's bytes are copied with memcpy. A device pool's go through
 * host-tier buffers (the backend's host_alloc: pinned memory it can copy
 * to and from) with copy_tier_4d; the host then waits for the stream with
 * a 4-byte read_f32_4d, the backend's one entry that synchronises the host
 * (core/persist/transfer.c does the same), before it reads or reuses them.
 */
#include <stdlib.h>

#include "pool_internal.h"

static int on_cpu(const kvc_pool* p) { return p->device.device_type == KVC_DEVICE_CPU; }

size_t kvci_pool_block_payload(const kvc_pool* p, uint32_t group) {
  const kvci_pool_group* g = &p->groups[group];
  size_t n = 0;
  for (uint32_t i = 0; i < g->num_layers; i++) {
    const kvci_pool_layer* l = &p->layers[g->layers[i]];
    n += (size_t)(l->k_block + l->v_block) * p->elem;
  }
  return n;
}

void* kvci_pool_stage_alloc(kvc_pool* p, size_t bytes) {
  if (on_cpu(p)) return malloc(bytes);
  const kvc_backend* b = p->backend;
  if (!b->copy_tier_4d || !b->read_f32_4d || !b->host_free) return NULL; /* no way to stage: the tiers are skipped */
  return b->host_alloc ? b->host_alloc(b->ctx, &p->exec, bytes) : b->host_alloc_zeroed(b->ctx, &p->exec, bytes);
}

void kvci_pool_stage_free(kvc_pool* p, void* buf) {
  if (!buf) return;
  if (on_cpu(p))
    free(buf);
  else
    p->backend->host_free(p->backend->ctx, &p->exec, buf);
}

/* Waits on the host for the work issued before on the pool's stream. */
static int host_wait(kvc_pool* p) {
  const kvc_backend* b = p->backend;
  void* barrier = b->alloc_zeroed(b->ctx, &p->exec, 64);
  if (!barrier) return -1;
  float x;
  const int64_t one[4] = {1, 1, 1, 1};
  int rc = b->read_f32_4d(b->ctx, &p->exec, &x, barrier, KVC_DTYPE_FLOAT32, one, one);
  b->free(b->ctx, &p->exec, barrier);
  return rc;
}

/* One flat copy of `elems` elements between a block and a host buffer. */
static int tier_copy(kvc_pool* p, int to_host, void* dst, const void* src, int64_t elems) {
  if (on_cpu(p)) {
    memcpy(dst, src, (size_t)elems * p->elem);
    return 0;
  }
  const int64_t shape[4] = {1, 1, 1, elems}, st[4] = {elems, elems, elems, 1};
  return p->backend->copy_tier_4d(p->backend->ctx, &p->exec, to_host, dst, st, src, st, shape, p->elem);
}

int kvci_pool_stage_out(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count, uint8_t* const* out) {
  const kvci_pool_group* g = &p->groups[group];
  int rc = 0;
  for (size_t j = 0; j < count && !rc; j++) {
    uint8_t* at = out[j];
    for (uint32_t i = 0; i < g->num_layers && !rc; i++) {
      const kvci_pool_layer* l = &p->layers[g->layers[i]];
      rc = tier_copy(p, 1, at, (const char*)l->k + (size_t)(l->k_block * blocks[j]) * p->elem, l->k_block);
      at += (size_t)l->k_block * p->elem;
      if (!rc) rc = tier_copy(p, 1, at, (const char*)l->v + (size_t)(l->v_block * blocks[j]) * p->elem, l->v_block);
      at += (size_t)l->v_block * p->elem;
    }
  }
  if (!rc && !on_cpu(p)) rc = host_wait(p);
  return rc;
}

int kvci_pool_stage_in(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count,
                       const uint8_t* const* in) {
  const kvci_pool_group* g = &p->groups[group];
  int rc = 0;
  for (size_t j = 0; j < count && !rc; j++) {
    const uint8_t* at = in[j];
    for (uint32_t i = 0; i < g->num_layers && !rc; i++) {
      const kvci_pool_layer* l = &p->layers[g->layers[i]];
      rc = tier_copy(p, 0, (char*)l->k + (size_t)(l->k_block * blocks[j]) * p->elem, at, l->k_block);
      at += (size_t)l->k_block * p->elem;
      if (!rc) rc = tier_copy(p, 0, (char*)l->v + (size_t)(l->v_block * blocks[j]) * p->elem, at, l->v_block);
      at += (size_t)l->v_block * p->elem;
    }
  }
  if (!on_cpu(p)) {
    /* Later work on the stream sees the blocks, and the host buffers may be freed or refilled. */
    int w = p->backend->tier_wait(p->backend->ctx, &p->exec);
    if (!rc) rc = w ? w : host_wait(p);
  }
  return rc;
}
