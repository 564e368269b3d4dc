/*
 * core/kinds/linear_state.c: storage of the conv and recurrent states of the
 * LINEAR kinds (see linear_state.h for the layout and why).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "linear_state.h"

size_t kvci_linear_ext_bytes(uint32_t n) {
  return sizeof(kvc_linear_ext) + (size_t)n * (sizeof(kvc_linear_pair) + 2 * sizeof(kvc_row_buffer));
}

kvc_linear_pair* kvci_linear_pairs(const kvc_layer* l) {
  return l->ext ? (kvc_linear_pair*)((char*)l->ext + sizeof(kvc_linear_ext)) : NULL;
}

kvc_row_buffer* kvci_linear_rows(const kvc_layer* l) {
  if (!l->ext) return NULL;
  const kvc_linear_ext* x = (const kvc_linear_ext*)l->ext;
  return (kvc_row_buffer*)((char*)l->ext + sizeof(kvc_linear_ext) + x->num_states * sizeof(kvc_linear_pair));
}

int kvci_linear_ext_ensure(kvc_layer* l) {
  if (l->ext) return 0;
  kvc_linear_ext* x = (kvc_linear_ext*)calloc(1, kvci_linear_ext_bytes(kvci_linear_params_of(l)->num_states));
  if (!x) return -1;
  x->num_states = kvci_linear_params_of(l)->num_states;
  l->ext = x;
  kvc_row_buffer* rb = kvci_linear_rows(l);
  for (uint32_t i = 0; i < 2 * kvci_linear_params_of(l)->num_states; i++) rb[i].role = KVC_ROWS_STATE;
  return 0;
}

int kvci_linear_any_state(const kvc_layer* l) {
  const kvc_linear_pair* p = kvci_linear_pairs(l);
  for (uint32_t i = 0; p && i < kvci_linear_params_of(l)->num_states; i++)
    if (p[i].conv_dtype != KVC_DTYPE_UNSET || p[i].rec_dtype != KVC_DTYPE_UNSET) return 1;
  return 0;
}

int kvci_linear_all_previous(const kvc_layer* l) {
  const kvc_linear_pair* p = kvci_linear_pairs(l);
  if (!p) return 0;
  for (uint32_t i = 0; i < kvci_linear_params_of(l)->num_states; i++)
    if (!p[i].has_previous) return 0;
  return 1;
}

/* n1 * n2 * ... in bytes, or 0 when it overflows or exceeds what an allocation can be. */
static size_t checked_bytes(const int64_t* f, int n) {
  uint64_t r = 1;
  for (int i = 0; i < n; i++)
    if (f[i] < 0 || __builtin_mul_overflow(r, (uint64_t)f[i], &r)) return 0;
  return r > (uint64_t)SIZE_MAX / 2 ? 0 : (size_t)r;
}

/* ------------------------------------------------------------- files */

static int valid_state_dtype(kvc_dtype d) {
  return d == KVC_DTYPE_FLOAT32 || d == KVC_DTYPE_FLOAT16 || d == KVC_DTYPE_BFLOAT16;
}

static kvc_error* check_conv(const char* fn, const char* where, const kvc_layer* l, uint32_t s) {
  const kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  const kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s];
  char field[64];
  if (!rb->ptr) { /* the state's code takes a set dtype for an allocated buffer */
    snprintf(field, sizeof field, "state pair %u's conv dtype", s);
    if (p->conv_dtype != KVC_DTYPE_UNSET || p->cap || p->begin || p->end)
      return kvci_loaded_refuse(fn, where, field, p->conv_dtype,
                                "a conv state without a buffer has no dtype (0), capacity %" PRId64
                                " and region [%" PRId64 ", %" PRId64 ") must be 0",
                                p->cap, p->begin, p->end);
    return NULL;
  }
  int64_t want_kernel = kvci_linear_params_of(l)->conv_kernel;
  snprintf(field, sizeof field, "state pair %u's conv dtype", s);
  if (!valid_state_dtype(p->conv_dtype))
    return kvci_loaded_refuse(fn, where, field, p->conv_dtype, "conv states are float32, float16 or bfloat16");
  snprintf(field, sizeof field, "state pair %u's conv kernel", s);
  if (p->kernel < 1 || (want_kernel && p->kernel != want_kernel))
    return kvci_loaded_refuse(fn, where, field, p->kernel, "the layer's conv_kernel is %" PRId64 " (0: any >= 1)",
                              want_kernel);
  snprintf(field, sizeof field, "state pair %u's conv capacity", s);
  if (p->cap < p->kernel)
    return kvci_loaded_refuse(fn, where, field, p->cap, "a conv state holds its kernel (%" PRId64 ") at least",
                              p->kernel);
  const int64_t row[3] = {p->channels, p->cap, (int64_t)kvc_dtype_size(p->conv_dtype)};
  size_t want = p->channels >= 1 ? checked_bytes(row, 3) : 0;
  snprintf(field, sizeof field, "state pair %u's conv row bytes", s);
  if (!want || rb->row_bytes != (int64_t)want)
    return kvci_loaded_refuse(fn, where, field, rb->row_bytes,
                              "%" PRId64 " channels x capacity %" PRId64 " of %s make %zu bytes", p->channels, p->cap,
                              kvci_dtype_name(p->conv_dtype), want);
  return NULL;
}

