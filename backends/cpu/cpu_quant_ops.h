/*
 * backends/cpu/cpu_quant_ops.h: the CPU backend's quantizer entries
 * (backend table version 4), in their own file so that the emulated device,
 * which compiles the CPU backend, runs the very same code on its memory.
 */
#ifndef KVC_CPU_QUANT_OPS_H
#define KVC_CPU_QUANT_OPS_H

#include "backend.h"

int kvci_cpu_quantize_groups(void* ctx, const kvc_exec* exec, const kvc_quantize_job* job);
int kvci_cpu_dequantize_groups(void* ctx, const kvc_exec* exec, const kvc_dequantize_job* job);
int kvci_cpu_fp8_calibrate(void* ctx, const kvc_exec* exec, const void* src, const int64_t strides[4],
                           const int64_t shape[4], int32_t dtype, float* scale);
int kvci_cpu_fp8_round_trip(void* ctx, const kvc_exec* exec, void* dst, const int64_t dst_strides[4], const void* src,
                            const int64_t src_strides[4], const int64_t shape[4], int32_t dtype, float scale);
/* Version 8: a pool's fp8 storage (backend.h says what they compute). */
int kvci_cpu_fp8_encode_rows(void* ctx, const kvc_exec* exec, const kvc_copy_rows_job* jobs, const float* scales,
                             int32_t count, int32_t dtype);
int kvci_cpu_fp8_decode_4d(void* ctx, const kvc_exec* exec, const kvc_copy_4d* copies, const float* scales,
                           int32_t count, int32_t dtype);

#endif /* KVC_CPU_QUANT_OPS_H */
