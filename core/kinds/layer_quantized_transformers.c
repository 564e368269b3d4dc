/*
 * core/kinds/layer_quantized_transformers.c: KVC_QUANT_MODE_TRANSFORMERS, the
 * timeline of transformers 5.23's QuantizedLayer.update:
 *  - the first update (of a layer holding no tokens) quantizes its tokens
 *    and returns them as given;
 *  - later updates return the dequantized history, the residual and the new
 *    tokens; when the residual before the call plus the new tokens reach
 *    residual_length, that whole tensor is quantized again with
 *    transformers' grouping over [B, H, S, D] and becomes the history, and
 *    the call still returns it as it was before this quantization.
 * So the store always holds what the next update builds on (the
 * dequantization of the last quantization, then the residual). A quantizing
 * call writes that dequantization into a new store (while it may still fail)
 * and returns the values it quantized from the old one, which it keeps until
 * the next update (ext->ret): a returned view is valid until the next
 * mutating call, as every view is. A flush thus costs one store more for one
 * step, and the store is never copied.
 *
 * The packed groups are kept per batch row when every group lies in one row
 * (quanto axis 0; quanto axis -1 when heads*seq is a multiple of
 * q_group_size; HQQ axis 1 when heads*seq*head_dim is; any grouping of one
 * row). Otherwise they cannot follow batch operations, and the layer keeps
 * that history only as the store's dequantized values (bytes_quantized 0)
 * until the next quantization: transformers quantizes from those values
 * anyway, so no output changes.
 *
 * A flush copies the s tokens of each tensor to a contiguous [B, H, s, D]
 * buffer of the layer's scratch, where transformers' grouping is an affine
 * span (quant_layout.h), quantizes it there with one quantize_groups job
 * (HQQ's early stop sees the whole tensor, as in transformers; quanto, which
 * has no state across groups, gets one call per row so that a row's records
 * are contiguous), and copies the dequantized values to the new store.
 */
#include <inttypes.h>
#include <string.h>

#include "layer_quantized.h"
#include "quant/quant_layout.h"

/* Tokens the update quantizes: all of them (S), or 0 when it only appends to the residual. */
static int64_t quantizing_length(const kvc_layer* l, int64_t n) {
  if (n == 0) return 0; /* nothing to store: nothing to quantize (transformers would fail on an empty tensor) */
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  int64_t stored = kvci_layer_stored(l), q = x ? x->quantized : 0;
  if (stored == 0) return n;
  /* transformers 5.23: the residual's length (0 while it is the 1-D empty tensor) plus the new tokens. */
  return stored - q + n >= kvci_quant_opts(l)->residual_length ? stored + n : 0;
}

/* transformers' grouping of one [B, H, S, D] tensor, or transformers' error for it. */
static kvc_error* check_grouping(const char* fn, uint32_t index, const kvc_layer* l, int which, int64_t s,
                                 kvc_quant_layout* lay) {
  const int64_t d = which ? l->v_dim : l->k_dim, g = kvci_quant_opts(l)->q_group_size;
  const int64_t shape[4] = {l->batch, l->heads, s, d};
  const int axis = kvci_quant_axis(kvci_quant_opts(l), which);
  if (kvci_quant_layout_init(lay, kvci_quant_opts(l)->quantizer, axis, g, shape) == 0) return NULL;
  const char* who = which ? "values" : "keys";
  if (kvci_quant_opts(l)->quantizer == KVC_QUANTIZER_QUANTO)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: layer %u: this update quantizes the %s, of shape [%" PRId64 ", %" PRId64 ", %" PRId64
                   ", %" PRId64 "], on axis %d, and quanto requires q_group_size to divide %s and not exceed it: "
                   "Group size (%" PRId64 ") must be a divisor of (%" PRId64 ")",
                   fn, index, who, l->batch, l->heads, s, d, axis,
                   axis == 0 ? "heads*seq*head_dim" : "batch*heads*seq", g, lay->axis_numel);
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                 "%s: layer %u: this update quantizes the %s, of shape [%" PRId64 ", %" PRId64 ", %" PRId64
                 ", %" PRId64 "] (%" PRId64 " elements), and hqq requires q_group_size (%" PRId64
                 ") to divide the element count: group_size should be divisble by the total tensor dimensions",
                 fn, index, who, l->batch, l->heads, s, d, lay->axis_numel, g);
}

kvc_error* kvci_quant_transformers_check(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                                        const kvc_update_options* o) {
  (void)o;
  if (!l->initialized) return NULL; /* the geometry comes from the inputs: check_first_update */
  int64_t s = quantizing_length(l, n);
  kvc_quant_layout lay;
  for (int which = 0; s && which < 2; which++) {
    kvc_error* e = check_grouping(fn, index, l, which, s, &lay);
    if (e) return e;
  }
  return NULL;
}

