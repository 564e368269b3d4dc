package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	kvcache "github.com/kvcache/kvcache/bindings/go"
)

// Config sizes the server: the model, the pool's blocks and how many
// requests one step runs at most.
type Config struct {
	Model     Model
	BlockSize uint32 // tokens per block
	NumBlocks uint32 // blocks of the pool, the null block included
	MaxBatch  int    // running requests per step
	HashSeed  string // names the model's weights: blocks are reused only within one seed

	// startAfter holds the first step until this many requests wait, so that
	// a test's batch is the same whatever order its requests arrive in.
	startAfter int
}

// Server answers POST /generate from one block pool, with continuous
// batching: one scheduler goroutine owns the running batch and steps it;
// HTTP handlers only hand requests over and wait. GET /stats reads the
// pool from the handlers' goroutines meanwhile: a Pool is safe for
// concurrent use.
type Server struct {
	cfg     Config
	pool    *kvcache.Pool
	keys0   kvcache.Tensor[float32] // layer 0's key storage, what the fake attention reads
	submit  chan *request
	quit    chan struct{}
	stopped chan struct{}
	close   sync.Once

	sched scheduler // the scheduler goroutine's alone
}

// New makes the pool and starts the scheduler.
func New(cfg Config) (*Server, error) {
	m := cfg.Model
	pool, err := kvcache.NewPool(kvcache.PoolOptions{
		DType:    kvcache.DTypeFloat32,
		Groups:   []kvcache.PoolGroup{kvcache.FullGroup(cfg.BlockSize, cfg.NumBlocks)},
		Layers:   kvcache.RepeatLayer(m.Layers, kvcache.AttentionLayer(0, uint32(m.Heads), uint32(m.HeadDim))),
		HashSeed: []byte(cfg.HashSeed),
	})
	if err != nil {
		return nil, err
	}
	// The storage never moves: a view of it is valid until the pool closes.
	kv, err := pool.LayerStorage(0, kvcache.LayoutNHD)
	if err == nil {
		var keys0 kvcache.Tensor[float32]
		if keys0, err = kvcache.As[float32](kv.Key); err == nil {
			s := &Server{cfg: cfg, pool: pool, keys0: keys0, submit: make(chan *request),
				quit: make(chan struct{}), stopped: make(chan struct{})}
			s.sched.s, s.sched.startAfter = s, cfg.startAfter
			go s.sched.run()
			return s, nil
		}
	}
	pool.Close()
	return nil, err
}

// Close stops the scheduler (requests still in flight get 503), then frees
// the pool.
func (s *Server) Close() {
	s.close.Do(func() {
		close(s.quit)
		<-s.stopped
		s.pool.Close()
	})
}

// Handler routes the server's endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /generate", s.generate)
	mux.HandleFunc("GET /stats", s.stats)
	return mux
}

// GenerateRequest is the body of POST /generate.
type GenerateRequest struct {
	Prompt    []int32 `json:"prompt"`     // token ids
	MaxTokens int     `json:"max_tokens"` // tokens to generate
}

// GenerateResponse is its answer.
type GenerateResponse struct {
	Tokens       []int32 `json:"tokens"`        // the generated tokens
	CachedTokens int64   `json:"cached_tokens"` // prompt tokens found cached at admission (not computed)
	Preemptions  int     `json:"preemptions"`   // times the request gave its blocks back and was recomputed
	Steps        int     `json:"steps"`         // scheduler steps it ran in
	KVChecked    bool    `json:"kv_checked"`    // every layer's gathered K/V matched its tokens at the end
}

// errShutdown answers requests the server stopped before finishing.
var errShutdown = errors.New("the server is shutting down")

func (s *Server) generate(w http.ResponseWriter, req *http.Request) {
	var body GenerateRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<20)).Decode(&body); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.check(body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r := &request{ctx: req.Context(), pending: append([]int32(nil), body.Prompt...), maxTokens: body.MaxTokens,
		done: make(chan result, 1)}
	select {
	case s.submit <- r:
	case <-s.quit:
		http.Error(w, errShutdown.Error(), http.StatusServiceUnavailable)
		return
	}
	var res result
	select {
	case res = <-r.done:
	case <-req.Context().Done(): // the client left; the scheduler drops the request at its next step
		return
	}
	if res.err != nil {
		code := http.StatusInternalServerError
		if errors.Is(res.err, errShutdown) {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, res.err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res.resp)
}

// check refuses what no step could run: an empty prompt, tokens outside
// the vocabulary, and a request whose tokens need more blocks than the pool
// has (it would wait forever).
func (s *Server) check(b GenerateRequest) error {
	if len(b.Prompt) == 0 || b.MaxTokens < 1 || b.MaxTokens > 1<<16 {
		return fmt.Errorf("prompt must hold at least one token and max_tokens must be in [1, 65536] (got %d tokens, max_tokens %d)",
			len(b.Prompt), b.MaxTokens)
	}
	for i, t := range b.Prompt {
		if t < 0 || t >= s.cfg.Model.Vocab {
			return fmt.Errorf("prompt[%d] is %d, outside the vocabulary [0, %d)", i, t, s.cfg.Model.Vocab)
		}
	}
	// The last generated token is never written: the sequence holds at most
	// len(prompt) + max_tokens - 1 tokens.
	tokens := uint64(len(b.Prompt) + b.MaxTokens - 1)
	bs := uint64(s.cfg.BlockSize)
	if need, have := (tokens+bs-1)/bs, uint64(s.cfg.NumBlocks)-1; need > have {
		return fmt.Errorf("the request needs %d tokens, %d blocks of %d, but the pool has %d blocks", tokens, need, bs, have)
	}
	return nil
}

// Stats is the body of GET /stats.
type Stats struct {
	NumBlocks     uint64 `json:"num_blocks"`     // usable blocks
	FreeBlocks    uint64 `json:"free_blocks"`    // neither used nor cached
	CachedBlocks  uint64 `json:"cached_blocks"`  // unused, holding a cached prefix: reusable, evictable
	UsedBlocks    uint64 `json:"used_blocks"`    // held by running sequences
	PrefixQueries uint64 `json:"prefix_queries"` // blocks MatchPrefix looked up
	PrefixHits    uint64 `json:"prefix_hits"`    // of which it found
	Evictions     uint64 `json:"evictions"`      // cached blocks reused for new data
	OpenSequences int    `json:"open_sequences"` // sequences not closed: the running requests
	Steps         int64  `json:"steps"`
	Preemptions   int64  `json:"preemptions"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	st, err := s.pool.Stats(0)
	var open int
	if err == nil {
		open, err = s.pool.OpenSequences()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Stats{NumBlocks: st.NumBlocks, FreeBlocks: st.FreeBlocks, CachedBlocks: st.CachedBlocks,
		UsedBlocks: st.UsedBlocks, PrefixQueries: st.PrefixQueries, PrefixHits: st.PrefixHits, Evictions: st.Evictions,
		OpenSequences: open, Steps: s.sched.steps.Load(), Preemptions: s.sched.preemptions.Load()})
}
