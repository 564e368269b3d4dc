package kvcache

import (
	"strconv"
	"strings"
)

// The version of the C header this package was written against
// (KVC_VERSION_*). The major number is the ABI: the package refuses a
// library whose major differs (see Version).
const (
	HeaderVersionMajor  = 0
	HeaderVersionMinor  = 7
	HeaderVersionPatch  = 0
	HeaderVersionNumber = HeaderVersionMajor*10000 + HeaderVersionMinor*100 + HeaderVersionPatch
)

// Feature is a bit of the library's features bitmask (kvc_features).
type Feature uint64

// Bits of Features. A set bit means the capability is usable now.
const (
	FeatureCPU       Feature = 1 << 0 // the CPU backend (always)
	FeatureCUDA      Feature = 1 << 1 // a CUDA backend is available
	FeatureHIP       Feature = 1 << 2 // a ROCm/HIP backend is available
	FeatureBackendDL Feature = 1 << 3 // the core can load backend plugins
)

// Has reports whether every bit of x is set in f.
func (f Feature) Has(x Feature) bool { return f&x == x }

func (f Feature) String() string {
	names := []struct {
		f Feature
		n string
	}{{FeatureCPU, "cpu"}, {FeatureCUDA, "cuda"}, {FeatureHIP, "hip"}, {FeatureBackendDL, "backend-dl"}}
	var parts []string
	rest := f
	for _, n := range names {
		if f&n.f != 0 {
			parts = append(parts, n.n)
			rest &^= n.f
		}
	}
	if rest != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	return strings.Join(parts, "|")
}

// DeviceType is a DLPack device type (kvc_device_type).
type DeviceType int32

// Device types: the DLPack DLDeviceType values.
const (
	DeviceCPU      DeviceType = 1
	DeviceCUDA     DeviceType = 2
	DeviceCUDAHost DeviceType = 3 // pinned host memory visible to CUDA
	DeviceROCm     DeviceType = 10
	DeviceROCmHost DeviceType = 11 // pinned host memory visible to ROCm
)

// Device is where a cache or a tensor lives (kvc_device). The zero Device
// is not valid; CPU is the host.
type Device struct {
	Type DeviceType
	ID   int32
}

// CPU is the host device, {DeviceCPU, 0}.
var CPU = Device{Type: DeviceCPU}

// DLPack type codes (DLDataTypeCode) of a DataType.
const (
	TypeCodeInt    uint8 = 0
	TypeCodeUint   uint8 = 1
	TypeCodeFloat  uint8 = 2
	TypeCodeBFloat uint8 = 4
)

// DataType is the DLPack element type triple {code, bits, lanes}
// (kvc_data_type).
type DataType struct {
	Code  uint8
	Bits  uint8
	Lanes uint16
}

// DType is a storage dtype of a cache (kvc_dtype). A cache stores one dtype
// and accepts tensors of exactly that dtype; it never converts silently.
type DType int32

// Storage dtypes.
const (
	DTypeUnset    DType = 0 // take the dtype from the first update
	DTypeFloat32  DType = 1 // {TypeCodeFloat, 32, 1}
	DTypeFloat16  DType = 2 // {TypeCodeFloat, 16, 1}
	DTypeBFloat16 DType = 3 // {TypeCodeBFloat, 16, 1}
)

