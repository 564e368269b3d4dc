/*
 * replay.c: replays the conformance vectors (recorded from transformers' own
 * cache classes by generate.py) through the public kvcache ABI.
 *
 *   replay VECTORS_DIR            replay every *.kvv file, then self-check
 *   replay --self-test VECTORS_DIR  only the self-check
 *
 * Every returned and stored view must have the recorded shape and identical
 * bytes, every integer (lengths, mask sizes, layer kinds) must be equal and
 * every recorded error must come back with the recorded code. The format is
 * documented in docs/conformance.md.
 *
 * The self-check proves the replay can fail: it replays one file again with
 * one expected tensor byte flipped, then with one expected integer changed,
 * and requires both runs to report a mismatch.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, opendir */

#include <dirent.h>
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
vint expected_num(replay* r) {
  vint e = {num(r), r->ints_seen++};
  if (e.index == r->corrupt_int) e.v += 1;
  return e;
}

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

static void slots_clear(replay* r) {
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
  malformed(r, "unknown layer kind");
  return KVC_LAYER_DYNAMIC;
}

/* `lazy` | `preset NAME MAXLEN NL SW CHUNK SHARED PATTERN TYPES` | `layers N (KIND W M)*` */
void parse_options(replay* r, optspec* o) {
  memset(o, 0, sizeof(*o));
  kvc_cache_options_init(&o->options);
  kvc_model_config_init(&o->config);
  char* t = tok(r);
  if (is(t, "lazy")) return;
  if (is(t, "preset")) {
    char* name = tok(r);
    static const struct {
      const char* name;
      kvc_preset preset;
    } presets[] = {{"dynamic", KVC_PRESET_DYNAMIC},
                   {"static", KVC_PRESET_STATIC},
                   {"sliding_window", KVC_PRESET_SLIDING_WINDOW},
                   {"hybrid", KVC_PRESET_HYBRID},
                   {"hybrid_chunked", KVC_PRESET_HYBRID_CHUNKED}};
    o->options.preset = -1;
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
      if (is(name, presets[i].name)) o->options.preset = presets[i].preset;
    if (o->options.preset < 0) malformed(r, "unknown preset");
    o->options.max_cache_len = num(r);
    o->config.num_hidden_layers = (uint32_t)num(r);
    o->config.sliding_window = num(r);
    o->config.attention_chunk_size = num(r);
    o->config.num_kv_shared_layers = (uint32_t)num(r);
    o->config.sliding_window_pattern = (uint32_t)num(r);
    char* types = tok(r);
    if (types && !is(types, "-")) {
      size_t n = strlen(types);
      if (n != o->config.num_hidden_layers || n > MAX_LAYERS) malformed(r, "layer_types length");
      for (size_t i = 0; i < n && i < MAX_LAYERS; i++)
        o->types[i] = types[i] == 'f'   ? KVC_LAYER_TYPE_FULL_ATTENTION
                      : types[i] == 's' ? KVC_LAYER_TYPE_SLIDING_ATTENTION
                                        : KVC_LAYER_TYPE_CHUNKED_ATTENTION;
      o->config.layer_types = o->types;
    }
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

/* ------------------------------------------------------------------ operations */

static void op_create(replay* r) {
  slot* s = slot_at(r, num(r));
  optspec o;
  parse_options(r, &o);
  if (r->case_failed || r->malformed) return;
  slot_clear(s);
  must(r, kvc_cache_create(&o.options, &s->cache), "kvc_cache_create");
}

static void op_tensors(replay* r) {
  slot* s = slot_at(r, num(r));
  optspec o;
  parse_options(r, &o);
  int64_t n = num(r);
  if (n < 1 || n > MAX_LAYERS) {
    malformed(r, "layer count");
    return;
  }
  vtensor ks[MAX_LAYERS], vs[MAX_LAYERS];
  kvc_tensor kt[MAX_LAYERS], vt[MAX_LAYERS];
  for (int64_t i = 0; i < n; i++) {
    parse_tensor(r, &ks[i]);
    parse_tensor(r, &vs[i]);
    kt[i] = ks[i].view;
    vt[i] = vs[i].view;
  }
  if (!r->case_failed && !r->malformed) {
    slot_clear(s);
    must(r, kvc_cache_create_from_tensors(&o.options, (uint32_t)n, kt, vt, &s->cache),
         "kvc_cache_create_from_tensors");
  }
  for (int64_t i = 0; i < n; i++) {
    tensor_free(&ks[i]);
    tensor_free(&vs[i]);
  }
}

static void op_layout(replay* r) {
  int64_t si = num(r);
  /* The count is read as structure, not as a corruptible expectation: the self-check corrupting it would
   * desynchronize the parse instead of testing the comparison. */
  vint n = {num(r), -1};
  vint kinds[MAX_LAYERS], windows[MAX_LAYERS], maxlens[MAX_LAYERS];
  if (n.v < 0 || n.v > MAX_LAYERS) {
    malformed(r, "layer count");
    return;
  }
  for (int64_t i = 0; i < n.v; i++) {
    kinds[i].v = kind_of(r, tok(r));
    kinds[i].index = -1;
    windows[i] = expected_num(r);
    maxlens[i] = expected_num(r);
  }
  if (r->case_failed || r->malformed) return;
  kvc_cache* c = cache_at(r, si);
  check_int(r, "number of layers", kvc_cache_num_layers(c), n);
  for (int64_t i = 0; i < n.v && !r->case_failed; i++) {
    kvc_layer_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    if (!must(r, kvc_cache_layer_info(c, (uint32_t)i, &info), "kvc_cache_layer_info")) return;
    char what[64];
    snprintf(what, sizeof(what), "layer %" PRId64 " kind", i);
    check_int(r, what, info.kind, kinds[i]);
    snprintf(what, sizeof(what), "layer %" PRId64 " window", i);
    check_int(r, what, info.window, windows[i]);
    int64_t m = 0;
    if (!must(r, kvc_cache_max_length(c, (int32_t)i, &m), "kvc_cache_max_length")) return;
    snprintf(what, sizeof(what), "layer %" PRId64 " max_length", i);
    check_int(r, what, m, maxlens[i]);
  }
}

static void op_nlayers(replay* r) {
  int64_t si = num(r);
  vint n = expected_num(r);
  if (r->case_failed || r->malformed) return;
  check_int(r, "number of layers", kvc_cache_num_layers(cache_at(r, si)), n);
}

static void op_update(replay* r) {
  int64_t si = num(r), layer = num(r);
  vtensor k, v, rk, rv;
  parse_tensor(r, &k);
  parse_tensor(r, &v);
  int64_t pos[256];
  kvc_update_options uo;
  kvc_update_options_init(&uo);
  char* p = tok(r);
  if (is(p, "p")) {
    int64_t n = num(r);
    if (n < 1 || n > 256) malformed(r, "position count");
    for (int64_t i = 0; i < n && i < 256; i++) pos[i] = num(r);
    uo.cache_position = pos;
    uo.cache_position_length = (uint32_t)n;
  } else if (!is(p, "-")) {
    malformed(r, "expected - or p");
  }
  outcome o;
  parse_outcome(r, &o);
  memset(&rk, 0, sizeof(rk));
  memset(&rv, 0, sizeof(rv));
  if (o.ok) {
    parse_tensor(r, &rk);
    parse_tensor(r, &rv);
  }
  if (!r->case_failed && !r->malformed) {
    kvc_kv out;
    memset(&out, 0, sizeof(out));
    kvc_error* e = kvc_cache_update(cache_at(r, si), (uint32_t)layer, &k.view, &v.view, &uo, &out);
    if (check_outcome(r, e, &o)) {
      if (check_tensor(r, "returned keys", &out.key, &rk)) check_tensor(r, "returned values", &out.value, &rv);
    }
  }
  tensor_free(&k);
  tensor_free(&v);
  tensor_free(&rk);
  tensor_free(&rv);
}

static void op_seqlen(replay* r) {
  int64_t si = num(r), layer = num(r);
  vint want = expected_num(r);
  if (r->case_failed || r->malformed) return;
  int64_t got = -12345;
  if (must(r, kvc_cache_seq_length(cache_at(r, si), (uint32_t)layer, &got), "kvc_cache_seq_length"))
    check_int(r, "seq_length", got, want);
}

static void op_maxlen(replay* r) {
  int64_t si = num(r), layer = num(r);
  vint want = expected_num(r);
  if (r->case_failed || r->malformed) return;
  int64_t got = -12345;
  if (must(r, kvc_cache_max_length(cache_at(r, si), layer < 0 ? KVC_ALL_LAYERS : (int32_t)layer, &got),
           "kvc_cache_max_length"))
    check_int(r, "max_length", got, want);
}

static void op_usable(replay* r) {
  int64_t si = num(r), new_len = num(r), layer = num(r);
  vint want = expected_num(r);
  if (r->case_failed || r->malformed) return;
  int64_t got = -12345;
  if (must(r, kvc_cache_usable_length(cache_at(r, si), new_len, (uint32_t)layer, &got), "kvc_cache_usable_length"))
    check_int(r, "usable_length", got, want);
}

static void op_mask(replay* r) {
  int64_t si = num(r), q = num(r), layer = num(r);
  vint want_len = expected_num(r), want_off = expected_num(r);
  if (r->case_failed || r->malformed) return;
  int64_t len = -12345, off = -12345;
  if (must(r, kvc_cache_mask_sizes(cache_at(r, si), q, (uint32_t)layer, &len, &off), "kvc_cache_mask_sizes")) {
    check_int(r, "mask kv_length", len, want_len);
    check_int(r, "mask kv_offset", off, want_off);
  }
}

static void op_view(replay* r, int cross) {
  int64_t si = num(r), layer = num(r);
  outcome o;
  parse_outcome(r, &o);
  vtensor k, v;
  memset(&k, 0, sizeof(k));
  memset(&v, 0, sizeof(v));
  if (o.ok) {
    parse_tensor(r, &k);
    parse_tensor(r, &v);
  }
  if (!r->case_failed && !r->malformed) {
    kvc_cache* c = cross ? kvc_encoder_decoder_cache_cross_attention(slot_at(r, si)->ed) : cache_at(r, si);
    kvc_kv out;
    memset(&out, 0, sizeof(out));
    if (check_outcome(r, kvc_cache_layer_view(c, (uint32_t)layer, &out), &o))
      if (check_tensor(r, "stored keys", &out.key, &k)) check_tensor(r, "stored values", &out.value, &v);
  }
  tensor_free(&k);
  tensor_free(&v);
}

static void op_crop(replay* r) {
  int64_t si = num(r), x = num(r);
  outcome o;
  parse_outcome(r, &o);
  if (r->case_failed || r->malformed) return;
  slot* s = slot_at(r, si);
  check_outcome(r, s->ed ? kvc_encoder_decoder_cache_crop(s->ed, x) : kvc_cache_crop(s->cache, x), &o);
}

static void op_record(replay* r) {
  int64_t si = num(r);
  if (r->case_failed || r->malformed) return;
  must(r, kvc_cache_activate_past_recording(cache_at(r, si)), "kvc_cache_activate_past_recording");
}

int parse_indices(replay* r, int64_t* idx, int64_t* count) {
  *count = num(r);
  if (*count < 1 || *count > 64) {
    malformed(r, "index count");
    return 0;
  }
  for (int64_t i = 0; i < *count; i++) idx[i] = num(r);
  return 1;
}

static void op_reorder(replay* r) {
  int64_t si = num(r), idx[64], n;
  if (!parse_indices(r, idx, &n)) return;
  outcome o;
  parse_outcome(r, &o);
  if (r->case_failed || r->malformed) return;
  slot* s = slot_at(r, si);
  check_outcome(r, s->ed ? kvc_encoder_decoder_cache_reorder(s->ed, idx, (size_t)n)
                         : kvc_cache_reorder(s->cache, idx, (size_t)n),
                &o);
}

static void op_repeat(replay* r) {
  int64_t si = num(r), rep = num(r);
  outcome o;
  parse_outcome(r, &o);
  if (r->case_failed || r->malformed) return;
  slot* s = slot_at(r, si);
  check_outcome(r, s->ed ? kvc_encoder_decoder_cache_batch_repeat_interleave(s->ed, rep)
                         : kvc_cache_batch_repeat_interleave(s->cache, rep),
                &o);
}

static void op_select(replay* r) {
  int64_t si = num(r), idx[64], n;
  if (!parse_indices(r, idx, &n)) return;
  outcome o;
  parse_outcome(r, &o);
  if (r->case_failed || r->malformed) return;
  slot* s = slot_at(r, si);
  check_outcome(r, s->ed ? kvc_encoder_decoder_cache_batch_select_indices(s->ed, idx, (size_t)n)
                         : kvc_cache_batch_select_indices(s->cache, idx, (size_t)n),
                &o);
}

static void op_reset(replay* r) {
  int64_t si = num(r);
  if (r->case_failed || r->malformed) return;
  slot* s = slot_at(r, si);
  must(r, s->ed ? kvc_encoder_decoder_cache_reset(s->ed) : kvc_cache_reset(s->cache), "reset");
}

static void op_clone(replay* r) {
  slot* d = slot_at(r, num(r));
  slot* s = slot_at(r, num(r));
  if (r->case_failed || r->malformed) return;
  slot_clear(d);
  if (s->ed)
    must(r, kvc_encoder_decoder_cache_clone(s->ed, &d->ed), "kvc_encoder_decoder_cache_clone");
  else
    must(r, kvc_cache_clone(s->cache, &d->cache), "kvc_cache_clone");
}

static void op_drop(replay* r) {
  slot* s = slot_at(r, num(r));
  if (r->case_failed || r->malformed) return;
  slot_clear(s);
}

static void op_early(replay* r) {
  int64_t si = num(r);
  kvc_init_options io;
  kvc_init_options_init(&io);
  io.batch_size = num(r);
  io.dtype = parse_dtype(r);
  int64_t heads[MAX_LAYERS], dims[MAX_LAYERS];
  char* form = tok(r);
  if (is(form, "u")) {
    io.num_kv_heads = num(r);
    io.k_head_dim = num(r);
  } else if (is(form, "l")) {
    int64_t n = num(r);
    if (n < 1 || n > MAX_LAYERS) {
      malformed(r, "layer count");
      return;
    }
    for (int64_t i = 0; i < n; i++) {
      heads[i] = num(r);
      dims[i] = num(r);
    }
    io.num_kv_heads = heads[0];
    io.k_head_dim = dims[0];
    io.num_kv_heads_per_layer = heads;
    io.head_dim_per_layer = dims;
  } else {
    malformed(r, "expected u or l");
  }
  if (r->case_failed || r->malformed) return;
  must(r, kvc_cache_early_initialization(cache_at(r, si), &io), "kvc_cache_early_initialization");
}

static void op_split(replay* r) {
  int64_t si = num(r), full = num(r), size = num(r), count = num(r), dst[MAX_SLOTS];
  if (count < 1 || count > MAX_SLOTS) {
    malformed(r, "split count");
    return;
  }
  for (int64_t i = 0; i < count; i++) dst[i] = num(r);
  if (r->case_failed || r->malformed) return;
  slot* s = slot_at(r, si);
  size_t got = 0;
  if (s->ed) {
    kvc_encoder_decoder_cache* out[MAX_SLOTS];
    if (!must(r, kvc_encoder_decoder_cache_batch_split(s->ed, full, size, out, MAX_SLOTS, &got),
              "kvc_encoder_decoder_cache_batch_split"))
      return;
    for (size_t i = 0; i < got; i++) {
      if ((int64_t)i < count) {
        slot_clear(slot_at(r, dst[i]));
        slot_at(r, dst[i])->ed = out[i];
      } else {
        kvc_encoder_decoder_cache_destroy(out[i]);
      }
    }
  } else {
    kvc_cache* out[MAX_SLOTS];
    if (!must(r, kvc_cache_batch_split(s->cache, full, size, out, MAX_SLOTS, &got), "kvc_cache_batch_split"))
      return;
    for (size_t i = 0; i < got; i++) {
      if ((int64_t)i < count) {
        slot_clear(slot_at(r, dst[i]));
        slot_at(r, dst[i])->cache = out[i];
      } else {
        kvc_cache_destroy(out[i]);
      }
    }
  }
  vint want = {count, -1};
  check_int(r, "number of splits", (int64_t)got, want);
}

static void op_stack(replay* r) {
  int64_t di = num(r), n = num(r), src[MAX_SLOTS];
  if (n < 1 || n > MAX_SLOTS) {
    malformed(r, "split count");
    return;
  }
  for (int64_t i = 0; i < n; i++) src[i] = num(r);
  if (r->case_failed || r->malformed) return;
  slot* d = slot_at(r, di);
  if (slot_at(r, src[0])->ed) {
    const kvc_encoder_decoder_cache* parts[MAX_SLOTS];
    for (int64_t i = 0; i < n; i++) parts[i] = slot_at(r, src[i])->ed;
    kvc_encoder_decoder_cache* out = NULL;
    if (must(r, kvc_encoder_decoder_cache_from_batch_splits(parts, (size_t)n, &out),
             "kvc_encoder_decoder_cache_from_batch_splits")) {
      slot_clear(d);
      d->ed = out;
    }
  } else {
    const kvc_cache* parts[MAX_SLOTS];
    for (int64_t i = 0; i < n; i++) parts[i] = slot_at(r, src[i])->cache;
    kvc_cache* out = NULL;
    if (must(r, kvc_cache_from_batch_splits(parts, (size_t)n, &out), "kvc_cache_from_batch_splits")) {
      slot_clear(d);
      d->cache = out;
    }
  }
}

static void op_edcreate(replay* r) {
  slot* e = slot_at(r, num(r));
  slot* a = slot_at(r, num(r));
  slot* x = slot_at(r, num(r));
  if (r->case_failed || r->malformed) return;
  kvc_encoder_decoder_cache* ed = NULL;
  if (!must(r, kvc_encoder_decoder_cache_create(a->cache, x->cache, &ed), "kvc_encoder_decoder_cache_create"))
    return;
  a->cache = x->cache = NULL; /* owned by the pair now */
  slot_clear(e);
  e->ed = ed;
}

static void op_cross(replay* r) {
  int64_t si = num(r), layer = num(r);
  vtensor k, v, rk, rv;
  parse_tensor(r, &k);
  parse_tensor(r, &v);
  outcome o;
  parse_outcome(r, &o);
  memset(&rk, 0, sizeof(rk));
  memset(&rv, 0, sizeof(rv));
  if (o.ok) {
    parse_tensor(r, &rk);
    parse_tensor(r, &rv);
  }
  if (!r->case_failed && !r->malformed) {
    kvc_kv out;
    memset(&out, 0, sizeof(out));
    kvc_error* e = kvc_encoder_decoder_cache_update_cross(slot_at(r, si)->ed, (uint32_t)layer,
                                                          k.kind == T_DATA ? &k.view : NULL,
                                                          v.kind == T_DATA ? &v.view : NULL, &out);
    if (check_outcome(r, e, &o))
      if (check_tensor(r, "cross keys", &out.key, &rk)) check_tensor(r, "cross values", &out.value, &rv);
  }
  tensor_free(&k);
  tensor_free(&v);
  tensor_free(&rk);
  tensor_free(&rv);
}

static void op_isupd(replay* r) {
  int64_t si = num(r), layer = num(r);
  vint want = expected_num(r);
  if (r->case_failed || r->malformed) return;
  int32_t got = -1;
  if (must(r, kvc_encoder_decoder_cache_is_updated(slot_at(r, si)->ed, (uint32_t)layer, &got),
           "kvc_encoder_decoder_cache_is_updated"))
    check_int(r, "is_updated", got, want);
}

/* ------------------------------------------------------------------ files */

static const replay_op OPS[] = {{"create", op_create},   {"tensors", op_tensors}, {"layout", op_layout}, {"nlayers", op_nlayers},
           {"update", op_update},   {"seqlen", op_seqlen},   {"maxlen", op_maxlen}, {"mask", op_mask}, {"usable", op_usable},
           {"crop", op_crop},       {"record", op_record},   {"reorder", op_reorder}, {"repeat", op_repeat},
           {"select", op_select},   {"reset", op_reset},     {"clone", op_clone},   {"drop", op_drop},
           {"early", op_early},     {"split", op_split},     {"stack", op_stack},   {"edcreate", op_edcreate},
           {"cross", op_cross},     {"isupd", op_isupd}};

static void op_view_self(replay* r) { op_view(r, 0); }
static void op_view_cross(replay* r) { op_view(r, 1); }

/* Replays one file held in `text` (modified in place). */
static void replay_text(replay* r, char* text, size_t len) {
  r->cur = text;
  r->end = text + len;
  char* magic = tok(r);
  char* ver = tok(r);
  if (!is(magic, "KVCONF") || !is(ver, "1")) {
    malformed(r, "not a KVCONF 1 file");
    return;
  }
  while (!r->malformed) {
    char* t = tok(r);
    if (!t || is(t, "end")) break;
    if (is(t, "meta")) { /* the rest of the line: producer versions */
      while (r->cur < r->end && *r->cur != '\n') r->cur++;
      continue;
    }
    if (is(t, "case")) {
      slots_clear(r);
      r->case_failed = 0;
      char* name = tok(r);
      snprintf(r->case_name, sizeof(r->case_name), "%s", name ? name : "?");
      continue;
    }
    r->op++;
    r->op_name = t;
    void (*fn)(replay*) = NULL;
    if (is(t, "view")) fn = op_view_self;
    if (is(t, "xview")) fn = op_view_cross;
    for (size_t i = 0; !fn && i < sizeof(OPS) / sizeof(OPS[0]); i++)
      if (is(t, OPS[i].name)) fn = OPS[i].run;
    static const replay_op* const FAMILIES[] = {replay_ops_quantized, replay_ops_sink, replay_ops_linear,
                                                replay_ops_offload};
    for (size_t f = 0; !fn && f < sizeof(FAMILIES) / sizeof(FAMILIES[0]); f++)
      for (const replay_op* op = FAMILIES[f]; !fn && op->name; op++)
        if (is(t, op->name)) fn = op->run;
    if (!fn) {
      malformed(r, "unknown operation");
      break;
    }
    int was_failed = r->case_failed;
    fn(r);
    if (!r->case_failed && !was_failed && !r->malformed) r->checked++;
  }
  slots_clear(r);
}

static char* read_file(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[n] = '\0';
    *len = (size_t)n;
  }
  return buf;
}

/* Replays a file; returns the replay's counters. */
static replay run_file(const char* path, const char* display, int quiet, long corrupt_tensor, long corrupt_int) {
  replay r;
  memset(&r, 0, sizeof(r));
  r.file = display;
  r.quiet = quiet;
  r.corrupt_tensor = corrupt_tensor;
  r.corrupt_int = corrupt_int;
  size_t len = 0;
  char* text = read_file(path, &len);
  if (!text) {
    fprintf(stderr, "cannot read %s\n", path);
    r.malformed = 1;
    return r;
  }
  replay_text(&r, text, len);
  free(text);
  return r;
}

static int cmp_names(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

static size_t list_vectors(const char* dir, char** names, size_t cap) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  size_t n = 0;
  struct dirent* e;
  while ((e = readdir(d)) && n < cap) {
    size_t l = strlen(e->d_name);
    if (l > 4 && strcmp(e->d_name + l - 4, ".kvv") == 0) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof(char*), cmp_names);
  return n;
}

/* Corrupts one expected tensor, then one expected integer, of `path` and
 * requires the replay to notice each time. */
static void replay_free(replay* r) {
  free(r->good_tensors.at);
  free(r->good_ints.at);
}

/* Corrupts one expected tensor, then one expected integer, among those a
 * clean replay of `path` checked successfully, and requires the replay to
 * notice each time. */
static int self_check(const char* path, const char* name) {
  replay clean = run_file(path, name, 1, -1, -1);
  if (clean.good_tensors.n == 0 || clean.good_ints.n == 0) {
    fprintf(stderr, "self-check: %s has no successfully checked tensor or integer to corrupt\n", name);
    replay_free(&clean);
    return 0;
  }
  long ti = clean.good_tensors.at[clean.good_tensors.n / 2], ii = clean.good_ints.at[clean.good_ints.n / 2];
  replay t = run_file(path, name, 1, ti, -1);
  replay i = run_file(path, name, 1, -1, ii);
  int t_ok = t.failed > clean.failed, i_ok = i.failed > clean.failed;
  printf("self-check on %s: flipped a byte of expected tensor #%ld -> %s; changed expected integer #%ld -> %s\n",
         name, ti, t_ok ? "detected" : "NOT DETECTED", ii, i_ok ? "detected" : "NOT DETECTED");
  replay_free(&clean);
  replay_free(&t);
  replay_free(&i);
  return t_ok && i_ok;
}

int main(int argc, char** argv) {
  int self_test_only = argc == 3 && strcmp(argv[1], "--self-test") == 0;
  if (argc != 2 && !self_test_only) {
    fprintf(stderr, "usage: %s [--self-test] VECTORS_DIR\n", argv[0]);
    return 2;
  }
  const char* dir = argv[argc - 1];
  char* names[MAX_FILES];
  size_t n = list_vectors(dir, names, MAX_FILES);
  if (n == 0) {
    fprintf(stderr, "no *.kvv vector files in %s\n", dir);
    return 1;
  }
  printf("kvcache %s replaying %zu vector files from %s\n", kvc_version_string(), n, dir);
  long total = 0, files_failed = 0;
  char path[4096];
  for (size_t i = 0; i < n && !self_test_only; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    replay r = run_file(path, names[i], 0, -1, -1);
    printf("%-32s %6ld ops checked, %ld failed%s\n", names[i], r.checked, r.failed,
           r.malformed ? " (MALFORMED FILE)" : "");
    replay_free(&r);
    total += r.checked;
    if (r.failed || r.malformed) files_failed++;
  }
  snprintf(path, sizeof(path), "%s/%s", dir, names[0]);
  int self_ok = self_check(path, names[0]);
  if (!self_test_only) {
    printf("total: %ld ops checked\n", total);
    printf("conformance: %ld passed, %ld failed\n", (long)n - files_failed, files_failed);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  if (!self_ok) fprintf(stderr, "self-check FAILED: the replay did not detect a corrupted vector\n");
  return files_failed == 0 && self_ok ? 0 : 1;
}
