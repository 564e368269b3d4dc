/*
 * bench_gpu_step.c: the latency of one decode step on the GPU, all layers,
 * at each context length, for a dynamic and a static cache (one
 * kvc_cache_update_all per step) and an offloaded one (one kvc_cache_update
 * per layer, as a model's forward pass makes them).
 *
 * Each repetition times `steps` steps between two events on the stream the
 * caches are bound to (GPU time, which includes any time the GPU waits for
 * the host to issue the work); the host time to issue them is reported
 * beside it. Dynamic caches reserve context + steps tokens (what a caller
 * knowing its generation length does), so a step neither grows nor copies
 * history; each repetition crops its steps off again. Static caches have
 * room for every repetition's steps. Repetitions visit the contexts in turn,
 * so that drift falls on all of them alike. After a warm-up repetition the
 * newest token of the first and last layers is read back and compared.
 */
#include "bench_gpu.h"

typedef struct step_case {
  int64_t context;
  char label[24];
  kvc_cache *dynamic, *fixed; /* dynamic and static caches at this context */
  double *dyn, *dyn_host, *st, *st_host;
} step_case;

/* One repetition of update_all steps: GPU ns per step; host ns per step to *host_ns. */
static double time_update_all(gpu_bench* gb, kvc_cache* cache, const gpu_steps* d, double* host_ns) {
  kvc_kv out[GPU_LAYERS];
  gpu_time_begin(gb);
  double t0 = bench_now_ns();
  for (int s = 0; s < d->steps; s++)
    bench_check(kvc_cache_update_all(cache, GPU_LAYERS, &d->keys[s * GPU_LAYERS], &d->values[s * GPU_LAYERS],
                                     NULL, out),
                "kvc_cache_update_all");
  double host = bench_now_ns() - t0;
  double gpu = gpu_time_end(gb);
  *host_ns = host / d->steps;
  return gpu / d->steps;
}

/* The last step's K and V of the first and last layers are at `pos` of their views. */
static void verify_step(const gpu_bench* gb, const kvc_cache* cache, const gpu_steps* d, int last_step,
                        int64_t pos, const char* what) {
  int layers[2] = {0, GPU_LAYERS - 1};
  uint16_t got[GPU_TOKEN_ELEMS];
  for (int i = 0; i < 2; i++) {
    kvc_kv view;
    bench_check(kvc_cache_layer_view(cache, (uint32_t)layers[i], &view), "kvc_cache_layer_view");
    gpu_read_token(gb, &view.key, pos, got);
    gpu_expect_token(got, gpu_steps_token(d, last_step, layers[i], 0), what);
    gpu_read_token(gb, &view.value, pos, got);
    gpu_expect_token(got, gpu_steps_token(d, last_step, layers[i], 1), what);
  }
}

static void crop_back(kvc_cache* cache, int steps, int64_t context) {
  bench_check(kvc_cache_crop(cache, -(int64_t)steps), "kvc_cache_crop");
  if (gpu_seq_length(cache) != context) {
    fprintf(stderr, "bench_gpu: crop left %lld tokens, expected %lld\n", (long long)gpu_seq_length(cache),
            (long long)context);
    exit(1);
  }
}

/* The same bytes as one step, as 64 separate cudaMemcpyAsync (one per K or V per layer): GPU ns per step. */
static double time_memcpy_step(gpu_bench* gb, const gpu_steps* d, char* dst) {
  gpu_time_begin(gb);
  for (int s = 0; s < d->steps; s++)
    for (int l = 0; l < GPU_LAYERS; l++)
      for (int is_value = 0; is_value < 2; is_value++) {
        size_t i = ((size_t)s * GPU_LAYERS + (size_t)l) * 2 + (size_t)is_value;
        gpu_check(cudaMemcpyAsync(dst + i * GPU_TOKEN_BYTES, (const char*)d->device + i * GPU_TOKEN_BYTES,
                                  GPU_TOKEN_BYTES, cudaMemcpyDeviceToDevice, gb->stream),
                  "cudaMemcpyAsync");
      }
  return gpu_time_end(gb) / d->steps;
}

static void add_stats(gpu_bench* gb, const char* impl, const char* metric, const char* label, bench_stats s,
                      int with_range) {
  char m[64];
  snprintf(m, sizeof m, "%s_%s", metric, label);
  bench_add(gb->res, "gpu_decode_step", impl, m, s.median, "ns");
  if (!with_range) return;
  snprintf(m, sizeof m, "%s_min_%s", metric, label);
  bench_add(gb->res, "gpu_decode_step", impl, m, s.min, "ns");
  snprintf(m, sizeof m, "%s_max_%s", metric, label);
  bench_add(gb->res, "gpu_decode_step", impl, m, s.max, "ns");
}

