//go:build !cgo

package kvcache

import "unsafe"

// Without cgo no cache exists, so these are never reached past the constructors' ErrCgoDisabled.

func cSave(unsafe.Pointer, string) error                  { return ErrCgoDisabled }
func cRestore(unsafe.Pointer, string) error               { return ErrCgoDisabled }
func cLoad(string, LoadOptions) (unsafe.Pointer, error)   { return nil, ErrCgoDisabled }
func cEDSave(unsafe.Pointer, string) error                { return ErrCgoDisabled }
func cEDRestore(unsafe.Pointer, string) error             { return ErrCgoDisabled }
func cEDLoad(string, LoadOptions) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }

func cPoolSequenceSave(unsafe.Pointer, string) error                   { return ErrCgoDisabled }
func cPoolSequenceLoad(unsafe.Pointer, string) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
