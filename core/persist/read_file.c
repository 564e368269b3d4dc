/*
 * core/persist/read_file.c: see read_file.h. The kernel is told how the file
 * is about to be read (kvci_source_advise): scattered while the checks read
 * the header, the table and each section's header, in order while the
 * loaders read the payloads (it reads ahead in large requests, as
 * MAP_POPULATE did for the mapping this replaces).
 */
#define _GNU_SOURCE 1 /* pread, posix_fadvise (POSIX 2008); preadv2 and RWF_NOWAIT (Linux) */
#include "read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>

#include "../util/prefault.h"
#include "../util/regular_file.h"
#include "crc32c.h"

size_t kvci_read_file_chunk = (size_t)64 << 20;
void (*kvci_read_file_after_chunk)(int fd, uint64_t done);

static const char* const RULE = "a cache file must not change while it loads: write a new file and rename it into "
                                "place";

kvc_error* kvci_source_open(const char* fn, const char* path, kvci_source* s) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  s->fn = fn;
  s->path = path;
  const char* what;
  int fd = kvci_regular_open(path, &s->at_open, &what);
  if (fd < 0 && what)
    return kvci_err(KVC_ERROR_IO, "%s: %s is %s; a cache file must be a regular file", fn, path, what);
  if (fd < 0) return kvci_err(KVC_ERROR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
  kvc_error* e = NULL;
  if (s->at_open.st_size == 0) e = kvci_err(KVC_ERROR_IO, "%s: not a kvcache file: %s is empty", fn, path);
  else if ((uint64_t)s->at_open.st_size > SIZE_MAX / 2)
    e = kvci_err(KVC_ERROR_IO, "%s: %s is %lld bytes, more than this process can hold", fn, path,
                 (long long)s->at_open.st_size);
  if (e) {
    close(fd);
    return e;
  }
  s->fd = fd;
  kvci_source_advise(s, 0);
  s->len = (size_t)s->at_open.st_size;
  return NULL;
}

void kvci_source_advise(const kvci_source* s, int in_order) {
#if defined(POSIX_FADV_RANDOM) && defined(POSIX_FADV_SEQUENTIAL)
  if (s->fd >= 0) posix_fadvise(s->fd, 0, 0, in_order ? POSIX_FADV_SEQUENTIAL : POSIX_FADV_RANDOM);
#else
  (void)s;
  (void)in_order;
#endif
}

void kvci_source_borrow(const char* fn, const void* data, size_t len, kvci_source* s) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  s->fn = fn;
  s->data = (const unsigned char*)data;
  s->len = len;
}

