package kvcache

// The block pool of serving stacks (kvcache/pool.h): paged KV with prefix
// reuse, copy-on-write and events. See Pool.

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"
)

// GroupKind is the attention kind of a pool group (kvc_pool_group_kind).
type GroupKind int32

// The group kinds of kvcache/pool.h.
const (
	GroupFull      GroupKind = 1 // every block of a sequence is kept
	GroupSliding   GroupKind = 2 // blocks that left the sliding window go back to the pool
	GroupChunked   GroupKind = 3 // blocks wholly before the current chunk go back to the pool
	GroupRecurrent GroupKind = 4 // Mamba/SSM layers: a live state per sequence, checkpoints at block boundaries
	GroupLatent    GroupKind = 5 // MLA layers (DeepSeek): one row per token, no V; every block kept. Since 0.7
)

// PoolStorage is how a layer's blocks hold its K/V (kvc_pool_storage, since
// 0.7).
type PoolStorage int32

// The storages of kvcache/pool.h.
const (
	// StorageDType: the pool's dtype (the default).
	StorageDType PoolStorage = 0
	// StorageFP8E4M3: float8 e4m3fn codes with vLLM's fp8 KV cache convention
	// (code = e4m3fn(x / scale), saturating at 448; read code * scale). The
	// storage views are uint8. CPU pools only in 0.7.
	StorageFP8E4M3 PoolStorage = 1
)

// PoolLayout is the physical layout of a layer's K/V storage
// (kvc_pool_layout).
type PoolLayout int32

// The layouts of kvcache/pool.h.
const (
	LayoutNHD PoolLayout = 0 // [num_blocks, block_size, heads, head_dim] (vLLM, FlashInfer NHD)
	LayoutHND PoolLayout = 1 // [num_blocks, heads, block_size, head_dim] (FlashInfer HND)
)

// tableFormat is kvc_pool_table_format: BlockTable and BlockTableCSR choose it.
type tableFormat int32

const (
	tablePadded tableFormat = 0
	tableCSR    tableFormat = 1
)

// PoolEventKind says what a PoolEvent reports (kvc_pool_event_kind).
type PoolEventKind int32

// The event kinds of kvcache/pool.h.
const (
	EventBlockStored  PoolEventKind = 1 // a full block was hashed and cached
	EventBlockRemoved PoolEventKind = 2 // a cached block was evicted: its hash is no longer found
	EventAllCleared   PoolEventKind = 3 // ClearCache
)

// Errors of closed pools and sequences; both match ErrInvalidState and
// ErrClosed.
var (
	ErrPoolClosed     = &Error{Code: CodeInvalidState, Message: "use of a closed pool", family: ErrClosed}
	ErrSequenceClosed = &Error{Code: CodeInvalidState, Message: "use of a closed sequence", family: ErrClosed}
)

// PoolGroup is one group of layers (kvc_pool_group_options): an attention
// kind with its own block size and block count. Block 0 of every group is the
// null block, so NumBlocks - 1 are usable.
type PoolGroup struct {
	Kind      GroupKind
	BlockSize uint32 // tokens per block (recurrent: tokens between checkpoints)
	NumBlocks uint32 // blocks, the null block included (recurrent: state slots)
	Window    int64  // sliding: the window in tokens; chunked: the chunk size; else 0
}

// FullGroup is a full-attention group.
func FullGroup(blockSize, numBlocks uint32) PoolGroup {
	return PoolGroup{Kind: GroupFull, BlockSize: blockSize, NumBlocks: numBlocks}
}

// SlidingGroup is a sliding-window group (a query attends to itself and
// window - 1 tokens before it).
func SlidingGroup(blockSize, numBlocks uint32, window int64) PoolGroup {
	return PoolGroup{Kind: GroupSliding, BlockSize: blockSize, NumBlocks: numBlocks, Window: window}
}

// ChunkedGroup is a chunked-attention group with chunks of chunk tokens.
func ChunkedGroup(blockSize, numBlocks uint32, chunk int64) PoolGroup {
	return PoolGroup{Kind: GroupChunked, BlockSize: blockSize, NumBlocks: numBlocks, Window: chunk}
}

// LatentGroup is a group of latent (MLA) layers: one row per token, no V.
// Since 0.7.
func LatentGroup(blockSize, numBlocks uint32) PoolGroup {
	return PoolGroup{Kind: GroupLatent, BlockSize: blockSize, NumBlocks: numBlocks}
}

// RecurrentGroup is a group of recurrent layers: a checkpoint every
// blockSize committed tokens, numSlots state slots (live states and
// checkpoints together).
func RecurrentGroup(blockSize, numSlots uint32) PoolGroup {
	return PoolGroup{Kind: GroupRecurrent, BlockSize: blockSize, NumBlocks: numSlots}
}

// PoolLayer is one layer of the model (kvc_pool_layer_options). Attention
// layers: K is [NumKVHeads, KeyHeadDim] per token, V [NumKVHeads,
// ValueHeadDim] (0: KeyHeadDim). Latent layers: one row of KeyHeadDim per
// token (NumKVHeads 1, no V). Recurrent layers: a conv state [ConvDim,
// ConvKernel] and an SSM state [NumKVHeads, KeyHeadDim, SSMStateSize].
type PoolLayer struct {
	Group        uint32
	NumKVHeads   uint32
	KeyHeadDim   uint32
	ValueHeadDim uint32
	ConvDim      uint32
	ConvKernel   uint32
	SSMStateSize uint32
	// Since 0.7: how the blocks hold K/V, and an fp8 layer's scales (vLLM's
	// k_scale and v_scale). A layer that is not fp8 reads a scale of 0 (the
	// zero value) as 1.0, its default; an fp8 layer passes them as they are
	// (a latent fp8 layer: VScale 1).
	Storage PoolStorage
	KScale  float32
	VScale  float32
}

// LatentLayer is a latent (MLA) layer of group: one row of rowWidth per token
// (DeepSeek V3: kv_lora_rank + qk_rope_head_dim = 576). Since 0.7.
func LatentLayer(group, rowWidth uint32) PoolLayer {
	return PoolLayer{Group: group, NumKVHeads: 1, KeyHeadDim: rowWidth}
}

