package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kvcache "github.com/kvcache/kvcache/bindings/go"
)

var tiny = Model{Layers: 3, Heads: 2, HeadDim: 4, Vocab: 1000}

// start runs a server on a loopback port; without cgo there is no pool,
// and the test says so.
func start(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	srv, err := New(cfg)
	if errors.Is(err, kvcache.ErrCgoDisabled) {
		t.Skipf("SKIPPED: built without cgo, so there is no pool to serve from: %v", err)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close() })
	return srv, ts
}

func post(url string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.Post(url+"/generate", "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func generate(url string, req GenerateRequest) (GenerateResponse, error) {
	var out GenerateResponse
	code, body, err := post(url, req)
	if err != nil {
		return out, err
	}
	if code != http.StatusOK {
		return out, fmt.Errorf("status %d: %s", code, body)
	}
	return out, json.Unmarshal(body, &out)
}

func stats(t *testing.T, url string) Stats {
	t.Helper()
	resp, err := http.Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// expected is the model run by hand, without the pool: each token's key
// (layer 0, element 0) summed over the context picks the next token.
func expected(prompt []int32, n int, vocab int32) []int32 {
	ctx := append([]int32(nil), prompt...)
	var sum int64
	for p := 0; len(ctx) < len(prompt)+n; p++ {
		sum += int64((int(ctx[p])*7 + p*3) % 1009)
		if p == len(ctx)-1 {
			ctx = append(ctx, int32((sum*31+int64(p))%int64(vocab)))
		}
	}
	return ctx[len(prompt):]
}

// runAll sends the requests concurrently and checks every answer against
// the model run without a cache; it returns the answers in request order.
func runAll(t *testing.T, url string, reqs []GenerateRequest) []GenerateResponse {
	t.Helper()
	out := make([]GenerateResponse, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = generate(url, r)
		}()
	}
	wg.Wait()
	for i, r := range reqs {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if want := expected(r.Prompt, r.MaxTokens, tiny.Vocab); !slices.Equal(out[i].Tokens, want) {
			t.Fatalf("request %d: tokens %v, want %v", i, out[i].Tokens, want)
		}
		if !out[i].KVChecked {
			t.Fatalf("request %d: the K/V were not checked", i)
		}
	}
	return out
}

// allBack checks that every block is free or cached and no sequence is
// open once the requests are answered.
func allBack(t *testing.T, url string, numBlocks uint32) Stats {
	t.Helper()
	s := stats(t, url)
	if s.UsedBlocks != 0 || s.OpenSequences != 0 || s.FreeBlocks+s.CachedBlocks != uint64(numBlocks-1) {
		t.Fatalf("after every answer: %+v", s)
	}
	return s
}

func TestServerBatchesRequestsSharingAPrefix(t *testing.T) {
	const blocks = 256
	prefix := []int32{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22} // three blocks of 4
	reqs := make([]GenerateRequest, 32)
	for i := range reqs {
		suffix := []int32{int32(100 + i%8), int32(200 + i%3)} // i and i+24 ask the same
		reqs[i] = GenerateRequest{Prompt: append(slices.Clone(prefix), suffix[:1+i%2]...), MaxTokens: 4 + i%9}
	}
	_, ts := start(t, Config{Model: tiny, BlockSize: 4, NumBlocks: blocks, MaxBatch: 8, HashSeed: "tiny",
		startAfter: len(reqs)})
	// The first step waits for all of them: the batch is full from the start.
	answers := runAll(t, ts.URL, reqs)
	steps, tokens := 0, 0
	for i, a := range answers {
		if a.Steps < 1 {
			t.Fatalf("request %d ran in %d steps", i, a.Steps)
		}
		steps += a.Steps
		tokens += reqs[i].MaxTokens
	}
	s := allBack(t, ts.URL, blocks)
	hits := 0
	for _, a := range answers {
		if a.CachedTokens >= int64(len(prefix)) {
			hits++
		}
	}
	// 8 run at once: the first 8 compute the prefix, the other 24 are
	// admitted later, when its blocks are committed.
	if hits != len(reqs)-8 || s.PrefixHits < uint64(3*(len(reqs)-8)) {
		t.Fatalf("%d of %d requests found the prefix cached, %d block hits", hits, len(reqs), s.PrefixHits)
	}
	if s.Steps >= int64(steps) || s.Steps >= int64(tokens) {
		t.Fatalf("%d steps for %d request-steps: nothing ran in the same batch", s.Steps, steps)
	}
	t.Logf("%d requests, %d tokens in %d steps; %d requests hit the prefix, %d block hits of %d queries",
		len(reqs), tokens, s.Steps, hits, s.PrefixHits, s.PrefixQueries)

	// A second round on the warm pool: every request is cached up to its
	// last full block, the answers are the same.
	again := runAll(t, ts.URL, reqs)
	for i, a := range again {
		if a.CachedTokens < int64(len(prefix)) {
			t.Fatalf("second round, request %d: %d tokens cached", i, a.CachedTokens)
		}
	}
	allBack(t, ts.URL, blocks)
}

func TestServerPreemptsWhenBlocksRunOutAndStaysExact(t *testing.T) {
	const blocks = 20 // 19 usable; 8 requests of up to 25 tokens (7 blocks) each do not fit at once
	reqs := make([]GenerateRequest, 12)
	for i := range reqs {
		prompt := make([]int32, 10)
		for j := range prompt {
			prompt[j] = int32(1 + i*10 + j)
		}
		reqs[i] = GenerateRequest{Prompt: prompt, MaxTokens: 16}
	}
	_, ts := start(t, Config{Model: tiny, BlockSize: 4, NumBlocks: blocks, MaxBatch: 8, HashSeed: "tiny",
		startAfter: len(reqs)})
	answers := runAll(t, ts.URL, reqs)
	s := allBack(t, ts.URL, blocks)
	preempted := 0
	for _, a := range answers {
		preempted += a.Preemptions
	}
	if s.Preemptions == 0 || int64(preempted) != s.Preemptions {
		t.Fatalf("%d preemptions in the answers, %d in the stats: the pool was expected to run short", preempted, s.Preemptions)
	}
	t.Logf("%d requests in %d steps, %d preemptions, %d evictions", len(reqs), s.Steps, s.Preemptions, s.Evictions)
}

func TestServerRefusesWhatCannotRun(t *testing.T) {
	_, ts := start(t, Config{Model: tiny, BlockSize: 4, NumBlocks: 8, MaxBatch: 4, HashSeed: "tiny"})
	for _, c := range []struct {
		body any
		want string
	}{
		{"not json", "bad JSON"},
		{GenerateRequest{Prompt: nil, MaxTokens: 3}, "at least one token"},
		{GenerateRequest{Prompt: []int32{1}, MaxTokens: 0}, "max_tokens"},
		{GenerateRequest{Prompt: []int32{1, 1000}, MaxTokens: 2}, "prompt[1] is 1000"},
		{GenerateRequest{Prompt: make([]int32, 28), MaxTokens: 2}, "29 tokens, 8 blocks of 4, but the pool has 7"},
	} {
		code, body, err := post(ts.URL, c.body)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.want) {
			t.Fatalf("%v: status %d, %q; want 400 and %q", c.body, code, body, c.want)
		}
	}
	// The largest request that fits runs.
	if _, err := generate(ts.URL, GenerateRequest{Prompt: make([]int32, 26), MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	allBack(t, ts.URL, 8)
}

func TestServerDropsRequestsWhoseClientLeft(t *testing.T) {
	_, ts := start(t, Config{Model: tiny, BlockSize: 4, NumBlocks: 64, MaxBatch: 4, HashSeed: "tiny", startAfter: 2})
	// The first step waits for two requests: the first one's client leaves
	// before it, so that step has only the second to run.
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		b, _ := json.Marshal(GenerateRequest{Prompt: []int32{1, 2, 3}, MaxTokens: 50})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/generate", bytes.NewReader(b))
		_, err := http.DefaultClient.Do(req)
		left <- err
	}()
	time.Sleep(100 * time.Millisecond) // the first request is waiting in the scheduler
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned request: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // the server sees the connection close
	got, err := generate(ts.URL, GenerateRequest{Prompt: []int32{4, 5, 6}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := expected([]int32{4, 5, 6}, 2, tiny.Vocab); !slices.Equal(got.Tokens, want) {
		t.Fatalf("tokens %v, want %v", got.Tokens, want)
	}
	if s := allBack(t, ts.URL, 64); s.Steps != 2 || s.PrefixQueries != 0 {
		t.Fatalf("the abandoned request ran: %d steps, %d prefix queries (want 2 and 0: prompts under a block)",
			s.Steps, s.PrefixQueries)
	}
}
