//go:build cgo

package kvcache

import (
	"errors"
	"testing"
)

// Bad input for every entry point: each call must fail with the library's
// code and a message, and leave the cache exactly as it was.

func TestNewErrors(t *testing.T) {
	live := liveHandles.Load()
	for _, tc := range []struct {
		name string
		opts CacheOptions
		code Code
		frag string
	}{
		{"unknown preset", CacheOptions{Preset: 99}, CodeInvalidArgument, "preset"},
		{"custom without layers", CacheOptions{Preset: PresetCustom}, CodeInvalidArgument, "num_layers"},
		{"layer kind 0", CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{}}}, CodeInvalidArgument, "kind"},
		{"unknown layer kind", CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: 99}}}, CodeInvalidArgument, "kind"},
		{"static without slots", CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerStatic}}}, CodeInvalidArgument, "max_cache_len"},
		{"sliding without window", CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerDynamicSliding}}}, CodeInvalidArgument, "window"},
		{"static preset without max_cache_len", CacheOptions{Preset: PresetStatic, Config: &ModelConfig{NumHiddenLayers: 1}}, CodeInvalidArgument, "max_cache_len"},
		{"static preset without config", CacheOptions{Preset: PresetStatic, MaxCacheLen: 4}, CodeInvalidArgument, "config"},
		{"no layers in config", CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{}}, CodeInvalidArgument, "num_hidden_layers"},
		{"sliding window preset without window", CacheOptions{Preset: PresetSlidingWindow, MaxCacheLen: 4, Config: &ModelConfig{NumHiddenLayers: 1}}, CodeInvalidArgument, "sliding_window"},
		{"layer types too short", CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 3, LayerTypes: []LayerType{LayerTypeFullAttention}}}, CodeInvalidArgument, "LayerTypes"},
		{"unknown layer type", CacheOptions{Preset: PresetDynamic, Config: config(LayerType(42))}, CodeInvalidArgument, "layer_types"},
		{"unknown offload", CacheOptions{Preset: PresetDynamic, Offload: 9}, CodeInvalidArgument, "offload"},
		{"unknown device", CacheOptions{Preset: PresetDynamic, Device: Device{Type: 99}}, CodeInvalidArgument, "device"},
		{"sink window too small", CacheOptions{Preset: PresetSink, WindowLength: 2, NumSinkTokens: 2}, CodeInvalidArgument, "window_length"},
		{"sink layer window", CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerSink, Window: 3, NumSinkTokens: 3}}}, CodeInvalidArgument, "num_sink_tokens"},
		{"quantized preset with sliding layers", CacheOptions{Preset: PresetQuantized, Config: &ModelConfig{NumHiddenLayers: 1, SlidingWindow: 4}}, CodeInvalidArgument, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(&tc.opts)
			if c != nil {
				t.Fatal("a cache came back with an error")
			}
			wantErr(t, err, tc.code, tc.frag)
		})
	}
	if liveHandles.Load() != live {
		t.Fatal("failed constructors left caches behind")
	}
}

// populated returns a two-layer dynamic cache holding 3 tokens of batch 2.
func populated(t *testing.T) *Cache {
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 2}})
	x := rows(2, 3, 0)
	for l := 0; l < 2; l++ {
		must[KV](t)(c.Update(l, x, x, nil))
	}
	return c
}

