/*
 * core/kinds/layer_sink.c: SinkCache (docs/semantics.md, 'Sink layers'; transformers 4.36-4.52) as a layer
 * kind: the first num_sink_tokens tokens plus the most recent ones,
 * window_length in all, with kept keys re-rotated when they move.
 *
 * The rules are transformers 4.52's, including its quirks: a first update is
 * stored whole even when longer than the window; later updates append while
 * stored + new < window, and otherwise keep the sinks, the tokens Python's
 * slice [-(window - sinks - new):] selects, and the new tokens. With RoPE the
 * kept keys are rotated back by the angle of `new` positions, even at the
 * first shift, where they move fewer slots (or none).
 *
 * Storage: the stored region [start, end) is sinks then recent tokens. A
 * shift copies the sinks to just before the kept tokens and advances
 * `start`, instead of moving the kept tokens towards the sinks: O(sinks + new)
 * per step, plus a compaction of the region once per store length (amortized
 * O(1) per token, as sliding layers). Re-rotated keys are rewritten in place;
 * transformers re-rotates every kept key at every shift, so that part is
 * O(window) by definition.
 *
 * Cache-wide state (struct kvc_sink_state, on the cache as in transformers):
 * the cos/sin table recorded from the first sink layer's updates, and the
 * re-rotation tables, computed at the first shift of each size and never
 * recomputed, even if the table changes afterwards (transformers' dict keyed
 * by the number of new tokens).
 *
 * Memory: the keys and the caller's cos/sin tensors live on the cache's
 * device, so they are reached only through the backend table (the keys are
 * rotated by rerotate_keys_4d, the table rows are read by read_f32_4d); the
 * tables above are host memory, computed here once per shift size.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/base/base_kinds.h"
#include "persist/record.h"
#include "rope_tables.h"

/* transformers' cos_sin_rerotation_cache[n], keyed here by the window and sinks too (custom caches may mix them). */
typedef struct sink_rotation {
  int64_t shift, num_sink, window; /* the key: new tokens, sinks, window */
  int computed;
  int64_t rows, dim; /* when computed: window - sinks - shift rows of the rotary size */
  float* raw;        /* [2][rows][dim]: cos then sin, float32, before the cast to the key dtype */
  int64_t raw_cap;
  float* cast[2];    /* raw rounded to float16 [0] and bfloat16 [1], made on first use */
  int64_t cast_cap[2];
  int cast_done[2];
} sink_rotation;

typedef struct kvc_sink_state {
  uint32_t record_layer; /* the first sink layer: its updates record the table (transformers: layer 0) */
  int64_t max_window;    /* the table grows while shorter than this (the largest sink window) */
  /* transformers' _cos_cache/_sin_cache: `len` rows of `dim`; rows past max_window are never read, not kept. */
  int has_table;
  int64_t len, dim;
  float* cos;
  float* sin;
  int64_t cos_cap, sin_cap;
  sink_rotation* rot;
  int nrot, rot_cap;
  /* The rows an update's record layer adds to the table, read from the device in prepare_update (where a failed
     read can still fail the call) and copied into cos/sin by apply_update: [2][rows][dim], cos then sin. */
  float* staged;
  int64_t staged_cap;
} kvc_sink_state;

/* The cache-wide state lives in the sink kind's slot of the cache (transformers keeps it on the cache). */
#define SINK_STATE(c) ((kvc_sink_state*)(c)->kind_state[KVC_LAYER_SINK])

/* The kind's own parameters (kvc_layer.params). */
typedef struct sink_params {
  int64_t num_sink; /* num_sink_tokens */
} sink_params;
KVC_PARAMS_FIT(sink_params);
#define NUM_SINK(l) (kvci_layer_params(const sink_params, l)->num_sink)


/* ------------------------------------------------------------ small rules */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Grows a float buffer to hold `need` values, keeping its contents; -1 when out of memory. */
static int reserve_floats(float** p, int64_t* cap, int64_t need) {
  if (need <= *cap) return 0;
  float* q = (float*)realloc(*p, (size_t)need * sizeof(float));
  if (!q) return -1;
  *p = q;
  *cap = need;
  return 0;
}

/* The kind of layer `i`, including layers a lazy cache would create. */
static kvc_layer_kind kind_at(const kvc_cache* c, uint32_t i) {
  if (i < c->num_layers) return c->layers[i]->kind;
  return c->lazy ? c->lazy_spec.kind : 0;
}

static uint32_t first_sink_layer(const kvc_cache* c) {
  uint32_t i = 0;
  while (i < c->num_layers && c->layers[i]->kind != KVC_LAYER_SINK) i++;
  return i; /* == num_layers: the next layer a lazy sink cache creates */
}

static int64_t largest_window(const kvc_cache* c) {
  int64_t w = c->lazy && c->lazy_spec.kind == KVC_LAYER_SINK ? c->lazy_spec.window : 0;
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (c->layers[i]->kind == KVC_LAYER_SINK && c->layers[i]->window > w) w = c->layers[i]->window;
  return w;
}

static int is_record_layer(const kvc_cache* c, const kvc_layer* l) {
  return SINK_STATE(c)->record_layer < c->num_layers && c->layers[SINK_STATE(c)->record_layer] == l;
}

