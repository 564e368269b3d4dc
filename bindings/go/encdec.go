package kvcache

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// edOwner holds the C handle of an encoder-decoder pair. It carries the
// finalizer and points at nothing, so that the pair and its two borrowed
// caches can all refer to it without forming a cycle through a finalized
// object: it is collected when none of the three is reachable.
type edOwner struct {
	mu sync.Mutex     // serialises the calls on the pair and on both halves (EncoderDecoderCache.lock)
	p  unsafe.Pointer // *kvc_encoder_decoder_cache; nil once closed
}

func (o *edOwner) close() {
	p := atomic.SwapPointer(&o.p, nil)
	if p == nil {
		return
	}
	runtime.SetFinalizer(o, nil)
	cEDDestroy(p)
	liveHandles.Add(-1)
}

// edCallsBack is Cache.callsBack of a pair's two halves.
type edCallsBack struct{ self, cross bool }

func (e *EncoderDecoderCache) callsBack() edCallsBack {
	return edCallsBack{e.self.callsBack, e.cross.callsBack}
}

// EncoderDecoderCache is transformers' EncoderDecoderCache: a self-attention
// cache over the generated tokens, a cross-attention cache over the encoder
// output, and per layer whether the cross-attention K/V have been computed
// ("is_updated"). Safe for concurrent use like Cache: the pair and its two
// halves share one mutex.
type EncoderDecoderCache struct {
	o           *edOwner
	self, cross *Cache
}

// lock takes the mutex of the pair and its halves; see Cache.lock.
func (e *EncoderDecoderCache) lock() *sync.Mutex {
	if e == nil || e.o == nil {
		return heldAlone()
	}
	e.o.mu.Lock()
	return &e.o.mu
}

// newEncoderDecoder wraps the pair p around self and cross, or, where they are nil, around new borrowed
// halves whose callsBack is the one given (that of the halves a clone or split was made from).
func newEncoderDecoder(p unsafe.Pointer, self, cross *Cache, callsBack edCallsBack) *EncoderDecoderCache {
	o := &edOwner{p: p}
	liveHandles.Add(1)
	runtime.SetFinalizer(o, (*edOwner).close)
	if self == nil {
		self = &Cache{p: cEDSelf(p), callsBack: callsBack.self}
	}
	if cross == nil {
		cross = &Cache{p: cEDCross(p), callsBack: callsBack.cross}
	}
	self.owner, cross.owner = o, o
	return &EncoderDecoderCache{o: o, self: self, cross: cross}
}

// NewEncoderDecoder makes a pair of selfAttention and crossAttention, two
// distinct caches, and takes them over: on success both become borrowed
// from the pair (their Close is a no-op, closing the pair frees them) and
// remain usable through the same *Cache values or the accessors. On error
// the caller still owns both. IsUpdated(i) starts as "cross-attention layer
// i holds tokens".
func NewEncoderDecoder(selfAttention, crossAttention *Cache) (*EncoderDecoderCache, error) {
	const fn = "NewEncoderDecoder"
	for _, c := range []*Cache{selfAttention, crossAttention} {
		if c == nil {
			return nil, newError(CodeInvalidArgument, fn+": a cache is nil")
		}
		if c.owner != nil {
			return nil, newError(CodeInvalidArgument, fn+": a cache already belongs to an EncoderDecoderCache")
		}
	}
	sp, err := selfAttention.get()
	if err != nil {
		return nil, err
	}
	cp, err := crossAttention.get()
	if err != nil {
		return nil, err
	}
	p, err := cEDCreate(sp, cp)
	runtime.KeepAlive(selfAttention)
	runtime.KeepAlive(crossAttention)
	if err != nil {
		return nil, err
	}
	// The pair owns both handles now: they are no longer the caches' to free.
	for _, c := range []*Cache{selfAttention, crossAttention} {
		runtime.SetFinalizer(c, nil)
		liveHandles.Add(-1)
	}
	return newEncoderDecoder(p, selfAttention, crossAttention, edCallsBack{}), nil
}

// Close frees the pair and both caches. It is idempotent and always
// returns nil.
func (e *EncoderDecoderCache) Close() error {
	defer e.lock().Unlock()
	if e == nil || e.o == nil { // nil, or a zero EncoderDecoderCache (never opened)
		return nil
	}
	e.o.close()
	e.self.gen++
	e.cross.gen++
	return nil
}

// SelfAttention returns the self-attention cache, borrowed from the pair:
// use it for Update, SeqLength, MaxLength, MaskSizes (transformers
// delegates those to it). It is usable until the pair is closed.
func (e *EncoderDecoderCache) SelfAttention() *Cache {
	if e == nil {
		return nil
	}
	return e.self
}

// CrossAttention returns the cross-attention cache, borrowed like
// SelfAttention.
func (e *EncoderDecoderCache) CrossAttention() *Cache {
	if e == nil {
		return nil
	}
	return e.cross
}

// handle is the C handle; nil once closed, and for a nil or zero
// EncoderDecoderCache (which every method reports as closed).
func (e *EncoderDecoderCache) handle() unsafe.Pointer {
	if e == nil || e.o == nil {
		return nil
	}
	return e.o.p
}

func (e *EncoderDecoderCache) get() (unsafe.Pointer, error) {
	if p := e.handle(); p != nil {
		return p, nil
	}
	return nil, ErrClosed
}

// mut returns the handle for a call that may mutate both caches.
func (e *EncoderDecoderCache) mut() (unsafe.Pointer, error) {
	p, err := e.get()
	if err == nil {
		e.self.gen++
		e.cross.gen++
	}
	return p, err
}

