/*
 * test_sink.h: what the sink-layer tests share.
 *
 * Keys whose re-rotation can be checked exactly: token t's key channel d is
 * (t + 1 + 32*b + 64*h) * 16^d (exact in every dtype for small t, b, h), and
 * the RoPE table turns by a quarter per position (cos/sin of p*pi/2, so every
 * value is 0 or +-1). A key rotated back by n positions then has its rotary
 * pairs (x[i], x[i + r/2]) turned n quarter turns: (x1, x2) -> (x2, -x1),
 * and every product and sum of the re-rotation is exact.
 * Values are the negated keys and are never rotated.
 */
#ifndef KVC_TEST_SINK_H
#define KVC_TEST_SINK_H

#include <math.h>

#include "test_util.h"

#define SK_MAX_ROWS 64

/* The tokens a full window of W slots with S sinks holds once tokens 0..end-1 went through it: the sinks, then the
 * most recent W - S. */
static TU_UNUSED void sk_window_tokens(int64_t* want, int64_t W, int64_t S, int64_t end) {
  for (int64_t s = 0; s < W; s++) want[s] = s < S ? s : end - (W - s);
}

static TU_UNUSED float sk_key(int64_t t, int64_t b, int64_t h, int64_t d) {
  return (float)(t + 1 + 32 * b + 64 * h) * ldexpf(1.0f, (int)(4 * d));
}

/* Keys and values of the listed tokens, [b, h, n, dk] and [b, h, n, dv], in `dt`. */
static TU_UNUSED void sk_make_kv(tu_tensor* k, tu_tensor* v, kvc_dtype dt, int64_t b, int64_t h, int64_t dk,
                                 int64_t dv, const int64_t* tokens, int64_t n) {
  size_t nk = (size_t)(b * h * n * dk), nv = (size_t)(b * h * n * dv);
  float* fk = (float*)calloc(nk ? nk : 1, sizeof(float));
  float* fv = (float*)calloc(nv ? nv : 1, sizeof(float));
  if (!fk || !fv) abort();
  size_t ik = 0, iv = 0;
  for (int64_t i0 = 0; i0 < b; i0++)
    for (int64_t i1 = 0; i1 < h; i1++)
      for (int64_t s = 0; s < n; s++) {
        for (int64_t d = 0; d < dk; d++) fk[ik++] = sk_key(tokens[s], i0, i1, d);
        for (int64_t d = 0; d < dv; d++) fv[iv++] = -sk_key(tokens[s], i0, i1, d);
      }
  tu_tensor_make(k, dt, b, h, n, dk, fk);
  tu_tensor_make(v, dt, b, h, n, dv, fv);
  free(fk);
  free(fv);
}

/* A RoPE cos or sin: [rows, dim] (ndim 2) or [batch, rows, dim] (ndim 3), float32 or another dtype. */
typedef struct sk_rope {
  kvc_tensor cos, sin;
  int64_t shape[3];
  void* cbuf;
  void* sbuf;
} sk_rope;

static TU_UNUSED float sk_quarter_cos(int64_t p) { return (float)((const int[]){1, 0, -1, 0}[p % 4]); }
static TU_UNUSED float sk_quarter_sin(int64_t p) { return (float)((const int[]){0, 1, 0, -1}[p % 4]); }

/*
 * cos/sin of positions first..first+rows-1 turning a quarter per position
 * (`turn` 1), or not at all (`turn` 0: cos 1, sin 0, the identity), every
 * batch row the same.
 */
static TU_UNUSED void sk_rope_make(sk_rope* r, kvc_dtype dt, int ndim, int64_t batch, int64_t first, int64_t rows,
                                   int64_t dim, int turn) {
  memset(r, 0, sizeof *r);
  if (ndim == 2) batch = 1;
  size_t es = tu_dtype_bytes(dt), n = (size_t)(batch * rows * dim);
  r->cbuf = calloc(n ? n : 1, es);
  r->sbuf = calloc(n ? n : 1, es);
  if (!r->cbuf || !r->sbuf) abort();
  size_t i = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t p = first; p < first + rows; p++)
      for (int64_t d = 0; d < dim; d++, i++) {
        tu_store_float(dt, (unsigned char*)r->cbuf + i * es, turn ? sk_quarter_cos(p) : 1.0f);
        tu_store_float(dt, (unsigned char*)r->sbuf + i * es, turn ? sk_quarter_sin(p) : 0.0f);
      }
  int64_t* sh = r->shape;
  if (ndim == 2) {
    sh[0] = rows;
    sh[1] = dim;
  } else {
    sh[0] = batch;
    sh[1] = rows;
    sh[2] = dim;
  }
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.device.device_type = KVC_DEVICE_CPU;
  t.ndim = ndim;
  t.dtype = tu_data_type(dt);
  t.shape = r->shape;
  r->cos = t;
  r->sin = t;
  r->cos.data = r->cbuf;
  r->sin.data = r->sbuf;
}

