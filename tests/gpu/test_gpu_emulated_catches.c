/*
 * tests/gpu/test_gpu_emulated_catches.c: the emulated device's checks fire.
 *
 * The cross-backend tests rely on the emulated device to stop the process
 * when the core dereferences device memory or breaks the backend contract.
 * Each case here breaks one rule on purpose, in a child process, and checks
 * that the child died and (for contract rules) said which rule: a checker
 * that never fires would let every other emulated test pass for nothing.
 */
#define _POSIX_C_SOURCE 200809L /* fork, pipe, strsignal under -std=c11 */
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "emulated_probe.h"
#include "gpu_test_util.h"

static const kvc_backend* be;

static void open_place(kvc_exec* place, int device) {
  memset(place, 0, sizeof *place);
  place->device_id = device;
  if (be->exec_open(be->ctx, place)) _exit(3);
}

static const int64_t compact[4] = {64, 64, 8, 1}; /* [1, 1, 8, 8] */
static const int64_t block[4] = {1, 1, 8, 8};

static void deref_device_memory(void) {
  kvc_exec place;
  open_place(&place, 0);
  volatile const char* p = (volatile const char*)be->alloc_zeroed(be->ctx, &place, 64);
  printf("read %d\n", p[3]); /* what a core bug would do */
}

static void batch_writes_twice(void) {
  kvc_exec place;
  open_place(&place, 0);
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 256);
  char* src = (char*)be->alloc_zeroed(be->ctx, &place, 256);
  kvc_copy_4d c[2];
  for (int i = 0; i < 2; i++) {
    memset(&c[i], 0, sizeof c[i]);
    c[i].dst = dst + 16 * i; /* the second copy's first row overlaps the first copy's second */
    c[i].src = src;
    memcpy(c[i].dst_strides, compact, sizeof compact);
    memcpy(c[i].src_strides, compact, sizeof compact);
    memcpy(c[i].shape, block, sizeof block);
    c[i].elem_size = 2;
  }
  be->copy_4d_batch(be->ctx, &place, c, 2);
}

static void rows_written_twice(void) {
  kvc_exec place;
  open_place(&place, 0);
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 4 * 64);
  char* src = (char*)be->alloc_zeroed(be->ctx, &place, 4 * 64);
  const int64_t dst_rows[2] = {1, 1}, src_rows[2] = {0, 2};
  be->copy_rows(be->ctx, &place, dst, compact, dst_rows, src, compact, src_rows, 2, block, 1);
}

/* Two jobs of one copy_rows_batch, as a pool's step write makes them: rows of [1, 1, 1, 8] 2-byte elements. */
static void rows_batch_of_two(const kvc_exec* place, char* dst, char* src, const int64_t* dst_rows[2],
                              const int64_t* src_rows[2], char* second_dst, char* second_src) {
  kvc_copy_rows_job j[2];
  memset(j, 0, sizeof j);
  const int64_t st[4] = {8, 8, 8, 1}, row[4] = {1, 1, 1, 8};
  for (int i = 0; i < 2; i++) {
    j[i].dst = i ? second_dst : dst;
    j[i].src = i ? second_src : src;
    j[i].dst_rows = dst_rows[i];
    j[i].src_rows = src_rows[i];
    j[i].count = 2;
    j[i].elem_size = 2;
    memcpy(j[i].dst_strides, st, sizeof st);
    memcpy(j[i].src_strides, st, sizeof st);
    memcpy(j[i].row_shape, row, sizeof row);
  }
  be->copy_rows_batch(be->ctx, place, j, 2);
}

/* Two jobs (the K of two layers, say) given the same storage: row 3 is written by both. */
static void rows_batch_writes_twice(void) {
  kvc_exec place;
  open_place(&place, 0);
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 8 * 16);
  char* src = (char*)be->alloc_zeroed(be->ctx, &place, 8 * 16);
  const int64_t a[2] = {1, 3}, b[2] = {3, 5}, t[2] = {0, 1};
  const int64_t* dr[2] = {a, b};
  const int64_t* sr[2] = {t, t};
  rows_batch_of_two(&place, dst, src, dr, sr, dst, src);
}

