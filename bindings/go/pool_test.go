//go:build cgo

package kvcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	pBlock  = 4
	pHeads  = 2
	pDim    = 8
	pVDim   = 4
	pLayers = 2
)

// testPoolOptions is the tests' pool: pLayers layers in one full-attention group of numBlocks blocks.
func testPoolOptions(numBlocks uint32, seed string) PoolOptions {
	return PoolOptions{
		DType:    DTypeFloat32,
		Groups:   []PoolGroup{FullGroup(pBlock, numBlocks)},
		Layers:   RepeatLayer(pLayers, PoolLayer{NumKVHeads: pHeads, KeyHeadDim: pDim, ValueHeadDim: pVDim}),
		HashSeed: []byte(seed),
	}
}

// mkPoolWith creates a pool that the test closes.
func mkPoolWith(t testing.TB, o PoolOptions) *Pool {
	t.Helper()
	p, err := NewPool(o)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func mkPool(t testing.TB, numBlocks uint32, seed string) *Pool {
	t.Helper()
	o := testPoolOptions(numBlocks, seed)
	o.EventCapacity = 256
	return mkPoolWith(t, o)
}

func mkSeq(t testing.TB, p *Pool, salt []byte) *Sequence {
	t.Helper()
	s, err := p.NewSequence(salt)
	if err != nil {
		t.Fatalf("NewSequence: %v", err)
	}
	return s
}

// pstep is one step's K/V of every layer: token-major [n, heads, dim] and
// [n, heads, vdim], distinct per layer, token and element.
type pstep struct {
	keys, values []Tensor[float32]
}

func newStep(n int, start float32) pstep {
	var s pstep
	for l := 0; l < pLayers; l++ {
		k := NewTensor[float32](int64(n), pHeads, pDim)
		v := NewTensor[float32](int64(n), pHeads, pVDim)
		for i := range k.Data {
			k.Data[i] = start + float32(1000*l+i)
		}
		for i := range v.Data {
			v.Data[i] = -start - float32(1000*l+i)
		}
		s.keys, s.values = append(s.keys, k), append(s.values, v)
	}
	return s
}

func (s pstep) write(p *Pool, slots []int64) error {
	return p.Write(Inputs(s.keys...), Inputs(s.values...), slots)
}

func (s pstep) then(o pstep) pstep {
	var out pstep
	for l := 0; l < pLayers; l++ {
		cat := func(a, b Tensor[float32]) Tensor[float32] {
			shape := slices.Clone(a.Shape)
			shape[0] += b.Shape[0]
			return Tensor[float32]{Data: append(slices.Clone(a.Data), b.Data...), Shape: shape}
		}
		out.keys = append(out.keys, cat(s.keys[l], o.keys[l]))
		out.values = append(out.values, cat(s.values[l], o.values[l]))
	}
	return out
}

// tokenMajor turns gather's [1, heads, n, dim] into write's [n, heads, dim].
func tokenMajor(x Tensor[float32]) []float32 {
	heads, n, dim := x.Shape[1], x.Shape[2], x.Shape[3]
	out := make([]float32, len(x.Data))
	for h := int64(0); h < heads; h++ {
		for i := int64(0); i < n; i++ {
			for d := int64(0); d < dim; d++ {
				out[(i*heads+h)*dim+d] = x.At(0, h, i, d)
			}
		}
	}
	return out
}

func wantHolds(t *testing.T, s *Sequence, want pstep) {
	t.Helper()
	for l := 0; l < pLayers; l++ {
		k, v, err := GatherTensors[float32](s, l)
		ok(t, err)
		if !eqFloats(tokenMajor(k), want.keys[l].Data) || !eqFloats(tokenMajor(v), want.values[l].Data) {
			t.Fatalf("layer %d: gathered K/V differ from what was written", l)
		}
	}
}

func prefillSeq(t *testing.T, p *Pool, s *Sequence, tokens []int32, start float32) (SlotMapping, pstep) {
	t.Helper()
	slots := must[SlotMapping](t)(s.Reserve(tokens))
	st := newStep(len(tokens), start)
	ok(t, st.write(p, slots.Slots))
	ok(t, s.Commit())
	return slots, st
}

func seqTokens(from, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(from + i)
	}
	return out
}

