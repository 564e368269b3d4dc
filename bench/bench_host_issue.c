/*
 * bench_host_issue: the host time the core spends to issue one decode step
 * of a device cache (one kvc_cache_update_all, 32 layers, one new token of K
 * and V each), measured without a GPU against the emulated device plugin
 * (tests/gpu/emulated_device_backend.c, loaded as the CUDA plugin through
 * KVC_BACKEND_PATH=<build>/tests/gpu/emulated).
 *
 * On a GPU this is the time a serving loop pays on the CPU for every step,
 * while the GPU's own work is a few microseconds: it is the core's planning
 * (checking 64 inputs, the alias check, room, offload and kind hooks, view
 * descriptors, gathering 64 copy descriptors) plus the plugin's batch call.
 *
 * The emulated device is not a GPU: its copy_4d_batch checks every copy
 * against the backend contract and then copies the bytes on the CPU, which
 * costs more than a launch. So the plugin's part is measured apart and
 * subtracted: after each repetition the bench hands the plugin the very
 * batch the core issued for every step (the same 64 descriptors: the views'
 * newest slot as destination, the inputs as sources, so the same bytes land
 * in the same slots again) and times those calls. The emulated device's
 * counters show that a step is exactly that one batch call and nothing else
 * (no allocation, no other launch), which is what makes the subtraction
 * exact in kind; the bench stops if they show anything else.
 *
 * Reported (median, min, max over repetitions, ns per step):
 *   step_wall     kvc_cache_update_all as the caller sees it (core + plugin)
 *   plugin_batch  the plugin's copy_4d_batch of the same 64 copies
 *   core_issue    step_wall - plugin_batch: the core's host issue cost
 *   gpu_planning  the host work the CUDA/HIP plugin's copy_4d_batch does
 *                 before its launch, on the same 64 copies: the overlap
 *                 check, the plan and its block count of every copy
 *                 (backends/gpu/gpu_plan.c, the plugin's own code). What a
 *                 real GPU adds on top, the launch itself, needs a GPU.
 * The shape is the GPU benchmark's (Llama-3-8B: 8 KV heads x head_dim 128,
 * bfloat16, batch 1), the cache a DynamicCache reserved for context + steps
 * tokens, as bench_gpu's decode step, so no step grows a store.
 *
 * Without the emulated plugin (KVC_BACKEND_PATH unset, or naming another
 * plugin) it prints "bench_host_issue: SKIPPED: <why>" and exits 0.
 */
#include "bench_common.h" /* first: it sets _POSIX_C_SOURCE */

#include <dlfcn.h>

#include "backend.h"
#include "emulated_device.h"
#include "gpu_plan.h"

#define LAYERS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define TOKEN_ELEMS ((size_t)KV_HEADS * HEAD_DIM)
#define COPIES (2 * LAYERS)

static volatile uint64_t bench_sink; /* keeps the planning's results observable */

/* The emulated plugin, as loaded by the core (same handle: one copy of its state). */
typedef struct plugin {
  const kvc_backend* table;
  kvc_emulated_counters_fn counters;
  kvc_exec exec; /* a place of the bench's own for the replayed batches */
} plugin;

static int plugin_open(plugin* p, char* why, size_t len) {
  const char* dir = getenv("KVC_BACKEND_PATH");
  if (!dir || !*dir) {
    snprintf(why, len, "KVC_BACKEND_PATH is not set; run with KVC_BACKEND_PATH=<build>/tests/gpu/emulated");
    return -1;
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/libkvcache-cuda.so", dir);
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, len, "cannot load %s: %s", path, dlerror());
    return -1;
  }
  p->counters = (kvc_emulated_counters_fn)dlsym(h, KVC_EMULATED_COUNTERS_SYMBOL);
  const kvc_backend* (*entry)(uint32_t) = (const kvc_backend* (*)(uint32_t))dlsym(h, "kvc_backend_entry");
  if (!p->counters || !entry) {
    snprintf(why, len, "%s is not the emulated device plugin (no %s): this bench measures against it only", path,
             KVC_EMULATED_COUNTERS_SYMBOL);
    return -1;
  }
  p->table = entry(KVC_BACKEND_API_VERSION);
  if (!p->table || p->table->device_count(p->table->ctx) < 1) {
    snprintf(why, len, "the emulated device plugin offers no device");
    return -1;
  }
  memset(&p->exec, 0, sizeof p->exec);
  if (p->table->exec_open(p->table->ctx, &p->exec)) {
    snprintf(why, len, "the emulated device plugin could not open a place");
    return -1;
  }
  return 0;
}

