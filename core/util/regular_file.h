/*
 * core/util/regular_file.h: opening files that the library reads (cache files,
 * disk-tier blocks) so that whatever sits at the path cannot stall or kill
 * the caller: only regular files are opened for reading, and opening never
 * blocks (a FIFO without a writer, a terminal, a device).
 */
#ifndef KVC_CORE_REGULAR_FILE_H
#define KVC_CORE_REGULAR_FILE_H

#include <sys/stat.h>

/*
 * Opens `path` read-only (close-on-exec) if it is a regular file, filling
 * `*st`. Returns the descriptor, in blocking mode; or -1 with `*not_regular`
 * naming what the path is instead ("a FIFO", "a directory", ...) when it
 * exists but is no regular file, else with `*not_regular` NULL and errno set.
 */
int kvci_regular_open(const char* path, struct stat* st, const char** not_regular);

#endif /* KVC_CORE_REGULAR_FILE_H */
