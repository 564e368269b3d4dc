/*
 * examples/tier_restart.c: prefix hits that survive a restart, through the
 * pool's disk tier (kvcache/tier.h, docs/tiers.md). `make demo` runs it
 * after the demo's table. The model is a hybrid one: attention layers and a
 * Mamba layer, whose state at the prompt's last block boundary (a
 * checkpoint) goes to disk with the K/V blocks.
 *
 * Run without arguments, it makes a temporary directory and runs itself
 * twice, as two separate processes:
 *   fill DIR    a pool with a disk tier on DIR computes a shared system
 *               prompt (its K/V and Mamba state: deterministic stand-ins
 *               for a model's), committing its whole blocks first (the
 *               blocks and the state there go to disk), and exits;
 *   reuse DIR   a new process, a new pool and tier on DIR: the same prompt
 *               plus a user turn is matched, the prompt's blocks and the
 *               checkpoint come from disk; the gathered K/V and the restored
 *               state are compared with recomputing.
 * then removes the directory.
 */
#define _DEFAULT_SOURCE 1 /* mkdtemp */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvcache.h"

/* LAYERS attention layers, then one Mamba layer (layer LAYERS) of its own group: conv [CONV, KERNEL], SSM
   [HEADS, DIM, STATE]. */
enum { LAYERS = 4, HEADS = 2, DIM = 16, BLOCK = 16, BLOCKS = 64, SYSTEM = 200, USER = 23 };
enum { CONV = 8, KERNEL = 4, STATE = 8, STATE_SLOTS = 8 };

static int check(kvc_error* e, const char* what) {
  if (!e) return 0;
  fprintf(stderr, "tier_restart: %s: %s\n", what, kvc_error_message(e));
  kvc_error_destroy(e);
  return 1;
}

/* The stand-in model: K/V of a token at a position, per layer (what a forward pass would write). */
static float kv_value(int layer, int kv, int32_t token, int64_t pos, int h, int d) {
  return (float)((token * 31 + pos * 7 + layer * 1000 + kv * 500 + h * 17 + d) % 4093) / 64.0f;
}

/* The stand-in Mamba state after `tokens` tokens of the prompt: element i of the conv (which 0) or SSM state. */
static float state_value(int which, int64_t tokens, int i) {
  return (float)((tokens * 13 + which * 700 + i) % 4093) / 32.0f;
}

static void prompt(int32_t* tok, int n, int with_user) {
  for (int i = 0; i < n; i++) tok[i] = i < SYSTEM ? (i * 37 + 11) % 32000 : (with_user * 1000 + i * 13) % 32000;
}

static kvc_error* open_pool(const char* dir, kvc_pool** pool) {
  kvc_pool_group_options g[2] = {KVC_POOL_GROUP_OPTIONS_INIT, KVC_POOL_GROUP_OPTIONS_INIT};
  g[0].block_size = g[1].block_size = BLOCK;
  g[0].num_blocks = BLOCKS;
  g[1].kind = KVC_POOL_GROUP_RECURRENT;
  g[1].num_blocks = STATE_SLOTS;
  kvc_pool_layer_options l[LAYERS + 1];
  for (int i = 0; i <= LAYERS; i++) {
    kvc_pool_layer_options x = KVC_POOL_LAYER_OPTIONS_INIT;
    x.num_kv_heads = HEADS;
    x.key_head_dim = DIM;
    if (i == LAYERS) {
      x.group = 1;
      x.conv_dim = CONV;
      x.conv_kernel = KERNEL;
      x.ssm_state_size = STATE;
    }
    l[i] = x;
  }
  kvc_pool_options o;
  kvc_pool_options_init(&o);
  o.dtype = KVC_DTYPE_FLOAT32;
  o.num_groups = 2;
  o.groups = g;
  o.num_layers = LAYERS + 1;
  o.layers = l;
  o.hash_seed = "tier-restart-demo-model";
  o.hash_seed_len = strlen(o.hash_seed);
  kvc_error* e = kvc_pool_create(&o, pool);
  if (e) return e;
  kvc_disk_tier_options d = KVC_DISK_TIER_OPTIONS_INIT;
  d.directory = dir;
  d.max_bytes = 64 << 20;
  kvc_tier* tier = NULL;
  e = kvc_disk_tier_create(&d, &tier);
  if (!e) e = kvc_pool_add_tier(*pool, tier, KVC_TIER_WRITE_ON_COMMIT);
  if (e) {
    kvc_tier_destroy(tier);
    kvc_pool_destroy(*pool);
  }
  return e;
}

