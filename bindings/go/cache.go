package kvcache

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// liveHandles counts the C objects (caches and encoder-decoder pairs) this
// package owns and has not destroyed yet.
var liveHandles atomic.Int64

// Version returns the version of the loaded C library: major, minor, patch
// (kvc_version).
func Version() (major, minor, patch int) {
	v := int(cVersion())
	return v / 10000, v / 100 % 100, v % 100
}

// VersionString returns the loaded library's version as "MAJOR.MINOR.PATCH"
// (kvc_version_string), or "" without cgo.
func VersionString() string { return cVersionString() }

// Features returns the library's features bitmask (kvc_features). It may
// probe for backend plugins on the first call.
func Features() Feature { return Feature(cFeatures()) }

// codeName is kvc_code_name.
func codeName(c Code) string { return cCodeName(c) }

// DataType returns the DLPack triple of d, {0, 0, 0} for an unknown dtype
// (kvc_dtype_to_data_type).
func (d DType) DataType() DataType { return cDTypeToDataType(d) }

// Size returns the bytes per element of d, 0 for DTypeUnset or an unknown
// dtype (kvc_dtype_size).
func (d DType) Size() int { return cDTypeSize(d) }

// DTypeOf returns the storage dtype of a DLPack triple, DTypeUnset if
// kvcache cannot store it (kvc_dtype_from_data_type).
func DTypeOf(t DataType) DType { return cDTypeFromDataType(t) }

// checkVersion compares the header major this package was written for with
// the loaded library's, once.
var checkVersion = sync.OnceValue(func() error {
	if err := cAvailable(); err != nil {
		return err
	}
	major, _, _ := Version()
	if major != HeaderVersionMajor {
		return newError(CodeVersionMismatch, fmt.Sprintf(
			"the loaded libkvcache is %s (ABI major %d) but this package was written for ABI major %d (header %d.%d.%d)",
			VersionString(), major, HeaderVersionMajor, HeaderVersionMajor, HeaderVersionMinor, HeaderVersionPatch))
	}
	return nil
})

// Cache is a KV cache (kvc_cache): an ordered list of layers, each of one
// kind, with transformers' semantics. Create one with New, NewFromTensors,
// Clone, BatchSplit or FromBatchSplits, and Close it when done.
//
// A Cache is safe for concurrent use: its methods take a mutex for the
// call, so calls from several goroutines run one after the other (the
// library refuses overlapping calls on one handle with KVC_ERROR_BUSY; the
// package never lets that happen). Distinct caches have distinct mutexes
// and run in parallel. Views are not synchronised: a view read while another
// goroutine mutates its cache goes stale under the reader (docs/threads.md).
//
// A Cache that becomes unreachable without Close is closed by a finalizer,
// as a safety net only: the finalizer runs when the garbage collector gets
// to it, which it does not hurry for memory it cannot see.
type Cache struct {
	mu    sync.Mutex     // held for each call (lock); a borrowed cache takes its pair's instead
	p     unsafe.Pointer // *kvc_cache; nil once closed
	gen   uint64         // bumped by every mutating call; views remember it
	owner *edOwner       // non-nil: borrowed from an EncoderDecoderCache
	// callsBack: the library may call Go from inside this cache's calls (its stores come from a Go Allocator,
	// CacheOptions.Allocator, its own or the cache's it was made from): they use the shims without nocallback.
	callsBack bool

	// C memory that UpdateAll lays its tensor arrays out in, kept from call
	// to call (one goroutine at a time uses a cache); freed by Close.
	scratch     unsafe.Pointer
	scratchSize uintptr
}

// scratchMem returns the cache's scratch memory, grown to at least size
// bytes, or nil if C memory is exhausted. A borrowed cache, whose Close does
// nothing, gets memory of its own per call instead (nil here: the caller
// allocates).
func (c *Cache) scratchMem(size uintptr) unsafe.Pointer {
	if c.owner != nil {
		return nil
	}
	if c.scratchSize < size {
		if c.scratch != nil {
			cFree(c.scratch)
			c.scratch, c.scratchSize = nil, 0
		}
		if c.scratch = cAlloc(size); c.scratch == nil {
			return nil
		}
		c.scratchSize = size
	}
	return c.scratch
}

// newCacheOr is newCache for what a C constructor returned: nil and its error when it failed.
func newCacheOr(p unsafe.Pointer, callsBack bool, err error) (*Cache, error) {
	if err != nil {
		return nil, err
	}
	return newCache(p, callsBack), nil
}

func newCache(p unsafe.Pointer, callsBack bool) *Cache {
	c := &Cache{p: p, callsBack: callsBack}
	liveHandles.Add(1)
	runtime.SetFinalizer(c, (*Cache).Close)
	return c
}

// Close frees the cache and all memory it owns; its views become invalid.
// It is idempotent, always returns nil, and is a no-op for a cache borrowed
// from an EncoderDecoderCache (closing the pair frees it).
func (c *Cache) Close() error {
	defer c.lock().Unlock()
	if c == nil || c.owner != nil {
		return nil
	}
	p := atomic.SwapPointer(&c.p, nil)
	if p == nil {
		return nil
	}
	runtime.SetFinalizer(c, nil)
	c.gen++
	cDestroy(p)
	liveHandles.Add(-1)
	if c.scratch != nil {
		cFree(c.scratch)
		c.scratch, c.scratchSize = nil, 0
	}
	return nil
}

