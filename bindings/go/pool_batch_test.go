//go:build cgo

package kvcache

import (
	"errors"
	"strings"
	"testing"
)

// Every layer written with WriteLayer gathers back what was written; a
// refused per-layer write names the Go method and changes nothing.
func TestPoolWriteLayerPerLayerThenGather(t *testing.T) {
	p := mkPool(t, 16, "m")
	s := mkSeq(t, p, nil)
	slots := must[SlotMapping](t)(s.Reserve(seqTokens(1, 6)))
	st := newStep(6, 0.5)
	for l := 0; l < pLayers; l++ {
		ok(t, p.WriteLayer(l, st.keys[l], st.values[l], slots.Slots))
	}
	wantHolds(t, s, st)
	twice := append([]int64(nil), slots.Slots...)
	twice[1] = twice[0]
	other := newStep(6, 9.5)
	err := p.WriteLayer(0, other.keys[0], other.values[0], twice)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Op != "Pool.WriteLayer" || !strings.HasPrefix(e.Message, "slot") {
		t.Fatalf("a slot twice: got %v", err)
	}
	if err := p.WriteLayer(pLayers, other.keys[0], other.values[0], slots.Slots); err == nil ||
		!strings.Contains(err.Error(), "layer is 2") {
		t.Fatalf("layer out of range: got %v", err)
	}
	wantHolds(t, s, st)
}

// ReserveBatch and CommitBatch do what the per-sequence calls do and stop at
// the first sequence that does not fit.
func TestPoolReserveBatchStopsAtTheFirstThatDoesNotFit(t *testing.T) {
	p := mkPool(t, 6, "m") // 5 usable blocks of 4 tokens
	a, b, c := mkSeq(t, p, nil), mkSeq(t, p, nil), mkSeq(t, p, nil)
	n, m, err := p.ReserveBatch([]*Sequence{a, b, c}, seqTokens(0, 30), []uint64{8, 20, 2})
	ok(t, err)
	if n != 1 || a.Len() != 8 || b.Len() != 0 || c.Len() != 0 {
		t.Fatalf("reserved %d; lengths %d %d %d", n, a.Len(), b.Len(), c.Len())
	}
	for i, slot := range m.Group(0) {
		if (i < 8) != (slot >= pBlock) || (i >= 8 && slot != -1) {
			t.Fatalf("slot %d is %d", i, slot)
		}
	}
	st := newStep(30, 1)
	ok(t, st.write(p, m.Slots)) // the unreserved tokens' -1 slots are skipped
	ok(t, p.CommitBatch([]*Sequence{a, b, c}))
	if a.Committed() != 8 {
		t.Fatalf("committed %d", a.Committed())
	}
	_, _, err = p.ReserveBatch([]*Sequence{a, a}, seqTokens(0, 2), []uint64{1, 1})
	if err == nil || !strings.Contains(err.Error(), "sequences[1] is sequences[0] again") {
		t.Fatalf("a sequence twice: got %v", err)
	}
	if _, _, err = p.ReserveBatch([]*Sequence{a}, seqTokens(0, 2), []uint64{1}); err == nil {
		t.Fatal("counts that do not add up were accepted")
	}
	if a.Len() != 8 {
		t.Fatalf("a refused batch changed a: %d tokens", a.Len())
	}
}
