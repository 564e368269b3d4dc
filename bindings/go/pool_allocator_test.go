//go:build cgo

package kvcache

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

func allocatorPool(arena *CArena) (*Pool, error) {
	return NewPool(PoolOptions{
		DType:     DTypeFloat32,
		Groups:    []PoolGroup{FullGroup(pBlock, 8)},
		Layers:    RepeatLayer(pLayers, PoolLayer{NumKVHeads: pHeads, KeyHeadDim: pDim}),
		Allocator: arena,
	})
}

// A pool's storage from a CArena: views inside it, zeroed, writes land there, Close gives every byte back.
func TestPoolStorageFromCArena(t *testing.T) {
	arena, err := NewCArena(1 << 16)
	ok(t, err)
	defer arena.Close()
	p, err := allocatorPool(arena)
	ok(t, err)
	if n, _ := arena.Live(); n != 2*pLayers {
		t.Fatalf("live allocations %d, want K and V of %d layers", n, pLayers)
	}
	kv, err := p.LayerStorage(0, LayoutNHD)
	ok(t, err)
	bytes := uintptr(kv.Key.NumElements()) * 4
	if !arena.Contains(kv.Key.Data(), bytes) || uintptr(kv.Key.Data())%AllocatorAlignment != 0 {
		t.Fatalf("the storage view %p is not an aligned slice of the arena", kv.Key.Data())
	}
	for _, x := range unsafe.Slice((*float32)(kv.Key.Data()), kv.Key.NumElements()) {
		if x != 0 {
			t.Fatalf("storage not zeroed: %v", x)
		}
	}
	s, err := p.NewSequence(nil)
	ok(t, err)
	slots := must[SlotMapping](t)(s.Reserve([]int32{1, 2, 3}))
	k := NewTensor[float32](3, pHeads, pDim)
	k.Data[0] = 7.5
	ok(t, p.Write([]Input{k, k}, []Input{k, k}, slots.Slots))
	ok(t, s.Commit())
	kv, err = p.LayerStorage(1, LayoutNHD)
	ok(t, err)
	found := false
	for _, x := range unsafe.Slice((*float32)(kv.Key.Data()), kv.Key.NumElements()) {
		found = found || x == 7.5
	}
	if !found {
		t.Fatal("the write is not in the arena's memory")
	}
	if err := arena.Close(); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("closing an arena in use: %v", err)
	}
	ok(t, s.Close())
	ok(t, p.Close())
	if n, b := arena.Live(); n != 0 || b != 0 || arena.BadFrees() != 0 {
		t.Fatalf("after Close: %d allocations (%d bytes) live, %d bad frees", n, b, arena.BadFrees())
	}
}

// An arena too small for the second buffer: NewPool fails with ErrOutOfMemory and keeps nothing.
func TestPoolAllocatorRefusal(t *testing.T) {
	arena, err := NewCArena(600) // one layer's K (512 bytes) fits, its V does not
	ok(t, err)
	defer arena.Close()
	_, err = allocatorPool(arena)
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "allocator") {
		t.Fatalf("NewPool with a full arena: %v", err)
	}
	if n, _ := arena.Live(); n != 0 || arena.BadFrees() != 0 {
		t.Fatalf("after the failed NewPool: %d allocations live, %d bad frees", n, arena.BadFrees())
	}
}
