//go:build cgo

package kvcache

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

// rows is a [b, 2, n, 3] tensor whose element (b, h, s, d) is
// 1000*b + 100*h + 10*s + d: a row, head, token and channel can be read
// back from any value.
func rows(b, n int64, start int64) Tensor[float32] {
	return fill(b, 2, n, 3, func(bi, h, s, d int64) float32 { return float32(1000*bi + 100*h + 10*(start+s) + d) })
}

func TestReorder(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 2}})
	x := rows(4, 3, 0)
	for l := 0; l < 2; l++ {
		must[KV](t)(c.Update(l, x, x, nil))
	}
	ok(t, c.Reorder([]int64{0, 0, 3, 1}))
	for l := 0; l < 2; l++ {
		kv := must[KV](t)(c.LayerView(l))
		for b, src := range []int64{0, 0, 3, 1} {
			for s := int64(0); s < 3; s++ {
				if got, want := kv.Value.At(int64(b), 1, s, 2), x.At(src, 1, s, 2); got != want {
					t.Fatalf("layer %d row %d token %d: %g, want %g", l, b, s, got, want)
				}
			}
		}
	}
	// Static layers reorder too.
	st := mkCache(t, &CacheOptions{Preset: PresetStatic, MaxCacheLen: 4, Config: &ModelConfig{NumHiddenLayers: 1}})
	must[KV](t)(st.Update(0, x, x, nil))
	ok(t, st.Reorder([]int64{3, 2, 1, 0}))
	if got := must[KV](t)(st.LayerView(0)).Key.At(0, 0, 2, 0); got != x.At(3, 0, 2, 0) {
		t.Fatalf("static reorder: %g", got)
	}
}

func TestBatchRepeatAndSelect(t *testing.T) {
	c := mkCache(t, nil)
	x := rows(2, 2, 0)
	must[KV](t)(c.Update(0, x, x, nil))
	ok(t, c.BatchRepeatInterleave(3))
	kv := must[KV](t)(c.LayerView(0))
	if kv.Key.Dim(0) != 6 {
		t.Fatalf("batch after repeat_interleave(3): %d", kv.Key.Dim(0))
	}
	for b := int64(0); b < 6; b++ {
		if got, want := kv.Key.At(b, 1, 1, 1), x.At(b/3, 1, 1, 1); got != want {
			t.Fatalf("row %d: %g, want %g", b, got, want)
		}
	}
	ok(t, c.BatchSelectIndices([]int64{5, 0}))
	kv = must[KV](t)(c.LayerView(0))
	if kv.Key.Dim(0) != 2 || kv.Key.At(0, 0, 0, 0) != x.At(1, 0, 0, 0) || kv.Key.At(1, 0, 0, 0) != x.At(0, 0, 0, 0) {
		t.Fatalf("after select (5, 0): %v", flat(t, kv.Key))
	}
}

func TestBatchSplitAndStack(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 2}})
	x := rows(5, 3, 0)
	for l := 0; l < 2; l++ {
		must[KV](t)(c.Update(l, x, x, nil))
	}
	before := snapshot(t, c)
	splits := must[[]*Cache](t)(c.BatchSplit(5, 2))
	for _, s := range splits {
		defer s.Close()
	}
	unchanged(t, c, before)
	if len(splits) != 3 {
		t.Fatalf("%d splits, want 3", len(splits))
	}
	for i, s := range splits {
		kv := must[KV](t)(s.LayerView(1))
		wantRows := []int64{2, 2, 1}[i]
		if kv.Key.Dim(0) != wantRows || kv.Key.At(0, 1, 2, 1) != x.At(int64(2*i), 1, 2, 1) {
			t.Fatalf("split %d: %v", i, kv.Key)
		}
	}
	stacked := must[*Cache](t)(FromBatchSplits(splits))
	defer stacked.Close()
	unchanged(t, stacked, before)
	// Splitting does not alias: the splits are caches of their own.
	y := rows(2, 1, 3)
	must[KV](t)(splits[0].Update(0, y, y, nil))
	unchanged(t, c, before)
}

func TestCloneIsDeep(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 2, SlidingWindow: 4,
		LayerTypes: []LayerType{LayerTypeFullAttention, LayerTypeSlidingAttention}}})
	x := rows(1, 6, 0)
	for l := 0; l < 2; l++ {
		must[KV](t)(c.Update(l, x, x, nil))
	}
	before := snapshot(t, c)
	d := must[*Cache](t)(c.Clone())
	defer d.Close()
	unchanged(t, d, before)
	y := rows(1, 1, 6)
	must[KV](t)(d.Update(0, y, y, nil))
	must[KV](t)(d.Update(1, y, y, nil))
	unchanged(t, c, before)
	if n := must[int64](t)(d.SeqLength(0)); n != 7 {
		t.Fatalf("clone after +1: %d", n)
	}
	ok(t, d.Reset())
	unchanged(t, c, before)
}

