/*
 * bench_persist: cache files (kvcache/persist.h) against the disk. A
 * Llama-3-8B-shaped DynamicCache (32 layers, 8 KV heads, head_dim 128,
 * bfloat16, batch 1) holding --context tokens (8192 by default: 1 GiB of
 * K/V) is saved and restored, and the same number of bytes is written and
 * read with plain write(2)/read(2) in 8 MiB chunks to the same directory, in
 * the same run: the disk's sequential bandwidth, the roofline. The four
 * measurements alternate within each repetition; medians are reported.
 *
 * Both sides are timed to stable storage and from the disk: a write
 * includes fsync, and before every read the file is dropped from the page
 * cache (fsync, then posix_fadvise DONTNEED), so a read comes from the disk
 * (unless the filesystem is a RAM disk, which the rows then show). The
 * *_cached rows repeat both reads with the file left in the page cache: the
 * disk out of the way, restore's own cost (reading the file into memory,
 * checking it, building the cache) against a plain read(2), which is a
 * memcpy out of the page cache.
 *
 * Like with like: the plain reads go into one buffer touched before the
 * timing (the roofline: a copy). A restore builds the new cache aside (the
 * target is left unchanged when the file turns out bad); its stores are the
 * memory the previous restore freed, which the library keeps for reuse
 * (kvc_host_memory_* in kvcache/allocator.h), so from the second repetition
 * on it writes into touched memory too. The acceptance ratios keep the
 * touched buffer as the baseline. restore_cached_first is the first restore
 * of a process instead: kept memory released before it, its stores fresh
 * (faulted in and zeroed by the kernel on first touch); it and the cached
 * restore are also compared with a plain read into a buffer allocated for it
 * (*_over_plain_read_fresh: what reading a file into new memory costs). The
 * *_cpu rows are the cached ratios in thread CPU time (the page-cache rows
 * are all CPU work), which a loaded machine disturbs less than wall time.
 *
 * The directory is $KVC_BENCH_PERSIST_DIR, else the results file's.
 */
#include "bench_common.h" /* first: it sets _POSIX_C_SOURCE (fsync, posix_fadvise) */

#include <fcntl.h>
#include <unistd.h>

#define LAYERS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define CHUNK ((size_t)8 << 20)

static void die(const char* what, const char* path) {
  fprintf(stderr, "bench_persist: %s %s: %s\n", what, path, strerror(errno));
  exit(1);
}

