/*
 * core/persist/fingerprint.c: the model fingerprint of a cache file
 * (docs/file-format.md, 'FPRT'): the cache's settings and every layer as
 * the options that rebuild it (kvc_kind.describe gives a kind's own ones),
 * with its dtype, heads and head dims once it holds data. kvc_cache_restore
 * compares it field by field, so a refusal names what differs.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../pool/sha256.h"
#include "persist_internal.h"

enum { PRINT_VALUES = 19 }; /* int64 values of one layer print */

/* The layer print's values in file order, and their names in messages. */
static const char* const PRINT_NAMES[PRINT_VALUES] = {
    "kind",         "window",          "max_cache_len", "num_sink_tokens", "num_states",
    "conv_kernel_size", "quantizer",   "quant mode",    "nbits",           "axis_key",
    "axis_value",   "q_group_size",    "residual_length", "quantizer present", "initialized",
    "dtype",        "num_kv_heads",    "k_head_dim",    "v_head_dim"};
enum { P_KIND = 0, P_HAS_QUANT = 13, P_INITIALIZED = 14, P_GEOMETRY = 15 };

static void print_values(const kvc_layer_options* spec, const int64_t geometry[5], int64_t v[PRINT_VALUES]) {
  const kvc_quant_options* q = spec->quant;
  const int64_t head[6] = {spec->kind, spec->window, spec->max_cache_len, spec->num_sink_tokens, spec->num_states,
                           spec->conv_kernel_size};
  memcpy(v, head, sizeof head);
  const int64_t quant[7] = {q ? q->quantizer : 0, q ? q->mode : 0,        q ? q->nbits : 0,
                            q ? q->axis_key : 0,  q ? q->axis_value : 0, q ? q->q_group_size : 0,
                            q ? q->residual_length : 0};
  memcpy(v + 6, quant, sizeof quant);
  v[P_HAS_QUANT] = q != NULL;
  memcpy(v + P_INITIALIZED, geometry, 5 * sizeof(int64_t));
}

/* A layer's spec and geometry as the file records them. */
static void layer_values(const kvc_layer* l, int64_t v[PRINT_VALUES]) {
  kvc_layer_options spec = KVC_LAYER_OPTIONS_INIT;
  kvc_quant_options quant;
  spec.kind = l->kind;
  spec.window = l->window;
  spec.max_cache_len = l->max_cache_len;
  if (l->desc->describe) l->desc->describe(l, &spec, &quant);
  const int64_t g[5] = {l->initialized != 0, l->initialized ? l->dtype : 0, l->initialized ? l->heads : 0,
                        l->initialized ? l->k_dim : 0, l->initialized ? l->v_dim : 0};
  print_values(&spec, g, v);
}

void kvci_fingerprint_write(const kvc_cache* c, kvci_record* r) {
  const int64_t settings[4] = {c->lazy, c->offload, c->transformers_release, c->query_offset_rule};
  for (int i = 0; i < 4; i++) kvci_rec_i64(r, settings[i]);
  int64_t v[PRINT_VALUES];
  const int64_t none[5] = {0, 0, 0, 0, 0};
  print_values(&c->lazy_spec, none, v);
  for (int i = 0; i < PRINT_VALUES; i++) kvci_rec_i64(r, v[i]);
  kvci_rec_i64(r, c->num_layers);
  for (uint32_t l = 0; l < c->num_layers; l++) {
    layer_values(c->layers[l], v);
    for (int i = 0; i < PRINT_VALUES; i++) kvci_rec_i64(r, v[i]);
  }
}

int kvci_fingerprint_record_digest(kvci_record* r, unsigned char digest[16]) {
  if (r->failed) return kvci_rec_free(r), -1;
  unsigned char full[32];
  kvci_sha256(r->bytes, r->len, full);
  memcpy(digest, full, 16);
  kvci_rec_free(r);
  return 0;
}

