/*
 * bench_gpu_rows.c: gpu_rows_batch, the pool's step write through the CUDA
 * plugin's copy_rows_batch (backend API 6): the step bench_rows_batch times
 * on the CPU (bench_rows_step.h: 256 sequences x 32 layers x K,V, 8 x 128
 * bfloat16, blocks of 16, NHD and HND; 32 MiB), called through the plugin's
 * backend table (the libkvcache-cuda.so in KVC_BACKEND_PATH, which bench/
 * run.sh and scripts/gpu-check.sh set) on the run's stream:
 *   - GPU time between events around one call (one launch: the planned batch
 *     fits the launch's parameters), against one cudaMemcpyAsync of the
 *     step's bytes device to device, the card's copy roofline for them;
 *   - the host time of the call (planning, parameters, the launch), what a
 *     serving loop pays on the CPU per step;
 *   - a prefill write, 4096 tokens of one sequence into every layer (64 jobs
 *     of 4096 rows, 512 MiB): its planned batch is past the parameters, so
 *     it is staged through device memory, still one launch; against one
 *     cudaMemcpyAsync of its bytes;
 *   - that prefill write captured into a CUDA graph (mode global: an
 *     allocation or a host wait in it fails the capture), which takes the
 *     by-value launches: their count, and the replay's bytes checked.
 * Sampled slots of every measured write are read back and checked.
 */
#include "bench_gpu.h"

#include <dlfcn.h>

#include "backend.h"
#include "bench_rows_step.h"

#define PREFILL 4096 /* tokens: a job's whole storage (RS_SLOTS) */
#define PREFILL_BYTES ((size_t)RS_JOBS * PREFILL * RS_ROW_BYTES)

typedef struct rows_bench {
  const kvc_backend* be;
  kvc_exec exec;
  char* storage;  /* device: RS_STORAGE_BYTES */
  char* sources;  /* device: the step's, RS_SOURCE_BYTES */
  char* prefill;  /* device: [RS_JOBS][PREFILL][RS_ROW_ELEMS] */
  uint16_t* host; /* the step's sources on the host */
  int64_t rows[PREFILL];
  kvc_copy_rows_job prefill_jobs[RS_JOBS];
  rows_step rs;
} rows_bench;

/* The plugin's table, as the core loads it, and a place of the bench's own on the run's stream. */
static int plugin_open(gpu_bench* gb, rows_bench* r, char* why, size_t len) {
  const char* dir = getenv("KVC_BACKEND_PATH");
  char path[1024];
  snprintf(path, sizeof path, "%s%slibkvcache-cuda.so", dir && *dir ? dir : "", dir && *dir ? "/" : "");
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, len, "cannot load %s (%s); set KVC_BACKEND_PATH to its directory", path, dlerror());
    return 0;
  }
  const kvc_backend* (*entry)(uint32_t) = (const kvc_backend* (*)(uint32_t))dlsym(h, "kvc_backend_entry");
  r->be = entry ? entry(KVC_BACKEND_API_VERSION) : NULL;
  if (!r->be || r->be->api_version != KVC_BACKEND_API_VERSION || !r->be->copy_rows_batch) {
    snprintf(why, len, "%s has no copy_rows_batch of backend API %d", path, KVC_BACKEND_API_VERSION);
    return 0;
  }
  memset(&r->exec, 0, sizeof r->exec);
  r->exec.stream = (void*)gb->stream;
  if (r->be->exec_open(r->be->ctx, &r->exec)) {
    snprintf(why, len, "the plugin could not open a place on device 0");
    return 0;
  }
  return 1;
}

static void call(rows_bench* r, const kvc_copy_rows_job* jobs, const char* what) {
  if (r->be->copy_rows_batch(r->be->ctx, &r->exec, jobs, RS_JOBS)) {
    fprintf(stderr, "bench_gpu: copy_rows_batch (%s) failed\n", what);
    exit(1);
  }
}

