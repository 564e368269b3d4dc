//go:build cgo

package kvcache

import (
	"errors"
	"strings"
	"testing"
)

// TestDummyLayer: LayerTypeDummy builds LayerDummy layers (transformers
// 5.23's DummyLayer), which store nothing, refuse updates and leave the
// length queries and crop to the layers with K/V.
func TestDummyLayer(t *testing.T) {
	if LayerDummy.String() != "dummy" {
		t.Errorf("LayerDummy.String() = %q", LayerDummy.String())
	}
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic,
		Config: &ModelConfig{NumHiddenLayers: 2, LayerTypes: []LayerType{LayerTypeDummy, LayerTypeFullAttention}}})
	if info := must[LayerInfo](t)(c.LayerInfo(0)); info.Kind != LayerDummy || info.IsInitialized {
		t.Fatalf("layer 0: %+v", info)
	}
	x := Tensor[float32]{Data: make([]float32, 2*3*4), Shape: []int64{2, 1, 3, 4}}
	_, err := c.Update(0, x, x, nil)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "layer 0 is a dummy layer") {
		t.Fatalf("update of the dummy layer: %v", err)
	}
	must[KV](t)(c.Update(1, x, x, nil))
	if n := must[int64](t)(c.SeqLength(0)); n != 3 { // layer 0 is "the cache": the first layer with K/V
		t.Fatalf("SeqLength(0) = %d, want 3", n)
	}
	if ok := must[bool](t)(c.IsCroppable(0)); !ok {
		t.Fatalf("a dummy layer is croppable")
	}
	if err := c.Crop(-1); err != nil {
		t.Fatal(err)
	}
	if n := must[int64](t)(c.SeqLength(1)); n != 2 {
		t.Fatalf("after crop(-1): SeqLength(1) = %d, want 2", n)
	}
}
