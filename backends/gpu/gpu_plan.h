/*
 * backends/gpu/gpu_plan.h: a strided 4-D copy (or zero fill) in the form the
 * kernels run it, and the arithmetic that maps a kernel block to its share.
 *
 * The host plans (gpu_plan.c): byte strides, dimensions of extent 1 dropped,
 * neighbouring dimensions merged where both tensors are contiguous across
 * them, and rows cut into the widest units (up to 16 bytes) that every
 * address and stride allows, so that a contiguous cache region moves with
 * 16-byte loads and stores. A block then copies either one tile of one long
 * row or several whole short rows (a decode step's rows are short: one token
 * of head_dim elements).
 *
 * Alignment by construction: a unit is only as wide as what divides every
 * address the kernel will form, so every operand's base, every stride the
 * kernel multiplies by an index (including the batch-row strides that the
 * rows kernel adds: kvc_gpu_plan_rows) and the row length enter the choice.
 * gpu_plan_walk.h walks those addresses on the CPU to prove it per plan.
 *
 * Everything below is plain C so that the CPU test suite checks the plans
 * and the block arithmetic (tests/unit/gpu_plan) with the very functions the
 * kernels call; KVC_GPU_HD makes the inline ones device functions too.
 */
#ifndef KVC_GPU_PLAN_H
#define KVC_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_GPU_HD static __host__ __device__ __forceinline__
#else
#define KVC_GPU_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every kernel: a multiple of every warp/wave size (32, 64). */
#define KVC_GPU_BLOCK 256
/* Units one block copies at most: 8 per thread, 32 KiB with 16-byte units. */
#define KVC_GPU_TILE_UNITS 2048
/* Shared memory of the overlapping-move kernel: how many rows one chunk stages. */
#define KVC_GPU_STAGE_BYTES 32768

/*
 * dst[i0,i1,i2,i3] = src[i0,i1,i2,i3] (or 0 when src is NULL) for i < n,
 * unit by unit. Strides are in bytes; [3] is the stride between the units of
 * a row. 112 bytes: the batched kernel takes an array of these by value.
 */
typedef struct kvc_gpu_copy {
  char* dst;
  const char* src;
  int64_t dst_stride[4];
  int64_t src_stride[4];
  int32_t n[4];
  int32_t unit;            /* bytes per unit: 1, 2, 4, 8 or 16 */
  uint32_t rows_per_block; /* 1 when rows are split into tiles */
  uint32_t tiles_per_row;  /* 1 when a block holds whole rows */
  uint32_t first_block;    /* in a batch: the first block of this copy */
} kvc_gpu_copy;

/*
 * Plans dst = src over `shape` (element strides, as in core/backend.h);
 * src NULL plans a zero fill of dst. `keep_rows` keeps the four dimensions
 * as they are (no merging), which the overlapping move needs: its shift is
 * in rows of dimension 2. Returns 0 with *out filled, 1 when the shape is
 * empty (nothing to do), -1 when it cannot be planned (negative extent,
 * elem_size 0, extents past 2^31, elements that cannot be loaded whole
 * (not 1, 2, 4, 8 or 16 bytes, or not aligned to their size) laid out with
 * no contiguous dimension in all four dimensions, or more than 2^32 blocks).
 */
int kvc_gpu_plan(kvc_gpu_copy* out, void* dst, const int64_t dst_strides[4], const void* src,
                 const int64_t src_strides[4], const int64_t shape[4], size_t elem_size, int keep_rows);

/* 1 when the bytes src reads and the bytes dst writes may intersect (their address ranges do). */
int kvc_gpu_ranges_overlap(const void* dst, const int64_t dst_strides[4], const void* src,
                           const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);

/*
 * 1 when dst is src moved along dimension 2 of the same strides by *shift
 * rows (non-zero, may be negative): the window roll / compaction case that
 * core/backend.h allows to overlap, copied like memmove by the move kernel.
 */
