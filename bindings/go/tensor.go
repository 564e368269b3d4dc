package kvcache

import (
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"strconv"
	"unsafe"
)

// maxDims is the most dimensions a tensor crossing this package may have:
// keys and values are 4-D, conv states 3-D, recurrent states up to 6-D.
const maxDims = 6

// Element is the set of element types of tensors: float32, Float16 and
// BFloat16, for the dtypes DTypeFloat32, DTypeFloat16 and DTypeBFloat16.
type Element interface {
	float32 | Float16 | BFloat16
}

// DTypeOfElement returns the dtype of element type T.
func DTypeOfElement[T Element]() DType {
	var z T
	switch any(z).(type) {
	case Float16:
		return DTypeFloat16
	case BFloat16:
		return DTypeBFloat16
	}
	return DTypeFloat32
}

// Tensor is a strided tensor over a Go slice, in host memory: the shape of
// DLPack, with strides counted in elements. Keys and values are 4-D:
// [batch, num_kv_heads, seq, head_dim].
//
// Element (i0, i1, ...) is Data[Offset + i0*Strides[0] + i1*Strides[1] + ...];
// nil Strides mean compact row-major. Every element the shape and strides
// address must lie inside Data: the package checks that before the library
// reads a byte. The library copies what it reads; it never keeps Data.
type Tensor[T Element] struct {
	Data    []T
	Shape   []int64
	Strides []int64 // nil: compact row-major
	Offset  int     // index in Data of element (0, 0, ...)
}

// NewTensor returns a zeroed compact tensor of the given shape.
func NewTensor[T Element](shape ...int64) Tensor[T] {
	n := int64(1)
	for _, s := range shape {
		if s < 0 {
			panic(fmt.Sprintf("kvcache.NewTensor: negative size in shape %v", shape))
		}
		n *= s
	}
	return Tensor[T]{Data: make([]T, n), Shape: append([]int64(nil), shape...)}
}

func (Tensor[T]) isInput() {}

// DType returns the tensor's dtype, given by T.
func (t Tensor[T]) DType() DType { return DTypeOfElement[T]() }

