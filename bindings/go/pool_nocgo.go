//go:build !cgo

package kvcache

// Without cgo there is no library: NewPool returns ErrCgoDisabled, so no
// pool or sequence ever exists and the calls below are never reached.

import "unsafe"

func cPoolCreate(*PoolOptions) (unsafe.Pointer, func(), error) { return nil, nil, ErrCgoDisabled }
func cPoolOptionsFingerprint(*PoolOptions) ([BlockHashSize]byte, error) {
	return [BlockHashSize]byte{}, ErrCgoDisabled
}
func cPoolOptionsBlockPayload(*PoolOptions, uint32) (int, uint32, error) { return 0, 0, ErrCgoDisabled }
func cPoolDestroy(unsafe.Pointer)                                        {}
func cPoolSetStream(unsafe.Pointer, uintptr) error                       { return ErrCgoDisabled }
func cPoolStats(unsafe.Pointer, uint32) (PoolStats, error)               { return PoolStats{}, ErrCgoDisabled }
func cPoolClearCache(unsafe.Pointer) error                               { return ErrCgoDisabled }
func cPoolUnpinAll(unsafe.Pointer) error                                 { return ErrCgoDisabled }
func cPoolSequenceCreate(unsafe.Pointer, SequenceKeys) (unsafe.Pointer, error) {
	return nil, ErrCgoDisabled
}
func cPoolSequenceDestroy(unsafe.Pointer)                      {}
func cPoolSequenceLength(unsafe.Pointer) uint64                { return 0 }
func cPoolSequenceCommitted(unsafe.Pointer) uint64             { return 0 }
func cPoolMatchPrefix(unsafe.Pointer, []int32) (uint64, error) { return 0, ErrCgoDisabled }
func cPoolReserve(unsafe.Pointer, []int32, []int64) error      { return ErrCgoDisabled }
func cPoolCommit(unsafe.Pointer) error                         { return ErrCgoDisabled }
func cPoolFork(unsafe.Pointer) (unsafe.Pointer, error)         { return nil, ErrCgoDisabled }
func cPoolTruncate(unsafe.Pointer, uint64) error               { return ErrCgoDisabled }
func cPoolPin(unsafe.Pointer) error                            { return ErrCgoDisabled }
func cPoolBlocksNeeded(unsafe.Pointer, []unsafe.Pointer, []uint64, []uint64) error {
	return ErrCgoDisabled
}
func cPoolWrite(unsafe.Pointer, unsafe.Pointer, unsafe.Pointer, int, []int64, int) error {
	return ErrCgoDisabled
}
func cPoolWriteLayer(unsafe.Pointer, uint32, unsafe.Pointer, unsafe.Pointer, []int64, int) error {
	return ErrCgoDisabled
}
func cPoolReserveBatch(unsafe.Pointer, []unsafe.Pointer, []int32, []uint64, []int64) (int, error) {
	return 0, ErrCgoDisabled
}
func cPoolCommitBatch(unsafe.Pointer, []unsafe.Pointer) error          { return ErrCgoDisabled }
func cPoolLayerStorage(unsafe.Pointer, uint32, PoolLayout, *ckv) error { return ErrCgoDisabled }
func cPoolBlockTable(unsafe.Pointer, []unsafe.Pointer, uint32, tableFormat, *ctable) error {
	return ErrCgoDisabled
}
func cPoolGather(unsafe.Pointer, uint32, unsafe.Pointer, unsafe.Pointer) error { return ErrCgoDisabled }
func cPoolRecurrentState(unsafe.Pointer, uint32, *ctensor, *ctensor) error     { return ErrCgoDisabled }
func cPoolEventsPull(unsafe.Pointer, []PoolEvent) (int, error)                 { return 0, ErrCgoDisabled }
func cPoolEventsPullVLLM(unsafe.Pointer, VLLMBatchOptions) ([]byte, error) {
	return nil, ErrCgoDisabled
}
