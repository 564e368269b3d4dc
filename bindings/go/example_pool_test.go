//go:build cgo

package kvcache_test

import (
	"fmt"
	"log"

	kvcache "github.com/kvcache/kvcache/bindings/go"
)

// A block pool: a request fills two blocks and commits them, a later
// request with the same prompt finds them cached, and the events say what a
// router would forward.
func ExampleNewPool() {
	pool, err := kvcache.NewPool(kvcache.PoolOptions{
		DType:         kvcache.DTypeFloat32,
		Groups:        []kvcache.PoolGroup{kvcache.FullGroup(4, 16)}, // 4-token blocks
		Layers:        kvcache.RepeatLayer(2, kvcache.AttentionLayer(0, 2, 8)),
		HashSeed:      []byte("tiny-model"),
		EventCapacity: 64,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	seq, err := pool.NewSequence(nil)
	if err != nil {
		log.Fatal(err)
	}
	slots, err := seq.Reserve(prompt)
	if err != nil {
		log.Fatal(err)
	}
	kv := kvcache.NewTensor[float32](int64(len(prompt)), 2, 8) // [tokens, kv_heads, head_dim]
	layers := kvcache.Inputs(kv, kv)
	if err := pool.Write(layers, layers, slots.Slots); err != nil {
		log.Fatal(err)
	}
	if err := seq.Commit(); err != nil {
		log.Fatal(err)
	}
	seq.Close()
	again, err := pool.NewSequence(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer again.Close()
	hit, err := again.MatchPrefix(prompt)
	if err != nil {
		log.Fatal(err)
	}
	events, err := pool.Events()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cached tokens:", hit)
	for _, e := range events {
		// The hashes are docs/block-hash.md's: a router computes the same.
		fmt.Printf("event %d: stored %v, %d tokens, hash %x...\n", e.ID, e.Kind == kvcache.EventBlockStored,
			e.NumTokens, e.BlockHash[:4])
	}
	// Output:
	// cached tokens: 8
	// event 1: stored true, 4 tokens, hash b5d2e535...
	// event 2: stored true, 4 tokens, hash de676d16...
}