/* Head h of a token's row in job j, read back from the device, equals the step's source row `src_token`. */
static void expect_head(gpu_bench* gb, const rows_bench* r, const char* at, int j, int src_token, int h,
                        const char* what) {
  uint16_t got[RS_HEAD_DIM];
  gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
  gpu_check(cudaMemcpy(got, at, sizeof got, cudaMemcpyDeviceToHost), "cudaMemcpy (read back)");
  const uint16_t* want = r->host + ((size_t)j * RS_SEQS + (size_t)src_token) * RS_ROW_ELEMS + (size_t)h * RS_HEAD_DIM;
  if (memcmp(got, want, sizeof got)) {
    fprintf(stderr, "bench_gpu: %s: job %d, head %d of a row does not hold its source\n", what, j, h);
    exit(1);
  }
}

/* Sampled sequences of every job of the step write in `layout`. */
static void verify_step(gpu_bench* gb, const rows_bench* r, int layout) {
  for (int j = 0; j < RS_JOBS; j++)
    for (int i = j % 7; i < RS_SEQS; i += 37)
      for (int h = 0; h < RS_KV_HEADS; h += 3)
        expect_head(gb, r, rows_step_storage(r->storage, j) + rows_step_head(&r->rs, layout, i, h), j, i, h,
                    layout ? "step write (HND)" : "step write (NHD)");
}

/* Sampled tokens of the prefill write (NHD: token t in slot t); its sources repeat the step's every 256 tokens. */
static void verify_prefill(gpu_bench* gb, const rows_bench* r, const char* what) {
  for (int j = 0; j < RS_JOBS; j += 5)
    for (int t = j; t < PREFILL; t += 509)
      expect_head(gb, r, rows_step_storage(r->storage, j) + (size_t)t * RS_ROW_BYTES, j, t % RS_SEQS, 0, what);
}

static void setup(rows_bench* r) {
  r->storage = gpu_malloc(RS_STORAGE_BYTES);
  r->sources = gpu_malloc(RS_SOURCE_BYTES);
  r->prefill = gpu_malloc(PREFILL_BYTES);
  r->host = bench_alloc(RS_SOURCE_BYTES);
  bench_fill_bf16(r->host, RS_SOURCE_BYTES / sizeof(uint16_t), 7);
  gpu_check(cudaMemcpy(r->sources, r->host, RS_SOURCE_BYTES, cudaMemcpyHostToDevice), "cudaMemcpy (sources)");
  /* The prefill's token t of job j is the step's token t % 256 of job j. */
  for (int j = 0; j < RS_JOBS; j++)
    for (int t = 0; t < PREFILL; t += RS_SEQS)
      gpu_check(cudaMemcpy(r->prefill + ((size_t)j * PREFILL + (size_t)t) * RS_ROW_BYTES,
                           r->sources + (size_t)j * RS_SEQS * RS_ROW_BYTES, (size_t)RS_SEQS * RS_ROW_BYTES,
                           cudaMemcpyDeviceToDevice),
                "cudaMemcpy (prefill sources)");
  gpu_check(cudaMemset(r->storage, 0, RS_STORAGE_BYTES), "cudaMemset");
  gpu_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); /* see gpu_fill_bf16 */
  rows_step_init(&r->rs, r->storage, r->sources);
  for (int t = 0; t < PREFILL; t++) r->rows[t] = t;
  for (int j = 0; j < RS_JOBS; j++) {
    kvc_copy_rows_job* job = &r->prefill_jobs[j];
    *job = r->rs.jobs[0][j];
    job->src = r->prefill + (size_t)j * PREFILL * RS_ROW_BYTES;
    job->dst_rows = job->src_rows = r->rows; /* token t into slot t */
    job->count = PREFILL;
  }
}

