/*
 * bench_rows_step.h: the step write that bench_rows_batch (CPU backend) and
 * bench_gpu's gpu_rows_batch part (CUDA plugin) time with the backend's
 * copy_rows_batch (backend API 6): one decode step of 256 sequences, one new
 * token each, into the K and V storage of every layer of a paged pool shaped
 * like Llama-3-8B (32 layers, 8 KV heads x head_dim 128, bfloat16, blocks of
 * 16 tokens): 64 jobs sharing one slot mapping, 16384 rows of 2 KiB, 32 MiB.
 * Sequence i writes into a block of its own (256 blocks, 8 MiB of storage a
 * job), at a random offset in it, as a serving loop's running sequences do.
 *
 * Both storage layouts of kvc_pool_layout, over the same memory:
 *   NHD  [blocks, 16, 8, 128]: the row index is the slot, one 2 KiB run;
 *   HND  [blocks, 8, 16, 128]: the row index is block * 8 * 16 + offset (row
 *        stride head_dim, head stride 16 * head_dim), 8 runs of 256 bytes.
 * The sources are [256, 8, 128] per job, compact.
 */
#ifndef KVC_BENCH_ROWS_STEP_H
#define KVC_BENCH_ROWS_STEP_H

#include <stdint.h>
#include <string.h>

#include "backend.h"

#define RS_LAYERS 32
#define RS_KV_HEADS 8
#define RS_HEAD_DIM 128
#define RS_BLOCK 16
#define RS_SEQS 256
#define RS_JOBS (2 * RS_LAYERS)
#define RS_ROW_ELEMS ((size_t)RS_KV_HEADS * RS_HEAD_DIM)
#define RS_ROW_BYTES (RS_ROW_ELEMS * sizeof(uint16_t))
#define RS_SLOTS ((size_t)RS_SEQS * RS_BLOCK) /* a job's storage */
#define RS_STORAGE_BYTES ((size_t)RS_JOBS * RS_SLOTS * RS_ROW_BYTES)
#define RS_SOURCE_BYTES ((size_t)RS_JOBS * RS_SEQS * RS_ROW_BYTES)
#define RS_STEP_BYTES RS_SOURCE_BYTES

typedef struct rows_step {
  int64_t slots[RS_SEQS];
  int64_t rows[2][RS_SEQS]; /* the slots as row indices: NHD, HND */
  int64_t tokens[RS_SEQS];
  kvc_copy_rows_job jobs[2][RS_JOBS]; /* NHD, HND */
} rows_step;

/* Job j's storage and source from the bases of all of them (host or device memory, only offsets are formed). */
static inline char* rows_step_storage(char* storage, int j) { return storage + (size_t)j * RS_SLOTS * RS_ROW_BYTES; }
static inline const char* rows_step_source(const char* sources, int j) {
  return sources + (size_t)j * RS_SEQS * RS_ROW_BYTES;
}

/* Byte offset of head h of sequence i's slot in job j's storage, in a layout (0 NHD, 1 HND). */
static inline size_t rows_step_head(const rows_step* s, int layout, int i, int h) {
  if (!layout) return (size_t)s->slots[i] * RS_ROW_BYTES + (size_t)h * RS_HEAD_DIM * sizeof(uint16_t);
  return ((size_t)s->rows[1][i] * RS_HEAD_DIM + (size_t)h * RS_BLOCK * RS_HEAD_DIM) * sizeof(uint16_t);
}

/* The slots (a fixed random draw) and the jobs of both layouts over `storage` and `sources`. */
static inline void rows_step_init(rows_step* s, char* storage, const char* sources) {
  int64_t perm[RS_SEQS];
  uint64_t rng = UINT64_C(0x2545f4914f6cdd1d);
  for (int i = 0; i < RS_SEQS; i++) perm[i] = i;
  for (int i = RS_SEQS - 1; i >= 0; i--) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    int k = (int)(rng % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[k];
    perm[k] = t;
    s->slots[i] = (int64_t)(rng >> 32) % RS_BLOCK; /* the offset, for now */
  }
  for (int i = 0; i < RS_SEQS; i++) {
    const int64_t off = s->slots[i];
    s->slots[i] = perm[i] * RS_BLOCK + off;
    s->rows[0][i] = s->slots[i];
    s->rows[1][i] = perm[i] * RS_KV_HEADS * RS_BLOCK + off;
    s->tokens[i] = i;
  }
  const int64_t nhd[4] = {(int64_t)RS_ROW_ELEMS, RS_HEAD_DIM, (int64_t)RS_ROW_ELEMS, 1};
  const int64_t hnd[4] = {RS_HEAD_DIM, RS_BLOCK * RS_HEAD_DIM, RS_HEAD_DIM, 1};
  const int64_t row[4] = {1, RS_KV_HEADS, 1, RS_HEAD_DIM};
  for (int layout = 0; layout < 2; layout++)
    for (int j = 0; j < RS_JOBS; j++) {
      kvc_copy_rows_job* job = &s->jobs[layout][j];
      memset(job, 0, sizeof *job);
      job->dst = rows_step_storage(storage, j);
      job->src = rows_step_source(sources, j);
      job->dst_rows = s->rows[layout];
      job->src_rows = s->tokens;
      memcpy(job->dst_strides, layout ? hnd : nhd, sizeof nhd);
      memcpy(job->src_strides, nhd, sizeof nhd); /* a compact [256, 8, 128] source */
      memcpy(job->row_shape, row, sizeof row);
      job->count = RS_SEQS;
      job->elem_size = sizeof(uint16_t);
    }
}

#endif /* KVC_BENCH_ROWS_STEP_H */