/* Whether every group of the grouping lies within one batch row (the rows can then be moved alone). */
static int groups_within_rows(const kvc_layer* l, int which, int64_t s) {
  const int64_t g = kvci_quant_opts(l)->q_group_size, d = which ? l->v_dim : l->k_dim;
  if (l->batch == 1) return 1;
  int channel = kvci_quant_per_channel(kvci_quant_opts(l), which);
  if (kvci_quant_opts(l)->quantizer == KVC_QUANTIZER_QUANTO) return !channel || (l->heads * s) % g == 0;
  return channel ? g == 1 : (l->heads * s * d) % g == 0;
}

kvc_error* kvci_quant_transformers_check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  if (!x) return NULL;
  const int64_t s = x->quantized;
  for (int w = 0; w < 2; w++) {
    /* apply_update keeps one unit, the groups of the s tokens it quantized, when they lie within rows. */
    kvc_quant_layout lay;
    int64_t want = 0;
    if (s && l->initialized && groups_within_rows(l, w, s)) {
      kvc_error* ungroupable = check_grouping(fn, 0, l, w, s, &lay); /* no update could have quantized s tokens */
      if (ungroupable || __builtin_mul_overflow(lay.ngroups / l->batch, kvci_quant_record_bytes(l, lay.group), &want))
        want = -1;
      kvc_error_destroy(ungroupable);
    }
    int64_t have = x->rows[w].ptr ? x->rows[w].row_bytes : 0;
    if (have != want || x->units[w] != (want > 0) || (want > 0 && x->unit_bytes[w] != want))
      return kvci_loaded_refuse(fn, where, w ? "the quantized value groups' bytes" : "the quantized key groups' bytes",
                                have,
                                "the groups of %" PRId64 " quantized tokens take %" PRId64
                                " bytes per row in one unit (0: none kept)",
                                s, want);
  }
  return NULL;
}

/* Scratch of one quantization (byte offsets), for one tensor at a time: its values as a contiguous
 * [B, H, s, D] tensor (in: the store's; out: their dequantization), then the quantizer's working memory. */
typedef struct flush_scratch {
  size_t values, work, work_bytes;
} flush_scratch;

static size_t flush_layout(const kvc_layer* l, int64_t s, const kvc_quant_layout lay[2], flush_scratch* f) {
  const int64_t dmax = l->k_dim > l->v_dim ? l->k_dim : l->v_dim;
  size_t at = 0;
  f->values = at;
  kvci_quant_take(NULL, &at, (size_t)(l->batch * l->heads * s * dmax) * l->elem);
  f->work_bytes = 0;
  for (int w = 0; w < 2; w++) {
    size_t b = kvc_quantize_scratch_bytes(lay[w].ngroups, lay[w].group);
    if (b > f->work_bytes) f->work_bytes = b;
  }
  f->work = at;
  kvci_quant_take(NULL, &at, f->work_bytes);
  return at;
}

/*
 * Quantizes the first s tokens of the store's keys or values (the new ones
 * included, written past the stored region) and writes their dequantization
 * to slots [0, s) of the staged store and, when the groups stay within rows,
 * their records to the staged group buffer. Returns the backend's code.
 */
static int quantize_all(const kvc_cache* c, const kvc_layer* l, kvc_quant_ext* x, int which, int64_t s,
                        const kvc_quant_layout* lay, const flush_scratch* f) {
  const kvc_backend* be = c->backend;
  const int64_t d = which ? l->v_dim : l->k_dim;
  void* values = (char*)x->scratch + f->values;
  int64_t st[4], ct[4] = {l->heads * s * d, s * d, d, 1}, shape[4] = {l->batch, l->heads, s, d};
  kvci_store_strides(l, which, st);
  const char* from = (const char*)(which ? l->v : l->k) + (size_t)(l->start * d) * l->elem;
  KVCI_BE(c, copy_4d, values, ct, from, st, shape, l->elem);
  kvc_quantize_job job;
  memset(&job, 0, sizeof job);
  job.spec = kvci_quant_spec(l, which);
  job.group = lay->group;
  job.src = values;
  job.src_span = kvci_quant_layout_span(lay, x->staged[which] != NULL);
  if (x->staged[which]) { /* the groups in row order: row r's at r * row_bytes */
    job.records.base = x->staged[which];
    job.records.call_strides[0] = x->staged_row_bytes[which];
    job.records.record_stride = kvci_quant_record_bytes(l, lay->group);
  }
  job.dequant = values; /* in place: a call reads its values before it writes */
  job.dequant_span = job.src_span;
  job.scratch = (char*)x->scratch + f->work;
  job.scratch_bytes = f->work_bytes;
  int rc = be->quantize_groups(be->ctx, &c->exec, &job);
  if (rc) return rc;
  /* The new store has the old one's capacity; its tokens start at slot 0. */
  KVCI_BE(c, copy_4d, x->staged_store[which], st, values, ct, shape, l->elem);
  return 0;
}

