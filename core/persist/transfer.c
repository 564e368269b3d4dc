/*
 * core/persist/transfer.c: a cache's bytes to the file and back, whatever
 * holds them. On the CPU backend the bytes are read and written in place,
 * a contiguous run at a time. A device cache's bytes go through one host
 * staging buffer of bounded size (kvc_save_options.staging_bytes): a chunk
 * is copied with the backend's copy_4d (which accepts host-tier pointers),
 * then the host waits for it (a 4-byte read_f32_4d, the table's only entry
 * that synchronises the host) before using or refilling the buffer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "persist_internal.h"
#include "read_file.h"

kvc_error* kvci_stage_open(const char* fn, const kvc_backend* b, const kvc_exec* exec, kvc_device device,
                           uint64_t bytes, kvci_stage* st) {
  memset(st, 0, sizeof *st);
  st->backend = b;
  st->exec = exec;
  if (device.device_type == KVC_DEVICE_CPU) return NULL;
  if (!b->read_f32_4d || !b->host_alloc_zeroed)
    return kvci_err(KVC_ERROR_UNSUPPORTED,
                    "%s: the %s backend has no read_f32_4d or host tier, which files of its caches need to "
                    "synchronise with the device",
                    fn, b->name);
  st->bytes = (size_t)(bytes ? bytes : (uint64_t)8 << 20);
  st->host = (unsigned char*)(b->host_alloc ? b->host_alloc(b->ctx, exec, st->bytes)
                                            : b->host_alloc_zeroed(b->ctx, exec, st->bytes));
  st->barrier = b->alloc_zeroed(b->ctx, exec, 64);
  if (!st->host || !st->barrier) {
    kvci_stage_close(st);
    return kvci_err_oom();
  }
  return NULL;
}

void kvci_stage_close(kvci_stage* st) {
  if (!st->backend) return;
  const kvc_backend* b = st->backend;
  if (st->host) b->host_free(b->ctx, st->exec, st->host);
  if (st->barrier) b->free(b->ctx, st->exec, st->barrier);
  memset(st, 0, sizeof *st);
}

/* Waits on the host for the work issued before on the cache's stream. */
static int stage_wait(kvci_stage* st) {
  const kvc_backend* b = st->backend;
  float x;
  const int64_t one[4] = {1, 1, 1, 1}, unit[4] = {1, 1, 1, 1};
  return b->read_f32_4d(b->ctx, st->exec, &x, st->barrier, KVC_DTYPE_FLOAT32, unit, one);
}

/*
 * The bytes of the innermost dimensions that are contiguous in memory and
 * the number of leading dimensions left to walk: a static store saved whole
 * is one run, a dynamic store's region one run per (b, h).
 */
static int runs(const int64_t st[4], const int64_t shape[4], size_t elem, uint64_t* run) {
  int outer = 3;
  uint64_t n = elem, expect = 1;
  for (int d = 3; d >= 0; d--) {
    if (shape[d] != 1 && st[d] != (int64_t)expect) break;
    n *= (uint64_t)shape[d];
    expect *= (uint64_t)shape[d];
    outer = d - 1;
  }
  *run = n;
  return outer; /* dimensions 0..outer are walked */
}

/* Calls fn(ptr, bytes) for every run of a host region, in [b, h, s, d] order. */
#define WALK_RUNS(BASE, ST, SHAPE, ELEM, BODY)                                                   \
  do {                                                                                           \
    uint64_t run_;                                                                               \
    int outer_ = runs(ST, SHAPE, ELEM, &run_);                                                   \
    int64_t lim_[4] = {1, 1, 1, 1};                                                              \
    for (int d_ = 0; d_ <= outer_; d_++) lim_[d_] = (SHAPE)[d_];                                 \
    for (int64_t i0 = 0; i0 < lim_[0]; i0++)                                                     \
      for (int64_t i1 = 0; i1 < lim_[1]; i1++)                                                   \
        for (int64_t i2 = 0; i2 < lim_[2]; i2++) {                                               \
          int64_t off_ = (i0 * (ST)[0] + (outer_ >= 1 ? i1 * (ST)[1] : 0) +                      \
                          (outer_ >= 2 ? i2 * (ST)[2] : 0)) * (int64_t)(ELEM);                   \
          unsigned char* at_ = (unsigned char*)(BASE) + off_;                                    \
          size_t len_ = (size_t)run_;                                                            \
          BODY;                                                                                  \
        }                                                                                        \
  } while (0)

static int empty(const int64_t shape[4]) { return shape[0] <= 0 || shape[1] <= 0 || shape[2] <= 0 || shape[3] <= 0; }