int kvci_fingerprint_digest(const kvc_cache* c, unsigned char digest[16]) {
  kvci_record r = {0};
  kvci_fingerprint_write(c, &r);
  return kvci_fingerprint_record_digest(&r, digest);
}

static kvc_error* read_print(const char* fn, kvci_record_reader* in, const char* what, kvci_layer_print* p) {
  int64_t v[PRINT_VALUES];
  for (int i = 0; i < PRINT_VALUES; i++)
    if (kvci_rec_get_i64(in, &v[i]))
      return kvci_err(KVC_ERROR_IO, "%s: the fingerprint ends inside %s", fn, what);
  kvc_layer_options* s = &p->spec;
  *s = (kvc_layer_options)KVC_LAYER_OPTIONS_INIT;
  s->kind = (kvc_layer_kind)v[0];
  s->window = v[1];
  s->max_cache_len = v[2];
  s->num_sink_tokens = v[3];
  s->num_states = (uint32_t)v[4];
  s->conv_kernel_size = v[5];
  if (v[P_HAS_QUANT]) {
    p->quant = (kvc_quant_options)KVC_QUANT_OPTIONS_INIT;
    p->quant.quantizer = (kvc_quantizer)v[6];
    p->quant.mode = (kvc_quant_mode)v[7];
    p->quant.nbits = (int32_t)v[8];
    p->quant.axis_key = (int32_t)v[9];
    p->quant.axis_value = (int32_t)v[10];
    p->quant.q_group_size = v[11];
    p->quant.residual_length = v[12];
    s->quant = &p->quant;
  }
  p->initialized = v[14], p->dtype = v[15], p->heads = v[16], p->k_dim = v[17], p->v_dim = v[18];
  if (v[4] < 0 || v[4] > UINT32_MAX || v[14] < 0 || v[14] > 1 ||
      (v[14] && (kvc_dtype_size((kvc_dtype)v[15]) == 0 || v[16] < 1 || v[17] < 1 || v[18] < 1 || v[16] > INT32_MAX ||
                 v[17] > INT32_MAX || v[18] > INT32_MAX)))
    return kvci_err(KVC_ERROR_IO, "%s: the fingerprint of %s is malformed", fn, what);
  return NULL;
}

kvc_error* kvci_fingerprint_read(const char* fn, const unsigned char* bytes, size_t len, kvci_fingerprint* f) {
  memset(f, 0, sizeof *f);
  kvci_record_reader in = {bytes, len, 0};
  int64_t s[4], n;
  for (int i = 0; i < 4; i++)
    if (kvci_rec_get_range(&in, 0, INT32_MAX, &s[i])) return kvci_err(KVC_ERROR_IO, "%s: the fingerprint's settings are malformed", fn);
  f->lazy = s[0], f->offload = s[1], f->transformers_release = s[2], f->query_offset_rule = s[3];
  kvc_error* e = read_print(fn, &in, "the lazy layer", &f->lazy_layer);
  if (e) return e;
  if (kvci_rec_get_range(&in, 0, (int64_t)kvci_rec_left(&in) / (8 * PRINT_VALUES), &n))
    return kvci_err(KVC_ERROR_IO, "%s: the fingerprint's layer count is malformed", fn);
  f->num_layers = (uint32_t)n;
  f->layers = (kvci_layer_print*)calloc(n ? (size_t)n : 1, sizeof(*f->layers));
  if (!f->layers) return kvci_err_oom();
  for (uint32_t i = 0; i < f->num_layers; i++) {
    char what[32];
    snprintf(what, sizeof what, "layer %u", i);
    if ((e = read_print(fn, &in, what, &f->layers[i])) ||
        (e = kvci_kind_check_options(fn, i, &f->layers[i].spec))) {
      kvci_fingerprint_free(f);
      if (kvc_error_code(e) == KVC_ERROR_INVALID_ARGUMENT) { /* a spec no cache can have: not a valid file */
        kvc_error* w = kvci_err(KVC_ERROR_IO, "%s: the fingerprint holds an invalid layer (%s)", fn, kvc_error_message(e));
        kvc_error_destroy(e);
        e = w;
      }
      return e;
    }
  }
  if (kvci_rec_left(&in)) {
    kvci_fingerprint_free(f);
    return kvci_err(KVC_ERROR_IO, "%s: the fingerprint has %zu bytes after its last layer", fn, kvci_rec_left(&in));
  }
  return NULL;
}

