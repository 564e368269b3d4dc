/*
 * bench/bench_tier.c: the pool's disk tier (docs/tiers.md) against its
 * roofline, a plain write/read of the same bytes in the same directory.
 *
 * A bfloat16 pool of one layer, 8 KV heads of dim 128 and 512-token blocks:
 * 2 MiB of K/V per block. Per repetition, alternated in one run:
 *   tier put    kvc_pool_commit of 16 blocks with a WRITE_ON_COMMIT disk
 *               tier (stage the block, frame it with its CRC-32C, write a
 *               temporary file, rename);
 *   plain write the same 16 framed values written to 16 files (open, write,
 *               close);
 *   tier get    a long-lived reader pool and tier on the directory,
 *               kvc_pool_match_prefix of the prompt: 16 blocks read
 *               straight into the pool's blocks and verified as they land;
 *   plain read  the 16 files read back (open, read, close).
 * The two tier rows are measured twice, keyless (CRC-32C frames) and with an
 * authentication key (HMAC-SHA256 frames, docs/tiers.md 'Authenticated
 * tiers'), each with its own writer and reader pools and prompts.
 * Neither side syncs, so both measure the page cache and the file system's
 * write path of this machine, which is what a tier costs between syncs.
 * Like with like: the plain read goes into one buffer touched by earlier
 * repetitions, and the reader pool's blocks are touched by earlier
 * repetitions too (repetition 0 is not counted), so neither side pays first-
 * touch page faults; a get also hashes the prompt, looks its blocks up and
 * checks each value's CRC-32C, which the plain read does not. The
 * get_over_plain_read_cpu row is the same ratio in thread CPU time (both
 * sides are CPU work out of the page cache), less disturbed by other load.
 * The directory is made next to the results file (a real disk in `make
 * bench`'s build folder; /tmp may be memory) and removed afterwards.
 */
#include "bench_common.h"

#include <fcntl.h>
#include <unistd.h>

#define _BENCH_DIR_TEMPLATE "tier-bench-XXXXXX"
enum { HEADS = 8, DIM = 128, BLOCK = 512, NBLOCKS = 16 };
#define BLOCK_BYTES ((size_t)2 * BLOCK * HEADS * DIM * 2) /* K and V, bfloat16 */
#define FRAME_BYTES (BLOCK_BYTES + 100)                   /* docs/tiers.md: header 96, CRC 4 */
#define TOKENS (NBLOCKS * BLOCK + 1)

char* mkdtemp(char* template); /* POSIX 2008, not in the C11 headers under _POSIX_C_SOURCE alone */

static const uint8_t AUTH_KEY[32] = "bench_tier's authentication key";

/* A pool with a disk tier on `dir`; `keyed`: with AUTH_KEY. */
static kvc_pool* make_pool(const char* dir, uint64_t max_bytes, int keyed) {
  kvc_pool_group_options g = KVC_POOL_GROUP_OPTIONS_INIT;
  g.block_size = BLOCK;
  g.num_blocks = NBLOCKS + 2;
  kvc_pool_layer_options l = KVC_POOL_LAYER_OPTIONS_INIT;
  l.num_kv_heads = HEADS;
  l.key_head_dim = DIM;
  kvc_pool_options o;
  kvc_pool_options_init(&o);
  o.dtype = KVC_DTYPE_BFLOAT16;
  o.num_groups = 1;
  o.groups = &g;
  o.num_layers = 1;
  o.layers = &l;
  kvc_pool* p = NULL;
  bench_check(kvc_pool_create(&o, &p), "kvc_pool_create");
  kvc_disk_tier_options d = KVC_DISK_TIER_OPTIONS_INIT;
  d.directory = dir;
  d.max_bytes = max_bytes;
  d.auth_key = keyed ? AUTH_KEY : NULL;
  d.auth_key_len = keyed ? sizeof AUTH_KEY : 0;
  kvc_tier* t = NULL;
  bench_check(kvc_disk_tier_create(&d, &t), "kvc_disk_tier_create");
  bench_check(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT), "kvc_pool_add_tier");
  return p;
}

static void remove_tree(const char* dir) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%.1100s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_tier: could not remove %s\n", dir);
}

static double seconds_since(double t0) { return (bench_now_ns() - t0) * 1e-9; }

static void plain_path(char* out, size_t size, const char* dir, int i) {
  snprintf(out, size, "%.1000s/plain-%02d.bin", dir, i);
}

static double plain_write(const char* dir, const uint8_t* bytes) {
  char path[1100];
  double t0 = bench_now_ns();
  for (int i = 0; i < NBLOCKS; i++) {
    plain_path(path, sizeof path, dir, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, bytes + (size_t)i * FRAME_BYTES, FRAME_BYTES) != (ssize_t)FRAME_BYTES || close(fd)) {
      fprintf(stderr, "bench_tier: plain write of %s failed\n", path);
      exit(1);
    }
  }
  return seconds_since(t0);
}

