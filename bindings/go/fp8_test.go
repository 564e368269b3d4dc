//go:build cgo

package kvcache

import (
	"math"
	"testing"
)

// e4m3fn is float32 -> float8 e4m3fn -> float32, rounding to nearest even,
// for |x| <= 464 (448 is the largest finite e4m3fn value; up to 464 rounds
// to it): 3 mantissa bits, normal numbers from 2^-6, subnormals in steps of
// 2^-9.
func e4m3fn(t testing.TB, x float32) float32 {
	a := math.Abs(float64(x))
	if a > 464 {
		t.Fatalf("e4m3fn: %g is beyond the range of this reference", x)
	}
	step := math.Ldexp(1, -9)
	if a >= math.Ldexp(1, -6) {
		_, exp := math.Frexp(a) // a = frac * 2^exp, frac in [0.5, 1)
		step = math.Ldexp(1, exp-1-3)
	}
	return float32(math.Copysign(math.RoundToEven(a/step)*step, float64(x)))
}

// fp8RoundTrip is what an FP8 layer stores for xs under the scale (amax /
// 448 in float32) that the first update's values calibrated.
func fp8RoundTrip(t testing.TB, first, xs []float32) []float32 {
	var amax float32
	for _, x := range first {
		amax = max(amax, float32(math.Abs(float64(x))))
	}
	scale := max(amax/448, math.SmallestNonzeroFloat32*(1<<23)) // FLT_MIN
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = e4m3fn(t, x/scale) * scale
	}
	return out
}

func TestFp8Reference(t *testing.T) {
	for _, c := range []struct{ in, want float32 }{
		{448, 448}, {450, 448}, {1.0625, 1}, {1.1875, 1.25}, {3.3, 3.25}, {-0.3, -0.3125},
		{100, 96}, {200, 192}, {float32(math.Ldexp(1, -9)), float32(math.Ldexp(1, -9))},
	} {
		if got := e4m3fn(t, c.in); got != c.want {
			t.Errorf("e4m3fn(%g) = %g, want %g", c.in, got, c.want)
		}
	}
	if LayerQuantizedFp8.String() != "quantized_fp8" {
		t.Errorf("LayerQuantizedFp8.String() = %q", LayerQuantizedFp8.String())
	}
}

// TestQuantizedFp8 builds a custom cache of two FP8 layers: the first update
// returns its inputs as they are, the second the whole history quantized
// with the first update's scales and dequantized.
func TestQuantizedFp8(t *testing.T) {
	c := mkCache(t, &CacheOptions{Preset: PresetCustom,
		Layers: []LayerOptions{{Kind: LayerQuantizedFp8}, {Kind: LayerQuantizedFp8}}})
	for l := range 2 {
		if info := must[LayerInfo](t)(c.LayerInfo(l)); info.Kind != LayerQuantizedFp8 {
			t.Fatalf("layer %d: kind %v", l, info.Kind)
		}
	}
	row := func(vals ...float32) Tensor[float32] {
		return Tensor[float32]{Data: append([]float32(nil), vals...), Shape: []int64{1, 1, int64(len(vals)) / 4, 4}}
	}
	// Layer 0: amax 448, so the scale is 1 and e4m3fn values come back
	// unchanged; layer 1: amax 10, a scale of 10/448 (its later keys are
	// divided by 50 to stay in range).
	firstKeys := [][]float32{
		{448, 1, 1.0625, 0.5, -2, 1.1875, 3.3, -0.3},
		{10, 1, 1.0625, 0.5, -2, 1.1875, 3.3, -0.3},
	}
	firstValues := [][]float32{
		{-448, 0.25, 7, 96, 1.0625, 0, 5.5, 2.5},
		{-10, 0.25, 7, 9, 1.0625, 0, 5.5, 2.5},
	}
	secondValues := []float32{6.5, -0.1, 0.0078125, 1.1875}
	for l := range 2 {
		kv := must[KV](t)(c.Update(l, row(firstKeys[l]...), row(firstValues[l]...), nil))
		if got := flat(t, kv.Key); !eqFloats(got, firstKeys[l]) || kv.Key.Dim(2) != 2 {
			t.Fatalf("layer %d: the first update returned keys %v, want its inputs %v", l, got, firstKeys[l])
		}
		if got := flat(t, kv.Value); !eqFloats(got, firstValues[l]) {
			t.Fatalf("layer %d: the first update returned values %v, want its inputs %v", l, got, firstValues[l])
		}
	}
	for l := range 2 {
		var secondKeys []float32
		for _, x := range []float32{1.0625, 100, 200, -3.3} {
			secondKeys = append(secondKeys, x/float32(1+49*l))
		}
		kv := must[KV](t)(c.Update(l, row(secondKeys...), row(secondValues...), nil))
		if kv.Key.Dim(2) != 3 || kv.Value.Dim(2) != 3 {
			t.Fatalf("layer %d: the second update returned %d tokens, want 3", l, kv.Key.Dim(2))
		}
		wantKeys := fp8RoundTrip(t, firstKeys[l], append(append([]float32(nil), firstKeys[l]...), secondKeys...))
		wantValues := fp8RoundTrip(t, firstValues[l], append(append([]float32(nil), firstValues[l]...), secondValues...))
		if got := flat(t, kv.Key); !eqFloats(got, wantKeys) {
			t.Fatalf("layer %d: keys %v, want %v", l, got, wantKeys)
		}
		if got := flat(t, kv.Value); !eqFloats(got, wantValues) {
			t.Fatalf("layer %d: values %v, want %v", l, got, wantValues)
		}
		if l == 0 { // scale 1: the rounding as it is
			want := []float32{448, 1, 1, 0.5, -2, 1.25, 3.25, -0.3125, 1, 96, 192, -3.25}
			if !eqFloats(wantKeys, want) {
				t.Fatalf("layer 0: reference keys %v, want %v", wantKeys, want)
			}
		}
	}
	if info := must[LayerInfo](t)(c.LayerInfo(1)); info.SeqLength != 3 {
		t.Fatalf("layer 1: %+v", info)
	}
}
