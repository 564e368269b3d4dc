/*
 * core/kinds/layer_quantized.c: QuantizedLayer (docs/semantics.md, 'Quantized layers'), the parts
 * both modes share: the kind table, the group records, crop, reset, memory
 * and the extension state's lifecycle. The update timelines are in
 * layer_quantized_incremental.c and layer_quantized_transformers.c; the
 * layout of the state is described in layer_quantized.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_quantized.h"
#include "persist/record.h"
#include "util/options.h"

/* The layer's extension state, created by its first update (room phase). */
static kvc_quant_ext* ext_for_update(kvc_layer* l) {
  if (!l->ext) {
    kvc_quant_ext* x = (kvc_quant_ext*)calloc(1, sizeof *x);
    if (!x) return NULL;
    x->rows[KVC_Q_KEYS].role = x->rows[KVC_Q_VALUES].role = KVC_ROWS_QUANTIZED;
    x->ret_len = -1;
    l->ext = x;
  }
  return kvci_quant_ext_of(l);
}

static int row_buffers(kvc_layer* l, kvc_row_buffer** out) {
  *out = kvci_quant_ext_of(l)->rows;
  return 2;
}

static int ext_shell(const kvc_layer* src, kvc_layer* dst) {
  kvc_quant_ext* x = (kvc_quant_ext*)malloc(sizeof *x);
  if (!x) return -1;
  *x = *kvci_quant_ext_of(src);
  /* Rows are filled by the caller; staged memory, scratch and the last return belong to the source. */
  for (int i = 0; i < 2; i++) {
    x->rows[i].ptr = NULL;
    x->staged[i] = x->staged_store[i] = x->ret[i] = NULL;
  }
  x->ret_base = NULL;
  x->ret_off = 0;
  x->scratch = NULL;
  x->scratch_bytes = 0;
  x->ret_cap = x->ret_start = 0;
  x->ret_bytes = 0;
  x->ret_len = -1;
  dst->ext = x;
  return 0;
}

static void ext_free(const kvc_cache* c, kvc_layer* l) {
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  kvci_quant_drop_groups(c, x);
  kvci_quant_release_staged(c, x);
  kvci_quant_drop_returned(c, x);
  if (x->scratch) c->backend->free(c->backend->ctx, &c->exec, x->scratch);
  free(x);
  l->ext = NULL;
}

/* ------------------------------------------------------------ options */

/*
 * transformers' validation of quantized layers (docs/semantics.md, 'quanto quantizer', 'HQQ quantizer' and 'Errors'),
 * plus our own bounds; `arg` names the struct in messages.
 */
static kvc_error* check_quant(const char* fn, const char* arg, const kvc_quant_options* q) {
  if (q->quantizer != KVC_QUANTIZER_QUANTO && q->quantizer != KVC_QUANTIZER_HQQ)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: %s.quantizer is %d: unknown quantization backend; use KVC_QUANTIZER_QUANTO (1) or "
                   "KVC_QUANTIZER_HQQ (2)",
                   fn, arg, (int)q->quantizer);
  if (q->mode != KVC_QUANT_MODE_INCREMENTAL && q->mode != KVC_QUANT_MODE_TRANSFORMERS &&
      q->mode != KVC_QUANT_MODE_COMPACT)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: %s.mode is %d; use KVC_QUANT_MODE_INCREMENTAL (0), KVC_QUANT_MODE_TRANSFORMERS (1) or "
                   "KVC_QUANT_MODE_COMPACT (2)",
                   fn, arg, (int)q->mode);
  int quanto = q->quantizer == KVC_QUANTIZER_QUANTO;
  if (quanto ? (q->nbits != 2 && q->nbits != 4)
             : (q->nbits != 1 && q->nbits != 2 && q->nbits != 3 && q->nbits != 4 && q->nbits != 8))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.nbits for the %s quantizer has to be one of %s but got %d", fn,
                   arg, quanto ? "quanto" : "hqq", quanto ? "[2, 4]" : "[1, 2, 3, 4, 8]", (int)q->nbits);
  const char* axes = quanto ? "[0, -1]" : "[0, 1]";
  int32_t other = quanto ? -1 : 1;
  if (q->axis_key != 0 && q->axis_key != other)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.axis_key for the %s quantizer has to be one of %s but got %d", fn,
                   arg, quanto ? "quanto" : "hqq", axes, (int)q->axis_key);
  if (q->axis_value != 0 && q->axis_value != other)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.axis_value for the %s quantizer has to be one of %s but got %d",
                   fn, arg, quanto ? "quanto" : "hqq", axes, (int)q->axis_value);
  if (q->q_group_size < 1 || q->q_group_size > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.q_group_size is %" PRId64 "; it must be in [1, 2^31)", fn, arg,
                   q->q_group_size);
  if (q->residual_length < 0 || q->residual_length > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.residual_length is %" PRId64 "; it must be in [0, 2^31)", fn,
                   arg, q->residual_length);
  return NULL;
}

