/*
 * bench_decode: the cost of appending one decode step's keys and values to a
 * DynamicCache shaped like Llama-3-8B (32 layers, 8 KV heads, head_dim 128,
 * bfloat16, batch 1), at 1k, 8k and 32k cached tokens.
 *
 * The claim under test: a decode step costs the same at any context length
 * (no per-step allocation, no copy of the history), close to a plain memcpy
 * of the new token's bytes. Each repetition times `steps` single-token steps
 * at the given context, then crops them off again so every repetition starts
 * from the same length. Reported: median, min and max over repetitions of the
 * time per token, for one kvc_cache_update_all call and for 32
 * kvc_cache_update calls, and two memcpy rooflines measured in the same run:
 *  - memcpy: the step's bytes from the same 64 sources per token to
 *    consecutive addresses of a small buffer that stays hot in the caches
 *    and the TLB. The software floor: what moving the bytes costs at best.
 *  - slot memcpy: the same bytes, one head row (256 bytes) per memcpy, to the
 *    very slots the cache writes (taken from the views the updates returned):
 *    512 rows per token spread over 64 stores of up to gigabytes, a page
 *    apart or more, so it pays the TLB and cache misses the cache pays. What
 *    the cache costs above it is software; what this costs above the first
 *    roofline is the memory system.
 * Repetitions visit the lengths in turn, so drift hits them alike. The one
 * step where a store grows past its prefill size is timed apart, once.
 */
#include "bench_common.h"

#define LAYERS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define TOKEN_ELEMS ((size_t)KV_HEADS * HEAD_DIM) /* one layer, one of K or V */
#define TOKEN_BYTES (TOKEN_ELEMS * sizeof(uint16_t))
#define STEP_BYTES (TOKEN_BYTES * 2 * LAYERS) /* K and V of every layer */

static volatile uint64_t bench_sink; /* keeps the roofline's stores observable */

typedef struct step_data {
  int steps;
  uint16_t* bytes;         /* [steps][LAYERS][2][TOKEN_ELEMS] */
  int64_t shape[4];        /* {1, KV_HEADS, 1, HEAD_DIM}, shared by every tensor */
  kvc_tensor* keys;        /* [steps][LAYERS] */
  kvc_tensor* values;
} step_data;

static uint16_t* token_src(const step_data* d, int step, int layer, int is_value) {
  return d->bytes + (((size_t)step * LAYERS + (size_t)layer) * 2 + (size_t)is_value) * TOKEN_ELEMS;
}

static void step_data_init(step_data* d, int steps) {
  d->steps = steps;
  d->bytes = bench_alloc((size_t)steps * STEP_BYTES);
  bench_fill_bf16(d->bytes, (size_t)steps * LAYERS * 2 * TOKEN_ELEMS, 7);
  d->shape[0] = 1;
  d->shape[1] = KV_HEADS;
  d->shape[2] = 1;
  d->shape[3] = HEAD_DIM;
  d->keys = bench_alloc((size_t)steps * LAYERS * sizeof(kvc_tensor));
  d->values = bench_alloc((size_t)steps * LAYERS * sizeof(kvc_tensor));
  for (int s = 0; s < steps; s++)
    for (int l = 0; l < LAYERS; l++) {
      d->keys[s * LAYERS + l] = bench_tensor_bf16(token_src(d, s, l, 0), d->shape);
      d->values[s * LAYERS + l] = bench_tensor_bf16(token_src(d, s, l, 1), d->shape);
    }
}

static void step_data_free(step_data* d) {
  free(d->bytes);
  free(d->keys);
  free(d->values);
}

/* A DynamicCache built from a 32-layer full-attention config. */
static kvc_cache* make_cache(void) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = LAYERS;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.preset = KVC_PRESET_DYNAMIC;
  opt.config = &cfg;
  kvc_cache* cache = NULL;
  bench_check(kvc_cache_create(&opt, &cache), "kvc_cache_create");
  return cache;
}

static void prefill(kvc_cache* cache, int64_t length) {
  size_t elems = (size_t)length * TOKEN_ELEMS;
  uint16_t* k = bench_alloc(elems * sizeof(uint16_t));
  uint16_t* v = bench_alloc(elems * sizeof(uint16_t));
  bench_fill_bf16(k, elems, 11);
  bench_fill_bf16(v, elems, 13);
  int64_t shape[4] = {1, KV_HEADS, length, HEAD_DIM};
  kvc_tensor keys[LAYERS], values[LAYERS];
  for (int l = 0; l < LAYERS; l++) {
    keys[l] = bench_tensor_bf16(k, shape);
    values[l] = bench_tensor_bf16(v, shape);
  }
  bench_check(kvc_cache_update_all(cache, LAYERS, keys, values, NULL, NULL), "prefill");
  free(k);
  free(v);
}