void kvci_fingerprint_free(kvci_fingerprint* f) {
  free(f->layers);
  memset(f, 0, sizeof *f);
}

/* "sliding" for a kind id, or its number. */
static const char* kind_name(int64_t id, char buf[24]) {
  const kvc_kind* k = kvci_kind_find((kvc_layer_kind)id);
  if (k) return k->name;
  snprintf(buf, 24, "%" PRId64, id);
  return buf;
}

static kvc_error* differs(const char* fn, const char* part, const char* where, const char* field, int64_t file,
                          int64_t cache) {
  char a[24], b[24];
  if (!strcmp(field, "kind"))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the file's model differs from the cache's: %s%s: kind %s (file) vs %s (cache)", fn,
                    part, where, kind_name(file, a), kind_name(cache, b));
  if (!strcmp(field, "dtype"))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the file's model differs from the cache's: %s%s: dtype %s (file) vs %s (cache)", fn, part, where,
                    kvci_dtype_name((kvc_dtype)file), kvci_dtype_name((kvc_dtype)cache));
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                  "%s: the file's model differs from the cache's: %s%s: %s %" PRId64 " (file) vs %" PRId64 " (cache)", fn, part, where,
                  field, file, cache);
}

static kvc_error* compare_print(const char* fn, const char* part, const char* where, const kvci_layer_print* p,
                                const int64_t cache[PRINT_VALUES]) {
  int64_t file[PRINT_VALUES];
  const int64_t g[5] = {p->initialized, p->dtype, p->heads, p->k_dim, p->v_dim};
  print_values(&p->spec, g, file);
  for (int i = 0; i < P_INITIALIZED; i++)
    if (file[i] != cache[i]) return differs(fn, part, where, PRINT_NAMES[i], file[i], cache[i]);
  if (!file[P_INITIALIZED] || !cache[P_INITIALIZED]) return NULL; /* one of them has no geometry yet */
  for (int i = P_GEOMETRY; i < PRINT_VALUES; i++)
    if (file[i] != cache[i]) return differs(fn, part, where, PRINT_NAMES[i], file[i], cache[i]);
  return NULL;
}

kvc_error* kvci_fingerprint_compare(const char* fn, const kvci_fingerprint* f, const kvc_cache* c, const char* part) {
  static const char* const SETTINGS[4] = {"lazy", "offload mode", "transformers_release", "query_offset_rule"};
  const int64_t file[4] = {f->lazy, f->offload, f->transformers_release, f->query_offset_rule};
  const int64_t cache[4] = {c->lazy, c->offload, c->transformers_release, c->query_offset_rule};
  for (int i = 0; i < 4; i++)
    if (file[i] != cache[i]) return differs(fn, part, "the cache", SETTINGS[i], file[i], cache[i]);
  int64_t v[PRINT_VALUES];
  const int64_t none[5] = {0, 0, 0, 0, 0};
  print_values(&c->lazy_spec, none, v);
  kvc_error* e = c->lazy ? compare_print(fn, part, "the lazy layer", &f->lazy_layer, v) : NULL;
  if (e) return e;
  /* A lazy cache makes its layers as updates reach them: any count restores (each was made from the lazy layer). */
  if (!c->lazy && f->num_layers != c->num_layers)
    return differs(fn, part, "the cache", "number of layers", f->num_layers, c->num_layers);
  for (uint32_t i = 0; i < c->num_layers && i < f->num_layers; i++) {
    char where[32];
    snprintf(where, sizeof where, "layer %u", i);
    layer_values(c->layers[i], v);
    if ((e = compare_print(fn, part, where, &f->layers[i], v))) return e;
  }
  return NULL;
}
