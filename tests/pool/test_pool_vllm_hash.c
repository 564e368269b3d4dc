/*
 * test_pool_vllm_hash.c: pools of hash mode KVC_POOL_HASH_VLLM_SHA256_CBOR
 * (since 0.7): their block hashes against vllm_hash_vectors.txt (written by
 * make_vllm_hash_vectors.py with vLLM's own functions), sharing only between
 * sequences with equal vLLM keys, a 0.7-before-hash_mode options size (96) that
 * keeps kvcache's hashes, and bad options refused with nothing changed.
 */
#include "hash_vectors.h"
#include "pool_test.h"
#include "test_errors.h"


/* One `vllm` vector: the pool's STORED events carry HASHES, the first one's parent is NONE_HASH. */
static void check_vector(char** f) {
  hv_keys k;
  uint8_t none_hash[32];
  kvc_pool* p = NULL;
  kvc_pool_sequence* s = NULL;
  kvc_pool_event* ev = NULL;
  if (!CHECK(hv_keys_read(f, 1, &k) && hv_hash(f[9], none_hash))) goto done;
  size_t full = k.n / (size_t)k.bs;
  if (!CHECK_OK(pt_one_group(KVC_POOL_HASH_VLLM_SHA256_CBOR, (uint32_t)k.bs, (uint32_t)(full + 2), k.seed,
                             k.seed_len, &p)))
    goto done;
  kvc_pool_sequence_options o = hv_keys_options(&k);
  if (!CHECK_OK(kvc_pool_sequence_create(p, &o, &s))) goto done;
  CHECK_OK(pt_append(s, k.tokens, k.n));
  ev = (kvc_pool_event*)calloc(full + 1, sizeof *ev);
  size_t count = 0;
  CHECK_OK(kvc_pool_events_pull(p, ev, full + 1, &count));
  if (!CHECK_EQ_U64(count, full)) goto done;
  const uint8_t* parent = none_hash;
  for (size_t i = 0; i < full; i++) {
    char want_hex[80];
    uint8_t want[32];
    if (!CHECK(hv_nth_field(f[10], i, want_hex, sizeof want_hex) && hv_hash(want_hex, want))) break;
    CHECK_HASH(ev[i].block_hash, want, "vLLM block hash", f[1]);
    CHECK_HASH(ev[i].parent_hash, parent, "parent (NONE_HASH for block 0)", f[1]);
    parent = ev[i].block_hash;
  }
done:
  free(ev);
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
  hv_keys_free(&k);
}

static void test_vectors(void) {
  CHECK_EQ_I64(hv_each_vector(hv_dir, "vllm_hash_vectors.txt", "vllm", 11, check_vector), 15);
}

#define BS 4
#define TOKENS 16

/* Equal tokens share blocks only under equal salts, LoRAs (name and path) and item identifiers. */
static void test_sharing_follows_the_keys(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_one_group(KVC_POOL_HASH_VLLM_SHA256_CBOR, BS, 32, NULL, 0, &p));
  int32_t tokens[TOKENS];
  for (int i = 0; i < TOKENS; i++) tokens[i] = 3 * i;
  kvc_pool_mm_item dog = {"dog", 3, 5, 2}, cat = {"cat", 3, 5, 2};
  kvc_pool_sequence_options base = KVC_POOL_SEQUENCE_OPTIONS_INIT, lora = base, lora2 = base, salted = base,
                            with_dog = base, with_cat = base;
  lora.adapter_key = "a", lora.adapter_key_len = 1, lora.adapter_path = "/x", lora.adapter_path_len = 2;
  lora2 = lora, lora2.adapter_path = "/y";
  salted.salt = "t1", salted.salt_len = 2;
  with_dog.mm_items = &dog, with_dog.num_mm_items = 1;
  with_cat.mm_items = &cat, with_cat.num_mm_items = 1;
  const kvc_pool_sequence_options* keep[] = {&base, &lora, &salted, &with_dog};
  kvc_pool_sequence* held[4] = {0};
  for (int i = 0; i < 4; i++) {
    REQUIRE_OK(kvc_pool_sequence_create(p, keep[i], &held[i]));
    CHECK_OK(pt_append(held[i], tokens, TOKENS));
  }
  CHECK_EQ_U64(pt_matched(p, &base, tokens, TOKENS), TOKENS - BS);
  CHECK_EQ_U64(pt_matched(p, &lora, tokens, TOKENS), TOKENS - BS);
  CHECK_EQ_U64(pt_matched(p, &lora2, tokens, TOKENS), 0);  /* the path is in vLLM's LoRA key */
  CHECK_EQ_U64(pt_matched(p, &salted, tokens, TOKENS), TOKENS - BS);
  CHECK_EQ_U64(pt_matched(p, &with_dog, tokens, TOKENS), TOKENS - BS);
  CHECK_EQ_U64(pt_matched(p, &with_cat, tokens, TOKENS), BS); /* the item [5, 7) starts in block 1 */
  for (int i = 0; i < 4; i++) kvc_pool_sequence_destroy(held[i]);
  kvc_pool_destroy(p);
}

