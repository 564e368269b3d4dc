//go:build cgo

package kvcache

// The tier worker's calls into the C library (kvcache/tier.h, since 0.7).
// Options and stats cross as C structs on the Go stack (no Go pointers in
// them); a prefetch handle is C memory.

/*
#include <string.h>
#include <kvcache.h>

static kvc_error* kvcgo_pool_start_tier_worker(kvc_pool* p, uint32_t max_jobs, uint64_t max_bytes, uint32_t drain,
                                               uint32_t events) {
  kvc_tier_worker_options o = KVC_TIER_WORKER_OPTIONS_INIT;
  o.max_jobs = max_jobs;
  o.max_bytes = max_bytes;
  o.drain_timeout_ms = drain;
  o.events = events;
  return kvc_pool_start_tier_worker(p, &o);
}

static kvc_error* kvcgo_pool_tier_worker_stats(const kvc_pool* p, kvc_tier_worker_stats* out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  return kvc_pool_tier_worker_stats(p, out);
}
*/
import "C"

import "unsafe"

func cPoolStartTierWorker(p unsafe.Pointer, o TierWorkerOptions) error {
	events := C.uint32_t(0)
	if o.Events {
		events = 1
	}
	return takeError(C.kvcgo_pool_start_tier_worker(pool(p), C.uint32_t(o.MaxJobs), C.uint64_t(o.MaxBytes),
		C.uint32_t(o.DrainTimeoutMs), events))
}

func cPoolStopTierWorker(p unsafe.Pointer, drainMs uint32) error {
	return takeError(C.kvc_pool_stop_tier_worker(pool(p), C.uint32_t(drainMs)))
}

func cPoolTierWorkerStats(p unsafe.Pointer) (TierWorkerStats, error) {
	var s C.kvc_tier_worker_stats
	if err := takeError(C.kvcgo_pool_tier_worker_stats(pool(p), &s)); err != nil {
		return TierWorkerStats{}, err
	}
	return TierWorkerStats{
		Running: s.running != 0, PendingJobs: uint64(s.pending_jobs), PendingBytes: uint64(s.pending_bytes),
		BlocksQueued: uint64(s.blocks_queued), BlocksDropped: uint64(s.blocks_dropped),
		BlocksAbandoned: uint64(s.blocks_abandoned), Prefetches: uint64(s.prefetches),
		PrefetchesLate: uint64(s.prefetches_late), PrefetchesAbandoned: uint64(s.prefetches_abandoned),
		EventsLost: uint64(s.events_lost),
	}, nil
}

func cPoolPrefetchStart(s unsafe.Pointer, tokens []int32) (unsafe.Pointer, error) {
	var out *C.kvc_pool_prefetch
	err := takeError(C.kvc_pool_prefetch_start(poolSeq(s), tokensPtr(tokens), C.size_t(len(tokens)), &out))
	return unsafe.Pointer(out), err
}

func cPoolPrefetchCollect(f, s unsafe.Pointer, timeoutMs uint32) (uint64, error) {
	var n C.uint64_t
	err := takeError(C.kvc_pool_prefetch_collect((*C.kvc_pool_prefetch)(f), poolSeq(s), C.uint32_t(timeoutMs), &n))
	return uint64(n), err
}

func cPoolPrefetchDestroy(f unsafe.Pointer) { C.kvc_pool_prefetch_destroy((*C.kvc_pool_prefetch)(f)) }
