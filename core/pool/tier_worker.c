/*
 * core/pool/tier_worker.c: the pool's tier worker thread and its bounded
 * queue (tier_worker.h; kvcache/tier.h 'Tiers off the step').
 *
 * The queue is bounded twice, by jobs and by staged bytes, and a job that
 * does not fit is refused at once (the caller drops its stores and counts
 * them): the caller's step never waits for the tier. Frames of finished
 * store jobs are kept (up to the byte budget) for the next job, because a
 * fresh buffer costs the caller a page fault per 4 KiB on first touch, on
 * the step.
 *
 * Shutdown: `stopping` makes the worker run the queued stores until the
 * drain deadline and drop the rest (and every queued prefetch: nobody will
 * wait for it); the thread is joined after its tier call in flight returns.
 */
#define _DEFAULT_SOURCE 1 /* clock_gettime, pthread_condattr_setclock (POSIX 2008) */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "tier/tier_internal.h"
#include "tier_worker.h"

/* A freed store job's frames, kept for the next job: the link lives in the buffer itself. */
typedef struct spare_frames {
  struct spare_frames* next;
  size_t bytes;
} spare_frames;

/* One TIER_* event recorded by the worker until kvc_pool_events_pull moves it into the pool's queue. */
typedef struct tier_event {
  kvc_pool_event_kind kind;
  uint32_t group, tier, block_size;
  uint8_t hash[KVC_BLOCK_HASH_SIZE];
} tier_event;

struct kvci_tier_worker {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t wake; /* a job queued, or stopping */
  pthread_cond_t done; /* a prefetch job done */
  kvci_tier_job *head, *tail;
  int stopping;
  struct timespec drain_until; /* CLOCK_MONOTONIC */
  kvc_tier_worker_options opt;
  kvc_tier_worker_stats stats; /* pending_* and the totals */
  spare_frames* spare;
  size_t spare_bytes;
  kvci_tier_job* reap; /* finished jobs whose held blocks the pool's thread releases (kvci_tier_worker_reap) */
  tier_event* events; /* a ring of the pool's event_cap entries */
  uint32_t ev_head, ev_count, ev_cap;
};

#define DEFAULT_MAX_JOBS 256u
#define DEFAULT_MAX_BYTES ((uint64_t)256 << 20)

void kvc_tier_worker_options_init(kvc_tier_worker_options* options) {
  if (options) *options = (kvc_tier_worker_options)KVC_TIER_WORKER_OPTIONS_INIT;
}

void kvci_deadline_in(struct timespec* t, uint32_t ms) {
  clock_gettime(CLOCK_MONOTONIC, t);
  t->tv_sec += ms / 1000;
  t->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t->tv_nsec >= 1000000000L) {
    t->tv_sec++;
    t->tv_nsec -= 1000000000L;
  }
}

