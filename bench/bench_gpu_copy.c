/*
 * bench_gpu_copy.c: bandwidth of kvcache's copies against the card's own.
 *
 * gpu_d2d: the roofline is one cudaMemcpyAsync of 1 GiB device to device;
 * kvcache copies the same bytes as an update_all of an 8k-token prefill of
 * all 32 layers (K and V of each layer from its own source, so nothing is
 * served from L2) into a dynamic cache with that room reserved; the cache is
 * cropped back to empty between repetitions. Bandwidth is bytes copied per
 * second (each byte is read once and written once).
 *
 * gpu_offload: one layer of an offloaded cache at 8k tokens (K and V, 32 MiB)
 * moved to the device (kvc_cache_prefetch) and back (kvc_cache_offload),
 * against cudaMemcpyAsync of the same bytes between pinned host memory and
 * the device. Each move includes what the call does besides copying
 * (allocating the destination tier's store, releasing the source's).
 */
#include "bench_gpu.h"

#define COPY_CONTEXT 8192

static double gbps(double bytes, double ns) { return ns > 0 ? bytes / ns : 0; }

/* The token at `pos` of a compact [1, heads, length, dim] device tensor. */
static void source_token(const gpu_bench* gb, void* data, int64_t length, int64_t pos, uint16_t* out) {
  int64_t shape[4] = {1, GPU_KV_HEADS, length, GPU_HEAD_DIM};
  kvc_tensor t = gpu_tensor_bf16(data, shape);
  gpu_read_token(gb, &t, pos, out);
}

static bench_stats time_memcpy(gpu_bench* gb, void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind) {
  double* samples = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int r = -1; r < gb->reps; r++) {
    gpu_time_begin(gb);
    gpu_check(cudaMemcpyAsync(dst, src, bytes, kind, gb->stream), "cudaMemcpyAsync");
    double ns = gpu_time_end(gb);
    if (r >= 0) samples[r] = ns;
  }
  bench_stats s = bench_summarize(samples, (size_t)gb->reps);
  free(samples);
  return s;
}

void gpu_bench_d2d(gpu_bench* gb) {
  const int64_t length = COPY_CONTEXT;
  const size_t half = (size_t)length * GPU_TOKEN_BYTES; /* K (or V) of one layer */
  const size_t total = half * 2 * GPU_LAYERS;
  printf("== gpu_d2d: %zu MiB device to device\n", total >> 20);
  if (!gpu_fits(3 * total, "gpu_d2d")) return;
  char* src = gpu_malloc(total);
  gpu_fill_bf16(src, total / sizeof(uint16_t), 17);

  char* dst = gpu_malloc(total);
  bench_stats peak = time_memcpy(gb, dst, src, total, cudaMemcpyDeviceToDevice);
  gpu_check(cudaFree(dst), "cudaFree");

  int64_t shape[4] = {1, GPU_KV_HEADS, length, GPU_HEAD_DIM};
  kvc_tensor keys[GPU_LAYERS], values[GPU_LAYERS];
  for (int l = 0; l < GPU_LAYERS; l++) {
    keys[l] = gpu_tensor_bf16(src + (size_t)(2 * l) * half, shape);
    values[l] = gpu_tensor_bf16(src + (size_t)(2 * l + 1) * half, shape);
  }
  kvc_cache* cache = gpu_make_cache(gb, KVC_PRESET_DYNAMIC, 0);
  bench_check(kvc_cache_reserve(cache, length), "kvc_cache_reserve");
  double* samples = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int r = -1; r < gb->reps; r++) { /* -1: warm-up, checked */
    gpu_time_begin(gb);
    bench_check(kvc_cache_update_all(cache, GPU_LAYERS, keys, values, NULL, NULL), "kvc_cache_update_all (prefill)");
    double ns = gpu_time_end(gb);
    if (r < 0) {
      uint16_t got[GPU_TOKEN_ELEMS], want[GPU_TOKEN_ELEMS];
      kvc_kv view;
      bench_check(kvc_cache_layer_view(cache, GPU_LAYERS - 1, &view), "kvc_cache_layer_view");
      gpu_read_token(gb, &view.value, length - 1, got);
      source_token(gb, src + (size_t)(2 * GPU_LAYERS - 1) * half, length, length - 1, want);
      gpu_expect_token(got, want, "gpu_d2d: last layer's last value");
      bench_check(kvc_cache_layer_view(cache, 0, &view), "kvc_cache_layer_view");
      gpu_read_token(gb, &view.key, 0, got);
      source_token(gb, src, length, 0, want);
      gpu_expect_token(got, want, "gpu_d2d: first layer's first key");
    } else {
      samples[r] = ns;
    }
    bench_check(kvc_cache_crop(cache, -length), "kvc_cache_crop");
    if (gpu_seq_length(cache) != 0) {
      fprintf(stderr, "bench_gpu: crop(-%lld) left %lld tokens\n", (long long)length,
              (long long)gpu_seq_length(cache));
      exit(1);
    }
  }
  bench_stats ours = bench_summarize(samples, (size_t)gb->reps);

  /* A clone copies everything too, but also allocates: reported for information, not against the roofline. */
  bench_check(kvc_cache_update_all(cache, GPU_LAYERS, keys, values, NULL, NULL), "kvc_cache_update_all (prefill)");
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  int clone_reps = gb->reps < 7 ? gb->reps : 7;
  for (int r = 0; r < clone_reps; r++) {
    kvc_cache* copy = NULL;
    double t0 = bench_now_ns();
    bench_check(kvc_cache_clone(cache, &copy), "kvc_cache_clone");
    gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
    samples[r] = bench_now_ns() - t0;
    kvc_cache_destroy(copy);
    gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  }
  bench_stats clone = bench_summarize(samples, (size_t)clone_reps);
  free(samples);
  kvc_cache_destroy(cache);
  gpu_check(cudaFree(src), "cudaFree");

  double peak_gbps = gbps((double)total, peak.median), ours_gbps = gbps((double)total, ours.median);
  printf("%-46s %10.0f us  %8.1f GB/s\n", "cudaMemcpyAsync (the card's D2D roofline)", peak.median / 1e3, peak_gbps);
  printf("%-46s %10.0f us  %8.1f GB/s  = %.2f of the roofline\n", "kvc_cache_update_all of an 8k prefill",
         ours.median / 1e3, ours_gbps, ours_gbps / peak_gbps);
  printf("%-46s %10.0f us  %8.1f GB/s  (host time, allocation included)\n\n", "kvc_cache_clone of that cache",
         clone.median / 1e3, gbps((double)total, clone.median));
  bench_add(gb->res, "gpu_d2d", "cuda-memcpy", "d2d_gbps", peak_gbps, "GB/s");
  bench_add(gb->res, "gpu_d2d", "kvcache-cuda", "d2d_gbps_update_all_prefill_8k", ours_gbps, "GB/s");
  bench_add(gb->res, "gpu_d2d", "kvcache-cuda", "d2d_fraction_of_peak", ours_gbps / peak_gbps, "x");
  bench_add(gb->res, "gpu_d2d", "kvcache-cuda", "clone_gbps_8k_with_allocation", gbps((double)total, clone.median),
            "GB/s");
  bench_add(gb->res, "gpu_d2d", "kvcache-cuda", "d2d_bytes", (double)total, "bytes");
}

