/*
 * core/pool/tier_stage.c: a block's bytes between the pool's storage and
 * host memory, for its tiers (docs/tiers.md gives the payload's order: per
 * layer of the group, in the group's layer order, K then V, each block's
 * elements as the layout stores them; a block is contiguous in either
 * layout). An fp8 layer's elements are its one-byte codes, a latent layer
 * has K alone.
 *
 * A CPU pool's bytes are copied with memcpy. A device pool's go through
 * host-tier buffers (the backend's host_alloc: pinned memory the device
 * reaches) with one batch of copy_4d on the pool's stream, ordered after the
 * writes before it (copy_tier_4d's prefetches run on a side stream and would
 * need a tier_wait between two into the same buffer); the host then waits
 * for the stream with a 4-byte read_f32_4d, the backend's one entry that
 * synchronises the host (core/persist/transfer.c does the same), before it
 * reads or reuses them.
 * The last staging buffer is kept for the next store or fetch: a fresh one
 * costs a page fault per 4 KiB on first touch (and pinned memory costs a
 * driver call), which would otherwise be paid for every block batch.
 */
#include <stdlib.h>

#include "pool_internal.h"

static int on_cpu(const kvc_pool* p) { return p->device.device_type == KVC_DEVICE_CPU; }

size_t kvci_pool_block_payload(const kvc_pool* p, uint32_t group) {
  const kvci_pool_group* g = &p->groups[group];
  size_t n = 0;
  for (uint32_t i = 0; i < g->num_layers; i++) {
    const kvci_pool_layer* l = &p->layers[g->layers[i]];
    n += (size_t)(l->k_block + l->v_block) * l->elem; /* fp8: the codes; latent: no V */
  }
  return n;
}

static void stage_free_now(kvc_pool* p, void* buf) {
  if (on_cpu(p))
    free(buf);
  else
    p->backend->host_free(p->backend->ctx, &p->exec, buf);
}

void* kvci_pool_stage_alloc(kvc_pool* p, size_t bytes) {
  if (!p->stage_cache_busy && p->stage_cache && p->stage_cache_bytes >= bytes) {
    p->stage_cache_busy = 1;
    return p->stage_cache;
  }
  if (on_cpu(p)) return malloc(bytes);
  const kvc_backend* b = p->backend;
  if (!b->read_f32_4d || !b->host_free) return NULL; /* no way to wait for the device: the tiers are skipped */
  return b->host_alloc ? b->host_alloc(b->ctx, &p->exec, bytes) : b->host_alloc_zeroed(b->ctx, &p->exec, bytes);
}

void kvci_pool_stage_free(kvc_pool* p, void* buf, size_t bytes) {
  if (!buf) return;
  if (buf == p->stage_cache) {
    p->stage_cache_busy = 0;
    return;
  }
  if (p->stage_cache_busy || (p->stage_cache && p->stage_cache_bytes >= bytes)) {
    stage_free_now(p, buf); /* the kept one is lent out or larger: this one goes */
    return;
  }
  if (p->stage_cache) stage_free_now(p, p->stage_cache);
  p->stage_cache = buf;
  p->stage_cache_bytes = bytes;
}

