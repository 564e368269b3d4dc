//go:build cgo

package kvcache

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

func TestVersion(t *testing.T) {
	major, minor, patch := Version()
	if major != HeaderVersionMajor {
		t.Fatalf("library major %d, header major %d", major, HeaderVersionMajor)
	}
	if s := VersionString(); s != fmt.Sprintf("%d.%d.%d", major, minor, patch) {
		t.Fatalf("VersionString %q disagrees with Version %d.%d.%d", s, major, minor, patch)
	}
	if minor*100+patch < HeaderVersionMinor*100+HeaderVersionPatch {
		t.Fatalf("library %d.%d.%d is older than the header %d.%d.%d", major, minor, patch,
			HeaderVersionMajor, HeaderVersionMinor, HeaderVersionPatch)
	}
	if err := checkVersion(); err != nil {
		t.Fatal(err)
	}
}

func TestFeatures(t *testing.T) {
	f := Features()
	if !f.Has(FeatureCPU) {
		t.Fatalf("features %v lack the CPU backend", f)
	}
	if f.Has(FeatureCPU|FeatureCUDA) != (f&FeatureCUDA != 0) {
		t.Fatal("Has of two bits")
	}
	if s := (FeatureCPU | FeatureBackendDL | 1<<9).String(); s != "cpu|backend-dl|0x200" {
		t.Fatalf("Feature.String: %q", s)
	}
}

func TestCodeNames(t *testing.T) {
	for c := CodeOK; c <= CodeBusy; c++ {
		if c.String() != goCodeName(c) {
			t.Errorf("code %d: library name %q, table %q", c, c.String(), goCodeName(c))
		}
	}
	for _, c := range []Code{-1, 14, 1000} {
		if c.String() != "KVC_ERROR_UNKNOWN" {
			t.Errorf("code %d: %q", c, c.String())
		}
	}
	if CodeOutOfRange.String() != "KVC_ERROR_OUT_OF_RANGE" {
		t.Fatal(CodeOutOfRange.String())
	}
}

func TestDTypes(t *testing.T) {
	for d := DType(-1); d <= 5; d++ {
		if got, want := d.DataType(), goDataType(d); got != want {
			t.Errorf("%v.DataType() = %v, table %v", d, got, want)
		}
		if got, want := d.Size(), goDTypeSize(d); got != want {
			t.Errorf("%v.Size() = %d, table %d", d, got, want)
		}
	}
	if DTypeFloat32.Size() != 4 || DTypeBFloat16.Size() != 2 || DTypeFloat16.Size() != 2 || DTypeUnset.Size() != 0 {
		t.Fatal("sizes")
	}
	for code := 0; code < 6; code++ {
		for _, bits := range []uint8{0, 8, 16, 32, 64} {
			for _, lanes := range []uint16{0, 1, 2} {
				dt := DataType{uint8(code), bits, lanes}
				if got, want := DTypeOf(dt), goDType(dt); got != want {
					t.Errorf("DTypeOf(%v) = %v, table %v", dt, got, want)
				}
			}
		}
	}
	if DTypeOf(DataType{TypeCodeBFloat, 16, 1}) != DTypeBFloat16 || DTypeOf(DataType{TypeCodeInt, 8, 1}) != DTypeUnset {
		t.Fatal("DTypeOf")
	}
	if DTypeOfElement[float32]() != DTypeFloat32 || DTypeOfElement[Float16]() != DTypeFloat16 ||
		DTypeOfElement[BFloat16]() != DTypeBFloat16 {
		t.Fatal("DTypeOfElement")
	}
	if DTypeBFloat16.String() != "bfloat16" || DType(9).String() != "DType(9)" || LayerSink.String() != "sink" ||
		LayerKind(0).String() != "LayerKind(0)" {
		t.Fatal("String methods")
	}
}

func TestDefaults(t *testing.T) {
	if got, want := DefaultCacheOptions(), (CacheOptions{Preset: PresetDynamic, Device: CPU, Offload: OffloadDefault}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DefaultCacheOptions %+v, want %+v", got, want)
	}
	if got, want := DefaultQuantOptions(), (QuantOptions{QuantizerQuanto, QuantModeIncremental, 4, 0, 0, 64, 128}); got != want {
		t.Errorf("DefaultQuantOptions %+v, want %+v", got, want)
	}
	if got := DefaultLayerOptions(); got.Kind != LayerDynamic || got.Window != 0 || got.MaxCacheLen != 0 || got.Quant != nil ||
		got.NumSinkTokens != 0 || got.NumStates != 0 || got.ConvKernelSize != 0 {
		t.Errorf("DefaultLayerOptions %+v", got)
	}
	if got := DefaultModelConfig(); fmt.Sprint(got) != fmt.Sprint(ModelConfig{}) {
		t.Errorf("DefaultModelConfig %+v", got)
	}
	if got := DefaultInitOptions(); fmt.Sprint(got) != fmt.Sprint(InitOptions{}) {
		t.Errorf("DefaultInitOptions %+v", got)
	}
	if got := DefaultUpdateOptions(); got.CachePosition != nil || got.RopeCos != nil || got.RopeSin != nil || got.PartialRotationSize != 0 {
		t.Errorf("DefaultUpdateOptions %+v", got)
	}
	if got := DefaultConvUpdateOptions(); got.StateIndex != 0 || got.ConvKernelSize != 0 || got.CachePosition != nil {
		t.Errorf("DefaultConvUpdateOptions %+v", got)
	}
}

