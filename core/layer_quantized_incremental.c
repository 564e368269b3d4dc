/*
 * core/layer_quantized_incremental.c: KVC_QUANT_MODE_INCREMENTAL.
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
 * (prefill or decode) nor on the other rows of the batch.
 *
 * Compact mode (layer_quantized_compact.c) runs this timeline too, with a
 * store that holds the residual only: it quantizes from the store's first
 * slot and drops what it quantized instead of writing it back.
 */
#include <inttypes.h>
#include <string.h>

#include "half.h"
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

/* The host scratch of one update: one unit's groups, and the dequantized values of visible tokens. */
typedef struct unit_scratch {
  float* x;        /* one unit's values, [groups][q_group_size] */
  uint8_t* codes;  /* their codes */
  float* scale;
  float* zero;
  float* held[2];  /* dequantized values of tokens already stored, [B][H][tokens][D] */
} unit_scratch;

static size_t scratch_layout(const kvc_layer* l, int64_t held_tokens, unit_scratch* s, char* base) {
  int64_t unit_elems = 0;
  for (int w = 0; w < 2; w++) {
    int64_t e = l->heads * dim_of(l, w) * kvci_quant_unit_tokens(l, w);
    if (e > unit_elems) unit_elems = e;
  }
  int64_t groups = unit_elems / kvci_quant_opts(l)->q_group_size, dmax = l->k_dim > l->v_dim ? l->k_dim : l->v_dim;
  size_t at = 0;
  s->x = (float*)kvci_quant_take(base, &at, sizeof(float) * (size_t)(unit_elems + dmax)); /* and one token of one head */
  s->scale = (float*)kvci_quant_take(base, &at, sizeof(float) * (size_t)groups);
  s->zero = (float*)kvci_quant_take(base, &at, sizeof(float) * (size_t)groups);
  s->held[0] = (float*)kvci_quant_take(base, &at, sizeof(float) * (size_t)(l->batch * l->heads * held_tokens * l->k_dim));
  s->held[1] = (float*)kvci_quant_take(base, &at, sizeof(float) * (size_t)(l->batch * l->heads * held_tokens * l->v_dim));
  s->codes = (uint8_t*)kvci_quant_take(base, &at, (size_t)unit_elems);
  return at;
}

/*
 * Quantizes unit u (the unit index within the row buffer) of row b, whose
 * first token is at physical slot s0, writing its records at `rec`; the
 * dequantized values go to the store (tokens at or past `visible_end`,
 * which no view shows yet) or to `held` (tokens before it).
 */
