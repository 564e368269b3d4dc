/*
 * replay_engine.c: what every operation of the conformance replay is built
 * from: the vector-file tokenizer, tensors and outcomes, the bit-exact
 * comparison of views and integers, the cache slots, the cache options, and
 * the steps the families' operations share (positions, returned K/V,
 * per-layer checks, creation into a slot). replay.c runs the files;
 * replay_core.c and replay_<family>.c hold only tables of operations.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "replay.h"

void note_good(goodlist* g, long index) {
  if (index < 0) return; /* not read from the file: nothing to corrupt */
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 256;
    long* at = realloc(g->at, cap * sizeof(long));
    if (!at) return;
    g->at = at;
    g->cap = cap;
  }
  g->at[g->n++] = index;
}

/* ------------------------------------------------------------------ errors */

void fail(replay* r, const char* fmt, ...) {
  if (r->case_failed) return;
  r->case_failed = 1;
  r->failed++;
  if (r->quiet) return;
  fprintf(stderr, "MISMATCH %s: case %s, op %ld (%s): ", r->file, r->case_name, r->op,
          r->op_name ? r->op_name : "?");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void malformed(replay* r, const char* what) {
  if (!r->malformed && !r->quiet) {
    fprintf(stderr, "MALFORMED %s: op %ld (%s): %s\n", r->file, r->op, r->op_name ? r->op_name : "?", what);
  }
  r->malformed = 1;
  r->cur = r->end; /* stop reading this file */
}

/* ------------------------------------------------------------------ tokens */

char* tok(replay* r) {
  while (r->cur < r->end && (*r->cur == ' ' || *r->cur == '\n' || *r->cur == '\t' || *r->cur == '\r')) r->cur++;
  if (r->cur >= r->end) {
    malformed(r, "unexpected end of file");
    return NULL;
  }
  char* t = r->cur;
  while (r->cur < r->end && *r->cur != ' ' && *r->cur != '\n' && *r->cur != '\t' && *r->cur != '\r') r->cur++;
  if (r->cur < r->end) *r->cur++ = '\0';
  return t;
}

int64_t num(replay* r) {
  char* t = tok(r);
  if (!t) return 0;
  char* e;
  long long v = strtoll(t, &e, 10);
  if (*e) malformed(r, "expected an integer");
  return (int64_t)v;
}

uint64_t unum(replay* r) {
  char* t = tok(r);
  if (!t) return 0;
  char* e;
  unsigned long long v = strtoull(t, &e, 10);
  if (*e) malformed(r, "expected an unsigned integer");
  return (uint64_t)v;
}

/* An expected integer: numbered, and corrupted on request by the self-check. */
static vint expect(replay* r, int64_t v) {
  vint e = {v, r->ints_seen++};
  if (e.index == r->corrupt_int) e.v += 1;
  return e;
}

vint expected_num(replay* r) { return expect(r, num(r)); }

int is(const char* t, const char* s) { return t && strcmp(t, s) == 0; }

/* ------------------------------------------------------------------ tensors */

kvc_dtype parse_dtype(replay* r) {
  char* t = tok(r);
  if (is(t, "f32")) return KVC_DTYPE_FLOAT32;
  if (is(t, "f16")) return KVC_DTYPE_FLOAT16;
  if (is(t, "bf16")) return KVC_DTYPE_BFLOAT16;
  malformed(r, "unknown dtype");
  return KVC_DTYPE_FLOAT32;
}

const char* dtype_name(kvc_dtype d) {
  return d == KVC_DTYPE_FLOAT32 ? "f32" : d == KVC_DTYPE_FLOAT16 ? "f16" : d == KVC_DTYPE_BFLOAT16 ? "bf16" : "?";
}

static uint64_t splitmix(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* The input contents generate.py's make_tensor produces, bit for bit. */
static void generate(vtensor* t, uint64_t seed) {
  size_t n = t->bytes / kvc_dtype_size(t->dtype);
  for (size_t i = 0; i < n; i++) {
    uint64_t z = splitmix(seed + (uint64_t)(i + 1) * UINT64_C(0x9E3779B97F4A7C15));
    uint64_t sign = z >> 63, e = (z >> 32) % 15;
    if (t->dtype == KVC_DTYPE_FLOAT32) {
      uint32_t bits = (uint32_t)((sign << 31) | ((e + 120) << 23) | (z & 0x7FFFFF));
      memcpy(t->data + 4 * i, &bits, 4);
    } else {
      uint16_t bits = t->dtype == KVC_DTYPE_FLOAT16 ? (uint16_t)((sign << 15) | ((e + 8) << 10) | (z & 0x3FF))
                                                    : (uint16_t)((sign << 15) | ((e + 120) << 7) | (z & 0x7F));
      memcpy(t->data + 2 * i, &bits, 2);
    }
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void tensor_free(vtensor* t) {
  free(t->data);
  memset(t, 0, sizeof(*t));
}

/* Parses `-`, `e`, `z DT B H S D`, `g DT B H S D SEED` or `x DT B H S D HEX`. */
void parse_tensor(replay* r, vtensor* t) {
  memset(t, 0, sizeof(*t));
  t->index = -1;
  char* k = tok(r);
  if (!k) return;
  if (is(k, "-")) return;
  if (is(k, "e")) {
    t->kind = T_EMPTY1D;
    return;
  }
  if (!is(k, "z") && !is(k, "g") && !is(k, "x")) {
    malformed(r, "unknown tensor tag");
    return;
  }
  t->dtype = parse_dtype(r);
  int64_t n = 1;
  for (int i = 0; i < 4; i++) {
    t->shape[i] = num(r);
    if (t->shape[i] < 0 || t->shape[i] > 4096) malformed(r, "bad tensor shape");
    n *= t->shape[i];
  }
  if (r->malformed) return;
  if (is(k, "z")) {
    t->kind = T_EMPTY4D;
    return;
  }
  t->kind = T_DATA;
  t->bytes = (size_t)n * kvc_dtype_size(t->dtype);
  t->data = malloc(t->bytes ? t->bytes : 1);
  if (!t->data) {
    malformed(r, "out of memory");
    return;
  }
  if (is(k, "g")) {
    generate(t, unum(r));
  } else {
    char* h = tok(r);
    if (!h || strlen(h) != 2 * t->bytes) {
      malformed(r, "hex length does not match the shape");
      return;
    }
    for (size_t i = 0; i < t->bytes; i++) {
      int a = hexval(h[2 * i]), b = hexval(h[2 * i + 1]);
      if (a < 0 || b < 0) {
        malformed(r, "bad hex digit");
        return;
      }
      t->data[i] = (unsigned char)(a * 16 + b);
    }
    t->index = r->tensors_seen++;
    if (t->index == r->corrupt_tensor && t->bytes) t->data[t->bytes / 2] ^= 0x01;
  }
  t->view.data = t->data;
  t->view.device.device_type = KVC_DEVICE_CPU;
  t->view.ndim = 4;
  t->view.dtype = kvc_dtype_to_data_type(t->dtype);
  t->view.shape = t->shape;
  t->view.strides = NULL;
}

/* Compares a view returned by kvcache with an expected tensor. */
int check_tensor(replay* r, const char* what, const kvc_tensor* got, const vtensor* exp) {
  if (exp->kind == T_NONE) return 1;
  int64_t numel = 1;
  for (int i = 0; i < got->ndim; i++) numel *= got->shape[i];
  if (exp->kind == T_EMPTY1D) {
    if (numel != 0) fail(r, "%s: expected an empty tensor, got %" PRId64 " elements", what, numel);
    return numel == 0;
  }
  if (got->ndim != 4) {
    fail(r, "%s: expected 4 dimensions, got %d", what, (int)got->ndim);
    return 0;
  }
  for (int i = 0; i < 4; i++) {
    if (got->shape[i] != exp->shape[i]) {
      fail(r, "%s: shape [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] expected [%" PRId64 ",%" PRId64
              ",%" PRId64 ",%" PRId64 "]",
           what, got->shape[0], got->shape[1], got->shape[2], got->shape[3], exp->shape[0], exp->shape[1],
           exp->shape[2], exp->shape[3]);
      return 0;
    }
  }
  if (exp->kind == T_EMPTY4D) return 1;
  kvc_data_type want = kvc_dtype_to_data_type(exp->dtype);
  if (got->dtype.code != want.code || got->dtype.bits != want.bits || got->dtype.lanes != 1) {
    fail(r, "%s: dtype {%d,%d,%d}, expected %s", what, got->dtype.code, got->dtype.bits, got->dtype.lanes,
         dtype_name(exp->dtype));
    return 0;
  }
  if (got->device.device_type != KVC_DEVICE_CPU) {
    fail(r, "%s: not on the CPU", what);
    return 0;
  }
  size_t es = kvc_dtype_size(exp->dtype);
  int64_t st[4];
  if (got->strides) {
    memcpy(st, got->strides, sizeof(st));
  } else {
    st[3] = 1;
    for (int i = 2; i >= 0; i--) st[i] = st[i + 1] * got->shape[i + 1];
  }
  const unsigned char* base = (const unsigned char*)got->data + got->byte_offset;
  const unsigned char* want_p = exp->data;
  for (int64_t b = 0; b < exp->shape[0]; b++)
    for (int64_t h = 0; h < exp->shape[1]; h++)
      for (int64_t s = 0; s < exp->shape[2]; s++)
        for (int64_t d = 0; d < exp->shape[3]; d++, want_p += es) {
          const unsigned char* g = base + (b * st[0] + h * st[1] + s * st[2] + d * st[3]) * (int64_t)es;
          if (memcmp(g, want_p, es) != 0) {
            uint32_t gv = 0, wv = 0;
            memcpy(&gv, g, es);
            memcpy(&wv, want_p, es);
            fail(r, "%s: element [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] is 0x%0*x, expected 0x%0*x", what,
                 b, h, s, d, (int)(2 * es), gv, (int)(2 * es), wv);
            return 0;
          }
        }
  note_good(&r->good_tensors, exp->index);
  return 1;
}

/* ------------------------------------------------------------------ N-D tensors */


void parse_nd(replay* r, ndtensor* x) {
  memset(x, 0, sizeof(*x));
  char* t = tok(r);
  if (is(t, "-")) {
    x->unchecked = 1;
    return;
  }
  x->ndim = t ? atoi(t) : 0;
  if (x->ndim == 0) return;
  if (x->ndim < 1 || x->ndim > 4) {
    malformed(r, "an N-D tensor has 1 to 4 dimensions");
    return;
  }
  parse_tensor(r, &x->t);
  for (int d = x->ndim; d < 4 && !r->malformed; d++)
    if (x->t.kind != T_NONE && x->t.shape[d] != 1) malformed(r, "padding dimensions of an N-D tensor must be 1");
  x->view = x->t.view;
  x->view.ndim = x->ndim;
  x->view.shape = x->t.shape;
}

/* Compares a returned state view with the expected N-D tensor through a 4-D descriptor of the same memory. */
int check_nd(replay* r, const char* what, const kvc_tensor* got, const ndtensor* exp) {
  if (exp->unchecked) return 1;
  if (exp->ndim == 0) {
    if (got->ndim != 0 || got->data != NULL) {
      fail(r, "%s: expected no tensor (never written), got %d dimensions", what, (int)got->ndim);
      return 0;
    }
    return 1;
  }
  if (got->ndim != exp->ndim) {
    fail(r, "%s: expected %d dimensions, got %d", what, exp->ndim, (int)got->ndim);
    return 0;
  }
  int64_t shape[4], strides[4], st = 1; /* padding dims have size 1: compact strides stay compact */
  for (int d = 3; d >= 0; d--) {
    shape[d] = d < got->ndim ? got->shape[d] : 1;
    strides[d] = d < got->ndim && got->strides ? got->strides[d] : st;
    st *= shape[d];
  }
  kvc_tensor v4 = *got;
  v4.ndim = 4;
  v4.shape = shape;
  v4.strides = strides;
  return check_tensor(r, what, &v4, &exp->t);
}

void parse_nd_result(replay* r, const ndtensor* x, const char* op, outcome* oc, ndtensor* ret) {
  parse_outcome(r, oc);
  memset(ret, 0, sizeof(*ret));
  ret->unchecked = 1;
  if (oc->ok) parse_nd(r, ret);
  if (x->ndim == 0 && !r->malformed) {
    char what[48];
    snprintf(what, sizeof(what), "%s needs an input", op);
    malformed(r, what);
  }
}

void check_nd_result(replay* r, kvc_error* e, const outcome* oc, const kvc_tensor* out, const ndtensor* ret,
                     const char* what) {
  if (check_outcome(r, e, oc)) check_nd(r, what, out, ret);
}

void nd_free(ndtensor* a, ndtensor* b) {
  tensor_free(&a->t);
  tensor_free(&b->t);
}

void replay_nd_update(replay* r, int64_t si, const char* op, const char* what, nd_update_fn call, const void* arg) {
  ndtensor x, ret;
  parse_nd(r, &x);
  outcome oc;
  parse_nd_result(r, &x, op, &oc, &ret);
  kvc_tensor out;
  memset(&out, 0, sizeof(out));
  if (runnable(r)) check_nd_result(r, call(cache_at(r, si), &x.view, &out, arg), &oc, &out, &ret, what);
  nd_free(&x, &ret);
}

/* ------------------------------------------------------------------ results */

kvc_code code_of(const char* name) {
  static const struct {
    const char* name;
    kvc_code code;
  } codes[] = {{"INVALID_ARGUMENT", KVC_ERROR_INVALID_ARGUMENT},
               {"OUT_OF_RANGE", KVC_ERROR_OUT_OF_RANGE},
               {"DTYPE_MISMATCH", KVC_ERROR_DTYPE_MISMATCH},
               {"SHAPE_MISMATCH", KVC_ERROR_SHAPE_MISMATCH},
               {"UNSUPPORTED", KVC_ERROR_UNSUPPORTED},
               {"INVALID_STATE", KVC_ERROR_INVALID_STATE}};
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
    if (is(name, codes[i].name)) return codes[i].code;
  return -1;
}

/* An expected outcome: `ok` or `err CODE CLASS`. */

void parse_outcome(replay* r, outcome* o) {
  memset(o, 0, sizeof(*o));
  char* t = tok(r);
  if (is(t, "ok")) {
    o->ok = 1;
    return;
  }
  if (!is(t, "err")) {
    malformed(r, "expected ok or err");
    return;
  }
  o->code = code_of(tok(r));
  if (o->code < 0) malformed(r, "unknown error code");
  char* c = tok(r);
  if (c) snprintf(o->cls, sizeof(o->cls), "%s", c);
}

/* Checks a call's error against the outcome; consumes the error. Returns 1 when the call succeeded as expected. */
int check_outcome(replay* r, kvc_error* e, const outcome* o) {
  kvc_code got = kvc_error_code(e);
  if (o->ok && got != KVC_OK) {
    fail(r, "expected success, got %s: %s", kvc_code_name(got), kvc_error_message(e));
  } else if (!o->ok && got != o->code) {
    fail(r, "expected %s (transformers raises %s), got %s%s%s", kvc_code_name(o->code), o->cls,
         got == KVC_OK ? "success" : kvc_code_name(got), e ? ": " : "", e ? kvc_error_message(e) : "");
  }
  kvc_error_destroy(e);
  return o->ok && got == KVC_OK;
}

int must(replay* r, kvc_error* e, const char* call) {
  if (!e) return 1;
  fail(r, "%s failed: %s: %s", call, kvc_code_name(kvc_error_code(e)), kvc_error_message(e));
  kvc_error_destroy(e);
  return 0;
}

void check_int(replay* r, const char* what, int64_t got, vint want) {
  if (got != want.v)
    fail(r, "%s is %" PRId64 ", expected %" PRId64, what, got, want.v);
  else
    note_good(&r->good_ints, want.index);
}

/* ------------------------------------------------------------------ slots */

void slot_clear(slot* s) {
  kvc_encoder_decoder_cache_destroy(s->ed);
  kvc_cache_destroy(s->cache);
  s->ed = NULL;
  s->cache = NULL;
}

void slots_clear(replay* r) {
  for (int i = 0; i < MAX_SLOTS; i++) slot_clear(&r->slots[i]);
}

slot* slot_at(replay* r, int64_t i) {
  if (i < 0 || i >= MAX_SLOTS) {
    malformed(r, "slot out of range");
    return &r->slots[0];
  }
  return &r->slots[i];
}

/* The cache an operation on slot `i` addresses: an encoder-decoder pair's
 * self-attention cache, as transformers delegates these calls. */
kvc_cache* cache_at(replay* r, int64_t i) {
  slot* s = slot_at(r, i);
  if (s->ed) return kvc_encoder_decoder_cache_self_attention(s->ed);
  if (!s->cache && !r->case_failed && !r->malformed) fail(r, "slot %" PRId64 " holds no cache", i);
  return s->cache;
}

/* ------------------------------------------------------------------ options */


kvc_layer_kind kind_of(replay* r, const char* t) {
  if (is(t, "d")) return KVC_LAYER_DYNAMIC;
  if (is(t, "ds")) return KVC_LAYER_DYNAMIC_SLIDING;
  if (is(t, "dc")) return KVC_LAYER_DYNAMIC_CHUNKED;
  if (is(t, "s")) return KVC_LAYER_STATIC;
  if (is(t, "ss")) return KVC_LAYER_STATIC_SLIDING;
  if (is(t, "sc")) return KVC_LAYER_STATIC_CHUNKED;
  if (is(t, "di")) return KVC_LAYER_DYNAMIC_INDEXED;
  if (is(t, "si")) return KVC_LAYER_STATIC_INDEXED;
  if (is(t, "u")) return KVC_LAYER_DUMMY;
  malformed(r, "unknown layer kind");
  return KVC_LAYER_DYNAMIC;
}

/* The presets a vector names, each in the family (PRESETS_*) whose create operation accepts it. */
static const struct {
  const char* name;
  kvc_preset preset;
  unsigned families;
} PRESET_NAMES[] = {{"dynamic", KVC_PRESET_DYNAMIC, PRESETS_ATTENTION | PRESETS_LINEAR},
                    {"static", KVC_PRESET_STATIC, PRESETS_ATTENTION | PRESETS_LINEAR},
                    {"sliding_window", KVC_PRESET_SLIDING_WINDOW, PRESETS_ATTENTION},
                    {"hybrid", KVC_PRESET_HYBRID, PRESETS_ATTENTION},
                    {"hybrid_chunked", KVC_PRESET_HYBRID_CHUNKED, PRESETS_ATTENTION},
                    {"mamba", KVC_PRESET_MAMBA, PRESETS_LINEAR},
                    {"hybrid_mamba", KVC_PRESET_HYBRID_MAMBA, PRESETS_LINEAR}};

kvc_preset preset_of(replay* r, const char* name, unsigned family) {
  for (size_t i = 0; i < sizeof(PRESET_NAMES) / sizeof(PRESET_NAMES[0]); i++)
    if ((PRESET_NAMES[i].families & family) && is(name, PRESET_NAMES[i].name)) return PRESET_NAMES[i].preset;
  malformed(r, "unknown preset");
  return (kvc_preset)-1;
}

/* TYPES is `-` or one letter a layer; the i-th letter of `letters` is layer type i (f s c l h w u i); a space
 * in `letters` is a type the operation does not take (no token holds a space). */
void parse_layer_types(replay* r, const char* letters, kvc_model_config* cfg, kvc_layer_type* out) {
  char* types = tok(r);
  if (!types || is(types, "-")) return;
  size_t n = strlen(types);
  if (n != cfg->num_hidden_layers || n > MAX_LAYERS) {
    malformed(r, "layer_types length");
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const char* at = strchr(letters, types[i]);
    if (!at || types[i] == ' ') {
      malformed(r, "unknown layer type letter");
      return;
    }
    out[i] = KVC_LAYER_TYPE_FULL_ATTENTION + (kvc_layer_type)(at - letters);
  }
  cfg->layer_types = out;
}

/* The layer types `create` and `ocreate` take: full, sliding, chunked, dummy (`u`) and indexed attention (`i`);
 * the linear ones are `lcreate`'s. */
#define ATTENTION_TYPE_LETTERS "fsc   ui"

/* `lazy` | `preset NAME MAXLEN NL SW CHUNK SHARED PATTERN TYPES` | `layers N (KIND W M)*` */
void parse_options(replay* r, optspec* o) {
  memset(o, 0, sizeof(*o));
  kvc_cache_options_init(&o->options);
  kvc_model_config_init(&o->config);
  char* t = tok(r);
  if (is(t, "lazy")) return;
  if (is(t, "preset")) {
    o->options.preset = preset_of(r, tok(r), PRESETS_ATTENTION);
    o->options.max_cache_len = num(r);
    o->config.num_hidden_layers = (uint32_t)num(r);
    o->config.sliding_window = num(r);
    o->config.attention_chunk_size = num(r);
    o->config.num_kv_shared_layers = (uint32_t)num(r);
    o->config.sliding_window_pattern = (uint32_t)num(r);
    parse_layer_types(r, ATTENTION_TYPE_LETTERS, &o->config, o->types);
    if (o->config.num_hidden_layers) o->options.config = &o->config;
    return;
  }
  if (is(t, "layers")) {
    int64_t n = num(r);
    if (n < 1 || n > MAX_LAYERS) {
      malformed(r, "layer count");
      return;
    }
    for (int64_t i = 0; i < n; i++) {
      kvc_layer_options_init(&o->layers[i]);
      o->layers[i].kind = kind_of(r, tok(r));
      o->layers[i].window = num(r);
      o->layers[i].max_cache_len = num(r);
    }
    o->options.preset = KVC_PRESET_CUSTOM;
    o->options.num_layers = (uint32_t)n;
    o->options.layers = o->layers;
    return;
  }
  malformed(r, "unknown cache options");
}

int parse_list(replay* r, int64_t* out, int64_t* count, int64_t max, const char* what) {
  *count = num(r);
  if (*count < 1 || *count > max) {
    malformed(r, what);
    return 0;
  }
  for (int64_t i = 0; i < *count; i++) out[i] = num(r);
  return 1;
}

int parse_indices(replay* r, int64_t* idx, int64_t* count) { return parse_list(r, idx, count, 64, "index count"); }

void replay_layer_query(replay* r, layer_query_fn query, const char* call, const char* what) {
  int64_t si = num(r), layer = num(r);
  vint want = expected_num(r);
  if (!runnable(r)) return;
  int64_t got = -12345;
  if (must(r, query(r, si, layer, &got), call)) check_int(r, what, got, want);
}

int32_t layer_or_all(int64_t layer) { return layer < 0 ? KVC_ALL_LAYERS : (int32_t)layer; }

/* ------------------------------------------------------------------ shared steps */

int runnable(const replay* r) { return !r->case_failed && !r->malformed; }

void create_in(replay* r, slot* s, const kvc_cache_options* o) {
  slot_clear(s);
  kvc_cache_options with_release = *o;
  with_release.transformers_release = r->transformers_release;
  must(r, kvc_cache_create(&with_release, &s->cache), "kvc_cache_create");
}

/* `-` or `p N p1..pN`, the legacy cache_position protocol; N from min_count to 256. */
void parse_positions(replay* r, int64_t min_count, int64_t pos[256], const int64_t** out, uint32_t* len) {
  char* p = tok(r);
  if (is(p, "p")) {
    int64_t n = num(r);
    if (n < min_count || n > 256) malformed(r, "position count");
    for (int64_t i = 0; i < n && i < 256; i++) pos[i] = num(r);
    *out = pos;
    *len = (uint32_t)n;
  } else if (!is(p, "-")) {
    malformed(r, "expected - or p");
  }
}

void parse_kv_update(replay* r, kv_update* u) {
  memset(u, 0, sizeof(*u));
  parse_tensor(r, &u->k);
  parse_tensor(r, &u->v);
}

void kv_update_free(kv_update* u) {
  tensor_free(&u->k);
  tensor_free(&u->v);
  tensor_free(&u->rk);
  tensor_free(&u->rv);
}

void finish_kv_update(replay* r, int64_t si, int64_t layer, kv_update* u, const kvc_update_options* uo) {
  parse_kv_result(r, &u->o, &u->rk, &u->rv);
  if (runnable(r))
    check_kv_result(r, kvc_cache_update(cache_at(r, si), (uint32_t)layer, &u->k.view, &u->v.view, uo, &u->out),
                    &u->o, &u->out, &u->rk, &u->rv, "returned");
  kv_update_free(u);
}

void parse_kv_result(replay* r, outcome* o, vtensor* k, vtensor* v) {
  parse_outcome(r, o);
  memset(k, 0, sizeof(*k));
  memset(v, 0, sizeof(*v));
  if (o->ok) {
    parse_tensor(r, k);
    parse_tensor(r, v);
  }
}

int check_kv_result(replay* r, kvc_error* e, const outcome* o, const kvc_kv* got, const vtensor* k,
                    const vtensor* v, const char* what) {
  char wk[48], wv[48];
  snprintf(wk, sizeof(wk), "%s keys", what);
  snprintf(wv, sizeof(wv), "%s values", what);
  return check_outcome(r, e, o) && check_tensor(r, wk, &got->key, k) && check_tensor(r, wv, &got->value, v);
}

vint parse_outcome_num(replay* r, outcome* o) {
  parse_outcome(r, o);
  vint want = {0, -1};
  if (o->ok) want = expected_num(r);
  return want;
}

int64_t layer_count(replay* r) {
  int64_t n = num(r);
  if (n < 0 || n > MAX_LAYERS) {
    malformed(r, "layer count");
    return -1;
  }
  return n;
}

/* An expected layer count that is also the number of per-layer values that
 * follow it. The parse must read the recorded count (*recorded); only the
 * comparison takes the expected one, which the self-check may corrupt: a
 * corrupted count must fail the layer-count comparison, not desynchronize
 * the parse (#959). */
vint expected_layer_count(replay* r, int64_t* recorded) {
  *recorded = layer_count(r);
  return expect(r, *recorded);
}

int layer_info_of(replay* r, kvc_cache* c, int64_t i, kvc_layer_info* info) {
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  return must(r, kvc_cache_layer_info(c, (uint32_t)i, info), "kvc_cache_layer_info");
}

void check_layer_int(replay* r, int64_t i, const char* field, int64_t got, vint want) {
  char what[64];
  snprintf(what, sizeof(what), "layer %" PRId64 " %s", i, field);
  check_int(r, what, got, want);
}

int check_layer_max_length(replay* r, kvc_cache* c, int64_t i, vint want) {
  int64_t m = 0;
  if (!must(r, kvc_cache_max_length(c, (int32_t)i, &m), "kvc_cache_max_length")) return 0;
  check_layer_int(r, i, "max_length", m, want);
  return 1;
}

void each_layer(replay* r, int64_t si, vint n, layer_row row, const void* arg) {
  if (!runnable(r)) return;
  kvc_cache* c = cache_at(r, si);
  check_int(r, "number of layers", kvc_cache_num_layers(c), n);
  for (int64_t i = 0; i < n.v && !r->case_failed; i++) {
    kvc_layer_info info;
    if (!layer_info_of(r, c, i, &info) || !row(r, c, i, &info, arg)) return;
  }
}

typedef struct layout_rows {
  vint kinds[MAX_LAYERS], windows[MAX_LAYERS], maxlens[MAX_LAYERS], linear[MAX_LAYERS];
  int with_linear;
} layout_rows;

static int layout_row(replay* r, kvc_cache* c, int64_t i, const kvc_layer_info* info, const void* arg) {
  const layout_rows* x = arg;
  check_layer_int(r, i, "kind", info->kind, x->kinds[i]);
  check_layer_int(r, i, "window", info->window, x->windows[i]);
  if (x->with_linear) check_layer_int(r, i, "is_linear", info->is_linear, x->linear[i]);
  return check_layer_max_length(r, c, i, x->maxlens[i]);
}

void replay_layout(replay* r, kvc_layer_kind (*kind)(replay*, const char*), int with_linear) {
  int64_t si = num(r);
  int64_t count;
  vint n = expected_layer_count(r, &count);
  layout_rows x;
  x.with_linear = with_linear;
  for (int64_t i = 0; i < count; i++) {
    x.kinds[i].v = kind(r, tok(r));
    x.kinds[i].index = -1;
    x.windows[i] = expected_num(r);
    x.maxlens[i] = expected_num(r);
    if (with_linear) x.linear[i] = expected_num(r);
  }
  each_layer(r, si, n, layout_row, &x);
}
