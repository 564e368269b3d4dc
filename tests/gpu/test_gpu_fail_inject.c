/*
 * tests/gpu/test_gpu_fail_inject.c: a device that fails is never reported as
 * success (emulated device only).
 *
 * A real device fails calls the core cannot foresee: a launch with no kernel
 * image for the card, a dead context, a scratch allocation the pool cannot
 * serve. The emulated device fails the n-th call of its backend table on
 * request (emulated_faults.h). For each operation of each case, n runs from
 * 1 until the operation makes fewer backend calls than n: every run builds
 * the same device cache and its CPU twin (gpu_twin.h), fails call n of the
 * operation on the device, and requires
 *  - an error, never success: the message names the failed backend entry and
 *    carries the vendor's own words (or the code is OUT_OF_MEMORY for a failed
 *    allocation);
 *  - the state the header promises: either the cache is unchanged (everything
 *    observable equals the CPU twin, which did not run the operation), or it is
 *    poisoned: every later call but reset and destroy is refused with
 *    INVALID_STATE, and after kvc_cache_reset it works again like its twin.
 * The run where no call failed must succeed and agree with the twin.
 * The block pool is swept the same way (its write, gather, block table,
 * fork, copy-on-write, recurrent checkpoint and restore): an error, and
 * either the pool poisoned or the values written before read back intact.
 */
#include "emulated_probe.h"
/* gpu_twin.h's helpers are static; the sweep uses some of them. */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include "gpu_twin.h"
#include "gpu_pool_util.h"

#define FI_MAX_CALLS 400 /* a guard: no operation here makes this many backend calls */

/* The inputs one attempt of an operation takes (the same bytes on both sides), made before the failure is armed. */
typedef struct fi_inputs {
  tw_input k[4], v[4];
  uint32_t layers;
  tw_input cos, sin;       /* a sink cache's RoPE rows of the update (rope cases) */
  kvc_update_options o[2]; /* each side's options holding them */
  const kvc_update_options* opts[2];
} fi_inputs;

typedef struct fi_case {
  const char* name;
  kvc_cache_options options;
  uint32_t layers;
  tw_geom prefill, step; /* the setup's update_all, then `steps` decode steps */
  int steps;
  int rope; /* every update passes RoPE cos/sin rows (a sink cache re-rotates its kept keys) */
} fi_case;

typedef struct fi_op {
  const char* name;
  /* The operation on one side of the twin; *made receives a cache the operation created (or NULL). */
  kvc_error* (*run)(twin* t, int side, fi_inputs* x, kvc_cache** made);
  int needs_inputs; /* one update's K/V per layer of the case's step geometry */
} fi_op;

static kvc_error* op_update(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)made;
  kvc_kv out;
  return kvc_cache_update(t->c[side], 0, &x->k[0].t[side], &x->v[0].t[side], x->opts[side], &out);
}

static kvc_error* op_update_all(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)made;
  kvc_tensor k[4], v[4];
  kvc_kv out[4];
  for (uint32_t i = 0; i < x->layers; i++) {
    k[i] = x->k[i].t[side];
    v[i] = x->v[i].t[side];
  }
  return kvc_cache_update_all(t->c[side], x->layers, k, v, x->opts[side], out);
}

static kvc_error* op_crop(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  return kvc_cache_crop(t->c[side], -4);
}

static const int64_t fi_beams[2] = {1, 0};

static kvc_error* op_reorder(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  return kvc_cache_reorder(t->c[side], fi_beams, 2);
}

static kvc_error* op_select(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  const int64_t keep[1] = {1};
  return kvc_cache_batch_select_indices(t->c[side], keep, 1);
}

static kvc_error* op_repeat(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  return kvc_cache_batch_repeat_interleave(t->c[side], 2);
}

static kvc_error* op_reserve(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  return kvc_cache_reserve(t->c[side], 4096);
}

static kvc_error* op_reset(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  return kvc_cache_reset(t->c[side]);
}