static int quantize_unit(const kvc_layer* l, int which, int64_t b, int64_t s0, int64_t visible_end, int64_t q0,
                         int64_t held_tokens, unsigned char* rec, unit_scratch* s) {
  const int channel = kvci_quant_per_channel(kvci_quant_opts(l), which);
  const int64_t g = kvci_quant_opts(l)->q_group_size, d = dim_of(l, which), gph = groups_per_head(l, which);
  const int64_t ut = kvci_quant_unit_tokens(l, which), ngroups = l->heads * gph;
  void* base = which ? l->v : l->k;
  /* x[(h*gph + j)*g + i]: per-token j = group along head_dim; per-channel j = channel, i = token. A token's
     head_dim elements are contiguous in the store: converted a row at a time. */
  float* row = s->x + ngroups * g; /* one token of one head */
  for (int64_t h = 0; h < l->heads; h++)
    for (int64_t t = 0; t < ut; t++) {
      int64_t at = kvci_quant_store_index(l, which, b, h, s0 + t, 0);
      if (!channel) {
        for (int64_t e = 0; e < d; e++) s->x[h * d + e] = kvci_load_f32(l->dtype, base, at + e);
        continue;
      }
      for (int64_t e = 0; e < d; e++) row[e] = kvci_load_f32(l->dtype, base, at + e);
      for (int64_t e = 0; e < d; e++) s->x[(h * d + e) * g + t] = row[e];
    }
  kvc_quantizer_spec spec = kvci_quant_spec(l, which);
  if (kvci_quantize_groups(&spec, s->x, ngroups, g, s->codes, s->scale, s->zero)) return -1;
  int64_t rb = kvci_quant_record_bytes(l, g);
  for (int64_t k = 0; k < ngroups; k++)
    kvci_quant_put_record(l, rec + k * rb, s->codes + k * g, s->scale[k], s->zero[k], g);
  if (kvci_quant_compact(l)) return 0; /* the store drops these tokens; updates dequantize the records */
  kvci_dequantize_groups(&spec, s->codes, s->scale, s->zero, ngroups, g, s->x);
  for (int64_t h = 0; h < l->heads; h++)
    for (int64_t t = 0; t < ut; t++) {
      int64_t slot = s0 + t;
      const float* src = s->x + h * d;
      if (channel) {
        for (int64_t e = 0; e < d; e++) row[e] = s->x[(h * d + e) * g + t];
        src = row;
      }
      if (slot >= visible_end) {
        int64_t at = kvci_quant_store_index(l, which, b, h, slot, 0);
        for (int64_t e = 0; e < d; e++) kvci_store_f32(l->dtype, base, at + e, src[e]);
      } else {
        memcpy(s->held[which] + ((b * l->heads + h) * held_tokens + (slot - l->start - q0)) * d, src,
               sizeof(float) * (size_t)d);
      }
    }
  return 0;
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
  /* Quantized tokens that views already show (compact mode: none kept, the store drops them). */
  int64_t held_tokens = kvci_quant_compact(l) ? 0 : stored - q < t ? stored - q : t;
  /* Compact mode: the store begins with the residual. */
  const int64_t first_slot = l->start + (kvci_quant_compact(l) ? 0 : q);
  unit_scratch s;
  size_t bytes = scratch_layout(l, held_tokens, &s, NULL);
  if (kvci_quant_reserve_scratch(x, bytes)) {
    kvci_quant_release_staged(c, x);
    return kvci_err_oom();
  }
  scratch_layout(l, held_tokens, &s, (char*)x->scratch);
  const int64_t visible_end = l->end;
  for (int w = 0; w < 2; w++) {
    const int64_t ut = kvci_quant_unit_tokens(l, w), first = q / ut;
    unsigned char* buf = (unsigned char*)(x->staged[w] ? x->staged[w] : x->rows[w].ptr);
    int64_t row_bytes = x->staged[w] ? x->staged_row_bytes[w] : x->rows[w].row_bytes;
    for (int64_t b = 0; b < l->batch; b++)
      for (int64_t u = 0; u < t / ut; u++) {
        unsigned char* rec = buf + b * row_bytes + (first + u) * x->unit_bytes[w];
        if (quantize_unit(l, w, b, first_slot + u * ut, visible_end, q, held_tokens, rec, &s)) {
          kvci_quant_release_staged(c, x);
          return kvci_err_oom();
        }
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
        be->copy_4d(be->ctx, &c->exec, x->staged[w], ds, x->rows[w].ptr, ss, shape, 1);
      }
      if (x->rows[w].ptr) be->free(be->ctx, &c->exec, x->rows[w].ptr);
      x->rows[w].ptr = x->staged[w];
      x->rows[w].row_bytes = x->staged_row_bytes[w];
      x->staged[w] = NULL;
    }
    /* Tokens a view already showed get their dequantized values now; compact mode drops them from the store. */
    unit_scratch s;
    int64_t held_tokens = kvci_quant_compact(l) ? 0 : stored - q < t ? stored - q : t;
    if (kvci_quant_compact(l)) l->start += t;
    scratch_layout(l, held_tokens, &s, (char*)x->scratch);
    for (int w = 0; w < 2; w++) {
      void* base = w ? l->v : l->k;
      int64_t d = dim_of(l, w);
      for (int64_t b = 0; b < l->batch; b++)
        for (int64_t h = 0; h < l->heads; h++)
          for (int64_t i = 0; i < held_tokens; i++)
            for (int64_t e = 0; e < d; e++)
              kvci_store_f32(l->dtype, base, kvci_quant_store_index(l, w, b, h, l->start + q + i, e),
                            s.held[w][((b * l->heads + h) * held_tokens + i) * d + e]);
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