static int64_t rotary_size(const kvc_update_options* o, int64_t head_dim) {
  return o->partial_rotation_size ? o->partial_rotation_size : head_dim;
}

/* A shift: stored + new reaches the window (a layer holding nothing stores the first update whole). */
static int shifts(int64_t stored, int64_t n, int64_t window) { return stored > 0 && n + stored >= window; }

/*
 * The stored tokens a shift keeps: the first `sinks`, and those from `begin`
 * on (transformers' slices [:S] and [-(window - S - n):]). With
 * window - S - n >= 1 that is the last window - S - n tokens; at 0 Python's
 * [-0:] keeps all of them, and below 0 the slice start turns positive.
 */
typedef struct sink_plan {
  int64_t sinks, begin;
} sink_plan;

static sink_plan plan_shift(int64_t stored, int64_t n, int64_t window, int64_t num_sink) {
  int64_t keep = window - num_sink - n;
  sink_plan p;
  p.sinks = min64(num_sink, stored);
  p.begin = keep > 0 ? stored - keep : keep == 0 ? 0 : min64(stored, -keep);
  return p;
}

/* Length of what an update of n tokens returns (and stores). */
static int64_t length_after(const kvc_layer* l, int64_t n) {
  int64_t len = kvci_layer_stored(l);
  if (!shifts(len, n, l->window)) return len + n;
  sink_plan p = plan_shift(len, n, l->window, NUM_SINK(l));
  return p.sinks + (len - p.begin) + n;
}

/* ------------------------------------------------------ the cos/sin table */

typedef struct table_shape {
  int has;
  int64_t len, dim;
} table_shape;

enum { TABLE_REPLACE, TABLE_APPEND, TABLE_KEEP };

/*
 * How an update with `cos` changes the table (docs/semantics.md, 'Sink layers' (the cos/sin table)): a 2-D cos is
 * the whole table; a 3-D one's batch row 0 starts the table or is appended to
 * it while it is shorter than the window.
 */
static table_shape after_record(table_shape t, const kvc_tensor* cos, int64_t max_window, int* mode) {
  int64_t seq = cos->shape[cos->ndim - 2], dim = cos->shape[cos->ndim - 1];
  if (cos->ndim == 2 || !t.has) {
    *mode = TABLE_REPLACE;
    t.has = 1;
    t.len = seq;
    t.dim = dim;
  } else if (t.len < max_window) {
    *mode = TABLE_APPEND;
    t.len += seq;
  } else {
    *mode = TABLE_KEEP;
  }
  return t;
}

static table_shape shape_of(const kvc_sink_state* s) {
  table_shape t = {s->has_table, s->len, s->dim};
  return t;
}

/* How an update that passes `cos` changes the table: its shape after, and the rows [from, from + rows) it writes. */
typedef struct table_write {
  table_shape next;
  int mode;
  int64_t from, rows;
} table_write;

static table_write plan_record(const kvc_sink_state* s, const kvc_tensor* cos) {
  table_write w;
  w.next = after_record(shape_of(s), cos, s->max_window, &w.mode);
  w.from = w.mode == TABLE_REPLACE ? 0 : s->len;
  /* Rows past the largest window are never read, so never kept. */
  w.rows = w.mode == TABLE_KEEP ? 0 : min64(w.next.len, s->max_window) - w.from;
  if (w.rows < 0) w.rows = 0;
  return w;
}

/*
 * Reads rows [0, rows) of a rope tensor ([seq, dim], or batch row 0 of
 * [batch, seq, dim]) from the cache's device into out, as float32, through
 * the backend: on a device the tensor's data is a device pointer.
 */
static int read_rope_rows(const kvc_cache* c, const kvc_tensor* t, int64_t rows, float* out) {
  int nd = t->ndim;
  int64_t st[3], size = 1;
  for (int i = nd - 1; i >= 0; i--) {
    st[i] = t->strides ? t->strides[i] : size;
    size *= t->shape[i];
  }
  const int64_t strides[4] = {0, 0, st[nd - 2], st[nd - 1]}, shape[4] = {1, 1, rows, t->shape[nd - 1]};
  const kvc_backend* be = c->backend;
  return be->read_f32_4d(be->ctx, &c->exec, out, kvci_tensor_base(t), kvc_dtype_from_data_type(t->dtype), strides,
                         shape);
}

/* prepare_update of the record layer: the rows this update adds to the table, read into s->staged. */
static kvc_error* stage_table(const char* fn, const kvc_cache* c, kvc_sink_state* s, const kvc_update_options* o) {
  table_write w = plan_record(s, o->rope_cos);
  if (w.rows == 0) return NULL;
  int64_t values = w.rows * w.next.dim;
  if (reserve_floats(&s->staged, &s->staged_cap, 2 * values)) return kvci_err_oom();
  int rc = read_rope_rows(c, o->rope_cos, w.rows, s->staged);
  if (!rc) rc = read_rope_rows(c, o->rope_sin, w.rows, s->staged + values);
  if (rc)
    return kvci_fault_error(fn, c->backend, "read_f32_4d", rc,
                            "options->rope_cos/rope_sin (the sink layers' cos/sin table) were not read; the cache "
                            "is unchanged");
  return NULL;
}

