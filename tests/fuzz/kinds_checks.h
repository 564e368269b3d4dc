/*
 * kinds_checks.h: what fuzz_kinds.c checks of the caches beyond their
 * agreement: the invariants of one cache, the stored views of a compact
 * quantized twin, the rows batch operations and splits must leave, and
 * where mask_sizes promises the length of the next update.
 */
#ifndef KVC_FUZZ_KINDS_CHECKS_H
#define KVC_FUZZ_KINDS_CHECKS_H

#include "../common/cache_snapshot.h"
#include "kinds_state.h"

void check_invariants(const group* g, const cache_snap* s, int flipped, const char* who);
/*
 * m0 and a member whose quantized layers run the other of incremental and
 * compact modes: a compact layer's stored view is the incremental layer's
 * view without its quantized tokens (the residual); transformers-mode
 * layers are not flipped and must agree entirely.
 */
void check_flipped_stores(const group* g, int i);
/*
 * After a batch operation that made rows[0..n) of the old rows: a tensor
 * of a layer that takes part holds those rows; one that does not either
 * kept its old rows or holds them too (nothing says which for an empty one).
 */
void check_tensor_rows(const snap_tensor* before, const snap_tensor* after, const int64_t* rows, int64_t n, int must,
                       const char* what, uint32_t l, const char* part);
/* rows NULL: batch_repeat_interleave(n), whose rows depend on each layer's batch. */
void check_rows(const cache_snap* before, const cache_snap* after, const int64_t* rows, int64_t n, const char* what);
/* A row-range check of one split against its source. */
void check_split(const cache_snap* src, const cache_snap* part, int64_t first, int64_t n, size_t k);
/*
 * Whether mask_sizes promises the length the next update of `layer` returns.
 * Not on a recording dynamic sliding layer that a crop left with fewer
 * tokens than its counter within the window: transformers' get_mask_sizes
 * counts min(cumulative_length, W-1) keys but the update returns min(stored,
 * W-1) plus the new ones, and kvcache mirrors both.
 */
int mask_promised(const cache_snap* before, uint32_t layer);

#endif /* KVC_FUZZ_KINDS_CHECKS_H */
