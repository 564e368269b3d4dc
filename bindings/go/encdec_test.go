//go:build cgo

package kvcache

import (
	"errors"
	"testing"
)

func newPair(t *testing.T) (*EncoderDecoderCache, *Cache, *Cache) {
	self, err := New(nil)
	ok(t, err)
	cross, err := New(nil)
	ok(t, err)
	e, err := NewEncoderDecoder(self, cross)
	ok(t, err)
	t.Cleanup(func() { e.Close() })
	return e, self, cross
}

func TestEncoderDecoder(t *testing.T) {
	live := liveHandles.Load()
	e, self, cross := newPair(t)
	if liveHandles.Load() != live+1 {
		t.Fatal("a pair of two caches is one handle")
	}
	if e.SelfAttention() != self || e.CrossAttention() != cross {
		t.Fatal("accessors return other caches")
	}
	enc := rows(2, 5, 0) // the encoder output's K/V
	for l := 0; l < 2; l++ {
		if up := must[bool](t)(e.IsUpdated(l)); up {
			t.Fatalf("layer %d updated before any cross update", l)
		}
		kv := must[KV](t)(e.UpdateCross(l, enc, enc))
		if !eqFloats(flat(t, kv.Key), enc.Data) {
			t.Fatalf("layer %d: cross K/V", l)
		}
		if up := must[bool](t)(e.IsUpdated(l)); !up {
			t.Fatalf("layer %d not updated after its cross update", l)
		}
		// Later steps reuse the stored cross K/V: key and value may be nil.
		kv = must[KV](t)(e.UpdateCross(l, nil, nil))
		if !eqFloats(flat(t, kv.Value), enc.Data) {
			t.Fatalf("layer %d: reused cross K/V", l)
		}
	}
	if up := must[bool](t)(e.IsUpdated(9)); up {
		t.Fatal("a layer beyond the pair is updated")
	}
	// Self-attention goes through the borrowed cache.
	for s := int64(0); s < 3; s++ {
		tok := rows(2, 1, s)
		for l := 0; l < 2; l++ {
			must[KV](t)(self.Update(l, tok, tok, nil))
		}
	}
	ok(t, e.Crop(-1)) // self-attention only
	if n := must[int64](t)(self.SeqLength(0)); n != 2 {
		t.Fatalf("self after crop(-1): %d", n)
	}
	if n := must[int64](t)(cross.SeqLength(0)); n != 5 {
		t.Fatalf("cross after crop(-1): %d", n)
	}
	ok(t, e.Reorder([]int64{1, 0}))
	if got := must[KV](t)(cross.LayerView(0)).Key.At(0, 0, 0, 0); got != enc.At(1, 0, 0, 0) {
		t.Fatalf("cross after reorder: %g", got)
	}
	ok(t, e.BatchRepeatInterleave(2))
	ok(t, e.BatchSelectIndices([]int64{0, 3}))
	if b := must[KV](t)(self.LayerView(1)).Key.Dim(0); b != 2 {
		t.Fatalf("self batch: %d", b)
	}
	// Clone, split and stack.
	before := [2]snap{snapshot(t, self), snapshot(t, cross)}
	cl := must[*EncoderDecoderCache](t)(e.Clone())
	defer cl.Close()
	unchanged(t, cl.SelfAttention(), before[0])
	unchanged(t, cl.CrossAttention(), before[1])
	if up := must[bool](t)(cl.IsUpdated(1)); !up {
		t.Fatal("clone lost is_updated")
	}
	splits := must[[]*EncoderDecoderCache](t)(e.BatchSplit(2, 1))
	if len(splits) != 2 {
		t.Fatalf("%d splits", len(splits))
	}
	stacked := must[*EncoderDecoderCache](t)(EncoderDecoderFromBatchSplits(splits))
	defer stacked.Close()
	unchanged(t, stacked.SelfAttention(), before[0])
	unchanged(t, stacked.CrossAttention(), before[1])
	for _, s := range splits {
		ok(t, s.Close())
	}
	// Reset empties both and clears is_updated.
	ok(t, e.Reset())
	if up := must[bool](t)(e.IsUpdated(0)); up {
		t.Fatal("updated after reset")
	}
	if n := must[int64](t)(cross.SeqLength(0)); n != 0 {
		t.Fatalf("cross after reset: %d", n)
	}
	if e.String() == "" {
		t.Fatal("String")
	}
}