// lock takes the mutex that serialises calls on the cache (its pair's for a
// borrowed cache, so that the pair and both halves are one object) and
// returns it: `defer c.lock().Unlock()` opens every method that calls C (no
// closure: Update allocates nothing). Methods never call each other's
// locking entry points (sync.Mutex is not re-entrant).
func (c *Cache) lock() *sync.Mutex {
	if c == nil {
		return heldAlone()
	}
	m := &c.mu
	if c.owner != nil {
		m = &c.owner.mu
	}
	m.Lock()
	return m
}

// heldAlone is a locked mutex nobody else holds, for a nil receiver (whose
// method then reports ErrClosed or the like).
func heldAlone() *sync.Mutex {
	m := new(sync.Mutex)
	m.Lock()
	return m
}

// handle is the C handle, nil once closed (or once the owning pair is).
func (c *Cache) handle() unsafe.Pointer {
	if c == nil || (c.owner != nil && c.owner.p == nil) {
		return nil
	}
	return c.p
}

// get returns the handle for a call that does not mutate the cache.
func (c *Cache) get() (unsafe.Pointer, error) {
	if p := c.handle(); p != nil {
		return p, nil
	}
	return nil, ErrClosed
}

// mut returns the handle for a mutating call, invalidating the views.
func (c *Cache) mut() (unsafe.Pointer, error) {
	p := c.handle()
	if p == nil {
		return nil, ErrClosed
	}
	c.gen++
	return p, nil
}

func layerIndex(fn string, layer int) (uint32, error) {
	if layer < 0 || uint64(layer) > math.MaxUint32 {
		return 0, newError(CodeOutOfRange, fmt.Sprintf("%s: layer %d is out of range", fn, layer))
	}
	return uint32(layer), nil
}

func signedLayer(fn string, layer int) (int32, error) {
	if layer < math.MinInt32 || layer > math.MaxInt32 {
		return 0, newError(CodeOutOfRange, fmt.Sprintf("%s: layer %d is out of range", fn, layer))
	}
	return int32(layer), nil
}

// New creates a cache (kvc_cache_create). A nil opts makes a lazy
// DynamicCache on the CPU: no layers until the first update, then plain
// dynamic layers up to the updated index. Layers allocate their storage at
// their first update (or EarlyInitialization), taking batch, heads, head
// dims and dtype from it.
func New(opts *CacheOptions) (*Cache, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	p, err := cCreate(opts)
	return newCacheOr(p, opts.hasAllocator(), err)
}

// NewFromTensors builds a cache from existing per-layer tensors:
// transformers' legacy tuple format ((k0, v0), (k1, v1), ...) and
// DynamicCache(ddp_cache_data). The cache is created from opts as New does,
// then layer i receives Update(keys[i], values[i]). The tensors are copied.
func NewFromTensors(opts *CacheOptions, keys, values []Input) (*Cache, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	const fn = "NewFromTensors"
	arr, err := newTensorArrays(fn, keys, values, false)
	if err != nil {
		return nil, err
	}
	defer arr.free()
	p, err := cCreateFromTensors(opts, arr.n, arr.keys(), arr.values())
	runtime.KeepAlive(keys)
	runtime.KeepAlive(values)
	return newCacheOr(p, opts.hasAllocator(), err)
}

// Clone returns a deep copy of the cache (same layers, contents, counters
// and flags), for prefix reuse: prefill once, clone per request.
func (c *Cache) Clone() (_ *Cache, err error) {
	return valueCall(c, "Cache.Clone", reads, nil, func(p unsafe.Pointer) (*Cache, error) {
		q, err := cClone(p)
		return newCacheOr(q, c.callsBack, err)
	})
}

// EarlyInitialization allocates every layer not yet initialized now instead
// of at its first update (transformers' early_initialization): static
// layers get their zeroed buffers, dynamic layers an empty store.
func (c *Cache) EarlyInitialization(opts InitOptions) (err error) {
	return call(c, "Cache.EarlyInitialization", mutates, nil, func(p unsafe.Pointer) error {
		return cEarlyInit(p, c.callsBack, &opts)
	})
}

// NumLayers returns the number of layers (for a lazy cache, the layers
// touched so far); 0 for a closed cache.
//
// Deprecated: use LayerCount, which reports a closed cache as ErrClosed.
// NumLayers stays for source compatibility.
func (c *Cache) NumLayers() int {
	n, _ := c.LayerCount()
	return n
}

// LayerCount returns the number of layers (for a lazy cache, the layers
// touched so far), or ErrClosed. Since 0.7.
func (c *Cache) LayerCount() (_ int, err error) {
	return valueCall(c, "Cache.LayerCount", reads, nil, func(p unsafe.Pointer) (int, error) {
		return int(cNumLayers(p)), nil
	})
}

