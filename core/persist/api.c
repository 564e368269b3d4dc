/*
 * core/persist/api.c: the entry points of kvcache/persist.h: files written
 * beside their path and renamed, files read at offsets (read_file.c), caller buffers and
 * callbacks, and restore, which builds the file's cache aside and swaps it
 * in only when everything succeeded (the target is unchanged on error).
 */
/* mkstemp is POSIX, outside strict C11. */
#define _DEFAULT_SOURCE 1
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "persist_internal.h"
#include "read_file.h"

void kvc_save_options_init(kvc_save_options* o) {
  if (o) *o = (kvc_save_options)KVC_SAVE_OPTIONS_INIT;
}

void kvc_load_options_init(kvc_load_options* o) {
  if (o) *o = (kvc_load_options)KVC_LOAD_OPTIONS_INIT;
}

static kvc_error* read_save_options(const char* fn, const kvc_save_options* o, uint64_t* staging) {
  *staging = 0;
  if (!o) return NULL;
  kvc_error* e = kvci_check_struct_size(fn, "options", o->struct_size, sizeof(kvc_save_options));
  if (e) return e;
  if (o->reserved)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->reserved is %u; it is 0", fn, o->reserved);
  if (o->staging_bytes && (o->staging_bytes < 4096 || o->staging_bytes >= ((uint64_t)1 << 40)))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                    "%s: options->staging_bytes is %llu; pass 0 (8 MiB) or a size in [4096, 2^40)", fn,
                    (unsigned long long)o->staging_bytes);
  *staging = o->staging_bytes;
  return NULL;
}

_Static_assert(offsetof(kvc_load_options, allocator) == 24 && offsetof(kvc_load_options, max_bytes) == 32 &&
                   sizeof(kvc_load_options) == 40,
               "kvc_load_options changed size");

static kvc_error* read_load_options(const char* fn, const kvc_load_options* o, kvc_load_options* out) {
  *out = (kvc_load_options)KVC_LOAD_OPTIONS_INIT;
  if (!o) return NULL;
  /* A published smaller size (24: 0.6's, before the allocator; 32: before max_bytes) keeps the defaults of the
     fields it lacks. */
  size_t n = o->struct_size;
  if (n == offsetof(kvc_load_options, allocator) || n == offsetof(kvc_load_options, max_bytes)) {
    memcpy(out, o, n);
    out->struct_size = sizeof *out;
    return NULL;
  }
  kvc_error* e = kvci_check_struct_size(fn, "options", o->struct_size, sizeof(kvc_load_options));
  if (!e) *out = *o;
  return e;
}

/* ------------------------------------------------------------ writing */

/* What a save writes: a cache, both halves of an encoder-decoder cache (b and the flags), or a pool sequence. */
typedef struct object {
  const kvc_cache* a;
  const kvc_cache* b;
  const uint8_t* flags;
  uint32_t nflags;
  const kvc_pool_sequence* seq;
} object;

/* The object's sections, framed. */
static kvc_error* save_object(const char* fn, const object* o, kvc_write_fn write, void* user, uint64_t staging) {
  unsigned char digest[16];
  if (o->seq ? kvci_pool_fingerprint_digest(o->seq, digest) : kvci_fingerprint_digest(o->a, digest))
    return kvci_err_oom();
  kvci_out out;
  memset(&out, 0, sizeof out);
  out.fn = fn, out.write = write, out.user = user, out.staging_bytes = staging;
  uint32_t kind = o->seq ? KVCF_OBJECT_POOL_SEQUENCE : o->b ? KVCF_OBJECT_ENCODER_DECODER : KVCF_OBJECT_CACHE;
  kvci_out_file_header(&out, kind, digest);
  if (o->seq) {
    kvci_save_pool_sequence(&out, o->seq);
    return kvci_out_finish(&out);
  }
  kvci_save_cache(&out, o->a, 0);
  if (o->b) {
    kvci_save_cache(&out, o->b, 1);
    kvcf_section s;
    memset(&s, 0, sizeof s);
    s.type = KVCF_ENCDEC, s.payload_bytes = o->nflags;
    kvci_out_begin(&out, &s);
    kvci_out_bytes(&out, o->flags, o->nflags);
    kvci_out_end(&out);
  }
  return kvci_out_finish(&out);
}

