/*
 * backends/gpu/gpu_plan_walk.h: every address a kernel of backends/gpu
 * forms for a plan, visited on the CPU through the kernels' own block
 * arithmetic (gpu_plan.h), and the alignment check built on that walk.
 *
 * Why: a unit of U bytes is one U-byte load and store on the device, and a
 * GPU faults ("misaligned address") when the address is not a multiple of
 * U. The planner (gpu_plan.c) is meant to choose units that divide every
 * address by construction; kvc_gpu_check_* prove it per plan by forming
 * each address the kernel would, so the emulated test device can stop on a
 * misaligned plan on a machine without a GPU, and the plugin could assert
 * with the same code.
 *
 * Plain C, host only: compiled into the emulated device and the CPU tests.
 */
#ifndef KVC_GPU_PLAN_WALK_H
#define KVC_GPU_PLAN_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One unit moved: `unit` bytes from src to dst (src NULL: zeroed). unit 0
 * (dst and src NULL) is a barrier of the block's threads: the visits before
 * it happen before those after it; between barriers a kernel's units move
 * in any order, and the blocks of a launch run in any order.
 */
typedef void (*kvc_gpu_visit)(void* ctx, char* dst, const char* src, int32_t unit);

/* The batched kernel over one plan, blocks from 0 (copy_4d's COPY route, fills, tier copies through a kernel). */
void kvc_gpu_walk_plan(const kvc_gpu_copy* p, kvc_gpu_visit visit, void* ctx);

/* The batched kernel: `blocks` blocks over plans[0, count), first_block ascending from 0. */
void kvc_gpu_walk_batch(const kvc_gpu_copy* plans, int32_t count, uint32_t blocks, kvc_gpu_visit visit, void* ctx);

/* The rows kernel: pair i copies batch row src_rows[i] to dst_rows[i] (indices below 2^31). */
void kvc_gpu_walk_rows(const kvc_gpu_rows* r, const int64_t* dst_rows, const int64_t* src_rows, int64_t count,
                       kvc_gpu_visit visit, void* ctx);

/* The rows batch kernel (copy_rows_batch): `blocks` blocks over jobs[0, count), index after them or anywhere. */
void kvc_gpu_walk_rows_batch(const kvc_gpu_rows_job* jobs, int32_t count, const int32_t* index, uint32_t blocks,
                             kvc_gpu_visit visit, void* ctx);

/*
 * The move kernel for plan p (planned with keep_rows) shifted by `shift`
 * rows; staged chunks go through `stage`, KVC_GPU_STAGE_BYTES aligned to 16
 * bytes like the kernel's shared memory.
 */
void kvc_gpu_walk_move(const kvc_gpu_copy* p, int64_t shift, char* stage, kvc_gpu_visit visit, void* ctx);

/*
 * The alignment checks: 0 when the unit is a load size (1, 2, 4, 8 or 16)
 * that divides every address the kernel forms, else -1 with `why` naming
 * the first misaligned access (operand, address, unit, which visit).
 */
int kvc_gpu_check_plan(const kvc_gpu_copy* p, char* why, size_t why_size);
int kvc_gpu_check_batch(const kvc_gpu_copy* plans, int32_t count, uint32_t blocks, char* why, size_t why_size);
int kvc_gpu_check_rows(const kvc_gpu_rows* r, const int64_t* dst_rows, const int64_t* src_rows, int64_t count,
                       char* why, size_t why_size);
int kvc_gpu_check_rows_batch(const kvc_gpu_rows_batch* b, char* why, size_t why_size);
int kvc_gpu_check_move(const kvc_gpu_copy* p, int64_t shift, char* why, size_t why_size);

#ifdef __cplusplus
}
#endif

#endif /* KVC_GPU_PLAN_WALK_H */
