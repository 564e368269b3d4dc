/*
 * test_pool_vllm_events.c: kvc_pool_events_pull_vllm (since 0.7). The
 * scenario of make_vllm_event_vectors.py gives the bytes vLLM's publisher
 * sends for the same events (vllm_event_vectors.txt, encoded by vLLM's
 * KVEventBatch and msgspec), in both hash forms; the size query takes
 * nothing; a short buffer and bad options are refused with the queue intact.
 */
#include "hash_vectors.h"
#include "pool_test.h"
#include "test_errors.h"


static int32_t* run(int32_t first, size_t n, int32_t* out) {
  for (size_t i = 0; i < n; i++) out[i] = first + (int32_t)i;
  return out;
}

/* make_vllm_event_vectors.py's scenario, leaving its events queued. */
static kvc_pool* scenario(void) {
  kvc_pool* p = NULL;
  if (!CHECK_OK(pt_one_group(KVC_POOL_HASH_VLLM_SHA256_CBOR, 4, 4, NULL, 0, &p))) return NULL;
  kvc_pool_sequence *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  kvc_pool_sequence_options lora = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  lora.adapter_key = "sql-lora", lora.adapter_key_len = 8;
  lora.adapter_path = "/adapters/sql", lora.adapter_path_len = 13, lora.adapter_id = 3;
  int32_t t[8];
  CHECK_OK(kvc_pool_sequence_create(p, &lora, &a));
  CHECK_OK(pt_append(a, run(1, 6, t), 6));
  CHECK_OK(pt_append(a, run(7, 2, t), 2));
  CHECK_OK(kvc_pool_sequence_create(p, NULL, &b));
  CHECK_OK(pt_append(b, run(1, 8, t), 8));
  kvc_pool_sequence_destroy(b);
  CHECK_OK(kvc_pool_sequence_create(p, NULL, &c));
  CHECK_OK(pt_append(c, run(50, 4, t), 4));
  CHECK_OK(kvc_pool_sequence_create(p, NULL, &d));
  CHECK_OK(pt_append(d, run(60, 4, t), 4));
  kvc_pool_sequence_destroy(c);
  CHECK_OK(kvc_pool_clear_cache(p));
  kvc_pool_sequence_destroy(a);
  kvc_pool_sequence_destroy(d);
  return p;
}

static void check_batch(char** f) {
  size_t want_len = 0;
  uint8_t* want = hv_hex(f[5], &want_len);
  kvc_pool* p = scenario();
  if (!CHECK(want && p)) goto done;
  kvc_pool_vllm_batch_options o = KVC_POOL_VLLM_BATCH_OPTIONS_INIT;
  o.int_hashes = atoi(f[2]);
  o.data_parallel_rank = atoll(f[3]);
  o.ts = strtod(f[4], NULL);
  size_t size = 0, again = 0;
  CHECK_OK(kvc_pool_events_pull_vllm(p, &o, NULL, 0, &size)); /* a query: nothing taken */
  CHECK_OK(kvc_pool_events_pull_vllm(p, &o, NULL, 0, &again));
  CHECK_EQ_U64(again, size);
  uint8_t* got = (uint8_t*)malloc(size + 1);
  size_t got_len = 0;
  if (CHECK_OK(kvc_pool_events_pull_vllm(p, &o, got, size + 1, &got_len)) &&
      !CHECK(got_len == want_len && memcmp(got, want, want_len) == 0)) {
    char* hex = (char*)malloc(2 * got_len + 1);
    printf("  %s: got  %s\n", f[1], hv_dump(got, got_len, hex));
    printf("  %s: want %s\n", f[1], f[5]);
    free(hex);
  }
  /* Drained: the next batch has no events ([ts, [], rank]). */
  CHECK_OK(kvc_pool_events_pull_vllm(p, &o, got, size, &got_len));
  CHECK_EQ_U64(got_len, 1 + 9 + 1 + 1); /* array head, float, empty array, rank or nil (ranks < 128) */
  free(got);
done:
  kvc_pool_destroy(p);
  free(want);
}

static void test_vectors(void) {
  CHECK_EQ_I64(hv_each_vector(hv_dir, "vllm_event_vectors.txt", "batch", 6, check_batch), 2);
}

