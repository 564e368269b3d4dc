package kvcache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
)

// The block hash of prefix caching (docs/block-hash.md, C header
// kvcache/block_hash.h). A sequence's tokens are cut into blocks of a fixed
// number of tokens; every full block gets a 32-byte key that depends on every
// token before it, on the seed (the model and its weights) and on the salt (a
// tenant's cache salt). Version 1 is SHA-256 over a fixed little-endian byte
// layout:
//
//	root  = SHA-256("kvcache/block-hash/v1" || le32(len seed) || seed || le32(len salt) || salt)
//	block = SHA-256(parent || le32(n) || le32(token_0) .. le32(token_n-1) || le32(len extra) || extra)
//
// With cgo the functions below call the C library; built with CGO_ENABLED=0
// they compute the same keys in Go (crypto/sha256), so a router that imports
// this package needs neither cgo nor libkvcache for them.

const (
	// BlockHashSize is the number of bytes of a block hash (a SHA-256 digest).
	BlockHashSize = 32
	// BlockHashVersion is the version of the block hash specification.
	BlockHashVersion = 1
)

// BlockHashRoot returns the root of a hash chain: the parent of the first
// block of every sequence hashed with this seed and salt (opaque bytes;
// either may be empty, and an empty one differs from every non-empty one).
// It fails (ErrInvalidArgument) only for a seed or salt longer than
// math.MaxUint32 bytes.
func BlockHashRoot(seed, salt []byte) ([BlockHashSize]byte, error) {
	return cBlockHashRoot(seed, salt)
}

// BlockHash returns the hash of one full block of tokens (at least one id,
// each >= 0) after the block whose hash is parent (the root for a sequence's
// first block), with extra as the block's extra keys (LoRA adapter,
// multimodal content hashes: bytes the caller encodes; nil for none). An
// empty token list or a negative id is ErrInvalidArgument; the message names
// the index and the value.
func BlockHash(parent [BlockHashSize]byte, tokens []int32, extra []byte) ([BlockHashSize]byte, error) {
	return cBlockHash(&parent, tokens, extra)
}

// BlockHashChain returns the hashes of every full block of tokens in order,
// with empty extra keys: what a router computes per request. The
// len(tokens) % blockSize tokens of a partial tail are not hashed, but a
// negative id anywhere is ErrInvalidArgument, and so is a blockSize of 0.
func BlockHashChain(root [BlockHashSize]byte, tokens []int32, blockSize uint32) ([][BlockHashSize]byte, error) {
	return cBlockHashChain(&root, tokens, blockSize)
}

// The specification in Go: the CGO_ENABLED=0 build's implementation. Its
// checks and messages are the C library's.

var blockHashDomain = []byte("kvcache/block-hash/v1")

func le32Len(fn, arg string, n int) ([4]byte, error) {
	var b [4]byte
	if uint64(n) > math.MaxUint32 {
		return b, newError(CodeInvalidArgument, fmt.Sprintf(
			"%s: %s is %d; at most 4294967295 (the length is hashed as a 32-bit number)", fn, arg, n))
	}
	binary.LittleEndian.PutUint32(b[:], uint32(n))
	return b, nil
}

func checkTokens(fn string, tokens []int32) error {
	for i, t := range tokens {
		if t < 0 {
			return newError(CodeInvalidArgument, fmt.Sprintf("%s: tokens[%d] is %d; token ids must be >= 0", fn, i, t))
		}
	}
	return nil
}

func goBlockHashRoot(seed, salt []byte) (out [BlockHashSize]byte, err error) {
	const fn = "kvc_block_hash_root"
	seedLen, err := le32Len(fn, "seed_len", len(seed))
	if err != nil {
		return out, err
	}
	saltLen, err := le32Len(fn, "salt_len", len(salt))
	if err != nil {
		return out, err
	}
	h := sha256.New()
	for _, part := range [][]byte{blockHashDomain, seedLen[:], seed, saltLen[:], salt} {
		h.Write(part)
	}
	h.Sum(out[:0])
	return out, nil
}

// goBlock hashes one block whose tokens are already checked.
func goBlock(parent *[BlockHashSize]byte, tokens []int32, extra []byte, n, extraLen [4]byte) (out [BlockHashSize]byte) {
	h := sha256.New()
	h.Write(parent[:])
	h.Write(n[:])
	var chunk [256]byte
	for len(tokens) > 0 {
		m := min(len(tokens), len(chunk)/4)
		for j, t := range tokens[:m] {
			binary.LittleEndian.PutUint32(chunk[4*j:], uint32(t))
		}
		h.Write(chunk[:4*m])
		tokens = tokens[m:]
	}
	h.Write(extraLen[:])
	h.Write(extra)
	h.Sum(out[:0])
	return out
}

func goBlockHash(parent *[BlockHashSize]byte, tokens []int32, extra []byte) (out [BlockHashSize]byte, err error) {
	const fn = "kvc_block_hash"
	if len(tokens) == 0 {
		return out, newError(CodeInvalidArgument, fn+": num_tokens is 0; a block holds >= 1 token")
	}
	n, err := le32Len(fn, "num_tokens", len(tokens))
	if err == nil {
		err = checkTokens(fn, tokens)
	}
	var extraLen [4]byte
	if err == nil {
		extraLen, err = le32Len(fn, "extra_len", len(extra))
	}
	if err != nil {
		return out, err
	}
	return goBlock(parent, tokens, extra, n, extraLen), nil
}

func goBlockHashChain(root *[BlockHashSize]byte, tokens []int32, blockSize uint32) ([][BlockHashSize]byte, error) {
	const fn = "kvc_block_hash_chain"
	if blockSize == 0 {
		return nil, newError(CodeInvalidArgument, fn+": block_size is 0; it must be >= 1")
	}
	if err := checkTokens(fn, tokens); err != nil {
		return nil, err
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], blockSize)
	out := make([][BlockHashSize]byte, len(tokens)/int(blockSize))
	parent := root
	for i := range out {
		out[i] = goBlock(parent, tokens[i*int(blockSize):(i+1)*int(blockSize)], nil, n, [4]byte{})
		parent = &out[i]
	}
	return out, nil
}