// NumElements returns the product of the shape.
func (t Tensor[T]) NumElements() int64 {
	n := int64(1)
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

func (t Tensor[T]) stride(i int) int64 {
	if t.Strides != nil {
		return t.Strides[i]
	}
	s := int64(1)
	for j := i + 1; j < len(t.Shape); j++ {
		s *= t.Shape[j]
	}
	return s
}

func (t Tensor[T]) index(idx []int64) int {
	if len(idx) != len(t.Shape) {
		panic(fmt.Sprintf("kvcache: %d indices for a %d-D tensor", len(idx), len(t.Shape)))
	}
	off := int64(t.Offset)
	for i, x := range idx {
		if x < 0 || x >= t.Shape[i] {
			panic(fmt.Sprintf("kvcache: index %d of dimension %d is out of range [0, %d)", x, i, t.Shape[i]))
		}
		off += x * t.stride(i)
	}
	return int(off)
}

// At returns element idx (one index per dimension).
func (t Tensor[T]) At(idx ...int64) T { return t.Data[t.index(idx)] }

// Set stores x at element idx.
func (t Tensor[T]) Set(x T, idx ...int64) { t.Data[t.index(idx)] = x }

// Copy returns a compact copy of t in new memory.
func (t Tensor[T]) Copy() Tensor[T] {
	out := NewTensor[T](t.Shape...)
	if len(out.Data) == 0 {
		return out
	}
	strides := make([]int64, len(t.Shape))
	for i := range strides {
		strides[i] = t.stride(i)
	}
	copyStrided(unsafe.Pointer(unsafe.SliceData(out.Data)), unsafe.Pointer(&t.Data[t.Offset]), int(unsafe.Sizeof(out.Data[0])),
		t.Shape, strides)
	return out
}

// copyStrided copies the elements of a strided source (shape, strides in
// elements) to a compact destination.
func copyStrided(dst, src unsafe.Pointer, elem int, shape, strides []int64) {
	nd := len(shape)
	if nd == 0 {
		copy(unsafe.Slice((*byte)(dst), elem), unsafe.Slice((*byte)(src), elem))
		return
	}
	inner := shape[nd-1]
	innerStride := strides[nd-1]
	var idx [maxDims]int64
	outer := int64(1)
	for _, s := range shape[:nd-1] {
		outer *= s
	}
	pos := 0
	for o := int64(0); o < outer; o++ {
		var off int64
		for i := 0; i < nd-1; i++ {
			off += idx[i] * strides[i]
		}
		if innerStride == 1 {
			n := int(inner) * elem
			copy(unsafe.Slice((*byte)(unsafe.Add(dst, pos)), n), unsafe.Slice((*byte)(unsafe.Add(src, int(off)*elem)), n))
			pos += n
		} else {
			for j := int64(0); j < inner; j++ {
				copy(unsafe.Slice((*byte)(unsafe.Add(dst, pos)), elem),
					unsafe.Slice((*byte)(unsafe.Add(src, int(off+j*innerStride)*elem)), elem))
				pos += elem
			}
		}
		for i := nd - 2; i >= 0; i-- {
			idx[i]++
			if idx[i] < shape[i] {
				break
			}
			idx[i] = 0
		}
	}
}

// ExternalTensor describes memory that Go does not manage: C memory, a
// CUDA or ROCm device pointer from another library, or pinned host memory,
// with the DLPack fields of kvc_tensor. The package cannot check its bounds;
// the caller guarantees that every element the shape and strides address
// is readable. Data must not point to Go memory (use Tensor for that).
type ExternalTensor struct {
	Data       unsafe.Pointer
	ByteOffset uint64
	Device     Device
	DataType   DataType
	Shape      []int64
	Strides    []int64 // nil: compact row-major
}

func (ExternalTensor) isInput() {}

// Input is a tensor the library reads: a Tensor[float32], Tensor[Float16]
// or Tensor[BFloat16] (or a pointer to one), a View (a cache's memory, or
// a Copy of it), or an ExternalTensor. A nil Input is passed to the library
// as NULL.
type Input interface{ isInput() }

// Inputs converts tensors of one element type to the []Input that UpdateAll,
// NewFromTensors and PrepareStep take.
func Inputs[T Element](ts ...Tensor[T]) []Input {
	out := make([]Input, len(ts))
	for i := range ts {
		out[i] = ts[i]
	}
	return out
}

// tdesc is the pointer-free description of an input tensor that crosses to
// the C shims next to its data pointer; it mirrors kvcgo_desc (the cgo build
// checks the layout at compile time).
type tdesc struct {
	ndim       int32
	deviceType int32
	deviceID   int32
	code       uint8
	bits       uint8
	lanes      uint16
	hasStrides int32
	present    int32
	shape      [maxDims]int64
	strides    [maxDims]int64
	byteOffset uint64
}

// ctensor mirrors kvc_tensor and ckv mirrors kvc_kv (checked likewise):
// how the library's views are read, and how tensor arrays are laid out in C
// memory.
type ctensor struct {
	data       unsafe.Pointer
	deviceType int32
	deviceID   int32
	ndim       int32
	code       uint8
	bits       uint8
	lanes      uint16
	shape      unsafe.Pointer
	strides    unsafe.Pointer
	byteOffset uint64
}

type ckv struct {
	key, value ctensor
}

var (
	dtFloat32  = DataType{TypeCodeFloat, 32, 1}
	dtFloat16  = DataType{TypeCodeFloat, 16, 1}
	dtBFloat16 = DataType{TypeCodeBFloat, 16, 1}
)

// argName names an argument in messages: "key", or "keys[3]" (formatted
// only on the error path: describe runs per layer per step).
type argName struct {
	base  string
	index int // -1: no index
}

func (a argName) String() string {
	if a.index < 0 {
		return a.base
	}
	return a.base + "[" + strconv.Itoa(a.index) + "]"
}

func plainArg(name string) argName { return argName{name, -1} }

// describe fills d for in and returns the data pointer that goes with it
// and, when that pointer is Go memory, a pointer into the same Go object for
// pinning (the last element of a slice's capacity: slices of one backing
// array share it, so that an array of them needs one pin).
func describe(fn string, arg argName, in Input, d *tdesc) (unsafe.Pointer, unsafe.Pointer, error) {
	switch t := in.(type) {
	case nil:
		d.present = 0
		return nil, nil, nil
	case Tensor[float32]:
		return describeTensor(fn, arg, dtFloat32, &t, d)
	case Tensor[Float16]:
		return describeTensor(fn, arg, dtFloat16, &t, d)
	case Tensor[BFloat16]:
		return describeTensor(fn, arg, dtBFloat16, &t, d)
	case *Tensor[float32]:
		return describeTensor(fn, arg, dtFloat32, t, d)
	case *Tensor[Float16]:
		return describeTensor(fn, arg, dtFloat16, t, d)
	case *Tensor[BFloat16]:
		return describeTensor(fn, arg, dtBFloat16, t, d)
	case View:
		return t.describe(d)
	case *View:
		if t == nil {
			d.present = 0
			return nil, nil, nil
		}
		return t.describe(d)
	case ExternalTensor:
		return describeExternal(fn, arg, &t, d)
	case *ExternalTensor:
		if t == nil {
			d.present = 0
			return nil, nil, nil
		}
		return describeExternal(fn, arg, t, d)
	}
	return nil, nil, newError(CodeInvalidArgument, fmt.Sprintf("%s: %s is a %s; pass a Tensor, a View or an ExternalTensor",
		fn, arg, reflect.TypeOf(in)))
}

// cpair mirrors kvcgo_pair: the shapes and dtypes of a compact key and
// value on the host, for Update's fast path (one pointer-free struct).
type cpair struct {
	shape [2][maxDims]int64
	ndim  [2]int32
	code  [2]uint8
	bits  [2]uint8
	lanes [2]uint16
}

// describeTensor is describe for a Tensor of element type dt; a nil one is an absent input.
func describeTensor[T Element](fn string, arg argName, dt DataType, t *Tensor[T], d *tdesc) (unsafe.Pointer, unsafe.Pointer, error) {
	if t == nil {
		d.present = 0
		return nil, nil, nil
	}
	return describeGo(fn, arg, dt, t.Data, t.Offset, t.Shape, t.Strides, d)
}

// compactInput is describe's fast path for the common input: a Tensor (or
// a non-nil *Tensor) with nil Strides, at most maxDims dimensions, no size
// <= 0, whose elements from Offset on all lie inside Data. It copies the
// sizes into shape (what the library will read: the check below is made on
// the copy) and returns the address of the first element, a pointer for
// pinning (as describe) and the element type; ok false for anything else,
// which describe handles (and reports, if it is wrong).
func compactInput(in Input, shape *[maxDims]int64) (data, pin unsafe.Pointer, nd int, dt DataType, ok bool) {
	switch t := in.(type) {
	case Tensor[BFloat16]:
		return compactTensor(&t, dtBFloat16, shape)
	case Tensor[Float16]:
		return compactTensor(&t, dtFloat16, shape)
	case Tensor[float32]:
		return compactTensor(&t, dtFloat32, shape)
	case *Tensor[BFloat16]:
		return compactTensor(t, dtBFloat16, shape)
	case *Tensor[Float16]:
		return compactTensor(t, dtFloat16, shape)
	case *Tensor[float32]:
		return compactTensor(t, dtFloat32, shape)
	}
	return nil, nil, 0, DataType{}, false
}

// compactTensor is compactInput for a Tensor of element type dt (nil: not compact).
func compactTensor[T Element](t *Tensor[T], dt DataType, shape *[maxDims]int64) (unsafe.Pointer, unsafe.Pointer, int, DataType, bool) {
	if t == nil {
		return nil, nil, 0, dt, false
	}
	data, pin, nd, ok := compactGo(t.Data, t.Offset, t.Shape, t.Strides, shape)
	return data, pin, nd, dt, ok
}

func compactGo[T Element](data []T, off int, shape, strides []int64, dst *[maxDims]int64) (unsafe.Pointer, unsafe.Pointer, int, bool) {
	nd := len(shape)
	if strides != nil || nd > maxDims || off < 0 || off >= len(data) {
		return nil, nil, 0, false
	}
	avail := uint64(len(data) - off)
	n := uint64(1)
	for i := range nd {
		s := shape[i]
		dst[i] = s
		if s <= 0 {
			return nil, nil, 0, false
		}
		h, l := bits.Mul64(n, uint64(s))
		if h != 0 || l > avail {
			return nil, nil, 0, false
		}
		n = l
	}
	return unsafe.Pointer(&data[off]), pinOf(data), nd, true
}

func setShape(fn string, arg argName, shape, strides []int64, d *tdesc) error {
	if len(shape) > maxDims {
		return newError(CodeShapeMismatch, fmt.Sprintf("%s: %s has %d dimensions; tensors have at most %d", fn, arg, len(shape), maxDims))
	}
	if strides != nil && len(strides) != len(shape) {
		return newError(CodeInvalidArgument, fmt.Sprintf("%s: %s has %d strides for %d dimensions", fn, arg, len(strides), len(shape)))
	}
	d.present = 1
	d.ndim = int32(len(shape))
	copy(d.shape[:], shape)
	if strides != nil {
		d.hasStrides = 1
		copy(d.strides[:], strides)
	}
	return nil
}

func describeGo[T Element](fn string, arg argName, dt DataType, data []T, off int, shape, strides []int64, d *tdesc) (unsafe.Pointer, unsafe.Pointer, error) {
	nd := len(shape)
	if nd > maxDims || (strides != nil && len(strides) != nd) {
		return nil, nil, setShape(fn, arg, shape, strides, d)
	}
	d.present, d.ndim = 1, int32(nd)
	d.deviceType, d.deviceID = int32(DeviceCPU), 0
	d.code, d.bits, d.lanes = dt.Code, dt.Bits, dt.Lanes
	// One pass for the common compact case: copy the sizes, count the elements.
	n, big, empty := uint64(1), false, false
	for i, s := range shape {
		d.shape[i] = s
		empty = empty || s <= 0
		h, l := bits.Mul64(n, uint64(s))
		big = big || h != 0 || l > 1<<62
		n = l
	}
	lo, hi, ok := int64(0), int64(n)-1, !big
	if strides != nil {
		d.hasStrides = 1
		copy(d.strides[:], strides)
		lo, hi, empty, ok = extent(shape, strides)
	}
	if off < 0 || off > len(data) {
		return nil, nil, newError(CodeInvalidArgument, fmt.Sprintf("%s: %s.Offset is %d but Data has %d elements", fn, arg, off, len(data)))
	}
	if empty {
		// No element is read; a size < 0 is the library's to report.
		if off < len(data) {
			return unsafe.Pointer(&data[off]), pinOf(data), nil
		}
		return nil, nil, nil
	}
	if !ok || int64(off)+lo < 0 || int64(off)+hi >= int64(len(data)) {
		return nil, nil, newError(CodeInvalidArgument, fmt.Sprintf(
			"%s: %s.Data has %d elements but shape %v with strides %v from offset %d addresses elements outside it",
			fn, arg, len(data), shape, stridesOrCompact(strides), off))
	}
	return unsafe.Pointer(&data[off]), pinOf(data), nil
}

func pinOf[T Element](data []T) unsafe.Pointer {
	return unsafe.Pointer(&data[:cap(data)][cap(data)-1])
}

func stridesOrCompact(s []int64) any {
	if s == nil {
		return "(compact)"
	}
	return s
}

// extent returns the lowest and highest element offsets a tensor addresses
// relative to element (0, ...); empty when a size is <= 0; ok false on
// overflow.
func extent(shape, strides []int64) (lo, hi int64, empty, ok bool) {
	n := uint64(1)
	big := false
	for _, s := range shape {
		if s <= 0 {
			return 0, 0, true, true
		}
		h, l := bits.Mul64(n, uint64(s))
		big = big || h != 0 || l > 1<<62
		n = l
	}
	if big {
		return 0, 0, false, false
	}
	if strides == nil {
		return 0, int64(n) - 1, false, true
	}
	stride := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st := stride
		if strides != nil {
			st = strides[i]
		}
		span, o1 := mulChecked(shape[i]-1, st)
		// lo and hi stay within ±2^62 and so does span here, so the sums
		// below cannot wrap (a stride of MaxInt64 would wrap hi negative
		// and pass the bounds check).
		if !o1 || span < -(1<<62) || span > 1<<62 {
			return 0, 0, false, false
		}
		if span < 0 {
			lo += span
		} else {
			hi += span
		}
		if lo < -(1<<62) || hi > 1<<62 {
			return 0, 0, false, false
		}
		if strides == nil {
			var o2 bool
			stride, o2 = mulChecked(stride, shape[i])
			if !o2 {
				return 0, 0, false, false
			}
		}
	}
	return lo, hi, false, true
}

