/*
 * backends/cpu/quant_fp8.h: float8 e4m3fn ("fn": finite, no infinities; one NaN
 * pattern per sign, 0x7f and 0xff; largest finite 448) and the per-tensor
 * scale of transformers' FP8 quantized cache layer (Fp8QuantizedLayer,
 * transformers >= 5.21), bit for bit as torch computes them on CPU:
 *
 *   scale = (t.abs().amax().float() / 448).clamp(min=FLT_MIN)   calibration
 *   codes = (t.float() / scale).to(torch.float8_e4m3fn)          quantization
 *   out   = (codes.float() * scale).to(dtype)                    dequantization
 *
 * Conversion float32 -> e4m3fn is torch's (2.15, CPU): round to nearest,
 * ties to even, subnormals included (steps of 2^-9), and SATURATING: every
 * finite magnitude above 448 and the infinities become +-448 (0x7e, 0xfe);
 * only NaN becomes NaN (0x7f, 0xff by the input's sign bit). Float32
 * subnormals become (signed) zero.
 * e4m3fn -> float32 is exact; NaN decodes to 0x7ff00000 (0xfff00000 for 0xff),
 * as torch's.
 *
 * Pure arithmetic on host memory, private to the CPU backend (cpu_quant_ops.c); the per-value arithmetic is
 * backends/quant_math/fp8.h.
 */
#ifndef KVC_CPU_QUANT_FP8_H
#define KVC_CPU_QUANT_FP8_H

#include <stdint.h>

#include "kvcache/tensor.h"

/* kvci_fp8_e4m3fn_from_f32 (float32 -> e4m3fn code, as torch's `.to(torch.float8_e4m3fn)`),
   kvci_fp8_e4m3fn_to_f32 (e4m3fn code -> float32, exact; NaN as torch decodes it) and kvci_fp8_scale below are
   defined there, shared with the GPU kernels. */
#include "quant_math/fp8.h"

/*
 * t.abs().amax() of n elements of `dtype` (float32, float16 or bfloat16
 * storage) as float32: exact, as |x| and the maximum are exact in every
 * dtype. A NaN element makes the result NaN (torch's amax propagates NaN;
 * which NaN's payload is not specified). n == 0 gives 0 (torch raises on an
 * empty tensor: the caller must not calibrate on one).
 */
float kvci_fp8_amax(kvc_dtype dtype, const void* data, int64_t n);

/*
 * The scale transformers calibrates from an amax: float32 amax / 448 (one
 * correctly rounded float32 division), then clamp(min=FLT_MIN): a result
 * below FLT_MIN (amax 0, or amax < 448 * FLT_MIN) becomes FLT_MIN; NaN
 * stays NaN, +inf stays +inf: kvci_fp8_scale (backends/quant_math/fp8.h).
 */

/* kvci_fp8_scale(kvci_fp8_amax(...)): the scale of the first update's keys (or values). */
float kvci_fp8_calibrate(kvc_dtype dtype, const void* data, int64_t n);

/* codes[i] = e4m3fn(float32(x[i]) / scale) for n elements of `dtype`. */
void kvci_fp8_quantize(kvc_dtype dtype, const void* x, int64_t n, float scale, uint8_t* codes);

/* out[i] = dtype(float32(codes[i]) * scale): float32 product rounded once to `dtype` (nearest even). */
void kvci_fp8_dequantize(const uint8_t* codes, int64_t n, float scale, kvc_dtype dtype, void* out);

#endif /* KVC_CPU_QUANT_FP8_H */
