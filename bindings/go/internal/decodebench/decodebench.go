//go:build cgo

// Package decodebench is the decode-append benchmark of the Go binding: the
// workload of bench/bench_decode.c (a DynamicCache shaped like Llama-3-8B:
// 32 layers, 8 KV heads, head_dim 128, bfloat16, batch 1; single-token
// steps at a fixed context, cropped back after each repetition) driven
// through the binding, next to the same loop called from C in this process.
// cmd/kvcache-bench and the package's testing.B benchmarks use it.
package decodebench

import (
	"fmt"
	"time"

	kvcache "github.com/kvcache/kvcache/bindings/go"
)

// The shape of the C benchmark.
const (
	Layers     = 32
	KVHeads    = 8
	HeadDim    = 128
	TokenElems = KVHeads * HeadDim
	// StepBytes is the new K+V bytes of one decode step, all layers.
	StepBytes = TokenElems * 2 * Layers * 2
)

// Mode is how a step's 32 layers reach the library.
type Mode int

// Modes of GoCache.TimeSteps.
const (
	ModeStep       Mode = iota // one Step.Update: a prepared kvc_cache_update_all
	ModeUpdateAll              // Cache.UpdateAll: kvc_cache_update_all, inputs pinned per call
	ModeUpdateLoop             // 32 x Cache.Update
	numModes
)

func (m Mode) String() string {
	return [...]string{"step", "update_all", "update_loop"}[m]
}

// Data is the step data: for each step and layer a key and a value token,
// generated like bench_common.h's bench_fill_bf16 (seed 7), all slices of
// one backing array, as a model writing its K/V into one buffer has them.
type Data struct {
	Steps     int
	stepBytes []kvcache.BFloat16 // [steps][layers][2][TokenElems]
	Keys      [][]kvcache.Tensor[kvcache.BFloat16]
	Values    [][]kvcache.Tensor[kvcache.BFloat16]
	KeyIn     [][]kvcache.Input
	ValueIn   [][]kvcache.Input
}

// rand is bench_common.h's xorshift64*.
func rand(state *uint64) uint64 {
	x := *state
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*state = x
	return x * 2685821657736338717
}

// fillBF16 is bench_fill_bf16: values with |x| in [0.5, 1).
func fillBF16(dst []kvcache.BFloat16, seed uint64) {
	st := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i < len(dst); {
		r := rand(&st)
		for k := 0; k < 4 && i < len(dst); k, i = k+1, i+1 {
			bits := uint16(r >> (16 * k))
			dst[i] = kvcache.BFloat16(bits&0x807F | 0x3F00)
		}
	}
}

// NewData generates the data of steps decode steps.
func NewData(steps int) *Data {
	d := &Data{Steps: steps, stepBytes: make([]kvcache.BFloat16, steps*Layers*2*TokenElems)}
	fillBF16(d.stepBytes, 7)
	for s := 0; s < steps; s++ {
		var ks, vs []kvcache.Tensor[kvcache.BFloat16]
		for l := 0; l < Layers; l++ {
			off := ((s*Layers + l) * 2) * TokenElems
			ks = append(ks, kvcache.Tensor[kvcache.BFloat16]{
				Data: d.stepBytes[off : off+TokenElems], Shape: []int64{1, KVHeads, 1, HeadDim}})
			vs = append(vs, kvcache.Tensor[kvcache.BFloat16]{
				Data: d.stepBytes[off+TokenElems : off+2*TokenElems], Shape: []int64{1, KVHeads, 1, HeadDim}})
		}
		d.Keys = append(d.Keys, ks)
		d.Values = append(d.Values, vs)
		d.KeyIn = append(d.KeyIn, kvcache.Inputs(ks...))
		d.ValueIn = append(d.ValueIn, kvcache.Inputs(vs...))
	}
	return d
}

// prefillBytes returns the prefill keys and values of context tokens
// (seeds 11 and 13, as bench_decode).
func (d *Data) prefillBytes(context int64) (k, v []kvcache.BFloat16) {
	n := int(context) * TokenElems
	k, v = make([]kvcache.BFloat16, n), make([]kvcache.BFloat16, n)
	fillBF16(k, 11)
	fillBF16(v, 13)
	return k, v
}

// GoCache is a cache driven through the binding.
type GoCache struct {
	Cache   *kvcache.Cache
	Context int64
	steps   []*kvcache.Step
	out     []kvcache.KV
	d       *Data
}