static kvc_error* op_clone(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x;
  return kvc_cache_clone(t->c[side], made);
}

/* batch_split into batches of one, then from_batch_splits of the parts: the stack is the operation's cache. */
static kvc_error* op_split_stack(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x;
  kvc_cache* parts[2] = {NULL, NULL};
  size_t n = 0;
  kvc_error* e = kvc_cache_batch_split(t->c[side], 2, 1, parts, 2, &n);
  if (!e) e = kvc_cache_from_batch_splits((const kvc_cache* const*)parts, n, made);
  for (size_t i = 0; i < n; i++) kvc_cache_destroy(parts[i]);
  return e;
}

static kvc_error* op_offload(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  return kvc_cache_offload(t->c[side], 0);
}

static kvc_error* op_prefetch(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  return kvc_cache_prefetch(t->c[side], 1);
}

static kvc_error* op_set_stream(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  static int other_stream; /* a stream handle of the emulated device is any distinct pointer */
  return side == TW_CPU ? NULL : kvc_cache_set_stream(t->c[side], &other_stream);
}

/* A cache file in memory (kvc_write_fn). */
typedef struct fi_file {
  unsigned char* data;
  size_t len;
} fi_file;

static int fi_write(void* user, const void* data, size_t bytes) {
  fi_file* f = (fi_file*)user;
  unsigned char* grown = (unsigned char*)realloc(f->data, f->len + bytes);
  if (!grown) return -1;
  memcpy(grown + f->len, data, bytes);
  f->data = grown;
  f->len += bytes;
  return 0;
}

/* The file of the side's cache, through a 4 KiB staging buffer on the device (chunks of rows). */
static kvc_error* op_save(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  kvc_save_options so = KVC_SAVE_OPTIONS_INIT;
  so.staging_bytes = 4096;
  fi_file f = {NULL, 0};
  kvc_error* e = kvc_cache_save_to(t->c[side], fi_write, &f, &so);
  free(f.data);
  return e;
}

/* The CPU cache's file (the CPU backend: no device call) loaded on the side's device as a new cache. */
static kvc_error* op_load(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x;
  fi_file f = {NULL, 0};
  kvc_error* e = kvc_cache_save_to(t->c[TW_CPU], fi_write, &f, NULL);
  kvc_load_options lo = KVC_LOAD_OPTIONS_INIT;
  if (side == TW_DEV) {
    lo.device.device_type = drt_device_type();
    lo.device.device_id = t->device;
    lo.stream = kvc_cache_stream(t->c[side]);
  }
  if (!e) e = kvc_cache_load_buffer(f.data, f.len, &lo, made);
  free(f.data);
  return e;
}

/* The CPU cache's file restored into the side's cache (built aside, then swapped in). */
static kvc_error* op_restore(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)x, (void)made;
  fi_file f = {NULL, 0};
  kvc_error* e = kvc_cache_save_to(t->c[TW_CPU], fi_write, &f, NULL);
  if (!e) e = kvc_cache_restore_buffer(t->c[side], f.data, f.len);
  free(f.data);
  return e;
}

static const fi_op update_ops[] = {
    {"update", op_update, 1},
    {"update_all", op_update_all, 1},
};
static const fi_op batch_ops[] = {
    {"crop", op_crop, 0},       {"reorder", op_reorder, 0},         {"select", op_select, 0},
    {"repeat", op_repeat, 0},   {"split and stack", op_split_stack, 0}, {"clone", op_clone, 0},
    {"reserve", op_reserve, 0}, {"reset", op_reset, 0},             {"set_stream", op_set_stream, 0},
};
static const fi_op file_ops[] = {
    {"save", op_save, 0},
    {"load", op_load, 0},
    {"restore", op_restore, 0},
};
static const fi_op tier_ops[] = {
    {"offload", op_offload, 0},
    {"prefetch", op_prefetch, 0},
};

/* ------------------------------------------------------------ the sweep */

