//go:build cgo

package kvcache

// The misuse sweep through the public Go API, as a careless caller would
// write it: every method on nil, zero-value and closed objects, Close twice,
// views read after the call that invalidated them, wrong dtypes and shapes,
// huge and negative counts, paths with NUL bytes. Each gets an error (or, for
// the accessors documented to panic on a stale view, a panic carrying
// ErrStaleView), never a nil-pointer panic or a crash, and the object keeps
// working.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// documentedPanics are the methods documented to panic (they return no
// error): on a stale view with ErrStaleView, Step.KV for a layer out of range.
var documentedPanics = map[string]func(any) bool{
	"View.Dim": isStale, "View.Stride": isStale, "View.At": isStale,
	"Step.KV": func(p any) bool { s, ok := p.(string); return ok && strings.Contains(s, "out of range") },
}

func isStale(p any) bool {
	err, ok := p.(error)
	return ok && errors.Is(err, ErrStaleView)
}

// namesItself are the types whose errors carry their method in Op.
var namesItself = map[string]bool{"Cache": true, "EncoderDecoderCache": true, "Pool": true, "Sequence": true,
	"Step": true, "DiskTier": true}

// closedObjects are the sweep's closed handles: every method that returns
// an error reports them closed (errors.Is(err, ErrClosed)), whatever its
// arguments.
var closedObjects = map[string]bool{"closed cache": true, "closed pool": true, "closed sequence": true,
	"sequence of a closed pool": true, "nil pool": true, "zero pool": true, "nil sequence": true,
	"zero sequence": true}

// noError are the methods that return an error yet succeed on a closed or
// nil object: closing is idempotent.
var noError = map[string]bool{"Close": true}

// callEvery calls every exported method of recv with zero arguments (or the
// given ones, by method name) and returns what went wrong: a panic other
// than a documented one, or a nil error where the object cannot work.
func callEvery(t *testing.T, what string, recv any, args map[string][]any) {
	t.Helper()
	v := reflect.ValueOf(recv)
	typ := v.Type()
	name := strings.TrimPrefix(typ.String(), "*kvcache.")
	name = strings.TrimPrefix(name, "kvcache.")
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		full := name + "." + m.Name
		in := []reflect.Value{v}
		if given, ok := args[m.Name]; ok {
			for _, a := range given {
				in = append(in, reflect.ValueOf(a))
			}
		} else {
			for j := 1; j < m.Type.NumIn(); j++ {
				if m.Type.IsVariadic() && j == m.Type.NumIn()-1 {
					break
				}
				in = append(in, reflect.Zero(m.Type.In(j)))
			}
		}
		out, panicked := callRecover(m.Func, in)
		if panicked != nil {
			if allowed := documentedPanics[full]; allowed != nil && allowed(panicked) {
				continue
			}
			t.Errorf("%s: %s panicked: %v", what, full, panicked)
			continue
		}
		if len(out) == 0 || noError[m.Name] {
			continue
		}
		last := out[len(out)-1]
		if last.Type() != reflect.TypeOf((*error)(nil)).Elem() {
			continue
		}
		if last.IsNil() {
			t.Errorf("%s: %s returned no error", what, full)
			continue
		}
		var e *Error
		err, _ := last.Interface().(error)
		if !errors.As(err, &e) {
			t.Errorf("%s: %s returned %v (%T), not an *Error", what, full, err, err)
			continue
		}
		// The handles' methods name themselves, not the C function.
		if namesItself[name] && (e.Op != full || strings.Contains(e.Message, "kvc_")) {
			t.Errorf("%s: %s's error names %q: %v", what, full, e.Op, err)
		}
		if closedObjects[what] && !errors.Is(err, ErrClosed) {
			t.Errorf("%s: %s returned %v, which is not ErrClosed", what, full, err)
		}
	}
}

func callRecover(f reflect.Value, in []reflect.Value) (out []reflect.Value, panicked any) {
	defer func() { panicked = recover() }()
	return f.Call(in), nil
}

