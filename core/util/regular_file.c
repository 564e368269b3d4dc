/*
 * core/util/regular_file.c: see regular_file.h. The check is made on the open
 * descriptor (fstat), not on the path before opening it, so that nothing
 * can be swapped in between; O_NONBLOCK is what makes that open safe for a
 * FIFO, whose plain open waits for a writer.
 */
#define _DEFAULT_SOURCE 1 /* O_CLOEXEC, O_NOCTTY (POSIX 2008) */
#include "regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <unistd.h>

static const char* type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int kvci_regular_open(const char* path, struct stat* st, const char** not_regular) {
  *not_regular = NULL;
  int fd;
  do {
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    /* A socket cannot be opened at all (ENXIO); say what it is rather than "no such device". */
    int saved = errno;
    if (saved == ENXIO && stat(path, st) == 0 && !S_ISREG(st->st_mode)) *not_regular = type_name(st->st_mode);
    errno = saved;
    return -1;
  }
  int flags;
  if (fstat(fd, st) || (flags = fcntl(fd, F_GETFL)) < 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    *not_regular = type_name(st->st_mode);
    close(fd);
    return -1;
  }
  if ((flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}