typedef struct fd_sink {
  int fd;
  int error; /* errno of the failed write */
} fd_sink;

static int fd_write(void* user, const void* data, size_t bytes) {
  fd_sink* s = (fd_sink*)user;
  const char* p = (const char*)data;
  while (bytes > 0) {
    ssize_t n = write(s->fd, p, bytes > ((size_t)1 << 30) ? ((size_t)1 << 30) : bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s->error = n < 0 ? errno : EIO;
      return -1;
    }
    p += n;
    bytes -= (size_t)n;
  }
  return 0;
}

/* Saves into path + ".tmp-XXXXXX" beside it, then renames: a crash never leaves a partial file under `path`. */
static kvc_error* save_path(const char* fn, const char* path, const object* o, uint64_t staging) {
  size_t n = strlen(path);
  char* tmp = (char*)malloc(n + 12);
  if (!tmp) return kvci_err_oom();
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".tmp-XXXXXX", 12);
  fd_sink sink = {mkstemp(tmp), 0};
  if (sink.fd < 0) {
    kvc_error* e = kvci_err(KVC_ERROR_IO, "%s: cannot create a file beside %s: %s", fn, path, strerror(errno));
    free(tmp);
    return e;
  }
  kvc_error* e = save_object(fn, o, fd_write, &sink, staging);
  if (e && sink.error) {
    kvc_error_destroy(e);
    e = kvci_err(KVC_ERROR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(sink.error));
  }
  if (close(sink.fd) && !e) e = kvci_err(KVC_ERROR_IO, "%s: writing %s failed: %s", fn, tmp, strerror(errno));
  if (!e && rename(tmp, path)) e = kvci_err(KVC_ERROR_IO, "%s: cannot rename %s to %s: %s", fn, tmp, path, strerror(errno));
  if (e) unlink(tmp);
  free(tmp);
  return e;
}

static kvc_error* check_save(const char* fn, const void* cache, const void* target, const char* target_name) {
  if (!cache) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  if (!target) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, target_name);
  return NULL;
}

kvc_error* kvc_cache_save(const kvc_cache* cache, const char* path, const kvc_save_options* options) {
  static const char* FN = "kvc_cache_save";
  KVCI_GUARD_SHARED(kvci_guard_of(cache), FN);
  uint64_t staging;
  kvc_error* e = check_save(FN, cache, path, "path");
  if (!e) e = read_save_options(FN, options, &staging);
  const object o = {cache, NULL, NULL, 0, NULL};
  return e ? e : save_path(FN, path, &o, staging);
}

kvc_error* kvc_cache_save_to(const kvc_cache* cache, kvc_write_fn write, void* user, const kvc_save_options* options) {
  static const char* FN = "kvc_cache_save_to";
  KVCI_GUARD_SHARED(kvci_guard_of(cache), FN);
  uint64_t staging;
  kvc_error* e = check_save(FN, cache, (const void*)(uintptr_t)write, "write");
  if (!e) e = read_save_options(FN, options, &staging);
  const object o = {cache, NULL, NULL, 0, NULL};
  return e ? e : save_object(FN, &o, write, user, staging);
}

/* Both saves of an encoder-decoder pair: to `path` (to_path), else through `write`. */
static kvc_error* save_encdec(const char* fn, const kvc_encoder_decoder_cache* cache, int to_path, const char* path,
                              kvc_write_fn write, void* user, const kvc_save_options* options) {
  KVCI_GUARD_SHARED(kvci_encdec_guard(cache, 0), fn);
  KVCI_GUARD_SHARED(kvci_encdec_guard(cache, 1), fn);
  KVCI_GUARD_SHARED(kvci_encdec_guard(cache, 2), fn);
  uint64_t staging;
  const void* target = to_path ? (const void*)path : (const void*)(uintptr_t)write;
  kvc_error* e = check_save(fn, cache, target, to_path ? "path" : "write");
  if (!e) e = read_save_options(fn, options, &staging);
  if (e) return e;
  object o = {NULL, NULL, NULL, 0, NULL};
  kvci_encdec_parts(cache, (kvc_cache**)&o.a, (kvc_cache**)&o.b, (uint8_t**)&o.flags, &o.nflags);
  return to_path ? save_path(fn, path, &o, staging) : save_object(fn, &o, write, user, staging);
}

