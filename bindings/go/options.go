package kvcache

// The option structs of the C API as Go structs. The Default* functions
// return the C library's own defaults (its *_init functions); start from
// them, since for some fields zero is not the default (QuantOptions, and
// LayerOptions.Kind, whose zero is rejected). Slices and pointers are
// borrowed for the call and copied by the library.

// ModelConfig is the part of a transformers model configuration that
// decides a cache's layers (kvc_model_config). Zero means "absent" for every
// field.
type ModelConfig struct {
	NumHiddenLayers      uint32      // >= 1
	LayerTypes           []LayerType // nil, or NumHiddenLayers entries
	SlidingWindow        int64       // window of sliding layers, or 0
	AttentionChunkSize   int64       // chunk size of chunked layers, or 0
	NumKVSharedLayers    uint32      // the last n layers share KV and get no cache
	SlidingWindowPattern uint32      // hybrid presets without LayerTypes: every n-th layer is full attention (0: 2)
	NumberOfConvStates   uint32      // linear layers: state pairs per layer (0 means 1)
	ConvKernel           int64       // linear layers: conv state length K; 0 = from the first conv input
}

// QuantOptions says how a quantized layer quantizes (kvc_quant_options).
// DefaultQuantOptions gives transformers' defaults (nbits 4, axes 0,
// q_group_size 64, residual_length 128) with the quanto quantizer in
// incremental mode.
type QuantOptions struct {
	Quantizer      Quantizer
	Mode           QuantMode
	NBits          int32 // quanto {2, 4}; hqq {1, 2, 3, 4, 8}
	AxisKey        int32 // quanto {0, -1}; hqq {0, 1}
	AxisValue      int32 // as AxisKey
	QGroupSize     int64 // elements per group, in [1, 2^31)
	ResidualLength int64 // full-precision tokens kept, in [0, 2^31)
}

// LayerOptions is one layer of a PresetCustom cache (kvc_layer_options).
type LayerOptions struct {
	Kind           LayerKind
	Window         int64         // sliding and chunked kinds: window or chunk size; LayerSink: window_length
	MaxCacheLen    int64         // static kinds: number of slots
	Quant          *QuantOptions // LayerQuantized: nil = DefaultQuantOptions()
	NumSinkTokens  int64         // LayerSink: tokens kept at the start, in [0, Window)
	NumStates      uint32        // Linear kinds: conv/recurrent state pairs; 0 means 1
	ConvKernelSize int64         // Linear kinds: conv state length K; 0 = from the first conv input
}

// CacheOptions are the options of New (kvc_cache_options). New(nil) makes
// a lazy DynamicCache on the CPU.
type CacheOptions struct {
	Preset        Preset         // DefaultCacheOptions: PresetDynamic
	Config        *ModelConfig   // presets
	MaxCacheLen   int64          // PresetStatic, PresetSlidingWindow, PresetHybrid, PresetHybridChunked (and offloaded ones)
	Layers        []LayerOptions // PresetCustom
	Device        Device         // where the cache lives; the zero Device means CPU
	Quant         *QuantOptions  // PresetQuantized: nil = DefaultQuantOptions()
	Offload       Offload        // any preset
	WindowLength  int64          // PresetSink: window_length, >= NumSinkTokens + 1
	NumSinkTokens int64          // PresetSink
	// TransformersRelease is the transformers release whose behaviour to follow where releases
	// differ, as MAJOR*10000 + MINOR*100 (0: the newest, 5.24); below 52400 static layers have no Crop.
	TransformersRelease uint32
	QueryOffsetRule     QueryOffsetRule // MtpCache / DFlashCache offsets; default QueryOffsetPlain
	// Allocator, when set, provides the K/V stores of every layer (kvc_cache_options.allocator; see
	// Allocator, and CArena for CPU caches): the views of updates and LayerView are then its memory. Layers
	// allocate at their first update (or Reserve, EarlyInitialization) and when a dynamic layer grows; clones,
	// splits and stacks of the cache use it too, and the library keeps it referenced until the last of them
	// is closed. Not from it: quantized records, recurrent states, indexer keys, the host tier of offloaded
	// layers. A refusal fails the call that needed memory with ErrOutOfMemory, the cache unchanged.
	// Such a cache's calls let the library call Go, which costs a few Go allocations per Update that a
	// cache without an allocator does not make.
	Allocator Allocator
}

// hasAllocator reports whether a cache made from o takes its stores from a Go Allocator.
func (o *CacheOptions) hasAllocator() bool { return o != nil && o.Allocator != nil }