func TestReserveResetMemory(t *testing.T) {
	c := mkCache(t, nil)
	ok(t, c.Reserve(100))
	x := rows(1, 10, 0)
	kv := must[KV](t)(c.Update(0, x, x, nil))
	first := kv.Key.Data()
	m := must[MemoryInfo](t)(c.Memory())
	tokenBytes := uint64(2 * 2 * 3 * 4) // K and V of one token: 2 heads x 3 channels x float32
	if m.BytesReserved != 100*tokenBytes || m.BytesUsed != 10*tokenBytes {
		t.Fatalf("memory after reserve(100) and 10 tokens: %+v", m)
	}
	for i := int64(10); i < 100; i++ {
		y := rows(1, 1, i)
		kv = must[KV](t)(c.Update(0, y, y, nil))
	}
	if kv.Key.Data() != first {
		t.Fatal("a reserved layer moved its storage within the reservation")
	}
	if got := kv.Key.At(0, 1, 99, 2); got != 100+990+2 {
		t.Fatalf("token 99: %g", got)
	}
	ok(t, c.Reset())
	if n := must[int64](t)(c.SeqLength(0)); n != 0 {
		t.Fatalf("seq length after reset: %d", n)
	}
	if m := must[MemoryInfo](t)(c.Memory()); m.BytesUsed != 0 || m.BytesReserved != 100*tokenBytes {
		t.Fatalf("memory after reset: %+v", m)
	}
}

func TestUpdateAllAndStep(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 3}})
	ref := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 3}})
	var ks, vs []Tensor[float32]
	for l := int64(0); l < 3; l++ {
		ks = append(ks, fill(1, 2, 4, 3, func(_, h, s, d int64) float32 { return float32(l*1000 + h*100 + s*10 + d) }))
		vs = append(vs, fill(1, 2, 4, 3, func(_, h, s, d int64) float32 { return -float32(l*1000 + h*100 + s*10 + d) }))
	}
	out := make([]KV, 3)
	ok(t, c.UpdateAll(Inputs(ks...), Inputs(vs...), nil, out))
	for l := 0; l < 3; l++ {
		want := must[KV](t)(ref.Update(l, ks[l], vs[l], nil))
		if !eqFloats(flat(t, out[l].Key), flat(t, want.Key)) || !eqFloats(flat(t, out[l].Value), flat(t, want.Value)) {
			t.Fatalf("layer %d: UpdateAll differs from Update", l)
		}
	}
	ok(t, c.UpdateAll(Inputs(ks...), Inputs(vs...), nil, nil))

	// A prepared step reads the buffers' current contents at each Update.
	k1 := []Tensor[float32]{NewTensor[float32](1, 2, 1, 3), NewTensor[float32](1, 2, 1, 3), NewTensor[float32](1, 2, 1, 3)}
	v1 := []Tensor[float32]{NewTensor[float32](1, 2, 1, 3), NewTensor[float32](1, 2, 1, 3), NewTensor[float32](1, 2, 1, 3)}
	step := must[*Step](t)(c.PrepareStep(Inputs(k1...), Inputs(v1...)))
	defer step.Close()
	if step.NumLayers() != 3 {
		t.Fatal(step.NumLayers())
	}
	if step.KV(0).Key.Valid() {
		t.Fatal("views before the first Update")
	}
	for i := 0; i < 5; i++ {
		for l := range k1 {
			for j := range k1[l].Data {
				k1[l].Data[j] = float32(100*i + 10*l + j)
				v1[l].Data[j] = -k1[l].Data[j]
			}
		}
		ok(t, step.Update())
		for l := 0; l < 3; l++ {
			kv := step.KV(l)
			if kv.Key.Dim(2) != int64(9+i) || kv.Key.At(0, 1, int64(8+i), 2) != float32(100*i+10*l+5) ||
				kv.Value.At(0, 1, int64(8+i), 2) != -float32(100*i+10*l+5) {
				t.Fatalf("step %d layer %d: %v", i, l, kv.Key)
			}
		}
	}
	if testing.AllocsPerRun(100, func() {
		if err := step.Update(); err != nil {
			t.Fatal(err)
		}
	}) != 0 {
		t.Fatal("Step.Update allocates")
	}
	if testing.AllocsPerRun(100, func() {
		if _, err := c.Update(0, k1[0], v1[0], nil); err != nil {
			t.Fatal(err)
		}
	}) != 0 {
		t.Fatal("Update allocates")
	}
	kv := step.KV(0)
	ok(t, c.Crop(-1))
	if kv.Key.Valid() {
		t.Fatal("a step's views survive a crop")
	}
	ok(t, step.Close())
	ok(t, step.Close())
	wantErr(t, step.Update(), CodeInvalidState)
	// A step refuses views into a cache: the step would invalidate them.
	_, err := c.PrepareStep([]Input{must[KV](t)(c.LayerView(0)).Key}, []Input{ks[0]})
	wantErr(t, err, CodeInvalidArgument, "view")
}

