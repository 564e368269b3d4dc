package kvcache

// Tiers below a pool (kvcache/tier.h, docs/tiers.md): where blocks are kept
// by their hash beyond memory. A DiskTier keeps blocks in a local directory
// (one file per block, written to a temporary name and renamed; a restarted
// process finds them). Pool.AddTier gives it to a pool, which then stores
// blocks in it when they are committed (TierWriteOnCommit: other processes
// and a restarted one find them) or evicted from memory (TierWriteOnEvict),
// and whose Sequence.MatchPrefix continues past the blocks found in memory
// with its tiers, nearest first. A tier is a cache: its failures (I/O
// errors, corrupt values) are misses or skipped stores, counted in
// TierStats, never errors of the pool.

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// TierWrite says when a pool stores blocks in a tier (kvc_tier_write_policy).
type TierWrite int32

const (
	TierWriteOnCommit TierWrite = 0 // when a block becomes cached: shared tiers; survives a restart
	TierWriteOnEvict  TierWrite = 1 // when a cached block is evicted from memory: capacity extension
)

// The lengths of a tier's authentication key (KVC_TIER_AUTH_KEY_MIN and
// _MAX, docs/tiers.md "Authenticated tiers"). Since 0.7.
const (
	TierAuthKeyMin = 16  // bytes: 128 bits
	TierAuthKeyMax = 256 // bytes
)

// TierStats are the counters of a tier (kvc_tier_stats).
type TierStats struct {
	Puts         uint64 // values stored
	PutFailures  uint64 // stores that failed or were refused (counted, never raised)
	Gets         uint64 // keys looked up
	Hits         uint64 // of which were found and verified
	Corrupt      uint64 // values found that did not verify (a miss): torn, flipped, or not authenticated
	BytesWritten uint64
	BytesRead    uint64
}

// DiskTier is a tier in a local directory (kvc_disk_tier_create), owned by
// the program until Pool.AddTier gives it to a pool. A tier never given is
// freed by Close (or, as a safety net only, a finalizer).
type DiskTier struct {
	mu    sync.Mutex
	h     unsafe.Pointer // nil once closed or given
	given bool
}

// NewDiskTier creates a tier in directory (created if missing; several
// processes may share it) of at most maxBytes (the least recently used
// blocks go first; 0: no limit). Errors: ErrInvalidArgument (an empty
// path), an *Error with the I/O code (the directory cannot be created or
// used).
func NewDiskTier(directory string, maxBytes uint64) (*DiskTier, error) {
	return newDiskTier(directory, maxBytes, nil)
}

// NewAuthenticatedDiskTier is NewDiskTier with an authentication key
// (TierAuthKeyMin to TierAuthKeyMax random bytes, copied). Since 0.7.
// Without a key, whoever can write the directory can serve K/V to every
// pool reading it; with one, every block carries an HMAC-SHA256 and blocks
// written without the key, or moved under another block's file, are misses
// (counted in TierStats.Corrupt). Keyed and keyless tiers do not read each
// other's blocks. Errors: as NewDiskTier, and ErrInvalidArgument for a key
// of another length.
func NewAuthenticatedDiskTier(directory string, maxBytes uint64, authKey []byte) (*DiskTier, error) {
	if authKey == nil {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf("NewAuthenticatedDiskTier: authKey is nil; it is %d "+
			"to %d bytes (NewDiskTier makes a tier without a key)", TierAuthKeyMin, TierAuthKeyMax))
	}
	return newDiskTier(directory, maxBytes, authKey)
}

func newDiskTier(directory string, maxBytes uint64, authKey []byte) (*DiskTier, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	h, err := cDiskTierCreate(directory, maxBytes, authKey)
	if err != nil {
		return nil, err
	}
	t := &DiskTier{h: h}
	runtime.SetFinalizer(t, (*DiskTier).Close)
	return t, nil
}

// Close frees a tier not given to a pool; it is idempotent and a no-op for
// a tier a pool owns. Always nil.
func (t *DiskTier) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h != nil && !t.given {
		cTierDestroy(t.h)
	}
	t.h = nil
	return nil
}

// Stats returns the counters of a tier not given to a pool (for one given,
// use Pool.TierStats).
func (t *DiskTier) Stats() (_ TierStats, err error) {
	defer named(&err, "DiskTier.Stats")
	if t == nil {
		return TierStats{}, newError(CodeInvalidState, "DiskTier.Stats: the tier is nil")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.given {
		return TierStats{}, newError(CodeInvalidState, "DiskTier.Stats: the tier belongs to a pool; use Pool.TierStats")
	}
	if t.h == nil {
		return TierStats{}, newError(CodeInvalidState, "DiskTier.Stats: the tier is closed")
	}
	return cTierStats(t.h)
}

// AddTier gives tier to the pool (which frees it with itself), after the
// tiers added before: MatchPrefix asks them in that order. On error the
// caller keeps the tier. Errors: ErrInvalidArgument (nil, a tier given or
// closed already, write).
func (p *Pool) AddTier(tier *DiskTier, write TierWrite) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.AddTier")
	if p.handle() == nil {
		return ErrPoolClosed
	}
	if tier == nil {
		return newError(CodeInvalidArgument, "AddTier: tier is nil")
	}
	tier.mu.Lock()
	defer tier.mu.Unlock()
	if tier.given || tier.h == nil {
		return newError(CodeInvalidArgument, "AddTier: the tier was given to a pool or closed already (a tier "+
			"belongs to one pool; create another on the same directory)")
	}
	h, err := p.enter(false)
	if err != nil {
		return err
	}
	err = cPoolAddTier(h, tier.h, write)
	runtime.KeepAlive(p)
	if err == nil {
		tier.given = true
	}
	return err
}

// TierStats returns the counters of the pool's tier index (order of
// AddTier). Errors: ErrOutOfRange past the last tier.
func (p *Pool) TierStats(index int) (_ TierStats, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.TierStats")
	if index < 0 || uint64(index) > 0xFFFFFFFF {
		return TierStats{}, newError(CodeOutOfRange, "TierStats: index is negative or too large")
	}
	h, err := p.enter(false)
	if err != nil {
		return TierStats{}, err
	}
	s, err := cPoolTierStats(h, uint32(index))
	runtime.KeepAlive(p)
	return s, err
}

// Fingerprint returns the pool's model fingerprint, the first part of every
// tier key (docs/tiers.md): two pools share tier blocks exactly when theirs
// agree.
func (p *Pool) Fingerprint() (_ [BlockHashSize]byte, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.Fingerprint")
	h, err := p.enter(false)
	if err != nil {
		return [BlockHashSize]byte{}, err
	}
	fp, err := cPoolFingerprint(h)
	runtime.KeepAlive(p)
	return fp, err
}