static kvc_error* check_recurrent(const char* fn, const char* where, const kvc_layer* l, uint32_t s) {
  const kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  const kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s + 1];
  char field[64];
  snprintf(field, sizeof field, "state pair %u's recurrent dtype", s);
  if (!rb->ptr) {
    if (p->rec_dtype != KVC_DTYPE_UNSET)
      return kvci_loaded_refuse(fn, where, field, p->rec_dtype, "a recurrent state without a buffer has no dtype (0)");
    return NULL;
  }
  if (!valid_state_dtype(p->rec_dtype))
    return kvci_loaded_refuse(fn, where, field, p->rec_dtype, "recurrent states are float32, float16 or bfloat16");
  snprintf(field, sizeof field, "state pair %u's recurrent shape[0]", s);
  if (p->rec_ndim < 1 || p->rec_shape[0] != l->batch)
    return kvci_loaded_refuse(fn, where, field, p->rec_ndim < 1 ? 0 : p->rec_shape[0],
                              "a recurrent state has at least one dimension, the first the layer's batch (%" PRId64 ")",
                              l->batch);
  int64_t f[KVC_LINEAR_MAX_REC_DIMS + 1];
  f[0] = (int64_t)kvc_dtype_size(p->rec_dtype);
  for (int32_t i = 1; i < p->rec_ndim; i++) f[i] = p->rec_shape[i];
  size_t want = checked_bytes(f, p->rec_ndim);
  snprintf(field, sizeof field, "state pair %u's recurrent row bytes", s);
  if (!want || rb->row_bytes != (int64_t)want)
    return kvci_loaded_refuse(fn, where, field, rb->row_bytes,
                              "its shape's dimensions after the batch, in %s, make %zu bytes",
                              kvci_dtype_name(p->rec_dtype), want);
  return NULL;
}

kvc_error* kvci_linear_check_loaded(const char* fn, const char* where, const kvc_layer* l) {
  if (!l->ext) return NULL;
  kvc_error* e = NULL;
  for (uint32_t s = 0; !e && s < kvci_linear_params_of(l)->num_states; s++) {
    e = check_conv(fn, where, l, s);
    if (!e) e = check_recurrent(fn, where, l, s);
  }
  return e;
}

/* ------------------------------------------------------------ conv state */

/*
 * The conv buffer keeps each time slot's channels together ([batch, cap,
 * channels] in memory), so that a decode step writes one contiguous column
 * and moving the region back is one contiguous move; views expose it as
 * [batch, channels, time] with strides {cap * channels, 1, channels}. As 4-D
 * for the backend: [batch, 1, time, channels].
 */
static void conv_strides(int64_t channels, int64_t cap, int64_t st[4]) {
  st[0] = channels * cap;
  st[1] = channels * cap;
  st[2] = channels;
  st[3] = 1;
}

/* Byte offset of time slot `slot`. */
static size_t slot_bytes(const kvc_linear_pair* p, int64_t slot) {
  return (size_t)(slot * p->channels) * kvc_dtype_size(p->conv_dtype);
}

