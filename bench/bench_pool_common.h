/*
 * bench_pool_common.h: what bench_pool (CPU) and bench_gpu's pool part share:
 * the decode step the write benchmarks store.
 */
#ifndef KVC_BENCH_POOL_COMMON_H
#define KVC_BENCH_POOL_COMMON_H

#include "bench_common.h"

#include "kvcache/pool.h"

/*
 * `n` sequences of 0-14 committed tokens each (i % 15 for sequence i), then
 * one reserved decode token each, whose slot goes to slots[i]: a step whose n
 * slots lie in n different blocks of a one-group pool of 16-token blocks, at
 * different offsets. The sequences live until kvc_pool_destroy.
 */
static inline void bench_pool_decode_step(kvc_pool* pool, int n, int64_t* slots) {
  int32_t ids[16];
  int64_t prefill[16];
  for (int t = 0; t < 16; t++) ids[t] = 1 + t;
  for (int i = 0; i < n; i++) {
    kvc_pool_sequence* seq = NULL;
    bench_check(kvc_pool_sequence_create(pool, NULL, &seq), "kvc_pool_sequence_create");
    if (i % 15) {
      bench_check(kvc_pool_reserve(seq, ids, (size_t)(i % 15), prefill), "kvc_pool_reserve");
      bench_check(kvc_pool_commit(seq), "kvc_pool_commit");
    }
    bench_check(kvc_pool_reserve(seq, ids, 1, &slots[i]), "kvc_pool_reserve");
  }
}

/*
 * The step's sources: keys[l] and values[l] are [n, heads, head_dim] tensors
 * of `dtype` (2-byte elements) on `device` over `data`, laid out
 * [layers][K, V][n][heads * head_dim]. `shape` (3 entries) is filled and
 * must outlive the tensors.
 */
static inline void bench_pool_step_tensors(void* data, kvc_dtype dtype, kvc_device device, int layers, int64_t n,
                                           int64_t heads, int64_t head_dim, int64_t* shape, kvc_tensor* keys,
                                           kvc_tensor* values) {
  shape[0] = n;
  shape[1] = heads;
  shape[2] = head_dim;
  for (int l = 0; l < layers; l++)
    for (int v = 0; v < 2; v++) {
      kvc_tensor t = bench_tensor_bf16((uint16_t*)data + ((size_t)l * 2 + (size_t)v) * (size_t)(n * heads * head_dim),
                                       shape);
      t.ndim = 3;
      t.dtype = kvc_dtype_to_data_type(dtype);
      t.device = device;
      if (v)
        values[l] = t;
      else
        keys[l] = t;
    }
}

#endif /* KVC_BENCH_POOL_COMMON_H */
