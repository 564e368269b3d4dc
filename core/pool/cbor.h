/*
 * core/pool/cbor.h: the few CBOR items (RFC 8949, deterministic encoding:
 * shortest heads) vLLM's sha256_cbor block hash serializes, written into
 * caller buffers. cbor2.dumps(..., canonical=True) gives these exact bytes
 * for Python ints, bytes, str, tuples and None.
 */
#ifndef KVC_CORE_POOL_CBOR_H
#define KVC_CORE_POOL_CBOR_H

#include <stddef.h>
#include <stdint.h>

#define KVCI_CBOR_UINT  0
#define KVCI_CBOR_NINT  1
#define KVCI_CBOR_BYTES 2
#define KVCI_CBOR_TEXT  3
#define KVCI_CBOR_ARRAY 4
#define KVCI_CBOR_NULL  0xf6
#define KVCI_CBOR_HEAD_MAX 9 /* bytes of the longest head */

/* The head of an item of major type `major` with argument `v`, shortest form, into out; returns its bytes. */
size_t kvci_cbor_head(uint8_t* out, int major, uint64_t v);
/* An integer (Python int in int64 range). */
size_t kvci_cbor_int(uint8_t* out, int64_t v);
/* A text string of `len` bytes (already checked to be UTF-8). */
size_t kvci_cbor_text(uint8_t* out, const void* text, size_t len);

/* Whether `s` (len bytes) is well-formed UTF-8 (no surrogates, no overlong forms): what Python's str encodes to. */
int kvci_utf8_valid(const void* s, size_t len);

#endif /* KVC_CORE_POOL_CBOR_H */
