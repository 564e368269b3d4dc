/*
 * backends/gpu/gpu_plan.c: from core/backend.h's element-strided 4-D copies
 * to the kernels' byte-strided, vectorised plans (gpu_plan.h). Host code,
 * plain C: compiled into the GPU plugins and into the CPU test of plans.
 */
#include "gpu_plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

typedef struct dim {
  int64_t n, dst, src; /* extent, byte strides */
} dim;

static int aligned(const void* p, int64_t to) { return ((uintptr_t)p % (uintptr_t)to) == 0; }

static int divides(int32_t u, const dim* d, int n) {
  for (int i = 0; i < n; i++)
    if (d[i].n != 1 && (d[i].dst % u || d[i].src % u)) return 0;
  return 1;
}

/*
 * The widest unit that divides the row, both base addresses, every outer
 * stride and every `extra` step the kernel adds on top of the plan (the
 * rows kernel's batch-row strides).
 */
static int32_t widest_unit(int64_t row_bytes, const void* dst, const void* src, const dim* outer, int nouter,
                           const dim* extra, int nextra) {
  for (int32_t u = 16; u > 1; u /= 2)
    if (!(row_bytes % u) && aligned(dst, u) && aligned(src, u) && divides(u, outer, nouter) &&
        divides(u, extra, nextra))
      return u;
  return 1;
}

static int plan_with(kvc_gpu_copy* out, void* dst, const int64_t dst_strides[4], const void* src,
                     const int64_t src_strides[4], const int64_t shape[4], size_t elem_size, int keep_rows,
                     const dim* extra, int nextra) {
  if (elem_size == 0 || elem_size > INT32_MAX) return -1;
  for (int i = 0; i < 4; i++)
    if (shape[i] < 0 || shape[i] > INT32_MAX) return -1;
  for (int i = 0; i < 4; i++)
    if (shape[i] == 0) return 1;
  const int64_t elem = (int64_t)elem_size;
  const int64_t* ss = src ? src_strides : dst_strides; /* a fill reads nothing: its "source" walks like dst */
  const void* sbase = src ? src : dst;

  /* dims[0] is the innermost; merged outwards where both tensors continue contiguously. */
  dim dims[4];
  int nd = 0;
  if (keep_rows) {
    for (int i = 3; i >= 0; i--) {
      dims[nd].n = shape[i];
      dims[nd].dst = dst_strides[i] * elem;
      dims[nd].src = ss[i] * elem;
      nd++;
    }
  } else {
    for (int i = 3; i >= 0; i--) {
      if (shape[i] == 1) continue;
      dim d = {shape[i], dst_strides[i] * elem, ss[i] * elem};
      if (nd > 0) {
        dim* in = &dims[nd - 1];
        if (d.dst == in->n * in->dst && d.src == in->n * in->src && in->n * d.n <= INT32_MAX) {
          in->n *= d.n;
          continue;
        }
      }
      dims[nd++] = d;
    }
    if (nd == 0) { /* one element */
      dims[0].n = 1;
      dims[0].dst = elem;
      dims[0].src = elem;
      nd = 1;
    }
  }

  /*
   * Strided elements move one by one, as units of their own size where
   * that is a loadable, aligned size; any other element becomes a row of
   * its bytes, one more (innermost) dimension.
   */
  int loadable = elem == 1 || elem == 2 || elem == 4 || elem == 8 || elem == 16;
  int contiguous = dims[0].n == 1 || (dims[0].dst == elem && dims[0].src == elem);
  int64_t run_elem = elem; /* bytes per step of the innermost dimension when it is contiguous */
  if (!contiguous && !(loadable && aligned(dst, elem) && aligned(sbase, elem))) {
    if (nd == 4) return -1;
    memmove(&dims[1], &dims[0], sizeof(dim) * (size_t)nd);
    nd++;
    dims[0].n = elem;
    dims[0].dst = dims[0].src = 1;
    contiguous = 1;
    run_elem = 1;
  }
  dim* inner = &dims[0];
  int32_t unit;
  int64_t units, ustride_dst, ustride_src;
  if (contiguous) {
    unit = widest_unit(inner->n * run_elem, dst, sbase, dims + 1, nd - 1, extra, nextra);
    units = inner->n * run_elem / unit;
    ustride_dst = ustride_src = unit;
  } else {
    unit = (int32_t)elem;
    units = inner->n;
    ustride_dst = inner->dst;
    ustride_src = inner->src;
  }
  if (units > INT32_MAX) return -1;

  out->dst = (char*)dst;
  out->src = (const char*)src;
  out->unit = unit;
  out->n[3] = (int32_t)units;
  out->dst_stride[3] = ustride_dst;
  out->src_stride[3] = ustride_src;
  for (int k = 0; k < 3; k++) { /* out dimension 2 - k is dims[1 + k], or extent 1 */
    int have = 1 + k < nd;
    out->n[2 - k] = have ? (int32_t)dims[1 + k].n : 1;
    out->dst_stride[2 - k] = have ? dims[1 + k].dst : 0;
    out->src_stride[2 - k] = have ? dims[1 + k].src : 0;
  }

  int64_t rows = (int64_t)out->n[0] * out->n[1] * out->n[2];
  int64_t blocks;
  if (units > KVC_GPU_TILE_UNITS) {
    out->tiles_per_row = (uint32_t)((units + KVC_GPU_TILE_UNITS - 1) / KVC_GPU_TILE_UNITS);
    out->rows_per_block = 1;
    if (rows > (int64_t)UINT32_MAX / out->tiles_per_row) return -1;
    blocks = rows * out->tiles_per_row;
  } else {
    out->tiles_per_row = 1;
    out->rows_per_block = (uint32_t)(KVC_GPU_TILE_UNITS / units);
    blocks = (rows + out->rows_per_block - 1) / out->rows_per_block;
  }
  if (blocks > (int64_t)UINT32_MAX) return -1;
  out->first_block = 0;
  return 0;
}

