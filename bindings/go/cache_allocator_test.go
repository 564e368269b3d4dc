//go:build cgo

package kvcache

import (
	"reflect"
	"testing"
	"unsafe"
)

// Caches on a Go Allocator: their calls that may allocate a store use the shims without nocallback (a
// callback from one of the others panics), so every operation below runs through the library calling Go.

// refusingArena is a CArena that refuses once grants allocations have been served (-1: never refuses).
type refusingArena struct {
	*CArena
	grants int
}

func (a *refusingArena) Alloc(bytes, align uintptr, device Device, stream uintptr) unsafe.Pointer {
	if a.grants == 0 {
		return nil
	}
	a.grants--
	return a.CArena.Alloc(bytes, align, device, stream)
}

func newArena(t *testing.T, size uintptr) *CArena {
	t.Helper()
	arena := must[*CArena](t)(NewCArena(size))
	t.Cleanup(func() {
		if err := arena.Close(); err != nil {
			t.Errorf("the arena after the test: %v", err)
		}
	})
	return arena
}

// dynamicOn is a lazy DynamicCache (New(nil)) on al.
func dynamicOn(al Allocator) *CacheOptions {
	o := DefaultCacheOptions()
	o.Allocator = al
	return &o
}

// A dynamic, a static (16 slots) and a sliding (window 4) layer.
var allocatorLayers = []LayerOptions{{Kind: LayerDynamic}, {Kind: LayerStatic, MaxCacheLen: 16}, {Kind: LayerDynamicSliding, Window: 4}}

func viewsInArena(t *testing.T, arena *CArena, what string, c *Cache) {
	t.Helper()
	for l := 0; l < c.NumLayers(); l++ {
		if !must[LayerInfo](t)(c.LayerInfo(l)).IsInitialized {
			continue
		}
		kv := must[KV](t)(c.LayerView(l))
		for _, v := range []View{kv.Key, kv.Value} {
			if !arena.Contains(v.Data(), uintptr(v.NumElements())*4) {
				t.Fatalf("%s: layer %d's view %p is not in the arena", what, l, v.Data())
			}
		}
	}
}

// sameAsPlain checks that c, on the arena, holds what plain, the same cache without an allocator, holds.
func sameAsPlain(t *testing.T, arena *CArena, what string, c, plain *Cache) {
	t.Helper()
	got, want := snapshot(t, c), snapshot(t, plain)
	if !reflect.DeepEqual(got.Views, want.Views) || !reflect.DeepEqual(got.Seq, want.Seq) {
		t.Fatalf("%s: the cache on the arena differs from the plain one:\n%+v\n%+v", what, got, want)
	}
	viewsInArena(t, arena, what, c)
}

// twins is a cache of some layers on an arena and the same cache without an allocator.
type twins struct {
	t        *testing.T
	arena    *CArena
	c, plain *Cache
}

func newTwins(t *testing.T, arenaSize uintptr, layers []LayerOptions) *twins {
	arena := newArena(t, arenaSize)
	opts := func(al Allocator) *CacheOptions {
		return &CacheOptions{Preset: PresetCustom, Layers: layers, Allocator: al}
	}
	return &twins{t: t, arena: arena, c: mkCache(t, opts(arena)), plain: mkCache(t, opts(nil))}
}

// both runs f on the two caches and checks that they agree.
func (w *twins) both(what string, f func(c *Cache) error) {
	w.t.Helper()
	ok(w.t, f(w.c))
	ok(w.t, f(w.plain))
	sameAsPlain(w.t, w.arena, what, w.c, w.plain)
}

func checkArenaEmpty(t *testing.T, arena *CArena) {
	t.Helper()
	if n, b := arena.Live(); n != 0 || b != 0 || arena.BadFrees() != 0 {
		t.Fatalf("%d allocations (%d bytes) live, %d bad frees", n, b, arena.BadFrees())
	}
}

