/*
 * kvcache/persist.h: cache files (docs/file-format.md): saving a cache,
 * loading it into a new cache, restoring it into an existing one. Since 0.6.
 *
 * A file holds everything that makes a cache behave as the one saved: every
 * layer's stored keys and values, lengths and counters, quantized codes with
 * their scales and residuals, recurrent conv/SSM states, sink positions and
 * the RoPE tables, indexer keys, dummy layers, which layers are offloaded
 * (their bytes are read from whichever tier holds them), and for an
 * encoder-decoder cache both halves and the is_updated flags. Working memory
 * (scratch) and the views the last update returned are not saved: a
 * restored cache reports the same as the original (kvc_memory_info's
 * bytes_reserved aside) and answers the next update identically.
 *
 * The file starts with a model fingerprint: the cache's settings, every
 * layer's kind and options (window, max_cache_len, quantizer settings, sink
 * tokens, state pairs) and, for layers that hold data, dtype, heads and head
 * dims. kvc_cache_restore refuses a file whose fingerprint differs from the
 * target's, naming the first difference ("layer 3: kind sliding (file) vs
 * static (cache)"). A file is little-endian, versioned ("format version 2
 * (file) vs 1 (reader)" is refused with KVC_ERROR_VERSION_MISMATCH) and
 * checksummed (CRC-32C over every byte): a truncated or corrupted file is
 * refused with KVC_ERROR_IO naming the section and offset. Every reader
 * validates the whole file before it changes anything; on any error the
 * target cache is unchanged and no out-parameter is written.
 *
 * Device caches are written and read through a bounded host staging buffer
 * (kvc_save_options.staging_bytes); host caches are written straight from
 * their memory: a save never holds a second copy of the cache.
 */
#ifndef KVCACHE_PERSIST_H
#define KVCACHE_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/cache.h"
#include "kvcache/encoder_decoder.h"
#include "kvcache/error.h"
#include "kvcache/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The format version this library writes and reads. */
#define KVC_FILE_FORMAT_VERSION 1

/**
 * A caller's sink for a file's bytes: called in file order with `bytes` >
 * 0; returns 0 when it took them all, non-zero to stop the save (which then
 * fails with KVC_ERROR_IO). `data` is valid during the call only.
 */
typedef int (*kvc_write_fn)(void* user, const void* data, size_t bytes);

typedef struct kvc_save_options {
  uint32_t struct_size;  /**< sizeof(kvc_save_options) */
  uint32_t reserved;     /**< 0 */
  uint64_t staging_bytes; /**< device caches: the host staging buffer, in [4096, 2^40); 0 = 8 MiB */
} kvc_save_options;

#define KVC_SAVE_OPTIONS_INIT {sizeof(kvc_save_options), 0, 0}
/** Sets `options` to KVC_SAVE_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_save_options_init(kvc_save_options* options);

/** Options of the loads. Published sizes: 24 (0.6), 32 and 40 (0.7). */
typedef struct kvc_load_options {
  uint32_t struct_size; /**< sizeof(kvc_load_options) */
  kvc_device device;    /**< where the new cache lives (default: the CPU); any device, whatever the saved one */
  void* stream;         /**< the new cache's stream (NULL: the device's default stream) */
  /* since 0.7 */
  const kvc_allocator* allocator; /**< the new cache's K/V stores (kvcache/allocator.h); NULL = the backend's.
                                       Restores keep the target cache's own allocator. Since 0.7. */
  uint64_t max_bytes; /**< the most bytes the new cache's stores (and row buffers) may take as the file declares
                           them: batch x heads x capacity x (key dim + value dim) x element size per layer, both
                           halves of an encoder-decoder file together. A file declaring more is refused with
                           OUT_OF_MEMORY before the store that would pass it is allocated. 0 = no limit. A file's
                           capacity may lawfully be far more than its tokens (a static layer of 128k slots holding
                           ten), so a few kilobytes can ask for gigabytes: set it when the file is not yours.
                           Since 0.7. */
} kvc_load_options;

#define KVC_LOAD_OPTIONS_INIT {sizeof(kvc_load_options), {KVC_DEVICE_CPU, 0}, NULL, NULL, 0}
/** Sets `options` to KVC_LOAD_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_load_options_init(kvc_load_options* options);

/**
 * Writes `cache` to the file `path` (created or replaced: written to a
 * temporary file beside it, then renamed, so a crash never leaves a partial
 * file under `path`). `options` NULL = KVC_SAVE_OPTIONS_INIT. The cache is
 * not changed. Errors: INVALID_ARGUMENT (NULL, options), IO (the file could
 * not be written: the message has the system's reason), OUT_OF_MEMORY.
 */
