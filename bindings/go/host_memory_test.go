//go:build cgo

package kvcache

import (
	"runtime"
	"testing"
	"time"
)

// One static layer of 4 heads x 1024 slots x 64 dims of float32: 1 MiB per K
// and V store, the smallest block the library keeps.
const (
	hmHeads, hmSlots, hmDim = 4, 1024, 64
	hmStoresBytes           = 2 * hmHeads * hmSlots * hmDim * 4
)

// cacheWithLargeStores returns a cache whose K and V stores exist: a static
// layer allocates them at its first update. The caller closes it.
func cacheWithLargeStores(t *testing.T) *Cache {
	t.Helper()
	c, err := New(&CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerStatic, MaxCacheLen: hmSlots}}})
	ok(t, err)
	x := NewTensor[float32](1, hmHeads, 3, hmDim)
	if _, err := c.Update(0, x, x, nil); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// settleFinalizers runs the garbage collector until caches and pools that
// earlier tests dropped without Close are finalized: their stores, freed
// during the test below, would change its counts (the kept memory is
// process-wide).
func settleFinalizers(t *testing.T) {
	t.Helper()
	for i := 0; i < 3; i++ {
		done := make(chan struct{})
		sentinel := &struct{ p *int }{} // has a pointer: not a tiny allocation, so it is finalized on its own
		runtime.SetFinalizer(sentinel, func(*struct{ p *int }) { close(done) })
		sentinel = nil
		runtime.GC()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the finalizers did not run within 10 s")
		}
	}
}

func TestHostMemoryKeptReleasedAndNotKeptUnderAZeroLimit(t *testing.T) {
	settleFinalizers(t)
	// Start from nothing kept, under a known limit (the default depends on the machine).
	first := SetHostMemoryRetention(0)
	t.Cleanup(func() { SetHostMemoryRetention(first) })
	if got := HostMemoryRetained(); got != 0 {
		t.Fatalf("a limit of 0 keeps nothing: %d bytes kept", got)
	}
	const limit = 1 << 30
	if prev := SetHostMemoryRetention(limit); prev != 0 {
		t.Fatalf("SetHostMemoryRetention returned %d, want the previous limit 0", prev)
	}

	ok(t, cacheWithLargeStores(t).Close())
	kept := HostMemoryRetained()
	if kept < hmStoresBytes {
		t.Fatalf("a closed cache's 1 MiB stores are kept: %d bytes kept, want at least %d", kept, hmStoresBytes)
	}
	if got := ReleaseHostMemory(); got != kept {
		t.Fatalf("ReleaseHostMemory gave back %d bytes, want the %d kept", got, kept)
	}
	if got := HostMemoryRetained(); got != 0 {
		t.Fatalf("%d bytes kept after ReleaseHostMemory", got)
	}
	if got := ReleaseHostMemory(); got != 0 {
		t.Fatalf("a second ReleaseHostMemory gave back %d bytes", got)
	}

	// Kept stores serve the next cache of the same shape.
	ok(t, cacheWithLargeStores(t).Close())
	kept = HostMemoryRetained()
	reuser := cacheWithLargeStores(t)
	if got := HostMemoryRetained(); got >= kept {
		t.Fatalf("a new cache of the same shape left %d bytes kept of %d: the kept stores were not reused", got, kept)
	}
	ok(t, reuser.Close())

	if prev := SetHostMemoryRetention(0); prev != limit {
		t.Fatalf("SetHostMemoryRetention returned %d, want the previous limit %d", prev, limit)
	}
	if got := HostMemoryRetained(); got != 0 {
		t.Fatalf("a limit of 0 gives back what was kept: %d bytes kept", got)
	}
	ok(t, cacheWithLargeStores(t).Close())
	if got := HostMemoryRetained(); got != 0 {
		t.Fatalf("under a limit of 0 a closed cache left %d bytes kept", got)
	}
}
