/*
 * abi/backend/backend.h: the backend table, the interface between the core
 * and its backends (built in or plugins). It lives beside the public ABI,
 * not in core/ or backends/, because both sides compile against it and
 * neither may depend on the other's folder. Not installed: it is the
 * plugins' contract with this release of the core, checked by api_version.
 *
 * A backend moves bytes on one device type; it knows nothing about caches,
 * windows or layers. The core reaches every byte of K/V storage only through
 * this table, so the CUDA and HIP plugins slot in without touching the core.
 * The table is versioned: struct_size and api_version are checked when a
 * backend registers or a plugin is loaded; new entries are only appended.
 *
 * Conventions: pointers are device pointers of the backend's device type.
 * Strides and shapes are in elements, always 4-D [batch, heads, seq, dim].
 * Functions return 0 on success, non-zero on failure (the core turns that
 * into a kvc_error naming the entry and last_error's message). A device may
 * fail any call for reasons the core cannot check first (no kernel image for
 * the card, a lost context, an allocation the device cannot serve): the core
 * checks every result (docs/gpus.md, 'When the device fails'). `ctx` is the backend's own pointer. Every operation is
 * given the cache's execution place (kvc_exec): the device, the caller's
 * stream and the backend's per-cache state. GPU backends issue all work on
 * that stream and return without waiting for it (no host synchronisation);
 * the CPU backend ignores the stream and works synchronously.
 *
 * Entries documented as optional may be NULL: the backend has no
 * implementation yet. The core then refuses, before changing anything, the
 * calls that would need the entry (KVC_ERROR_UNSUPPORTED, naming the
 * operation and the backend), so a cache kind can run on every backend that
 * implements what it needs, and a missing kernel never shows up half-way
 * through an update.
 */
#ifndef KVC_BACKEND_H
#define KVC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/tensor.h"

/*
 * 2: the host tier of offloading. 3: execution places (streams) and batched copies.
 * 4: sink layers' RoPE operations (key re-rotation, reads of cos/sin as float32) and quantized layers
 * (quantize and dequantize groups, FP8 calibration and round trip).
 * 5: host-tier allocations without zeroing, for the stores an offload overwrites.
 * 6: batched row copies (the pool's step write through a slot mapping).
 * 7: last_error, the vendor's words for a failed call.
 * 8: a pool's fp8 storage (encode rows into e4m3fn codes, decode codes back).
 * 9: device-tier allocations without zeroing, for the stores a restore or load fills.
 */
#define KVC_BACKEND_API_VERSION 9

/*
 * Where a cache's work runs. The core owns the struct (one per cache) and
 * passes it to every call; `state` belongs to the backend (exec_open creates
 * it, exec_close releases it: a GPU backend keeps the side stream and events
 * of offloading and its deferred host frees there).
 */
typedef struct kvc_exec {
  int32_t device_id;
  void* stream; /* cudaStream_t / hipStream_t of the caller; NULL: the default stream */
  void* state;  /* the backend's; NULL until exec_open */
} kvc_exec;

/*
 * One strided 4-D copy of a batch (copy_4d_batch). Copies in one batch never
 * overlap each other and never overlap within themselves.
 */
typedef struct kvc_copy_4d {
  void* dst;
  const void* src;
  int64_t dst_strides[4];
  int64_t src_strides[4];
  int64_t shape[4];
  size_t elem_size;
} kvc_copy_4d;

/*
 * One copy_rows of a batch (copy_rows_batch): for i in [0, count), dst row
 * dst_rows[i] = src row src_rows[i], a row being row_shape[1..3] elements
 * (row_shape[0] is 1). Index arrays are host memory. Jobs of one batch never
 * write the same bytes.
 */
typedef struct kvc_copy_rows_job {
  void* dst;
  const void* src;
  const int64_t* dst_rows;
  const int64_t* src_rows;
  int64_t dst_strides[4];
  int64_t src_strides[4];
  int64_t row_shape[4];
  int64_t count;
  size_t elem_size;
} kvc_copy_rows_job;