/* The second job reads what the first writes: on a GPU the two race. */
static void rows_batch_reads_a_write(void) {
  kvc_exec place;
  open_place(&place, 0);
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 8 * 16);
  char* src = (char*)be->alloc_zeroed(be->ctx, &place, 8 * 16);
  char* other = (char*)be->alloc_zeroed(be->ctx, &place, 8 * 16);
  const int64_t a[2] = {1, 3}, t[2] = {0, 1}, u[2] = {3, 4};
  const int64_t* dr[2] = {a, t};
  const int64_t* sr[2] = {t, u};
  rows_batch_of_two(&place, dst, src, dr, sr, other, dst);
}

/* Index arrays in device memory: the contract passes them in host memory (the backend packs them itself). */
static void rows_batch_device_indices(void) {
  kvc_exec place;
  open_place(&place, 0);
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 8 * 16);
  char* src = (char*)be->alloc_zeroed(be->ctx, &place, 8 * 16);
  const int64_t* on_device = (const int64_t*)be->alloc_zeroed(be->ctx, &place, 16);
  const int64_t t[2] = {0, 1};
  const int64_t* dr[2] = {t, on_device};
  const int64_t* sr[2] = {t, t};
  rows_batch_of_two(&place, dst, src, dr, sr, dst + 64, src);
}

static void transposed_overlap(void) {
  kvc_exec place;
  open_place(&place, 0);
  char* buf = (char*)be->alloc_zeroed(be->ctx, &place, 64 * 4);
  const int64_t transposed[4] = {64, 64, 1, 8};
  be->copy_4d(be->ctx, &place, buf, compact, buf, transposed, block, 4);
}

static void freed_twice(void) {
  kvc_exec place;
  open_place(&place, 0);
  void* p = be->alloc_zeroed(be->ctx, &place, 64);
  be->free(be->ctx, &place, p);
  be->free(be->ctx, &place, p);
}

static void wrong_free(void) {
  kvc_exec place;
  open_place(&place, 0);
  be->free(be->ctx, &place, be->host_alloc_zeroed(be->ctx, &place, 64));
}

static void unopened_place(void) {
  kvc_exec place = {0, NULL, NULL};
  be->alloc_zeroed(be->ctx, &place, 64);
}

static void past_the_end(void) {
  kvc_exec place;
  open_place(&place, 0);
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 64 * 2 - 1);
  be->fill_zero_4d(be->ctx, &place, dst, compact, block, 2);
}

static void other_device(void) {
  kvc_exec zero, one;
  open_place(&zero, 0);
  open_place(&one, 1);
  void* p = be->alloc_zeroed(be->ctx, &one, 128);
  be->fill_zero_4d(be->ctx, &zero, p, compact, block, 2);
}

static void read_before_tier_wait(void) {
  kvc_exec place;
  open_place(&place, 0);
  void* host = be->host_alloc_zeroed(be->ctx, &place, 128);
  void* dev = be->alloc_zeroed(be->ctx, &place, 128);
  void* other = be->alloc_zeroed(be->ctx, &place, 128);
  be->copy_tier_4d(be->ctx, &place, 0, dev, compact, host, compact, block, 2);
  be->copy_4d(be->ctx, &place, other, compact, dev, compact, block, 2); /* no tier_wait in between */
}

static void prefetch_reversed(void) {
  kvc_exec place;
  open_place(&place, 0);
  void* host = be->host_alloc_zeroed(be->ctx, &place, 128);
  void* dev = be->alloc_zeroed(be->ctx, &place, 128);
  be->copy_tier_4d(be->ctx, &place, 0, host, compact, dev, compact, block, 2);
}

/*
 * The copy_rows of the real-GPU failure (an H200 run, compute-sanitizer:
 * 8-byte loads at 4-byte aligned addresses): float32 rows of 2 values,
 * batch rows 3 values apart. Row 0 alone moves as 8-byte units; rows 1 and
 * 2 start 12 and 24 bytes further. Planned the old way (row 0 alone), the
 * alignment check must stop it.
 */
