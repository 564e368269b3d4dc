/*
 * bench_gpu_pool.c: a device pool's step write (kvcache/pool.h) against the
 * card's own copy.
 *
 * gpu_pool_write: 256 sequences of a pool on CUDA device 0 (Llama-3-8B-like
 * layers: 32, 8 KV heads, head_dim 128; bf16, then fp16), each holding 0-14
 * tokens and one reserved decode token, so the step's 256 slots lie in 256
 * different blocks. One kvc_pool_write stores the step's K and V of every
 * layer (32 MiB) through the slot mapping; the roofline is one
 * cudaMemcpyAsync of the same bytes device to device. Both are timed with
 * events on the pool's stream, alternated, medians reported. The write is
 * checked (rows of the first and last layers read back), and captured once
 * into a CUDA graph (cudaStreamCaptureModeGlobal) to count its launches: the
 * header promises one kernel launch for all layers.
 */
#include "bench_gpu.h"
#include "bench_pool_common.h"

#define POOL_SEQS 256
#define POOL_BLOCK 16

typedef struct gpu_pool_setup {
  kvc_pool* pool;
  kvc_kv first, last;          /* storage of layers 0 and GPU_LAYERS - 1 */
  int64_t slots[POOL_SEQS];
  uint16_t* host;              /* [GPU_LAYERS][2][POOL_SEQS][GPU_TOKEN_ELEMS] */
  void *src, *dst;             /* device: the step's K/V and the roofline's destination */
  int64_t shape[3];
  kvc_tensor keys[GPU_LAYERS], values[GPU_LAYERS];
} gpu_pool_setup;

static size_t step_elems(void) { return (size_t)GPU_LAYERS * 2 * POOL_SEQS * GPU_TOKEN_ELEMS; }

static size_t src_offset(int layer, int is_value, int token) {
  return (((size_t)layer * 2 + (size_t)is_value) * POOL_SEQS + (size_t)token) * GPU_TOKEN_ELEMS;
}

static void setup(gpu_pool_setup* w, gpu_bench* gb, kvc_dtype dtype) {
  kvc_pool_group_options group = KVC_POOL_GROUP_OPTIONS_INIT;
  group.block_size = POOL_BLOCK;
  group.num_blocks = POOL_SEQS + 2;
  kvc_pool_layer_options layers[GPU_LAYERS];
  for (int l = 0; l < GPU_LAYERS; l++) {
    kvc_pool_layer_options o = KVC_POOL_LAYER_OPTIONS_INIT;
    o.num_kv_heads = GPU_KV_HEADS;
    o.key_head_dim = GPU_HEAD_DIM;
    layers[l] = o;
  }
  kvc_pool_options opt = KVC_POOL_OPTIONS_INIT;
  opt.dtype = dtype;
  opt.device.device_type = KVC_DEVICE_CUDA;
  opt.device.device_id = 0;
  opt.num_groups = 1;
  opt.groups = &group;
  opt.num_layers = GPU_LAYERS;
  opt.layers = layers;
  bench_check(kvc_pool_create(&opt, &w->pool), "kvc_pool_create (CUDA)");
  bench_check(kvc_pool_set_stream(w->pool, (void*)gb->stream), "kvc_pool_set_stream");
  bench_check(kvc_pool_layer_storage(w->pool, 0, KVC_POOL_LAYOUT_NHD, &w->first), "kvc_pool_layer_storage");
  bench_check(kvc_pool_layer_storage(w->pool, GPU_LAYERS - 1, KVC_POOL_LAYOUT_NHD, &w->last),
              "kvc_pool_layer_storage");
  bench_pool_decode_step(w->pool, POOL_SEQS, w->slots);
  w->host = bench_alloc(step_elems() * sizeof(uint16_t));
  bench_fill_bf16(w->host, step_elems(), 23); /* read as fp16: finite, |x| in [1.75, 2) */
  w->src = gpu_malloc(step_elems() * sizeof(uint16_t));
  w->dst = gpu_malloc(step_elems() * sizeof(uint16_t));
  gpu_check(cudaMemcpy(w->src, w->host, step_elems() * sizeof(uint16_t), cudaMemcpyHostToDevice), "cudaMemcpy");
  gpu_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); /* see gpu_fill_bf16 */
  kvc_device cuda = {KVC_DEVICE_CUDA, 0};
  bench_pool_step_tensors(w->src, dtype, cuda, GPU_LAYERS, POOL_SEQS, GPU_KV_HEADS, GPU_HEAD_DIM, w->shape, w->keys,
                          w->values);
}

static void teardown(gpu_pool_setup* w) {
  kvc_pool_destroy(w->pool);
  gpu_check(cudaFree(w->src), "cudaFree");
  gpu_check(cudaFree(w->dst), "cudaFree");
  free(w->host);
}

/* The device address of `slot`'s row in a storage view (NHD, any strides). */
static const uint16_t* slot_row(const kvc_tensor* t, int64_t slot) {
  int64_t bs = t->shape[1];
  int64_t off = (slot / bs) * bench_stride(t, 0) + (slot % bs) * bench_stride(t, 1);
  return (const uint16_t*)((const char*)t->data + t->byte_offset) + off;
}