// FP8 is the layer stored as fp8 e4m3 codes with these scales (a latent
// layer: vScale 1). Since 0.7.
func (l PoolLayer) FP8(kScale, vScale float32) PoolLayer {
	l.Storage, l.KScale, l.VScale = StorageFP8E4M3, kScale, vScale
	return l
}

// cScale is a scale as the C options take it: a layer that is not fp8 reads 0
// (the zero value) as 1, its default.
func (l PoolLayer) cScale(s float32) float32 {
	if s == 0 && l.Storage != StorageFP8E4M3 {
		return 1
	}
	return s
}

// AttentionLayer is an attention layer of group.
func AttentionLayer(group, numKVHeads, headDim uint32) PoolLayer {
	return PoolLayer{Group: group, NumKVHeads: numKVHeads, KeyHeadDim: headDim}
}

// RecurrentLayer is a recurrent layer of group.
func RecurrentLayer(group, convDim, convKernel, numHeads, headDim, ssmStateSize uint32) PoolLayer {
	return PoolLayer{Group: group, NumKVHeads: numHeads, KeyHeadDim: headDim, ConvDim: convDim,
		ConvKernel: convKernel, SSMStateSize: ssmStateSize}
}

// RepeatLayer returns n copies of l: the layers of a uniform model.
func RepeatLayer(n int, l PoolLayer) []PoolLayer {
	out := make([]PoolLayer, n)
	for i := range out {
		out[i] = l
	}
	return out
}

func (l PoolLayer) valueDim() uint32 {
	if l.ValueHeadDim == 0 {
		return l.KeyHeadDim
	}
	return l.ValueHeadDim
}

// PoolOptions describe a pool (kvc_pool_options).
type PoolOptions struct {
	DType  DType       // the K/V and state dtype; required
	Device Device      // the zero Device is the CPU
	Groups []PoolGroup // layers name groups by index
	Layers []PoolLayer // one per layer of the model
	Layout PoolLayout  // LayoutNHD (the zero value) or LayoutHND
	// HashSeed is the pool's hash namespace: name the model and its weights
	// with it. Blocks are reused only within one seed (docs/block-hash.md).
	HashSeed []byte
	// DisablePrefixCaching: full committed blocks are not hashed or reused,
	// and released blocks are freed at once.
	DisablePrefixCaching bool
	// EventCapacity is how many events the queue keeps until Events pulls
	// them (0: none); when it is full the oldest are dropped.
	EventCapacity uint32
	// Allocator, when set, provides every layer's K/V storage (see
	// Allocator; CArena serves CPU pools from C memory). The pool keeps it
	// until Close (or the finalizer) has given all of it back.
	Allocator Allocator
	// SharedBudgetBytes, when not 0, is one block budget every group takes
	// its blocks from instead of its own NumBlocks, which must then be 0
	// (kvc_pool_options.shared_budget_bytes; docs/pool.md, "One budget for
	// all groups"): every block is a page of the largest group's block size,
	// block ids are pool-wide, eviction takes any group's least recently used
	// cached block, and Stats gives the budget's NumBlocks and FreeBlocks.
	// Since 0.7.
	SharedBudgetBytes uint64
	// HashMode is how blocks are hashed: HashKvcache (the zero value) or
	// HashVLLM. Since 0.7.
	HashMode PoolHashMode
}

// PoolHashMode is how a pool computes its block hashes (kvc_pool_hash_mode,
// docs/block-hash.md). Since 0.7.
type PoolHashMode int32

const (
	// HashKvcache is kvcache's own chain (docs/block-hash.md, version 2).
	HashKvcache PoolHashMode = 0
	// HashVLLM is vLLM's prefix-caching hash with sha256_cbor: equal to a
	// vLLM server's for the same tokens, LoRA (name and path), items and
	// cache salt, which must then be UTF-8 text, as the hash seed (vLLM's
	// PYTHONHASHSEED; empty: its default).
	HashVLLM PoolHashMode = 1
)

// VLLMBatchOptions describe the batch of Pool.EventsVLLM
// (kvc_pool_vllm_batch_options). Since 0.7.
type VLLMBatchOptions struct {
	// TS is the batch's timestamp, seconds since the epoch (vLLM's time.time()).
	TS float64
	// IntHashes gives hashes in vLLM's 64-bit form
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) instead of 32 bytes.
	IntHashes bool
	// DataParallelRank is the data-parallel rank; nil for none.
	DataParallelRank *uint32
}

// poolOwner holds the C handle and carries the finalizer. It points at
// nothing of the Go side, so that a finalized sequence (which references the
// pool) never forms a cycle with it. Sequences whose finalizer ran while the
// pool was in use wait in dropped: the finalizer runs on its own goroutine,
// and the pool's calls must not overlap, so they are destroyed at the pool's
// next call.
type poolOwner struct {
	mu      sync.Mutex
	p       unsafe.Pointer // *kvc_pool; nil once closed
	dropped []unsafe.Pointer
	pending atomic.Int32 // len(dropped), read without the lock
	// open holds every sequence not closed yet, by id, weakly: the weak
	// pointer of one dropped without Close turns nil as soon as the
	// collector finds it unreachable, before its finalizer runs, which is
	// what lets a reserve short of blocks reclaim it at once (reclaim).
	open   map[uint64]openSequence
	nextID uint64
	// releaseAllocator frees the C side of PoolOptions.Allocator after the pool is destroyed (nil: none).
	releaseAllocator func()
}

// openSequence is a sequence's entry in poolOwner.open.
type openSequence struct {
	h unsafe.Pointer // *kvc_pool_sequence
	w weak.Pointer[Sequence]
}

func (o *poolOwner) close() {
	o.mu.Lock()
	p := o.p
	o.p, o.dropped, o.open = nil, nil, nil
	o.pending.Store(0)
	o.mu.Unlock()
	if p == nil {
		return
	}
	runtime.SetFinalizer(o, nil)
	cPoolDestroy(p) // frees the sequences still held, the dropped ones included; gives the storage back
	if o.releaseAllocator != nil {
		o.releaseAllocator()
	}
	liveHandles.Add(-1)
}

// drop queues the handle of sequence id for destruction at the pool's next
// call, unless the sequence was closed or reclaimed already.
func (o *poolOwner) drop(id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.open[id]
	if !ok || o.p == nil {
		return
	}
	delete(o.open, id)
	o.dropped = append(o.dropped, e.h)
	o.pending.Store(int32(len(o.dropped)))
}

