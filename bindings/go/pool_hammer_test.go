//go:build cgo

package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// Goroutines hammering one pool with every kind of call at once, on
// sequences of their own and on sequences they share (which another
// goroutine may fork, reserve into or close under them), while others read
// the pool's counters and tables, and the pool is closed under the last of
// them. go test -race checks the Go side; the calls must never crash, never
// meet ErrBusy, fail only in the ways a shared pool allows, and leave every
// block back in the pool.

// sharedSeqs is a set of sequences any goroutine may use or close.
type sharedSeqs struct {
	mu   sync.Mutex
	seqs []*Sequence
}

func (s *sharedSeqs) add(q *Sequence) {
	s.mu.Lock()
	s.seqs = append(s.seqs, q)
	s.mu.Unlock()
}

func (s *sharedSeqs) pick(r *rand.Rand) *Sequence {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seqs) == 0 {
		return nil
	}
	return s.seqs[r.IntN(len(s.seqs))]
}

// allowed are the errors a call on a shared sequence may meet: closed by
// another goroutine, or the pool short of blocks.
func allowed(err error) bool {
	return err == nil || errors.Is(err, ErrSequenceClosed) || errors.Is(err, ErrOutOfMemory)
}

func TestGoroutinesHammerOnePool(t *testing.T) {
	p := mkPool(t, 256, "hammer")
	const workers, rounds = 12, 25
	var shared sharedSeqs
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			errs <- hammer(p, &shared, g, rounds)
		}(g)
	}
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() { readerDone <- readPool(p, &shared, stop) }()
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if err := <-readerDone; err != nil {
		t.Error(err)
	}
	for _, s := range shared.seqs {
		ok(t, s.Close())
	}
	if n := must[int](t)(p.OpenSequences()); n != 0 {
		t.Fatalf("%d sequences open after every one was closed", n)
	}
	st := must[PoolStats](t)(p.Stats(0))
	if st.UsedBlocks != 0 || st.FreeBlocks+st.CachedBlocks != st.NumBlocks {
		t.Fatalf("after every sequence closed: %+v", st)
	}
}

// hammer runs rounds of: a sequence of its own filled over a few steps and
// checked with Gather (exact, since nobody else touches it), a fork of it
// and of a shared one, reserves into and closes of shared ones.
func hammer(p *Pool, shared *sharedSeqs, g, rounds int) error {
	r := rand.New(rand.NewPCG(uint64(g), 7))
	for i := 0; i < rounds; i++ {
		own, err := p.NewSequence(nil)
		if err != nil {
			return fmt.Errorf("goroutine %d: NewSequence: %w", g, err)
		}
		var all pstep
		n := 1 + r.IntN(3)
		for step := 0; step < n; step++ {
			slots, err := own.Reserve(seqTokens(10000*g+100*i+4*step, 4))
			if errors.Is(err, ErrOutOfMemory) { // the shared sequences hold the pool: fine, stop here
				break
			}
			if err != nil {
				return fmt.Errorf("goroutine %d: Reserve: %w", g, err)
			}
			st := newStep(4, float32(1e5*g+1e3*i+10*step))
			if err := st.write(p, slots.Slots); err != nil {
				return fmt.Errorf("goroutine %d: Write: %w", g, err)
			}
			if err := own.Commit(); err != nil {
				return fmt.Errorf("goroutine %d: Commit: %w", g, err)
			}
			if step == 0 {
				all = st
			} else {
				all = all.then(st)
			}
		}
		if all.keys != nil {
			for l := 0; l < pLayers; l++ {
				k, v, err := GatherTensors[float32](own, l)
				if err != nil {
					return fmt.Errorf("goroutine %d: Gather: %w", g, err)
				}
				if !eqFloats(tokenMajor(k), all.keys[l].Data) || !eqFloats(tokenMajor(v), all.values[l].Data) {
					return fmt.Errorf("goroutine %d, round %d, layer %d: gathered K/V differ from what it wrote", g, i, l)
				}
			}
		}
		// Hand a fork to the others, and use one of theirs.
		if f, err := own.Fork(); err == nil {
			shared.add(f)
		} else if !allowed(err) {
			return fmt.Errorf("goroutine %d: Fork: %w", g, err)
		}
		if err := own.Close(); err != nil {
			return err
		}
		if s := shared.pick(r); s != nil {
			var err error
			switch r.IntN(4) {
			case 0:
				err = s.Close()
			case 1:
				var f *Sequence
				if f, err = s.Fork(); err == nil {
					shared.add(f)
				}
			case 2:
				_, err = s.Reserve([]int32{int32(g), int32(i)})
			case 3:
				err = s.Commit()
			}
			if !allowed(err) {
				return fmt.Errorf("goroutine %d: a call on a shared sequence: %w", g, err)
			}
		}
	}
	return nil
}

// readPool reads the pool's counters, events and the tables of shared
// sequences until stop: the tables may name a sequence closed meanwhile.
func readPool(p *Pool, shared *sharedSeqs, stop chan struct{}) error {
	r := rand.New(rand.NewPCG(99, 7))
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := p.Stats(0); err != nil {
			return fmt.Errorf("reader: Stats: %w", err)
		}
		if _, err := p.OpenSequences(); err != nil {
			return fmt.Errorf("reader: OpenSequences: %w", err)
		}
		if _, err := p.Events(); err != nil {
			return fmt.Errorf("reader: Events: %w", err)
		}
		if s := shared.pick(r); s != nil {
			if _, err := p.BlockTable([]*Sequence{s}, 0); err != nil && !errors.Is(err, ErrInvalidState) {
				return fmt.Errorf("reader: BlockTable: %w", err)
			}
			if _, err := s.Length(); !allowed(err) {
				return fmt.Errorf("reader: Length: %w", err)
			}
		}
	}
}

// Closing the pool while goroutines call it: each call either ran before
// the close or reports the pool closed; none crashes.
func TestGoroutinesCloseThePoolUnderCalls(t *testing.T) {
	p := mkPool(t, 64, "hammer")
	started := make(chan struct{}, workersUnderClose)
	wait := goWorkers(t, workersUnderClose, func(g int) error { return untilClosed(p, g, started) })
	for g := 0; g < workersUnderClose; g++ {
		<-started
	}
	ok(t, p.Close())
	wait()
}

const workersUnderClose = 8

func untilClosed(p *Pool, g int, started chan<- struct{}) error {
	s, err := p.NewSequence(nil)
	if err != nil {
		return err
	}
	started <- struct{}{}
	for i := 0; ; i++ {
		_, err := s.Reserve([]int32{int32(g)})
		if errors.Is(err, ErrOutOfMemory) {
			err = s.Truncate(0)
		}
		if err == nil {
			_, err = p.Stats(0)
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrPoolClosed) && errors.Is(err, ErrClosed):
			return nil
		default:
			return fmt.Errorf("goroutine %d, call %d: %w", g, i, err)
		}
	}
}