kvc_error* kvc_encoder_decoder_cache_save(const kvc_encoder_decoder_cache* cache, const char* path,
                                          const kvc_save_options* options) {
  return save_encdec("kvc_encoder_decoder_cache_save", cache, 1, path, NULL, NULL, options);
}

kvc_error* kvc_encoder_decoder_cache_save_to(const kvc_encoder_decoder_cache* cache, kvc_write_fn write, void* user,
                                             const kvc_save_options* options) {
  return save_encdec("kvc_encoder_decoder_cache_save_to", cache, 0, NULL, write, user, options);
}

/* ------------------------------------------------------------ reading */

/* A file's bytes: an open file (read_file.h), or a caller's buffer (borrowed). */
typedef kvci_source file_bytes;

static kvc_error* read_path(const char* fn, const char* path, file_bytes* m) {
  memset(m, 0, sizeof *m);
  m->fd = -1;
  if (!path) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: path is NULL", fn);
  return kvci_source_open(fn, path, m);
}

static kvc_error* borrow_buffer(const char* fn, const void* data, size_t bytes, file_bytes* m) {
  memset(m, 0, sizeof *m);
  m->fd = -1;
  if (!data) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: data is NULL", fn);
  kvci_source_borrow(fn, data, bytes, m);
  return NULL;
}

static void release(file_bytes* m) { kvci_source_close(m); }

/* Parses the bytes and checks that they hold the object the caller asked for. */
static kvc_error* parse_object(const char* fn, const file_bytes* m, uint32_t object, kvci_file* f) {
  kvc_error* e = kvci_file_parse(fn, m, f);
  if (e) return e;
  if (f->object != object) {
    static const char* const NAMES[] = {"", "a cache", "an encoder-decoder cache", "a pool sequence"};
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the file holds %s, not %s", fn, NAMES[f->object], NAMES[object]);
    kvci_file_free(f);
  }
  return e;
}

/* The new cache(s) of a parsed file; an encoder-decoder file gives both halves and a copy of the flags. */
static kvc_error* build(const char* fn, const kvci_file* f, const kvc_device* dev, void* stream,
                        kvci_allocator* const allocators[2], uint64_t max_bytes, kvc_cache** a, kvc_cache** b,
                        uint8_t** flags, uint32_t* nflags) {
  kvci_load_budget budget = {max_bytes, 0};
  kvc_error* e = kvci_load_cache(fn, f, 0, dev, stream, allocators[0], &budget, a);
  if (!e && !b && (e = kvci_file_check_rest(fn, f))) {
    kvc_cache_destroy(*a);
    *a = NULL;
  }
  if (e || !b) return e;
  const kvci_file_section* s = kvci_file_find(f, KVCF_ENCDEC, 0, 0, 0);
  if (!s || s->h.payload_bytes > UINT32_MAX) e = kvci_err(KVC_ERROR_IO, "%s: the file has no is_updated section (EDEC)", fn);
  if (!e) e = kvci_load_cache(fn, f, 1, dev, stream, allocators[1], &budget, b);
  if (!e) {
    *nflags = (uint32_t)s->h.payload_bytes;
    *flags = (uint8_t*)malloc(*nflags ? *nflags : 1);
    if (!*flags) {
      kvc_cache_destroy(*b);
      e = kvci_err_oom();
    } else if (*nflags) {
      memcpy(*flags, s->payload, *nflags);
    }
  }
  if (!e && (e = kvci_file_check_rest(fn, f))) {
    free(*flags);
    *flags = NULL;
    kvc_cache_destroy(*b);
    *b = NULL;
  }
  if (e) {
    kvc_cache_destroy(*a);
    *a = NULL;
  }
  return e;
}

/* What a reader of bytes is asked: load options and an out-parameter, or a target to restore. */
typedef struct request {
  const kvc_load_options* options;
  void* out;    /* kvc_cache** or kvc_encoder_decoder_cache** */
  void* target; /* kvc_cache* or kvc_encoder_decoder_cache* */
} request;
typedef kvc_error* (*reader)(const char* fn, const file_bytes* m, const request* r);

static kvc_error* from_path(const char* fn, const char* path, reader use, const request* r) {
  file_bytes m;
  kvc_error* e = read_path(fn, path, &m);
  if (e) return e;
  e = use(fn, &m, r);
  release(&m);
  return e;
}

static kvc_error* from_buffer(const char* fn, const void* data, size_t bytes, reader use, const request* r) {
  file_bytes m;
  kvc_error* e = borrow_buffer(fn, data, bytes, &m);
  return e ? e : use(fn, &m, r);
}

/*
 * A load's objects: out and options checked, the file of the expected object parsed, then its cache (b NULL) or
 * both halves and their flags built with the options' allocator, which what was built shares. On success
 * *allocator is that allocator, still alive for the caller's adopt while what was built holds it.
 */
static kvc_error* load_object(const char* fn, const file_bytes* m, const request* r, uint32_t object,
                              kvc_cache** a, kvc_cache** b, uint8_t** flags, uint32_t* n, kvci_allocator** allocator) {
  if (!r->out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass the address of a handle", fn);
  kvc_load_options o;
  kvci_file f;
  kvc_error* e = read_load_options(fn, r->options, &o);
  if (!e) e = kvci_allocator_new(fn, "options->allocator", o.allocator, allocator);
  if (!e && (e = parse_object(fn, m, object, &f))) kvci_allocator_release(*allocator);
  if (e) return e;
  kvci_allocator* const allocators[2] = {*allocator, *allocator};
  e = build(fn, &f, &o.device, o.stream, allocators, o.max_bytes, a, b, flags, n);
  kvci_allocator_release(*allocator); /* what was built holds its own share */
  kvci_file_free(&f);
  return e;
}

static kvc_error* load_cache(const char* fn, const file_bytes* m, const request* r) {
  kvci_allocator* allocator = NULL;
  kvc_error* e = load_object(fn, m, r, KVCF_OBJECT_CACHE, (kvc_cache**)r->out, NULL, NULL, NULL, &allocator);
  if (!e) kvci_allocator_adopt(allocator); /* still alive: the cache holds it */
  return e;
}

static kvc_error* load_encdec(const char* fn, const file_bytes* m, const request* r) {
  kvci_allocator* allocator = NULL;
  kvc_cache *a = NULL, *b = NULL;
  uint8_t* flags = NULL;
  uint32_t n = 0;
  kvc_error* e = load_object(fn, m, r, KVCF_OBJECT_ENCODER_DECODER, &a, &b, &flags, &n, &allocator);
  if (!e && (e = kvci_encdec_wrap(a, b, flags, n, (kvc_encoder_decoder_cache**)r->out))) {
    kvc_cache_destroy(a);
    kvc_cache_destroy(b);
  }
  if (!e) kvci_allocator_adopt(allocator); /* still alive: the halves hold it */
  free(flags);
  return e;
}

kvc_error* kvc_cache_load(const char* path, const kvc_load_options* options, kvc_cache** out) {
  const request r = {options, out, NULL};
  return from_path("kvc_cache_load", path, load_cache, &r);
}

kvc_error* kvc_cache_load_buffer(const void* data, size_t bytes, const kvc_load_options* options, kvc_cache** out) {
  const request r = {options, out, NULL};
  return from_buffer("kvc_cache_load_buffer", data, bytes, load_cache, &r);
}

kvc_error* kvc_encoder_decoder_cache_load(const char* path, const kvc_load_options* options,
                                          kvc_encoder_decoder_cache** out) {
  const request r = {options, out, NULL};
  return from_path("kvc_encoder_decoder_cache_load", path, load_encdec, &r);
}

kvc_error* kvc_encoder_decoder_cache_load_buffer(const void* data, size_t bytes, const kvc_load_options* options,
                                                 kvc_encoder_decoder_cache** out) {
  const request r = {options, out, NULL};
  return from_buffer("kvc_encoder_decoder_cache_load_buffer", data, bytes, load_encdec, &r);
}

/* ------------------------------------------------------------ restore */

static kvc_error* compare_part(const char* fn, const kvci_file* f, uint32_t part, const kvc_cache* c,
                               const char* name) {
  const kvci_file_section* s = kvci_file_find(f, KVCF_FINGERPRINT, part, 0, 0);
  if (!s) return kvci_err(KVC_ERROR_IO, "%s: the file has no fingerprint section (FPRT)", fn);
  kvci_fingerprint fp;
  kvc_error* e = kvci_fingerprint_read(fn, s->payload, (size_t)s->h.payload_bytes, &fp);
  if (!e) e = kvci_fingerprint_compare(fn, &fp, c, name);
  kvci_fingerprint_free(&fp);
  return e;
}

/*
 * Gives `dst` the contents of `fresh` (a cache built from the file on dst's
 * device and stream) and destroys what dst held. dst keeps what ties it to
 * its caller: backend, device, execution place, copy batch, alias index.
 */
static void adopt(kvc_cache* dst, kvc_cache* fresh) {
  kvci_offload_settle(dst);
  kvc_cache old, made; /* every member but the guards, which stay with their handles */
  kvci_cache_copy_contents(&old, dst);
  kvci_cache_copy_contents(&made, fresh);
  kvci_cache_copy_contents(dst, &made);
  kvci_cache_copy_contents(fresh, &old);
  dst->backend = old.backend, dst->device = old.device, dst->exec = old.exec, dst->batch = old.batch;
  dst->alias_index = old.alias_index, dst->check_alias_index = old.check_alias_index;
  fresh->backend = made.backend, fresh->device = made.device, fresh->exec = made.exec, fresh->batch = made.batch;
  fresh->alias_index = made.alias_index, fresh->check_alias_index = made.check_alias_index;
  kvci_alias_index_touch(dst);
  kvci_alias_index_touch(fresh);
  kvc_cache_destroy(fresh);
}

static kvc_error* restore_cache(const char* fn, const file_bytes* m, const request* r) {
  kvc_cache* cache = (kvc_cache*)r->target;
  kvci_file f;
  kvc_error* e = parse_object(fn, m, KVCF_OBJECT_CACHE, &f);
  if (e) return e;
  kvc_cache* fresh = NULL;
  e = compare_part(fn, &f, 0, cache, "");
  kvci_allocator* const allocators[2] = {cache->allocator, cache->allocator}; /* the stores move into cache */
  if (!e) e = build(fn, &f, &cache->device, cache->exec.stream, allocators, 0, &fresh, NULL, NULL, NULL);
  kvci_file_free(&f);
  if (!e) adopt(cache, fresh);
  return e;
}

static kvc_error* restore_encdec(const char* fn, const file_bytes* m, const request* r) {
  kvc_encoder_decoder_cache* cache = (kvc_encoder_decoder_cache*)r->target;
  kvci_file f;
  kvc_error* e = parse_object(fn, m, KVCF_OBJECT_ENCODER_DECODER, &f);
  if (e) return e;
  kvc_cache *self, *cross, *a = NULL, *b = NULL;
  uint8_t *old_flags, *flags = NULL;
  uint32_t nold, n = 0;
  kvci_encdec_parts(cache, &self, &cross, &old_flags, &nold);
  e = compare_part(fn, &f, 0, self, "the self-attention cache's ");
  if (!e) e = compare_part(fn, &f, 1, cross, "the cross-attention cache's ");
  kvci_allocator* const allocators[2] = {self->allocator, cross->allocator}; /* the stores move into the halves */
  if (!e) e = build(fn, &f, &self->device, self->exec.stream, allocators, 0, &a, &b, &flags, &n);
  kvci_file_free(&f);
  if (e) return e;
  adopt(self, a);
  adopt(cross, b);
  kvci_encdec_set_flags(cache, flags, n);
  return NULL;
}

static kvc_error* null_cache(const char* fn) { return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: cache is NULL", fn); }

kvc_error* kvc_cache_restore(kvc_cache* cache, const char* path) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(cache), "kvc_cache_restore");
  const request r = {NULL, NULL, cache};
  return cache ? from_path("kvc_cache_restore", path, restore_cache, &r) : null_cache("kvc_cache_restore");
}

kvc_error* kvc_cache_restore_buffer(kvc_cache* cache, const void* data, size_t bytes) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(cache), "kvc_cache_restore_buffer");
  const request r = {NULL, NULL, cache};
  return cache ? from_buffer("kvc_cache_restore_buffer", data, bytes, restore_cache, &r)
               : null_cache("kvc_cache_restore_buffer");
}

kvc_error* kvc_encoder_decoder_cache_restore(kvc_encoder_decoder_cache* cache, const char* path) {
  static const char* FN = "kvc_encoder_decoder_cache_restore";
  KVCI_GUARD_EXCLUSIVE(kvci_encdec_guard(cache, 0), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_encdec_guard(cache, 1), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_encdec_guard(cache, 2), FN);
  const request r = {NULL, NULL, cache};
  return cache ? from_path(FN, path, restore_encdec, &r) : null_cache(FN);
}

kvc_error* kvc_encoder_decoder_cache_restore_buffer(kvc_encoder_decoder_cache* cache, const void* data, size_t bytes) {
  static const char* FN = "kvc_encoder_decoder_cache_restore_buffer";
  KVCI_GUARD_EXCLUSIVE(kvci_encdec_guard(cache, 0), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_encdec_guard(cache, 1), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_encdec_guard(cache, 2), FN);
  const request r = {NULL, NULL, cache};
  return cache ? from_buffer(FN, data, bytes, restore_encdec, &r) : null_cache(FN);
}