// IsUpdated reports whether cross-attention layer layer has been computed;
// false for indices beyond the layers.
func (e *EncoderDecoderCache) IsUpdated(layer int) (_ bool, err error) {
	l, argErr := layerIndex("IsUpdated", layer)
	return valueCall(e, "EncoderDecoderCache.IsUpdated", reads, argErr, func(p unsafe.Pointer) (bool, error) {
		return cEDIsUpdated(p, l)
	})
}

// UpdateCross is the model's cross-attention protocol for one layer: if the
// layer is not yet updated, store key and value in the cross-attention cache
// and mark it updated; either way return the cross-attention K/V views.
// Once the layer is updated, key and value may be nil (they are ignored).
func (e *EncoderDecoderCache) UpdateCross(layer int, key, value Input) (_ KV, err error) {
	defer e.lock().Unlock()
	defer named(&err, "EncoderDecoderCache.UpdateCross")
	const fn = "UpdateCross"
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
	p, err := e.mut()
	if err != nil {
		return KV{}, err
	}
	var out ckv
	err = cEDUpdateCross(p, e.cross.callsBack, l, kp, vp, &kd, &vd, &out)
	runtime.KeepAlive(e)
	runtime.KeepAlive(key)
	runtime.KeepAlive(value)
	return kvFromC(&out, e.cross, err)
}

// The pair's operations below mirror Cache's on purpose (transformers' API):
// each is one call through call, with the pair's own C function.

// Crop crops the self-attention cache only (cross K/V are never cropped).
func (e *EncoderDecoderCache) Crop(tokens int64) (err error) {
	return call(e, "EncoderDecoderCache.Crop", mutates, nil, func(p unsafe.Pointer) error {
		return cEDCrop(p, tokens)
	})
}

// Reorder reorders both caches (beam search).
func (e *EncoderDecoderCache) Reorder(beamIdx []int64) (err error) {
	return call(e, "EncoderDecoderCache.Reorder", mutates, nil, func(p unsafe.Pointer) error {
		err := cEDReorder(p, int64sPtr(beamIdx), len(beamIdx))
		runtime.KeepAlive(beamIdx)
		return err
	})
}

// BatchRepeatInterleave repeats the rows of both caches; both must be
// dynamic.
func (e *EncoderDecoderCache) BatchRepeatInterleave(repeats int64) (err error) {
	return call(e, "EncoderDecoderCache.BatchRepeatInterleave", mutates, nil, func(p unsafe.Pointer) error {
		return cEDRepeatInterleave(p, repeats)
	})
}

// BatchSelectIndices keeps rows of both caches; both must be dynamic.
func (e *EncoderDecoderCache) BatchSelectIndices(indices []int64) (err error) {
	return call(e, "EncoderDecoderCache.BatchSelectIndices", mutates, nil, func(p unsafe.Pointer) error {
		err := cEDSelectIndices(p, int64sPtr(indices), len(indices))
		runtime.KeepAlive(indices)
		return err
	})
}

// BatchSplit splits both caches (legacy EncoderDecoderCache.batch_split);
// both must be dynamic. The pair itself is unchanged.
func (e *EncoderDecoderCache) BatchSplit(fullBatchSize, splitSize int64) (_ []*EncoderDecoderCache, err error) {
	return batchSplit(e, "EncoderDecoderCache.BatchSplit", fullBatchSize, splitSize, cEDBatchSplit,
		func(q unsafe.Pointer) *EncoderDecoderCache { return newEncoderDecoder(q, nil, nil, e.callsBack()) })
}

// EncoderDecoderFromBatchSplits stacks splits of both caches into a new
// pair; its IsUpdated flags are those of splits[0].
func EncoderDecoderFromBatchSplits(splits []*EncoderDecoderCache) (*EncoderDecoderCache, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	handles := make([]unsafe.Pointer, len(splits))
	var callsBack edCallsBack // the stack's halves call back where any split's do
	for i, s := range splits {
		p, err := s.get()
		if err != nil {
			return nil, err
		}
		handles[i] = p
		callsBack.self = callsBack.self || s.self.callsBack
		callsBack.cross = callsBack.cross || s.cross.callsBack
	}
	p, err := cEDFromBatchSplits(handles)
	for _, s := range splits {
		runtime.KeepAlive(s)
	}
	if err != nil {
		return nil, err
	}
	return newEncoderDecoder(p, nil, nil, callsBack), nil
}

// Reset resets both caches and marks every cross-attention layer as not
// updated.
func (e *EncoderDecoderCache) Reset() (err error) {
	return call(e, "EncoderDecoderCache.Reset", mutates, nil, func(p unsafe.Pointer) error {
		return cEDReset(p)
	})
}

// Clone returns a deep copy of both caches and the IsUpdated flags.
func (e *EncoderDecoderCache) Clone() (_ *EncoderDecoderCache, err error) {
	return valueCall(e, "EncoderDecoderCache.Clone", reads, nil, func(p unsafe.Pointer) (*EncoderDecoderCache, error) {
		q, err := cEDClone(p)
		if err != nil {
			return nil, err
		}
		return newEncoderDecoder(q, nil, nil, e.callsBack()), nil
	})
}

func (e *EncoderDecoderCache) String() string {
	if e.handle() == nil {
		return "EncoderDecoderCache(closed)"
	}
	return fmt.Sprintf("EncoderDecoderCache(self %d layers, cross %d layers)", e.self.NumLayers(), e.cross.NumLayers())
}
