/*
 * Two pools in two processes share a prompt's prefix through a three-node
 * Redis Cluster, with the public API only: a writer process fills its pool
 * from a prompt (the blocks go to the Redis tier when they are committed)
 * and exits; a reader process with a pool of the same model matches the
 * prompt: its prefix comes from the cluster, and what it gathers is what
 * the writer wrote, byte for byte (both write their gathered bytes to files
 * the parent compares). The processes are this program again, run by path
 * with a mode argument.
 */
#define _GNU_SOURCE
#include <sys/stat.h>

#include "../../pool/pool_test.h"
#include "redis_pool_tier.h"
#include "redis_server.h"

#define PROMPT 65 /* four blocks of 16 tokens and one more: at most 64 are matched, the last is computed */
static const pt_group group = {KVC_POOL_GROUP_FULL, 16, 32, 0};
static const uint32_t layer_group[2] = {0, 0};

static int fail(const char* what, kvc_error* e) {
  fprintf(stderr, "%s: %s\n", what, e ? kvc_error_message(e) : "failed");
  kvc_error_destroy(e);
  return 1;
}

/* A pool of the test's model with a Redis tier on `seeds` written on commit. */
static int pool_with_tier(const char* seeds, kvc_pool** pool) {
  kvc_error* e = pt_pool(pool, &group, 1, layer_group, 2, KVC_POOL_LAYOUT_NHD, 0, 1);
  if (e) return fail("kvc_pool_create", e);
  kvc_redis_tier_options o = rp_options(seeds, "pools:", 2000);
  if ((e = rp_add_tier(*pool, &o)) != NULL) return fail("adding the Redis tier", e);
  return 0;
}

/* Gathers both layers of the sequence into `path`; 0 when every value is the one written (pt_value). */
static int dump(const kvc_pool_sequence* s, const char* path) {
  int64_t n = (int64_t)kvc_pool_sequence_length(s);
  FILE* f = fopen(path, "wb");
  if (!f) return fail(path, NULL);
  int bad = 0;
  for (uint32_t layer = 0; layer < 2; layer++) {
    int64_t ks[4] = {1, 2, n, 4}, vs[4] = {1, 2, n, 3};
    float* kb = calloc((size_t)n * 8, sizeof(float));
    float* vb = calloc((size_t)n * 6, sizeof(float));
    kvc_tensor k, v;
    memset(&k, 0, sizeof k), memset(&v, 0, sizeof v);
    k.data = kb, v.data = vb;
    k.device.device_type = v.device.device_type = KVC_DEVICE_CPU;
    k.ndim = v.ndim = 4;
    k.dtype = v.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
    k.shape = ks, v.shape = vs;
    kvc_error* e = kvc_pool_gather(s, layer, &k, &v);
    if (e) bad = fail("kvc_pool_gather", e);
    fwrite(kb, sizeof(float), (size_t)n * 8, f);
    fwrite(vb, sizeof(float), (size_t)n * 6, f);
    free(kb), free(vb);
    if (pt_gather_mismatches(s, layer) != 0) bad = fail("gathered values differ from the written ones", NULL);
  }
  fclose(f);
  return bad;
}

/* One process's side: a pool with the tier, a sequence in it and the prompt both sides use. */
typedef struct side {
  kvc_pool* pool;
  kvc_pool_sequence* s;
  int32_t tokens[PROMPT];
} side;

static int side_open(const char* seeds, side* x) {
  if (pool_with_tier(seeds, &x->pool)) return 1;
  for (int i = 0; i < PROMPT; i++) x->tokens[i] = 1000 + i * 7;
  kvc_error* e = kvc_pool_sequence_create(x->pool, NULL, &x->s);
  return e ? fail("kvc_pool_sequence_create", e) : 0;
}

static kvc_tier_stats side_stats(const side* x) {
  kvc_tier_stats st = {sizeof st, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  kvc_error_destroy(kvc_tier_stats_get(kvc_pool_tier(x->pool, 0), &st));
  return st;
}

/* Dumps the sequence into `out` and destroys the side; dump's result. */
static int side_close(side* x, const char* out) {
  int r = dump(x->s, out);
  kvc_pool_sequence_destroy(x->s);
  kvc_pool_destroy(x->pool);
  return r;
}

/* Computes the prompt (reserve, write, commit: the full blocks go to Redis), dumps the first 64 tokens. */
static int writer(const char* seeds, const char* out) {
  side x;
  if (side_open(seeds, &x)) return 1;
  kvc_error* e = pt_step(x.pool, 1, 2, x.s, x.tokens, PROMPT);
  if (!e) e = kvc_pool_truncate(x.s, PROMPT - 1);
  if (e) return fail("writer", e);
  kvc_tier_stats st = side_stats(&x);
  if (st.puts != 4) {
    fprintf(stderr, "writer: the tier stored %llu blocks, expected 4\n", (unsigned long long)st.puts);
    return 1;
  }
  return side_close(&x, out);
}

/* Matches the prompt in an empty pool: the prefix comes from the cluster. */
static int reader(const char* seeds, const char* out) {
  side x;
  if (side_open(seeds, &x)) return 1;
  uint64_t matched = 0;
  kvc_error* e = kvc_pool_match_prefix(x.s, x.tokens, PROMPT, &matched);
  if (e) return fail("reader", e);
  kvc_tier_stats st = side_stats(&x);
  if (matched != PROMPT - 1 || st.hits != 4 || st.corrupt != 0) {
    fprintf(stderr, "reader: matched %llu tokens with %llu hits, %llu corrupt; expected 64, 4, 0\n",
            (unsigned long long)matched, (unsigned long long)st.hits, (unsigned long long)st.corrupt);
    return 1;
  }
  return side_close(&x, out);
}

/* Runs this program in `mode`; its exit status. */
static int run_self(const char* mode, const char* seeds, const char* out) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "test_redis_pools", mode, seeds, out, (char*)NULL);
    _exit(127);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static rs_server nodes[3];

static void test_two_processes_share_a_prefix(void) {
  char seeds[64], dir[] = "/tmp/kvc-pools-XXXXXX", a[80], b[80];
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", nodes[1].port);
  REQUIRE(mkdtemp(dir) != NULL);
  snprintf(a, sizeof a, "%s/writer.bin", dir);
  snprintf(b, sizeof b, "%s/reader.bin", dir);
  CHECK_EQ_I64(run_self("writer", seeds, a), 0);
  CHECK_EQ_I64(run_self("reader", seeds, b), 0);
  FILE* fa = fopen(a, "rb");
  FILE* fb = fopen(b, "rb");
  REQUIRE(fa && fb);
  static char ba[1 << 16], bb[1 << 16];
  size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
  CHECK_EQ_U64(na, (size_t)64 * 14 * 4 * 2);
  CHECK(na == nb && memcmp(ba, bb, na) == 0);
  fclose(fa), fclose(fb);
  remove(a), remove(b), rmdir(dir);
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "writer") == 0) return writer(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "reader") == 0) return reader(argv[2], argv[3]);
  rs_require();
  if (rs_cluster_start(nodes, 3) != 0) {
    fprintf(stderr, "cannot start a three-node redis cluster\n");
    for (int i = 0; i < 3; i++) rs_stop(&nodes[i]);
    return 1;
  }
  TU_RUN(test_two_processes_share_a_prefix);
  for (int i = 0; i < 3; i++) rs_stop(&nodes[i]);
  return tu_finish();
}