void kvci_pool_stage_release(kvc_pool* p) {
  if (p->stage_cache) stage_free_now(p, p->stage_cache);
  p->stage_cache = NULL;
  p->stage_cache_bytes = 0;
  p->stage_cache_busy = 0;
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

/* The flat copy of `elems` elements from `src` to `dst` (a block is contiguous in either layout). */
static void flat(kvc_copy_4d* c, void* dst, const void* src, int64_t elems, size_t elem) {
  memset(c, 0, sizeof(*c));
  c->dst = dst;
  c->src = src;
  for (int i = 0; i < 4; i++) {
    c->shape[i] = i == 3 ? elems : 1;
    c->dst_strides[i] = c->src_strides[i] = i == 3 ? 1 : elems;
  }
  c->elem_size = elem;
}

/*
 * Copies every layer's K and V of `count` blocks between the pool and host buffers (`to_host`: out). On the CPU
 * with memcpy; on a device as one batch of copies on the pool's stream (copy_4d accepts host-tier pointers; one
 * launch for the batch), then the host waits for the stream, so the buffers are filled (out) or may be reused
 * (in) when this returns.
 */
static int stage(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count, uint8_t* const* host,
                 int to_host) {
  const kvci_pool_group* g = &p->groups[group];
  size_t n = 2 * (size_t)g->num_layers * count;
  kvc_copy_4d* c = on_cpu(p) ? NULL : (kvc_copy_4d*)malloc(n * sizeof(*c));
  if (!on_cpu(p) && !c) return -1;
  size_t k = 0;
  for (size_t j = 0; j < count; j++) {
    uint8_t* at = host[j];
    for (uint32_t i = 0; i < g->num_layers; i++) {
      const kvci_pool_layer* l = &p->layers[g->layers[i]];
      char* kb = kvci_pool_block_at(p, l, 0, blocks[j]);
      char* vb = l->v_block ? kvci_pool_block_at(p, l, 1, blocks[j]) : NULL; /* latent: no V */
      size_t kn = (size_t)l->k_block * l->elem, vn = (size_t)l->v_block * l->elem;
      if (on_cpu(p)) {
        memcpy(to_host ? (void*)at : kb, to_host ? (const void*)kb : at, kn);
        if (vn) memcpy(to_host ? (void*)(at + kn) : vb, to_host ? (const void*)vb : at + kn, vn);
      } else {
        flat(&c[k++], to_host ? (void*)at : kb, to_host ? (const void*)kb : at, l->k_block, l->elem);
        if (vn) flat(&c[k++], to_host ? (void*)(at + kn) : vb, to_host ? (const void*)vb : at + kn, l->v_block, l->elem);
      }
      at += kn + vn;
    }
  }
  if (on_cpu(p)) return 0;
  /* A failure is the caller's to handle (a block not stored, or not fetched): the pool keeps no fault. */
  kvci_fault f = {0};
  int rc = 0;
  for (size_t at = 0; at < k && !rc; at += INT32_MAX) {
    size_t m = k - at < INT32_MAX ? k - at : INT32_MAX;
    rc = kvci_pool_issue_copies(p, c + at, (int32_t)m, &f);
  }
  free(c);
  if (!rc) rc = host_wait(p);
  return rc;
}

size_t kvci_pool_block_parts(kvc_pool* p, uint32_t group, uint32_t block, struct iovec* out) {
  const kvci_pool_group* g = &p->groups[group];
  size_t n = 0;
  for (uint32_t i = 0; i < g->num_layers; i++) {
    const kvci_pool_layer* l = &p->layers[g->layers[i]];
    out[n++] = (struct iovec){kvci_pool_block_at(p, l, 0, block), (size_t)l->k_block * l->elem};
    if (l->v_block) out[n++] = (struct iovec){kvci_pool_block_at(p, l, 1, block), (size_t)l->v_block * l->elem};
  }
  return n;
}

int kvci_pool_stage_out(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count, uint8_t* const* out) {
  return stage(p, group, blocks, count, out, 1);
}

int kvci_pool_stage_in(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count,
                       const uint8_t* const* in) {
  return stage(p, group, blocks, count, (uint8_t* const*)in, 0);
}

int kvci_pool_stage_bounce(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count, uint8_t* const* host,
                           int to_host) {
  if (on_cpu(p)) return stage(p, group, blocks, count, host, to_host);
  /* A device copies to and from host-tier memory only: the bytes pass through a staging buffer. */
  size_t payload = kvci_pool_block_payload(p, group);
  uint8_t* buf = kvci_pool_stage_alloc(p, count * payload);
  uint8_t** at = calloc(count ? count : 1, sizeof(*at)); /* zeroed: gcc cannot see that count > 0 fills it */
  int rc = -1;
  if (buf && at) {
    for (size_t i = 0; i < count; i++) {
      at[i] = buf + i * payload;
      if (!to_host) memcpy(at[i], host[i], payload);
    }
    rc = stage(p, group, blocks, count, at, to_host);
    for (size_t i = 0; !rc && to_host && i < count; i++) memcpy(host[i], at[i], payload);
  }
  kvci_pool_stage_free(p, buf, count * payload);
  free(at);
  return rc;
}