/* Refusals take nothing: the full batch is still there afterwards. */
static void test_refusals(void) {
  kvc_pool* p = scenario();
  REQUIRE(p != NULL);
  size_t size = 0;
  REQUIRE_OK(kvc_pool_events_pull_vllm(p, NULL, NULL, 0, &size));
  uint8_t* buf = (uint8_t*)malloc(size);
  size_t got = 12345;
  kvc_pool_vllm_batch_options o = KVC_POOL_VLLM_BATCH_OPTIONS_INIT;
  char need[64];
  snprintf(need, sizeof need, "takes %zu bytes", size);
  EXPECT_ERR(kvc_pool_events_pull_vllm(p, NULL, buf, size - 1, &got), KVC_ERROR_OUT_OF_RANGE,
             "kvc_pool_events_pull_vllm", "capacity is", need, "nothing was taken");
  EXPECT_ERR(kvc_pool_events_pull_vllm(p, NULL, NULL, 5, &got), KVC_ERROR_INVALID_ARGUMENT,
             "buf is NULL but capacity is 5");
  EXPECT_ERR(kvc_pool_events_pull_vllm(p, NULL, buf, size, NULL), KVC_ERROR_INVALID_ARGUMENT, "size is NULL");
  EXPECT_ERR(kvc_pool_events_pull_vllm(NULL, NULL, buf, size, &got), KVC_ERROR_INVALID_ARGUMENT, "pool is NULL");
  o.int_hashes = 2;
  EXPECT_ERR(kvc_pool_events_pull_vllm(p, &o, buf, size, &got), KVC_ERROR_INVALID_ARGUMENT,
             "options->int_hashes is 2", "0 (32-byte hashes) or 1");
  o = (kvc_pool_vllm_batch_options)KVC_POOL_VLLM_BATCH_OPTIONS_INIT, o.data_parallel_rank = -2;
  EXPECT_ERR(kvc_pool_events_pull_vllm(p, &o, buf, size, &got), KVC_ERROR_INVALID_ARGUMENT,
             "options->data_parallel_rank is -2", ">= 0, or -1");
  o = (kvc_pool_vllm_batch_options)KVC_POOL_VLLM_BATCH_OPTIONS_INIT, o.ts = 1.0 / 0.0;
  EXPECT_ERR(kvc_pool_events_pull_vllm(p, &o, buf, size, &got), KVC_ERROR_INVALID_ARGUMENT, "options->ts is inf",
             "finite");
  o = (kvc_pool_vllm_batch_options)KVC_POOL_VLLM_BATCH_OPTIONS_INIT, o.struct_size = 8;
  EXPECT_ERR(kvc_pool_events_pull_vllm(p, &o, buf, size, &got), KVC_ERROR_INVALID_ARGUMENT,
             "options->struct_size is 8");
  CHECK_EQ_U64(got, 12345);
  size_t again = 0;
  CHECK_OK(kvc_pool_events_pull_vllm(p, NULL, buf, size, &again));
  CHECK_EQ_U64(again, size);
  free(buf);
  kvc_pool_destroy(p);
}

/* Both pulls drain one queue: the structured events of a STORED chain, then nothing left for vLLM's form. */
static void test_one_queue(void) {
  kvc_pool* p = scenario();
  REQUIRE(p != NULL);
  kvc_pool_event ev[16];
  size_t count = 0, size = 0;
  CHECK_OK(kvc_pool_events_pull(p, ev, 16, &count));
  CHECK_EQ_U64(count, 9); /* 2 + 2 stored, 1 removed, 1 stored, 1 removed, 1 stored, cleared */
  CHECK_OK(kvc_pool_events_pull_vllm(p, NULL, NULL, 0, &size));
  CHECK_EQ_U64(size, 1 + 9 + 1 + 1);
  kvc_pool_destroy(p);
}

int main(int argc, char** argv) {
  static const hv_test tests[] = {HV_TEST(test_vectors), HV_TEST(test_refusals), HV_TEST(test_one_queue)};
  return hv_main(argc, argv, __FILE__, tests, sizeof tests / sizeof tests[0]);
}