func TestPoolWriteThroughSlotsThenGather(t *testing.T) {
	p := mkPool(t, 16, "test-model")
	s := mkSeq(t, p, nil)
	defer s.Close()
	slots, all := prefillSeq(t, p, s, seqTokens(100, 11), 0)
	if slots.NumGroups != 1 || slots.NumTokens() != 11 {
		t.Fatalf("mapping %d x %d", slots.NumGroups, slots.NumTokens())
	}
	for i, sl := range slots.Group(0) {
		if sl%pBlock != int64(i%pBlock) || sl < pBlock {
			t.Fatalf("slot %d is %d", i, sl)
		}
	}
	if s.Len() != 11 || s.Committed() != 11 {
		t.Fatalf("len %d committed %d", s.Len(), s.Committed())
	}
	wantHolds(t, s, all)
	var decode SlotMapping
	for i := 0; i < 5; i++ {
		ok(t, s.ReserveInto([]int32{int32(200 + i)}, &decode))
		st := newStep(1, 0.5+float32(i))
		ok(t, st.write(p, decode.Slots))
		ok(t, s.Commit())
		all = all.then(st)
	}
	wantHolds(t, s, all)
	_, _, err := GatherTensors[float32](s, 2)
	wantErr(t, err, CodeOutOfRange)
	_, _, err = GatherTensors[BFloat16](s, 0)
	wantErr(t, err, CodeDTypeMismatch)
}

func TestPoolPrefixSharedBetweenTwoSequencesHits(t *testing.T) {
	p := mkPool(t, 16, "test-model")
	prompt := seqTokens(1, 13) // three full blocks
	first := mkSeq(t, p, nil)
	_, st := prefillSeq(t, p, first, prompt, 0)
	before := must[PoolStats](t)(p.Stats(0))
	second := mkSeq(t, p, nil)
	if n := must[int64](t)(second.MatchPrefix(prompt)); n != 12 || second.Committed() != 12 {
		t.Fatalf("matched %d, committed %d", n, second.Committed())
	}
	after := must[PoolStats](t)(p.Stats(0))
	if after.PrefixHits-before.PrefixHits != 3 || after.UsedBlocks != before.UsedBlocks {
		t.Fatalf("stats before %+v after %+v", before, after)
	}
	table := must[View](t)(p.BlockTable([]*Sequence{first, second}, 0))
	rows := must[[]int32](t)(table.Int32s())
	w := int(table.Dim(1))
	if !slices.Equal(rows[:3], rows[w:w+3]) || rows[w+3] != 0 {
		t.Fatalf("tables %v (width %d)", rows, w)
	}
	k, _, err := GatherTensors[float32](second, 0)
	ok(t, err)
	if !eqFloats(tokenMajor(k), st.keys[0].Data[:12*pHeads*pDim]) {
		t.Fatal("the shared blocks' keys differ")
	}
	third := mkSeq(t, p, nil)
	if n := must[int64](t)(third.MatchPrefix(append(slices.Clone(prompt[:8]), 99, 99, 99, 99, 99))); n != 8 {
		t.Fatalf("partial prefix matched %d", n)
	}
	tenant := mkSeq(t, p, []byte("tenant-b"))
	if n := must[int64](t)(tenant.MatchPrefix(prompt)); n != 0 {
		t.Fatalf("another salt matched %d", n)
	}
}

func TestPoolForkAndCopyOnWriteKeepBytes(t *testing.T) {
	p := mkPool(t, 16, "test-model")
	parent := mkSeq(t, p, nil)
	_, st := prefillSeq(t, p, parent, seqTokens(0, 6), 0)
	child := must[*Sequence](t)(parent.Fork())
	shared := must[[]int32](t)(must[View](t)(p.BlockTable([]*Sequence{parent, child}, 0)).Int32s())
	if !slices.Equal(shared[:2], shared[2:]) {
		t.Fatalf("fork does not share: %v", shared)
	}
	partial := int64(shared[1])
	cs := must[SlotMapping](t)(child.Reserve([]int32{42}))
	if cs.Slots[0]/pBlock == partial {
		t.Fatal("the child wrote into the shared partial block")
	}
	k1 := newStep(1, 0.25)
	ok(t, k1.write(p, cs.Slots))
	ok(t, child.Commit())
	ps := must[SlotMapping](t)(parent.Reserve([]int32{43}))
	if ps.Slots[0]/pBlock != partial {
		t.Fatal("the parent, now the only holder, did not keep its block")
	}
	k2 := newStep(1, 0.75)
	ok(t, k2.write(p, ps.Slots))
	ok(t, parent.Commit())
	wantHolds(t, child, st.then(k1))
	wantHolds(t, parent, st.then(k2))
}

