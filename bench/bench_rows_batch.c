/*
 * bench_rows_batch: the primitive under the paged pool's step write, the
 * backend's copy_rows_batch (backend API 6), on the CPU backend: one decode
 * step of 256 sequences, one new token each, written into the K and V
 * storage of every layer of a pool shaped like Llama-3-8B (32 layers,
 * 8 KV heads x head_dim 128, bfloat16, blocks of 16 tokens) through the slot
 * mapping: 64 jobs sharing one index array, 16384 rows of 2 KiB, 32 MiB a
 * step, in the NHD and the HND layout (bench_rows_step.h; 512 MiB of
 * storage). bench_gpu's gpu_rows_batch times the same step on a GPU.
 *
 * Against two memcpy rooflines measured in the same run (bench_decode's):
 *   memcpy       the step's bytes from the same sources, one memcpy per
 *                2 KiB row, to consecutive addresses of a 32 MiB buffer;
 *   slot memcpy  the same bytes to the very slots, one memcpy per run of
 *                the layout (2 KiB NHD, 256 bytes HND): what reaching those
 *                places costs without the backend's per-job layout logic.
 * And the host planning the CUDA/HIP plugin does for this batch before its
 * one launch (backends/gpu/gpu_plan.c, kvc_gpu_plan_rows_batch: 64 plans,
 * the shared index arrays converted once), the host cost a GPU pool pays
 * per step on top of the launch.
 *
 * Reported: median, min and max over repetitions of the time per step, the
 * median's GB/s (bytes moved once), the ratios to the rooflines. Each
 * repetition runs every measurement, in an order that turns, so that drift
 * and cold caches fall on all alike. The batch's result is checked against
 * the sources once before timing.
 */
#include "bench_common.h" /* first: it sets _POSIX_C_SOURCE */

#include "bench_rows_step.h"
#include "gpu_plan.h"

static volatile uint64_t bench_sink; /* keeps the rooflines' stores and the plans observable */

typedef struct step {
  char* sources; /* [RS_JOBS][RS_SEQS][RS_ROW_ELEMS] bfloat16: the step's K and V of every layer */
  char* storage; /* [RS_JOBS][RS_SLOTS][RS_ROW_ELEMS] */
  char* roof;    /* RS_STEP_BYTES */
  rows_step rs;
} step;

static void step_init(step* s) {
  s->sources = bench_alloc(RS_SOURCE_BYTES);
  s->storage = bench_alloc(RS_STORAGE_BYTES);
  s->roof = bench_alloc(RS_STEP_BYTES);
  bench_fill_bf16((uint16_t*)(void*)s->sources, RS_SOURCE_BYTES / sizeof(uint16_t), 7);
  memset(s->storage, 0, RS_STORAGE_BYTES); /* touched once here, not in the first timing */
  memset(s->roof, 0, RS_STEP_BYTES);
  rows_step_init(&s->rs, s->storage, s->sources);
}

static void step_free(step* s) {
  free(s->sources);
  free(s->storage);
  free(s->roof);
}

/* Where head h of sequence i of job j is in the storage, and where it comes from. */
static char* slot_head(const step* s, int layout, int j, int i, int h) {
  return rows_step_storage(s->storage, j) + rows_step_head(&s->rs, layout, i, h);
}
static const char* source_head(const step* s, int j, int i, int h) {
  return rows_step_source(s->sources, j) + (size_t)i * RS_ROW_BYTES + (size_t)h * RS_HEAD_DIM * sizeof(uint16_t);
}

/* The batch wrote every head of every sequence of every job where the layout puts it. */
static void verify(const step* s, int layout) {
  for (int j = 0; j < RS_JOBS; j++)
    for (int i = 0; i < RS_SEQS; i++)
      for (int h = 0; h < RS_KV_HEADS; h++)
        if (memcmp(slot_head(s, layout, j, i, h), source_head(s, j, i, h), RS_HEAD_DIM * sizeof(uint16_t))) {
          fprintf(stderr, "bench_rows_batch: %s: job %d, sequence %d, head %d was not written\n",
                  layout ? "HND" : "NHD", j, i, h);
          exit(1);
        }
}