// unreachable moves every open sequence that the collector found
// unreachable to dropped and returns how many wait there now (those whose
// finalizer ran included).
func (o *poolOwner) unreachable() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, e := range o.open {
		if e.w.Value() == nil {
			delete(o.open, id)
			o.dropped = append(o.dropped, e.h)
		}
	}
	o.pending.Store(int32(len(o.dropped)))
	return len(o.dropped)
}

// Pool is a block pool (kvc_pool): a fixed set of blocks on one device for
// one model, shared by many Sequences (requests) that join and leave every
// step, as vLLM, SGLang and TensorRT-LLM do continuous batching. Create it
// with NewPool and Close it when done; closing it closes its sequences.
//
// A serving step: Sequence.Reserve gives the new tokens slots, BlockTable
// exports the tables for the attention kernel, Write stores every layer's K/V
// through the slots in one call, Sequence.Commit makes full blocks reusable.
// A new request starts with Sequence.MatchPrefix, which attaches the cached
// blocks of its prompt's longest cached prefix.
//
// Views: BlockTable, BlockTableCSR and Sequence.RecurrentState return views
// valid until the next call that changes the pool's blocks or tables (every
// call but the queries, Write, Gather, LayerStorage, BlockTable and
// RecurrentState), a table also until the next table of its group and
// format (the tables of several groups coexist);
// LayerStorage's views are valid until Close, the storage never moves. The
// package tracks this like a cache's views (ErrStaleView).
//
// A pool and its sequences are one object for concurrency, and safe for
// concurrent use: every method of the pool or of a sequence takes the pool's
// mutex for the call, so goroutines sharing a pool run one call at a time
// (the library refuses overlapping calls with KVC_ERROR_BUSY; the package
// never lets that happen). Distinct pools run in parallel. Views are not
// synchronised: a view read while another goroutine's call changes the
// blocks or tables goes stale under the reader (docs/threads.md). A pool or sequence dropped without Close is closed
// by a finalizer, as a safety net only; OpenSequences counts the sequences
// not closed yet, and a Reserve short of blocks gives back those the
// collector finds unreachable before it fails (Sequence.Reserve).
type Pool struct {
	mu  sync.Mutex // held for each call of the pool or of a sequence (lock)
	o   *poolOwner
	gen uint64 // bumped by calls that change blocks or tables: state views remember it
	// tableGen[2*group+format] is the serial of the live table of that group
	// and format (0: none): every call that changes blocks or tables clears
	// them, the next table of the same group and format replaces its entry.
	tableGen []uint64
	serial   uint64
	// created counts the sequences made since the last reclaim: a reserve
	// short of blocks collects garbage only when one may have been dropped.
	created uint64
	dtype   DType
	device  Device
	layout  PoolLayout
	groups  []PoolGroup
	layers  []PoolLayer
}

// NewPool creates a pool (kvc_pool_create), allocating every group's
// blocks. Bad options are ErrInvalidArgument naming the field, group or
// layer.
func NewPool(opts PoolOptions) (*Pool, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	if uint64(len(opts.Groups)) > math.MaxUint32 || uint64(len(opts.Layers)) > math.MaxUint32 {
		return nil, newError(CodeInvalidArgument, "NewPool: too many groups or layers")
	}
	p, releaseAllocator, err := cPoolCreate(&opts)
	if err != nil {
		return nil, err
	}
	o := &poolOwner{p: p, open: make(map[uint64]openSequence), releaseAllocator: releaseAllocator}
	liveHandles.Add(1)
	runtime.SetFinalizer(o, (*poolOwner).close)
	device := opts.Device
	if device == (Device{}) {
		device = CPU
	}
	return &Pool{
		o: o, dtype: opts.DType, device: device, layout: opts.Layout, tableGen: make([]uint64, 2*len(opts.Groups)),
		groups: append([]PoolGroup(nil), opts.Groups...), layers: append([]PoolLayer(nil), opts.Layers...),
	}, nil
}

// Close frees the pool, its storage and its sequences; their views become
// invalid. It is idempotent and always returns nil.
func (p *Pool) Close() error {
	defer p.lock().Unlock()
	if p == nil || p.o == nil { // nil, or a zero Pool (never opened)
		return nil
	}
	p.gen++
	p.o.close()
	return nil
}

// lock takes the mutex that serialises calls on the pool and its sequences
// and returns it: `defer p.lock().Unlock()` opens every method that calls C.
// Methods never call each other's locking entry points (sync.Mutex is not
// re-entrant).
func (p *Pool) lock() *sync.Mutex {
	if p == nil {
		return heldAlone()
	}
	p.mu.Lock()
	return &p.mu
}

// lock takes the pool's mutex (see Pool.lock).
func (s *Sequence) lock() *sync.Mutex {
	if s == nil {
		return heldAlone()
	}
	return s.pool.lock()
}

// handle is the C handle; nil once closed, and for a nil or zero Pool
// (which every method reports as closed).
func (p *Pool) handle() unsafe.Pointer {
	if p == nil || p.o == nil {
		return nil
	}
	return p.o.p
}

// enter returns the handle for a call, after destroying the sequences
// dropped meanwhile; stale: the call changes blocks or tables (views made
// before it are invalid afterwards, whether it succeeds or not).
func (p *Pool) enter(stale bool) (unsafe.Pointer, error) {
	h := p.handle()
	if h == nil {
		return nil, ErrPoolClosed
	}
	if p.o.pending.Load() > 0 {
		p.o.mu.Lock()
		dropped := p.o.dropped
		p.o.dropped = nil
		p.o.pending.Store(0)
		p.o.mu.Unlock()
		for _, s := range dropped {
			cPoolSequenceDestroy(s)
		}
		stale = true // blocks were released
	}
	if stale {
		p.gen++
		clear(p.tableGen)
	}
	return h, nil
}

// Groups returns the groups, as created (nil for a nil Pool).
func (p *Pool) Groups() []PoolGroup {
	if p == nil {
		return nil
	}
	return append([]PoolGroup(nil), p.groups...)
}

// Layers returns the layers, as created (nil for a nil Pool).
func (p *Pool) Layers() []PoolLayer {
	if p == nil {
		return nil
	}
	return append([]PoolLayer(nil), p.layers...)
}

