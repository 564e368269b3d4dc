/* tests/gpu/fake_runtime/include/cuda_runtime.h: the fake runtime under the CUDA header name (device_runtime_cuda.c). */
#include "../fake_cuda_runtime.h"
