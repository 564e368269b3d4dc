/*
 * core/persist/load_cache.c: a new cache from a parsed file (parse.c has
 * checked every checksum but the tensor payloads', which are checked as they
 * land in the new cache): the layers rebuilt from their fingerprint specs,
 * then each layer's record, stored keys and values, extension state and row
 * buffers, then each kind's cache-wide state. The file's values are checked
 * against each other as they are read (a checksum proves the bytes are the
 * ones written, not that a writer was right), and the new cache is simply
 * destroyed on any error.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "persist_internal.h"

enum { GENERIC_VALUES = 15, MAX_ROW_BUFFERS = 2 * 64 + 2 };

typedef struct layer_rec {
  int64_t v[GENERIC_VALUES];
  int64_t nrows;
  int64_t allocated[MAX_ROW_BUFFERS], row_bytes[MAX_ROW_BUFFERS];
} layer_rec;

static kvc_error* bad_layer(const char* fn, uint32_t part, uint32_t i, const char* what) {
  return kvci_err(KVC_ERROR_IO, "%s: the file's %slayer %u is malformed: %s", fn, part ? "cross-attention " : "", i,
                  what);
}

/* The generic fields (save_cache.c's layer_record), each checked against its range and the fingerprint. */
static kvc_error* read_generic(const char* fn, uint32_t part, uint32_t i, kvci_record_reader* in,
                               const kvci_layer_print* p, layer_rec* r) {
  static const int64_t hi[GENERIC_VALUES] = {1, 3, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX,
                                             INT32_MAX, INT64_MAX, INT32_MAX, 1, 1, 1, 1};
  for (int k = 0; k < GENERIC_VALUES; k++)
    if (kvci_rec_get_range(in, 0, hi[k], &r->v[k])) return bad_layer(fn, part, i, "a field is out of range");
  const int64_t* v = r->v;
  if (v[0] && (v[1] < 1 || v[2] < 1 || v[3] < 1 || v[4] < 1 || v[5] < 1 || v[6] < 1 || v[7] > v[8] || v[8] > v[6]))
    return bad_layer(fn, part, i, "its store's geometry or region is inconsistent");
  if (v[0] != p->initialized || (v[0] && (v[1] != p->dtype || v[3] != p->heads || v[4] != p->k_dim || v[5] != p->v_dim)))
    return bad_layer(fn, part, i, "its record and the fingerprint disagree");
  if (kvci_rec_get_range(in, 0, MAX_ROW_BUFFERS, &r->nrows)) return bad_layer(fn, part, i, "its row buffer count");
  for (int64_t j = 0; j < r->nrows; j++)
    if (kvci_rec_get_range(in, 0, 1, &r->allocated[j]) || kvci_rec_get_range(in, 0, INT64_MAX / 2, &r->row_bytes[j]))
      return bad_layer(fn, part, i, "its row buffer sizes");
  return NULL;
}

/* A tensor section of the layer, checked against the shape, dtype and element size it must have: its header's
 * dims, dtype and elem_bytes, and its payload's size (a ROWS section's dims[3] is 0 past 2^32 bytes). */
static kvc_error* tensor_section(const char* fn, const kvci_file* f, uint32_t type, uint32_t part, uint32_t i,
                                 uint32_t sub, const int64_t shape[4], uint32_t dtype, uint64_t elem,
                                 const kvci_file_section** out) {
  const kvci_file_section* s = kvci_file_find(f, type, part, i, sub);
  char tag[5], what[192];
  if (!s) {
    snprintf(what, sizeof what, "its %s section (sub %u) is missing", kvcf_tag_name(type, tag), sub);
    return bad_layer(fn, part, i, what);
  }
  uint64_t bytes = elem;
  for (int d = 0; d < 4; d++) bytes *= (uint64_t)shape[d];
  for (int d = 0; d < 4; d++) {
    uint32_t want = shape[d] > UINT32_MAX ? 0 : (uint32_t)shape[d];
    if (s->h.dims[d] != want) {
      snprintf(what, sizeof what, "its %s section (sub %u) at offset %llu has dims[%d] %u; the layer's record makes it %u",
               kvcf_tag_name(type, tag), sub, (unsigned long long)s->offset, d, s->h.dims[d], want);
      return bad_layer(fn, part, i, what);
    }
  }
  if (s->h.dtype != dtype || s->h.elem_bytes != elem) {
    snprintf(what, sizeof what, "its %s section (sub %u) at offset %llu has dtype %u and elem_bytes %u; the layer's "
             "record makes them %u and %llu", kvcf_tag_name(type, tag), sub, (unsigned long long)s->offset,
             s->h.dtype, s->h.elem_bytes, dtype, (unsigned long long)elem);
    return bad_layer(fn, part, i, what);
  }
  if (s->h.payload_bytes != bytes) {
    snprintf(what, sizeof what, "its %s section at offset %llu has %llu bytes, not %llu", kvcf_tag_name(type, tag),
             (unsigned long long)s->offset, (unsigned long long)s->h.payload_bytes, (unsigned long long)bytes);
    return bad_layer(fn, part, i, what);
  }
  *out = s;
  return NULL;
}