static int layer_offloaded(const kvc_cache* cache, uint32_t layer) {
  kvc_layer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  bench_check(kvc_cache_layer_info(cache, layer, &info), "kvc_cache_layer_info");
  return info.is_offloaded;
}

static void expect_tier(const kvc_cache* cache, uint32_t layer, int offloaded, const char* after) {
  if (layer_offloaded(cache, layer) == offloaded) return;
  fprintf(stderr, "bench_gpu: after %s layer %u is %s, expected %s\n", after, layer,
          offloaded ? "on the device" : "offloaded", offloaded ? "offloaded" : "on the device");
  exit(1);
}

void gpu_bench_offload(gpu_bench* gb) {
  const int64_t length = COPY_CONTEXT;
  const uint32_t layer = 1; /* offloaded after the prefill (layer 0 is prefetched again after the last one) */
  const size_t move = 2 * (size_t)length * GPU_TOKEN_BYTES;
  printf("== gpu_offload: one layer at %lld tokens (%zu MiB of K and V), pinned host memory\n", (long long)length,
         move >> 20);
  if (!gpu_fits((size_t)length * GPU_STEP_BYTES + 3 * move, "gpu_offload")) return;

  void* host = NULL;
  gpu_check(cudaHostAlloc(&host, move, cudaHostAllocDefault), "cudaHostAlloc");
  void* dev = gpu_malloc(move);
  memset(host, 0x3f, move);
  bench_stats h2d_ref = time_memcpy(gb, dev, host, move, cudaMemcpyHostToDevice);
  bench_stats d2h_ref = time_memcpy(gb, host, dev, move, cudaMemcpyDeviceToHost);
  gpu_check(cudaFree(dev), "cudaFree");
  gpu_check(cudaFreeHost(host), "cudaFreeHost");

  gpu_prefill p;
  gpu_prefill_init(&p, length);
  kvc_cache* cache = gpu_make_cache(gb, KVC_PRESET_OFFLOADED, 0);
  bench_check(kvc_cache_reserve(cache, length), "kvc_cache_reserve");
  bench_check(kvc_cache_update_all(cache, GPU_LAYERS, p.keys, p.values, NULL, NULL), "prefill (offloaded)");
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  expect_tier(cache, layer, 1, "the prefill");

  double* h2d = bench_alloc((size_t)gb->reps * sizeof(double));
  double* d2h = bench_alloc((size_t)gb->reps * sizeof(double));
  double* h2d_host = bench_alloc((size_t)gb->reps * sizeof(double));
  double* d2h_host = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int r = -1; r < gb->reps; r++) { /* -1: warm-up, checked */
    double t0 = bench_now_ns();
    gpu_time_begin(gb);
    bench_check(kvc_cache_prefetch(cache, layer), "kvc_cache_prefetch");
    double in = gpu_time_end(gb);
    double t1 = bench_now_ns();
    if (r < 0) {
      expect_tier(cache, layer, 0, "kvc_cache_prefetch");
      uint16_t got[GPU_TOKEN_ELEMS], want[GPU_TOKEN_ELEMS];
      kvc_kv view;
      bench_check(kvc_cache_layer_view(cache, layer, &view), "kvc_cache_layer_view");
      gpu_read_token(gb, &view.key, length - 1, got);
      source_token(gb, p.k, length, length - 1, want);
      gpu_expect_token(got, want, "gpu_offload: prefetched layer's last key");
      kvc_memory_info mem;
      memset(&mem, 0, sizeof mem);
      mem.struct_size = sizeof mem;
      bench_check(kvc_cache_memory(cache, &mem), "kvc_cache_memory");
      printf("after prefetching layer %u: %.1f MiB in the device tier, %.1f MiB in the host tier\n", layer,
             (double)mem.bytes_device / (1 << 20), (double)mem.bytes_host / (1 << 20));
    }
    double t2 = bench_now_ns();
    gpu_time_begin(gb);
    bench_check(kvc_cache_offload(cache, layer), "kvc_cache_offload");
    double out = gpu_time_end(gb);
    double t3 = bench_now_ns();
    if (r < 0) {
      expect_tier(cache, layer, 1, "kvc_cache_offload");
      continue;
    }
    h2d[r] = in;
    d2h[r] = out;
    h2d_host[r] = t1 - t0;
    d2h_host[r] = t3 - t2;
  }
  kvc_cache_destroy(cache);
  gpu_prefill_free(&p);

  bench_stats in = bench_summarize(h2d, (size_t)gb->reps), out = bench_summarize(d2h, (size_t)gb->reps);
  bench_stats in_host = bench_summarize(h2d_host, (size_t)gb->reps);
  bench_stats out_host = bench_summarize(d2h_host, (size_t)gb->reps);
  free(h2d), free(d2h), free(h2d_host), free(d2h_host);
  double ref_in = gbps((double)move, h2d_ref.median), ref_out = gbps((double)move, d2h_ref.median);
  double kv_in = gbps((double)move, in.median), kv_out = gbps((double)move, out.median);
  printf("%-46s %8.1f GB/s\n", "H2D cudaMemcpyAsync, pinned", ref_in);
  printf("%-46s %8.1f GB/s  = %.2f of pinned (host wall %.0f us)\n", "H2D kvc_cache_prefetch", kv_in,
         kv_in / ref_in, in_host.median / 1e3);
  printf("%-46s %8.1f GB/s\n", "D2H cudaMemcpyAsync, pinned", ref_out);
  printf("%-46s %8.1f GB/s  = %.2f of pinned (host wall %.0f us)\n\n", "D2H kvc_cache_offload", kv_out,
         kv_out / ref_out, out_host.median / 1e3);
  bench_add(gb->res, "gpu_offload", "cuda-memcpy", "h2d_gbps_pinned", ref_in, "GB/s");
  bench_add(gb->res, "gpu_offload", "cuda-memcpy", "d2h_gbps_pinned", ref_out, "GB/s");
  bench_add(gb->res, "gpu_offload", "kvcache-cuda", "h2d_gbps_prefetch", kv_in, "GB/s");
  bench_add(gb->res, "gpu_offload", "kvcache-cuda", "d2h_gbps_offload", kv_out, "GB/s");
  bench_add(gb->res, "gpu_offload", "kvcache-cuda", "h2d_fraction_of_pinned", kv_in / ref_in, "x");
  bench_add(gb->res, "gpu_offload", "kvcache-cuda", "d2h_fraction_of_pinned", kv_out / ref_out, "x");
  bench_add(gb->res, "gpu_offload", "kvcache-cuda", "prefetch_host_wall_ns", in_host.median, "ns");
  bench_add(gb->res, "gpu_offload", "kvcache-cuda", "offload_host_wall_ns", out_host.median, "ns");
  bench_add(gb->res, "gpu_offload", "kvcache-cuda", "move_bytes", (double)move, "bytes");
}
