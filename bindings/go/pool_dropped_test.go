//go:build cgo

package kvcache

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Sequences dropped without Close: the pool counts them, a reserve short of
// blocks gives theirs back, and the error says how many are open when they
// are still in use.

// leakPool is the shape: 2047 usable blocks of 4 tokens.
func leakPool(t *testing.T) *Pool {
	t.Helper()
	p, err := NewPool(PoolOptions{DType: DTypeFloat32, Groups: []PoolGroup{FullGroup(4, 2048)},
		Layers: []PoolLayer{AttentionLayer(0, 1, 4)}, HashSeed: []byte("leak")})
	ok(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// reserved makes n sequences of 8 tokens (2 blocks each) and returns them.
func reserved(t *testing.T, p *Pool, n int) []*Sequence {
	t.Helper()
	seqs := make([]*Sequence, n)
	for i := range seqs {
		seqs[i] = mkSeq(t, p, nil)
		must[SlotMapping](t)(seqs[i].Reserve(seqTokens(8*i, 8)))
	}
	return seqs
}

func TestPoolReserveReclaimsDroppedSequences(t *testing.T) {
	p := leakPool(t)
	func() { reserved(t, p, 1000) }() // dropped without Close
	if n := must[int](t)(p.OpenSequences()); n != 1000 {
		t.Fatalf("OpenSequences: %d, want 1000", n)
	}
	if st := must[PoolStats](t)(p.Stats(0)); st.UsedBlocks != 2000 {
		t.Fatalf("the dropped sequences hold %d blocks, want 2000", st.UsedBlocks)
	}
	// 400 tokens need 100 blocks; 47 are free until the dropped ones go.
	s := mkSeq(t, p, nil)
	defer s.Close()
	must[SlotMapping](t)(s.Reserve(seqTokens(0, 400)))
	if n := must[int](t)(p.OpenSequences()); n != 1 {
		t.Fatalf("OpenSequences after the reserve: %d, want 1", n)
	}
	if st := must[PoolStats](t)(p.Stats(0)); st.UsedBlocks != 100 {
		t.Fatalf("%d blocks used after the reserve, want 100", st.UsedBlocks)
	}
	// The finalizers of the reclaimed sequences run later and must free
	// nothing twice: new sequences (maybe at the same C addresses) survive.
	fresh := reserved(t, p, 10)
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	for i, q := range fresh {
		if n := must[int64](t)(q.Length()); n != 8 {
			t.Fatalf("fresh sequence %d holds %d tokens after the finalizers ran", i, n)
		}
		ok(t, q.Close())
	}
	if st := must[PoolStats](t)(p.Stats(0)); st.UsedBlocks != 100 {
		t.Fatalf("%d blocks used, want the reserve's 100", st.UsedBlocks)
	}
}

func TestPoolShortOfBlocksCountsOpenSequences(t *testing.T) {
	p := leakPool(t)
	held := reserved(t, p, 1000) // still in use: nothing to reclaim
	before := must[PoolStats](t)(p.Stats(0))
	s := mkSeq(t, p, nil)
	_, err := s.Reserve(seqTokens(0, 400))
	wantErr(t, err, CodeOutOfMemory, "1001 sequences of this pool are open", "close each one")
	var e *Error
	if !errors.As(err, &e) || e.Op != "Sequence.Reserve" || strings.HasPrefix(e.Message, "kvc_") ||
		!strings.HasPrefix(err.Error(), "kvcache: Sequence.Reserve: ") {
		t.Fatalf("the error does not name the Go method: Op %q, %q", e.Op, err)
	}
	if after := must[PoolStats](t)(p.Stats(0)); after != before || must[int64](t)(s.Length()) != 0 {
		t.Fatalf("a refused reserve changed the pool: %+v, then %+v", before, after)
	}
	// Once the others are dropped, the same reserve goes through (a
	// sequence was made since the last collection: the one reserving).
	runtime.KeepAlive(held)
	ok(t, s.Close())
	s = mkSeq(t, p, nil)
	defer s.Close()
	must[SlotMapping](t)(s.Reserve(seqTokens(0, 400)))
}

func TestPoolReclaimDropped(t *testing.T) {
	p := leakPool(t)
	kept := reserved(t, p, 3)
	func() { reserved(t, p, 5) }()
	if n := must[int](t)(p.ReclaimDropped()); n != 5 {
		t.Fatalf("ReclaimDropped: %d, want 5", n)
	}
	if n := must[int](t)(p.OpenSequences()); n != 3 {
		t.Fatalf("OpenSequences: %d, want 3", n)
	}
	if st := must[PoolStats](t)(p.Stats(0)); st.UsedBlocks != 6 {
		t.Fatalf("%d blocks used, want the 3 kept sequences' 6", st.UsedBlocks)
	}
	for _, s := range kept {
		ok(t, s.Close())
	}
	ok(t, p.Close())
	if _, err := p.ReclaimDropped(); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("ReclaimDropped on a closed pool: %v", err)
	}
	if _, err := p.OpenSequences(); !errors.Is(err, ErrPoolClosed) || !errors.Is(err, ErrClosed) {
		t.Fatalf("OpenSequences on a closed pool: %v", err)
	}
}

// A decode loop's ReserveInto allocates nothing: the shortage handling
// around the C call costs nothing when blocks are there.
func TestPoolReserveIntoAllocatesNothing(t *testing.T) {
	p := leakPool(t)
	s := mkSeq(t, p, nil)
	defer s.Close()
	var m SlotMapping
	tokens := []int32{1}
	ok(t, s.ReserveInto(tokens, &m))
	if n := testing.AllocsPerRun(100, func() {
		if err := s.ReserveInto(tokens, &m); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("ReserveInto allocates %v times a call", n)
	}
}

// LoadSequence takes blocks too: it reclaims dropped sequences as Reserve does.
func TestPoolLoadSequenceReclaimsDroppedSequences(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seq.kvc")
	src := leakPool(t)
	s := mkSeq(t, src, nil)
	must[SlotMapping](t)(s.Reserve(seqTokens(0, 400))) // 100 blocks
	ok(t, s.Commit())
	ok(t, s.Save(path))
	p := leakPool(t)
	func() { reserved(t, p, 1000) }() // 2000 of 2047 blocks, dropped
	loaded := must[*Sequence](t)(p.LoadSequence(path))
	defer loaded.Close()
	if n := must[int64](t)(loaded.Length()); n != 400 {
		t.Fatalf("the loaded sequence holds %d tokens", n)
	}
	if n := must[int](t)(p.OpenSequences()); n != 1 {
		t.Fatalf("OpenSequences: %d, want the loaded one", n)
	}
}

// ReserveBatch reclaims too: the batch goes on past the sequence that did
// not fit once the dropped ones are collected, and the slots of the later
// sequences land where their tokens are.
func TestPoolReserveBatchReclaimsDroppedSequences(t *testing.T) {
	p := leakPool(t)
	func() { reserved(t, p, 1000) }() // dropped without Close: 47 blocks stay free
	a, b := mkSeq(t, p, nil), mkSeq(t, p, nil)
	defer a.Close()
	defer b.Close()
	// a takes 40 blocks (fits), b 60 (does not, until the dropped ones go).
	toks := append(seqTokens(0, 160), seqTokens(5000, 240)...)
	n, m, err := p.ReserveBatch([]*Sequence{a, b}, toks, []uint64{160, 240})
	ok(t, err)
	if n != 2 {
		t.Fatalf("ReserveBatch reserved %d sequences, want 2 after reclaiming", n)
	}
	seen := map[int64]bool{}
	for i, slot := range m.Slots {
		if slot < 0 || seen[slot] {
			t.Fatalf("slot %d of the batch is %d (negative or repeated)", i, slot)
		}
		seen[slot] = true
	}
	if st := must[PoolStats](t)(p.Stats(0)); st.UsedBlocks != 100 {
		t.Fatalf("%d blocks used, want 100", st.UsedBlocks)
	}
	if la, lb := must[int64](t)(a.Length()), must[int64](t)(b.Length()); la != 160 || lb != 240 {
		t.Fatalf("lengths %d and %d, want 160 and 240", la, lb)
	}
}
