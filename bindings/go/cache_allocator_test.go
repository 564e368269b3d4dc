//go:build cgo

package kvcache

import (
	"errors"
	"strings"
	"testing"
)

// A dynamic, a static (16 slots) and a sliding (window 4) layer, their stores from arena.
func allocatorCache(arena *CArena) (*Cache, error) {
	return New(&CacheOptions{
		Preset: PresetCustom,
		Layers: []LayerOptions{
			{Kind: LayerDynamic}, {Kind: LayerStatic, MaxCacheLen: 16}, {Kind: LayerDynamicSliding, Window: 4},
		},
		Allocator: arena,
	})
}

func viewsInArena(t *testing.T, arena *CArena, what string, kv KV) {
	t.Helper()
	for _, v := range []View{kv.Key, kv.Value} {
		if !arena.Contains(v.Data(), uintptr(v.NumElements())*4) {
			t.Fatalf("%s: the view %p is not in the arena", what, v.Data())
		}
	}
}

func checkArenaEmpty(t *testing.T, arena *CArena) {
	t.Helper()
	if n, b := arena.Live(); n != 0 || b != 0 || arena.BadFrees() != 0 {
		t.Fatalf("%d allocations (%d bytes) live, %d bad frees", n, b, arena.BadFrees())
	}
}

// A cache's stores from a CArena: the views of updates and LayerView are the arena's memory, through growth;
// a clone outlives its source and still allocates from the arena; closing everything gives every byte back.
func TestCacheStoresFromCArena(t *testing.T) {
	arena, err := NewCArena(1 << 20)
	ok(t, err)
	defer arena.Close()
	c, err := allocatorCache(arena)
	ok(t, err)
	x := fill(2, 2, 3, 4, func(b, h, s, d int64) float32 { return float32(b*1000 + h*100 + s*10 + d) })
	for l := 0; l < 3; l++ {
		kv, err := c.Update(l, x, x, nil)
		ok(t, err)
		viewsInArena(t, arena, "update", kv)
	}
	if n, _ := arena.Live(); n != 6 {
		t.Fatalf("live allocations %d, want K and V of 3 layers", n)
	}
	one := fill(2, 2, 1, 4, func(b, h, s, d int64) float32 { return 1 })
	for i := 0; i < 70; i++ { // past the dynamic layer's first store
		_, err := c.Update(0, one, one, nil)
		ok(t, err)
	}
	viewsInArena(t, arena, "grown", must[KV](t)(c.LayerView(0)))
	if got := must[KV](t)(c.LayerView(0)).Key.At(1, 1, 2, 3); got != 1123 {
		t.Fatalf("kept token after growth: %v, want 1123", got)
	}
	clone, err := c.Clone()
	ok(t, err)
	rows, err := c.BatchSplit(2, 1)
	ok(t, err)
	ok(t, c.Close())
	for i := 0; i < 100; i++ { // the clone grows after its source is closed
		_, err := clone.Update(0, one, one, nil)
		ok(t, err)
	}
	viewsInArena(t, arena, "clone", must[KV](t)(clone.LayerView(0)))
	viewsInArena(t, arena, "split", must[KV](t)(rows[1].LayerView(1)))
	ok(t, clone.Close())
	for _, r := range rows {
		ok(t, r.Close())
	}
	checkArenaEmpty(t, arena)
}

// An arena too small for a store: the update fails with ErrOutOfMemory naming the allocator and changes
// nothing; a New that fails keeps nothing either.
func TestCacheAllocatorRefusal(t *testing.T) {
	arena, err := NewCArena(3000) // the first store of K (2 heads x 64 slots x 4 floats: 2048 bytes) fits, V does not
	ok(t, err)
	defer arena.Close()
	c, err := allocatorCache(arena)
	ok(t, err)
	defer c.Close()
	x := fill(1, 2, 3, 4, func(b, h, s, d int64) float32 { return 1 })
	_, err = c.Update(0, x, x, nil)
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "allocator") {
		t.Fatalf("Update with a full arena: %v", err)
	}
	if n := must[int64](t)(c.SeqLength(0)); n != 0 {
		t.Fatalf("SeqLength after the refusal: %d, want 0", n)
	}
	checkArenaEmpty(t, arena)
	_, err = New(&CacheOptions{Preset: PresetStatic, MaxCacheLen: 4, Allocator: arena})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "config") {
		t.Fatalf("New without a config: %v", err)
	}
}