// Every operation on a cache whose stores come from a CArena gives what it gives without one, with the views
// inside the arena: updates of each shim (compact, described, with options, all layers, a prepared step),
// growth, early initialization, reorder, crop, batch operations, reserve, clones, splits and stacks.
func TestCacheAllocatorOperations(t *testing.T) {
	w := newTwins(t, 1<<22, allocatorLayers)
	arena, c, plain, both := w.arena, w.c, w.plain, w.both
	x := fill(2, 2, 3, 4, func(b, h, s, d int64) float32 { return float32(b*1000 + h*100 + s*10 + d) })
	strided := x.Copy()
	strided.Strides = []int64{24, 12, 4, 1} // compact, but described: the kvcgo_update shim
	one := fill(2, 2, 1, 4, func(b, h, s, d int64) float32 { return float32(b*7 + h*5 + d) })
	both("compact updates", func(c *Cache) error {
		for l := range allocatorLayers {
			if _, err := c.Update(l, x, x, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if n, _ := arena.Live(); n != 6 {
		t.Fatalf("live allocations %d, want K and V of 3 layers", n)
	}
	both("a described update", func(c *Cache) error { _, err := c.Update(0, strided, strided, nil); return err })
	both("an update with options", func(c *Cache) error {
		_, err := c.Update(1, one, one, &UpdateOptions{CachePosition: []int64{9}})
		return err
	})
	both("UpdateAll", func(c *Cache) error {
		return c.UpdateAll(Inputs(one, one, one), Inputs(one, one, one), nil, nil)
	})
	both("Step.Update", func(c *Cache) error {
		step, err := c.PrepareStep(Inputs(one, one, one), Inputs(one, one, one))
		if err != nil {
			return err
		}
		defer step.Close()
		return step.Update()
	})
	both("growth", func(c *Cache) error { // past the dynamic layer's first store
		for i := 0; i < 70; i++ {
			if _, err := c.Update(0, one, one, nil); err != nil {
				return err
			}
		}
		return nil
	})
	both("Reorder", func(c *Cache) error { return c.Reorder([]int64{1, 0}) })
	both("Reserve", func(c *Cache) error { return c.Reserve(300) })

	clone := must[*Cache](t)(c.Clone())
	rows := must[[]*Cache](t)(c.BatchSplit(2, 1))
	stacked := must[*Cache](t)(FromBatchSplits(rows))
	sameAsPlain(t, arena, "a stack of splits", stacked, plain)
	ok(t, c.Close())
	for i := 0; i < 100; i++ { // the clone grows after its source is closed
		_, err := clone.Update(0, one, one, nil)
		ok(t, err)
	}
	if n := must[int64](t)(clone.SeqLength(0)); n != 178 {
		t.Fatalf("the clone's length %d, want 178", n)
	}
	viewsInArena(t, arena, "clone", clone)
	viewsInArena(t, arena, "split", rows[1])
	for _, r := range append(rows, clone, stacked) {
		ok(t, r.Close())
	}
	checkArenaEmpty(t, arena)
}

// The dynamic-only operations, and early initialization, on a cache of two dynamic layers.
func TestCacheAllocatorDynamicOperations(t *testing.T) {
	w := newTwins(t, 1<<20, []LayerOptions{{Kind: LayerDynamic}, {Kind: LayerDynamic}})
	arena, c, both := w.arena, w.c, w.both
	x := fill(2, 2, 5, 4, func(b, h, s, d int64) float32 { return float32(b*1000 + h*100 + s*10 + d) })
	both("EarlyInitialization", func(c *Cache) error {
		return c.EarlyInitialization(InitOptions{BatchSize: 2, NumKVHeads: 2, KHeadDim: 4, VHeadDim: 4, DType: DTypeFloat32})
	})
	if n, _ := arena.Live(); n != 4 {
		t.Fatalf("live allocations after EarlyInitialization %d, want K and V of 2 layers", n)
	}
	both("updates", func(c *Cache) error {
		return c.UpdateAll(Inputs(x, x), Inputs(x, x), nil, nil)
	})
	both("Crop", func(c *Cache) error { return c.Crop(-2) })
	both("BatchRepeatInterleave", func(c *Cache) error { return c.BatchRepeatInterleave(2) })
	both("BatchSelectIndices", func(c *Cache) error { return c.BatchSelectIndices([]int64{3, 0, 2}) })
	both("Reset", func(c *Cache) error { return c.Reset() })
	ok(t, c.Close())
	checkArenaEmpty(t, arena)
}

// NewFromTensors and encoder-decoder pairs on allocators: the pair's cross update, its clone and its splits.
func TestCacheAllocatorEncoderDecoder(t *testing.T) {
	arena := newArena(t, 1<<20)
	x := fill(2, 2, 3, 4, func(b, h, s, d int64) float32 { return float32(b*1000 + h*100 + s*10 + d) })
	self := must[*Cache](t)(NewFromTensors(dynamicOn(arena), Inputs(x), Inputs(x)))
	viewsInArena(t, arena, "NewFromTensors", self)
	cross := mkCache(t, dynamicOn(arena))
	pair := must[*EncoderDecoderCache](t)(NewEncoderDecoder(self, cross))
	kv := must[KV](t)(pair.UpdateCross(0, x, x))
	if !arena.Contains(kv.Key.Data(), uintptr(kv.Key.NumElements())*4) || kv.Key.At(1, 1, 2, 3) != 1123 {
		t.Fatalf("UpdateCross: %p, %v", kv.Key.Data(), kv.Key.At(1, 1, 2, 3))
	}
	clone := must[*EncoderDecoderCache](t)(pair.Clone())
	halves := must[[]*EncoderDecoderCache](t)(pair.BatchSplit(2, 1))
	stacked := must[*EncoderDecoderCache](t)(EncoderDecoderFromBatchSplits(halves))
	ok(t, pair.Close())
	for _, e := range []*EncoderDecoderCache{clone, halves[0], stacked} {
		batch := must[KV](t)(e.SelfAttention().LayerView(0)).Key.Dim(0)
		xb := fill(batch, 2, 3, 4, func(b, h, s, d int64) float32 { return float32(s) })
		for i := 0; i < 70; i++ { // growth, from inside calls on the pair's halves
			_, err := e.SelfAttention().Update(0, xb, xb, nil)
			ok(t, err)
		}
		beams := []int64{0}
		if batch == 2 {
			beams = []int64{1, 0}
		}
		ok(t, e.Reorder(beams))
		viewsInArena(t, arena, "a pair made from a pair", e.SelfAttention())
		viewsInArena(t, arena, "a pair made from a pair", e.CrossAttention())
	}
	for _, e := range append(halves, clone, stacked) {
		ok(t, e.Close())
	}
	checkArenaEmpty(t, arena)
}

// The library releases an allocator's handle once, after the last cache sharing it is closed; never for a
// create that failed.
func TestCacheAllocatorRelease(t *testing.T) {
	arena := newArena(t, 1<<20)
	released := releasedAllocators.Load()
	wantReleased := func(what string, n int64) {
		t.Helper()
		if got := releasedAllocators.Load() - released; got != n {
			t.Fatalf("%s: %d allocator handles released, want %d", what, got, n)
		}
	}
	c := must[*Cache](t)(New(dynamicOn(arena)))
	_, err := c.Update(0, toks(1, 2), toks(1, 2), nil)
	ok(t, err)
	clone := must[*Cache](t)(c.Clone())
	rows := must[[]*Cache](t)(c.BatchSplit(1, 1))
	ok(t, c.Close())
	ok(t, clone.Close())
	wantReleased("a split still open", 0)
	ok(t, rows[0].Close())
	wantReleased("all closed", 1)
	checkArenaEmpty(t, arena)

	_, err = New(&CacheOptions{Preset: PresetStatic, MaxCacheLen: 4, Allocator: arena})
	wantErr(t, err, CodeInvalidArgument, "config")
	wantReleased("a failed New", 1)
	second := must[*Cache](t)(New(dynamicOn(arena)))
	ok(t, second.Close())
	wantReleased("a second cache", 2)
}

// An allocator that refuses: the call that needed memory fails with ErrOutOfMemory naming the allocator, and
// the cache is as it was (nothing lost, nothing leaked); the next call that gets memory works.
func TestCacheAllocatorRefusal(t *testing.T) {
	arena := &refusingArena{CArena: newArena(t, 1<<20), grants: 0}
	c := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: allocatorLayers, Allocator: arena})
	x := fill(1, 2, 3, 4, func(b, h, s, d int64) float32 { return float32(h*100 + s*10 + d) })
	failsUnchanged(t, c, CodeOutOfMemory, func() error { _, err := c.Update(0, x, x, nil); return err }, "allocator")
	checkArenaEmpty(t, arena.CArena)

	arena.grants = 1 // K's first store but not V's: the half-made pair is given back
	failsUnchanged(t, c, CodeOutOfMemory, func() error { _, err := c.Update(0, x, x, nil); return err }, "allocator")
	checkArenaEmpty(t, arena.CArena)

	arena.grants = -1
	_, err := c.Update(0, x, x, nil)
	ok(t, err)
	live, bytes := arena.Live()
	arena.grants = 0
	one := fill(1, 2, 1, 4, func(b, h, s, d int64) float32 { return 1 })
	grow := func() error { // until the dynamic layer needs a larger store
		for i := 0; i < 200; i++ {
			if _, err := c.Update(0, one, one, nil); err != nil {
				return err
			}
		}
		return nil
	}
	before := snapshot(t, c)
	err = grow()
	wantErr(t, err, CodeOutOfMemory, "allocator")
	if n, b := arena.Live(); n != live || b != bytes {
		t.Fatalf("after a refused growth: %d allocations (%d bytes) live, want %d (%d)", n, b, live, bytes)
	}
	if got := must[int64](t)(c.SeqLength(0)); got <= before.Seq[0] {
		t.Fatalf("no update before the growth was refused (length %d)", got)
	}
	failsUnchanged(t, c, CodeOutOfMemory, grow, "allocator")
	_, err = c.Clone()
	wantErr(t, err, CodeOutOfMemory)
	if n, _ := arena.Live(); n != live {
		t.Fatalf("a refused clone kept %d allocations", n-live)
	}
	arena.grants = -1
	ok(t, grow())
	viewsInArena(t, arena.CArena, "after the refusals", c)
	ok(t, c.Close())
	checkArenaEmpty(t, arena.CArena)
}

// A cache without an allocator still allocates no Go memory in its updates: the callback twins copy their
// arguments to the heap in functions of their own, so the nocallback shims' arguments stay on the stack.
func TestUpdateWithoutAllocatorAllocatesNothing(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{
		{Kind: LayerDynamic}, {Kind: LayerStatic, MaxCacheLen: 1024}, {Kind: LayerDynamicSliding, Window: 4}}})
	k, v := NewTensor[float32](1, 2, 1, 4), NewTensor[float32](1, 2, 1, 4)
	described := k.Copy()
	described.Strides = []int64{8, 4, 4, 1}
	opts := &UpdateOptions{CachePosition: []int64{3}}
	ok(t, c.Reserve(10000))
	step := must[*Step](t)(c.PrepareStep(Inputs(k, k, k), Inputs(v, v, v)))
	defer step.Close()
	for what, f := range map[string]func() error{
		"Update":                 func() error { _, err := c.Update(0, k, v, nil); return err },
		"Update (described)":     func() error { _, err := c.Update(0, described, v, nil); return err },
		"Update with options":    func() error { _, err := c.Update(1, k, v, opts); return err },
		"Step.Update":            step.Update,
		"Update (sliding layer)": func() error { _, err := c.Update(2, k, v, nil); return err },
	} {
		ok(t, f()) // the first store
		if n := testing.AllocsPerRun(100, func() { ok(t, f()) }); n != 0 {
			t.Fatalf("%s allocates %v times per call", what, n)
		}
	}
}
