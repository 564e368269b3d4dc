/*
 * test_internal_tier_wrapper.c: kvc_tier_create / kvc_tier_destroy /
 * kvc_tier_stats_get (core/tier/tier.c) around a store that answers what the
 * test tells it: the counters follow what the store reports, a store that
 * claims more than was asked is clamped, the context is freed exactly once
 * (on destroy, and on every refused create), and bad input is refused naming
 * the argument.
 */
#include <string.h>

#include "test_util.h"
#include "tier/tier_internal.h"

typedef struct store {
  int destroyed;
  size_t put_answer, get_answer;
  size_t get_sizes[4];
} store;

static size_t put_many(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                       size_t count) {
  (void)keys, (void)values, (void)sizes, (void)count;
  return ((store*)ctx)->put_answer;
}

static size_t get_many(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                       size_t count) {
  (void)keys, (void)values, (void)capacity;
  store* s = ctx;
  for (size_t i = 0; i < count && i < 4; i++) sizes[i] = s->get_sizes[i];
  return s->get_answer;
}

static void destroy(void* ctx) { ((store*)ctx)->destroyed++; }

static const kvc_tier_ops OPS = {sizeof(kvc_tier_ops), put_many, get_many, destroy, NULL};

static void test_counters(void) {
  store s = {0, 2, 0, {0}};
  kvc_tier* t = NULL;
  REQUIRE_OK(kvc_tier_create(&OPS, &s, "mem", &t));
  CHECK_EQ_PTR(t->ctx, &s);
  CHECK(!strcmp(t->name, "mem"));
  kvc_tier_key keys[4];
  memset(keys, 0, sizeof keys);
  const void* values[4] = {"a", "b", "c", "d"};
  const size_t sizes[4] = {10, 20, 30, 40};
  CHECK_EQ_U64(kvci_tier_put_many(t, keys, values, sizes, 3), 2);
  s.put_answer = 99; /* a store claiming more than it was given */
  CHECK_EQ_U64(kvci_tier_put_many(t, keys, values, sizes, 1), 1);
  uint8_t buf[4][64];
  void* outs[4] = {buf[0], buf[1], buf[2], buf[3]};
  size_t got[4];
  s.get_answer = 3;
  s.get_sizes[0] = 50, s.get_sizes[1] = 60, s.get_sizes[2] = 0; /* claims 3 found but the third is empty */
  CHECK_EQ_U64(kvci_tier_get_many(t, keys, outs, 64, got, 4), 2);
  s.get_sizes[0] = 65; /* a size past the capacity: a miss */
  CHECK_EQ_U64(kvci_tier_get_many(t, keys, outs, 64, got, 4), 0);
  kvc_tier_stats st;
  st.struct_size = sizeof st;
  REQUIRE_OK(kvc_tier_stats_get(t, &st));
  CHECK_EQ_U64(st.puts, 3);
  CHECK_EQ_U64(st.put_failures, 1);
  CHECK_EQ_U64(st.bytes_written, 10 + 20 + 10);
  CHECK_EQ_U64(st.gets, 8);
  CHECK_EQ_U64(st.bytes_read, 110);
  CHECK_EQ_U64(st.hits, 0); /* hits are the pool's to count, after it verified the values */
  kvc_tier_destroy(t);
  CHECK_EQ_I64(s.destroyed, 1);
  kvc_tier_destroy(NULL);
}

static void test_bad_input(void) {
  store s = {0, 0, 0, {0}};
  kvc_tier* t = (kvc_tier*)&s; /* untouched on error */
  kvc_tier_ops ops = OPS;
  CHECK_ERR(kvc_tier_create(NULL, &s, "x", &t), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_I64(s.destroyed, 0); /* no ops: nothing to free it with */
  ops.put_many = NULL;
  CHECK_ERR(kvc_tier_create(&ops, &s, "x", &t), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_I64(s.destroyed, 1);
  ops = OPS;
  ops.get_many = NULL;
  CHECK_ERR(kvc_tier_create(&ops, &s, "x", &t), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_I64(s.destroyed, 2);
  CHECK_ERR(kvc_tier_create(&OPS, &s, NULL, &t), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_tier_create(&OPS, &s, "", &t), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_tier_create(&OPS, &s, "x", NULL), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_I64(s.destroyed, 5);
  ops = OPS;
  ops.struct_size = 8;
  CHECK_ERR(kvc_tier_create(&ops, &s, "x", &t), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_I64(s.destroyed, 5); /* a struct of unknown size: its destroy is not read */
  CHECK_EQ_PTR(t, (kvc_tier*)&s);

  s.destroyed = 0;
  REQUIRE_OK(kvc_tier_create(&OPS, &s, "x", &t));
  kvc_tier_stats st;
  memset(&st, 0x5a, sizeof st);
  st.struct_size = 8;
  CHECK_ERR(kvc_tier_stats_get(t, &st), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_U64(st.puts, 0x5a5a5a5a5a5a5a5aull); /* untouched */
  CHECK_ERR(kvc_tier_stats_get(t, NULL), KVC_ERROR_INVALID_ARGUMENT);
  st.struct_size = sizeof st;
  CHECK_ERR(kvc_tier_stats_get(NULL, &st), KVC_ERROR_INVALID_ARGUMENT);
  kvc_tier_destroy(t);
  CHECK_EQ_I64(s.destroyed, 1);
}

int main(void) {
  TU_RUN(test_counters);
  TU_RUN(test_bad_input);
  return tu_finish();
}
