/*
 * core/persist/read_file.h: a cache file's bytes, read where they are needed.
 *
 * Files are read, not mapped: a mapping of a file that another process
 * truncates in place (cp over it, rsync --inplace) raises SIGBUS in the
 * reader, while read(2) returns short and the load fails cleanly. Whatever
 * changes under a load (shrinks, grows, is rewritten) is an IO error.
 *
 * A source is an open regular file or a caller's buffer; reads at an offset
 * copy its bytes into the caller's memory. A file is never held whole: the
 * checks stream it through a small buffer (parse.c) and the loaders read each
 * payload straight into its destination (transfer.c), so the only large
 * memory a load touches is the new cache's own.
 */
#ifndef KVC_CORE_PERSIST_READ_FILE_H
#define KVC_CORE_PERSIST_READ_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../internal.h"

typedef struct kvci_source {
  const char* fn;
  const char* path;          /* NULL: a caller's buffer */
  int fd;                    /* -1: a caller's buffer */
  struct stat at_open;       /* a file's size and modification time when opened */
  const unsigned char* data; /* a caller's buffer */
  size_t len;
} kvci_source;

/* Opens the regular file at `path`. Errors: IO (anything but a non-empty regular file, too large). */
kvc_error* kvci_source_open(const char* fn, const char* path, kvci_source* out);
/* A caller's buffer as a source (never fails; an empty one fails the checks). */
/*
 * kvci_source_read for the checks' small reads scattered over the file (headers, the table, record sections):
 * bytes the page cache does not hold are read and their pages dropped from it again, so that the pages the
 * loaders then read in order come in large read-ahead requests instead of around single pages the checks left
 * (kvci_source_advise says what those cost).
 */
kvc_error* kvci_source_read_aside(const kvci_source* s, uint64_t offset, void* dst, size_t len);
/*
 * Tells the kernel how the file is read next: `in_order` 0 while the checks read small pieces all over it (no
 * read-ahead), 1 when the payloads are read from start to end (read-ahead in large requests). A small read with
 * read-ahead on started a read of megabytes in small pages at each section's header, and the page cache it
 * left made every later read of the file, the next restore's or anyone's, about a quarter slower than after one
 * read in order (bench_persist, docs/performance.md). Nothing for a caller's buffer.
 */
void kvci_source_advise(const kvci_source* s, int in_order);
void kvci_source_borrow(const char* fn, const void* data, size_t len, kvci_source* out);
void kvci_source_close(kvci_source* s);

/* The bytes at [offset, offset + len) in place: a caller's buffer's, NULL for a file. */
const unsigned char* kvci_source_view(const kvci_source* s, uint64_t offset);
/* Copies [offset, offset + len) into dst. IO error when the file shrank under it or a read failed. */
kvc_error* kvci_source_read(const kvci_source* s, uint64_t offset, void* dst, size_t len);
/*
 * kvci_source_read with the CRC-32C of the bytes continued into *crc, computed a chunk at a time right after the
 * chunk lands, while it is still in the cache (a checksum after the whole read would read it from memory again).
 */
kvc_error* kvci_source_read_crc(const kvci_source* s, uint64_t offset, void* dst, size_t len, uint32_t* crc);
/* After the last read of the checks: IO error when the file grew or was modified since it was opened. */
kvc_error* kvci_source_unchanged(const kvci_source* s);
/* A file that changed between the checks and a load of its part `what` at `offset` (a checksum now differs). */
kvc_error* kvci_source_changed(const kvci_source* s, const char* what, uint64_t offset);

/* Test seams: the most bytes one read asks for, and a call after each read (NULL: none). */
extern size_t kvci_read_file_chunk;
extern void (*kvci_read_file_after_chunk)(int fd, uint64_t done);

#endif /* KVC_CORE_PERSIST_READ_FILE_H */
