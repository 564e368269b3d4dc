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
	Queued       uint64 // blocks the pool asked its tier worker to store here (since 0.7)
	Dropped      uint64 // of those, never given to the store: the queue was full, or shutdown (since 0.7)
}

// TierKey is the key of one block in a tier (kvc_tier_key, docs/tiers.md):
// the model's fingerprint (Pool.Fingerprint, or ModelFingerprint without a
// pool), the block's hash (BlockHashChain: it covers the tokens, everything
// before them and the salt) and the group. Since 0.7.
type TierKey struct {
	Fingerprint [BlockHashSize]byte
	BlockHash   [BlockHashSize]byte
	Group       uint32
}

// Tier is a tier the program holds: a *DiskTier or a *RedisTier. Give it to
// a pool with Pool.AddTier, or use it by key without a pool (Exists,
// GetBlocks, PutBlocks; kvcache/tier.h "Key-level access", docs/tiers.md
// "Blocks by key"): the values are those a pool of the same model reads and
// writes. Everything the tier does wrong (not stored, another size, a
// forged value, a dead or slow Redis node, within its deadline) is a miss,
// never an error; errors are the caller's. Since 0.7.
type Tier interface {
	core() *tierCore
}

// tierCore is the handle every tier kind holds.
type tierCore struct {
	mu    sync.Mutex
	h     unsafe.Pointer // nil once closed or given
	given bool
}

