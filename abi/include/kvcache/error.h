/*
 * kvcache/error.h: returned error objects.
 *
 * Every fallible function returns `kvc_error*`: NULL means success. A non-NULL
 * error is owned by the caller, who reads it with kvc_error_code() and
 * kvc_error_message() and frees it with kvc_error_destroy(). There is no
 * thread-local "last error": an error travels with the call that made it,
 * which is what cgo goroutines, Rust threads and the Python GIL release need.
 *
 * A call that returns an error has changed nothing: inputs are validated
 * before any state is touched, out-parameters are left as they were, and
 * nothing leaks. Messages name the argument, the value and the rule, e.g.
 *   "kvc_cache_update: key.shape[1] (num_kv_heads) is 4 but layer 2 holds 8 heads;
 *    new tokens must match the stored batch, heads and head_dim"
 *
 * One exception, since 0.7: a device that fails a call after the call has
 * begun writing (a GPU runs work asynchronously, and what already ran cannot
 * be undone) leaves the cache or pool *poisoned*. The call returns
 * KVC_ERROR_INVALID_STATE naming the device operation and the vendor's own
 * message; every later call on that cache or pool is refused with
 * KVC_ERROR_INVALID_STATE, except kvc_cache_reset (which empties the cache
 * and makes it usable again) and the destroy functions. Device failures
 * before anything was written change nothing, like any other error.
 * docs/gpus.md, 'When the device fails', lists what each operation leaves.
 */
#ifndef KVCACHE_ERROR_H
#define KVCACHE_ERROR_H

#include "kvcache/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque error object. */
typedef struct kvc_error kvc_error;

/*
 * Error codes: stable int32 values, never renumbered, append only. The
 * comment says which Python exception transformers raises in the same case.
 */
typedef int32_t kvc_code;
#define KVC_OK                       0  /**< not an error; never returned in an object */
#define KVC_ERROR_INVALID_ARGUMENT   1  /**< ValueError/TypeError: a bad value, NULL, bad option */
#define KVC_ERROR_OUT_OF_RANGE       2  /**< IndexError: layer or batch index, static cache overflow */
#define KVC_ERROR_DTYPE_MISMATCH     3  /**< a tensor's dtype differs from the cache's (no silent casts) */
#define KVC_ERROR_SHAPE_MISMATCH     4  /**< ndim, batch, heads or head_dim disagree with the cache */
#define KVC_ERROR_DEVICE_MISMATCH    5  /**< a tensor lives on another device than the cache */
#define KVC_ERROR_UNSUPPORTED        6  /**< AttributeError: this layer kind has no such operation */
#define KVC_ERROR_INVALID_STATE      7  /**< RuntimeError: the operation is not allowed in this state */
#define KVC_ERROR_OUT_OF_MEMORY      8  /**< an allocation failed (host or device) */
#define KVC_ERROR_NO_DEVICE          9  /**< no backend or no device for the requested device type */
#define KVC_ERROR_VERSION_MISMATCH  10  /**< a backend plugin speaks another backend API version */
#define KVC_ERROR_INTERNAL          11  /**< a bug in kvcache; please report it */
#define KVC_ERROR_IO                12  /**< OSError: a file or stream could not be read or written, or is not
                                             a valid kvcache file (truncated, corrupted). Since 0.6. */
#define KVC_ERROR_BUSY              13  /**< another thread is inside a call on the same handle; this call did
                                             nothing (the handle is unchanged). Since 0.7. */

/**
 * The code of `error`. `error` is borrowed for the call. Returns KVC_OK for
 * NULL (so `kvc_error_code(kvc_x(...))` reads naturally). Never fails.
 */
KVC_API kvc_code kvc_error_code(const kvc_error* error);

/**
 * The message of `error`: never NULL (for NULL it is "ok"). The string is owned
 * by `error` and valid until kvc_error_destroy(error).
 */
KVC_API const char* kvc_error_message(const kvc_error* error);

/** Frees `error`. Accepts NULL. Never fails. Safe for the static out-of-memory error. */
KVC_API void kvc_error_destroy(kvc_error* error);

/** A static name for a code: "KVC_ERROR_OUT_OF_RANGE", or "KVC_ERROR_UNKNOWN". Never NULL. */
KVC_API const char* kvc_code_name(kvc_code code);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_ERROR_H */
