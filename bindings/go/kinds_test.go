//go:build cgo

package kvcache

import (
	"math"
	"testing"
)

// The cache kinds of the library, each driven through the binding along the
// worked examples of docs/semantics.md ('Worked examples'): one batch, one
// head, head_dim 1, tensors written as their token values.

func TestDynamicTrace(t *testing.T) { // 'Dynamic layer trace'
	c := mkCache(t, nil)
	if c.NumLayers() != 0 {
		t.Fatalf("a lazy cache starts with %d layers", c.NumLayers())
	}
	kv := must[KV](t)(c.Update(0, toks(1, 2), toks(1, 2), nil))
	wantSeq(t, "update [1 2]", kv.Key, 1, 2)
	wantSeq(t, "update [1 2] values", kv.Value, 1, 2)
	kv = must[KV](t)(c.Update(0, toks(3), toks(3), nil))
	wantSeq(t, "+[3]", kv.Key, 1, 2, 3)
	kv = must[KV](t)(c.Update(0, toks(4), toks(4), nil))
	wantSeq(t, "+[4]", kv.Key, 1, 2, 3, 4)
	ok(t, c.Crop(-1))
	wantSeq(t, "crop(-1)", must[KV](t)(c.LayerView(0)).Key, 1, 2, 3)
	ok(t, c.Crop(0))
	wantSeq(t, "crop(0)", must[KV](t)(c.LayerView(0)).Key, 1, 2, 3)
	ok(t, c.Crop(2))
	wantSeq(t, "crop(2)", must[KV](t)(c.LayerView(0)).Key, 1, 2)
	ok(t, c.Crop(-99))
	wantSeq(t, "crop(-99)", must[KV](t)(c.LayerView(0)).Key)
	if n := must[int64](t)(c.SeqLength(0)); n != 0 {
		t.Fatalf("seq length after crop(-99): %d", n)
	}

	// A lazy cache creates the layers up to the one updated.
	c2 := mkCache(t, nil)
	must[KV](t)(c2.Update(2, toks(5), toks(5), nil))
	if c2.NumLayers() != 3 {
		t.Fatalf("update of layer 2 made %d layers", c2.NumLayers())
	}
	for l, want := range []int64{0, 0, 1} {
		if n := must[int64](t)(c2.SeqLength(l)); n != want {
			t.Fatalf("layer %d: seq length %d, want %d", l, n, want)
		}
	}
	if n := must[int64](t)(c2.SeqLength(7)); n != 0 {
		t.Fatalf("a layer beyond the cache has seq length %d", n)
	}
	if n := must[int64](t)(c2.MaxLength(AllLayers)); n != -1 {
		t.Fatalf("max length of dynamic layers: %d", n)
	}
	l, off, err := c2.MaskSizes(3, 2)
	if err != nil || l != 4 || off != 0 {
		t.Fatalf("mask sizes (3, layer 2): %d %d %v", l, off, err)
	}
	info := must[LayerInfo](t)(c2.LayerInfo(2))
	if info.Kind != LayerDynamic || !info.IsInitialized || info.Capacity != -1 || info.DType != DTypeFloat32 ||
		info.BatchSize != 1 || info.NumKVHeads != 1 || info.KHeadDim != 1 || info.VHeadDim != 1 || info.SeqLength != 1 ||
		info.StoredLength != 1 || info.IsSliding || info.IsLinear || info.IsCompileable {
		t.Fatalf("layer info %+v", info)
	}
	if info := must[LayerInfo](t)(c2.LayerInfo(0)); info.IsInitialized || info.DType != DTypeUnset {
		t.Fatalf("layer 0 was never updated: %+v", info)
	}
}

func TestDynamicBatchSelect(t *testing.T) { // 'Dynamic layer trace', batch part
	c := mkCache(t, nil)
	rows := fill(3, 1, 2, 1, func(b, _, s, _ int64) float32 { return float32([]int{1, 10, 100}[b] * int(s+1)) })
	must[KV](t)(c.Update(0, rows, rows, nil))
	ok(t, c.BatchSelectIndices([]int64{0, 2}))
	kv := must[KV](t)(c.LayerView(0))
	if kv.Key.Dim(0) != 2 || !eqFloats(seqOf(t, kv.Key, 0), []float32{1, 2}) || !eqFloats(seqOf(t, kv.Key, 1), []float32{100, 200}) {
		t.Fatalf("after select (0, 2): %v", flat(t, kv.Key))
	}
}

func TestDynamicSlidingTrace(t *testing.T) { // 'Dynamic sliding layer trace', W = 4
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 1, SlidingWindow: 4}})
	steps := []struct {
		in, ret, stored []float32
		seq, maskLen    int64
		maskOff         int64
	}{
		{[]float32{1, 2, 3, 4, 5, 6}, []float32{1, 2, 3, 4, 5, 6}, []float32{4, 5, 6}, 6, 6, 0},
		{[]float32{7}, []float32{4, 5, 6, 7}, []float32{5, 6, 7}, 7, 4, 3},
		{[]float32{8, 9}, []float32{5, 6, 7, 8, 9}, []float32{7, 8, 9}, 9, 5, 4},
	}
	for i, s := range steps {
		l, off, err := c.MaskSizes(int64(len(s.in)), 0)
		if err != nil || l != s.maskLen || off != s.maskOff {
			t.Fatalf("call %d: mask sizes %d %d %v, want %d %d", i+1, l, off, err, s.maskLen, s.maskOff)
		}
		kv := must[KV](t)(c.Update(0, toks(s.in...), toks(s.in...), nil))
		wantSeq(t, "returned", kv.Key, s.ret...)
		wantSeq(t, "stored", must[KV](t)(c.LayerView(0)).Key, s.stored...)
		if n := must[int64](t)(c.SeqLength(0)); n != s.seq {
			t.Fatalf("call %d: seq length %d, want %d", i+1, n, s.seq)
		}
	}
	info := must[LayerInfo](t)(c.LayerInfo(0))
	if info.Kind != LayerDynamicSliding || info.Window != 4 || info.Capacity != 3 || !info.IsSliding || info.IsChunked {
		t.Fatalf("layer info %+v", info)
	}
	if n := must[int64](t)(c.MaxLength(0)); n != 4 {
		t.Fatalf("max length %d, want the window", n)
	}
	// Beyond the window, crop needs past recording.
	wantErr(t, c.Crop(-1), CodeInvalidState)
}