func TestMisuseEveryMethodOnNilZeroAndClosedObjects(t *testing.T) {
	closedCache := mkCache(t, nil)
	must[KV](t)(closedCache.Update(0, rows(2, 3, 0), rows(2, 3, 0), nil))
	ok(t, closedCache.Close())
	ok(t, closedCache.Close())

	self, cross := mkCache(t, nil), mkCache(t, nil)
	closedED := must[*EncoderDecoderCache](t)(NewEncoderDecoder(self, cross))
	ok(t, closedED.Close())
	ok(t, closedED.Close())

	closedPool := mkPool(t, 8, "misuse")
	seqOfClosedPool := mkSeq(t, closedPool, nil)
	closedSeq := mkSeq(t, closedPool, nil)
	must[SlotMapping](t)(closedSeq.Reserve([]int32{1, 2, 3}))
	ok(t, closedSeq.Close())
	ok(t, closedSeq.Close())
	ok(t, closedPool.Close())
	ok(t, closedPool.Close())
	ok(t, seqOfClosedPool.Close())

	stepCache := mkCache(t, nil)
	closedStep := must[*Step](t)(stepCache.PrepareStep(Inputs(rows(2, 1, 0)), Inputs(rows(2, 1, 0))))
	ok(t, closedStep.Close())
	ok(t, closedStep.Close())
	stepOfClosedCache := must[*Step](t)(stepCache.PrepareStep(Inputs(rows(2, 1, 0)), Inputs(rows(2, 1, 0))))
	defer stepOfClosedCache.Close()
	ok(t, stepCache.Close())

	tier := must[*DiskTier](t)(NewDiskTier(t.TempDir(), 0))
	ok(t, tier.Close())
	ok(t, tier.Close())

	for _, c := range []struct {
		what string
		recv any
	}{
		{"closed cache", closedCache}, {"nil cache", (*Cache)(nil)}, {"zero cache", &Cache{}},
		{"closed encoder-decoder", closedED}, {"nil encoder-decoder", (*EncoderDecoderCache)(nil)},
		{"zero encoder-decoder", &EncoderDecoderCache{}},
		{"closed pool", closedPool}, {"nil pool", (*Pool)(nil)}, {"zero pool", &Pool{}},
		{"closed sequence", closedSeq}, {"sequence of a closed pool", seqOfClosedPool},
		{"nil sequence", (*Sequence)(nil)}, {"zero sequence", &Sequence{}},
		{"closed tier", tier}, {"nil tier", (*DiskTier)(nil)}, {"zero tier", &DiskTier{}},
		{"nil redis tier", (*RedisTier)(nil)}, {"zero redis tier", &RedisTier{}},
		{"closed step", closedStep}, {"step of a closed cache", stepOfClosedCache}, {"nil step", (*Step)(nil)},
		{"zero step", &Step{}},
		{"zero view", View{}},
	} {
		callEvery(t, c.what, c.recv, nil)
	}
}

// ---------------------------------------------------------------- views

// staleEverywhere checks every way of reading v once it is stale.
func staleEverywhere(t *testing.T, what string, v View) {
	t.Helper()
	if v.Valid() || v.Shape() != nil || v.Strides() != nil || v.Data() != nil || v.NumElements() != 0 ||
		v.String() != "View(stale)" {
		t.Fatalf("%s: the stale view still reads: %v %v %v", what, v.Valid(), v.Shape(), v.Data())
	}
	if _, err := v.Copy(); !errors.Is(err, ErrStaleView) {
		t.Fatalf("%s: Copy: %v", what, err)
	}
	if _, err := As[float32](v); !errors.Is(err, ErrStaleView) {
		t.Fatalf("%s: As: %v", what, err)
	}
	for name, f := range map[string]func(){"At": func() { v.At(0, 0, 0, 0) }, "Dim": func() { v.Dim(0) },
		"Stride": func() { v.Stride(0) }} {
		if _, p := callRecover(reflect.ValueOf(f), nil); !isStale(p) {
			t.Fatalf("%s: %s did not panic with ErrStaleView: %v", what, name, p)
		}
	}
}