int kvc_gpu_seq_shift(const void* dst, const int64_t dst_strides[4], const void* src, const int64_t src_strides[4],
                      size_t elem_size, int64_t* shift);

/*
 * The move kernel's chunking for a plan of S = n[2] rows of n[3] units
 * shifted by `shift` rows: chunks of *chunk_rows rows, staged in shared
 * memory (*staged 1: all of a chunk is read before any of it is written)
 * or, when the shift is at least as long as a chunk, copied directly.
 */
void kvc_gpu_move_chunking(const kvc_gpu_copy* plan, int64_t shift, int32_t* chunk_rows, int* staged);

/*
 * A copy_rows launch: the plan of batch row 0 of dst and src, and the byte
 * strides between batch rows that the rows kernel adds for each pair.
 */
typedef struct kvc_gpu_rows {
  kvc_gpu_copy plan;
  int64_t dst_row_bytes;
  int64_t src_row_bytes;
} kvc_gpu_rows;

/*
 * Plans copy_rows over one batch row [1, row_shape[1..3]] with the unit also
 * dividing the batch-row strides ds[0] and ss[0] (in bytes): the kernel
 * moves each pair's plan by dst_row x ds[0] and src_row x ss[0] bytes, an
 * offset the plan of one row alone never sees. Returns as kvc_gpu_plan.
 */
int kvc_gpu_plan_rows(kvc_gpu_rows* out, void* dst, const int64_t dst_strides[4], const void* src,
                      const int64_t src_strides[4], const int64_t row_shape[4], size_t elem_size);

/*
 * Plans the zeroing of `bytes` contiguous bytes at dst: one plan, or past
 * 2^31 bytes two (rows of 1 GiB, then the rest). Returns how many plans it
 * wrote (0 for no bytes), -1 when it cannot be planned.
 */
int kvc_gpu_plan_zero_bytes(kvc_gpu_copy out[2], void* dst, size_t bytes);

/* How copy_4d runs a copy (kvc_gpu_copy_route). */
typedef enum kvc_gpu_route {
  KVC_GPU_ROUTE_NONE,    /* nothing to move: empty, or every element onto itself */
  KVC_GPU_ROUTE_COPY,    /* src and dst do not intersect: one plan (kvc_gpu_plan) */
  KVC_GPU_ROUTE_MOVE,    /* a seq shift within one buffer: the move kernel with *move (keep_rows) and *shift */
  KVC_GPU_ROUTE_SCRATCH, /* any other overlap: two copies through a compact scratch buffer */
} kvc_gpu_route;

/*
 * The route of copy_4d for dst = src over `shape` (non-empty). For MOVE,
 * *move is the move kernel's plan and *shift its shift in rows; a seq shift
 * the move kernel cannot plan goes through scratch instead, and so does one
 * whose rows land in another (b, h) plane (the kernel orders each plane's
 * reads before its writes, not one plane's against another's).
 */
kvc_gpu_route kvc_gpu_copy_route(void* dst, const int64_t dst_strides[4], const void* src, const int64_t src_strides[4],
                                 const int64_t shape[4], size_t elem_size, kvc_gpu_copy* move, int64_t* shift);

/* Blocks of a plan (set by kvc_gpu_plan). */
KVC_GPU_HD uint32_t kvc_gpu_plan_blocks(const kvc_gpu_copy* p) {
  int64_t rows = (int64_t)p->n[0] * p->n[1] * p->n[2];
  if (p->tiles_per_row > 1) return (uint32_t)(rows * p->tiles_per_row);
  return (uint32_t)((rows + p->rows_per_block - 1) / p->rows_per_block);
}

/* Coordinates (i0, i1, i2) of row `row` in [0, n0*n1*n2). */
KVC_GPU_HD void kvc_gpu_row_coords(const kvc_gpu_copy* p, int64_t row, int32_t* i0, int32_t* i1, int32_t* i2) {
  int64_t rest = row / p->n[2];
  *i2 = (int32_t)(row - rest * p->n[2]);
  *i0 = (int32_t)(rest / p->n[1]);
  *i1 = (int32_t)(rest - (int64_t)*i0 * p->n[1]);
}

