//go:build cgo

package kvcache

// Blocks by key from Go (Tier.Exists, GetBlocks, PutBlocks; ModelFingerprint
// and ModelBlockPayload): round trips on a disk tier and a Redis tier, a
// pool's blocks read by key and blocks put by key matched by a pool (keys
// from the options and the router's hash chain), misses for another size,
// bad arguments refused with nothing stored.

import (
	"bytes"
	"slices"
	"testing"
)

func keysOpts() PoolOptions {
	return PoolOptions{
		DType:    DTypeFloat32,
		Groups:   []PoolGroup{FullGroup(pBlock, 16)},
		Layers:   RepeatLayer(pLayers, PoolLayer{NumKVHeads: pHeads, KeyHeadDim: pDim, ValueHeadDim: pVDim}),
		HashSeed: []byte("keys-test"),
	}
}

func promptKeys(t *testing.T, opts PoolOptions, tokens []int32) []TierKey {
	fp := must[[BlockHashSize]byte](t)(ModelFingerprint(opts))
	root := must[[BlockHashSize]byte](t)(BlockHashRoot(opts.HashSeed, nil))
	hashes := must[[][BlockHashSize]byte](t)(BlockHashChain(root, tokens, pBlock))
	keys := make([]TierKey, len(hashes))
	for i, h := range hashes {
		keys[i] = TierKey{Fingerprint: fp, BlockHash: h}
	}
	return keys
}

// checkByKey stores two of four blocks by key and reads them back; the tier is closed after.
func checkByKey(t *testing.T, tier Tier, closeTier func() error) {
	defer closeTier()
	type byKey interface {
		Exists([]TierKey) ([]bool, error)
		GetBlocks([]TierKey, []byte, int, uint32) ([]bool, error)
		PutBlocks([]TierKey, []byte, int, uint32) (int, error)
	}
	k := tier.(byKey)
	keys := make([]TierKey, 4)
	for i := range keys {
		keys[i].Fingerprint[0] = 9
		keys[i].BlockHash[0] = byte(i + 1)
		keys[i].Group = uint32(i % 2)
	}
	payload := bytes.Repeat([]byte{1, 2, 3, 4, 5}, 40) // 200 bytes
	both := append(append([]byte{}, payload...), bytes.Repeat([]byte{7}, 200)...)
	if got := must[[]bool](t)(k.Exists(keys)); !slices.Equal(got, []bool{false, false, false, false}) {
		t.Fatalf("exists before: %v", got)
	}
	if n := must[int](t)(k.PutBlocks([]TierKey{keys[1], keys[3]}, both, 200, 2)); n != 2 {
		t.Fatalf("stored %d, want 2", n)
	}
	if got := must[[]bool](t)(k.Exists(keys)); !slices.Equal(got, []bool{false, true, false, true}) {
		t.Fatalf("exists after: %v", got)
	}
	buf := make([]byte, 4*200)
	if got := must[[]bool](t)(k.GetBlocks(keys, buf, 200, 2)); !slices.Equal(got, []bool{false, true, false, true}) {
		t.Fatalf("found %v", got)
	}
	if !bytes.Equal(buf[200:400], payload) || !bytes.Equal(buf[600:], both[200:]) {
		t.Fatalf("the blocks came back wrong")
	}
	if got := must[[]bool](t)(k.GetBlocks(keys[1:2], make([]byte, 199), 199, 2)); got[0] {
		t.Fatalf("a value of another size was found")
	}
	_, err := k.PutBlocks(keys[:2], both[:399], 200, 2)
	wantErr(t, err, CodeInvalidArgument, "len(keys)*payloadSize")
	_, err = k.PutBlocks(keys[:1], payload, 200, 0)
	wantErr(t, err, CodeInvalidArgument, "num_layers is 0")
}

func TestTierKeysOnDisk(t *testing.T) {
	tier := must[*DiskTier](t)(NewDiskTier(t.TempDir(), 0))
	checkByKey(t, tier, tier.Close)
}

func TestTierKeysOnRedis(t *testing.T) {
	addr := startRedis(t)
	tier := must[*RedisTier](t)(NewRedisTier(RedisTierOptions{Seeds: []string{addr}, KeyPrefix: "gokeys:"}))
	checkByKey(t, tier, tier.Close)
}

func TestTierKeysShareBlocksWithAPool(t *testing.T) {
	opts := keysOpts()
	fp := must[[BlockHashSize]byte](t)(ModelFingerprint(opts))
	p := mkLayoutPool(t, 16, LayoutNHD)
	if pfp := must[[BlockHashSize]byte](t)(p.Fingerprint()); pfp == fp {
		t.Fatalf("another seed gave the same fingerprint")
	}
	p, err := NewPool(opts)
	ok(t, err)
	defer p.Close()
	if pfp := must[[BlockHashSize]byte](t)(p.Fingerprint()); pfp != fp {
		t.Fatalf("ModelFingerprint differs from the pool's")
	}
	size, layers, err := ModelBlockPayload(opts, 0)
	ok(t, err)
	if layers != pLayers || size != 2*pBlock*pHeads*(pDim+pVDim)*4 {
		t.Fatalf("payload %d over %d layers", size, layers)
	}
	_, _, err = ModelBlockPayload(opts, 1)
	wantErr(t, err, CodeInvalidArgument, "group is 1")

	dirA, dirB := t.TempDir(), t.TempDir()
	ok(t, p.AddTier(must[*DiskTier](t)(NewDiskTier(dirA, 0)), TierWriteOnCommit))
	prompt := seqTokens(1, 13) // three full blocks and one token
	s := mkSeq(t, p, nil)
	prefillSeq(t, p, s, prompt, 0)
	keys := promptKeys(t, opts, prompt)
	reader := must[*DiskTier](t)(NewDiskTier(dirA, 0))
	defer reader.Close()
	buf := make([]byte, len(keys)*size)
	if got := must[[]bool](t)(reader.GetBlocks(keys, buf, size, layers)); !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("the pool's blocks by key: %v", got)
	}
	writer := must[*DiskTier](t)(NewDiskTier(dirB, 0))
	defer writer.Close()
	if n := must[int](t)(writer.PutBlocks(keys, buf, size, layers)); n != 3 {
		t.Fatalf("stored %d", n)
	}
	q, err := NewPool(opts)
	ok(t, err)
	defer q.Close()
	ok(t, q.AddTier(must[*DiskTier](t)(NewDiskTier(dirB, 0)), TierWriteOnCommit))
	s2 := mkSeq(t, q, nil)
	if m := must[int64](t)(s2.MatchPrefix(prompt)); m != 12 {
		t.Fatalf("matched %d from blocks put by key, want 12", m)
	}
}