// LayerInfo returns what a layer is and holds.
func (c *Cache) LayerInfo(layer int) (_ LayerInfo, err error) {
	l, argErr := layerIndex("LayerInfo", layer)
	return valueCall(c, "Cache.LayerInfo", reads, argErr, func(p unsafe.Pointer) (LayerInfo, error) {
		var info LayerInfo
		err := cLayerInfo(p, l, &info)
		return info, err
	})
}

// LayerView returns a layer's stored keys and values (transformers'
// cache.layers[i].keys/values): dynamic layers all stored tokens, dynamic
// sliding the kept tail, static layers the whole buffer including unwritten
// (zero) slots. The views are valid until the cache's next mutating call.
func (c *Cache) LayerView(layer int) (_ KV, err error) {
	l, argErr := layerIndex("LayerView", layer)
	return valueCall(c, "Cache.LayerView", reads, argErr, func(p unsafe.Pointer) (KV, error) {
		var out ckv
		err := cLayerView(p, l, &out)
		return kvFromC(&out, c, err)
	})
}

// SeqLength returns get_seq_length(layer): tokens seen (static and sliding
// layers: all tokens written; dynamic layers: tokens stored); 0 for a layer
// beyond the layers or not initialized.
func (c *Cache) SeqLength(layer int) (_ int64, err error) {
	l, argErr := layerIndex("SeqLength", layer)
	return valueCall(c, "Cache.SeqLength", reads, argErr, func(p unsafe.Pointer) (int64, error) {
		return cSeqLength(p, l)
	})
}

// MaxLength returns get_max_length(layer): -1 for unbounded (dynamic), the
// window for dynamic sliding, max_cache_len for static and min(window,
// max_cache_len) for static sliding layers; with AllLayers, the maximum over
// all layers.
func (c *Cache) MaxLength(layer int) (_ int64, err error) {
	l, argErr := signedLayer("MaxLength", layer)
	return valueCall(c, "Cache.MaxLength", reads, argErr, func(p unsafe.Pointer) (int64, error) {
		return cMaxLength(p, l)
	})
}

// UsableLength returns get_usable_length(newSeqLength, layer): the stored
// length old models use as kv_seq_len.
func (c *Cache) UsableLength(newSeqLength int64, layer int) (_ int64, err error) {
	l, argErr := layerIndex("UsableLength", layer)
	return valueCall(c, "Cache.UsableLength", reads, argErr, func(p unsafe.Pointer) (int64, error) {
		return cUsableLength(p, newSeqLength, l)
	})
}

// MaskSizes returns get_mask_sizes(queryLength, layer): the length and the
// absolute offset of the key range the next update of queryLength tokens
// will return, so that the attention mask can be built before the update.
func (c *Cache) MaskSizes(queryLength int64, layer int) (kvLength, kvOffset int64, err error) {
	defer c.lock().Unlock()
	defer named(&err, "Cache.MaskSizes")
	l, err := layerIndex("MaskSizes", layer)
	if err != nil {
		return 0, 0, err
	}
	p, err := c.get()
	if err != nil {
		return 0, 0, err
	}
	kvLength, kvOffset, err = cMaskSizes(p, queryLength, l)
	runtime.KeepAlive(c)
	return kvLength, kvOffset, err
}

// BatchSize returns the batch size of the initialized static layers
// (transformers' Cache.batch_size), -1 if there are none.
func (c *Cache) BatchSize() (_ int64, err error) {
	return valueCall(c, "Cache.BatchSize", reads, nil, func(p unsafe.Pointer) (int64, error) {
		return cBatchSize(p)
	})
}

// QueryOffset returns transformers' get_query_offset(layer) (5.14): where the
// next forward's queries start, the sequence length plus what the cache's
// QueryOffsetRule adds.
func (c *Cache) QueryOffset(layer uint32) (_ int64, err error) {
	return valueCall(c, "Cache.QueryOffset", reads, nil, func(p unsafe.Pointer) (int64, error) {
		return cQueryOffset(p, layer)
	})
}

// IsCroppable reports transformers' is_croppable (5.17) of one layer, or of
// every layer with AllLayers: whether Crop can put it back as it was.
func (c *Cache) IsCroppable(layer int32) (_ bool, err error) {
	return valueCall(c, "Cache.IsCroppable", reads, nil, func(p unsafe.Pointer) (bool, error) {
		return cIsCroppable(p, layer)
	})
}

// SetPreviousAcceptedTokens is DFlashCache.set_previous_accepted_tokens: only
// on a cache created with QueryOffsetDFlash.
func (c *Cache) SetPreviousAcceptedTokens(tokens int64) (err error) {
	return call(c, "Cache.SetPreviousAcceptedTokens", reads, nil, func(p unsafe.Pointer) error {
		return cSetPreviousAcceptedTokens(p, tokens)
	})
}

// Memory returns the memory the cache holds.
func (c *Cache) Memory() (_ MemoryInfo, err error) {
	return valueCall(c, "Cache.Memory", reads, nil, func(p unsafe.Pointer) (MemoryInfo, error) {
		var m MemoryInfo
		err := cMemory(p, &m)
		return m, err
	})
}

// uopts mirrors kvcgo_uopts: the pointer-free part of kvc_update_options.
type uopts struct {
	cachePositionLength uint32
	hasCachePosition    int32
	partialRotationSize int64
	cos, sin            tdesc
}

