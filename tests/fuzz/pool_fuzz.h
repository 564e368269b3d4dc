/*
 * pool_fuzz.h: the state of fuzz_pool.c (one pool, its sequences, the
 * reference model beside them) and what its checks (pool_checks.c) share
 * with the operations.
 */
#ifndef KVC_FUZZ_POOL_FUZZ_H
#define KVC_FUZZ_POOL_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "kvcache/pool.h"
#include "pool_model.h"
#include "reader.h"

#define PF_PROMPTS 3
#define PF_MAX_OPS 160     /* operations of one input */
#define PF_ALPHABET 6      /* token ids of the prompts: few, so that blocks repeat */
#define PF_MAX_PENDING 256 /* library events pulled and not yet compared */

typedef struct ctx {
  reader r;
  int has_cuda;
  kvc_pool* pool;
  kvc_pool_options o;
  kvc_pool_group_options go[PM_GROUPS];
  kvc_pool_layer_options lo[PM_LAYERS];
  uint32_t shared_nb; /* a one-group pool on a shared budget (options.shared_budget_bytes): its pages; else 0 */
  uint8_t seed[8];
  pool_model m;
  kvc_pool_sequence* h[PM_SEQS];
  int prompt_of[PM_SEQS];
  int salt_of[PM_SEQS]; /* 0: none, 1 and 2: two tenants */
  int32_t prompt[PF_PROMPTS][PM_LEN + 1];
  uint32_t next_nonce;
  /* The storage of every attention layer (it never moves): base pointers and bytes, for the checks. */
  kvc_kv storage[PM_LAYERS][2]; /* [layer][layout] */
  /* Events pulled from the library whose call's events are not all in yet. */
  kvc_pool_event pending[PF_MAX_PENDING];
  size_t npending;
  pm_event mpending[PF_MAX_PENDING];
  size_t nmpending;
  /* A second pool with one sequence: "a sequence of another pool". */
  kvc_pool* other;
  kvc_pool_sequence* other_seq;
  unsigned long long events_compared, gathers_refused; /* for the statistics */
  /* The views the checks took (the tables of every group and format, the live states), checked again after the
   * calls that must leave them valid. */
  kvc_pool_table tables[PM_GROUPS][2];
  kvc_tensor states[PM_SEQS][PM_LAYERS][2];
} ctx;

/* Bits of element d of a row holding `nonce` (PM_ZERO: 0). kv: 0 key / conv state, 1 value / SSM state. */
uint32_t pf_bits(uint32_t nonce, int64_t d, int kv, kvc_dtype dtype);
size_t pf_elem(kvc_dtype dtype);
/* Element `idx` (ndim indices) of a view, as bits. */
uint32_t pf_read(const kvc_tensor* t, const int64_t* idx);
void pf_write_elem(const kvc_tensor* t, const int64_t* idx, uint32_t bits);

/* pool_checks.c: everything observable of the pool against the model; fail() on a difference. */
void check_all(ctx* c);
/* Pulls up to `cap` events from the library and the model and compares them (events of one call as a
 * multiset, once all of the call's are in). */
void check_events_pull(ctx* c, size_t cap);
/* A copy of every attention layer's storage bytes, and its comparison (a failed call wrote nothing). */
typedef struct storage_snap {
  unsigned char* bytes[PM_LAYERS][2];
  size_t size[PM_LAYERS][2];
} storage_snap;
void snap_storage(const ctx* c, storage_snap* s);
void check_storage_unchanged(const ctx* c, storage_snap* s, const char* what);

#endif /* KVC_FUZZ_POOL_FUZZ_H */