kvc_error* kvci_quant_transformers_prepare(const char* fn, const kvc_cache* c, kvc_layer* l, uint32_t index,
                                          const kvc_tensor* key, const kvc_tensor* value, int64_t n) {
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  kvci_quant_release_staged(c, x); /* what an earlier failed update left */
  kvc_error* e = kvci_quant_transformers_check(fn, index, l, n, NULL);
  if (e) return e;
  kvci_layer_write(c, l, key, value, l->end, NULL, n); /* past the stored region: no view shows them yet */
  const int64_t s = quantizing_length(l, n);
  if (!s) return NULL;
  kvc_quant_layout lay[2];
  for (int w = 0; w < 2; w++) check_grouping(fn, index, l, w, s, &lay[w]); /* checked above: cannot fail */
  for (int w = 0; w < 2; w++) {
    if (!groups_within_rows(l, w, s)) continue;
    int64_t row_bytes, rb = kvci_quant_record_bytes(l, lay[w].group);
    if (__builtin_mul_overflow(lay[w].ngroups / l->batch, rb, &row_bytes) ||
        kvci_quant_stage_rows(c, l, x, w, row_bytes, row_bytes))
      goto oom;
  }
  if (kvci_store_alloc(c, l->batch, l->heads, l->cap, l->k_dim, l->v_dim, l->elem, &x->staged_store[0],
                      &x->staged_store[1]))
    goto oom;
  flush_scratch f;
  if (kvci_quant_reserve_scratch(c, x, flush_layout(l, s, lay, &f))) goto oom;
  for (int w = 0; w < 2; w++) {
    int rc = quantize_all(c, l, x, w, s, &lay[w], &f);
    if (rc) {
      kvci_quant_release_staged(c, x);
      return kvci_quant_unsupported(fn, c, "quantized", "quantize_groups", rc);
    }
  }
  kvci_quant_trim_scratch(c, x); /* every layer of an update_all prepares before any applies: keep only the results */
  return NULL;
oom:
  kvci_quant_release_staged(c, x);
  return kvci_err_oom();
}

kvc_region kvci_quant_transformers_apply(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v,
                                        int64_t n, const kvc_update_options* o) {
  (void)k; (void)v; (void)o; /* prepare_tokens wrote the new tokens, past the stored region */
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  const int64_t s = quantizing_length(l, n);
  const kvc_backend* be = c->backend;
  l->end += n;
  kvci_quant_drop_returned(c, x); /* the store the previous call returned from: its views end with this call */
  if (s) {
    /* The old store, holding the values as they were before this quantization, is what this call returns. */
    x->ret[0] = l->k;
    x->ret[1] = l->v;
    x->ret_cap = l->cap;
    x->ret_start = l->start;
    x->ret_len = s;
    x->ret_bytes = (uint64_t)(l->batch * l->heads * l->cap * (l->k_dim + l->v_dim)) * l->elem;
    l->k = x->staged_store[0];
    l->v = x->staged_store[1];
    x->staged_store[0] = x->staged_store[1] = NULL;
    l->start = 0;
    l->end = s;
    for (int w = 0; w < 2; w++) {
      /* The new groups replace the old ones; a grouping across rows keeps none (see the top of this file). */
      if (x->rows[w].ptr) be->free(be->ctx, &c->exec, x->rows[w].ptr);
      x->rows[w].ptr = x->staged[w];
      x->rows[w].row_bytes = x->staged[w] ? x->staged_row_bytes[w] : 0;
      x->unit_bytes[w] = x->staged[w] ? x->staged_unit_bytes[w] : 0;
      x->units[w] = x->staged[w] ? 1 : 0;
      x->staged[w] = NULL;
    }
    x->quantized = s;
  }
  kvci_quant_release_staged(c, x);
  return (kvc_region){l->start, l->end};
}

void kvci_quant_transformers_set_return(kvc_layer* l, kvc_region r) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  if (x->ret_len < 0) {
    kvci_layer_set_return(l, r);
    return;
  }
  for (int w = 0; w < 2; w++)
    kvci_quant_set_view(l, w, x->ret[w], (uint64_t)(x->ret_start * (w ? l->v_dim : l->k_dim)) * l->elem, x->ret_len,
                       x->ret_cap);
}

/* The groups described the cut tokens too: the store's dequantized values are the history until the next quantization. */
void kvci_quant_transformers_crop(kvc_layer* l, int64_t keep) {
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  if (keep >= x->quantized) return;
  x->quantized = keep;
  x->units[KVC_Q_KEYS] = x->units[KVC_Q_VALUES] = 0;
}
