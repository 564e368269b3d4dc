/*
 * tests/gpu/gpu_twin.h: a cache on the device and the same cache on the CPU
 * (a "twin"), driven with the same inputs and compared after every step.
 *
 * Every input is made once as random bytes and uploaded, so both caches get
 * exactly the same bytes with the same strides. Every call is made on both
 * caches; both must succeed, or both fail with the same error code. Every
 * returned view and, after each step, everything observable about both
 * caches (layer infos, lengths, masks, memory, every stored view and state)
 * must agree, views byte for byte (device views are read back through the
 * device runtime). The CPU backend is the reference.
 *
 * Static functions: include it from exactly one translation unit.
 */
#ifndef KVC_TESTS_GPU_TWIN_H
#define KVC_TESTS_GPU_TWIN_H

#include "gpu_test_util.h"

enum { TW_CPU = 0, TW_DEV = 1 };

typedef struct twin {
  kvc_cache* c[2];
  int device; /* device id of c[TW_DEV] */
} twin;

/* The stream device caches are bound to when they are made (NULL: the default stream). */
static void* tw_stream;

/* A test program's start: opens the runtime (or skips) and sets tw_stream to a new stream of device 0, which it
 * returns; without one the program fails. */
static void* tw_start_on_a_stream(const char* program) {
  gt_open_or_skip(program);
  tw_stream = drt_stream_create(0);
  if (!tw_stream) {
    printf("FAILED: cannot create a stream: %s\n", drt_error());
    exit(1);
  }
  return tw_stream;
}

/* --------------------------------------------------------------- results */

/* The CPU's error of the last call that failed on both caches alike. */
static char tw_last_message[600];

/* Both succeeded, or both failed with the same code. Destroys both errors; 1 when both succeeded. */
static int tw_same_impl(kvc_error* a, kvc_error* b, const char* file, int line, const char* what) {
  int ok = (!a && !b) || (a && b && kvc_error_code(a) == kvc_error_code(b));
  tu_report(ok, file, line, what);
  if (!ok)
    fprintf(TU_LOG, "  CPU: %s%s%s\n  device: %s%s%s\n", a ? kvc_code_name(kvc_error_code(a)) : "ok", a ? ": " : "",
            a ? kvc_error_message(a) : "", b ? kvc_code_name(kvc_error_code(b)) : "ok", b ? ": " : "",
            b ? kvc_error_message(b) : "");
  int both = !a && !b;
  if (a)
    snprintf(tw_last_message, sizeof tw_last_message, "%s: %s", kvc_code_name(kvc_error_code(a)),
             kvc_error_message(a));
  kvc_error_destroy(a);
  kvc_error_destroy(b);
  return both;
}
#define TW_SAME(a, b, what) tw_same_impl((a), (b), __FILE__, __LINE__, (what))