int kvc_gpu_plan(kvc_gpu_copy* out, void* dst, const int64_t dst_strides[4], const void* src,
                 const int64_t src_strides[4], const int64_t shape[4], size_t elem_size, int keep_rows) {
  return plan_with(out, dst, dst_strides, src, src_strides, shape, elem_size, keep_rows, NULL, 0);
}

/*
 * A strided element moves as a unit of its own size only when it is
 * aligned to it, and batch-row strides are whole elements, so only the
 * units cut from contiguous runs (widest_unit) need the row strides.
 */
int kvc_gpu_plan_rows(kvc_gpu_rows* out, void* dst, const int64_t dst_strides[4], const void* src,
                      const int64_t src_strides[4], const int64_t row_shape[4], size_t elem_size) {
  const int64_t one_row[4] = {1, row_shape[1], row_shape[2], row_shape[3]};
  out->dst_row_bytes = dst_strides[0] * (int64_t)elem_size;
  out->src_row_bytes = src_strides[0] * (int64_t)elem_size;
  const dim rows = {2, out->dst_row_bytes, out->src_row_bytes}; /* n 2: a step that is taken */
  return plan_with(&out->plan, dst, dst_strides, src, src_strides, one_row, elem_size, 0, &rows, 1);
}

/* ---- copy_rows_batch ---------------------------------------------------------- */

/* An index array of the caller's as one list of the batch: where its copy starts. */
typedef struct index_list {
  const int64_t* rows;
  int64_t count;
  uint32_t at;
} index_list;

static int job_copies(const kvc_copy_rows_job* j) {
  return j->count > 0 && j->row_shape[1] > 0 && j->row_shape[2] > 0 && j->row_shape[3] > 0;
}

/*
 * The list holding `rows` (count entries): one seen before if the same host
 * array (same pointer and count) was, else a new one at the end, every
 * index checked to fit the kernel's int32. -1 for an index out of range.
 */
static int64_t list_of(index_list* lists, int32_t* nlists, uint64_t* nindex, const int64_t* rows, int64_t count) {
  for (int32_t i = 0; i < *nlists; i++)
    if (lists[i].rows == rows && lists[i].count == count) return lists[i].at;
  for (int64_t i = 0; i < count; i++)
    if (rows[i] < 0 || rows[i] > INT32_MAX) return -1;
  if (*nindex + (uint64_t)count > UINT32_MAX) return -1;
  index_list* l = &lists[(*nlists)++];
  l->rows = rows;
  l->count = count;
  l->at = (uint32_t)*nindex;
  *nindex += (uint64_t)count;
  return l->at;
}

/* How a job's pairs share the grid (kvc_gpu_rows_job): whole pairs per block when one pair's plan is one block. */
static void share_blocks(kvc_gpu_rows_job* j) {
  const uint32_t b = kvc_gpu_plan_blocks(&j->rows.plan);
  j->pairs_per_block = 1;
  j->blocks_per_pair = b;
  if (b != 1) return;
  uint32_t per = (uint32_t)(KVC_GPU_TILE_UNITS / kvc_gpu_rows_job_units(j));
  if (per > (uint32_t)j->count) per = (uint32_t)j->count;
  if (per > 1) j->pairs_per_block = per;
}