static TU_UNUSED void sk_rope_free(sk_rope* r) {
  free(r->cbuf);
  free(r->sbuf);
  r->cbuf = r->sbuf = NULL;
}

/* Update options carrying r (NULL: no RoPE) and a partial rotation size. */
static TU_UNUSED kvc_update_options sk_opts(const sk_rope* r, int64_t partial) {
  kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
  if (r) {
    o.rope_cos = &r->cos;
    o.rope_sin = &r->sin;
  }
  o.partial_rotation_size = partial;
  return o;
}

/* update(layer) with the listed tokens, float32 unless dt says otherwise. */
static TU_UNUSED kvc_error* sk_update(kvc_cache* c, uint32_t layer, kvc_dtype dt, int64_t b, int64_t h, int64_t dk,
                                      int64_t dv, const int64_t* tokens, int64_t n, const kvc_update_options* o,
                                      kvc_kv* out) {
  tu_tensor k, v;
  sk_make_kv(&k, &v, dt, b, h, dk, dv, tokens, n);
  kvc_error* e = kvc_cache_update(c, layer, &k.t, &v.t, o, out);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  return e;
}

/* update_all of num_layers (at most 4) float32 layers, [1, 1, n, dk] / [1, 1, n, dv], every layer given the
 * same listed tokens; out (may be NULL) receives num_layers views. */
static TU_UNUSED kvc_error* sk_update_all(kvc_cache* c, uint32_t num_layers, int64_t dk, int64_t dv,
                                          const int64_t* tokens, int64_t n, const kvc_update_options* o, kvc_kv* out) {
  tu_tensor k[4], v[4];
  kvc_tensor kt[4], vt[4];
  if (num_layers > 4) abort();
  for (uint32_t i = 0; i < num_layers; i++) {
    sk_make_kv(&k[i], &v[i], KVC_DTYPE_FLOAT32, 1, 1, dk, dv, tokens, n);
    kt[i] = k[i].t;
    vt[i] = v[i].t;
  }
  kvc_error* e = kvc_cache_update_all(c, num_layers, kt, vt, o, out);
  for (uint32_t i = 0; i < num_layers; i++) {
    tu_tensor_free(&k[i]);
    tu_tensor_free(&v[i]);
  }
  return e;
}

/* One decode step of token t on a full window: the test's own update or updates. */
typedef kvc_error* (*sk_decode_fn)(kvc_cache* c, int64_t t);

/* Decodes tokens from..to-1 through step and checks that this allocates nothing: layer `layer`'s store stays where it
 * is and the memory reported (bytes reserved and used) does not move. Returns the layer's view afterwards. */
static TU_UNUSED kvc_kv sk_decode_in_place(kvc_cache* c, uint32_t layer, int64_t from, int64_t to, sk_decode_fn step) {
  const void* base = tu_view(c, layer).key.data;
  kvc_memory_info m0 = tu_memory(c);
  for (int64_t t = from; t < to; t++)
    if (!CHECK_OK(step(c, t))) break;
  kvc_kv st = tu_view(c, layer);
  kvc_memory_info m1 = tu_memory(c);
  CHECK_EQ_PTR(st.key.data, base);
  CHECK_EQ_U64(m1.bytes_reserved, m0.bytes_reserved);
  CHECK_EQ_U64(m1.bytes_used, m0.bytes_used);
  return st;
}

/* A custom cache of two sink layers of windows w0 and w1, the second with one sink token; NULL on error (counted).
 * Layers that disagree let update_all pass one layer and refuse the other. */
static TU_UNUSED kvc_cache* sk_two_layers(int64_t w0, int64_t w1) {
  kvc_layer_options layers[2] = {tu_layer(KVC_LAYER_SINK, w0, 0), tu_layer(KVC_LAYER_SINK, w1, 0)};
  layers[1].num_sink_tokens = 1;
  return tu_custom_cache(2, layers);
}

/* A SinkCache preset: lazy (num_layers 0) or with a config of num_layers layers; NULL on error (counted). */
static TU_UNUSED kvc_cache* sk_cache(int64_t window, int64_t sinks, uint32_t num_layers) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  o.preset = KVC_PRESET_SINK;
  o.window_length = window;
  o.num_sink_tokens = sinks;
  if (num_layers) {
    cfg.num_hidden_layers = num_layers;
    o.config = &cfg;
  }
  return tu_create(&o);
}

