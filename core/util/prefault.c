/* core/util/prefault.c: see prefault.h. */
#define _DEFAULT_SOURCE 1 /* madvise */
#include "prefault.h"

#include <stdint.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* The value of Linux 5.14's MADV_POPULATE_WRITE, for headers older than the kernel it runs on. */
#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23
#endif

void kvci_prefault_write(void* p, size_t len) {
#if defined(__linux__)
  if (!len) return;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  /* The pages the range touches: populating never writes, so the parts outside it are left as they are. An
     error (EINVAL from a kernel without the advice or for a device mapping) is one cheap call per chunk. */
  uintptr_t from = (uintptr_t)p & ~(uintptr_t)(page - 1), to = (uintptr_t)p + len;
  (void)madvise((void*)from, to - from, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)len;
#endif
}
