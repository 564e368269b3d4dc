/*
 * core/kinds/layer_quantized_incremental.c: KVC_QUANT_MODE_INCREMENTAL.
 *
 * After the new tokens are appended, the oldest tokens beyond
 * residual_length are quantized in whole blocks and their values in the
 * store replaced by their dequantized values; nothing is ever quantized
 * twice, so a step costs the same at any context length. A block is one
 * token when both keys and values use per-token groups (q_group_size
 * consecutive head_dim elements), else q_group_size tokens (per-channel
 * groups: one channel of one head over the block's tokens).
 *
 * The quantizer is called once per batch row and unit (one token, or one
 * block of a per-channel tensor): HQQ's early stop then depends on that
 * unit's values only, so a token's codes do not depend on how it arrived
 * (prefill or decode) nor on the other rows of the batch. Every call of an
 * update goes to the backend as one quantize_groups job per tensor (calls
 * [batch rows][units], groups [heads][groups per head]); the dequantized
 * values come back in a staging buffer and reach the store in apply.
 *
 * Compact mode (layer_quantized_compact.c) runs this timeline too, with a
 * store that holds the residual only: it quantizes from the store's first
 * slot and drops what it quantized instead of writing it back.
 */
#include <inttypes.h>
#include <string.h>

#include "layer_quantized.h"

int64_t kvci_quant_block_tokens(const kvc_layer* l) {
  int channel = kvci_quant_per_channel(kvci_quant_opts(l), KVC_Q_KEYS) || kvci_quant_per_channel(kvci_quant_opts(l), KVC_Q_VALUES);
  return channel ? kvci_quant_opts(l)->q_group_size : 1;
}

int64_t kvci_quant_unit_tokens(const kvc_layer* l, int which) {
  return kvci_quant_per_channel(kvci_quant_opts(l), which) ? kvci_quant_opts(l)->q_group_size : 1;
}

static int64_t dim_of(const kvc_layer* l, int which) { return which ? l->v_dim : l->k_dim; }

/* Groups of one head in one unit: every channel (per-channel), or head_dim / q_group_size (per-token). */
static int64_t groups_per_head(const kvc_layer* l, int which) {
  int64_t d = dim_of(l, which);
  return kvci_quant_per_channel(kvci_quant_opts(l), which) ? d : d / kvci_quant_opts(l)->q_group_size;
}

kvc_error* kvci_quant_incremental_check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  if (!x) return NULL;
  static const char* const units_field[2] = {"the quantized key units", "the quantized value units"};
  static const char* const bytes_field[2] = {"the quantized key unit bytes", "the quantized value unit bytes"};
  const int64_t rb = kvci_quant_record_bytes(l, kvci_quant_opts(l)->q_group_size);
  for (int w = 0; w < 2; w++) {
    const int64_t ut = kvci_quant_unit_tokens(l, w), want_units = x->quantized / ut;
    if (x->units[w] != want_units)
      return kvci_loaded_refuse(fn, where, units_field[w], x->units[w],
                                "%" PRId64 " quantized tokens make %" PRId64 " units of %" PRId64 " tokens",
                                x->quantized, want_units, ut);
    if (!x->rows[w].ptr) {
      if (x->units[w])
        return kvci_loaded_refuse(fn, where, units_field[w], x->units[w], "units need their row buffer");
      continue;
    }
    int64_t ub, held;
    if (__builtin_mul_overflow(l->heads * groups_per_head(l, w), rb, &ub) || x->unit_bytes[w] != ub)
      return kvci_loaded_refuse(fn, where, bytes_field[w], x->unit_bytes[w],
                                "%" PRId64 " heads of %" PRId64 " groups of %" PRId64 " bytes make %" PRId64,
                                l->heads, groups_per_head(l, w), rb, ub);
    if (__builtin_mul_overflow(x->units[w], ub, &held) || held > x->rows[w].row_bytes)
      return kvci_loaded_refuse(fn, where, "a quantized row buffer's row bytes", x->rows[w].row_bytes,
                                "%" PRId64 " units of %" PRId64 " bytes need that many at least", x->units[w], ub);
  }
  return NULL;
}

/* Tokens the next update of n tokens quantizes, from the front of the residual. */
static int64_t tokens_to_quantize(const kvc_layer* l, int64_t quantized, int64_t total) {
  int64_t over = total - quantized - kvci_quant_opts(l)->residual_length, b = kvci_quant_block_tokens(l);
  return over > 0 ? over / b * b : 0;
}

kvc_error* kvci_quant_incremental_check(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                                       const kvc_update_options* o) {
  (void)n; (void)o;
  if (!l->initialized) return NULL; /* the geometry comes from the inputs: check_first_update */
  int64_t g = kvci_quant_opts(l)->q_group_size;
  for (int which = 0; which < 2; which++) {
    if (kvci_quant_per_channel(kvci_quant_opts(l), which) || dim_of(l, which) % g == 0) continue;
    const char* who = which ? "value" : "key";
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: layer %u: the %s head_dim is %" PRId64 " but q_group_size is %" PRId64
                   "; incremental quantization with axis_%s %d (%s) groups q_group_size consecutive head_dim elements "
                   "of one token, so head_dim must be a multiple of q_group_size",
                   fn, index, who, dim_of(l, which), g, who, (int)kvci_quant_axis(kvci_quant_opts(l), which),
                   kvci_quant_opts(l)->quantizer == KVC_QUANTIZER_QUANTO ? "quanto" : "hqq");
  }
  return NULL;
}

