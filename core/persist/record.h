/*
 * core/persist/record.h: records, the small payloads of a cache file that
 * are not tensors (a layer's counters, a kind's extension state, a kind's
 * cache-wide state, the fingerprint): a sequence of little-endian int64
 * values and float32 runs, in the order the writer put them; the reader
 * takes them back in the same order (docs/file-format.md lists each one).
 *
 * A writer never fails while writing: running out of memory sets `failed`,
 * which the file writer turns into KVC_ERROR_OUT_OF_MEMORY. A reader returns
 * -1 when the record ends before the value; kind hooks turn that into an
 * error naming the record.
 */
#ifndef KVC_CORE_PERSIST_RECORD_H
#define KVC_CORE_PERSIST_RECORD_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvci_record {
  unsigned char* bytes;
  size_t len, cap;
  int failed;
} kvci_record;

typedef struct kvci_record_reader {
  const unsigned char* bytes;
  size_t len, at;
} kvci_record_reader;

void kvci_rec_i64(kvci_record* r, int64_t v);
void kvci_rec_f32s(kvci_record* r, const float* v, int64_t n);
void kvci_rec_bytes(kvci_record* r, const void* v, size_t n);
void kvci_rec_free(kvci_record* r);

int kvci_rec_get_i64(kvci_record_reader* r, int64_t* out);
/* The next value, which must be in [lo, hi]; -1 when missing or outside. */
int kvci_rec_get_range(kvci_record_reader* r, int64_t lo, int64_t hi, int64_t* out);
int kvci_rec_get_f32s(kvci_record_reader* r, float* out, int64_t n);
/* Points *out at the next n bytes of the record (no copy). */
int kvci_rec_get_bytes(kvci_record_reader* r, const unsigned char** out, size_t n);
static inline size_t kvci_rec_left(const kvci_record_reader* r) { return r->len - r->at; }

#endif /* KVC_CORE_PERSIST_RECORD_H */