// DType returns the K/V and state dtype (the zero DType for a nil Pool).
func (p *Pool) DType() DType {
	if p == nil {
		return DTypeUnset
	}
	return p.dtype
}

// Device returns where the blocks live (the zero Device for a nil Pool).
func (p *Pool) Device() Device {
	if p == nil {
		return Device{}
	}
	return p.device
}

func groupIndex(fn string, group int) (uint32, error) {
	if group < 0 || uint64(group) > math.MaxUint32 {
		return 0, newError(CodeOutOfRange, fmt.Sprintf("%s: group %d is out of range", fn, group))
	}
	return uint32(group), nil
}

// SetStream binds a device pool to a CUDA or HIP stream (kvc_pool_set_stream),
// with Cache.SetStream's rules: 0 is the default stream, a CPU pool takes
// only that.
func (p *Pool) SetStream(stream uintptr) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.SetStream")
	return p.call(false, func(h unsafe.Pointer) error { return cPoolSetStream(h, stream) })
}

// call runs f on the pool's handle (see enter).
func (p *Pool) call(stale bool, f func(unsafe.Pointer) error) error {
	h, err := p.enter(stale)
	if err != nil {
		return err
	}
	err = f(h)
	runtime.KeepAlive(p)
	return err
}

// PoolStats are the counters of one group (kvc_pool_stats).
type PoolStats struct {
	Group         uint32
	NumBlocks     uint64 // usable blocks (NumBlocks - 1 of the group)
	FreeBlocks    uint64 // neither referenced nor cached
	CachedBlocks  uint64 // cached and unreferenced: evictable, reusable by MatchPrefix
	UsedBlocks    uint64 // referenced by at least one sequence
	PinnedBlocks  uint64 // cached blocks kept from eviction by Sequence.Pin
	PrefixQueries uint64 // blocks looked up by MatchPrefix since creation
	PrefixHits    uint64 // of which were found
	Evictions     uint64 // cached blocks reclaimed for new data since creation
}

// AvailableBlocks is what a reserve can take now: free plus evictable blocks.
func (s PoolStats) AvailableBlocks() uint64 { return s.FreeBlocks + s.CachedBlocks }

// Stats returns the counters of group.
func (p *Pool) Stats(group int) (_ PoolStats, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.Stats")
	g, err := groupIndex("Stats", group)
	if err != nil {
		return PoolStats{}, err
	}
	h, err := p.enter(false)
	if err != nil {
		return PoolStats{}, err
	}
	s, err := cPoolStats(h, g)
	runtime.KeepAlive(p)
	return s, err
}

// ClearCache evicts every cached, unreferenced, unpinned block (a weights
// update makes them stale) and queues an EventAllCleared.
func (p *Pool) ClearCache() (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.ClearCache")
	return p.call(true, cPoolClearCache)
}

// UnpinAll unpins every block Sequence.Pin pinned; they stay cached.
func (p *Pool) UnpinAll() (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.UnpinAll")
	return p.call(true, cPoolUnpinAll)
}

// handles returns the C handles of seqs, which must be open sequences of p.
func (p *Pool) handles(fn string, seqs []*Sequence) ([]unsafe.Pointer, error) {
	out := make([]unsafe.Pointer, len(seqs))
	for i, s := range seqs {
		if s == nil || s.pool != p {
			return nil, newError(CodeInvalidArgument, fmt.Sprintf("%s: seqs[%d] is nil or belongs to another pool", fn, i))
		}
		if s.p == nil {
			return nil, newError(CodeInvalidState, fmt.Sprintf("%s: seqs[%d] is closed", fn, i))
		}
		out[i] = s.p
	}
	return out, nil
}

// BlocksNeeded is admission control: per group, the blocks that reserving
// newTokens[i] more tokens for each of seqs[i] would take (copy-on-write
// copies and recurrent slots included, minus what sliding groups give
// back). Compare with PoolStats.AvailableBlocks.
func (p *Pool) BlocksNeeded(seqs []*Sequence, newTokens []uint64) (_ []uint64, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.BlocksNeeded")
	const fn = "BlocksNeeded"
	if len(seqs) != len(newTokens) {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf("%s: %d sequences but %d token counts", fn, len(seqs), len(newTokens)))
	}
	raw, err := p.handles(fn, seqs)
	if err != nil {
		return nil, err
	}
	h, err := p.enter(false)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, max(len(p.groups), 1))
	err = cPoolBlocksNeeded(h, raw, newTokens, out)
	runtime.KeepAlive(p)
	runtime.KeepAlive(seqs)
	if err != nil {
		return nil, err
	}
	return out[:len(p.groups)], nil
}

// PoolEvent is one event of the pool's queue (kvc_pool_event), for a router
// that tracks what each pool caches. IDs count 1, 2, 3, ... per pool; a gap
// means the queue was full and events were dropped. Group, BlockHash and
// BlockID are set for stored and removed blocks, ParentHash (the previous
// block's hash, or the chain's root) and NumTokens for stored ones.
type PoolEvent struct {
	ID         uint64
	Kind       PoolEventKind
	Group      uint32
	BlockHash  [BlockHashSize]byte
	ParentHash [BlockHashSize]byte
	NumTokens  uint32
	BlockID    uint32
}

// EventsVLLM takes every queued event as one batch in vLLM's wire form
// (kvc_pool_events_pull_vllm): the msgpack bytes vLLM's KV event publisher
// sends for a KVEventBatch, which NVIDIA Dynamo and llm-d read
// (docs/pool.md, "Events in vLLM's form"). Since 0.7.
func (p *Pool) EventsVLLM(o VLLMBatchOptions) (_ []byte, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.EventsVLLM")
	h, err := p.enter(true)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(p)
	return cPoolEventsPullVLLM(h, o)
}

// Events takes every queued event, oldest first.
func (p *Pool) Events() (_ []PoolEvent, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.Events")
	h, err := p.enter(true)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(p)
	var out []PoolEvent
	buf := make([]PoolEvent, 256)
	for {
		n, err := cPoolEventsPull(h, buf)
		if err != nil {
			return nil, err
		}
		out = append(out, buf[:n]...)
		if n < len(buf) {
			return out, nil
		}
	}
}