static kvc_emulated_counters counters_now(const plugin* p) {
  kvc_emulated_counters c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  p->counters(&c);
  return c;
}

/* Device inputs: host memory behind the emulated device's tag, as its test runtime makes them. */
typedef struct steps_data {
  int steps;
  uint16_t* bytes; /* [steps][LAYERS][2][TOKEN_ELEMS], untagged */
  int64_t shape[4];
  kvc_tensor* keys; /* [steps][LAYERS] */
  kvc_tensor* values;
} steps_data;

static kvc_tensor device_tensor(void* data, int64_t* shape) {
  kvc_tensor t = bench_tensor_bf16(kvc_emulated_tag(data), shape);
  t.device.device_type = KVC_DEVICE_CUDA;
  return t;
}

static void steps_init(steps_data* d, int steps) {
  size_t elems = (size_t)steps * LAYERS * 2 * TOKEN_ELEMS;
  d->steps = steps;
  d->bytes = bench_alloc(elems * sizeof(uint16_t));
  bench_fill_bf16(d->bytes, elems, 17);
  int64_t shape[4] = {1, KV_HEADS, 1, HEAD_DIM};
  memcpy(d->shape, shape, sizeof shape);
  d->keys = bench_alloc((size_t)steps * LAYERS * sizeof(kvc_tensor));
  d->values = bench_alloc((size_t)steps * LAYERS * sizeof(kvc_tensor));
  for (size_t i = 0; i < (size_t)steps * LAYERS; i++) {
    d->keys[i] = device_tensor(d->bytes + (2 * i) * TOKEN_ELEMS, d->shape);
    d->values[i] = device_tensor(d->bytes + (2 * i + 1) * TOKEN_ELEMS, d->shape);
  }
}

static void steps_free(steps_data* d) {
  free(d->bytes);
  free(d->keys);
  free(d->values);
}

static kvc_cache* make_cache(int64_t context, int steps) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = LAYERS;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_DYNAMIC;
  opt.config = &cfg;
  opt.device.device_type = KVC_DEVICE_CUDA;
  opt.device.device_id = 0;
  kvc_cache* cache = NULL;
  bench_check(kvc_cache_create(&opt, &cache), "kvc_cache_create (emulated CUDA device)");
  bench_check(kvc_cache_reserve(cache, context + steps), "kvc_cache_reserve");
  size_t elems = (size_t)context * TOKEN_ELEMS;
  uint16_t* host = bench_alloc(elems * 2 * sizeof(uint16_t));
  bench_fill_bf16(host, elems * 2, 5);
  int64_t shape[4] = {1, KV_HEADS, context, HEAD_DIM};
  kvc_tensor keys[LAYERS], values[LAYERS];
  for (int l = 0; l < LAYERS; l++) {
    keys[l] = device_tensor(host, shape);
    values[l] = device_tensor(host + elems, shape);
  }
  bench_check(kvc_cache_update_all(cache, LAYERS, keys, values, NULL, NULL), "prefill");
  free(host);
  return cache;
}

static int64_t seq_length(const kvc_cache* cache) {
  int64_t n = -1;
  bench_check(kvc_cache_seq_length(cache, 0, &n), "kvc_cache_seq_length");
  return n;
}

/* One repetition of `steps` update_all calls: ns per step. */
static double time_steps(kvc_cache* cache, const steps_data* d) {
  kvc_kv out[LAYERS];
  double t0 = bench_now_ns();
  for (int s = 0; s < d->steps; s++)
    bench_check(kvc_cache_update_all(cache, LAYERS, &d->keys[s * LAYERS], &d->values[s * LAYERS], NULL, out),
                "kvc_cache_update_all");
  return (bench_now_ns() - t0) / d->steps;
}