/* fsync, then evict the file from the page cache, so the next read comes from the disk. */
static void sync_and_drop(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("cannot open", path);
  if (fsync(fd)) die("cannot fsync", path);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* Moves `bytes` between the file and `data` in CHUNK-sized write(2) or read(2) calls. */
static void move_all(int fd, const char* path, unsigned char* data, size_t bytes, int writing) {
  for (size_t at = 0; at < bytes;) {
    size_t n = bytes - at < CHUNK ? bytes - at : CHUNK;
    ssize_t k = writing ? write(fd, data + at, n) : read(fd, data + at, n);
    if (k <= 0) die(writing ? "cannot write" : "cannot read", path);
    at += (size_t)k;
  }
}

static double plain_write(const char* path, unsigned char* data, size_t bytes) {
  unlink(path); /* both sides write a new file: freeing the old one's blocks is not timed */
  double t0 = bench_now_ns();
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die("cannot create", path);
  move_all(fd, path, data, bytes, 1);
  if (fsync(fd)) die("cannot fsync", path);
  close(fd);
  return bench_now_ns() - t0;
}

/* `data` NULL: into a buffer allocated for the read (fresh pages), freed afterwards; *cpu: thread CPU time. */
static double plain_read(const char* path, unsigned char* data, size_t bytes, int cached, double* cpu) {
  if (!cached) sync_and_drop(path);
  double c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
  unsigned char* into = data ? data : malloc(bytes);
  if (!into) die("cannot allocate a buffer for", path);
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("cannot open", path);
  move_all(fd, path, into, bytes, 0);
  close(fd);
  if (!data) free(into);
  double t = bench_now_ns() - t0;
  if (cpu) *cpu = bench_thread_cpu_ns() - c0;
  return t;
}

static double timed_save(const kvc_cache* c, const char* path) {
  unlink(path);
  double t0 = bench_now_ns();
  bench_check(kvc_cache_save(c, path, NULL), "kvc_cache_save");
  int fd = open(path, O_RDONLY);
  if (fd < 0 || fsync(fd)) die("cannot fsync", path);
  close(fd);
  return bench_now_ns() - t0;
}

/* cached 2: from the page cache into fresh memory (what the library kept for reuse released first). */
static double timed_restore(kvc_cache* c, const char* path, int cached, double* cpu) {
  if (!cached) sync_and_drop(path);
  if (cached == 2) kvc_host_memory_release();
  double c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
  bench_check(kvc_cache_restore(c, path), "kvc_cache_restore");
  double t = bench_now_ns() - t0;
  if (cpu) *cpu = bench_thread_cpu_ns() - c0;
  return t;
}

static kvc_cache* make_cache(int64_t context) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = LAYERS;
  kvc_cache_options opt = KVC_CACHE_OPTIONS_INIT;
  opt.config = &cfg;
  kvc_cache* cache = NULL;
  bench_check(kvc_cache_create(&opt, &cache), "kvc_cache_create");
  bench_check(kvc_cache_reserve(cache, context), "kvc_cache_reserve"); /* the store is sized to the context */
  size_t elems = (size_t)KV_HEADS * (size_t)context * HEAD_DIM;
  uint16_t* k = bench_alloc(elems * sizeof(uint16_t));
  uint16_t* v = bench_alloc(elems * sizeof(uint16_t));
  int64_t shape[4] = {1, KV_HEADS, context, HEAD_DIM};
  for (int l = 0; l < LAYERS; l++) {
    bench_fill_bf16(k, elems, 31 + (uint64_t)l);
    bench_fill_bf16(v, elems, 67 + (uint64_t)l);
    kvc_tensor kt = bench_tensor_bf16(k, shape), vt = bench_tensor_bf16(v, shape);
    bench_check(kvc_cache_update(cache, (uint32_t)l, &kt, &vt, NULL, NULL), "prefill");
  }
  free(k);
  free(v);
  return cache;
}

static off_t file_size(const char* path) {
  struct stat st;
  if (stat(path, &st)) die("cannot stat", path);
  return st.st_size;
}