func TestUpdateErrors(t *testing.T) {
	c := populated(t)
	good := rows(2, 1, 3)
	upd := func(layer int, k, v Input, o *UpdateOptions) func() error {
		return func() error { _, err := c.Update(layer, k, v, o); return err }
	}
	short := good
	short.Data = short.Data[:len(short.Data)-1]
	for _, tc := range []struct {
		name string
		f    func() error
		code Code
		frag string
	}{
		{"nil key", upd(0, nil, good, nil), CodeInvalidArgument, "key"},
		{"nil value", upd(0, good, (*Tensor[float32])(nil), nil), CodeInvalidArgument, "value"},
		{"3-D key", upd(0, Tensor[float32]{Data: good.Data, Shape: []int64{2, 2, 3}}, good, nil), CodeShapeMismatch, "ndim"},
		{"other batch", upd(0, rows(1, 1, 3), rows(1, 1, 3), nil), CodeShapeMismatch, "batch"},
		{"other heads", upd(0, fill(2, 3, 1, 3, nil0), fill(2, 3, 1, 3, nil0), nil), CodeShapeMismatch, "heads"},
		{"other head dim", upd(0, fill(2, 2, 1, 4, nil0), fill(2, 2, 1, 4, nil0), nil), CodeShapeMismatch, "head_dim"},
		{"key and value disagree", upd(0, good, rows(2, 2, 3), nil), CodeShapeMismatch, "seq"},
		{"other dtype", upd(0, Tensor[Float16]{Data: make([]Float16, 12), Shape: []int64{2, 2, 1, 3}}, good, nil), CodeDTypeMismatch, "dtype"},
		{"other device", upd(0, ExternalTensor{Device: Device{Type: DeviceROCm}, DataType: DTypeFloat32.DataType(), Shape: []int64{2, 2, 1, 3}}, good, nil), CodeDeviceMismatch, "device"},
		{"unknown dtype", upd(0, ExternalTensor{Device: CPU, DataType: DataType{TypeCodeInt, 8, 1}, Shape: []int64{2, 2, 1, 3}}, good, nil), CodeDTypeMismatch, "dtype"},
		{"layer beyond the config", upd(2, good, good, nil), CodeOutOfRange, "layer"},
		{"negative layer", upd(-1, good, good, nil), CodeOutOfRange, "layer"},
		{"data shorter than the shape", upd(0, short, good, nil), CodeInvalidArgument, "Data has 11 elements"},
		{"value data shorter than the shape", upd(0, good, &short, nil), CodeInvalidArgument, "value.Data has 11 elements"},
		{"offset leaves too few elements", upd(0, Tensor[float32]{Data: good.Data, Shape: good.Shape, Offset: 1}, good, nil), CodeInvalidArgument, "outside"},
		{"strides of another rank", upd(0, Tensor[float32]{Data: good.Data, Shape: good.Shape, Strides: []int64{1}}, good, nil), CodeInvalidArgument, "strides"},
		{"strides past the data", upd(0, Tensor[float32]{Data: good.Data, Shape: good.Shape, Strides: []int64{6, 3, 3, 2}}, good, nil), CodeInvalidArgument, "outside"},
		{"offset past the data", upd(0, Tensor[float32]{Data: good.Data, Shape: good.Shape, Offset: 13}, good, nil), CodeInvalidArgument, "Offset"},
		{"negative offset", upd(0, Tensor[float32]{Data: good.Data, Shape: good.Shape, Offset: -1}, good, nil), CodeInvalidArgument, "Offset"},
		{"seven dimensions", upd(0, Tensor[float32]{Data: good.Data, Shape: []int64{1, 1, 1, 1, 1, 1, 12}}, good, nil), CodeShapeMismatch, "dimensions"},
		{"size overflow", upd(0, Tensor[float32]{Data: good.Data, Shape: []int64{1 << 40, 1 << 40, 1, 1}}, good, nil), CodeInvalidArgument, "outside"},
		{"rope tensor out of bounds", upd(0, good, good, &UpdateOptions{RopeCos: Tensor[float32]{Data: make([]float32, 3), Shape: []int64{2, 2}}}), CodeInvalidArgument, "RopeCos"},
	} {
		t.Run(tc.name, func(t *testing.T) { failsUnchanged(t, c, tc.code, tc.f, tc.frag) })
	}
	st := mkCache(t, &CacheOptions{Preset: PresetStatic, MaxCacheLen: 4, Config: &ModelConfig{NumHiddenLayers: 1}})
	must[KV](t)(st.Update(0, good, good, nil))
	failsUnchanged(t, st, CodeInvalidArgument, func() error {
		_, err := st.Update(0, good, good, &UpdateOptions{CachePosition: []int64{1, 2}})
		return err
	}, "cache_position")
	failsUnchanged(t, st, CodeOutOfRange, func() error {
		_, err := st.Update(0, rows(2, 4, 0), rows(2, 4, 0), nil)
		return err
	})
}

func nil0(_, _, _, _ int64) float32 { return 0 }