func mulChecked(a, b int64) (int64, bool) {
	neg := (a < 0) != (b < 0)
	ua, ub := uint64(a), uint64(b)
	if a < 0 {
		ua = uint64(-a)
	}
	if b < 0 {
		ub = uint64(-b)
	}
	h, l := bits.Mul64(ua, ub)
	if h != 0 || l > math.MaxInt64 {
		return 0, false
	}
	if neg {
		return -int64(l), true
	}
	return int64(l), true
}

func describeExternal(fn string, arg argName, t *ExternalTensor, d *tdesc) (unsafe.Pointer, unsafe.Pointer, error) {
	if err := setShape(fn, arg, t.Shape, t.Strides, d); err != nil {
		return nil, nil, err
	}
	d.deviceType, d.deviceID = int32(t.Device.Type), t.Device.ID
	d.code, d.bits, d.lanes = t.DataType.Code, t.DataType.Bits, t.DataType.Lanes
	d.byteOffset = t.ByteOffset
	return t.Data, nil, nil
}

// ------------------------------------------------------------------- views

type viewKind uint8

const (
	viewNone        viewKind = iota // the zero View
	viewCache                       // memory of a cache, valid until its next mutating call
	viewOwned                       // a Copy in Go memory, valid for as long as it is referenced
	viewPool                        // a pool's recurrent state, valid until a call changes its blocks or tables
	viewPoolStorage                 // a pool's K/V storage, valid until the pool is closed
	viewPoolTable                   // a pool's block table: viewPool's rule, and until the next table of its group and format
)

