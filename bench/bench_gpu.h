/*
 * bench_gpu.h: what the parts of bench_gpu share: the model shape, the CUDA
 * stream and events every measurement is timed with, device tensors, and the
 * checks that a benchmark moved the right bytes.
 *
 * bench_gpu links the CUDA runtime itself (to allocate device buffers, make
 * the stream the caches are bound to, time with events and capture graphs);
 * kvcache reaches the GPU through its CUDA plugin, as a user's program does.
 */
#ifndef KVC_BENCH_GPU_H
#define KVC_BENCH_GPU_H

/* First: it sets _POSIX_C_SOURCE before any system header is read. */
#include "bench_common.h"

#include <cuda_runtime_api.h>

/* Llama-3-8B-like: 32 layers, 8 KV heads, head_dim 128, bfloat16, batch 1. */
#define GPU_LAYERS 32
#define GPU_KV_HEADS 8
#define GPU_HEAD_DIM 128
#define GPU_TOKEN_ELEMS ((size_t)GPU_KV_HEADS * GPU_HEAD_DIM) /* one layer, one of K or V */
#define GPU_TOKEN_BYTES (GPU_TOKEN_ELEMS * sizeof(uint16_t))
#define GPU_STEP_BYTES (GPU_TOKEN_BYTES * 2 * GPU_LAYERS) /* K and V of every layer */
#define GPU_MAX_CONTEXTS 3

typedef struct gpu_bench {
  int reps;             /* repetitions per measurement; medians are reported */
  int steps;            /* decode steps per repetition */
  int64_t contexts[GPU_MAX_CONTEXTS];
  int ncontexts;
  cudaStream_t stream;  /* every kvcache cache of the run is bound to it */
  cudaEvent_t start, stop;
  bench_results* res;
} gpu_bench;

/* Stops the run on a CUDA error: a timing taken after one means nothing. */
void gpu_check(cudaError_t e, const char* what);
void* gpu_malloc(size_t bytes);

/* A compact bfloat16 tensor on CUDA device 0. */
kvc_tensor gpu_tensor_bf16(void* device_data, int64_t* shape);

/* A cache of `preset` for GPU_LAYERS full-attention layers on CUDA device 0, bound to gb->stream. */
kvc_cache* gpu_make_cache(const gpu_bench* gb, kvc_preset preset, int64_t max_cache_len);

/* Fills `count` bfloat16 values of device memory with bench_fill_bf16's values for `seed`. */
void gpu_fill_bf16(void* device_data, size_t count, uint64_t seed);

/* Events on the bound stream around work issued between gpu_time_begin and gpu_time_end: ns elapsed on the GPU. */
void gpu_time_begin(gpu_bench* gb);
double gpu_time_end(gpu_bench* gb);

/*
 * One token (every head) of a cache view at sequence position `pos`, batch
 * row 0, copied to `out` (GPU_TOKEN_ELEMS values) after the bound stream has
 * finished. Exits if the view is not on the device or not of our shape.
 */
void gpu_read_token(const gpu_bench* gb, const kvc_tensor* view, int64_t pos, uint16_t* out);

/* Exits with a message unless `got` equals `want` (GPU_TOKEN_ELEMS values). */
void gpu_expect_token(const uint16_t* got, const uint16_t* want, const char* what);

int64_t gpu_seq_length(const kvc_cache* cache);

/* The decode tokens: `steps` steps of K and V for every layer, in device memory, and their host copy. */
typedef struct gpu_steps {
  int steps;
  uint16_t* host;   /* [steps][GPU_LAYERS][2][GPU_TOKEN_ELEMS] */
  void* device;     /* same layout */
  int64_t shape[4]; /* {1, GPU_KV_HEADS, 1, GPU_HEAD_DIM} */
  kvc_tensor* keys; /* [steps][GPU_LAYERS] */
  kvc_tensor* values;
} gpu_steps;

void gpu_steps_init(gpu_steps* d, int steps);
void gpu_steps_free(gpu_steps* d);
const uint16_t* gpu_steps_token(const gpu_steps* d, int step, int layer, int is_value);

/* Prefill sources: [1, GPU_KV_HEADS, length, GPU_HEAD_DIM] keys and values on the device, shared by all layers. */
typedef struct gpu_prefill {
  int64_t shape[4];
  void *k, *v;
  kvc_tensor keys[GPU_LAYERS], values[GPU_LAYERS];
} gpu_prefill;

void gpu_prefill_init(gpu_prefill* p, int64_t length);
void gpu_prefill_free(gpu_prefill* p);

/* Whether `bytes` more fit in the device's free memory with a margin; prints why not when they do not. */
int gpu_fits(size_t bytes, const char* what);

/* The nodes of a captured graph by type (bench_gpu_graph.c): a launch is a kernel, memcpy or memset node. */
typedef struct gpu_node_counts {
  size_t kernels, copies, memsets, allocs, frees, other;
} gpu_node_counts;
gpu_node_counts gpu_count_nodes(cudaGraph_t graph);

/* The parts of the benchmark (bench_gpu_step.c, bench_gpu_graph.c, bench_gpu_copy.c, bench_gpu_quant.c,
   bench_gpu_pool.c, bench_gpu_rows.c). */
void gpu_bench_steps(gpu_bench* gb);
void gpu_bench_launches(gpu_bench* gb);
void gpu_bench_d2d(gpu_bench* gb);
void gpu_bench_offload(gpu_bench* gb);
void gpu_bench_dequant(gpu_bench* gb);
void gpu_bench_pool_write(gpu_bench* gb);
void gpu_bench_rows_batch(gpu_bench* gb);

#endif /* KVC_BENCH_GPU_H */
