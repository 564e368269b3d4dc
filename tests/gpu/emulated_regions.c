/*
 * tests/gpu/emulated_regions.c: byte ranges of strided regions
 * (emulated_regions.h).
 */
#include "emulated_regions.h"

#include <stdio.h>
#include <stdlib.h>

int region_extent(uintptr_t base, const int64_t st[4], const int64_t shape[4], size_t elem, uintptr_t* lo,
                  uintptr_t* hi) {
  int64_t first = 0, last = 0;
  for (int i = 0; i < 4; i++) {
    if (shape[i] <= 0) return 0;
    int64_t reach = (shape[i] - 1) * st[i];
    if (reach < 0)
      first += reach;
    else
      last += reach;
  }
  *lo = base + (uintptr_t)(first * (int64_t)elem);
  *hi = base + (uintptr_t)((last + 1) * (int64_t)elem);
  return 1;
}

static void push(region_runs* r, uintptr_t lo, uintptr_t hi) {
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 256;
    r->v = (region_run*)realloc(r->v, r->cap * sizeof(region_run));
    if (!r->v) {
      fprintf(stderr, "kvcache emulated device: out of host memory while checking a copy\n");
      abort();
    }
  }
  r->v[r->n].lo = lo;
  r->v[r->n].hi = hi;
  r->n++;
}

void region_runs_add(region_runs* r, uintptr_t base, const int64_t st[4], const int64_t shape[4], size_t elem) {
  for (int i = 0; i < 4; i++)
    if (shape[i] <= 0) return;
  int contiguous = st[3] == 1;
  int64_t inner = contiguous ? 1 : shape[3];
  uintptr_t len = contiguous ? (uintptr_t)shape[3] * elem : elem;
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      for (int64_t s = 0; s < shape[2]; s++)
        for (int64_t d = 0; d < inner; d++) {
          uintptr_t lo = base + (uintptr_t)((b * st[0] + h * st[1] + s * st[2] + d * st[3]) * (int64_t)elem);
          push(r, lo, lo + len);
        }
}

static int by_start(const void* a, const void* b) {
  const region_run* x = (const region_run*)a;
  const region_run* y = (const region_run*)b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void region_runs_sort(region_runs* r) {
  if (r->n > 1) qsort(r->v, r->n, sizeof(region_run), by_start);
}

int region_runs_intersect(const region_runs* a, const region_runs* b) {
  size_t i = 0, j = 0;
  while (i < a->n && j < b->n) {
    if (a->v[i].hi <= b->v[j].lo)
      i++;
    else if (b->v[j].hi <= a->v[i].lo)
      j++;
    else
      return 1;
  }
  return 0;
}

int region_runs_self_overlap(const region_runs* a) {
  /* Sorted by start: an overlap shows between neighbours, or with an earlier run reaching further. */
  uintptr_t reach = 0;
  for (size_t i = 0; i < a->n; i++) {
    if (i > 0 && a->v[i].lo < reach) return 1;
    if (a->v[i].hi > reach) reach = a->v[i].hi;
  }
  return 0;
}

void region_runs_free(region_runs* r) {
  free(r->v);
  r->v = NULL;
  r->n = r->cap = 0;
}