// View is a tensor the library returned: a window onto memory the cache
// owns, zero-copy. It is valid until the next call that mutates its cache
// (Update, Crop, Reorder, the batch operations, Reset, Close, ...): the
// package tracks that, so that a stale view's accessors fail (ErrStaleView,
// or a panic for those that return no error) instead of reading memory the
// cache has reused. Copy what you keep. Views of states not yet allocated
// have NDim 0.
//
// A View is also an Input: it can be passed back to the library (to another
// layer or another cache) while it is valid.
type View struct {
	t     ctensor     // as the library returned it: shape and strides point into the cache
	owner *Cache      // viewCache: the cache whose memory it is
	pool  *Pool       // viewPool, viewPoolStorage: the pool whose memory it is
	gen   uint64      // viewCache: owner.gen when it was returned; viewPool: pool.gen; viewPoolTable: its serial
	own   *ownedShape // viewOwned: the shape and strides t points at
	kind  viewKind
	table int32 // viewPoolTable: 2 * group + format, its entry of pool.tableGen
}

type ownedShape struct {
	shape, strides [maxDims]int64
}

func (View) isInput() {}

// KV is the key and value views of one layer.
type KV struct {
	Key, Value View
}

// viewFromC wraps a tensor the library returned; the hot path of Update, so
// it only copies the descriptor and reads it when asked.
func viewFromC(t *ctensor, owner *Cache) View {
	return View{t: *t, owner: owner, gen: owner.gen, kind: viewCache}
}

