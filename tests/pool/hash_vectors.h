/*
 * hash_vectors.h: reading the vector files of tests/pool (written by
 * make_block_hash_vectors.py): the folder from argv, a whole file, lines cut
 * into space-separated fields in place, hex bytes and hex dumps for messages.
 * Everything is static: one translation unit per test includes it.
 */
#ifndef KVC_TESTS_POOL_HASH_VECTORS_H
#define KVC_TESTS_POOL_HASH_VECTORS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "test_util.h"

/* The folder of the vector files: argv[1] (CTest passes tests/pool), else the folder of `file` (a __FILE__). */
static TU_UNUSED const char* hv_folder(int argc, char** argv, const char* file, char* buf, size_t size) {
  if (argc > 1) return argv[1];
  snprintf(buf, size, "%s", file);
  char* slash = strrchr(buf, '/');
  if (slash) *slash = '\0';
  else snprintf(buf, size, ".");
  return buf;
}

/* The folder of the vector files, once hv_main has run. */
static TU_UNUSED const char* hv_dir;

/* One test function of a vector test, with its name (HV_TEST). */
typedef struct hv_test {
  const char* name;
  void (*run)(void);
} hv_test;
#define HV_TEST(fn) {#fn, fn}

/* The main of a vector test: hv_dir from argv and `file` (hv_folder), then each test as TU_RUN runs one. */
static TU_UNUSED int hv_main(int argc, char** argv, const char* file, const hv_test* tests, size_t n) {
  static char buf[4096];
  hv_dir = hv_folder(argc, argv, file, buf, sizeof buf);
  for (size_t i = 0; i < n; i++) {
    long before = tu_failures_total;
    tu_current_test = tests[i].name;
    tests[i].run();
    printf("%s %s\n", tu_failures_total == before ? "[  OK  ]" : "[ FAIL ]", tests[i].name);
    fflush(stdout);
  }
  return tu_finish();
}

/* The whole file folder/name, NUL-terminated, to free(); NULL (and a message) when it cannot be read. */
static TU_UNUSED char* hv_read_file(const char* folder, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", folder, name);
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return NULL;
  }
  size_t cap = 1 << 16, len = 0;
  char* text = (char*)malloc(cap);
  while (text) {
    len += fread(text + len, 1, cap - 1 - len, f);
    if (len < cap - 1) break;
    char* bigger = (char*)realloc(text, cap * 2);
    if (!bigger) free(text);
    text = bigger;
    cap *= 2;
  }
  int failed = ferror(f);
  fclose(f);
  if (!text || failed) {
    fprintf(stderr, "cannot read %s\n", path);
    free(text);
    return NULL;
  }
  text[len] = '\0';
  return text;
}

/* The next line of *cursor, NUL-terminated in place (the '\n' replaced); NULL at the end. */
static TU_UNUSED char* hv_next_line(char** cursor) {
  char* line = *cursor;
  if (!line || !*line) return NULL;
  char* nl = strchr(line, '\n');
  if (nl) {
    *nl = '\0';
    *cursor = nl + 1;
  } else {
    *cursor = line + strlen(line);
  }
  return line;
}

/* Cuts `line` at single spaces into at most `max` fields; returns how many there are (more than max: max + 1). */
static TU_UNUSED int hv_fields(char* line, char** fields, int max) {
  int n = 0;
  for (char* p = line; p;) {
    if (n == max) return max + 1;
    fields[n++] = p;
    p = strchr(p, ' ');
    if (p) *p++ = '\0';
  }
  return n;
}

/*
 * Runs `check` on every vector of the file `name` in `folder` (lines that are not comments or empty): each must have
 * `nfields` (< 16) space-separated fields, the first `kind`. Prints and returns how many ran; -1 when the file
 * cannot be read (a failed check).
 */
static TU_UNUSED int hv_each_vector(const char* folder, const char* name, const char* kind, int nfields,
                                    void (*check)(char** fields)) {
  char* text = hv_read_file(folder, name);
  if (!CHECK(text != NULL)) return -1;
  char* cursor = text;
  int vectors = 0;
  for (char* line; (line = hv_next_line(&cursor));) {
    if (line[0] == '#' || !line[0]) continue;
    char* f[16];
    if (CHECK_EQ_I64(hv_fields(line, f, nfields), nfields) && CHECK(strcmp(f[0], kind) == 0)) {
      check(f);
      vectors++;
    }
  }
  printf("%s: %d %s vectors\n", name, vectors, kind);
  free(text);
  return vectors;
}

static TU_UNUSED int hv_nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/*
 * Lowercase hex ("-" = no bytes) into a malloc'd buffer (never NULL on success, even when empty) and *len.
 * Returns NULL on a malformed field.
 */
static TU_UNUSED uint8_t* hv_hex(const char* hex, size_t* len) {
  size_t chars = strcmp(hex, "-") == 0 ? 0 : strlen(hex);
  if (chars % 2) return NULL;
  uint8_t* out = (uint8_t*)malloc(chars / 2 + 1);
  if (!out) return NULL;
  for (size_t i = 0; i < chars / 2; i++) {
    int hi = hv_nibble(hex[2 * i]), lo = hv_nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      free(out);
      return NULL;
    }
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  *len = chars / 2;
  return out;
}

