/*
 * core/pool/sha256.h: SHA-256 (FIPS 180-4), the digest of the block hash
 * (docs/block-hash.md).
 *
 * The core depends on nothing beyond libc, so it carries this small streaming
 * implementation instead of a crypto library: portable C, and on x86-64
 * hosts with the SHA extensions their instructions (sha256_x86.c, chosen at
 * run time; about three times faster). A block of 16 tokens is 104 bytes to
 * hash, two compressions.
 * tests/pool/test_internal_sha256.c checks it against the FIPS 180-2 examples
 * and against Python's hashlib for every length 0..300.
 */
#ifndef KVC_CORE_POOL_SHA256_H
#define KVC_CORE_POOL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define KVCI_SHA256_DIGEST_SIZE 32
#define KVCI_SHA256_BLOCK_SIZE 64

/* The round constants K0..K63 (section 4.2.2), shared by both compressions. */
extern const uint32_t kvci_sha256_k[64];

/* A hash in progress. Plain data: copying it forks the computation. */
typedef struct kvci_sha256_ctx {
  uint32_t state[8];                      /* H0..H7 */
  uint64_t length;                        /* bytes hashed so far (the message length is its bit count) */
  uint8_t buffer[KVCI_SHA256_BLOCK_SIZE]; /* the message block being filled */
  size_t used;                            /* bytes of buffer in use, 0..63 */
} kvci_sha256_ctx;

/* Starts a hash (the initial hash value of FIPS 180-4 section 5.3.3). */
void kvci_sha256_init(kvci_sha256_ctx* h);

/* Appends `len` bytes; `data` may be NULL when len is 0. Any split of a message into updates gives the same digest. */
void kvci_sha256_update(kvci_sha256_ctx* h, const void* data, size_t len);

/* Pads the message, writes the 32-byte digest to `out`. `h` is spent afterwards (init it again to reuse it). */
void kvci_sha256_final(kvci_sha256_ctx* h, uint8_t out[KVCI_SHA256_DIGEST_SIZE]);

/* The portable compression of `count` 64-byte blocks into `state`, whatever the host has (for tests). */
void kvci_sha256_compress_portable(uint32_t state[8], const uint8_t* blocks, size_t count);

/* The digest of one message in one call. */
void kvci_sha256(const void* data, size_t len, uint8_t out[KVCI_SHA256_DIGEST_SIZE]);

#endif /* KVC_CORE_POOL_SHA256_H */