/* The batch step `s` issued: layer l's K and V token at slot `slot` of its store, from the step's inputs. */
static void step_batch(const kvc_cache* cache, const steps_data* d, int s, int64_t slot, kvc_copy_4d* copies) {
  for (int l = 0; l < LAYERS; l++) {
    kvc_kv view;
    bench_check(kvc_cache_layer_view(cache, (uint32_t)l, &view), "kvc_cache_layer_view");
    for (int w = 0; w < 2; w++) {
      const kvc_tensor* v = w ? &view.value : &view.key;
      const kvc_tensor* in = w ? &d->values[s * LAYERS + l] : &d->keys[s * LAYERS + l];
      kvc_copy_4d* c = &copies[2 * l + w];
      c->dst = (char*)v->data + v->byte_offset + (size_t)(slot * bench_stride(v, 2)) * sizeof(uint16_t);
      c->src = in->data;
      for (int i = 0; i < 4; i++) {
        c->dst_strides[i] = bench_stride(v, i);
        c->shape[i] = in->shape[i];
      }
      c->src_strides[0] = KV_HEADS * HEAD_DIM;
      c->src_strides[1] = HEAD_DIM;
      c->src_strides[2] = HEAD_DIM;
      c->src_strides[3] = 1;
      c->elem_size = sizeof(uint16_t);
    }
  }
}

/* The plugin's part: the batches of the steps just taken, replayed (same bytes to the same slots); ns per step. */
static double time_plugin(const plugin* p, const kvc_cache* cache, const steps_data* d, int64_t context,
                          kvc_copy_4d* batches) {
  for (int s = 0; s < d->steps; s++) step_batch(cache, d, s, context + s, &batches[(size_t)s * COPIES]);
  double t0 = bench_now_ns();
  for (int s = 0; s < d->steps; s++)
    if (p->table->copy_4d_batch(p->table->ctx, &p->exec, &batches[(size_t)s * COPIES], COPIES)) {
      fprintf(stderr, "bench_host_issue: the replayed copy_4d_batch failed\n");
      exit(1);
    }
  return (bench_now_ns() - t0) / d->steps;
}

/* The CUDA/HIP plugin's host work per copy of a batch before the launch (gpu_copy_4d_batch); ns per step. */
static double time_gpu_planning(const steps_data* d, const kvc_copy_4d* batches) {
  kvc_gpu_copy plans[COPIES];
  uint64_t blocks = 0;
  double t0 = bench_now_ns();
  for (int s = 0; s < d->steps; s++)
    for (int i = 0; i < COPIES; i++) {
      const kvc_copy_4d* c = &batches[(size_t)s * COPIES + (size_t)i];
      if (kvc_gpu_ranges_overlap(c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size) ||
          kvc_gpu_plan(&plans[i], c->dst, c->dst_strides, c->src, c->src_strides, c->shape, c->elem_size, 0)) {
        fprintf(stderr, "bench_host_issue: copy %d of step %d is not one the batch kernel runs\n", i, s);
        exit(1);
      }
      plans[i].first_block = (uint32_t)blocks;
      blocks += kvc_gpu_plan_blocks(&plans[i]);
    }
  double per_step = (bench_now_ns() - t0) / d->steps;
  bench_sink += blocks + (uint64_t)plans[blocks % COPIES].unit;
  return per_step;
}

/* The length, and the newest token of the last layer holds the last step's bytes. */
static void verify_newest(const kvc_cache* cache, const steps_data* d, int64_t context) {
  if (seq_length(cache) != context + d->steps) {
    fprintf(stderr, "bench_host_issue: %lld tokens after the steps, expected %lld\n", (long long)seq_length(cache),
            (long long)(context + d->steps));
    exit(1);
  }
  kvc_kv view;
  bench_check(kvc_cache_layer_view(cache, LAYERS - 1, &view), "kvc_cache_layer_view");
  const uint16_t* want = d->bytes + (2 * ((size_t)(d->steps - 1) * LAYERS + LAYERS - 1)) * TOKEN_ELEMS;
  const char* base = (const char*)kvc_emulated_untag(view.key.data) + view.key.byte_offset;
  for (int h = 0; h < KV_HEADS; h++) {
    int64_t at = h * bench_stride(&view.key, 1) + (context + d->steps - 1) * bench_stride(&view.key, 2);
    if (memcmp(base + at * 2, want + (size_t)h * HEAD_DIM, HEAD_DIM * 2) != 0) {
      fprintf(stderr, "bench_host_issue: the newest key of head %d differs from what was appended\n", h);
      exit(1);
    }
  }
}

