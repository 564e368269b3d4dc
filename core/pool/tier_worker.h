/*
 * core/pool/tier_worker.h: a pool's tier worker (kvcache/tier.h, 'Tiers off
 * the step'; docs/tiers.md 'The tier worker'): a thread that calls the
 * pool's tiers, fed by a bounded queue of jobs.
 *
 * A job is a batch of blocks of one group with their keys and staged bytes:
 * a store (the bytes copied out of the pool by the caller, framed and sealed
 * by the worker) or a prefetch's lookups (the worker fills the frames and
 * verifies them). The caller never waits for a tier: it takes the worker's
 * mutex only to queue, account and collect, and the worker never holds that
 * mutex during a tier call.
 */
#ifndef KVC_CORE_POOL_TIER_WORKER_H
#define KVC_CORE_POOL_TIER_WORKER_H

#include <time.h>

#include "pool_internal.h"

typedef struct kvci_tier_job kvci_tier_job;
typedef struct kvci_tier_worker kvci_tier_worker;

/* A prefetch job's state, under the worker's mutex. */
enum { KVCI_JOB_QUEUED, KVCI_JOB_RUNNING, KVCI_JOB_DONE };

struct kvci_tier_job {
  kvci_tier_job* next;
  int fetch;                    /* 0: a store; 1: a prefetch's lookups */
  int state;                    /* fetch: KVCI_JOB_* */
  int abandoned;                /* fetch: nobody collects it, whoever finishes with it frees it */
  uint32_t group, num_layers, block_size;
  kvc_tier_write_policy policy; /* store: the tiers it goes to */
  size_t payload, frame, count;
  size_t bytes;                 /* accounted against max_bytes: the frames */
  size_t found;                 /* fetch: the leading run found and verified */
  uint32_t num_tiers;
  kvc_tier** tiers;             /* the pool's tiers when queued (a later kvc_pool_add_tier moves the pool's array) */
  kvc_tier_key* keys;
  uint8_t* frames;              /* count frames of `frame` bytes */
  void** values;
  size_t* sizes;
  const uint8_t** payloads;     /* fetch: into frames */
  /*
   * A commit's store from a CPU pool: the blocks, referenced by the job, whose bytes the worker copies out of the
   * pool's memory itself (a cached full block's bytes never change, and a reference keeps it from eviction), so
   * the step pays no copy. Their references are dropped on the pool's thread (kvci_tier_worker_reap). NULL: the
   * caller staged the bytes into the frames (a device pool, an eviction).
   */
  const kvc_pool* pool;
  uint32_t* held;
};

/* The job of `count` blocks of `group` for `pool` (keys and frames unset), or NULL (out of memory / queue full:
   *full says which). Taken from the queue's budget; kvci_tier_worker_submit or _discard gives it back. */
kvci_tier_job* kvci_tier_worker_job(kvc_pool* pool, int fetch, uint32_t group, size_t count, int* full);
/* Queues a job made by kvci_tier_worker_job. */
void kvci_tier_worker_submit(kvc_pool* pool, kvci_tier_job* job);
/* Frees a job never queued, and returns its budget. */
void kvci_tier_worker_discard(kvc_pool* pool, kvci_tier_job* job);
/* Counts `count` blocks not queued (queue full or no memory), with TIER_DROPPED events if asked. */
void kvci_tier_worker_dropped(kvc_pool* pool, uint32_t group, const uint32_t* blocks, size_t count,
                              kvc_tier_write_policy policy);
/* `ms` milliseconds from now on CLOCK_MONOTONIC, the clock of the waits below. */
void kvci_deadline_in(struct timespec* t, uint32_t ms);
/* Waits for a fetch job until `until` (kvci_deadline_in); returns 1 when done (then it is the caller's to free),
   else abandons it (the worker frees it, or it is freed here when still queued) and returns 0. */
int kvci_tier_worker_wait(kvc_pool* pool, kvci_tier_job* job, const struct timespec* until);
/* Abandons a fetch job (prefetch destroyed uncollected): as a late collect, without counting it late. */
void kvci_tier_worker_abandon(kvc_pool* pool, kvci_tier_job* job);
/* Frees a job that is the caller's (done, or never queued). */
void kvci_tier_job_free(kvc_pool* pool, kvci_tier_job* job);
/* Moves the worker's TIER_* events into the pool's event queue, and drops the references of finished jobs' held
   blocks (the pool's bookkeeping is its calling thread's): at the pool's calls that use the worker. */
void kvci_tier_worker_events(kvc_pool* pool);
void kvci_tier_worker_reap(kvc_pool* pool);
/* Stops the worker and frees it (kvc_pool_stop_tier_worker); kvc_pool_destroy's drains for the option's time. */
void kvci_tier_worker_stop(kvc_pool* pool, uint32_t drain_timeout_ms);
void kvci_tier_worker_shutdown(kvc_pool* pool);
/* The prefetches' side (tier_prefetch.c): abandons every prefetch of the pool and frees them (kvc_pool_destroy). */
void kvci_pool_prefetches_free(kvc_pool* pool);
/* Counts a prefetch as started, late or abandoned in the worker's stats. */
void kvci_tier_worker_count_prefetch(kvc_pool* pool, int started, int late, int abandoned);

#endif /* KVC_CORE_POOL_TIER_WORKER_H */