func TestUpdateAllIsAtomic(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetDynamic, Config: &ModelConfig{NumHiddenLayers: 3}})
	x := rows(1, 2, 0)
	ok(t, c.UpdateAll(Inputs(x, x, x), Inputs(x, x, x), nil, nil))
	bad := rows(2, 1, 0) // another batch size
	y := rows(1, 1, 2)
	failsUnchanged(t, c, CodeShapeMismatch, func() error { return c.UpdateAll(Inputs(y, y, bad), Inputs(y, y, y), nil, nil) }, "keys[2]")
	failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.UpdateAll(Inputs(y, y), Inputs(y), nil, nil) })
	failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.UpdateAll(Inputs(y), Inputs(y), nil, make([]KV, 2)) })
	failsUnchanged(t, c, CodeShapeMismatch, func() error { return c.UpdateAll([]Input{y, nil, y}, Inputs(y, y, y), nil, nil) })
}

func TestNewFromTensors(t *testing.T) {
	x, y := rows(2, 3, 0), rows(2, 5, 0)
	y2 := rows(2, 5, 7)
	c := must[*Cache](t)(NewFromTensors(nil, Inputs(x, y), Inputs(x, y2)))
	defer c.Close()
	if c.NumLayers() != 2 {
		t.Fatal(c.NumLayers())
	}
	if kv := must[KV](t)(c.LayerView(1)); kv.Key.Dim(2) != 5 || !eqFloats(flat(t, kv.Key), y.Data) || !eqFloats(flat(t, kv.Value), y2.Data) {
		t.Fatal("layer 1 holds other tensors")
	}
	st := must[*Cache](t)(NewFromTensors(&CacheOptions{Preset: PresetStatic, MaxCacheLen: 8, Config: &ModelConfig{NumHiddenLayers: 1}},
		Inputs(x), Inputs(x)))
	defer st.Close()
	if n := must[int64](t)(st.SeqLength(0)); n != 3 {
		t.Fatalf("static from tensors: seq length %d", n)
	}
	empty := must[*Cache](t)(NewFromTensors(nil, nil, nil))
	defer empty.Close()
	if empty.NumLayers() != 0 {
		t.Fatal(empty.NumLayers())
	}
	live := liveHandles.Load()
	_, err := NewFromTensors(nil, Inputs(x, y), Inputs(x))
	wantErr(t, err, CodeInvalidArgument)
	_, err = NewFromTensors(nil, Inputs(x, rows(3, 1, 0)), Inputs(x, x))
	wantErr(t, err, CodeShapeMismatch, "keys[1]")
	_, err = NewFromTensors(&CacheOptions{Preset: PresetStatic, MaxCacheLen: 2, Config: &ModelConfig{NumHiddenLayers: 1}}, Inputs(x), Inputs(x))
	wantErr(t, err, CodeOutOfRange)
	if liveHandles.Load() != live {
		t.Fatal("a failed NewFromTensors left a cache behind")
	}
}

