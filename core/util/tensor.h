/*
 * core/util/tensor.h: checks and arithmetic on the caller's kvc_tensor descriptors.
 */
#ifndef KVC_CORE_UTIL_TENSOR_H
#define KVC_CORE_UTIL_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "kvcache.h"

/* Tensors (tensor.c). */
int kvci_data_type_equal(kvc_data_type a, kvc_data_type b);
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
void kvci_tensor_strides(const kvc_tensor* t, int64_t out[4]);
const void* kvci_tensor_base(const kvc_tensor* t);
/* The signed byte offset of `elems` elements: an input's strides may be negative (DLPack allows it), and made
   unsigned they would move a pointer out of its object (undefined even where it wraps to the right address). */
static inline ptrdiff_t kvci_elems_bytes(int64_t elems, size_t elem) { return (ptrdiff_t)elems * (ptrdiff_t)elem; }
const char* kvci_dtype_name(kvc_dtype dtype);

#endif /* KVC_CORE_UTIL_TENSOR_H */