func TestDynamicSlidingRecording(t *testing.T) { // 'Dynamic sliding layer trace', record_past
	c := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerDynamicSliding, Window: 12}}})
	ok(t, c.ActivatePastRecording())
	in := make([]float32, 45)
	for i := range in {
		in[i] = float32(i)
	}
	must[KV](t)(c.Update(0, toks(in...), toks(in...), nil))
	if info := must[LayerInfo](t)(c.LayerInfo(0)); !info.RecordsPast || info.StoredLength != 45 {
		t.Fatalf("recording layer info %+v", info)
	}
	ok(t, c.Crop(-2))
	wantSeq(t, "crop(-2)", must[KV](t)(c.LayerView(0)).Key, in[32:43]...)
	if n := must[int64](t)(c.SeqLength(0)); n != 43 {
		t.Fatalf("seq length after crop(-2): %d", n)
	}
}

func TestStaticTrace(t *testing.T) { // 'Static layer trace', M = 4
	c := mkCache(t, &CacheOptions{Preset: PresetStatic, Config: &ModelConfig{NumHiddenLayers: 1}, MaxCacheLen: 4})
	for i, s := range []struct{ in, ret []float32 }{
		{[]float32{1, 2}, []float32{1, 2, 0, 0}},
		{[]float32{3}, []float32{1, 2, 3, 0}},
		{[]float32{4}, []float32{1, 2, 3, 4}},
	} {
		if l, off, err := c.MaskSizes(int64(len(s.in)), 0); err != nil || l != 4 || off != 0 {
			t.Fatalf("call %d: mask sizes %d %d %v", i+1, l, off, err)
		}
		wantSeq(t, "returned", must[KV](t)(c.Update(0, toks(s.in...), toks(s.in...), nil)).Key, s.ret...)
	}
	failsUnchanged(t, c, CodeOutOfRange, func() error { _, err := c.Update(0, toks(5), toks(5), nil); return err })
	info := must[LayerInfo](t)(c.LayerInfo(0))
	if info.Kind != LayerStatic || info.MaxCacheLen != 4 || info.Capacity != 4 || !info.IsCompileable || info.SeqLength != 4 {
		t.Fatalf("layer info %+v", info)
	}
	if n := must[int64](t)(c.BatchSize()); n != 1 {
		t.Fatalf("batch size %d", n)
	}
	if n := must[int64](t)(c.MaxLength(0)); n != 4 {
		t.Fatalf("max length %d", n)
	}
	// transformers 5.24: static layers crop by moving their counter back.
	if v := must[bool](t)(c.IsCroppable(AllLayers)); !v {
		t.Fatalf("a static cache is croppable")
	}
	before := must[int64](t)(c.SeqLength(0))
	ok(t, c.Crop(-1))
	if n := must[int64](t)(c.QueryOffset(0)); n != before-1 {
		t.Fatalf("query offset %d after crop(-1) of %d tokens", n, before)
	}
	wantErr(t, c.BatchRepeatInterleave(2), CodeUnsupported)
	// Explicit cache positions (transformers 4.57) write where they say.
	ok(t, c.Reset())
	opts := &UpdateOptions{CachePosition: []int64{2, 0}}
	wantSeq(t, "cache_position {2, 0}", must[KV](t)(c.Update(0, toks(7, 8), toks(7, 8), opts)).Key, 8, 0, 7, 0)
	failsUnchanged(t, c, CodeOutOfRange, func() error {
		_, err := c.Update(0, toks(9), toks(9), &UpdateOptions{CachePosition: []int64{4}})
		return err
	})
}

func TestStaticSlidingTrace(t *testing.T) { // 'Static sliding layer trace', M' = 4
	c := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerStaticSliding, Window: 4, MaxCacheLen: 16}}})
	for i, s := range []struct {
		in, ret, stored  []float32
		maskLen, maskOff int64
	}{
		{[]float32{1, 2}, []float32{1, 2, 0, 0}, []float32{1, 2, 0, 0}, 4, 0},
		{[]float32{3}, []float32{1, 2, 3, 0}, []float32{1, 2, 3, 0}, 4, 0},
		{[]float32{4}, []float32{1, 2, 3, 4}, []float32{1, 2, 3, 4}, 4, 0},
		{[]float32{5}, []float32{2, 3, 4, 5}, []float32{2, 3, 4, 5}, 4, 1},
		{[]float32{6, 7}, []float32{3, 4, 5, 6, 7}, []float32{4, 5, 6, 7}, 5, 2},
	} {
		if l, off, err := c.MaskSizes(int64(len(s.in)), 0); err != nil || l != s.maskLen || off != s.maskOff {
			t.Fatalf("call %d: mask sizes %d %d %v, want %d %d", i+1, l, off, err, s.maskLen, s.maskOff)
		}
		wantSeq(t, "returned", must[KV](t)(c.Update(0, toks(s.in...), toks(s.in...), nil)).Key, s.ret...)
		wantSeq(t, "stored", must[KV](t)(c.LayerView(0)).Key, s.stored...)
	}
	if info := must[LayerInfo](t)(c.LayerInfo(0)); info.Capacity != 4 || info.Window != 4 || !info.IsSliding {
		t.Fatalf("layer info %+v", info)
	}
}

