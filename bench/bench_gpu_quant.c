/*
 * bench_gpu_quant.c: compact quantized mode's dequantization against the
 * card's memory bandwidth.
 *
 * gpu_dequant: 32 compact quantized layers (quanto 4-bit, groups of 64
 * along head_dim, residual 128) hold an 8k-token history; a compact layer
 * dequantizes its whole history on every step (one dequantize_groups job per
 * tensor), so a decode step reads every record and writes every value of the
 * history. The step's memory traffic (records read, bfloat16 values written)
 * per second is set against a cudaMemcpyAsync device to device of the same
 * output bytes (traffic: read and write) measured in the same run.
 */
#include "bench_gpu.h"

#define DEQ_CONTEXT 8192
#define DEQ_GROUP 64
#define DEQ_RESIDUAL 128

static kvc_cache* compact_cache(const gpu_bench* gb) {
  kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
  q.quantizer = KVC_QUANTIZER_QUANTO;
  q.mode = KVC_QUANT_MODE_COMPACT;
  q.nbits = 4;
  q.axis_key = q.axis_value = 0;
  q.q_group_size = DEQ_GROUP;
  q.residual_length = DEQ_RESIDUAL;
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = GPU_LAYERS;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_QUANTIZED;
  opt.config = &cfg;
  opt.quant = &q;
  opt.device.device_type = KVC_DEVICE_CUDA;
  opt.device.device_id = 0;
  kvc_cache* cache = NULL;
  bench_check(kvc_cache_create(&opt, &cache), "kvc_cache_create (compact quantized, CUDA)");
  bench_check(kvc_cache_set_stream(cache, (void*)gb->stream), "kvc_cache_set_stream");
  return cache;
}

void gpu_bench_dequant(gpu_bench* gb) {
  const int64_t context = DEQ_CONTEXT;
  const double values = (double)context * GPU_TOKEN_ELEMS * 2 * GPU_LAYERS; /* K and V of every layer */
  const double written = values * sizeof(uint16_t);
  const double read = values / DEQ_GROUP * (double)(2 * sizeof(uint16_t) + DEQ_GROUP * 4 / 8); /* records */
  printf("== gpu_dequant: compact quanto 4-bit g%d, %d layers at %lld tokens: %.0f MiB of values per step\n",
         DEQ_GROUP, GPU_LAYERS, (long long)context, written / (1 << 20));
  if (!gpu_fits((size_t)(4 * written), "gpu_dequant")) return;

  /* The roofline: a device-to-device copy of the bytes a step writes. */
  char* a = gpu_malloc((size_t)written);
  char* b = gpu_malloc((size_t)written);
  double* samples = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int r = -1; r < gb->reps; r++) {
    gpu_time_begin(gb);
    gpu_check(cudaMemcpyAsync(b, a, (size_t)written, cudaMemcpyDeviceToDevice, gb->stream), "cudaMemcpyAsync");
    const double ns = gpu_time_end(gb);
    if (r >= 0) samples[r] = ns;
  }
  const bench_stats copy = bench_summarize(samples, (size_t)gb->reps);
  gpu_check(cudaFree(a), "cudaFree");
  gpu_check(cudaFree(b), "cudaFree");

  kvc_cache* cache = compact_cache(gb);
  gpu_prefill pre;
  gpu_prefill_init(&pre, context);
  bench_check(kvc_cache_update_all(cache, GPU_LAYERS, pre.keys, pre.values, NULL, NULL), "prefill");
  gpu_prefill_free(&pre);
  gpu_steps steps;
  gpu_steps_init(&steps, gb->reps + 1);
  for (int r = -1; r < gb->reps; r++) {
    gpu_time_begin(gb);
    bench_check(kvc_cache_update_all(cache, GPU_LAYERS, steps.keys + (r + 1) * GPU_LAYERS,
                                     steps.values + (r + 1) * GPU_LAYERS, NULL, NULL),
                "kvc_cache_update_all (compact decode step)");
    const double ns = gpu_time_end(gb);
    if (r < 0) { /* the step's token comes back as written: it is still in the residual */
      uint16_t got[GPU_TOKEN_ELEMS];
      kvc_kv view;
      bench_check(kvc_cache_layer_view(cache, GPU_LAYERS - 1, &view), "kvc_cache_layer_view");
      gpu_read_token(gb, &view.value, gpu_seq_length(cache) - 1, got);
      gpu_expect_token(got, gpu_steps_token(&steps, 0, GPU_LAYERS - 1, 1), "gpu_dequant: the step's last value");
    } else {
      samples[r] = ns;
    }
  }
  const bench_stats step = bench_summarize(samples, (size_t)gb->reps);
  free(samples);
  gpu_steps_free(&steps);
  kvc_cache_destroy(cache);

  const double copy_traffic = 2 * written / copy.median, step_traffic = (written + read) / step.median;
  printf("%-46s %10.0f us  %8.1f GB/s traffic\n", "cudaMemcpyAsync D2D of the values' bytes", copy.median / 1e3,
         copy_traffic);
  printf("%-46s %10.0f us  %8.1f GB/s traffic  = %.2f of the roofline (%.1f GB/s of values written)\n\n",
         "compact decode step (dequantizes the history)", step.median / 1e3, step_traffic,
         step_traffic / copy_traffic, written / step.median);
  bench_add(gb->res, "gpu_dequant", "cuda-memcpy", "d2d_traffic_gbps", copy_traffic, "GB/s");
  bench_add(gb->res, "gpu_dequant", "kvcache-cuda", "compact_step_traffic_gbps_8k", step_traffic, "GB/s");
  bench_add(gb->res, "gpu_dequant", "kvcache-cuda", "compact_step_fraction_of_d2d", step_traffic / copy_traffic, "x");
  bench_add(gb->res, "gpu_dequant", "kvcache-cuda", "compact_step_ns_8k", step.median, "ns");
}