/* GPU time (events) and host time of `reps` calls of `jobs`; medians into *gpu_ns and *host_ns. */
static void time_calls(gpu_bench* gb, rows_bench* r, const kvc_copy_rows_job* jobs, const char* what, bench_stats* gpu,
                       bench_stats* host) {
  double* g = bench_alloc((size_t)gb->reps * sizeof(double));
  double* h = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int i = 0; i < gb->reps; i++) {
    gpu_check(cudaStreamSynchronize(gb->stream), "cudaStreamSynchronize");
    gpu_time_begin(gb);
    double t0 = bench_now_ns();
    call(r, jobs, what);
    h[i] = bench_now_ns() - t0;
    g[i] = gpu_time_end(gb);
  }
  *gpu = bench_summarize(g, (size_t)gb->reps);
  *host = bench_summarize(h, (size_t)gb->reps);
  free(g);
  free(h);
}

static bench_stats time_memcpy_d2d(gpu_bench* gb, void* dst, const void* src, size_t bytes) {
  double* g = bench_alloc((size_t)gb->reps * sizeof(double));
  for (int i = 0; i < gb->reps; i++) {
    gpu_time_begin(gb);
    gpu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gb->stream), "cudaMemcpyAsync");
    g[i] = gpu_time_end(gb);
  }
  bench_stats s = bench_summarize(g, (size_t)gb->reps);
  free(g);
  return s;
}