// kvFromC is the views of a kvc_kv the library wrote into out, or err when the call that was to write it failed.
func kvFromC(out *ckv, owner *Cache, err error) (KV, error) {
	if err != nil {
		return KV{}, err
	}
	return KV{viewFromC(&out.key, owner), viewFromC(&out.value, owner)}, nil
}

// Valid reports whether the view may still be read: its cache has not been
// mutated or closed since the view was returned (always true for a Copy; a
// pool's views: see Pool).
func (v View) Valid() bool {
	switch v.kind {
	case viewOwned:
		return true
	case viewCache:
		return v.owner.handle() != nil && v.owner.gen == v.gen
	case viewPool:
		return v.pool.handle() != nil && v.pool.gen == v.gen
	case viewPoolStorage:
		return v.pool.handle() != nil
	case viewPoolTable:
		return v.pool.handle() != nil && v.pool.tableGen[v.table] == v.gen
	}
	return false
}

func (v View) mustBeValid() {
	if !v.Valid() {
		panic(ErrStaleView)
	}
}

// DType returns the storage dtype of the view's elements.
func (v View) DType() DType { return goDType(v.DataType()) }

// DataType returns the DLPack element type.
func (v View) DataType() DataType { return DataType{Code: v.t.code, Bits: v.t.bits, Lanes: v.t.lanes} }

