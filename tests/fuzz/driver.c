/*
 * driver.c: what runs a fuzz target's LLVMFuzzerTestOneInput, for targets
 * that include it after defining FUZZ_TARGET_NAME (a string).
 *
 * With libFuzzer: LLVMFuzzerInitialize puts -error_exitcode=1 in front of the
 * arguments. libFuzzer exits with 77 after a finding, which is the code by
 * which this project's tests say SKIPPED; a flag the caller gives explicitly
 * still overrides it (later flags win).
 *
 * Without libFuzzer (KVC_FUZZ_STANDALONE, any C11 compiler): a main that
 * replays files and directories and runs pseudo-random inputs:
 *   NAME_standalone [-runs=N] [-ops=M] [-seed=S] [-len=L] [-trace] [FILE|DIR ...]
 * N defaults to 20000 without files and to 0 with them; with -ops=M it runs
 * pseudo-random inputs until the target has counted M operations
 * (g_fuzz_ops) too; L is the largest input; -trace prints each operation
 * before it runs (report.h's g_echo_trace). A target may set g_fuzz_summary
 * to print what it counted. A pseudo-random input that fails is written to
 * crash-NAME-sS-rR in the current directory, to replay with -trace or keep
 * as a seed.
 */
#ifndef FUZZ_TARGET_NAME
#  error "define FUZZ_TARGET_NAME before including driver.c"
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* Operations the target ran, for targets that count them (the standalone -ops=M and the last line). */
unsigned long long g_fuzz_ops;

#ifndef KVC_FUZZ_STANDALONE
int LLVMFuzzerInitialize(int* argc, char*** argv);

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  static char flag[] = "-error_exitcode=1";
  static char** args;
  if (args || *argc < 1) return 0;
  args = calloc((size_t)*argc + 2, sizeof *args);
  if (!args) return 0;
  args[0] = (*argv)[0];
  args[1] = flag;
  for (int i = 1; i < *argc; i++) args[i + 1] = (*argv)[i];
  *argc += 1;
  *argv = args;
  return 0;
}
#else
#  include <dirent.h>
#  include <sys/stat.h>

/* Called once at the end of a standalone run, when set. */
static void (*g_fuzz_summary)(void);

/* The pseudo-random input running (NULL while files run), for driver_save_input. */
static const uint8_t* g_input;
static size_t g_input_len;
static unsigned long long g_input_seed;
static long g_input_run;

static void driver_save_input(void) {
  if (!g_input) return;
  char name[128];
  snprintf(name, sizeof name, "crash-%s-s%llu-r%ld", FUZZ_TARGET_NAME, g_input_seed, g_input_run);
  FILE* f = fopen(name, "wb");
  if (f && fwrite(g_input, 1, g_input_len, f) == g_input_len)
    fprintf(stderr, "the input is saved as %s: replay it with %s_standalone -trace %s\n", name, FUZZ_TARGET_NAME,
            name);
  if (f) fclose(f);
}

static void driver_run_one(const uint8_t* data, size_t size) {
  if (g_echo_trace) printf("=== input of %zu bytes\n", size);
  LLVMFuzzerTestOneInput(data, size);
}

static int driver_run_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  uint8_t* buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t* grown = realloc(buf, cap);
      if (!grown) abort();
      buf = grown;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    if (!got) break;
    len += got;
  }
  fclose(f);
  driver_run_one(buf, len);
  free(buf);
  return 1;
}

static long driver_run_path(const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "%s: cannot read %s\n", FUZZ_TARGET_NAME, path);
    exit(2);
  }
  if (!S_ISDIR(st.st_mode)) return driver_run_file(path);
  DIR* d = opendir(path);
  if (!d) return 0;
  long n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, e->d_name);
    n += driver_run_file(full);
  }
  closedir(d);
  return n;
}

static uint64_t driver_next(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Pseudo-random inputs from `seed`: `runs` of them, and more until the target counted `min_ops` operations. */
static long driver_run_seed(unsigned long long seed, long runs, unsigned long long min_ops, uint8_t* buf,
                            size_t max_len) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  long run = 0;
  for (; run < runs || g_fuzz_ops < min_ops; run++) {
    if (run == 1000 && g_fuzz_ops == 0 && min_ops) {
      fprintf(stderr, "%s: -ops=%llu, but this target counts no operations\n", FUZZ_TARGET_NAME, min_ops);
      return -1;
    }
    size_t len = max_len ? (size_t)(driver_next(&x) % max_len) : 0;
    for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)(driver_next(&x) >> 32);
    g_input = buf;
    g_input_len = len;
    g_input_seed = seed;
    g_input_run = run;
    driver_run_one(buf, len);
  }
  return run;
}

int main(int argc, char** argv) {
  long runs = -1, files = 0;
  unsigned long long seed = 1, min_ops = 0;
  size_t max_len = 600;
  int had_paths = 0;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "-runs=", 6)) runs = atol(argv[i] + 6);
    else if (!strncmp(argv[i], "-ops=", 5)) min_ops = strtoull(argv[i] + 5, NULL, 10);
    else if (!strncmp(argv[i], "-seed=", 6)) seed = strtoull(argv[i] + 6, NULL, 10);
    else if (!strncmp(argv[i], "-len=", 5)) max_len = (size_t)atol(argv[i] + 5);
    else if (!strcmp(argv[i], "-trace")) g_echo_trace = 1;
    else {
      had_paths = 1;
      files += driver_run_path(argv[i]);
    }
  }
  if (runs < 0) runs = had_paths || min_ops ? 0 : 20000; /* files alone: only replay them */
  uint8_t* buf = malloc(max_len ? max_len : 1);
  if (!buf) return 1;
  g_on_fail = driver_save_input;
  long run = driver_run_seed(seed, runs, min_ops, buf, max_len);
  if (run < 0) return 2;
  /* A second seed from the environment: a CI job varies it to cover new inputs while the fixed seed above keeps
   * every run comparable. */
  const char* env = getenv("KVC_FUZZ_SEED");
  if (env && *env && runs > 0) {
    unsigned long long more = strtoull(env, NULL, 10);
    printf("%s: KVC_FUZZ_SEED=%llu: %ld more inputs\n", FUZZ_TARGET_NAME, more, runs);
    if (driver_run_seed(more, runs, 0, buf, max_len) < 0) return 2;
    run += runs;
  }
  g_input = NULL;
  free(buf);
  free(g_trace);
  g_trace = NULL; /* LeakSanitizer reports after main returns, and prints the trace */
  if (g_fuzz_summary) g_fuzz_summary();
  if (g_fuzz_ops)
    printf("%s: %ld replayed and %ld pseudo-random inputs (seed %llu), %llu operations, no divergence\n",
           FUZZ_TARGET_NAME, files, run, seed, g_fuzz_ops);
  else
    printf("%s: %ld replayed and %ld pseudo-random inputs (seed %llu), no divergence\n", FUZZ_TARGET_NAME, files, run,
           seed);
  return 0;
}
#endif
