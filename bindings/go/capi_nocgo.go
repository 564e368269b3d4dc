//go:build !cgo

package kvcache

// Without cgo the package compiles with the same API, but there is no C
// library to call: constructors return ErrCgoDisabled (so no Cache ever
// exists), and the queries that cannot fail answer from Go tables.

import "unsafe"

func cAvailable() error { return ErrCgoDisabled }

func cVersion() uint32                    { return 0 }
func cVersionString() string              { return "" }
func cFeatures() uint64                   { return 0 }
func cCodeName(c Code) string             { return goCodeName(c) }
func cDTypeSize(d DType) int              { return goDTypeSize(d) }
func cDTypeToDataType(d DType) DataType   { return goDataType(d) }
func cDTypeFromDataType(t DataType) DType { return goDType(t) }
func cAlloc(n uintptr) unsafe.Pointer     { return nil }
func cFree(p unsafe.Pointer)              {}
func cDefaultQuantOptions() QuantOptions {
	return QuantOptions{QuantizerQuanto, QuantModeIncremental, 4, 0, 0, 64, 128}
}
func cDefaultModelConfig() ModelConfig             { return ModelConfig{} }
func cDefaultLayerOptions() LayerOptions           { return LayerOptions{Kind: LayerDynamic} }
func cDefaultCacheOptions() CacheOptions           { return CacheOptions{Preset: PresetDynamic, Device: CPU} }
func cDefaultInitOptions() InitOptions             { return InitOptions{} }
func cDefaultUpdateOptions() UpdateOptions         { return UpdateOptions{} }
func cDefaultConvUpdateOptions() ConvUpdateOptions { return ConvUpdateOptions{} }

func cCreate(*CacheOptions) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
func cCreateFromTensors(*CacheOptions, int, unsafe.Pointer, unsafe.Pointer) (unsafe.Pointer, error) {
	return nil, ErrCgoDisabled
}
func cClone(unsafe.Pointer) (unsafe.Pointer, error)              { return nil, ErrCgoDisabled }
func cDestroy(unsafe.Pointer)                                    {}
func cEarlyInit(unsafe.Pointer, bool, *InitOptions) error        { return ErrCgoDisabled }
func cNumLayers(unsafe.Pointer) uint32                           { return 0 }
func cLayerInfo(unsafe.Pointer, uint32, *LayerInfo) error        { return ErrCgoDisabled }
func cLayerView(unsafe.Pointer, uint32, *ckv) error              { return ErrCgoDisabled }
func cSeqLength(unsafe.Pointer, uint32) (int64, error)           { return 0, ErrCgoDisabled }
func cMaxLength(unsafe.Pointer, int32) (int64, error)            { return 0, ErrCgoDisabled }
func cUsableLength(unsafe.Pointer, int64, uint32) (int64, error) { return 0, ErrCgoDisabled }
func cMaskSizes(unsafe.Pointer, int64, uint32) (int64, int64, error) {
	return 0, 0, ErrCgoDisabled
}
func cBatchSize(unsafe.Pointer) (int64, error)           { return 0, ErrCgoDisabled }
func cQueryOffset(unsafe.Pointer, uint32) (int64, error) { return 0, ErrCgoDisabled }
func cIsCroppable(unsafe.Pointer, int32) (bool, error)   { return false, ErrCgoDisabled }
func cSetPreviousAcceptedTokens(unsafe.Pointer, int64) error {
	return ErrCgoDisabled
}
func cMemory(unsafe.Pointer, *MemoryInfo) error { return ErrCgoDisabled }
func cUpdate(unsafe.Pointer, bool, uint32, unsafe.Pointer, unsafe.Pointer, *tdesc, *tdesc, *ckv) error {
	return ErrCgoDisabled
}
func cUpdateCompact(unsafe.Pointer, bool, uint32, unsafe.Pointer, unsafe.Pointer, *cpair, *ckv) error {
	return ErrCgoDisabled
}
func cUpdateOpts(unsafe.Pointer, bool, uint32, unsafe.Pointer, unsafe.Pointer, *tdesc, *tdesc, *uopts, *int64,
	unsafe.Pointer, unsafe.Pointer, *ckv) error {
	return ErrCgoDisabled
}
func cUpdateAll(unsafe.Pointer, bool, uint32, unsafe.Pointer, unsafe.Pointer, *uopts, *int64, unsafe.Pointer,
	unsafe.Pointer, unsafe.Pointer) error {
	return ErrCgoDisabled
}
func cCrop(unsafe.Pointer, bool, int64) error                { return ErrCgoDisabled }
func cActivatePastRecording(unsafe.Pointer) error            { return ErrCgoDisabled }
func cReorder(unsafe.Pointer, bool, *int64, int) error       { return ErrCgoDisabled }
func cRepeatInterleave(unsafe.Pointer, int64) error          { return ErrCgoDisabled }
func cSelectIndices(unsafe.Pointer, bool, *int64, int) error { return ErrCgoDisabled }
func cBatchSplit(unsafe.Pointer, int64, int64, []unsafe.Pointer) (int, error) {
	return 0, ErrCgoDisabled
}
func cFromBatchSplits([]unsafe.Pointer) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
func cReserve(unsafe.Pointer, int64) error                      { return ErrCgoDisabled }
func cReset(unsafe.Pointer) error                               { return ErrCgoDisabled }
func cSetStream(unsafe.Pointer, uintptr) error                  { return ErrCgoDisabled }
func cStream(unsafe.Pointer) uintptr                            { return 0 }
func cOffload(unsafe.Pointer, uint32) error                     { return ErrCgoDisabled }
func cPrefetch(unsafe.Pointer, uint32) error                    { return ErrCgoDisabled }
func cUpdateConvState(unsafe.Pointer, uint32, unsafe.Pointer, *tdesc, *convOpts, *int64, *ctensor) error {
	return ErrCgoDisabled
}
func cUpdateRecurrentState(unsafe.Pointer, uint32, uint32, unsafe.Pointer, *tdesc, *ctensor) error {
	return ErrCgoDisabled
}
func cStateView(unsafe.Pointer, uint32, uint32, *ctensor, *ctensor) error { return ErrCgoDisabled }
func cHasPreviousState(unsafe.Pointer, int32, int32) (bool, error)        { return false, ErrCgoDisabled }
func cUpdateIndexer(unsafe.Pointer, uint32, unsafe.Pointer, *tdesc, *ctensor) error {
	return ErrCgoDisabled
}
func cIndexerView(unsafe.Pointer, uint32, *ctensor) error { return ErrCgoDisabled }

