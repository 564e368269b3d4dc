package kvcache

import (
	"runtime"
	"sync"
	"unsafe"
)

// One way to make a method's C call on a Cache or an EncoderDecoderCache: take the object's lock, report an
// argument already found wrong, take the handle (ErrClosed once closed; a mutating call invalidates the
// views), make the call, keep the object alive across it, and name the error after the method. Update,
// UpdateAll and the constructors keep their own bodies (no closure on the hot path; results that are new
// objects).

// handleOwner is what Cache and EncoderDecoderCache provide for it.
type handleOwner interface {
	lock() *sync.Mutex
	get() (unsafe.Pointer, error)
	mut() (unsafe.Pointer, error)
}

type callKind bool

const (
	reads   callKind = false
	mutates callKind = true
)

// valueCall makes the call f, named op, on h's handle and returns its result; argErr (nil: none) is an
// argument error found before, reported instead.
func valueCall[T any](h handleOwner, op string, kind callKind, argErr error, f func(p unsafe.Pointer) (T, error)) (_ T, err error) {
	defer h.lock().Unlock()
	defer named(&err, op)
	var zero T
	if argErr != nil {
		return zero, argErr
	}
	var p unsafe.Pointer
	if kind == mutates {
		p, err = h.mut()
	} else {
		p, err = h.get()
	}
	if err != nil {
		return zero, err
	}
	v, err := f(p)
	runtime.KeepAlive(h)
	return v, err
}

// call is valueCall for a call that returns only an error.
func call(h handleOwner, op string, kind callKind, argErr error, f func(p unsafe.Pointer) error) error {
	_, err := valueCall(h, op, kind, argErr, func(p unsafe.Pointer) (struct{}, error) { return struct{}{}, f(p) })
	return err
}

// batchSplit is BatchSplit of a Cache or a pair: split (the C call) writes the handles of the new objects, wrap
// makes each a Go object.
func batchSplit[T any](h handleOwner, op string, full, size int64,
	split func(p unsafe.Pointer, full, size int64, out []unsafe.Pointer) (int, error), wrap func(unsafe.Pointer) T) ([]T, error) {
	return valueCall(h, op, reads, nil, func(p unsafe.Pointer) ([]T, error) {
		// Never NULL: the library checks its arguments before the capacity.
		handles := make([]unsafe.Pointer, max(1, splitCapacity(full, size)))
		n, err := split(p, full, size, handles)
		if err != nil {
			return nil, err
		}
		out := make([]T, n)
		for i := range out {
			out[i] = wrap(handles[i])
		}
		return out, nil
	})
}
