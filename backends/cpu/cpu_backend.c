/*
 * backends/cpu/cpu_backend.c: the reference backend. Every other backend is
 * tested against it op by op, so it favours obvious correctness, with fast
 * paths only where rows are contiguous (the common case for cache storage).
 */
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "backend.h"
#include "cpu_rope.h"
#include "host_memory.h"
#include "cpu_quant_ops.h"

static int cpu_device_count(void* ctx) {
  (void)ctx;
  return 1;
}

static void* cpu_alloc_zeroed(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  (void)exec;
  return kvci_host_memory_alloc(bytes, 1);
}

/* Version 9: a store the core fills in full (a restore's). */
static void* cpu_alloc(void* ctx, const kvc_exec* exec, size_t bytes) {
  (void)ctx;
  (void)exec;
  return kvci_host_memory_alloc(bytes, 0);
}

static void cpu_free(void* ctx, const kvc_exec* exec, void* ptr) {
  (void)ctx;
  (void)exec;
  kvci_host_memory_free(ptr);
}

/*
 * The byte offset of `elems` elements of `elem` bytes, signed: strides may be
 * negative (DLPack allows it), and a negative count made unsigned would put
 * the pointer arithmetic out of the object (undefined, even where it wraps
 * to the right address).
 */
static ptrdiff_t elems_bytes(int64_t elems, size_t elem) { return (ptrdiff_t)elems * (ptrdiff_t)elem; }

/* One (b, h) row: seq x dim elements, memmove-safe. */
static void copy_plane(char* dst, const int64_t ds[4], const char* src, const int64_t ss[4], int64_t seq,
                       int64_t dim, size_t elem) {
  if (ds[3] == 1 && ss[3] == 1) {
    if (ds[2] == dim && ss[2] == dim) {
      memmove(dst, src, (size_t)(seq * dim) * elem);
      return;
    }
    /* Moving towards lower addresses in the same row: ascending order is safe; otherwise descending. */
    if (dst <= src) {
      for (int64_t s = 0; s < seq; s++)
        memmove(dst + elems_bytes(s * ds[2], elem), src + elems_bytes(s * ss[2], elem), (size_t)dim * elem);
    } else {
      for (int64_t s = seq - 1; s >= 0; s--)
        memmove(dst + elems_bytes(s * ds[2], elem), src + elems_bytes(s * ss[2], elem), (size_t)dim * elem);
    }
    return;
  }
  /* Strided elements (a transpose, e.g. a time-last conv input into a channel-last state): a constant-size memcpy
     per storage size compiles to one load and one store (any alignment), instead of a library call per element. */
  if (elem == 2 || elem == 4) {
    for (int64_t s = 0; s < seq; s++) {
      char* dr = dst + elems_bytes(s * ds[2], elem);
      const char* sr = src + elems_bytes(s * ss[2], elem);
      if (elem == 2) {
        for (int64_t d = 0; d < dim; d++) memcpy(dr + elems_bytes(d * ds[3], 2), sr + elems_bytes(d * ss[3], 2), 2);
      } else {
        for (int64_t d = 0; d < dim; d++) memcpy(dr + elems_bytes(d * ds[3], 4), sr + elems_bytes(d * ss[3], 4), 4);
      }
    }
    return;
  }
  for (int64_t s = 0; s < seq; s++)
    for (int64_t d = 0; d < dim; d++)
      memcpy(dst + elems_bytes(s * ds[2] + d * ds[3], elem), src + elems_bytes(s * ss[2] + d * ss[3], elem), elem);
}

static int cpu_copy_4d(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const void* src,
                       const int64_t ss[4], const int64_t shape[4], size_t elem) {
  (void)ctx;
  (void)exec;
  if (shape[0] == 0 || shape[1] == 0 || shape[2] == 0 || shape[3] == 0) return 0;
  if (ds[3] == 1 && ss[3] == 1 && (shape[2] == 1 || (ds[2] == shape[3] && ss[2] == shape[3]))) {
    /* Each (b, h) plane is one contiguous run on both sides (a decode step's head rows): one memmove per plane,
     * in the order copy_plane would run them, with the pointers stepped instead of every plane re-dispatched. */
    size_t bytes = (size_t)(shape[2] * shape[3]) * elem;
    for (int64_t b = 0; b < shape[0]; b++) {
      char* d = (char*)dst + elems_bytes(b * ds[0], elem);
      const char* s = (const char*)src + elems_bytes(b * ss[0], elem);
      for (int64_t h = 0; h < shape[1]; h++, d += ds[1] * (int64_t)elem, s += ss[1] * (int64_t)elem)
        memmove(d, s, bytes);
    }
    return 0;
  }
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      copy_plane((char*)dst + elems_bytes(b * ds[0] + h * ds[1], elem),
                 ds, (const char*)src + elems_bytes(b * ss[0] + h * ss[1], elem), ss, shape[2], shape[3], elem);
  return 0;
}