func TestOperationErrors(t *testing.T) {
	dyn := populated(t)
	st := mkCache(t, &CacheOptions{Preset: PresetStatic, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 1}})
	x := rows(2, 3, 0)
	must[KV](t)(st.Update(0, x, x, nil))
	sl := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 1, SlidingWindow: 2}})
	must[KV](t)(sl.Update(0, x, x, nil))
	fresh := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 2}})
	mixed := mkCache(t, &CacheOptions{Preset: PresetCustom, Layers: []LayerOptions{{Kind: LayerStatic, MaxCacheLen: 4}, {Kind: LayerStatic, MaxCacheLen: 4}}})
	must[KV](t)(mixed.Update(0, rows(1, 1, 0), rows(1, 1, 0), nil))
	must[KV](t)(mixed.Update(1, rows(2, 1, 0), rows(2, 1, 0), nil))
	other := mkCache(t, nil)
	must[KV](t)(other.Update(0, fill(2, 3, 3, 3, nil0), fill(2, 3, 3, 3, nil0), nil))
	first := mkCache(t, nil)
	must[KV](t)(first.Update(0, x, x, nil))

	for _, tc := range []struct {
		name string
		c    *Cache
		f    func(c *Cache) error
		code Code
		frag string
	}{
		{"EarlyInitialization without dtype", fresh, func(c *Cache) error {
			return c.EarlyInitialization(InitOptions{BatchSize: 1, NumKVHeads: 1, KHeadDim: 1})
		}, CodeInvalidArgument, "dtype"},
		{"EarlyInitialization with batch 0", fresh, func(c *Cache) error {
			return c.EarlyInitialization(InitOptions{NumKVHeads: 1, KHeadDim: 1, DType: DTypeFloat32})
		}, CodeInvalidArgument, "batch_size"},
		{"EarlyInitialization per-layer heads too short", fresh, func(c *Cache) error {
			return c.EarlyInitialization(InitOptions{BatchSize: 1, KHeadDim: 1, DType: DTypeFloat32, NumKVHeadsPerLayer: []int64{1}})
		}, CodeInvalidArgument, "NumKVHeadsPerLayer"},
		{"LayerInfo beyond the layers", dyn, func(c *Cache) error { _, err := c.LayerInfo(2); return err }, CodeOutOfRange, "layer"},
		{"LayerInfo of layer -1", dyn, func(c *Cache) error { _, err := c.LayerInfo(-1); return err }, CodeOutOfRange, "layer"},
		{"LayerView beyond the layers", dyn, func(c *Cache) error { _, err := c.LayerView(5); return err }, CodeOutOfRange, "layer"},
		{"LayerView of an uninitialized layer", fresh, func(c *Cache) error { _, err := c.LayerView(0); return err }, CodeInvalidState, "initialized"},
		{"SeqLength of layer -1", dyn, func(c *Cache) error { _, err := c.SeqLength(-1); return err }, CodeOutOfRange, "layer"},
		{"MaxLength of layer -2", dyn, func(c *Cache) error { _, err := c.MaxLength(-2); return err }, CodeOutOfRange, "layer"},
		{"MaxLength of layer 2^40", dyn, func(c *Cache) error { _, err := c.MaxLength(1 << 40); return err }, CodeOutOfRange, "layer"},
		{"UsableLength of -1 tokens", dyn, func(c *Cache) error { _, err := c.UsableLength(-1, 0); return err }, CodeInvalidArgument, "new_seq_length"},
		{"UsableLength of 2^31 tokens", dyn, func(c *Cache) error { _, err := c.UsableLength(1<<31, 0); return err }, CodeInvalidArgument, "new_seq_length"},
		{"MaskSizes of -1 tokens", dyn, func(c *Cache) error { _, _, err := c.MaskSizes(-1, 0); return err }, CodeInvalidArgument, "query_length"},
		{"BatchSize of disagreeing static layers", mixed, func(c *Cache) error { _, err := c.BatchSize(); return err }, CodeInvalidState, "batch"},
		{"SetPreviousAcceptedTokens of a plain cache", st, func(c *Cache) error { return c.SetPreviousAcceptedTokens(1) }, CodeUnsupported, "DFlash"},
		{"Crop past a sliding window", sl, func(c *Cache) error { return c.Crop(-1) }, CodeInvalidState, "Cache.ActivatePastRecording"},
		{"Reorder beyond the batch", dyn, func(c *Cache) error { return c.Reorder([]int64{0, 2}) }, CodeOutOfRange, "beam_idx"},
		{"Reorder with a negative index", dyn, func(c *Cache) error { return c.Reorder([]int64{-1, 0}) }, CodeOutOfRange, "beam_idx"},
		{"Reorder with no indices", dyn, func(c *Cache) error { return c.Reorder(nil) }, CodeInvalidArgument, ""},
		{"BatchRepeatInterleave(0)", dyn, func(c *Cache) error { return c.BatchRepeatInterleave(0) }, CodeInvalidArgument, "repeats"},
		{"BatchRepeatInterleave of a static cache", st, func(c *Cache) error { return c.BatchRepeatInterleave(2) }, CodeUnsupported, ""},
		{"BatchSelectIndices beyond the batch", dyn, func(c *Cache) error { return c.BatchSelectIndices([]int64{3}) }, CodeOutOfRange, "indices"},
		{"BatchSelectIndices of a static cache", st, func(c *Cache) error { return c.BatchSelectIndices([]int64{0}) }, CodeUnsupported, ""},
		{"BatchSplit of another batch size", dyn, func(c *Cache) error { _, err := c.BatchSplit(3, 1); return err }, CodeInvalidArgument, "full_batch_size"},
		{"BatchSplit into 0", dyn, func(c *Cache) error { _, err := c.BatchSplit(2, 0); return err }, CodeInvalidArgument, "split_size"},
		{"BatchSplit of an empty cache", fresh, func(c *Cache) error { _, err := c.BatchSplit(1, 1); return err }, CodeInvalidState, ""},
		{"FromBatchSplits of disagreeing caches", dyn, func(c *Cache) error { _, err := FromBatchSplits([]*Cache{first, other}); return err }, CodeShapeMismatch, ""},
		{"FromBatchSplits of nothing", dyn, func(c *Cache) error { _, err := FromBatchSplits(nil); return err }, CodeInvalidArgument, ""},
		{"Reserve(-1)", dyn, func(c *Cache) error { return c.Reserve(-1) }, CodeInvalidArgument, "tokens"},
		{"Reserve(2^31)", dyn, func(c *Cache) error { return c.Reserve(1 << 31) }, CodeInvalidArgument, "tokens"},
		{"Offload beyond the layers", dyn, func(c *Cache) error { return c.Offload(2) }, CodeOutOfRange, "layer"},
		{"Prefetch of layer -1", dyn, func(c *Cache) error { return c.Prefetch(-1) }, CodeOutOfRange, "layer"},
		{"UpdateConvState on an attention layer", dyn, func(c *Cache) error {
			_, err := c.UpdateConvState(0, Tensor[float32]{Data: []float32{1, 2}, Shape: []int64{2, 1, 1}}, nil)
			return err
		}, CodeInvalidArgument, "LinearAttention"},
		{"UpdateRecurrentState on an attention layer", dyn, func(c *Cache) error {
			_, err := c.UpdateRecurrentState(0, 0, Tensor[float32]{Data: []float32{1, 2}, Shape: []int64{2, 1}})
			return err
		}, CodeInvalidArgument, ""},
		{"UpdateRecurrentState of state -1", dyn, func(c *Cache) error {
			_, err := c.UpdateRecurrentState(0, -1, Tensor[float32]{Data: []float32{1, 2}, Shape: []int64{2, 1}})
			return err
		}, CodeOutOfRange, "state"},
		{"StateView of an attention layer", dyn, func(c *Cache) error { _, _, err := c.StateView(0, 0); return err }, CodeInvalidArgument, ""},
		{"HasPreviousState without linear layers", dyn, func(c *Cache) error { _, err := c.HasPreviousState(AllLayers, -1); return err }, CodeInvalidArgument, ""},
		{"PrepareStep of mismatched lists", dyn, func(c *Cache) error { _, err := c.PrepareStep(Inputs(x), nil); return err }, CodeInvalidArgument, "values"},
	} {
		t.Run(tc.name, func(t *testing.T) { failsUnchanged(t, tc.c, tc.code, func() error { return tc.f(tc.c) }, tc.frag) })
	}
}