/* After the stream finished: the rows of every token in layers 0 and 31, K and V, are the source's. */
static void verify(gpu_bench* gb, const gpu_pool_setup* w, const char* what) {
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  uint16_t got[GPU_TOKEN_ELEMS];
  for (int i = 0; i < POOL_SEQS; i++)
    for (int k = 0; k < 4; k++) {
      const kvc_kv* kv = k < 2 ? &w->first : &w->last;
      int layer = k < 2 ? 0 : GPU_LAYERS - 1, is_value = k % 2;
      gpu_check(cudaMemcpy(got, slot_row(is_value ? &kv->value : &kv->key, w->slots[i]), GPU_TOKEN_BYTES,
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy (read back)");
      gpu_expect_token(got, w->host + src_offset(layer, is_value, i), what);
    }
}

static void write_step(gpu_pool_setup* w) {
  bench_check(kvc_pool_write(w->pool, w->keys, w->values, GPU_LAYERS, w->slots, POOL_SEQS), "kvc_pool_write");
}

/* One write captured into a graph: its nodes, or the reason it could not be captured. */
static void count_launches(gpu_bench* gb, gpu_pool_setup* w, const char* dn) {
  (void)cudaGetLastError();
  gpu_check(cudaStreamBeginCapture(gb->stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  kvc_error* err = kvc_pool_write(w->pool, w->keys, w->values, GPU_LAYERS, w->slots, POOL_SEQS);
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamEndCapture(gb->stream, &graph); /* always: the stream must leave capture mode */
  (void)cudaGetLastError();
  char metric[64];
  snprintf(metric, sizeof metric, "write_capturable_%s", dn);
  if (err || e != cudaSuccess || !graph) {
    printf("  %s: kvc_pool_write NOT capturable: %s\n", dn,
           err ? kvc_error_message(err) : cudaGetErrorString(e));
    if (err) kvc_error_destroy(err);
    if (graph) gpu_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
    bench_add(gb->res, "gpu_pool_write", "kvcache-cuda", metric, 0, "bool");
    return;
  }
  gpu_node_counts c = gpu_count_nodes(graph);
  gpu_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  printf("  %s: one kvc_pool_write captured: %zu kernel, %zu memcpy, %zu memset node(s)\n", dn, c.kernels, c.copies,
         c.memsets);
  bench_add(gb->res, "gpu_pool_write", "kvcache-cuda", metric, 1, "bool");
  snprintf(metric, sizeof metric, "kernels_per_write_%s", dn);
  bench_add(gb->res, "gpu_pool_write", "kvcache-cuda", metric, (double)c.kernels, "launches");
  snprintf(metric, sizeof metric, "launches_per_write_%s", dn);
  bench_add(gb->res, "gpu_pool_write", "kvcache-cuda", metric, (double)(c.kernels + c.copies + c.memsets),
            "launches");
}

void gpu_bench_pool_write(gpu_bench* gb) {
  static const kvc_dtype dtypes[2] = {KVC_DTYPE_BFLOAT16, KVC_DTYPE_FLOAT16};
  static const char* const dtype_names[2] = {"bf16", "fp16"};
  double bytes = (double)step_elems() * sizeof(uint16_t);
  size_t pool_bytes = (size_t)(POOL_SEQS + 2) * POOL_BLOCK * GPU_STEP_BYTES;
  printf("== gpu_pool_write: one decode step of %d sequences x %d layers x K,V (%d x %d), %.0f MiB, one "
         "kvc_pool_write on a device pool; medians of GPU time, alternated with a cudaMemcpyAsync of the same bytes\n",
         POOL_SEQS, GPU_LAYERS, GPU_KV_HEADS, GPU_HEAD_DIM, bytes / (1 << 20));
  if (!gpu_fits(pool_bytes + 2 * (size_t)bytes, "gpu_pool_write")) return;
  double* t[2];
  for (int k = 0; k < 2; k++) t[k] = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int d = 0; d < 2; d++) {
    gpu_pool_setup w;
    memset(&w, 0, sizeof w);
    setup(&w, gb, dtypes[d]);
    const char* dn = dtype_names[d];
    write_step(&w); /* warm-up, checked */
    verify(gb, &w, "gpu_pool_write: a row after kvc_pool_write");
    for (int r = 0; r < gb->reps; r++)
      for (int k = 0; k < 2; k++) { /* alternated: the order changes every repetition */
        int which = (r + k) % 2;
        gpu_time_begin(gb);
        if (which == 0)
          write_step(&w);
        else
          gpu_check(cudaMemcpyAsync(w.dst, w.src, (size_t)bytes, cudaMemcpyDeviceToDevice, gb->stream),
                    "cudaMemcpyAsync");
        t[which][r] = gpu_time_end(gb);
      }
    count_launches(gb, &w, dn);
    bench_stats sw = bench_summarize(t[0], (size_t)gb->reps), sm = bench_summarize(t[1], (size_t)gb->reps);
    printf("  %s: kvc_pool_write %8.0f ns [%.0f, %.0f] %6.1f GB/s | cudaMemcpyAsync D2D %8.0f ns %6.1f GB/s | "
           "write / memcpy %.2f\n",
           dn, sw.median, sw.min, sw.max, bytes / sw.median, sm.median, bytes / sm.median, sw.median / sm.median);
    char metric[64];
    snprintf(metric, sizeof metric, "step_ns_256x32_%s", dn);
    bench_add(gb->res, "gpu_pool_write", "kvcache-cuda", metric, sw.median, "ns");
    bench_add(gb->res, "gpu_pool_write", "cuda-memcpy", metric, sm.median, "ns");
    snprintf(metric, sizeof metric, "write_over_memcpy_%s", dn);
    bench_add(gb->res, "gpu_pool_write", "kvcache-cuda", metric, sw.median / sm.median, "ratio");
    teardown(&w);
  }
  for (int k = 0; k < 2; k++) free(t[k]);
  printf("\n");
}
