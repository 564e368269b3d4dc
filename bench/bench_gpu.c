/*
 * bench_gpu: kvcache's CUDA backend on a Llama-3-8B-like shape (32 layers,
 * 8 KV heads, head_dim 128, bfloat16, batch 1), against the card's own
 * numbers measured in the same run:
 *
 *   gpu_decode_step  one decode step (one token of K/V for every layer) at
 *                    1k, 8k and 32k cached tokens, dynamic and static caches
 *                    (kvc_cache_update_all), and an offloaded cache
 *                    (32 kvc_cache_update calls, as a model makes them);
 *                    timed with events on the stream the caches are bound
 *                    to; 64 cudaMemcpyAsync of the same bytes for scale.
 *   gpu_launches     one static update_all step captured into a CUDA graph
 *                    (cudaStreamCaptureModeGlobal, so any allocation or host
 *                    synchronisation in it fails the capture): its kernel
 *                    and copy nodes are the launches of a step; the graph is
 *                    replayed and its write checked.
 *   gpu_d2d          the card's device-to-device copy bandwidth (one large
 *                    cudaMemcpyAsync) against kvcache copying the same bytes
 *                    (an update_all of an 8k-token prefill of all 32 layers).
 *   gpu_offload      host<->device bandwidth of an offloaded layer
 *                    (kvc_cache_prefetch / kvc_cache_offload, pinned host
 *                    tier) against cudaMemcpyAsync with pinned memory.
 *   gpu_dequant      compact quantized mode's decode step, which dequantizes
 *                    the whole 8k history of 32 layers (dequantize_groups),
 *                    as memory traffic against a device-to-device copy.
 *   gpu_pool_write   a device pool's kvc_pool_write of one decode step of 256
 *                    sequences (all 32 layers, K and V) through the slot
 *                    mapping, against a device-to-device copy of the same
 *                    bytes; its launches counted in a captured graph.
 *   gpu_rows_batch   the paged pool's step write through the plugin's
 *                    copy_rows_batch (256 sequences x 32 layers x K,V, NHD
 *                    and HND; a 4096-token prefill, staged and captured)
 *                    against cudaMemcpyAsync of the same bytes.
 *
 * Without a usable CUDA device it prints "bench_gpu: SKIPPED: <why>" and
 * exits 0. Results go to results.json like the other benchmarks.
 */
#include "bench_gpu.h"

void gpu_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "bench_gpu: %s failed: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
  exit(1);
}

void* gpu_malloc(size_t bytes) {
  void* p = NULL;
  gpu_check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  return p;
}

kvc_tensor gpu_tensor_bf16(void* device_data, int64_t* shape) {
  kvc_tensor t = bench_tensor_bf16(device_data, shape);
  t.device.device_type = KVC_DEVICE_CUDA;
  t.device.device_id = 0;
  return t;
}

kvc_cache* gpu_make_cache(const gpu_bench* gb, kvc_preset preset, int64_t max_cache_len) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = GPU_LAYERS;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = preset;
  opt.config = &cfg;
  opt.max_cache_len = max_cache_len;
  opt.device.device_type = KVC_DEVICE_CUDA;
  opt.device.device_id = 0;
  kvc_cache* cache = NULL;
  bench_check(kvc_cache_create(&opt, &cache), "kvc_cache_create (CUDA)");
  bench_check(kvc_cache_set_stream(cache, (void*)gb->stream), "kvc_cache_set_stream");
  if (kvc_cache_stream(cache) != (void*)gb->stream) {
    fprintf(stderr, "bench_gpu: kvc_cache_stream does not return the stream the cache was bound to\n");
    exit(1);
  }
  return cache;
}