func TestStridedInputs(t *testing.T) {
	c := mkCache(t, nil)
	// [batch, seq, heads, dim] memory presented as [batch, heads, seq, dim].
	const b, s, h, d = 1, 3, 2, 4
	mem := make([]float32, b*s*h*d)
	for i := range mem {
		mem[i] = float32(i)
	}
	tr := Tensor[float32]{Data: mem, Shape: []int64{b, h, s, d}, Strides: []int64{s * h * d, d, h * d, 1}}
	kv := must[KV](t)(c.Update(0, tr, tr, nil))
	for hi := int64(0); hi < h; hi++ {
		for si := int64(0); si < s; si++ {
			for di := int64(0); di < d; di++ {
				if got, want := kv.Key.At(0, hi, si, di), tr.At(0, hi, si, di); got != want {
					t.Fatalf("(%d, %d, %d): %g, want %g", hi, si, di, got, want)
				}
			}
		}
	}
	// Broadcast: one token repeated over heads with stride 0.
	bc := Tensor[float32]{Data: []float32{1, 2, 3, 4}, Shape: []int64{1, 2, 1, 4}, Strides: []int64{0, 0, 0, 1}}
	kv = must[KV](t)(c.Update(0, bc, bc, nil))
	if kv.Key.At(0, 1, 3, 2) != 3 || kv.Key.At(0, 0, 3, 2) != 3 {
		t.Fatal("broadcast input")
	}
	// Negative strides from an offset: the tokens reversed.
	rev := Tensor[float32]{Data: mem[:s*d], Shape: []int64{1, 1, s, d}, Strides: []int64{0, 0, -d, 1}, Offset: (s - 1) * d}
	c2 := mkCache(t, nil)
	kv = must[KV](t)(c2.Update(0, rev, rev, nil))
	if kv.Key.At(0, 0, 0, 1) != mem[(s-1)*d+1] || kv.Key.At(0, 0, s-1, 1) != mem[1] {
		t.Fatal("negative strides")
	}
	// Views out of a cache and copies of them are inputs too.
	c3 := mkCache(t, nil)
	kv3 := must[KV](t)(c3.Update(0, must[KV](t)(c.LayerView(0)).Key, must[KV](t)(c.LayerView(0)).Value, nil))
	if !eqFloats(flat(t, kv3.Key), flat(t, must[KV](t)(c.LayerView(0)).Key)) {
		t.Fatal("a view as input")
	}
	cp := must[View](t)(kv3.Key.Copy())
	ok(t, c3.Reset())
	kv3 = must[KV](t)(c3.Update(0, cp, cp, nil))
	if !eqFloats(flat(t, kv3.Key), flat(t, cp)) {
		t.Fatal("a copied view as input")
	}
	// ExternalTensor: memory Go does not manage (here: a cache's).
	src := must[KV](t)(c.LayerView(0)).Key
	ext := ExternalTensor{Data: src.Data(), Device: CPU, DataType: src.DataType(), Shape: src.Shape(), Strides: src.Strides()}
	c4 := mkCache(t, nil)
	if kv4 := must[KV](t)(c4.Update(0, ext, &ext, nil)); !eqFloats(flat(t, kv4.Value), flat(t, src)) {
		t.Fatal("an external tensor as input")
	}
}

func TestViews(t *testing.T) {
	c := mkCache(t, nil)
	x := rows(1, 2, 0)
	kv := must[KV](t)(c.Update(0, x, x, nil))
	if !kv.Key.Valid() || kv.Key.NDim() != 4 || kv.Key.Stride(3) != 1 || kv.Key.NumElements() != 12 {
		t.Fatalf("view %v", kv.Key)
	}
	as := must[Tensor[float32]](t)(As[float32](kv.Key))
	if as.At(0, 1, 1, 2) != x.At(0, 1, 1, 2) || unsafe.Pointer(&as.Data[0]) != kv.Key.Data() {
		t.Fatal("As is not a zero-copy view of the same elements")
	}
	_, err := As[BFloat16](kv.Key)
	wantErr(t, err, CodeDTypeMismatch)
	cp := must[View](t)(kv.Key.Copy())
	own := as.Copy()
	y := rows(1, 1, 2)
	must[KV](t)(c.Update(0, y, y, nil))
	// The old views are stale now; the copies stay.
	if kv.Key.Valid() || kv.Key.Data() != nil || kv.Key.Shape() != nil || kv.Key.NumElements() != 0 {
		t.Fatal("a view survived a mutating call")
	}
	if kv.Key.String() != "View(stale)" {
		t.Fatal(kv.Key.String())
	}
	_, err = kv.Key.Copy()
	wantErr(t, err, ErrStaleView.Code)
	_, err = As[float32](kv.Key)
	wantErr(t, err, ErrStaleView.Code)
	_, err = c.Update(0, kv.Key, kv.Key, nil)
	wantErr(t, err, ErrStaleView.Code)
	mustPanic(t, func() { kv.Key.At(0, 0, 0, 0) })
	mustPanic(t, func() { kv.Key.Dim(0) })
	if !cp.Valid() || !eqFloats(flat(t, cp), x.Data) || !eqFloats(own.Data, x.Data) {
		t.Fatal("copies changed with the cache")
	}
	// Failed calls invalidate views as well (the library may have moved nothing, but says so).
	kv = must[KV](t)(c.LayerView(0))
	_, err = c.Update(0, rows(3, 1, 0), y, nil)
	wantErr(t, err, CodeShapeMismatch)
	if kv.Key.Valid() {
		t.Fatal("a view survived a failed mutating call")
	}
	// Queries keep them valid.
	kv = must[KV](t)(c.LayerView(0))
	must[LayerInfo](t)(c.LayerInfo(0))
	must[*Cache](t)(c.Clone()).Close()
	if !kv.Key.Valid() {
		t.Fatal("a query invalidated a view")
	}
	ok(t, c.Close())
	if kv.Key.Valid() {
		t.Fatal("a view survived Close")
	}
	var zero View
	if zero.Valid() || zero.NDim() != 0 {
		t.Fatal("zero View")
	}
	mustPanic(t, func() { rows(1, 1, 0).At(0, 0, 5, 0) })
}