/* A twin step that must succeed on both caches (a TW_* function or macro returning whether both succeeded). */
#define TW_OK(step)                                                                              \
  do {                                                                                           \
    if (!tu_report((step) ? 1 : 0, __FILE__, __LINE__, #step " succeeds on both"))             \
      fprintf(TU_LOG, "  both failed alike: %s\n", tw_last_message);                            \
  } while (0)
/* A twin step that must fail on both caches, with the same error code. */
#define TW_REFUSED(step) tu_report((step) ? 0 : 1, __FILE__, __LINE__, #step " is refused on both")

/* ------------------------------------------------------------ comparing */

/*
 * Set while quantized layers are compared: a float element that is a NaN on both sides counts as equal whatever
 * its payload and sign, the one thing the device's quantizer arithmetic does not reproduce (which NaN an operation
 * returns: docs/design.md, 'Quantizing on devices'). Every other bit is still compared.
 */
static int tw_nan_equal;

/* 1 when the element of `elem` bytes at p (a float tensor of type code `code`) is a NaN. */
static int tw_is_nan(const unsigned char* p, uint8_t code, size_t elem) {
  uint32_t u = 0;
  if (elem == 4) {
    memcpy(&u, p, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
  }
  if (elem != 2) return 0;
  uint16_t h;
  memcpy(&h, p, 2);
  return code == KVC_TYPE_CODE_BFLOAT ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u;
}

/* Bytes [0, n) of x and y equal, or (tw_nan_equal) differing only inside elements that are NaN on both sides;
   returns the first byte that differs otherwise (n when none). */
static size_t tw_first_difference(const unsigned char* x, const unsigned char* y, size_t n, const kvc_tensor* t) {
  const size_t elem = gt_elem(t);
  const int floats = t->dtype.code == KVC_TYPE_CODE_FLOAT || t->dtype.code == KVC_TYPE_CODE_BFLOAT;
  for (size_t at = 0; at < n; at++) {
    if (x[at] == y[at]) continue;
    if (!tw_nan_equal || !floats || !elem) return at;
    const size_t e = at - at % elem;
    if (!tw_is_nan(x + e, t->dtype.code, elem) || !tw_is_nan(y + e, t->dtype.code, elem)) return at;
    at = e + elem - 1;
  }
  return n;
}

static int tw_same_tensor_impl(const kvc_tensor* a, const kvc_tensor* b, int device, const char* file, int line,
                               const char* what) {
  char label[200];
  snprintf(label, sizeof label, "%s: same ndim, dtype, shape, device and bytes on the CPU and the device", what);
  int ok = a->ndim == b->ndim && a->dtype.code == b->dtype.code && a->dtype.bits == b->dtype.bits &&
           a->dtype.lanes == b->dtype.lanes;
  for (int i = 0; ok && i < a->ndim; i++) ok = a->shape[i] == b->shape[i];
  if (!ok) {
    tu_report(0, file, line, label);
    fprintf(TU_LOG, "  ndim %d vs %d, dtype bits %d vs %d\n", (int)a->ndim, (int)b->ndim, (int)a->dtype.bits,
            (int)b->dtype.bits);
    for (int i = 0; i < a->ndim && i < b->ndim; i++)
      fprintf(TU_LOG, "  shape[%d] %lld vs %lld\n", i, (long long)a->shape[i], (long long)b->shape[i]);
    return 0;
  }
  if (a->ndim == 0) return tu_report(a->data == NULL && b->data == NULL, file, line, label);
  ok = a->device.device_type == KVC_DEVICE_CPU && gt_is_device_tensor(b) && b->device.device_id == device;
  if (!ok) {
    tu_report(0, file, line, label);
    fprintf(TU_LOG, "  devices {%d, %d} (CPU) and {%d, %d} (device %d of type %d expected)\n",
            (int)a->device.device_type, (int)a->device.device_id, (int)b->device.device_type,
            (int)b->device.device_id, device, (int)drt_device_type());
    return 0;
  }
  size_t na = 0, nb = 0;
  unsigned char* x = gt_read_tensor(a, &na);
  unsigned char* y = gt_read_tensor(b, &nb);
  size_t at = 0;
  ok = na == nb && (na == 0 || (x && y));
  if (ok) at = tw_first_difference(x, y, na, a);
  ok = ok && at == na;
  tu_report(ok, file, line, label);
  if (!ok) {
    size_t elem = gt_elem(a);
    fprintf(TU_LOG, "  %zu bytes on the CPU, %zu read from the device; first difference at element %zu\n", na, nb,
            elem ? at / elem : at);
  }
  free(x);
  free(y);
  return ok;
}
#define TW_SAME_TENSOR(a, b, device, what) tw_same_tensor_impl((a), (b), (device), __FILE__, __LINE__, (what))

static int tw_same_kv(const kvc_kv* a, const kvc_kv* b, int device, const char* what) {
  char k[160], v[160];
  snprintf(k, sizeof k, "%s: keys", what);
  snprintf(v, sizeof v, "%s: values", what);
  int ok = TW_SAME_TENSOR(&a->key, &b->key, device, k);
  return TW_SAME_TENSOR(&a->value, &b->value, device, v) && ok;
}

static int tw_is_linear_kind(kvc_layer_kind k) { return k >= KVC_LAYER_LINEAR && k <= KVC_LAYER_LINEAR_STATIC_SLIDING; }

#define TW_EQ(a, b, what)                                                                           \
  do {                                                                                              \
    if (!tu_report((a) == (b), __FILE__, __LINE__, what))                                          \
      fprintf(TU_LOG, "  CPU %lld, device %lld\n", (long long)(a), (long long)(b));                 \
  } while (0)

static void tw_check_all(const twin* t, const char* where);

/* Everything observable about the two caches agrees (the step's own error message is kept for TW_OK). */
static void tw_check(const twin* t, const char* where) {
  char saved[sizeof tw_last_message];
  memcpy(saved, tw_last_message, sizeof saved);
  tw_check_all(t, where);
  memcpy(tw_last_message, saved, sizeof saved);
}

static void tw_check_all(const twin* t, const char* where) {
  char what[200];
  const kvc_cache* c0 = t->c[TW_CPU];
  const kvc_cache* c1 = t->c[TW_DEV];
  uint32_t n = kvc_cache_num_layers(c0);
  snprintf(what, sizeof what, "%s: num_layers", where);
  TW_EQ(n, kvc_cache_num_layers(c1), what);
  if (n != kvc_cache_num_layers(c1)) return;

  kvc_memory_info m0, m1;
  memset(&m0, 0, sizeof m0);
  memset(&m1, 0, sizeof m1);
  m0.struct_size = m1.struct_size = sizeof m0;
  snprintf(what, sizeof what, "%s: memory", where);
  if (TW_SAME(kvc_cache_memory(c0, &m0), kvc_cache_memory(c1, &m1), what)) {
    TW_EQ(m0.bytes_reserved, m1.bytes_reserved, what);
    TW_EQ(m0.bytes_used, m1.bytes_used, what);
    TW_EQ(m0.bytes_device, m1.bytes_device, what);
    TW_EQ(m0.bytes_host, m1.bytes_host, what);
    TW_EQ(m0.bytes_quantized, m1.bytes_quantized, what);
    TW_EQ(m0.bytes_state, m1.bytes_state, what);
  }
  int64_t a = 0, b = 0, a2 = 0, b2 = 0;
  snprintf(what, sizeof what, "%s: batch_size", where);
  if (TW_SAME(kvc_cache_batch_size(c0, &a), kvc_cache_batch_size(c1, &b), what)) TW_EQ(a, b, what);
  snprintf(what, sizeof what, "%s: max_length(all)", where);
  if (TW_SAME(kvc_cache_max_length(c0, KVC_ALL_LAYERS, &a), kvc_cache_max_length(c1, KVC_ALL_LAYERS, &b), what))
    TW_EQ(a, b, what);

  for (uint32_t i = 0; i <= n; i++) {
    snprintf(what, sizeof what, "%s: layer %u seq_length", where, i);
    if (TW_SAME(kvc_cache_seq_length(c0, i, &a), kvc_cache_seq_length(c1, i, &b), what)) TW_EQ(a, b, what);
    snprintf(what, sizeof what, "%s: layer %u max_length", where, i);
    if (TW_SAME(kvc_cache_max_length(c0, (int32_t)i, &a), kvc_cache_max_length(c1, (int32_t)i, &b), what))
      TW_EQ(a, b, what);
    snprintf(what, sizeof what, "%s: layer %u usable_length(2)", where, i);
    if (TW_SAME(kvc_cache_usable_length(c0, 2, i, &a), kvc_cache_usable_length(c1, 2, i, &b), what)) TW_EQ(a, b, what);
    for (int64_t q = 1; q <= 5; q += 4) {
      snprintf(what, sizeof what, "%s: layer %u mask_sizes(%lld)", where, i, (long long)q);
      if (TW_SAME(kvc_cache_mask_sizes(c0, q, i, &a, &a2), kvc_cache_mask_sizes(c1, q, i, &b, &b2), what)) {
        TW_EQ(a, b, what);
        TW_EQ(a2, b2, what);
      }
    }
    if (i == n) break;
    kvc_layer_info i0, i1;
    memset(&i0, 0, sizeof i0);
    memset(&i1, 0, sizeof i1);
    i0.struct_size = i1.struct_size = sizeof i0;
    snprintf(what, sizeof what, "%s: layer %u info", where, i);
    if (!TW_SAME(kvc_cache_layer_info(c0, i, &i0), kvc_cache_layer_info(c1, i, &i1), what)) continue;
    if (!tu_report(tu_layer_info_equal(&i0, &i1, i), __FILE__, __LINE__, what)) continue;
    kvc_kv v0, v1;
    snprintf(what, sizeof what, "%s: layer %u view", where, i);
    if (TW_SAME(kvc_cache_layer_view(c0, i, &v0), kvc_cache_layer_view(c1, i, &v1), what))
      tw_same_kv(&v0, &v1, t->device, what);
    if (!tw_is_linear_kind(i0.kind)) continue;
    for (uint32_t s = 0; s < i0.num_states; s++) {
      kvc_tensor conv0, conv1, rec0, rec1;
      snprintf(what, sizeof what, "%s: layer %u state %u", where, i, s);
      if (TW_SAME(kvc_cache_state_view(c0, i, s, &conv0, &rec0), kvc_cache_state_view(c1, i, s, &conv1, &rec1),
                  what)) {
        snprintf(what, sizeof what, "%s: layer %u conv state %u", where, i, s);
        TW_SAME_TENSOR(&conv0, &conv1, t->device, what);
        snprintf(what, sizeof what, "%s: layer %u recurrent state %u", where, i, s);
        TW_SAME_TENSOR(&rec0, &rec1, t->device, what);
      }
      int h0 = -1, h1 = -2;
      snprintf(what, sizeof what, "%s: layer %u has_previous_state(%u)", where, i, s);
      if (TW_SAME(kvc_cache_has_previous_state(c0, (int32_t)i, (int32_t)s, &h0),
                  kvc_cache_has_previous_state(c1, (int32_t)i, (int32_t)s, &h1), what))
        TW_EQ(h0, h1, what);
    }
  }
}

/* ------------------------------------------------------------ lifecycle */

static void tw_bind(twin* t) {
  if (tw_stream && t->c[TW_DEV]) {
    if (!CHECK_OK(kvc_cache_set_stream(t->c[TW_DEV], tw_stream))) return;
    CHECK_EQ_PTR(kvc_cache_stream(t->c[TW_DEV]), tw_stream);
  }
}

/* Both caches from the same options, the device one on `device` and bound to tw_stream. 1 when both exist. */
static int tw_create(twin* t, const kvc_cache_options* options, int device) {
  kvc_cache_options o = *options;
  memset(t, 0, sizeof *t);
  t->device = device;
  o.device.device_type = KVC_DEVICE_CPU;
  o.device.device_id = 0;
  kvc_error* e0 = kvc_cache_create(&o, &t->c[TW_CPU]);
  o.device.device_type = drt_device_type();
  o.device.device_id = device;
  kvc_error* e1 = kvc_cache_create(&o, &t->c[TW_DEV]);
  if (!TW_SAME(e0, e1, "kvc_cache_create")) return 0;
  tw_bind(t);
  tw_check(t, "created");
  return 1;
}

static void tw_destroy(twin* t) {
  kvc_cache_destroy(t->c[TW_CPU]);
  kvc_cache_destroy(t->c[TW_DEV]);
  memset(t, 0, sizeof *t);
}

/*
 * The quantized kinds in one cache of three layers: quanto (2 bits, per-channel keys and per-token values) and
 * HQQ (3 bits, per-token keys and per-channel values) layers in `mode`, groups of 4 (transformers' grouping stays
 * valid for any length), `residual` tokens kept unquantized, and an FP8 layer. q and layers receive them.
 */
static void tw_quantized_layers(kvc_quant_mode mode, int64_t residual, kvc_quant_options q[2],
                                kvc_layer_options layers[3]) {
  for (int i = 0; i < 2; i++) {
    kvc_quant_options_init(&q[i]);
    q[i].mode = mode;
    q[i].quantizer = i ? KVC_QUANTIZER_HQQ : KVC_QUANTIZER_QUANTO;
    q[i].nbits = i ? 3 : 2;
    q[i].axis_key = i ? 1 : 0;    /* per-token groups */
    q[i].axis_value = i ? 0 : -1; /* per-channel groups */
    q[i].q_group_size = 4;
    q[i].residual_length = residual;
    kvc_layer_options_init(&layers[i]);
    layers[i].kind = KVC_LAYER_QUANTIZED;
    layers[i].quant = &q[i];
  }
  kvc_layer_options_init(&layers[2]);
  layers[2].kind = KVC_LAYER_QUANTIZED_FP8;
}

/* ---------------------------------------------------------------- inputs */

/* Memory layouts of an input tensor. */
#define TW_COMPACT 0   /* row-major, strides NULL */
#define TW_STRIDED 1   /* dims 1 and 2 swapped in memory ([B, S, H, D] for K/V), explicit strides */
#define TW_BROADCAST 2 /* dim 0 broadcast: stride 0 (one batch row in memory) */
#define TW_OFFSET 3    /* compact with a byte_offset */
#define TW_PADDED 4    /* every innermost row padded by 3 elements */
#define TW_REVERSED 5  /* dim 2 (seq, time) read backwards: a negative stride, data at its far end */
#define TW_LAYOUTS 6

/* One input: the same random bytes on the host (t[TW_CPU]) and on the device (t[TW_DEV]). */
typedef struct tw_input {
  kvc_tensor t[2];
  int64_t shape[6];
  int64_t strides[6];
  void* host;
  void* dev;
  int device;
} tw_input;

static int tw_input_make(tw_input* x, kvc_dtype dt, int ndim, const int64_t* shape, int layout, int device) {
  memset(x, 0, sizeof *x);
  x->device = device;
  size_t elem = kvc_dtype_size(dt);
  memcpy(x->shape, shape, sizeof(int64_t) * (size_t)ndim);
  int64_t run = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    x->strides[i] = run;
    run *= shape[i] > 0 ? shape[i] : 1;
    if (layout == TW_PADDED && i == ndim - 1) run += 3;
  }
  if (layout == TW_STRIDED && ndim >= 3) { /* swap dims 1 and 2 in memory */
    int64_t d1 = shape[1] > 0 ? shape[1] : 1, inner = x->strides[2];
    x->strides[1] = inner;
    x->strides[2] = inner * d1;
  }
  if (layout == TW_BROADCAST) x->strides[0] = 0;
  int64_t last = 0;
  for (int i = 0; i < ndim; i++) last += ((shape[i] > 0 ? shape[i] : 1) - 1) * x->strides[i];
  int64_t offset = layout == TW_OFFSET ? 5 : 0;
  size_t bytes = (size_t)(last + 1 + offset) * elem;
  if (layout == TW_REVERSED && ndim >= 3) {
    offset = ((shape[2] > 0 ? shape[2] : 1) - 1) * x->strides[2]; /* element [.., 0, ..] is the last in memory */
    x->strides[2] = -x->strides[2];
  }
  x->host = malloc(bytes);
  x->dev = drt_alloc(device, bytes);
  if (!CHECK(x->host != NULL) || !CHECK(x->dev != NULL)) return 0;
  gt_fill_random(x->host, bytes);
  if (!CHECK(drt_upload(device, x->dev, x->host, bytes, tw_stream) == 0)) return 0;
  for (int side = 0; side < 2; side++) {
    kvc_tensor* t = &x->t[side];
    t->data = side == TW_CPU ? x->host : x->dev;
    t->device.device_type = side == TW_CPU ? KVC_DEVICE_CPU : drt_device_type();
    t->device.device_id = side == TW_CPU ? 0 : device;
    t->ndim = ndim;
    t->dtype = kvc_dtype_to_data_type(dt);
    t->shape = x->shape;
    t->strides = layout == TW_COMPACT || layout == TW_OFFSET || (layout == TW_REVERSED && ndim < 3) ? NULL : x->strides;
    t->byte_offset = (uint64_t)offset * elem;
  }
  return 1;
}

static void tw_input_free(tw_input* x) {
  free(x->host);
  drt_free(x->device, x->dev);
  memset(x, 0, sizeof *x);
}

/* The geometry of one layer's update. */
typedef struct tw_geom {
  int64_t b, h, n, dk, dv;
  kvc_dtype dt;
  int layout;
} tw_geom;

static int tw_kv_make(tw_input* k, tw_input* v, const tw_geom* g, int device) {
  int64_t ks[4] = {g->b, g->h, g->n, g->dk}, vs[4] = {g->b, g->h, g->n, g->dv};
  return tw_input_make(k, g->dt, 4, ks, g->layout, device) &
         tw_input_make(v, g->dt, 4, vs, (g->layout + 1) % TW_LAYOUTS, device);
}

/* ----------------------------------------------------------------- updates */

/* Options are given per side (o_cpu, o_dev): options that hold tensors (RoPE cos/sin) hold each side's own. */
static int tw_update_impl(twin* t, uint32_t layer, const tw_geom* g, const kvc_update_options* o_cpu,
                          const kvc_update_options* o_dev, const char* file, int line) {
  char what[160];
  snprintf(what, sizeof what, "update(layer %u, %lld new tokens)", layer, (long long)g->n);
  tw_input k, v;
  int both = 0;
  if (tw_kv_make(&k, &v, g, t->device)) {
    kvc_kv out0, out1;
    both = tw_same_impl(kvc_cache_update(t->c[TW_CPU], layer, &k.t[TW_CPU], &v.t[TW_CPU], o_cpu, &out0),
                        kvc_cache_update(t->c[TW_DEV], layer, &k.t[TW_DEV], &v.t[TW_DEV], o_dev, &out1), file, line,
                        what);
    if (both) tw_same_kv(&out0, &out1, t->device, what);
  }
  tw_input_free(&k);
  tw_input_free(&v);
  tw_check(t, what);
  return both;
}
#define TW_UPDATE(t, layer, g, o) tw_update_impl((t), (layer), (g), (o), (o), __FILE__, __LINE__)
/* `o` is an array of two options, [TW_CPU] and [TW_DEV] (each with its side's tensors). */
#define TW_UPDATE_SIDES(t, layer, g, o) \
  tw_update_impl((t), (layer), (g), &(o)[TW_CPU], &(o)[TW_DEV], __FILE__, __LINE__)

/* update_all over layers 0..count-1, layer i with geometry g[i] (g[0] for all when `same`). */
static int tw_update_all_impl(twin* t, uint32_t count, const tw_geom* g, int same, const kvc_update_options* o_cpu,
                              const kvc_update_options* o_dev, const char* file, int line) {
  char what[160];
  snprintf(what, sizeof what, "update_all(%u layers, %lld new tokens)", count, (long long)g[0].n);
  tw_input* k = (tw_input*)calloc(count, sizeof(tw_input));
  tw_input* v = (tw_input*)calloc(count, sizeof(tw_input));
  kvc_tensor* kt[2];
  kvc_tensor* vt[2];
  kvc_kv* out[2];
  for (int s = 0; s < 2; s++) {
    kt[s] = (kvc_tensor*)calloc(count, sizeof(kvc_tensor));
    vt[s] = (kvc_tensor*)calloc(count, sizeof(kvc_tensor));
    out[s] = (kvc_kv*)calloc(count, sizeof(kvc_kv));
  }
  int ok = k && v && kt[0] && kt[1] && vt[0] && vt[1] && out[0] && out[1];
  for (uint32_t i = 0; ok && i < count; i++) {
    tw_geom gi = same ? g[0] : g[i];
    gi.layout = (gi.layout + (int)i) % TW_LAYOUTS; /* a mix of layouts in one call */
    ok = tw_kv_make(&k[i], &v[i], &gi, t->device);
    for (int s = 0; s < 2; s++) {
      kt[s][i] = k[i].t[s];
      vt[s][i] = v[i].t[s];
    }
  }
  int both = 0;
  if (CHECK(ok)) {
    both = tw_same_impl(kvc_cache_update_all(t->c[TW_CPU], count, kt[TW_CPU], vt[TW_CPU], o_cpu, out[TW_CPU]),
                        kvc_cache_update_all(t->c[TW_DEV], count, kt[TW_DEV], vt[TW_DEV], o_dev, out[TW_DEV]), file,
                        line, what);
    for (uint32_t i = 0; both && i < count; i++) {
      char w[200];
      snprintf(w, sizeof w, "%s, layer %u", what, i);
      tw_same_kv(&out[TW_CPU][i], &out[TW_DEV][i], t->device, w);
    }
  }
  for (uint32_t i = 0; k && v && i < count; i++) {
    tw_input_free(&k[i]);
    tw_input_free(&v[i]);
  }
  for (int s = 0; s < 2; s++) {
    free(kt[s]);
    free(vt[s]);
    free(out[s]);
  }
  free(k);
  free(v);
  tw_check(t, what);
  return both;
}
#define TW_UPDATE_ALL(t, count, g) tw_update_all_impl((t), (count), (g), 1, NULL, NULL, __FILE__, __LINE__)
#define TW_UPDATE_ALL_EACH(t, count, g) tw_update_all_impl((t), (count), (g), 0, NULL, NULL, __FILE__, __LINE__)
/* update_all with per-side options, `o` as in TW_UPDATE_SIDES. */
#define TW_UPDATE_ALL_SIDES(t, count, g, o) \
  tw_update_all_impl((t), (count), (g), 1, &(o)[TW_CPU], &(o)[TW_DEV], __FILE__, __LINE__)

/* Layer `dst` updated with the stored view of layer `src` of the same cache (inputs that alias the cache). */
static void tw_update_from_view(twin* t, uint32_t dst, uint32_t src) {
  kvc_kv v0, v1;
  char what[120];
  snprintf(what, sizeof what, "update(layer %u) with layer %u's own view", dst, src);
  if (!TW_SAME(kvc_cache_layer_view(t->c[TW_CPU], src, &v0), kvc_cache_layer_view(t->c[TW_DEV], src, &v1), what))
    return;
  kvc_kv out0, out1;
  if (TW_SAME(kvc_cache_update(t->c[TW_CPU], dst, &v0.key, &v0.value, NULL, &out0),
              kvc_cache_update(t->c[TW_DEV], dst, &v1.key, &v1.value, NULL, &out1), what))
    tw_same_kv(&out0, &out1, t->device, what);
  tw_check(t, what);
}

/* ------------------------------------------------------------- operations */

/* Whether both caches succeeded in the last TW_OP. */
static int tw_last_ok;

/* `call` (written with `c` for the cache) on both caches: same outcome, then everything compared. */
#define TW_OP(t, call, what)                         \
  do {                                               \
    kvc_error* tw_e_[2];                             \
    for (int tw_s_ = 0; tw_s_ < 2; tw_s_++) {        \
      kvc_cache* c = (t)->c[tw_s_];                  \
      tw_e_[tw_s_] = (call);                         \
    }                                                \
    tw_last_ok = TW_SAME(tw_e_[0], tw_e_[1], what);  \
    tw_check((t), what);                             \
  } while (0)

static int tw_crop(twin* t, int64_t tokens) {
  char what[64];
  snprintf(what, sizeof what, "crop(%lld)", (long long)tokens);
  TW_OP(t, kvc_cache_crop(c, tokens), what);
  return tw_last_ok;
}

/* Defines `static int fn params`, the one-call operations below: `call` on
 * both caches (TW_OP), and whether both succeeded. */
#define TW_OP_FN(fn, params, call, what) \
  static int fn params {                 \
    TW_OP(t, call, what);                \
    return tw_last_ok;                   \
  }

TW_OP_FN(tw_reorder, (twin* t, const int64_t* idx, size_t n), kvc_cache_reorder(c, idx, n), "reorder")
TW_OP_FN(tw_select, (twin* t, const int64_t* idx, size_t n), kvc_cache_batch_select_indices(c, idx, n),
         "batch_select_indices")
TW_OP_FN(tw_repeat, (twin* t, int64_t r), kvc_cache_batch_repeat_interleave(c, r), "batch_repeat_interleave")
TW_OP_FN(tw_reserve, (twin* t, int64_t tokens), kvc_cache_reserve(c, tokens), "reserve")
TW_OP_FN(tw_reset, (twin* t), kvc_cache_reset(c), "reset")
TW_OP_FN(tw_record_past, (twin* t), kvc_cache_activate_past_recording(c), "activate_past_recording")
TW_OP_FN(tw_offload, (twin* t, uint32_t layer), kvc_cache_offload(c, layer), "offload")
TW_OP_FN(tw_prefetch, (twin* t, uint32_t layer), kvc_cache_prefetch(c, layer), "prefetch")
TW_OP_FN(tw_early_init, (twin* t, const kvc_init_options* o), kvc_cache_early_initialization(c, o),
         "early_initialization")

/* A deep copy of both; the clones must agree and inherit the device cache's stream. */
static int tw_clone(const twin* t, twin* out) {
  memset(out, 0, sizeof *out);
  out->device = t->device;
  if (!TW_SAME(kvc_cache_clone(t->c[TW_CPU], &out->c[TW_CPU]), kvc_cache_clone(t->c[TW_DEV], &out->c[TW_DEV]),
               "clone"))
    return 0;
  CHECK_EQ_PTR(kvc_cache_stream(out->c[TW_DEV]), kvc_cache_stream(t->c[TW_DEV]));
  tw_check(out, "clone");
  return 1;
}

/* batch_split of both into twins out[0..*count). */
static int tw_split(const twin* t, int64_t full, int64_t size, twin* out, size_t cap, size_t* count) {
  kvc_cache* s0[16];
  kvc_cache* s1[16];
  size_t n0 = 0, n1 = 0;
  if (cap > 16) cap = 16;
  *count = 0;
  if (!TW_SAME(kvc_cache_batch_split(t->c[TW_CPU], full, size, s0, cap, &n0),
               kvc_cache_batch_split(t->c[TW_DEV], full, size, s1, cap, &n1), "batch_split"))
    return 0;
  CHECK_EQ_I64(n0, n1);
  for (size_t i = 0; i < n0 && i < n1; i++) {
    out[i].c[TW_CPU] = s0[i];
    out[i].c[TW_DEV] = s1[i];
    out[i].device = t->device;
    tw_check(&out[i], "a batch split");
  }
  *count = n0 < n1 ? n0 : n1;
  for (size_t i = *count; i < n0; i++) kvc_cache_destroy(s0[i]);
  for (size_t i = *count; i < n1; i++) kvc_cache_destroy(s1[i]);
  return 1;
}

/* from_batch_splits of both. */
static int tw_stack(const twin* splits, size_t n, twin* out) {
  const kvc_cache* s0[16];
  const kvc_cache* s1[16];
  for (size_t i = 0; i < n && i < 16; i++) {
    s0[i] = splits[i].c[TW_CPU];
    s1[i] = splits[i].c[TW_DEV];
  }
  memset(out, 0, sizeof *out);
  out->device = splits[0].device;
  if (!TW_SAME(kvc_cache_from_batch_splits(s0, n, &out->c[TW_CPU]),
               kvc_cache_from_batch_splits(s1, n, &out->c[TW_DEV]), "from_batch_splits"))
    return 0;
  tw_check(out, "stacked");
  return 1;
}

/* Split into batches of `size` and stack them again: the result equals the original (checked on both sides). */
static void tw_split_and_stack(twin* t, int64_t batch, int64_t size) {
  twin parts[16], whole;
  size_t n = 0;
  if (!tw_split(t, batch, size, parts, 16, &n)) return;
  if (n && tw_stack(parts, n, &whole)) tw_destroy(&whole);
  for (size_t i = 0; i < n; i++) tw_destroy(&parts[i]);
}

/* ------------------------------------------------------ recurrent states */

/* update_conv_state with x [b, channels, n]; the returned views are compared. */
static int tw_conv_impl(twin* t, uint32_t layer, int64_t b, int64_t ch, int64_t n, kvc_dtype dt, int layout,
                        const kvc_conv_update_options* o, const char* file, int line) {
  char what[120];
  snprintf(what, sizeof what, "update_conv_state(layer %u, %lld columns)", layer, (long long)n);
  int64_t shape[3] = {b, ch, n};
  tw_input x;
  int both = 0;
  if (tw_input_make(&x, dt, 3, shape, layout, t->device)) {
    kvc_tensor o0, o1;
    both = tw_same_impl(kvc_cache_update_conv_state(t->c[TW_CPU], layer, &x.t[TW_CPU], o, &o0),
                        kvc_cache_update_conv_state(t->c[TW_DEV], layer, &x.t[TW_DEV], o, &o1), file, line, what);
    if (both) tw_same_tensor_impl(&o0, &o1, t->device, file, line, what);
  }
  tw_input_free(&x);
  tw_check(t, what);
  return both;
}
#define TW_CONV(t, layer, b, ch, n, dt, layout, o) \
  tw_conv_impl((t), (layer), (b), (ch), (n), (dt), (layout), (o), __FILE__, __LINE__)

/* update_recurrent_state with a state of `ndim` dims (batch first). */
static int tw_recurrent_impl(twin* t, uint32_t layer, uint32_t index, int ndim, const int64_t* shape, kvc_dtype dt,
                             int layout, const char* file, int line) {
  char what[120];
  snprintf(what, sizeof what, "update_recurrent_state(layer %u, state %u, %d dims)", layer, index, ndim);
  tw_input x;
  int both = 0;
  if (tw_input_make(&x, dt, ndim, shape, layout, t->device)) {
    kvc_tensor o0, o1;
    both = tw_same_impl(kvc_cache_update_recurrent_state(t->c[TW_CPU], layer, index, &x.t[TW_CPU], &o0),
                        kvc_cache_update_recurrent_state(t->c[TW_DEV], layer, index, &x.t[TW_DEV], &o1), file, line,
                        what);
    if (both) tw_same_tensor_impl(&o0, &o1, t->device, file, line, what);
  }
  tw_input_free(&x);
  tw_check(t, what);
  return both;
}
#define TW_RECURRENT(t, layer, index, ndim, shape, dt, layout) \
  tw_recurrent_impl((t), (layer), (index), (ndim), (shape), (dt), (layout), __FILE__, __LINE__)

#endif /* KVC_TESTS_GPU_TWIN_H */
