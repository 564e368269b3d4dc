/*
 * bench_gpu_graph.c: kernel launches per decode step, counted by capturing
 * one step into a CUDA graph and reading its nodes.
 *
 * The capture runs in cudaStreamCaptureModeGlobal: an allocation, a host
 * synchronisation or any other call that is illegal while a stream captures
 * fails the capture, so a successful capture of a static cache's step also
 * proves that the step is usable inside CUDA graphs (torch.compile's
 * "reduce-overhead", a serving engine's captured decode). The graph is then
 * instantiated and replayed, and the token it writes is read back, so the
 * count is of a graph that does the work, not of an empty one.
 */
#include "bench_gpu.h"

static size_t launches(gpu_node_counts c) { return c.kernels + c.copies + c.memsets; }

gpu_node_counts gpu_count_nodes(cudaGraph_t graph) {
  gpu_node_counts c;
  memset(&c, 0, sizeof c);
  size_t n = 0;
  gpu_check(cudaGraphGetNodes(graph, NULL, &n), "cudaGraphGetNodes");
  cudaGraphNode_t* nodes = bench_alloc((n ? n : 1) * sizeof *nodes);
  gpu_check(cudaGraphGetNodes(graph, nodes, &n), "cudaGraphGetNodes");
  for (size_t i = 0; i < n; i++) {
    enum cudaGraphNodeType type;
    gpu_check(cudaGraphNodeGetType(nodes[i], &type), "cudaGraphNodeGetType");
    switch (type) {
      case cudaGraphNodeTypeKernel: c.kernels++; break;
      case cudaGraphNodeTypeMemcpy: c.copies++; break;
      case cudaGraphNodeTypeMemset: c.memsets++; break;
      case cudaGraphNodeTypeMemAlloc: c.allocs++; break;
      case cudaGraphNodeTypeMemFree: c.frees++; break;
      default: c.other++; break;
    }
  }
  free(nodes);
  return c;
}

/*
 * Captures step `step` of `d` (one update_all, or one update per layer) on
 * the bound stream. 1 and *graph on success; 0 with the reason in `why`.
 */
