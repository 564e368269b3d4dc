//go:build cgo

package kvcache

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Goroutines sharing one handle: the package serialises their calls, so
// none meets ErrBusy and what each did is in the handle afterwards
// (go test -race checks the Go side; tests/threads the library's guard).

const sharers = 16

func TestGoroutinesShareOnePool(t *testing.T) {
	p := mkPool(t, 512, "threads")
	const steps = 6
	goWorkers(t, sharers, func(g int) error { return shareOnePool(p, g, steps) })()
	st, err := p.Stats(0)
	ok(t, err)
	if st.FreeBlocks+st.CachedBlocks != st.NumBlocks {
		t.Fatalf("after every sequence closed: %d free + %d cached blocks of %d", st.FreeBlocks, st.CachedBlocks,
			st.NumBlocks)
	}
}

// shareOnePool runs `steps` serving steps of one sequence of its own on the
// shared pool and checks that the sequence holds exactly what it wrote.
func shareOnePool(p *Pool, g, steps int) error {
	s, err := p.NewSequence([]byte(fmt.Sprint(g)))
	if err != nil {
		return err
	}
	defer s.Close()
	var all pstep
	for i := 0; i < steps; i++ {
		slots, err := s.Reserve(seqTokens(1000*g+3*i, 3))
		if err != nil {
			return fmt.Errorf("goroutine %d, step %d: Reserve: %w", g, i, err)
		}
		st := newStep(3, float32(100000*g+100*i))
		if err := st.write(p, slots.Slots); err != nil {
			return fmt.Errorf("goroutine %d, step %d: Write: %w", g, i, err)
		}
		if err := s.Commit(); err != nil {
			return fmt.Errorf("goroutine %d, step %d: Commit: %w", g, i, err)
		}
		if _, err := p.Stats(0); err != nil {
			return fmt.Errorf("goroutine %d: Stats: %w", g, err)
		}
		if i == 0 {
			all = st
		} else {
			all = all.then(st)
		}
	}
	if s.Len() != int64(3*steps) {
		return fmt.Errorf("goroutine %d: the sequence holds %d tokens, want %d", g, s.Len(), 3*steps)
	}
	for l := 0; l < pLayers; l++ {
		k, v, err := GatherTensors[float32](s, l)
		if err != nil {
			return fmt.Errorf("goroutine %d: Gather: %w", g, err)
		}
		if !eqFloats(tokenMajor(k), all.keys[l].Data) || !eqFloats(tokenMajor(v), all.values[l].Data) {
			return fmt.Errorf("goroutine %d, layer %d: gathered K/V differ from what it wrote", g, l)
		}
	}
	return nil
}

func TestGoroutinesShareOneCache(t *testing.T) {
	c := mkCache(t, nil)
	const updates = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*sharers)
	for g := 0; g < sharers; g++ {
		wg.Add(2)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < updates; i++ {
				// One token whose every element is 1000*g + i: the stored sequence names its writer.
				if _, err := c.Update(0, toks(float32(1000*g+i)), toks(float32(-1000*g-i)), nil); err != nil {
					errs <- fmt.Errorf("goroutine %d: Update %d: %w", g, i, err)
					return
				}
			}
		}(g)
		go func() { // queries beside the updates
			defer wg.Done()
			for i := 0; i < updates; i++ {
				if c.NumLayers() == 0 {
					continue
				}
				if _, err := c.SeqLength(0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if errors.Is(err, ErrBusy) {
			t.Errorf("the package let two calls overlap: %v", err)
		} else {
			t.Error(err)
		}
	}
	n, err := c.SeqLength(0)
	ok(t, err)
	if n != sharers*updates {
		t.Fatalf("SeqLength %d, want %d", n, sharers*updates)
	}
	kv, err := c.LayerView(0)
	ok(t, err)
	next := make([]int, sharers) // each goroutine's updates are stored in its order
	for _, x := range seqOf(t, kv.Key, 0) {
		g, i := int(x)/1000, int(x)%1000
		if g < 0 || g >= sharers || i != next[g] {
			t.Fatalf("stored token %v is out of its writer's order (next of goroutine %d: %d)", x, g, next[g])
		}
		next[g]++
	}
}

func TestBusyCodeIsAnError(t *testing.T) {
	if CodeBusy.String() != "KVC_ERROR_BUSY" {
		t.Fatalf("CodeBusy: %q", CodeBusy.String())
	}
	err := error(&Error{Code: CodeBusy, Message: "kvc_pool_reserve: another thread is inside a call"})
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrInvalidState) {
		t.Fatalf("errors.Is(%v, ErrBusy) should hold, and only it", err)
	}
}