// Write stores one step's K/V through a slot mapping, every layer in one
// call (one kernel launch on a GPU): keys[l] and values[l] are [num_tokens,
// num_kv_heads, head_dim] on the pool's device (nil for recurrent layers),
// slots holds num_groups * num_tokens slots in Reserve's group-major form
// (ConcatSlots joins the sequences of a batch); a slot of -1 is skipped.
// Table and state views stay valid: a write changes stored K/V only.
func (p *Pool) Write(keys, values []Input, slots []int64) (err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.Write")
	const fn = "Write"
	if p.handle() == nil {
		return ErrPoolClosed
	}
	if len(keys) != len(p.layers) || len(values) != len(p.layers) {
		return newError(CodeInvalidArgument, fmt.Sprintf(
			"%s: %d keys and %d values but the pool has %d layers (one per layer, nil for recurrent layers)",
			fn, len(keys), len(values), len(p.layers)))
	}
	err = p.write(fn, keys, values, slots, func(h unsafe.Pointer, arr *tensorArrays, tokens int) error {
		return cPoolWrite(h, arr.keys(), arr.values(), arr.n, slots, tokens)
	})
	runtime.KeepAlive(keys)
	runtime.KeepAlive(values)
	return err
}

// write is what Write and WriteLayer share: slots checked for whole groups
// (num_groups * num_tokens, group-major), keys and values laid out in C, the
// pool entered, and call made with the tokens per group.
func (p *Pool) write(fn string, keys, values []Input, slots []int64,
	call func(h unsafe.Pointer, arr *tensorArrays, tokens int) error) error {
	groups := max(len(p.groups), 1)
	if len(slots)%groups != 0 {
		return newError(CodeInvalidArgument, fmt.Sprintf(
			"%s: slots has %d entries, not a multiple of the pool's %d groups (num_groups * num_tokens, group-major)",
			fn, len(slots), groups))
	}
	arr, err := newTensorArrays(fn, keys, values, false)
	if err != nil {
		return err
	}
	defer arr.free()
	h, err := p.enter(false)
	if err != nil {
		return err
	}
	err = call(h, arr, len(slots)/groups)
	runtime.KeepAlive(p)
	return err
}

// LayerStorage returns the K and V storage of layer over all its group's
// blocks, zero-copy: [num_blocks, block_size, heads, head_dim] (LayoutNHD)
// or [num_blocks, heads, block_size, head_dim] (LayoutHND); the pool's own
// layout is compact, the other strided. Valid until Close. A latent layer's
// V is the zero View (it has none); an fp8 layer's views are uint8 codes.
func (p *Pool) LayerStorage(layer int, layout PoolLayout) (_ KV, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.LayerStorage")
	l, err := layerIndex("LayerStorage", layer)
	if err != nil {
		return KV{}, err
	}
	h, err := p.enter(false)
	if err != nil {
		return KV{}, err
	}
	var out ckv
	err = cPoolLayerStorage(h, l, layout, &out)
	runtime.KeepAlive(p)
	if err != nil {
		return KV{}, err
	}
	return KV{p.view(&out.key, viewPoolStorage), p.view(&out.value, viewPoolStorage)}, nil
}

func (p *Pool) view(t *ctensor, kind viewKind) View {
	return View{t: *t, pool: p, gen: p.gen, kind: kind}
}

// ctable mirrors kvc_pool_table (checked in pool_cgo.go).
type ctable struct {
	table, indptr, lastPageLen ctensor
}

func (p *Pool) blockTable(fn string, seqs []*Sequence, group int, format tableFormat) (*ctable, int32, error) {
	g, err := groupIndex(fn, group)
	if err != nil {
		return nil, 0, err
	}
	raw, err := p.handles(fn, seqs)
	if err != nil {
		return nil, 0, err
	}
	h, err := p.enter(false)
	if err != nil {
		return nil, 0, err
	}
	var out ctable
	err = cPoolBlockTable(h, raw, g, format, &out)
	runtime.KeepAlive(p)
	runtime.KeepAlive(seqs)
	if err != nil {
		return nil, 0, err // nothing changed: the previous table of this group and format stays valid
	}
	// The group is in range (the call succeeded): its table of this format was rewritten.
	slot := int32(2*int(g) + int(format))
	p.serial++
	p.tableGen[slot] = p.serial
	return &out, slot, nil
}

func (p *Pool) tableView(t *ctensor, slot int32) View {
	return View{t: *t, pool: p, gen: p.tableGen[slot], kind: viewPoolTable, table: slot}
}

// BlockTable returns the block tables of seqs in group as an int32
// [batch, max_blocks] view on the pool's device, rows padded with 0 (vLLM,
// FlashAttention); Int32s reads it on the host. Valid until the next call
// that changes blocks or tables, or the next BlockTable of the same group:
// the tables of several groups coexist.
func (p *Pool) BlockTable(seqs []*Sequence, group int) (_ View, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.BlockTable")
	t, slot, err := p.blockTable("BlockTable", seqs, group, tablePadded)
	if err != nil {
		return View{}, err
	}
	return p.tableView(&t.table, slot), nil
}

// CSRTable is a batch's block tables in FlashInfer's CSR form: int32
// Indptr [batch + 1], Indices [Indptr[batch]] and LastPageLen [batch]
// (tokens in each sequence's last block).
type CSRTable struct {
	Indptr, Indices, LastPageLen View
}

// BlockTableCSR returns the block tables in the CSR form; validity as
// BlockTable.
func (p *Pool) BlockTableCSR(seqs []*Sequence, group int) (_ CSRTable, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.BlockTableCSR")
	t, slot, err := p.blockTable("BlockTableCSR", seqs, group, tableCSR)
	if err != nil {
		return CSRTable{}, err
	}
	return CSRTable{p.tableView(&t.indptr, slot), p.tableView(&t.table, slot), p.tableView(&t.lastPageLen, slot)}, nil
}