kvc_error* kvci_quant_read_checked(const char* fn, const char* arg, const kvc_quant_options* in,
                                  kvc_quant_options* out) {
  *out = (kvc_quant_options)KVC_QUANT_OPTIONS_INIT;
  if (in) {
    kvc_error* e = kvci_read_quant_options(fn, arg, in, out);
    if (e) return e;
  }
  return check_quant(fn, arg, out);
}

/* ------------------------------------------------------------ the kind */

/*
 * One table per mode (configure picks it), over the operations every mode
 * shares: the modes differ in their update timeline (check, prepare, apply,
 * return), their crop and, for compact, the tokens the store holds.
 */

/*
 * The first update fixes the geometry; the group-size rules depend on it, so they are checked against the
 * inputs' shapes before anything is allocated (a refusal after another layer of the same update_all made
 * room would change that layer's capacity).
 */
static kvc_error* check_first_update(const char* fn, uint32_t index, const kvc_layer* l, const kvc_tensor* key,
                                     const kvc_tensor* value, const kvc_update_options* o) {
  kvc_layer as_if = *l;
  as_if.initialized = 1;
  as_if.batch = key->shape[0];
  as_if.heads = key->shape[1];
  as_if.k_dim = key->shape[3];
  as_if.v_dim = value->shape[3];
  as_if.start = as_if.end = 0;
  return l->ops->check_update(fn, index, &as_if, key->shape[2], o);
}

/* A mode's room phase, given the layer's index (layer_quantized.h). */
typedef kvc_error* (*mode_prepare)(const char* fn, const kvc_cache* c, kvc_layer* l, uint32_t index,
                                   const kvc_tensor* key, const kvc_tensor* value, int64_t n);

/* What every mode's prepare_tokens runs first: a backend with the quantizer entries, the extension state and the
 * layer's index. Refused before the layer's tokens are written: a backend without the entries never holds groups. */
static kvc_error* prepare_with(mode_prepare prepare, const char* fn, const kvc_cache* c, kvc_layer* l,
                               const kvc_tensor* key, const kvc_tensor* value) {
  const kvc_backend* be = c->backend;
  if (!be->quantize_groups || !be->dequantize_groups)
    return kvci_quant_unsupported(fn, c, "quantized", be->quantize_groups ? "dequantize_groups" : "quantize_groups", 0);
  if (!ext_for_update(l)) return kvci_err_oom();
  /* The layer index is not known here; the caller's checks named it for initialized layers already. */
  uint32_t index = 0;
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (c->layers[i] == l) index = i;
  return prepare(fn, c, l, index, key, value, key->shape[2]);
}

/* A mode's prepare_tokens: prepare_with over the mode's room phase. */
#define KVC_QUANT_PREPARE(name, mode)                                                                         \
  static kvc_error* name(const char* fn, const kvc_cache* c, kvc_layer* l, const kvc_tensor* key,            \
                         const kvc_tensor* value, const kvc_update_options* o) {                             \
    (void)o;                                                                                                 \
    return prepare_with(mode, fn, c, l, key, value);                                                         \
  }
KVC_QUANT_PREPARE(prepare_incremental, kvci_quant_incremental_prepare)
KVC_QUANT_PREPARE(prepare_transformers, kvci_quant_transformers_prepare)
KVC_QUANT_PREPARE(prepare_compact, kvci_quant_compact_prepare)
#undef KVC_QUANT_PREPARE

/* Compact mode's store holds the residual only: the quantized tokens count too. */
static int64_t seq_length_compact(const kvc_layer* l) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  return kvci_layer_stored(l) + (x ? x->quantized : 0);
}

/* The dynamic layer's rules (positive: legacy absolute length), over quantized tokens too. */
static int crop_keep(const kvc_layer* l, int64_t tokens, int64_t* keep) {
  return kvci_dynamic_crop_keep(l, l->ops->seq_length(l), tokens, keep);
}

