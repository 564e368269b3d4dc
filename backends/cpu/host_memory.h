/*
 * backends/cpu/host_memory.h: the CPU backend's host memory. Blocks of
 * KVCI_HOST_LARGE_BLOCK bytes or more are mapped with huge-page advice and
 * kept for reuse when freed (host_memory.c says why and for how long);
 * smaller ones come from malloc. The public side is kvc_host_memory_* in
 * kvcache/allocator.h.
 */
#ifndef KVCI_HOST_MEMORY_H
#define KVCI_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#define KVCI_HOST_LARGE_BLOCK ((size_t)1 << 20)

/* `bytes` of host memory, zeroed when `zeroed` is set (else unspecified); NULL when there is none. */
void* kvci_host_memory_alloc(size_t bytes, int zeroed);
/* Frees what kvci_host_memory_alloc returned (NULL is ignored). */
void kvci_host_memory_free(void* p);
/* The clock that times how long kept blocks wait (CLOCK_MONOTONIC, ns): replaced by tests. */
extern uint64_t (*kvci_host_memory_clock)(void);

#endif /* KVCI_HOST_MEMORY_H */
