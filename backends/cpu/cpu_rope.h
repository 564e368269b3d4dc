/*
 * backends/cpu/cpu_rope.h: the CPU backend's operations of sink layers with
 * RoPE (backend API version 4, abi/backend/backend.h): the re-rotation of
 * kept keys and the read of the caller's cos/sin tensors as float32.
 *
 * They live beside the backend, not in core/, so that the core reaches K/V
 * memory only through the backend table, and any backend that runs on host
 * memory (the emulated test device) can compile the same arithmetic.
 */
#ifndef KVC_BACKENDS_CPU_ROPE_H
#define KVC_BACKENDS_CPU_ROPE_H

#include "backend.h"

/* The table entries rerotate_keys_4d and read_f32_4d of the CPU backend (see backend.h for the contract). */
int kvci_cpu_rerotate_keys_4d(void* ctx, const kvc_exec* exec, kvc_dtype dtype, void* keys, const int64_t strides[4],
                              const int64_t shape[4], const float* rcos, const float* rsin);
int kvci_cpu_read_f32_4d(void* ctx, const kvc_exec* exec, float* dst, const void* src, kvc_dtype dtype,
                         const int64_t src_strides[4], const int64_t shape[4]);

#endif /* KVC_BACKENDS_CPU_ROPE_H */
