/*
 * test_persist_corruption.c: a small cache file with a layer of most kinds,
 * then every single-byte change of it and every truncation of it given to
 * the buffer and path readers (restore and load): each is refused with
 * KVC_ERROR_IO (or VERSION_MISMATCH for the version field), the target
 * cache unchanged; a file of another model or format version is refused
 * naming the difference.
 */
/* pwrite and ftruncate are POSIX, outside strict C11. */
#define _DEFAULT_SOURCE 1
#include <fcntl.h>
#include <unistd.h>

#include "persist_test.h"

/* The saved cache's file in memory, and a target cache that differs from it. */
typedef struct fixture {
  ps_buffer file;
  kvc_cache* target;
  cache_snap before;
  char path[256];
} fixture;

static int setup(fixture* f) {
  memset(f, 0, sizeof *f);
  kvc_cache* c = NULL;
  if (!CHECK_OK(ps_mixed_cache(KVC_LAYER_LINEAR_DYNAMIC, &c))) return 0;
  ps_step(c, 5, 4, 0, 1);
  ps_step(c, 5, 1, 4, 2);
  ps_step(c, 5, 1, 5, 3);
  int ok = CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, &f->file, NULL));
  kvc_cache_destroy(c);
  if (!ok || !CHECK_OK(ps_mixed_cache(KVC_LAYER_LINEAR_DYNAMIC, &f->target))) return 0;
  ps_step(f->target, 5, 2, 0, 9); /* the target holds something else, which every refusal must keep */
  snap_take(f->target, &f->before);
  ps_path(f->path, sizeof f->path, "corrupt");
  return 1;
}

static void teardown(fixture* f) {
  snap_free(&f->before);
  kvc_cache_destroy(f->target);
  free(f->file.data);
  unlink(f->path);
}

/* A copy of the saved file to corrupt (the caller frees it). */
static unsigned char* file_copy(const fixture* f) {
  unsigned char* copy = (unsigned char*)malloc(f->file.len);
  if (!copy) abort();
  memcpy(copy, f->file.data, f->file.len);
  return copy;
}

/*
 * Makes the file at f->path hold data[0, n) by changing only what differs
 * from what it holds (one byte, or the length): rewriting thousands of files
 * whole would wait on the disk (ext4 flushes a file replaced by truncation).
 */
static int write_file(fixture* f, const unsigned char* data, size_t n) {
  static unsigned char held[1 << 16];
  static size_t held_len;
  static int fd = -1;
  static char held_path[256];
  if (fd < 0 || strcmp(held_path, f->path)) {
    if (fd >= 0) close(fd);
    snprintf(held_path, sizeof held_path, "%s", f->path);
    fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    held_len = 0;
  }
  if (fd < 0 || n > sizeof held) return 0;
  size_t common = n < held_len ? n : held_len;
  for (size_t i = 0; i < common; i++)
    if (held[i] != data[i] && pwrite(fd, &data[i], 1, (off_t)i) != 1) return 0;
  if (n > held_len && pwrite(fd, data + held_len, n - held_len, (off_t)held_len) != (ssize_t)(n - held_len)) return 0;
  if (n < held_len && ftruncate(fd, (off_t)n)) return 0;
  memcpy(held, data, n);
  held_len = n;
  return 1;
}

/* Every reader refuses these bytes with an allowed code, and the target is unchanged. */
static int refused(fixture* f, const unsigned char* data, size_t n, const char* what, size_t at) {
  int ok = 1;
  kvc_cache* out = NULL;
  kvc_error* e[4] = {kvc_cache_restore_buffer(f->target, data, n), kvc_cache_load_buffer(data, n, NULL, &out), NULL,
                     NULL};
  if (write_file(f, data, n)) {
    e[2] = kvc_cache_restore(f->target, f->path);
    e[3] = kvc_cache_load(f->path, NULL, &out);
  } else {
    ok = 0;
  }
  for (int i = 0; i < 4; i++) {
    kvc_code code = kvc_error_code(e[i]);
    if (!e[i] || (code != KVC_ERROR_IO && code != KVC_ERROR_VERSION_MISMATCH)) {
      fprintf(TU_LOG, "%s at %zu: reader %d %s (%s)\n", what, at, i, e[i] ? kvc_code_name(code) : "accepted it",
              kvc_error_message(e[i]));
      ok = 0;
    }
    kvc_error_destroy(e[i]);
  }
  if (out) ok = 0, kvc_cache_destroy(out);
  cache_snap now;
  char why[256];
  snap_take(f->target, &now);
  if (!snap_equal(&f->before, &now, 0, why, sizeof why)) {
    fprintf(TU_LOG, "%s at %zu changed the target: %s\n", what, at, why);
    ok = 0;
  }
  snap_free(&now);
  tu_checks_total++;
  if (!ok) tu_failures_total++;
  return ok;
}

