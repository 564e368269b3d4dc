/*
 * core/pool/reserve_batch.c: kvc_pool_reserve_batch and kvc_pool_commit_batch,
 * a scheduler's step for many sequences in one call each.
 *
 * Every argument is checked before the first sequence is reserved, and each
 * sequence's arrays are grown for its tokens up front, so that once the
 * reserves start the only thing that can stop one is the pool running out
 * of blocks, which kvci_pool_reserve_checked reports before it changes that
 * sequence. The batch then ends there: the sequences before it keep their
 * reserves (as separate calls would have), it and the later ones are left
 * alone, and their slots read -1. A sequence listed twice is refused, since
 * its second entry would need the arrays grown for both.
 */
#include <inttypes.h>
#include <stdint.h>

#include "pool_internal.h"

/* The sequence list: non-NULL entries of `pool`, each once (marked with this batch's number). */
static kvc_error* check_sequences(const char* fn, kvc_pool* pool, kvc_pool_sequence* const* seqs, size_t n) {
  uint64_t mark = ++pool->batches;
  for (size_t i = 0; i < n; i++) {
    kvc_pool_sequence* s = seqs[i];
    if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences[%zu] is NULL", fn, i);
    if (s->pool != pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences[%zu] belongs to another pool", fn, i);
    if (s->batch_mark == mark) {
      size_t first = 0;
      while (seqs[first] != s) first++;
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences[%zu] is sequences[%zu] again; list a sequence once "
                      "per batch (give it all its tokens there)", fn, i, first);
    }
    s->batch_mark = mark;
  }
  return NULL;
}

kvc_error* kvc_pool_reserve_batch(kvc_pool* pool, kvc_pool_sequence* const* sequences, size_t num_sequences,
                                  const int32_t* tokens, const uint64_t* num_tokens, int64_t* slot_mapping,
                                  size_t* num_reserved) {
  static const char* FN = "kvc_pool_reserve_batch";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (!num_reserved) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_reserved is NULL", FN);
  if (num_sequences && (!sequences || !num_tokens))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but num_sequences is %zu", FN,
                    sequences ? "num_tokens" : "sequences", num_sequences);
  kvc_error* e = kvci_pool_refusal(FN, pool);
  if (!e) e = check_sequences(FN, pool, sequences, num_sequences);
  if (e) return e;
  uint64_t total = 0;
  for (size_t i = 0; i < num_sequences; i++) {
    if ((e = kvci_pool_check_reserve_length(FN, (int64_t)i, sequences[i], num_tokens[i]))) return e;
    if (num_tokens[i] > SIZE_MAX / sizeof(int64_t) - total)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the batch's tokens pass %zu at num_tokens[%zu]; more than "
                      "memory can hold", FN, SIZE_MAX / sizeof(int64_t), i);
    total += num_tokens[i];
  }
  if (total && (!tokens || !slot_mapping))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but the batch has %" PRIu64 " tokens", FN,
                    tokens ? "slot_mapping" : "tokens", total);
  if ((e = kvci_pool_check_tokens(FN, tokens, (size_t)total))) return e;
  for (size_t i = 0; i < num_sequences; i++)
    if (kvci_pool_seq_grow(sequences[i], sequences[i]->length + num_tokens[i])) return kvci_err_oom();
  size_t done = 0, at = 0;
  for (; done < num_sequences; done++) {
    size_t n = (size_t)num_tokens[done];
    if (!n) continue;
    kvc_error* short_of_blocks =
        kvci_pool_reserve_checked(FN, sequences[done], tokens + at, n, slot_mapping + at, (size_t)total);
    if (short_of_blocks) {
      kvc_error_destroy(short_of_blocks);
      break;
    }
    at += n;
  }
  for (uint32_t g = 0; g < pool->num_groups; g++)
    for (size_t i = at; i < total; i++) slot_mapping[g * total + i] = -1;
  *num_reserved = done;
  /* A failed copy-on-write copy leaves a new block with unknown bytes. */
  return kvci_pool_result(FN, pool, NULL);
}

kvc_error* kvc_pool_commit_batch(kvc_pool* pool, kvc_pool_sequence* const* sequences, size_t num_sequences) {
  static const char* FN = "kvc_pool_commit_batch";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (num_sequences && !sequences)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences is NULL but num_sequences is %zu", FN, num_sequences);
  kvc_error* e = kvci_pool_refusal(FN, pool);
  if (!e) e = check_sequences(FN, pool, sequences, num_sequences);
  if (e) return e;
  for (size_t i = 0; i < num_sequences; i++) kvci_pool_commit_checked(sequences[i]);
  /* A failed checkpoint copy leaves a cached state with unknown bytes. */
  return kvci_pool_result(FN, pool, NULL);
}
