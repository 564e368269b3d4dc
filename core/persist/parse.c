/*
 * core/persist/parse.c: a file's bytes checked (docs/file-format.md,
 * 'Reading'): the magic, the format version, the footer and the table, then
 * every section in file order: its header's checksum, its agreement with the
 * table, its payload's checksum and its zero padding. Every byte of a valid
 * file is covered by one of these checks, so any changed byte and any
 * truncation is refused, naming the part of the file and its offset. The
 * checksums of bulk (tensor) payloads are checked where the loader puts
 * them, in the new cache built aside (kvci_section_load), so a file's bulk
 * bytes are read once; kvci_file_check_rest checks the ones no loader read.
 */
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "persist_internal.h"
#include "read_file.h"

/* Bulk payloads no loader read are checked through a buffer of this size: a file is never held whole. */
#define WINDOW_BYTES ((size_t)8 << 20)

static kvc_error* corrupt(const char* fn, const char* what, unsigned long long offset, const char* detail) {
  return kvci_err(KVC_ERROR_IO, "%s: the file is corrupted or truncated: %s at offset %llu: %s", fn, what, offset,
                  detail);
}

static kvc_error* bad_crc(const char* fn, const char* what, unsigned long long offset, uint32_t stored,
                          uint32_t computed) {
  char detail[96];
  snprintf(detail, sizeof detail, "checksum 0x%08x (stored) vs 0x%08x (computed)", stored, computed);
  return corrupt(fn, what, offset, detail);
}

static void read_section_header(const unsigned char* h, kvcf_section* s) {
  s->type = kvcf_get32(h + 0);
  s->part = kvcf_get32(h + 4);
  s->index = kvcf_get32(h + 8);
  s->sub = kvcf_get32(h + 12);
  s->payload_bytes = kvcf_get64(h + 16);
  for (int i = 0; i < 4; i++) s->dims[i] = kvcf_get32(h + 24 + 4 * i);
  s->dtype = kvcf_get32(h + 40);
  s->elem_bytes = kvcf_get32(h + 44);
}

