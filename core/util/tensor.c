/* core/util/tensor.c: dtypes and the checks every input tensor goes through. */
#include <inttypes.h>
#include <stdio.h>

#include "error.h"
#include "tensor.h"

kvc_data_type kvc_dtype_to_data_type(kvc_dtype dtype) { return kvci_dtype_to_data_type(dtype); }

kvc_dtype kvc_dtype_from_data_type(kvc_data_type t) { return kvci_dtype_from_data_type(t); }

size_t kvc_dtype_size(kvc_dtype dtype) {
  switch (dtype) {
    case KVC_DTYPE_FLOAT32: return 4;
    case KVC_DTYPE_FLOAT16:
    case KVC_DTYPE_BFLOAT16: return 2;
    default: return 0;
  }
}

const char* kvci_dtype_name(kvc_dtype dtype) {
  switch (dtype) {
    case KVC_DTYPE_FLOAT32: return "float32";
    case KVC_DTYPE_FLOAT16: return "float16";
    case KVC_DTYPE_BFLOAT16: return "bfloat16";
    case KVC_DTYPE_UNSET: return "unset";
    default: return "unknown";
  }
}

static const char* device_name(kvc_device_type t) {
  switch (t) {
    case KVC_DEVICE_CPU: return "CPU";
    case KVC_DEVICE_CUDA: return "CUDA";
    case KVC_DEVICE_CUDA_HOST: return "CUDA host";
    case KVC_DEVICE_ROCM: return "ROCm";
    case KVC_DEVICE_ROCM_HOST: return "ROCm host";
    default: return "unknown device";
  }
}

const char* kvci_arg_name(char buf[48], const char* base, int64_t index) {
  if (index < 0) return base;
  snprintf(buf, 48, "%s[%" PRId64 "]", base, index);
  return buf;
}

kvc_error* kvci_err_unstorable(const char* fn, const char* arg, kvc_data_type dtype) {
  return kvci_err(KVC_ERROR_DTYPE_MISMATCH,
                 "%s: %s.dtype is {code %u, bits %u, lanes %u}; kvcache stores float32, float16 or bfloat16 with lanes 1",
                 fn, arg, (unsigned)dtype.code, (unsigned)dtype.bits, (unsigned)dtype.lanes);
}

kvc_error* kvci_check_input_tensor(const char* fn, const char* base, int64_t index, const kvc_tensor* t,
                                  const kvc_device* device) {
  /* The argument's name ("key" or "keys[3]") is formatted only on the error path: this runs per layer per step. */
  char buf[48];
#define arg kvci_arg_name(buf, base, index)
  if (!t) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass a 4-D [batch, heads, seq, head_dim] tensor", fn, arg);
  if (t->ndim != 4)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.ndim is %d but must be 4 ([batch, heads, seq, head_dim])", fn,
                   arg, (int)t->ndim);
  if (!t->shape) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.shape is NULL; a 4-D tensor needs 4 sizes", fn, arg);
  if (kvci_dtype_from_data_type(t->dtype) == KVC_DTYPE_UNSET) return kvci_err_unstorable(fn, arg, t->dtype);
  if (t->device.device_type != device->device_type || t->device.device_id != device->device_id)
    return kvci_err(KVC_ERROR_DEVICE_MISMATCH,
                   "%s: %s is on %s:%d but the cache lives on %s:%d; kvcache does not copy between devices "
                   "implicitly",
                   fn, arg, device_name(t->device.device_type), (int)t->device.device_id,
                   device_name(device->device_type), (int)device->device_id);
  static const char* dims[4] = {"batch", "heads", "seq", "head_dim"};
  for (int i = 0; i < 4; i++) {
    if (t->shape[i] < 0)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.shape[%d] (%s) is %" PRId64 "; sizes must be >= 0", fn, arg, i,
                     dims[i], t->shape[i]);
  }
  for (int i = 0; i < 4; i += (i == 1 ? 2 : 1)) {
    if (t->shape[i] == 0)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.shape[%d] (%s) is 0; %s must be >= 1", fn, arg, i, dims[i],
                     dims[i]);
  }
  int64_t numel = 1;
  for (int i = 0; i < 4; i++) {
    /* Bounds that keep every size and offset computation of the core far from int64 overflow. */
    if (t->shape[i] > INT32_MAX)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.shape[%d] (%s) is %" PRId64 "; sizes must be < 2^31", fn, arg, i,
                     dims[i], t->shape[i]);
    numel *= t->shape[i];
    if (numel > (INT64_C(1) << 48))
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s has more than 2^48 elements (shape [%" PRId64 ", %" PRId64
                     ", %" PRId64 ", %" PRId64 "])", fn, arg, t->shape[0], t->shape[1], t->shape[2], t->shape[3]);
  }
  if (numel > 0 && !t->data)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL but the tensor has %" PRId64 " elements", fn, arg,
                   numel);
  return NULL;
#undef arg
}

kvc_error* kvci_check_nd_input(const char* fn, const char* arg, const kvc_tensor* t, const kvc_device* dev,
                              int32_t min_ndim, int32_t max_ndim, const char* layout, int32_t empty_dim) {
  if (!t) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass a %s tensor", fn, arg, layout);
  if (t->ndim < min_ndim || t->ndim > max_ndim)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.ndim is %d but must be in [%d, %d] (%s)", fn, arg, (int)t->ndim,
                   (int)min_ndim, (int)max_ndim, layout);
  if (!t->shape) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.shape is NULL but ndim is %d", fn, arg, (int)t->ndim);
  if (kvci_dtype_from_data_type(t->dtype) == KVC_DTYPE_UNSET) return kvci_err_unstorable(fn, arg, t->dtype);
  if (t->device.device_type != dev->device_type || t->device.device_id != dev->device_id)
    return kvci_err(KVC_ERROR_DEVICE_MISMATCH,
                   "%s: %s is on device %d:%d but the cache lives on %d:%d; kvcache does not copy between devices "
                   "implicitly",
                   fn, arg, (int)t->device.device_type, (int)t->device.device_id, (int)dev->device_type,
                   (int)dev->device_id);
  int64_t numel = 1;
  for (int32_t i = 0; i < t->ndim; i++) {
    int64_t lo = i == empty_dim ? 0 : 1;
    if (t->shape[i] < lo || t->shape[i] > INT32_MAX)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s.shape[%d] is %" PRId64 "; it must be in [%" PRId64 ", 2^31)",
                     fn, arg, (int)i, t->shape[i], lo);
    numel *= t->shape[i];
    if (numel > (INT64_C(1) << 48))
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s has more than 2^48 elements", fn, arg);
  }
  if (numel > 0 && !t->data)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL but the tensor has %" PRId64 " elements", fn, arg,
                   numel);
  return NULL;
}