/* ------------------------------------------------------------------ */
/* Version 4: quantized layers (types of the entries at the end of the table)
 *
 * The core plans (which tokens, which groups, where their records go); the
 * backend does the arithmetic, bit for bit as the CPU backend does it
 * (docs/semantics.md, 'quanto quantizer', 'HQQ quantizer', 'FP8'). Every
 * descriptor is host memory, read before the call returns; the buffers it
 * points to are device memory of the place (or host-tier memory).
 */

/* A return of the quantizer entries: the backend has no kernel for this job (a dtype, an nbits); the core reports
   KVC_ERROR_UNSUPPORTED naming the operation and the backend. Any other non-zero return is a failure. */
#define KVC_BACKEND_UNSUPPORTED 95

/* The arithmetic of a group quantizer. */
typedef struct kvc_quant_spec {
  int32_t quantizer; /* kvc_quantizer: KVC_QUANTIZER_QUANTO or KVC_QUANTIZER_HQQ */
  int32_t nbits;     /* quanto 2 or 4; HQQ 1, 2, 3, 4 or 8 */
  int32_t dtype;     /* kvc_dtype of the values, the scales and the zero points */
  int32_t axis;      /* HQQ: 1, groups are the rows of its work; 0, the columns (it decides how float sums round) */
} kvc_quant_spec;

/*
 * Where the values of groups sit in a buffer of `dtype` elements, as a small
 * affine map. A job is a set of independent quantizer *calls* (HQQ's early
 * stop looks at the mean error over the groups of one call, so a call is
 * exactly the groups transformers quantizes together); value i of group
 * k = k0 * groups[1] + k1 of call c = c0 * calls[1] + c1 is the element at
 *   c0 * call_strides[0] + c1 * call_strides[1]
 *   + k0 * group_strides[0] + k1 * group_strides[1] + i * value_stride
 * from the base pointer (strides in elements, any sign).
 */
typedef struct kvc_quant_span {
  int64_t calls[2];
  int64_t call_strides[2];
  int64_t groups[2];
  int64_t group_strides[2];
  int64_t value_stride;
} kvc_quant_span;

/*
 * Packed records: the record of group k of call c starts at byte
 * c0 * call_strides[0] + c1 * call_strides[1] + k * record_stride of `base`.
 * A record is [scale][zero point][codes]: scale and zero point in `dtype`
 * (unaligned), then the group's codes packed little-endian, code i in bits
 * [i * nbits, (i + 1) * nbits) (kvc_quant_record_bytes).
 */
typedef struct kvc_quant_records {
  void* base;              /* NULL in a quantize job: the records are not kept */
  int64_t call_strides[2]; /* bytes */
  int64_t record_stride;   /* bytes */
} kvc_quant_records;

/* Bytes of one record of `group` codes of nbits, with scale and zero point of elem bytes each. */
static inline int64_t kvc_quant_record_bytes(int64_t group, int32_t nbits, size_t elem) {
  return 2 * (int64_t)elem + (group * nbits + 7) / 8;
}

/*
 * quantize_groups: every call of src_span (groups of `group` values read
 * from src) is quantized; its records are written to `records` and, when
 * `dequant` is not NULL, the dequantized values (rounded to dtype) to
 * dequant + dequant_span, which has src_span's calls and groups (it may be
 * src itself with the same span: a call reads all its values first).
 * `scratch` is device memory of at least kvc_quantize_scratch_bytes(groups
 * of one call, group) bytes, for the backend's use during the call.
 */
typedef struct kvc_quantize_job {
  kvc_quant_spec spec;
  int64_t group;
  const void* src;
  kvc_quant_span src_span;
  kvc_quant_records records;
  void* dequant;
  kvc_quant_span dequant_span;
  void* scratch;
  size_t scratch_bytes;
} kvc_quantize_job;

/* Working memory of a quantize job whose calls have `ngroups` groups of `group` values: the values as float32,
   their codes, per-group parameters, and HQQ's solver state (two or three floats per value, three per group). */
static inline size_t kvc_quantize_scratch_bytes(int64_t ngroups, int64_t group) {
  const size_t n = (size_t)(ngroups * group), g = (size_t)ngroups;
  return n * (sizeof(float) + 1 + 3 * sizeof(float)) + g * 5 * sizeof(float) + 6 * 64;
}