// prepare describes o; the pointers returned go to the C call with it.
func (o *UpdateOptions) prepare(fn string, u *uopts) (cp *int64, cos, sin unsafe.Pointer, err error) {
	if len(o.CachePosition) > math.MaxUint32 {
		return nil, nil, nil, newError(CodeInvalidArgument, fn+": CachePosition is too long")
	}
	if len(o.CachePosition) > 0 {
		u.hasCachePosition = 1
		u.cachePositionLength = uint32(len(o.CachePosition))
		cp = &o.CachePosition[0]
	}
	u.partialRotationSize = o.PartialRotationSize
	if cos, _, err = describe(fn, plainArg("RopeCos"), o.RopeCos, &u.cos); err != nil {
		return nil, nil, nil, err
	}
	if sin, _, err = describe(fn, plainArg("RopeSin"), o.RopeSin, &u.sin); err != nil {
		return nil, nil, nil, err
	}
	return cp, cos, sin, nil
}

// Update stores the new tokens of one layer and returns the keys and values
// attention must use now (update(key, value, layer)): every stored token for
// dynamic layers; the kept tail plus the new tokens for sliding ones; the
// whole buffer for static layers. key is [batch, heads, new, k_head_dim],
// value [batch, heads, new, v_head_dim], of the cache's dtype and device;
// both are copied. The first update of a layer fixes its batch, heads, head
// dims and dtype; a lazy cache creates missing layers up to layer.
//
// The returned views are zero-copy windows onto the cache's storage, valid
// until its next mutating call. In steady decoding nothing is allocated,
// in the library or in this package.
func (c *Cache) Update(layer int, key, value Input, opts *UpdateOptions) (_ KV, err error) {
	defer c.lock().Unlock()
	defer named(&err, "Cache.Update")
	if opts == nil && uint64(layer) <= math.MaxUint32 {
		// The common call, with less to describe: compact tensors.
		var d cpair
		kp, _, kn, kt, ok := compactInput(key, &d.shape[0])
		if ok {
			var vp unsafe.Pointer
			var vn int
			var vt DataType
			if vp, _, vn, vt, ok = compactInput(value, &d.shape[1]); ok {
				d.ndim = [2]int32{int32(kn), int32(vn)}
				d.code = [2]uint8{kt.Code, vt.Code}
				d.bits = [2]uint8{kt.Bits, vt.Bits}
				d.lanes = [2]uint16{kt.Lanes, vt.Lanes}
				return c.updateCompact(uint32(layer), kp, vp, &d, key, value)
			}
		}
	}
	return c.update(layer, key, value, opts)
}

func (c *Cache) updateCompact(l uint32, kp, vp unsafe.Pointer, d *cpair, key, value Input) (KV, error) {
	p, err := c.mut()
	if err != nil {
		return KV{}, err
	}
	var out ckv
	err = cUpdateCompact(p, c.callsBack, l, kp, vp, d, &out)
	runtime.KeepAlive(c)
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return kvFromC(&out, c, err)
}

// update is Update for any input.
func (c *Cache) update(layer int, key, value Input, opts *UpdateOptions) (KV, error) {
	const fn = "Update"
	l, err := layerIndex(fn, layer)
	if err != nil {
		return KV{}, err
	}
	var kd, vd tdesc
	kp, _, err := describe(fn, plainArg("key"), key, &kd)
	if err != nil {
		return KV{}, err
	}
	vp, _, err := describe(fn, plainArg("value"), value, &vd)
	if err != nil {
		return KV{}, err
	}
	var u uopts
	var cp *int64
	var cos, sin unsafe.Pointer
	if opts != nil {
		if cp, cos, sin, err = opts.prepare(fn, &u); err != nil {
			return KV{}, err
		}
	}
	p, err := c.mut()
	if err != nil {
		return KV{}, err
	}
	var out ckv
	if opts == nil {
		err = cUpdate(p, c.callsBack, l, kp, vp, &kd, &vd, &out)
	} else {
		err = cUpdateOpts(p, c.callsBack, l, kp, vp, &kd, &vd, &u, cp, cos, sin, &out)
		runtime.KeepAlive(opts)
	}
	runtime.KeepAlive(c)
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return kvFromC(&out, c, err)
}