/* ------------------------------------------------------- pool sequences */

/* The prologue of both saves of a sequence: the sequence, the target (a path or a callback), the options. */
static kvc_error* check_sequence_save(const char* fn, const kvc_pool_sequence* sequence, const void* target,
                                      const char* target_name, const kvc_save_options* options, uint64_t* staging) {
  if (!sequence) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", fn);
  if (!target) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, target_name);
  /* The file format holds no extra keys: a loaded copy would hash its blocks without them and share wrongly. */
  if (kvci_pool_sequence_has_extra_keys(sequence))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence has extra keys (an adapter key or multimodal items); "
                    "sequence files do not hold them, so such a sequence cannot be saved", fn);
  return read_save_options(fn, options, staging);
}

kvc_error* kvc_pool_sequence_save(const kvc_pool_sequence* sequence, const char* path,
                                  const kvc_save_options* options) {
  static const char* FN = "kvc_pool_sequence_save";
  KVCI_GUARD_SHARED(kvci_sequence_guard(sequence), FN);
  uint64_t staging;
  kvc_error* e = check_sequence_save(FN, sequence, path, "path", options, &staging);
  const object o = {NULL, NULL, NULL, 0, sequence};
  return e ? e : save_path(FN, path, &o, staging);
}

kvc_error* kvc_pool_sequence_save_to(const kvc_pool_sequence* sequence, kvc_write_fn write, void* user,
                                     const kvc_save_options* options) {
  static const char* FN = "kvc_pool_sequence_save_to";
  KVCI_GUARD_SHARED(kvci_sequence_guard(sequence), FN);
  uint64_t staging;
  kvc_error* e = check_sequence_save(FN, sequence, (const void*)(uintptr_t)write, "write", options, &staging);
  const object o = {NULL, NULL, NULL, 0, sequence};
  return e ? e : save_object(FN, &o, write, user, staging);
}

static kvc_error* load_sequence(const char* fn, const file_bytes* m, const request* r) {
  if (!r->out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass the address of a kvc_pool_sequence*", fn);
  kvci_file f;
  kvc_error* e = parse_object(fn, m, KVCF_OBJECT_POOL_SEQUENCE, &f);
  if (e) return e;
  e = kvci_load_pool_sequence(fn, &f, (kvc_pool*)r->target, (kvc_pool_sequence**)r->out);
  kvci_file_free(&f);
  return e;
}

static kvc_error* null_pool(const char* fn) { return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", fn); }

kvc_error* kvc_pool_sequence_load(kvc_pool* pool, const char* path, kvc_pool_sequence** out) {
  KVCI_GUARD_EXCLUSIVE(kvci_pool_guard(pool), "kvc_pool_sequence_load");
  const request r = {NULL, out, pool};
  return pool ? from_path("kvc_pool_sequence_load", path, load_sequence, &r) : null_pool("kvc_pool_sequence_load");
}

kvc_error* kvc_pool_sequence_load_buffer(kvc_pool* pool, const void* data, size_t bytes, kvc_pool_sequence** out) {
  static const char* FN = "kvc_pool_sequence_load_buffer";
  KVCI_GUARD_EXCLUSIVE(kvci_pool_guard(pool), FN);
  const request r = {NULL, out, pool};
  return pool ? from_buffer(FN, data, bytes, load_sequence, &r) : null_pool(FN);
}