static kvc_tensor tensor(float* data, int64_t* shape, int ndim) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = KVC_DEVICE_CPU;
  t.ndim = ndim;
  t.dtype = kvc_dtype_to_data_type(KVC_DTYPE_FLOAT32);
  t.shape = shape;
  return t;
}

/* Computes tokens [first, first + n) of `s` (reserve, write every attention layer and the Mamba state, commit). */
static kvc_error* compute(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tok, int64_t first, int64_t n) {
  int64_t* slots = malloc((size_t)(2 * n) * sizeof(int64_t)); /* a row per group */
  float* buf = malloc((size_t)(2 * LAYERS * n * HEADS * DIM) * sizeof(float));
  if (!slots || !buf) {
    fprintf(stderr, "tier_restart: out of memory\n");
    exit(1);
  }
  kvc_error* e = kvc_pool_reserve(s, tok + first, (size_t)n, slots);
  int64_t shape[3] = {n, HEADS, DIM};
  kvc_tensor k[LAYERS + 1], v[LAYERS + 1]; /* the Mamba layer's entries are skipped by kvc_pool_write */
  for (int l = 0; l < LAYERS; l++) {
    float* kb = buf + (size_t)(2 * l) * (size_t)(n * HEADS * DIM);
    float* vb = kb + n * HEADS * DIM;
    for (int64_t t = 0; t < n; t++)
      for (int h = 0; h < HEADS; h++)
        for (int d = 0; d < DIM; d++) {
          kb[(t * HEADS + h) * DIM + d] = kv_value(l, 0, tok[first + t], first + t, h, d);
          vb[(t * HEADS + h) * DIM + d] = kv_value(l, 1, tok[first + t], first + t, h, d);
        }
    k[l] = tensor(kb, shape, 3);
    v[l] = tensor(vb, shape, 3);
  }
  k[LAYERS] = k[0];
  v[LAYERS] = v[0];
  if (!e) e = kvc_pool_write(p, k, v, LAYERS + 1, slots, (size_t)n);
  kvc_tensor conv, ssm;
  if (!e) e = kvc_pool_recurrent_state(s, LAYERS, &conv, &ssm);
  for (int i = 0; !e && i < CONV * KERNEL; i++) ((float*)conv.data)[i] = state_value(0, first + n, i);
  for (int i = 0; !e && i < HEADS * DIM * STATE; i++) ((float*)ssm.data)[i] = state_value(1, first + n, i);
  if (!e) e = kvc_pool_commit(s);
  free(slots);
  free(buf);
  return e;
}

/* Elements of the restored Mamba state that differ from the state after the matched tokens (-1: none). */
static long state_mismatches(kvc_pool_sequence* s) {
  int64_t n = (int64_t)kvc_pool_sequence_length(s);
  kvc_tensor conv, ssm;
  if (!n) return -1;
  if (check(kvc_pool_recurrent_state(s, LAYERS, &conv, &ssm), "recurrent state")) return -1;
  long bad = 0;
  for (int i = 0; i < CONV * KERNEL; i++) bad += ((float*)conv.data)[i] != state_value(0, n, i);
  for (int i = 0; i < HEADS * DIM * STATE; i++) bad += ((float*)ssm.data)[i] != state_value(1, n, i);
  return bad;
}