func TestLinearErrors(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetMamba, Config: &ModelConfig{NumHiddenLayers: 2, ConvKernel: 4}})
	x := Tensor[float32]{Data: []float32{1, 2, 3, 4, 5, 6}, Shape: []int64{1, 2, 3}}
	must[View](t)(c.UpdateConvState(0, x, nil))
	for _, tc := range []struct {
		name string
		f    func() error
		code Code
		frag string
	}{
		{"conv state index beyond the states", func() error {
			_, err := c.UpdateConvState(0, x, &ConvUpdateOptions{StateIndex: 1})
			return err
		}, CodeOutOfRange, "state"},
		{"conv input of 2 dimensions", func() error {
			_, err := c.UpdateConvState(0, Tensor[float32]{Data: x.Data, Shape: []int64{2, 3}}, nil)
			return err
		}, CodeShapeMismatch, "ndim"},
		{"conv input with other channels", func() error {
			_, err := c.UpdateConvState(0, Tensor[float32]{Data: x.Data, Shape: []int64{1, 3, 2}}, nil)
			return err
		}, CodeShapeMismatch, "channels"},
		{"conv input of another dtype", func() error {
			_, err := c.UpdateConvState(0, Tensor[BFloat16]{Data: make([]BFloat16, 6), Shape: []int64{1, 2, 3}}, nil)
			return err
		}, CodeDTypeMismatch, "dtype"},
		{"legacy cache position of another length", func() error {
			_, err := c.UpdateConvState(0, x, &ConvUpdateOptions{CachePosition: []int64{0}})
			return err
		}, CodeInvalidArgument, "cache_position"},
		{"conv layer beyond the layers", func() error { _, err := c.UpdateConvState(2, x, nil); return err }, CodeOutOfRange, "layer"},
		{"recurrent state of 7 dimensions", func() error {
			_, err := c.UpdateRecurrentState(0, 0, Tensor[float32]{Data: []float32{1}, Shape: []int64{1, 1, 1, 1, 1, 1, 1}})
			return err
		}, CodeShapeMismatch, "dimensions"},
		{"recurrent state of 0 dimensions", func() error {
			_, err := c.UpdateRecurrentState(0, 0, Tensor[float32]{Data: []float32{1}, Shape: []int64{}})
			return err
		}, CodeShapeMismatch, "ndim"},
		{"StateView beyond the states", func() error { _, _, err := c.StateView(0, 1); return err }, CodeOutOfRange, "state"},
		{"HasPreviousState of state -2", func() error { _, err := c.HasPreviousState(0, -2); return err }, CodeOutOfRange, "state_index"},
		{"HasPreviousState of layer -2", func() error { _, err := c.HasPreviousState(-2, -1); return err }, CodeOutOfRange, "layer"},
		{"crop without recording", func() error { return c.Crop(-1) }, CodeInvalidState, "Cache.ActivatePastRecording"},
	} {
		t.Run(tc.name, func(t *testing.T) { failsUnchanged(t, c, tc.code, tc.f, tc.frag) })
	}
}

