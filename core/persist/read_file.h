/*
 * core/persist/read_file.h: a cache file's bytes, read into memory.
 *
 * Files are read, not mapped: a mapping of a file that another process
 * truncates in place (cp over it, rsync --inplace) raises SIGBUS in the
 * reader, while read(2) returns short and the load fails cleanly. Whatever
 * changes under a load (shrinks, grows, is rewritten) is an IO error.
 */
#ifndef KVC_CORE_PERSIST_READ_FILE_H
#define KVC_CORE_PERSIST_READ_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "../internal.h"

/*
 * Reads the regular file at `path` whole into a new buffer (*data, *len;
 * free with kvci_read_file_free). Errors: IO (anything but a non-empty
 * regular file, a read failing, the file changing while read), OUT_OF_MEMORY.
 */
kvc_error* kvci_read_file(const char* fn, const char* path, unsigned char** data, size_t* len);
void kvci_read_file_free(unsigned char* data);

/* Test seams: the most bytes one read asks for, and a call after each read (NULL: none). */
extern size_t kvci_read_file_chunk;
extern void (*kvci_read_file_after_chunk)(int fd, uint64_t done);

#endif /* KVC_CORE_PERSIST_READ_FILE_H */
