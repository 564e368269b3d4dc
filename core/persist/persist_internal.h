/*
 * core/persist/persist_internal.h: what the files of core/persist/ share.
 *
 *  output.c       the writer of sections: header, sections, table, footer
 *  transfer.c     bytes between a cache's memory (any device, any tier) and the host; a file's payloads
 *                 read into a new cache (kvci_section_load)
 *  fingerprint.c  the model fingerprint: built from a cache, compared with one
 *  save_cache.c   a cache's sections
 *  parse.c        a file's bytes checked (every checksum) and indexed
 *  load_cache.c   a new cache from a parsed file
 *  pool_sequence.c  a pool sequence's sections, and a new sequence from them
 *  read_file.c    a path's or a buffer's bytes, read at offsets (read_file.h; only regular files, never mapped)
 *  api.c          the public entry points (files, buffers, callbacks, restore)
 */
#ifndef KVC_CORE_PERSIST_INTERNAL_H
#define KVC_CORE_PERSIST_INTERNAL_H

#include "../internal.h"
#include "format.h"
#include "record.h"

/* ------------------------------------------------------------- writing */

typedef struct kvci_table_entry {
  uint64_t offset, payload_bytes;
  uint32_t type, part, index, crc;
} kvci_table_entry;

typedef struct kvci_out {
  const char* fn;
  kvc_write_fn write;
  void* user;
  uint64_t offset;          /* bytes written so far */
  uint64_t staging_bytes;   /* device caches: the host staging buffer's size */
  /* The open section. */
  int open;
  uint64_t declared, written;
  uint32_t crc;
  kvci_table_entry* table;
  size_t count, cap;
  kvc_error* err;           /* the first error; later writes do nothing */
} kvci_out;

/* The file header: `object` is a KVCF_OBJECT_*, digest the fingerprint's first 16 SHA-256 bytes. */
void kvci_out_file_header(kvci_out* out, uint32_t object, const unsigned char digest[16]);
/* Opens a section (writes its header); its payload must then be exactly s->payload_bytes bytes. */
void kvci_out_begin(kvci_out* out, const kvcf_section* s);
void kvci_out_bytes(kvci_out* out, const void* data, size_t bytes);
/* Closes the section: pads with zeros and records its table entry. */
void kvci_out_end(kvci_out* out);
/* A whole section holding a record, which it then frees (kvci_rec_free: empty, ready for the next record). */
void kvci_out_record(kvci_out* out, uint32_t type, uint32_t part, uint32_t index, kvci_record* rec);
/* The table and the footer; returns out->err (NULL on success) and frees the table. */
kvc_error* kvci_out_finish(kvci_out* out);
void kvci_out_fail(kvci_out* out, kvc_error* e); /* keeps the first error */

/* ------------------------------------------------------------ transfer */

/*
 * The host staging buffer through which a device cache's bytes pass (the CPU
 * backend's memory is read and written in place: no stage). `barrier` is a
 * 4-byte device buffer whose read (read_f32_4d, a host synchronisation)
 * tells the host that the copies issued before it are done, so the stage can
 * be read or reused.
 */
typedef struct kvci_stage {
  const kvc_backend* backend;
  const kvc_exec* exec;
  unsigned char* host;
  size_t bytes;
  void* barrier;
  kvci_fault fault; /* the first failed copy or wait of a load (backend_fault.h), for kvci_stage_error */
} kvci_stage;

/* Opens the stage for a cache's or a pool's place (nothing on the CPU); UNSUPPORTED when the backend cannot
 * synchronise. `bytes` 0: 8 MiB. */
kvc_error* kvci_stage_open(const char* fn, const kvc_backend* backend, const kvc_exec* exec, kvc_device device,
                           uint64_t bytes, kvci_stage* out);
void kvci_stage_close(kvci_stage* stage);
/* output.c: the stage of a save (out->staging_bytes); 0, or -1 with the error kept in `out` (kvci_out_fail). */
int kvci_out_stage_open(kvci_out* out, const kvc_backend* backend, const kvc_exec* exec, kvc_device device,
                        kvci_stage* st);

/*
 * A 4-D region of cache memory in elements of `elem` bytes (any tier):
 * written to the open section in [b, h, s, d] order (save), or filled from
 * `src`, which holds it compact (load; -1 when the backend failed).
 */
void kvci_xfer_save(kvci_out* out, kvci_stage* stage, const void* base, const int64_t strides[4],
                    const int64_t shape[4], size_t elem);
int kvci_xfer_load(kvci_stage* stage, void* base, const int64_t strides[4], const int64_t shape[4], size_t elem,
                   const unsigned char* src);
/* The error of a kvci_xfer_load that returned -1: the backend's failure in its words, naming fn and `what`. */
kvc_error* kvci_stage_error(const char* fn, kvci_stage* stage, const char* what);

/*
 * A bulk section's payload, loaded in order in regions (kvci_section_load):
 * from a caller's buffer, or read from the file straight into the region
 * (host memory) or through a buffer (device memory), its checksum computed
 * as the bytes land and compared with the table's once the last byte has
 * (kvci_file_payload_checked): the new cache is built aside, so a corrupted
 * payload or a file rewritten since the checks is an IO error that leaves
 * nothing behind.
 */
struct kvci_file_section;
struct kvci_file;
typedef struct kvci_section_reader {
  const struct kvci_file* file;
  const struct kvci_file_section* section;
  uint64_t done;
  uint32_t crc;
} kvci_section_reader;