static int prepare_case(gpu_bench* gb, step_case* c, const gpu_steps* d) {
  int64_t room = (int64_t)d->steps * (gb->reps + 1); /* static: the warm-up and every repetition */
  size_t need = (size_t)(2 * c->context + d->steps + room) * GPU_STEP_BYTES +
                (size_t)c->context * GPU_TOKEN_BYTES * 2;
  char what[64];
  snprintf(what, sizeof what, "decode step at %s", c->label);
  if (!gpu_fits(need, what)) return 0;

  gpu_prefill p;
  gpu_prefill_init(&p, c->context);
  c->dynamic = gpu_make_cache(gb, KVC_PRESET_DYNAMIC, 0);
  bench_check(kvc_cache_reserve(c->dynamic, c->context + d->steps), "kvc_cache_reserve");
  bench_check(kvc_cache_update_all(c->dynamic, GPU_LAYERS, p.keys, p.values, NULL, NULL), "prefill (dynamic)");
  c->fixed = gpu_make_cache(gb, KVC_PRESET_STATIC, c->context + room);
  bench_check(kvc_cache_update_all(c->fixed, GPU_LAYERS, p.keys, p.values, NULL, NULL), "prefill (static)");
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  gpu_prefill_free(&p);

  double host;
  time_update_all(gb, c->dynamic, d, &host); /* warm-up */
  if (gpu_seq_length(c->dynamic) != c->context + d->steps) {
    fprintf(stderr, "bench_gpu: dynamic cache holds %lld tokens after the steps, expected %lld\n",
            (long long)gpu_seq_length(c->dynamic), (long long)(c->context + d->steps));
    exit(1);
  }
  verify_step(gb, c->dynamic, d, d->steps - 1, c->context + d->steps - 1, "dynamic cache, newest token");
  crop_back(c->dynamic, d->steps, c->context);
  time_update_all(gb, c->fixed, d, &host);
  verify_step(gb, c->fixed, d, d->steps - 1, gpu_seq_length(c->fixed) - 1, "static cache, newest token");

  c->dyn = bench_alloc((size_t)gb->reps * sizeof(double));
  c->dyn_host = bench_alloc((size_t)gb->reps * sizeof(double));
  c->st = bench_alloc((size_t)gb->reps * sizeof(double));
  c->st_host = bench_alloc((size_t)gb->reps * sizeof(double));
  return 1;
}

static void report_case(gpu_bench* gb, step_case* c) {
  bench_stats dyn = bench_summarize(c->dyn, (size_t)gb->reps);
  bench_stats dyn_host = bench_summarize(c->dyn_host, (size_t)gb->reps);
  bench_stats st = bench_summarize(c->st, (size_t)gb->reps);
  bench_stats st_host = bench_summarize(c->st_host, (size_t)gb->reps);
  printf("%-8s %-34s %12.0f %12.0f %12.0f %14.0f\n", c->label, "dynamic: kvc_cache_update_all", dyn.median,
         dyn.min, dyn.max, dyn_host.median);
  printf("%-8s %-34s %12.0f %12.0f %12.0f %14.0f\n", c->label, "static:  kvc_cache_update_all", st.median, st.min,
         st.max, st_host.median);
  add_stats(gb, "kvcache-cuda", "step_ns_dynamic", c->label, dyn, 1);
  add_stats(gb, "kvcache-cuda", "step_host_ns_dynamic", c->label, dyn_host, 0);
  add_stats(gb, "kvcache-cuda", "step_ns_static", c->label, st, 1);
  add_stats(gb, "kvcache-cuda", "step_host_ns_static", c->label, st_host, 0);
  kvc_cache_destroy(c->dynamic);
  kvc_cache_destroy(c->fixed);
  free(c->dyn), free(c->dyn_host), free(c->st), free(c->st_host);
}

/*
 * Offloaded: every step brings each layer to the device and back (transformers'
 * OffloadedCache order), so a step moves the whole cache twice over PCIe; far
 * fewer steps and repetitions keep the run bounded, and contexts stop at 8k.
 */
