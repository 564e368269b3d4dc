/*
 * core/util/tensor.h: checks and arithmetic on the caller's kvc_tensor descriptors.
 */
#ifndef KVC_CORE_UTIL_TENSOR_H
#define KVC_CORE_UTIL_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "kvcache.h"

/* Tensors (tensor.c; the small ones here, inline: an update runs them per layer per step, and the public
   kvc_dtype_* functions would be reached through the PLT from inside the shared library). */
static inline int kvci_data_type_equal(kvc_data_type a, kvc_data_type b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
/* What kvc_dtype_to_data_type and kvc_dtype_from_data_type return. */
static inline kvc_data_type kvci_dtype_to_data_type(kvc_dtype dtype) {
  kvc_data_type t = {0, 0, 0};
  switch (dtype) {
    case KVC_DTYPE_FLOAT32: t.code = KVC_TYPE_CODE_FLOAT; t.bits = 32; t.lanes = 1; break;
    case KVC_DTYPE_FLOAT16: t.code = KVC_TYPE_CODE_FLOAT; t.bits = 16; t.lanes = 1; break;
    case KVC_DTYPE_BFLOAT16: t.code = KVC_TYPE_CODE_BFLOAT; t.bits = 16; t.lanes = 1; break;
    default: break;
  }
  return t;
}
static inline kvc_dtype kvci_dtype_from_data_type(kvc_data_type t) {
  if (t.lanes != 1) return KVC_DTYPE_UNSET;
  if (t.code == KVC_TYPE_CODE_FLOAT && t.bits == 32) return KVC_DTYPE_FLOAT32;
  if (t.code == KVC_TYPE_CODE_FLOAT && t.bits == 16) return KVC_DTYPE_FLOAT16;
  if (t.code == KVC_TYPE_CODE_BFLOAT && t.bits == 16) return KVC_DTYPE_BFLOAT16;
  return KVC_DTYPE_UNSET;
}
/* The error for an input whose dtype kvcache cannot store (not float32, float16 or bfloat16 with lanes 1). */
kvc_error* kvci_err_unstorable(const char* fn, const char* arg, kvc_data_type dtype);
/*
 * A state or indexer input on its own (ops_recurrent.c, ops_indexer.c): `ndim` in [min_ndim, max_ndim], a
 * storable dtype, the cache's device, sizes in [1, 2^31) except dimension `empty_dim` (-1: none), which may be
 * 0 (no new columns or tokens); `layout` names the expected layout in messages.
 */
kvc_error* kvci_check_nd_input(const char* fn, const char* arg, const kvc_tensor* t, const kvc_device* dev,
                               int32_t min_ndim, int32_t max_ndim, const char* layout, int32_t empty_dim);
/* Validates one K or V input tensor on its own (ndim, dtype, device, shape, data). */
kvc_error* kvci_check_input_tensor(const char* fn, const char* base, int64_t index, const kvc_tensor* t,
                                  const kvc_device* device);
/* "base" when index < 0, else "base[index]" formatted into buf. */
const char* kvci_arg_name(char buf[48], const char* base, int64_t index);
/* Element strides of a tensor (computing compact ones when strides is NULL). */
static inline void kvci_tensor_strides(const kvc_tensor* t, int64_t out[4]) {
  if (t->strides) {
    for (int i = 0; i < 4; i++) out[i] = t->strides[i];
    return;
  }
  int64_t s = 1;
  for (int i = 3; i >= 0; i--) {
    out[i] = s;
    s *= t->shape[i];
  }
}
/* A tensor without elements may have data NULL, which no offset may be added to (undefined behaviour in C). */
static inline const void* kvci_tensor_base(const kvc_tensor* t) {
  return t->data ? (const char*)t->data + t->byte_offset : NULL;
}
/* The signed byte offset of `elems` elements: an input's strides may be negative (DLPack allows it), and made
   unsigned they would move a pointer out of its object (undefined even where it wraps to the right address). */
static inline ptrdiff_t kvci_elems_bytes(int64_t elems, size_t elem) { return (ptrdiff_t)elems * (ptrdiff_t)elem; }
const char* kvci_dtype_name(kvc_dtype dtype);

#endif /* KVC_CORE_UTIL_TENSOR_H */