static double time_batch(const step* s, int layout) {
  const kvc_backend* cpu = kvci_cpu_backend();
  const kvc_exec place = {0, NULL, NULL};
  double t0 = bench_now_ns();
  if (cpu->copy_rows_batch(cpu->ctx, &place, s->rs.jobs[layout], RS_JOBS)) {
    fprintf(stderr, "bench_rows_batch: copy_rows_batch failed\n");
    exit(1);
  }
  return bench_now_ns() - t0;
}

static double time_memcpy(const step* s) {
  double t0 = bench_now_ns();
  for (int j = 0; j < RS_JOBS; j++)
    for (int i = 0; i < RS_SEQS; i++)
      memcpy(s->roof + ((size_t)j * RS_SEQS + (size_t)i) * RS_ROW_BYTES, source_head(s, j, i, 0), RS_ROW_BYTES);
  double t = bench_now_ns() - t0;
  bench_sink += (uint64_t)s->roof[(size_t)(t) % RS_STEP_BYTES];
  return t;
}

static double time_slot_memcpy(const step* s, int layout) {
  double t0 = bench_now_ns();
  for (int j = 0; j < RS_JOBS; j++)
    for (int i = 0; i < RS_SEQS; i++) {
      if (!layout) {
        memcpy(slot_head(s, 0, j, i, 0), source_head(s, j, i, 0), RS_ROW_BYTES);
        continue;
      }
      for (int h = 0; h < RS_KV_HEADS; h++)
        memcpy(slot_head(s, 1, j, i, h), source_head(s, j, i, h), RS_HEAD_DIM * sizeof(uint16_t));
    }
  double t = bench_now_ns() - t0;
  bench_sink += (uint64_t)*slot_head(s, layout, (int)((uint64_t)t % RS_JOBS), 0, 0);
  return t;
}

static double time_planning(const step* s) {
  double t0 = bench_now_ns();
  kvc_gpu_rows_batch b;
  if (kvc_gpu_plan_rows_batch(&b, s->rs.jobs[0], RS_JOBS)) {
    fprintf(stderr, "bench_rows_batch: the GPU planning refused the step\n");
    exit(1);
  }
  bench_sink += b.blocks + b.nindex;
  kvc_gpu_rows_batch_free(&b);
  return bench_now_ns() - t0;
}

static void print_row(const char* impl, bench_stats st, double roof, double slot_roof) {
  printf("%-30s %12.1f %10.1f %10.1f %9.2f %9.2f %9.2f\n", impl, st.median / 1e3, st.min / 1e3, st.max / 1e3,
         (double)RS_STEP_BYTES / st.median, st.median / roof, st.median / slot_roof);
}

static void add_stats(bench_results* res, const char* impl, const char* metric, bench_stats st) {
  char m[64];
  snprintf(m, sizeof m, "%s_median_ns", metric);
  bench_add(res, "rows_batch_step", impl, m, st.median, "ns");
  snprintf(m, sizeof m, "%s_min_ns", metric);
  bench_add(res, "rows_batch_step", impl, m, st.min, "ns");
  snprintf(m, sizeof m, "%s_max_ns", metric);
  bench_add(res, "rows_batch_step", impl, m, st.max, "ns");
}