/* A caller of 0.7 before hash_mode passes 96 bytes: kvcache's own hash, as docs/block-hash.md's vectors. */
static void test_options_size_96(void) {
  pt_single po;
  pt_single_fill(&po, KVC_POOL_GROUP_FULL, BS, 8, 1, 2);
  po.o.event_capacity = 16;
  po.o.hash_mode = KVC_POOL_HASH_VLLM_SHA256_CBOR; /* beyond 96 bytes: not read */
  po.o.struct_size = 96;
  kvc_pool* p = NULL;
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  int32_t tokens[BS] = {1, 2, 3, 4};
  if (CHECK_OK(kvc_pool_sequence_create(p, NULL, &s)) && CHECK_OK(pt_append(s, tokens, BS))) {
    kvc_pool_event ev;
    size_t count = 0;
    uint8_t root[32], want[32];
    CHECK_OK(kvc_pool_events_pull(p, &ev, 1, &count));
    CHECK_OK(kvc_block_hash_root(NULL, 0, NULL, 0, root));
    CHECK_OK(kvc_block_hash(root, tokens, BS, NULL, 0, want));
    if (CHECK_EQ_U64(count, 1)) CHECK_HASH(ev.block_hash, want, "96-byte options hash", "size-96");
  }
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
  kvc_pool_options init;
  memset(&init, 0xab, sizeof init);
  kvc_pool_options_init(&init);
  CHECK_EQ_I64(init.hash_mode, KVC_POOL_HASH_KVCACHE);
  kvc_pool_sequence_options so;
  memset(&so, 0xab, sizeof so);
  kvc_pool_sequence_options_init(&so);
  CHECK(!so.adapter_path && !so.adapter_path_len && !so.adapter_id);
}