// Device returns where the view's memory lives.
func (v View) Device() Device { return Device{Type: DeviceType(v.t.deviceType), ID: v.t.deviceID} }

// NDim returns the number of dimensions (0 for a state not yet allocated).
func (v View) NDim() int {
	if v.t.ndim < 0 || v.t.shape == nil {
		return 0
	}
	return min(int(v.t.ndim), maxDims)
}

func (v View) shapeSlice() []int64 {
	n := v.NDim()
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(v.t.shape), n)
}

// Shape returns a copy of the sizes; nil for a stale view.
func (v View) Shape() []int64 {
	if !v.Valid() {
		return nil
	}
	return append([]int64(nil), v.shapeSlice()...)
}

// Strides returns a copy of the strides, in elements (explicit even where
// the library reports a compact view); nil for a stale view.
func (v View) Strides() []int64 {
	if !v.Valid() {
		return nil
	}
	out := make([]int64, v.NDim())
	for i := range out {
		out[i] = v.stride(i)
	}
	return out
}

func (v View) stride(i int) int64 {
	if v.t.strides != nil {
		return unsafe.Slice((*int64)(v.t.strides), v.NDim())[i]
	}
	s := int64(1)
	for _, d := range v.shapeSlice()[i+1:] {
		s *= d
	}
	return s
}

// Dim returns the size of dimension i. It panics for a stale view.
func (v View) Dim(i int) int64 {
	v.mustBeValid()
	return v.shapeSlice()[i]
}

// Stride returns the stride of dimension i, in elements. It panics for a
// stale view.
func (v View) Stride(i int) int64 {
	v.mustBeValid()
	_ = v.shapeSlice()[i]
	return v.stride(i)
}

// NumElements returns the product of the shape (0 for an empty or stale
// view).
func (v View) NumElements() int64 {
	if !v.Valid() || v.NDim() == 0 {
		return 0
	}
	n := int64(1)
	for _, s := range v.shapeSlice() {
		n *= s
	}
	return n
}

func (v View) first() unsafe.Pointer {
	if v.t.data == nil {
		return nil
	}
	return unsafe.Add(v.t.data, uintptr(v.t.byteOffset))
}

// Data returns the address of element (0, ...), for handing the view to
// other native code (a CUDA kernel, DLPack); nil for a stale view. The
// memory stays the cache's.
func (v View) Data() unsafe.Pointer {
	if !v.Valid() {
		return nil
	}
	return v.first()
}

func (v View) String() string {
	if !v.Valid() {
		return "View(stale)"
	}
	return fmt.Sprintf("View(%v %v shape=%v strides=%v)", v.DType(), v.Device(), v.Shape(), v.Strides())
}

func (v *View) describe(d *tdesc) (unsafe.Pointer, unsafe.Pointer, error) {
	if !v.Valid() {
		return nil, nil, ErrStaleView
	}
	d.present = 1
	n := v.NDim()
	d.ndim = int32(n)
	d.deviceType, d.deviceID = v.t.deviceType, v.t.deviceID
	d.code, d.bits, d.lanes = v.t.code, v.t.bits, v.t.lanes
	copy(d.shape[:], v.shapeSlice())
	for i := 0; i < n; i++ {
		d.strides[i] = v.stride(i)
	}
	d.hasStrides = 1
	if v.kind == viewOwned {
		return v.first(), v.first(), nil
	}
	return v.first(), nil, nil
}

