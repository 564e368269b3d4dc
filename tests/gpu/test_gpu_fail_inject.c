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
 */
#include "emulated_probe.h"
/* gpu_twin.h's helpers are static; the sweep uses some of them. */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include "gpu_twin.h"

#define FI_MAX_CALLS 400 /* a guard: no operation here makes this many backend calls */

/* The inputs one attempt of an operation takes (the same bytes on both sides), made before the failure is armed. */
typedef struct fi_inputs {
  tw_input k[4], v[4];
  uint32_t layers;
} fi_inputs;

typedef struct fi_case {
  const char* name;
  kvc_cache_options options;
  uint32_t layers;
  tw_geom prefill, step; /* the setup's update_all, then `steps` decode steps */
  int steps;
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
  return kvc_cache_update(t->c[side], 0, &x->k[0].t[side], &x->v[0].t[side], NULL, &out);
}

static kvc_error* op_update_all(twin* t, int side, fi_inputs* x, kvc_cache** made) {
  (void)made;
  kvc_tensor k[4], v[4];
  kvc_kv out[4];
  for (uint32_t i = 0; i < x->layers; i++) {
    k[i] = x->k[i].t[side];
    v[i] = x->v[i].t[side];
  }
  return kvc_cache_update_all(t->c[side], x->layers, k, v, NULL, out);
}

static const fi_op update_ops[] = {
    {"update", op_update, 1},
    {"update_all", op_update_all, 1},
};

/* ------------------------------------------------------------ the sweep */

static int fi_setup(twin* t, const fi_case* c) {
  if (!tw_create(t, &c->options, 0)) return 0;
  if (!TW_UPDATE_ALL(t, c->layers, &c->prefill)) return 0;
  for (int i = 0; i < c->steps; i++)
    if (!TW_UPDATE_ALL(t, c->layers, &c->step)) return 0;
  return 1;
}

static int fi_inputs_make(fi_inputs* x, const fi_case* c) {
  memset(x, 0, sizeof *x);
  x->layers = c->layers;
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
}

/* The failed call's error says what failed: the backend entry, and the vendor's words or OUT_OF_MEMORY. */
static void fi_check_error(kvc_error* e, const char* where) {
  const char* m = kvc_error_message(e);
  int says = kvc_error_code(e) == KVC_ERROR_OUT_OF_MEMORY || strstr(m, "no kernel image is available");
  if (!tu_report(says, __FILE__, __LINE__, "the error carries the backend's message (or is OUT_OF_MEMORY)"))
    fprintf(TU_LOG, "  %s: %s: %s\n", where, kvc_code_name(kvc_error_code(e)), m);
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
  snprintf(what, sizeof what, "%s, then reset", where);
  TW_OK(tw_reset(t));
  tw_check(t, what);
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
      fi_inputs_free(&x);
      tw_destroy(&t);
      return;
    }
    kvc_cache* made[2] = {NULL, NULL};
    int64_t calls = 0, injected = 0;
    emulated_probe_fail(NULL, n);
    kvc_error* e = op->run(&t, TW_DEV, &x, &made[TW_DEV]);
    emulated_probe_fail_counts(&calls, &injected);
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
      fi_check_error(e, where);
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

static void test_dynamic(void) {
  kvc_model_config cfg = tu_config(2, NULL, 0, 0);
  fi_case c = preset_case("dynamic", KVC_PRESET_DYNAMIC, &cfg, 2);
  fi_sweep_ops(&c, update_ops, sizeof update_ops / sizeof update_ops[0]);
}

int main(void) {
  gt_open_or_skip("test_gpu_fail_inject");
  char why[600] = "";
  if (emulated_probe_open(why, sizeof why)) {
    printf("FAILED: %s\n", why);
    return 1;
  }
  TU_RUN(test_dynamic);
  return tu_finish();
}