// UpdateAll does one decode or prefill step for layers 0..len(keys)-1 in
// one call: like Update for each layer in order, but validated as a whole
// first, so that either every layer is updated or none is. If out is not
// nil it must have len(keys) entries and receives the views.
//
// UpdateAll pins the inputs' Go memory for the duration of the call, which
// costs about as much as a small copy per tensor; a decode loop that reuses
// its input buffers calls PrepareStep once and Step.Update per step.
func (c *Cache) UpdateAll(keys, values []Input, opts *UpdateOptions, out []KV) (err error) {
	defer c.lock().Unlock()
	defer named(&err, "Cache.UpdateAll")
	const fn = "UpdateAll"
	if out != nil && len(out) != len(keys) {
		return newError(CodeInvalidArgument, fmt.Sprintf("%s: out has %d entries for %d layers", fn, len(out), len(keys)))
	}
	if _, err := c.get(); err != nil {
		return err
	}
	var arr tensorArrays
	err = arr.init(fn, keys, values, out != nil, c)
	if err != nil {
		return err
	}
	defer arr.free()
	var u uopts
	var cp *int64
	var cos, sin unsafe.Pointer
	up := (*uopts)(nil)
	if opts != nil {
		if cp, cos, sin, err = opts.prepare(fn, &u); err != nil {
			return err
		}
		up = &u
	}
	p, err := c.mut()
	if err != nil {
		return err
	}
	err = cUpdateAll(p, c.callsBack, uint32(arr.n), arr.keys(), arr.values(), up, cp, cos, sin, arr.out())
	runtime.KeepAlive(c)
	runtime.KeepAlive(opts)
	runtime.KeepAlive(keys)
	runtime.KeepAlive(values)
	if err != nil {
		return err
	}
	for i := range out {
		kv := arr.kv(i)
		out[i] = KV{viewFromC(&kv.key, c), viewFromC(&kv.value, c)}
	}
	return nil
}

// Crop is crop(tokens) on every layer: tokens < 0 removes the last |tokens|
// tokens, tokens > 0 keeps the first tokens (legacy absolute length), 0 is a
// no-op except on recording sliding layers. A sliding layer that has seen
// its window can only be cropped after ActivatePastRecording, with tokens
// <= 0. Static layers refuse (ErrUnsupported).
func (c *Cache) Crop(tokens int64) (err error) {
	return call(c, "Cache.Crop", mutates, nil, func(p unsafe.Pointer) error {
		return cCrop(p, c.callsBack, tokens)
	})
}

// ActivatePastRecording makes sliding layers keep every token they receive
// from now on, so that assisted decoding can roll back rejected tokens with
// a negative Crop (activate_past_recording).
func (c *Cache) ActivatePastRecording() (err error) {
	return call(c, "Cache.ActivatePastRecording", mutates, nil, func(p unsafe.Pointer) error {
		return cActivatePastRecording(p)
	})
}