func TestMisuseViewsAfterEveryMutatingCall(t *testing.T) {
	dir := t.TempDir()
	mutations := map[string]func(c *Cache) error{
		"Update":        func(c *Cache) error { _, err := c.Update(0, rows(2, 1, 9), rows(2, 1, 9), nil); return err },
		"failed Update": func(c *Cache) error { _, err := c.Update(0, rows(3, 1, 9), rows(3, 1, 9), nil); return nilIfErr(err) },
		"UpdateAll": func(c *Cache) error {
			return c.UpdateAll(Inputs(rows(2, 1, 9), rows(2, 1, 9)), Inputs(rows(2, 1, 9), rows(2, 1, 9)), nil, nil)
		},
		"Crop":                  func(c *Cache) error { return c.Crop(1) },
		"Reorder":               func(c *Cache) error { return c.Reorder([]int64{1, 0}) },
		"BatchRepeatInterleave": func(c *Cache) error { return c.BatchRepeatInterleave(2) },
		"BatchSelectIndices":    func(c *Cache) error { return c.BatchSelectIndices([]int64{1}) },
		"Reserve":               func(c *Cache) error { return c.Reserve(4096) },
		"Reset":                 func(c *Cache) error { return c.Reset() },
		"Restore": func(c *Cache) error {
			path := filepath.Join(dir, "c.kvc")
			if err := c.Save(path); err != nil {
				return err
			}
			return c.Restore(path)
		},
		"Close": func(c *Cache) error { return c.Close() },
	}
	for name, mutate := range mutations {
		c := populated(t)
		kv := must[KV](t)(c.LayerView(0))
		kept := must[View](t)(kv.Key.Copy())
		tensor := must[Tensor[float32]](t)(As[float32](kv.Value))
		ok(t, mutate(c))
		staleEverywhere(t, name, kv.Key)
		staleEverywhere(t, name, kv.Value)
		// A stale view is refused as an input, by its cache and by any other.
		other := mkCache(t, nil)
		_, err := other.Update(0, kv.Key, kv.Value, nil)
		wantErr(t, err, CodeInvalidState, "no longer valid")
		if n := other.NumLayers(); n != 0 {
			t.Fatalf("%s: a refused update made %d layers", name, n)
		}
		if name == "Close" {
			_, err := c.Update(0, rows(2, 1, 0), rows(2, 1, 0), nil)
			wantErr(t, err, CodeInvalidState, "closed")
			continue
		}
		failsUnchanged(t, c, CodeInvalidState, func() error { _, err := c.Update(0, kv.Key, kv.Value, nil); return err }, "no longer valid")
		// The copy is Go memory: valid whatever happened.
		if !kept.Valid() || kept.At(1, 1, 2, 2) != 1000+100+20+2 {
			t.Fatalf("%s: the copy changed", name)
		}
		_ = tensor // As aliases the cache's memory: documented as valid only as long as the view (not read here)
		fresh := must[KV](t)(c.LayerView(0))
		if !fresh.Key.Valid() {
			t.Fatalf("%s: a view taken after the call is not valid", name)
		}
	}
}

// nilIfErr turns an expected failure into success (the mutation under test
// is the failed call itself) and a success into an error.
func nilIfErr(err error) error {
	if err == nil {
		return errors.New("the call was expected to fail")
	}
	return nil
}

func TestMisuseViewsOfAPoolAfterMutationAndClose(t *testing.T) {
	p := mkPool(t, 8, "misuse")
	s := mkSeq(t, p, nil)
	must[SlotMapping](t)(s.Reserve([]int32{1, 2, 3}))
	table := must[View](t)(p.BlockTable([]*Sequence{s}, 0))
	csr := must[CSRTable](t)(p.BlockTableCSR([]*Sequence{s}, 0))
	storage := must[KV](t)(p.LayerStorage(0, LayoutNHD))
	must[SlotMapping](t)(s.Reserve([]int32{4, 5}))
	for _, v := range []View{table, csr.Indptr, csr.Indices, csr.LastPageLen} {
		staleEverywhere(t, "table after Reserve", v)
		if _, err := v.Int32s(); !errors.Is(err, ErrStaleView) {
			t.Fatalf("Int32s of a stale table: %v", err)
		}
	}
	if !storage.Key.Valid() { // the storage never moves
		t.Fatal("the layer storage went stale on Reserve")
	}
	ok(t, p.Close())
	staleEverywhere(t, "storage after Close", storage.Key)
}

// ---------------------------------------------------- close and counts