func TestPresets(t *testing.T) {
	k := pos(1, 2, 0, 3, 4)
	cases := []struct {
		name  string
		opts  CacheOptions
		kinds []LayerKind
	}{
		{"dynamic config", CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 3,
			LayerTypes:    []LayerType{LayerTypeFullAttention, LayerTypeSlidingAttention, LayerTypeChunkedAttention},
			SlidingWindow: 8, AttentionChunkSize: 16}},
			[]LayerKind{LayerDynamic, LayerDynamicSliding, LayerDynamicChunked}},
		{"dynamic shared kv", CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 4, NumKVSharedLayers: 1}},
			[]LayerKind{LayerDynamic, LayerDynamic, LayerDynamic}},
		{"static", CacheOptions{Preset: PresetStatic, MaxCacheLen: 32, Config: &ModelConfig{NumHiddenLayers: 2,
			LayerTypes: []LayerType{LayerTypeSlidingAttention, LayerTypeFullAttention}, SlidingWindow: 8}},
			[]LayerKind{LayerStaticSliding, LayerStatic}},
		{"sliding window", CacheOptions{Preset: PresetSlidingWindow, MaxCacheLen: 32, Config: &ModelConfig{NumHiddenLayers: 2, SlidingWindow: 8}},
			[]LayerKind{LayerStaticSliding, LayerStaticSliding}},
		{"hybrid pattern", CacheOptions{Preset: PresetHybrid, MaxCacheLen: 32, Config: &ModelConfig{NumHiddenLayers: 4, SlidingWindow: 8}},
			[]LayerKind{LayerStaticSliding, LayerStatic, LayerStaticSliding, LayerStatic}},
		{"hybrid pattern 3", CacheOptions{Preset: PresetHybrid, MaxCacheLen: 32, Config: &ModelConfig{NumHiddenLayers: 3, SlidingWindow: 8, SlidingWindowPattern: 3}},
			[]LayerKind{LayerStaticSliding, LayerStaticSliding, LayerStatic}},
		{"hybrid chunked", CacheOptions{Preset: PresetHybridChunked, MaxCacheLen: 32, Config: &ModelConfig{NumHiddenLayers: 2, AttentionChunkSize: 8}},
			[]LayerKind{LayerStaticChunked, LayerStatic}},
		{"custom", CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{
			{Kind: LayerDynamic}, {Kind: LayerDynamicSliding, Window: 4}, {Kind: LayerDynamicChunked, Window: 4},
			{Kind: LayerStatic, MaxCacheLen: 8}, {Kind: LayerStaticSliding, Window: 4, MaxCacheLen: 8},
			{Kind: LayerStaticChunked, Window: 4, MaxCacheLen: 8}}},
			[]LayerKind{LayerDynamic, LayerDynamicSliding, LayerDynamicChunked, LayerStatic, LayerStaticSliding, LayerStaticChunked}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mkCache(t, &tc.opts)
			if c.NumLayers() != len(tc.kinds) {
				t.Fatalf("%d layers, want %d", c.NumLayers(), len(tc.kinds))
			}
			for l, kind := range tc.kinds {
				info := must[LayerInfo](t)(c.LayerInfo(l))
				if info.Kind != kind || info.IsInitialized {
					t.Fatalf("layer %d: %+v, want kind %v, not initialized", l, info, kind)
				}
				if info.IsChunked != (kind == LayerDynamicChunked || kind == LayerStaticChunked) {
					t.Fatalf("layer %d: chunked %v", l, info.IsChunked)
				}
				kv := must[KV](t)(c.Update(l, k, k, nil))
				if kv.Key.Dim(0) != 1 || kv.Key.Dim(1) != 2 || kv.Key.Dim(3) != 4 || kv.Key.DType() != DTypeFloat32 {
					t.Fatalf("layer %d: view %v", l, kv.Key)
				}
				if got := must[int64](t)(c.SeqLength(l)); got != 3 {
					t.Fatalf("layer %d: seq length %d", l, got)
				}
			}
		})
	}
}

func TestEarlyInitialization(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetStatic, MaxCacheLen: 6, Config: &ModelConfig{NumHiddenLayers: 2}})
	ok(t, c.EarlyInitialization(InitOptions{BatchSize: 2, NumKVHeads: 3, KHeadDim: 4, VHeadDim: 5, DType: DTypeBFloat16}))
	for l := 0; l < 2; l++ {
		info := must[LayerInfo](t)(c.LayerInfo(l))
		if !info.IsInitialized || info.BatchSize != 2 || info.NumKVHeads != 3 || info.KHeadDim != 4 || info.VHeadDim != 5 ||
			info.DType != DTypeBFloat16 || info.SeqLength != 0 {
			t.Fatalf("layer %d after early initialization: %+v", l, info)
		}
		kv := must[KV](t)(c.LayerView(l))
		if got := kv.Value.Shape(); len(got) != 4 || got[0] != 2 || got[1] != 3 || got[2] != 6 || got[3] != 5 {
			t.Fatalf("value view shape %v", got)
		}
		for _, x := range flat(t, kv.Key) {
			if x != 0 {
				t.Fatal("early-initialized buffers are not zero")
			}
		}
	}
	// Per-layer heads and head dims.
	c2 := mkCache(t, &CacheOptions{Preset: PresetStatic, MaxCacheLen: 6, Config: &ModelConfig{NumHiddenLayers: 2}})
	ok(t, c2.EarlyInitialization(InitOptions{BatchSize: 1, KHeadDim: 4, DType: DTypeFloat16,
		NumKVHeadsPerLayer: []int64{1, 2}, HeadDimPerLayer: []int64{8, 16}}))
	for l, want := range [][2]int64{{1, 8}, {2, 16}} {
		if info := must[LayerInfo](t)(c2.LayerInfo(l)); info.NumKVHeads != want[0] || info.KHeadDim != want[1] || info.VHeadDim != want[1] {
			t.Fatalf("layer %d: %+v", l, info)
		}
	}
	failsUnchanged(t, c2, CodeInvalidArgument, func() error {
		c3 := mkCache(t, &CacheOptions{Preset: PresetStatic, MaxCacheLen: 6, Config: &ModelConfig{NumHiddenLayers: 2}})
		return c3.EarlyInitialization(InitOptions{BatchSize: 1, KHeadDim: 4, DType: DTypeFloat16, HeadDimPerLayer: []int64{8}})
	}, "HeadDimPerLayer")
}

