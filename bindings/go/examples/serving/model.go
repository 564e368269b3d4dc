package main

// The fake model: deterministic K/V and a next token that depends on what
// attention reads back from the pool. A real engine runs a transformer
// here; everything around it (admission, slots, block tables, commits,
// preemption) is what a serving loop does for real.

// Model is the shape of the fake model: the pool is built for it.
type Model struct {
	Layers, Heads, HeadDim int
	Vocab                  int32
}

// key is element e of the key that layer writes for token tok at position
// pos: a small integer, so float32 sums of a few thousand are exact.
func key(tok int32, pos, layer, e int) float32 {
	return float32((int(tok)*7 + pos*3 + layer*11 + e) % 1009)
}

// value is the value's element, distinct from the key's.
func value(tok int32, pos, layer, e int) float32 { return -key(tok, pos, layer, e) - 0.5 }

// next is the token the model emits after a context whose layer-0 keys
// (element 0 of head 0) sum to attended, the last token sitting at pos.
func (m Model) next(attended float32, pos int) int32 {
	return int32((int64(attended)*31 + int64(pos)) % int64(m.Vocab))
}

// Generate is the model run without any cache: the reference the example's
// test compares the server's answers with.
func (m Model) Generate(prompt []int32, maxTokens int) []int32 {
	ctx := append([]int32(nil), prompt...)
	var out []int32
	var sum float32
	for p := 0; len(out) < maxTokens; p++ {
		sum += key(ctx[p], p, 0, 0)
		if p == len(ctx)-1 {
			t := m.next(sum, p)
			out = append(out, t)
			ctx = append(ctx, t)
		}
	}
	return out
}