/*
 * Cuts a region into chunks of at most `cap` bytes, each a sub-box compact
 * in the stage: whole (b) slices of heads when a head row fits, else seq
 * ranges of one head, else dim ranges of one position.
 */
typedef struct chunk {
  int64_t at[4], shape[4];
} chunk;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void chunk_plan(const int64_t shape[4], size_t elem, size_t cap, int* level, int64_t* step) {
  int64_t row = shape[2] * shape[3] * (int64_t)elem;
  if (row <= (int64_t)cap) {
    *level = 1;
    *step = (int64_t)cap / row;
  } else if (shape[3] * (int64_t)elem <= (int64_t)cap) {
    *level = 2;
    *step = (int64_t)cap / (shape[3] * (int64_t)elem);
  } else {
    *level = 3;
    *step = (int64_t)cap / (int64_t)elem;
  }
}

/* Calls body(chunk) for every chunk of the region (stops when it returns non-zero). */
static int each_chunk(const int64_t shape[4], size_t elem, size_t cap, int (*body)(void*, const chunk*),
                      void* ctx) {
  int level;
  int64_t step;
  chunk_plan(shape, elem, cap, &level, &step);
  chunk c;
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h += level == 1 ? step : 1)
      for (int64_t s = 0; s < (level >= 2 ? shape[2] : 1); s += level == 2 ? step : 1)
        for (int64_t d = 0; d < (level == 3 ? shape[3] : 1); d += step) {
          c.at[0] = b, c.at[1] = h, c.at[2] = s, c.at[3] = d;
          c.shape[0] = 1;
          c.shape[1] = level == 1 ? min64(step, shape[1] - h) : 1;
          c.shape[2] = level == 1 ? shape[2] : level == 2 ? min64(step, shape[2] - s) : 1;
          c.shape[3] = level == 3 ? min64(step, shape[3] - d) : shape[3];
          int rc = body(ctx, &c);
          if (rc) return rc;
        }
  return 0;
}

typedef struct xfer_job {
  kvci_stage* st;
  kvci_out* out;
  unsigned char* dev; /* the region's base */
  const int64_t* strides;
  const int64_t* shape;
  size_t elem;
  const unsigned char* src; /* load: the compact region */
} xfer_job;

static void compact_strides(const int64_t shape[4], int64_t out[4]) {
  out[3] = 1;
  out[2] = shape[3];
  out[1] = shape[2] * shape[3];
  out[0] = shape[1] * out[1];
}

static unsigned char* chunk_base(const xfer_job* j, const chunk* c) {
  int64_t off = 0;
  for (int d = 0; d < 4; d++) off += c->at[d] * j->strides[d];
  return j->dev + off * (int64_t)j->elem;
}

static uint64_t chunk_bytes(const chunk* c, size_t elem) {
  return (uint64_t)(c->shape[0] * c->shape[1] * c->shape[2] * c->shape[3]) * elem;
}

static int save_chunk(void* ctx, const chunk* c) {
  xfer_job* j = (xfer_job*)ctx;
  const kvc_backend* b = j->st->backend;
  int64_t cs[4];
  compact_strides(c->shape, cs);
  const char* entry = "copy_4d";
  int rc = b->copy_4d(b->ctx, j->st->exec, j->st->host, cs, chunk_base(j, c), j->strides, c->shape, j->elem);
  if (!rc) rc = stage_wait(j->st), entry = "read_f32_4d";
  if (rc) {
    kvci_out_fail(j->out, kvci_fault_error(j->out->fn, b, entry, rc,
                                           "the file was not completed; the cache is unchanged"));
    return -1;
  }
  kvci_out_bytes(j->out, j->st->host, (size_t)chunk_bytes(c, j->elem));
  return j->out->err ? -1 : 0;
}

/* The file order of a chunk's bytes: [b, h, s, d] of the whole region, compact. */
static uint64_t chunk_file_offset(const xfer_job* j, const chunk* c) {
  int64_t cs[4];
  compact_strides(j->shape, cs);
  int64_t off = 0;
  for (int d = 0; d < 4; d++) off += c->at[d] * cs[d];
  return (uint64_t)off * j->elem;
}

