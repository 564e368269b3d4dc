//go:build cgo

package kvcache

// A pool sequence's extra keys (adapter key, multimodal items;
// docs/block-hash.md version 2): the pool's hashes against
// tests/pool/block_hash_v2_vectors.txt and a crypto/sha256 recomputation of
// the extras, sharing only with equal keys, and bad keys refused with the
// pool unchanged.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func list(field string) []string {
	if field == "-" {
		return nil
	}
	return strings.Split(field, ",")
}

// vecItems reads a vector file's ITEMS field: OFFSET:LENGTH:HASH, comma-separated (- for none).
func vecItems(t *testing.T, field string) []MultimodalItem {
	t.Helper()
	var items []MultimodalItem
	for _, it := range list(field) {
		p := strings.Split(it, ":")
		off, _ := strconv.ParseUint(p[0], 10, 64)
		length, _ := strconv.ParseUint(p[1], 10, 64)
		items = append(items, MultimodalItem{Hash: vecBytes(t, p[2]), Offset: off, Length: length})
	}
	return items
}

// specExtra is version 2's extra bytes of the block [start, end), written from docs/block-hash.md.
func specExtra(adapter []byte, items []MultimodalItem, start, end uint64) []byte {
	var out []byte
	if len(adapter) > 0 {
		out = binary.LittleEndian.AppendUint32(append(out, 1), uint32(len(adapter)))
		out = append(out, adapter...)
	}
	for _, it := range items {
		if it.Offset < end && it.Offset+it.Length > start {
			out = binary.LittleEndian.AppendUint32(append(out, 2), uint32(len(it.Hash)))
			out = append(out, it.Hash...)
		}
	}
	return out
}