/* apply_update of the record layer: the table takes the rows stage_table read (transformers' _cos_cache/_sin_cache). */
static void record_table(kvc_sink_state* s, const kvc_update_options* o) {
  table_write w = plan_record(s, o->rope_cos);
  if (w.mode == TABLE_KEEP) return;
  s->has_table = 1;
  s->len = w.next.len;
  s->dim = w.next.dim;
  int64_t values = w.rows * w.next.dim;
  if (values == 0) return;
  memcpy(s->cos + w.from * w.next.dim, s->staged, (size_t)values * sizeof(float));
  memcpy(s->sin + w.from * w.next.dim, s->staged + values, (size_t)values * sizeof(float));
}

/* ---------------------------------------------- re-rotation tables */

static sink_rotation* find_rotation(const kvc_sink_state* s, int64_t n, int64_t num_sink, int64_t window) {
  for (int i = 0; i < s->nrot; i++)
    if (s->rot[i].shift == n && s->rot[i].num_sink == num_sink && s->rot[i].window == window) return &s->rot[i];
  return NULL;
}

static sink_rotation* add_rotation(kvc_sink_state* s, int64_t n, int64_t num_sink, int64_t window) {
  if (s->nrot == s->rot_cap) {
    int cap = s->rot_cap ? 2 * s->rot_cap : 4;
    sink_rotation* p = (sink_rotation*)realloc(s->rot, sizeof(*p) * (size_t)cap);
    if (!p) return NULL;
    s->rot = p;
    s->rot_cap = cap;
  }
  sink_rotation* r = &s->rot[s->nrot++];
  memset(r, 0, sizeof *r);
  r->shift = n;
  r->num_sink = num_sink;
  r->window = window;
  return r;
}

static int cast_index(kvc_dtype dtype) { return dtype == KVC_DTYPE_BFLOAT16; }

/* Re-rotates the `rows` kept keys starting at physical slot `first` for a shift by n. */
static void rerotate_kept(const kvc_cache* c, kvc_layer* l, const kvc_update_options* o, int64_t n, int64_t first,
                          int64_t rows) {
  kvc_sink_state* s = SINK_STATE(c);
  sink_rotation* r = find_rotation(s, n, NUM_SINK(l), l->window); /* made by prepare_update */
  int64_t dim = rotary_size(o, l->k_dim);
  if (!r->computed) {
    /* From the table as it is now, once: later table changes do not reach it (transformers' dict). */
    kvci_rerotation_tables(s->cos, s->sin, dim, NUM_SINK(l), n, rows, r->raw, r->raw + rows * dim);
    r->rows = rows;
    r->dim = dim;
    r->computed = 1;
    r->cast_done[0] = r->cast_done[1] = 0;
  }
  const float* tab = r->raw;
  if (l->dtype != KVC_DTYPE_FLOAT32) {
    int w = cast_index(l->dtype);
    if (!r->cast_done[w]) {
      kvci_round_to_dtype(l->dtype, r->raw, 2 * rows * dim, r->cast[w]);
      r->cast_done[w] = 1;
    }
    tab = r->cast[w];
  }
  int64_t strides[4], shape[4] = {l->batch, l->heads, rows, dim};
  kvci_store_strides(l, 0, strides);
  /* The backend has the entry: check_rope refused the call otherwise. */
  KVCI_BE(c, rerotate_keys_4d, l->dtype, (char*)l->k + (size_t)(first * l->k_dim) * l->elem, strides,
          shape, tab, tab + rows * dim);
}

/* ------------------------------------------------------ per-call checks */

static kvc_error* check_rope_tensor(const char* fn, const char* arg, const kvc_tensor* t, const kvc_device* dev) {
  if (t->ndim != 2 && t->ndim != 3)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                   "%s: %s.ndim is %d; RoPE cos/sin are [seq, dim] (the whole table) or [batch, seq, dim]", fn, arg,
                   (int)t->ndim);
  if (!t->shape) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.shape is NULL", fn, arg);
  if (kvc_dtype_from_data_type(t->dtype) == KVC_DTYPE_UNSET)
    return kvci_err(KVC_ERROR_DTYPE_MISMATCH,
                   "%s: %s.dtype is {code %u, bits %u, lanes %u}; RoPE cos/sin must be float32, float16 or bfloat16", fn,
                   arg, (unsigned)t->dtype.code, (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes);
  if (t->device.device_type != dev->device_type || t->device.device_id != dev->device_id)
    return kvci_err(KVC_ERROR_DEVICE_MISMATCH, "%s: %s is on device %d:%d but the cache lives on %d:%d", fn, arg,
                   (int)t->device.device_type, (int)t->device.device_id, (int)dev->device_type, (int)dev->device_id);
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0 || t->shape[i] > INT32_MAX)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.shape[%d] is %" PRId64 "; sizes must be in [0, 2^31)", fn, arg,
                     i, t->shape[i]);
    numel *= t->shape[i];
    if (numel > (INT64_C(1) << 48))
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s has more than 2^48 elements", fn, arg);
  }
  if (t->ndim == 3 && t->shape[0] < 1)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.shape[0] (batch) is 0; the table is taken from batch row 0", fn,
                   arg);
  if (numel > 0 && !t->data)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL but the tensor has %" PRId64 " elements", fn, arg,
                   numel);
  return NULL;
}