enum { M_NHD, M_HND, M_MEMCPY, M_SLOTS_NHD, M_SLOTS_HND, M_PLAN, NMEASURES };

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  const int reps = args.reps ? args.reps : 21;
  static bench_results res;
  static step s;
  step_init(&s);
  printf("rows batch step write (CPU backend): %d sequences x %d layers x K,V, %d KV heads x head_dim %d, bfloat16, "
         "blocks of %d\n",
         RS_SEQS, RS_LAYERS, RS_KV_HEADS, RS_HEAD_DIM, RS_BLOCK);
  printf("%d jobs sharing one slot mapping, %d rows of %zu bytes: %.1f MiB a step; %d repetitions\n\n", RS_JOBS,
         RS_JOBS * RS_SEQS, (size_t)RS_ROW_BYTES, (double)RS_STEP_BYTES / (1 << 20), reps);

  for (int layout = 0; layout < 2; layout++) { /* warm-up and the check */
    memset(s.storage, 0, RS_STORAGE_BYTES);
    time_batch(&s, layout);
    verify(&s, layout);
  }
  time_memcpy(&s);
  double* t[NMEASURES];
  for (int m = 0; m < NMEASURES; m++) t[m] = bench_alloc((size_t)reps * sizeof(double));
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < NMEASURES; k++) {
      int m = (k + r) % NMEASURES;
      switch (m) {
        case M_NHD:
        case M_HND:
          t[m][r] = time_batch(&s, m == M_HND);
          break;
        case M_MEMCPY:
          t[m][r] = time_memcpy(&s);
          break;
        case M_SLOTS_NHD:
        case M_SLOTS_HND:
          t[m][r] = time_slot_memcpy(&s, m == M_SLOTS_HND);
          break;
        default:
          t[m][r] = time_planning(&s);
          break;
      }
    }
  bench_stats st[NMEASURES];
  for (int m = 0; m < NMEASURES; m++) {
    st[m] = bench_summarize(t[m], (size_t)reps);
    free(t[m]);
  }
  const double roof = st[M_MEMCPY].median;
  printf("%-30s %12s %10s %10s %9s %9s %9s\n", "impl (per step)", "median us", "min", "max", "GB/s", "x memcpy",
         "x slots");
  print_row("copy_rows_batch NHD", st[M_NHD], roof, st[M_SLOTS_NHD].median);
  print_row("copy_rows_batch HND", st[M_HND], roof, st[M_SLOTS_HND].median);
  print_row("memcpy (roofline)", st[M_MEMCPY], roof, st[M_SLOTS_NHD].median);
  print_row("memcpy to the slots NHD", st[M_SLOTS_NHD], roof, st[M_SLOTS_NHD].median);
  print_row("memcpy to the slots HND", st[M_SLOTS_HND], roof, st[M_SLOTS_HND].median);
  printf("%-30s %12.2f %10.2f %10.2f   (host planning of the GPU plugin's one launch)\n",
         "GPU plan of the batch", st[M_PLAN].median / 1e3, st[M_PLAN].min / 1e3, st[M_PLAN].max / 1e3);

  add_stats(&res, "kvcache-cpu", "nhd", st[M_NHD]);
  add_stats(&res, "kvcache-cpu", "hnd", st[M_HND]);
  add_stats(&res, "memcpy", "contiguous", st[M_MEMCPY]);
  add_stats(&res, "memcpy-slots", "nhd", st[M_SLOTS_NHD]);
  add_stats(&res, "memcpy-slots", "hnd", st[M_SLOTS_HND]);
  add_stats(&res, "gpu-plan", "plan", st[M_PLAN]);
  bench_add(&res, "rows_batch_step", "kvcache-cpu", "nhd_gbps", (double)RS_STEP_BYTES / st[M_NHD].median, "GB/s");
  bench_add(&res, "rows_batch_step", "kvcache-cpu", "hnd_gbps", (double)RS_STEP_BYTES / st[M_HND].median, "GB/s");
  bench_add(&res, "rows_batch_step", "kvcache-cpu", "nhd_ratio_to_memcpy", st[M_NHD].median / roof, "x");
  bench_add(&res, "rows_batch_step", "kvcache-cpu", "hnd_ratio_to_memcpy", st[M_HND].median / roof, "x");
  bench_add(&res, "rows_batch_step", "kvcache-cpu", "nhd_ratio_to_slot_memcpy",
            st[M_NHD].median / st[M_SLOTS_NHD].median, "x");
  bench_add(&res, "rows_batch_step", "kvcache-cpu", "hnd_ratio_to_slot_memcpy",
            st[M_HND].median / st[M_SLOTS_HND].median, "x");
  bench_add(&res, "rows_batch_step", "kvcache-cpu", "step_bytes", (double)RS_STEP_BYTES, "bytes");
  step_free(&s);
  bench_write_json(args.json_path, &res);
  return 0;
}
