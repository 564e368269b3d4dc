/*
 * replay.c: replays the conformance vectors (recorded from transformers' own
 * cache classes by generate.py) through the public kvcache ABI.
 *
 *   replay VECTORS_DIR            replay every *.kvv file, then self-check
 *   replay --self-test VECTORS_DIR  only the self-check
 *
 * Every returned and stored view must have the recorded shape and identical
 * bytes, every integer (lengths, mask sizes, layer kinds) must be equal and
 * every recorded error must come back with the recorded code. The format is
 * documented in docs/conformance.md.
 *
 * The self-check proves the replay can fail: it replays every file again with
 * one expected tensor byte flipped, then with one expected integer changed,
 * and requires both runs to report a mismatch.
 *
 * This file runs the files; replay_engine.c parses and compares, and the
 * operations come from the tables of replay_core.c and replay_<family>.c.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, opendir */

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "replay.h"

/* The operation named `t` in the families' tables, or NULL. */
static void (*find_op(const char* t))(replay*) {
  static const replay_op* const FAMILIES[] = {replay_ops_core,    replay_ops_quantized, replay_ops_sink,
                                              replay_ops_linear,  replay_ops_offload,   replay_ops_assisted,
                                              replay_ops_indexed};
  for (size_t f = 0; f < sizeof(FAMILIES) / sizeof(FAMILIES[0]); f++)
    for (const replay_op* op = FAMILIES[f]; op->name; op++)
      if (is(t, op->name)) return op->run;
  return NULL;
}

/*
 * "transformers 5.24.0 ... also transformers 5.23.0" in a meta line: each
 * release as MAJOR*10000 + MINOR*100, the transformers_release every cache of
 * the file is created with, so a family replays the semantics of the release
 * that recorded it; a file that several releases recorded identically names
 * them all and is replayed once per release. Sets r->release_count and
 * returns the release_pick-th release (0 when absent).
 */
static uint32_t release_of(replay* r, const char* line, const char* end) {
  static const char KEY[] = "transformers ";
  uint32_t picked = 0;
  r->release_count = 0;
  for (const char* p = line; p + sizeof KEY - 1 < end; p++) {
    if (strncmp(p, KEY, sizeof KEY - 1) != 0) continue;
    unsigned major = 0, minor = 0;
    if (sscanf(p + sizeof KEY - 1, "%u.%u", &major, &minor) != 2) continue;
    if (r->release_count++ == r->release_pick) picked = major * 10000 + minor * 100;
  }
  return picked;
}

/* Replays one file held in `text` (modified in place). */
static void replay_text(replay* r, char* text, size_t len) {
  r->cur = text;
  r->end = text + len;
  r->transformers_release = 0;
  char* magic = tok(r);
  char* ver = tok(r);
  if (!is(magic, "KVCONF") || !is(ver, "1")) {
    malformed(r, "not a KVCONF 1 file");
    return;
  }
  while (!r->malformed) {
    char* t = tok(r);
    if (!t || is(t, "end")) break;
    if (is(t, "meta")) { /* the rest of the line: producer versions */
      char* line = r->cur;
      while (r->cur < r->end && *r->cur != '\n') r->cur++;
      r->transformers_release = release_of(r, line, r->cur);
      continue;
    }
    if (is(t, "case")) {
      slots_clear(r);
      r->case_failed = 0;
      char* name = tok(r);
      snprintf(r->case_name, sizeof(r->case_name), "%s", name ? name : "?");
      continue;
    }
    r->op++;
    r->op_name = t;
    void (*fn)(replay*) = find_op(t);
    if (!fn) {
      malformed(r, "unknown operation");
      break;
    }
    int was_failed = r->case_failed;
    fn(r);
    if (!r->case_failed && !was_failed && !r->malformed) r->checked++;
  }
  slots_clear(r);
}

static char* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[n] = '\0';
    *len = (size_t)n;
  }
  return buf;
}

/* Replays a file; returns the replay's counters. */
static replay run_file(const char* path, const char* display, int quiet, long corrupt_tensor, long corrupt_int,
                       int release_pick) {
  replay r;
  memset(&r, 0, sizeof(r));
  r.release_pick = release_pick;
  r.file = display;
  r.quiet = quiet;
  r.corrupt_tensor = corrupt_tensor;
  r.corrupt_int = corrupt_int;
  size_t len = 0;
  char* text = read_file(path, &len);
  if (!text) {
    fprintf(stderr, "cannot read %s\n", path);
    r.malformed = 1;
    return r;
  }
  replay_text(&r, text, len);
  free(text);
  return r;
}

