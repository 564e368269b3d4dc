/*
 * core/util/prefault.h: faulting in memory that is about to be written.
 *
 * A read(2) into fresh anonymous memory takes a page fault per 4 KiB inside
 * the copy; asking the kernel for the pages of a whole chunk in one call
 * (MADV_POPULATE_WRITE, Linux 5.14) costs one entry instead of one per page.
 * The pages are still zeroed by the kernel: only reused memory avoids that.
 */
#ifndef KVC_CORE_PREFAULT_H
#define KVC_CORE_PREFAULT_H

#include <stddef.h>

/*
 * Makes the pages of [p, p + len) present and writable, if the system can do it in one call; never changes a byte
 * and never fails (older kernels, memory the call refuses such as device mappings: the copy faults them in as
 * before).
 */
void kvci_prefault_write(void* p, size_t len);

#endif /* KVC_CORE_PREFAULT_H */