func TestDTypesStored(t *testing.T) {
	for _, dt := range []DType{DTypeFloat32, DTypeFloat16, DTypeBFloat16} {
		c := mkCache(t, nil)
		var in Input
		var want []float32
		switch dt {
		case DTypeFloat32:
			in, want = toks(0.5, -1.25, 3), []float32{0.5, -1.25, 3}
		case DTypeFloat16:
			in = Tensor[Float16]{Data: []Float16{Float16FromFloat32(0.5), Float16FromFloat32(-1.25), Float16FromFloat32(3)}, Shape: []int64{1, 1, 3, 1}}
			want = []float32{0.5, -1.25, 3}
		case DTypeBFloat16:
			in = Tensor[BFloat16]{Data: []BFloat16{BFloat16FromFloat32(0.5), BFloat16FromFloat32(-1.25), BFloat16FromFloat32(3)}, Shape: []int64{1, 1, 3, 1}}
			want = []float32{0.5, -1.25, 3}
		}
		kv := must[KV](t)(c.Update(0, in, in, nil))
		if kv.Key.DType() != dt || kv.Key.DataType() != dt.DataType() {
			t.Fatalf("%v cache: view dtype %v", dt, kv.Key.DType())
		}
		wantSeq(t, dt.String(), kv.Key, want...)
		if info := must[LayerInfo](t)(c.LayerInfo(0)); info.DType != dt {
			t.Fatalf("%v cache: layer dtype %v", dt, info.DType)
		}
		// No silent casts: another dtype is refused.
		other := Input(toks(1))
		if dt == DTypeFloat32 {
			other = Tensor[BFloat16]{Data: []BFloat16{1}, Shape: []int64{1, 1, 1, 1}}
		}
		failsUnchanged(t, c, CodeDTypeMismatch, func() error { _, err := c.Update(0, other, other, nil); return err })
	}
}

func TestDevices(t *testing.T) {
	if Features().Has(FeatureCUDA) {
		t.Log("a CUDA backend is available: the NO_DEVICE case does not apply")
	} else {
		_, err := New(&CacheOptions{Preset: PresetDynamic, Device: Device{Type: DeviceCUDA}})
		wantErr(t, err, CodeNoDevice)
	}
	c := mkCache(t, nil)
	must[KV](t)(c.Update(0, toks(1), toks(1), nil))
	if d := must[KV](t)(c.LayerView(0)).Key.Device(); d != CPU {
		t.Fatalf("view device %v", d)
	}
	// A tensor said to live on a GPU is refused before its data is touched.
	gpu := ExternalTensor{Data: nil, Device: Device{Type: DeviceCUDA}, DataType: DTypeFloat32.DataType(), Shape: []int64{1, 1, 1, 1}}
	failsUnchanged(t, c, CodeDeviceMismatch, func() error { _, err := c.Update(0, gpu, gpu, nil); return err })
}

// ------------------------------------------------------------- ABI 0.2 kinds

// quantTolerance bounds the error of nbits quantization of values within
// [lo, hi]: half a step, twice (transformers mode quantizes again), plus
// float rounding.
func quantTolerance(lo, hi float32, nbits int) float64 {
	return float64(hi-lo)/float64(int(1)<<nbits-1) + 1e-5
}

func TestQuantizedTransformersTrace(t *testing.T) { // 'Quantized layer trace', R = 4
	q := DefaultQuantOptions()
	q.Mode, q.ResidualLength, q.QGroupSize = QuantModeTransformers, 4, 16
	c := mkCache(t, &CacheOptions{Preset: PresetQuantized, Config: &ModelConfig{NumHiddenLayers: 1}, Quant: &q})
	rnd := func(start, n int64) Tensor[float32] {
		return fill(1, 2, n, 16, func(_, h, s, d int64) float32 {
			return float32(math.Sin(float64((start+s)*37 + h*11 + d*3))) // in [-1, 1]
		})
	}
	all := rnd(0, 10)
	prefill := rnd(0, 5)
	kv := must[KV](t)(c.Update(0, prefill, prefill, nil))
	if got, want := flat(t, kv.Key), flat(t, viewOf(t, prefill)); !eqFloats(got, want) {
		t.Fatal("the prefill is not returned exactly")
	}
	info := must[LayerInfo](t)(c.LayerInfo(0))
	if info.Kind != LayerQuantized || info.QuantizedLength != 5 || info.SeqLength != 5 {
		t.Fatalf("after the prefill: %+v", info)
	}
	tol := quantTolerance(-1, 1, 4)
	for step, wantQ := range []int64{5, 5, 5, 9, 9} {
		tok := rnd(5+int64(step), 1)
		kv := must[KV](t)(c.Update(0, tok, tok, nil))
		n := int64(6 + step)
		if kv.Key.Dim(2) != n || kv.Value.Dim(2) != n {
			t.Fatalf("d%d: returned %d tokens, want %d", step+1, kv.Key.Dim(2), n)
		}
		for h := int64(0); h < 2; h++ {
			for s := int64(0); s < n; s++ {
				for d := int64(0); d < 16; d++ {
					want := all.At(0, h, s, d)
					if got := kv.Key.At(0, h, s, d); math.Abs(float64(got-want)) > tol || (s == n-1 && got != want) {
						t.Fatalf("d%d: key (%d, %d, %d) = %g, want %g within %g", step+1, h, s, d, got, want, tol)
					}
				}
			}
		}
		info := must[LayerInfo](t)(c.LayerInfo(0))
		if info.QuantizedLength != wantQ || info.SeqLength != n {
			t.Fatalf("d%d: quantized %d (want %d), seq %d", step+1, info.QuantizedLength, wantQ, info.SeqLength)
		}
	}
	if m := must[MemoryInfo](t)(c.Memory()); m.BytesQuantized == 0 {
		t.Fatalf("memory of a quantized cache: %+v", m)
	}
}