kvc_error* kvci_conv_make_room(const kvc_cache* c, kvc_layer* l, uint32_t s, kvc_dtype dtype, int64_t batch,
                              int64_t channels, int64_t kernel, int64_t keep_len, int64_t need) {
  if (kvci_linear_ext_ensure(l)) return kvci_err_oom();
  kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s];
  const kvc_backend* be = c->backend;
  int allocated = p->conv_dtype != KVC_DTYPE_UNSET;
  int64_t from = allocated ? p->end - keep_len : 0;
  if (allocated && from + keep_len + need <= p->cap) {
    p->begin = from;
    return NULL;
  }
  size_t elem = kvc_dtype_size(dtype);
  if (allocated && keep_len + need <= p->cap) {
    /* Move the kept columns back to slot 0: once per cap - K appended columns. */
    int64_t st[4], shape[4] = {l->batch, 1, keep_len, p->channels};
    conv_strides(p->channels, p->cap, st);
    KVCI_BE(c, copy_4d, rb->ptr, st, (char*)rb->ptr + slot_bytes(p, from), st, shape, elem);
    p->begin = 0;
    p->end = keep_len;
    return NULL;
  }
  int64_t cap = 4 * kernel;
  if (allocated && 2 * p->cap > cap) cap = 2 * p->cap;
  if (keep_len + need > cap) cap = keep_len + need;
  const int64_t row[3] = {channels, cap, (int64_t)elem};
  size_t row_bytes = checked_bytes(row, 3);
  const int64_t all[2] = {(int64_t)row_bytes, batch};
  size_t bytes = row_bytes ? checked_bytes(all, 2) : 0;
  void* buf = bytes ? be->alloc_zeroed(be->ctx, &c->exec, bytes) : NULL;
  if (!buf) return kvci_err_oom();
  if (allocated) {
    int64_t ss[4], ds[4], shape[4] = {l->batch, 1, keep_len, p->channels};
    conv_strides(p->channels, p->cap, ss);
    conv_strides(p->channels, cap, ds);
    KVCI_BE(c, copy_4d, buf, ds, (char*)rb->ptr + slot_bytes(p, from), ss, shape, elem);
    be->free(be->ctx, &c->exec, rb->ptr);
  }
  rb->ptr = buf;
  rb->row_bytes = (int64_t)row_bytes;
  p->conv_dtype = dtype;
  p->channels = channels;
  p->kernel = kernel;
  p->cap = cap;
  p->begin = 0;
  p->end = keep_len;
  l->batch = batch;
  l->device = c->device;
  kvci_alias_index_touch(c); /* the batch sizes the store's span */
  return NULL;
}

void kvci_conv_write(const kvc_cache* c, const kvc_layer* l, uint32_t s, const kvc_tensor* x, int64_t first_column,
                    int64_t n, int64_t slot) {
  if (n <= 0) return; /* no columns: x may have no data, which no offset may be added to */
  const kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  const kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s];
  size_t elem = kvc_dtype_size(p->conv_dtype);
  int64_t ds[4], xs[3], ss[4], shape[4] = {l->batch, 1, n, p->channels};
  conv_strides(p->channels, p->cap, ds);
  if (x->strides) {
    for (int i = 0; i < 3; i++) xs[i] = x->strides[i];
  } else {
    xs[2] = 1;
    xs[1] = x->shape[2];
    xs[0] = x->shape[1] * x->shape[2];
  }
  /* x [batch, channels, n] read as [batch, 1, n, channels]. */
  ss[0] = xs[0];
  ss[1] = 0;
  ss[2] = xs[2];
  ss[3] = xs[1];
  const char* src = (const char*)kvci_tensor_base(x) + kvci_elems_bytes(first_column * xs[2], elem);
  KVCI_BE(c, copy_4d, (char*)rb->ptr + slot_bytes(p, slot), ds, src, ss, shape,
          elem);
}

void kvci_conv_zero(const kvc_cache* c, const kvc_layer* l, uint32_t s, int64_t from, int64_t to) {
  if (to <= from) return;
  const kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  const kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s];
  int64_t st[4], shape[4] = {l->batch, 1, to - from, p->channels};
  conv_strides(p->channels, p->cap, st);
  KVCI_BE(c, fill_zero_4d, (char*)rb->ptr + slot_bytes(p, from), st, shape,
          kvc_dtype_size(p->conv_dtype));
}

void kvci_conv_copy_column(const kvc_cache* c, const kvc_layer* l, uint32_t s, int64_t from, int64_t to) {
  const kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  const kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s];
  int64_t st[4], shape[4] = {l->batch, 1, 1, p->channels};
  conv_strides(p->channels, p->cap, st);
  char* base = (char*)rb->ptr;
  KVCI_BE(c, copy_4d, base + slot_bytes(p, to), st, base + slot_bytes(p, from),
          st, shape, kvc_dtype_size(p->conv_dtype));
}

