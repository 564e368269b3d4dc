/*
 * test_tier_recurrent.c: a hybrid model's prefix survives a restart through
 * the disk tier: a commit stores the recurrent checkpoint with the attention
 * blocks, and a fresh pool on the same directory matches the prefix with
 * the state of its last boundary restored; the farthest stored boundary
 * wins, a checkpoint that does not verify is no match, and a pool whose
 * recurrent group has no slot for the live state fetches nothing.
 */
#include "tier_hybrid.h" /* first: it sets the feature macros */

enum { PROMPT = 17 };

static kvc_pool* open_pool(const char* dir, uint32_t state_slots) {
  kvc_pool* p = NULL;
  kvc_error* e = th_pool(&p, state_slots);
  kvc_tier* t = e ? NULL : tt_disk(dir, 0);
  if (!e && t) e = kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT);
  if (e || !t) {
    fprintf(stderr, "open_pool: %s\n", e ? kvc_error_message(e) : "no disk tier");
    kvc_error_destroy(e);
    kvc_tier_destroy(t);
    kvc_pool_destroy(p);
    return NULL;
  }
  return p;
}

/* A first pool computes the prompt's first 16 tokens in steps of `step` tokens and is destroyed. */
static void fill(const char* dir, const int32_t* tok, int64_t step, uint64_t expect_puts) {
  kvc_pool* p = open_pool(dir, 8);
  REQUIRE(p != NULL);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  for (int64_t at = 0; at < 16; at += step) REQUIRE_OK(th_step(p, s, tok, step));
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).puts, expect_puts);
  kvc_pool_destroy(p);
}

/* A fresh directory (into dir[4096]) that fill() filled with the prompt (into tok[PROMPT]). */
static int filled_dir(char* dir, int32_t* tok, int64_t step, uint64_t expect_puts) {
  if (!CHECK(tt_tempdir(dir, 4096, "hybrid") != NULL)) return 0;
  tt_prompt(tok, PROMPT, 1);
  fill(dir, tok, step, expect_puts);
  return 1;
}

/* A fresh pool on `dir` (`state_slots` recurrent slots) matches the prompt, `expect` tokens: the pool (NULL when a
   call failed) and the matching sequence in *s. */
static kvc_pool* reopen_and_match(const char* dir, uint32_t state_slots, const int32_t* tok, uint64_t expect,
                                  kvc_pool_sequence** s) {
  kvc_pool* p = open_pool(dir, state_slots);
  uint64_t matched = expect + 1; /* a match that leaves it unset fails */
  *s = NULL;
  if (!CHECK(p != NULL)) return NULL;
  if (!CHECK_OK(kvc_pool_sequence_create(p, NULL, s)) || !CHECK_OK(kvc_pool_match_prefix(*s, tok, PROMPT, &matched))) {
    kvc_pool_destroy(p);
    return NULL;
  }
  CHECK_EQ_U64(matched, expect);
  return p;
}

static void test_restart_finds_the_checkpoint(void) {
  char dir[4096];
  int32_t tok[PROMPT];
  REQUIRE(filled_dir(dir, tok, 16, 5)); /* 4 attention blocks and the checkpoint at 16 */
  kvc_pool_sequence* s;
  kvc_pool* p = reopen_and_match(dir, 8, tok, 16, &s);
  REQUIRE(p != NULL);
  CHECK_EQ_I64(pt_gather_mismatches(s, 0), 0);
  CHECK_EQ_I64(th_state_mismatches(s, 16), 0);
  kvc_tier_stats st = tt_stats(kvc_pool_tier(p, 0));
  CHECK_EQ_U64(st.hits, 5);
  CHECK_EQ_U64(st.corrupt, 0);
  /* The fetched checkpoint is a cached slot of the recurrent group now, besides the live state. */
  CHECK_EQ_U64(pt_stats(p, 1).cached_blocks, 1);
  /* The next step goes on from the restored state as from a computed one. */
  REQUIRE_OK(th_step(p, s, tok, 1));
  CHECK_EQ_I64(th_state_mismatches(s, 17), 0);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

static void test_farthest_boundary_of_a_diverging_prompt(void) {
  char dir[4096];
  int32_t tok[PROMPT];
  REQUIRE(filled_dir(dir, tok, 8, 6)); /* checkpoints at 8 and 16 */
  /* Another prompt shares 13 tokens: attention blocks 0..2 match, the checkpoint at 12 was never taken. */
  tok[13] += 1;
  kvc_pool_sequence* s;
  kvc_pool* p = reopen_and_match(dir, 8, tok, 8, &s);
  REQUIRE(p != NULL);
  CHECK_EQ_I64(th_state_mismatches(s, 8), 0);
  CHECK_EQ_I64(pt_gather_mismatches(s, 0), 0);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

/* The checkpoint's file (the smaller frame: 88 bytes of state against 224 of K/V). */
static long checkpoint_file(const char* dir, char* path) {
  char files[16][4096];
  size_t n = tt_files(dir, files, 16);
  long size = -1;
  for (size_t i = 0; i < n; i++) {
    FILE* f = fopen(files[i], "rb");
    if (!f) continue;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fclose(f);
    if (size < 0 || sz < size) {
      size = sz;
      snprintf(path, 4096, "%s", files[i]);
    }
  }
  return size;
}

static void test_flipped_checkpoint_is_no_match(void) {
  char dir[4096], path[4096];
  int32_t tok[PROMPT];
  REQUIRE(filled_dir(dir, tok, 16, 5));
  long size = checkpoint_file(dir, path);
  CHECK_EQ_I64(size, 96 + 88 + 4);
  FILE* f = fopen(path, "r+b");
  REQUIRE(f != NULL);
  fseek(f, 96 + 40, SEEK_SET); /* a byte of the SSM state */
  int c = fgetc(f);
  fseek(f, 96 + 40, SEEK_SET);
  fputc(c ^ 0x10, f);
  fclose(f);
  kvc_pool_sequence* s;
  kvc_pool* p = reopen_and_match(dir, 8, tok, 0, &s); /* the attention blocks alone are no prefix of a hybrid model */
  REQUIRE(p != NULL);
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).corrupt, 1);
  CHECK_EQ_U64(pt_stats(p, 1).cached_blocks, 0);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

static void test_no_slot_for_the_live_state(void) {
  char dir[4096];
  int32_t tok[PROMPT];
  REQUIRE(filled_dir(dir, tok, 16, 5));
  /* 2 slots: the null slot and one; the checkpoint would leave none for the live state */
  kvc_pool_sequence* s;
  kvc_pool* p = reopen_and_match(dir, 2, tok, 0, &s);
  REQUIRE(p != NULL);
  CHECK_EQ_U64(pt_stats(p, 1).cached_blocks, 0);
  REQUIRE_OK(th_step(p, s, tok, 16)); /* the one slot is the live state's */
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

int main(void) {
  TU_RUN(test_restart_finds_the_checkpoint);
  TU_RUN(test_farthest_boundary_of_a_diverging_prompt);
  TU_RUN(test_flipped_checkpoint_is_no_match);
  TU_RUN(test_no_slot_for_the_live_state);
  return tu_finish();
}