func TestMisuseClosedSequencesReportErrors(t *testing.T) {
	p := mkPool(t, 8, "misuse")
	s := mkSeq(t, p, nil)
	must[SlotMapping](t)(s.Reserve([]int32{1, 2, 3}))
	if n := must[int64](t)(s.Length()); n != 3 || s.Len() != 3 {
		t.Fatalf("Length %d, Len %d", n, s.Len())
	}
	ok(t, s.Close())
	ok(t, s.Close())
	_, err := s.Length()
	wantErr(t, err, CodeInvalidState, "closed sequence")
	_, err = s.CommittedLength()
	wantErr(t, err, CodeInvalidState, "closed sequence")
	if s.Len() != 0 || s.Committed() != 0 { // the legacy accessors keep reading 0
		t.Fatal("Len or Committed of a closed sequence is not 0")
	}
	_, err = p.BlockTable([]*Sequence{s}, 0)
	wantErr(t, err, CodeInvalidState, "seqs[0]", "closed")
	_, err = p.BlocksNeeded([]*Sequence{nil}, []uint64{1})
	wantErr(t, err, CodeInvalidArgument, "seqs[0]", "nil")
	q := mkPool(t, 8, "other")
	foreign := mkSeq(t, q, nil)
	_, err = p.BlockTable([]*Sequence{foreign}, 0)
	wantErr(t, err, CodeInvalidArgument, "another pool")
	other := mkSeq(t, p, nil) // the pool works on
	must[SlotMapping](t)(other.Reserve([]int32{7}))
	ok(t, p.Close())
	_, err = other.Length()
	wantErr(t, err, CodeInvalidState, "closed pool")
	c := mkCache(t, nil)
	if n := must[int](t)(c.LayerCount()); n != 0 {
		t.Fatalf("LayerCount of a new cache: %d", n)
	}
	ok(t, c.Close())
	_, err = c.LayerCount()
	wantErr(t, err, CodeInvalidState, "closed cache")
}

// ------------------------------------------------ dtypes, shapes, counts

func TestMisuseBadTensors(t *testing.T) {
	c := populated(t) // batch 2, 2 heads, head_dim 3, float32
	good := rows(2, 1, 5)
	short := good
	short.Data = short.Data[:5]
	huge := Tensor[float32]{Data: good.Data, Shape: []int64{1 << 40, 1 << 40, 1, 3}}
	wrap := Tensor[float32]{Data: good.Data, Shape: []int64{2, 2, 1, 3}, Strides: []int64{math.MaxInt64, 1, 1, 1}}
	half := NewTensor[Float16](2, 2, 1, 3)
	cases := []struct {
		name      string
		key       Input
		code      Code
		fragments []string
	}{
		{"short data", short, CodeInvalidArgument, []string{"key.Data", "5 elements"}},
		{"huge shape", huge, CodeInvalidArgument, []string{"key.Data"}},
		{"strides that wrap", wrap, CodeInvalidArgument, []string{"key.Data"}},
		{"too few strides", Tensor[float32]{Data: good.Data, Shape: good.Shape, Strides: []int64{1}}, CodeInvalidArgument, []string{"key", "strides"}},
		{"negative offset", Tensor[float32]{Data: good.Data, Shape: good.Shape, Offset: -1}, CodeInvalidArgument, []string{"key.Offset", "-1"}},
		{"offset past the end", Tensor[float32]{Data: good.Data, Shape: good.Shape, Offset: 13}, CodeInvalidArgument, []string{"key.Offset", "13"}},
		{"negative size", Tensor[float32]{Data: good.Data, Shape: []int64{2, -2, 1, 3}}, CodeShapeMismatch, []string{"key"}},
		{"3-D", Tensor[float32]{Data: good.Data, Shape: []int64{2, 2, 3}}, CodeShapeMismatch, []string{"key.ndim"}},
		{"5-D", Tensor[float32]{Data: good.Data, Shape: []int64{1, 2, 2, 1, 3}}, CodeShapeMismatch, []string{"key.ndim"}},
		{"0-D", Tensor[float32]{Data: good.Data}, CodeShapeMismatch, []string{"key.ndim"}},
		{"9-D", Tensor[float32]{Data: good.Data, Shape: []int64{1, 1, 1, 1, 1, 1, 1, 1, 1}}, CodeShapeMismatch, []string{"key", "dimensions"}},
		{"other heads", rows(2, 1, 0).reshape(2, 1, 2, 3), CodeShapeMismatch, []string{"key"}},
		{"zero head_dim", Tensor[float32]{Data: good.Data, Shape: []int64{2, 2, 1, 0}}, CodeShapeMismatch, []string{"head_dim"}},
		{"other dtype", half, CodeDTypeMismatch, []string{"key"}},
		{"nil", nil, CodeInvalidArgument, []string{"key"}},
		{"nil pointer", (*Tensor[float32])(nil), CodeInvalidArgument, []string{"key"}},
		{"zero view", View{}, CodeInvalidState, []string{"no longer valid"}},
		{"external NULL data", ExternalTensor{Device: CPU, DataType: DTypeFloat32.DataType(), Shape: []int64{2, 2, 1, 3}}, CodeInvalidArgument, []string{"key"}},
		{"external float64", ExternalTensor{Data: unsafe.Pointer(&good.Data[0]), Device: CPU, DataType: DataType{TypeCodeFloat, 64, 1}, Shape: []int64{2, 2, 1, 1}}, CodeDTypeMismatch, []string{"key"}},
		{"external 4 lanes", ExternalTensor{Data: unsafe.Pointer(&good.Data[0]), Device: CPU, DataType: DataType{TypeCodeFloat, 32, 4}, Shape: []int64{2, 2, 1, 3}}, CodeDTypeMismatch, []string{"key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			failsUnchanged(t, c, tc.code, func() error { _, err := c.Update(0, tc.key, good, nil); return err }, tc.fragments...)
			// The same input as the value is named as the value.
			value := append([]string(nil), tc.fragments...)
			for i, f := range value {
				value[i] = strings.Replace(f, "key", "value", 1)
			}
			failsUnchanged(t, c, tc.code, func() error { _, err := c.Update(0, good, tc.key, nil); return err }, value...)
		})
	}
	// Inputs the package reads correctly, however they are laid out.
	reversed := rows(2, 3, 0)
	rev := Tensor[float32]{Data: reversed.Data, Shape: []int64{2, 2, 3, 3}, Strides: []int64{18, 9, -3, 1}, Offset: 6}
	kv := must[KV](t)(c.Update(0, rev, rev, nil))
	for s := int64(0); s < 3; s++ {
		if got, want := kv.Key.At(1, 1, 3+s, 2), reversed.At(1, 1, 2-s, 2); got != want {
			t.Fatalf("reversed token %d: %g, want %g", s, got, want)
		}
	}
	before := snapshot(t, c)
	must[KV](t)(c.Update(0, NewTensor[float32](2, 2, 0, 3), NewTensor[float32](2, 2, 0, 3), nil)) // zero tokens
	unchanged(t, c, before)
}