// InitOptions are the options of EarlyInitialization (kvc_init_options).
type InitOptions struct {
	BatchSize          int64   // >= 1
	NumKVHeads         int64   // >= 1; ignored where NumKVHeadsPerLayer is given
	KHeadDim           int64   // >= 1
	VHeadDim           int64   // 0 = KHeadDim
	DType              DType   // required
	NumKVHeadsPerLayer []int64 // nil or one entry per layer
	HeadDimPerLayer    []int64 // nil or one entry per layer (keys and values)
}

// UpdateOptions are the options of Update and UpdateAll
// (kvc_update_options); a nil *UpdateOptions means all defaults.
type UpdateOptions struct {
	// Static layers only (transformers 4.57): the absolute slots to write,
	// one per new token; nil = write at the layer's counter.
	CachePosition []int64
	// Sink layers: the RoPE cos and sin the model used, [seq, dim] (the
	// whole table) or [batch, seq, dim] (this call's positions); both nil =
	// no RoPE, keys are not re-rotated.
	RopeCos, RopeSin Input
	// Sink layers: only the first n key channels are rotary; 0 = all.
	PartialRotationSize int64
}

// ConvUpdateOptions are the options of UpdateConvState
// (kvc_conv_update_options); nil means all defaults.
type ConvUpdateOptions struct {
	StateIndex     uint32 // which state pair; default 0
	ConvKernelSize int64  // K for a state not yet allocated; 0 = the input's last dimension
	// Legacy MambaCache API: roll the state left by one and write the
	// input's columns at clamp(CachePosition, 0, K-1); nil = current API.
	CachePosition []int64
}

// LayerInfo is what a layer is and holds (kvc_layer_info).
type LayerInfo struct {
	Kind             LayerKind
	Window           int64 // sliding/chunked kinds, else 0
	MaxCacheLen      int64 // static kinds, else 0
	Capacity         int64 // slots the layer keeps (-1: unbounded)
	IsInitialized    bool  // storage exists
	IsSliding        bool
	IsChunked        bool // mask with the chunk rule, not the sliding rule
	IsCompileable    bool // static kinds: fixed addresses, no allocation in update
	RecordsPast      bool // after ActivatePastRecording
	DType            DType
	BatchSize        int64
	NumKVHeads       int64
	KHeadDim         int64
	VHeadDim         int64
	SeqLength        int64 // what SeqLength returns
	StoredLength     int64 // tokens physically stored (view length)
	IsLinear         bool  // Linear kinds (transformers' is_linear)
	IsOffloaded      bool  // K/V currently in the host tier
	HasPreviousState bool  // Linear kinds: every state has had its first conv update
	NumStates        uint32
	ConvKernelSize   int64
	NumSinkTokens    int64
	QuantizedLength  int64 // quantized kinds: tokens in the quantized store
}

// MemoryInfo is the memory a cache holds (kvc_memory_info).
type MemoryInfo struct {
	BytesReserved  uint64 // allocated for K/V storage and scratch, all layers, all tiers
	BytesUsed      uint64 // K/V currently stored
	BytesDevice    uint64 // of BytesReserved: in the device tier
	BytesHost      uint64 // of BytesReserved: in the host tier (offloaded layers)
	BytesQuantized uint64 // quantized layers: codes, scales and zero points
	BytesState     uint64 // Linear kinds: conv and recurrent states
}

// DefaultCacheOptions returns KVC_CACHE_OPTIONS_INIT: PresetDynamic on the
// CPU, everything else absent.
func DefaultCacheOptions() CacheOptions { return cDefaultCacheOptions() }

// DefaultModelConfig returns KVC_MODEL_CONFIG_INIT (all fields absent).
func DefaultModelConfig() ModelConfig { return cDefaultModelConfig() }

// DefaultLayerOptions returns KVC_LAYER_OPTIONS_INIT (a LayerDynamic layer).
func DefaultLayerOptions() LayerOptions { return cDefaultLayerOptions() }

// DefaultQuantOptions returns KVC_QUANT_OPTIONS_INIT.
func DefaultQuantOptions() QuantOptions { return cDefaultQuantOptions() }

// DefaultInitOptions returns KVC_INIT_OPTIONS_INIT.
func DefaultInitOptions() InitOptions { return cDefaultInitOptions() }

// DefaultUpdateOptions returns KVC_UPDATE_OPTIONS_INIT.
func DefaultUpdateOptions() UpdateOptions { return cDefaultUpdateOptions() }

// DefaultConvUpdateOptions returns KVC_CONV_UPDATE_OPTIONS_INIT.
func DefaultConvUpdateOptions() ConvUpdateOptions { return cDefaultConvUpdateOptions() }