static void bench_offloaded(gpu_bench* gb, const gpu_steps* d) {
  for (int i = 0; i < gb->ncontexts; i++) {
    int64_t context = gb->contexts[i];
    char label[24], what[64];
    bench_length_label(context, label, sizeof label);
    if (context > 8192) {
      printf("%-8s %-34s SKIPPED: moves %.1f GiB per step; measured up to 8k\n", label, "offloaded",
             2.0 * (double)context * GPU_STEP_BYTES / (1 << 30));
      continue;
    }
    snprintf(what, sizeof what, "offloaded decode step at %s", label);
    if (!gpu_fits((size_t)(2 * context + d->steps) * GPU_STEP_BYTES, what)) continue;
    int steps = (int)(d->steps * 1024 / context);
    if (steps < 1) steps = 1;
    if (steps > d->steps) steps = d->steps;
    int reps = gb->reps < 9 ? gb->reps : 9;

    gpu_prefill p;
    gpu_prefill_init(&p, context);
    kvc_cache* cache = gpu_make_cache(gb, KVC_PRESET_OFFLOADED, 0);
    bench_check(kvc_cache_reserve(cache, context + steps), "kvc_cache_reserve");
    bench_check(kvc_cache_update_all(cache, GPU_LAYERS, p.keys, p.values, NULL, NULL), "prefill (offloaded)");
    gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
    gpu_prefill_free(&p);

    double* samples = bench_alloc((size_t)reps * sizeof(double));
    for (int r = -1; r < reps; r++) { /* -1: warm-up, checked */
      kvc_kv out;
      gpu_time_begin(gb);
      for (int s = 0; s < steps; s++)
        for (uint32_t l = 0; l < GPU_LAYERS; l++)
          bench_check(kvc_cache_update(cache, l, &d->keys[s * GPU_LAYERS + l], &d->values[s * GPU_LAYERS + l], NULL,
                                       &out),
                      "kvc_cache_update (offloaded)");
      double ns = gpu_time_end(gb) / steps;
      if (r < 0) {
        if (gpu_seq_length(cache) != context + steps) {
          fprintf(stderr, "bench_gpu: offloaded cache holds %lld tokens, expected %lld\n",
                  (long long)gpu_seq_length(cache), (long long)(context + steps));
          exit(1);
        }
        verify_step(gb, cache, d, steps - 1, context + steps - 1, "offloaded cache, newest token");
      } else {
        samples[r] = ns;
      }
      crop_back(cache, steps, context);
    }
    bench_stats st = bench_summarize(samples, (size_t)reps);
    printf("%-8s %-34s %12.0f %12.0f %12.0f %14s   (%d x %d steps)\n", label, "offloaded: 32 x kvc_cache_update",
           st.median, st.min, st.max, "-", reps, steps);
    add_stats(gb, "kvcache-cuda", "step_ns_offloaded", label, st, 1);
    kvc_cache_destroy(cache);
    free(samples);
  }
}

void gpu_bench_steps(gpu_bench* gb) {
  gpu_steps d;
  gpu_steps_init(&d, gb->steps);
  step_case cases[GPU_MAX_CONTEXTS];
  int n = 0;
  printf("== gpu_decode_step: one token of K/V for all %d layers (%zu bytes)\n", GPU_LAYERS,
         (size_t)GPU_STEP_BYTES);
  for (int i = 0; i < gb->ncontexts; i++) {
    memset(&cases[n], 0, sizeof cases[n]);
    cases[n].context = gb->contexts[i];
    bench_length_label(gb->contexts[i], cases[n].label, sizeof cases[n].label);
    if (prepare_case(gb, &cases[n], &d)) n++;
  }
  char* dst = gpu_malloc((size_t)d.steps * GPU_STEP_BYTES);
  double* copies = bench_alloc((size_t)gb->reps * sizeof(double));
  time_memcpy_step(gb, &d, dst); /* warm-up */
  for (int r = 0; r < gb->reps; r++) {
    for (int i = 0; i < n; i++) {
      step_case* c = &cases[i];
      c->dyn[r] = time_update_all(gb, c->dynamic, &d, &c->dyn_host[r]);
      crop_back(c->dynamic, d.steps, c->context);
      c->st[r] = time_update_all(gb, c->fixed, &d, &c->st_host[r]);
    }
    copies[r] = time_memcpy_step(gb, &d, dst);
  }
  gpu_check(cudaFree(dst), "cudaFree");

  printf("%-8s %-34s %12s %12s %12s %14s\n", "context", "one step (all layers)", "median ns", "min", "max",
         "host issue ns");
  double first = n > 0 ? bench_summarize(cases[0].dyn, (size_t)gb->reps).median : 0;
  double last = n > 0 ? bench_summarize(cases[n - 1].dyn, (size_t)gb->reps).median : 0;
  char ratio_metric[64] = "";
  if (n > 1) snprintf(ratio_metric, sizeof ratio_metric, "dynamic_%s_over_%s", cases[n - 1].label, cases[0].label);
  for (int i = 0; i < n; i++) report_case(gb, &cases[i]);
  bench_stats cp = bench_summarize(copies, (size_t)gb->reps);
  printf("%-8s %-34s %12.0f %12.0f %12.0f\n", "any", "64 x cudaMemcpyAsync (scale)", cp.median, cp.min, cp.max);
  bench_add(gb->res, "gpu_decode_step", "cuda-memcpy", "step_ns_64_copies", cp.median, "ns");
  bench_add(gb->res, "gpu_decode_step", "kvcache-cuda", "step_bytes", (double)GPU_STEP_BYTES, "bytes");
  if (n > 1) {
    bench_add(gb->res, "gpu_decode_step", "kvcache-cuda", ratio_metric, last / first, "x");
    printf("%s = %.2f\n", ratio_metric, last / first);
  }
  free(copies);
  bench_offloaded(gb, &d);
  gpu_steps_free(&d);
  printf("\n");
}