/*
 * The scratch of one update (the backend's memory): the quantizer's working
 * memory, then the dequantized values of the quantized tokens, keys and
 * values each [B][H][tokens][D] in the layer's dtype (none in compact mode:
 * the store drops those tokens). Byte offsets from the scratch's start.
 */
typedef struct unit_scratch {
  size_t work, work_bytes;
  size_t deq[2];
} unit_scratch;

static size_t scratch_layout(const kvc_layer* l, int64_t tokens, unit_scratch* s) {
  int64_t groups = 0;
  for (int w = 0; w < 2; w++)
    if (l->heads * groups_per_head(l, w) > groups) groups = l->heads * groups_per_head(l, w);
  size_t at = 0;
  s->work_bytes = kvc_quantize_scratch_bytes(groups, kvci_quant_opts(l)->q_group_size);
  s->work = 0;
  kvci_quant_take(NULL, &at, s->work_bytes);
  const int64_t keep = kvci_quant_compact(l) ? 0 : tokens;
  for (int w = 0; w < 2; w++) {
    s->deq[w] = at;
    kvci_quant_take(NULL, &at, (size_t)(l->batch * l->heads * keep * dim_of(l, w)) * l->elem);
  }
  return at;
}

/*
 * The span of the groups of t tokens from `first` in a [B][H][slots][D]
 * buffer of `slots` slots: calls [batch row][unit], groups [head][group of
 * the head] (per-token: q_group_size consecutive elements; per-channel: one
 * channel over the unit's tokens).
 */
static kvc_quant_span unit_span(const kvc_layer* l, int which, int64_t t, int64_t slots) {
  const int channel = kvci_quant_per_channel(kvci_quant_opts(l), which);
  const int64_t g = kvci_quant_opts(l)->q_group_size, d = dim_of(l, which), ut = kvci_quant_unit_tokens(l, which);
  kvc_quant_span s;
  s.calls[0] = l->batch;
  s.calls[1] = t / ut;
  s.call_strides[0] = l->heads * slots * d;
  s.call_strides[1] = ut * d;
  s.groups[0] = l->heads;
  s.groups[1] = groups_per_head(l, which);
  s.group_strides[0] = slots * d;
  s.group_strides[1] = channel ? 1 : g;
  s.value_stride = channel ? d : 1;
  return s;
}

/* Records of units first.. of every row of a group buffer (rows of row_bytes). */
static kvc_quant_records unit_records(const kvc_layer* l, void* buf, int64_t row_bytes,
                                      int64_t unit_bytes, int64_t first) {
  kvc_quant_records r;
  r.base = (unsigned char*)buf + first * unit_bytes;
  r.call_strides[0] = row_bytes;
  r.call_strides[1] = unit_bytes;
  r.record_stride = kvci_quant_record_bytes(l, kvci_quant_opts(l)->q_group_size);
  return r;
}