int main(int argc, char** argv) {
  bench_args a = bench_parse_args(argc, argv);
  int64_t context = a.context ? a.context : 8192;
  int reps = a.reps ? a.reps : 5; /* each repetition moves 6 GiB at the default size */
  const char* dir_env = getenv("KVC_BENCH_PERSIST_DIR");
  char dir[512], file[600], plain[600];
  if (dir_env && *dir_env) {
    snprintf(dir, sizeof dir, "%s", dir_env);
  } else {
    snprintf(dir, sizeof dir, "%s", a.json_path);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = '\0'; else snprintf(dir, sizeof dir, ".");
  }
  bench_make_parent_dirs(a.json_path);
  snprintf(file, sizeof file, "%s/bench_persist.kvc", dir);
  snprintf(plain, sizeof plain, "%s/bench_persist.plain", dir);

  kvc_cache* cache = make_cache(context);
  kvc_cache* target = make_cache(1); /* restored into: same fingerprint once it holds data */
  timed_save(cache, file);
  size_t bytes = (size_t)file_size(file);
  unsigned char* buffer = bench_alloc(bytes);
  memset(buffer, 0x5A, bytes);
  enum { MEASUREMENTS = 8, CPU_ROWS = 3 };
  double *t[MEASUREMENTS], *cpu[CPU_ROWS]; /* cpu: thread CPU time of measurements 4, 5 and 6 */
  for (int m = 0; m < MEASUREMENTS; m++) t[m] = bench_alloc(sizeof(double) * (size_t)reps);
  for (int m = 0; m < CPU_ROWS; m++) cpu[m] = bench_alloc(sizeof(double) * (size_t)reps);
  for (int r = 0; r < reps; r++) { /* alternated: a slow phase of the disk hits both sides */
    t[0][r] = plain_write(plain, buffer, bytes);
    t[1][r] = timed_save(cache, file);
    t[2][r] = plain_read(plain, buffer, bytes, 0, NULL);
    t[3][r] = timed_restore(target, file, 0, NULL);
    t[4][r] = plain_read(plain, buffer, bytes, 1, &cpu[0][r]); /* read just now: in the page cache */
    t[5][r] = timed_restore(target, file, 1, &cpu[1][r]);
    t[6][r] = plain_read(plain, NULL, bytes, 1, &cpu[2][r]); /* into fresh memory */
    t[7][r] = timed_restore(target, file, 2, NULL);
  }
  static const char* names[MEASUREMENTS] = {"plain_write",       "save",           "plain_read",
                                            "restore",           "plain_read_cached", "restore_cached",
                                            "plain_read_cached_fresh", "restore_cached_first"};
  double gbps[MEASUREMENTS];
  bench_results res = {0};
  printf("file: %s, %.1f MiB (%lld tokens of %d layers), %d repetitions\n", file, bytes / 1048576.0,
         (long long)context, LAYERS, reps);
  for (int m = 0; m < MEASUREMENTS; m++) {
    bench_stats s = bench_summarize(t[m], (size_t)reps);
    gbps[m] = (double)bytes / s.median;
    printf("  %-17s median %8.1f ms  %6.2f GB/s (min %.1f ms, max %.1f ms)\n", names[m], s.median / 1e6, gbps[m],
           s.min / 1e6, s.max / 1e6);
    char metric[64];
    snprintf(metric, sizeof metric, "%s_gbps", names[m]);
    bench_add(&res, "persist", m % 2 == 0 ? "plain-io" : "kvcache-c", metric, gbps[m], "GB/s");
  }
  double cpu_med[CPU_ROWS];
  for (int m = 0; m < CPU_ROWS; m++) cpu_med[m] = bench_summarize(cpu[m], (size_t)reps).median;
  printf("  save / plain write %.2f, restore / plain read %.2f, cached: restore / plain read %.2f"
         " (CPU time %.2f), restore / plain read into fresh memory %.2f (CPU time %.2f);"
         " a process's first restore (fresh stores) / plain read %.2f, / plain read into fresh memory %.2f\n",
         gbps[1] / gbps[0], gbps[3] / gbps[2], gbps[5] / gbps[4], cpu_med[0] / cpu_med[1], gbps[5] / gbps[6],
         cpu_med[2] / cpu_med[1], gbps[7] / gbps[4], gbps[7] / gbps[6]);
  bench_add(&res, "persist", "kvcache-c", "save_over_plain_write", gbps[1] / gbps[0], "x");
  bench_add(&res, "persist", "kvcache-c", "restore_over_plain_read", gbps[3] / gbps[2], "x");
  bench_add(&res, "persist", "kvcache-c", "restore_cached_over_plain_read_cached", gbps[5] / gbps[4], "x");
  bench_add(&res, "persist", "kvcache-c", "restore_cached_over_plain_read_cached_cpu", cpu_med[0] / cpu_med[1], "x");
  bench_add(&res, "persist", "kvcache-c", "restore_cached_over_plain_read_fresh", gbps[5] / gbps[6], "x");
  bench_add(&res, "persist", "kvcache-c", "restore_cached_over_plain_read_fresh_cpu", cpu_med[2] / cpu_med[1], "x");
  bench_add(&res, "persist", "kvcache-c", "restore_cached_first_over_plain_read_cached", gbps[7] / gbps[4], "x");
  bench_add(&res, "persist", "kvcache-c", "restore_cached_first_over_plain_read_fresh", gbps[7] / gbps[6], "x");
  bench_add(&res, "persist", "kvcache-c", "file_bytes", (double)bytes, "bytes");
  bench_write_json(a.json_path, &res);
  unlink(file);
  unlink(plain);
  for (int m = 0; m < MEASUREMENTS; m++) free(t[m]);
  for (int m = 0; m < CPU_ROWS; m++) free(cpu[m]);
  free(buffer);
  kvc_cache_destroy(target);
  kvc_cache_destroy(cache);
  return 0;
}