func mustPanic(t testing.TB, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	f()
}

func TestTensorHelpers(t *testing.T) {
	x := NewTensor[BFloat16](2, 3)
	x.Set(BFloat16FromFloat32(1.5), 1, 2)
	if x.At(1, 2).Float32() != 1.5 || x.NumElements() != 6 || x.DType() != DTypeBFloat16 {
		t.Fatal("Tensor accessors")
	}
	tr := Tensor[float32]{Data: []float32{1, 2, 3, 4, 5, 6}, Shape: []int64{3, 2}, Strides: []int64{1, 3}}
	cp := tr.Copy()
	if !eqFloats(cp.Data, []float32{1, 4, 2, 5, 3, 6}) || cp.Strides != nil {
		t.Fatalf("Copy of a transposed tensor: %v", cp.Data)
	}
	mustPanic(t, func() { NewTensor[float32](2, -1) })
	mustPanic(t, func() { tr.At(1) })
}

// myTensor embeds a Tensor, so it satisfies Input without being one the
// package knows.
type myTensor struct{ Tensor[float32] }

func TestInputForms(t *testing.T) {
	for _, dt := range []DType{DTypeFloat32, DTypeFloat16, DTypeBFloat16} {
		c := mkCache(t, nil)
		var k, v Input
		switch dt {
		case DTypeFloat32:
			x := toks(1, 2)
			k, v = &x, &x
		case DTypeFloat16:
			x := Tensor[Float16]{Data: []Float16{0x3c00, 0x4000}, Shape: []int64{1, 1, 2, 1}}
			k, v = &x, x
		case DTypeBFloat16:
			x := Tensor[BFloat16]{Data: []BFloat16{0x3f80, 0x4000}, Shape: []int64{1, 1, 2, 1}}
			k, v = &x, x
		}
		kv := must[KV](t)(c.Update(0, k, v, nil))
		wantSeq(t, "pointer inputs "+dt.String(), kv.Key, 1, 2)
		view := kv.Key
		kv2 := must[KV](t)(mkCache(t, nil).Update(0, &view, &view, nil))
		wantSeq(t, "*View input", kv2.Value, 1, 2)
		for _, nilIn := range []Input{(*Tensor[float32])(nil), (*Tensor[Float16])(nil), (*Tensor[BFloat16])(nil), (*View)(nil), (*ExternalTensor)(nil)} {
			failsUnchanged(t, c, CodeInvalidArgument, func() error { _, err := c.Update(0, nilIn, v, nil); return err }, "key")
		}
	}
	c := mkCache(t, nil)
	failsUnchanged(t, c, CodeInvalidArgument, func() error {
		_, err := c.Update(0, myTensor{toks(1)}, toks(1), nil)
		return err
	}, "myTensor")
	failsUnchanged(t, c, CodeShapeMismatch, func() error {
		_, err := c.Update(0, &ExternalTensor{DataType: DTypeFloat32.DataType(), Device: CPU, Shape: make([]int64, 7)}, toks(1), nil)
		return err
	}, "dimensions")
}

func TestStreamBinding(t *testing.T) {
	c := mkCache(t, nil)
	if s := must[uintptr](t)(c.Stream()); s != 0 {
		t.Fatalf("a new cache's stream: %#x", s)
	}
	ok(t, c.SetStream(0)) // the default stream: the only one a CPU cache has
	err := c.SetStream(0x1234)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "stream") {
		t.Fatalf("SetStream on a CPU cache: %v", err)
	}
	if s := must[uintptr](t)(c.Stream()); s != 0 {
		t.Fatalf("a refused SetStream changed the stream to %#x", s)
	}
}
