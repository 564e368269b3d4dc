//go:build !cgo

package kvcache

import (
	"errors"
	"testing"
)

// Without cgo the package builds with the same API, and every constructor
// says why it cannot work.
func TestWithoutCgo(t *testing.T) {
	c, err := New(nil)
	if c != nil || !errors.Is(err, ErrCgoDisabled) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("New without cgo: %v, %v", c, err)
	}
	if _, err := NewFromTensors(nil, nil, nil); !errors.Is(err, ErrCgoDisabled) {
		t.Fatal(err)
	}
	if _, err := FromBatchSplits(nil); !errors.Is(err, ErrCgoDisabled) {
		t.Fatal(err)
	}
	if _, err := EncoderDecoderFromBatchSplits(nil); !errors.Is(err, ErrCgoDisabled) {
		t.Fatal(err)
	}
	if _, err := NewAuthenticatedDiskTier(".", 0, make([]byte, TierAuthKeyMin)); !errors.Is(err, ErrCgoDisabled) {
		t.Fatal(err)
	}
	var zero Cache
	if _, err := zero.SeqLength(0); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if VersionString() != "" || Features() != 0 {
		t.Fatal("a library version without a library")
	}
	if SetHostMemoryRetention(1<<20) != 0 || ReleaseHostMemory() != 0 || HostMemoryRetained() != 0 {
		t.Fatal("host memory kept without a library")
	}
	if CodeOutOfRange.String() != "KVC_ERROR_OUT_OF_RANGE" || DTypeBFloat16.Size() != 2 ||
		DTypeOf(DataType{TypeCodeFloat, 16, 1}) != DTypeFloat16 || DefaultQuantOptions().QGroupSize != 64 {
		t.Fatal("the pure-Go parts")
	}
	x := NewTensor[Float16](1, 1, 2, 1)
	x.Set(Float16FromFloat32(2), 0, 0, 1, 0)
	if x.At(0, 0, 1, 0).Float32() != 2 {
		t.Fatal("tensors")
	}
	t.Log(err)
}
