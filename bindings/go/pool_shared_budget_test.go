//go:build cgo

package kvcache

import (
	"strings"
	"testing"
)

// sharedPage is one layer of a group as the test pools have it: K (4 tokens x 2 heads x 8) and V (x 4), float32.
const sharedPage = pBlock*pHeads*pDim*4 + pBlock*pHeads*pVDim*4

func sharedPool(budget uint64, numBlocks uint32) (*Pool, error) {
	return NewPool(PoolOptions{
		DType:  DTypeFloat32,
		Groups: []PoolGroup{FullGroup(pBlock, numBlocks), SlidingGroup(pBlock, 0, 4)},
		Layers: []PoolLayer{
			{Group: 0, NumKVHeads: pHeads, KeyHeadDim: pDim, ValueHeadDim: pVDim},
			{Group: 1, NumKVHeads: pHeads, KeyHeadDim: pDim, ValueHeadDim: pVDim},
		},
		SharedBudgetBytes: budget,
	})
}

// Both groups draw on one budget: pool-wide counts, writes and gathers through page-strided storage, and the
// full group taking what the sliding group's window gave back.
func TestPoolSharedBudget(t *testing.T) {
	p, err := sharedPool(9*sharedPage, 0)
	ok(t, err)
	defer p.Close()
	for g := 0; g < 2; g++ {
		st, err := p.Stats(g)
		ok(t, err)
		if st.NumBlocks != 8 || st.FreeBlocks != 8 {
			t.Fatalf("group %d: %d blocks, %d free; want the budget's 8 and 8", g, st.NumBlocks, st.FreeBlocks)
		}
	}
	s := mkSeq(t, p, nil)
	defer s.Close()
	_, all := prefillSeq(t, p, s, seqTokens(100, 16), 0)
	wantHolds(t, s, all)
	kv, err := p.LayerStorage(0, LayoutNHD)
	ok(t, err)
	if st := kv.Key.Strides(); len(st) != 4 || st[0] != sharedPage/4 {
		t.Fatalf("strides %v, want a page (%d elements) from one block to the next", st, sharedPage/4)
	}
	_, err = s.Reserve([]int32{7})
	ok(t, err)
	full, err := p.Stats(0)
	ok(t, err)
	sliding, err := p.Stats(1)
	ok(t, err)
	if full.UsedBlocks != 5 || sliding.UsedBlocks != 2 {
		t.Fatalf("used %d and %d blocks, want 5 and 2", full.UsedBlocks, sliding.UsedBlocks)
	}
}

func TestPoolSharedBudgetRefused(t *testing.T) {
	_, err := sharedPool(sharedPage, 0)
	wantErr(t, err, CodeInvalidArgument)
	if !strings.Contains(err.Error(), "shared_budget_bytes") {
		t.Fatalf("error %q does not name shared_budget_bytes", err)
	}
	_, err = sharedPool(9*sharedPage, 8)
	wantErr(t, err, CodeInvalidArgument)
	if !strings.Contains(err.Error(), "groups[0].num_blocks is 8") {
		t.Fatalf("error %q does not name groups[0].num_blocks", err)
	}
}