func TestPoolTableViews(t *testing.T) {
	p := mkPool(t, 16, "test-model")
	a, b := mkSeq(t, p, nil), mkSeq(t, p, nil)
	sa := must[SlotMapping](t)(a.Reserve(make([]int32, 9)))
	sb := must[SlotMapping](t)(b.Reserve(make([]int32, 4)))
	var blocksA []int32
	for _, s := range sa.Slots {
		if bl := int32(s / pBlock); len(blocksA) == 0 || blocksA[len(blocksA)-1] != bl {
			blocksA = append(blocksA, bl)
		}
	}
	blockB := int32(sb.Slots[0] / pBlock)
	padded := must[View](t)(p.BlockTable([]*Sequence{a, b}, 0))
	if !slices.Equal(padded.Shape(), []int64{2, 3}) || padded.DataType() != (DataType{TypeCodeInt, 32, 1}) {
		t.Fatalf("padded table %v", padded)
	}
	want := append(slices.Clone(blocksA), blockB, 0, 0)
	if got := must[[]int32](t)(padded.Int32s()); !slices.Equal(got, want) {
		t.Fatalf("padded %v, want %v", got, want)
	}
	csr := must[CSRTable](t)(p.BlockTableCSR([]*Sequence{a, b}, 0))
	if !padded.Valid() {
		t.Fatal("a CSR table invalidated the padded one (another buffer)")
	}
	again := must[View](t)(p.BlockTable([]*Sequence{a}, 0))
	if padded.Valid() || !again.Valid() || !csr.Indices.Valid() {
		t.Fatal("the next padded table of the group must replace the previous one, and only it")
	}
	if got := must[[]int32](t)(csr.Indptr.Int32s()); !slices.Equal(got, []int32{0, 3, 4}) {
		t.Fatalf("indptr %v", got)
	}
	if got := must[[]int32](t)(csr.Indices.Int32s()); !slices.Equal(got, append(slices.Clone(blocksA), blockB)) {
		t.Fatalf("indices %v", got)
	}
	if got := must[[]int32](t)(csr.LastPageLen.Int32s()); !slices.Equal(got, []int32{1, 4}) {
		t.Fatalf("last_page_len %v", got)
	}
	// a write keeps table views; a reserve invalidates them
	ok(t, newStep(1, 0).write(p, []int64{-1}))
	if !csr.Indptr.Valid() {
		t.Fatal("a write invalidated the table")
	}
	must[SlotMapping](t)(a.Reserve([]int32{1}))
	_, err := csr.Indptr.Int32s()
	if !errors.Is(err, ErrStaleView) {
		t.Fatalf("a stale table read: %v", err)
	}
}

func TestPoolTablesOfSeveralGroupsCoexist(t *testing.T) {
	p, err := NewPool(PoolOptions{DType: DTypeFloat32, Groups: []PoolGroup{FullGroup(pBlock, 16), SlidingGroup(2, 16, 4)},
		Layers: []PoolLayer{AttentionLayer(0, pHeads, pDim), AttentionLayer(1, pHeads, pDim)}})
	ok(t, err)
	defer p.Close()
	s := mkSeq(t, p, nil)
	slots := must[SlotMapping](t)(s.Reserve(make([]int32, 6)))
	blocks := func(group int, size int64) []int32 {
		var out []int32
		for _, sl := range slots.Group(group) {
			if b := int32(sl / size); len(out) == 0 || out[len(out)-1] != b {
				out = append(out, b)
			}
		}
		return out
	}
	full := must[View](t)(p.BlockTable([]*Sequence{s}, 0))
	sliding := must[View](t)(p.BlockTable([]*Sequence{s}, 1))
	if got := must[[]int32](t)(full.Int32s()); !slices.Equal(got, blocks(0, pBlock)) {
		t.Fatalf("full table %v", got)
	}
	if got := must[[]int32](t)(sliding.Int32s()); !slices.Equal(got, blocks(1, 2)) {
		t.Fatalf("sliding table %v", got)
	}
	must[SlotMapping](t)(s.Reserve([]int32{1}))
	if full.Valid() || sliding.Valid() {
		t.Fatal("a reserve left tables valid")
	}
}