static int cpu_fill_zero_4d(void* ctx, const kvc_exec* exec, void* dst, const int64_t st[4], const int64_t shape[4],
                            size_t elem) {
  (void)ctx;
  (void)exec;
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++) {
      char* row = (char*)dst + elems_bytes(b * st[0] + h * st[1], elem);
      if (st[3] == 1 && st[2] == shape[3]) {
        memset(row, 0, (size_t)(shape[2] * shape[3]) * elem);
        continue;
      }
      for (int64_t s = 0; s < shape[2]; s++)
        for (int64_t d = 0; d < shape[3]; d++) memset(row + elems_bytes(s * st[2] + d * st[3], elem), 0, elem);
    }
  return 0;
}

static int cpu_copy_rows(void* ctx, const kvc_exec* exec, void* dst, const int64_t ds[4], const int64_t* dst_rows,
                         const void* src, const int64_t ss[4], const int64_t* src_rows, int64_t count,
                         const int64_t row_shape[4], size_t elem) {
  int64_t shape[4] = {1, row_shape[1], row_shape[2], row_shape[3]};
  if (shape[1] == 0 || shape[2] == 0 || shape[3] == 0) return 0; /* nothing to copy; pointers may be NULL */
  for (int64_t i = 0; i < count; i++)
    cpu_copy_4d(ctx, exec, (char*)dst + elems_bytes(dst_rows[i] * ds[0], elem), ds,
                (const char*)src + elems_bytes(src_rows[i] * ss[0], elem), ss, shape, elem);
  return 0;
}

/*
 * copy_rows_batch (version 6): a job's rows all have one layout, so it is
 * worked out once per job: the row's dimensions of extent > 1, merged where
 * both sides continue contiguously, innermost first. When the innermost one
 * is contiguous on both sides it becomes one memcpy per run (a pool's NHD
 * slot is one run of heads x head_dim elements, an HND one a run per head);
 * otherwise elements move one at a time. Jobs never overlap (backend.h), so
 * memcpy, not memmove.
 */
typedef struct row_layout {
  int64_t n[3];         /* loops around the runs, outermost first (extent 1 when unused) */
  int64_t dst[3], src[3]; /* their byte strides */
  size_t run;           /* bytes per memcpy */
} row_layout;

static row_layout row_layout_of(const int64_t ds[4], const int64_t ss[4], const int64_t row_shape[4], size_t elem) {
  const int64_t e = (int64_t)elem;
  int64_t n[3], d[3], s[3]; /* innermost first */
  int k = 0;
  for (int i = 3; i >= 1; i--) {
    if (row_shape[i] == 1) continue;
    if (k > 0 && ds[i] * e == n[k - 1] * d[k - 1] && ss[i] * e == n[k - 1] * s[k - 1]) {
      n[k - 1] *= row_shape[i];
      continue;
    }
    n[k] = row_shape[i];
    d[k] = ds[i] * e;
    s[k] = ss[i] * e;
    k++;
  }
  row_layout l = {{1, 1, 1}, {0, 0, 0}, {0, 0, 0}, elem};
  int first = 0; /* the dimension of k that the runs cover */
  if (k > 0 && d[0] == e && s[0] == e) {
    l.run = (size_t)(n[0] * e);
    first = 1;
  }
  for (int i = first; i < k; i++) { /* into l's loops, innermost last */
    l.n[2 - (i - first)] = n[i];
    l.dst[2 - (i - first)] = d[i];
    l.src[2 - (i - first)] = s[i];
  }
  return l;
}

/* One row: the layout's loops around its runs; a run of one small element is a constant-size copy. */
static void copy_row(char* dst, const char* src, const row_layout* l) {
  for (int64_t a = 0; a < l->n[0]; a++)
    for (int64_t b = 0; b < l->n[1]; b++) {
      char* d = dst + a * l->dst[0] + b * l->dst[1];
      const char* s = src + a * l->src[0] + b * l->src[1];
      switch (l->run) {
        case 2:
          for (int64_t c = 0; c < l->n[2]; c++) memcpy(d + c * l->dst[2], s + c * l->src[2], 2);
          break;
        case 4:
          for (int64_t c = 0; c < l->n[2]; c++) memcpy(d + c * l->dst[2], s + c * l->src[2], 4);
          break;
        default:
          for (int64_t c = 0; c < l->n[2]; c++) memcpy(d + c * l->dst[2], s + c * l->src[2], l->run);
          break;
      }
    }
}