func keysPool(t *testing.T, blockSize, numBlocks uint32, seed []byte) *Pool {
	t.Helper()
	p, err := NewPool(PoolOptions{DType: DTypeFloat32, Groups: []PoolGroup{FullGroup(blockSize, numBlocks)},
		Layers: []PoolLayer{{NumKVHeads: 1, KeyHeadDim: 2}}, HashSeed: seed, EventCapacity: 256})
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPoolBlockHashV2Vectors(t *testing.T) {
	text, err := os.ReadFile("../../tests/pool/block_hash_v2_vectors.txt")
	if err != nil {
		t.Fatalf("the vectors: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(text), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, " ")
		if len(f) != 10 || f[0] != "pool" {
			t.Fatalf("not a pool vector: %.40s", line)
		}
		n++
		seed, salt, adapter := vecBytes(t, f[2]), vecBytes(t, f[3]), vecBytes(t, f[4])
		items := vecItems(t, f[5])
		bs, _ := strconv.Atoi(f[6])
		tokens := vecTokens(t, f[7])
		extras, hashes := list(f[8]), list(f[9])
		if len(hashes) != len(tokens)/bs || len(extras) != len(hashes) {
			t.Fatalf("%s: %d hashes, %d extras for %d tokens in blocks of %d", f[1], len(hashes), len(extras), len(tokens), bs)
		}
		p := keysPool(t, uint32(bs), uint32(len(tokens)/bs+2), seed)
		s, err := p.NewSequenceWithKeys(SequenceKeys{Salt: salt, AdapterKey: adapter, MMItems: items})
		if err != nil {
			t.Fatalf("%s: %v", f[1], err)
		}
		if _, err := s.Reserve(tokens); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
		events, err := p.Events()
		if err != nil || len(events) != len(hashes) {
			t.Fatalf("%s: %d events (%v), want %d", f[1], len(events), err, len(hashes))
		}
		parent, _ := BlockHashRoot(seed, salt)
		for i, h := range hashes {
			want := vecHash(t, h)
			if events[i].BlockHash != want {
				t.Errorf("%s block %d: the pool stored %x, want %x", f[1], i, events[i].BlockHash, want)
			}
			extra := specExtra(adapter, items, uint64(i*bs), uint64((i+1)*bs))
			if !bytes.Equal(extra, vecBytes(t, extras[i])) {
				t.Errorf("%s block %d: extras %x, the vector has %s", f[1], i, extra, extras[i])
			}
			if parent, _ = BlockHash(parent, tokens[i*bs:(i+1)*bs], extra); parent != want {
				t.Errorf("%s block %d: BlockHash over the extras is %x, want %x", f[1], i, parent, want)
			}
		}
		s.Close()
	}
	if n != 9 {
		t.Fatalf("%d pool vectors; the script writes 9", n)
	}
}

func fillKeys(t *testing.T, p *Pool, tokens []int32, keys SequenceKeys) {
	t.Helper()
	s, err := p.NewSequenceWithKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Reserve(tokens); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
}

func matchedKeys(t *testing.T, p *Pool, tokens []int32, keys SequenceKeys) int64 {
	t.Helper()
	s, err := p.NewSequenceWithKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := s.MatchPrefix(tokens)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPoolEqualTokensShareOnlyWithEqualKeys(t *testing.T) {
	const bs = 4
	p := keysPool(t, bs, 64, []byte("m"))
	image := func(hash string, off, n uint64) SequenceKeys {
		return SequenceKeys{MMItems: []MultimodalItem{{Hash: []byte(hash), Offset: off, Length: n}}}
	}
	tokens := make([]int32, 32)
	for i := range tokens {
		tokens[i] = int32(i)
		if i < 8 {
			tokens[i] = 32000 // the image's placeholders
		}
	}
	full := int64(len(tokens) - bs)
	fillKeys(t, p, tokens, image("cat", 0, 8))
	for _, c := range []struct {
		keys SequenceKeys
		want int64
	}{{image("dog", 0, 8), 0}, {SequenceKeys{}, 0}, {image("cat", 0, 8), full}} {
		if got := matchedKeys(t, p, tokens, c.keys); got != c.want {
			t.Errorf("image tokens, keys %+v: matched %d, want %d", c.keys, got, c.want)
		}
	}
	for i := range tokens {
		tokens[i] = int32(100 + i)
	}
	fillKeys(t, p, tokens, SequenceKeys{AdapterKey: []byte("lora:a")})
	for _, c := range []struct {
		adapter string
		want    int64
	}{{"lora:b", 0}, {"", 0}, {"lora:a", full}} {
		if got := matchedKeys(t, p, tokens, SequenceKeys{AdapterKey: []byte(c.adapter)}); got != c.want {
			t.Errorf("adapter %q: matched %d, want %d", c.adapter, got, c.want)
		}
	}
	// An image at [9, 11): the two blocks before it are shared whatever the image.
	for i := range tokens {
		tokens[i] = int32(200 + i)
	}
	fillKeys(t, p, tokens, image("cat", 9, 2))
	if got := matchedKeys(t, p, tokens, image("dog", 9, 2)); got != 8 {
		t.Errorf("another image at [9, 11): matched %d, want 8", got)
	}
}

func TestPoolBadSequenceKeysChangeNothing(t *testing.T) {
	p := keysPool(t, 4, 16, []byte("m"))
	fillKeys(t, p, []int32{1, 2, 3, 4, 5}, SequenceKeys{})
	if _, err := p.Events(); err != nil {
		t.Fatal(err)
	}
	before, _ := p.Stats(0)
	it := func(h string, off, n uint64) MultimodalItem {
		return MultimodalItem{Hash: []byte(h), Offset: off, Length: n}
	}
	for _, c := range []struct {
		keys    SequenceKeys
		needles []string
	}{
		{SequenceKeys{MMItems: []MultimodalItem{it("a", 0, 4), it("b", 2, 4)}}, []string{"keys.MMItems[1].Offset is 2", "must not overlap"}},
		{SequenceKeys{MMItems: []MultimodalItem{it("a", 8, 4), it("b", 0, 4)}}, []string{"keys.MMItems[1].Offset is 0", "sorted by offset"}},
		{SequenceKeys{MMItems: []MultimodalItem{it("a", 0, 0)}}, []string{"keys.MMItems[0].Length is 0"}},
		{SequenceKeys{MMItems: []MultimodalItem{it("", 0, 1)}}, []string{"keys.MMItems[0].Hash length is 0", "1 to 1024 bytes"}},
		{SequenceKeys{MMItems: []MultimodalItem{it("a", 1<<40, 1)}}, []string{"keys.MMItems[0] covers tokens [1099511627776", "2^40"}},
		{SequenceKeys{AdapterKey: make([]byte, 1025)}, []string{"len(keys.AdapterKey) is 1025", "at most 1024"}},
	} {
		_, err := p.NewSequenceWithKeys(c.keys)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%+v: %v, want an invalid argument", c.keys, err)
		}
		msg := err.Error()
		for _, n := range append(c.needles, "Pool.NewSequenceWithKeys: ") {
			if !strings.Contains(msg, n) {
				t.Errorf("%q lacks %q", msg, n)
			}
		}
		after, _ := p.Stats(0)
		events, _ := p.Events()
		if !reflect.DeepEqual(before, after) || len(events) != 0 {
			t.Errorf("%s: the pool changed: %+v -> %+v, %d events", msg, before, after, len(events))
		}
	}
	if PoolBlockHashVersion != 2 {
		t.Errorf("PoolBlockHashVersion is %d", PoolBlockHashVersion)
	}
}