/* RoPE rows [batch, n, key dim] of an update of geometry g, the same bytes on both sides, in x->o. */
static int fi_rope_make(fi_inputs* x, const tw_geom* g) {
  const int64_t shape[3] = {g->b, g->n, g->dk};
  int ok = tw_input_make(&x->cos, KVC_DTYPE_FLOAT32, 3, shape, g->layout, 0);
  ok &= tw_input_make(&x->sin, KVC_DTYPE_FLOAT32, 3, shape, (g->layout + 1) % TW_LAYOUTS, 0);
  for (int side = 0; side < 2; side++) {
    x->o[side] = (kvc_update_options)KVC_UPDATE_OPTIONS_INIT;
    x->o[side].rope_cos = &x->cos.t[side];
    x->o[side].rope_sin = &x->sin.t[side];
    x->opts[side] = &x->o[side];
  }
  return ok;
}

static int fi_setup_step(twin* t, const fi_case* c, const tw_geom* g) {
  if (!c->rope) return TW_UPDATE_ALL(t, c->layers, g);
  fi_inputs x;
  memset(&x, 0, sizeof x);
  int ok = fi_rope_make(&x, g) && TW_UPDATE_ALL_SIDES(t, c->layers, g, x.o);
  tw_input_free(&x.cos);
  tw_input_free(&x.sin);
  return ok;
}

static int fi_setup(twin* t, const fi_case* c) {
  if (!tw_create(t, &c->options, 0)) return 0;
  if (!fi_setup_step(t, c, &c->prefill)) return 0;
  for (int i = 0; i < c->steps; i++)
    if (!fi_setup_step(t, c, &c->step)) return 0;
  return 1;
}

static int fi_inputs_make(fi_inputs* x, const fi_case* c) {
  memset(x, 0, sizeof *x);
  x->layers = c->layers;
  if (c->rope && !fi_rope_make(x, &c->step)) return 0;
  for (uint32_t i = 0; i < c->layers; i++) {
    tw_geom g = c->step;
    g.layout = (g.layout + (int)i) % TW_LAYOUTS;
    if (!tw_kv_make(&x->k[i], &x->v[i], &g, 0)) return 0;
  }
  return 1;
}

static void fi_inputs_free(fi_inputs* x) {
  for (uint32_t i = 0; i < x->layers; i++) {
    tw_input_free(&x->k[i]);
    tw_input_free(&x->v[i]);
  }
  tw_input_free(&x->cos);
  tw_input_free(&x->sin);
}

/* The failed call's error says what failed: a failed allocation is OUT_OF_MEMORY; any other entry is named, with
   the vendor's words. */
static void fi_check_error(kvc_error* e, const char* entry, const char* where) {
  const char* m = kvc_error_message(e);
  int says = strstr(entry, "alloc") ? kvc_error_code(e) == KVC_ERROR_OUT_OF_MEMORY
                                    : strstr(m, "no kernel image is available") != NULL;
  if (!tu_report(says, __FILE__, __LINE__, "the error names the failure: OUT_OF_MEMORY, or the vendor's message"))
    fprintf(TU_LOG, "  %s (%s failed): %s: %s\n", where, entry, kvc_code_name(kvc_error_code(e)), m);
}