// reshape returns t with another shape over the same data.
func (t Tensor[T]) reshape(shape ...int64) Tensor[T] {
	t.Shape = shape
	return t
}

func TestMisuseHugeAndNegativeCounts(t *testing.T) {
	c := populated(t)
	for _, layer := range []int{-1, math.MaxUint32 + 1, math.MaxInt64, math.MinInt64} {
		t.Run(fmt.Sprint("layer ", layer), func(t *testing.T) {
			failsUnchanged(t, c, CodeOutOfRange, func() error { _, err := c.Update(layer, rows(2, 1, 0), rows(2, 1, 0), nil); return err }, "layer")
			failsUnchanged(t, c, CodeOutOfRange, func() error { _, err := c.LayerView(layer); return err }, "layer")
			failsUnchanged(t, c, CodeOutOfRange, func() error { _, err := c.SeqLength(layer); return err }, "layer")
		})
	}
	// A layer index past a fixed cache's layers, but inside uint32.
	failsUnchanged(t, c, CodeOutOfRange, func() error { _, err := c.Update(math.MaxInt32+1, rows(2, 1, 0), rows(2, 1, 0), nil); return err }, "layer")
	failsUnchanged(t, c, CodeOutOfRange, func() error { _, err := c.LayerView(2); return err }, "layer")
	for _, n := range []int64{math.MaxInt64, math.MinInt64, 1 << 62, -1} {
		failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.Reserve(n) }, "tokens")
		failsUnchanged(t, c, CodeInvalidArgument, func() error { _, _, err := c.MaskSizes(n, 0); return err }, "query_length")
		failsUnchanged(t, c, CodeInvalidArgument, func() error { _, err := c.BatchSplit(n, 1); return err }, "full_batch_size")
		failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.BatchRepeatInterleave(n) }, "repeats")
	}
	for _, n := range []int64{0, -1, math.MinInt64} {
		failsUnchanged(t, c, CodeInvalidArgument, func() error { _, err := c.BatchSplit(2, n); return err }, "split_size")
	}
	whole := must[[]*Cache](t)(c.BatchSplit(2, math.MaxInt64)) // a split past the batch: one cache of every row
	if len(whole) != 1 {
		t.Fatalf("BatchSplit(2, MaxInt64) made %d caches", len(whole))
	}
	ok(t, whole[0].Close())
	for _, idx := range [][]int64{{2, 0}, {-1, 0}, {math.MaxInt64, 0}, {math.MinInt64, 1}} {
		failsUnchanged(t, c, CodeOutOfRange, func() error { return c.Reorder(idx) }, "beam_idx")
		failsUnchanged(t, c, CodeOutOfRange, func() error { return c.BatchSelectIndices(idx) }, "indices")
	}
	failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.Reorder(nil) }, "beam_idx")
	failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.BatchSelectIndices([]int64{}) }, "indices")
	// crop keeps transformers' meaning at the extremes: past the end keeps everything, very negative drops all.
	ok(t, c.Crop(math.MaxInt64))
	if n := must[int64](t)(c.SeqLength(0)); n != 3 {
		t.Fatalf("Crop(MaxInt64) left %d tokens", n)
	}
	ok(t, c.Crop(math.MinInt64))
	if n := must[int64](t)(c.SeqLength(0)); n != 0 {
		t.Fatalf("Crop(MinInt64) left %d tokens", n)
	}
	must[KV](t)(c.Update(0, rows(2, 1, 0), rows(2, 1, 0), nil))
}