static double plain_read(const char* dir, uint8_t* bytes, double* cpu_s) {
  char path[1100];
  double c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
  for (int i = 0; i < NBLOCKS; i++) {
    plain_path(path, sizeof path, dir, i);
    int fd = open(path, O_RDONLY);
    if (fd < 0 || read(fd, bytes + (size_t)i * FRAME_BYTES, FRAME_BYTES) != (ssize_t)FRAME_BYTES || close(fd)) {
      fprintf(stderr, "bench_tier: plain read of %s failed\n", path);
      exit(1);
    }
  }
  double wall = seconds_since(t0);
  *cpu_s = (bench_thread_cpu_ns() - c0) * 1e-9;
  return wall;
}

/* A sequence of the prompt computed but not committed (the commit is what a put costs). */
static kvc_pool_sequence* prefill(kvc_pool* p, const int32_t* tok, uint16_t* kv) {
  kvc_pool_sequence* s = NULL;
  bench_check(kvc_pool_sequence_create(p, NULL, &s), "sequence");
  int64_t* slots = bench_alloc(TOKENS * sizeof(int64_t));
  bench_check(kvc_pool_reserve(s, tok, TOKENS, slots), "reserve");
  int64_t shape[3] = {TOKENS, HEADS, DIM};
  kvc_tensor k = bench_tensor_bf16(kv, shape), v = bench_tensor_bf16(kv + (size_t)TOKENS * HEADS * DIM, shape);
  k.ndim = v.ndim = 3; /* the pool writes [tokens, heads, dim] */
  bench_check(kvc_pool_write(p, &k, &v, 1, slots, TOKENS), "write");
  free(slots);
  return s;
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 9;
  static bench_results res;
  char dir[1000];
  const char* slash = strrchr(args.json_path, '/');
  int base = slash ? (int)(slash - args.json_path) : 0;
  if (base > 900) base = 900;
  snprintf(dir, sizeof dir, "%.*s%s" _BENCH_DIR_TEMPLATE, base, args.json_path, slash ? "/" : "");
  if (bench_make_parent_dirs(dir) != 0 || !mkdtemp(dir)) {
    fprintf(stderr, "bench_tier: cannot make a directory like %s\n", dir);
    return 1;
  }
  printf("bench_tier: kvcache %s, disk tier in %s, %d blocks of %.1f MiB, %d alternated repetitions\n",
         kvc_version_string(), dir, NBLOCKS, BLOCK_BYTES / 1048576.0, reps);
  int32_t* tok = bench_alloc(TOKENS * sizeof(int32_t));
  for (int i = 0; i < TOKENS; i++) tok[i] = (int32_t)(i * 7919 % 50000);
  uint16_t* kv = bench_alloc((size_t)2 * TOKENS * HEADS * DIM * sizeof(uint16_t));
  bench_fill_bf16(kv, (size_t)2 * TOKENS * HEADS * DIM, 42);
  uint8_t* plain = bench_alloc((size_t)NBLOCKS * FRAME_BYTES);
  memset(plain, 0x5a, (size_t)NBLOCKS * FRAME_BYTES);
  double *put = bench_alloc(reps * sizeof(double)), *get = bench_alloc(reps * sizeof(double));
  double *pw = bench_alloc(reps * sizeof(double)), *pr = bench_alloc(reps * sizeof(double));
  double *put_mac = bench_alloc(reps * sizeof(double)), *get_mac = bench_alloc(reps * sizeof(double));
  double *get_cpu = bench_alloc(reps * sizeof(double)), *pr_cpu = bench_alloc(reps * sizeof(double));
  /* Two long-lived pools on one tier directory, as two serving processes would be: `writer` computes and
     commits a new prompt per repetition (its blocks go to disk), `reader` matches it (they come back). Repetition
     0 is a warm-up (page faults of fresh pool and staging memory are a one-time cost), not counted. */
  /* The writer's limit keeps two prompts: it deletes the older one's files as the plain write overwrites its
     own, so both leave the same amount of data for the kernel to write back. */
  /* [0]: keyless, [1]: keyed; their files differ in name (other prompts) and never replace each other's. */
  kvc_pool* writers[2] = {make_pool(dir, 2 * (uint64_t)NBLOCKS * FRAME_BYTES, 0),
                          make_pool(dir, 2 * (uint64_t)NBLOCKS * (FRAME_BYTES + 28), 1)};
  kvc_pool* readers[2] = {make_pool(dir, 0, 0), make_pool(dir, 0, 1)};
  for (int rm = -2; rm < 2 * reps; rm++) {
    int r = rm < 0 ? -1 : rm / 2, keyed = (rm + 2) % 2;
    kvc_pool *writer = writers[keyed], *reader = readers[keyed];
    for (int i = 0; i < TOKENS; i++) tok[i] = (int32_t)((i * 7919 + (r + 2) * 104729 + keyed * 31) % 50000);
    kvc_pool_sequence* s = prefill(writer, tok, kv);
    kvc_tier_stats before = {sizeof before, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, after = before;
    bench_check(kvc_tier_stats_get(kvc_pool_tier(writer, 0), &before), "stats");
    double t0 = bench_now_ns();
    bench_check(kvc_pool_commit(s), "commit");
    double put_s = seconds_since(t0);
    bench_check(kvc_tier_stats_get(kvc_pool_tier(writer, 0), &after), "stats");
    kvc_pool_sequence_destroy(s);
    if (after.puts - before.puts != NBLOCKS) {
      fprintf(stderr, "bench_tier: %llu blocks stored, not %d\n", (unsigned long long)(after.puts - before.puts),
              NBLOCKS);
      return 1;
    }
    double pw_s = keyed ? 0 : plain_write(dir, plain);

    bench_check(kvc_pool_sequence_create(reader, NULL, &s), "sequence");
    uint64_t matched = 0;
    double c0 = bench_thread_cpu_ns();
    t0 = bench_now_ns();
    bench_check(kvc_pool_match_prefix(s, tok, TOKENS, &matched), "match_prefix");
    double get_s = seconds_since(t0), get_cpu_s = (bench_thread_cpu_ns() - c0) * 1e-9, pr_cpu_s = 0;
    kvc_pool_sequence_destroy(s);
    if (matched != (uint64_t)NBLOCKS * BLOCK) {
      fprintf(stderr, "bench_tier: matched %llu tokens from disk, not %d\n", (unsigned long long)matched,
              NBLOCKS * BLOCK);
      return 1;
    }
    double pr_s = keyed ? 0 : plain_read(dir, plain, &pr_cpu_s);
    if (r >= 0 && keyed) put_mac[r] = put_s, get_mac[r] = get_s;
    if (r >= 0 && !keyed) put[r] = put_s, pw[r] = pw_s, get[r] = get_s, pr[r] = pr_s;
    if (r >= 0 && !keyed) get_cpu[r] = get_cpu_s, pr_cpu[r] = pr_cpu_s;
  }
  for (int m = 0; m < 2; m++) kvc_pool_destroy(writers[m]), kvc_pool_destroy(readers[m]);
  double bytes = (double)NBLOCKS * FRAME_BYTES;
  const struct {
    const char* impl;
    const char* metric;
    double* v;
  } rows[6] = {{"kvcache", "put_2MiB_GBps", put},          {"plain", "write_2MiB_GBps", pw},
               {"kvcache", "get_2MiB_GBps", get},          {"plain", "read_2MiB_GBps", pr},
               {"kvcache-hmac", "put_2MiB_GBps", put_mac}, {"kvcache-hmac", "get_2MiB_GBps", get_mac}};
  double med[6];
  for (int i = 0; i < 6; i++) {
    bench_stats s = bench_summarize(rows[i].v, (size_t)reps);
    med[i] = bytes / s.median * 1e-9;
    printf("  %-8s %-16s %7.2f GB/s (median of %d; best %.2f, worst %.2f)\n", rows[i].impl, rows[i].metric, med[i],
           reps, bytes / s.min * 1e-9, bytes / s.max * 1e-9);
    bench_add(&res, "tier_disk", rows[i].impl, rows[i].metric, med[i], "GB/s");
  }
  printf("  tier put / plain write: %.2f; tier get / plain read: %.2f\n", med[0] / med[1], med[2] / med[3]);
  bench_add(&res, "tier_disk", "kvcache", "put_over_plain_write", med[0] / med[1], "ratio");
  bench_add(&res, "tier_disk", "kvcache", "get_over_plain_read", med[2] / med[3], "ratio");
  /* Both sides run in this thread out of the page cache: their CPU times, less disturbed by a loaded machine. */
  double cpu_ratio = bench_summarize(pr_cpu, (size_t)reps).median / bench_summarize(get_cpu, (size_t)reps).median;
  printf("  tier get / plain read in thread CPU time: %.2f\n", cpu_ratio);
  bench_add(&res, "tier_disk", "kvcache", "get_over_plain_read_cpu", cpu_ratio, "ratio");
  printf("  keyed / keyless tier: put %.2f, get %.2f\n", med[4] / med[0], med[5] / med[2]);
  bench_add(&res, "tier_disk", "kvcache-hmac", "put_over_keyless", med[4] / med[0], "ratio");
  bench_add(&res, "tier_disk", "kvcache-hmac", "get_over_keyless", med[5] / med[2], "ratio");
  remove_tree(dir);
  bench_write_json(args.json_path, &res);
  return 0;
}
