//go:build cgo

package kvcache

// The pool's tier worker from Go (Pool.StartTierWorker, Sequence.Prefetch,
// Prefetch.Collect): stores are queued and counted with their events, a
// prefetch collects the original bytes, a closed one is abandoned, and a
// second worker is refused.

import "testing"

func TestTierWorkerStoresAndPrefetchCollects(t *testing.T) {
	dir := t.TempDir()
	prompt := seqTokens(1, 17)
	first, err := NewPool(PoolOptions{
		DType:         DTypeFloat32,
		Groups:        []PoolGroup{FullGroup(pBlock, 16)},
		Layers:        RepeatLayer(pLayers, PoolLayer{NumKVHeads: pHeads, KeyHeadDim: pDim, ValueHeadDim: pVDim}),
		HashSeed:      []byte("tier-test"),
		EventCapacity: 64,
	})
	ok(t, err)
	defer first.Close()
	ok(t, first.AddTier(must[*DiskTier](t)(NewDiskTier(dir, 0)), TierWriteOnCommit))
	ok(t, first.StartTierWorker(TierWorkerOptions{Events: true}))
	wantErr(t, first.StartTierWorker(TierWorkerOptions{}), CodeInvalidState, "runs already")
	s := mkSeq(t, first, nil)
	_, want := prefillSeq(t, first, s, prompt[:16], 0)
	ok(t, first.StopTierWorker(10000))
	st := must[TierStats](t)(first.TierStats(0))
	if st.Queued != 4 || st.Puts != 4 || st.Dropped != 0 {
		t.Fatalf("stats %+v, want 4 queued and stored", st)
	}
	stored := 0
	for _, e := range must[[]PoolEvent](t)(first.Events()) {
		if e.Kind == EventTierStored {
			stored++
		}
	}
	if stored != 4 {
		t.Fatalf("%d EventTierStored, want 4", stored)
	}
	first.Close()

	again := mkLayoutPool(t, 16, LayoutNHD)
	ok(t, again.AddTier(must[*DiskTier](t)(NewDiskTier(dir, 0)), TierWriteOnCommit))
	ok(t, again.StartTierWorker(TierWorkerOptions{}))
	s = mkSeq(t, again, nil)
	pf := must[*Prefetch](t)(s.Prefetch(prompt))
	if n := must[int64](t)(pf.Collect(s, 10000)); n != 16 {
		t.Fatalf("collected %d, want 16", n)
	}
	wantHolds(t, s, want)
	_, err = pf.Collect(mkSeq(t, again, nil), 0)
	wantErr(t, err, CodeInvalidState, "collected already")
	ok(t, pf.Close())
	ok(t, pf.Close())
	// Started, never collected: closed after the pool, which freed it.
	late := must[*Prefetch](t)(mkSeq(t, again, nil).Prefetch(prompt))
	ws := must[TierWorkerStats](t)(again.TierWorkerStats())
	if !ws.Running || ws.Prefetches != 2 {
		t.Fatalf("worker stats %+v", ws)
	}
	again.Close()
	ok(t, late.Close())
}
