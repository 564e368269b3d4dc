/*
 * tests/gpu/emulated_regions.h: the bytes a strided 4-D region of the
 * backend table covers, for the emulated device's contract checks (which
 * copies overlap, which stay inside their buffer). Addresses are integers:
 * nothing here reads memory.
 */
#ifndef KVC_TESTS_EMULATED_REGIONS_H
#define KVC_TESTS_EMULATED_REGIONS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Byte extent [lo, hi) of the region whose element [0, 0, 0, 0] is at
 * `base`; returns 0 for an empty region. Strides (in elements) may be
 * negative (an input read backwards) or zero (a broadcast input).
 */
int region_extent(uintptr_t base, const int64_t strides[4], const int64_t shape[4], size_t elem, uintptr_t* lo,
                  uintptr_t* hi);

/* Byte ranges [lo, hi), gathered from regions, then sorted. */
typedef struct region_run {
  uintptr_t lo, hi;
} region_run;

typedef struct region_runs {
  region_run* v;
  size_t n, cap;
} region_runs;

/* Adds the bytes of a region: one run per innermost row when that dim is contiguous, else one per element. */
void region_runs_add(region_runs* r, uintptr_t base, const int64_t strides[4], const int64_t shape[4], size_t elem);
void region_runs_sort(region_runs* r);
/* Whether two sorted lists share a byte. */
int region_runs_intersect(const region_runs* a, const region_runs* b);
/* Whether a sorted list covers some byte twice. */
int region_runs_self_overlap(const region_runs* a);
void region_runs_free(region_runs* r);

#endif /* KVC_TESTS_EMULATED_REGIONS_H */