func TestClosedCache(t *testing.T) {
	c, err := New(nil)
	ok(t, err)
	x := rows(1, 1, 0)
	must[KV](t)(c.Update(0, x, x, nil))
	closesOnce(t, c.Close)
	if c.NumLayers() != 0 {
		t.Fatal("NumLayers of a closed cache")
	}
	for name, f := range map[string]func() error{
		"Clone":                 func() error { _, err := c.Clone(); return err },
		"EarlyInitialization":   func() error { return c.EarlyInitialization(InitOptions{}) },
		"LayerInfo":             func() error { _, err := c.LayerInfo(0); return err },
		"LayerView":             func() error { _, err := c.LayerView(0); return err },
		"SeqLength":             func() error { _, err := c.SeqLength(0); return err },
		"MaxLength":             func() error { _, err := c.MaxLength(0); return err },
		"UsableLength":          func() error { _, err := c.UsableLength(1, 0); return err },
		"MaskSizes":             func() error { _, _, err := c.MaskSizes(1, 0); return err },
		"BatchSize":             func() error { _, err := c.BatchSize(); return err },
		"Memory":                func() error { _, err := c.Memory(); return err },
		"Update":                func() error { _, err := c.Update(0, x, x, nil); return err },
		"UpdateAll":             func() error { return c.UpdateAll(Inputs(x), Inputs(x), nil, nil) },
		"Crop":                  func() error { return c.Crop(-1) },
		"ActivatePastRecording": func() error { return c.ActivatePastRecording() },
		"Reorder":               func() error { return c.Reorder([]int64{0}) },
		"BatchRepeatInterleave": func() error { return c.BatchRepeatInterleave(2) },
		"BatchSelectIndices":    func() error { return c.BatchSelectIndices([]int64{0}) },
		"BatchSplit":            func() error { _, err := c.BatchSplit(1, 1); return err },
		"FromBatchSplits":       func() error { _, err := FromBatchSplits([]*Cache{c}); return err },
		"Reserve":               func() error { return c.Reserve(1) },
		"Reset":                 func() error { return c.Reset() },
		"Offload":               func() error { return c.Offload(0) },
		"Prefetch":              func() error { return c.Prefetch(0) },
		"UpdateConvState":       func() error { _, err := c.UpdateConvState(0, x, nil); return err },
		"UpdateRecurrentState":  func() error { _, err := c.UpdateRecurrentState(0, 0, x); return err },
		"StateView":             func() error { _, _, err := c.StateView(0, 0); return err },
		"HasPreviousState":      func() error { _, err := c.HasPreviousState(0, 0); return err },
		"PrepareStep":           func() error { _, err := c.PrepareStep(Inputs(x), Inputs(x)); return err },
		"NewEncoderDecoder":     func() error { _, err := NewEncoderDecoder(c, mkCache(t, nil)); return err },
	} {
		if err := f(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s on a closed cache: %v, want ErrClosed", name, err)
		}
	}
	var zero Cache // the zero Cache is a closed one
	if _, err := zero.SeqLength(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("zero Cache: %v", err)
	}
	var nilCache *Cache
	if err := nilCache.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := nilCache.Memory(); !errors.Is(err, ErrClosed) {
		t.Fatalf("nil *Cache: %v", err)
	}
}
