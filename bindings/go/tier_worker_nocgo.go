//go:build !cgo

package kvcache

// Without cgo there is no library: no pool exists, so these are never reached.

import "unsafe"

func cPoolStartTierWorker(unsafe.Pointer, TierWorkerOptions) error { return ErrCgoDisabled }
func cPoolStopTierWorker(unsafe.Pointer, uint32) error             { return ErrCgoDisabled }
func cPoolTierWorkerStats(unsafe.Pointer) (TierWorkerStats, error) {
	return TierWorkerStats{}, ErrCgoDisabled
}
func cPoolPrefetchStart(unsafe.Pointer, []int32) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
func cPoolPrefetchCollect(unsafe.Pointer, unsafe.Pointer, uint32) (uint64, error) {
	return 0, ErrCgoDisabled
}
func cPoolPrefetchDestroy(unsafe.Pointer) {}