/*
 * dequantize_groups: values lo..hi-1 (0 <= lo <= hi <= group) of every
 * group of the records are dequantized to `dtype` and written to dst +
 * dst_span, value i at i - lo (dst_span gives the calls and groups). The
 * bits are those of quantize_groups' dequantized values. Needs no scratch.
 */
typedef struct kvc_dequantize_job {
  kvc_quant_spec spec;
  int64_t group, lo, hi;
  kvc_quant_records records;
  void* dst;
  kvc_quant_span dst_span;
} kvc_dequantize_job;

typedef struct kvc_backend {
  uint32_t struct_size;     /* sizeof(kvc_backend) of the backend's build */
  uint32_t api_version;     /* KVC_BACKEND_API_VERSION of the backend's build */
  const char* name;         /* "cpu", "cuda", "hip" */
  kvc_device_type device_type;
  void* ctx;

  /* Number of devices of this type, 0 if none. */
  int (*device_count)(void* ctx);

  /*
   * Prepares `exec` (device_id and stream set by the core) for use: 0 on
   * success. exec_close releases what exec_open made, after the work issued
   * on the place has finished with it; it is called once per successful open.
   */
  int (*exec_open)(void* ctx, kvc_exec* exec);
  void (*exec_close)(void* ctx, kvc_exec* exec);
  /*
   * Moves the place to `stream` (sets exec->stream): work issued on it
   * afterwards is ordered after the work issued on the old stream (GPU: an event recorded on the
   * old stream that the new one waits for; no host synchronisation). 0 on
   * success; on failure the place is unchanged.
   */
  int (*exec_set_stream)(void* ctx, kvc_exec* exec, void* stream);

  /* Zero-filled allocation of `bytes` (> 0) on the place's device, ordered on its stream; NULL on failure. */
  void* (*alloc_zeroed)(void* ctx, const kvc_exec* exec, size_t bytes);
  /* Releases after the work issued before on the place's stream (GPU: stream-ordered free). */
  void (*free)(void* ctx, const kvc_exec* exec, void* ptr);

  /*
   * dst[b,h,s,d] = src[b,h,s,d] over `shape`. Source and destination may
   * overlap when they are the same buffer with the same strides and the move
   * is along the seq axis (window compaction): the copy must then behave like
   * memmove within each (b, h) row.
   */
  int (*copy_4d)(void* ctx, const kvc_exec* exec, void* dst, const int64_t dst_strides[4], const void* src,
                 const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);

  /* dst[b,h,s,d] = 0 over `shape`. */
  int (*fill_zero_4d)(void* ctx, const kvc_exec* exec, void* dst, const int64_t strides[4],
                      const int64_t shape[4], size_t elem_size);

  /*
   * For i in [0, count): dst row dst_rows[i] = src row src_rows[i] (a row is
   * one batch entry: shape[1..3] elements). Index arrays are host memory.
   * Rows do not overlap between dst and src unless the buffers are distinct.
   */
  int (*copy_rows)(void* ctx, const kvc_exec* exec, void* dst, const int64_t dst_strides[4], const int64_t* dst_rows,
                   const void* src, const int64_t src_strides[4], const int64_t* src_rows, int64_t count,
                   const int64_t row_shape[4], size_t elem_size);

  /*
   * Version 2: the host tier, where offloaded layers keep their K/V (docs/semantics.md,
   * 'Offloading'). On the CPU backend it is ordinary heap memory and every copy is
   * synchronous. A GPU backend allocates it as pinned host memory mapped into
   * the device's address space, so every entry above also accepts host-tier
   * pointers (operations on an offloaded layer run there, through unified
   * addressing), and runs the tier copies asynchronously: offloads on the
   * compute stream after the work issued before them, prefetches on a side
   * stream that first waits for the compute stream.
   */
  void* (*host_alloc_zeroed)(void* ctx, const kvc_exec* exec, size_t bytes); /* NULL on failure */
  void (*host_free)(void* ctx, const kvc_exec* exec, void* ptr);
  /*
   * dst[b,h,s,d] = src[b,h,s,d] from one tier to the other: `to_host` 1 is
   * an offload (src device tier, dst host tier), 0 a prefetch. Buffers never
   * overlap. A prefetch may still be running when this returns: work issued
   * after the next tier_wait sees its result. free and host_free may be given
   * a buffer that a copy issued before is still reading; the backend orders
   * the release after it (GPU: stream-ordered free).
   */
  int (*copy_tier_4d)(void* ctx, const kvc_exec* exec, int to_host, void* dst, const int64_t dst_strides[4],
                      const void* src, const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);
  /* Work issued after this call waits for every copy_tier_4d issued before it (GPU: an event wait, no host sync). */
  int (*tier_wait)(void* ctx, const kvc_exec* exec);

  /*
   * Version 3. All `count` copies in one go: a GPU backend issues them as one
   * kernel launch (the copies of every layer of a decode step), so the
   * per-step cost is one launch whatever the number of layers. The
   * descriptors are host memory, read before the call returns.
   */
  int (*copy_4d_batch)(void* ctx, const kvc_exec* exec, const kvc_copy_4d* copies, int32_t count);

  /* ---- Version 4: sink layers ---- */

  /*
   * Sink layers with RoPE (docs/semantics.md, 'Sink layers'). Optional (NULL:
   * the core refuses sink updates that pass options->rope_cos/rope_sin on
   * this backend with KVC_ERROR_UNSUPPORTED, before changing anything).
   * A backend provides both or neither.
   *
   * rerotate_keys_4d: rotates the first shape[3] channels of keys
   * [shape[0], shape[1], shape[2], *] of `dtype` (float32, float16 or
   * bfloat16; element strides `strides`, strides[3] == 1) in place:
   *   k' = k * rcos[j] + rotate_half(k) * rsin[j]   for seq row j,
   * rotate_half(x) = concat(-x[h:], x[:h]) with h = shape[3] / 2, each of
   * the two products and the sum rounded to `dtype` on its own (no fused
   * multiply-add): torch's three tensor operations, bit for bit, except
   * that every rounding makes a NaN the canonical quiet NaN (float32
   * 0x7fc00000), so that backends agree where torch's NaN depends on the
   * hardware and the compiler's operand order. rcos/rsin
   * are host memory, [shape[2]][shape[3]] float32 values already rounded to
   * `dtype`, read before the call returns. The core issues it only after
   * every check of the update, like the copies: it must not refuse
   * valid arguments (a device failure poisons the cache).
   */
  int (*rerotate_keys_4d)(void* ctx, const kvc_exec* exec, kvc_dtype dtype, void* keys, const int64_t strides[4],
                          const int64_t shape[4], const float* rcos, const float* rsin);
  /*
   * read_f32_4d: dst[((b * shape[1] + h) * shape[2] + s) * shape[3] + d] =
   * src[b,h,s,d] as float32 (exact), for src of `dtype` (float32, float16 or
   * bfloat16) with element strides `src_strides` (any sign, 0 included) on
   * the place's device; dst is host memory. Ordered after the work issued
   * before on the place's stream; dst holds the values when the call
   * returns (GPU: a copy and a wait for the stream, a host synchronisation:
   * it serves only the recording of a sink cache's cos/sin table). On
   * failure dst's contents are unspecified and the core fails the update
   * before changing anything.
   */
  int (*read_f32_4d)(void* ctx, const kvc_exec* exec, float* dst, const void* src, kvc_dtype dtype,
                     const int64_t src_strides[4], const int64_t shape[4]);
  /*
   * Version 4: quantized layers. The core quantizes and dequantizes K/V only
   * through these entries; a backend without them (NULL) gets
   * KVC_ERROR_UNSUPPORTED for quantized layers, before anything is written.
   * They run in the room phase of an update (quantize, calibrate, round
   * trip: a failure there changes nothing visible) or in the write phase and
   * crop (dequantize, which refuses nothing once quantize_groups has run on
   * the backend; a device failure there poisons the cache).
   */
  int (*quantize_groups)(void* ctx, const kvc_exec* exec, const kvc_quantize_job* job);
  int (*dequantize_groups)(void* ctx, const kvc_exec* exec, const kvc_dequantize_job* job);
  /*
   * FP8 (e4m3fn, transformers' per-tensor scale): *scale = max(amax / 448,
   * FLT_MIN) over a strided 4-D region of `dtype` elements (amax: NaN when
   * any element is NaN). The scale is host memory: a GPU backend waits for
   * its stream here, once per layer (the first update calibrates, later ones
   * reuse the scale).
   */
  int (*fp8_calibrate)(void* ctx, const kvc_exec* exec, const void* src, const int64_t strides[4],
                       const int64_t shape[4], int32_t dtype, float* scale);
  /* dst = dtype(float32(e4m3fn(float32(src) / scale)) * scale) over `shape`; src and dst do not overlap. */
  int (*fp8_round_trip)(void* ctx, const kvc_exec* exec, void* dst, const int64_t dst_strides[4], const void* src,
                        const int64_t src_strides[4], const int64_t shape[4], int32_t dtype, float scale);

  /* ---- Version 5: offloading at the bus's speed ---- */

  /*
   * host_alloc_zeroed without the zeroing: the contents are unspecified, and
   * the buffer is released with host_free. Optional (NULL: the core uses
   * host_alloc_zeroed). The core asks for it only for the store an offload
   * is about to fill with a layer's contents. On a GPU backend zeroing a
   * pinned buffer is a kernel writing across the bus, so an offload that
   * zeroed the whole store first moved its bytes twice in one direction.
   */
  void* (*host_alloc)(void* ctx, const kvc_exec* exec, size_t bytes); /* NULL on failure */

  /*
   * Version 6. Every job's copy_rows in one go: a GPU backend issues one
   * kernel launch for all of them (the K and V of every layer of a pool's
   * step write). Descriptors and index arrays are host memory, read before
   * the call returns. Optional (NULL: the core calls copy_rows per job).
   */
  int (*copy_rows_batch)(void* ctx, const kvc_exec* exec, const kvc_copy_rows_job* jobs, int32_t count);

  /*
   * Version 7. Why the calling thread's last call into the backend failed,
   * in the vendor's words ("cudaErrorNoKernelImageForDevice: no kernel image
   * is available for execution on the device"), or NULL when it did not
   * fail or the backend has nothing to say. Valid until the thread's next
   * call into the backend. Optional (NULL: the core names the entry and its
   * return value only).
   */
  const char* (*last_error)(void* ctx);

  /*
   * Version 8: a pool's fp8 storage (kvcache/pool.h, KVC_POOL_STORAGE_FP8_E4M3;
   * vLLM's kv_cache_dtype="fp8"). Optional, both or neither (NULL: the core
   * refuses to create an fp8 pool on the backend, KVC_ERROR_UNSUPPORTED).
   *
   * fp8_encode_rows: each job's copy_rows, converting: dst row element =
   * e4m3fn(float32(src element) / scales[j]) (round to nearest even,
   * saturating to +-448, infinities included; NaN stays NaN), src elements of
   * `dtype`, dst one-byte codes; strides count elements on each side; the
   * job's elem_size is dtype's. fp8_decode_4d: each copy, converting: dst
   * element (of `dtype`) = dtype(float32(code) * scales[j]), src codes. The
   * arithmetic is backends/quant_math/fp8.h's. Descriptors, index arrays and
   * scales are host memory, read before the call returns.
   */
  int (*fp8_encode_rows)(void* ctx, const kvc_exec* exec, const kvc_copy_rows_job* jobs, const float* scales,
                         int32_t count, int32_t dtype);
  int (*fp8_decode_4d)(void* ctx, const kvc_exec* exec, const kvc_copy_4d* copies, const float* scales,
                       int32_t count, int32_t dtype);

  /*
   * Version 9. alloc_zeroed without the zeroing: the contents are
   * unspecified, and the buffer is released with `free`. Optional (NULL: the
   * core uses alloc_zeroed). The core asks for it only for a store it writes
   * in full before anyone reads it (a restore's or load's: the file's tokens,
   * then zeros around them), so the bytes are not written twice.
   */
  void* (*alloc)(void* ctx, const kvc_exec* exec, size_t bytes); /* NULL on failure */
} kvc_backend;

/* The CPU backend, always built in. */
const kvc_backend* kvci_cpu_backend(void);

#endif /* KVC_BACKEND_H */
