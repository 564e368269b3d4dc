package kvcache

import (
	"fmt"
	"strings"
)

// Code is the stable error code of the C library (kvc_code). Codes are never
// renumbered; new ones are only appended.
type Code int32

// The codes of kvcache/error.h. The comment of each says which Python
// exception transformers raises in the same case.
const (
	CodeOK              Code = 0  // not an error; never carried by an *Error
	CodeInvalidArgument Code = 1  // ValueError/TypeError: a bad value, nil, bad option
	CodeOutOfRange      Code = 2  // IndexError: layer or batch index, static cache overflow
	CodeDTypeMismatch   Code = 3  // a tensor's dtype differs from the cache's (no silent casts)
	CodeShapeMismatch   Code = 4  // ndim, batch, heads or head_dim disagree with the cache
	CodeDeviceMismatch  Code = 5  // a tensor lives on another device than the cache
	CodeUnsupported     Code = 6  // AttributeError: this layer kind has no such operation
	CodeInvalidState    Code = 7  // RuntimeError: the operation is not allowed in this state
	CodeOutOfMemory     Code = 8  // an allocation failed (host or device)
	CodeNoDevice        Code = 9  // no backend or no device for the requested device type
	CodeVersionMismatch Code = 10 // a library or backend plugin speaks another ABI version
	CodeInternal        Code = 11 // a bug in kvcache; please report it
	CodeIO              Code = 12 // OSError: a file could not be read or written, or is not a valid kvcache file (since 0.6)
	// CodeBusy: another thread was inside a call on the same handle; the call did nothing (since 0.7). This
	// package serialises the calls on each Cache and Pool, so it reaches Go only from a handle shared with C.
	CodeBusy Code = 13
)

// codeNames are kvc_code_name's answers; the cgo build asks the library
// itself and the tests check that both agree.
var codeNames = [...]string{
	CodeOK:              "KVC_OK",
	CodeInvalidArgument: "KVC_ERROR_INVALID_ARGUMENT",
	CodeOutOfRange:      "KVC_ERROR_OUT_OF_RANGE",
	CodeDTypeMismatch:   "KVC_ERROR_DTYPE_MISMATCH",
	CodeShapeMismatch:   "KVC_ERROR_SHAPE_MISMATCH",
	CodeDeviceMismatch:  "KVC_ERROR_DEVICE_MISMATCH",
	CodeUnsupported:     "KVC_ERROR_UNSUPPORTED",
	CodeInvalidState:    "KVC_ERROR_INVALID_STATE",
	CodeOutOfMemory:     "KVC_ERROR_OUT_OF_MEMORY",
	CodeNoDevice:        "KVC_ERROR_NO_DEVICE",
	CodeVersionMismatch: "KVC_ERROR_VERSION_MISMATCH",
	CodeInternal:        "KVC_ERROR_INTERNAL",
	CodeIO:              "KVC_ERROR_IO",
	CodeBusy:            "KVC_ERROR_BUSY",
}

func goCodeName(c Code) string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "KVC_ERROR_UNKNOWN"
}

// String returns the code's C name, e.g. "KVC_ERROR_OUT_OF_RANGE"
// (kvc_code_name), or "KVC_ERROR_UNKNOWN".
func (c Code) String() string { return codeName(c) }

// Error is what every failing call of this package returns: the library's
// code and message (the message names the argument, the value and the
// rule), or the same for a check this package makes before calling the
// library. A call that returns an error has changed nothing, except when a
// GPU fails after the call began writing: the cache or pool is then poisoned,
// and every later call returns CodeInvalidState until Cache.Reset (caches) or
// Close (kvcache/error.h, docs/gpus.md 'When the device fails').
//
// Compare codes with errors.Is and the sentinels below, or read the fields
// with errors.As:
//
//	if errors.Is(err, kvcache.ErrOutOfRange) { ... }
//	var e *kvcache.Error
//	if errors.As(err, &e) { log.Print(e.Code, e.Message) }
type Error struct {
	Code    Code
	Message string
}

// Error formats the message and the code's name.
func (e *Error) Error() string {
	if e.Message == "" {
		return "kvcache: " + e.Code.String()
	}
	return "kvcache: " + e.Message + " [" + e.Code.String() + "]"
}

// Is reports whether target is an *Error with the same code and, when the
// target has a message (ErrClosed, ErrCgoDisabled, ...), the same message.
// The per-code sentinels have none, so errors.Is(err, ErrOutOfRange) matches
// every error of that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || e == nil || t == nil {
		return false
	}
	return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Sentinels for errors.Is: one per code.
var (
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	ErrOutOfRange      = &Error{Code: CodeOutOfRange}
	ErrDTypeMismatch   = &Error{Code: CodeDTypeMismatch}
	ErrShapeMismatch   = &Error{Code: CodeShapeMismatch}
	ErrDeviceMismatch  = &Error{Code: CodeDeviceMismatch}
	ErrUnsupported     = &Error{Code: CodeUnsupported}
	ErrInvalidState    = &Error{Code: CodeInvalidState}
	ErrOutOfMemory     = &Error{Code: CodeOutOfMemory}
	ErrNoDevice        = &Error{Code: CodeNoDevice}
	ErrVersionMismatch = &Error{Code: CodeVersionMismatch}
	ErrInternal        = &Error{Code: CodeInternal}
	ErrIO              = &Error{Code: CodeIO}
	ErrBusy            = &Error{Code: CodeBusy}
)

// Errors of this package's own, each also matching its code's sentinel.
var (
	// ErrClosed: a method was called on a closed cache (or on a cache
	// borrowed from a closed EncoderDecoderCache, or on a closed Step).
	ErrClosed = &Error{Code: CodeInvalidState, Message: "use of a closed cache"}
	// ErrStaleView: a view was used after a call that mutated its cache.
	ErrStaleView = &Error{Code: CodeInvalidState,
		Message: "the view is no longer valid: its cache was mutated or closed since it was returned; Copy views you keep"}
	// ErrCgoDisabled: the package was compiled without cgo (CGO_ENABLED=0)
	// and cannot reach the C library. Every constructor returns it.
	ErrCgoDisabled = &Error{Code: CodeUnsupported,
		Message: "this binary was built with CGO_ENABLED=0; the kvcache package calls the C library libkvcache through cgo: " +
			"build with CGO_ENABLED=1, a C compiler and an installed kvcache (pkg-config kvcache)"}
)

func newError(code Code, msg string) error { return &Error{Code: code, Message: msg} }

// noNUL refuses a string that crosses to C with a NUL byte in it: C would
// end it there, and a path would name another file.
func noNUL(fn, arg, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return newError(CodeInvalidArgument, fmt.Sprintf("%s: %s %q holds a NUL byte at %d; C strings end at the first NUL",
			fn, arg, s, i))
	}
	return nil
}