// viewOf stores a tensor in a fresh cache and returns its view, to compare
// tensors with the same helpers.
func viewOf(t testing.TB, x Tensor[float32]) View {
	c := mkCache(t, nil)
	return must[KV](t)(c.Update(0, x, x, nil)).Key
}

func TestQuantizedIncremental(t *testing.T) {
	for _, q := range []QuantOptions{
		DefaultQuantOptions(),
		{Quantizer: QuantizerHQQ, Mode: QuantModeIncremental, NBits: 8, AxisKey: 1, AxisValue: 1, QGroupSize: 32, ResidualLength: 16},
	} {
		c := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerQuantized, Quant: &q}}})
		x := fill(1, 2, 200, 64, func(_, h, s, d int64) float32 { return float32(math.Cos(float64(s*13 + h*7 + d))) })
		kv := must[KV](t)(c.Update(0, x, x, nil))
		if kv.Key.Dim(2) != 200 {
			t.Fatalf("%+v: prefill returned %d tokens", q, kv.Key.Dim(2))
		}
		tol := quantTolerance(-1, 1, int(q.NBits))
		for s := int64(0); s < 200; s++ {
			for d := int64(0); d < 64; d++ {
				want, got := x.At(0, 1, s, d), kv.Value.At(0, 1, s, d)
				if math.Abs(float64(got-want)) > tol || (s >= 200-q.ResidualLength && got != want) {
					t.Fatalf("%+v: value (1, %d, %d) = %g, want %g within %g", q, s, d, got, want, tol)
				}
			}
		}
		info := must[LayerInfo](t)(c.LayerInfo(0))
		if info.QuantizedLength != 200-q.ResidualLength || info.SeqLength != 200 {
			t.Fatalf("%+v: %+v", q, info)
		}
		// Decode steps keep the residual at residual_length tokens.
		for i := int64(0); i < 3; i++ {
			tok := fill(1, 2, 1, 64, func(_, h, _, d int64) float32 { return float32(h+d) / 64 })
			kv = must[KV](t)(c.Update(0, tok, tok, nil))
			if kv.Key.Dim(2) != 201+i {
				t.Fatalf("decode %d returned %d tokens", i, kv.Key.Dim(2))
			}
		}
		if info := must[LayerInfo](t)(c.LayerInfo(0)); info.QuantizedLength != 203-q.ResidualLength {
			t.Fatalf("after decoding: quantized %d", info.QuantizedLength)
		}
		// Batch operations and crop act on the quantized tokens too.
		ok(t, c.Crop(-3))
		if n := must[int64](t)(c.SeqLength(0)); n != 200 {
			t.Fatalf("seq length after crop(-3): %d", n)
		}
		ok(t, c.BatchRepeatInterleave(2))
		if info := must[LayerInfo](t)(c.LayerInfo(0)); info.BatchSize != 2 {
			t.Fatalf("batch after repeat: %d", info.BatchSize)
		}
	}
}

func TestQuantizedOptionErrors(t *testing.T) {
	for _, q := range []QuantOptions{
		{Quantizer: QuantizerQuanto, NBits: 3, QGroupSize: 64, ResidualLength: 128},             // quanto nbits {2, 4}
		{Quantizer: QuantizerQuanto, NBits: 4, AxisKey: 1, QGroupSize: 64, ResidualLength: 128}, // quanto axes {0, -1}
		{Quantizer: QuantizerHQQ, NBits: 5, AxisKey: 1, AxisValue: 1, QGroupSize: 64},           // hqq nbits
		{Quantizer: QuantizerHQQ, NBits: 4, AxisKey: -1, QGroupSize: 64},                        // hqq axes {0, 1}
		{Quantizer: 9, NBits: 4, QGroupSize: 64},                                                // no such quantizer
		{Quantizer: QuantizerQuanto, NBits: 4, QGroupSize: 0, ResidualLength: 128},              // group size >= 1
		{Quantizer: QuantizerQuanto, NBits: 4, QGroupSize: 64, ResidualLength: -1},              // residual >= 0
		{Quantizer: QuantizerQuanto, Mode: 7, NBits: 4, QGroupSize: 64},                         // no such mode
	} {
		_, err := New(&CacheOptions{Preset: PresetQuantized, Config: &ModelConfig{NumHiddenLayers: 1}, Quant: &q})
		wantErr(t, err, CodeInvalidArgument)
	}
	// QuantizedCache refuses sliding layers, and offloading.
	_, err := New(&CacheOptions{Preset: PresetQuantized, Config: &ModelConfig{NumHiddenLayers: 2, SlidingWindow: 4}})
	wantErr(t, err, CodeInvalidArgument)
	_, err = New(&CacheOptions{Preset: PresetQuantized, Config: &ModelConfig{NumHiddenLayers: 1}, Offload: OffloadAll})
	wantErr(t, err, CodeUnsupported)
}