func TestPoolLayerStorageInBothLayouts(t *testing.T) {
	for _, layout := range []PoolLayout{LayoutNHD, LayoutHND} {
		p, err := NewPool(PoolOptions{DType: DTypeFloat32, Groups: []PoolGroup{FullGroup(pBlock, 16)}, Layout: layout,
			Layers: RepeatLayer(pLayers, PoolLayer{NumKVHeads: pHeads, KeyHeadDim: pDim, ValueHeadDim: pVDim})})
		ok(t, err)
		s := mkSeq(t, p, nil)
		slots, st := prefillSeq(t, p, s, make([]int32, 6), 0)
		nhd := must[KV](t)(p.LayerStorage(1, LayoutNHD))
		hnd := must[KV](t)(p.LayerStorage(1, LayoutHND))
		if !slices.Equal(nhd.Key.Shape(), []int64{16, pBlock, pHeads, pDim}) ||
			!slices.Equal(hnd.Key.Shape(), []int64{16, pHeads, pBlock, pDim}) || nhd.Value.Dim(3) != pVDim ||
			nhd.Key.Data() != hnd.Key.Data() {
			t.Fatalf("storage views %v %v", nhd.Key, hnd.Key)
		}
		for i, sl := range slots.Slots {
			block, off := sl/pBlock, sl%pBlock
			for h := int64(0); h < pHeads; h++ {
				for d := int64(0); d < pDim; d++ {
					want := st.keys[1].At(int64(i), h, d)
					if nhd.Key.At(block, off, h, d) != want || hnd.Key.At(block, h, off, d) != want {
						t.Fatalf("%v: token %d head %d dim %d", layout, i, h, d)
					}
				}
			}
		}
		must[SlotMapping](t)(s.Reserve([]int32{1})) // storage views outlive mutations
		if !nhd.Key.Valid() {
			t.Fatal("a reserve invalidated the storage")
		}
		ok(t, p.Close())
		if nhd.Key.Valid() {
			t.Fatal("the storage outlived its pool")
		}
	}
}

