//go:build cgo

package kvcache_test

import (
	"errors"
	"fmt"
	"log"

	kvcache "github.com/kvcache/kvcache/bindings/go"
)

// A DynamicCache for a 2-layer model whose layer 1 uses a sliding window,
// and one decode step: the views are what attention reads.
func Example() {
	cache, err := kvcache.New(&kvcache.CacheOptions{
		Preset: kvcache.PresetDynamic,
		Config: &kvcache.ModelConfig{
			NumHiddenLayers: 2,
			LayerTypes:      []kvcache.LayerType{kvcache.LayerTypeFullAttention, kvcache.LayerTypeSlidingAttention},
			SlidingWindow:   4096,
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	// One decode step: key and value of one new token,
	// [batch 1, 8 kv heads, 1 token, head_dim 128], in bfloat16.
	key := kvcache.NewTensor[kvcache.BFloat16](1, 8, 1, 128)
	value := kvcache.NewTensor[kvcache.BFloat16](1, 8, 1, 128)
	key.Set(kvcache.BFloat16FromFloat32(0.5), 0, 3, 0, 7)

	for layer := 0; layer < cache.NumLayers(); layer++ {
		kv, err := cache.Update(layer, key, value, nil) // zero-copy views, valid until the next mutating call
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("layer %d attends to %d keys; key[0,3,0,7] = %v\n", layer, kv.Key.Dim(2), kv.Key.At(0, 3, 0, 7))
	}
	// Output:
	// layer 0 attends to 1 keys; key[0,3,0,7] = 0.5
	// layer 1 attends to 1 keys; key[0,3,0,7] = 0.5
}

// A StaticCache of 4 slots returns its whole buffer; writing past it is an
// error of code CodeOutOfRange, and changes nothing.
func ExampleNew_static() {
	cache, err := kvcache.New(&kvcache.CacheOptions{
		Preset:      kvcache.PresetStatic,
		Config:      &kvcache.ModelConfig{NumHiddenLayers: 1},
		MaxCacheLen: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	tokens := kvcache.Tensor[float32]{Data: []float32{1, 2, 3}, Shape: []int64{1, 1, 3, 1}}
	kv, _ := cache.Update(0, tokens, tokens, nil)
	fmt.Println(kv.Key.Shape(), kv.Key.At(0, 0, 2, 0), kv.Key.At(0, 0, 3, 0))

	_, err = cache.Update(0, tokens, tokens, nil)
	fmt.Println(errors.Is(err, kvcache.ErrOutOfRange))
	var e *kvcache.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code)
	}
	n, _ := cache.SeqLength(0)
	fmt.Println(n)
	// Output:
	// [1 1 4 1] 3 0
	// true
	// KVC_ERROR_OUT_OF_RANGE
	// 3
}

// Views are valid until the next call that mutates their cache; Copy keeps
// one for good.
func ExampleView_Copy() {
	cache, _ := kvcache.New(nil)
	defer cache.Close()
	t := kvcache.Tensor[float32]{Data: []float32{1, 2}, Shape: []int64{1, 1, 2, 1}}
	kv, _ := cache.Update(0, t, t, nil)
	kept, _ := kv.Key.Copy()

	_ = cache.Crop(-1)
	fmt.Println(kv.Key.Valid(), kept.Valid(), kept.At(0, 0, 1, 0))
	_, err := kvcache.As[float32](kv.Key)
	fmt.Println(errors.Is(err, kvcache.ErrStaleView))
	// Output:
	// false true 2
	// true
}

// A decode loop that refills the same input buffers: PrepareStep pins and
// describes them once; each Update is then one C call for all layers.
func ExampleCache_PrepareStep() {
	const layers = 4
	cache, _ := kvcache.New(&kvcache.CacheOptions{Preset: kvcache.PresetDynamic, Config: &kvcache.ModelConfig{NumHiddenLayers: layers}})
	defer cache.Close()
	var keys, values []kvcache.Tensor[float32]
	for l := 0; l < layers; l++ {
		keys = append(keys, kvcache.NewTensor[float32](1, 2, 1, 8))
		values = append(values, kvcache.NewTensor[float32](1, 2, 1, 8))
	}
	step, err := cache.PrepareStep(kvcache.Inputs(keys...), kvcache.Inputs(values...))
	if err != nil {
		log.Fatal(err)
	}
	defer step.Close()
	for token := 0; token < 3; token++ {
		for l := range keys {
			keys[l].Data[0] = float32(10*token + l) // the model writes this step's K/V here
		}
		if err := step.Update(); err != nil {
			log.Fatal(err)
		}
	}
	kv := step.KV(2)
	fmt.Println(kv.Key.Dim(2), kv.Key.At(0, 0, 2, 0))
	// Output: 3 22
}

// Beam search: reorder the rows after each step; contrastive search repeats
// them.
func ExampleCache_Reorder() {
	cache, _ := kvcache.New(nil)
	defer cache.Close()
	beams := kvcache.Tensor[float32]{Data: []float32{10, 20, 30}, Shape: []int64{3, 1, 1, 1}}
	_, _ = cache.Update(0, beams, beams, nil)
	_ = cache.Reorder([]int64{2, 2, 0})
	kv, _ := cache.LayerView(0)
	fmt.Println(kv.Key.At(0, 0, 0, 0), kv.Key.At(1, 0, 0, 0), kv.Key.At(2, 0, 0, 0))
	// Output: 30 30 10
}

// An encoder-decoder model computes the cross-attention K/V once and reuses
// them at every step.
func ExampleNewEncoderDecoder() {
	self, _ := kvcache.New(nil)
	cross, _ := kvcache.New(nil)
	pair, err := kvcache.NewEncoderDecoder(self, cross) // the pair owns both now
	if err != nil {
		log.Fatal(err)
	}
	defer pair.Close()
	encoded := kvcache.Tensor[float32]{Data: []float32{1, 2, 3}, Shape: []int64{1, 1, 3, 1}}
	for step := 0; step < 2; step++ {
		var k, v kvcache.Input
		if updated, _ := pair.IsUpdated(0); !updated {
			k, v = encoded, encoded // only the first step computes them
		}
		kv, _ := pair.UpdateCross(0, k, v)
		fmt.Println(step, kv.Key.Dim(2))
	}
	// Output:
	// 0 3
	// 1 3
}

// The dtype of a cache is that of its first update; float16 and bfloat16
// elements are uint16 bit patterns with conversions.
func ExampleBFloat16FromFloat32() {
	x := kvcache.BFloat16FromFloat32(3.14159)
	h := kvcache.Float16FromFloat32(3.14159)
	fmt.Printf("%#04x %v %#04x %v\n", uint16(x), x.Float32(), uint16(h), h.Float32())
	// Output: 0x4049 3.140625 0x4248 3.140625
}