/* Incremental and transformers modes: the store holds every token; the mode then forgets the groups cut. */
static void crop_store_then(kvc_layer* l, int64_t tokens, void (*crop_groups)(kvc_layer* l, int64_t keep)) {
  int64_t keep;
  if (!crop_keep(l, tokens, &keep)) return;
  l->end = l->start + keep;
  if (l->ext) crop_groups(l, keep);
}

static void crop_incremental(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  crop_store_then(l, tokens, kvci_quant_incremental_crop);
}
static void crop_transformers(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  crop_store_then(l, tokens, kvci_quant_transformers_crop);
}

static void crop_compact(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  int64_t keep;
  if (!crop_keep(l, tokens, &keep)) return;
  if (l->ext)
    kvci_quant_compact_crop(c, l, keep);
  else
    l->end = l->start + keep; /* nothing quantized yet: the store holds every token */
}

/* transformers >= 5.2x drops the quantized states too: the next update starts afresh. */
static void reset(const kvc_cache* c, kvc_layer* l) {
  l->start = l->end = 0;
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  if (!x) return;
  kvci_quant_drop_groups(c, x);
  kvci_quant_release_staged(c, x);
  kvci_quant_drop_returned(c, x);
  x->quantized = 0;
}

static void fill_info(const kvc_layer* l, kvc_layer_info* info) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  info->quantized_length = x ? x->quantized : 0;
}

static void memory(const kvc_layer* l, uint64_t* extra_reserved, uint64_t* quantized) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  *extra_reserved = 0;
  *quantized = 0;
  if (!x) return;
  *extra_reserved = x->ret_bytes;
  for (int i = 0; i < 2; i++)
    if (x->rows[i].ptr) *quantized += (uint64_t)(x->units[i] * x->unit_bytes[i]) * (uint64_t)l->batch;
}

static kvc_error* check_stack(const char* fn, const kvc_layer* first, const kvc_layer* other, uint32_t index,
                              size_t which) {
  const kvc_quant_ext *a = kvci_quant_ext_of(first), *b = kvci_quant_ext_of(other);
  int64_t qa = a ? a->quantized : 0, qb = b ? b->quantized : 0;
  if (qa != qb)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "%s: layer %u of splits[%zu] has quantized_length %" PRId64 " but splits[0] has %" PRId64
                   "; splits must agree to be stacked",
                   fn, index, which, qb, qa);
  for (int i = 0; i < 2; i++) {
    int64_t ua = a && a->rows[i].ptr ? a->units[i] : 0, ub = b && b->rows[i].ptr ? b->units[i] : 0;
    int64_t ba = a ? a->unit_bytes[i] : 0, bb = b ? b->unit_bytes[i] : 0;
    if (ua != ub || (ua && ba != bb))
      return kvci_err(KVC_ERROR_INVALID_STATE,
                     "%s: layer %u of splits[%zu] holds %" PRId64 " quantized %s units of %" PRId64
                     " bytes but splits[0] holds %" PRId64 " of %" PRId64 "; splits must agree to be stacked",
                     fn, index, which, ub, i ? "value" : "key", bb, ua, ba);
  }
  return NULL;
}

/* Files: the groups' geometry and counters; the groups themselves are the row buffers. */
static void ext_save(const kvc_layer* l, kvci_record* r) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  for (int i = 0; i < 2; i++) {
    kvci_rec_i64(r, x->unit_bytes[i]);
    kvci_rec_i64(r, x->units[i]);
  }
  kvci_rec_i64(r, x->quantized);
}

static kvc_error* ext_load(const char* fn, kvc_layer* l, kvci_record_reader* in) {
  int64_t v[5];
  for (int i = 0; i < 5; i++)
    if (kvci_rec_get_range(in, 0, INT32_MAX * (int64_t)1024, &v[i]))
      return kvci_err(KVC_ERROR_IO, "%s: the quantized layer's record is malformed at value %d", fn, i);
  if (v[4] > l->end)
    return kvci_err(KVC_ERROR_IO, "%s: the quantized layer's record has %" PRId64 " quantized tokens but the store %" PRId64,
                    fn, v[4], l->end);
  kvc_quant_ext* x = ext_for_update(l);
  if (!x) return kvci_err_oom();
  for (int i = 0; i < 2; i++) {
    x->unit_bytes[i] = v[2 * i];
    x->units[i] = v[2 * i + 1];
  }
  x->quantized = v[4];
  return NULL;
}

