/*
 * kvcache/tensor.h: tensors cross the ABI as `kvc_tensor`, laid out exactly
 * like DLPack's DLTensor (DLPack 1.x specification), so a binding can pass the
 * descriptor that torch, numpy, cupy or jax hand out without copying, and
 * export cache views back through __dlpack__ without copying either.
 *
 * Key and value tensors are always 4-D: [batch, num_kv_heads, seq, head_dim],
 * with the sequence on dimension 2. Strides are in elements; NULL strides mean
 * compact row-major. Inputs may have any strides (including broadcast zeros);
 * views returned by kvcache have head_dim contiguous (stride 1).
 */
#ifndef KVCACHE_TENSOR_H
#define KVCACHE_TENSOR_H

#include <stddef.h>

#include "kvcache/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device types: the DLPack DLDeviceType values. */
typedef int32_t kvc_device_type;
#define KVC_DEVICE_CPU        1
#define KVC_DEVICE_CUDA       2
#define KVC_DEVICE_CUDA_HOST  3  /**< pinned host memory visible to CUDA */
#define KVC_DEVICE_ROCM      10
#define KVC_DEVICE_ROCM_HOST 11  /**< pinned host memory visible to ROCm */

/** Layout of DLDevice. */
typedef struct kvc_device {
  kvc_device_type device_type;
  int32_t device_id;
} kvc_device;

/* Type codes: the DLPack DLDataTypeCode values. */
#define KVC_TYPE_CODE_INT    0
#define KVC_TYPE_CODE_UINT   1
#define KVC_TYPE_CODE_FLOAT  2
#define KVC_TYPE_CODE_BFLOAT 4

/** Layout of DLDataType: {code, bits, lanes}. kvcache accepts lanes == 1. */
typedef struct kvc_data_type {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} kvc_data_type;

/** Layout of DLTensor. */
typedef struct kvc_tensor {
  void* data;            /**< base pointer; the first element is at data + byte_offset */
  kvc_device device;
  int32_t ndim;
  kvc_data_type dtype;
  int64_t* shape;        /**< ndim entries */
  int64_t* strides;      /**< ndim entries in elements, or NULL for compact row-major */
  uint64_t byte_offset;
} kvc_tensor;

/*
 * Storage dtypes of a cache, as used in option structs. A cache stores one of
 * these and accepts only tensors of exactly that dtype: copies are bit-exact,
 * kvcache never converts silently.
 */
typedef int32_t kvc_dtype;
#define KVC_DTYPE_UNSET    0  /**< take the dtype from the first update */
#define KVC_DTYPE_FLOAT32  1  /**< {KVC_TYPE_CODE_FLOAT, 32, 1} */
#define KVC_DTYPE_FLOAT16  2  /**< {KVC_TYPE_CODE_FLOAT, 16, 1} */
#define KVC_DTYPE_BFLOAT16 3  /**< {KVC_TYPE_CODE_BFLOAT, 16, 1} */

/** The DLPack triple of `dtype` ({0,0,0} for an unknown value). Never fails. */
KVC_API kvc_data_type kvc_dtype_to_data_type(kvc_dtype dtype);

/** The storage dtype of a DLPack triple, or KVC_DTYPE_UNSET if kvcache cannot store it. */
KVC_API kvc_dtype kvc_dtype_from_data_type(kvc_data_type data_type);

/** Bytes per element of `dtype` (0 for KVC_DTYPE_UNSET or unknown values). */
KVC_API size_t kvc_dtype_size(kvc_dtype dtype);

/**
 * A key/value pair of views into cache-owned memory.
 *
 * Both tensors (their data, shape and strides) are owned by the cache and
 * valid until the next call that mutates that cache (update, crop, reorder,
 * batch operations, reset, destroy, ...). Copy what you need to keep.
 */
typedef struct kvc_kv {
  kvc_tensor key;
  kvc_tensor value;
} kvc_kv;

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_TENSOR_H */
