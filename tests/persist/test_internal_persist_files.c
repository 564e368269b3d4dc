/*
 * test_internal_persist_files.c: what sits at a load path, and what happens
 * to it during a load, never stalls or kills the caller.
 *
 * A FIFO (whose plain open waits for a writer), a directory, /dev/null and
 * a socket at the path of every loader are refused promptly with an IO
 * error naming what the path is; every load runs under an alarm, so a
 * regression fails the test instead of hanging the suite. A file truncated,
 * extended or rewritten in place while it is read (deterministically,
 * between two reads of read_file.c through its test seam) is an IO error,
 * never SIGBUS, and a restore's target stays as it was. So is a file
 * rewritten after the checks, while the loader reads its tensor payloads
 * into the new cache (their checksums computed there).
 */
#define _DEFAULT_SOURCE 1 /* mkfifo, truncate, socket paths, utimensat */
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "persist/read_file.h"
#include "persist_test.h"
#include "../pool/pool_test.h"

enum { HANG_SECONDS = 20 };

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAILED: a load blocked for " "20" " seconds\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  _exit(1);
}

/* Whether e is an IO error whose message contains `word`; consumes e. */
static int io_error_saying(kvc_error* e, const char* word, const char* what) {
  int ok = CHECK(e != NULL) && CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_IO) &&
           CHECK(strstr(kvc_error_message(e), word) != NULL);
  if (!ok) fprintf(TU_LOG, "    %s: %s\n", what, e ? kvc_error_message(e) : "(no error)");
  kvc_error_destroy(e);
  return ok;
}

static kvc_cache* small_cache(void) {
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(NULL, &c))) return NULL;
  ps_step(c, 2, 40, 0, 1);
  return c;
}

/* Every loader of a path (cache, encoder-decoder cache, restore of both, pool sequence) against `path`. */
static void every_loader_refuses(const char* path, const char* word) {
  alarm(HANG_SECONDS);
  kvc_cache* out = NULL;
  io_error_saying(kvc_cache_load(path, NULL, &out), word, "kvc_cache_load");
  CHECK_EQ_PTR(out, NULL);
  kvc_encoder_decoder_cache* ed_out = NULL;
  io_error_saying(kvc_encoder_decoder_cache_load(path, NULL, &ed_out), word, "kvc_encoder_decoder_cache_load");
  CHECK_EQ_PTR(ed_out, NULL);

  kvc_cache* target = small_cache();
  if (target) {
    cache_snap before;
    snap_take(target, &before);
    io_error_saying(kvc_cache_restore(target, path), word, "kvc_cache_restore");
    CHECK(snap_unchanged(target, &before, 0));
    snap_free(&before);
    kvc_cache_destroy(target);
  }
  kvc_cache *self = NULL, *cross = NULL;
  kvc_encoder_decoder_cache* ed = NULL;
  if (CHECK_OK(kvc_cache_create(NULL, &self)) && CHECK_OK(kvc_cache_create(NULL, &cross)) &&
      CHECK_OK(kvc_encoder_decoder_cache_create(self, cross, &ed))) {
    io_error_saying(kvc_encoder_decoder_cache_restore(ed, path), word, "kvc_encoder_decoder_cache_restore");
    kvc_encoder_decoder_cache_destroy(ed);
  }

  const pt_group g = {KVC_POOL_GROUP_FULL, 4, 8, 0};
  const uint32_t layers[2] = {0, 0};
  kvc_pool* pool = NULL;
  if (CHECK_OK(pt_pool(&pool, &g, 1, layers, 2, KVC_POOL_LAYOUT_NHD, 0, 1))) {
    kvc_pool_sequence* seq = NULL;
    io_error_saying(kvc_pool_sequence_load(pool, path, &seq), word, "kvc_pool_sequence_load");
    CHECK_EQ_PTR(seq, NULL);
    kvc_pool_destroy(pool);
  }
  alarm(0);
}

/* A file of another type made by `make` at the test path `name` (removed before and after by `remove`): every
 * loader refuses it saying `says`. */
static void special_file_refused(const char* name, int (*make)(const char*, mode_t), mode_t mode,
                                 int (*remove)(const char*), const char* says) {
  char path[256];
  ps_path(path, sizeof path, name);
  remove(path);
  REQUIRE(make(path, mode) == 0);
  every_loader_refuses(path, says);
  remove(path);
}

static void test_fifo_is_refused_without_blocking(void) {
  special_file_refused("fifo", mkfifo, 0600, unlink, "is a FIFO; a cache file must be a regular file");
}