static int passed(const struct timespec* t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* Under mu: records an event for the pool's queue (the ring keeps the newest; the oldest lost are counted). */
static void record_event(kvci_tier_worker* w, kvc_pool_event_kind kind, const kvci_tier_job* j, size_t i,
                         uint32_t tier) {
  if (!w->opt.events || !w->ev_cap) return;
  if (w->ev_count == w->ev_cap) {
    w->ev_head = (w->ev_head + 1) % w->ev_cap;
    w->ev_count--;
    w->stats.events_lost++;
  }
  tier_event* e = &w->events[(w->ev_head + w->ev_count++) % w->ev_cap];
  e->kind = kind;
  e->group = j->group;
  e->tier = tier;
  e->block_size = j->block_size;
  memcpy(e->hash, j->keys[i].block_hash, KVC_BLOCK_HASH_SIZE);
}

/* Under mu: a store job's blocks that never reach their tiers (shutdown), counted in every tier of its policy. */
static void count_abandoned(kvci_tier_worker* w, const kvci_tier_job* j) {
  w->stats.blocks_abandoned += j->count;
  for (uint32_t t = 0; t < j->num_tiers; t++) {
    if (j->tiers[t] == NULL) continue;
    kvci_tier_count(j->tiers[t], (kvci_tier_counts){.dropped = j->count});
    for (size_t i = 0; i < j->count; i++) record_event(w, KVC_POOL_EVENT_TIER_DROPPED, j, i, t);
  }
}

/* Under mu: gives back a job's budget and frees it (a store's frames kept for the next job when they fit). */
static void release(kvci_tier_worker* w, kvci_tier_job* j) {
  w->stats.pending_jobs--;
  w->stats.pending_bytes -= j->bytes;
  if (j->frames && !j->fetch && j->bytes >= sizeof(spare_frames) &&
      w->spare_bytes + j->bytes <= w->opt.max_bytes) {
    spare_frames* s = (spare_frames*)(void*)j->frames;
    s->bytes = j->bytes;
    s->next = w->spare;
    w->spare = s;
    w->spare_bytes += j->bytes;
  } else {
    free(j->frames);
  }
  j->frames = NULL;
  if (j->held) {
    j->next = w->reap;
    w->reap = j;
  } else {
    free(j);
  }
}

/* The worker's part of a store: every tier of the job's policy gets the values, sealed for it. */
static void run_store(kvci_tier_worker* w, kvci_tier_job* j) {
  if (j->held) {
    /* A CPU pool's stage_out only reads the layers' storage and geometry, which never change while the pool lives. */
    uint8_t** at = (uint8_t**)j->payloads;
    for (size_t i = 0; i < j->count; i++) at[i] = j->frames + i * j->frame + KVCI_TIER_HEADER_SIZE;
    kvci_pool_stage_out((kvc_pool*)j->pool, j->group, j->held, j->count, at);
  }
  const kvc_tier* sealed = NULL; /* tiers with the same key reuse the sealed values (as tiers.c's store) */
  for (uint32_t t = 0; t < j->num_tiers; t++) {
    kvc_tier* tier = j->tiers[t];
    if (!tier) continue; /* a tier of the other policy: the job keeps NULL in its place */
    if (!sealed || !kvci_tier_same_seal(sealed, tier)) {
      for (size_t i = 0; i < j->count; i++) {
        kvci_tier_value_seal(tier, j->frames + i * j->frame, &j->keys[i], j->payload, j->num_layers);
        j->sizes[i] = kvci_tier_value_size(tier, j->payload);
      }
      sealed = tier;
    }
    kvci_tier_lock(tier);
    size_t stored = kvci_tier_put_many(tier, j->keys, (const void* const*)j->values, j->sizes, j->count);
    kvci_tier_unlock(tier);
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < j->count; i++)
      record_event(w, i < stored ? KVC_POOL_EVENT_TIER_STORED : KVC_POOL_EVENT_TIER_FAILED, j, i, t);
    pthread_mutex_unlock(&w->mu);
  }
}

static void* worker_main(void* arg) {
  kvci_tier_worker* w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->stopping) pthread_cond_wait(&w->wake, &w->mu);
    kvci_tier_job* j = w->head;
    if (!j) break; /* stopping, and nothing left */
    w->head = j->next;
    if (!w->head) w->tail = NULL;
    if (w->stopping && (j->fetch || passed(&w->drain_until))) {
      /* Past the drain: dropped. A prefetch nobody will collect now (kvc_pool_stop_tier_worker's promise). */
      if (j->fetch) {
        j->state = KVCI_JOB_DONE;
        j->found = 0;
        w->stats.pending_jobs--;
        w->stats.pending_bytes -= j->bytes;
        j->bytes = 0;
        if (j->abandoned) kvci_tier_job_free(NULL, j);
        pthread_cond_broadcast(&w->done);
      } else {
        count_abandoned(w, j);
        release(w, j);
      }
      continue;
    }
    j->state = KVCI_JOB_RUNNING;
    pthread_mutex_unlock(&w->mu);
    if (j->fetch)
      j->found = kvci_pool_tiers_lookup(j->tiers, j->num_tiers, j->num_layers, j->keys, j->values, j->frame,
                                        j->sizes, j->payload, j->payloads, j->count);
    else
      run_store(w, j);
    pthread_mutex_lock(&w->mu);
    if (!j->fetch) {
      release(w, j);
      continue;
    }
    w->stats.pending_jobs--;
    w->stats.pending_bytes -= j->bytes;
    j->bytes = 0; /* the budget is back; the frames go with the job */
    j->state = KVCI_JOB_DONE;
    if (j->abandoned)
      kvci_tier_job_free(NULL, j);
    else
      pthread_cond_broadcast(&w->done);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