void kvci_source_close(kvci_source* s) {
  if (s->fd >= 0) close(s->fd);
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

const unsigned char* kvci_source_view(const kvci_source* s, uint64_t offset) {
  return s->fd < 0 ? s->data + offset : NULL;
}

kvc_error* kvci_source_read(const kvci_source* s, uint64_t offset, void* dst, size_t len) {
  if (s->fd < 0) { /* the checks keep every read inside the buffer */
    memcpy(dst, s->data + offset, len);
    return NULL;
  }
  size_t done = 0;
  while (done < len) {
    size_t ask = len - done < kvci_read_file_chunk ? len - done : kvci_read_file_chunk;
    ssize_t got = pread(s->fd, (unsigned char*)dst + done, ask, (off_t)(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return kvci_err(KVC_ERROR_IO, "%s: reading %s failed: %s", s->fn, s->path, strerror(errno));
    if (got == 0) {
      struct stat now;
      long long size = fstat(s->fd, &now) ? (long long)(offset + done) : (long long)now.st_size;
      return kvci_err(KVC_ERROR_IO, "%s: %s shrank from %zu to %lld bytes while it was read; %s", s->fn, s->path,
                      s->len, size, RULE);
    }
    done += (size_t)got;
    if (kvci_read_file_after_chunk) kvci_read_file_after_chunk(s->fd, offset + done);
  }
  return NULL;
}

/* A piece of kvci_source_read_aside: at most one chunk. */
static kvc_error* read_piece_aside(const kvci_source* s, uint64_t offset, unsigned char* dst, size_t len) {
#if defined(__linux__) && defined(RWF_NOWAIT) && defined(POSIX_FADV_DONTNEED)
  /* What the page cache holds comes from it as it is; the rest is read and its pages dropped again. */
  struct iovec v = {dst, len};
  ssize_t got = preadv2(s->fd, &v, 1, (off_t)offset, RWF_NOWAIT);
  if (got == (ssize_t)len) {
    if (kvci_read_file_after_chunk) kvci_read_file_after_chunk(s->fd, offset + len);
    return NULL;
  }
  int uncached = got >= 0 || errno == EAGAIN; /* else the filesystem cannot say (EOPNOTSUPP): leave its pages */
  size_t have = got > 0 ? (size_t)got : 0;
  kvc_error* e = kvci_source_read(s, offset + have, dst + have, len - have);
  if (!e && uncached) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t mask = page > 0 ? (uint64_t)page - 1 : 4095, from = (offset + have) & ~mask;
    posix_fadvise(s->fd, (off_t)from, (off_t)(((offset + len + mask) & ~mask) - from), POSIX_FADV_DONTNEED);
  }
  return e;
#else
  return kvci_source_read(s, offset, dst, len);
#endif
}

kvc_error* kvci_source_read_aside(const kvci_source* s, uint64_t offset, void* dst, size_t len) {
  if (s->fd < 0) return kvci_source_read(s, offset, dst, len);
  for (size_t done = 0; done < len;) {
    size_t n = len - done < kvci_read_file_chunk ? len - done : kvci_read_file_chunk;
    kvc_error* e = read_piece_aside(s, offset + done, (unsigned char*)dst + done, n);
    if (e) return e;
    done += n;
  }
  return NULL;
}

/* Bytes read before they are checksummed: small enough to stay in a core's L2 between the two. The chunk's
   destination (a new cache's fresh store) is faulted in with one call before the read, not a fault per page
   inside it. */
#define CRC_CHUNK ((size_t)512 << 10)

kvc_error* kvci_source_read_crc(const kvci_source* s, uint64_t offset, void* dst, size_t len, uint32_t* crc) {
  for (size_t done = 0; done < len;) {
    size_t n = len - done < CRC_CHUNK ? len - done : CRC_CHUNK;
    unsigned char* at = (unsigned char*)dst + done;
    kvci_prefault_write(at, n);
    kvc_error* e = kvci_source_read(s, offset + done, at, n);
    if (e) return e;
    *crc = kvci_crc32c_update(*crc, at, n);
    done += n;
  }
  return NULL;
}

kvc_error* kvci_source_unchanged(const kvci_source* s) {
  if (s->fd < 0) return NULL;
  unsigned char past;
  ssize_t more;
  do {
    more = pread(s->fd, &past, 1, (off_t)s->len);
  } while (more < 0 && errno == EINTR);
  if (more > 0)
    return kvci_err(KVC_ERROR_IO, "%s: %s grew past its %zu bytes while it was read; %s", s->fn, s->path, s->len,
                    RULE);
  struct stat now;
  if (fstat(s->fd, &now) || now.st_size != s->at_open.st_size || now.st_mtim.tv_sec != s->at_open.st_mtim.tv_sec ||
      now.st_mtim.tv_nsec != s->at_open.st_mtim.tv_nsec)
    return kvci_err(KVC_ERROR_IO, "%s: %s was modified while it was read; %s", s->fn, s->path, RULE);
  return NULL;
}

kvc_error* kvci_source_changed(const kvci_source* s, const char* what, uint64_t offset) {
  return kvci_err(KVC_ERROR_IO,
                  "%s: %s was modified while it was read: %s at offset %llu no longer matches its checksum in "
                  "the table read before it; %s",
                  s->fn, s->path ? s->path : "the buffer", what, (unsigned long long)offset, RULE);
}