void gpu_fill_bf16(void* device_data, size_t count, uint64_t seed) {
  /* In slices, so that a 1 GiB source does not need 1 GiB of host memory. */
  const size_t slice = (size_t)1 << 22;
  uint16_t* host = bench_alloc((count < slice ? count : slice) * sizeof(uint16_t));
  for (size_t done = 0; done < count; done += slice) {
    size_t n = count - done < slice ? count - done : slice;
    bench_fill_bf16(host, n, seed + done);
    gpu_check(cudaMemcpy((uint16_t*)device_data + done, host, n * sizeof(uint16_t), cudaMemcpyHostToDevice),
              "cudaMemcpy (fill)");
  }
  free(host);
  /* A copy from pageable memory may return before its DMA lands, ordered only on the legacy default stream;
     the caches' stream is a non-blocking one. */
  gpu_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void gpu_time_begin(gpu_bench* gb) { gpu_check(cudaEventRecord(gb->start, gb->stream), "cudaEventRecord"); }

double gpu_time_end(gpu_bench* gb) {
  gpu_check(cudaEventRecord(gb->stop, gb->stream), "cudaEventRecord");
  gpu_check(cudaEventSynchronize(gb->stop), "cudaEventSynchronize");
  float ms = 0;
  gpu_check(cudaEventElapsedTime(&ms, gb->start, gb->stop), "cudaEventElapsedTime");
  return (double)ms * 1e6;
}

void gpu_read_token(const gpu_bench* gb, const kvc_tensor* view, int64_t pos, uint16_t* out) {
  int on_gpu = view->device.device_type == KVC_DEVICE_CUDA || view->device.device_type == KVC_DEVICE_CUDA_HOST;
  if (!on_gpu || view->ndim != 4 || view->shape[1] != GPU_KV_HEADS ||
      view->shape[3] != GPU_HEAD_DIM || pos < 0 || pos >= view->shape[2]) {
    fprintf(stderr,
            "bench_gpu: a returned view is not a CUDA [1, %d, >%lld, %d] tensor (device type %d, ndim %d)\n",
            GPU_KV_HEADS, (long long)pos, GPU_HEAD_DIM, (int)view->device.device_type, (int)view->ndim);
    exit(1);
  }
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  /* cudaMemcpyDefault: an offloaded layer's view is pinned host memory, reached through unified addressing. */
  const char* base = (const char*)view->data + view->byte_offset;
  for (int h = 0; h < GPU_KV_HEADS; h++) {
    int64_t off = h * bench_stride(view, 1) + pos * bench_stride(view, 2);
    gpu_check(cudaMemcpy(out + (size_t)h * GPU_HEAD_DIM, base + off * (int64_t)sizeof(uint16_t),
                         GPU_HEAD_DIM * sizeof(uint16_t), cudaMemcpyDefault),
              "cudaMemcpy (read back)");
  }
}

void gpu_expect_token(const uint16_t* got, const uint16_t* want, const char* what) {
  if (memcmp(got, want, GPU_TOKEN_BYTES) == 0) return;
  size_t i = 0;
  while (got[i] == want[i]) i++;
  fprintf(stderr, "bench_gpu: %s: element %zu (head %zu) is 0x%04x, expected 0x%04x\n", what, i,
          i / GPU_HEAD_DIM, got[i], want[i]);
  exit(1);
}

int64_t gpu_seq_length(const kvc_cache* cache) {
  int64_t n = -1;
  bench_check(kvc_cache_seq_length(cache, 0, &n), "kvc_cache_seq_length");
  return n;
}

void gpu_steps_init(gpu_steps* d, int steps) {
  size_t elems = (size_t)steps * GPU_LAYERS * 2 * GPU_TOKEN_ELEMS;
  d->steps = steps;
  d->host = bench_alloc(elems * sizeof(uint16_t));
  bench_fill_bf16(d->host, elems, 7);
  d->device = gpu_malloc(elems * sizeof(uint16_t));
  gpu_check(cudaMemcpy(d->device, d->host, elems * sizeof(uint16_t), cudaMemcpyHostToDevice), "cudaMemcpy (steps)");
  gpu_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); /* see gpu_fill_bf16 */
  d->shape[0] = 1;
  d->shape[1] = GPU_KV_HEADS;
  d->shape[2] = 1;
  d->shape[3] = GPU_HEAD_DIM;
  d->keys = bench_alloc((size_t)steps * GPU_LAYERS * sizeof(kvc_tensor));
  d->values = bench_alloc((size_t)steps * GPU_LAYERS * sizeof(kvc_tensor));
  for (int s = 0; s < steps; s++)
    for (int l = 0; l < GPU_LAYERS; l++)
      for (int is_value = 0; is_value < 2; is_value++) {
        size_t off = (((size_t)s * GPU_LAYERS + (size_t)l) * 2 + (size_t)is_value) * GPU_TOKEN_ELEMS;
        kvc_tensor t = gpu_tensor_bf16((uint16_t*)d->device + off, d->shape);
        if (is_value)
          d->values[s * GPU_LAYERS + l] = t;
        else
          d->keys[s * GPU_LAYERS + l] = t;
      }
}

void gpu_steps_free(gpu_steps* d) {
  gpu_check(cudaFree(d->device), "cudaFree");
  free(d->host);
  free(d->keys);
  free(d->values);
}

const uint16_t* gpu_steps_token(const gpu_steps* d, int step, int layer, int is_value) {
  return d->host + (((size_t)step * GPU_LAYERS + (size_t)layer) * 2 + (size_t)is_value) * GPU_TOKEN_ELEMS;
}