static kvc_error* check_rope(const char* fn, const kvc_cache* c, const kvc_update_options* o) {
  if (!o->rope_cos != !o->rope_sin)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->%s is NULL but options->%s is not; pass both RoPE tensors (cos and sin) or neither",
                   fn, o->rope_cos ? "rope_sin" : "rope_cos", o->rope_cos ? "rope_cos" : "rope_sin");
  if (o->partial_rotation_size < 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->partial_rotation_size is %" PRId64 "; use 0 (every key channel is rotary) or the "
                   "number of rotary channels",
                   fn, o->partial_rotation_size);
  if (!o->rope_cos) return NULL;
  const kvc_backend* be = c->backend;
  if (!be->rerotate_keys_4d || !be->read_f32_4d)
    return kvci_err(KVC_ERROR_UNSUPPORTED,
                   "%s: RoPE re-rotation of sink keys has no kernel on the %s backend yet (its table has no %s): "
                   "sink layers with options->rope_cos/rope_sin run on backends that have it (the CPU backend does); "
                   "on this device, sink layers run without RoPE",
                   fn, be->name, !be->rerotate_keys_4d ? "rerotate_keys_4d" : "read_f32_4d");
  kvc_error* e = check_rope_tensor(fn, "options->rope_cos", o->rope_cos, &c->device);
  if (!e) e = check_rope_tensor(fn, "options->rope_sin", o->rope_sin, &c->device);
  if (e) return e;
  if (o->rope_sin->ndim != o->rope_cos->ndim)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: options->rope_sin.ndim is %d but options->rope_cos.ndim is %d", fn,
                   (int)o->rope_sin->ndim, (int)o->rope_cos->ndim);
  for (int i = 0; i < o->rope_cos->ndim; i++)
    if (o->rope_sin->shape[i] != o->rope_cos->shape[i])
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                     "%s: options->rope_sin.shape[%d] is %" PRId64 " but options->rope_cos.shape[%d] is %" PRId64
                     "; they must agree",
                     fn, i, o->rope_sin->shape[i], i, o->rope_cos->shape[i]);
  return NULL;
}

static kvc_sink_state* new_state(const kvc_cache* c) {
  kvc_sink_state* s = (kvc_sink_state*)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->record_layer = first_sink_layer(c);
  s->max_window = largest_window(c);
  return s;
}

/* One layer's RoPE rules, against the table as the call's earlier layers leave it (*t). */
static kvc_error* check_layer_rope(const char* fn, const kvc_cache* c, uint32_t idx, const char* key,
                                   const kvc_tensor* k, const kvc_update_options* o, table_shape* t) {
  const kvc_sink_state* s = SINK_STATE(c);
  const kvc_layer* l = idx < c->num_layers ? c->layers[idx] : NULL;
  int64_t window = l ? l->window : c->lazy_spec.window, sinks = l ? NUM_SINK(l) : c->lazy_spec.num_sink_tokens;
  int64_t head_dim = l && l->initialized ? l->k_dim : k->shape[3];
  int64_t stored = l ? kvci_layer_stored(l) : 0, n = k->shape[2];
  const kvc_tensor* cos = o->rope_cos;
  int64_t dim = cos->shape[cos->ndim - 1];
  if (o->partial_rotation_size > head_dim)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->partial_rotation_size is %" PRId64 " but layer %u has head_dim %" PRId64
                   "; it must be in [0, head_dim]",
                   fn, o->partial_rotation_size, idx, head_dim);
  int64_t rot = rotary_size(o, head_dim);
  if (dim != rot)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                   "%s: options->rope_cos.shape[%d] is %" PRId64 " but layer %u rotates %" PRId64
                   " key channels (%s); they must be equal",
                   fn, cos->ndim - 1, dim, idx, rot,
                   o->partial_rotation_size ? "options->partial_rotation_size" : "its head_dim");
  if (idx == s->record_layer) {
    int mode;
    table_shape next = after_record(*t, cos, s->max_window, &mode);
    if (mode == TABLE_APPEND && dim != t->dim)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                     "%s: options->rope_cos.shape[2] is %" PRId64 " but the cos/sin table recorded so far has %" PRId64
                     " channels; a [batch, seq, dim] cos/sin extends the table and must match it",
                     fn, dim, t->dim);
    *t = next;
  }
  if (!shifts(stored, n, window)) return NULL;
  if (n < 1 || window - sinks - n < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: %s.shape[2] (new tokens) is %" PRId64 " but layer %u holds %" PRId64
                   " tokens (window_length %" PRId64 ", num_sink_tokens %" PRId64
                   "): with RoPE a shift must keep at least one token to re-rotate, so the new tokens must be in "
                   "[1, window_length - num_sink_tokens - 1] (transformers fails here)",
                   fn, key, n, idx, stored, window, sinks);
  if (!t->has)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "%s: layer %u must re-rotate its kept keys but no cos/sin table has been recorded: the table comes "
                   "from the updates of layer %u (the first sink layer) that pass options->rope_cos/rope_sin",
                   fn, idx, s->record_layer);
  if (t->len < window)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "%s: layer %u must re-rotate its kept keys but the recorded cos/sin table has %" PRId64
                   " rows; a window_length of %" PRId64 " needs one row per cache slot, %" PRId64 " in all",
                   fn, idx, t->len, window, window);
  if (t->dim != rot)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                   "%s: layer %u rotates %" PRId64 " key channels but the recorded cos/sin table has %" PRId64, fn, idx,
                   rot, t->dim);
  const sink_rotation* r = find_rotation(s, n, sinks, window);
  if (r && r->computed && r->dim != rot)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                   "%s: layer %u rotates %" PRId64 " key channels but the re-rotation for %" PRId64
                   " new tokens was computed for %" PRId64 " (it is computed once per number of new tokens)",
                   fn, idx, rot, n, r->dim);
  return NULL;
}

