package kvcache

// The block hash against the vectors Python's hashlib computed
// (tests/pool/block_hash_vectors.txt, docs/block-hash.md). This file has no
// build tag: with cgo it checks the C library (and the Go implementation
// beside it), with CGO_ENABLED=0 the Go implementation the package then uses.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

type hashVectors struct{ roots, blocks, chains [][]string }

func readHashVectors(t *testing.T) hashVectors {
	t.Helper()
	text, err := os.ReadFile("../../tests/pool/block_hash_vectors.txt")
	if err != nil {
		t.Fatalf("the vectors: %v", err)
	}
	var v hashVectors
	for _, line := range strings.Split(string(text), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, " ")
		switch f[0] {
		case "root":
			v.roots = append(v.roots, f[1:])
		case "block":
			v.blocks = append(v.blocks, f[1:])
		case "chain":
			v.chains = append(v.chains, f[1:])
		default:
			t.Fatalf("a vector of no known kind: %.40s", line)
		}
	}
	if len(v.roots) != 9 || len(v.blocks) != 11 || len(v.chains) != 8 {
		t.Fatalf("%d roots, %d blocks, %d chains; the script writes 9, 11, 8", len(v.roots), len(v.blocks), len(v.chains))
	}
	return v
}

func vecBytes(t *testing.T, field string) []byte {
	if field == "-" {
		return nil
	}
	b, err := hex.DecodeString(field)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func vecHash(t *testing.T, field string) (h [BlockHashSize]byte) {
	if copy(h[:], vecBytes(t, field)) != BlockHashSize || len(field) != 2*BlockHashSize {
		t.Fatalf("not a hash: %s", field)
	}
	return h
}

func vecTokens(t *testing.T, field string) []int32 {
	if field == "-" {
		return nil
	}
	var out []int32
	for _, s := range strings.Split(field, ",") {
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int32(v))
	}
	return out
}

// What a router written in Go computes, with the standard library alone: the
// whole message of a block, then one SHA-256. Independent of blockhash.go.
func routerBlock(parent []byte, tokens []int32, extra []byte) [32]byte {
	msg := binary.LittleEndian.AppendUint32(append([]byte{}, parent...), uint32(len(tokens)))
	for _, t := range tokens {
		msg = binary.LittleEndian.AppendUint32(msg, uint32(t))
	}
	msg = binary.LittleEndian.AppendUint32(msg, uint32(len(extra)))
	return sha256.Sum256(append(msg, extra...))
}

func routerRoot(seed, salt []byte) [32]byte {
	msg := binary.LittleEndian.AppendUint32([]byte("kvcache/block-hash/v1"), uint32(len(seed)))
	msg = binary.LittleEndian.AppendUint32(append(msg, seed...), uint32(len(salt)))
	return sha256.Sum256(append(msg, salt...))
}

func TestBlockHashRootVectors(t *testing.T) {
	for _, v := range readHashVectors(t).roots {
		seed, salt, want := vecBytes(t, v[1]), vecBytes(t, v[2]), vecHash(t, v[3])
		got, err := BlockHashRoot(seed, salt)
		if err != nil || got != want {
			t.Errorf("root %s: %x, %v; want %x", v[0], got, err, want)
		}
		if g, _ := goBlockHashRoot(seed, salt); g != want {
			t.Errorf("root %s in Go: %x", v[0], g)
		}
		if routerRoot(seed, salt) != want {
			t.Errorf("root %s by the router: %x", v[0], routerRoot(seed, salt))
		}
	}
}

func TestBlockHashVectors(t *testing.T) {
	for _, v := range readHashVectors(t).blocks {
		parent, tokens, extra, want := vecHash(t, v[1]), vecTokens(t, v[2]), vecBytes(t, v[3]), vecHash(t, v[4])
		got, err := BlockHash(parent, tokens, extra)
		if err != nil || got != want {
			t.Errorf("block %s: %x, %v; want %x", v[0], got, err, want)
		}
		if g, _ := goBlockHash(&parent, tokens, extra); g != want {
			t.Errorf("block %s in Go: %x", v[0], g)
		}
		if routerBlock(parent[:], tokens, extra) != want {
			t.Errorf("block %s by the router", v[0])
		}
	}
}

