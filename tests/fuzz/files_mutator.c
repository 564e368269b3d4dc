/* files_mutator.c: see files_mutator.h. The layout constants are docs/file-format.md's and docs/tiers.md's. */
#include "files_mutator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FM_ALIGN = 64, FM_HEAD = 64, FM_FOOT = 64, FM_ENTRY = 32, FM_FRAME_HEAD = 96 };
#define FM_TABLE 0x4C424154u /* "TABL" */

static const unsigned char file_magic[8] = {0x89, 'K', 'V', 'C', '\r', '\n', 0x1A, '\n'};
static const unsigned char footer_magic[8] = {'K', 'V', 'C', 'E', 'N', 'D', '\r', '\n'};

uint32_t fm_crc32c(uint32_t crc, const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  crc = ~crc;
  while (n--) {
    crc ^= *p++;
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

static uint32_t get32(const unsigned char* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char* p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char* p, uint64_t v) {
  put32(p, (uint32_t)v);
  put32(p + 4, (uint32_t)(v >> 32));
}
static size_t padded(size_t n) { return (n + FM_ALIGN - 1) / FM_ALIGN * FM_ALIGN; }

static int push(fm_file* f, const fm_section* s) {
  if (f->count == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 16;
    fm_section* p = (fm_section*)realloc(f->sections, cap * sizeof *p);
    if (!p) return -1;
    f->sections = p;
    f->cap = cap;
  }
  f->sections[f->count++] = *s;
  return 0;
}

int fm_parse(const unsigned char* d, size_t len, fm_file* f) {
  memset(f, 0, sizeof *f);
  if (len < FM_HEAD + FM_FOOT || memcmp(d, file_magic, 8)) return -1;
  memcpy(f->header, d, FM_HEAD);
  const unsigned char* ft = d + len - FM_FOOT;
  uint64_t table = get64(ft + 8), count = get64(ft + 16), at = FM_HEAD;
  if (table > len) return -1;
  for (uint64_t i = 0; i < count; i++) {
    if (at + FM_HEAD > table) goto bad;
    const unsigned char* h = d + at;
    fm_section s;
    memset(&s, 0, sizeof s);
    s.type = get32(h), s.part = get32(h + 4), s.index = get32(h + 8), s.sub = get32(h + 12);
    s.len = (size_t)get64(h + 16);
    for (int k = 0; k < 4; k++) s.dims[k] = get32(h + 24 + 4 * k);
    s.dtype = get32(h + 40), s.elem_bytes = get32(h + 44);
    if (s.len > table - at - FM_HEAD) goto bad;
    s.payload = (unsigned char*)malloc(s.len ? s.len : 1);
    if (!s.payload) goto bad;
    memcpy(s.payload, h + FM_HEAD, s.len);
    if (push(f, &s)) {
      free(s.payload);
      goto bad;
    }
    at += FM_HEAD + padded(s.len);
  }
  return 0;
bad:
  fm_free(f);
  return -1;
}

void fm_free(fm_file* f) {
  for (size_t i = 0; i < f->count; i++) free(f->sections[i].payload);
  free(f->sections);
  memset(f, 0, sizeof *f);
}

static void section_header(unsigned char* h, uint32_t type, uint32_t part, uint32_t index, uint32_t sub,
                           uint64_t bytes, const uint32_t dims[4], uint32_t dtype, uint32_t elem) {
  memset(h, 0, FM_HEAD);
  put32(h, type), put32(h + 4, part), put32(h + 8, index), put32(h + 12, sub);
  put64(h + 16, bytes);
  for (int k = 0; k < 4; k++) put32(h + 24 + 4 * k, dims ? dims[k] : 0);
  put32(h + 40, dtype), put32(h + 44, elem);
  put32(h + 60, fm_crc32c(0, h, 60));
}

unsigned char* fm_write(const fm_file* f, size_t* len) {
  size_t total = FM_HEAD;
  for (size_t i = 0; i < f->count; i++) total += FM_HEAD + padded(f->sections[i].len);
  size_t table_at = total, table_bytes = f->count * FM_ENTRY;
  total += FM_HEAD + padded(table_bytes) + FM_FOOT;
  unsigned char* out = (unsigned char*)calloc(1, total);
  if (!out) return NULL;
  memcpy(out, f->header, FM_HEAD);
  put32(out + 60, fm_crc32c(0, out, 60));
  unsigned char* table = out + table_at + FM_HEAD;
  size_t at = FM_HEAD;
  for (size_t i = 0; i < f->count; i++) {
    const fm_section* s = &f->sections[i];
    section_header(out + at, s->type, s->part, s->index, s->sub, s->len, s->dims, s->dtype, s->elem_bytes);
    memcpy(out + at + FM_HEAD, s->payload, s->len);
    unsigned char* e = table + i * FM_ENTRY;
    put64(e, at), put64(e + 8, s->len), put32(e + 16, s->type), put32(e + 20, s->part), put32(e + 24, s->index);
    put32(e + 28, fm_crc32c(0, s->payload, s->len));
    at += FM_HEAD + padded(s->len);
  }
  section_header(out + table_at, FM_TABLE, 0, 0, 0, table_bytes, NULL, 0, 1);
  unsigned char* ft = out + total - FM_FOOT;
  memcpy(ft, footer_magic, 8);
  put64(ft + 8, table_at), put64(ft + 16, f->count), put64(ft + 24, total);
  put32(ft + 32, fm_crc32c(0, table, table_bytes));
  put32(ft + 60, fm_crc32c(0, ft, 60));
  *len = total;
  return out;
}

/* ---------------------------------------------------------------- values */

/* A new value for a field that held `old`: near it, scaled, a boundary, or anything. */
static int64_t new_value(reader* in, int64_t old) {
  uint64_t o = (uint64_t)old; /* wrapping arithmetic: any result is a value to try */
  switch (rd(in) % 12) {
    case 0: return (int64_t)(o + 1);
    case 1: return (int64_t)(o - 1);
    case 2: return (int64_t)(o * 2);
    case 3: return old / 2;
    case 4: return 0;
    case 5: return 1;
    case 6: return (int64_t)(o + (uint64_t)rd_range(in, 2, 70));
    case 7: return (int64_t)(o - (uint64_t)rd_range(in, 2, 70));
    case 8: return rd_range(in, 0, 300);
    case 9: return (int64_t)((uint64_t)1 << rd_range(in, 8, 62));
    case 10: return -rd_range(in, 1, 5);
    default: return (int64_t)(uint32_t)rd(in) << 24 | (int64_t)rd(in) << 8 | rd(in);
  }
}

static char tag_char(uint32_t t, int i) {
  char c = (char)(t >> (8 * i));
  return c >= 32 && c < 127 ? c : '?';
}

/* Appends "section i (TYPE part p index x sub s): what" to the log. */
static void note(char* log, size_t n, const fm_section* s, size_t i, const char* what) {
  size_t used = strlen(log);
  if (used >= n) return;
  snprintf(log + used, n - used, "section %zu (%c%c%c%c part %u index %u sub %u): %s\n", i, tag_char(s->type, 0),
           tag_char(s->type, 1), tag_char(s->type, 2), tag_char(s->type, 3), s->part, s->index, s->sub, what);
}

/* A section header field. */
static void mutate_header_field(fm_section* s, size_t i, reader* in, char* log, size_t n) {
  static const char* names[] = {"part", "index", "sub", "dims[0]", "dims[1]", "dims[2]", "dims[3]", "dtype",
                                "elem_bytes", "type"};
  int field = (int)(rd(in) % 10);
  uint32_t* p[] = {&s->part, &s->index, &s->sub, &s->dims[0], &s->dims[1], &s->dims[2], &s->dims[3],
                   &s->dtype, &s->elem_bytes, &s->type};
  uint32_t old = *p[field];
  if (field == 9) {
    static const uint32_t tags[] = {0x54525046u, 0x41545343u, 0x5259414Cu, 0x5359454Bu, 0x534C4156u,
                                    0x53574F52u, 0x4154534Bu, 0x43454445u, 0x51455350u, 0x534B4C42u, 0x53434552u};
    *p[field] = tags[rd(in) % (sizeof tags / sizeof tags[0])];
  } else {
    *p[field] = (uint32_t)new_value(in, old);
  }
  char what[96];
  snprintf(what, sizeof what, "header %s %u -> %u", names[field], old, *p[field]);
  note(log, n, s, i, what);
}

/* An int64 of the payload (records are int64 runs; tensor payloads take it as 8 bytes of data). */
static void mutate_word(fm_section* s, size_t i, reader* in, char* log, size_t n) {
  size_t words = s->len / 8;
  if (!words) return;
  size_t w = (size_t)rd_range(in, 0, (int64_t)words - 1);
  int64_t old = (int64_t)get64(s->payload + 8 * w), v = new_value(in, old);
  put64(s->payload + 8 * w, (uint64_t)v);
  char what[96];
  snprintf(what, sizeof what, "payload int64 %zu %lld -> %lld", w, (long long)old, (long long)v);
  note(log, n, s, i, what);
}

/* The payload's length: cut, or grown with a copy of its own tail or zeros. */
static void mutate_length(fm_section* s, size_t i, reader* in, char* log, size_t n) {
  size_t old = s->len, len;
  switch (rd(in) % 4) {
    case 0: len = old >= 8 ? old - 8 : 0; break;
    case 1: len = old + 8; break;
    case 2: len = old / 2; break;
    default: len = old + (size_t)rd_range(in, 1, 4096); break;
  }
  unsigned char* p = (unsigned char*)realloc(s->payload, len ? len : 1);
  if (!p) return;
  if (len > old) {
    memset(p + old, 0, len - old);
    if (old >= 8)
      for (size_t k = old; k + 8 <= len; k += 8) memcpy(p + k, p + old - 8, 8);
  }
  s->payload = p;
  s->len = len;
  char what[96];
  snprintf(what, sizeof what, "payload bytes %zu -> %zu", old, len);
  note(log, n, s, i, what);
}

static void list_op(fm_file* f, reader* in, char* log, size_t n) {
  size_t i = (size_t)rd_range(in, 0, (int64_t)f->count - 1), j = (size_t)rd_range(in, 0, (int64_t)f->count - 1);
  fm_section* s = &f->sections[i];
  switch (rd(in) % 3) {
    case 0: { /* duplicate i at the end (a second copy, same identity) */
      fm_section c = *s;
      c.payload = (unsigned char*)malloc(s->len ? s->len : 1);
      if (!c.payload) return;
      memcpy(c.payload, s->payload, s->len);
      if (push(f, &c)) {
        free(c.payload);
        return;
      }
      note(log, n, &f->sections[i], i, "duplicated at the end");
      return;
    }
    case 1:
      note(log, n, s, i, "dropped");
      free(s->payload);
      memmove(s, s + 1, (f->count - i - 1) * sizeof *s);
      f->count--;
      return;
    default: {
      fm_section t = f->sections[i];
      f->sections[i] = f->sections[j];
      f->sections[j] = t;
      note(log, n, &f->sections[j], j, "swapped with another");
      return;
    }
  }
}

void fm_mutate(fm_file* f, reader* in, int max, char* log, size_t n) {
  int count = (int)rd_range(in, 1, max);
  for (int m = 0; m < count && f->count; m++) {
    int op = (int)(rd(in) % 16);
    if (op == 15) {
      uint32_t old = get32(f->header + 28), v = (uint32_t)rd_range(in, 1, 3);
      put32(f->header + 28, v);
      size_t used = strlen(log);
      if (used < n) snprintf(log + used, n - used, "file header object %u -> %u\n", old, v);
      continue;
    }
    if (op == 14) {
      list_op(f, in, log, n);
      continue;
    }
    size_t i = (size_t)rd_range(in, 0, (int64_t)f->count - 1);
    if (op < 4)
      mutate_header_field(&f->sections[i], i, in, log, n);
    else if (op < 12)
      mutate_word(&f->sections[i], i, in, log, n);
    else
      mutate_length(&f->sections[i], i, in, log, n);
  }
}

/* ---------------------------------------------------------------- frames */

/* The 32-bit field of the frame at byte `at` given a new value; the log names it `name`. */
static void mutate_frame_u32(unsigned char* f, size_t at, const char* name, reader* in, char* log, size_t used,
                             size_t n) {
  uint32_t old = get32(f + at), v = (uint32_t)new_value(in, old);
  put32(f + at, v);
  if (used < n) snprintf(log + used, n - used, "frame %s %u -> %u\n", name, old, v);
}

void fm_mutate_frame(unsigned char** frame, size_t* len, reader* in, char* log, size_t n) {
  unsigned char* f = *frame;
  size_t used = strlen(log);
  if (*len < FM_FRAME_HEAD + 4) return;
  switch (rd(in) % 5) {
    case 0: { /* the payload length field */
      uint64_t old = get64(f + 80), v = (uint64_t)new_value(in, (int64_t)old);
      put64(f + 80, v);
      if (used < n) snprintf(log + used, n - used, "frame payload bytes %llu -> %llu\n", (unsigned long long)old,
                             (unsigned long long)v);
      break;
    }
    case 1:
      mutate_frame_u32(f, 88, "layers", in, log, used, n);
      break;
    case 2: { /* the key's group or a hash byte */
      size_t at = 8 + (size_t)rd_range(in, 0, 71);
      unsigned char old = f[at];
      f[at] = (unsigned char)(old ^ (1u + rd(in) % 255u));
      if (used < n) snprintf(log + used, n - used, "frame key byte %zu %u -> %u\n", at - 8, old, f[at]);
      break;
    }
    case 3:
      mutate_frame_u32(f, 4, "version", in, log, used, n);
      break;
    default: { /* the frame's length (the payload cut or grown) */
      size_t nl = rd(in) & 1 ? *len - 4 - (size_t)rd_range(in, 1, (int64_t)(*len - FM_FRAME_HEAD - 4)) : *len + 64;
      unsigned char* p = (unsigned char*)realloc(f, nl);
      if (!p) return;
      if (nl > *len) memset(p + *len, 0, nl - *len);
      if (used < n) snprintf(log + used, n - used, "frame length %zu -> %zu\n", *len, nl);
      *frame = f = p;
      *len = nl;
      break;
    }
  }
  if (*len >= 4) put32(f + *len - 4, fm_crc32c(0, f, *len - 4));
}