kvc_error* kvci_quant_incremental_prepare(const char* fn, const kvc_cache* c, kvc_layer* l, uint32_t index,
                                         const kvc_tensor* key, const kvc_tensor* value, int64_t n) {
  kvc_error* e = kvci_quant_incremental_check(fn, index, l, n, NULL);
  if (e) return e;
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  kvci_quant_release_staged(c, x); /* what an earlier failed update left */
  const int64_t g = kvci_quant_opts(l)->q_group_size, rb = kvci_quant_record_bytes(l, g);
  for (int w = 0; w < 2; w++) {
    int64_t ub;
    if (__builtin_mul_overflow(l->heads * groups_per_head(l, w), rb, &ub)) return kvci_err_oom();
    if (!x->units[w]) x->unit_bytes[w] = ub;
  }
  kvci_layer_write(c, l, key, value, l->end, NULL, n); /* past the stored region: no view shows them yet */
  const int64_t q = x->quantized, stored = kvci_layer_stored(l);
  const int64_t t = n ? tokens_to_quantize(l, q, stored + n + (kvci_quant_compact(l) ? q : 0)) : 0;
  if (!t) return NULL;

  /* Group buffers: grow geometrically so that appending a unit is amortized O(1). */
  for (int w = 0; w < 2; w++) {
    int64_t need_units = (q + t) / kvci_quant_unit_tokens(l, w), have = x->rows[w].row_bytes / x->unit_bytes[w];
    if (x->rows[w].ptr && have >= need_units) continue;
    int64_t cap = have * 2 > need_units ? have * 2 : need_units, row_bytes;
    if (cap < 4) cap = 4;
    if (__builtin_mul_overflow(cap, x->unit_bytes[w], &row_bytes) ||
        kvci_quant_stage_rows(c, l, x, w, row_bytes, x->unit_bytes[w])) {
      kvci_quant_release_staged(c, x);
      return kvci_err_oom();
    }
  }
  /* Compact mode: the store begins with the residual. */
  const int64_t first_slot = l->start + (kvci_quant_compact(l) ? 0 : q);
  unit_scratch s;
  if (kvci_quant_reserve_scratch(c, x, scratch_layout(l, t, &s))) {
    kvci_quant_release_staged(c, x);
    return kvci_err_oom();
  }
  const kvc_backend* be = c->backend;
  for (int w = 0; w < 2; w++) {
    const int64_t ut = kvci_quant_unit_tokens(l, w), first = q / ut, d = dim_of(l, w);
    void* buf = x->staged[w] ? x->staged[w] : x->rows[w].ptr;
    int64_t row_bytes = x->staged[w] ? x->staged_row_bytes[w] : x->rows[w].row_bytes;
    kvc_quantize_job job;
    memset(&job, 0, sizeof job);
    job.spec = kvci_quant_spec(l, w);
    job.group = kvci_quant_opts(l)->q_group_size;
    job.src = (char*)(w ? l->v : l->k) + (size_t)(first_slot * d) * l->elem;
    job.src_span = unit_span(l, w, t, l->cap);
    job.records = unit_records(l, buf, row_bytes, x->unit_bytes[w], first);
    /* The dequantized values wait in the scratch: views may show some of these tokens until apply. */
    if (!kvci_quant_compact(l)) {
      job.dequant = (char*)x->scratch + s.deq[w];
      job.dequant_span = unit_span(l, w, t, t);
    }
    job.scratch = (char*)x->scratch + s.work;
    job.scratch_bytes = s.work_bytes;
    int rc = be->quantize_groups(be->ctx, &c->exec, &job);
    if (rc) {
      kvci_quant_release_staged(c, x);
      return kvci_quant_unsupported(fn, c, "quantized", "quantize_groups", rc);
    }
  }
  return NULL;
}

kvc_region kvci_quant_incremental_apply(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v,
                                       int64_t n, const kvc_update_options* o) {
  (void)k; (void)v; (void)o; /* prepare_tokens wrote the new tokens, past the stored region */
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  const int64_t q = x->quantized, stored = kvci_layer_stored(l);
  const int64_t t = n ? tokens_to_quantize(l, q, stored + n + (kvci_quant_compact(l) ? q : 0)) : 0;
  l->end += n;
  if (t) {
    const kvc_backend* be = c->backend;
    for (int w = 0; w < 2; w++) {
      if (!x->staged[w]) continue;
      /* The units held so far move to the grown buffer, row by row; the new ones are already there. */
      int64_t used = x->units[w] * x->unit_bytes[w];
      if (x->rows[w].ptr && used) {
        int64_t ss[4] = {x->rows[w].row_bytes, x->rows[w].row_bytes, x->rows[w].row_bytes, 1};
        int64_t ds[4] = {x->staged_row_bytes[w], x->staged_row_bytes[w], x->staged_row_bytes[w], 1};
        int64_t shape[4] = {l->batch, 1, 1, used};
        KVCI_BE(c, copy_4d, x->staged[w], ds, x->rows[w].ptr, ss, shape, 1);
      }
      if (x->rows[w].ptr) be->free(be->ctx, &c->exec, x->rows[w].ptr);
      x->rows[w].ptr = x->staged[w];
      x->rows[w].row_bytes = x->staged_row_bytes[w];
      x->staged[w] = NULL;
    }
    /* The quantized tokens get their dequantized values now (views showed some of them until this call);
       compact mode drops them from the store. */
    unit_scratch s;
    scratch_layout(l, t, &s);
    if (kvci_quant_compact(l)) l->start += t;
    for (int w = 0; w < 2; w++) {
      const int64_t d = dim_of(l, w);
      if (!kvci_quant_compact(l)) {
        int64_t ds[4], ss[4] = {l->heads * t * d, t * d, d, 1}, shape[4] = {l->batch, l->heads, t, d};
        kvci_store_strides(l, w, ds);
        KVCI_BE(c, copy_4d, (char*)(w ? l->v : l->k) + (size_t)((l->start + q) * d) * l->elem, ds,
                (char*)x->scratch + s.deq[w], ss, shape, l->elem);
      }
      x->units[w] = (q + t) / kvci_quant_unit_tokens(l, w);
    }
    x->quantized = q + t;
  }
  kvci_quant_release_staged(c, x);
  return (kvc_region){l->start, l->end};
}

/* Kept tokens of a block the crop cuts into return to the residual: their values are already dequantized. */
void kvci_quant_incremental_crop(kvc_layer* l, int64_t keep) {
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  if (keep >= x->quantized) return;
  int64_t b = kvci_quant_block_tokens(l);
  x->quantized = keep / b * b;
  for (int w = 0; w < 2; w++) x->units[w] = x->quantized / kvci_quant_unit_tokens(l, w);
}