func TestBlockHashChainVectors(t *testing.T) {
	for _, v := range readHashVectors(t).chains {
		root, tokens := vecHash(t, v[1]), vecTokens(t, v[3])
		bs, err := strconv.ParseUint(v[2], 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		var want [][BlockHashSize]byte
		if v[4] != "-" {
			for _, h := range strings.Split(v[4], ",") {
				want = append(want, vecHash(t, h))
			}
		}
		got, err := BlockHashChain(root, tokens, uint32(bs))
		if err != nil || len(got) != len(want) || len(want) != len(tokens)/int(bs) {
			t.Fatalf("chain %s: %d hashes (%v); want %d", v[0], len(got), err, len(want))
		}
		goChain, _ := goBlockHashChain(&root, tokens, uint32(bs))
		parent := root[:]
		for i := range want {
			router := routerBlock(parent, tokens[i*int(bs):(i+1)*int(bs)], nil)
			if got[i] != want[i] || goChain[i] != want[i] || router != want[i] {
				t.Errorf("chain %s block %d: %x (Go %x, router %x); want %x", v[0], i, got[i], goChain[i], router, want[i])
			}
			parent = want[i][:]
		}
	}
}

// Random inputs: the package (the C library under cgo) and the router code agree.
func TestBlockHashRandomInputsAgreeWithTheRouter(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 15))
	bytesOf := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	for range 200 {
		seed, salt := bytesOf(r.IntN(70)), bytesOf(r.IntN(3))
		root, err := BlockHashRoot(seed, salt)
		if err != nil || root != routerRoot(seed, salt) {
			t.Fatalf("root of %x, %x: %x, %v", seed, salt, root, err)
		}
		tokens := make([]int32, r.IntN(200))
		for i := range tokens {
			tokens[i] = []int32{0, 1<<31 - 1, r.Int32()}[r.IntN(3)]
		}
		bs := []uint32{1, 2, 16, 17, 64}[r.IntN(5)]
		chain, err := BlockHashChain(root, tokens, bs)
		if err != nil || len(chain) != len(tokens)/int(bs) {
			t.Fatalf("chain: %d, %v", len(chain), err)
		}
		parent := root[:]
		for i, h := range chain {
			if h != routerBlock(parent, tokens[i*int(bs):(i+1)*int(bs)], nil) {
				t.Fatalf("chain block %d differs from the router's", i)
			}
			parent = chain[i][:]
		}
		if len(tokens) > 0 {
			extra := bytesOf(r.IntN(40))
			if h, err := BlockHash(root, tokens, extra); err != nil || h != routerBlock(root[:], tokens, extra) {
				t.Fatalf("block: %x, %v", h, err)
			}
		}
	}
}

func TestBlockHashErrors(t *testing.T) {
	root, _ := BlockHashRoot(nil, nil)
	expect := func(err error, needle string) {
		t.Helper()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), needle) {
			t.Errorf("%v: want an invalid argument naming %q", err, needle)
		}
	}
	_, err := BlockHash(root, []int32{0, 1, -7}, nil)
	expect(err, "kvc_block_hash: tokens[2] is -7")
	_, err = BlockHash(root, nil, nil)
	expect(err, "num_tokens is 0")
	_, err = BlockHashChain(root, []int32{1, 2}, 0)
	expect(err, "block_size is 0")
	chain, err := BlockHashChain(root, []int32{1, 2, 3, 4, -1 << 31}, 2) // in the tail, still refused
	expect(err, "tokens[4] is -2147483648")
	if chain != nil {
		t.Errorf("a refused chain returned %d hashes", len(chain))
	}
	// The Go implementation (CGO_ENABLED=0) refuses what the library refuses, with its messages.
	for _, c := range []struct {
		tokens []int32
		bs     uint32
	}{{[]int32{0, 1, -7}, 2}, {nil, 0}, {[]int32{5, 6, 7, 8, -1}, 2}, {[]int32{5, -2}, 0}} {
		_, libChain := BlockHashChain(root, c.tokens, c.bs)
		_, goChain := goBlockHashChain(&root, c.tokens, c.bs)
		_, libBlock := BlockHash(root, c.tokens, nil)
		_, goBlock := goBlockHash(&root, c.tokens, nil)
		if libChain == nil || goChain == nil || libChain.Error() != goChain.Error() ||
			libBlock == nil || goBlock == nil || libBlock.Error() != goBlock.Error() {
			t.Errorf("tokens %v, block size %d: %v / %v and %v / %v", c.tokens, c.bs, libChain, goChain, libBlock, goBlock)
		}
	}
	if chain, err := BlockHashChain(root, nil, 16); err != nil || len(chain) != 0 {
		t.Errorf("an empty chain: %v, %v", chain, err)
	}
	if empty, _ := BlockHashRoot([]byte{}, nil); empty != root || bytes.Equal(root[:], make([]byte, 32)) {
		t.Errorf("the empty seed as nil and as []byte{} differ, or the root is zero")
	}
}
