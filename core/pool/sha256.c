/*
 * core/pool/sha256.c: SHA-256 as FIPS 180-4 defines it (sections 4.1.2,
 * 4.2.2, 5.1.1, 5.3.3 and 6.2), written for the block hash. Big-endian words
 * are assembled byte by byte, so the code is the same on every host.
 */
#include "sha256.h"

#include <stdatomic.h>
#include <string.h>

#include "sha256_x86.h"

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes (section 4.2.2). */
const uint32_t kvci_sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }

/* The six functions of section 4.1.2. */
static uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
static uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }
static uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
static uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
static uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
static uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

static uint32_t load_be32(const uint8_t* p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static void store_be32(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* One message block into the state (section 6.2.2). The schedule W is kept as a ring of 16 words. */
static void compress(uint32_t state[8], const uint8_t block[KVCI_SHA256_BLOCK_SIZE]) {
  uint32_t w[16];
  for (int t = 0; t < 16; t++) w[t] = load_be32(block + 4 * t);
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; t++) {
    uint32_t wt;
    if (t < 16) {
      wt = w[t];
    } else {
      /* W_t = s1(W_{t-2}) + W_{t-7} + s0(W_{t-15}) + W_{t-16}, all indices mod 16. */
      wt = small_sigma1(w[(t - 2) & 15]) + w[(t - 7) & 15] + small_sigma0(w[(t - 15) & 15]) + w[t & 15];
      w[t & 15] = wt;
    }
    uint32_t t1 = h + big_sigma1(e) + ch(e, f, g) + kvci_sha256_k[t] + wt;
    uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void kvci_sha256_compress_portable(uint32_t state[8], const uint8_t* blocks, size_t count) {
  for (; count; count--, blocks += KVCI_SHA256_BLOCK_SIZE) compress(state, blocks);
}

/*
 * The compression this host runs: the SHA-NI one where the CPU has it.
 * Chosen at the first hash; threads racing there store the same choice.
 */
static void compress_blocks(uint32_t state[8], const uint8_t* blocks, size_t count) {
  static atomic_int choice; /* 0 unknown, 1 portable, 2 SHA-NI */
  int c = atomic_load_explicit(&choice, memory_order_relaxed);
  if (!c) {
    c = kvci_sha256_x86_available() ? 2 : 1;
    atomic_store_explicit(&choice, c, memory_order_relaxed);
  }
  if (c == 2)
    kvci_sha256_x86_compress(state, blocks, count);
  else
    kvci_sha256_compress_portable(state, blocks, count);
}

void kvci_sha256_init(kvci_sha256_ctx* h) {
  /* The first 32 bits of the fractional parts of the square roots of the first 8 primes (section 5.3.3). */
  static const uint32_t H0[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                 0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
  memcpy(h->state, H0, sizeof H0);
  h->length = 0;
  h->used = 0;
}

void kvci_sha256_update(kvci_sha256_ctx* h, const void* data, size_t len) {
  if (!len) return; /* data may be NULL then, and memcpy must not see it */
  const uint8_t* p = (const uint8_t*)data;
  h->length += (uint64_t)len;
  if (h->used) {
    size_t take = KVCI_SHA256_BLOCK_SIZE - h->used;
    if (take > len) take = len;
    memcpy(h->buffer + h->used, p, take);
    h->used += take;
    p += take;
    len -= take;
    if (h->used < KVCI_SHA256_BLOCK_SIZE) return;
    compress_blocks(h->state, h->buffer, 1);
    h->used = 0;
  }
  /* Whole blocks straight from the input, without a copy. */
  size_t whole = len / KVCI_SHA256_BLOCK_SIZE;
  if (whole) compress_blocks(h->state, p, whole);
  p += whole * KVCI_SHA256_BLOCK_SIZE;
  len -= whole * KVCI_SHA256_BLOCK_SIZE;
  if (len) {
    memcpy(h->buffer, p, len);
    h->used = len;
  }
}

void kvci_sha256_final(kvci_sha256_ctx* h, uint8_t out[KVCI_SHA256_DIGEST_SIZE]) {
  /* Section 5.1.1: a 1 bit, zeros up to 56 bytes mod 64, then the message length in bits as a 64-bit big-endian. */
  uint64_t bits = h->length * 8u;
  h->buffer[h->used++] = 0x80;
  if (h->used > KVCI_SHA256_BLOCK_SIZE - 8) {
    memset(h->buffer + h->used, 0, KVCI_SHA256_BLOCK_SIZE - h->used);
    compress_blocks(h->state, h->buffer, 1);
    h->used = 0;
  }
  memset(h->buffer + h->used, 0, KVCI_SHA256_BLOCK_SIZE - 8 - h->used);
  store_be32(h->buffer + 56, (uint32_t)(bits >> 32));
  store_be32(h->buffer + 60, (uint32_t)bits);
  compress_blocks(h->state, h->buffer, 1);
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, h->state[i]);
  h->used = 0;
}

void kvci_sha256(const void* data, size_t len, uint8_t out[KVCI_SHA256_DIGEST_SIZE]) {
  kvci_sha256_ctx h;
  kvci_sha256_init(&h);
  kvci_sha256_update(&h, data, len);
  kvci_sha256_final(&h, out);
}