/* Elements of the matched prefix whose gathered K/V differ from recomputing them. */
static long mismatches(kvc_pool_sequence* s, const int32_t* tok) {
  int64_t n = (int64_t)kvc_pool_sequence_length(s), shape[4] = {1, HEADS, n, DIM};
  float* kb = calloc((size_t)(HEADS * n * DIM + 1), sizeof(float));
  float* vb = calloc((size_t)(HEADS * n * DIM + 1), sizeof(float));
  long bad = 0;
  for (int l = 0; l < LAYERS && kb && vb; l++) {
    kvc_tensor k = tensor(kb, shape, 4), v = tensor(vb, shape, 4);
    if (check(kvc_pool_gather(s, (uint32_t)l, &k, &v), "gather")) {
      bad = -1;
      break;
    }
    for (int h = 0; h < HEADS; h++)
      for (int64_t t = 0; t < n; t++)
        for (int d = 0; d < DIM; d++) {
          bad += kb[(h * n + t) * DIM + d] != kv_value(l, 0, tok[t], t, h, d);
          bad += vb[(h * n + t) * DIM + d] != kv_value(l, 1, tok[t], t, h, d);
        }
  }
  free(kb);
  free(vb);
  return bad;
}

static int run_phase(const char* phase, const char* dir) {
  int fill = !strcmp(phase, "fill");
  kvc_pool* p = NULL;
  if (check(open_pool(dir, &p), "pool with a disk tier")) return 1;
  int32_t tok[SYSTEM + USER];
  prompt(tok, SYSTEM + USER, fill ? 1 : 2);
  kvc_pool_sequence* s = NULL;
  uint64_t matched = 0;
  int rc = check(kvc_pool_sequence_create(p, NULL, &s), "sequence");
  if (!rc) rc = check(kvc_pool_match_prefix(s, tok, SYSTEM + USER, &matched), "match_prefix");
  long bad = rc ? -1 : mismatches(s, tok), bad_state = rc || fill ? 0 : state_mismatches(s);
  /* The system prompt's whole blocks are committed first: the Mamba state is checkpointed at that boundary. */
  int64_t whole = SYSTEM / BLOCK * BLOCK;
  if (!rc && (int64_t)matched < whole)
    rc = check(compute(p, s, tok, (int64_t)matched, whole - (int64_t)matched), "compute");
  int64_t done = (int64_t)kvc_pool_sequence_length(s);
  if (!rc) rc = check(compute(p, s, tok, done, SYSTEM + USER - done), "compute");
  kvc_tier_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (!rc) rc = check(kvc_tier_stats_get(kvc_pool_tier(p, 0), &st), "tier stats");
  if (!rc)
    printf("  process %ld (%s): prompt %d tokens, matched %llu (%llu blocks and checkpoints from disk, %llu corrupt), "
           "computed "
           "%llu; blocks and checkpoints written to disk %llu (%.1f KiB)%s%s\n",
           (long)getpid(), phase, SYSTEM + USER, (unsigned long long)matched, (unsigned long long)st.hits,
           (unsigned long long)st.corrupt, (unsigned long long)(SYSTEM + USER - matched),
           (unsigned long long)st.puts, st.bytes_written / 1024.0,
           fill ? "" : (bad == 0 ? "; K/V from disk equal recomputing: yes" : "; K/V from disk DIFFER"),
           fill ? "" : (bad_state == 0 ? "; Mamba state from disk equals recomputing: yes" : "; Mamba state DIFFERS"));
  kvc_pool_destroy(p);
  if (!fill && !rc && (bad != 0 || bad_state != 0 || matched != SYSTEM / BLOCK * BLOCK)) rc = 1; /* as claimed */
  return rc;
}

static int rm_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int spawn(const char* self, const char* phase, const char* dir) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, phase, dir, (char*)NULL);
    perror("tier_restart: exec");
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return 1;
  return !WIFEXITED(status) || WEXITSTATUS(status);
}

int main(int argc, char** argv) {
  if (argc == 3) return run_phase(argv[1], argv[2]);
  if (argc != 1) {
    fprintf(stderr, "usage: %s [fill|reuse DIR]\n", argv[0]);
    return 2;
  }
  char dir[] = "/tmp/kvc-tier-restart-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("tier_restart: mkdtemp");
    return 1;
  }
  printf("Prefix hits of a hybrid model (%d attention layers, 1 Mamba layer) after a restart (disk tier in %s):\n",
         LAYERS, dir);
  int rc = spawn(argv[0], "fill", dir);
  if (!rc) rc = spawn(argv[0], "reuse", dir);
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}
