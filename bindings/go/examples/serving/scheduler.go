package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	kvcache "github.com/kvcache/kvcache/bindings/go"
)

// request is one generation in flight. Only the scheduler goroutine touches
// it after it was submitted; the handler waits on done.
type request struct {
	ctx       context.Context
	maxTokens int
	done      chan result // buffered: the scheduler never blocks on a handler that left

	seq         *kvcache.Sequence // nil while waiting
	written     []int32           // tokens whose K/V the sequence holds
	pending     []int32           // tokens the next step computes
	out         []int32           // generated so far
	cached      int64             // tokens the first admission found cached
	admissions  int
	preemptions int
	steps       int
}

type result struct {
	resp GenerateResponse
	err  error
}

// scheduler runs the steps. waiting is FIFO; running is the batch.
type scheduler struct {
	s                  *Server
	waiting, running   []*request
	steps, preemptions atomic.Int64 // read by GET /stats
	startAfter         int          // Config.startAfter, until the first step
}

// run is the scheduler goroutine: it takes new requests without blocking
// while there is work, and sleeps on the channel when there is none.
func (c *scheduler) run() {
	defer close(c.s.stopped)
	for {
		idle := len(c.waiting)+len(c.running) == 0 || len(c.waiting) < c.startAfter
		for wait := idle; ; wait = false {
			got, stop := c.take(wait)
			if stop {
				c.failAll(errShutdown)
				return
			}
			if !got {
				break
			}
		}
		if len(c.waiting) < c.startAfter {
			continue
		}
		c.startAfter = 0
		c.step()
	}
}

// ready is closed: a select case on it makes take return at once.
var ready = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// take moves one submitted request to waiting, waiting for one if wait;
// got: it moved one; stop: the server is stopping.
func (c *scheduler) take(wait bool) (got, stop bool) {
	now := ready
	if wait {
		now = nil // a nil channel never receives
	}
	select {
	case r := <-c.s.submit:
		c.waiting = append(c.waiting, r)
		return true, false
	case <-c.s.quit:
		return false, true
	case <-now:
		return false, false
	}
}

// step is one iteration of continuous batching: drop what the clients
// abandoned, admit waiting requests while blocks allow, give every running
// request slots for its pending tokens (preempting those that find none),
// run the model on the batch, commit, and answer the finished ones.
func (c *scheduler) step() {
	c.dropAbandoned()
	c.admit()
	batch, slots := c.reserve()
	if len(batch) == 0 {
		if len(c.waiting) > 0 && len(c.running) == 0 {
			// Nothing runs, so every block is free or cached, and the head
			// still does not fit: it never will (check refuses such requests).
			c.respond(c.waiting[0], result{err: errors.New("the request does not fit in the empty pool")})
			c.waiting = c.waiting[1:]
		}
		return
	}
	c.steps.Add(1)
	if err := c.forward(batch, slots); err != nil {
		for _, r := range batch {
			c.fail(r, err)
		}
		return
	}
	for _, r := range batch {
		if err := r.seq.Commit(); err != nil { // full blocks become reusable by later prompts
			c.fail(r, err)
			continue
		}
		r.steps++
		if len(r.out) == r.maxTokens {
			c.finish(r)
		}
	}
}

// admit starts waiting requests, oldest first, while the batch has room
// and the pool has the blocks their uncached tokens need. A request's
// cached prefix (written by an earlier request with the same prompt start,
// or by itself before a preemption) is attached, not computed.
func (c *scheduler) admit() {
	p := c.s.pool
	for len(c.waiting) > 0 && len(c.running) < c.s.cfg.MaxBatch {
		r := c.waiting[0]
		seq, err := p.NewSequence(nil)
		if err != nil {
			c.waiting = c.waiting[1:]
			c.respond(r, result{err: err})
			continue
		}
		hit, err := seq.MatchPrefix(r.pending)
		var need []uint64
		var st kvcache.PoolStats
		if err == nil {
			need, err = p.BlocksNeeded([]*kvcache.Sequence{seq}, []uint64{uint64(int64(len(r.pending)) - hit)})
		}
		if err == nil {
			st, err = p.Stats(0)
		}
		if err != nil {
			seq.Close()
			c.waiting = c.waiting[1:]
			c.respond(r, result{err: err})
			continue
		}
		if need[0] > st.AvailableBlocks() {
			seq.Close() // its matched blocks stay cached for the next try
			return
		}
		c.waiting = c.waiting[1:]
		if r.admissions == 0 {
			r.cached = hit
		}
		r.admissions++
		r.seq = seq
		r.written, r.pending = r.pending[:hit:hit], r.pending[hit:]
		c.running = append(c.running, r)
	}
}

// reserve gives each running request's pending tokens their slots. A
// request the pool has no blocks for is preempted: it gives its blocks
// back and waits at the head of the queue to be recomputed (its committed
// blocks stay cached, so mostly matched rather than recomputed).
func (c *scheduler) reserve() ([]*request, []kvcache.SlotMapping) {
	var batch, preempted []*request
	var slots []kvcache.SlotMapping
	for _, r := range c.running {
		m, err := r.seq.Reserve(r.pending)
		switch {
		case err == nil:
			batch = append(batch, r)
			slots = append(slots, m)
		case errors.Is(err, kvcache.ErrOutOfMemory):
			r.seq.Close()
			r.seq = nil
			r.pending = append(r.written, r.pending...)
			r.written = nil
			r.preemptions++
			c.preemptions.Add(1)
			preempted = append(preempted, r)
		default:
			r.seq.Close()
			r.seq = nil
			c.respond(r, result{err: err})
		}
	}
	c.running = slices.Clone(batch) // finish and fail remove from running while step walks batch
	c.waiting = append(preempted, c.waiting...)
	return batch, slots
}