static int all_zero(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* "section 4 (KEYS, part 0, index 2)" */
static const char* section_name(char* buf, size_t n, size_t i, const kvcf_section* s) {
  char tag[5];
  snprintf(buf, n, "section %zu (%s, part %u, index %u)", i, kvcf_tag_name(s->type, tag), s->part, s->index);
  return buf;
}

/* The bytes [off, off + n) of the source: in place (a caller's buffer), else read into buf. */
static kvc_error* fetch(const kvci_source* src, uint64_t off, size_t n, unsigned char* buf, const unsigned char** out) {
  if ((*out = kvci_source_view(src, off))) return NULL;
  *out = buf;
  return kvci_source_read_aside(src, off, buf, n);
}

static kvc_error* check_header(const char* fn, const unsigned char* d, size_t len, kvci_file* f) {
  const size_t least = KVCF_HEADER_BYTES + KVCF_SECTION_HEADER_BYTES + KVCF_FOOTER_BYTES;
  if (len < 8 || memcmp(d, KVCF_MAGIC, 8))
    return kvci_err(KVC_ERROR_IO, "%s: not a kvcache file: %s", fn,
                    len < 8 ? "it is shorter than the 8-byte magic" : "the first 8 bytes are not the kvcache magic");
  if (len < 12) return corrupt(fn, "the file header", 0, "the file ends inside it");
  uint32_t version = kvcf_get32(d + 8);
  if (version != KVCF_VERSION)
    return kvci_err(KVC_ERROR_VERSION_MISMATCH, "%s: format version %u (file) vs %u (reader); this library reads version %u only",
                    fn, version, KVCF_VERSION, KVCF_VERSION);
  if (len < least) {
    char detail[96];
    snprintf(detail, sizeof detail, "the file is %zu bytes; a cache file has at least %zu", len, least);
    return corrupt(fn, "the file", 0, detail);
  }
  uint32_t crc = kvci_crc32c_update(0, d, 60);
  if (crc != kvcf_get32(d + 60)) return bad_crc(fn, "the file header", 0, kvcf_get32(d + 60), crc);
  f->object = kvcf_get32(d + 28);
  if (kvcf_get32(d + 12) != KVCF_HEADER_BYTES || f->object < KVCF_OBJECT_CACHE || f->object > KVCF_OBJECT_POOL_SEQUENCE)
    return corrupt(fn, "the file header", 0, "its header size or object kind is not one this reader knows");
  for (int i = 0; i < 3; i++) f->lib_version[i] = kvcf_get32(d + 16 + 4 * i);
  return NULL;
}

/* The footer and the table: *table_offset, *count and the table's entries. */
static kvc_error* check_footer(const char* fn, const kvci_source* src, size_t len, uint64_t* table_offset,
                               uint64_t* count, unsigned char** table_buf, const unsigned char** entries) {
  size_t at = len - KVCF_FOOTER_BYTES;
  unsigned char ft_buf[KVCF_FOOTER_BYTES], th_buf[KVCF_SECTION_HEADER_BYTES];
  const unsigned char *ft, *th;
  kvc_error* e = fetch(src, at, KVCF_FOOTER_BYTES, ft_buf, &ft);
  if (e) return e;
  if (memcmp(ft, KVCF_FOOTER_MAGIC, 8))
    return corrupt(fn, "the footer", at, "the last 64 bytes are not a footer (a truncated file?)");
  uint32_t crc = kvci_crc32c_update(0, ft, 60);
  if (crc != kvcf_get32(ft + 60)) return bad_crc(fn, "the footer", at, kvcf_get32(ft + 60), crc);
  uint64_t file_bytes = kvcf_get64(ft + 24);
  if (file_bytes != len) {
    char detail[96];
    snprintf(detail, sizeof detail, "the file should be %llu bytes but is %zu", (unsigned long long)file_bytes, len);
    return corrupt(fn, "the footer", at, detail);
  }
  *table_offset = kvcf_get64(ft + 8);
  *count = kvcf_get64(ft + 16);
  uint64_t t = *table_offset;
  if (t % KVCF_ALIGN || t < KVCF_HEADER_BYTES || t > at - KVCF_SECTION_HEADER_BYTES ||
      *count > (at - t) / KVCF_TABLE_ENTRY_BYTES)
    return corrupt(fn, "the footer", at, "its table offset or section count is outside the file");
  if ((e = fetch(src, t, KVCF_SECTION_HEADER_BYTES, th_buf, &th))) return e;
  crc = kvci_crc32c_update(0, th, 60);
  if (crc != kvcf_get32(th + 60)) return bad_crc(fn, "the table's section header", t, kvcf_get32(th + 60), crc);
  kvcf_section s;
  read_section_header(th, &s);
  uint64_t payload = *count * KVCF_TABLE_ENTRY_BYTES;
  if (s.type != KVCF_TABLE || s.payload_bytes != payload ||
      t + KVCF_SECTION_HEADER_BYTES + kvcf_padded(payload) != at)
    return corrupt(fn, "the table's section header", t, "it does not describe the table the footer points at");
  if (!kvci_source_view(src, 0) && !(*table_buf = (unsigned char*)malloc(kvcf_padded(payload) ? kvcf_padded(payload) : 1)))
    return kvci_err_oom();
  if ((e = fetch(src, t + KVCF_SECTION_HEADER_BYTES, kvcf_padded(payload), *table_buf, entries))) return e;
  crc = kvci_crc32c_update(0, *entries, (size_t)payload);
  if (crc != kvcf_get32(ft + 32)) return bad_crc(fn, "the table", t + KVCF_SECTION_HEADER_BYTES, kvcf_get32(ft + 32), crc);
  if (!all_zero(*entries + payload, (size_t)(kvcf_padded(payload) - payload)))
    return corrupt(fn, "the table's padding", t + KVCF_SECTION_HEADER_BYTES + payload, "padding must be zero");
  return NULL;
}

/* Whether a section's payload is bulk (tensor bytes). The checks leave those alone but for their padding: the
 * loader reads them once, straight into the new cache's memory, and checks their checksums there
 * (kvci_file_payload_checked); kvci_file_check_rest checks any the loader did not read. */
static int is_bulk(uint32_t type) {
  return type == KVCF_KEYS || type == KVCF_VALUES || type == KVCF_ROWS || type == KVCF_BLOCKS ||
         type == KVCF_RECURRENT;
}

/* Section i at `at`: its header, its agreement with table entry `e`, its padding and (not bulk) its payload's
 * checksum; a file's payloads that are not bulk are kept (out->owned). */
static kvc_error* check_section(const char* fn, const kvci_source* src, uint64_t at, uint64_t end, size_t i,
                                const unsigned char* e, kvci_file_section* out) {
  char name[96];
  if (kvcf_get64(e) != at || at + KVCF_SECTION_HEADER_BYTES > end) {
    snprintf(name, sizeof name, "section %zu", i);
    return corrupt(fn, name, at, "the table places it elsewhere");
  }
  unsigned char h_buf[KVCF_SECTION_HEADER_BYTES];
  const unsigned char* h;
  kvc_error* err = fetch(src, at, KVCF_SECTION_HEADER_BYTES, h_buf, &h);
  if (err) return err;
  read_section_header(h, &out->h);
  section_name(name, sizeof name, i, &out->h);
  uint32_t crc = kvci_crc32c_update(0, h, 60);
  if (crc != kvcf_get32(h + 60)) return bad_crc(fn, name, at, kvcf_get32(h + 60), crc);
  const kvcf_section* s = &out->h;
  if (s->type != kvcf_get32(e + 16) || s->part != kvcf_get32(e + 20) || s->index != kvcf_get32(e + 24) ||
      s->payload_bytes != kvcf_get64(e + 8))
    return corrupt(fn, name, at, "its header and its table entry disagree");
  uint64_t room = end - at - KVCF_SECTION_HEADER_BYTES;
  if (s->payload_bytes > room || kvcf_padded(s->payload_bytes) > room)
    return corrupt(fn, name, at, "its payload runs past the table");
  out->offset = at;
  out->crc = kvcf_get32(e + 28);
  const uint64_t from = at + KVCF_SECTION_HEADER_BYTES, padded = kvcf_padded(s->payload_bytes);
  const unsigned char* p;
  unsigned char pad_buf[KVCF_ALIGN];
  if (is_bulk(s->type)) { /* only the padding now */
    out->payload = kvci_source_view(src, from);
    if ((err = fetch(src, from + s->payload_bytes, (size_t)(padded - s->payload_bytes), pad_buf, &p))) return err;
    if (!all_zero(p, (size_t)(padded - s->payload_bytes)))
      return corrupt(fn, name, from + s->payload_bytes, "its padding must be zero");
    return NULL;
  }
  if (!kvci_source_view(src, 0) && !(out->owned = (unsigned char*)malloc(padded ? (size_t)padded : 1)))
    return kvci_err_oom();
  if ((err = fetch(src, from, (size_t)padded, out->owned, &p))) return err;
  out->payload = p;
  out->verified = 1;
  crc = kvci_crc32c_update(0, p, (size_t)s->payload_bytes);
  if (crc != out->crc) return bad_crc(fn, name, from, out->crc, crc);
  if (!all_zero(p + s->payload_bytes, (size_t)(padded - s->payload_bytes)))
    return corrupt(fn, name, from + s->payload_bytes, "its padding must be zero");
  return NULL;
}

kvc_error* kvci_file_payload_checked(const char* fn, const kvci_file* f, const kvci_file_section* s, uint32_t crc) {
  char name[96];
  size_t i = (size_t)(s - f->sections);
  section_name(name, sizeof name, i, &s->h);
  const uint64_t from = s->offset + KVCF_SECTION_HEADER_BYTES;
  if (crc == s->crc) {
    f->sections[i].verified = 1;
    return NULL;
  }
  kvc_error* changed = kvci_source_unchanged(f->src);
  if (!changed) return bad_crc(fn, name, from, s->crc, crc);
  kvc_error_destroy(changed);
  return kvci_source_changed(f->src, name, from);
}

kvc_error* kvci_file_check_rest(const char* fn, const kvci_file* f) {
  unsigned char* window = NULL;
  kvc_error* e = NULL;
  for (size_t i = 0; !e && i < f->count; i++) {
    const kvci_file_section* s = &f->sections[i];
    if (s->verified) continue;
    const uint64_t from = s->offset + KVCF_SECTION_HEADER_BYTES;
    uint32_t crc = 0;
    for (uint64_t done = 0; !e && done < s->h.payload_bytes;) {
      size_t n = (size_t)(s->h.payload_bytes - done < WINDOW_BYTES ? s->h.payload_bytes - done : WINDOW_BYTES);
      const unsigned char* p;
      if (!kvci_source_view(f->src, 0) && !window && !(window = (unsigned char*)malloc(WINDOW_BYTES))) {
        e = kvci_err_oom();
        break;
      }
      if (!(e = fetch(f->src, from + done, n, window, &p))) crc = kvci_crc32c_update(crc, p, n);
      done += n;
    }
    if (!e) e = kvci_file_payload_checked(fn, f, s, crc);
  }
  free(window);
  return e;
}

/* Sections by identity (type, part, index, sub), then file order. */
static int by_identity(const void* pa, const void* pb) {
  const kvci_file_section *a = *(const kvci_file_section* const*)pa, *b = *(const kvci_file_section* const*)pb;
  const uint32_t ka[4] = {a->h.type, a->h.part, a->h.index, a->h.sub}, kb[4] = {b->h.type, b->h.part, b->h.index, b->h.sub};
  for (int i = 0; i < 4; i++)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* Every section names one thing: a second section of the same type, part, index and sub is refused (a reader that
 * took the first would let a file say two things). */
static kvc_error* check_unique(const char* fn, const kvci_file* f) {
  if (f->count < 2) return NULL;
  const kvci_file_section** order = (const kvci_file_section**)malloc(f->count * sizeof(*order));
  if (!order) return kvci_err_oom();
  for (size_t i = 0; i < f->count; i++) order[i] = &f->sections[i];
  qsort(order, f->count, sizeof(*order), by_identity);
  kvc_error* e = NULL;
  for (size_t i = 1; i < f->count && !e; i++) {
    const kvcf_section *a = &order[i - 1]->h, *b = &order[i]->h;
    if (a->type == b->type && a->part == b->part && a->index == b->index && a->sub == b->sub) {
      char name[96], detail[160];
      section_name(name, sizeof name, (size_t)(order[i] - f->sections), b);
      snprintf(detail, sizeof detail, "it repeats section %zu (same type, part %u, index %u and sub %u); each "
               "section may appear once", (size_t)(order[i - 1] - f->sections), b->part, b->index, b->sub);
      e = corrupt(fn, name, order[i]->offset, detail);
    }
  }
  free(order);
  return e;
}

kvc_error* kvci_file_parse(const char* fn, const kvci_source* src, kvci_file* f) {
  memset(f, 0, sizeof *f);
  f->src = src;
  const size_t len = src->len;
  unsigned char head_buf[KVCF_HEADER_BYTES];
  const unsigned char* head;
  kvc_error* e = fetch(src, 0, len < KVCF_HEADER_BYTES ? len : KVCF_HEADER_BYTES, head_buf, &head);
  if (!e) e = check_header(fn, head, len, f);
  uint64_t table_offset = 0, count = 0;
  unsigned char* table_buf = NULL;
  const unsigned char* entries = NULL;
  if (!e) e = check_footer(fn, src, len, &table_offset, &count, &table_buf, &entries);
  if (!e && !(f->sections = (kvci_file_section*)calloc(count ? (size_t)count : 1, sizeof(*f->sections))))
    e = kvci_err_oom();
  if (!e) f->count = (size_t)count; /* from here on kvci_file_free releases the kept payloads */
  uint64_t at = KVCF_HEADER_BYTES;
  for (size_t i = 0; !e && i < count; i++) {
    e = check_section(fn, src, at, table_offset, i, entries + i * KVCF_TABLE_ENTRY_BYTES, &f->sections[i]);
    at += KVCF_SECTION_HEADER_BYTES + kvcf_padded(f->sections[i].h.payload_bytes);
  }
  free(table_buf);
  if (!e && at != table_offset) e = corrupt(fn, "the sections", at, "they end before the table starts");
  if (!e) e = check_unique(fn, f);
  if (!e) e = kvci_source_unchanged(src);
  if (e) kvci_file_free(f);
  kvci_source_advise(src, 1); /* the loaders read the payloads in order next */
  return e;
}

void kvci_file_free(kvci_file* f) {
  for (size_t i = 0; i < f->count; i++) free(f->sections[i].owned);
  free(f->sections);
  memset(f, 0, sizeof *f);
}

const kvci_file_section* kvci_file_find(const kvci_file* f, uint32_t type, uint32_t part, uint32_t index,
                                        uint32_t sub) {
  for (size_t i = 0; i < f->count; i++) {
    const kvcf_section* s = &f->sections[i].h;
    if (s->type == type && s->part == part && s->index == index && s->sub == sub) return &f->sections[i];
  }
  return NULL;
}