func (v View) hostReadable() error {
	if !v.Valid() {
		return ErrStaleView
	}
	switch v.Device().Type {
	case DeviceCPU, DeviceCUDAHost, DeviceROCmHost:
	default:
		return newError(CodeDeviceMismatch, fmt.Sprintf("the view lives on device %d:%d; only host memory can be read from Go",
			v.t.deviceType, v.t.deviceID))
	}
	if goDTypeSize(v.DType()) == 0 {
		return newError(CodeDTypeMismatch, fmt.Sprintf("the view's dtype {%d, %d, %d} is not one kvcache stores",
			v.t.code, v.t.bits, v.t.lanes))
	}
	return nil
}

// At returns element idx converted to float32, whatever the view's dtype.
// It panics for a stale view, device memory or an index out of range.
func (v View) At(idx ...int64) float32 {
	if err := v.hostReadable(); err != nil {
		panic(err)
	}
	shape := v.shapeSlice()
	if len(idx) != len(shape) {
		panic(fmt.Sprintf("kvcache: %d indices for a %d-D view", len(idx), len(shape)))
	}
	var off int64
	for i, x := range idx {
		if x < 0 || x >= shape[i] {
			panic(fmt.Sprintf("kvcache: index %d of dimension %d is out of range [0, %d)", x, i, shape[i]))
		}
		off += x * v.stride(i)
	}
	p := v.first()
	switch v.DType() {
	case DTypeFloat32:
		return *(*float32)(unsafe.Add(p, off*4))
	case DTypeFloat16:
		return (*(*Float16)(unsafe.Add(p, off*2))).Float32()
	default:
		return (*(*BFloat16)(unsafe.Add(p, off*2))).Float32()
	}
}

// span returns the number of elements from element (0, ...) to the last
// one the view addresses, inclusive (views have non-negative strides).
func (v View) span() int64 {
	if v.NumElements() == 0 {
		return 0
	}
	n := int64(1)
	for i, s := range v.shapeSlice() {
		n += (s - 1) * v.stride(i)
	}
	return n
}

// Copy returns a compact copy of the view in Go memory, valid for as long
// as it is referenced, whatever happens to the cache.
func (v View) Copy() (View, error) {
	if err := v.hostReadable(); err != nil {
		if !(v.Valid() && v.NDim() == 0) {
			return View{}, err
		}
	}
	own := &ownedShape{}
	out := View{t: v.t, own: own, kind: viewOwned}
	out.t.data, out.t.byteOffset, out.t.strides = nil, 0, nil
	n := v.NDim()
	if n == 0 {
		out.t.ndim, out.t.shape = 0, nil
		return out, nil
	}
	copy(own.shape[:], v.shapeSlice())
	st := int64(1)
	for i := n - 1; i >= 0; i-- {
		own.strides[i] = st
		st *= own.shape[i]
	}
	out.t.shape = unsafe.Pointer(&own.shape)
	out.t.strides = unsafe.Pointer(&own.strides)
	if elems := v.NumElements(); elems > 0 {
		elem := goDTypeSize(v.DType())
		var dst unsafe.Pointer
		if elem == 4 {
			dst = unsafe.Pointer(unsafe.SliceData(make([]float32, elems)))
		} else {
			dst = unsafe.Pointer(unsafe.SliceData(make([]uint16, elems)))
		}
		src := make([]int64, n)
		for i := range src {
			src[i] = v.stride(i)
		}
		copyStrided(dst, v.first(), elem, own.shape[:n], src)
		out.t.data = dst
	}
	return out, nil
}

// As returns the view as a Tensor[T] over the same memory, zero-copy: valid
// exactly as long as the view (call Copy on the result to keep it). T must
// be the view's element type and the view must be in host memory.
func As[T Element](v View) (Tensor[T], error) {
	if err := v.hostReadable(); err != nil {
		return Tensor[T]{}, err
	}
	if want := DTypeOfElement[T](); v.DType() != want {
		return Tensor[T]{}, newError(CodeDTypeMismatch, fmt.Sprintf("As: the view holds %v, not %v", v.DType(), want))
	}
	var data []T
	if n := v.span(); n > 0 {
		data = unsafe.Slice((*T)(v.first()), n)
	}
	return Tensor[T]{Data: data, Shape: v.Shape(), Strides: v.Strides()}, nil
}