// forward is the fake model's step over the batch: every layer's K/V of
// every pending token, stored through the slots in one write, then an
// "attention" that reads the context back from the pool's blocks through
// the block table, as a paged-attention kernel does.
func (c *scheduler) forward(batch []*request, slots []kvcache.SlotMapping) error {
	m := c.s.cfg.Model
	total := 0
	for _, r := range batch {
		total += len(r.pending)
	}
	width := m.Heads * m.HeadDim
	keys := make([]kvcache.Tensor[float32], m.Layers)
	values := make([]kvcache.Tensor[float32], m.Layers)
	for l := range keys {
		keys[l] = kvcache.NewTensor[float32](int64(total), int64(m.Heads), int64(m.HeadDim))
		values[l] = kvcache.NewTensor[float32](int64(total), int64(m.Heads), int64(m.HeadDim))
		row := 0
		for _, r := range batch {
			for i, tok := range r.pending {
				pos := len(r.written) + i
				for e := 0; e < width; e++ {
					keys[l].Data[row*width+e] = key(tok, pos, l, e)
					values[l].Data[row*width+e] = value(tok, pos, l, e)
				}
				row++
			}
		}
	}
	all, err := kvcache.ConcatSlots(slots...)
	if err != nil {
		return err
	}
	// Layer by layer, as a model's forward pass produces them: layer l's K/V
	// exist only after layer l-1 ran (and attended). Every layer passes the
	// same mapping of the step; the pool checks it once.
	for l := range keys {
		if err := c.s.pool.WriteLayer(l, keys[l], values[l], all.Slots); err != nil {
			return err
		}
	}
	seqs := make([]*kvcache.Sequence, len(batch))
	for i, r := range batch {
		seqs[i] = r.seq
	}
	view, err := c.s.pool.BlockTable(seqs, 0)
	if err != nil {
		return err
	}
	table, err := view.Int32s()
	if err != nil {
		return err
	}
	width = int(view.Shape()[1])
	for i, r := range batch {
		r.written = append(r.written, r.pending...)
		r.out = append(r.out, m.next(c.attend(table[i*width:(i+1)*width], len(r.written)), len(r.written)-1))
		r.pending = r.out[len(r.out)-1:]
	}
	return nil
}

// attend sums element 0 of head 0 of layer 0's keys over the first n
// tokens of a sequence whose block table row is blocks.
func (c *scheduler) attend(blocks []int32, n int) float32 {
	bs := int(c.s.cfg.BlockSize)
	k := c.s.keys0 // [num_blocks, block_size, heads, head_dim], compact
	var sum float32
	for p := 0; p < n; p++ {
		sum += k.Data[int(blocks[p/bs])*int(k.Strides[0])+(p%bs)*int(k.Strides[1])]
	}
	return sum
}

// finish checks what the sequence holds against its tokens, layer by
// layer, then closes it (its full blocks stay cached) and answers.
func (c *scheduler) finish(r *request) {
	m := c.s.cfg.Model
	res := result{resp: GenerateResponse{Tokens: r.out, CachedTokens: r.cached, Preemptions: r.preemptions,
		Steps: r.steps, KVChecked: true}}
	for l := 0; l < m.Layers && res.err == nil; l++ {
		k, v, err := kvcache.GatherTensors[float32](r.seq, l) // [1, heads, tokens, head_dim]
		if err != nil {
			res.err = err
			break
		}
		for h := 0; h < m.Heads && res.err == nil; h++ {
			for p, tok := range r.written {
				for d := 0; d < m.HeadDim; d++ {
					i := (h*len(r.written)+p)*m.HeadDim + d
					if e := h*m.HeadDim + d; k.Data[i] != key(tok, p, l, e) || v.Data[i] != value(tok, p, l, e) {
						res.err = fmt.Errorf("layer %d, head %d, position %d: the pool holds K %v V %v, not the K/V of token %d",
							l, h, p, k.Data[i], v.Data[i], tok)
						break
					}
				}
			}
		}
	}
	c.remove(r)
	c.respond(r, res)
}

func (c *scheduler) fail(r *request, err error) {
	c.remove(r)
	c.respond(r, result{err: err})
}

// remove takes r out of the batch and closes its sequence.
func (c *scheduler) remove(r *request) {
	if i := slices.Index(c.running, r); i >= 0 {
		c.running = slices.Delete(c.running, i, i+1)
	}
	if r.seq != nil {
		r.seq.Close()
		r.seq = nil
	}
}

func (c *scheduler) respond(r *request, res result) { r.done <- res }

// dropAbandoned forgets the requests whose clients left.
func (c *scheduler) dropAbandoned() {
	for _, q := range []*[]*request{&c.running, &c.waiting} {
		*q = slices.DeleteFunc(*q, func(r *request) bool {
			if r.ctx.Err() == nil {
				return false
			}
			if r.seq != nil {
				r.seq.Close()
			}
			return true
		})
	}
}

func (c *scheduler) failAll(err error) {
	for _, r := range append(c.running, c.waiting...) {
		if r.seq != nil {
			r.seq.Close()
		}
		c.respond(r, result{err: err})
	}
	c.running, c.waiting = nil, nil
}
