/*
 * core/persist/format.h: the byte layout of a cache file, version 1
 * (docs/file-format.md is the specification; this header is its constants).
 *
 * A file is: the file header (64 bytes), sections, the table section, the
 * footer (64 bytes). A section is a 64-byte header and its payload, padded
 * with zeros to a multiple of 64 bytes, so every payload starts 64-byte
 * aligned in the file (and in a page-aligned mmap of it). Every integer is
 * little-endian. Every byte is covered by a CRC-32C: the headers and the
 * footer carry their own, each payload's is in the table, the table's in the
 * footer; padding must be zero.
 */
#ifndef KVC_CORE_PERSIST_FORMAT_H
#define KVC_CORE_PERSIST_FORMAT_H

#include <stdint.h>
#include <string.h>

#define KVCF_VERSION 1u
#define KVCF_ALIGN 64u
#define KVCF_HEADER_BYTES 64u
#define KVCF_SECTION_HEADER_BYTES 64u
#define KVCF_FOOTER_BYTES 64u
#define KVCF_TABLE_ENTRY_BYTES 32u
#define KVCF_HASH_SPEC 1u /* the block hash specification version the pool's keys follow (docs/block-hash.md) */

/* The file's first 8 bytes: not text (0x89), CR LF and LF to catch line-ending conversion, SUB to stop `type`. */
static const unsigned char KVCF_MAGIC[8] = {0x89, 'K', 'V', 'C', '\r', '\n', 0x1A, '\n'};
static const unsigned char KVCF_FOOTER_MAGIC[8] = {'K', 'V', 'C', 'E', 'N', 'D', '\r', '\n'};

/* What a file holds (file header, byte 28). */
enum {
  KVCF_OBJECT_CACHE = 1,
  KVCF_OBJECT_ENCODER_DECODER = 2,
  KVCF_OBJECT_POOL_SEQUENCE = 3,
};

/* Section types: four ASCII characters read as a little-endian u32. */
#define KVCF_TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define KVCF_FINGERPRINT KVCF_TAG('F', 'P', 'R', 'T') /* the model: settings, layer specs and geometry */
#define KVCF_CACHE_STATE KVCF_TAG('C', 'S', 'T', 'A') /* cache-wide counters */
#define KVCF_LAYER KVCF_TAG('L', 'A', 'Y', 'R')       /* a layer's counters and its kind's record */
#define KVCF_KEYS KVCF_TAG('K', 'E', 'Y', 'S')        /* a layer's stored keys [B, H, len, Dk] */
#define KVCF_VALUES KVCF_TAG('V', 'A', 'L', 'S')      /* a layer's stored values [B, H, len, Dv] */
#define KVCF_ROWS KVCF_TAG('R', 'O', 'W', 'S')        /* one row buffer of a layer's kind: [batch][row bytes] */
#define KVCF_KIND_STATE KVCF_TAG('K', 'S', 'T', 'A')  /* a kind's cache-wide state record */
#define KVCF_ENCDEC KVCF_TAG('E', 'D', 'E', 'C')      /* an encoder-decoder cache's is_updated flags */
#define KVCF_SEQUENCE KVCF_TAG('P', 'S', 'E', 'Q')    /* a pool sequence: tokens, committed count, salt */
#define KVCF_BLOCKS KVCF_TAG('B', 'L', 'K', 'S')      /* a pool layer's bytes of the sequence's blocks */
#define KVCF_RECURRENT KVCF_TAG('R', 'E', 'C', 'S')   /* a pool layer's recurrent checkpoint */
#define KVCF_TABLE KVCF_TAG('T', 'A', 'B', 'L')       /* every other section: offset, size, checksum */

static inline void kvcf_put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void kvcf_put64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t kvcf_get32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t kvcf_get64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t kvcf_padded(uint64_t bytes) { return (bytes + KVCF_ALIGN - 1) / KVCF_ALIGN * KVCF_ALIGN; }

/* A section header's fields (docs/file-format.md, 'Section header'). */
typedef struct kvcf_section {
  uint32_t type, part, index, sub;
  uint64_t payload_bytes;
  uint32_t dims[4];     /* tensor payloads: [B, H, len, D]; else 0 */
  uint32_t dtype;       /* tensor payloads: kvc_dtype; else 0 */
  uint32_t elem_bytes;  /* tensor payloads: bytes of one element; else 1 */
} kvcf_section;

/* "FPRT" for a type (buf of 5). */
static inline const char* kvcf_tag_name(uint32_t type, char buf[5]) {
  for (int i = 0; i < 4; i++) {
    char ch = (char)(type >> (8 * i));
    buf[i] = ch >= 32 && ch < 127 ? ch : '?';
  }
  buf[4] = 0;
  return buf;
}

#endif /* KVC_CORE_PERSIST_FORMAT_H */