static void test_directory_device_and_socket_are_refused(void) {
  special_file_refused("dir", mkdir, 0700, rmdir, "is a directory");

  every_loader_refuses("/dev/null", "is a character device");

  char path[256];
  ps_path(path, sizeof path, "sock");
  unlink(path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t len = strlen(path);
  if (len < sizeof addr.sun_path) memcpy(addr.sun_path, path, len + 1);
  if (len >= sizeof addr.sun_path || bind(fd, (struct sockaddr*)&addr, sizeof addr)) {
    printf("SKIPPED (socket part): cannot bind a socket at %s\n", path);
  } else {
    every_loader_refuses(path, "is a socket");
  }
  close(fd);
  unlink(path);

  ps_path(path, sizeof path, "missing");
  unlink(path);
  every_loader_refuses(path, "cannot open");
}

/* ------------------------------------------------ changes during a load */

static const char* change_path;
static int change_kind; /* 0 truncate, 1 extend, 2 rewrite in place */
static int change_done;

/* After the first read: the file changes under the load, as cp, rsync --inplace or a non-renaming writer do. */
static void change_after_first_chunk(int fd, uint64_t done) {
  (void)fd;
  if (change_done++) return;
  struct stat st;
  if (stat(change_path, &st)) return;
  if (change_kind == 0) {
    CHECK(truncate(change_path, (off_t)done) == 0);
  } else if (change_kind == 1) {
    CHECK(truncate(change_path, st.st_size + 4096) == 0);
  } else {
    int w = open(change_path, O_WRONLY);
    unsigned char byte = 0x5A;
    CHECK(w >= 0 && pwrite(w, &byte, 1, 0) == 1); /* a byte already read: only the change itself shows */
    if (w >= 0) close(w);
  }
}

/* A load (op 0), or a restore into another cache (op 1), of `path` while `after_chunk` changes it between reads of
   4 KiB (HANG_SECONDS at most): an I/O error that says `words`, no cache out, the restored cache unchanged. `what`
   ends the failure messages ("kvc_cache_load <what>"). */
static void check_load_of_a_changing_file(int op, const char* path, void (*after_chunk)(int, uint64_t),
                                          const char* words, const char* what) {
  char call[128];
  snprintf(call, sizeof call, "%s %s", op == 0 ? "kvc_cache_load" : "kvc_cache_restore", what);
  change_path = path, change_done = 0;
  kvci_read_file_chunk = 4096;
  kvci_read_file_after_chunk = after_chunk;
  alarm(HANG_SECONDS);
  if (op == 0) {
    kvc_cache* out = NULL;
    io_error_saying(kvc_cache_load(path, NULL, &out), words, call);
    CHECK_EQ_PTR(out, NULL);
  } else {
    kvc_cache* target = small_cache();
    if (target) {
      ps_step(target, 2, 3, 40, 9); /* differs from the file's cache: a restore would show */
      cache_snap before;
      snap_take(target, &before);
      io_error_saying(kvc_cache_restore(target, path), words, call);
      CHECK(snap_unchanged(target, &before, 0));
      snap_free(&before);
      kvc_cache_destroy(target);
    }
  }
  alarm(0);
  kvci_read_file_after_chunk = NULL;
  kvci_read_file_chunk = (size_t)64 << 20;
}

static void test_file_changing_during_a_load(void) {
  kvc_cache* c = small_cache();
  REQUIRE(c != NULL);
  char path[256];
  ps_path(path, sizeof path, "changing");
  static const char* const words[3] = {"shrank", "grew", "was modified"};
  for (int kind = 0; kind < 3; kind++) {
    for (int op = 0; op < 2; op++) { /* load, restore */
      REQUIRE_OK(kvc_cache_save(c, path, NULL));
      /* An old modification time, so the rewrite's is different whatever the clock's granularity. */
      struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
      REQUIRE(utimensat(AT_FDCWD, path, old, 0) == 0);
      change_kind = kind;
      check_load_of_a_changing_file(op, path, change_after_first_chunk, words[kind], "of a changing file");
      CHECK(change_done > 0); /* the seam ran: the file did change during the load */
    }
  }
  /* The same file left alone loads, read in the same small pieces. */
  REQUIRE_OK(kvc_cache_save(c, path, NULL));
  kvci_read_file_chunk = 4096;
  kvc_cache* out = NULL;
  if (CHECK_OK(kvc_cache_load(path, NULL, &out))) ps_same(c, out, "loaded in 4 KiB reads");
  kvci_read_file_chunk = (size_t)64 << 20;
  kvc_cache_destroy(out);
  kvc_cache_destroy(c);
  unlink(path);
}

/* ------------------------------------ changes between the checks and the load */

static uint64_t reread_last, reread_max; /* the end of the last read, and the furthest */
static int reread_drops;                 /* reads that ended before the one before them */

/* The checks read the header, the footer, the table, then the sections in file order: two reads that end before the
 * previous one. The third such read is the loader's first, of a tensor payload after the checks: from there to the
 * furthest byte read, every byte is inverted, so the payloads it reads differ from the ones the table describes. */
static void rewrite_on_reread(int fd, uint64_t done) {
  (void)fd;
  int drop = done < reread_last;
  reread_last = done;
  if (done > reread_max) reread_max = done;
  if (!drop || ++reread_drops < 3) return;
  if (change_done++) return;
  int w = open(change_path, O_RDWR);
  if (!CHECK(w >= 0)) return;
  for (uint64_t at = done; at < reread_max; at++) {
    unsigned char byte;
    CHECK(pread(w, &byte, 1, (off_t)at) == 1);
    byte ^= 0xFF;
    CHECK(pwrite(w, &byte, 1, (off_t)at) == 1);
  }
  close(w);
}

static void test_file_rewritten_between_checks_and_load(void) {
  kvc_cache* c = small_cache();
  REQUIRE(c != NULL);
  char path[256];
  ps_path(path, sizeof path, "rewritten");
  for (int op = 0; op < 2; op++) { /* load, restore */
    REQUIRE_OK(kvc_cache_save(c, path, NULL));
    reread_last = reread_max = 0, reread_drops = 0;
    check_load_of_a_changing_file(op, path, rewrite_on_reread, "was modified while it was read: section",
                                  "of a file rewritten after its checks");
    CHECK(change_done > 0); /* the loader read after the checks, and the file changed before that */
  }
  kvc_cache_destroy(c);
  unlink(path);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  TU_RUN(test_fifo_is_refused_without_blocking);
  TU_RUN(test_directory_device_and_socket_are_refused);
  TU_RUN(test_file_changing_during_a_load);
  TU_RUN(test_file_rewritten_between_checks_and_load);
  return tu_finish();
}