/* a * b into *out, 0; -1 when the product does not fit in int64_t. */
static int mul_fits(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out) ? -1 : 0; }

/* Counts `bytes` (what layer i declares for `what`) in the load's budget, before they are allocated. */
static kvc_error* take_budget(const char* fn, kvci_load_budget* budget, uint32_t part, uint32_t i, int64_t bytes,
                              const char* what) {
  uint64_t before = budget->used;
  if (__builtin_add_overflow(before, (uint64_t)bytes, &budget->used)) budget->used = UINT64_MAX;
  if (!budget->max || budget->used <= budget->max) return NULL;
  return kvci_err(KVC_ERROR_OUT_OF_MEMORY,
                  "%s: the file's %slayer %u declares %" PRId64 " bytes of %s, which with the %" PRIu64
                  " bytes declared before it passes options->max_bytes (%" PRIu64
                  "), the most this load may allocate; nothing was kept",
                  fn, part ? "cross-attention " : "", i, bytes, what, before, budget->max);
}

static kvc_error* load_store(const char* fn, const kvci_file* f, uint32_t part, uint32_t i, const kvc_cache* c,
                             kvci_stage* st, kvci_load_budget* budget, kvc_layer* l) {
  int64_t bytes;
  if (mul_fits(l->batch, l->heads, &bytes) || mul_fits(bytes, l->cap, &bytes) ||
      mul_fits(bytes, l->k_dim + l->v_dim, &bytes) || mul_fits(bytes, (int64_t)l->elem, &bytes))
    return bad_layer(fn, part, i, "its store's batch x heads x capacity x (key dim + value dim) x element size "
                                  "overflows 64 bits");
  const kvci_file_section* src[2] = {NULL, NULL};
  int64_t shape[2][4];
  for (int which = 0; which < 2; which++) { /* both sections checked before a byte is allocated */
    const int64_t sh[4] = {l->batch, l->heads, l->end - l->start, which ? l->v_dim : l->k_dim};
    memcpy(shape[which], sh, sizeof sh);
    kvc_error* e = tensor_section(fn, f, which ? KVCF_VALUES : KVCF_KEYS, part, i, 0, shape[which],
                                  (uint32_t)l->dtype, l->elem, &src[which]);
    if (e) return e;
  }
  kvc_error* over = take_budget(fn, budget, part, i, bytes, "key/value stores");
  if (over) return over;
  /* A store the file's tokens fill is written once, into memory allocated unzeroed (on the CPU, memory a freed
     store left behind is reused as it is, host_memory.c). Any other is zeroed by its allocation: zeroing the
     slots around the tokens ourselves would touch capacity that a fresh zeroed mapping leaves untouched. */
  int filled = l->start == 0 && l->end == l->cap;
  if ((filled ? kvci_store_alloc_unset : kvci_store_alloc_tier)(c, l->offloaded, l->batch, l->heads, l->cap, l->k_dim,
                                                               l->v_dim, l->elem, &l->k, &l->v))
    return kvci_err_oom();
  for (int which = 0; which < 2; which++) {
    int64_t strides[4];
    kvci_store_strides(l, which, strides);
    char* base = (char*)(which ? l->v : l->k) + (size_t)(l->start * shape[which][3]) * l->elem;
    kvci_section_reader in = {f, src[which], 0, 0};
    kvc_error* e = kvci_section_load(fn, &in, st, base, strides, shape[which], l->elem);
    if (e) return e;
  }
  return NULL;
}

