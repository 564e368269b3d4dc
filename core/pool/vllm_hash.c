/*
 * core/pool/vllm_hash.c: vLLM's sha256_cbor block hash (vllm_hash.h). The
 * message is streamed into SHA-256 as it is encoded: a 3-array of the
 * parent (32-byte CBOR bytes), the token ids (an array of unsigned
 * integers: ids are >= 0) and the extra keys (an array built by
 * extra_keys.c, or null).
 */
#include "vllm_hash.h"

#include <string.h>

#include "cbor.h"
#include "sha256.h"

void kvci_vllm_none_hash(const void* seed, size_t seed_len, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  if (!seed_len) {
    seed = KVCI_VLLM_DEFAULT_SEED;
    seed_len = sizeof(KVCI_VLLM_DEFAULT_SEED) - 1;
  }
  kvci_sha256_ctx h;
  uint8_t head[KVCI_CBOR_HEAD_MAX];
  kvci_sha256_init(&h);
  kvci_sha256_update(&h, head, kvci_cbor_head(head, KVCI_CBOR_TEXT, seed_len));
  kvci_sha256_update(&h, seed, seed_len);
  kvci_sha256_final(&h, out);
}

void kvci_vllm_block_hash(const uint8_t parent[KVC_BLOCK_HASH_SIZE], const int32_t* tokens, uint32_t n,
                          const void* extra, uint32_t extra_len, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  kvci_sha256_ctx h;
  uint8_t buf[256 + KVCI_CBOR_HEAD_MAX];
  size_t used = 0;
  kvci_sha256_init(&h);
  buf[used++] = 0x83; /* (parent, tokens, extra_keys) */
  used += kvci_cbor_head(buf + used, KVCI_CBOR_BYTES, KVC_BLOCK_HASH_SIZE);
  memcpy(buf + used, parent, KVC_BLOCK_HASH_SIZE);
  used += KVC_BLOCK_HASH_SIZE;
  used += kvci_cbor_head(buf + used, KVCI_CBOR_ARRAY, n);
  for (uint32_t i = 0; i < n; i++) {
    if (used > 256) {
      kvci_sha256_update(&h, buf, used);
      used = 0;
    }
    used += kvci_cbor_head(buf + used, KVCI_CBOR_UINT, (uint32_t)tokens[i]);
  }
  if (!extra_len) buf[used++] = KVCI_CBOR_NULL;
  kvci_sha256_update(&h, buf, used);
  if (extra_len) kvci_sha256_update(&h, extra, extra_len);
  kvci_sha256_final(&h, out);
}
