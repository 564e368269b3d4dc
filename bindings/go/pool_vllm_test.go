//go:build cgo

package kvcache

// A pool in vLLM's hash mode and its events in vLLM's wire form
// (docs/block-hash.md, "vLLM's hash"; docs/pool.md, "Events in vLLM's
// form"): the block hashes against tests/pool/vllm_hash_vectors.txt (written
// by vLLM's own functions), and Pool.EventsVLLM's bytes for
// make_vllm_event_vectors.py's scenario against
// tests/pool/vllm_event_vectors.txt (vLLM's encoder's bytes; the Python and
// Rust tests compare with the same file).

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

func vllmRows(t *testing.T, name, kind string, fields int) [][]string {
	t.Helper()
	text, err := os.ReadFile("../../tests/pool/" + name)
	if err != nil {
		t.Fatalf("the vectors: %v", err)
	}
	var rows [][]string
	for _, line := range strings.Split(string(text), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, " ")
		if len(f) != fields || f[0] != kind {
			t.Fatalf("not a %s vector: %.40s", kind, line)
		}
		rows = append(rows, f)
	}
	return rows
}

func vllmPool(t *testing.T, blockSize, usable uint32, seed []byte) *Pool {
	t.Helper()
	p, err := NewPool(PoolOptions{DType: DTypeFloat32, Groups: []PoolGroup{FullGroup(blockSize, usable+1)},
		Layers: []PoolLayer{{NumKVHeads: 1, KeyHeadDim: 2}}, HashSeed: seed, EventCapacity: 4096, HashMode: HashVLLM})
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func vllmAppend(t *testing.T, s *Sequence, tokens []int32) {
	t.Helper()
	if _, err := s.Reserve(tokens); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
}

func span(first, n int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = first + int32(i)
	}
	return out
}

func TestPoolVLLMHashVectors(t *testing.T) {
	rows := vllmRows(t, "vllm_hash_vectors.txt", "vllm", 11)
	if len(rows) != 15 {
		t.Fatalf("%d vectors, want 15", len(rows))
	}
	for _, f := range rows {
		items := vecItems(t, f[6])
		bs, _ := strconv.Atoi(f[7])
		tokens := vecTokens(t, f[8])
		hashes := list(f[10])
		p := vllmPool(t, uint32(bs), uint32(len(tokens)/bs+2), vecBytes(t, f[2]))
		s, err := p.NewSequenceWithKeys(SequenceKeys{Salt: vecBytes(t, f[3]), AdapterKey: vecBytes(t, f[4]),
			AdapterPath: vecBytes(t, f[5]), MMItems: items})
		if err != nil {
			t.Fatalf("%s: %v", f[1], err)
		}
		if len(tokens) > 0 {
			vllmAppend(t, s, tokens)
		}
		events, err := p.Events()
		if err != nil || len(events) != len(hashes) {
			t.Fatalf("%s: %d events (%v), want %d", f[1], len(events), err, len(hashes))
		}
		parent := vecHash(t, f[9]) // NONE_HASH
		for i, h := range hashes {
			if want := vecHash(t, h); events[i].BlockHash != want || events[i].ParentHash != parent {
				t.Errorf("%s block %d: stored %x (parent %x), want %x (parent %x)", f[1], i, events[i].BlockHash,
					events[i].ParentHash, want, parent)
			}
			parent = events[i].BlockHash
		}
	}
}

// vllmScenario is make_vllm_event_vectors.py's scenario.
func vllmScenario(t *testing.T, p *Pool) {
	a, err := p.NewSequenceWithKeys(SequenceKeys{AdapterKey: []byte("sql-lora"), AdapterPath: []byte("/adapters/sql"),
		AdapterID: 3})
	if err != nil {
		t.Fatal(err)
	}
	vllmAppend(t, a, span(1, 6))
	vllmAppend(t, a, span(7, 2))
	seq := func(tokens []int32) *Sequence {
		s, err := p.NewSequence(nil)
		if err != nil {
			t.Fatal(err)
		}
		vllmAppend(t, s, tokens)
		return s
	}
	seq(span(1, 8)).Close()
	c := seq(span(50, 4))
	d := seq(span(60, 4))
	c.Close()
	if err := p.ClearCache(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	d.Close()
}

func TestPoolVLLMEventVectors(t *testing.T) {
	rows := vllmRows(t, "vllm_event_vectors.txt", "batch", 6)
	if len(rows) != 2 {
		t.Fatalf("%d batches, want 2", len(rows))
	}
	for _, f := range rows {
		p := vllmPool(t, 4, 4, nil)
		vllmScenario(t, p)
		ts, _ := strconv.ParseFloat(f[4], 64)
		o := VLLMBatchOptions{TS: ts, IntHashes: f[2] == "1"}
		if rank, _ := strconv.Atoi(f[3]); rank >= 0 {
			r := uint32(rank)
			o.DataParallelRank = &r
		}
		got, err := p.EventsVLLM(o)
		if err != nil {
			t.Fatal(err)
		}
		if want := vecBytes(t, f[5]); !bytes.Equal(got, want) {
			t.Errorf("%s: got %x\nwant %x", f[1], got, want)
		}
		if empty, err := p.EventsVLLM(o); err != nil || len(empty) != 12 { // [ts, [], rank or nil]
			t.Errorf("%s: the drained queue gave %x (%v)", f[1], empty, err)
		}
	}
}

func TestPoolVLLMBadKeys(t *testing.T) {
	p := vllmPool(t, 4, 4, nil)
	_, err := p.NewSequenceWithKeys(SequenceKeys{AdapterKey: []byte{0xff}})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalidArgument || !strings.Contains(e.Message, "keys.AdapterKey is not UTF-8") {
		t.Fatalf("a non-UTF-8 adapter key: %v", err)
	}
	if _, err := p.EventsVLLM(VLLMBatchOptions{TS: 1, IntHashes: true}); err != nil {
		t.Fatal(err)
	}
}