/* The prefill write captured into a graph: kernel launches in it (0 when the capture failed, with why). */
static size_t capture_prefill(gpu_bench* gb, rows_bench* r, char* why, size_t len) {
  (void)cudaGetLastError();
  gpu_check(cudaStreamBeginCapture(gb->stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  int rc = r->be->copy_rows_batch(r->be->ctx, &r->exec, r->prefill_jobs, RS_JOBS);
  cudaGraph_t graph = NULL;
  cudaError_t end = cudaStreamEndCapture(gb->stream, &graph);
  if (rc || end != cudaSuccess || !graph) {
    snprintf(why, len, "copy_rows_batch returned %d, the capture ended with %s", rc, cudaGetErrorString(end));
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return 0;
  }
  gpu_node_counts c = gpu_count_nodes(graph);
  const size_t n = c.kernels + c.copies + c.memsets + c.allocs + c.frees + c.other, kernels = c.kernels;
  cudaGraphExec_t exec = NULL;
  gpu_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  gpu_check(cudaMemsetAsync(r->storage, 0, RS_STORAGE_BYTES, gb->stream), "cudaMemsetAsync");
  gpu_check(cudaGraphLaunch(exec, gb->stream), "cudaGraphLaunch");
  verify_prefill(gb, r, "prefill write replayed from a graph");
  gpu_check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  gpu_check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  if (kernels != n) snprintf(why, len, "the graph has %zu nodes, %zu of them kernels", n, kernels);
  return kernels == n ? kernels : 0;
}

void gpu_bench_rows_batch(gpu_bench* gb) {
  printf("gpu_rows_batch: the pool's step write (copy_rows_batch): %d sequences x %d layers x K,V, 8 x 128 bf16, "
         "blocks of 16; a prefill of %d tokens\n",
         RS_SEQS, RS_LAYERS, PREFILL);
  static rows_bench r;
  char why[2048];
  if (!plugin_open(gb, &r, why, sizeof why)) {
    printf("gpu_rows_batch: SKIPPED: %s\n\n", why);
    return;
  }
  if (!gpu_fits(RS_STORAGE_BYTES + RS_SOURCE_BYTES + PREFILL_BYTES, "gpu_rows_batch")) return;
  setup(&r);

  bench_stats gpu[2], host[2];
  for (int layout = 0; layout < 2; layout++) {
    call(&r, r.rs.jobs[layout], "warm-up");
    verify_step(gb, &r, layout);
    time_calls(gb, &r, r.rs.jobs[layout], "step write", &gpu[layout], &host[layout]);
    verify_step(gb, &r, layout);
  }
  bench_stats roof = time_memcpy_d2d(gb, r.storage, r.sources, RS_STEP_BYTES);
  call(&r, r.prefill_jobs, "prefill warm-up");
  verify_prefill(gb, &r, "prefill write (staged)");
  bench_stats pgpu, phost;
  time_calls(gb, &r, r.prefill_jobs, "prefill write", &pgpu, &phost);
  verify_prefill(gb, &r, "prefill write (staged)");
  bench_stats proof = time_memcpy_d2d(gb, r.storage, r.prefill, PREFILL_BYTES);
  size_t graph_launches = capture_prefill(gb, &r, why, sizeof why);

  printf("%-36s %12s %12s %10s %10s\n", "impl", "GPU us", "host us", "GB/s", "x memcpy");
  const char* names[2] = {"copy_rows_batch step NHD", "copy_rows_batch step HND"};
  for (int layout = 0; layout < 2; layout++)
    printf("%-36s %12.2f %12.2f %10.1f %10.2f\n", names[layout], gpu[layout].median / 1e3, host[layout].median / 1e3,
           (double)RS_STEP_BYTES / gpu[layout].median, gpu[layout].median / roof.median);
  printf("%-36s %12.2f %12s %10.1f %10.2f\n", "cudaMemcpyAsync D2D, step bytes", roof.median / 1e3, "-",
         (double)RS_STEP_BYTES / roof.median, 1.0);
  printf("%-36s %12.2f %12.2f %10.1f %10.2f\n", "copy_rows_batch prefill (staged)", pgpu.median / 1e3,
         phost.median / 1e3, (double)PREFILL_BYTES / pgpu.median, pgpu.median / proof.median);
  printf("%-36s %12.2f %12s %10.1f %10.2f\n", "cudaMemcpyAsync D2D, prefill bytes", proof.median / 1e3, "-",
         (double)PREFILL_BYTES / proof.median, 1.0);
  if (graph_launches)
    printf("prefill write captured into a graph: %zu by-value launches, replay checked\n\n", graph_launches);
  else
    printf("prefill write captured into a graph: FAILED: %s\n\n", why);

  const char* b = "gpu_rows_batch";
  bench_add(gb->res, b, "kvcache-cuda", "step_nhd_gpu_ns", gpu[0].median, "ns");
  bench_add(gb->res, b, "kvcache-cuda", "step_hnd_gpu_ns", gpu[1].median, "ns");
  bench_add(gb->res, b, "kvcache-cuda", "step_nhd_host_ns", host[0].median, "ns");
  bench_add(gb->res, b, "kvcache-cuda", "step_hnd_host_ns", host[1].median, "ns");
  bench_add(gb->res, b, "kvcache-cuda", "step_nhd_ratio_to_memcpy", gpu[0].median / roof.median, "x");
  bench_add(gb->res, b, "kvcache-cuda", "step_hnd_ratio_to_memcpy", gpu[1].median / roof.median, "x");
  bench_add(gb->res, b, "kvcache-cuda", "prefill_gpu_ns", pgpu.median, "ns");
  bench_add(gb->res, b, "kvcache-cuda", "prefill_host_ns", phost.median, "ns");
  bench_add(gb->res, b, "kvcache-cuda", "prefill_ratio_to_memcpy", pgpu.median / proof.median, "x");
  bench_add(gb->res, b, "kvcache-cuda", "graph_launches_prefill", (double)graph_launches, "launches");
  bench_add(gb->res, b, "cuda-memcpy", "step_d2d_ns", roof.median, "ns");
  bench_add(gb->res, b, "cuda-memcpy", "prefill_d2d_ns", proof.median, "ns");

  r.be->exec_close(r.be->ctx, &r.exec);
  gpu_check(cudaFree(r.storage), "cudaFree");
  gpu_check(cudaFree(r.sources), "cudaFree");
  gpu_check(cudaFree(r.prefill), "cudaFree");
  free(r.host);
  if (!graph_launches) {
    fprintf(stderr, "bench_gpu: gpu_rows_batch: the captured prefill write failed: %s\n", why);
    exit(1);
  }
}