kvc_error* kvc_pool_start_tier_worker(kvc_pool* pool, const kvc_tier_worker_options* options) {
  static const char* FN = "kvc_pool_start_tier_worker";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  kvc_tier_worker_options o = KVC_TIER_WORKER_OPTIONS_INIT;
  if (options) {
    if (options->struct_size != sizeof(*options))
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->struct_size is %u; it is %zu "
                      "(sizeof(kvc_tier_worker_options))", FN, options->struct_size, sizeof(*options));
    if (options->events > 1)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->events is %u; it is 0 (none) or 1 (TIER_* events)",
                      FN, options->events);
    o = *options;
  }
  if (!o.max_jobs) o.max_jobs = DEFAULT_MAX_JOBS;
  if (!o.max_bytes) o.max_bytes = DEFAULT_MAX_BYTES;
  if (pool->tier_worker)
    return kvci_err(KVC_ERROR_INVALID_STATE, "%s: the pool's tier worker runs already; stop it first "
                    "(kvc_pool_stop_tier_worker)", FN);
  kvci_tier_worker* w = calloc(1, sizeof(*w));
  if (!w) return kvci_err_oom();
  w->opt = o;
  w->stats.struct_size = sizeof(w->stats);
  w->stats.running = 1;
  w->ev_cap = o.events ? pool->event_cap : 0;
  if (w->ev_cap && !(w->events = calloc(w->ev_cap, sizeof(*w->events)))) {
    free(w);
    return kvci_err_oom();
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->wake, &ca);
  pthread_cond_init(&w->done, &ca);
  pthread_condattr_destroy(&ca);
  int rc = pthread_create(&w->thread, NULL, worker_main, w);
  if (rc) {
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->mu);
    free(w->events);
    free(w);
    return kvci_err(KVC_ERROR_IO, "%s: no thread could be started (pthread_create: %s); the pool calls its tiers "
                    "itself", FN, strerror(rc));
  }
  pool->tier_worker = w;
  return NULL;
}

void kvci_tier_worker_stop(kvc_pool* pool, uint32_t drain_timeout_ms) {
  kvci_tier_worker* w = pool->tier_worker;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stopping = 1;
  kvci_deadline_in(&w->drain_until, drain_timeout_ms);
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  /* The thread is gone: what is left is this thread's. Collected-later prefetch jobs are DONE with nothing. */
  kvci_tier_worker_events(pool);
  while (w->spare) {
    spare_frames* s = w->spare;
    w->spare = s->next;
    free(s);
  }
  pthread_cond_destroy(&w->wake);
  pthread_cond_destroy(&w->done);
  pthread_mutex_destroy(&w->mu);
  free(w->events);
  free(w);
  pool->tier_worker = NULL;
}

void kvci_tier_worker_shutdown(kvc_pool* pool) {
  if (pool->tier_worker) kvci_tier_worker_stop(pool, pool->tier_worker->opt.drain_timeout_ms);
}

kvc_error* kvc_pool_stop_tier_worker(kvc_pool* pool, uint32_t drain_timeout_ms) {
  static const char* FN = "kvc_pool_stop_tier_worker";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  kvci_tier_worker_stop(pool, drain_timeout_ms);
  return NULL;
}

