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
//
// Since 0.7 an error carries the Go method that failed in Op
// ("Sequence.Reserve") and the library's detail in Message, without the C
// function's name the library starts it with ("kvc_pool_reserve: "): Error
// formats both, "kvcache: Sequence.Reserve: group 0 needs ... [KVC_ERROR_OUT_OF_MEMORY]".
type Error struct {
	Code    Code
	Message string
	Op      string // the method or function of this package that failed; "" when unknown. Since 0.7.

	family *Error // a broader sentinel this one also matches (ErrClosed for ErrPoolClosed)
}

// Error formats the method, the message and the code's name.
func (e *Error) Error() string {
	op := ""
	if e.Op != "" {
		op = e.Op + ": "
	}
	if e.Message == "" {
		return "kvcache: " + op + e.Code.String()
	}
	return "kvcache: " + op + e.Message + " [" + e.Code.String() + "]"
}

// Is reports whether target is an *Error with the same code and, when the
// target has a message (ErrClosed, ErrCgoDisabled, ...), the same message;
// Op is not compared. The per-code sentinels have no message, so
// errors.Is(err, ErrOutOfRange) matches every error of that code, and
// ErrClosed matches the closed pool and sequence errors too.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || e == nil || t == nil {
		return false
	}
	return (t.Code == e.Code && (t.Message == "" || t.Message == e.Message)) || (e.family != nil && e.family.Is(t))
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
	// errors.Is(err, ErrClosed) also holds for ErrPoolClosed and
	// ErrSequenceClosed: every closed object of the package.
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

// named gives the error in *err, if any, the Go method op that failed:
// `defer named(&err, "Sequence.Reserve")` opens a method with a named error
// result (a deferred call with arguments allocates nothing). The message
// loses the name it starts with, the C function's ("kvc_pool_reserve: ")
// or this package's short one ("Reserve: "), and the C names of functions
// it mentions become their Go methods'. The outermost method names the
// error: Reserve reports a failure of the ReserveInto it calls as its own.
func named(err *error, op string) {
	e, ok := (*err).(*Error)
	if !ok || e == nil {
		return
	}
	c := *e
	c.Op = op
	if e.Op == "" {
		c.Message = goNames(stripName(e.Message, op))
	}
	*err = &c
}

// withDetail appends detail to the message of err (an *Error; others are
// returned as they are).
func withDetail(err error, detail string) error {
	e, ok := err.(*Error)
	if !ok || e == nil {
		return err
	}
	c := *e
	c.Message += detail
	return &c
}

// stripName removes the name a message starts with: a C function's
// "kvc_...: ", or op's own, whole ("Pool.Write: ") or short ("Write: ").
func stripName(msg, op string) string {
	short := op[strings.LastIndexByte(op, '.')+1:]
	for _, p := range []string{op + ": ", short + ": "} {
		if strings.HasPrefix(msg, p) {
			return msg[len(p):]
		}
	}
	if strings.HasPrefix(msg, "kvc_") {
		if i := strings.Index(msg, ": "); i > 0 && !strings.ContainsAny(msg[:i], " ,;") {
			return msg[i+2:]
		}
	}
	return msg
}

// goNames replaces the C functions a message mentions by the Go methods
// that call them ("kvc_pool_reserve first" reads "Sequence.Reserve first").
func goNames(msg string) string {
	if !strings.Contains(msg, "kvc_") {
		return msg
	}
	var b strings.Builder
	for {
		i := strings.Index(msg, "kvc_")
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		j := i + 4
		for j < len(msg) && (msg[j] == '_' || msg[j] >= 'a' && msg[j] <= 'z' || msg[j] >= '0' && msg[j] <= '9') {
			j++
		}
		b.WriteString(msg[:i])
		if m, ok := goMethods[msg[i:j]]; ok {
			b.WriteString(m)
		} else {
			b.WriteString(msg[i:j])
		}
		msg = msg[j:]
	}
}

// goMethods are the Go methods of the C functions that messages mention.
var goMethods = map[string]string{
	"kvc_pool_create": "NewPool", "kvc_pool_sequence_create": "Pool.NewSequence",
	"kvc_pool_sequence_destroy": "Sequence.Close", "kvc_pool_destroy": "Pool.Close",
	"kvc_pool_match_prefix": "Sequence.MatchPrefix", "kvc_pool_reserve": "Sequence.Reserve",
	"kvc_pool_commit": "Sequence.Commit", "kvc_pool_fork": "Sequence.Fork", "kvc_pool_truncate": "Sequence.Truncate",
	"kvc_pool_sequence_pin": "Sequence.Pin", "kvc_pool_unpin_all": "Pool.UnpinAll", "kvc_pool_write": "Pool.Write",
	"kvc_pool_gather": "Sequence.Gather", "kvc_pool_block_table": "Pool.BlockTable",
	"kvc_pool_blocks_needed": "Pool.BlocksNeeded", "kvc_pool_stats_get": "Pool.Stats",
	"kvc_pool_clear_cache": "Pool.ClearCache", "kvc_pool_events_pull": "Pool.Events",
	"kvc_pool_events_pull_vllm": "Pool.EventsVLLM",
	"kvc_pool_layer_storage":    "Pool.LayerStorage", "kvc_pool_recurrent_state": "Sequence.RecurrentState",
	"kvc_pool_sequence_length": "Sequence.Length", "kvc_pool_sequence_committed": "Sequence.CommittedLength",
	"kvc_pool_sequence_save": "Sequence.Save", "kvc_pool_sequence_load": "Pool.LoadSequence",
	"kvc_cache_create": "New", "kvc_cache_update": "Cache.Update", "kvc_cache_update_all": "Cache.UpdateAll",
	"kvc_cache_crop": "Cache.Crop", "kvc_cache_reset": "Cache.Reset", "kvc_cache_reserve": "Cache.Reserve",
	"kvc_cache_activate_past_recording": "Cache.ActivatePastRecording",
	"kvc_cache_early_initialization":    "Cache.EarlyInitialization",
	"kvc_cache_update_conv_state":       "Cache.UpdateConvState", "kvc_cache_update_recurrent_state": "Cache.UpdateRecurrentState",
	"kvc_pool_add_tier": "Pool.AddTier", "kvc_pool_set_stream": "Pool.SetStream", "kvc_pool_fingerprint": "Pool.Fingerprint",
	"kvc_pool_write_layer": "Pool.WriteLayer", "kvc_pool_reserve_batch": "Pool.ReserveBatch",
	"kvc_pool_commit_batch": "Pool.CommitBatch",
}

// noNUL refuses a string that crosses to C with a NUL byte in it: C would
// end it there, and a path would name another file.
func noNUL(fn, arg, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return newError(CodeInvalidArgument, fmt.Sprintf("%s: %s %q holds a NUL byte at %d; C strings end at the first NUL",
			fn, arg, s, i))
	}
	return nil
}