/* A step must be one copy_4d_batch of 64 copies and nothing else, or the subtraction means nothing. */
static void expect_one_batch(const plugin* p, kvc_cache* cache, const steps_data* d, int64_t context) {
  kvc_emulated_counters a = counters_now(p);
  time_steps(cache, d);
  kvc_emulated_counters b = counters_now(p);
  uint64_t steps = (uint64_t)d->steps;
  if (b.launches - a.launches != steps || b.batch_calls - a.batch_calls != steps ||
      b.batch_copies - a.batch_copies != steps * COPIES || b.allocations != a.allocations || b.frees != a.frees) {
    fprintf(stderr,
            "bench_host_issue: %d steps made %llu launches, %llu batch calls of %llu copies, %llu allocations, "
            "%llu frees; expected one batch of %d copies per step and nothing else\n",
            d->steps, (unsigned long long)(b.launches - a.launches), (unsigned long long)(b.batch_calls - a.batch_calls),
            (unsigned long long)(b.batch_copies - a.batch_copies), (unsigned long long)(b.allocations - a.allocations),
            (unsigned long long)(b.frees - a.frees), COPIES);
    exit(1);
  }
  verify_newest(cache, d, context);
}

static void crop_back(kvc_cache* cache, int steps, int64_t context) {
  bench_check(kvc_cache_crop(cache, -(int64_t)steps), "kvc_cache_crop");
  if (seq_length(cache) != context) {
    fprintf(stderr, "bench_host_issue: crop left %lld tokens, expected %lld\n", (long long)seq_length(cache),
            (long long)context);
    exit(1);
  }
}

static void report(bench_results* res, const char* what, const char* metric, bench_stats s) {
  printf("%-44s %12.0f %12.0f %12.0f\n", what, s.median, s.min, s.max);
  char m[64];
  bench_add(res, "host_issue", "kvcache-emulated", metric, s.median, "ns");
  snprintf(m, sizeof m, "%s_min", metric);
  bench_add(res, "host_issue", "kvcache-emulated", m, s.min, "ns");
  snprintf(m, sizeof m, "%s_max", metric);
  bench_add(res, "host_issue", "kvcache-emulated", m, s.max, "ns");
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 201;
  int64_t context = args.context ? args.context : 1024;
  plugin p;
  char why[1200];
  if (plugin_open(&p, why, sizeof why)) {
    printf("bench_host_issue: SKIPPED: %s\n", why);
    return 0;
  }
  printf("host issue of one update_all step on the emulated device: %d layers x %d KV heads x head_dim %d, "
         "bfloat16, batch 1, DynamicCache reserved for %lld + %d tokens; %d repetitions of %d steps; kvcache %s\n\n",
         LAYERS, KV_HEADS, HEAD_DIM, (long long)context, args.steps, reps, args.steps, kvc_version_string());

  steps_data d;
  steps_init(&d, args.steps);
  kvc_cache* cache = make_cache(context, args.steps);
  kvc_copy_4d* batches = bench_alloc((size_t)args.steps * COPIES * sizeof(kvc_copy_4d));
  expect_one_batch(&p, cache, &d, context); /* also the warm-up */
  time_plugin(&p, cache, &d, context, batches);
  verify_newest(cache, &d, context); /* the replay wrote the same bytes again */
  crop_back(cache, d.steps, context);

  double* wall = bench_alloc((size_t)reps * sizeof(double));
  double* batch = bench_alloc((size_t)reps * sizeof(double));
  double* core = bench_alloc((size_t)reps * sizeof(double));
  double* planning = bench_alloc((size_t)reps * sizeof(double));
  for (int r = 0; r < reps; r++) {
    wall[r] = time_steps(cache, &d);
    batch[r] = time_plugin(&p, cache, &d, context, batches);
    planning[r] = time_gpu_planning(&d, batches);
    core[r] = wall[r] - batch[r];
    crop_back(cache, d.steps, context);
  }
  static bench_results res;
  printf("%-44s %12s %12s %12s\n", "ns per step", "median", "min", "max");
  report(&res, "kvc_cache_update_all (core + plugin)", "step_wall_ns", bench_summarize(wall, (size_t)reps));
  report(&res, "the plugin's copy_4d_batch of the same copies", "plugin_batch_ns", bench_summarize(batch, (size_t)reps));
  report(&res, "core issue cost (difference, per repetition)", "core_issue_ns", bench_summarize(core, (size_t)reps));
  report(&res, "a GPU plugin's planning of the same batch", "gpu_planning_ns", bench_summarize(planning, (size_t)reps));

  free(wall), free(batch), free(core), free(planning), free(batches);
  kvc_cache_destroy(cache);
  p.table->exec_close(p.table->ctx, &p.exec);
  steps_free(&d);
  bench_write_json(args.json_path, &res);
  return 0;
}