func TestEncoderDecoderOwnership(t *testing.T) {
	e, self, cross := newPair(t)
	// The borrowed caches' Close is a no-op; they work until the pair closes.
	ok(t, self.Close())
	x := rows(1, 1, 0)
	kv := must[KV](t)(self.Update(0, x, x, nil))
	// Giving a borrowed cache to another pair is refused.
	other := mkCache(t, nil)
	_, err := NewEncoderDecoder(self, other)
	wantErr(t, err, CodeInvalidArgument, "already belongs")
	_, err = NewEncoderDecoder(other, other)
	wantErr(t, err, CodeInvalidArgument)
	_, err = NewEncoderDecoder(nil, other)
	wantErr(t, err, CodeInvalidArgument)
	// other is still the caller's after the failures.
	must[KV](t)(other.Update(0, x, x, nil))

	closesOnce(t, e.Close)
	if kv.Key.Valid() {
		t.Fatal("a view of a borrowed cache survived the pair")
	}
	for name, err := range map[string]error{
		"self Update":  func() error { _, err := self.Update(0, x, x, nil); return err }(),
		"cross Memory": func() error { _, err := cross.Memory(); return err }(),
		"IsUpdated":    func() error { _, err := e.IsUpdated(0); return err }(),
		"UpdateCross":  func() error { _, err := e.UpdateCross(0, x, x); return err }(),
		"Crop":         e.Crop(-1),
		"Reorder":      e.Reorder([]int64{0}),
		"Repeat":       e.BatchRepeatInterleave(2),
		"Select":       e.BatchSelectIndices([]int64{0}),
		"Split":        func() error { _, err := e.BatchSplit(1, 1); return err }(),
		"Stack":        func() error { _, err := EncoderDecoderFromBatchSplits([]*EncoderDecoderCache{e}); return err }(),
		"Reset":        e.Reset(),
		"Clone":        func() error { _, err := e.Clone(); return err }(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after the pair closed: %v", name, err)
		}
	}
	if e.String() != "EncoderDecoderCache(closed)" {
		t.Fatal(e.String())
	}
}

func TestEncoderDecoderErrors(t *testing.T) {
	e, self, cross := newPair(t)
	enc := rows(2, 5, 0)
	must[KV](t)(e.UpdateCross(0, enc, enc))
	tok := rows(2, 1, 0)
	must[KV](t)(self.Update(0, tok, tok, nil))
	check := func(name string, code Code, f func() error) {
		t.Run(name, func(t *testing.T) {
			b := [2]snap{snapshot(t, self), snapshot(t, cross)}
			up := must[bool](t)(e.IsUpdated(1))
			wantErr(t, f(), code)
			unchanged(t, self, b[0])
			unchanged(t, cross, b[1])
			if must[bool](t)(e.IsUpdated(1)) != up {
				t.Fatal("is_updated changed")
			}
		})
	}
	check("UpdateCross without tensors", CodeInvalidArgument, func() error { _, err := e.UpdateCross(1, nil, nil); return err })
	check("UpdateCross of a 3-D tensor", CodeShapeMismatch, func() error {
		bad := Tensor[float32]{Data: enc.Data, Shape: []int64{2, 2, 15}}
		_, err := e.UpdateCross(1, bad, bad)
		return err
	})
	check("IsUpdated of layer -1", CodeOutOfRange, func() error { _, err := e.IsUpdated(-1); return err })
	check("Reorder beyond the batch", CodeOutOfRange, func() error { return e.Reorder([]int64{0, 5}) })
	check("BatchRepeatInterleave(0)", CodeInvalidArgument, func() error { return e.BatchRepeatInterleave(0) })
	check("BatchSelectIndices beyond the batch", CodeOutOfRange, func() error { return e.BatchSelectIndices([]int64{2}) })
	check("BatchSplit of another batch size", CodeInvalidArgument, func() error { _, err := e.BatchSplit(4, 2); return err })
	check("FromBatchSplits of nothing", CodeInvalidArgument, func() error { _, err := EncoderDecoderFromBatchSplits(nil); return err })

	// Static caches refuse what transformers refuses.
	ss, err := New(&CacheOptions{Preset: PresetStatic, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 1}})
	ok(t, err)
	sc, err := New(&CacheOptions{Preset: PresetStatic, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 1}})
	ok(t, err)
	st, err := NewEncoderDecoder(ss, sc)
	ok(t, err)
	defer st.Close()
	must[KV](t)(ss.Update(0, tok, tok, nil))
	wantErr(t, st.Crop(-1), CodeUnsupported)
	wantErr(t, st.BatchRepeatInterleave(2), CodeUnsupported)
}
