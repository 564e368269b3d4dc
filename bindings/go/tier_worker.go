package kvcache

// The pool's tier worker (kvcache/tier.h, "Tiers off the step", since 0.7):
// stores into the tiers are queued and made by a thread of the pool, so a
// commit never waits for a tier; a match's lookups can start early
// (Sequence.Prefetch) and be collected later (Prefetch.Collect).

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// The tier worker's event kinds (PoolEvent.Kind; BlockID is then the tier's
// index). Since 0.7.
const (
	EventTierStored  PoolEventKind = 4 // the worker stored the block in the tier
	EventTierFailed  PoolEventKind = 5 // the tier refused or failed the store
	EventTierDropped PoolEventKind = 6 // the store never reached the tier: queue full, or shutdown
)

// TierWorkerOptions are the options of Pool.StartTierWorker
// (kvc_tier_worker_options). The zero value takes the library's defaults for
// MaxJobs (256) and MaxBytes (256 MiB), a drain of 0 ms and no events.
type TierWorkerOptions struct {
	MaxJobs        uint32 // batches queued at most; 0 = 256
	MaxBytes       uint64 // staged bytes queued at most; 0 = 256 MiB
	DrainTimeoutMs uint32 // how long queued stores may still run when the pool is closed
	Events         bool   // queue EventTierStored / EventTierFailed / EventTierDropped
}

// TierWorkerStats are the running worker's counters (kvc_tier_worker_stats;
// all 0 without a worker).
type TierWorkerStats struct {
	Running             bool
	PendingJobs         uint64 // batches queued or in flight now
	PendingBytes        uint64 // their staged bytes
	BlocksQueued        uint64 // blocks whose stores were queued
	BlocksDropped       uint64 // blocks not queued: the queue was full
	BlocksAbandoned     uint64 // queued blocks dropped at shutdown, past the drain timeout
	Prefetches          uint64 // prefetches started
	PrefetchesLate      uint64 // collected before their lookups were done
	PrefetchesAbandoned uint64 // closed without a collect
	EventsLost          uint64 // tier events beyond the event capacity since a pull
}

// StartTierWorker starts the pool's tier worker. Errors: ErrInvalidState (a
// worker runs already), ErrInvalidArgument.
func (p *Pool) StartTierWorker(opts TierWorkerOptions) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.StartTierWorker")
	return p.call(false, func(h unsafe.Pointer) error { return cPoolStartTierWorker(h, opts) })
}

// StopTierWorker stops the tier worker: queued stores run for up to
// drainTimeoutMs, the rest are dropped. Without a worker it does nothing.
func (p *Pool) StopTierWorker(drainTimeoutMs uint32) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.StopTierWorker")
	return p.call(false, func(h unsafe.Pointer) error { return cPoolStopTierWorker(h, drainTimeoutMs) })
}

// TierWorkerStats returns the running tier worker's counters.
func (p *Pool) TierWorkerStats() (s TierWorkerStats, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.TierWorkerStats")
	err = p.call(false, func(h unsafe.Pointer) (e error) {
		s, e = cPoolTierWorkerStats(h)
		return e
	})
	return s, err
}

// Prefetch is a match's tier lookups started early (Sequence.Prefetch).
// Close it when it is not collected: its lookups are then abandoned. A
// closed pool frees its prefetches itself.
type Prefetch struct {
	p    unsafe.Pointer // *kvc_pool_prefetch; nil once closed
	pool *Pool
}

// Prefetch starts the tier lookups MatchPrefix(tokens) would make, in the
// pool's tier worker; collect them later into this (still empty) sequence.
// Without a worker, Collect is MatchPrefix.
func (s *Sequence) Prefetch(tokens []int32) (_ *Prefetch, err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.Prefetch")
	h, err := s.enter(false)
	if err != nil {
		return nil, err
	}
	f, err := cPoolPrefetchStart(h, tokens)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	pf := &Prefetch{p: f, pool: s.pool}
	runtime.SetFinalizer(pf, (*Prefetch).Close)
	return pf, nil
}

// Collect waits up to timeoutMs for the lookups, copies the blocks found into
// the pool and matches the prefix into seq (empty) from memory alone; it
// returns the tokens matched, as MatchPrefix. Errors: ErrInvalidState
// (collected or closed already).
func (f *Prefetch) Collect(seq *Sequence, timeoutMs uint32) (_ int64, err error) {
	if f == nil || seq == nil {
		return 0, newError(CodeInvalidArgument, "Prefetch.Collect: the prefetch or the sequence is nil")
	}
	defer f.pool.lock().Unlock()
	defer named(&err, "Prefetch.Collect")
	if seq.pool != f.pool {
		return 0, newError(CodeInvalidArgument, "Prefetch.Collect: the sequence belongs to another pool")
	}
	h := atomic.LoadPointer(&f.p)
	if h == nil {
		return 0, newError(CodeInvalidState, "Prefetch.Collect: the prefetch is closed")
	}
	sh, err := seq.enter(true)
	if err != nil {
		return 0, err
	}
	n, err := cPoolPrefetchCollect(h, sh, timeoutMs)
	runtime.KeepAlive(f)
	runtime.KeepAlive(seq)
	return int64(n), err
}

// Close frees the prefetch; one not collected is abandoned. Closing twice, or
// after the pool, does nothing.
func (f *Prefetch) Close() error {
	if f == nil {
		return nil
	}
	defer f.pool.lock().Unlock()
	h := atomic.SwapPointer(&f.p, nil)
	if h == nil {
		return nil
	}
	runtime.SetFinalizer(f, nil)
	if _, err := f.pool.enter(false); err == nil { // a closed pool freed it
		cPoolPrefetchDestroy(h)
	}
	runtime.KeepAlive(f)
	return nil
}
