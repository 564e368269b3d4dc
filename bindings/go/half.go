package kvcache

import "math"

// Float16 is an IEEE 754 binary16 value stored as its bits (the element type
// of DTypeFloat16 tensors). Convert with Float16FromFloat32 and Float32.
type Float16 uint16

// BFloat16 is a bfloat16 value stored as its bits (the element type of
// DTypeBFloat16 tensors): the upper half of a float32. Convert with
// BFloat16FromFloat32 and Float32.
type BFloat16 uint16

// Float16FromFloat32 rounds f to the nearest float16 (ties to even);
// magnitudes beyond 65504 become infinities, NaN stays NaN.
func Float16FromFloat32(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return Float16(sign | 0x7e00 | uint16(mant>>13)) // a quiet NaN
		}
		return Float16(sign | 0x7c00)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return Float16(sign | 0x7c00)
	}
	if e <= 0 { // a float16 subnormal, or zero
		if e < -10 {
			return Float16(sign)
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		rounded := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && rounded&1 == 1) {
			rounded++
		}
		return Float16(sign | uint16(rounded))
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is the correct result, up to infinity
	}
	return Float16(sign | uint16(h))
}

// Float32 returns h exactly as a float32.
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFloat16FromFloat32 rounds f to the nearest bfloat16 (ties to even); NaN
// stays NaN.
func BFloat16FromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return BFloat16(b>>16 | 0x40) // a quiet NaN
	}
	return BFloat16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Float32 returns b exactly as a float32.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }
