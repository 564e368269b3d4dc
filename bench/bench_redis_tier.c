/*
 * bench_redis_tier: put/get GB/s of the Redis tier for runs of 2 MiB blocks
 * (the size of a 16-token block of a 32-layer model with 8 KV heads of 128
 * bf16), against its roofline on the same server and machine:
 *   raw-resp         pipelined SET/GET of the same sizes through the same
 *                    client (connection, encoder, reply reader) without the
 *                    tier (no keys of 140 bytes, no routing): what the tier
 *                    could reach;
 *   redis-benchmark  redis-benchmark -c 1 -d 2097152 -P <depth> -t set,get:
 *                    the server's own client, same sizes, one connection.
 * A redis-server of its own on 127.0.0.1 (standalone, no persistence); where
 * redis-server is not installed it prints SKIPPED and exits 0. Medians.
 * It reaches into the library's internals (the tier's ops before
 * kvc_tier_create, the client) and links the static library.
 */
#define _GNU_SOURCE
#include "bench_common.h"
#include "redis_server.h"
#include "tier/redis/redis_internal.h"
#include "tier/redis/redis_tier_open.h"

#include <sys/uio.h>

#define BLOCK ((size_t)2 << 20)
#define DEPTH 32

static double gbps(size_t bytes, double ns) { return (double)bytes / ns; }

/* One pipelined run of SET (put) or GET over `n` raw keys on one connection, in windows of DEPTH. */
static int raw_run(kvci_redis_conn* c, kvci_resp_out* o, int put, uint8_t* const* blocks, size_t n) {
  char key[32];
  for (size_t w = 0; w < n; w += DEPTH) {
    size_t end = n - w > DEPTH ? w + DEPTH : n;
    kvci_resp_out_reset(o);
    for (size_t i = w; i < end; i++) {
      int k = snprintf(key, sizeof key, "raw:%zu", i);
      kvci_resp_cmd(o, put ? 3 : 2);
      kvci_resp_arg_str(o, put ? "SET" : "GET");
      kvci_resp_arg(o, key, (size_t)k);
      if (put) kvci_resp_arg_ref(o, blocks[i], BLOCK);
    }
    kvci_redis_limit lim = kvci_redis_limit_in(10000);
    if (kvci_resp_out_send(o, c, &lim) != 0) return -1;
    for (size_t i = w; i < end; i++) {
      size_t size = 0;
      int kind = kvci_resp_read_flat(c, put ? NULL : blocks[i], BLOCK, &size, NULL, 0, &lim);
      if (kind != (put ? KVCI_RESP_STATUS : KVCI_RESP_VALUE)) return -1;
    }
  }
  return 0;
}

/* redis-benchmark's requests per second for SET and GET (its --csv lines "SET","<rps>",...); 0 when absent. */
static void redis_benchmark(int port, size_t n, double* set_rps, double* get_rps) {
  char cmd[256], line[512];
  snprintf(cmd, sizeof cmd,
           "redis-benchmark -h 127.0.0.1 -p %d -c 1 -n %zu -d %zu -P %d -t set,get --csv 2>/dev/null", port, n,
           BLOCK, DEPTH);
  *set_rps = *get_rps = 0;
  FILE* p = popen(cmd, "r");
  if (!p) return;
  while (fgets(line, sizeof line, p)) {
    double rps = 0;
    if (sscanf(line, "\"SET\",\"%lf\"", &rps) == 1) *set_rps = rps;
    if (sscanf(line, "\"GET\",\"%lf\"", &rps) == 1) *get_rps = rps;
  }
  pclose(p);
}