func TestSinkTrace(t *testing.T) { // 'Sink layer trace', Wl = 6, S = 2
	c := mkCache(t, &CacheOptions{Preset: PresetSink, WindowLength: 6, NumSinkTokens: 2})
	for i, s := range []struct{ in, ret []float32 }{
		{[]float32{0, 1, 2, 3}, []float32{0, 1, 2, 3}},
		{[]float32{4}, []float32{0, 1, 2, 3, 4}},
		{[]float32{5}, []float32{0, 1, 2, 3, 4, 5}},
		{[]float32{6}, []float32{0, 1, 3, 4, 5, 6}},
		{[]float32{7, 8}, []float32{0, 1, 5, 6, 7, 8}},
	} {
		if l, off, err := c.MaskSizes(int64(len(s.in)), 0); err != nil || l != int64(len(s.ret)) || off != 0 {
			t.Fatalf("call %d: mask sizes %d %d %v, want %d 0", i+1, l, off, err, len(s.ret))
		}
		wantSeq(t, "returned", must[KV](t)(c.Update(0, toks(s.in...), toks(s.in...), nil)).Key, s.ret...)
	}
	wantSeq(t, "stored", must[KV](t)(c.LayerView(0)).Key, 0, 1, 5, 6, 7, 8)
	if n := must[int64](t)(c.MaxLength(AllLayers)); n != 6 {
		t.Fatalf("max length %d", n)
	}
	if u := must[int64](t)(c.UsableLength(3, 0)); u != 3 {
		t.Fatalf("usable length %d", u)
	}
	info := must[LayerInfo](t)(c.LayerInfo(0))
	if info.Kind != LayerSink || info.NumSinkTokens != 2 || info.Window != 6 {
		t.Fatalf("layer info %+v", info)
	}
}

// rope returns the [seq, dim] cos and sin tables of standard RoPE, halves
// duplicated as transformers lays them out.
func rope(seq, dim int64) (cos, sin Tensor[float32]) {
	cos, sin = NewTensor[float32](seq, dim), NewTensor[float32](seq, dim)
	for p := int64(0); p < seq; p++ {
		for j := int64(0); j < dim/2; j++ {
			theta := float64(p) * math.Pow(10000, -2*float64(j)/float64(dim))
			for _, k := range []int64{j, j + dim/2} {
				cos.Set(float32(math.Cos(theta)), p, k)
				sin.Set(float32(math.Sin(theta)), p, k)
			}
		}
	}
	return cos, sin
}

func TestSinkRerotation(t *testing.T) { // 'Sink layers': kept keys are rotated back by the shift
	const w, sinks, dim = 6, 2, 4
	c := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerSink, Window: w, NumSinkTokens: sinks}}})
	cos, sin := rope(16, dim)
	opts := &UpdateOptions{RopeCos: cos, RopeSin: sin}
	keys := fill(1, 1, 7, dim, func(_, _, s, d int64) float32 { return float32(math.Sin(float64(s*5+d))) + 0.1 })
	prefill := Tensor[float32]{Data: keys.Data[:w*dim], Shape: []int64{1, 1, w, dim}}
	must[KV](t)(c.Update(0, prefill, prefill, opts))
	next := Tensor[float32]{Data: keys.Data[w*dim:], Shape: []int64{1, 1, 1, dim}}
	kv := must[KV](t)(c.Update(0, next, next, opts))
	if kv.Key.Dim(2) != w {
		t.Fatalf("returned %d tokens", kv.Key.Dim(2))
	}
	const n = 1
	for slot := int64(0); slot < w; slot++ {
		for d := int64(0); d < dim; d++ {
			var want float32
			switch {
			case slot < sinks: // sinks are kept as they are
				want = keys.At(0, 0, slot, d)
			case slot == w-1: // the new token
				want = keys.At(0, 0, 6, d)
			default: // kept token from stored slot src, rotated back by n positions
				src := slot + n
				p := sinks + n + (slot - sinks) // its table row
				rc := cos.At(p, d)*cos.At(p-n, d) + sin.At(p, d)*sin.At(p-n, d)
				rs := -sin.At(p, d)*cos.At(p-n, d) + cos.At(p, d)*sin.At(p-n, d)
				half := keys.At(0, 0, src, (d+dim/2)%dim)
				if d < dim/2 {
					half = -half
				}
				want = keys.At(0, 0, src, d)*rc + half*rs
			}
			if got := kv.Key.At(0, 0, slot, d); math.Abs(float64(got-want)) > 1e-5 {
				t.Fatalf("slot %d channel %d: %g, want %g", slot, d, got, want)
			}
			src := slot + n // values are never rotated
			if slot < sinks {
				src = slot
			} else if slot == w-1 {
				src = 6
			}
			if got, want := kv.Value.At(0, 0, slot, d), keys.At(0, 0, src, d); got != want {
				t.Fatalf("value slot %d channel %d: %g, want %g", slot, d, got, want)
			}
		}
	}
}

func TestLinearConvTrace(t *testing.T) { // 'Linear conv state trace', K = 4
	c := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerLinear, ConvKernelSize: 4}}})
	conv := func(vals ...float32) Tensor[float32] {
		return Tensor[float32]{Data: vals, Shape: []int64{1, 1, int64(len(vals))}}
	}
	cols := func(v View) []float32 { return flat(t, v) }
	if has := must[bool](t)(c.HasPreviousState(0, -1)); has {
		t.Fatal("a new layer has a previous state")
	}
	got := must[View](t)(c.UpdateConvState(0, conv(1, 2, 3, 4, 5, 6), nil))
	if !eqFloats(cols(got), []float32{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("first call returned %v", cols(got))
	}
	st, _ := must2(t)(c.StateView(0, 0))
	if !eqFloats(cols(st), []float32{3, 4, 5, 6}) {
		t.Fatalf("stored %v", cols(st))
	}
	got = must[View](t)(c.UpdateConvState(0, conv(7), nil))
	if !eqFloats(cols(got), []float32{3, 4, 5, 6, 7}) {
		t.Fatalf("second call returned %v", cols(got))
	}
	st, _ = must2(t)(c.StateView(0, 0))
	if !eqFloats(cols(st), []float32{4, 5, 6, 7}) {
		t.Fatalf("stored %v", cols(st))
	}
	if has := must[bool](t)(c.HasPreviousState(AllLayers, -1)); !has {
		t.Fatal("no previous state after a conv update")
	}
	// A short prefill is left-padded to K.
	c2 := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerLinear, ConvKernelSize: 4}}})
	got = must[View](t)(c2.UpdateConvState(0, conv(1, 2), nil))
	if !eqFloats(cols(got), []float32{0, 0, 1, 2}) {
		t.Fatalf("short prefill returned %v", cols(got))
	}
	info := must[LayerInfo](t)(c.LayerInfo(0))
	if info.Kind != LayerLinear || !info.IsLinear || info.NumStates != 1 || info.ConvKernelSize != 4 || !info.HasPreviousState {
		t.Fatalf("layer info %+v", info)
	}
}