void gpu_prefill_init(gpu_prefill* p, int64_t length) {
  size_t elems = (size_t)length * GPU_TOKEN_ELEMS;
  p->shape[0] = 1;
  p->shape[1] = GPU_KV_HEADS;
  p->shape[2] = length;
  p->shape[3] = GPU_HEAD_DIM;
  p->k = gpu_malloc(elems * sizeof(uint16_t));
  p->v = gpu_malloc(elems * sizeof(uint16_t));
  gpu_fill_bf16(p->k, elems, 11);
  gpu_fill_bf16(p->v, elems, 13);
  for (int l = 0; l < GPU_LAYERS; l++) {
    p->keys[l] = gpu_tensor_bf16(p->k, p->shape);
    p->values[l] = gpu_tensor_bf16(p->v, p->shape);
  }
}

void gpu_prefill_free(gpu_prefill* p) {
  gpu_check(cudaFree(p->k), "cudaFree");
  gpu_check(cudaFree(p->v), "cudaFree");
}

int gpu_fits(size_t bytes, const char* what) {
  size_t free_bytes = 0, total = 0;
  gpu_check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  const size_t margin = (size_t)1 << 30;
  if (free_bytes > margin && bytes <= free_bytes - margin) return 1;
  printf("%s: SKIPPED: needs %.2f GiB of device memory, %.2f GiB free (1 GiB kept as margin)\n", what,
         (double)bytes / (1 << 30), (double)free_bytes / (1 << 30));
  return 0;
}

/* Whether this machine can run the benchmark; `why` says why not. */
static int gpu_usable(char* why, size_t len) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
      snprintf(why, len, "no CUDA driver on this machine (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    else
      snprintf(why, len, "no usable CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    return 0;
  }
  if (count == 0) {
    snprintf(why, len, "no CUDA device");
    return 0;
  }
  return 1;
}

/* A device exists: kvcache must be able to use it, or the build is broken (bench_gpu is built only with KVC_CUDA). */
static void require_kvcache_cuda(void) {
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.device.device_type = KVC_DEVICE_CUDA;
  opt.device.device_id = 0;
  kvc_cache* probe = NULL;
  kvc_error* err = kvc_cache_create(&opt, &probe);
  if (err) {
    fprintf(stderr,
            "bench_gpu: a CUDA device is present but kvcache cannot use it: %s\n"
            "bench_gpu: point KVC_BACKEND_PATH at the directory holding libkvcache-cuda.so\n",
            kvc_error_message(err));
    kvc_error_destroy(err);
    exit(1);
  }
  kvc_cache_destroy(probe);
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  char why[256];
  if (!gpu_usable(why, sizeof why)) {
    printf("bench_gpu: SKIPPED: %s\n", why);
    return 0;
  }
  gpu_check(cudaSetDevice(0), "cudaSetDevice");
  require_kvcache_cuda();

  static bench_results res;
  gpu_bench gb;
  memset(&gb, 0, sizeof gb);
  gb.reps = args.reps ? args.reps : 31;
  gb.steps = args.steps;
  gb.res = &res;
  if (args.context) {
    gb.contexts[0] = args.context;
    gb.ncontexts = 1;
  } else {
    gb.contexts[0] = 1024;
    gb.contexts[1] = 8192;
    gb.contexts[2] = 32768;
    gb.ncontexts = 3;
  }
  gpu_check(cudaStreamCreateWithFlags(&gb.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  gpu_check(cudaEventCreate(&gb.start), "cudaEventCreate");
  gpu_check(cudaEventCreate(&gb.stop), "cudaEventCreate");

  struct cudaDeviceProp prop;
  gpu_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int runtime = 0, driver = 0;
  gpu_check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  gpu_check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  printf("bench_gpu: %s (sm_%d%d, %.1f GiB), CUDA runtime %d, driver %d; kvcache %s\n", prop.name, prop.major,
         prop.minor, (double)prop.totalGlobalMem / (1 << 30), runtime, driver, kvc_version_string());
  printf("shape: %d layers x %d KV heads x head_dim %d, bfloat16, batch 1; %d repetitions of %d steps; "
         "medians of GPU time between events on the caches' stream\n\n",
         GPU_LAYERS, GPU_KV_HEADS, GPU_HEAD_DIM, gb.reps, gb.steps);

  gpu_bench_steps(&gb);
  gpu_bench_launches(&gb);
  gpu_bench_d2d(&gb);
  gpu_bench_offload(&gb);
  gpu_bench_dequant(&gb);
  gpu_bench_pool_write(&gb);
  gpu_bench_rows_batch(&gb);

  gpu_check(cudaEventDestroy(gb.start), "cudaEventDestroy");
  gpu_check(cudaEventDestroy(gb.stop), "cudaEventDestroy");
  gpu_check(cudaStreamDestroy(gb.stream), "cudaStreamDestroy");
  bench_write_json(args.json_path, &res);
  return 0;
}