// Int32s returns a copy of an int32 view in host memory (block tables), in
// row-major order.
func (v View) Int32s() ([]int32, error) {
	if !v.Valid() {
		return nil, ErrStaleView
	}
	if t := v.Device().Type; t != DeviceCPU && t != DeviceCUDAHost && t != DeviceROCmHost {
		return nil, newError(CodeDeviceMismatch, fmt.Sprintf("Int32s: the view lives on device %d:%d; only host memory can be read from Go",
			v.t.deviceType, v.t.deviceID))
	}
	if v.DataType() != (DataType{TypeCodeInt, 32, 1}) {
		return nil, newError(CodeDTypeMismatch, fmt.Sprintf("Int32s: the view holds %+v, not int32", v.DataType()))
	}
	n := v.NumElements()
	out := make([]int32, n)
	if n == 0 {
		return out, nil
	}
	strides := make([]int64, v.NDim())
	for i := range strides {
		strides[i] = v.stride(i)
	}
	copyStrided(unsafe.Pointer(&out[0]), v.first(), 4, v.shapeSlice(), strides)
	return out, nil
}

// Sequence is a request in a Pool (kvc_pool_sequence): its tokens and one
// block table per group. Close it when the request is done: its blocks go
// back to the pool, the cached ones staying reusable until evicted. It keeps
// its pool reachable.
type Sequence struct {
	p    unsafe.Pointer // *kvc_pool_sequence; nil once closed
	pool *Pool
	id   uint64 // its key in the pool's open sequences
}

func (p *Pool) newSequence(s unsafe.Pointer) *Sequence {
	o := p.o
	o.mu.Lock()
	o.nextID++
	seq := &Sequence{p: s, pool: p, id: o.nextID}
	o.open[seq.id] = openSequence{h: s, w: weak.Make(seq)}
	o.mu.Unlock()
	p.created++
	runtime.SetFinalizer(seq, (*Sequence).finalize)
	return seq
}

// OpenSequences returns how many of the pool's sequences are not closed
// yet: the running requests, plus those dropped without Close whose blocks
// the garbage collector has not given back yet. A count that keeps growing
// while requests come and go is a leak: a sequence is closed when its
// request ends. Since 0.7.
func (p *Pool) OpenSequences() (n int, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.OpenSequences")
	if _, err := p.enter(false); err != nil {
		return 0, err
	}
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	return len(p.o.open), nil
}

// ReclaimDropped runs a garbage collection and gives back the blocks of
// every sequence it found unreachable (dropped without Close); it returns
// how many it released. Sequence.Reserve does this by itself when the pool
// is short of blocks. Since 0.7.
func (p *Pool) ReclaimDropped() (n int, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.ReclaimDropped")
	if p.handle() == nil {
		return 0, ErrPoolClosed
	}
	return p.reclaim(), nil
}

// reclaim is ReclaimDropped inside a call (the pool's mutex held). The
// finalizers that the collection queues find their sequences gone and do
// nothing.
func (p *Pool) reclaim() int {
	p.created = 0
	runtime.GC() // returns once the sweep is done: the weak pointers of unreachable sequences are nil
	n := p.o.unreachable()
	if n > 0 {
		_, _ = p.enter(true) // destroys them
	}
	return n
}

// unlessShort runs take, a call that takes blocks (the pool's mutex held).
// If the pool is short of them, blocks may be held by sequences dropped
// without Close: it collects them and runs take once more (only if a
// sequence was made since the last collection, so a full pool does not
// collect at every refusal), and a shortage that remains counts the open
// sequences in its message, since those nobody closed are the usual reason.
func (p *Pool) unlessShort(take func() error) error {
	err := take()
	if !errors.Is(err, ErrOutOfMemory) {
		return err
	}
	if p.created > 0 && p.reclaim() > 0 {
		if err = take(); !errors.Is(err, ErrOutOfMemory) {
			return err
		}
	}
	p.o.mu.Lock()
	n := len(p.o.open)
	p.o.mu.Unlock()
	return withDetail(err, fmt.Sprintf("; %d sequences of this pool are open (not closed), and a sequence dropped "+
		"without Close holds its blocks until the garbage collector finds it: close each one when its request ends", n))
}

// NewSequence returns a new, empty sequence (a request). salt is its cache
// salt (per tenant: blocks are reused only between sequences with the same
// salt); nil for none.
func (p *Pool) NewSequence(salt []byte) (_ *Sequence, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.NewSequence")
	return p.makeSequence(func(h unsafe.Pointer) (unsafe.Pointer, error) {
		return cPoolSequenceCreate(h, SequenceKeys{Salt: salt})
	})
}

// PoolBlockHashVersion is the version of docs/block-hash.md a pool's hashes
// follow: 2, version 1 plus the extra keys of SequenceKeys (a sequence
// without them has version 1's hashes).
const PoolBlockHashVersion = 2

// MultimodalItem is one image or audio clip of a sequence: its content Hash
// (1 to 1024 bytes) and the tokens its placeholders occupy, [Offset,
// Offset+Length). Every block overlapping that range hashes with Hash.
type MultimodalItem struct {
	Hash           []byte
	Offset, Length uint64
}

// SequenceKeys is what a sequence's block hashes depend on besides the
// pool's seed and the tokens: the cache Salt (per tenant, in the chain's
// root), the AdapterKey (a LoRA adapter's name, up to 1024 bytes, in every
// block) and the MMItems (sorted by Offset, not overlapping, each in the
// blocks its range overlaps). Empty fields mean none.
type SequenceKeys struct {
	Salt, AdapterKey []byte
	MMItems          []MultimodalItem
	// AdapterPath is a HashVLLM pool's LoRA path (part of vLLM's LoRA key;
	// needs an AdapterKey); empty otherwise. Since 0.7.
	AdapterPath []byte
	// AdapterID is the adapter's number in events (vLLM's lora_id), not
	// hashed; 0 = none. Since 0.7.
	AdapterID int64
}

// keysNames turns the C option names of a message into the SequenceKeys fields they came from.
var keysNames = strings.NewReplacer("options->mm_items", "keys.MMItems", "options->num_mm_items", "len(keys.MMItems)",
	"options->adapter_key_len", "len(keys.AdapterKey)", "options->adapter_path_len", "len(keys.AdapterPath)",
	"options->adapter_id", "keys.AdapterID", "options->adapter_key", "keys.AdapterKey",
	"options->adapter_path", "keys.AdapterPath", "options->salt", "keys.Salt", "mm_items[", "keys.MMItems[", "].hash_len", "].Hash length",
	"].offset", "].Offset", "].length", "].Length")