/* The next shape-sized region of the payload into cache memory (kvci_xfer_load's layout). */
kvc_error* kvci_section_load(const char* fn, kvci_section_reader* r, kvci_stage* stage, void* base,
                             const int64_t strides[4], const int64_t shape[4], size_t elem);

/* --------------------------------------------------------- fingerprint */

/* The fingerprint record of a cache (FPRT payload). */
void kvci_fingerprint_write(const kvc_cache* cache, kvci_record* out);

/* One layer as a file describes it. */
typedef struct kvci_layer_print {
  kvc_layer_options spec;
  kvc_quant_options quant; /* spec.quant points here when the kind has a quantizer */
  int64_t initialized, dtype, heads, k_dim, v_dim;
} kvci_layer_print;

typedef struct kvci_fingerprint {
  int64_t lazy, offload, transformers_release, query_offset_rule;
  kvci_layer_print lazy_layer;
  uint32_t num_layers;
  kvci_layer_print* layers;
} kvci_fingerprint;

/* Reads and checks a fingerprint record (every spec passes the options check). */
kvc_error* kvci_fingerprint_read(const char* fn, const unsigned char* bytes, size_t len, kvci_fingerprint* out);
void kvci_fingerprint_free(kvci_fingerprint* f);
/* NULL when the cache has this fingerprint, else INVALID_ARGUMENT naming the first difference ("layer 3: ..."). */
kvc_error* kvci_fingerprint_compare(const char* fn, const kvci_fingerprint* file, const kvc_cache* cache,
                                   const char* part);

/* --------------------------------------------------------------- files */

typedef struct kvci_file_section {
  kvcf_section h;
  uint64_t offset; /* of the section header */
  uint32_t crc;    /* the payload's checksum (the table's) */
  /* The payload in memory: a caller's buffer's, or a file's record kept by the checks; NULL for a file's bulk
   * (tensor) payload, which kvci_section_load reads from the file. */
  const unsigned char* payload;
  unsigned char* owned;
  int verified; /* its checksum checked: by kvci_file_parse, or (bulk) kvci_file_payload_checked */
} kvci_file_section;

struct kvci_source;

typedef struct kvci_file {
  const struct kvci_source* src; /* open until the file is freed */
  uint32_t object;
  uint32_t lib_version[3];
  size_t count;
  kvci_file_section* sections;
} kvci_file;

/* Checks every byte of the source (magic, version, checksums, layout) but the bulk (tensor) payloads, and indexes
 * its sections; of a file it reads and keeps only the rest (read_file.h). */
kvc_error* kvci_file_parse(const char* fn, const struct kvci_source* src, kvci_file* out);
/* A bulk payload's checksum, computed over its bytes where the loader put them, against the table's: IO error
 * naming the section (corrupted, or the file modified since the checks). */
kvc_error* kvci_file_payload_checked(const char* fn, const kvci_file* f, const kvci_file_section* s, uint32_t crc);
/* After a load: the checksums of the bulk payloads no loader read (a valid file has none). */
kvc_error* kvci_file_check_rest(const char* fn, const kvci_file* f);
void kvci_file_free(kvci_file* f);
/* The section of that type, part and index (sub 0 unless given), NULL when absent. */
const kvci_file_section* kvci_file_find(const kvci_file* f, uint32_t type, uint32_t part, uint32_t index,
                                        uint32_t sub);

/* ------------------------------------------------------- caches <-> files */

/* Every section of `cache` as part `part` (0, or 1 for an encoder-decoder cache's cross-attention half). */
void kvci_save_cache(kvci_out* out, const kvc_cache* cache, uint32_t part);
/* The fingerprint digest of a cache (SHA-256 of its fingerprint record, first 16 bytes); -1 when out of memory. */
int kvci_fingerprint_digest(const kvc_cache* cache, unsigned char digest[16]);
/* fingerprint.c: the digest of a written fingerprint record `r` (as above), which it frees; -1 when the record ran
 * out of memory. */
int kvci_fingerprint_record_digest(kvci_record* r, unsigned char digest[16]);
/* What a load allocates for stores and row buffers, against kvc_load_options.max_bytes (`max`, 0: no limit):
 * `used` counts what the file's layers declared so far, both parts of an encoder-decoder file together. */
typedef struct kvci_load_budget {
  uint64_t max, used;
} kvci_load_budget;
/* A new cache on `device`/`stream` from part `part` of a parsed file; its stores from `allocator` (NULL: the
 * backend's), which it shares, each counted in `budget` before it is allocated. */
kvc_error* kvci_load_cache(const char* fn, const kvci_file* f, uint32_t part, const kvc_device* device,
                           void* stream, kvci_allocator* allocator, kvci_load_budget* budget, kvc_cache** out);

/* ------------------------------------------------------- pool sequences */

/* pool_sequence.c: the digest of a sequence's pool's fingerprint, a sequence's sections, and a new sequence from a
 * parsed file. */
int kvci_pool_fingerprint_digest(const kvc_pool_sequence* sequence, unsigned char digest[16]);
void kvci_save_pool_sequence(kvci_out* out, const kvc_pool_sequence* sequence);
kvc_error* kvci_load_pool_sequence(const char* fn, const kvci_file* f, kvc_pool* pool, kvc_pool_sequence** out);

#endif /* KVC_CORE_PERSIST_INTERNAL_H */