static kvc_error* load_rows(const char* fn, const kvci_file* f, uint32_t part, uint32_t i, const kvc_cache* c,
                            kvci_stage* st, kvci_load_budget* budget, kvc_layer* l, const layer_rec* r) {
  kvc_row_buffer* rb = NULL;
  int n = kvci_layer_rows(l, &rb);
  if (n != r->nrows) return bad_layer(fn, part, i, "its kind has another number of row buffers");
  const kvc_backend* b = c->backend;
  for (int j = 0; j < n; j++) {
    rb[j].row_bytes = r->row_bytes[j];
    if (!r->allocated[j]) continue;
    const int64_t shape[4] = {l->batch, 1, 1, rb[j].row_bytes}, strides[4] = {shape[3], shape[3], shape[3], 1};
    const kvci_file_section* src = NULL;
    int64_t bytes;
    if (l->batch < 1 || rb[j].row_bytes < 1) return bad_layer(fn, part, i, "an allocated row buffer is empty");
    if (mul_fits(l->batch, rb[j].row_bytes, &bytes)) return bad_layer(fn, part, i, "a row buffer's size overflows");
    kvc_error* e = tensor_section(fn, f, KVCF_ROWS, part, i, (uint32_t)j, shape, 0, 1, &src);
    if (!e) e = take_budget(fn, budget, part, i, bytes, "row buffers");
    if (e) return e;
    if (!(rb[j].ptr = b->alloc_zeroed(b->ctx, &c->exec, (size_t)(l->batch * rb[j].row_bytes)))) return kvci_err_oom();
    kvci_section_reader in = {f, src, 0, 0};
    if ((e = kvci_section_load(fn, &in, st, rb[j].ptr, strides, shape, 1))) return e;
  }
  return NULL;
}

/* Layer i from its record and sections into the new layer l (freed by the caller on error). */
static kvc_error* load_layer(const char* fn, const kvci_file* f, uint32_t part, uint32_t i, const kvci_layer_print* p,
                             kvc_cache* c, kvci_stage* st, kvci_load_budget* budget, kvc_layer* l) {
  const kvci_file_section* s = kvci_file_find(f, KVCF_LAYER, part, i, 0);
  if (!s) return bad_layer(fn, part, i, "its LAYR section is missing");
  kvci_record_reader in = {s->payload, (size_t)s->h.payload_bytes, 0};
  layer_rec r;
  kvc_error* e = read_generic(fn, part, i, &in, p, &r);
  if (e) return e;
  const int64_t* v = r.v;
  if (v[13] && !v[0]) return bad_layer(fn, part, i, "it is offloaded without a store");
  l->initialized = (int)v[0];
  l->dtype = v[0] ? (kvc_dtype)v[1] : KVC_DTYPE_UNSET;
  l->elem = v[0] ? kvc_dtype_size(l->dtype) : 0;
  l->batch = v[2], l->heads = v[3], l->k_dim = v[4], l->v_dim = v[5];
  l->cap = v[6], l->start = v[7], l->end = v[8], l->cum = v[9], l->reserve = v[10];
  l->record_past = (int)v[11], l->offloadable = (int)v[12], l->offloaded = (int)v[13];
  l->device = c->device;
  if (l->initialized && (e = load_store(fn, f, part, i, c, st, budget, l))) return e;
  if (v[14]) {
    if (!l->ops->ext_load) return bad_layer(fn, part, i, "its kind keeps no extension state");
    if ((e = l->ops->ext_load(fn, l, &in))) return e;
    if ((e = load_rows(fn, f, part, i, c, st, budget, l, &r))) return e;
  } else if (r.nrows) {
    return bad_layer(fn, part, i, "row buffers without extension state");
  }
  if (kvci_rec_left(&in)) return bad_layer(fn, part, i, "its record has bytes after its kind's record");
  char where[96];
  snprintf(where, sizeof where, "%slayer %u (LAYR section, part %u)", part ? "cross-attention " : "", i, part);
  if ((e = kvci_kind_check_loaded(fn, where, l))) return e;
  kvci_layer_sync_view(l);
  return NULL;
}