/* Moves (i0, i1, i2) on by `by` rows (by >= 0), without a division when they stay in one (i0, i1) plane. */
KVC_GPU_HD void kvc_gpu_row_advance(const kvc_gpu_copy* p, int32_t by, int32_t* i0, int32_t* i1, int32_t* i2) {
  int64_t s = (int64_t)*i2 + by;
  if (s < p->n[2]) {
    *i2 = (int32_t)s;
    return;
  }
  int64_t carry = s / p->n[2];
  *i2 = (int32_t)(s - carry * p->n[2]);
  int64_t h = (int64_t)*i1 + carry;
  if (h < p->n[1]) {
    *i1 = (int32_t)h;
    return;
  }
  int64_t carry0 = h / p->n[1];
  *i1 = (int32_t)(h - carry0 * p->n[1]);
  *i0 = (int32_t)(*i0 + carry0);
}

/*
 * The share of block `local` (0-based within the plan): rows [*row0,
 * *row0 + *nrows), units [*u0, *u1) of each. Either one row and a tile of
 * it, or whole rows.
 */
KVC_GPU_HD void kvc_gpu_block_share(const kvc_gpu_copy* p, uint32_t local, int64_t* row0, int32_t* nrows, int32_t* u0,
                                    int32_t* u1) {
  if (p->tiles_per_row > 1) {
    uint32_t tile = local % p->tiles_per_row;
    *row0 = (int64_t)(local / p->tiles_per_row);
    *nrows = 1;
    *u0 = (int32_t)(tile * (uint32_t)KVC_GPU_TILE_UNITS);
    int64_t end = (int64_t)*u0 + KVC_GPU_TILE_UNITS;
    *u1 = end < p->n[3] ? (int32_t)end : p->n[3];
    return;
  }
  int64_t rows = (int64_t)p->n[0] * p->n[1] * p->n[2];
  *row0 = (int64_t)local * p->rows_per_block;
  int64_t left = rows - *row0;
  *nrows = left < (int64_t)p->rows_per_block ? (int32_t)left : (int32_t)p->rows_per_block;
  *u0 = 0;
  *u1 = p->n[3];
}

/* Chunk c of the move kernel: rows [*a, *b); ascending when moving to lower addresses, else descending. */
KVC_GPU_HD void kvc_gpu_move_chunk(int32_t rows, int32_t chunk_rows, int64_t shift, int32_t c, int32_t* a, int32_t* b) {
  if (shift < 0) {
    *a = c * chunk_rows;
    int64_t end = (int64_t)*a + chunk_rows;
    *b = end < rows ? (int32_t)end : rows;
  } else {
    *b = rows - c * chunk_rows;
    *a = *b > chunk_rows ? *b - chunk_rows : 0;
  }
}

/* The plan pair (dst_row, src_row) of a copy_rows launch runs: row 0's plan moved to those batch rows. */
KVC_GPU_HD kvc_gpu_copy kvc_gpu_rows_pair(const kvc_gpu_rows* r, int32_t dst_row, int32_t src_row) {
  kvc_gpu_copy p = r->plan;
  p.dst += dst_row * r->dst_row_bytes;
  p.src += src_row * r->src_row_bytes;
  return p;
}

/*
 * The entry of a batch whose blocks include global block `block`: entries
 * are `stride` bytes apart and `first` points at entry 0's first_block
 * (ascending, entry 0's is 0). Both batched kernels find their entry so.
 */
