//go:build !cgo

package kvcache

// Without cgo no pool exists (NewPool returns ErrCgoDisabled): never reached.

import "unsafe"

func cPoolAddRedisTier(unsafe.Pointer, *redisTierConfig) error  { return ErrCgoDisabled }
func cPoolTierCount(unsafe.Pointer) int                         { return 0 }
func cRedisTierCreate(*redisTierConfig) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