/* check_call: the rules of sink layers that depend on the whole call, checked before anything changes. */
static kvc_error* check_call(const kvc_call* call, kvc_cache* c, uint32_t first, uint32_t count,
                             const kvc_tensor* keys, const kvc_update_options* o) {
  const char* fn = call->fn;
  uint32_t j = 0;
  while (j < count && kind_at(c, first + j) != KVC_LAYER_SINK) j++;
  if (j == count) return NULL;
  kvc_error* e = o ? check_rope(fn, c, o) : NULL;
  if (e) return e;
  if (!SINK_STATE(c) && !(c->kind_state[KVC_LAYER_SINK] = new_state(c))) return kvci_err_oom();
  if (!o || !o->rope_cos) return NULL;
  int indexed = (call->flags & KVC_CALL_PER_LAYER_ARGS) != 0;
  table_shape t = shape_of(SINK_STATE(c));
  for (; j < count; j++) {
    if (kind_at(c, first + j) != KVC_LAYER_SINK) continue;
    char buf[48];
    e = check_layer_rope(fn, c, first + j, kvci_arg_name(buf, indexed ? "keys" : "key", indexed ? (int64_t)j : -1),
                         &keys[j], o, &t);
    if (e) return e;
  }
  return NULL;
}

/* ------------------------------------------------------------ the kind */

static kvc_region keep_for_update(const kvc_layer* l, int64_t n, const kvc_update_options* o, int64_t* append) {
  (void)o;
  int64_t len = kvci_layer_stored(l);
  *append = n;
  if (shifts(len, n, l->window)) {
    sink_plan p = plan_shift(len, n, l->window, NUM_SINK(l));
    if (p.begin < p.sinks) *append += p.sinks - p.begin; /* the kept tokens move right, behind a second copy of the sinks */
  }
  return (kvc_region){l->start, l->end};
}

static kvc_error* prepare_update(const char* fn, const kvc_cache* c, kvc_layer* l, int64_t n,
                                 const kvc_update_options* o) {
  kvc_sink_state* s = SINK_STATE(c); /* made by kvc_sink_begin_update */
  if (!o || !o->rope_cos) return NULL;
  int64_t dim = rotary_size(o, l->k_dim);
  if (is_record_layer(c, l)) {
    int mode;
    table_shape t = after_record(shape_of(s), o->rope_cos, s->max_window, &mode);
    int64_t need = min64(t.len, s->max_window) * t.dim;
    if (reserve_floats(&s->cos, &s->cos_cap, need) || reserve_floats(&s->sin, &s->sin_cap, need)) return kvci_err_oom();
    kvc_error* e = stage_table(fn, c, s, o);
    if (e) return e;
  }
  if (!shifts(kvci_layer_stored(l), n, l->window)) return NULL;
  sink_rotation* r = find_rotation(s, n, NUM_SINK(l), l->window);
  if (!r && !(r = add_rotation(s, n, NUM_SINK(l), l->window))) return kvci_err_oom();
  int64_t rows = l->window - NUM_SINK(l) - n, values = 2 * rows * dim;
  if (!r->computed && reserve_floats(&r->raw, &r->raw_cap, values)) return kvci_err_oom();
  if (l->dtype != KVC_DTYPE_FLOAT32) {
    int w = cast_index(l->dtype);
    if (!r->cast_done[w] && reserve_floats(&r->cast[w], &r->cast_cap[w], values)) return kvci_err_oom();
  }
  return NULL;
}