static void rows_planned_blind(void) {
  kvc_exec place;
  open_place(&place, 0);
  const int64_t st[4] = {3, 2, 2, 1}, row[4] = {1, 1, 1, 2}, dst_rows[2] = {0, 2}, src_rows[2] = {1, 2};
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 3 * 3 * 4);
  char* src = (char*)be->alloc_zeroed(be->ctx, &place, 3 * 3 * 4);
  setenv(KVC_EMULATED_BLIND_ROWS_PLAN_ENV, "1", 1);
  be->copy_rows(be->ctx, &place, dst, st, dst_rows, src, st, src_rows, 2, row, 4);
}

/* Every other kernel's check: a 16-byte unit forged onto copies 4 bytes off a 16-byte boundary. */
static void forged_unit(void (*issue)(const kvc_exec* place, char* dst, char* src, char* host)) {
  kvc_exec place;
  open_place(&place, 0);
  char* dst = (char*)be->alloc_zeroed(be->ctx, &place, 256);
  char* src = (char*)be->alloc_zeroed(be->ctx, &place, 256);
  char* host = (char*)be->host_alloc_zeroed(be->ctx, &place, 256);
  setenv(KVC_EMULATED_FORGE_UNIT_ENV, "16", 1);
  issue(&place, dst + 4, src + 4, host + 4);
}

static void copy_4d_forged(const kvc_exec* place, char* dst, char* src, char* host) {
  (void)host;
  be->copy_4d(be->ctx, place, dst, compact, src, compact, block, 2);
}
static void move_forged(const kvc_exec* place, char* dst, char* src, char* host) {
  (void)src;
  (void)host;
  const int64_t seven[4] = {1, 1, 7, 8};
  be->copy_4d(be->ctx, place, dst + 16, compact, dst, compact, seven, 2); /* a seq move by one row */
}
static void fill_forged(const kvc_exec* place, char* dst, char* src, char* host) {
  (void)src;
  (void)host;
  be->fill_zero_4d(be->ctx, place, dst, compact, block, 2);
}
static void batch_forged(const kvc_exec* place, char* dst, char* src, char* host) {
  (void)host;
  kvc_copy_4d c;
  memset(&c, 0, sizeof c);
  c.dst = dst;
  c.src = src;
  memcpy(c.dst_strides, compact, sizeof compact);
  memcpy(c.src_strides, compact, sizeof compact);
  memcpy(c.shape, block, sizeof block);
  c.elem_size = 2;
  be->copy_4d_batch(be->ctx, place, &c, 1);
}
static void tier_forged(const kvc_exec* place, char* dst, char* src, char* host) {
  (void)src;
  be->copy_tier_4d(be->ctx, place, 1, host, compact, dst, compact, block, 2);
}
static void rows_batch_forged(const kvc_exec* place, char* dst, char* src, char* host) {
  (void)host;
  const int64_t d[2] = {0, 1}, r[2] = {1, 0};
  const int64_t* dr[2] = {d, r};
  const int64_t* sr[2] = {r, d};
  rows_batch_of_two(place, dst, src, dr, sr, dst + 64, src + 64);
}
static void copy_4d_unit_forged(void) { forged_unit(copy_4d_forged); }
static void rows_batch_unit_forged(void) { forged_unit(rows_batch_forged); }
static void move_unit_forged(void) { forged_unit(move_forged); }
static void fill_unit_forged(void) { forged_unit(fill_forged); }
static void batch_unit_forged(void) { forged_unit(batch_forged); }
static void tier_unit_forged(void) { forged_unit(tier_forged); }

typedef struct rule {
  const char* name;
  void (*breaks)(void);
  const char* says; /* NULL: a fault, whatever it prints */
} rule;

