/*
 * core/persist/output.c: writing a file's frame (docs/file-format.md): the
 * file header, section headers, zero padding to 64 bytes, the table and the
 * footer, with their checksums. Payload checksums are computed as the bytes
 * pass, so nothing is read twice and nothing is buffered.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "persist_internal.h"

void kvci_out_fail(kvci_out* out, kvc_error* e) {
  if (!out->err)
    out->err = e;
  else
    kvc_error_destroy(e);
}

/* Hands bytes to the caller's sink; its refusal becomes KVC_ERROR_IO. */
static void emit(kvci_out* out, const void* data, size_t bytes) {
  if (out->err || !bytes) return;
  if (out->write(out->user, data, bytes)) {
    kvci_out_fail(out, kvci_err(KVC_ERROR_IO, "%s: the write callback refused %zu bytes at offset %llu", out->fn,
                                bytes, (unsigned long long)out->offset));
    return;
  }
  out->offset += bytes;
}

static void emit_zeros(kvci_out* out, uint64_t n) {
  static const unsigned char zeros[KVCF_ALIGN];
  while (n > 0 && !out->err) {
    size_t k = n < KVCF_ALIGN ? (size_t)n : KVCF_ALIGN;
    emit(out, zeros, k);
    n -= k;
  }
}

void kvci_out_file_header(kvci_out* out, uint32_t object, const unsigned char digest[16]) {
  unsigned char h[KVCF_HEADER_BYTES];
  memset(h, 0, sizeof h);
  memcpy(h, KVCF_MAGIC, 8);
  kvcf_put32(h + 8, KVCF_VERSION);
  kvcf_put32(h + 12, KVCF_HEADER_BYTES);
  kvcf_put32(h + 16, KVC_VERSION_MAJOR);
  kvcf_put32(h + 20, KVC_VERSION_MINOR);
  kvcf_put32(h + 24, KVC_VERSION_PATCH);
  kvcf_put32(h + 28, object);
  kvcf_put32(h + 32, KVCF_HASH_SPEC);
  memcpy(h + 40, digest, 16);
  kvcf_put32(h + 60, kvci_crc32c_update(0, h, 60));
  emit(out, h, sizeof h);
}

void kvci_out_begin(kvci_out* out, const kvcf_section* s) {
  if (out->err) return;
  if (out->count == out->cap) {
    size_t cap = out->cap ? out->cap * 2 : 64;
    kvci_table_entry* t = (kvci_table_entry*)realloc(out->table, cap * sizeof(*t));
    if (!t) {
      kvci_out_fail(out, kvci_err_oom());
      return;
    }
    out->table = t;
    out->cap = cap;
  }
  kvci_table_entry* e = &out->table[out->count];
  e->offset = out->offset;
  e->payload_bytes = s->payload_bytes;
  e->type = s->type;
  e->part = s->part;
  e->index = s->index;
  unsigned char h[KVCF_SECTION_HEADER_BYTES];
  memset(h, 0, sizeof h);
  kvcf_put32(h + 0, s->type);
  kvcf_put32(h + 4, s->part);
  kvcf_put32(h + 8, s->index);
  kvcf_put32(h + 12, s->sub);
  kvcf_put64(h + 16, s->payload_bytes);
  for (int i = 0; i < 4; i++) kvcf_put32(h + 24 + 4 * i, s->dims[i]);
  kvcf_put32(h + 40, s->dtype);
  kvcf_put32(h + 44, s->elem_bytes ? s->elem_bytes : 1);
  kvcf_put32(h + 60, kvci_crc32c_update(0, h, 60));
  emit(out, h, sizeof h);
  out->open = 1;
  out->declared = s->payload_bytes;
  out->written = 0;
  out->crc = 0;
}

void kvci_out_bytes(kvci_out* out, const void* data, size_t bytes) {
  if (out->err) return;
  if (!out->open || out->written + bytes > out->declared) {
    kvci_out_fail(out, kvci_err(KVC_ERROR_INTERNAL, "%s: a section's payload outgrew its declared %llu bytes",
                                out->fn, (unsigned long long)out->declared));
    return;
  }
  out->crc = kvci_crc32c_update(out->crc, data, bytes);
  out->written += bytes;
  emit(out, data, bytes);
}

void kvci_out_end(kvci_out* out) {
  if (out->err) return;
  if (out->written != out->declared) {
    kvci_out_fail(out, kvci_err(KVC_ERROR_INTERNAL, "%s: a section's payload has %llu of its declared %llu bytes",
                                out->fn, (unsigned long long)out->written, (unsigned long long)out->declared));
    return;
  }
  emit_zeros(out, kvcf_padded(out->written) - out->written);
  out->table[out->count++].crc = out->crc;
  out->open = 0;
}

void kvci_out_record(kvci_out* out, uint32_t type, uint32_t part, uint32_t index, kvci_record* rec) {
  if (rec->failed) kvci_out_fail(out, kvci_err_oom());
  kvcf_section s;
  memset(&s, 0, sizeof s);
  s.type = type, s.part = part, s.index = index, s.payload_bytes = rec->len;
  kvci_out_begin(out, &s);
  kvci_out_bytes(out, rec->bytes, rec->len);
  kvci_out_end(out);
  kvci_rec_free(rec);
}

int kvci_out_stage_open(kvci_out* out, const kvc_backend* backend, const kvc_exec* exec, kvc_device device,
                        kvci_stage* st) {
  kvc_error* e = kvci_stage_open(out->fn, backend, exec, device, out->staging_bytes, st);
  if (!e) return 0;
  kvci_out_fail(out, e);
  return -1;
}

kvc_error* kvci_out_finish(kvci_out* out) {
  uint64_t table_offset = out->offset;
  size_t n = out->count;
  unsigned char* t = out->err ? NULL : (unsigned char*)calloc(n ? n : 1, KVCF_TABLE_ENTRY_BYTES);
  if (!out->err && !t) kvci_out_fail(out, kvci_err_oom());
  for (size_t i = 0; t && i < n; i++) {
    unsigned char* e = t + i * KVCF_TABLE_ENTRY_BYTES;
    kvcf_put64(e + 0, out->table[i].offset);
    kvcf_put64(e + 8, out->table[i].payload_bytes);
    kvcf_put32(e + 16, out->table[i].type);
    kvcf_put32(e + 20, out->table[i].part);
    kvcf_put32(e + 24, out->table[i].index);
    kvcf_put32(e + 28, out->table[i].crc);
  }
  kvcf_section s;
  memset(&s, 0, sizeof s);
  s.type = KVCF_TABLE, s.payload_bytes = (uint64_t)n * KVCF_TABLE_ENTRY_BYTES;
  kvci_out_begin(out, &s);
  if (t) kvci_out_bytes(out, t, (size_t)s.payload_bytes);
  uint32_t table_crc = out->crc;
  if (!out->err) { /* the table is not its own entry: its checksum is the footer's */
    emit_zeros(out, kvcf_padded(out->written) - out->written);
    out->open = 0;
  }
  free(t);
  unsigned char f[KVCF_FOOTER_BYTES];
  memset(f, 0, sizeof f);
  memcpy(f, KVCF_FOOTER_MAGIC, 8);
  kvcf_put64(f + 8, table_offset);
  kvcf_put64(f + 16, (uint64_t)n);
  kvcf_put64(f + 24, out->offset + KVCF_FOOTER_BYTES);
  kvcf_put32(f + 32, table_crc);
  kvcf_put32(f + 60, kvci_crc32c_update(0, f, 60));
  emit(out, f, sizeof f);
  free(out->table);
  out->table = NULL;
  out->count = out->cap = 0;
  return out->err;
}