/* Keeps the sinks and the tokens from plan.begin on, contiguous at the start of the stored region. */
static void shift(const kvc_cache* c, kvc_layer* l, const kvc_update_options* o, int64_t n) {
  int64_t len = kvci_layer_stored(l);
  sink_plan p = plan_shift(len, n, l->window, NUM_SINK(l));
  int64_t kept = len - p.begin;
  for (int which = 0; which < 2 && (p.begin != p.sinks); which++) {
    int64_t d = which ? l->v_dim : l->k_dim, st[4];
    kvci_store_strides(l, which, st);
    char* base = (char*)(which ? l->v : l->k);
    int64_t from, to, count;
    if (p.begin < p.sinks) { /* Python's slice kept some sinks twice: the kept block moves right (no RoPE here) */
      from = l->start + p.begin;
      to = l->start + p.sinks;
      count = kept;
    } else { /* the sinks move right, next to the kept block */
      from = l->start;
      to = l->start + p.begin - p.sinks;
      count = p.sinks;
    }
    int64_t shape[4] = {l->batch, l->heads, count, d};
    KVCI_BE(c, copy_4d, base + (size_t)(to * d) * l->elem, st,
            base + (size_t)(from * d) * l->elem, st, shape, l->elem);
  }
  if (o && o->rope_cos) rerotate_kept(c, l, o, n, l->start + p.begin, kept); /* checked: kept >= 1, begin >= sinks */
  if (p.begin < p.sinks)
    l->end = l->start + p.sinks + kept;
  else
    l->start += p.begin - p.sinks;
}

static kvc_region apply_update(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v, int64_t n,
                               const kvc_update_options* o) {
  int rope = o && o->rope_cos;
  if (rope && is_record_layer(c, l)) record_table(SINK_STATE(c), o); /* before this layer's own shift, as transformers */
  if (shifts(kvci_layer_stored(l), n, l->window)) shift(c, l, rope ? o : NULL, n);
  kvci_layer_write(c, l, k, v, l->end, NULL, n);
  l->end += n;
  return (kvc_region){l->start, l->end};
}


/*
 * transformers 4.52 has no get_mask_sizes; kvcache's contract is the length
 * the next update returns. Sinks and recent tokens are not one range of
 * absolute positions, so the offset is 0: masks are built over cache slots.
 */
static void mask_sizes(const kvc_layer* l, int64_t q, int64_t* len, int64_t* off) {
  *len = length_after(l, q);
  *off = 0;
}

/* SinkCache has no reset in transformers; here it empties the layers and forgets the table, like a new cache. */
static void reset(const kvc_cache* c, kvc_layer* l) {
  l->start = l->end = 0;
  kvc_sink_state* s = SINK_STATE(c);
  if (!s) return;
  s->has_table = 0;
  s->len = s->dim = 0;
  for (int i = 0; i < s->nrot; i++) s->rot[i].computed = 0;
}

static int64_t initial_capacity(const kvc_layer* l, int64_t n) {
  /* A full window plus as many slots again: decoding compacts once per window, and a long first update fits. */
  int64_t cap = n > l->window ? n + l->window : 2 * l->window;
  return cap < 16 ? 16 : cap;
}

static kvc_error* check_batch(const char* fn, const kvc_layer* l, uint32_t index, kvc_batch_op op) {
  (void)l;
  if (op != KVC_BATCH_SELECT && op != KVC_BATCH_REPEAT) return NULL;
  return kvci_err(KVC_ERROR_UNSUPPORTED,
                 "%s: layer %u is a sink layer; SinkCache has no batch_%s (transformers raises AttributeError)", fn,
                 index, op == KVC_BATCH_REPEAT ? "repeat_interleave" : "select_indices");
}

static void fill_info(const kvc_layer* l, kvc_layer_info* info) {
  info->is_sliding = 1; /* SinkCache.is_sliding = True in transformers 4.52 */
  info->num_sink_tokens = NUM_SINK(l);
}

const kvc_layer_ops kvc_sink_layer_ops = {
    .check_update = kvci_dynamic_check_update, /* the sink rules need the whole call: check_call */
    .keep_for_update = keep_for_update,
    .apply_update = apply_update,
    .seq_length = kvci_dynamic_seq_length, /* get_seq_length: the stored length (docs/semantics.md, 'Edge cases', item 4) */
    .max_length = kvci_window_max_length,
    .mask_sizes = mask_sizes,
    .reset = reset,
    .initial_capacity = initial_capacity,
    .prepare_update = prepare_update,
    .check_batch = check_batch,
    .fill_info = fill_info,
};

/* ------------------------------------------------------- cache-wide state */

static void free_state(kvc_cache* c) {
  kvc_sink_state* s = SINK_STATE(c);
  if (!s) return;
  for (int i = 0; i < s->nrot; i++) {
    free(s->rot[i].raw);
    free(s->rot[i].cast[0]);
    free(s->rot[i].cast[1]);
  }
  free(s->rot);
  free(s->cos);
  free(s->sin);
  free(s->staged);
  free(s);
  c->kind_state[KVC_LAYER_SINK] = NULL;
}

/* A copy of n floats (NULL for none); *ok is cleared when out of memory. */
static float* copy_floats(const float* src, int64_t n, int* ok) {
  if (!src || n <= 0) return NULL;
  float* p = (float*)malloc((size_t)n * sizeof(float));
  if (!p) {
    *ok = 0;
    return NULL;
  }
  memcpy(p, src, (size_t)n * sizeof(float));
  return p;
}