func TestPoolEventsCarryTheBlockHashChain(t *testing.T) {
	seed, salt := []byte("llama-3-8b"), []byte("tenant-7")
	p := mkPool(t, 16, string(seed))
	tokens := []int32{5, 1, 70000, 3, 9, 2, 6, 4, 11, 12}
	s := mkSeq(t, p, salt)
	prefillSeq(t, p, s, tokens, 0)
	ok(t, s.Close())
	root := must[[32]byte](t)(BlockHashRoot(seed, salt))
	hashes := must[[][32]byte](t)(BlockHashChain(root, tokens, pBlock))
	events := must[[]PoolEvent](t)(p.Events())
	if len(events) != 2 {
		t.Fatalf("%d events", len(events))
	}
	parents := [][32]byte{root, hashes[0]}
	for i, e := range events {
		if e.ID != uint64(i+1) || e.Kind != EventBlockStored || e.Group != 0 || e.NumTokens != pBlock ||
			e.BlockHash != hashes[i] || e.ParentHash != parents[i] {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	if more := must[[]PoolEvent](t)(p.Events()); len(more) != 0 {
		t.Fatalf("pulled events stayed: %v", more)
	}
	big := mkSeq(t, p, nil)
	must[SlotMapping](t)(big.Reserve(make([]int32, 15*pBlock))) // evicts both cached blocks
	ok(t, big.Close())
	removed := must[[]PoolEvent](t)(p.Events())
	var got [][32]byte
	for _, e := range removed {
		if e.Kind != EventBlockRemoved {
			t.Fatalf("event %+v", e)
		}
		got = append(got, e.BlockHash)
	}
	sortHashes := func(h [][32]byte) {
		slices.SortFunc(h, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	}
	sortHashes(got)
	sortHashes(hashes)
	if !slices.Equal(got, hashes) {
		t.Fatal("the removed hashes are not the stored ones")
	}
	ok(t, p.ClearCache())
	if e := must[[]PoolEvent](t)(p.Events()); len(e) != 1 || e[0].Kind != EventAllCleared || e[0].ID != 5 {
		t.Fatalf("clear: %+v", e)
	}
}

func TestPoolErrors(t *testing.T) {
	p := mkPool(t, 4, "test-model") // three usable blocks
	s := mkSeq(t, p, nil)
	must[SlotMapping](t)(s.Reserve([]int32{1, 2, 3, 4, 5}))
	before := must[PoolStats](t)(p.Stats(0))
	_, err := s.Reserve(make([]int32, 10))
	wantErr(t, err, CodeOutOfMemory, "group 0 needs 2 more blocks")
	_, err = s.Reserve([]int32{4, -5, 6})
	wantErr(t, err, CodeInvalidArgument, "tokens[1] is -5")
	_, err = s.Reserve(nil)
	wantErr(t, err, CodeInvalidArgument, "num_tokens is 0")
	_, err = s.MatchPrefix([]int32{1, 2})
	wantErr(t, err, CodeInvalidArgument)
	wantErr(t, s.Truncate(6), CodeOutOfRange, "6")
	if after := must[PoolStats](t)(p.Stats(0)); after != before || s.Len() != 5 || s.Committed() != 0 {
		t.Fatalf("a failed call changed the pool: %+v -> %+v, len %d", before, after, s.Len())
	}
	if need := must[[]uint64](t)(p.BlocksNeeded([]*Sequence{s}, []uint64{10})); !slices.Equal(need, []uint64{2}) {
		t.Fatalf("blocks needed %v", need)
	}
	st := newStep(1, 0)
	wantErr(t, st.write(p, []int64{10000}), CodeInvalidArgument, "is 10000")
	wantErr(t, p.Write(Inputs(st.keys[0]), Inputs(st.values[0]), []int64{-1}), CodeInvalidArgument, "2 layers")
	_, err = p.LayerStorage(2, LayoutNHD)
	wantErr(t, err, CodeOutOfRange)
	_, err = p.BlockTable([]*Sequence{s}, 3)
	wantErr(t, err, CodeOutOfRange)
	_, err = p.Stats(1)
	wantErr(t, err, CodeOutOfRange)
	other := mkPool(t, 8, "another")
	stranger := mkSeq(t, other, nil)
	_, err = p.BlockTable([]*Sequence{s, stranger}, 0)
	wantErr(t, err, CodeInvalidArgument, "seqs[1]")
	_, err = NewPool(PoolOptions{DType: DTypeFloat32, Groups: []PoolGroup{FullGroup(0, 8)},
		Layers: []PoolLayer{AttentionLayer(0, 1, 4)}})
	wantErr(t, err, CodeInvalidArgument, "groups[0].block_size is 0")
}

func TestPoolSequenceSavedLoadsIntoAFreshPool(t *testing.T) {
	a, b := mkPool(t, 16, "test-model"), mkPool(t, 16, "test-model")
	tokens := seqTokens(300, 11) // two full blocks and a partial one
	s := mkSeq(t, a, nil)
	_, first := prefillSeq(t, a, s, tokens[:6], 0)
	_, rest := prefillSeq(t, a, s, tokens[6:], 0.25)
	path := filepath.Join(t.TempDir(), "seq.kvc")
	ok(t, s.Save(path))
	loaded := must[*Sequence](t)(b.LoadSequence(path))
	if loaded.Len() != 11 || loaded.Committed() != 11 || loaded.Pool() != b {
		t.Fatalf("loaded len %d committed %d", loaded.Len(), loaded.Committed())
	}
	wantHolds(t, loaded, first.then(rest))
	request := mkSeq(t, b, nil) // the committed full blocks are cached in the new pool
	if n := must[int64](t)(request.MatchPrefix(tokens)); n != 8 {
		t.Fatalf("matched %d in the new pool", n)
	}
	ok(t, request.Close())
	// Both keep stepping alike.
	_, more := prefillSeq(t, a, s, []int32{400, 401}, 0.5)
	prefillSeq(t, b, loaded, []int32{400, 401}, 0.5)
	wantHolds(t, loaded, first.then(rest).then(more))
	ok(t, loaded.Close())
	if st := must[PoolStats](t)(b.Stats(0)); st.UsedBlocks != 0 {
		t.Fatalf("used blocks %d after close", st.UsedBlocks)
	}
}

func TestPoolSequenceFileRefusedUnchanged(t *testing.T) {
	a := mkPool(t, 16, "test-model")
	s := mkSeq(t, a, nil)
	prefillSeq(t, a, s, seqTokens(0, 11), 0)
	dir := t.TempDir()
	path := filepath.Join(dir, "seq.kvc")
	ok(t, s.Save(path))
	wider, err := NewPool(PoolOptions{
		DType:    DTypeFloat32,
		Groups:   []PoolGroup{FullGroup(2*pBlock, 16)},
		Layers:   RepeatLayer(pLayers, PoolLayer{NumKVHeads: pHeads, KeyHeadDim: pDim, ValueHeadDim: pVDim}),
		HashSeed: []byte("test-model"),
	})
	ok(t, err)
	defer wider.Close()
	for _, c := range []struct {
		pool  *Pool
		code  Code
		words string
	}{
		{wider, CodeInvalidArgument, "group 0: block_size 4 (file) vs 8 (pool)"},
		{mkPool(t, 3, "test-model"), CodeOutOfMemory, "group 0"},
		{mkPool(t, 16, "other-model"), CodeInvalidArgument, "hash seed"},
	} {
		before := must[PoolStats](t)(c.pool.Stats(0))
		_, err := c.pool.LoadSequence(path)
		wantErr(t, err, c.code, c.words)
		if after := must[PoolStats](t)(c.pool.Stats(0)); after != before {
			t.Fatalf("a refused load changed the pool: %+v -> %+v", before, after)
		}
	}
	data, err := os.ReadFile(path)
	ok(t, err)
	data[len(data)/2] ^= 0x40
	ok(t, os.WriteFile(path, data, 0o600))
	before := must[PoolStats](t)(a.Stats(0))
	// (wantErr's sentinels predate ErrIO: the IO errors are checked as persist_test.go does.)
	if _, err := a.LoadSequence(path); !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("a corrupted file: %v", err)
	}
	if _, err := a.LoadSequence(filepath.Join(dir, "missing.kvc")); !errors.Is(err, ErrIO) ||
		!strings.Contains(err.Error(), "cannot open") {
		t.Fatalf("a missing file: %v", err)
	}
	if after := must[PoolStats](t)(a.Stats(0)); after != before || s.Len() != 11 || s.Committed() != 11 {
		t.Fatalf("a refused load changed the pool: %+v -> %+v", before, after)
	}
	if err := s.Save(filepath.Join(dir, "no-such-dir", "seq.kvc")); !errors.Is(err, ErrIO) {
		t.Fatalf("an unwritable path: %v", err)
	}
	ok(t, s.Close())
	if err := s.Save(path); !errors.Is(err, ErrSequenceClosed) {
		t.Fatalf("Save after Close: %v", err)
	}
}

func TestPoolCloseTwiceAndUseAfterClose(t *testing.T) {
	p := mkPool(t, 16, "test-model")
	s := mkSeq(t, p, nil)
	must[SlotMapping](t)(s.Reserve([]int32{1, 2}))
	ok(t, s.Close())
	ok(t, s.Close())
	if _, err := s.Reserve([]int32{3}); !errors.Is(err, ErrSequenceClosed) {
		t.Fatalf("reserve on a closed sequence: %v", err)
	}
	if s.Len() != 0 {
		t.Fatal("a closed sequence has tokens")
	}
	if st := must[PoolStats](t)(p.Stats(0)); st.UsedBlocks != 0 {
		t.Fatalf("closing did not release: %+v", st)
	}
	other := mkSeq(t, p, nil)
	must[SlotMapping](t)(other.Reserve([]int32{1}))
	table := must[View](t)(p.BlockTable([]*Sequence{other}, 0))
	ok(t, p.Close())
	ok(t, p.Close())
	if table.Valid() {
		t.Fatal("a table outlived its pool")
	}
	if _, err := other.Reserve([]int32{2}); !errors.Is(err, ErrPoolClosed) || !errors.Is(err, ErrInvalidState) {
		t.Fatalf("reserve after the pool closed: %v", err)
	}
	if _, err := p.NewSequence(nil); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("NewSequence after close: %v", err)
	}
	if _, err := p.Stats(0); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("Stats after close: %v", err)
	}
	ok(t, other.Close()) // after the pool: nothing to do
}

