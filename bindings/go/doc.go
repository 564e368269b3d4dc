// Package kvcache holds the key/value caches of transformer inference: Go
// bindings, through cgo, for the kvcache C library (every cache kind Hugging
// Face transformers has, with transformers' semantics).
//
// # Caches
//
// A Cache is an ordered list of layers, each of one LayerKind. New builds
// one from CacheOptions: a Preset that reproduces a transformers class
// (DynamicCache, StaticCache, SlidingWindowCache, HybridCache,
// HybridChunkedCache, QuantizedCache, OffloadedCache, OffloadedStaticCache,
// OffloadedHybridCache, SinkCache, MambaCache,
// HybridMambaAttentionDynamicCache) from a ModelConfig, or PresetCustom with
// one LayerOptions per layer. New(nil) makes a lazy DynamicCache.
// EncoderDecoderCache pairs a self-attention and a cross-attention cache.
//
// Update stores a layer's new keys and values and returns the views
// attention reads; the queries (SeqLength, MaxLength, UsableLength,
// MaskSizes, LayerInfo, Memory) and operations (Crop, Reorder,
// BatchRepeatInterleave, BatchSelectIndices, BatchSplit, FromBatchSplits,
// Reserve, Reset, Clone, Offload, Prefetch, and the conv and recurrent
// states of linear layers) carry transformers' names.
//
// # Tensors and views
//
// Inputs are Tensor[T] values: a Go slice of float32, Float16 or BFloat16
// (the dtype follows from T) with a shape and strides in elements, the
// layout of DLPack; keys and values are [batch, num_kv_heads, seq, head_dim].
// The package checks that every element a shape addresses lies inside the
// slice before the library reads it, and the library copies what it reads.
// ExternalTensor passes memory Go does not manage (a device pointer, C
// memory).
//
// What the library returns are Views: zero-copy windows onto memory the
// cache owns, valid until the next call that mutates that cache (Update,
// Crop, Reorder, the batch operations, Reset, Close; a failed call too).
// The package tracks this: a stale view's accessors return ErrStaleView (or
// panic, for those without an error) rather than read reused memory. Copy a
// view to keep it; As gives a zero-copy Tensor[T] of a valid view.
//
// # Errors
//
// Every failing call returns an *Error with the library's stable Code, the
// Go method that failed in Op ("Sequence.Reserve", not the C function) and
// the library's message (which names the argument, the value and the
// rule); a failed call has changed nothing. Compare codes with errors.Is
// and the sentinels (ErrOutOfRange, ErrShapeMismatch, ...), or read Code
// with errors.As. Every method of a closed (or nil) handle returns an
// error that matches ErrClosed; the counts without an error (Len,
// Committed, NumLayers) are deprecated for Length, CommittedLength and
// LayerCount.
//
// # Lifetime and goroutines
//
// Close frees a cache; it is idempotent. A finalizer closes a cache that
// was dropped without Close, as a safety net only: C memory does not count
// towards the Go heap, so the garbage collector sees no hurry. A View keeps
// its cache reachable. A Cache, an EncoderDecoderCache and a Pool (with its
// sequences) are safe for concurrent use: each holds a mutex for every call
// into C, so goroutines sharing one take turns (the library would refuse an
// overlapping call with ErrBusy; the package never lets one happen).
// Distinct handles are independent and run in parallel. Views are not
// synchronised: read them where no other goroutine mutates their cache.
//
// A Sequence dropped without Close holds its pool's blocks until the
// collector finds it. Pool.OpenSequences counts the sequences not closed
// yet; a Sequence.Reserve short of blocks collects the dropped ones and
// retries once before it fails, and its error counts the open sequences.
// examples/serving is a continuous-batching HTTP server over one Pool.
//
// # The hot path
//
// Update allocates nothing, in Go or in the library, in steady decoding:
// the inputs cross to C as pointers for the duration of the call (C never
// keeps a Go pointer). UpdateAll updates all layers in one call but pins its
// inputs' memory for it; a decode loop that refills the same buffers calls
// PrepareStep once and Step.Update per token: one C call per step, nothing
// to pin or allocate.
//
// # Caller-provided storage
//
// PoolOptions.Allocator and CacheOptions.Allocator take a pool's blocks or
// a cache's K/V stores from an Allocator (CArena: C memory the Go side
// owns), so views are slices of that memory (docs/allocator.md). A cache's
// stores come and go as its layers grow, so the library calls the Allocator
// from inside its updates: a cache made with one (and its clones, splits and
// stacks) takes C calls that allow that, which costs a few Go allocations
// per Update; caches without one keep the hot path above.
//
// Caches and pools without an Allocator keep CPU stores in the library's
// memory, which holds on to freed blocks of 1 MiB or more for reuse (up to a
// limit, 10 s idle): SetHostMemoryRetention, ReleaseHostMemory and
// HostMemoryRetained control and report that, for the whole process.
//
// # Block hashes
//
// BlockHashRoot, BlockHash and BlockHashChain compute the keys of prefix
// caching exactly as docs/block-hash.md specifies them (SHA-256 over a fixed
// little-endian layout), so a router can tell where a prompt's prefix is
// cached. They touch no cache, are safe for concurrent use, and work in a
// CGO_ENABLED=0 build too (in Go, with crypto/sha256).
//
// # Building
//
// The package links the C library through pkg-config (#cgo pkg-config:
// kvcache), so an installed kvcache is found by `go build` as is:
//
//	cmake --install build --prefix /usr/local      # or: make install PREFIX=...
//	go get github.com/kvcache/kvcache/bindings/go
//
// With the kvcache_static build tag the package links the static library
// (pkg-config's kvcache-static) and programs need only libc and libm.
//
// Against a build tree of the repository instead, source
// bindings/go/scripts/env.sh BUILD_DIR: it installs that build into
// BUILD_DIR/go-prefix and exports PKG_CONFIG_PATH and an rpath in
// CGO_LDFLAGS. Built with CGO_ENABLED=0 the package still compiles, with
// the same API, and every constructor returns ErrCgoDisabled. The package
// refuses a library whose ABI major version differs from the header's
// (ErrVersionMismatch).
package kvcache