/* ------------------------------------------------------- recurrent state */

kvc_error* kvci_rec_allocate(const kvc_cache* c, kvc_layer* l, uint32_t s, kvc_dtype dtype, int32_t ndim,
                            const int64_t* shape) {
  if (kvci_linear_ext_ensure(l)) return kvci_err_oom();
  kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s + 1];
  int64_t f[KVC_LINEAR_MAX_REC_DIMS + 1];
  f[0] = (int64_t)kvc_dtype_size(dtype);
  for (int32_t i = 1; i < ndim; i++) f[i] = shape[i];
  size_t row_bytes = checked_bytes(f, ndim);
  const int64_t all[2] = {(int64_t)row_bytes, shape[0]};
  size_t bytes = row_bytes ? checked_bytes(all, 2) : 0;
  void* buf = bytes ? c->backend->alloc_zeroed(c->backend->ctx, &c->exec, bytes) : NULL;
  if (!buf) return kvci_err_oom();
  rb->ptr = buf;
  rb->row_bytes = (int64_t)row_bytes;
  p->rec_dtype = dtype;
  p->rec_ndim = ndim;
  for (int32_t i = 0; i < ndim; i++) p->rec_shape[i] = shape[i];
  l->batch = shape[0];
  l->device = c->device;
  kvci_alias_index_touch(c);
  return NULL;
}

void kvci_rec_write(const kvc_cache* c, const kvc_layer* l, uint32_t s, const kvc_tensor* x) {
  const kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  const kvc_row_buffer* rb = &kvci_linear_rows(l)[2 * s + 1];
  size_t elem = kvc_dtype_size(p->rec_dtype);
  /* Left-pad to 6 dims with size-1 axes; the last 4 go through one 4-D copy, the first 2 are looped here. */
  int64_t shape[6], ss[6], ds[6];
  int pad = 6 - p->rec_ndim;
  for (int i = 0; i < 6; i++) {
    shape[i] = i < pad ? 1 : p->rec_shape[i - pad];
    ss[i] = 0;
  }
  ds[5] = 1;
  for (int i = 4; i >= 0; i--) ds[i] = ds[i + 1] * shape[i + 1];
  if (x->strides) {
    for (int i = pad; i < 6; i++) ss[i] = x->strides[i - pad];
  } else {
    for (int i = pad; i < 6; i++) ss[i] = ds[i];
  }
  const char* src = (const char*)kvci_tensor_base(x);
  char* dst = (char*)rb->ptr;
  for (int64_t a = 0; a < shape[0]; a++)
    for (int64_t b = 0; b < shape[1]; b++)
      KVCI_BE(c, copy_4d, dst + (size_t)(a * ds[0] + b * ds[1]) * elem, ds + 2,
              src + (ptrdiff_t)(a * ss[0] + b * ss[1]) * (ptrdiff_t)elem, ss + 2, shape + 2, elem);
}

/* ------------------------------------------------------------------ views */

void kvci_linear_sync(kvc_layer* l) {
  kvc_linear_pair* ps = kvci_linear_pairs(l);
  for (uint32_t i = 0; ps && i < kvci_linear_params_of(l)->num_states; i++) {
    kvc_linear_pair* p = &ps[i];
    if (p->conv_dtype != KVC_DTYPE_UNSET) {
      p->conv_shape[0] = l->batch;
      p->conv_shape[1] = p->channels;
      p->conv_shape[2] = p->end - p->begin;
      p->conv_strides[0] = p->channels * p->cap;
      p->conv_strides[1] = 1;
      p->conv_strides[2] = p->channels;
    }
    if (p->rec_dtype != KVC_DTYPE_UNSET) {
      p->rec_shape[0] = l->batch;
      int64_t st = 1;
      for (int32_t d = p->rec_ndim - 1; d >= 0; d--) {
        p->rec_strides[d] = st;
        st *= p->rec_shape[d];
      }
    }
  }
}

static void empty_view(const kvc_layer* l, kvc_tensor* out) {
  memset(out, 0, sizeof *out);
  out->device = l->device;
}

