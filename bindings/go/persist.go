package kvcache

// Cache files (docs/file-format.md, C header kvcache/persist.h): a file holds
// everything that makes a cache behave as the one saved (stored keys and
// values, counters, quantized codes and scales, recurrent states, sink
// tables, indexer keys, offloaded layers; for an encoder-decoder cache both
// halves). A mismatched file is refused with ErrInvalidArgument naming the
// first difference ("layer 3: kind dynamic sliding (file) vs static
// (cache)"), one of another format version with ErrVersionMismatch, a
// truncated or corrupted one with ErrIO naming the section and offset; the
// cache is unchanged on every error. A pool sequence has files of its own:
// Sequence.Save and Pool.LoadSequence.

import (
	"runtime"
	"unsafe"
)

// FileFormatVersion is the cache file format version this library writes and reads.
const FileFormatVersion = 1

// Save and Restore exist for Cache and EncoderDecoderCache alike, on purpose
// (one C function each); their bodies are one call through call.

// Save writes the cache to the file path (created or replaced; written beside
// it and renamed, so a crash never leaves a partial file). The cache is not
// changed.
func (c *Cache) Save(path string) (err error) {
	return call(c, "Cache.Save", reads, nil, func(p unsafe.Pointer) error {
		return cSave(p, path)
	})
}

// Restore replaces the cache's contents with the file's, whose model
// fingerprint must equal the cache's. Views taken before are invalid
// afterwards. On error the cache is unchanged.
func (c *Cache) Restore(path string) (err error) {
	return call(c, "Cache.Restore", mutates, nil, func(p unsafe.Pointer) error {
		return cRestore(p, path)
	})
}

// Load makes a new cache on the CPU from the file path (a regular file, read
// whole; one that changes while it is read is an error, never a crash).
func Load(path string) (*Cache, error) {
	return LoadWithOptions(path, LoadOptions{})
}

// LoadOptions are the options of LoadWithOptions and
// LoadEncoderDecoderWithOptions (C kvc_load_options).
type LoadOptions struct {
	// MaxBytes is the most bytes the new cache's stores may take as the
	// file declares them (batch x heads x capacity x (key dim + value dim) x
	// element size per layer, both halves of an encoder-decoder file
	// together). A file declaring more is ErrOutOfMemory, refused before
	// that memory is asked for. 0: no limit. A file's capacity may lawfully
	// be far past its tokens (a dynamic layer keeps the capacity it grew
	// to), so a file of kilobytes can ask for gigabytes: set it for files
	// this process did not write.
	MaxBytes uint64
}

// LoadWithOptions is Load with options: a limit on what the file may make
// it allocate.
func LoadWithOptions(path string, o LoadOptions) (*Cache, error) {
	if err := cAvailable(); err != nil {
		return nil, err
	}
	p, err := cLoad(path, o)
	return newCacheOr(p, false, err)
}

// Save writes both halves and the is_updated flags to the file path.
func (e *EncoderDecoderCache) Save(path string) (err error) {
	return call(e, "EncoderDecoderCache.Save", reads, nil, func(p unsafe.Pointer) error {
		return cEDSave(p, path)
	})
}

// Restore replaces both halves and the flags with the file's (the
// fingerprints must match); unchanged on error.
func (e *EncoderDecoderCache) Restore(path string) (err error) {
	return call(e, "EncoderDecoderCache.Restore", mutates, nil, func(p unsafe.Pointer) error {
		return cEDRestore(p, path)
	})
}

// LoadEncoderDecoder makes a new encoder-decoder cache on the CPU from the file path.
func LoadEncoderDecoder(path string) (*EncoderDecoderCache, error) {
	return LoadEncoderDecoderWithOptions(path, LoadOptions{})
}

// LoadEncoderDecoderWithOptions is LoadEncoderDecoder with options; MaxBytes
// bounds both halves together.
func LoadEncoderDecoderWithOptions(path string, o LoadOptions) (*EncoderDecoderCache, error) {
	if err := cAvailable(); err != nil {
		return nil, err
	}
	p, err := cEDLoad(path, o)
	if err != nil {
		return nil, err
	}
	return newEncoderDecoder(p, nil, nil, edCallsBack{}), nil
}

// Save writes the sequence to the file path (created or replaced; written
// beside it and renamed): its tokens, lengths, hash chain root and every
// layer's block bytes (recurrent layers: the live state), under a
// fingerprint of the pool's layout. Pool.LoadSequence makes it again in a
// pool of the same layout. Nothing changes: views stay valid.
func (s *Sequence) Save(path string) (err error) {
	defer s.lock().Unlock()
	defer named(&err, "Sequence.Save")
	h, err := s.enter(false)
	if err != nil {
		return err
	}
	err = cPoolSequenceSave(h, path)
	runtime.KeepAlive(s)
	return err
}

// LoadSequence makes a new sequence in p from the file Sequence.Save wrote.
// p must have the saved pool's layout (dtype, storage layout, hash seed,
// groups' kinds, block sizes and windows, layers' shapes; block counts may
// differ): another is refused with ErrInvalidArgument naming the first
// difference ("group 0: block_size 4 (file) vs 8 (pool)"). The sequence
// takes the blocks it needs (evicting cached ones and reclaiming dropped
// sequences as Reserve does; ErrOutOfMemory when they are not there) and its committed full blocks are
// cached for prefix reuse. A missing, truncated or corrupted file is ErrIO.
// On any error the pool is unchanged.
func (p *Pool) LoadSequence(path string) (_ *Sequence, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.LoadSequence")
	return p.makeSequence(func(h unsafe.Pointer) (unsafe.Pointer, error) { return cPoolSequenceLoad(h, path) })
}
