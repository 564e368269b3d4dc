package kvcache

// The per-layer pool write and the batched scheduling calls (Since 0.7).

import (
	"fmt"
	"runtime"
	"unsafe"
)

// WriteLayer stores one layer's K/V of a step through the step's slot
// mapping: the call a model's forward pass makes per layer, once the layer
// computed them (one kernel launch on a GPU). key and value are [num_tokens,
// num_kv_heads, head_dim] on the pool's device (a latent layer: value nil,
// since 0.7); slots is the whole step's
// mapping, as Write takes it: pass the same slice to every layer of the step
// (its row for the layer's group is checked on the first layer; later layers
// compare it with that row). Table and state views stay valid.
func (p *Pool) WriteLayer(layer int, key, value Input, slots []int64) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.WriteLayer")
	const fn = "WriteLayer"
	if p.handle() == nil {
		return ErrPoolClosed
	}
	l, err := layerAndInput(fn, layer, "key", key)
	if err != nil {
		return err
	}
	err = p.write(fn, []Input{key}, []Input{value}, slots, func(h unsafe.Pointer, arr *tensorArrays, tokens int) error {
		return cPoolWriteLayer(h, l, arr.keys(), optionalValues(arr, value), slots, tokens)
	})
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return err
}

// optionalValues is the C argument of a one-layer call's value: NULL when the
// caller passed nil (a latent layer has no V), so that the library says so if
// the layer wants one.
func optionalValues(arr *tensorArrays, value Input) unsafe.Pointer {
	if value == nil {
		return nil
	}
	return arr.values()
}

// ReserveBatch is a scheduler's step in one call: Sequence.Reserve of
// numTokens[i] tokens for each seqs[i], in order, tokens holding their tokens
// one after another. It returns how many sequences were reserved (a prefix
// of seqs) and the batch's slot mapping, the form Write and WriteLayer take.
// When the pool runs out of blocks the batch stops at the first sequence that
// does not fit: it and the later ones are unchanged and their slots are -1
// (a write skips them); that is not an error. Bad arguments (a sequence of
// another pool or listed twice, a negative token, counts that do not add up
// to len(tokens)) reserve nothing. Before stopping short, it gives back the
// blocks of sequences dropped without Close and goes on, as Sequence.Reserve
// does.
func (p *Pool) ReserveBatch(seqs []*Sequence, tokens []int32, numTokens []uint64) (_ int, _ SlotMapping, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.ReserveBatch")
	const fn = "ReserveBatch"
	if len(seqs) != len(numTokens) {
		return 0, SlotMapping{}, newError(CodeInvalidArgument,
			fmt.Sprintf("%s: %d sequences but %d token counts", fn, len(seqs), len(numTokens)))
	}
	var total uint64
	for _, n := range numTokens {
		total += n
		if total < n || total > uint64(len(tokens)) {
			break
		}
	}
	if total != uint64(len(tokens)) {
		return 0, SlotMapping{}, newError(CodeInvalidArgument, fmt.Sprintf(
			"%s: tokens has %d entries but numTokens adds up to more or less (the sequences' tokens one after another)",
			fn, len(tokens)))
	}
	raw, err := p.handles(fn, seqs)
	if err != nil {
		return 0, SlotMapping{}, err
	}
	h, err := p.enter(true)
	if err != nil {
		return 0, SlotMapping{}, err
	}
	m := SlotMapping{Slots: make([]int64, len(p.groups)*len(tokens)), NumGroups: len(p.groups)}
	reserved, err := cPoolReserveBatch(h, raw, tokens, numTokens, m.Slots)
	if err == nil && reserved < len(seqs) && p.created > 0 && p.reclaim() > 0 {
		// Blocks held by sequences dropped without Close came back: the
		// batch goes on from the first sequence that did not fit, as one
		// call would have had they been closed.
		var more int
		more, err = p.reserveRest(raw[reserved:], tokens, numTokens, reserved, m.Slots)
		reserved += more
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(seqs)
	if err != nil {
		return 0, SlotMapping{}, err
	}
	return reserved, m, nil
}

// reserveRest reserves the sequences raw (sequences [first, n) of a batch
// whose first `first` are reserved) and writes their slots into the batch's
// mapping, whose row of group g is slots[g*T : (g+1)*T].
func (p *Pool) reserveRest(raw []unsafe.Pointer, tokens []int32, numTokens []uint64, first int, slots []int64) (int, error) {
	var off uint64
	for _, n := range numTokens[:first] {
		off += n
	}
	rest := tokens[off:]
	sub := make([]int64, len(p.groups)*len(rest))
	h, err := p.enter(true)
	if err != nil {
		return 0, err
	}
	more, err := cPoolReserveBatch(h, raw, rest, numTokens[first:], sub)
	if err != nil {
		return 0, err
	}
	for g := range p.groups {
		copy(slots[g*len(tokens)+int(off):(g+1)*len(tokens)], sub[g*len(rest):(g+1)*len(rest)])
	}
	return more, nil
}

// CommitBatch is Sequence.Commit of every sequence of seqs, in one call.
func (p *Pool) CommitBatch(seqs []*Sequence) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.CommitBatch")
	raw, err := p.handles("CommitBatch", seqs)
	if err != nil {
		return err
	}
	err = p.call(true, func(h unsafe.Pointer) error { return cPoolCommitBatch(h, raw) })
	runtime.KeepAlive(seqs)
	return err
}