/* After a failed operation: unchanged (equal to the twin that did not run it), or poisoned until reset. */
static void fi_check_state(twin* t, const char* where) {
  int64_t len = 0;
  kvc_error* e = kvc_cache_seq_length(t->c[TW_DEV], 0, &len);
  if (!e) {
    tw_check(t, where);
    return;
  }
  char what[300];
  snprintf(what, sizeof what, "%s: a cache that refuses calls after a failure refuses them with INVALID_STATE", where);
  if (!tu_report(kvc_error_code(e) == KVC_ERROR_INVALID_STATE, __FILE__, __LINE__, what))
    fprintf(TU_LOG, "  %s: %s\n", kvc_code_name(kvc_error_code(e)), kvc_error_message(e));
  kvc_error_destroy(e);
  kvc_kv view;
  CHECK_ERR(kvc_cache_layer_view(t->c[TW_DEV], 0, &view), KVC_ERROR_INVALID_STATE);
  /* A reset empties every layer and the cache works again. What the failed operation had changed besides the
     bytes (a new batch size, which tier a layer is in) may stay, so the twin is not compared any more. */
  CHECK_OK(kvc_cache_reset(t->c[TW_DEV]));
  uint32_t n = kvc_cache_num_layers(t->c[TW_DEV]);
  for (uint32_t i = 0; i < n; i++) {
    len = -1;
    snprintf(what, sizeof what, "%s, then reset: layer %u is empty", where, i);
    if (!tu_report(tu_ok(kvc_cache_seq_length(t->c[TW_DEV], i, &len), __FILE__, __LINE__, what) && len == 0, __FILE__,
                   __LINE__, what))
      fprintf(TU_LOG, "  seq_length %lld\n", (long long)len);
    CHECK_OK(kvc_cache_layer_view(t->c[TW_DEV], i, &view));
  }
}

/* Fails call n = 1, 2, ... of `op` on the device side until the operation makes fewer calls than n. */
static void fi_sweep(const fi_case* c, const fi_op* op) {
  char where[200];
  int64_t n = 1;
  for (; n <= FI_MAX_CALLS; n++) {
    snprintf(where, sizeof where, "%s: %s with backend call %lld failing", c->name, op->name, (long long)n);
    twin t;
    fi_inputs x;
    memset(&x, 0, sizeof x);
    int ready = fi_setup(&t, c) && (!op->needs_inputs || fi_inputs_make(&x, c));
    if (!tu_report(ready, __FILE__, __LINE__, where)) {
      fprintf(TU_LOG, "  the setup failed: %s\n", tw_last_message);
      fi_inputs_free(&x);
      tw_destroy(&t);
      return;
    }
    kvc_cache* made[2] = {NULL, NULL};
    int64_t calls = 0, injected = 0;
    char entry[64];
    emulated_probe_fail(NULL, n);
    kvc_error* e = op->run(&t, TW_DEV, &x, &made[TW_DEV]);
    emulated_probe_fail_counts(&calls, &injected, entry, sizeof entry);
    emulated_probe_fail(NULL, 0);
    int done = injected == 0;
    if (done) {
      /* Nothing failed: the operation must have succeeded, like its twin. */
      kvc_error* e0 = op->run(&t, TW_CPU, &x, &made[TW_CPU]);
      if (TW_SAME(e0, e, where)) {
        tw_check(&t, where);
        if (made[TW_CPU] || made[TW_DEV]) {
          twin out = {{made[TW_CPU], made[TW_DEV]}, 0};
          tw_check(&out, where);
        }
      }
    } else if (!tu_report(e != NULL, __FILE__, __LINE__, "an operation whose backend call failed returns an error")) {
      fprintf(TU_LOG, "  %s: returned success\n", where);
    } else {
      fi_check_error(e, entry, where);
      kvc_error_destroy(e);
      CHECK(made[TW_DEV] == NULL);
      fi_check_state(&t, where);
    }
    kvc_cache_destroy(made[TW_CPU]);
    kvc_cache_destroy(made[TW_DEV]);
    fi_inputs_free(&x);
    tw_destroy(&t);
    if (done) break;
  }
  CHECK(n <= FI_MAX_CALLS);
  printf("  %s: %s: %lld backend call(s), each failed once\n", c->name, op->name, (long long)(n - 1));
}

static void fi_sweep_ops(const fi_case* c, const fi_op* ops, size_t nops) {
  for (size_t i = 0; i < nops; i++) fi_sweep(c, &ops[i]);
}

/* ------------------------------------------------------------ the cases */

static tw_geom geom(int64_t b, int64_t n, kvc_dtype dt, int layout) {
  tw_geom g = {b, 2, n, 8, 8, dt, layout};
  return g;
}

