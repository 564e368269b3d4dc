/*
 * backends/gpu/gpu_internal.h: what the files of the GPU backend share: the
 * per-cache state behind kvc_exec.state, the current-device scope every
 * entry runs in, and the kernel launches gpu_exec.cpp borrows from
 * gpu_backend.cpp. Compiled as CUDA or HIP (or against the fake runtime).
 */
#ifndef KVC_GPU_INTERNAL_H
#define KVC_GPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "gpu_vendor.h"

/*
 * A pinned host buffer given back by host_free (gpu_exec.cpp): parked until
 * its event has passed, then handed out again for a request of its class
 * (gpu_host_class.h). The event is the buffer's for its whole life (kept in
 * its header too), recorded once per use.
 */
typedef struct gpu_host_block {
  void* base;        /* what the runtime allocated; the caller's pointer is base + KVC_GPU_HOST_HEADER */
  size_t bytes;      /* its capacity: the class of the request it was made for */
  gpuEvent_t done;   /* recorded on the compute stream when it was given back (NULL: never recorded) */
  int captured;      /* given back while the stream was captured into a graph: a replay may still read it, so
                        it is never handed out again, only released by exec_close */
} gpu_host_block;

/* kvc_exec.state: one per cache. */
typedef struct gpu_state {
  int pools;             /* the device has the stream-ordered allocator */
  gpuStream_t side;      /* prefetches run here, beside the compute stream */
  gpuEvent_t to_side;    /* recorded on the compute stream; a prefetch waits for it */
  gpuEvent_t to_compute; /* recorded on the side stream; tier_wait makes the compute stream wait for it */
  gpuEvent_t handover;   /* exec_set_stream: the new stream waits for the old one */
  int side_busy;         /* a prefetch was issued since the compute stream last waited for the side stream */
  gpu_host_block* freed; /* host_free'd buffers: pending, or idle and reused by host_alloc */
  size_t nfreed, cap_freed;
  size_t freed_bytes;    /* the capacities of freed[]: pinned memory kept for reuse */
} gpu_state;

/* Keeps the vendor's words for a failed runtime call of this thread, for the table's last_error (version 7): the
   call's name (the last one that failed: gpu_vendor.h's KVC_GPU_NAMED), the error's name and its string. */
void kvc_gpu_note_error(gpuError_t e);
/* The same for an error that no call of ours returned: `what` failed (a kernel launch, an earlier launch). */
void kvc_gpu_note_error_of(gpuError_t e, const char* what);
/* Forgets the thread's noted failure: an entry that recovered from it (a fallback that worked) succeeded, and a
   later failure with nothing noted must not be described by it. */
void kvc_gpu_forget_error(void);
/* Keeps a sentence of the plugin's own (the device probe's, gpu_probe.h) for last_error. */
void kvc_gpu_note_text(const char* text);
/* 0 when the plugin holds a kernel image `device` can run (the device is current); else notes why not. */
int kvc_gpu_check_image(int device);
/* last_error: the thread's last noted failure, or NULL; reading it clears it, so that a later failure that has
   no runtime error behind it (a plan the kernels cannot run) is not described by an old one. */
const char* kvc_gpu_last_error(void* ctx);

/*
 * Makes `device` current for the scope of an entry and restores the
 * caller's device after, so that a cache on device 1 works from a thread
 * whose current device is 0. ok is false when the device cannot be set.
 *
 * The caller's device is restored only when its primary context exists:
 * making a device current creates its context (hundreds of MiB on the
 * card), and a thread that never used device 0 still reads 0 as current, so
 * a process that only uses GPU k would otherwise get a context on GPU 0
 * from every entry. Then `device` stays current, as PyTorch's device guard
 * leaves it (docs/gpus.md, 'Current device').
 */