func must2(t testing.TB) func(View, View, error) (View, View) {
	return func(a, b View, err error) (View, View) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
}

func TestLinearLegacyConv(t *testing.T) { // 'Legacy MambaCache conv trace', K = 4
	c := mkCache(t, &CacheOptions{Preset: PresetMamba, Config: &ModelConfig{NumHiddenLayers: 2, ConvKernel: 4}})
	x := Tensor[float32]{Data: []float32{3, 4, 5, 6}, Shape: []int64{1, 1, 4}}
	got := must[View](t)(c.UpdateConvState(1, x, &ConvUpdateOptions{CachePosition: []int64{0, 1, 2, 3}}))
	if !eqFloats(flat(t, got), []float32{3, 4, 5, 6}) {
		t.Fatalf("legacy prefill: %v", flat(t, got))
	}
	y := Tensor[float32]{Data: []float32{7}, Shape: []int64{1, 1, 1}}
	got = must[View](t)(c.UpdateConvState(1, y, &ConvUpdateOptions{CachePosition: []int64{4}}))
	if !eqFloats(flat(t, got), []float32{4, 5, 6, 7}) {
		t.Fatalf("legacy decode: %v", flat(t, got))
	}
	for l := 0; l < 2; l++ {
		if info := must[LayerInfo](t)(c.LayerInfo(l)); info.Kind != LayerLinear || info.ConvKernelSize != 4 {
			t.Fatalf("mamba layer %d: %+v", l, info)
		}
	}
}

func TestLinearRecurrentState(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetMamba, Config: &ModelConfig{NumHiddenLayers: 1, NumberOfConvStates: 2, ConvKernel: 3}})
	conv, rec := must2(t)(c.StateView(0, 1))
	if conv.NDim() != 0 || rec.NDim() != 0 {
		t.Fatalf("states before their first update: %v %v", conv, rec)
	}
	s := fill(2, 3, 4, 5, func(b, h, i, j int64) float32 { return float32(b*1000 + h*100 + i*10 + j) })
	got := must[View](t)(c.UpdateRecurrentState(0, 1, s))
	if !eqFloats(flat(t, got), s.Data) {
		t.Fatal("recurrent state differs from the input")
	}
	_, rec = must2(t)(c.StateView(0, 1))
	if !eqFloats(flat(t, rec), s.Data) || rec.DType() != DTypeFloat32 {
		t.Fatal("state view differs from the input")
	}
	// Beam search reorders the states too.
	ok(t, c.Reorder([]int64{1, 0}))
	_, rec = must2(t)(c.StateView(0, 1))
	if rec.At(0, 0, 0, 0) != 1000 || rec.At(1, 0, 0, 0) != 0 {
		t.Fatalf("states after reorder {1, 0}: %g %g", rec.At(0, 0, 0, 0), rec.At(1, 0, 0, 0))
	}
	if m := must[MemoryInfo](t)(c.Memory()); m.BytesState == 0 {
		t.Fatalf("memory: %+v", m)
	}
	ok(t, c.Reset())
	_, rec = must2(t)(c.StateView(0, 1))
	for _, x := range flat(t, rec) {
		if x != 0 {
			t.Fatal("reset left a state non-zero")
		}
	}
	info := must[LayerInfo](t)(c.LayerInfo(0))
	if info.NumStates != 2 || info.ConvKernelSize != 3 {
		t.Fatalf("layer info %+v", info)
	}
	failsUnchanged(t, c, CodeOutOfRange, func() error { _, err := c.UpdateRecurrentState(0, 2, s); return err })
}

func TestHybridMambaAndLinearKinds(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetHybridMamba, Config: config(LayerTypeLinearAttention, LayerTypeFullAttention, LayerTypeLinearAttention)})
	for l, want := range []LayerKind{LayerLinear, LayerDynamic, LayerLinear} {
		if info := must[LayerInfo](t)(c.LayerInfo(l)); info.Kind != want {
			t.Fatalf("layer %d: %v, want %v", l, info.Kind, want)
		}
	}
	// Sequence-length queries skip the linear layers' missing K/V.
	k := pos(1, 1, 0, 3, 2)
	must[KV](t)(c.Update(1, k, k, nil))
	if n := must[int64](t)(c.SeqLength(1)); n != 3 {
		t.Fatalf("seq length %d", n)
	}
	// A linear layer has no K/V to update.
	wantErr(t, func() error { _, err := c.Update(0, k, k, nil); return err }(), CodeUnsupported)

	d := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 3, SlidingWindow: 4,
		LayerTypes: []LayerType{LayerTypeHybrid, LayerTypeHybridSliding, LayerTypeLinearAttention}}})
	for l, want := range []LayerKind{LayerLinearDynamic, LayerLinearDynamicSliding, LayerLinear} {
		info := must[LayerInfo](t)(d.LayerInfo(l))
		// transformers 5.24's Cache.is_linear: only the layers without K/V (5.23 also counted the sliding hybrid).
		if info.Kind != want || info.IsLinear != (want == LayerLinear) {
			t.Fatalf("dynamic layer %d: %+v, want %v", l, info, want)
		}
	}
	s := mkCache(t, &CacheOptions{Preset: PresetStatic, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 2, SlidingWindow: 4,
		LayerTypes: []LayerType{LayerTypeHybrid, LayerTypeHybridSliding}}})
	for l, want := range []LayerKind{LayerLinearStatic, LayerLinearStaticSliding} {
		if info := must[LayerInfo](t)(s.LayerInfo(l)); info.Kind != want {
			t.Fatalf("static layer %d: %v, want %v", l, info.Kind, want)
		}
	}
	// The hybrid kinds hold both: K/V and states.
	must[KV](t)(d.Update(0, k, k, nil))
	must[View](t)(d.UpdateConvState(0, Tensor[float32]{Data: []float32{1, 2, 3}, Shape: []int64{1, 1, 3}}, nil))
	if info := must[LayerInfo](t)(d.LayerInfo(0)); info.SeqLength != 3 || !info.HasPreviousState {
		t.Fatalf("hybrid layer after both updates: %+v", info)
	}
	// Conv updates on an attention layer are refused.
	wantErr(t, func() error {
		_, err := c.UpdateConvState(1, Tensor[float32]{Data: []float32{1}, Shape: []int64{1, 1, 1}}, nil)
		return err
	}(), CodeInvalidArgument)
}