// NewSequenceWithKeys returns a new, empty sequence whose blocks hash with
// keys: sequences with equal tokens but another salt, adapter key or image
// hash share no block from the first block the difference touches. Bad keys
// (items unsorted, overlapping, empty or beyond 2^40 tokens, a key over 1024
// bytes) are CodeInvalidArgument naming the field and value; the pool is
// then unchanged.
func (p *Pool) NewSequenceWithKeys(keys SequenceKeys) (_ *Sequence, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.NewSequenceWithKeys")
	return p.makeSequence(func(h unsafe.Pointer) (unsafe.Pointer, error) {
		s, err := cPoolSequenceCreate(h, keys)
		if e, ok := err.(*Error); ok && e != nil {
			c := *e
			c.Message = keysNames.Replace(c.Message)
			return s, &c
		}
		return s, err
	})
}

// makeSequence runs create, a call that creates a sequence in the pool (it
// changes blocks or tables), and wraps the handle it returns.
func (p *Pool) makeSequence(create func(unsafe.Pointer) (unsafe.Pointer, error)) (*Sequence, error) {
	h, err := p.enter(true)
	if err != nil {
		return nil, err
	}
	var s unsafe.Pointer
	err = p.unlessShort(func() (err error) { s, err = create(h); return err })
	runtime.KeepAlive(p)
	if err != nil {
		return nil, err
	}
	return p.newSequence(s), nil
}

// finalize runs on the finalizer goroutine, maybe while the pool is in use:
// it hands the handle to the pool, which destroys it at its next call.
func (s *Sequence) finalize() {
	if atomic.SwapPointer(&s.p, nil) != nil {
		s.pool.o.drop(s.id)
	}
}

// Close releases the sequence's blocks. It is idempotent, always returns
// nil, and does nothing once the pool is closed (which freed it).
func (s *Sequence) Close() error {
	defer s.lock().Unlock()
	if s == nil {
		return nil
	}
	h := atomic.SwapPointer(&s.p, nil)
	if h == nil {
		return nil
	}
	runtime.SetFinalizer(s, nil)
	o := s.pool.o
	o.mu.Lock()
	delete(o.open, s.id)
	o.mu.Unlock()
	if _, err := s.pool.enter(true); err == nil {
		cPoolSequenceDestroy(h)
	}
	runtime.KeepAlive(s)
	return nil
}

// Pool returns the pool the sequence belongs to.
func (s *Sequence) Pool() *Pool {
	if s == nil {
		return nil
	}
	return s.pool
}

// enter returns the sequence's handle for a call (see Pool.enter).
func (s *Sequence) enter(stale bool) (unsafe.Pointer, error) {
	if s == nil || s.pool == nil {
		return nil, ErrSequenceClosed
	}
	if _, err := s.pool.enter(stale); err != nil {
		return nil, err
	}
	if s.p == nil {
		return nil, ErrSequenceClosed
	}
	return s.p, nil
}

// Len/Length and Committed/CommittedLength are alike on purpose: a
// deprecated method kept for source compatibility beside its replacement,
// both one line through count.

// Len returns the tokens the sequence holds (reserved, committed or not);
// 0 once closed, indistinguishable from an empty sequence.
//
// Deprecated: use Length, which reports a closed sequence or pool as an
// error (ErrSequenceClosed, ErrPoolClosed). Len stays for source
// compatibility.
func (s *Sequence) Len() int64 {
	n, _ := s.Length()
	return n
}

// Length returns the tokens the sequence holds (reserved, committed or
// not), or ErrSequenceClosed / ErrPoolClosed. Since 0.7.
func (s *Sequence) Length() (_ int64, err error) {
	defer named(&err, "Sequence.Length")
	return s.count(cPoolSequenceLength)
}

// Committed returns the tokens committed (written and declared by Commit,
// or matched); 0 once closed.
//
// Deprecated: use CommittedLength, which reports a closed sequence or pool
// as an error. Committed stays for source compatibility.
func (s *Sequence) Committed() int64 {
	n, _ := s.CommittedLength()
	return n
}

// CommittedLength returns the tokens committed, or ErrSequenceClosed /
// ErrPoolClosed. Since 0.7.
func (s *Sequence) CommittedLength() (_ int64, err error) {
	defer named(&err, "Sequence.CommittedLength")
	return s.count(cPoolSequenceCommitted)
}

// count runs a query of the sequence's token counts.
func (s *Sequence) count(query func(unsafe.Pointer) uint64) (int64, error) {
	defer s.lock().Unlock()
	h, err := s.enter(false)
	if err != nil {
		return 0, err
	}
	n := query(h)
	runtime.KeepAlive(s)
	return int64(n), nil
}

// MatchPrefix attaches the longest cached prefix of tokens to this empty
// sequence and returns how many tokens matched: a whole number of blocks of
// every group, at most len(tokens) - 1 (the last token is always computed).
// Reserve the rest.
func (s *Sequence) MatchPrefix(tokens []int32) (_ int64, err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.MatchPrefix")
	h, err := s.enter(true)
	if err != nil {
		return 0, err
	}
	n, err := cPoolMatchPrefix(h, tokens)
	runtime.KeepAlive(s)
	return int64(n), err
}

// SlotMapping holds the slots Reserve gave the step's tokens: NumGroups rows
// of NumTokens() in one group-major slice (Slots[g*NumTokens()+i] is token
// i's slot in group g: block * block_size + offset, or -1 in a recurrent
// group), the form Pool.Write takes.
type SlotMapping struct {
	Slots     []int64
	NumGroups int
}

// NumTokens returns the number of tokens (columns).
func (m SlotMapping) NumTokens() int {
	if m.NumGroups == 0 {
		return 0
	}
	return len(m.Slots) / m.NumGroups
}

// Group returns the slots of group g (a subslice).
func (m SlotMapping) Group(g int) []int64 {
	n := m.NumTokens()
	return m.Slots[g*n : (g+1)*n]
}

// ConcatSlots joins the mappings of several sequences group by group: what
// one Pool.Write of a whole batch takes.
func ConcatSlots(ms ...SlotMapping) (SlotMapping, error) {
	if len(ms) == 0 {
		return SlotMapping{}, nil
	}
	out := SlotMapping{NumGroups: ms[0].NumGroups}
	total := 0
	for i, m := range ms {
		if m.NumGroups != out.NumGroups {
			return SlotMapping{}, newError(CodeInvalidArgument, fmt.Sprintf(
				"ConcatSlots: mapping %d has %d groups but mapping 0 has %d", i, m.NumGroups, out.NumGroups))
		}
		total += len(m.Slots)
	}
	out.Slots = make([]int64, 0, total)
	for g := 0; g < out.NumGroups; g++ {
		for _, m := range ms {
			out.Slots = append(out.Slots, m.Group(g)...)
		}
	}
	return out, nil
}