static void test_every_byte_changed(void) {
  fixture f;
  if (!setup(&f)) return teardown(&f);
  /* The untouched file restores (so the refusals below are the changes'). */
  kvc_cache* copy = NULL;
  if (CHECK_OK(kvc_cache_load_buffer(f.file.data, f.file.len, NULL, &copy))) kvc_cache_destroy(copy);
  printf("    file of %zu bytes\n", f.file.len);
  unsigned char* bad = (unsigned char*)malloc(f.file.len);
  int failures = 0;
  for (size_t i = 0; i < f.file.len && failures < 5; i++) {
    static const unsigned char flips[2] = {0xFF, 0x01};
    for (int k = 0; k < 2; k++) {
      memcpy(bad, f.file.data, f.file.len);
      bad[i] ^= flips[k];
      failures += !refused(&f, bad, f.file.len, "a changed byte", i);
    }
  }
  free(bad);
  teardown(&f);
}

static void test_every_truncation(void) {
  fixture f;
  if (!setup(&f)) return teardown(&f);
  int failures = 0;
  for (size_t n = 0; n < f.file.len && failures < 5; n++) failures += !refused(&f, f.file.data, n, "a truncation", n);
  /* One byte too many is refused as well (the footer records the size). */
  unsigned char* longer = (unsigned char*)calloc(1, f.file.len + 1);
  memcpy(longer, f.file.data, f.file.len);
  refused(&f, longer, f.file.len + 1, "an appended byte", f.file.len);
  free(longer);
  teardown(&f);
}

/* An error whose code and message are as expected, destroyed. */
static void check_message(kvc_error* e, kvc_code code, const char* part) {
  CHECK_EQ_I64(kvc_error_code(e), code);
  if (!CHECK(e && strstr(kvc_error_message(e), part) != NULL))
    fprintf(TU_LOG, "    message: %s\n    expected to contain: %s\n", kvc_error_message(e), part);
  kvc_error_destroy(e);
}

static void test_other_model(void) {
  fixture f;
  if (!setup(&f)) return teardown(&f);
  kvc_cache* other = NULL;
  if (CHECK_OK(ps_mixed_cache(KVC_LAYER_LINEAR, &other))) {
    check_message(kvc_cache_restore_buffer(other, f.file.data, f.file.len), KVC_ERROR_INVALID_ARGUMENT,
                  "layer 2: kind linear + dynamic (file) vs linear (cache)");
    kvc_cache_destroy(other);
  }
  /* Same kinds, other geometry: a target that already holds 4 heads where the file has 2. */
  kvc_cache* wide = NULL;
  if (CHECK_OK(ps_mixed_cache(KVC_LAYER_LINEAR_DYNAMIC, &wide))) {
    float k[1 * 4 * 1 * PS_D] = {0};
    int64_t shape[4] = {1, 4, 1, PS_D};
    kvc_tensor t = ps_tensor(k, 4, shape);
    CHECK_OK(kvc_cache_update(wide, 0, &t, &t, NULL, NULL));
    check_message(kvc_cache_restore_buffer(wide, f.file.data, f.file.len), KVC_ERROR_INVALID_ARGUMENT,
                  "layer 0: num_kv_heads 2 (file) vs 4 (cache)");
    kvc_cache_destroy(wide);
  }
  teardown(&f);
}

static void test_other_version(void) {
  fixture f;
  if (!setup(&f)) return teardown(&f);
  unsigned char* v2 = file_copy(&f);
  v2[8] = 2; /* the format version, with a valid header checksum: a well-formed file of version 2 */
  uint32_t crc = 0;
  {
    /* CRC-32C of bytes 0..59, bit by bit (the test does not trust the library's). */
    uint32_t c = 0xFFFFFFFFu;
    for (int i = 0; i < 60; i++) {
      c ^= v2[i];
      for (int b = 0; b < 8; b++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    crc = ~c;
  }
  for (int i = 0; i < 4; i++) v2[60 + i] = (unsigned char)(crc >> (8 * i));
  check_message(kvc_cache_restore_buffer(f.target, v2, f.file.len), KVC_ERROR_VERSION_MISMATCH,
                "format version 2 (file) vs 1 (reader)");
  kvc_cache* out = NULL;
  check_message(kvc_cache_load_buffer(v2, f.file.len, NULL, &out), KVC_ERROR_VERSION_MISMATCH,
                "format version 2 (file) vs 1 (reader)");
  CHECK(out == NULL);
  refused(&f, v2, f.file.len, "version 2", 8);
  free(v2);
  teardown(&f);
}

/* A checksum failure names the section and the offset. */
static void test_message_names_section(void) {
  fixture f;
  if (!setup(&f)) return teardown(&f);
  unsigned char* bad = file_copy(&f);
  bad[64 + 64] ^= 1; /* the first byte of the first section's payload (the fingerprint) */
  check_message(kvc_cache_restore_buffer(f.target, bad, f.file.len), KVC_ERROR_IO,
                "section 0 (FPRT, part 0, index 0) at offset 128: checksum");
  free(bad);
  teardown(&f);
}

int main(void) {
  TU_RUN(test_every_byte_changed);
  TU_RUN(test_every_truncation);
  TU_RUN(test_other_model);
  TU_RUN(test_other_version);
  TU_RUN(test_message_names_section);
  return tu_finish();
}