int kvc_gpu_plan_rows_batch(kvc_gpu_rows_batch* out, const kvc_copy_rows_job* jobs, int32_t count) {
  memset(out, 0, sizeof *out);
  if (count < 0 || (count > 0 && !jobs)) return -1;
  int32_t njobs = 0;
  for (int32_t i = 0; i < count; i++) {
    if (jobs[i].count < 0 || jobs[i].count > INT32_MAX) return -1;
    for (int k = 1; k < 4; k++)
      if (jobs[i].row_shape[k] < 0) return -1;
    njobs += job_copies(&jobs[i]);
  }
  if (njobs == 0) return 0;
  index_list* lists = (index_list*)malloc(sizeof(index_list) * 2 * (size_t)njobs);
  kvc_gpu_rows_job* planned = (kvc_gpu_rows_job*)malloc(sizeof(kvc_gpu_rows_job) * (size_t)njobs);
  int32_t nlists = 0, n = 0;
  uint64_t nindex = 0, blocks = 0;
  int rc = lists && planned ? 0 : -1;
  for (int32_t i = 0; i < count && !rc; i++) {
    const kvc_copy_rows_job* c = &jobs[i];
    if (!job_copies(c)) continue;
    kvc_gpu_rows_job* j = &planned[n++];
    memset(j, 0, sizeof *j);
    int64_t d = -1, s = -1;
    if (c->dst_rows && c->src_rows) {
      d = list_of(lists, &nlists, &nindex, c->dst_rows, c->count);
      s = d < 0 ? -1 : list_of(lists, &nlists, &nindex, c->src_rows, c->count);
    }
    if (s < 0 || kvc_gpu_plan_rows(&j->rows, c->dst, c->dst_strides, c->src, c->src_strides, c->row_shape,
                                   c->elem_size) != 0) {
      rc = -1;
      break;
    }
    j->count = (int32_t)c->count;
    j->dst_index = (uint32_t)d;
    j->src_index = (uint32_t)s;
    share_blocks(j);
    j->first_block = (uint32_t)blocks;
    blocks += kvc_gpu_rows_job_blocks(j);
    if (blocks > UINT32_MAX) rc = -1;
  }
  const size_t jobs_bytes = sizeof(kvc_gpu_rows_job) * (size_t)njobs;
  char* area = rc ? NULL : (char*)malloc(jobs_bytes + sizeof(int32_t) * (size_t)nindex);
  if (area) {
    memcpy(area, planned, jobs_bytes);
    int32_t* index = (int32_t*)(void*)(area + jobs_bytes);
    for (int32_t i = 0; i < nlists; i++)
      for (int64_t k = 0; k < lists[i].count; k++) index[lists[i].at + (uint32_t)k] = (int32_t)lists[i].rows[k];
    out->area = area;
    out->bytes = jobs_bytes + sizeof(int32_t) * (size_t)nindex;
    out->jobs = (kvc_gpu_rows_job*)(void*)area;
    out->njobs = njobs;
    out->index = index;
    out->nindex = (uint32_t)nindex;
    out->blocks = (uint32_t)blocks;
  }
  free(lists);
  free(planned);
  return area ? 0 : -1;
}

void kvc_gpu_rows_batch_free(kvc_gpu_rows_batch* b) {
  free(b->area);
  memset(b, 0, sizeof *b);
}

int kvc_gpu_plan_zero_bytes(kvc_gpu_copy out[2], void* dst, size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes > (size_t)INT64_MAX) return -1;
  const int64_t st[4] = {0, 0, 0, 1}, shape[4] = {1, 1, 1, (int64_t)bytes};
  if (bytes <= (size_t)INT32_MAX) return kvc_gpu_plan(&out[0], dst, st, NULL, NULL, shape, 1, 0) ? -1 : 1;
  /* Past 2^31 bytes: rows of 1 GiB, then the rest. */
  const int64_t row = (int64_t)1 << 30, rows = (int64_t)bytes / row, rest = (int64_t)bytes % row;
  const int64_t bst[4] = {0, 0, row, 1}, bshape[4] = {1, 1, rows, row};
  if (kvc_gpu_plan(&out[0], dst, bst, NULL, NULL, bshape, 1, 0)) return -1;
  if (!rest) return 1;
  const int64_t rshape[4] = {1, 1, 1, rest};
  return kvc_gpu_plan(&out[1], (char*)dst + rows * row, st, NULL, NULL, rshape, 1, 0) ? -1 : 2;
}

/* [lo, hi): the bytes a strided tensor spans (strides may be negative). */
static void span(const void* base, const int64_t strides[4], const int64_t shape[4], int64_t elem, uintptr_t* lo,
                 uintptr_t* hi) {
  int64_t low = 0, high = 0;
  for (int i = 0; i < 4; i++) {
    int64_t reach = (shape[i] - 1) * strides[i] * elem;
    if (reach < 0)
      low += reach;
    else
      high += reach;
  }
  *lo = (uintptr_t)base + (uintptr_t)low;
  *hi = (uintptr_t)base + (uintptr_t)high + (uintptr_t)elem;
}

