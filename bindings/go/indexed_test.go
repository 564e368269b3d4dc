//go:build cgo

package kvcache

import (
	"errors"
	"strings"
	"testing"
)

// indexerValues reads a [batch, n, width] indexer view in order.
func indexerValues(v View) []float32 {
	var out []float32
	for b := int64(0); b < v.Dim(0); b++ {
		for s := int64(0); s < v.Dim(1); s++ {
			for w := int64(0); w < v.Dim(2); w++ {
				out = append(out, v.At(b, s, w))
			}
		}
	}
	return out
}

// TestIndexedLayers: LayerTypeIndexedAttention builds LayerDynamicIndexed /
// LayerStaticIndexed layers (transformers' DynamicIndexedLayer and
// StaticIndexedLayer), whose indexer keys UpdateIndexer appends or writes
// and IndexerView reads; crop and reset act on them; refusals change nothing.
func TestIndexedLayers(t *testing.T) {
	if LayerDynamicIndexed.String() != "dynamic_indexed" || LayerStaticIndexed.String() != "static_indexed" {
		t.Errorf("names %q %q", LayerDynamicIndexed.String(), LayerStaticIndexed.String())
	}
	cfg := &ModelConfig{NumHiddenLayers: 2, LayerTypes: []LayerType{LayerTypeFullAttention, LayerTypeIndexedAttention}}
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: cfg})
	if info := must[LayerInfo](t)(c.LayerInfo(1)); info.Kind != LayerDynamicIndexed {
		t.Fatalf("layer 1: %+v", info)
	}
	if v := must[View](t)(c.IndexerView(1)); v.NDim() != 0 {
		t.Fatalf("indexer before its first update: %v", v)
	}
	x := Tensor[float32]{Data: []float32{1, 2, 3, 4, 5, 6}, Shape: []int64{1, 3, 2}} // [batch, n, width]
	got := must[View](t)(c.UpdateIndexer(1, x))
	if !eqFloats(indexerValues(got), x.Data) {
		t.Fatalf("first update returned %v", indexerValues(got))
	}
	y := Tensor[float32]{Data: []float32{7, 8}, Shape: []int64{1, 1, 2}}
	got = must[View](t)(c.UpdateIndexer(1, y))
	if !eqFloats(indexerValues(got), []float32{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("second update returned %v", indexerValues(got))
	}
	if err := c.Crop(-2); err != nil {
		t.Fatal(err)
	}
	if v := must[View](t)(c.IndexerView(1)); !eqFloats(indexerValues(v), []float32{1, 2, 3, 4}) {
		t.Fatalf("after crop(-2): %v", indexerValues(v))
	}
	_, err := c.UpdateIndexer(0, y)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "layer 0 is a dynamic layer") {
		t.Fatalf("update_indexer of a dynamic layer: %v", err)
	}
	_, err = c.UpdateIndexer(1, Tensor[float32]{Data: []float32{1, 2, 3}, Shape: []int64{1, 1, 3}})
	if !errors.Is(err, ErrShapeMismatch) {
		t.Fatalf("another width: %v", err)
	}
	if v := must[View](t)(c.IndexerView(1)); !eqFloats(indexerValues(v), []float32{1, 2, 3, 4}) {
		t.Fatalf("changed by a refusal: %v", indexerValues(v))
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if v := must[View](t)(c.IndexerView(1)); v.NDim() != 0 {
		t.Fatalf("a dynamic indexer is dropped by reset: %v", v)
	}

	s := mkCache(t, &CacheOptions{Preset: PresetStatic, Config: cfg, MaxCacheLen: 3})
	got = must[View](t)(s.UpdateIndexer(1, y))
	if info := must[LayerInfo](t)(s.LayerInfo(1)); info.Kind != LayerStaticIndexed {
		t.Fatalf("static layer 1: %+v", info)
	}
	if !eqFloats(indexerValues(got), []float32{7, 8, 0, 0, 0, 0}) {
		t.Fatalf("static update returned %v", indexerValues(got))
	}
	if _, err := s.UpdateIndexer(1, x); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("a write past max_cache_len: %v", err)
	}
}