static int load_chunk(void* ctx, const chunk* c) {
  xfer_job* j = (xfer_job*)ctx;
  const kvc_backend* b = j->st->backend;
  int64_t cs[4], full[4];
  compact_strides(c->shape, cs);
  compact_strides(j->shape, full);
  /* Gather the chunk (a sub-box of the compact region) into the stage, compact. */
  unsigned char* dst = j->st->host;
  size_t row = (size_t)(c->shape[3] * (int64_t)j->elem);
  for (int64_t h = 0; h < c->shape[1]; h++)
    for (int64_t s = 0; s < c->shape[2]; s++) {
      const chunk one = {{c->at[0], c->at[1] + h, c->at[2] + s, c->at[3]}, {1, 1, 1, c->shape[3]}};
      memcpy(dst, j->src + chunk_file_offset(j, &one), row);
      dst += row;
    }
  kvci_fault* f = &j->st->fault;
  if (kvci_fault_note(f, b, b->copy_4d(b->ctx, j->st->exec, chunk_base(j, c), j->strides, j->st->host, cs, c->shape,
                                       j->elem),
                      "copy_4d"))
    return -1;
  return kvci_fault_note(f, b, stage_wait(j->st), "read_f32_4d") ? -1 : 0; /* the stage is refilled next */
}

kvc_error* kvci_stage_error(const char* fn, kvci_stage* st, const char* what) {
  if (!st->fault.fresh) return kvci_err_oom();
  char unchanged[160];
  snprintf(unchanged, sizeof unchanged, "%s was not loaded", what);
  return kvci_fault_discard(fn, &st->fault, st->backend, unchanged);
}

void kvci_xfer_save(kvci_out* out, kvci_stage* st, const void* base, const int64_t strides[4],
                    const int64_t shape[4], size_t elem) {
  if (out->err || empty(shape)) return;
  if (!st->host) {
    WALK_RUNS(base, strides, shape, elem, kvci_out_bytes(out, at_, len_));
    return;
  }
  xfer_job j = {st, out, (unsigned char*)(uintptr_t)base, strides, shape, elem, NULL};
  each_chunk(shape, elem, st->bytes, save_chunk, &j);
}

int kvci_xfer_load(kvci_stage* st, void* base, const int64_t strides[4], const int64_t shape[4], size_t elem,
                   const unsigned char* src) {
  if (empty(shape)) return 0;
  if (!st->host) {
    const unsigned char* from = src;
    WALK_RUNS(base, strides, shape, elem, (memcpy(at_, from, len_), from += len_));
    return 0;
  }
  xfer_job j = {st, NULL, (unsigned char*)base, strides, shape, elem, src};
  return each_chunk(shape, elem, st->bytes, load_chunk, &j);
}

/* The region's bytes read from the file: straight into host memory, run by run, or through one buffer of the
 * region's size into device memory. The checksum runs over the bytes where they landed. */
static kvc_error* read_region(const char* fn, kvci_section_reader* r, kvci_stage* st, void* base,
                              const int64_t strides[4], const int64_t shape[4], size_t elem, uint64_t bytes) {
  const kvci_source* src = r->file->src;
  uint64_t from = r->section->offset + KVCF_SECTION_HEADER_BYTES + r->done;
  kvc_error* e = NULL;
  if (!st->host) {
    WALK_RUNS(base, strides, shape, elem,
              (e || (e = kvci_source_read_crc(src, from, at_, len_, &r->crc)) ? 0 : (from += len_, 0)));
    return e;
  }
  unsigned char* buf = (unsigned char*)malloc((size_t)bytes);
  if (!buf) return kvci_err_oom();
  if (!(e = kvci_source_read_crc(src, from, buf, (size_t)bytes, &r->crc))) {
    if (kvci_xfer_load(st, base, strides, shape, elem, buf))
      e = kvci_stage_error(fn, st, "the file");
  }
  free(buf);
  return e;
}

kvc_error* kvci_section_load(const char* fn, kvci_section_reader* r, kvci_stage* st, void* base,
                             const int64_t strides[4], const int64_t shape[4], size_t elem) {
  const kvci_file_section* s = r->section;
  uint64_t bytes = empty(shape) ? 0 : elem;
  for (int d = 0; d < 4 && bytes; d++) bytes *= (uint64_t)shape[d];
  if (bytes > s->h.payload_bytes - r->done) /* the loaders check sizes first: a bug, not a file */
    return kvci_err(KVC_ERROR_INTERNAL, "%s: section %zu has %llu bytes left, not the %llu asked for", fn,
                    (size_t)(s - r->file->sections), (unsigned long long)(s->h.payload_bytes - r->done),
                    (unsigned long long)bytes);
  kvc_error* e = NULL;
  if (s->payload) {
    const unsigned char* from = s->payload + r->done;
    r->crc = kvci_crc32c_update(r->crc, from, (size_t)bytes);
    if (kvci_xfer_load(st, base, strides, shape, elem, from))
      e = kvci_stage_error(fn, st, "the file");
  } else {
    e = read_region(fn, r, st, base, strides, shape, elem, bytes);
  }
  if (e) return e;
  r->done += bytes;
  return r->done == s->h.payload_bytes ? kvci_file_payload_checked(fn, r->file, s, r->crc) : NULL;
}