// NewGoCache creates a DynamicCache from a 32-layer config, reserves room
// for context + steps tokens and prefills context tokens, through the
// binding.
func NewGoCache(d *Data, context int64) (*GoCache, error) {
	cfg := kvcache.ModelConfig{NumHiddenLayers: Layers}
	c, err := kvcache.New(&kvcache.CacheOptions{Preset: kvcache.PresetDynamic, Config: &cfg})
	if err != nil {
		return nil, err
	}
	if err := c.Reserve(context + int64(d.Steps)); err != nil {
		c.Close()
		return nil, err
	}
	k, v := d.prefillBytes(context)
	shape := []int64{1, KVHeads, context, HeadDim}
	ks := make([]kvcache.Input, Layers)
	vs := make([]kvcache.Input, Layers)
	for l := range ks {
		ks[l] = kvcache.Tensor[kvcache.BFloat16]{Data: k, Shape: shape}
		vs[l] = kvcache.Tensor[kvcache.BFloat16]{Data: v, Shape: shape}
	}
	if err := c.UpdateAll(ks, vs, nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	g := &GoCache{Cache: c, Context: context, d: d, out: make([]kvcache.KV, Layers)}
	for s := 0; s < d.Steps; s++ {
		st, err := c.PrepareStep(d.KeyIn[s], d.ValueIn[s])
		if err != nil {
			g.Close()
			return nil, err
		}
		g.steps = append(g.steps, st)
	}
	return g, nil
}

// Close frees the cache and its steps.
func (g *GoCache) Close() {
	for _, s := range g.steps {
		s.Close()
	}
	g.Cache.Close()
}

// Step runs step s (all layers) in mode.
func (g *GoCache) Step(mode Mode, s int) error {
	var err error
	switch mode {
	case ModeStep:
		err = g.steps[s].Update()
	case ModeUpdateAll:
		err = g.Cache.UpdateAll(g.d.KeyIn[s], g.d.ValueIn[s], nil, g.out)
	case ModeUpdateLoop:
		ks, vs := g.d.Keys[s], g.d.Values[s]
		for l := 0; l < Layers && err == nil; l++ {
			g.out[l], err = g.Cache.Update(l, ks[l], vs[l], nil)
		}
	}
	return err
}

// RunSteps runs all the steps once in mode, untimed.
func (g *GoCache) RunSteps(mode Mode) error {
	for s := 0; s < g.d.Steps; s++ {
		if err := g.Step(mode, s); err != nil {
			return err
		}
	}
	return nil
}

// CropBack removes everything beyond the prefill and checks the length.
func (g *GoCache) CropBack() error {
	n, err := g.Cache.SeqLength(0)
	if err != nil {
		return err
	}
	if n > g.Context {
		if err := g.Cache.Crop(g.Context - n); err != nil {
			return err
		}
	}
	if n, err := g.Cache.SeqLength(0); err != nil || n != g.Context {
		return fmt.Errorf("crop back: %d tokens, want %d (%v)", n, g.Context, err)
	}
	return nil
}

// TimeSteps times one repetition in mode, in ns per token, then crops back
// (not timed).
func (g *GoCache) TimeSteps(mode Mode) (float64, error) {
	t0 := time.Now()
	err := g.RunSteps(mode)
	ns := float64(time.Since(t0).Nanoseconds()) / float64(g.d.Steps)
	if err != nil {
		return 0, err
	}
	return ns, g.CropBack()
}

// Verify checks, after the steps ran (before CropBack), that the length
// grew by the steps and that the last layer's newest token holds the last
// step's bytes: a benchmark of a wrong result is worthless.
func (g *GoCache) Verify() error {
	want := g.Context + int64(g.d.Steps)
	if n, err := g.Cache.SeqLength(0); err != nil || n != want {
		return fmt.Errorf("seq_length %d after the steps, want %d (%v)", n, want, err)
	}
	kv, err := g.Cache.LayerView(Layers - 1)
	if err != nil {
		return err
	}
	for i, view := range []kvcache.View{kv.Key, kv.Value} {
		src := g.d.Keys[g.d.Steps-1][Layers-1]
		if i == 1 {
			src = g.d.Values[g.d.Steps-1][Layers-1]
		}
		t, err := kvcache.As[kvcache.BFloat16](view)
		if err != nil {
			return err
		}
		for h := int64(0); h < KVHeads; h++ {
			for x := int64(0); x < HeadDim; x++ {
				if t.At(0, h, want-1, x) != src.At(0, h, 0, x) {
					return fmt.Errorf("the newest token differs from what was appended (head %d, element %d)", h, x)
				}
			}
		}
	}
	return nil
}