func int64sPtr(s []int64) *int64 {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// Reorder is reorder_cache(beamIdx) for beam search: row b of every
// non-empty layer becomes former row beamIdx[b]. When len(beamIdx) is the
// batch size only the rows that change are copied.
func (c *Cache) Reorder(beamIdx []int64) (err error) {
	return call(c, "Cache.Reorder", mutates, nil, func(p unsafe.Pointer) error {
		err := cReorder(p, c.callsBack, int64sPtr(beamIdx), len(beamIdx))
		runtime.KeepAlive(beamIdx)
		return err
	})
}

// BatchRepeatInterleave is batch_repeat_interleave(repeats): row i becomes
// rows i*repeats .. i*repeats+repeats-1 (contrastive search). Dynamic kinds
// only.
func (c *Cache) BatchRepeatInterleave(repeats int64) (err error) {
	return call(c, "Cache.BatchRepeatInterleave", mutates, nil, func(p unsafe.Pointer) error {
		return cRepeatInterleave(p, repeats)
	})
}

// BatchSelectIndices is batch_select_indices(indices): keeps those rows, in
// that order. Dynamic kinds only.
func (c *Cache) BatchSelectIndices(indices []int64) (err error) {
	return call(c, "Cache.BatchSelectIndices", mutates, nil, func(p unsafe.Pointer) error {
		err := cSelectIndices(p, c.callsBack, int64sPtr(indices), len(indices))
		runtime.KeepAlive(indices)
		return err
	})
}

// splitCapacity is how many handles batch_split may write: the number of
// splits for valid arguments; the library reports invalid ones.
func splitCapacity(full, split int64) int {
	if full < 1 || split < 1 {
		return 0
	}
	n := (full + split - 1) / split
	if n > 1<<20 {
		return 0
	}
	return int(n)
}

// BatchSplit is batch_split(fullBatchSize, splitSize): new caches holding
// batch rows [i, i+splitSize) for i = 0, splitSize, ... < fullBatchSize,
// with the same layers, counters and flags. fullBatchSize must be the
// cache's batch size. The cache itself is unchanged.
func (c *Cache) BatchSplit(fullBatchSize, splitSize int64) (_ []*Cache, err error) {
	return batchSplit(c, "Cache.BatchSplit", fullBatchSize, splitSize, cBatchSplit,
		func(q unsafe.Pointer) *Cache { return newCache(q, c.callsBack) })
}

// FromBatchSplits is from_batch_splits(splits): one new cache whose rows are
// the splits' rows stacked in order. The splits must agree in layer kinds,
// heads, head dims, dtype and stored lengths; they are left unchanged.
func FromBatchSplits(splits []*Cache) (*Cache, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	handles := make([]unsafe.Pointer, len(splits))
	callsBack := false
	for i, s := range splits {
		if handles[i] = s.handle(); handles[i] == nil {
			return nil, ErrClosed
		}
		callsBack = callsBack || s.callsBack
	}
	p, err := cFromBatchSplits(handles)
	runtime.KeepAlive(splits)
	for _, s := range splits {
		runtime.KeepAlive(s)
	}
	return newCacheOr(p, callsBack, err)
}

// SetStream binds a device cache to a CUDA or HIP stream, given as its
// handle (a cudaStream_t or hipStream_t as a uintptr; 0 is the default
// stream): from then on all of the cache's device work is issued on it, in
// call order, without waiting for it. Work issued before, on the old stream,
// is ordered before anything issued afterwards. The stream must outlive its
// use by the cache. A CPU cache accepts only 0.
func (c *Cache) SetStream(stream uintptr) (err error) {
	return call(c, "Cache.SetStream", mutates, nil, func(p unsafe.Pointer) error {
		return cSetStream(p, stream)
	})
}

// Stream is the handle of the stream the cache is bound to (0: the default
// stream, or a CPU cache).
func (c *Cache) Stream() (_ uintptr, err error) {
	return valueCall(c, "Cache.Stream", reads, nil, func(p unsafe.Pointer) (uintptr, error) { return cStream(p), nil })
}

// Reserve reserves room for tokens tokens in every dynamic full-attention
// layer, like a slice's capacity: updates up to that length then neither
// allocate nor copy history.
func (c *Cache) Reserve(tokens int64) (err error) {
	return call(c, "Cache.Reserve", mutates, nil, func(p unsafe.Pointer) error {
		return cReserve(p, tokens)
	})
}

// Reset empties every layer: static buffers are zeroed and their counters
// set to 0; dynamic layers drop their tokens and keep their storage. It is
// also the one call a cache poisoned by a GPU failure accepts.
func (c *Cache) Reset() (err error) {
	return call(c, "Cache.Reset", mutates, nil, func(p unsafe.Pointer) error {
		return cReset(p)
	})
}

// Offload moves a layer's K/V to the host tier (kvc_cache_offload). A
// cache created with offloading does this by itself in Update; this is for
// callers that drive it themselves.
func (c *Cache) Offload(layer int) (err error) {
	l, argErr := layerIndex("Offload", layer)
	return call(c, "Cache.Offload", mutates, argErr, func(p unsafe.Pointer) error {
		return cOffload(p, l)
	})
}

// Prefetch moves a layer's K/V back to the device tier
// (kvc_cache_prefetch).
func (c *Cache) Prefetch(layer int) (err error) {
	l, argErr := layerIndex("Prefetch", layer)
	return call(c, "Cache.Prefetch", mutates, argErr, func(p unsafe.Pointer) error {
		return cPrefetch(p, l)
	})
}

// convOpts mirrors kvcgo_conv_opts: the pointer-free part of
// kvc_conv_update_options.
type convOpts struct {
	stateIndex          uint32
	hasCachePosition    int32
	convKernelSize      int64
	cachePositionLength uint32
	present             int32
}

// UpdateConvState is update_conv_state(x, layer, state) of a Linear layer:
// x is [batch, channels, n]. Without CachePosition (the current API) the
// first call returns x left-padded with zeros to K columns when n < K, later
// calls the stored K columns followed by x; the state keeps the last K
// columns. With CachePosition (legacy MambaCache) the state is rolled left
// by one, x's columns are written at the clamped positions, and the state is
// returned. The view is valid until the cache's next mutating call.
func (c *Cache) UpdateConvState(layer int, x Input, opts *ConvUpdateOptions) (_ View, err error) {
	const fn = "UpdateConvState"
	l, argErr := layerIndex(fn, layer)
	var o convOpts
	var cp *int64
	if argErr == nil && opts != nil {
		if len(opts.CachePosition) > math.MaxUint32 {
			argErr = newError(CodeInvalidArgument, fn+": CachePosition is too long")
		}
		o.present = 1
		o.stateIndex = opts.StateIndex
		o.convKernelSize = opts.ConvKernelSize
		if len(opts.CachePosition) > 0 {
			o.hasCachePosition = 1
			o.cachePositionLength = uint32(len(opts.CachePosition))
			cp = &opts.CachePosition[0]
		}
	}
	return c.updateFromOne("Cache.UpdateConvState", fn, "x", argErr, x, func(p, data unsafe.Pointer, d *tdesc, out *ctensor) error {
		err := cUpdateConvState(p, l, data, d, &o, cp, out)
		runtime.KeepAlive(opts)
		return err
	})
}

// UpdateRecurrentState is update_recurrent_state(state, layer, stateIndex)
// (MambaCache's update_ssm_state): copies state (batch first, 1 to 6
// dimensions) into the layer's recurrent state and returns a view of it.
func (c *Cache) UpdateRecurrentState(layer, stateIndex int, state Input) (_ View, err error) {
	const fn = "UpdateRecurrentState"
	l, si, argErr := layerState(fn, layer, stateIndex)
	return c.updateFromOne("Cache.UpdateRecurrentState", fn, "state", argErr, state, func(p, data unsafe.Pointer, d *tdesc, out *ctensor) error {
		return cUpdateRecurrentState(p, l, si, data, d, out)
	})
}

// updateFromOne runs the method op, a mutating call that reads one input
// tensor (argument name arg) and returns one view: under the cache's lock,
// argErr (an argument found wrong before, or nil) reported, the input
// described, the cache taken for the change, call made, and its view
// wrapped; both kept alive across it.
func (c *Cache) updateFromOne(op, fn, arg string, argErr error, in Input,
	call func(p, data unsafe.Pointer, d *tdesc, out *ctensor) error) (_ View, err error) {
	defer c.lock().Unlock()
	defer named(&err, op)
	if argErr != nil {
		return View{}, argErr
	}
	var d tdesc
	data, _, err := describe(fn, plainArg(arg), in, &d)
	if err != nil {
		return View{}, err
	}
	p, err := c.mut()
	if err != nil {
		return View{}, err
	}
	var out ctensor
	err = call(p, data, &d, &out)
	runtime.KeepAlive(c)
	runtime.KeepAlive(in)
	if err != nil {
		return View{}, err
	}
	return viewFromC(&out, c), nil
}

// layerAndInput checks a layer index of fn and that its input arg is given (a pool's value may be nil for a
// latent layer, its key not).
func layerAndInput(fn string, layer int, arg string, in Input) (uint32, error) {
	l, err := layerIndex(fn, layer)
	if err == nil && in == nil {
		err = newError(CodeInvalidArgument, fmt.Sprintf("%s: %s must not be nil", fn, arg))
	}
	return l, err
}

// layerState checks a layer and a state index of fn, the layer first.
func layerState(fn string, layer, state int) (uint32, uint32, error) {
	l, err := layerIndex(fn, layer)
	if err != nil {
		return 0, 0, err
	}
	if state < 0 || uint64(state) > math.MaxUint32 {
		return 0, 0, newError(CodeOutOfRange, fmt.Sprintf("%s: state index %d is out of range", fn, state))
	}
	return l, uint32(state), nil
}

// StateView returns views of a Linear layer's conv and recurrent states
// (transformers' conv_states[i], recurrent_states[i]). A state not yet
// allocated is a View with NDim 0.
func (c *Cache) StateView(layer, stateIndex int) (conv, recurrent View, err error) {
	defer c.lock().Unlock()
	defer named(&err, "Cache.StateView")
	l, si, err := layerState("StateView", layer, stateIndex)
	if err != nil {
		return View{}, View{}, err
	}
	p, err := c.get()
	if err != nil {
		return View{}, View{}, err
	}
	var cv, rv ctensor
	err = cStateView(p, l, si, &cv, &rv)
	runtime.KeepAlive(c)
	if err != nil {
		return View{}, View{}, err
	}
	return viewFromC(&cv, c), viewFromC(&rv, c), nil
}

// UpdateIndexer is Cache.update_indexer(indexer_key_states, layer)
// (transformers >= 5.11): x is [batch, n, index_head_dim]. A
// LayerDynamicIndexed layer appends it and returns every stored indexer key
// [batch, total, index_head_dim]; a LayerStaticIndexed layer writes it at its
// counter and returns the whole [batch, max_cache_len, index_head_dim]
// buffer. The view is valid until the next mutating call; errors leave the
// cache unchanged.
func (c *Cache) UpdateIndexer(layer int, x Input) (_ View, err error) {
	const fn = "UpdateIndexer"
	l, argErr := layerIndex(fn, layer)
	return c.updateFromOne("Cache.UpdateIndexer", fn, "x", argErr, x, func(p, data unsafe.Pointer, d *tdesc, out *ctensor) error {
		return cUpdateIndexer(p, l, data, d, out)
	})
}

// IndexerView is layers[layer].indexer_keys of an indexed layer, as
// UpdateIndexer returns it; an empty View (no data, no dimensions) before
// its first UpdateIndexer, as transformers' None.
func (c *Cache) IndexerView(layer int) (_ View, err error) {
	l, argErr := layerIndex("IndexerView", layer)
	return valueCall(c, "Cache.IndexerView", reads, argErr, func(p unsafe.Pointer) (View, error) {
		var out ctensor
		if err := cIndexerView(p, l, &out); err != nil {
			return View{}, err
		}
		return viewFromC(&out, c), nil
	})
}

// HasPreviousState is has_previous_state(layer, stateIndex): whether the
// state(s) have had their first conv update. layer AllLayers means the last
// linear layer; stateIndex -1 means all states of the layer.
func (c *Cache) HasPreviousState(layer, stateIndex int) (_ bool, err error) {
	const fn = "HasPreviousState"
	l, argErr := signedLayer(fn, layer)
	if argErr == nil && (stateIndex < math.MinInt32 || stateIndex > math.MaxInt32) {
		argErr = newError(CodeOutOfRange, fmt.Sprintf("%s: state index %d is out of range", fn, stateIndex))
	}
	return valueCall(c, "Cache.HasPreviousState", reads, argErr, func(p unsafe.Pointer) (bool, error) {
		return cHasPreviousState(p, l, int32(stateIndex))
	})
}

// ------------------------------------------------------ tensor arrays in C

// tensorArrays lays out kvc_tensor arrays (and optionally a kvc_kv array)
// in C memory for the calls that take arrays of tensors. Go memory they
// point to is pinned until free.
type tensorArrays struct {
	n      int
	mem    unsafe.Pointer
	pin    runtime.Pinner
	hasO   bool
	shared bool // mem is a cache's scratch memory, not freed by free
}

const (
	ctensorSize = unsafe.Sizeof(ctensor{})
	ckvSize     = unsafe.Sizeof(ckv{})
	dimsSize    = 2 * maxDims * 8 // shape and strides of one tensor
)

func newTensorArrays(fn string, keys, values []Input, withOut bool) (*tensorArrays, error) {
	a := &tensorArrays{}
	if err := a.init(fn, keys, values, withOut, nil); err != nil {
		return nil, err
	}
	return a, nil
}

// init lays the arrays out in C memory of their own or, if scratch is not
// nil, in the scratch memory of that cache (see Cache.scratchMem). On error
// nothing is left pinned or allocated.
func (a *tensorArrays) init(fn string, keys, values []Input, withOut bool, scratch *Cache) error {
	if len(keys) != len(values) {
		return newError(CodeInvalidArgument, fmt.Sprintf("%s: %d keys but %d values", fn, len(keys), len(values)))
	}
	n := len(keys)
	if uint64(n) > math.MaxUint32 {
		return newError(CodeInvalidArgument, fmt.Sprintf("%s: %d layers is too many", fn, n))
	}
	a.n, a.hasO = n, withOut
	if n == 0 {
		return nil
	}
	size := uintptr(2*n)*(ctensorSize+dimsSize) + uintptr(n)*ckvSize
	if scratch != nil {
		a.mem = scratch.scratchMem(size)
		a.shared = a.mem != nil
	}
	if a.mem == nil {
		a.mem = cAlloc(size)
	}
	if a.mem == nil {
		return newError(CodeOutOfMemory, fmt.Sprintf("%s: cannot allocate %d bytes for the tensor arrays", fn, size))
	}
	var last unsafe.Pointer
	for i := 0; i < 2*n; i++ {
		in := keys[i%n]
		if i >= n {
			in = values[i-n]
		}
		// The common input, compact, has its sizes written straight into
		// the C array and checked there; anything else is described.
		shape := a.shape(i)
		data, pin, nd, dt, ok := compactInput(in, shape)
		var d tdesc
		if !ok {
			arg := argName{"keys", i % n}
			if i >= n {
				arg.base = "values"
			}
			var err error
			if data, pin, err = describe(fn, arg, in, &d); err != nil {
				a.free()
				return err
			}
		}
		// data is stored in C memory below: its object stays pinned until
		// free. Consecutive tensors of one backing array need one pin.
		if pin != nil && pin != last {
			a.pin.Pin(pin)
			last = pin
		}
		if ok {
			*a.tensor(i) = ctensor{
				data: data, deviceType: int32(DeviceCPU), ndim: int32(nd),
				code: dt.Code, bits: dt.Bits, lanes: dt.Lanes, shape: unsafe.Pointer(shape),
			}
		} else {
			a.set(i, data, &d)
		}
	}
	return nil
}

// shape is where tensor i's sizes live in the C memory (its strides follow).
func (a *tensorArrays) shape(i int) *[maxDims]int64 {
	return (*[maxDims]int64)(unsafe.Add(a.mem, uintptr(2*a.n)*ctensorSize+uintptr(i)*dimsSize))
}

func (a *tensorArrays) tensor(i int) *ctensor {
	return (*ctensor)(unsafe.Add(a.mem, uintptr(i)*ctensorSize))
}

func (a *tensorArrays) set(i int, data unsafe.Pointer, d *tdesc) {
	dims := unsafe.Add(a.mem, uintptr(2*a.n)*ctensorSize+uintptr(i)*dimsSize)
	shape := (*[maxDims]int64)(dims)
	strides := (*[maxDims]int64)(unsafe.Add(dims, maxDims*8))
	*shape = d.shape
	*strides = d.strides
	t := a.tensor(i)
	*t = ctensor{
		data: data, deviceType: d.deviceType, deviceID: d.deviceID, ndim: d.ndim,
		code: d.code, bits: d.bits, lanes: d.lanes, shape: dims, byteOffset: d.byteOffset,
	}
	if d.hasStrides != 0 {
		t.strides = unsafe.Pointer(strides)
	}
	if d.present == 0 {
		// A nil entry of an array cannot be NULL: the library reads arrays of
		// structs. An empty data pointer with ndim 0 is what it refuses.
		*t = ctensor{}
	}
}

func (a *tensorArrays) keys() unsafe.Pointer {
	if a.n == 0 {
		return nil
	}
	return a.mem
}

func (a *tensorArrays) values() unsafe.Pointer {
	if a.n == 0 {
		return nil
	}
	return unsafe.Pointer(a.tensor(a.n))
}

func (a *tensorArrays) out() unsafe.Pointer {
	if a.n == 0 || !a.hasO {
		return nil
	}
	return unsafe.Add(a.mem, uintptr(2*a.n)*(ctensorSize+dimsSize))
}

func (a *tensorArrays) kv(i int) *ckv {
	return (*ckv)(unsafe.Add(a.out(), uintptr(i)*ckvSize))
}

func (a *tensorArrays) free() {
	a.pin.Unpin()
	if a.mem != nil && !a.shared {
		cFree(a.mem)
	}
	a.mem = nil
}