int main(int argc, char** argv) {
  bench_args args = bench_parse_args(argc, argv);
  int reps = args.reps ? args.reps : 9;
  size_t n = 64; /* blocks per run: 128 MiB */
  if (!rs_on_path("redis-server") || !rs_on_path("redis-cli")) {
    printf("bench_redis_tier: SKIPPED: redis-server is not installed (scripts/setup.sh installs it)\n");
    return 0;
  }
  rs_server server;
  if (rs_start(&server, 0) != 0) {
    fprintf(stderr, "bench_redis_tier: cannot start redis-server\n");
    return 1;
  }
  char seeds[32];
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", server.port);
  kvc_redis_tier_options o = KVC_REDIS_TIER_OPTIONS_INIT;
  o.seeds = seeds;
  o.command_timeout_ms = 10000;
  o.max_pipeline = DEPTH;
  kvc_tier_ops ops;
  void* ctx;
  bench_check(kvci_redis_tier_open(&o, &ops, &ctx), "kvci_redis_tier_open");

  uint8_t** blocks = bench_alloc(n * sizeof *blocks);
  uint8_t** back = bench_alloc(n * sizeof *back);
  kvc_tier_key* keys = bench_alloc(n * sizeof *keys);
  size_t* sizes = bench_alloc(n * sizeof *sizes);
  uint64_t seed = 42;
  for (size_t i = 0; i < n; i++) {
    blocks[i] = bench_alloc(BLOCK);
    back[i] = bench_alloc(BLOCK);
    for (size_t b = 0; b < BLOCK; b += 8) {
      uint64_t x = bench_rand(&seed);
      memcpy(blocks[i] + b, &x, 8);
    }
    memset(&keys[i], 0, sizeof keys[i]);
    memcpy(keys[i].block_hash, &i, sizeof i);
    memset(keys[i].fingerprint, 0xAB, sizeof keys[i].fingerprint);
  }
  kvci_redis_conn conn;
  kvci_redis_conn_init(&conn);
  kvci_resp_out out;
  memset(&out, 0, sizeof out);
  kvci_redis_limit connect_limit = kvci_redis_limit_in(1000);
  if (kvci_redis_conn_open(&conn, "127.0.0.1", (uint16_t)server.port, &connect_limit) != 0) {
    fprintf(stderr, "bench_redis_tier: %s\n", conn.error);
    return 1;
  }

  double* t[4];
  for (int k = 0; k < 4; k++) t[k] = bench_alloc((size_t)reps * sizeof(double));
  for (int r = 0; r < reps; r++) {
    /* Alternate which goes first, so that neither pays for the other's leftovers (freed values, cold caches). */
    for (int turn = 0; turn < 2; turn++) {
      if ((turn == 0) == (r % 2 == 0)) {
        for (size_t i = 0; i < n; i++) sizes[i] = BLOCK;
        double t0 = bench_now_ns();
        size_t stored = ops.put_many(ctx, keys, (const void* const*)blocks, sizes, n);
        double t1 = bench_now_ns();
        size_t found = ops.get_many(ctx, keys, (void* const*)back, BLOCK, sizes, n);
        double t2 = bench_now_ns();
        if (stored != n || found != n || memcmp(back[n - 1], blocks[n - 1], BLOCK) != 0) {
          fprintf(stderr, "bench_redis_tier: the tier stored %zu and found %zu of %zu blocks\n", stored, found, n);
          return 1;
        }
        t[0][r] = gbps(n * BLOCK, t1 - t0);
        t[1][r] = gbps(n * BLOCK, t2 - t1);
      } else {
        double t0 = bench_now_ns();
        int bad = raw_run(&conn, &out, 1, blocks, n);
        double t1 = bench_now_ns();
        bad |= raw_run(&conn, &out, 0, back, n);
        double t2 = bench_now_ns();
        if (bad || memcmp(back[n - 1], blocks[n - 1], BLOCK) != 0) {
          fprintf(stderr, "bench_redis_tier: raw SET/GET failed: %s\n", conn.error);
          return 1;
        }
        t[2][r] = gbps(n * BLOCK, t1 - t0);
        t[3][r] = gbps(n * BLOCK, t2 - t1);
      }
    }
  }
  static bench_results res;
  const char* metric[4] = {"put_gbps_2mib", "get_gbps_2mib", "put_gbps_2mib", "get_gbps_2mib"};
  /* The ratios pair each rep's tier and raw runs (taken back to back) before the median: the machine's load
     drifts between reps, not within one. */
  double* put_ratio = bench_alloc((size_t)reps * sizeof(double));
  double* get_ratio = bench_alloc((size_t)reps * sizeof(double));
  for (int r = 0; r < reps; r++) put_ratio[r] = t[0][r] / t[2][r], get_ratio[r] = t[1][r] / t[3][r];
  double put_over_raw = bench_summarize(put_ratio, (size_t)reps).median;
  double get_over_raw = bench_summarize(get_ratio, (size_t)reps).median;
  free(put_ratio), free(get_ratio);
  double med[4];
  for (int k = 0; k < 4; k++) {
    med[k] = bench_summarize(t[k], (size_t)reps).median;
    bench_add(&res, "redis_tier", k < 2 ? "kvcache-c" : "raw-resp", metric[k], med[k], "GB/s");
  }
  bench_add(&res, "redis_tier", "kvcache-c", "put_over_raw", put_over_raw, "ratio");
  bench_add(&res, "redis_tier", "kvcache-c", "get_over_raw", get_over_raw, "ratio");
  printf("runs of %zu blocks of 2 MiB, pipeline depth %d, one connection, %d reps, medians:\n", n, DEPTH, reps);
  printf("  tier put %6.2f GB/s   raw SET %6.2f GB/s   (tier/raw, paired by rep: %.2f)\n", med[0], med[2],
         put_over_raw);
  printf("  tier get %6.2f GB/s   raw GET %6.2f GB/s   (tier/raw, paired by rep: %.2f)\n", med[1], med[3],
         get_over_raw);

  double set_v[3], get_v[3];
  for (int r = 0; r < 3; r++) redis_benchmark(server.port, n, &set_v[r], &get_v[r]);
  double set_rps = bench_summarize(set_v, 3).median, get_rps = bench_summarize(get_v, 3).median;
  if (set_rps > 0 && get_rps > 0) {
    bench_add(&res, "redis_tier", "redis-benchmark", "put_gbps_2mib", set_rps * (double)BLOCK / 1e9, "GB/s");
    bench_add(&res, "redis_tier", "redis-benchmark", "get_gbps_2mib", get_rps * (double)BLOCK / 1e9, "GB/s");
    printf("  redis-benchmark -c 1 -d %zu -P %d: SET %6.2f GB/s, GET %6.2f GB/s\n", BLOCK, DEPTH,
           set_rps * (double)BLOCK / 1e9, get_rps * (double)BLOCK / 1e9);
  } else {
    printf("  redis-benchmark: no numbers (not installed or no CSV output)\n");
  }
  bench_write_json(args.json_path, &res);

  for (int k = 0; k < 4; k++) free(t[k]);
  for (size_t i = 0; i < n; i++) free(blocks[i]), free(back[i]);
  free(blocks), free(back), free(keys), free(sizes);
  kvci_resp_out_free(&out);
  kvci_redis_conn_free(&conn);
  ops.destroy(ctx);
  rs_stop(&server);
  return 0;
}