static int64_t seq_length(const kvc_cache* cache) {
  int64_t n = -1;
  bench_check(kvc_cache_seq_length(cache, 0, &n), "kvc_cache_seq_length");
  return n;
}

/* A benchmark of a wrong result is worthless: after the warm-up repetition,
 * check the length and that the last layer's newest token holds our bytes. */
static void verify_appended(const kvc_cache* cache, const step_data* d, int64_t context) {
  int64_t want = context + d->steps;
  if (seq_length(cache) != want) {
    fprintf(stderr, "bench: seq_length is %lld after the steps, expected %lld\n",
            (long long)seq_length(cache), (long long)want);
    exit(1);
  }
  kvc_kv view;
  bench_check(kvc_cache_layer_view(cache, LAYERS - 1, &view), "kvc_cache_layer_view");
  for (int is_value = 0; is_value < 2; is_value++) {
    const kvc_tensor* t = is_value ? &view.value : &view.key;
    const uint16_t* src = token_src(d, d->steps - 1, LAYERS - 1, is_value);
    if (t->shape[2] != want) {
      fprintf(stderr, "bench: view holds %lld tokens, expected %lld\n", (long long)t->shape[2],
              (long long)want);
      exit(1);
    }
    const char* base = (const char*)t->data + t->byte_offset;
    for (int h = 0; h < KV_HEADS; h++) {
      int64_t off = h * bench_stride(t, 1) + (want - 1) * bench_stride(t, 2);
      if (memcmp(base + off * 2, src + (size_t)h * HEAD_DIM, HEAD_DIM * 2) != 0) {
        fprintf(stderr, "bench: the newest token of head %d differs from what was appended\n", h);
        exit(1);
      }
    }
  }
}

static void crop_back(kvc_cache* cache, int steps, int64_t context) {
  bench_check(kvc_cache_crop(cache, -(int64_t)steps), "kvc_cache_crop");
  if (seq_length(cache) != context) {
    fprintf(stderr, "bench: crop left %lld tokens, expected %lld\n", (long long)seq_length(cache),
            (long long)context);
    exit(1);
  }
}

/* One repetition: `steps` single-token steps, in ns per token; `cpu` (if not NULL) gets this thread's CPU ns per
 * token, which other processes on a shared machine do not inflate. */
static double time_steps(kvc_cache* cache, const step_data* d, int use_update_all, kvc_kv* out, double* cpu) {
  double c0 = bench_thread_cpu_ns();
  double t0 = bench_now_ns();
  for (int s = 0; s < d->steps; s++) {
    const kvc_tensor* k = &d->keys[s * LAYERS];
    const kvc_tensor* v = &d->values[s * LAYERS];
    if (use_update_all) {
      bench_check(kvc_cache_update_all(cache, LAYERS, k, v, NULL, out), "kvc_cache_update_all");
    } else {
      for (uint32_t l = 0; l < LAYERS; l++)
        bench_check(kvc_cache_update(cache, l, &k[l], &v[l], NULL, &out[l]), "kvc_cache_update");
    }
  }
  double wall = (bench_now_ns() - t0) / d->steps;
  if (cpu) *cpu = (bench_thread_cpu_ns() - c0) / d->steps;
  return wall;
}

/* The roofline: the same bytes, from the same 64 sources per token, copied
 * with memcpy to consecutive addresses; ns per token. */
static double time_memcpy(const step_data* d, char* dst) {
  double t0 = bench_now_ns();
  for (int s = 0; s < d->steps; s++)
    for (int l = 0; l < LAYERS; l++)
      for (int is_value = 0; is_value < 2; is_value++)
        memcpy(dst + (((size_t)s * LAYERS + l) * 2 + is_value) * TOKEN_BYTES, token_src(d, s, l, is_value),
               TOKEN_BYTES);
  double per_token = (bench_now_ns() - t0) / d->steps;
  bench_sink += (uint64_t)(unsigned char)dst[(size_t)bench_sink % ((size_t)d->steps * STEP_BYTES)];
  return per_token;
}

/* Where the cache writes each step's head rows: [steps][LAYERS][2][KV_HEADS]. */
typedef struct slot_map {
  char** dst;
  const void* stores[LAYERS][2]; /* the views' data pointers when recorded: the slots are valid while they hold */
} slot_map;

