/*
 * core/pool/tier_fingerprint.c: kvc_pool_fingerprint, the first part of
 * every tier key (docs/tiers.md, 'Fingerprint').
 *
 * SHA-256 over a canonical little-endian encoding of what decides the bytes
 * of a block and the meaning of its hash: dtype, layout, every group's kind,
 * block size and window, every layer's group and shape, the hash seed (and,
 * since 0.7, every layer's storage and scales when one is fp8). Not
 * the device (a CPU and a GPU pool hold the same bytes) nor the number of
 * blocks (capacity), so pools that differ only there share their tiers.
 */
#include "pool/sha256.h"
#include "pool_internal.h"

static void put_u32(kvci_sha256_ctx* h, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
  kvci_sha256_update(h, b, 4);
}

static void put_u64(kvci_sha256_ctx* h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  kvci_sha256_update(h, b, 8);
}

/* The domain tag: a fingerprint can never equal a block hash or another format's digest. */
static const char TAG[] = "kvcache pool fingerprint v1";

void kvci_model_fingerprint(const kvci_model* m, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  kvci_sha256_ctx h;
  kvci_sha256_init(&h);
  kvci_sha256_update(&h, TAG, sizeof TAG - 1);
  put_u32(&h, (uint32_t)m->dtype);
  put_u32(&h, (uint32_t)m->layout);
  put_u32(&h, m->num_groups);
  for (uint32_t g = 0; g < m->num_groups; g++) {
    const kvci_model_group grp = m->group_at(m->src, g);
    put_u32(&h, (uint32_t)grp.kind);
    put_u32(&h, grp.block_size);
    put_u64(&h, (uint64_t)grp.window);
  }
  put_u32(&h, m->num_layers);
  for (uint32_t i = 0; i < m->num_layers; i++) {
    const kvci_model_layer l = m->layer_at(m->src, i);
    const int64_t v[7] = {l.group, l.heads, l.kdim, l.vdim, l.conv_dim, l.conv_kernel, l.dstate};
    for (int k = 0; k < 7; k++) put_u64(&h, (uint64_t)v[k]);
  }
  put_u64(&h, m->seed_len);
  kvci_sha256_update(&h, m->seed, (size_t)m->seed_len);
  /*
   * Since 0.7: a pool with fp8 layers adds, after the seed, every layer's storage and scales (float32 bits), so
   * that its blocks (codes, and what they mean) never mix with another's. Nothing is added otherwise: a pool of
   * 0.6's kinds keeps its fingerprint, and the tiers it filled.
   */
  int fp8 = 0;
  for (uint32_t i = 0; i < m->num_layers && !fp8; i++) fp8 = m->layer_at(m->src, i).storage != KVC_POOL_STORAGE_DTYPE;
  for (uint32_t i = 0; fp8 && i < m->num_layers; i++) {
    const kvci_model_layer l = m->layer_at(m->src, i);
    uint32_t bits[2];
    memcpy(bits, l.scale, sizeof bits);
    put_u32(&h, (uint32_t)l.storage);
    put_u32(&h, bits[0]);
    put_u32(&h, bits[1]);
  }
  kvci_sha256_final(&h, out);
}

static kvci_model_group pool_group(const void* src, uint32_t g) {
  const kvci_pool_group* grp = &((const kvc_pool*)src)->groups[g];
  return (kvci_model_group){grp->kind, grp->block_size, grp->window};
}

static kvci_model_layer pool_layer(const void* src, uint32_t i) {
  const kvci_pool_layer* l = &((const kvc_pool*)src)->layers[i];
  return (kvci_model_layer){l->group,       l->heads,   l->kdim,    l->vdim, l->conv_dim, l->conv_kernel,
                            l->dstate,      l->storage, {l->scale[0], l->scale[1]}};
}

void kvci_pool_fingerprint(const kvc_pool* p, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  const kvci_model m = {p->dtype, p->layout, p->num_groups, p->num_layers, p, pool_group, pool_layer,
                        p->seed, p->seed_len};
  kvci_model_fingerprint(&m, out);
}

kvc_error* kvc_pool_fingerprint(const kvc_pool* pool, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  KVCI_GUARD_SHARED(kvci_guard_of(pool), "kvc_pool_fingerprint");
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_fingerprint: pool is NULL");
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_fingerprint: out is NULL");
  kvci_pool_fingerprint(pool, out);
  return NULL;
}