static int capture_step(gpu_bench* gb, kvc_cache* cache, const gpu_steps* d, int step, int per_layer,
                        cudaGraph_t* graph, char* why, size_t len) {
  (void)cudaGetLastError();
  gpu_check(cudaStreamBeginCapture(gb->stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  kvc_error* err = NULL;
  kvc_kv out[GPU_LAYERS];
  const kvc_tensor* k = &d->keys[step * GPU_LAYERS];
  const kvc_tensor* v = &d->values[step * GPU_LAYERS];
  if (per_layer) {
    for (uint32_t l = 0; l < GPU_LAYERS && !err; l++) err = kvc_cache_update(cache, l, &k[l], &v[l], NULL, &out[l]);
  } else {
    err = kvc_cache_update_all(cache, GPU_LAYERS, k, v, NULL, out);
  }
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(gb->stream, &g); /* always: the stream must leave capture mode */
  (void)cudaGetLastError();
  if (err) {
    snprintf(why, len, "kvcache failed while the stream captured: %s", kvc_error_message(err));
    kvc_error_destroy(err);
    if (g) gpu_check(cudaGraphDestroy(g), "cudaGraphDestroy");
    return 0;
  }
  if (e != cudaSuccess || !g) {
    snprintf(why, len,
             "cudaStreamEndCapture: %s (the step made a call that is illegal during capture: an allocation, a "
             "host synchronisation, a copy with pageable memory)",
             cudaGetErrorString(e));
    return 0;
  }
  *graph = g;
  return 1;
}

static void print_counts(const char* what, gpu_node_counts c) {
  printf("%-44s %zu launch(es): %zu kernel, %zu memcpy, %zu memset node(s); %zu alloc, %zu free, %zu other\n",
         what, launches(c), c.kernels, c.copies, c.memsets, c.allocs, c.frees, c.other);
}

/* Replays `graph` and checks that step `step`'s K/V of the first and last layers landed at `pos`. */
static int replay_writes(gpu_bench* gb, kvc_cache* cache, const gpu_steps* d, int step, int64_t pos,
                         cudaGraphExec_t exec) {
  gpu_check(cudaGraphLaunch(exec, gb->stream), "cudaGraphLaunch");
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  int layers[2] = {0, GPU_LAYERS - 1};
  uint16_t got[GPU_TOKEN_ELEMS];
  for (int i = 0; i < 2; i++) {
    kvc_kv view;
    bench_check(kvc_cache_layer_view(cache, (uint32_t)layers[i], &view), "kvc_cache_layer_view");
    for (int is_value = 0; is_value < 2; is_value++) {
      gpu_read_token(gb, is_value ? &view.value : &view.key, pos, got);
      if (memcmp(got, gpu_steps_token(d, step, layers[i], is_value), GPU_TOKEN_BYTES) != 0) {
        printf("graph replay: layer %d %s at position %lld does not hold the captured step's token\n", layers[i],
               is_value ? "value" : "key", (long long)pos);
        return 0;
      }
    }
  }
  return 1;
}

/* A cache of `preset` holding `context` tokens, room for 64 more. */
static kvc_cache* filled_cache(gpu_bench* gb, kvc_preset preset, int64_t context) {
  gpu_prefill p;
  gpu_prefill_init(&p, context);
  kvc_cache* cache = gpu_make_cache(gb, preset, preset == KVC_PRESET_STATIC ? context + 64 : 0);
  if (preset == KVC_PRESET_DYNAMIC) bench_check(kvc_cache_reserve(cache, context + 64), "kvc_cache_reserve");
  bench_check(kvc_cache_update_all(cache, GPU_LAYERS, p.keys, p.values, NULL, NULL), "prefill");
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  gpu_prefill_free(&p);
  return cache;
}

static void bench_static(gpu_bench* gb, const gpu_steps* d) {
  const int64_t context = 1024;
  kvc_cache* cache = filled_cache(gb, KVC_PRESET_STATIC, context);
  char why[512];
  cudaGraph_t graph = NULL;
  if (!capture_step(gb, cache, d, 0, 0, &graph, why, sizeof why)) {
    printf("static update_all: NOT capturable: %s\n", why);
    bench_add(gb->res, "gpu_launches", "kvcache-cuda", "static_update_all_capturable", 0, "bool");
    kvc_cache_destroy(cache);
    return;
  }
  bench_add(gb->res, "gpu_launches", "kvcache-cuda", "static_update_all_capturable", 1, "bool");
  gpu_node_counts c = gpu_count_nodes(graph);
  print_counts("static, one kvc_cache_update_all step:", c);
  bench_add(gb->res, "gpu_launches", "kvcache-cuda", "launches_per_step_static_update_all", (double)launches(c),
            "launches");
  bench_add(gb->res, "gpu_launches", "kvcache-cuda", "kernel_nodes_per_step_static_update_all", (double)c.kernels,
            "nodes");
  bench_add(gb->res, "gpu_launches", "kvcache-cuda", "alloc_nodes_per_step_static_update_all",
            (double)(c.allocs + c.frees), "nodes");

  cudaGraphExec_t exec = NULL;
  gpu_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  /* The capture advanced the cache's counter without running: the replay writes the slot it was at. */
  int ok = replay_writes(gb, cache, d, 0, context, exec);
  printf("graph replay writes the captured step's K/V: %s\n", ok ? "yes" : "NO");
  bench_add(gb->res, "gpu_launches", "kvcache-cuda", "graph_replay_writes_step", ok, "bool");

  double* samples = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int r = 0; r < gb->reps; r++) {
    gpu_time_begin(gb);
    for (int s = 0; s < gb->steps; s++) gpu_check(cudaGraphLaunch(exec, gb->stream), "cudaGraphLaunch");
    samples[r] = gpu_time_end(gb) / gb->steps;
  }
  bench_stats st = bench_summarize(samples, (size_t)gb->reps);
  printf("%-44s %.0f ns per step (median; min %.0f, max %.0f)\n", "static step as a graph replay:", st.median,
         st.min, st.max);
  bench_add(gb->res, "gpu_launches", "kvcache-cuda", "step_ns_static_graph_replay", st.median, "ns");
  free(samples);
  gpu_check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  gpu_check(cudaGraphDestroy(graph), "cudaGraphDestroy");

  /* A model's forward pass updates layer by layer: at most one launch per layer. */
  if (capture_step(gb, cache, d, 1, 1, &graph, why, sizeof why)) {
    c = gpu_count_nodes(graph);
    print_counts("static, 32 kvc_cache_update calls:", c);
    bench_add(gb->res, "gpu_launches", "kvcache-cuda", "launches_per_step_static_32_updates", (double)launches(c),
              "launches");
    gpu_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  } else {
    printf("static, 32 kvc_cache_update calls: NOT capturable: %s\n", why);
  }
  kvc_cache_destroy(cache);
}

/* Dynamic caches may grow, so capture is not promised; with the room reserved, report what a step issues. */
static void bench_dynamic(gpu_bench* gb, const gpu_steps* d) {
  const int64_t context = 1024;
  kvc_cache* cache = filled_cache(gb, KVC_PRESET_DYNAMIC, context);
  char why[512];
  cudaGraph_t graph = NULL;
  if (capture_step(gb, cache, d, 0, 0, &graph, why, sizeof why)) {
    gpu_node_counts c = gpu_count_nodes(graph);
    print_counts("dynamic (reserved), one update_all step:", c);
    bench_add(gb->res, "gpu_launches", "kvcache-cuda", "launches_per_step_dynamic_update_all", (double)launches(c),
              "launches");
    gpu_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  } else {
    printf("dynamic (reserved), one update_all step: not capturable (not promised for dynamic caches): %s\n", why);
  }
  kvc_cache_destroy(cache);
}

void gpu_bench_launches(gpu_bench* gb) {
  printf("== gpu_launches: one decode step captured into a CUDA graph (cudaStreamCaptureModeGlobal)\n");
  if (!gpu_fits((size_t)(2 * 1024 + 128) * GPU_STEP_BYTES, "gpu_launches")) return;
  gpu_steps d;
  gpu_steps_init(&d, 2);
  bench_static(gb, &d);
  bench_dynamic(gb, &d);
  gpu_steps_free(&d);
  printf("\n");
}