static int cmp_names(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

static size_t list_vectors(const char* dir, char** names, size_t cap) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  size_t n = 0;
  struct dirent* e;
  while ((e = readdir(d)) && n < cap) {
    size_t l = strlen(e->d_name);
    if (l > 4 && strcmp(e->d_name + l - 4, ".kvv") == 0) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof(char*), cmp_names);
  return n;
}

static void replay_free(replay* r) {
  free(r->good_tensors.at);
  free(r->good_ints.at);
}

/* Corrupts one expected tensor, then one expected integer, among those the
 * clean replay `clean` of `path` checked successfully, and requires the replay
 * to notice each time. Every file gets this check, since each family's
 * operations compare through their own code paths; a replay costs well under
 * a second, so checking all files keeps the test fast. */
static int self_check(const char* path, const char* name, const replay* clean) {
  if (clean->good_tensors.n == 0 || clean->good_ints.n == 0) {
    fprintf(stderr, "self-check: %s has no successfully checked tensor or integer to corrupt\n", name);
    return 0;
  }
  long ti = clean->good_tensors.at[clean->good_tensors.n / 2], ii = clean->good_ints.at[clean->good_ints.n / 2];
  replay t = run_file(path, name, 1, ti, -1, 0);
  replay i = run_file(path, name, 1, -1, ii, 0);
  /* A corrupted value must fail a comparison; a file that no longer parses
   * would prove nothing about the comparisons. */
  int t_ok = t.failed > clean->failed && !t.malformed, i_ok = i.failed > clean->failed && !i.malformed;
  if (!t_ok || !i_ok)
    printf("self-check on %s: flipped a byte of expected tensor #%ld -> %s; changed expected integer #%ld -> %s\n",
           name, ti, t_ok ? "detected" : "NOT DETECTED", ii, i_ok ? "detected" : "NOT DETECTED");
  replay_free(&t);
  replay_free(&i);
  return t_ok && i_ok;
}

int main(int argc, char** argv) {
  int self_test_only = argc == 3 && strcmp(argv[1], "--self-test") == 0;
  if (argc != 2 && !self_test_only) {
    fprintf(stderr, "usage: %s [--self-test] VECTORS_DIR\n", argv[0]);
    return 2;
  }
  const char* dir = argv[argc - 1];
  char* names[MAX_FILES];
  size_t n = list_vectors(dir, names, MAX_FILES);
  if (n == 0) {
    fprintf(stderr, "no *.kvv vector files in %s\n", dir);
    return 1;
  }
  printf("kvcache %s replaying %zu vector files from %s\n", kvc_version_string(), n, dir);
  long total = 0, files_failed = 0, self_failed = 0;
  char path[4096];
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    replay r = run_file(path, names[i], self_test_only, -1, -1, 0);
    int failed = r.failed || r.malformed;
    /* A file that several releases recorded identically replays once per release; the self-check uses the first. */
    for (int k = 0; k < (r.release_count > 1 ? r.release_count : 1) && !self_test_only; k++) {
      replay again = k == 0 ? r : run_file(path, names[i], 0, -1, -1, k);
      printf("%-32s %6ld ops checked, %ld failed%s (transformers %u.%u)\n", names[i], again.checked, again.failed,
             again.malformed ? " (MALFORMED FILE)" : "", (unsigned)again.transformers_release / 10000,
             (unsigned)again.transformers_release / 100 % 100);
      total += again.checked;
      failed = failed || again.failed || again.malformed;
      if (k > 0) replay_free(&again);
    }
    if (failed) files_failed++;
    if (!self_check(path, names[i], &r)) self_failed++;
    replay_free(&r);
  }
  printf("self-check: a corrupted tensor and a corrupted integer detected in %ld of %zu files\n",
         (long)n - self_failed, n);
  if (!self_test_only) {
    printf("total: %ld ops checked\n", total);
    printf("conformance: %ld passed, %ld failed\n", (long)n - files_failed, files_failed);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  if (self_failed) fprintf(stderr, "self-check FAILED: the replay did not detect a corrupted vector\n");
  return (self_test_only || files_failed == 0) && self_failed == 0 ? 0 : 1;
}