kvc_error* kvc_pool_tier_worker_stats(const kvc_pool* pool, kvc_tier_worker_stats* out) {
  static const char* FN = "kvc_pool_tier_worker_stats";
  KVCI_GUARD_SHARED(kvci_guard_of(pool), FN);
  kvc_error* e = kvci_pool_check_out(FN, pool, out, sizeof(*out), "kvc_tier_worker_stats");
  if (e) return e;
  kvci_tier_worker* w = pool->tier_worker;
  if (!w) {
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    return NULL;
  }
  pthread_mutex_lock(&w->mu);
  *out = w->stats;
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

kvci_tier_job* kvci_tier_worker_job(kvc_pool* pool, int fetch, uint32_t group, size_t count, int* full) {
  kvci_tier_worker* w = pool->tier_worker;
  const kvci_pool_group* g = &pool->groups[group];
  size_t payload = kvci_pool_block_payload(pool, group), frame = kvci_tier_frame_size_max(payload);
  size_t bytes = count * frame, n = pool->num_tiers;
  *full = 0;
  /* One allocation for the job and its arrays: the pointer-sized ones first, then the keys and block ids. */
  size_t head = sizeof(kvci_tier_job) + n * sizeof(kvc_tier*) + count * (2 * sizeof(void*) + sizeof(size_t));
  kvci_tier_job* j = malloc(head + count * (sizeof(kvc_tier_key) + sizeof(uint32_t)));
  if (!j) return NULL;
  memset(j, 0, sizeof(*j));
  j->tiers = (kvc_tier**)(void*)(j + 1);
  j->values = (void**)(j->tiers + n);
  j->payloads = (const uint8_t**)(j->values + count);
  j->sizes = (size_t*)(void*)(j->payloads + count);
  j->keys = (kvc_tier_key*)(void*)(j->sizes + count);
  j->pool = pool;
  j->held = NULL; /* set by a store that holds its blocks (tiers.c) */
  pthread_mutex_lock(&w->mu);
  if (w->stopping || w->stats.pending_jobs >= w->opt.max_jobs || w->stats.pending_bytes + bytes > w->opt.max_bytes) {
    pthread_mutex_unlock(&w->mu);
    free(j);
    *full = 1;
    return NULL;
  }
  /* A kept buffer large enough: no fresh pages for the caller to fault in. */
  for (spare_frames** at = &w->spare; *at; at = &(*at)->next)
    if ((*at)->bytes >= bytes) {
      spare_frames* s = *at;
      *at = s->next;
      w->spare_bytes -= s->bytes;
      j->frames = (uint8_t*)s;
      bytes = s->bytes;
      break;
    }
  w->stats.pending_jobs++;
  w->stats.pending_bytes += bytes; /* what the job holds, a kept buffer's whole size included */
  pthread_mutex_unlock(&w->mu);
  if (!j->frames) j->frames = malloc(bytes);
  j->bytes = bytes;
  j->fetch = fetch;
  j->state = KVCI_JOB_QUEUED;
  j->group = group;
  j->num_layers = g->num_layers;
  j->block_size = g->block_size;
  j->payload = payload;
  j->frame = frame;
  j->count = count;
  j->num_tiers = (uint32_t)n;
  memcpy(j->tiers, pool->tiers, n * sizeof(kvc_tier*));
  for (size_t i = 0; i < count; i++) j->values[i] = j->frames ? j->frames + i * frame : NULL;
  if (!j->frames) {
    kvci_tier_worker_discard(pool, j);
    return NULL;
  }
  return j;
}

/* The running worker of `pool`, its mutex taken: the caller unlocks it. */
static kvci_tier_worker* lock_worker(kvc_pool* pool) {
  kvci_tier_worker* w = pool->tier_worker;
  pthread_mutex_lock(&w->mu);
  return w;
}

/* `locked` (which needs the worker's mutex) on one job. */
static void under_lock(kvc_pool* pool, kvci_tier_job* job, void (*locked)(kvci_tier_worker*, kvci_tier_job*)) {
  kvci_tier_worker* w = lock_worker(pool);
  locked(w, job);
  pthread_mutex_unlock(&w->mu);
}

void kvci_tier_worker_discard(kvc_pool* pool, kvci_tier_job* job) { under_lock(pool, job, release); }

void kvci_tier_worker_submit(kvc_pool* pool, kvci_tier_job* job) {
  kvci_tier_worker* w = lock_worker(pool);
  if (w->tail)
    w->tail->next = job;
  else
    w->head = job;
  w->tail = job;
  if (!job->fetch) w->stats.blocks_queued += job->count;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->mu);
}