// --------------------------------------------------------------- pools

func TestMisusePoolCalls(t *testing.T) {
	p := mkPool(t, 8, "misuse")
	s := mkSeq(t, p, nil)
	slots := must[SlotMapping](t)(s.Reserve([]int32{1}))
	state := func() string {
		st := must[PoolStats](t)(p.Stats(0))
		return fmt.Sprintf("%d %d %+v", s.Len(), s.Committed(), st)
	}
	k := NewTensor[float32](1, pHeads, pDim)
	v := NewTensor[float32](1, pHeads, pVDim)
	two := Inputs(k, k)
	vals := Inputs(v, v)
	cases := []struct {
		name      string
		call      func() error
		code      Code
		fragments []string
	}{
		{"reserve a negative token", func() error { _, err := s.Reserve([]int32{-1}); return err }, CodeInvalidArgument, []string{"tokens[0]", "-1"}},
		{"reserve more than the pool", func() error { _, err := s.Reserve(make([]int32, 10_000)); return err }, CodeOutOfMemory, []string{"group 0"}},
		{"match a negative token", func() error { _, err := mkSeq(t, p, nil).MatchPrefix([]int32{1, math.MinInt32}); return err }, CodeInvalidArgument, []string{"tokens[1]"}},
		{"truncate past the end", func() error { return s.Truncate(math.MaxInt64) }, CodeOutOfRange, []string{"num_tokens"}},
		{"truncate negative", func() error { return s.Truncate(-1) }, CodeInvalidArgument, []string{"-1"}},
		{"blocks for huge counts", func() error { _, err := p.BlocksNeeded([]*Sequence{s}, []uint64{math.MaxUint64}); return err }, CodeInvalidArgument, []string{"new_tokens[0]"}},
		{"blocks with counts missing", func() error { _, err := p.BlocksNeeded([]*Sequence{s}, nil); return err }, CodeInvalidArgument, []string{"token counts"}},
		{"stats of a negative group", func() error { _, err := p.Stats(-1); return err }, CodeOutOfRange, []string{"group -1"}},
		{"storage of a huge layer", func() error { _, err := p.LayerStorage(math.MaxInt64, LayoutNHD); return err }, CodeOutOfRange, []string{"layer"}},
		{"storage in a bad layout", func() error { _, err := p.LayerStorage(0, PoolLayout(7)); return err }, CodeInvalidArgument, []string{"layout"}},
		{"table of a huge group", func() error { _, err := p.BlockTable([]*Sequence{s}, math.MaxInt64); return err }, CodeOutOfRange, []string{"group"}},
		{"write one layer", func() error { return p.Write(two[:1], vals[:1], slots.Group(0)) }, CodeInvalidArgument, []string{"layers"}},
		{"write a huge slot", func() error { return p.Write(two, vals, []int64{math.MaxInt64}) }, CodeInvalidArgument, []string{"slot_mapping[0]"}},
		{"write a negative slot", func() error { return p.Write(two, vals, []int64{math.MinInt64}) }, CodeInvalidArgument, []string{"slot_mapping[0]"}},
		{"write more slots than tokens", func() error { return p.Write(two, vals, []int64{-1, -1}) }, CodeShapeMismatch, []string{"keys[0]"}},
		{"write other dtypes", func() error {
			return p.Write(Inputs(NewTensor[Float16](1, pHeads, pDim), NewTensor[Float16](1, pHeads, pDim)), vals, slots.Group(0))
		}, CodeDTypeMismatch, []string{"keys[0]"}},
		{"write nil keys", func() error { return p.Write([]Input{nil, nil}, vals, slots.Group(0)) }, CodeShapeMismatch, []string{"keys[0]"}},
		{"gather a huge layer", func() error { return s.Gather(math.MaxInt64, k, v) }, CodeOutOfRange, []string{"layer"}},
		{"gather into a wrong shape", func() error { return s.Gather(0, k, v) }, CodeShapeMismatch, []string{"keys"}},
		{"tier stats of a huge index", func() error { _, err := p.TierStats(math.MaxInt64); return err }, CodeOutOfRange, []string{"index"}},
		{"add a nil tier", func() error { return p.AddTier(nil, TierWriteOnCommit) }, CodeInvalidArgument, []string{"tier"}},
		{"load a path with a NUL", func() error { _, err := p.LoadSequence("/tmp/x\x00y"); return err }, CodeInvalidArgument, []string{"path", "NUL"}},
		{"save to a path with a NUL", func() error { return s.Save(filepath.Join(t.TempDir(), "s\x00.kvc")) }, CodeInvalidArgument, []string{"path", "NUL"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := state()
			wantErr(t, tc.call(), tc.code, tc.fragments...)
			if after := state(); after != before {
				t.Fatalf("changed the pool: %s -> %s", before, after)
			}
		})
	}
	ok(t, p.Write(two, vals, slots.Group(0))) // still works
	ok(t, s.Commit())
	if s.Committed() != 1 {
		t.Fatalf("committed %d", s.Committed())
	}
}