/* State s's conv (rec 0) or recurrent (rec 1) view; an empty one on the layer's device while it is unallocated. */
static void state_view(const kvc_layer* l, uint32_t s, int rec, kvc_tensor* out) {
  const kvc_linear_pair* ps = kvci_linear_pairs(l);
  const kvc_dtype dt = !ps ? KVC_DTYPE_UNSET : rec ? ps[s].rec_dtype : ps[s].conv_dtype;
  if (dt == KVC_DTYPE_UNSET) {
    empty_view(l, out);
    return;
  }
  kvc_linear_pair* p = &((kvc_linear_pair*)ps)[s];
  out->data = kvci_linear_rows(l)[2 * s + (uint32_t)rec].ptr;
  out->device = l->device;
  out->ndim = rec ? p->rec_ndim : 3;
  out->dtype = kvc_dtype_to_data_type(dt);
  out->shape = rec ? p->rec_shape : p->conv_shape;
  out->strides = rec ? p->rec_strides : p->conv_strides;
  out->byte_offset = rec ? 0 : slot_bytes(p, p->begin); /* the conv window starts at its `begin` slot */
}

void kvci_linear_conv_view(const kvc_layer* l, uint32_t s, kvc_tensor* out) { state_view(l, s, 0, out); }
void kvci_linear_rec_view(const kvc_layer* l, uint32_t s, kvc_tensor* out) { state_view(l, s, 1, out); }

void kvci_linear_conv_return(kvc_layer* l, uint32_t s, int64_t from, int64_t to, kvc_tensor* out) {
  kvc_linear_ext* x = (kvc_linear_ext*)l->ext;
  const kvc_linear_pair* p = &kvci_linear_pairs(l)[s];
  x->ret_shape[0] = l->batch;
  x->ret_shape[1] = p->channels;
  x->ret_shape[2] = to - from;
  x->ret_strides[0] = p->channels * p->cap;
  x->ret_strides[1] = 1;
  x->ret_strides[2] = p->channels;
  out->data = kvci_linear_rows(l)[2 * s].ptr;
  out->device = l->device;
  out->ndim = 3;
  out->dtype = kvc_dtype_to_data_type(p->conv_dtype);
  out->shape = x->ret_shape;
  out->strides = x->ret_strides;
  out->byte_offset = slot_bytes(p, from);
}

/* ------------------------------------------------------- reset and crop */

void kvci_linear_reset(const kvc_cache* c, kvc_layer* l) {
  kvc_linear_pair* ps = kvci_linear_pairs(l);
  kvc_row_buffer* rb = kvci_linear_rows(l);
  for (uint32_t i = 0; ps && i < kvci_linear_params_of(l)->num_states; i++) {
    ps[i].has_previous = 0;
    /* Zeroed in place: the states keep their shapes and addresses (transformers' zero_()). */
    for (int r = 0; r < 2; r++) {
      kvc_row_buffer* b = &rb[2 * i + (uint32_t)r];
      if (!b->ptr) continue;
      int64_t st[4] = {b->row_bytes, b->row_bytes, b->row_bytes, 1}, shape[4] = {l->batch, 1, 1, b->row_bytes};
      KVCI_BE(c, fill_zero_4d, b->ptr, st, shape, 1);
    }
  }
}

kvc_error* kvci_linear_check_crop(const kvc_layer* l, int64_t tokens) {
  if (!l->record_past)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "kvc_cache_crop: a %s layer does not track past states (tokens %" PRId64
                   "); call kvc_cache_activate_past_recording before the updates you may want to roll back",
                   l->desc->name, tokens);
  if (tokens > 0)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "kvc_cache_crop: tokens is %" PRId64 " but a %s layer can only be cropped by a negative number "
                   "of tokens (how many to remove) or 0",
                   tokens, l->desc->name);
  return NULL;
}

void kvci_linear_apply_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  kvc_linear_pair* ps = kvci_linear_pairs(l);
  int64_t t = tokens == INT64_MIN ? INT64_MAX : -tokens; /* "remove everything" without overflow */
  for (uint32_t i = 0; ps && i < kvci_linear_params_of(l)->num_states; i++) {
    kvc_linear_pair* p = &ps[i];
    if (p->conv_dtype == KVC_DTYPE_UNSET) continue; /* nothing recorded (transformers: None[...] raises) */
    /* Python's conv[..., -t-K : -t] (t > 0) or conv[..., -K:] (t == 0), slice bounds clamped at 0. */
    int64_t len = p->end - p->begin;
    int64_t keep_end = t == 0 ? len : (t < len ? len - t : 0);
    int64_t keep_begin = keep_end > p->kernel ? keep_end - p->kernel : 0;
    p->end = p->begin + keep_end;
    p->begin += keep_begin;
  }
  kvci_linear_sync(l);
}
