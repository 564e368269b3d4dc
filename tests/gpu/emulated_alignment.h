/*
 * tests/gpu/emulated_alignment.h: the emulated device plans every operation
 * that the CUDA/HIP backend runs as a kernel the way that backend does
 * (backends/gpu/gpu_plan.c: the same routes, the same plans) and checks
 * each plan with the kernels' own address walk (gpu_plan_walk.c): the unit
 * must divide every address the kernel would form. A GPU faults on a
 * misaligned load; here the check stops the process on any machine.
 *
 * Pointers are the real (untagged) addresses. Each function returns NULL
 * when every plan is aligned, else why not (a static buffer: call under the
 * emulated device's lock).
 */
#ifndef KVC_TESTS_EMULATED_ALIGNMENT_H
#define KVC_TESTS_EMULATED_ALIGNMENT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "gpu_plan.h"

/* copy_4d: the plain copy, the overlapping seq move, or the two copies through scratch. */
const char* emulated_plans_copy_4d(void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                                   const int64_t shape[4], size_t elem);
/* A copy with no overlap as one kernel: a tier copy the copy engines cannot take. */
const char* emulated_plans_copy(void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                                const int64_t shape[4], size_t elem);
const char* emulated_plans_fill(void* dst, const int64_t st[4], const int64_t shape[4], size_t elem);
/* copy_rows; `blind` plans it the old way (row 0 alone), for the test that the check catches that. */
const char* emulated_plans_rows(void* dst, const int64_t ds[4], const int64_t* dst_rows, const void* src,
                                const int64_t ss[4], const int64_t* src_rows, int64_t count,
                                const int64_t row_shape[4], size_t elem, int blind);
/* copy_4d_batch: the copies' dst and src are untagged. */
const char* emulated_plans_batch(const kvc_copy_4d* copies, int32_t count);

/*
 * copy_rows_batch (jobs' dst and src untagged): plans the batch into *batch
 * as the backend does (gpu_plan.h) and checks the kernel's walk of it.
 * *refused is 1 when the planner refuses the batch (the backend then fails
 * the call before launching anything); *batch is then empty.
 */
const char* emulated_plans_rows_batch(const kvc_copy_rows_job* jobs, int32_t count, kvc_gpu_rows_batch* batch,
                                      int* refused);

#endif /* KVC_TESTS_EMULATED_ALIGNMENT_H */