// held runs f on the handle of a tier not given to a pool, under its lock.
func (t *tierCore) held(f func(h unsafe.Pointer) error) error {
	if t == nil {
		return newError(CodeInvalidState, "the tier is nil")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.given {
		return newError(CodeInvalidState, "the tier belongs to a pool")
	}
	if t.h == nil {
		return newError(CodeInvalidState, "the tier is closed")
	}
	return f(t.h)
}

// exists, getBlocks and putBlocks are the key-level calls of every tier kind; op names the Go method in errors.
func (t *tierCore) exists(op string, keys []TierKey) (found []bool, err error) {
	defer named(&err, op)
	err = t.held(func(h unsafe.Pointer) error {
		found, err = cTierExists(h, keys)
		return err
	})
	return found, err
}

func (t *tierCore) getBlocks(op string, keys []TierKey, buf []byte, payloadSize int, numLayers uint32) (found []bool,
	err error) {
	defer named(&err, op)
	if err := checkBlocks(op, len(keys), len(buf), payloadSize); err != nil {
		return nil, err
	}
	err = t.held(func(h unsafe.Pointer) error {
		found, err = cTierGetBlocks(h, keys, buf, payloadSize, numLayers)
		return err
	})
	return found, err
}

func (t *tierCore) putBlocks(op string, keys []TierKey, buf []byte, payloadSize int, numLayers uint32) (stored int,
	err error) {
	defer named(&err, op)
	if err := checkBlocks(op, len(keys), len(buf), payloadSize); err != nil {
		return 0, err
	}
	err = t.held(func(h unsafe.Pointer) error {
		stored, err = cTierPutBlocks(h, keys, buf, payloadSize, numLayers)
		return err
	})
	return stored, err
}

// DiskTier's and RedisTier's key-level methods are alike on purpose (the
// public API of each kind); each is one line through tierCore.

// Exists says whether each key has a value in the tier, without fetching
// values (kvc_tier_exists: a stat per key). Existence only: a value that
// does not verify is a miss of GetBlocks. Since 0.7.
func (t *DiskTier) Exists(keys []TierKey) ([]bool, error) {
	return t.core().exists("DiskTier.Exists", keys)
}

// GetBlocks loads the blocks of keys into buf, payloadSize bytes each, key
// i at buf[i*payloadSize:] (len(buf) is len(keys)*payloadSize), and says
// which were found and verified (kvc_tier_get_blocks); a miss's bytes may
// have been written. numLayers is the layer count the values were stored
// with. Since 0.7.
func (t *DiskTier) GetBlocks(keys []TierKey, buf []byte, payloadSize int, numLayers uint32) ([]bool, error) {
	return t.core().getBlocks("DiskTier.GetBlocks", keys, buf, payloadSize, numLayers)
}

// PutBlocks stores the payloads in buf (payloadSize bytes each, key i's at
// buf[i*payloadSize:]) under keys, framed and sealed as the tier's values
// are (kvc_tier_put_blocks); returns how many the store took. Since 0.7.
func (t *DiskTier) PutBlocks(keys []TierKey, buf []byte, payloadSize int, numLayers uint32) (int, error) {
	return t.core().putBlocks("DiskTier.PutBlocks", keys, buf, payloadSize, numLayers)
}

// Exists is DiskTier.Exists for a Redis tier: one pipeline of EXISTS per
// node; a dead or slow node's keys are false within the call deadline.
func (t *RedisTier) Exists(keys []TierKey) ([]bool, error) {
	return t.core().exists("RedisTier.Exists", keys)
}

// GetBlocks is DiskTier.GetBlocks for a Redis tier (one pipeline of GET per node).
func (t *RedisTier) GetBlocks(keys []TierKey, buf []byte, payloadSize int, numLayers uint32) ([]bool, error) {
	return t.core().getBlocks("RedisTier.GetBlocks", keys, buf, payloadSize, numLayers)
}

// PutBlocks is DiskTier.PutBlocks for a Redis tier (one pipeline of SET per node).
func (t *RedisTier) PutBlocks(keys []TierKey, buf []byte, payloadSize int, numLayers uint32) (int, error) {
	return t.core().putBlocks("RedisTier.PutBlocks", keys, buf, payloadSize, numLayers)
}

func checkBlocks(op string, keys, bufLen, payloadSize int) error {
	if payloadSize < 0 || (keys > 0 && bufLen != keys*payloadSize) {
		return newError(CodeInvalidArgument, fmt.Sprintf("buf is %d bytes for %d keys of payloadSize %d; it "+
			"holds every payload, len(keys)*payloadSize bytes", bufLen, keys, payloadSize))
	}
	return nil
}

// ModelFingerprint is the model fingerprint a pool created with opts would
// have (Pool.Fingerprint), without creating one: no memory, no device
// (kvc_pool_options_fingerprint). The groups' NumBlocks are not part of it.
// Errors: ErrInvalidArgument, as NewPool's. Since 0.7.
func ModelFingerprint(opts PoolOptions) (_ [BlockHashSize]byte, err error) {
	defer named(&err, "ModelFingerprint")
	if err := checkVersion(); err != nil {
		return [BlockHashSize]byte{}, err
	}
	return cPoolOptionsFingerprint(&opts)
}

// ModelBlockPayload is the payload size and layer count of a block of group
// in a pool created with opts: what GetBlocks and PutBlocks take to share
// blocks with such pools (kvc_pool_options_block_payload). Since 0.7.
func ModelBlockPayload(opts PoolOptions, group uint32) (payloadSize int, numLayers uint32, err error) {
	defer named(&err, "ModelBlockPayload")
	if err := checkVersion(); err != nil {
		return 0, 0, err
	}
	return cPoolOptionsBlockPayload(&opts, group)
}

// DiskTier is a tier in a local directory (kvc_disk_tier_create), owned by
// the program until Pool.AddTier gives it to a pool. A tier never given is
// freed by Close (or, as a safety net only, a finalizer).
type DiskTier struct {
	tierCore
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
	t := &DiskTier{tierCore{h: h}}
	runtime.SetFinalizer(t, (*DiskTier).Close)
	return t, nil
}

// Close frees a tier not given to a pool; it is idempotent and a no-op for
// a tier a pool owns. Always nil.
func (t *DiskTier) Close() error {
	if t == nil {
		return nil
	}
	return t.tierCore.close()
}

func (t *DiskTier) core() *tierCore {
	if t == nil {
		return nil
	}
	return &t.tierCore
}

func (t *RedisTier) core() *tierCore {
	if t == nil {
		return nil
	}
	return &t.tierCore
}

// RedisTier is a Redis or Valkey tier the program holds
// (kvc_redis_tier_create): given to a pool with Pool.AddTier like a
// DiskTier, or used by key without a pool (Exists, GetBlocks, PutBlocks),
// e.g. from an engine's scheduler. Closed like a DiskTier. Since 0.7.
type RedisTier struct {
	tierCore
}

// NewRedisTier connects to the seeds of opts (opts.Write is not used:
// Pool.AddTier takes the policy). Errors: as Pool.AddRedisTier's.
func NewRedisTier(opts RedisTierOptions) (_ *RedisTier, err error) {
	defer named(&err, "NewRedisTier")
	if err := checkVersion(); err != nil {
		return nil, err
	}
	c, err := opts.config("NewRedisTier")
	if err != nil {
		return nil, err
	}
	h, err := cRedisTierCreate(&c)
	if err != nil {
		return nil, err
	}
	t := &RedisTier{tierCore{h: h}}
	runtime.SetFinalizer(t, (*RedisTier).Close)
	return t, nil
}

// Close frees a tier not given to a pool; idempotent, a no-op for a tier a
// pool owns. Always nil.
func (t *RedisTier) Close() error {
	if t == nil {
		return nil
	}
	return t.tierCore.close()
}

// Stats returns the counters of a tier not given to a pool.
func (t *RedisTier) Stats() (s TierStats, err error) {
	defer named(&err, "RedisTier.Stats")
	err = t.core().held(func(h unsafe.Pointer) error {
		s, err = cTierStats(h)
		return err
	})
	return s, err
}

func (t *tierCore) close() error {
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

// AddTier gives tier (a *DiskTier or, since 0.7, a *RedisTier) to the pool
// (which frees it with itself), after the tiers added before: MatchPrefix
// asks them in that order. On error the caller keeps the tier. Errors:
// ErrInvalidArgument (nil, a tier given or closed already, write).
func (p *Pool) AddTier(t Tier, write TierWrite) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.AddTier")
	if p.handle() == nil {
		return ErrPoolClosed
	}
	var tier *tierCore
	if t != nil {
		tier = t.core()
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