static kvc_error* clone_state(const kvc_cache* src, kvc_cache* dst) {
  const kvc_sink_state* s = SINK_STATE(src);
  if (!s) return NULL;
  kvc_sink_state* d = (kvc_sink_state*)calloc(1, sizeof(*d));
  if (!d) return kvci_err_oom();
  *d = *s;
  d->cos = d->sin = d->staged = NULL;
  d->rot = NULL;
  d->nrot = d->rot_cap = 0;
  d->cos_cap = d->sin_cap = d->staged_cap = 0;
  dst->kind_state[KVC_LAYER_SINK] = d; /* from here on free_state releases whatever was copied */
  int ok = 1;
  int64_t rows = min64(s->len, s->max_window) * s->dim;
  if (s->has_table && rows > 0) {
    d->cos = copy_floats(s->cos, rows, &ok);
    d->sin = copy_floats(s->sin, rows, &ok);
    d->cos_cap = d->sin_cap = rows;
  }
  if (ok && s->nrot > 0) {
    d->rot = (sink_rotation*)calloc((size_t)s->nrot, sizeof(*d->rot));
    ok = d->rot != NULL;
  }
  for (int i = 0; ok && i < s->nrot; i++) {
    const sink_rotation* r = &s->rot[i];
    if (!r->computed) continue; /* an entry a failed call left uncomputed holds nothing */
    sink_rotation* q = &d->rot[d->nrot++];
    *q = *r;
    int64_t values = 2 * r->rows * r->dim;
    q->raw = copy_floats(r->raw, values, &ok);
    q->raw_cap = values;
    for (int w = 0; w < 2; w++) {
      q->cast[w] = r->cast_done[w] ? copy_floats(r->cast[w], values, &ok) : NULL;
      q->cast_cap[w] = q->cast[w] ? values : 0;
      q->cast_done[w] = q->cast[w] != NULL;
    }
  }
  if (d->rot) d->rot_cap = s->nrot;
  if (!ok) {
    free_state(dst);
    return kvci_err_oom();
  }
  return NULL;
}

/*
 * Files: the recorded cos/sin table and every computed re-rotation (float32, as
 * clone_state copies them); the casts to float16/bfloat16 are made again on
 * first use, from the same float32 values, so they come out the same.
 */
static void save_state(const kvc_cache* c, kvci_record* r) {
  const kvc_sink_state* s = SINK_STATE(c);
  int64_t rows = s->has_table ? min64(s->len, s->max_window) * s->dim : 0;
  const int64_t head[6] = {s->record_layer, s->max_window, s->has_table, s->len, s->dim, rows};
  for (int i = 0; i < 6; i++) kvci_rec_i64(r, head[i]);
  kvci_rec_f32s(r, s->cos, rows);
  kvci_rec_f32s(r, s->sin, rows);
  int64_t computed = 0;
  for (int i = 0; i < s->nrot; i++) computed += s->rot[i].computed != 0;
  kvci_rec_i64(r, computed);
  for (int i = 0; i < s->nrot; i++) {
    const sink_rotation* q = &s->rot[i];
    if (!q->computed) continue;
    const int64_t key[5] = {q->shift, q->num_sink, q->window, q->rows, q->dim};
    for (int k = 0; k < 5; k++) kvci_rec_i64(r, key[k]);
    kvci_rec_f32s(r, q->raw, 2 * q->rows * q->dim);
  }
}

static kvc_error* malformed(const char* fn, kvc_cache* c, const char* what) {
  free_state(c);
  return kvci_err(KVC_ERROR_IO, "%s: the sink kind's state record is malformed (%s)", fn, what);
}

static kvc_error* load_oom(kvc_cache* c) {
  free_state(c);
  return kvci_err_oom();
}

/* A float buffer of n values read from the record (NULL for none); -1 when out of memory, -2 when it is short. */
static int read_floats(kvci_record_reader* in, float** out, int64_t n) {
  if (n <= 0) return 0;
  if (n > (int64_t)(kvci_rec_left(in) / 4)) return -2;
  if (!(*out = (float*)malloc((size_t)n * sizeof(float)))) return -1;
  kvci_rec_get_f32s(in, *out, n);
  return 0;
}