func TestFloat16(t *testing.T) {
	cases := []struct {
		f float32
		h Float16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800},
		{65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {1e6, 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{0x1p-14, 0x0400}, {0x1p-24, 0x0001}, {0x1p-25, 0}, {0x1.8p-25, 0x0001}, {0x3p-25, 0x0002},
		{1 + 0x1p-11, 0x3c00}, {1 + 0x3p-11, 0x3c02}, {1 + 0x1p-10, 0x3c01}, {0.1, 0x2e66},
	}
	for _, c := range cases {
		if got := Float16FromFloat32(c.f); got != c.h {
			t.Errorf("Float16FromFloat32(%g) = %#04x, want %#04x", c.f, uint16(got), uint16(c.h))
		}
	}
	if h := Float16FromFloat32(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN became %#04x", uint16(h))
	}
	// Every float16 converts exactly to float32 and back.
	for i := 0; i < 1<<16; i++ {
		h := Float16(i)
		f := h.Float32()
		if math.IsNaN(float64(f)) {
			if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
				t.Fatalf("%#04x became NaN", i)
			}
			continue
		}
		if back := Float16FromFloat32(f); back != h {
			t.Fatalf("%#04x -> %g -> %#04x", i, f, uint16(back))
		}
	}
}

func TestBFloat16(t *testing.T) {
	cases := []struct {
		f float32
		b BFloat16
	}{
		{0, 0}, {1, 0x3f80}, {-2, 0xc000}, {1 + 0x1p-8, 0x3f80}, {1 + 0x3p-8, 0x3f82}, {1 + 0x1p-7, 0x3f81},
		{float32(math.Inf(1)), 0x7f80}, {math.MaxFloat32, 0x7f80}, {0x1p-133, 0x0001},
	}
	for _, c := range cases {
		if got := BFloat16FromFloat32(c.f); got != c.b {
			t.Errorf("BFloat16FromFloat32(%g) = %#04x, want %#04x", c.f, uint16(got), uint16(c.b))
		}
	}
	if b := BFloat16FromFloat32(float32(math.NaN())); b.Float32() == b.Float32() {
		t.Errorf("NaN became %#04x", uint16(b))
	}
	for i := 0; i < 1<<16; i++ {
		b := BFloat16(i)
		f := b.Float32()
		if f != f {
			continue
		}
		if back := BFloat16FromFloat32(f); back != b {
			t.Fatalf("%#04x -> %g -> %#04x", i, f, uint16(back))
		}
	}
}

func TestErrorValues(t *testing.T) {
	e := &Error{Code: CodeShapeMismatch, Message: "kvc_cache_update: key.ndim is 3 but must be 4"}
	if e.Error() != "kvcache: kvc_cache_update: key.ndim is 3 but must be 4 [KVC_ERROR_SHAPE_MISMATCH]" {
		t.Fatalf("Error(): %q", e.Error())
	}
	wrapped := fmt.Errorf("step 3: %w", e)
	if !errors.Is(wrapped, ErrShapeMismatch) || errors.Is(wrapped, ErrDTypeMismatch) || errors.Is(wrapped, ErrClosed) {
		t.Fatal("errors.Is through a wrap")
	}
	var got *Error
	if !errors.As(wrapped, &got) || got != e {
		t.Fatal("errors.As")
	}
	if !errors.Is(ErrClosed, ErrInvalidState) || !errors.Is(ErrClosed, ErrClosed) || errors.Is(ErrInvalidState, ErrClosed) {
		t.Fatal("ErrClosed is an InvalidState error with its own message")
	}
	if !errors.Is(ErrCgoDisabled, ErrUnsupported) || !errors.Is(ErrStaleView, ErrInvalidState) {
		t.Fatal("package errors and their codes")
	}
	if ErrOutOfRange.Error() != "kvcache: KVC_ERROR_OUT_OF_RANGE" {
		t.Fatalf("sentinel text %q", ErrOutOfRange.Error())
	}
	if (*Error)(nil).Is(ErrOutOfRange) || e.Is(errors.New("x")) {
		t.Fatal("Is with nil and foreign errors")
	}
}
