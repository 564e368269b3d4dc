//go:build !cgo

package kvcache

// Without cgo there is no library: NewDiskTier returns ErrCgoDisabled, so no
// tier exists and the calls below are never reached.

import "unsafe"

func cDiskTierCreate(string, uint64, []byte) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
func cTierDestroy(unsafe.Pointer)                                    {}
func cTierStats(unsafe.Pointer) (TierStats, error)                   { return TierStats{}, ErrCgoDisabled }
func cPoolAddTier(unsafe.Pointer, unsafe.Pointer, TierWrite) error   { return ErrCgoDisabled }
func cPoolTierStats(unsafe.Pointer, uint32) (TierStats, error)       { return TierStats{}, ErrCgoDisabled }
func cPoolFingerprint(unsafe.Pointer) ([BlockHashSize]byte, error) {
	return [BlockHashSize]byte{}, ErrCgoDisabled
}
func cTierExists(unsafe.Pointer, []TierKey) ([]bool, error) { return nil, ErrCgoDisabled }
func cTierGetBlocks(unsafe.Pointer, []TierKey, []byte, int, uint32) ([]bool, error) {
	return nil, ErrCgoDisabled
}
func cTierPutBlocks(unsafe.Pointer, []TierKey, []byte, int, uint32) (int, error) {
	return 0, ErrCgoDisabled
}
