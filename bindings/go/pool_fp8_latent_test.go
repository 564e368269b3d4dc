//go:build cgo

package kvcache

import "testing"

// e4m3fn (fp8_test.go) is the reference: float32 -> e4m3fn -> float32.

func fp8Inputs(salt float32, shape ...int64) Tensor[float32] {
	x := NewTensor[float32](shape...)
	for i := range x.Data {
		x.Data[i] = float32((i*37)%101-50)*1.7 + salt
	}
	return x
}

func TestPoolFP8LayerGathersCodeTimesScale(t *testing.T) {
	const kScale, vScale = 0.5, 2.0
	p, err := NewPool(PoolOptions{
		DType:  DTypeFloat32,
		Groups: []PoolGroup{FullGroup(4, 8)},
		Layers: []PoolLayer{PoolLayer{NumKVHeads: 2, KeyHeadDim: 4, ValueHeadDim: 3}.FP8(kScale, vScale)},
	})
	ok(t, err)
	defer p.Close()
	s := mkSeq(t, p, nil)
	slots, err := s.Reserve([]int32{1, 2, 3, 4, 5, 6})
	ok(t, err)
	k, v := fp8Inputs(0.25, 6, 2, 4), fp8Inputs(-0.75, 6, 2, 3)
	ok(t, p.WriteLayer(0, k, v, slots.Slots))
	ok(t, s.Commit())
	gk, gv := NewTensor[float32](1, 2, 6, 4), NewTensor[float32](1, 2, 6, 3)
	ok(t, s.Gather(0, gk, gv))
	for i := int64(0); i < 6; i++ {
		for h := int64(0); h < 2; h++ {
			for d := int64(0); d < 4; d++ {
				if got, want := gk.At(0, h, i, d), e4m3fn(t, k.At(i, h, d)/kScale)*kScale; got != want {
					t.Fatalf("K token %d head %d dim %d: %v, want %v", i, h, d, got, want)
				}
			}
			for d := int64(0); d < 3; d++ {
				if got, want := gv.At(0, h, i, d), e4m3fn(t, v.At(i, h, d)/vScale)*vScale; got != want {
					t.Fatalf("V token %d head %d dim %d: %v, want %v", i, h, d, got, want)
				}
			}
		}
	}
}

func TestPoolLatentRowsHaveNoValues(t *testing.T) {
	p, err := NewPool(PoolOptions{
		DType:  DTypeFloat32,
		Groups: []PoolGroup{LatentGroup(4, 10)},
		Layers: []PoolLayer{LatentLayer(0, 9)},
	})
	ok(t, err)
	defer p.Close()
	s := mkSeq(t, p, nil)
	tokens := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5}
	slots, err := s.Reserve(tokens)
	ok(t, err)
	rows := fp8Inputs(0.5, 9, 1, 9)
	ok(t, p.WriteLayer(0, rows, nil, slots.Slots))
	ok(t, s.Commit())
	got := NewTensor[float32](1, 1, 9, 9)
	ok(t, s.Gather(0, got, nil))
	if !eqFloats(got.Data, rows.Data) { // one head: [1, 1, tokens, width] is the input's order
		t.Fatalf("gathered rows differ from the written ones")
	}
	other := mkSeq(t, p, nil)
	matched, err := other.MatchPrefix(tokens)
	ok(t, err)
	if matched != 8 {
		t.Fatalf("matched %d tokens, want 8", matched)
	}
	wantErr(t, p.WriteLayer(0, rows, rows, slots.Slots), CodeInvalidArgument, "latent group")
}

func TestPoolFP8ZeroScaleIsRefused(t *testing.T) {
	_, err := NewPool(PoolOptions{
		DType:  DTypeFloat32,
		Groups: []PoolGroup{FullGroup(4, 8)},
		Layers: []PoolLayer{AttentionLayer(0, 1, 4).FP8(0, 1)},
	})
	wantErr(t, err, CodeInvalidArgument, "layers[0].k_scale is 0")
}