func (d DType) String() string {
	switch d {
	case DTypeUnset:
		return "unset"
	case DTypeFloat32:
		return "float32"
	case DTypeFloat16:
		return "float16"
	case DTypeBFloat16:
		return "bfloat16"
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}

// goDataType and goDType are the library's dtype tables, kept in Go so that
// the per-call paths need no C call; the tests check them against
// DataType/DTypeOf, which ask the library.
func goDataType(d DType) DataType {
	switch d {
	case DTypeFloat32:
		return DataType{TypeCodeFloat, 32, 1}
	case DTypeFloat16:
		return DataType{TypeCodeFloat, 16, 1}
	case DTypeBFloat16:
		return DataType{TypeCodeBFloat, 16, 1}
	}
	return DataType{}
}

func goDType(t DataType) DType {
	switch t {
	case DataType{TypeCodeFloat, 32, 1}:
		return DTypeFloat32
	case DataType{TypeCodeFloat, 16, 1}:
		return DTypeFloat16
	case DataType{TypeCodeBFloat, 16, 1}:
		return DTypeBFloat16
	}
	return DTypeUnset
}

func goDTypeSize(d DType) int {
	switch d {
	case DTypeFloat32:
		return 4
	case DTypeFloat16, DTypeBFloat16:
		return 2
	}
	return 0
}

// LayerKind is the kind of one layer of a cache (kvc_layer_kind).
type LayerKind int32

// Layer kinds. The chunked kinds behave exactly like the sliding kinds with
// the chunk size as window; they differ only in how the attention mask is
// built (LayerInfo.IsChunked). The Linear kinds hold recurrent state (conv
// and SSM states) instead of, or next to, K/V.
const (
	LayerDynamic              LayerKind = 1  // grows without bound; stores every token
	LayerDynamicSliding       LayerKind = 2  // grows up to the window; stores the last window-1 tokens
	LayerDynamicChunked       LayerKind = 3  // LayerDynamicSliding with window = chunk size
	LayerStatic               LayerKind = 4  // pre-allocated MaxCacheLen slots
	LayerStaticSliding        LayerKind = 5  // pre-allocated min(window, MaxCacheLen) slots, shifted
	LayerStaticChunked        LayerKind = 6  // LayerStaticSliding with window = chunk size
	LayerQuantized            LayerKind = 7  // quantized store plus a full-precision residual
	LayerSink                 LayerKind = 8  // sink tokens plus the most recent ones; kept keys re-rotated
	LayerLinear               LayerKind = 9  // recurrent state only: conv and SSM states, no K/V
	LayerLinearDynamic        LayerKind = 10 // recurrent state + LayerDynamic
	LayerLinearDynamicSliding LayerKind = 11 // recurrent state + LayerDynamicSliding
	LayerLinearStatic         LayerKind = 12 // recurrent state + LayerStatic
	LayerLinearStaticSliding  LayerKind = 13 // recurrent state + LayerStaticSliding
	// transformers' Fp8QuantizedLayer: float8 e4m3fn with one scale per
	// tensor (keys, values) fixed by the first update, no residual; the
	// first update returns its inputs, later ones the dequantized history.
	// CPU caches only.
	LayerQuantizedFp8 LayerKind = 14
	// transformers' DummyLayer (5.23): stores nothing, for blocks without
	// attention and layers that reuse another layer's K/V. Updates are
	// refused (ErrUnsupported); every other operation leaves it as it is.
	LayerDummy LayerKind = 15
	// transformers' DynamicIndexedLayer (5.11): LayerDynamic plus the keys
	// of a sparse-attention indexer (Cache.UpdateIndexer).
	LayerDynamicIndexed LayerKind = 16
	// transformers' StaticIndexedLayer (5.24): LayerStatic plus an indexer
	// buffer of MaxCacheLen slots written at its own counter.
	LayerStaticIndexed LayerKind = 17
)

var layerKindNames = [...]string{
	LayerDynamic: "dynamic", LayerDynamicSliding: "dynamic_sliding", LayerDynamicChunked: "dynamic_chunked",
	LayerStatic: "static", LayerStaticSliding: "static_sliding", LayerStaticChunked: "static_chunked",
	LayerQuantized: "quantized", LayerSink: "sink", LayerLinear: "linear", LayerLinearDynamic: "linear_dynamic",
	LayerLinearDynamicSliding: "linear_dynamic_sliding", LayerLinearStatic: "linear_static",
	LayerLinearStaticSliding: "linear_static_sliding", LayerQuantizedFp8: "quantized_fp8", LayerDummy: "dummy",
	LayerDynamicIndexed: "dynamic_indexed", LayerStaticIndexed: "static_indexed",
}

func (k LayerKind) String() string {
	if k > 0 && int(k) < len(layerKindNames) {
		return layerKindNames[k]
	}
	return "LayerKind(" + strconv.Itoa(int(k)) + ")"
}

// LayerType is one entry of a model configuration's layer_types
// (kvc_layer_type).
type LayerType int32

// Layer types of ModelConfig.LayerTypes.
const (
	LayerTypeFullAttention    LayerType = 1 // "full_attention"
	LayerTypeSlidingAttention LayerType = 2 // "sliding_attention"
	LayerTypeChunkedAttention LayerType = 3 // "chunked_attention"
	LayerTypeLinearAttention  LayerType = 4 // "linear_attention", "conv", "mamba" ("moe", "mlp" before transformers 5.23)
	LayerTypeHybrid           LayerType = 5 // "hybrid"
	LayerTypeHybridSliding    LayerType = 6 // "hybrid_sliding"
	// "dummy", and since transformers 5.23 "moe", "mlp" and the layers whose
	// kv_sharing_modes entry is "reuse": a LayerDummy layer.
	LayerTypeDummy LayerType = 7
	// "indexed_attention" (DeepSeek V3.2, GLM-MoE-DSA): a LayerDynamicIndexed
	// layer in the dynamic presets, a LayerStaticIndexed one in the static ones.
	LayerTypeIndexedAttention LayerType = 8
)

// Preset says how New builds the layer list (kvc_preset): the cache classes
// of Hugging Face transformers. See CacheOptions.
type Preset int32

// Presets. The zero value is PresetCustom, as in C; DefaultCacheOptions
// starts from PresetDynamic.
const (
	PresetCustom          Preset = 0  // the layers listed in CacheOptions.Layers
	PresetDynamic         Preset = 1  // DynamicCache (lazy without a config)
	PresetStatic          Preset = 2  // StaticCache(config, max_cache_len)
	PresetSlidingWindow   Preset = 3  // SlidingWindowCache
	PresetHybrid          Preset = 4  // HybridCache (Gemma 2/3)
	PresetHybridChunked   Preset = 5  // HybridChunkedCache (Llama 4)
	PresetQuantized       Preset = 6  // QuantizedCache
	PresetOffloaded       Preset = 7  // OffloadedCache
	PresetOffloadedStatic Preset = 8  // OffloadedStaticCache
	PresetOffloadedHybrid Preset = 9  // OffloadedHybridCache
	PresetSink            Preset = 10 // SinkCache(window_length, num_sink_tokens)
	PresetMamba           Preset = 11 // MambaCache
	PresetHybridMamba     Preset = 12 // HybridMambaAttentionDynamicCache (Jamba, Bamba)
)

// Offload selects which layers keep their K/V in the host tier between
// updates (kvc_offload).
type Offload int32

// Offloading modes of CacheOptions.Offload.
const (
	OffloadDefault    Offload = 0 // the preset's own choice
	OffloadNone       Offload = 1
	OffloadAll        Offload = 2 // offload_only_non_sliding=False
	OffloadNonSliding Offload = 3 // offload_only_non_sliding=True
)

// QueryOffsetRule is what the query offset and the mask sizes add
// (kvc_query_offset_rule, transformers 5.14/5.15).
type QueryOffsetRule int32

// Rules of CacheOptions.QueryOffsetRule.
const (
	QueryOffsetPlain  QueryOffsetRule = 0 // every Cache: the query offset is the sequence length
	QueryOffsetMTP    QueryOffsetRule = 1 // MtpCache: layer k's queries run k+1 tokens ahead
	QueryOffsetDFlash QueryOffsetRule = 2 // DFlashCache: the previously accepted tokens are added
)

// Quantizer is the quantization algorithm of a quantized layer
// (kvc_quantizer).
type Quantizer int32

// Quantizers.
const (
	QuantizerQuanto Quantizer = 1 // optimum-quanto's MaxOptimizer; nbits 2 or 4; axes 0 or -1
	QuantizerHQQ    Quantizer = 2 // Half-Quadratic Quantization; nbits 1, 2, 3, 4 or 8; axes 0 or 1
)

// QuantMode is when a quantized layer quantizes (kvc_quant_mode).
type QuantMode int32

// Quantization modes.
const (
	// QuantModeIncremental quantizes each token once, when it ages out of the
	// residual; an update costs the same at any context length.
	QuantModeIncremental QuantMode = 0
	// QuantModeTransformers follows transformers' QuantizedCache timeline
	// exactly (the whole history is quantized again at each flush).
	QuantModeTransformers QuantMode = 1
	// QuantModeCompact quantizes as QuantModeIncremental but keeps only the
	// packed groups and the residual; each update dequantizes the history into
	// a working copy shared by the cache's layers (saves memory; a step costs
	// O(context)).
	QuantModeCompact QuantMode = 2
)

// AllLayers, passed as the layer of MaxLength or HasPreviousState, asks
// about the whole cache (KVC_ALL_LAYERS).
const AllLayers = -1