func TestPoolFinalizersReleaseDroppedSequencesAndPools(t *testing.T) {
	p := mkPool(t, 16, "test-model")
	func() {
		for i := 0; i < 4; i++ {
			s := mkSeq(t, p, nil)
			must[SlotMapping](t)(s.Reserve(make([]int32, 5)))
			must[*Sequence](t)(s.Fork())
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for must[PoolStats](t)(p.Stats(0)).UsedBlocks != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("dropped sequences still hold blocks: %+v", must[PoolStats](t)(p.Stats(0)))
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	live := liveHandles.Load()
	func() {
		for i := 0; i < 4; i++ {
			q, err := NewPool(PoolOptions{DType: DTypeFloat32, Groups: []PoolGroup{FullGroup(pBlock, 8)},
				Layers: []PoolLayer{AttentionLayer(0, 1, 4)}})
			ok(t, err)
			must[*Sequence](t)(q.NewSequence(nil)) // a sequence keeps it alive until both are dropped
		}
	}()
	waitLive(t, live)
}

func TestPoolRecurrentCheckpoints(t *testing.T) {
	p, err := NewPool(PoolOptions{DType: DTypeFloat32,
		Groups: []PoolGroup{FullGroup(pBlock, 16), RecurrentGroup(pBlock, 8)},
		Layers: []PoolLayer{AttentionLayer(0, pHeads, pDim), RecurrentLayer(1, 5, 4, 2, 3, 6)}})
	ok(t, err)
	defer p.Close()
	prompt := seqTokens(20, 13)
	step := func(s *Sequence, tokens []int32, fill float32) {
		slots := must[SlotMapping](t)(s.Reserve(tokens))
		for _, sl := range slots.Group(1) {
			if sl != -1 {
				t.Fatalf("a recurrent group got slot %d", sl)
			}
		}
		k := NewTensor[float32](int64(len(tokens)), pHeads, pDim)
		ok(t, p.Write([]Input{k, nil}, []Input{k, nil}, slots.Slots))
		conv, ssm, err := s.RecurrentState(1)
		ok(t, err)
		if !slices.Equal(conv.Shape(), []int64{1, 5, 4}) || !slices.Equal(ssm.Shape(), []int64{1, 2, 3, 6}) {
			t.Fatalf("state shapes %v %v", conv.Shape(), ssm.Shape())
		}
		c, m := must[Tensor[float32]](t)(As[float32](conv)), must[Tensor[float32]](t)(As[float32](ssm))
		for i := range c.Data {
			c.Data[i] = fill
		}
		for i := range m.Data {
			m.Data[i] = -fill
		}
		ok(t, s.Commit())
	}
	s := mkSeq(t, p, nil)
	step(s, prompt[:4], 1)
	step(s, prompt[4:8], 2)
	step(s, prompt[8:10], 3)
	wantErr(t, s.Truncate(6), CodeInvalidState)
	ok(t, s.Close())
	again := mkSeq(t, p, nil)
	if n := must[int64](t)(again.MatchPrefix(prompt)); n != 8 {
		t.Fatalf("matched %d", n)
	}
	conv, ssm, err := again.RecurrentState(1)
	ok(t, err)
	for _, x := range flat(t, conv) {
		if x != 2 {
			t.Fatalf("restored conv state %v", flat(t, conv))
		}
	}
	if ssm.At(0, 1, 2, 5) != -2 {
		t.Fatal("restored ssm state")
	}
}