void kvci_tier_worker_dropped(kvc_pool* pool, uint32_t group, const uint32_t* blocks, size_t count,
                              kvc_tier_write_policy policy) {
  kvci_tier_worker* w = pool->tier_worker;
  for (uint32_t t = 0; t < pool->num_tiers; t++)
    if (pool->tier_policy[t] == policy)
      kvci_tier_count(pool->tiers[t], (kvci_tier_counts){.queued = count, .dropped = count});
  pthread_mutex_lock(&w->mu);
  w->stats.blocks_dropped += count;
  pthread_mutex_unlock(&w->mu);
  if (!w->opt.events) return;
  for (uint32_t t = 0; t < pool->num_tiers; t++) {
    if (pool->tier_policy[t] != policy) continue;
    for (size_t i = 0; i < count; i++)
      kvci_pool_event_push_tier(pool, KVC_POOL_EVENT_TIER_DROPPED, group, t,
                                pool->groups[group].blocks[blocks[i]].hash, pool->groups[group].block_size);
  }
}

void kvci_tier_worker_count_prefetch(kvc_pool* pool, int started, int late, int abandoned) {
  kvci_tier_worker* w = pool->tier_worker;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stats.prefetches += (uint64_t)started;
  w->stats.prefetches_late += (uint64_t)late;
  w->stats.prefetches_abandoned += (uint64_t)abandoned;
  pthread_mutex_unlock(&w->mu);
}

/* Under mu: a fetch job nobody will collect. A queued one leaves the queue and is freed now. */
static void abandon_locked(kvci_tier_worker* w, kvci_tier_job* job) {
  if (job->state == KVCI_JOB_RUNNING) {
    job->abandoned = 1; /* the worker frees it when its lookups return */
    return;
  }
  if (job->state == KVCI_JOB_QUEUED) {
    kvci_tier_job** at = &w->head;
    kvci_tier_job* prev = NULL;
    while (*at && *at != job) prev = *at, at = &(*at)->next;
    if (*at) {
      *at = job->next;
      if (w->tail == job) w->tail = prev;
    }
    w->stats.pending_jobs--;
    w->stats.pending_bytes -= job->bytes;
  }
  kvci_tier_job_free(NULL, job);
}

int kvci_tier_worker_wait(kvc_pool* pool, kvci_tier_job* job, const struct timespec* until) {
  kvci_tier_worker* w = lock_worker(pool);
  while (job->state != KVCI_JOB_DONE)
    if (pthread_cond_timedwait(&w->done, &w->mu, until) == ETIMEDOUT) break;
  int done = job->state == KVCI_JOB_DONE;
  if (!done) abandon_locked(w, job);
  pthread_mutex_unlock(&w->mu);
  return done;
}

void kvci_tier_worker_abandon(kvc_pool* pool, kvci_tier_job* job) { under_lock(pool, job, abandon_locked); }

void kvci_tier_job_free(kvc_pool* pool, kvci_tier_job* job) {
  (void)pool;
  if (!job) return;
  free(job->frames);
  free(job);
}

void kvci_tier_worker_reap(kvc_pool* pool) {
  kvci_tier_worker* w = pool->tier_worker;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  kvci_tier_job* j = w->reap;
  w->reap = NULL;
  pthread_mutex_unlock(&w->mu);
  while (j) {
    kvci_tier_job* next = j->next;
    for (size_t i = j->count; i-- > 0;) kvci_pool_block_release(&pool->groups[j->group], j->held[i]);
    free(j);
    j = next;
  }
}

void kvci_tier_worker_events(kvc_pool* pool) {
  kvci_tier_worker_reap(pool);
  kvci_tier_worker* w = pool->tier_worker;
  if (!w || !w->ev_cap) return;
  pthread_mutex_lock(&w->mu);
  for (uint32_t i = 0; i < w->ev_count; i++) {
    const tier_event* e = &w->events[(w->ev_head + i) % w->ev_cap];
    kvci_pool_event_push_tier(pool, e->kind, e->group, e->tier, e->hash, e->block_size);
  }
  w->ev_head = w->ev_count = 0;
  pthread_mutex_unlock(&w->mu);
}