/* Bad pool options: INVALID_ARGUMENT naming the field, the value and the rule; out untouched. */
static void test_bad_pool_options(void) {
  kvc_pool* const sentinel = (kvc_pool*)(uintptr_t)0x5eed;
  kvc_pool* out = sentinel;
  EXPECT_ERR(pt_one_group(2, BS, 4, NULL, 0, &out), KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_create",
             "options.hash_mode is 2", "KVC_POOL_HASH_KVCACHE (0) or KVC_POOL_HASH_VLLM_SHA256_CBOR (1)");
  EXPECT_ERR(pt_one_group(KVC_POOL_HASH_VLLM_SHA256_CBOR, BS, 4, "\xff\xfe", 2, &out), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_pool_create", "options.hash_seed (2 bytes) is not UTF-8", "NONE_HASH seed");
  CHECK_EQ_PTR(out, sentinel);
  /* The same non-UTF-8 seed is fine for kvcache's own hash: its seed is bytes. */
  CHECK_OK(pt_one_group(KVC_POOL_HASH_KVCACHE, BS, 4, "\xff\xfe", 2, &out));
  kvc_pool_destroy(out);
}

/* Bad sequence options: INVALID_ARGUMENT naming the field and the rule; no sequence, the pool unchanged. */
static void test_bad_sequence_options(void) {
  kvc_pool *vllm = NULL, *own = NULL;
  REQUIRE_OK(pt_one_group(KVC_POOL_HASH_VLLM_SHA256_CBOR, BS, 8, NULL, 0, &vllm));
  REQUIRE_OK(pt_one_group(KVC_POOL_HASH_KVCACHE, BS, 8, NULL, 0, &own));
  kvc_pool_stats before = pt_stats(vllm, 0);
  kvc_pool_sequence* const sentinel = (kvc_pool_sequence*)(uintptr_t)0x5eed;
  kvc_pool_sequence* out = sentinel;
  kvc_pool_mm_item item = {"\xc3\x28", 2, 0, 4}; /* an invalid 2-byte sequence */
  kvc_pool_sequence_options o;
#define BAD(pool, setup, ...)                                                                            \
  do {                                                                                                   \
    o = (kvc_pool_sequence_options)KVC_POOL_SEQUENCE_OPTIONS_INIT;                                       \
    setup;                                                                                               \
    EXPECT_ERR(kvc_pool_sequence_create(pool, &o, &out), KVC_ERROR_INVALID_ARGUMENT,                     \
               "kvc_pool_sequence_create", __VA_ARGS__);                                                 \
    CHECK_EQ_PTR(out, sentinel);                                                                         \
  } while (0)
  BAD(vllm, (o.adapter_key = "\x80", o.adapter_key_len = 1), "options->adapter_key is not UTF-8", "vLLM's str");
  BAD(vllm, (o.adapter_key = "a", o.adapter_key_len = 1, o.adapter_path = "\xed\xa0\x80", o.adapter_path_len = 3),
      "options->adapter_path is not UTF-8");  /* a surrogate */
  BAD(vllm, (o.salt = "\xc0\xaf", o.salt_len = 2), "options->salt (the cache salt) is not UTF-8"); /* overlong */
  BAD(vllm, (o.mm_items = &item, o.num_mm_items = 1), "options->mm_items[0].hash (vLLM's item identifier) is not UTF-8");
  BAD(vllm, (o.adapter_path = "/p", o.adapter_path_len = 2), "adapter_path_len is 2 but adapter_key is empty");
  BAD(vllm, o.adapter_path_len = 2, "options->adapter_path is NULL but adapter_path_len is 2");
  BAD(vllm, o.adapter_id = -1, "options->adapter_id is -1", ">= 0");
  BAD(own, (o.adapter_key = "a", o.adapter_key_len = 1, o.adapter_path = "/p", o.adapter_path_len = 2),
      "adapter_path_len is 2 but the pool's hash_mode is KVC_POOL_HASH_KVCACHE");
  BAD(vllm, o.struct_size = 64, "struct_size is 64", "24, 56, 80");
#undef BAD
  kvc_pool_stats after = pt_stats(vllm, 0);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  o = (kvc_pool_sequence_options)KVC_POOL_SEQUENCE_OPTIONS_INIT;
  o.adapter_key = "a", o.adapter_key_len = 1, o.adapter_path = "/p", o.adapter_path_len = 2, o.adapter_id = 7;
  CHECK_OK(kvc_pool_sequence_create(vllm, &o, &out));
  kvc_pool_sequence_destroy(out);
  kvc_pool_destroy(vllm);
  kvc_pool_destroy(own);
}

int main(int argc, char** argv) {
  static const hv_test tests[] = {HV_TEST(test_vectors), HV_TEST(test_sharing_follows_the_keys),
                                  HV_TEST(test_options_size_96), HV_TEST(test_bad_pool_options),
                                  HV_TEST(test_bad_sequence_options)};
  return hv_main(argc, argv, __FILE__, tests, sizeof tests / sizeof tests[0]);
}
