/*
 * core/pool/sha256_x86.h: SHA-256's compression function with the x86 SHA
 * extensions (SHA-NI), for the hosts that have them.
 *
 * Hashing is most of a serving step's scheduling cost (every block that
 * fills is hashed, and an arriving request hashes its whole prompt), and
 * the instructions compress a block about three times faster than portable
 * C. sha256.c picks this path at run time when the CPU reports the
 * extensions; the result is the same bit for bit (test_internal_sha256
 * compares the two on random blocks).
 */
#ifndef KVC_CORE_POOL_SHA256_X86_H
#define KVC_CORE_POOL_SHA256_X86_H

#include <stddef.h>
#include <stdint.h>

/* 1 when this build has the SHA-NI path and the CPU supports SHA, SSSE3 and SSE4.1; 0 otherwise. */
int kvci_sha256_x86_available(void);

/* Compresses `count` 64-byte blocks into `state` (FIPS 180-4 section 6.2.2). Only when available. */
void kvci_sha256_x86_compress(uint32_t state[8], const uint8_t* blocks, size_t count);

#endif /* KVC_CORE_POOL_SHA256_X86_H */
