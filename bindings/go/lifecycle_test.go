//go:build cgo

package kvcache

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// waitLive collects garbage until the number of live handles is at most
// want.
func waitLive(t *testing.T, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for liveHandles.Load() > want {
		if time.Now().After(deadline) {
			t.Fatalf("%d handles still live after GC, want %d: the finalizer did not free them", liveHandles.Load(), want)
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFinalizerFreesDroppedCaches(t *testing.T) {
	live := liveHandles.Load()
	func() {
		for i := 0; i < 8; i++ {
			c, err := New(nil)
			ok(t, err)
			x := rows(2, 64, 0)
			must[KV](t)(c.Update(0, x, x, nil))
			// A prepared step that is never closed either.
			_, err = c.PrepareStep(Inputs(rows(2, 1, 0)), Inputs(rows(2, 1, 0)))
			ok(t, err)
		}
		droppedPair(t)
	}()
	if liveHandles.Load() != live+9 {
		t.Fatalf("%d live handles, want %d", liveHandles.Load(), live+9)
	}
	waitLive(t, live)
}

// droppedPair makes an encoder-decoder pair of two lazy caches and drops it (no Close); it returns the
// self-attention half.
func droppedPair(t *testing.T) *Cache {
	self, err := New(nil)
	ok(t, err)
	cross, err := New(nil)
	ok(t, err)
	_, err = NewEncoderDecoder(self, cross)
	ok(t, err)
	return self
}

func TestViewsKeepTheirCacheAlive(t *testing.T) {
	x := rows(1, 4, 0)
	var kv KV
	func() {
		c, err := New(nil)
		ok(t, err)
		kv = must[KV](t)(c.Update(0, x, x, nil))
	}()
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
	if !kv.Key.Valid() || !eqFloats(flat(t, kv.Key), x.Data) {
		t.Fatal("the cache of a reachable view was finalized")
	}
	// A borrowed cache keeps its pair alive.
	var self *Cache
	func() { self = droppedPair(t) }()
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
	must[KV](t)(self.Update(0, x, x, nil))
}

// Each goroutine owns caches of its own (the library's rule: one thread per
// handle, distinct handles independent) and checks every result; run with
// -race.
func TestGoroutinesOwningCaches(t *testing.T) {
	const workers, steps = 12, 150
	goWorkers(t, workers, func(w int) error { return worker(w, steps) })()
}

func worker(w, steps int) error {
	var opts *CacheOptions
	switch w % 3 {
	case 1:
		opts = &CacheOptions{Preset: PresetStatic, MaxCacheLen: int64(steps + 8), Config: &ModelConfig{NumHiddenLayers: 2}}
	case 2:
		opts = &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 2, SlidingWindow: 16,
			LayerTypes: []LayerType{LayerTypeSlidingAttention, LayerTypeFullAttention}}}
	}
	c, err := New(opts)
	if err != nil {
		return err
	}
	defer c.Close()
	for s := 0; s < steps; s++ {
		tok := fill(2, 2, 1, 8, func(b, h, _, d int64) float32 { return float32(w*1e6 + s*1000 + int(b*100+h*10+d)) })
		for l := 0; l < 2; l++ {
			kv, err := c.Update(l, tok, tok, nil)
			if err != nil {
				return fmt.Errorf("worker %d step %d: %w", w, s, err)
			}
			n, err := c.SeqLength(l)
			if err != nil || n != int64(s+1) {
				return fmt.Errorf("worker %d step %d: seq length %d (%v)", w, s, n, err)
			}
			last := kv.Key.Dim(2) - 1
			if w%3 == 1 {
				last = int64(s)
			}
			if got := kv.Value.At(1, 1, last, 7); got != float32(w*1e6+s*1000+117) {
				return fmt.Errorf("worker %d step %d layer %d: newest value %g", w, s, l, got)
			}
		}
		if s%10 == 9 {
			if err := c.Reorder([]int64{1, 0}); err != nil {
				return err
			}
			if err := c.Reorder([]int64{1, 0}); err != nil {
				return err
			}
			d, err := c.Clone()
			if err != nil {
				return err
			}
			d.Close()
		}
	}
	return nil
}

// Queries take a const handle in C: several goroutines may ask at once
// while nobody mutates the cache.
func TestConcurrentQueries(t *testing.T) {
	c := populated(t)
	before := snapshot(t, c)
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if n, err := c.SeqLength(1); err != nil || n != 3 {
					t.Errorf("seq length %d %v", n, err)
					return
				}
				kv, err := c.LayerView(0)
				if err != nil || kv.Key.At(1, 1, 2, 2) != 1000+100+20+2 {
					t.Errorf("layer view %v", err)
					return
				}
				if _, err := c.Memory(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	unchanged(t, c, before)
}
