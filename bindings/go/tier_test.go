//go:build cgo

package kvcache

// Tiers below the pool from Go (NewDiskTier, Pool.AddTier): a restart
// matches from disk with the original bytes, another fingerprint never
// shares, eviction to disk and back, bad input refused.

import (
	"os"
	"path/filepath"
	"testing"
)

func mkLayoutPool(t testing.TB, numBlocks uint32, layout PoolLayout) *Pool {
	t.Helper()
	o := testPoolOptions(numBlocks, "tier-test")
	o.Layout = layout
	return mkPoolWith(t, o)
}

func TestTierRestartMatchesFromDiskWithTheOriginalBytes(t *testing.T) {
	dir := t.TempDir()
	prompt := seqTokens(1, 17) // four full blocks and one token
	first := mkLayoutPool(t, 16, LayoutNHD)
	ok(t, first.AddTier(must[*DiskTier](t)(NewDiskTier(dir, 1<<20)), TierWriteOnCommit))
	s := mkSeq(t, first, nil)
	_, want := prefillSeq(t, first, s, prompt[:16], 0)
	if st := must[TierStats](t)(first.TierStats(0)); st.Puts != 4 {
		t.Fatalf("puts %d, want 4", st.Puts)
	}
	fp := must[[BlockHashSize]byte](t)(first.Fingerprint())
	first.Close()

	again := mkLayoutPool(t, 16, LayoutNHD)
	ok(t, again.AddTier(must[*DiskTier](t)(NewDiskTier(dir, 0)), TierWriteOnCommit))
	if got := must[[BlockHashSize]byte](t)(again.Fingerprint()); got != fp {
		t.Fatalf("the same model's fingerprint differs")
	}
	s = mkSeq(t, again, nil)
	if n := must[int64](t)(s.MatchPrefix(prompt)); n != 16 {
		t.Fatalf("matched %d, want 16", n)
	}
	wantHolds(t, s, want)
	if st := must[TierStats](t)(again.TierStats(0)); st.Hits != 4 || st.Corrupt != 0 {
		t.Fatalf("stats %+v", st)
	}
	again.Close()

	other := mkLayoutPool(t, 16, LayoutHND) // another fingerprint: never shares
	ok(t, other.AddTier(must[*DiskTier](t)(NewDiskTier(dir, 0)), TierWriteOnCommit))
	s = mkSeq(t, other, nil)
	if n := must[int64](t)(s.MatchPrefix(prompt)); n != 0 {
		t.Fatalf("another fingerprint matched %d", n)
	}
}

func TestTierEvictedBlocksComeBack(t *testing.T) {
	p := mkLayoutPool(t, 5, LayoutNHD) // four usable blocks
	tier := must[*DiskTier](t)(NewDiskTier(t.TempDir(), 0))
	if st := must[TierStats](t)(tier.Stats()); st.Puts != 0 {
		t.Fatalf("a new tier has stored %d", st.Puts)
	}
	ok(t, p.AddTier(tier, TierWriteOnEvict))
	prompt := seqTokens(1, 17)
	a := mkSeq(t, p, nil)
	_, want := prefillSeq(t, p, a, prompt[:16], 0)
	a.Close()
	b := mkSeq(t, p, nil)
	prefillSeq(t, p, b, seqTokens(500, 16), 7)
	b.Close()
	if st := must[TierStats](t)(p.TierStats(0)); st.Puts != 4 {
		t.Fatalf("evicted blocks stored: %d, want 4", st.Puts)
	}
	c := mkSeq(t, p, nil)
	if n := must[int64](t)(c.MatchPrefix(prompt)); n != 16 {
		t.Fatalf("matched %d, want 16", n)
	}
	wantHolds(t, c, want)
}

func TestTierBadInput(t *testing.T) {
	_, err := NewDiskTier("", 0)
	wantErr(t, err, CodeInvalidArgument, "directory")
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	ok(t, os.WriteFile(file, []byte("x"), 0o644))
	_, err = NewDiskTier(file, 0)
	if err == nil {
		t.Fatalf("a file as the directory was accepted")
	}
	p := mkLayoutPool(t, 8, LayoutNHD)
	_, err = p.TierStats(0)
	wantErr(t, err, CodeOutOfRange)
	wantErr(t, p.AddTier(nil, TierWriteOnCommit), CodeInvalidArgument)
	tier := must[*DiskTier](t)(NewDiskTier(dir, 0))
	wantErr(t, p.AddTier(tier, 7), CodeInvalidArgument, "policy")
	_, err = p.TierStats(0) // unchanged: still no tier
	wantErr(t, err, CodeOutOfRange)
	ok(t, p.AddTier(tier, TierWriteOnCommit))
	wantErr(t, p.AddTier(tier, TierWriteOnCommit), CodeInvalidArgument, "given")
	_, err = tier.Stats()
	wantErr(t, err, CodeInvalidState, "Pool.TierStats")
	ok(t, tier.Close()) // a no-op: the pool owns it
	if _, err := p.TierStats(0); err != nil {
		t.Fatalf("TierStats after Close of a given tier: %v", err)
	}
}
