// Command serving is an HTTP server that generates tokens with continuous
// batching over a kvcache block pool and a fake, deterministic model: the
// scheduling a serving engine does around its model, with the pool doing
// the paging, prefix caching and preemption bookkeeping. README.md walks
// through it.
//
//	go run ./examples/serving -addr 127.0.0.1:8080
//	curl -s localhost:8080/generate -d '{"prompt": [1, 2, 3, 4, 5], "max_tokens": 8}'
//	curl -s localhost:8080/stats
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	blocks := flag.Uint("blocks", 1024, "blocks in the pool")
	blockSize := flag.Uint("block-size", 16, "tokens per block")
	batch := flag.Int("max-batch", 64, "requests one step runs at most")
	flag.Parse()
	srv, err := New(Config{Model: Model{Layers: 4, Heads: 2, HeadDim: 8, Vocab: 32000},
		BlockSize: uint32(*blockSize), NumBlocks: uint32(*blocks), MaxBatch: *batch, HashSeed: "fake-model-v1"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	log.Printf("serving on http://%s (POST /generate, GET /stats)", *addr)
	log.Fatal(http.ListenAndServe(*addr, srv.Handler()))
}