int kvc_gpu_ranges_overlap(const void* dst, const int64_t dst_strides[4], const void* src,
                           const int64_t src_strides[4], const int64_t shape[4], size_t elem_size) {
  for (int i = 0; i < 4; i++)
    if (shape[i] <= 0) return 0;
  uintptr_t dlo, dhi, slo, shi;
  span(dst, dst_strides, shape, (int64_t)elem_size, &dlo, &dhi);
  span(src, src_strides, shape, (int64_t)elem_size, &slo, &shi);
  return dlo < shi && slo < dhi;
}

int kvc_gpu_seq_shift(const void* dst, const int64_t dst_strides[4], const void* src, const int64_t src_strides[4],
                      size_t elem_size, int64_t* shift) {
  for (int i = 0; i < 4; i++)
    if (dst_strides[i] != src_strides[i]) return 0;
  int64_t row = dst_strides[2] * (int64_t)elem_size;
  if (row <= 0) return 0;
  int64_t diff = (int64_t)((intptr_t)dst - (intptr_t)src);
  if (diff == 0 || diff % row) return 0;
  *shift = diff / row;
  return 1;
}

void kvc_gpu_move_chunking(const kvc_gpu_copy* plan, int64_t shift, int32_t* chunk_rows, int* staged) {
  int64_t row_bytes = (int64_t)plan->n[3] * plan->unit;
  int64_t per_stage = KVC_GPU_STAGE_BYTES / row_bytes;
  int64_t k = shift < 0 ? -shift : shift;
  int64_t rows = plan->n[2];
  if (k >= per_stage) { /* a chunk of |shift| rows never reads what it writes */
    *staged = 0;
    *chunk_rows = (int32_t)(k < rows ? k : rows);
  } else {
    *staged = 1;
    *chunk_rows = (int32_t)(per_stage < rows ? per_stage : rows);
  }
}

/* |x| without overflow for the strides a plan accepts (INT64_MIN is refused by the callers' extent checks). */
static int64_t magnitude(int64_t x) { return x < 0 ? -x : x; }

/*
 * Whether the (b, h) planes of a seq shift by `shift` rows stay apart: every
 * plane's rows, read and written, span less than the distance to the next
 * plane along the smaller outer stride, and all planes of that axis less than
 * the step along the larger one. The move kernel orders one plane's reads
 * before its writes (one block per plane) and nothing across planes, so a
 * shift whose rows land in another plane would race; such a copy goes
 * through scratch. Sizes past 2^62 elements are refused the same way.
 */
static int planes_apart(const int64_t st[4], const int64_t shape[4], int64_t shift) {
  const int64_t limit = INT64_C(1) << 62;
  /* The outer axes by stride, an axis of extent 1 counting as the outer one: it has no second plane. */
  int inner = 1, outer = 0;
  if (shape[1] == 1 || (shape[0] > 1 && magnitude(st[0]) < magnitude(st[1]))) inner = 0, outer = 1;
  int64_t k = magnitude(shift), s2 = magnitude(st[2]), s3 = magnitude(st[3]);
  if (shape[2] + k > limit / (s2 ? s2 : 1) || shape[3] > limit / (s3 ? s3 : 1)) return 0;
  int64_t span = (shape[2] + k - 1) * s2 + (shape[3] - 1) * s3 + 1; /* elements one plane touches */
  if (shape[inner] > 1) {
    int64_t step = magnitude(st[inner]);
    if (span > step || shape[inner] - 1 > (limit - span) / (step ? step : 1)) return 0;
    span += (shape[inner] - 1) * step;
  }
  return shape[outer] == 1 || span <= magnitude(st[outer]);
}

kvc_gpu_route kvc_gpu_copy_route(void* dst, const int64_t dst_strides[4], const void* src, const int64_t src_strides[4],
                                 const int64_t shape[4], size_t elem_size, kvc_gpu_copy* move, int64_t* shift) {
  for (int i = 0; i < 4; i++)
    if (shape[i] <= 0) return KVC_GPU_ROUTE_NONE;
  if (!kvc_gpu_ranges_overlap(dst, dst_strides, src, src_strides, shape, elem_size)) return KVC_GPU_ROUTE_COPY;
  if (dst == src && !memcmp(dst_strides, src_strides, 4 * sizeof(int64_t))) return KVC_GPU_ROUTE_NONE;
  if (kvc_gpu_seq_shift(dst, dst_strides, src, src_strides, elem_size, shift) &&
      (*shift < 0 ? -*shift : *shift) < shape[2] && planes_apart(dst_strides, shape, *shift) &&
      kvc_gpu_plan(move, dst, dst_strides, src, src_strides, shape, elem_size, 1) == 0)
    return KVC_GPU_ROUTE_MOVE;
  return KVC_GPU_ROUTE_SCRATCH;
}
