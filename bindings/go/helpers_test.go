//go:build cgo

package kvcache

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// mkCache creates a cache that the test closes.
func mkCache(t testing.TB, opts *CacheOptions) *Cache {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fill returns a compact float32 tensor whose element (b, h, s, d) is
// f(b, h, s, d).
func fill(b, h, s, d int64, f func(b, h, s, d int64) float32) Tensor[float32] {
	t := NewTensor[float32](b, h, s, d)
	for i0 := int64(0); i0 < b; i0++ {
		for i1 := int64(0); i1 < h; i1++ {
			for i2 := int64(0); i2 < s; i2++ {
				for i3 := int64(0); i3 < d; i3++ {
					t.Set(f(i0, i1, i2, i3), i0, i1, i2, i3)
				}
			}
		}
	}
	return t
}

// pos returns a tensor of n tokens whose every element is its token's
// position start+i (plus 1000*row), so contents name positions.
func pos(b, h, start, n, d int64) Tensor[float32] {
	return fill(b, h, n, d, func(bi, _, s, _ int64) float32 { return float32(1000*bi + start + s) })
}

// toks is the [1, 1, n, 1] tensor of the values, the notation of the
// worked examples in docs/semantics.md.
func toks(vals ...float32) Tensor[float32] {
	return Tensor[float32]{Data: append([]float32(nil), vals...), Shape: []int64{1, 1, int64(len(vals)), 1}}
}

// seqOf reads the tokens of row b, head 0, channel 0 of a view.
func seqOf(t testing.TB, v View, b int64) []float32 {
	t.Helper()
	if !v.Valid() {
		t.Fatalf("seqOf: stale view")
	}
	out := make([]float32, v.Dim(2))
	for i := range out {
		out[i] = v.At(b, 0, int64(i), 0)
	}
	return out
}

// flat reads all elements of a view in row-major order.
func flat(t testing.TB, v View) []float32 {
	t.Helper()
	n := v.NDim()
	if n == 0 {
		return nil
	}
	shape := v.Shape()
	var out []float32
	idx := make([]int64, n)
	for {
		for _, s := range shape {
			if s == 0 {
				return out
			}
		}
		out = append(out, v.At(idx...))
		i := n - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < shape[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out
		}
	}
}

func eqFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func wantSeq(t testing.TB, what string, v View, want ...float32) {
	t.Helper()
	if got := seqOf(t, v, 0); !eqFloats(got, want) {
		t.Fatalf("%s: tokens %v, want %v", what, got, want)
	}
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var sentinels = map[Code]*Error{
	CodeInvalidArgument: ErrInvalidArgument, CodeOutOfRange: ErrOutOfRange, CodeDTypeMismatch: ErrDTypeMismatch,
	CodeShapeMismatch: ErrShapeMismatch, CodeDeviceMismatch: ErrDeviceMismatch, CodeUnsupported: ErrUnsupported,
	CodeInvalidState: ErrInvalidState, CodeOutOfMemory: ErrOutOfMemory, CodeNoDevice: ErrNoDevice,
	CodeVersionMismatch: ErrVersionMismatch, CodeInternal: ErrInternal, CodeIO: ErrIO,
}

// wantErr checks that err is an *Error of code whose message names
// something (each of the fragments, if given).
func wantErr(t testing.TB, err error, code Code, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", code)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if e.Code != code || !errors.Is(err, sentinels[code]) {
		t.Fatalf("error %q has code %v, want %v", e.Message, e.Code, code)
	}
	for c, s := range sentinels {
		if c != code && errors.Is(err, s) {
			t.Fatalf("error %v also matches %v", err, c)
		}
	}
	if e.Message == "" || !strings.Contains(err.Error(), code.String()) {
		t.Fatalf("error %q lacks a message or its code name", err.Error())
	}
	for _, f := range fragments {
		if !strings.Contains(e.Message, f) {
			t.Fatalf("error message %q does not mention %q", e.Message, f)
		}
	}
}

// snap is everything observable about a cache, to check that a failed call
// changed nothing.
type snap struct {
	Layers int
	Infos  []LayerInfo
	Seq    []int64
	Views  [][2][]float32
	Conv   [][][]float32
	Mem    MemoryInfo
}

func snapshot(t testing.TB, c *Cache) snap {
	t.Helper()
	s := snap{Layers: c.NumLayers(), Mem: must[MemoryInfo](t)(c.Memory())}
	for l := 0; l < s.Layers; l++ {
		info := must[LayerInfo](t)(c.LayerInfo(l))
		s.Infos = append(s.Infos, info)
		n, err := c.SeqLength(l) // a cache of linear layers only has no sequence length
		if err != nil {
			n = -1000 - int64(err.(*Error).Code)
		}
		s.Seq = append(s.Seq, n)
		var kv [2][]float32
		if info.IsInitialized && info.Kind != LayerLinear {
			v := must[KV](t)(c.LayerView(l))
			kv = [2][]float32{flat(t, v.Key), flat(t, v.Value)}
		}
		s.Views = append(s.Views, kv)
		var states [][]float32
		if info.IsLinear || info.Kind == LayerLinearDynamic {
			for i := 0; i < int(info.NumStates); i++ {
				conv, rec, err := c.StateView(l, i)
				ok(t, err)
				states = append(states, flat(t, conv), flat(t, rec))
			}
		}
		s.Conv = append(s.Conv, states)
	}
	return s
}

func unchanged(t testing.TB, c *Cache, before snap) {
	t.Helper()
	if after := snapshot(t, c); !reflect.DeepEqual(before, after) {
		t.Fatalf("a failed call changed the cache:\nbefore %+v\nafter  %+v", before, after)
	}
}

// failsUnchanged runs f on c, wants an error of code, and checks that the
// cache is as it was.
func failsUnchanged(t testing.TB, c *Cache, code Code, f func() error, fragments ...string) {
	t.Helper()
	before := snapshot(t, c)
	wantErr(t, f(), code, fragments...)
	unchanged(t, c, before)
}

// goWorkers runs worker(g) for g in [0, n), each on a goroutine of its own; the function it returns waits for
// them all and reports every error.
func goWorkers(t testing.TB, n int, worker func(g int) error) (wait func()) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			errs <- worker(g)
		}(g)
	}
	return func() {
		t.Helper()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	}
}

// closesOnce closes an object twice (Close is idempotent) and checks that its C handle was freed exactly once.
func closesOnce(t testing.TB, close func() error) {
	t.Helper()
	live := liveHandles.Load()
	ok(t, close())
	ok(t, close())
	if liveHandles.Load() != live-1 {
		t.Fatal("closing twice did not free the handle exactly once")
	}
}

// config returns a model config of the layer types.
func config(types ...LayerType) *ModelConfig {
	return &ModelConfig{NumHiddenLayers: uint32(len(types)), LayerTypes: types}
}
