package kvcache

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Errors name the Go method that failed (Op) and keep the library's detail.

func TestNamedErrorsCarryTheGoMethod(t *testing.T) {
	err := error(&Error{Code: CodeOutOfMemory,
		Message: "kvc_pool_reserve: group 0 needs 3 more blocks but 2 are available; kvc_pool_commit or kvc_unknown_fn first"})
	named(&err, "Sequence.Reserve")
	var e *Error
	if !errors.As(err, &e) || e.Op != "Sequence.Reserve" || e.Code != CodeOutOfMemory ||
		e.Message != "group 0 needs 3 more blocks but 2 are available; Sequence.Commit or kvc_unknown_fn first" {
		t.Fatalf("named: %+v", e)
	}
	want := "kvcache: Sequence.Reserve: group 0 needs 3 more blocks but 2 are available; Sequence.Commit or " +
		"kvc_unknown_fn first [" + CodeOutOfMemory.String() + "]"
	if err.Error() != want {
		t.Fatalf("Error(): %q, want %q", err.Error(), want)
	}
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatal("a named error lost its code")
	}
	// The outermost method names it; the message is stripped once.
	named(&err, "Outer.Call")
	if e := err.(*Error); e.Op != "Outer.Call" || !strings.HasPrefix(e.Message, "group 0") {
		t.Fatalf("renamed: %+v", e)
	}
	// This package's own short prefix goes too.
	err = newError(CodeInvalidArgument, "Write: 1 keys and 1 values but the pool has 2 layers")
	named(&err, "Pool.Write")
	if err.Error() != "kvcache: Pool.Write: 1 keys and 1 values but the pool has 2 layers ["+CodeInvalidArgument.String()+"]" {
		t.Fatalf("Go-side prefix: %q", err)
	}
	var none error
	named(&none, "Pool.Write")
	if none != nil {
		t.Fatal("named made an error out of nil")
	}
}

func TestClosedSentinelsMatchErrClosed(t *testing.T) {
	for _, s := range []*Error{ErrClosed, ErrPoolClosed, ErrSequenceClosed} {
		err := error(s)
		named(&err, "Sequence.Length")
		if !errors.Is(err, s) || !errors.Is(err, ErrClosed) || !errors.Is(err, ErrInvalidState) {
			t.Fatalf("%v: a named closed error does not match its sentinel, ErrClosed and ErrInvalidState", err)
		}
		if !strings.Contains(err.Error(), "Sequence.Length: "+s.Message) {
			t.Fatalf("%q does not name the method", err)
		}
	}
	if errors.Is(ErrPoolClosed, ErrSequenceClosed) || errors.Is(ErrClosed, ErrPoolClosed) ||
		errors.Is(&Error{Code: CodeInvalidState, Message: "some other state"}, ErrClosed) {
		t.Fatal("the closed sentinels match too much")
	}
}

// goMethods maps real C functions of the headers to real Go methods.
func TestGoMethodsNameRealFunctionsAndMethods(t *testing.T) {
	var headers strings.Builder
	files, err := filepath.Glob("../../abi/include/kvcache/*.h")
	if err != nil || len(files) == 0 {
		t.Fatalf("the headers are not at ../../abi/include/kvcache: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		headers.Write(b)
	}
	types := map[string]reflect.Type{"Pool": reflect.TypeOf(&Pool{}), "Sequence": reflect.TypeOf(&Sequence{}),
		"Cache": reflect.TypeOf(&Cache{})}
	for c, goName := range goMethods {
		if !strings.Contains(headers.String(), c+"(") {
			t.Errorf("%s is not a function of the headers", c)
		}
		typ, method, ok := strings.Cut(goName, ".")
		if !ok {
			if goName != "NewPool" && goName != "New" {
				t.Errorf("%s: %s is not a method", c, goName)
			}
			continue
		}
		if _, found := types[typ].MethodByName(method); types[typ] == nil || !found {
			t.Errorf("%s: %s is not a method of this package", c, goName)
		}
	}
}
