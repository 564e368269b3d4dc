/*
 * core/persist/read_file.c: see read_file.h. Large reads straight into one
 * buffer, with the kernel told the access is sequential (it reads ahead in
 * large requests, as MAP_POPULATE did for the mapping this replaces), and
 * large buffers on huge pages.
 */
#define _DEFAULT_SOURCE 1 /* pread, posix_fadvise, madvise (POSIX 2008, BSD) */
#include "read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../regular_file.h"

size_t kvci_read_file_chunk = (size_t)64 << 20;
void (*kvci_read_file_after_chunk)(int fd, uint64_t done);

/* Buffers from this size up are aligned to 2 MiB and offered transparent huge pages: a fresh buffer's page
   faults, one per 4 KiB page otherwise, cost more than the copy out of the page cache. */
#define HUGE_PAGE ((size_t)2 << 20)

static unsigned char* buffer_alloc(size_t len) {
  if (len < 4 * HUGE_PAGE) return (unsigned char*)malloc(len);
  void* p = NULL;
  if (posix_memalign(&p, HUGE_PAGE, len)) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, len, MADV_HUGEPAGE); /* a hint: without it (or where refused) the buffer works the same */
#endif
  return (unsigned char*)p;
}

/* Whether the file's size or modification time differ from what the read started with. */
static int changed(int fd, const struct stat* at_open) {
  struct stat now;
  if (fstat(fd, &now)) return 1;
  return now.st_size != at_open->st_size || now.st_mtim.tv_sec != at_open->st_mtim.tv_sec ||
         now.st_mtim.tv_nsec != at_open->st_mtim.tv_nsec;
}

/* Reads len bytes of fd into data. 0, or an error naming what happened. */
static kvc_error* read_all(const char* fn, const char* path, int fd, const struct stat* st, unsigned char* data,
                           size_t len) {
  static const char* const RULE = "a cache file must not change while it loads: write a new file and rename it "
                                  "into place";
  size_t done = 0;
  while (done < len) {
    size_t ask = len - done < kvci_read_file_chunk ? len - done : kvci_read_file_chunk;
    ssize_t got = pread(fd, data + done, ask, (off_t)done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return kvci_err(KVC_ERROR_IO, "%s: reading %s failed: %s", fn, path, strerror(errno));
    if (got == 0) {
      struct stat now;
      long long size = fstat(fd, &now) ? (long long)done : (long long)now.st_size;
      return kvci_err(KVC_ERROR_IO, "%s: %s shrank from %zu to %lld bytes while it was read; %s", fn, path, len,
                      size, RULE);
    }
    done += (size_t)got;
    if (kvci_read_file_after_chunk) kvci_read_file_after_chunk(fd, done);
  }
  unsigned char past;
  ssize_t more;
  do {
    more = pread(fd, &past, 1, (off_t)len);
  } while (more < 0 && errno == EINTR);
  if (more > 0)
    return kvci_err(KVC_ERROR_IO, "%s: %s grew past its %zu bytes while it was read; %s", fn, path, len, RULE);
  if (changed(fd, st))
    return kvci_err(KVC_ERROR_IO, "%s: %s was modified while it was read; %s", fn, path, RULE);
  return NULL;
}

kvc_error* kvci_read_file(const char* fn, const char* path, unsigned char** data, size_t* len) {
  *data = NULL;
  *len = 0;
  struct stat st;
  const char* what;
  int fd = kvci_regular_open(path, &st, &what);
  if (fd < 0 && what)
    return kvci_err(KVC_ERROR_IO, "%s: %s is %s; a cache file must be a regular file", fn, path, what);
  if (fd < 0) return kvci_err(KVC_ERROR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
  kvc_error* e = NULL;
  unsigned char* buf = NULL;
  if (st.st_size == 0) e = kvci_err(KVC_ERROR_IO, "%s: not a kvcache file: %s is empty", fn, path);
  else if ((uint64_t)st.st_size > SIZE_MAX / 2)
    e = kvci_err(KVC_ERROR_IO, "%s: %s is %lld bytes, more than this process can hold", fn, path,
                 (long long)st.st_size);
  else if (!(buf = buffer_alloc((size_t)st.st_size)))
    e = kvci_err_oom();
  if (!e) {
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    e = read_all(fn, path, fd, &st, buf, (size_t)st.st_size);
  }
  close(fd);
  if (e) {
    kvci_read_file_free(buf);
    return e;
  }
  *data = buf;
  *len = (size_t)st.st_size;
  return NULL;
}

void kvci_read_file_free(unsigned char* data) { free(data); }