static char** slot_at(const slot_map* m, int step, int layer, int is_value) {
  return m->dst + (((size_t)step * LAYERS + (size_t)layer) * 2 + (size_t)is_value) * KV_HEADS;
}

/* The newest token's head rows in the views the update of one step returned. */
static void record_step_slots(slot_map* m, const kvc_kv* out, int step) {
  for (int l = 0; l < LAYERS; l++)
    for (int is_value = 0; is_value < 2; is_value++) {
      const kvc_tensor* t = is_value ? &out[l].value : &out[l].key;
      char* base = (char*)t->data + t->byte_offset;
      char** slot = slot_at(m, step, l, is_value);
      for (int h = 0; h < KV_HEADS; h++)
        slot[h] = base + (h * bench_stride(t, 1) + (t->shape[2] - 1) * bench_stride(t, 2)) * 2;
      m->stores[l][is_value] = t->data;
    }
}

/* Runs the steps once with update_all (untimed), records every slot, crops back. */
static void record_slots(kvc_cache* cache, const step_data* d, int64_t context, slot_map* m) {
  kvc_kv out[LAYERS];
  m->dst = bench_alloc((size_t)d->steps * LAYERS * 2 * KV_HEADS * sizeof(char*));
  for (int s = 0; s < d->steps; s++) {
    bench_check(kvc_cache_update_all(cache, LAYERS, &d->keys[s * LAYERS], &d->values[s * LAYERS], NULL, out),
                "kvc_cache_update_all");
    record_step_slots(m, out, s);
  }
  crop_back(cache, d->steps, context);
}

/* The slot roofline writes into the cache's stores: they must not have moved since the slots were recorded. */
static void check_slots_valid(const slot_map* m, const kvc_kv* out) {
  for (int l = 0; l < LAYERS; l++)
    if (out[l].key.data != m->stores[l][0] || out[l].value.data != m->stores[l][1]) {
      fprintf(stderr, "bench: layer %d's store moved after its slots were recorded\n", l);
      exit(1);
    }
}

/* The second roofline: the same bytes, one head row per memcpy, into the
 * slots the cache writes (the bytes the cache wrote there, so the cache's
 * contents stay what they are); ns per token. */
static double time_slot_memcpy(const step_data* d, const slot_map* m) {
  double t0 = bench_now_ns();
  for (int s = 0; s < d->steps; s++)
    for (int l = 0; l < LAYERS; l++)
      for (int is_value = 0; is_value < 2; is_value++) {
        char** slot = slot_at(m, s, l, is_value);
        const uint16_t* src = token_src(d, s, l, is_value);
        for (int h = 0; h < KV_HEADS; h++) memcpy(slot[h], src + (size_t)h * HEAD_DIM, HEAD_DIM * 2);
      }
  double per_token = (bench_now_ns() - t0) / d->steps;
  bench_sink += (uint64_t)(unsigned char)slot_at(m, d->steps - 1, LAYERS - 1, 1)[KV_HEADS - 1][0];
  return per_token;
}

static uint64_t bytes_reserved(const kvc_cache* cache) {
  kvc_memory_info mem;
  memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  bench_check(kvc_cache_memory(cache, &mem), "kvc_cache_memory");
  return mem.bytes_reserved;
}

/* The first step after the prefill is where a store sized for the prompt
 * grows (geometrically: it copies the history once, then not again until it
 * has doubled). Timed on its own, once, and reported only if it did grow. */
static void measure_growth(kvc_cache* cache, const step_data* d, int64_t context, const char* label,
                           bench_results* res) {
  uint64_t before = bytes_reserved(cache);
  double t0 = bench_now_ns();
  bench_check(kvc_cache_update_all(cache, LAYERS, &d->keys[0], &d->values[0], NULL, NULL), "kvc_cache_update_all");
  double dt = bench_now_ns() - t0;
  uint64_t after = bytes_reserved(cache);
  crop_back(cache, 1, context);
  if (after <= before) {
    printf("%-8s first step after the prefill: %.0f ns, no growth (%llu bytes reserved)\n", label, dt,
           (unsigned long long)after);
    return;
  }
  printf("%-8s first step after the prefill grows the stores from %llu to %llu bytes: %.0f ns, once\n", label,
         (unsigned long long)before, (unsigned long long)after, dt);
  char m[64];
  snprintf(m, sizeof m, "append_growth_ns_%s", label);
  bench_add(res, "decode_append", "kvcache-c", m, dt, "ns");
  snprintf(m, sizeof m, "append_growth_bytes_reserved_%s", label);
  bench_add(res, "decode_append", "kvcache-c", m, (double)after, "bytes");
}