/* "1,2,3" ("-" = none) into a malloc'd array (never NULL on success) and *n; NULL when malformed or out of int32. */
static TU_UNUSED int32_t* hv_tokens(const char* s, size_t* n) {
  size_t count = strcmp(s, "-") == 0 ? 0 : 1;
  for (const char* p = s; count && *p; p++) count += *p == ',';
  int32_t* out = (int32_t*)malloc((count + 1) * sizeof *out);
  if (!out) return NULL;
  const char* p = s;
  for (size_t i = 0; i < count; i++) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0')) {
      free(out);
      return NULL;
    }
    out[i] = (int32_t)v;
    p = end + 1;
  }
  *n = count;
  return out;
}

/* "OFFSET:LENGTH:HEX,..." ("-" = none) into items whose hashes point into *bytes (to free); -1 when malformed. */
static TU_UNUSED long hv_items(char* s, kvc_pool_mm_item* items, long cap, uint8_t** bytes) {
  *bytes = (uint8_t*)malloc(strlen(s) / 2 + 1);
  if (strcmp(s, "-") == 0) return 0;
  long n = 0;
  size_t used = 0;
  for (char* it = strtok(s, ","); it; it = strtok(NULL, ",")) {
    unsigned long long off, len;
    int at = 0;
    if (n == cap || sscanf(it, "%llu:%llu:%n", &off, &len, &at) != 2 || !at) return -1;
    size_t hl = 0;
    uint8_t* h = hv_hex(it + at, &hl);
    if (!h) return -1;
    memcpy(*bytes + used, h, hl);
    free(h);
    items[n] = (kvc_pool_mm_item){*bytes + used, hl, off, len};
    used += hl;
    n++;
  }
  return n;
}

/* The i-th comma-separated field of `list` into `out` (cap bytes); 0 when there is none. */
static TU_UNUSED int hv_nth_field(const char* list, size_t i, char* out, size_t cap) {
  const char* p = list;
  for (size_t k = 0; k < i; k++) {
    p = strchr(p, ',');
    if (!p) return 0;
    p++;
  }
  size_t len = strcspn(p, ",");
  if (len >= cap) return 0;
  memcpy(out, p, len);
  out[len] = '\0';
  return 1;
}

/* Exactly 32 bytes of hex into out; 0 when the field is anything else. */
static TU_UNUSED int hv_hash(const char* hex, uint8_t out[32]) {
  size_t len = 0;
  uint8_t* b = hv_hex(hex, &len);
  int ok = b && len == 32;
  if (ok) memcpy(out, b, 32);
  free(b);
  return ok;
}

/* bytes as lowercase hex into out (2 * n + 1 chars), for failure messages. */
static TU_UNUSED const char* hv_dump(const uint8_t* bytes, size_t n, char* out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
  out[2 * n] = '\0';
  return out;
}

/* Counts one check: `got` equals `want` (32 bytes); on failure prints both in hex with `what` and the vector's name. */
static TU_UNUSED int hv_check_hash(const uint8_t* got, const uint8_t* want, const char* what, const char* name,
                                   const char* file, int line) {
  char g[65], w[65], msg[256];
  snprintf(msg, sizeof msg, "%s of %s: got %s, want %s", what, name, hv_dump(got, 32, g), hv_dump(want, 32, w));
  return tu_report(memcmp(got, want, 32) == 0, file, line, msg);
}
#define CHECK_HASH(got, want, what, name) hv_check_hash((got), (want), (what), (name), __FILE__, __LINE__)

/* The sequence keys of a `pool` or `vllm` vector, from its field 2 on: seed, salt, adapter key, the adapter path
 * (vllm only), multimodal items, block size, tokens. */
typedef struct hv_keys {
  uint8_t *seed, *salt, *adapter, *path;
  size_t seed_len, salt_len, adapter_len, path_len;
  kvc_pool_mm_item items[16];
  uint8_t* item_bytes;
  long num_items;
  long bs;
  int32_t* tokens;
  size_t n;
} hv_keys;

/* Parses the keys (with_path: the vector has an adapter path); 1 when every field parsed. The fields after
 * them start at f[with_path ? 9 : 8]. */
static TU_UNUSED int hv_keys_read(char** f, int with_path, hv_keys* k) {
  memset(k, 0, sizeof *k);
  k->seed = hv_hex(f[2], &k->seed_len);
  k->salt = hv_hex(f[3], &k->salt_len);
  k->adapter = hv_hex(f[4], &k->adapter_len);
  if (with_path) k->path = hv_hex(f[5], &k->path_len);
  f += with_path;
  k->num_items = hv_items(f[5], k->items, 16, &k->item_bytes);
  k->bs = atol(f[6]);
  k->tokens = hv_tokens(f[7], &k->n);
  return k->seed && k->salt && k->adapter && (k->path || !with_path) && k->num_items >= 0 && k->bs >= 1 &&
         k->tokens;
}

/* The sequence options of the keys (they point into k). */
static TU_UNUSED kvc_pool_sequence_options hv_keys_options(const hv_keys* k) {
  kvc_pool_sequence_options o = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  o.salt = k->salt, o.salt_len = k->salt_len, o.adapter_key = k->adapter, o.adapter_key_len = k->adapter_len;
  o.adapter_path = k->path, o.adapter_path_len = k->path_len;
  o.mm_items = k->items, o.num_mm_items = (size_t)k->num_items;
  return o;
}

static TU_UNUSED void hv_keys_free(hv_keys* k) {
  free(k->seed), free(k->salt), free(k->adapter), free(k->path), free(k->item_bytes), free(k->tokens);
}

#endif /* KVC_TESTS_POOL_HASH_VECTORS_H */
