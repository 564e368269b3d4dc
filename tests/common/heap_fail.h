/*
 * heap_fail.h: out-of-memory injection for every heap allocation a test
 * program makes, the library's included (tests named test_internal_*_oom.c,
 * which link heap_fail.c and wrap malloc, calloc, realloc, free,
 * posix_memalign and aligned_alloc at link time, so no allocation of the
 * static library can bypass it, whoever adds it later).
 *
 * heap_fail_after = n refuses every allocation after the n-th from now
 * (-1: none). heap_calls counts allocation calls, heap_live the blocks
 * allocated through the wrappers and not yet freed.
 */
#ifndef KVC_TESTS_HEAP_FAIL_H
#define KVC_TESTS_HEAP_FAIL_H

#include <stddef.h>

extern long heap_fail_after;
extern long heap_calls;
long heap_live(void);
/* 1 when the wrappers are linked in (the linker supports --wrap), else 0: sweeps then print SKIPPED. */
int heap_fail_available(void);

#endif /* KVC_TESTS_HEAP_FAIL_H */