KVC_API kvc_error* kvc_cache_save(const kvc_cache* cache, const char* path, const kvc_save_options* options);

/** The same bytes as kvc_cache_save, given to `write` as they are produced. */
KVC_API kvc_error* kvc_cache_save_to(const kvc_cache* cache, kvc_write_fn write, void* user,
                                     const kvc_save_options* options);

/**
 * A new cache from the file `path`, on options->device (NULL options =
 * KVC_LOAD_OPTIONS_INIT). The file is read whole into memory; every path
 * loader takes only a regular file (a FIFO, a directory, a device is IO at
 * once, never a wait), and a file that changes while it is read is IO,
 * never a crash: replace cache files by renaming. Errors: INVALID_ARGUMENT,
 * IO (unreadable, not a regular file, changed while read, truncated,
 * corrupted, not a cache file), VERSION_MISMATCH, OUT_OF_MEMORY (also: the
 * file declares more than options->max_bytes), NO_DEVICE; *out is written on
 * success only.
 */
KVC_API kvc_error* kvc_cache_load(const char* path, const kvc_load_options* options, kvc_cache** out);

/** The same from `bytes` bytes at `data` (a file's contents; borrowed for the call). */
KVC_API kvc_error* kvc_cache_load_buffer(const void* data, size_t bytes, const kvc_load_options* options,
                                         kvc_cache** out);

/**
 * Replaces the contents of `cache` with the file's: the file's fingerprint
 * must equal the cache's (INVALID_ARGUMENT naming the first difference
 * otherwise). The cache keeps its device and stream. Views the cache handed
 * out before are invalid afterwards. On error the cache is unchanged.
 */
KVC_API kvc_error* kvc_cache_restore(kvc_cache* cache, const char* path);
KVC_API kvc_error* kvc_cache_restore_buffer(kvc_cache* cache, const void* data, size_t bytes);

/** The same four for an encoder-decoder cache (both halves and the is_updated flags). */
KVC_API kvc_error* kvc_encoder_decoder_cache_save(const kvc_encoder_decoder_cache* cache, const char* path,
                                                  const kvc_save_options* options);
KVC_API kvc_error* kvc_encoder_decoder_cache_save_to(const kvc_encoder_decoder_cache* cache, kvc_write_fn write,
                                                     void* user, const kvc_save_options* options);
KVC_API kvc_error* kvc_encoder_decoder_cache_load(const char* path, const kvc_load_options* options,
                                                  kvc_encoder_decoder_cache** out);
KVC_API kvc_error* kvc_encoder_decoder_cache_load_buffer(const void* data, size_t bytes,
                                                         const kvc_load_options* options,
                                                         kvc_encoder_decoder_cache** out);
KVC_API kvc_error* kvc_encoder_decoder_cache_restore(kvc_encoder_decoder_cache* cache, const char* path);
KVC_API kvc_error* kvc_encoder_decoder_cache_restore_buffer(kvc_encoder_decoder_cache* cache, const void* data,
                                                            size_t bytes);

/*
 * Pool sequences (kvcache/pool.h): a file holds one sequence: its tokens,
 * length and committed count, its hash chain's root (so the salt it was
 * created with), and for every layer the bytes of its blocks (recurrent
 * groups: its live conv and SSM state), under a fingerprint of the pool's
 * layout (dtype, storage layout, hash seed, groups' kinds, block sizes and
 * windows, layers' shapes; not num_blocks). Loading makes a NEW sequence in
 * a pool of the same fingerprint: it takes the blocks it needs (evicting
 * cached ones as an allocation does), fills them, and caches its committed
 * full blocks under their hashes when the pool caches prefixes. A pool
 * without enough available blocks for it gives OUT_OF_MEMORY and is
 * unchanged; a mismatched pool INVALID_ARGUMENT naming the difference.
 * Recurrent checkpoints other than the live state are not saved. A sequence
 * created with extra keys (an adapter key or multimodal items, since 0.7) is
 * refused with INVALID_ARGUMENT: the file format does not hold them yet.
 */
KVC_API kvc_error* kvc_pool_sequence_save(const kvc_pool_sequence* sequence, const char* path,
                                          const kvc_save_options* options);
KVC_API kvc_error* kvc_pool_sequence_save_to(const kvc_pool_sequence* sequence, kvc_write_fn write, void* user,
                                             const kvc_save_options* options);
KVC_API kvc_error* kvc_pool_sequence_load(kvc_pool* pool, const char* path, kvc_pool_sequence** out);
KVC_API kvc_error* kvc_pool_sequence_load_buffer(kvc_pool* pool, const void* data, size_t bytes,
                                                 kvc_pool_sequence** out);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_PERSIST_H */