/* sk_cache(window, sinks, num_layers) whose layers 0..fill-1 hold the listed tokens, float32 [1, 1, n, d] keys and
 * values; NULL on error (counted). */
static TU_UNUSED kvc_cache* sk_filled(int64_t window, int64_t sinks, uint32_t num_layers, uint32_t fill, int64_t d,
                                      const int64_t* tokens, int64_t n) {
  kvc_cache* c = sk_cache(window, sinks, num_layers);
  int ok = 1;
  for (uint32_t i = 0; c && ok && i < fill; i++)
    ok = CHECK_OK(sk_update(c, i, KVC_DTYPE_FLOAT32, 1, 1, d, d, tokens, n, NULL, NULL));
  return tu_kept(c, ok);
}

/* The expected key channel d of token t (batch row b, head h) after q quarter turns of its first rot channels. */
static TU_UNUSED float sk_turned(int64_t t, int64_t b, int64_t h, int64_t d, int q, int64_t rot) {
  if (d >= rot) return sk_key(t, b, h, d);
  int64_t half = rot / 2;
  float x1 = sk_key(t, b, h, d < half ? d : d - half), x2 = sk_key(t, b, h, d < half ? d + half : d);
  for (int i = 0; i < q % 4; i++) {
    float y1 = x2, y2 = -x1;
    x1 = y1;
    x2 = y2;
  }
  return d < half ? x1 : x2;
}

/*
 * Checks that keys view `t` holds, at seq position s, token tokens[s] turned
 * quarters[s] quarter turns in its first `rot` channels (rot even), the rest
 * unchanged, for every batch row and head; values (is_value) hold the negated
 * keys, unturned. rows (NULL = identity) gives the source batch row of each row.
 */
static TU_UNUSED int sk_check_impl(const char* file, int line, const kvc_tensor* t, int is_value, const int64_t* tokens,
                                   const int* quarters, int64_t n, int64_t rot, const int64_t* rows) {
  tu_checks_total++;
  char why[200] = "";
  if (t->ndim != 4 || t->shape[2] != n) {
    snprintf(why, sizeof why, "shape[2] is %lld, expected %lld", (long long)(t->ndim == 4 ? t->shape[2] : -1),
             (long long)n);
  }
  for (int64_t b = 0; !why[0] && b < t->shape[0]; b++)
    for (int64_t h = 0; !why[0] && h < t->shape[1]; h++)
      for (int64_t s = 0; !why[0] && s < n; s++)
        for (int64_t d = 0; !why[0] && d < t->shape[3]; d++) {
          int64_t rb = rows ? rows[b] : b;
          float want = is_value ? -sk_key(tokens[s], rb, h, d) : sk_turned(tokens[s], rb, h, d, quarters[s], rot);
          float got = tu_get(t, b, h, s, d);
          if (got != want)
            snprintf(why, sizeof why, "[b=%lld,h=%lld,s=%lld,d=%lld] is %g, expected %g (token %lld, %d quarter turns)",
                     (long long)b, (long long)h, (long long)s, (long long)d, got, want, (long long)tokens[s],
                     is_value ? 0 : quarters[s]);
        }
  if (!why[0]) return 1;
  tu_failures_total++;
  fprintf(TU_LOG, "%s:%d: FAILED in %s: %s: %s\n", file, line, tu_current_test, is_value ? "values" : "keys", why);
  return 0;
}

/* A kvc_kv holding the tokens, keys turned quarters[s] quarter turns in their first rot channels. */
static TU_UNUSED int sk_check_kv(const char* file, int line, kvc_kv kv, const int64_t* tokens, const int* quarters,
                                 int64_t n, int64_t rot, const int64_t* rows) {
  int ok = sk_check_impl(file, line, &kv.key, 0, tokens, quarters, n, rot, rows);
  return sk_check_impl(file, line, &kv.value, 1, tokens, quarters, n, rot, rows) && ok;
}
#define CHECK_SINK(kv, tokens, quarters, n, rot) sk_check_kv(__FILE__, __LINE__, (kv), (tokens), (quarters), (n), (rot), NULL)
#define CHECK_SINK_ROWS(kv, tokens, quarters, n, rot, rows) \
  sk_check_kv(__FILE__, __LINE__, (kv), (tokens), (quarters), (n), (rot), (rows))
/* No RoPE: the tokens, nothing turned. */
#define SK_NONE ((const int[SK_MAX_ROWS]){0})
#define CHECK_SINK_TOKENS(kv, ...) CHECK_SINK(kv, TU_LIST(__VA_ARGS__), SK_NONE, TU_COUNT(__VA_ARGS__), 0)

#endif /* KVC_TEST_SINK_H */