static fi_case preset_case(const char* name, kvc_preset preset, const kvc_model_config* cfg, uint32_t layers) {
  fi_case c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.options = (kvc_cache_options)KVC_CACHE_OPTIONS_INIT;
  c.options.preset = preset;
  c.options.config = cfg;
  c.layers = layers;
  c.prefill = geom(2, 5, KVC_DTYPE_FLOAT16, TW_STRIDED);
  c.step = geom(2, 1, KVC_DTYPE_FLOAT16, TW_COMPACT);
  c.steps = 2;
  return c;
}

#define FI_SWEEP(c, ops) fi_sweep_ops((c), (ops), sizeof(ops) / sizeof((ops)[0]))

static void test_dynamic(void) {
  kvc_model_config cfg = tu_config(2, NULL, 0, 0);
  fi_case c = preset_case("dynamic", KVC_PRESET_DYNAMIC, &cfg, 2);
  FI_SWEEP(&c, update_ops);
  FI_SWEEP(&c, batch_ops);
  FI_SWEEP(&c, file_ops);
}

/* Sliding layers of a window of 4: decode steps compact the window (an overlapping move along the seq axis). */
static void test_sliding(void) {
  static const kvc_layer_type types[2] = {KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION};
  kvc_model_config cfg = tu_config(2, types, 4, 0);
  fi_case c = preset_case("sliding window", KVC_PRESET_DYNAMIC, &cfg, 2);
  c.steps = 6;
  FI_SWEEP(&c, update_ops);
  FI_SWEEP(&c, batch_ops);
}

static void test_static(void) {
  kvc_model_config cfg = tu_config(2, NULL, 0, 0);
  fi_case c = preset_case("static", KVC_PRESET_STATIC, &cfg, 2);
  c.options.max_cache_len = 12;
  FI_SWEEP(&c, update_ops);
  FI_SWEEP(&c, batch_ops);
}

/* Layers in the host tier: the updates prefetch and offload; the explicit moves too. */
static void test_offloaded(void) {
  kvc_model_config cfg = tu_config(3, NULL, 0, 0);
  fi_case c = preset_case("offloaded", KVC_PRESET_OFFLOADED, &cfg, 3);
  FI_SWEEP(&c, update_ops);
  FI_SWEEP(&c, tier_ops);
  FI_SWEEP(&c, batch_ops);
  FI_SWEEP(&c, file_ops);
}

static void test_sink(void) {
  kvc_model_config cfg = tu_config(2, NULL, 0, 0);
  fi_case c = preset_case("sink", KVC_PRESET_SINK, &cfg, 2);
  c.options.window_length = 6;
  c.options.num_sink_tokens = 2;
  c.steps = 4;
  FI_SWEEP(&c, update_ops);
  FI_SWEEP(&c, batch_ops);
  /* With RoPE: the cos/sin rows are read into host memory (read_f32_4d, before anything changes), and every
     shift re-rotates the kept keys (rerotate_keys_4d, a write). */
  c.name = "sink with RoPE";
  c.rope = 1;
  FI_SWEEP(&c, update_ops);
}

/* quanto and HQQ in every mode, and FP8: the quantizer entries run in the room phase, dequantization in writes. */
static void test_quantized(void) {
  static const kvc_quant_mode modes[3] = {KVC_QUANT_MODE_INCREMENTAL, KVC_QUANT_MODE_TRANSFORMERS,
                                          KVC_QUANT_MODE_COMPACT};
  static const char* names[3] = {"quantized incremental", "quantized transformers", "quantized compact"};
  tw_nan_equal = 1; /* random bytes hold NaNs; the device's NaN payloads are its own */
  for (int m = 0; m < 3; m++) {
    kvc_quant_options q[2];
    kvc_layer_options layers[3];
    tw_quantized_layers(modes[m], 2, q, layers);
    fi_case c = preset_case(names[m], KVC_PRESET_CUSTOM, NULL, 3);
    c.options = tu_custom_options(3, layers);
    c.steps = 6; /* crop(-4) then reaches into the quantized history */
    FI_SWEEP(&c, update_ops);
    FI_SWEEP(&c, batch_ops);
  }
  tw_nan_equal = 0;
}