static int cpu_copy_rows_batch(void* ctx, const kvc_exec* exec, const kvc_copy_rows_job* jobs, int32_t count) {
  (void)ctx;
  (void)exec;
  for (int32_t i = 0; i < count; i++) {
    const kvc_copy_rows_job* j = &jobs[i];
    if (j->count <= 0 || j->row_shape[1] <= 0 || j->row_shape[2] <= 0 || j->row_shape[3] <= 0) continue;
    const row_layout l = row_layout_of(j->dst_strides, j->src_strides, j->row_shape, j->elem_size);
    const int64_t drow = j->dst_strides[0] * (int64_t)j->elem_size, srow = j->src_strides[0] * (int64_t)j->elem_size;
    for (int64_t r = 0; r < j->count; r++)
      copy_row((char*)j->dst + j->dst_rows[r] * drow, (const char*)j->src + j->src_rows[r] * srow, &l);
  }
  return 0;
}

/* The host tier is heap memory like the device tier: offloading moves bytes between two allocations. */
static void* cpu_host_alloc_zeroed(void* ctx, const kvc_exec* exec, size_t bytes) {
  return cpu_alloc_zeroed(ctx, exec, bytes);
}

/* Version 5: the store an offload fills; the core zeroes what the copy leaves (under test, any missed byte of a
   small store shows: malloc's memory is not zeroed, and AddressSanitizer builds fill it with garbage). */
static void* cpu_host_alloc(void* ctx, const kvc_exec* exec, size_t bytes) {
  return cpu_alloc(ctx, exec, bytes);
}

static void cpu_host_free(void* ctx, const kvc_exec* exec, void* ptr) { cpu_free(ctx, exec, ptr); }

static int cpu_copy_tier_4d(void* ctx, const kvc_exec* exec, int to_host, void* dst, const int64_t ds[4],
                            const void* src, const int64_t ss[4], const int64_t shape[4], size_t elem) {
  (void)to_host;
  return cpu_copy_4d(ctx, exec, dst, ds, src, ss, shape, elem);
}

/* Tier copies are synchronous here: nothing is ever in flight. */
static int cpu_tier_wait(void* ctx, const kvc_exec* exec) {
  (void)ctx;
  (void)exec;
  return 0;
}

/* The CPU has no streams and keeps no per-cache state: work happens when it is issued. */
static int cpu_exec_open(void* ctx, kvc_exec* exec) {
  (void)ctx;
  (void)exec;
  return 0;
}

static void cpu_exec_close(void* ctx, kvc_exec* exec) {
  (void)ctx;
  (void)exec;
}

static int cpu_exec_set_stream(void* ctx, kvc_exec* exec, void* stream) {
  (void)ctx;
  return stream ? -1 : (exec->stream = NULL, 0);
}

static int cpu_copy_4d_batch(void* ctx, const kvc_exec* exec, const kvc_copy_4d* copies, int32_t count) {
  for (int32_t i = 0; i < count; i++)
    cpu_copy_4d(ctx, exec, copies[i].dst, copies[i].dst_strides, copies[i].src, copies[i].src_strides, copies[i].shape,
                copies[i].elem_size);
  return 0;
}

static const kvc_backend cpu_backend = {
    sizeof(kvc_backend), KVC_BACKEND_API_VERSION, "cpu", KVC_DEVICE_CPU, NULL,
    cpu_device_count, cpu_exec_open, cpu_exec_close, cpu_exec_set_stream,
    cpu_alloc_zeroed, cpu_free, cpu_copy_4d, cpu_fill_zero_4d, cpu_copy_rows,
    cpu_host_alloc_zeroed, cpu_host_free, cpu_copy_tier_4d, cpu_tier_wait, cpu_copy_4d_batch,
    /* Version 4: sink layers (cpu_rope.c) */
    kvci_cpu_rerotate_keys_4d, kvci_cpu_read_f32_4d,
    /* Version 4: quantized layers (cpu_quant_ops.c) */
    kvci_cpu_quantize_groups, kvci_cpu_dequantize_groups, kvci_cpu_fp8_calibrate, kvci_cpu_fp8_round_trip,
    /* Version 5 */
    cpu_host_alloc,
    /* Version 6 */
    cpu_copy_rows_batch,
    /* Version 7: the CPU's entries fail only on arguments the core never passes; nothing to add */
    NULL,
    /* Version 8: a pool's fp8 storage (cpu_quant_ops.c) */
    kvci_cpu_fp8_encode_rows, kvci_cpu_fp8_decode_4d,
    /* Version 9 */
    cpu_alloc,
};

const kvc_backend* kvci_cpu_backend(void) { return &cpu_backend; }