func cEDCreate(unsafe.Pointer, unsafe.Pointer) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
func cEDDestroy(unsafe.Pointer)                                        {}
func cEDSelf(unsafe.Pointer) unsafe.Pointer                            { return nil }
func cEDCross(unsafe.Pointer) unsafe.Pointer                           { return nil }
func cEDIsUpdated(unsafe.Pointer, uint32) (bool, error)                { return false, ErrCgoDisabled }
func cEDUpdateCross(unsafe.Pointer, bool, uint32, unsafe.Pointer, unsafe.Pointer, *tdesc, *tdesc, *ckv) error {
	return ErrCgoDisabled
}
func cEDCrop(unsafe.Pointer, int64) error                { return ErrCgoDisabled }
func cEDReorder(unsafe.Pointer, *int64, int) error       { return ErrCgoDisabled }
func cEDRepeatInterleave(unsafe.Pointer, int64) error    { return ErrCgoDisabled }
func cEDSelectIndices(unsafe.Pointer, *int64, int) error { return ErrCgoDisabled }
func cEDBatchSplit(unsafe.Pointer, int64, int64, []unsafe.Pointer) (int, error) {
	return 0, ErrCgoDisabled
}
func cEDFromBatchSplits([]unsafe.Pointer) (unsafe.Pointer, error) { return nil, ErrCgoDisabled }
func cEDReset(unsafe.Pointer) error                               { return ErrCgoDisabled }
func cEDClone(unsafe.Pointer) (unsafe.Pointer, error)             { return nil, ErrCgoDisabled }

// The block hash needs no library: the Go implementation (blockhash.go).
func cBlockHashRoot(seed, salt []byte) ([BlockHashSize]byte, error) {
	return goBlockHashRoot(seed, salt)
}
func cBlockHash(parent *[BlockHashSize]byte, tokens []int32, extra []byte) ([BlockHashSize]byte, error) {
	return goBlockHash(parent, tokens, extra)
}
func cBlockHashChain(root *[BlockHashSize]byte, tokens []int32, blockSize uint32) ([][BlockHashSize]byte, error) {
	return goBlockHashChain(root, tokens, blockSize)
}