/* The entries every mode's table shares: the dynamic layer's growth and lengths, and the extension state. */
#define KVC_QUANT_SHARED_OPS                                                                                  \
  .keep_for_update = kvci_dynamic_keep_for_update, .max_length = kvci_unbounded_max_length,                   \
  .mask_sizes = kvci_dynamic_mask_sizes, .check_crop = kvci_crop_allowed, .reset = reset,                     \
  .initial_capacity = kvci_dynamic_initial_capacity, .check_first_update = check_first_update,               \
  .row_buffers = row_buffers, KVC_OWN_STATE_OPS, .fill_info = fill_info, .memory = memory

/* A mode's table: the shared entries and its own update timeline, length and crop. */
#define KVC_QUANT_MODE_OPS(CHECK, PREPARE, APPLY, SET_RETURN, SEQ_LENGTH, CROP)                               \
  {                                                                                                           \
    KVC_QUANT_SHARED_OPS, .check_update = CHECK, .prepare_tokens = PREPARE, .apply_update = APPLY,            \
    .set_return = SET_RETURN, .seq_length = SEQ_LENGTH, .apply_crop = CROP,                                   \
  }

/* KVC_QUANT_MODE_INCREMENTAL: its tokens return from the store (set_return NULL); positions are ignored, as by
   the dynamic layer. */
static const kvc_layer_ops incremental_ops =
    KVC_QUANT_MODE_OPS(kvci_quant_incremental_check, prepare_incremental, kvci_quant_incremental_apply, NULL,
                       kvci_dynamic_seq_length, crop_incremental);

static const kvc_layer_ops transformers_ops =
    KVC_QUANT_MODE_OPS(kvci_quant_transformers_check, prepare_transformers, kvci_quant_transformers_apply,
                       kvci_quant_transformers_set_return, kvci_dynamic_seq_length, crop_transformers);

/* Compact mode runs the incremental checks: its timeline is the incremental one without the history. */
static const kvc_layer_ops compact_ops =
    KVC_QUANT_MODE_OPS(kvci_quant_incremental_check, prepare_compact, kvci_quant_compact_apply,
                       kvci_quant_compact_set_return, seq_length_compact, crop_compact);

static kvc_error* check_options(const char* fn, uint32_t index, const kvc_layer_options* spec) {
  char arg[48];
  snprintf(arg, sizeof arg, "options->layers[%u].quant", index);
  kvc_quant_options q;
  return kvci_quant_read_checked(fn, arg, spec->quant, &q);
}

KVC_PARAMS_FIT(kvc_quant_options);

static void configure(kvc_layer* l, const kvc_layer_options* spec) {
  kvc_quant_options* q = kvci_layer_params(kvc_quant_options, l);
  *q = (kvc_quant_options)KVC_QUANT_OPTIONS_INIT;
  if (spec->quant) kvci_read_quant_options("kvc_cache_create", "quant", spec->quant, q); /* checked: cannot fail */
  l->ops = q->mode == KVC_QUANT_MODE_TRANSFORMERS ? &transformers_ops
           : q->mode == KVC_QUANT_MODE_COMPACT    ? &compact_ops
                                                  : &incremental_ops;
}

static void describe(const kvc_layer* l, kvc_layer_options* spec, kvc_quant_options* quant) {
  *quant = *kvci_quant_opts(l);
  spec->quant = quant;
}

/* Files: by the layer's mode (configure chose its ops table from it). */
static kvc_error* check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  if (kvci_quant_opts(l)->mode == KVC_QUANT_MODE_TRANSFORMERS)
    return kvci_quant_transformers_check_loaded(fn, where, l);
  return kvci_quant_incremental_check_loaded(fn, where, l);
}

const kvc_kind kvc_quantized_kind = {
    .id = KVC_LAYER_QUANTIZED,
    .name = "quantized",
    .traits = KVC_TRAIT_HAS_KV, /* its groups are tied to the store: no offloading (no offloaded class either) */
    .ops = &incremental_ops, /* the default mode's; configure sets the layer's mode's */
    .check_options = check_options,
    .configure = configure,
    .is_croppable = kvci_quant_is_croppable,
    .prepare_call = kvci_quant_scratch_begin,
    .state_bytes = kvci_quant_scratch_bytes,
    .free_state = kvci_quant_scratch_free,
    .describe = describe,
    .check_loaded = check_loaded,
};