// -------------------------------------------------------- paths, tiers

func TestMisusePathsAndTiers(t *testing.T) {
	c := populated(t)
	dir := t.TempDir()
	cut := filepath.Join(dir, "a")
	bad := cut + "\x00b"
	failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.Save(bad) }, "path", "NUL")
	failsUnchanged(t, c, CodeInvalidArgument, func() error { return c.Restore(bad) }, "path", "NUL")
	_, err := Load(bad)
	wantErr(t, err, CodeInvalidArgument, "path", "NUL")
	_, err = LoadEncoderDecoder(bad)
	wantErr(t, err, CodeInvalidArgument, "path", "NUL")
	_, err = NewDiskTier(bad, 0)
	wantErr(t, err, CodeInvalidArgument, "directory", "NUL")
	if _, err := os.Stat(cut); !os.IsNotExist(err) {
		t.Fatalf("something was made under the cut name %s: %v", cut, err)
	}
	_, err = NewDiskTier("", 0)
	wantErr(t, err, CodeInvalidArgument, "directory")
	file := filepath.Join(dir, "file")
	ok(t, os.WriteFile(file, []byte("x"), 0o600))
	_, err = NewDiskTier(file, 0)
	wantErr(t, err, CodeIO, "directory")

	tier := must[*DiskTier](t)(NewDiskTier(filepath.Join(dir, "t"), 0))
	p := mkPool(t, 8, "misuse")
	wantErr(t, p.AddTier(tier, TierWrite(9)), CodeInvalidArgument, "policy", "9")
	ok(t, p.AddTier(tier, TierWriteOnCommit))
	wantErr(t, p.AddTier(tier, TierWriteOnCommit), CodeInvalidArgument, "tier")
	wantErr(t, mkPool(t, 8, "other").AddTier(tier, TierWriteOnCommit), CodeInvalidArgument, "tier")
	_, err = tier.Stats()
	wantErr(t, err, CodeInvalidState, "Pool.TierStats")
	_, err = p.TierStats(1)
	wantErr(t, err, CodeOutOfRange, "1")
	ok(t, tier.Close()) // a no-op for a tier the pool owns
	must[TierStats](t)(p.TierStats(0))
	ok(t, p.Close())
	closedTier := must[*DiskTier](t)(NewDiskTier(filepath.Join(dir, "u"), 0))
	ok(t, closedTier.Close())
	wantErr(t, mkPool(t, 8, "misuse").AddTier(closedTier, TierWriteOnCommit), CodeInvalidArgument, "tier")
	wantErr(t, p.AddTier(must[*DiskTier](t)(NewDiskTier(filepath.Join(dir, "v"), 0)), TierWriteOnCommit), CodeInvalidState, "closed pool")
}