/* ------------------------------------------------------------ the pool */

/* A pool holding sequence a: tokens 0..5 written and committed; `grown`: tokens 6 and 7 too (uncommitted). */
typedef struct fi_pool {
  kvc_pool* p;
  kvc_pool_sequence *a, *fork; /* fork: a's fork, when the operation's setup makes one */
  int64_t slots[16];
} fi_pool;

static const int32_t fi_tokens[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

static int fi_pool_setup(fi_pool* f, int grown) {
  memset(f, 0, sizeof *f);
  int ok = CHECK_OK(gp_create(KVC_POOL_LAYOUT_HND, &f->p)) && CHECK_OK(kvc_pool_sequence_create(f->p, NULL, &f->a)) &&
           CHECK_OK(kvc_pool_reserve(f->a, fi_tokens, 6, f->slots)) &&
           CHECK_OK(write_tokens(f->p, 3, f->slots, 0, 6)) && CHECK_OK(kvc_pool_commit(f->a));
  if (ok && grown)
    ok = CHECK_OK(kvc_pool_reserve(f->a, fi_tokens + 6, 2, f->slots)) && CHECK_OK(write_tokens(f->p, 3, f->slots, 6, 2));
  return ok;
}

static kvc_error* pool_write(fi_pool* f) {
  kvc_error* e = kvc_pool_reserve(f->a, fi_tokens + 6, 1, f->slots);
  return e ? e : write_tokens(f->p, 3, f->slots, 6, 1);
}

static kvc_error* pool_gather(fi_pool* f) {
  const int64_t n = (int64_t)kvc_pool_sequence_length(f->a);
  int64_t ks[4] = {1, 2, n, 4}, vs[4] = {1, 2, n, 3};
  kvc_tensor k = dtensor(ks, 4, NULL, (size_t)n * 8), v = dtensor(vs, 4, NULL, (size_t)n * 6);
  kvc_error* e = kvc_pool_gather(f->a, 0, &k, &v);
  drt_free(0, k.data);
  drt_free(0, v.data);
  return e;
}

static kvc_error* pool_block_table(fi_pool* f) {
  const kvc_pool_sequence* seqs[1] = {f->a};
  kvc_pool_table t;
  return kvc_pool_block_table(f->p, seqs, 1, 0, KVC_POOL_TABLE_CSR, &t);
}

static kvc_error* pool_fork(fi_pool* f) {
  kvc_pool_sequence* c = NULL;
  return kvc_pool_fork(f->a, &c); /* the pool's destroy takes it */
}

/* A fork shares the partial last block: its first token copies the block (copy-on-write). */
static kvc_error* pool_copy_on_write(fi_pool* f) { return kvc_pool_reserve(f->fork, fi_tokens + 6, 1, f->slots); }

/* Committing 8 tokens checkpoints the recurrent state (a copy of its slot). */
static kvc_error* pool_checkpoint(fi_pool* f) { return kvc_pool_commit(f->a); }

/* A new sequence matching the checkpointed prefix restores the recurrent state into its live slot. */
static kvc_error* pool_restore(fi_pool* f) {
  kvc_pool_sequence* d = NULL;
  uint64_t matched = 0;
  kvc_error* e = kvc_pool_sequence_create(f->p, NULL, &d);
  return e ? e : kvc_pool_match_prefix(d, fi_tokens, 9, &matched);
}

typedef struct fi_pool_op {
  const char* name;
  kvc_error* (*run)(fi_pool* f);
  int grown;     /* the setup writes 8 tokens */
  int committed; /* ... and commits them (checkpoint included) */
  int forked;    /* the setup forks a */
} fi_pool_op;

/* After a failure: the pool refuses every call (poisoned), or still reads back what the setup wrote. */
static void fi_pool_check_state(fi_pool* f, const char* where) {
  kvc_error* e = pool_gather(f);
  char what[300];
  if (e) {
    snprintf(what, sizeof what, "%s: a pool that refuses calls after a failure refuses them with INVALID_STATE", where);
    if (!tu_report(kvc_error_code(e) == KVC_ERROR_INVALID_STATE, __FILE__, __LINE__, what))
      fprintf(TU_LOG, "  %s: %s\n", kvc_code_name(kvc_error_code(e)), kvc_error_message(e));
    kvc_error_destroy(e);
    CHECK_ERR(pool_write(f), KVC_ERROR_INVALID_STATE);
    CHECK_ERR(pool_block_table(f), KVC_ERROR_INVALID_STATE);
    return;
  }
  snprintf(what, sizeof what, "%s: the pool still holds the values written before", where);
  for (uint32_t layer = 0; layer < 2; layer++)
    if (!tu_report(gather_mismatches(f->a, layer) == 0, __FILE__, __LINE__, what))
      fprintf(TU_LOG, "  layer %u of %llu tokens\n", layer, (unsigned long long)kvc_pool_sequence_length(f->a));
}

static void fi_pool_sweep(const fi_pool_op* op) {
  char where[200];
  int64_t n = 1;
  for (; n <= FI_MAX_CALLS; n++) {
    snprintf(where, sizeof where, "pool: %s with backend call %lld failing", op->name, (long long)n);
    fi_pool f;
    int ready = fi_pool_setup(&f, op->grown) && (!op->committed || CHECK_OK(kvc_pool_commit(f.a))) &&
                (!op->forked || CHECK_OK(kvc_pool_fork(f.a, &f.fork)));
    if (!tu_report(ready, __FILE__, __LINE__, where)) {
      kvc_pool_destroy(f.p);
      return;
    }
    int64_t calls = 0, injected = 0;
    char entry[64];
    emulated_probe_fail(NULL, n);
    kvc_error* e = op->run(&f);
    emulated_probe_fail_counts(&calls, &injected, entry, sizeof entry);
    emulated_probe_fail(NULL, 0);
    int done = injected == 0;
    if (done) {
      if (!CHECK_OK(e)) fprintf(TU_LOG, "  %s: nothing failed\n", where);
      fi_pool_check_state(&f, where);
    } else if (!tu_report(e != NULL, __FILE__, __LINE__, "a pool operation whose backend call failed returns an error")) {
      fprintf(TU_LOG, "  %s: returned success\n", where);
    } else {
      fi_check_error(e, entry, where);
      kvc_error_destroy(e);
      fi_pool_check_state(&f, where);
    }
    kvc_pool_destroy(f.p);
    if (done) break;
  }
  CHECK(n <= FI_MAX_CALLS);
  printf("  pool: %s: %lld backend call(s), each failed once\n", op->name, (long long)(n - 1));
}

static void test_pool(void) {
  static const fi_pool_op ops[] = {
      {"write", pool_write, 0, 0, 0},
      {"gather", pool_gather, 0, 0, 0},
      {"block_table", pool_block_table, 0, 0, 0},
      {"fork", pool_fork, 0, 0, 0},
      {"copy-on-write", pool_copy_on_write, 0, 0, 1},
      {"checkpoint", pool_checkpoint, 1, 0, 0},
      {"restore", pool_restore, 1, 1, 0},
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) fi_pool_sweep(&ops[i]);
}

int main(void) {
  gt_open_or_skip("test_gpu_fail_inject");
  char why[600] = "";
  if (emulated_probe_open(why, sizeof why)) {
    printf("FAILED: %s\n", why);
    return 1;
  }
  TU_RUN(test_dynamic);
  TU_RUN(test_sliding);
  TU_RUN(test_static);
  TU_RUN(test_offloaded);
  TU_RUN(test_sink);
  TU_RUN(test_quantized);
  TU_RUN(test_pool);
  return tu_finish();
}