// Reserve appends tokens and gives each a slot in every attention group
// (copying a shared or cached last block first, evicting least recently
// used cached blocks when none is free). Out of blocks is ErrOutOfMemory
// naming the group and the numbers, and nothing changes.
//
// Before it reports a shortage, Reserve gives back the blocks of sequences
// dropped without Close: if sequences were made since its last try, it runs
// a garbage collection and, if that found dropped sequences, retries once
// (Pool.ReclaimDropped). The error counts the pool's open sequences.
func (s *Sequence) Reserve(tokens []int32) (_ SlotMapping, err error) {
	defer named(&err, "Sequence.Reserve")
	// ReserveInto takes the pool's mutex.
	var m SlotMapping
	err = s.ReserveInto(tokens, &m)
	return m, err
}

// ReserveInto is Reserve into a mapping whose memory is reused (a decode
// loop allocates nothing).
func (s *Sequence) ReserveInto(tokens []int32, m *SlotMapping) (err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.ReserveInto")
	h, err := s.enter(true)
	if err != nil {
		return err
	}
	groups := len(s.pool.groups)
	n := groups * len(tokens)
	if cap(m.Slots) < n {
		m.Slots = make([]int64, n)
	}
	m.Slots, m.NumGroups = m.Slots[:n], groups
	err = s.pool.unlessShort(func() error { return cPoolReserve(h, tokens, m.Slots) })
	runtime.KeepAlive(s)
	if err != nil {
		m.Slots = m.Slots[:0]
	}
	return err
}

// Commit declares every reserved token written: blocks that became full are
// hashed and cached (an EventBlockStored each), recurrent groups checkpoint
// their state at block boundaries.
func (s *Sequence) Commit() (err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.Commit")
	return s.call(cPoolCommit)
}

// call runs a call that changes blocks or tables on the sequence's handle.
func (s *Sequence) call(f func(unsafe.Pointer) error) error {
	h, err := s.enter(true)
	if err != nil {
		return err
	}
	err = f(h)
	runtime.KeepAlive(s)
	return err
}

// Fork returns a new sequence sharing every block of this one (n > 1
// sampling, beam search); nothing is copied until one of them writes into a
// shared partial block (copy-on-write).
func (s *Sequence) Fork() (_ *Sequence, err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.Fork")
	h, err := s.enter(true)
	if err != nil {
		return nil, err
	}
	f, err := cPoolFork(h)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	return s.pool.newSequence(f), nil
}

// Truncate keeps the first n tokens (speculative decoding's rollback).
func (s *Sequence) Truncate(n int64) (err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.Truncate")
	if n < 0 {
		return newError(CodeInvalidArgument, fmt.Sprintf("Truncate: n is %d; it must be >= 0", n))
	}
	return s.call(func(h unsafe.Pointer) error { return cPoolTruncate(h, uint64(n)) })
}

// Pin pins the sequence's cached blocks: never evicted, even after it is
// closed, until Pool.UnpinAll.
func (s *Sequence) Pin() (err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.Pin")
	return s.call(cPoolPin)
}

// Gather copies the sequence's K and V of layer into keys and values,
// [1, num_kv_heads, Len(), head_dim] tensors on the pool's device (a Tensor
// of the pool's element type, or an ExternalTensor), which it writes: the
// transformers layout. A latent layer takes nil values (it has no V); an fp8
// layer gives its decoded values.
func (s *Sequence) Gather(layer int, keys, values Input) (err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.Gather")
	return s.gather(layer, keys, values)
}

// gather is Gather inside a call (the pool's mutex held).
func (s *Sequence) gather(layer int, keys, values Input) error {
	const fn = "Gather"
	h, err := s.enter(false)
	if err != nil {
		return err
	}
	l, err := layerAndInput(fn, layer, "keys", keys)
	if err != nil {
		return err
	}
	arr, err := newTensorArrays(fn, []Input{keys}, []Input{values}, false)
	if err != nil {
		return err
	}
	defer arr.free()
	err = cPoolGather(h, l, arr.keys(), optionalValues(arr, values))
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
	runtime.KeepAlive(values)
	return err
}

// GatherTensors is Gather into new host tensors of element type T, sized
// by the sequence's length in the same call (another goroutine's Reserve
// cannot come in between).
func GatherTensors[T Element](s *Sequence, layer int) (keys, values Tensor[T], err error) {
	defer s.lock().Unlock()
	defer named(&err, "GatherTensors")
	h, err := s.enter(false)
	if err != nil {
		return keys, values, err
	}
	if layer < 0 || layer >= len(s.pool.layers) {
		return keys, values, newError(CodeOutOfRange, fmt.Sprintf("GatherTensors: layer %d is out of range (%d layers)",
			layer, len(s.pool.layers)))
	}
	l := s.pool.layers[layer]
	n := int64(cPoolSequenceLength(h))
	keys = NewTensor[T](1, int64(l.NumKVHeads), n, int64(l.KeyHeadDim))
	values = NewTensor[T](1, int64(l.NumKVHeads), n, int64(l.valueDim()))
	err = s.gather(layer, keys, values)
	return keys, values, err
}

// RecurrentState returns the live state of recurrent layer: conv [1,
// conv_dim, conv_kernel] and SSM [1, heads, head_dim, ssm_state_size] views
// the model reads and writes in place (As gives a writable Tensor over a
// host pool's state). Valid until the next call that changes blocks or
// tables.
func (s *Sequence) RecurrentState(layer int) (conv, ssm View, err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.RecurrentState")
	l, err := layerIndex("RecurrentState", layer)
	if err != nil {
		return View{}, View{}, err
	}
	h, err := s.enter(false)
	if err != nil {
		return View{}, View{}, err
	}
	var c, m ctensor
	err = cPoolRecurrentState(h, l, &c, &m)
	runtime.KeepAlive(s)
	if err != nil {
		return View{}, View{}, err
	}
	return s.pool.view(&c, viewPool), s.pool.view(&m, viewPool), nil
}