static kvc_error* load_settings(const char* fn, const kvci_file* f, uint32_t part, const kvci_fingerprint* fp,
                                kvc_cache* c) {
  const kvci_file_section* s = kvci_file_find(f, KVCF_CACHE_STATE, part, 0, 0);
  kvci_record_reader in = {s ? s->payload : NULL, s ? (size_t)s->h.payload_bytes : 0, 0};
  int64_t reserve, accepted;
  if (!s || kvci_rec_get_range(&in, 0, INT32_MAX, &reserve) || kvci_rec_get_range(&in, 0, INT32_MAX, &accepted) ||
      kvci_rec_left(&in))
    return kvci_err(KVC_ERROR_IO, "%s: the file's cache state section (CSTA) is missing or malformed", fn);
  kvc_error* rule = kvci_query_offset_check(fn, (kvc_query_offset_rule)fp->query_offset_rule);
  if (rule || fp->offload < 0 || fp->offload > 3) {
    kvc_error_destroy(rule);
    return kvci_err(KVC_ERROR_IO,
                    "%s: the file's fingerprint (FPRT section): offload %" PRId64 " or query_offset_rule %" PRId64
                    " is not one this library knows",
                    fn, fp->offload, fp->query_offset_rule);
  }
  c->lazy = (int)fp->lazy;
  c->offload = (kvc_offload)fp->offload;
  c->transformers_release = (uint32_t)fp->transformers_release;
  c->query_offset_rule = (kvc_query_offset_rule)fp->query_offset_rule;
  c->lazy_spec = fp->lazy_layer.spec;
  c->lazy_spec.quant = NULL; /* lazy layers are never quantized (kvc_cache_create) */
  c->reserve = reserve;
  c->accepted_tokens = accepted;
  return NULL;
}

static kvc_error* load_kind_states(const char* fn, const kvci_file* f, uint32_t part, kvc_cache* c) {
  for (size_t k = 0; k < f->count; k++) {
    const kvci_file_section* s = &f->sections[k];
    if (s->h.type != KVCF_KIND_STATE || s->h.part != part) continue;
    const kvc_kind* d = kvci_kind_find((kvc_layer_kind)s->h.index);
    if (!d || !d->load_state || s->h.index >= KVC_KIND_SLOTS || c->kind_state[d->id])
      return kvci_err(KVC_ERROR_IO, "%s: the file's kind state section at offset %llu names kind %u, which has none",
                      fn, (unsigned long long)s->offset, s->h.index);
    kvci_record_reader in = {s->payload, (size_t)s->h.payload_bytes, 0};
    kvc_error* e = d->load_state(fn, c, &in);
    if (e) return e;
  }
  return NULL;
}

kvc_error* kvci_load_cache(const char* fn, const kvci_file* f, uint32_t part, const kvc_device* device, void* stream,
                           kvci_allocator* allocator, kvci_load_budget* budget, kvc_cache** out) {
  const kvci_file_section* s = kvci_file_find(f, KVCF_FINGERPRINT, part, 0, 0);
  if (!s) return kvci_err(KVC_ERROR_IO, "%s: the file has no fingerprint section (FPRT) for part %u", fn, part);
  kvci_fingerprint fp;
  kvc_error* e = kvci_fingerprint_read(fn, s->payload, (size_t)s->h.payload_bytes, &fp);
  if (e) return e;
  kvc_cache* c = NULL;
  e = kvci_cache_new(device, stream, &c);
  if (!e) c->allocator = kvci_allocator_share(allocator);
  if (!e) e = load_settings(fn, f, part, &fp, c);
  kvci_stage st;
  memset(&st, 0, sizeof st);
  if (!e) e = kvci_stage_open(fn, c->backend, &c->exec, c->device, 0, &st);
  for (uint32_t i = 0; !e && i < fp.num_layers; i++) {
    kvc_layer* l = NULL;
    if ((e = kvci_layer_new(&fp.layers[i].spec, &l))) break;
    if ((e = load_layer(fn, f, part, i, &fp.layers[i], c, &st, budget, l))) {
      kvci_layer_free(c, l);
      break;
    }
    e = kvci_cache_append_layer(c, l);
  }
  if (!e) e = load_kind_states(fn, f, part, c);
  kvci_stage_close(&st);
  kvci_fingerprint_free(&fp);
  if (e) {
    kvc_cache_destroy(c);
    return e;
  }
  *out = c;
  return NULL;
}
