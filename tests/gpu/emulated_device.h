/*
 * tests/gpu/emulated_device.h: what the emulated device plugin and the test
 * code that drives it agree on.
 *
 * The emulated device is a backend plugin named like the CUDA one
 * (libkvcache-cuda.so, in its own build directory) that keeps "device"
 * memory in host memory but hands the core *poisoned* pointers: the real
 * address with one address bit set that makes it unusable on this
 * architecture, so any dereference of device memory by the core faults at
 * once (also under AddressSanitizer). Only the plugin's own operations and
 * the test runtime remove the tag. Host-tier buffers are untagged, as pinned
 * host memory is host-accessible on a real GPU.
 *
 * The plugin also exports counters (kvc_emulated_counters) that the tests
 * read through dlsym from the same loaded copy the core uses.
 */
#ifndef KVC_TESTS_EMULATED_DEVICE_H
#define KVC_TESTS_EMULATED_DEVICE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The tag bit. x86-64: bit 62 makes the address non-canonical (a general
 * protection fault on any access). AArch64 ignores the top byte (bits 56-63)
 * of user addresses, so bit 55 is used there: it selects the kernel half of
 * the address space, which user code cannot touch.
 */
#if defined(__x86_64__) || defined(_M_X64)
#define KVC_EMULATED_TAG (UINT64_C(1) << 62)
#elif defined(__aarch64__)
#define KVC_EMULATED_TAG (UINT64_C(1) << 55)
#else
#error "the emulated device needs an architecture where a tagged address faults (x86-64, AArch64)"
#endif

static inline void* kvc_emulated_tag(void* p) { return (void*)((uintptr_t)p | (uintptr_t)KVC_EMULATED_TAG); }
static inline void* kvc_emulated_untag(const void* p) {
  return (void*)((uintptr_t)p & ~(uintptr_t)KVC_EMULATED_TAG);
}
static inline int kvc_emulated_is_tagged(const void* p) { return ((uintptr_t)p & (uintptr_t)KVC_EMULATED_TAG) != 0; }

/* Environment variables: the number of emulated devices (default 1), and a backend API version the plugin
   claims instead of its own (to see the core refuse a plugin of another release). */
#define KVC_EMULATED_DEVICES_ENV "KVC_EMULATED_DEVICES"
#define KVC_EMULATED_API_VERSION_ENV "KVC_EMULATED_API_VERSION"
/* Test only: "1" plans copy_rows as the CUDA plugin did before its fix, one batch row alone, blind to the
   batch-row strides its kernel adds, so that the alignment check can be seen to stop such a plan. */
#define KVC_EMULATED_BLIND_ROWS_PLAN_ENV "KVC_EMULATED_BLIND_ROWS_PLAN"
/* Test only: "<n>" makes every plan the emulated device checks claim n-byte units (a forged plan), so that the
   check of each operation can be seen to fire. */
#define KVC_EMULATED_FORGE_UNIT_ENV "KVC_EMULATED_FORGE_UNIT"
/* Test only: "<entry>:<n>" fails the n-th call of the backend entry named (copy_4d, copy_rows_batch,
   alloc_zeroed, ...; "any": of every entry that can fail) as a device would, with a vendor-like message
   (emulated_faults.h). */
#define KVC_EMULATED_FAIL_ENV "KVC_EMULATED_FAIL"

/* What the plugin has seen since it was loaded (or since the last reset). */
typedef struct kvc_emulated_counters {
  uint32_t struct_size;
  /* Kernel launches a GPU backend would make: one per copy_4d, fill_zero_4d,
     copy_rows, copy_4d_batch, copy_rows_batch, copy_tier_4d, rerotate_keys_4d and quantizer call. */
  uint64_t launches;
  uint64_t copy_4d_calls;
  uint64_t fill_zero_calls;
  uint64_t copy_rows_calls;
  uint64_t batch_calls;
  uint64_t batch_copies; /* descriptors given to copy_4d_batch, all calls */
  uint64_t tier_copies;  /* copy_tier_4d calls (both directions) */
  uint64_t tier_waits;
  uint64_t allocations;  /* alloc_zeroed + host_alloc_zeroed + host_alloc calls */
  uint64_t frees;        /* free + host_free calls */
  /* Outstanding allocations and places right now (not reset). */
  int64_t live_device_buffers;
  int64_t live_host_buffers;
  int64_t live_device_bytes;
  int64_t live_host_bytes;
  int64_t open_places;   /* exec_open minus exec_close */
  /* Streams: the stream of the last operation, and how many operations ran on
     another stream than the one the test said to expect. */
  void* last_stream;
  int32_t last_device_id;
  uint64_t stream_mismatches;
  uint64_t stream_changes; /* exec_set_stream calls */
  /* Version 4: sink layers. rerotate_keys_4d is a launch too; read_f32_4d is a copy the host waits for. */
  uint64_t rerotate_calls;
  uint64_t host_reads;
  /* Version 4: quantize_groups, dequantize_groups, fp8_calibrate and fp8_round_trip calls (each one launch). */
  uint64_t quant_calls;
  /* Version 6: copy_rows_batch calls (one launch each) and the jobs given to them, all calls. */
  uint64_t rows_batch_calls;
  uint64_t rows_batch_jobs;
} kvc_emulated_counters;

/* Exported by the plugin; the tests look them up with dlsym. */
typedef void (*kvc_emulated_counters_fn)(kvc_emulated_counters* out);
/* Zeroes every counter except the outstanding ones. */
typedef void (*kvc_emulated_reset_fn)(void);
/* From now on, count operations whose place is not on `stream` (enable 0: stop checking). */
typedef void (*kvc_emulated_expect_stream_fn)(int enable, void* stream);
/* Completes every asynchronous copy still pending (cudaDeviceSynchronize's part for the test runtime). */
typedef void (*kvc_emulated_synchronize_fn)(void);

/* Fails the n-th call from now of entry `op` (NULL or "any": of every entry that can fail); n 0 disarms.
   Resets the two counts kvc_emulated_fail_counts reads. */
typedef void (*kvc_emulated_fail_fn)(const char* op, int64_t n);
/* Calls that could have failed, failures injected since the last kvc_emulated_fail, and the entry the last one
   hit (copied into entry, of entry_len bytes; "" when none). */
typedef void (*kvc_emulated_fail_counts_fn)(int64_t* calls, int64_t* injected, char* entry, size_t entry_len);

#define KVC_EMULATED_FAIL_SYMBOL "kvc_emulated_fail"
#define KVC_EMULATED_FAIL_COUNTS_SYMBOL "kvc_emulated_fail_counts"
#define KVC_EMULATED_COUNTERS_SYMBOL "kvc_emulated_read_counters"
#define KVC_EMULATED_RESET_SYMBOL "kvc_emulated_reset"
#define KVC_EMULATED_EXPECT_STREAM_SYMBOL "kvc_emulated_expect_stream"
#define KVC_EMULATED_SYNCHRONIZE_SYMBOL "kvc_emulated_synchronize"

#endif /* KVC_TESTS_EMULATED_DEVICE_H */