func TestOffloadedOrder(t *testing.T) {
	// Three full-attention layers, every layer offloaded: an update of layer
	// i prefetches the next offloadable layer (wrapping around; an
	// uninitialized layer has nothing to fetch), then offloads layer i.
	c := mkCache(t, &CacheOptions{Preset: PresetOffloaded, Config: &ModelConfig{NumHiddenLayers: 3}})
	ref := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 3}})
	want := []string{"100", "110", "011", "101", "110", "011"}
	for i, tiers := range want {
		l := i % 3
		k := pos(1, 2, int64(i), 2, 3)
		got := must[KV](t)(c.Update(l, k, k, nil))
		exp := must[KV](t)(ref.Update(l, k, k, nil))
		if !eqFloats(flat(t, got.Key), flat(t, exp.Key)) || !eqFloats(flat(t, got.Value), flat(t, exp.Value)) {
			t.Fatalf("update %d: an offloaded cache returns other tensors than a resident one", i)
		}
		s := ""
		for j := 0; j < 3; j++ {
			s += map[bool]string{true: "1", false: "0"}[must[LayerInfo](t)(c.LayerInfo(j)).IsOffloaded]
		}
		if s != tiers {
			t.Fatalf("after update %d (layer %d): tiers %s, want %s", i, l, s, tiers)
		}
	}
	if m := must[MemoryInfo](t)(c.Memory()); m.BytesHost == 0 || m.BytesHost+m.BytesDevice != m.BytesReserved {
		t.Fatalf("memory of an offloaded cache: %+v", m)
	}
	// Driving it by hand: contents are the same in either tier.
	before := flat(t, must[KV](t)(c.LayerView(1)).Key)
	ok(t, c.Prefetch(1))
	if must[LayerInfo](t)(c.LayerInfo(1)).IsOffloaded {
		t.Fatal("prefetched layer is still offloaded")
	}
	ok(t, c.Offload(1))
	if !must[LayerInfo](t)(c.LayerInfo(1)).IsOffloaded {
		t.Fatal("offloaded layer is not")
	}
	if after := flat(t, must[KV](t)(c.LayerView(1)).Key); !eqFloats(before, after) {
		t.Fatal("offload changed the contents")
	}
	failsUnchanged(t, c, CodeOutOfRange, func() error { return c.Offload(3) })
	failsUnchanged(t, c, CodeOutOfRange, func() error { return c.Prefetch(3) })
}

func TestOffloadedPresets(t *testing.T) {
	for _, opts := range []CacheOptions{
		{Preset: PresetOffloaded},
		{Preset: PresetOffloadedStatic, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 2}},
		{Preset: PresetOffloadedHybrid, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 2, AttentionChunkSize: 4}},
		{Preset: PresetStatic, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 2}, Offload: OffloadAll},
	} {
		c := mkCache(t, &opts)
		k := pos(1, 1, 0, 2, 2)
		for l := 0; l < 2; l++ {
			must[KV](t)(c.Update(l, k, k, nil))
		}
		if !must[LayerInfo](t)(c.LayerInfo(1)).IsOffloaded {
			t.Fatalf("preset %v: the last updated layer is not offloaded", opts.Preset)
		}
	}
}

// QuantModeCompact returns the same values as QuantModeIncremental (only
// where the history lives differs) and keeps less memory.
func TestQuantizedCompactMatchesIncremental(t *testing.T) {
	mk := func(mode QuantMode) *Cache {
		q := DefaultQuantOptions()
		q.Mode, q.ResidualLength, q.QGroupSize = mode, 4, 16
		return mkCache(t, &CacheOptions{Preset: PresetQuantized, Config: &ModelConfig{NumHiddenLayers: 1}, Quant: &q})
	}
	inc, cmp := mk(QuantModeIncremental), mk(QuantModeCompact)
	for step := int64(0); step < 40; step++ {
		n := int64(1)
		if step == 0 {
			n = 24
		}
		x := fill(1, 2, n, 16, func(_, h, s, d int64) float32 {
			return float32(math.Sin(float64((step*31+s)*37 + h*11 + d*3)))
		})
		a := must[KV](t)(inc.Update(0, x, x, nil))
		b := must[KV](t)(cmp.Update(0, x, x, nil))
		if !eqFloats(flat(t, a.Key), flat(t, b.Key)) || !eqFloats(flat(t, a.Value), flat(t, b.Value)) {
			t.Fatalf("step %d: compact mode returned other values than incremental mode", step)
		}
	}
	if got := must[LayerInfo](t)(cmp.LayerInfo(0)); got.QuantizedLength == 0 {
		t.Fatalf("nothing was quantized: %+v", got)
	}
}