/* Samples of one context length: [reps] each. */
typedef struct length_samples {
  int64_t context;
  kvc_cache* cache;
  slot_map slots;
  double *all, *loop, *roof, *slot_roof;
  double *all_cpu, *loop_cpu; /* the same repetitions in CPU time */
} length_samples;

static void add_stats(bench_results* res, const char* impl, const char* prefix, const char* label,
                      bench_stats s) {
  char m[64];
  snprintf(m, sizeof m, "%s_ns_per_token_%s", prefix, label);
  bench_add(res, "decode_append", impl, m, s.median, "ns");
  snprintf(m, sizeof m, "%s_min_ns_per_token_%s", prefix, label);
  bench_add(res, "decode_append", impl, m, s.min, "ns");
  snprintf(m, sizeof m, "%s_max_ns_per_token_%s", prefix, label);
  bench_add(res, "decode_append", impl, m, s.max, "ns");
}

static void print_row(const char* label, const char* impl, bench_stats s, double roof, double slot_roof) {
  printf("%-8s %-22s %12.0f %12.0f %12.0f %9.2f %9.2f\n", label, impl, s.median, s.min, s.max, s.median / roof,
         s.median / slot_roof);
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 101; /* a repetition is ~1 ms: many are cheap and steady the median */
  int64_t default_lengths[] = {1024, 8192, 32768};
  int64_t* lengths = args.context ? &args.context : default_lengths;
  int nlengths = args.context ? 1 : 3;

  static bench_results res;
  step_data d;
  step_data_init(&d, args.steps);

  printf("decode append: %d layers x %d KV heads x head_dim %d, bfloat16, batch 1, DynamicCache\n", LAYERS,
         KV_HEADS, HEAD_DIM);
  printf("new K+V bytes per token (all layers): %zu; %d repetitions of %d steps; kvcache %s\n\n",
         (size_t)STEP_BYTES, reps, args.steps, kvc_version_string());

  /* Every length's cache stays alive and each repetition visits all of them
   * (and the memcpy roofline) in turn, so that load from other processes on
   * a shared machine falls on every length alike and the ratios hold. */
  length_samples ls[3];
  char* roof_dst = bench_alloc((size_t)d.steps * STEP_BYTES);
  kvc_kv out[LAYERS];
  for (int i = 0; i < nlengths; i++) {
    char label[24];
    bench_length_label(lengths[i], label, sizeof label);
    ls[i].context = lengths[i];
    ls[i].cache = make_cache();
    prefill(ls[i].cache, lengths[i]);
    measure_growth(ls[i].cache, &d, lengths[i], label, &res);
    for (int mode = 1; mode >= 0; mode--) { /* warm-up: first growth, page faults */
      time_steps(ls[i].cache, &d, mode, out, NULL);
      verify_appended(ls[i].cache, &d, lengths[i]);
      crop_back(ls[i].cache, d.steps, lengths[i]);
    }
    record_slots(ls[i].cache, &d, lengths[i], &ls[i].slots);
    ls[i].all = bench_alloc((size_t)reps * sizeof(double));
    ls[i].loop = bench_alloc((size_t)reps * sizeof(double));
    ls[i].all_cpu = bench_alloc((size_t)reps * sizeof(double));
    ls[i].loop_cpu = bench_alloc((size_t)reps * sizeof(double));
    ls[i].roof = bench_alloc((size_t)reps * sizeof(double));
    ls[i].slot_roof = bench_alloc((size_t)reps * sizeof(double));
  }
  time_memcpy(&d, roof_dst);
  /* Within a length, the four measurements take turns at going first: the first one after another length's
   * work finds the slots cold, and that penalty must not fall on one of them only. */
  for (int r = 0; r < reps; r++)
    for (int i = 0; i < nlengths; i++)
      for (int k = 0; k < 4; k++) {
        switch ((k + r) % 4) {
          case 0:
            ls[i].all[r] = time_steps(ls[i].cache, &d, 1, out, &ls[i].all_cpu[r]);
            crop_back(ls[i].cache, d.steps, ls[i].context);
            break;
          case 1:
            ls[i].loop[r] = time_steps(ls[i].cache, &d, 0, out, &ls[i].loop_cpu[r]);
            check_slots_valid(&ls[i].slots, out);
            crop_back(ls[i].cache, d.steps, ls[i].context);
            break;
          case 2:
            ls[i].roof[r] = time_memcpy(&d, roof_dst);
            break;
          default:
            ls[i].slot_roof[r] = time_slot_memcpy(&d, &ls[i].slots);
            break;
        }
      }
  free(roof_dst);

  printf("\n%-8s %-22s %12s %12s %12s %9s %9s\n", "context", "impl", "median ns/tok", "min", "max", "x memcpy",
         "x slots");
  double first = 0, last = 0;
  char first_label[24] = "", last_label[24] = "";
  for (int i = 0; i < nlengths; i++) {
    char label[24], m[64];
    bench_length_label(lengths[i], label, sizeof label);
    kvc_cache_destroy(ls[i].cache);
    bench_stats all = bench_summarize(ls[i].all, (size_t)reps);
    bench_stats loop = bench_summarize(ls[i].loop, (size_t)reps);
    bench_stats roof = bench_summarize(ls[i].roof, (size_t)reps);
    bench_stats slot = bench_summarize(ls[i].slot_roof, (size_t)reps);
    bench_stats all_cpu = bench_summarize(ls[i].all_cpu, (size_t)reps);
    bench_stats loop_cpu = bench_summarize(ls[i].loop_cpu, (size_t)reps);
    free(ls[i].all), free(ls[i].loop), free(ls[i].roof), free(ls[i].slot_roof), free(ls[i].slots.dst);
    free(ls[i].all_cpu), free(ls[i].loop_cpu);

    print_row(label, "kvc_cache_update_all", all, roof.median, slot.median);
    print_row(label, "32 x kvc_cache_update", loop, roof.median, slot.median);
    print_row(label, "memcpy (roofline)", roof, roof.median, slot.median);
    print_row(label, "memcpy to the slots", slot, roof.median, slot.median);

    add_stats(&res, "kvcache-c", "append", label, all);
    add_stats(&res, "kvcache-c", "append_loop", label, loop);
    add_stats(&res, "memcpy", "append", label, roof);
    add_stats(&res, "memcpy-slots", "append", label, slot);
    snprintf(m, sizeof m, "append_ratio_to_memcpy_%s", label);
    bench_add(&res, "decode_append", "kvcache-c", m, all.median / roof.median, "x");
    snprintf(m, sizeof m, "append_loop_ratio_to_memcpy_%s", label);
    bench_add(&res, "decode_append", "kvcache-c", m, loop.median / roof.median, "x");
    snprintf(m, sizeof m, "append_ratio_to_slot_memcpy_%s", label);
    bench_add(&res, "decode_append", "kvcache-c", m, all.median / slot.median, "x");
    snprintf(m, sizeof m, "append_loop_ratio_to_slot_memcpy_%s", label);
    bench_add(&res, "decode_append", "kvcache-c", m, loop.median / slot.median, "x");
    /* The per-layer path is the one a forward pass calls (layer l's K/V exist only after layer l - 1 ran). */
    snprintf(m, sizeof m, "append_loop_over_append_%s", label);
    bench_add(&res, "decode_append", "kvcache-c", m, loop.median / all.median, "x");
    snprintf(m, sizeof m, "append_loop_over_append_cpu_%s", label);
    bench_add(&res, "decode_append", "kvcache-c", m, loop_cpu.median / all_cpu.median, "x");
    printf("%-8s 32 x kvc_cache_update / kvc_cache_update_all: %.3f (wall), %.3f (CPU time: %.0f / %.0f ns)\n",
           label, loop.median / all.median, loop_cpu.median / all_cpu.median, loop_cpu.median, all_cpu.median);

    if (i == 0) {
      first = all.median;
      snprintf(first_label, sizeof first_label, "%s", label);
    }
    last = all.median;
    snprintf(last_label, sizeof last_label, "%s", label);
  }
  bench_add(&res, "decode_append", "kvcache-c", "append_bytes_per_token", (double)STEP_BYTES, "bytes");
  if (nlengths > 1) {
    char m[64];
    snprintf(m, sizeof m, "append_%s_over_%s", last_label, first_label);
    bench_add(&res, "decode_append", "kvcache-c", m, last / first, "x");
    printf("\nappend@%s / append@%s = %.2f (target <= 1.2)\n", last_label, first_label, last / first);
  }
  step_data_free(&d);
  bench_write_json(args.json_path, &res);
  return 0;
}