static const rule rules[] = {
    {"device memory dereferenced", deref_device_memory, NULL},
    {"copies of a batch write the same bytes", batch_writes_twice, "write some destination bytes twice"},
    {"copy_rows writes a row twice", rows_written_twice, "repeated dst row"},
    {"an overlapping copy that is no seq move", transposed_overlap, "not a move along the seq axis"},
    {"a buffer freed twice", freed_twice, "freed twice"},
    {"a host-tier buffer given to free", wrong_free, "release it with host_free"},
    {"a place exec_open did not prepare", unopened_place, "not prepared by exec_open"},
    {"a region past the end of its buffer", past_the_end, "outside its buffer"},
    {"memory of device 1 on a place of device 0", other_device, "memory of device 1"},
    {"a prefetched buffer read before tier_wait", read_before_tier_wait, "must come after tier_wait"},
    {"a prefetch from device to host tier", prefetch_reversed, "copies from a device buffer to a host-tier buffer"},
    {"copy_rows planned blind to its row strides", rows_planned_blind,
     "copy_rows: the rows kernel: misaligned plan: access 0 of the kernel is a 8-byte unit at src address"},
    {"copy_4d with a forged 16-byte unit", copy_4d_unit_forged, "copy_4d: the copy kernel: misaligned plan"},
    {"a seq move with a forged 16-byte unit", move_unit_forged, "copy_4d: the move kernel: misaligned plan"},
    {"fill_zero_4d with a forged 16-byte unit", fill_unit_forged, "fill_zero_4d: the fill kernel: misaligned plan"},
    {"copy_4d_batch with a forged 16-byte unit", batch_unit_forged, "copy_4d_batch: the batch kernel: misaligned plan"},
    {"an offload with a forged 16-byte unit", tier_unit_forged, "copy_tier_4d(offload): the copy kernel: misaligned"},
    {"jobs of a rows batch write the same row", rows_batch_writes_twice, "jobs write some destination bytes twice"},
    {"a rows batch job reads another's destination", rows_batch_reads_a_write,
     "a destination row overlaps a source row of the same batch"},
    {"a rows batch's index array in device memory", rows_batch_device_indices,
     "index arrays are device memory; the contract passes them in host memory"},
    {"copy_rows_batch with a forged 16-byte unit", rows_batch_unit_forged,
     "copy_rows_batch: the rows batch kernel: misaligned plan"},
};

static void check_rule(const rule* r) {
  int out[2];
  REQUIRE(pipe(out) == 0);
  fflush(NULL);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(out[1], 2);
    dup2(out[1], 1);
    close(out[0]);
    r->breaks();
    _exit(0); /* the rule was broken and nothing stopped it */
  }
  close(out[1]);
  /* Read to the end (a long report must not block the child), keep the start. */
  char said[16384], rest[4096];
  size_t n = 0;
  ssize_t got;
  while ((got = read(out[0], n < sizeof said - 1 ? said + n : rest,
                     n < sizeof said - 1 ? sizeof said - 1 - n : sizeof rest)) > 0)
    if (n < sizeof said - 1) n += (size_t)got;
  said[n] = 0;
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  int stopped = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
  int named = !r->says || strstr(said, r->says) != NULL;
  char what[160];
  snprintf(what, sizeof what, "%s: the process is stopped%s", r->name, r->says ? " with the rule named" : "");
  if (!tu_report(stopped && named, __FILE__, __LINE__, what))
    fprintf(stderr, "  child %s %d; it said:\n%s\n", WIFSIGNALED(status) ? "died of signal" : "exited with",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), said);
  else
    printf("  %s: stopped (%s)\n", r->name,
           WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exit status, sanitizer report");
}

static void test_every_rule_fires(void) {
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) check_rule(&rules[i]);
}

int main(void) {
  gt_open_or_skip("test_gpu_emulated_catches");
  be = emulated_probe_backend();
  if (drt_device_count() < 2) {
    printf("FAILED: these cases need 2 emulated devices (%s=2)\n", KVC_EMULATED_DEVICES_ENV);
    return 1;
  }
  TU_RUN(test_every_rule_fires);
  return tu_finish();
}
