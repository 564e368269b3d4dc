package kvcache

import (
	"fmt"
	"runtime"
)

// Step is a prepared UpdateAll for a decode loop that refills the same input
// buffers every step: the tensors' memory is pinned and described to the
// library once, so each Update is a single C call with no allocation and
// nothing to pin (like a prepared SQL statement).
//
// A Step reads the Data arrays the tensors had when it was prepared:
// write each step's keys and values into those arrays, not into new ones.
// Close the Step when done (a finalizer releases a forgotten one). Like its
// cache, a Step is for one goroutine at a time.
type Step struct {
	c    *Cache
	arr  *tensorArrays
	gen  uint64 // the cache's generation after the last successful Update
	done bool
}

// PrepareStep prepares an UpdateAll of keys and values for layers
// 0..len(keys)-1. The inputs must be Tensors, ExternalTensors or Copies of
// views: a view into a cache would be invalidated by the step itself.
func (c *Cache) PrepareStep(keys, values []Input) (_ *Step, err error) {
	defer c.lock().Unlock()
	defer named(&err, "Cache.PrepareStep")
	const fn = "PrepareStep"
	if _, err := c.get(); err != nil {
		return nil, err
	}
	for i, in := range append(append([]Input(nil), keys...), values...) {
		var v *View
		switch t := in.(type) {
		case View:
			v = &t
		case *View:
			v = t
		}
		if v != nil && v.kind == viewCache {
			return nil, newError(CodeInvalidArgument, fmt.Sprintf(
				"%s: input %d is a view into a cache; pass a Tensor or the view's Copy", fn, i))
		}
	}
	arr, err := newTensorArrays(fn, keys, values, true)
	if err != nil {
		return nil, err
	}
	s := &Step{c: c, arr: arr}
	runtime.SetFinalizer(s, (*Step).Close)
	return s, nil
}

// NumLayers returns the number of layers the step updates.
func (s *Step) NumLayers() int {
	if s == nil || s.arr == nil {
		return 0
	}
	return s.arr.n
}

// Update runs the step: one kvc_cache_update_all with the prepared inputs.
// Either every layer is updated or none is.
func (s *Step) Update() (err error) {
	defer named(&err, "Step.Update")
	if s == nil || s.arr == nil { // nil or zero
		return ErrClosed
	}
	defer s.c.lock().Unlock()
	if s.arr.mem == nil && s.arr.n > 0 { // closed
		return ErrClosed
	}
	p, err := s.c.mut()
	if err != nil {
		return err
	}
	s.done = false
	err = cUpdateAll(p, s.c.callsBack, uint32(s.arr.n), s.arr.keys(), s.arr.values(), nil, nil, nil, nil, s.arr.out())
	runtime.KeepAlive(s)
	if err != nil {
		return err
	}
	s.gen, s.done = s.c.gen, true
	return nil
}

// KV returns the views of layer that the last successful Update returned,
// valid until the cache's next mutating call; zero (invalid) views before
// any successful Update. It panics if layer is out of range.
func (s *Step) KV(layer int) KV {
	if n := s.NumLayers(); layer < 0 || layer >= n {
		panic(fmt.Sprintf("kvcache: Step.KV: layer %d is out of range [0, %d)", layer, n))
	}
	if !s.done || s.arr.mem == nil {
		return KV{}
	}
	kv := s.arr.kv(layer)
	return KV{View{t: kv.key, owner: s.c, gen: s.gen, kind: viewCache},
		View{t: kv.value, owner: s.c, gen: s.gen, kind: viewCache}}
}

// Close unpins the inputs and frees the step's C memory. It is idempotent
// and always returns nil; the cache stays open.
func (s *Step) Close() error {
	if s == nil || s.arr == nil {
		return nil
	}
	runtime.SetFinalizer(s, nil)
	s.arr.free()
	s.done = false
	return nil
}