KVC_GPU_HD int32_t kvc_gpu_find_entry(const char* first, size_t stride, int32_t count, uint32_t block) {
  int32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    int32_t mid = (lo + hi + 1) / 2;
    if (*(const uint32_t*)(first + (size_t)mid * stride) <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* The copy whose blocks include global block `block` of a batch (first_block ascending, copies[0].first_block 0). */
KVC_GPU_HD int32_t kvc_gpu_batch_find(const kvc_gpu_copy* copies, int32_t count, uint32_t block) {
  return kvc_gpu_find_entry((const char*)&copies[0].first_block, sizeof(kvc_gpu_copy), count, block);
}

/*
 * copy_rows_batch: the copy_rows of many jobs (the K and V of every layer
 * of a pool's step write) in one launch. A job is its copy_rows plan
 * (kvc_gpu_plan_rows: batch row 0's plan, with a unit that divides the
 * job's batch-row strides too) and its pairs, whose row indices sit in the
 * batch's index array (int32, after the jobs: kvc_gpu_rows_batch). A job's
 * blocks follow the previous job's (first_block ascending); a block finds
 * its job by binary search, as copy_4d_batch's blocks find their copy.
 *
 * A pair whose plan fits one block shares that block with the next pairs:
 * pairs_per_block whole pairs, the block's threads over all their units
 * (a decode step's row is a few hundred units at most, so one block per
 * pair would leave most of its threads idle). A longer pair takes
 * blocks_per_pair blocks of its own, as copy_rows runs it.
 * 152 bytes: the inline launch carries an array of these by value.
 */
typedef struct kvc_gpu_rows_job {
  kvc_gpu_rows rows;
  int32_t count;            /* pairs, >= 1 */
  uint32_t dst_index;       /* pair i copies batch row index[src_index + i] to row index[dst_index + i] */
  uint32_t src_index;
  uint32_t first_block;     /* in the batch's grid */
  uint32_t pairs_per_block; /* > 1: whole pairs per block (the pair's plan is one block), else 1 */
  uint32_t blocks_per_pair; /* blocks of one pair's plan (1 when pairs_per_block > 1) */
} kvc_gpu_rows_job;

/* Blocks of a job, in 64 bits: pairs times blocks per pair passes 2^32 (1,048,577 pairs of 4,096 blocks would wrap
   to 4,096), and the planner refuses a batch of more than 2^32 - 1 blocks only if it sees the true count. */
KVC_GPU_HD uint64_t kvc_gpu_rows_job_blocks(const kvc_gpu_rows_job* j) {
  if (j->pairs_per_block > 1) return ((uint64_t)(uint32_t)j->count + j->pairs_per_block - 1) / j->pairs_per_block;
  return (uint64_t)(uint32_t)j->count * j->blocks_per_pair;
}

/* The share of block `local` of job j: pairs [*pair0, *pair0 + *npairs); with one pair, block *plan_block of its plan. */
KVC_GPU_HD void kvc_gpu_rows_job_share(const kvc_gpu_rows_job* j, uint32_t local, int32_t* pair0, int32_t* npairs,
                                       uint32_t* plan_block) {
  if (j->pairs_per_block > 1) {
    *pair0 = (int32_t)(local * j->pairs_per_block);
    int32_t left = j->count - *pair0;
    *npairs = left < (int32_t)j->pairs_per_block ? left : (int32_t)j->pairs_per_block;
    *plan_block = 0;
    return;
  }
  *pair0 = (int32_t)(local / j->blocks_per_pair);
  *npairs = 1;
  *plan_block = local - (uint32_t)*pair0 * j->blocks_per_pair;
}

/* The plan of pair `pair` of job j: its plan moved to the pair's batch rows. */
KVC_GPU_HD kvc_gpu_copy kvc_gpu_rows_job_pair(const kvc_gpu_rows_job* j, const int32_t* index, int32_t pair) {
  return kvc_gpu_rows_pair(&j->rows, index[j->dst_index + (uint32_t)pair], index[j->src_index + (uint32_t)pair]);
}

/* Units one pair of job j moves, for jobs whose pairs share blocks (their plan is one block: at most 2048 units). */
KVC_GPU_HD int32_t kvc_gpu_rows_job_units(const kvc_gpu_rows_job* j) {
  const kvc_gpu_copy* p = &j->rows.plan;
  return p->n[0] * p->n[1] * p->n[2] * p->n[3];
}

/*
 * Unit t of a block that holds pairs [pair0, ...) of job j (pairs_per_block
 * > 1): thread t takes unit t % units of row (t / units) of the pairs' rows
 * in order, `units` = the units of one row; *dst and *src are its addresses.
 */
KVC_GPU_HD void kvc_gpu_rows_job_unit(const kvc_gpu_rows_job* j, const int32_t* index, int32_t pair0, int32_t t,
                                      char** dst, const char** src) {
  const kvc_gpu_copy* p = &j->rows.plan;
  /* 32-bit arithmetic throughout (a pair's plan is one block: 2048 units at most); 64-bit division is slow on GPUs. */
  const int32_t units = p->n[3], row = t / units, u = t - row * units;
  const int32_t rows = p->n[0] * p->n[1] * p->n[2], k = row / rows, r = row - k * rows, pair = pair0 + k;
  const int32_t rest = r / p->n[2], i2 = r - rest * p->n[2], i0 = rest / p->n[1], i1 = rest - i0 * p->n[1];
  const int64_t drow = index[j->dst_index + (uint32_t)pair], srow = index[j->src_index + (uint32_t)pair];
  *dst = p->dst + drow * j->rows.dst_row_bytes + i0 * p->dst_stride[0] + i1 * p->dst_stride[1] +
         i2 * p->dst_stride[2] + u * p->dst_stride[3];
  *src = p->src + srow * j->rows.src_row_bytes + i0 * p->src_stride[0] + i1 * p->src_stride[1] +
         i2 * p->src_stride[2] + u * p->src_stride[3];
}

/* The job whose blocks include global block `block` of a rows batch. */
KVC_GPU_HD int32_t kvc_gpu_rows_batch_find(const kvc_gpu_rows_job* jobs, int32_t count, uint32_t block) {
  return kvc_gpu_find_entry((const char*)&jobs[0].first_block, sizeof(kvc_gpu_rows_job), count, block);
}

/* The index array of a rows batch laid out as the kernels read it: right after its jobs. */
KVC_GPU_HD const int32_t* kvc_gpu_rows_batch_index(const kvc_gpu_rows_job* jobs, int32_t count) {
  return (const int32_t*)(const void*)(jobs + count);
}

/*
 * A copy_rows_batch as the kernel reads it: `area` (malloc'd) holds the
 * jobs, then the index array (int32), `bytes` in all; the jobs point into
 * it (jobs == area). Jobs that copy nothing are left out; jobs whose index
 * arrays are the same host arrays (the K and V of every layer of a group
 * share the slot mapping) share one copy of them in `index`.
 */
typedef struct kvc_gpu_rows_batch {
  void* area;
  size_t bytes;
  kvc_gpu_rows_job* jobs;
  int32_t njobs;
  int32_t* index;
  uint32_t nindex;
  uint32_t blocks; /* sum of the jobs' blocks */
} kvc_gpu_rows_batch;

struct kvc_copy_rows_job; /* abi/backend/backend.h */

/*
 * Plans jobs[0, count) of backend.h's copy_rows_batch. Returns 0 with *out
 * filled (njobs 0, area NULL when nothing is to be copied; release it with
 * kvc_gpu_rows_batch_free), -1 when it cannot be planned (count < 0, a
 * negative count, NULL arrays for a job that copies, a row index outside
 * [0, 2^31), a job kvc_gpu_plan_rows refuses, more than 2^32 - 1 blocks or
 * index entries, or no memory); *out is then empty.
 */
int kvc_gpu_plan_rows_batch(kvc_gpu_rows_batch* out, const struct kvc_copy_rows_job* jobs, int32_t count);
void kvc_gpu_rows_batch_free(kvc_gpu_rows_batch* b);

#ifdef __cplusplus
}
#endif

#endif /* KVC_GPU_PLAN_H */