static kvc_error* load_state(const char* fn, kvc_cache* c, kvci_record_reader* in) {
  int64_t h[6], nrot;
  static const int64_t hi[6] = {UINT32_MAX, INT32_MAX, 1, INT32_MAX, 1 << 20, (int64_t)1 << 40};
  for (int i = 0; i < 6; i++)
    if (kvci_rec_get_range(in, 0, hi[i], &h[i])) return kvci_err(KVC_ERROR_IO, "%s: the sink kind's state record is malformed (table)", fn);
  if (h[5] != (h[2] ? min64(h[3], h[1]) * h[4] : 0))
    return kvci_err(KVC_ERROR_IO, "%s: the sink kind's state record is malformed (table size)", fn);
  /* The table is read up to the largest window, by the first sink layer's updates: both follow from the layers
   * loaded before this record (kvc_cache.kind_state is made the same way, new_state). */
  if (h[0] != (int64_t)first_sink_layer(c) || h[1] != largest_window(c))
    return kvci_err(KVC_ERROR_IO,
                    "%s: the file's sink state (KSTA section): record_layer is %" PRId64 " and max_window %" PRId64
                    "; the cache's sink layers make them %u (the first sink layer) and %" PRId64 " (the largest window)",
                    fn, h[0], h[1], first_sink_layer(c), largest_window(c));
  kvc_sink_state* s = (kvc_sink_state*)calloc(1, sizeof(*s));
  if (!s) return kvci_err_oom();
  c->kind_state[KVC_LAYER_SINK] = s; /* free_state releases whatever is read from here on */
  s->record_layer = (uint32_t)h[0], s->max_window = h[1], s->has_table = (int)h[2], s->len = h[3], s->dim = h[4];
  s->cos_cap = s->sin_cap = h[5];
  int rc = read_floats(in, &s->cos, h[5]);
  if (!rc) rc = read_floats(in, &s->sin, h[5]);
  if (rc == -1) return load_oom(c);
  if (rc || kvci_rec_get_range(in, 0, (int64_t)kvci_rec_left(in) / 40, &nrot)) return malformed(fn, c, "table values");
  if (nrot > 0 && !(s->rot = (sink_rotation*)calloc((size_t)nrot, sizeof(*s->rot)))) return load_oom(c);
  s->rot_cap = (int)nrot;
  for (int64_t i = 0; i < nrot; i++) {
    int64_t k[5];
    for (int j = 0; j < 5; j++)
      if (kvci_rec_get_range(in, 0, INT32_MAX, &k[j])) return malformed(fn, c, "re-rotation key");
    /* A shift by n keeps the last window - sinks - n tokens (plan_shift), and rerotate_kept reads that many rows of
     * a computed rotation, whatever rows its record claims. */
    if (k[3] != k[2] - k[1] - k[0] || k[3] < 1 || k[4] < 1) {
      char what[160];
      snprintf(what, sizeof what, "re-rotation %" PRId64 ": rows %" PRId64 " and dim %" PRId64 "; a shift by %" PRId64
               " of a window of %" PRId64 " with %" PRId64 " sinks keeps %" PRId64 " rows, dim >= 1",
               i, k[3], k[4], k[0], k[2], k[1], k[2] - k[1] - k[0]);
      return malformed(fn, c, what);
    }
    sink_rotation* q = &s->rot[s->nrot++];
    q->shift = k[0], q->num_sink = k[1], q->window = k[2], q->rows = k[3], q->dim = k[4];
    q->computed = 1;
    q->raw_cap = 2 * k[3] * k[4];
    rc = read_floats(in, &q->raw, q->raw_cap);
    if (rc == -1) return load_oom(c);
    if (rc) return malformed(fn, c, "re-rotation values");
  }
  return NULL;
}

static void describe(const kvc_layer* l, kvc_layer_options* spec, kvc_quant_options* quant) {
  (void)quant;
  spec->num_sink_tokens = NUM_SINK(l);
}

/* ------------------------------------------------------------ the kind */

static kvc_error* check_options(const char* fn, uint32_t i, const kvc_layer_options* l) {
  if (l->num_sink_tokens < 0 || l->num_sink_tokens >= INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].num_sink_tokens is %" PRId64 "; it must be in [0, 2^31 - 1)", fn, i,
                   l->num_sink_tokens);
  if (l->window <= l->num_sink_tokens || l->window > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].window (window_length) is %" PRId64 " but a sink layer needs it in "
                   "[num_sink_tokens + 1, 2^31) with num_sink_tokens %" PRId64,
                   fn, i, l->window, l->num_sink_tokens);
  return NULL;
}

static void configure(kvc_layer* l, const kvc_layer_options* spec) {
  l->window = spec->window;
  kvci_layer_params(sink_params, l)->num_sink = spec->num_sink_tokens;
}

/* SinkCache holds window_length tokens. */
static int64_t capacity(const kvc_layer* l) { return l->window; }

/* A shift keeps the sinks and the tail of at most `window` stored tokens (plan_shift). */
static kvc_error* check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  int64_t stored = kvci_layer_stored(l);
  if (stored > l->window)
    return kvci_loaded_refuse(fn, where, "the stored tokens", stored,
                              "a sink layer (window %" PRId64 ", %" PRId64 " sink tokens) holds %" PRId64 " at most",
                              l->window, (int64_t)NUM_SINK(l), l->window);
  return NULL;
}

/* SinkCache has no crop. */
static int never_croppable(const kvc_layer* l, uint32_t release) {
  (void)l; (void)release;
  return 0;
}

/* Alike by design: every kind's descriptor lists its own traits and hooks (the linear kind's looks the same). */
const kvc_kind kvc_sink_kind = {
    .id = KVC_LAYER_SINK,
    .name = "sink",
    .traits = KVC_TRAIT_HAS_KV, /* re-rotation state tied to the store: no offloading (no offloaded class either) */
    .ops = &kvc_sink_layer_ops,
    .check_options = check_options,
    .configure = configure,
    .capacity = capacity,
    .is_croppable = never_croppable,
    .check_call = check_call,
    .clone_state = clone_state,
    .free_state = free_state,
    .describe = describe,
    .save_state = save_state,
    .load_state = load_state,
    .check_loaded = check_loaded,
};