struct gpu_device_scope {
  int prev;
  bool ok;
  bool switched;
  explicit gpu_device_scope(int device) : prev(0), ok(false), switched(false) {
    gpuError_t e = gpuGetDevice(&prev);
    if (e != gpuSuccess) {
      (void)gpuGetLastError();
      kvc_gpu_note_error(e);
      return;
    }
    if (prev != device) {
      /* Asked before the switch; -1 (cannot tell) restores, as before. */
      const bool restore = gpuPrimaryContextActive(prev) != 0;
      if ((e = gpuSetDevice(device)) != gpuSuccess) {
        (void)gpuGetLastError();
        kvc_gpu_note_error(e);
        return;
      }
      switched = restore;
    }
    ok = true;
  }
  ~gpu_device_scope() {
    if (switched && gpuSetDevice(prev) != gpuSuccess) (void)gpuGetLastError();
  }
  gpu_device_scope(const gpu_device_scope&) = delete;
  gpu_device_scope& operator=(const gpu_device_scope&) = delete;
};

static inline gpuStream_t gpu_stream_of(const kvc_exec* exec) { return (gpuStream_t)exec->stream; }
static inline gpu_state* gpu_state_of(const kvc_exec* exec) { return (gpu_state*)exec->state; }

/* 0 when the runtime reports no error since the last check (and clears what it reports); else notes it: the call
   that returned e, or, when e is success and the error is older, an earlier asynchronous launch. */
static inline int gpu_check(gpuError_t e) {
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    kvc_gpu_note_error(e);
    return -1;
  }
  e = gpuGetLastError();
  if (e == gpuSuccess) return 0;
  kvc_gpu_note_error_of(e, "an earlier kernel launch");
  return -1;
}

/* gpu_check right after launching `kernel`: a failed launch is named by its kernel. */
static inline int gpu_check_launch(const char* kernel) {
  const gpuError_t e = gpuGetLastError();
  if (e == gpuSuccess) return 0;
  kvc_gpu_note_error_of(e, kernel);
  return -1;
}

/* A non-overlapping strided copy as one kernel on `stream` (the current device is already the place's). */
int kvc_gpu_copy_on(gpuStream_t stream, void* dst, const int64_t dst_strides[4], const void* src,
                    const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);
/* Zeroes `bytes` contiguous bytes at dst (device or mapped host memory) on `stream`. */
int kvc_gpu_zero_on(gpuStream_t stream, void* dst, size_t bytes);

/* gpu_exec.cpp: the entries about places, streams and the host tier. */
int kvc_gpu_exec_open(void* ctx, kvc_exec* exec);
void kvc_gpu_exec_close(void* ctx, kvc_exec* exec);
int kvc_gpu_exec_set_stream(void* ctx, kvc_exec* exec, void* stream);
void* kvc_gpu_host_alloc_zeroed(void* ctx, const kvc_exec* exec, size_t bytes);
void* kvc_gpu_host_alloc(void* ctx, const kvc_exec* exec, size_t bytes); /* not zeroed (version 5) */
void kvc_gpu_host_free(void* ctx, const kvc_exec* exec, void* ptr);
int kvc_gpu_copy_tier_4d(void* ctx, const kvc_exec* exec, int to_host, void* dst, const int64_t dst_strides[4],
                         const void* src, const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);
int kvc_gpu_tier_wait(void* ctx, const kvc_exec* exec);

/* gpu_rope.cpp: the entries of sink layers. */
int kvc_gpu_rerotate_keys_4d(void* ctx, const kvc_exec* exec, kvc_dtype dtype, void* keys, const int64_t strides[4],
                             const int64_t shape[4], const float* rcos, const float* rsin);
int kvc_gpu_read_f32_4d(void* ctx, const kvc_exec* exec, float* dst, const void* src, kvc_dtype dtype,
                        const int64_t src_strides[4], const int64_t shape[4]);

/* gpu_quant.cpp: the quantizer entries (backend table version 4). */
int kvc_gpu_quantize_groups(void* ctx, const kvc_exec* exec, const kvc_quantize_job* job);
int kvc_gpu_dequantize_groups(void* ctx, const kvc_exec* exec, const kvc_dequantize_job* job);
int kvc_gpu_fp8_calibrate(void* ctx, const kvc_exec* exec, const void* src, const int64_t strides[4],
                          const int64_t shape[4], int32_t dtype, float* scale);
int kvc_gpu_fp8_round_trip(void* ctx, const kvc_exec* exec, void* dst, const int64_t dst_strides[4], const void* src,
                           const int64_t src_strides[4], const int64_t shape[4], int32_t dtype, float scale);

#endif /* KVC_GPU_INTERNAL_H */
