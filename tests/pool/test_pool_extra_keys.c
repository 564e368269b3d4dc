/*
 * test_pool_extra_keys.c: a pool sequence's extra keys (an adapter key and
 * multimodal items, kvc_pool_sequence_options since 0.7): the pool's block
 * hashes against block_hash_v2_vectors.txt (written by
 * make_block_hash_vectors.py with hashlib), sharing only between sequences
 * with equal keys, and bad options refused with the pool unchanged.
 */
#include "hash_vectors.h"
#include "pool_test.h"
#include "test_errors.h"


/* One `pool` vector: the pool's STORED events carry HASHES, and kvc_block_hash over EXTRAS gives them too. */
static void check_pool_vector(char** f) {
  hv_keys k;
  kvc_pool* p = NULL;
  kvc_pool_sequence* s = NULL;
  if (!CHECK(hv_keys_read(f, 0, &k))) goto done;
  size_t full = k.n / (size_t)k.bs;
  if (!CHECK_OK(pt_one_group(KVC_POOL_HASH_KVCACHE, (uint32_t)k.bs, (uint32_t)(full + 2), k.seed, k.seed_len, &p)))
    goto done;
  kvc_pool_sequence_options o = hv_keys_options(&k);
  if (!CHECK_OK(kvc_pool_sequence_create(p, &o, &s))) goto done;
  int64_t* slots = (int64_t*)malloc((k.n + 1) * sizeof(int64_t));
  CHECK_OK(kvc_pool_reserve(s, k.tokens, k.n, slots));
  free(slots);
  CHECK_OK(kvc_pool_commit(s));
  kvc_pool_event ev[64];
  size_t count = 0;
  CHECK_OK(kvc_pool_events_pull(p, ev, 64, &count));
  if (!CHECK_EQ_U64(count, full)) goto done;
  uint8_t parent[32], root[32];
  CHECK_OK(kvc_block_hash_root(k.seed, k.seed_len, k.salt, k.salt_len, root));
  memcpy(parent, root, 32);
  for (size_t i = 0; i < full; i++) {
    char want_hex[80], extra_hex[4096];
    uint8_t want[32], got[32];
    size_t extra_len = 0;
    if (!CHECK(hv_nth_field(f[9], i, want_hex, sizeof want_hex) && hv_hash(want_hex, want) &&
               hv_nth_field(f[8], i, extra_hex, sizeof extra_hex)))
      break;
    CHECK_HASH(ev[i].block_hash, want, "pool block hash", f[1]);
    CHECK_HASH(ev[i].parent_hash, parent, "pool parent hash", f[1]);
    uint8_t* extra = hv_hex(extra_hex, &extra_len);
    CHECK_OK(kvc_block_hash(parent, k.tokens + i * (size_t)k.bs, (size_t)k.bs, extra, extra_len, got));
    CHECK_HASH(got, want, "kvc_block_hash over EXTRAS", f[1]);
    free(extra);
    memcpy(parent, want, 32);
  }
done:
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
  hv_keys_free(&k);
}

static void test_v2_vectors(void) {
  CHECK_EQ_I64(hv_each_vector(hv_dir, "block_hash_v2_vectors.txt", "pool", 10, check_pool_vector), 9);
}

#define BS 4
#define TOKENS 32

/* Commits TOKENS tokens in a new sequence with these options (first `split` of them, then the rest in a fork). */
static void fill(kvc_pool* p, const kvc_pool_sequence_options* o, const int32_t* tokens, size_t split) {
  kvc_pool_sequence *s = NULL, *child = NULL;
  int64_t slots[TOKENS];
  REQUIRE_OK(kvc_pool_sequence_create(p, o, &s));
  CHECK_OK(kvc_pool_reserve(s, tokens, split, slots));
  CHECK_OK(kvc_pool_commit(s));
  if (split < TOKENS && CHECK_OK(kvc_pool_fork(s, &child))) {
    CHECK_OK(kvc_pool_reserve(child, tokens + split, TOKENS - split, slots));
    CHECK_OK(kvc_pool_commit(child));
  }
  kvc_pool_sequence_destroy(child);
  kvc_pool_sequence_destroy(s); /* its blocks stay cached */
}

/* Equal tokens (the placeholders of an image), different image hashes or adapters: no block is shared. */
static void test_sharing_follows_the_keys(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_one_group(KVC_POOL_HASH_KVCACHE, BS, 64, "m", 1, &p));
  int32_t tokens[TOKENS];
  for (int i = 0; i < TOKENS; i++) tokens[i] = i < 8 ? 32000 : i; /* image placeholders, then text */
  const char* cat = "sha256:cat";
  const char* dog = "sha256:dog";
  kvc_pool_mm_item cat_item = {cat, strlen(cat), 0, 8}, dog_item = {dog, strlen(dog), 0, 8};
  kvc_pool_sequence_options with_cat = KVC_POOL_SEQUENCE_OPTIONS_INIT, with_dog = with_cat, plain = with_cat;
  with_cat.mm_items = &cat_item, with_cat.num_mm_items = 1;
  with_dog.mm_items = &dog_item, with_dog.num_mm_items = 1;
  /* The blocks after the fork hash with the parent's keys too, else a cat request would match only 16 tokens. */
  fill(p, &with_cat, tokens, 16);
  CHECK_EQ_U64(pt_matched(p, &with_dog, tokens, TOKENS), 0);
  CHECK_EQ_U64(pt_matched(p, &plain, tokens, TOKENS), 0);
  CHECK_EQ_U64(pt_matched(p, &with_cat, tokens, TOKENS), TOKENS - BS); /* all but the block of the last token */

  kvc_pool_sequence_options lora_a = KVC_POOL_SEQUENCE_OPTIONS_INIT, lora_b = lora_a;
  lora_a.adapter_key = "lora:a", lora_a.adapter_key_len = 6;
  lora_b.adapter_key = "lora:b", lora_b.adapter_key_len = 6;
  for (int i = 0; i < TOKENS; i++) tokens[i] = 1000 + i;
  fill(p, &lora_a, tokens, TOKENS);
  CHECK_EQ_U64(pt_matched(p, &lora_b, tokens, TOKENS), 0);
  CHECK_EQ_U64(pt_matched(p, &plain, tokens, TOKENS), 0);
  CHECK_EQ_U64(pt_matched(p, &lora_a, tokens, TOKENS), TOKENS - BS);

  /* An image at tokens [9, 11): the blocks before it are shared whatever the image, none from its block on. */
  for (int i = 0; i < TOKENS; i++) tokens[i] = 2000 + i;
  cat_item.offset = dog_item.offset = 9;
  cat_item.length = dog_item.length = 2;
  fill(p, &with_cat, tokens, TOKENS);
  CHECK_EQ_U64(pt_matched(p, &with_dog, tokens, TOKENS), 8);
  CHECK_EQ_U64(pt_matched(p, &with_cat, tokens, TOKENS), TOKENS - BS);
  kvc_pool_destroy(p);
}

/* A caller built against the 0.6 header passes 24 bytes: no extra keys, the same hashes as before. */
static void test_old_struct_size(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_one_group(KVC_POOL_HASH_KVCACHE, BS, 16, "m", 1, &p));
  int32_t tokens[TOKENS];
  for (int i = 0; i < TOKENS; i++) tokens[i] = 7 * i;
  kvc_pool_sequence_options plain = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  fill(p, &plain, tokens, TOKENS);
  kvc_pool_sequence_options old = plain;
  old.struct_size = 24;
  old.adapter_key = "ignored: beyond 24 bytes", old.adapter_key_len = 24;
  CHECK_EQ_U64(pt_matched(p, &old, tokens, TOKENS), TOKENS - BS);
  kvc_pool_sequence_options init;
  memset(&init, 0xab, sizeof init);
  kvc_pool_sequence_options_init(&init);
  /* Field by field: the padding after struct_size is not part of the value. */
  CHECK_EQ_U64(init.struct_size, sizeof init);
  CHECK(!init.salt && !init.salt_len && !init.mm_items && !init.num_mm_items && !init.adapter_key &&
        !init.adapter_key_len);
  kvc_pool_destroy(p);
}

/* Every bad option: INVALID_ARGUMENT naming the field, the value and the rule; no sequence, out untouched. */
static void test_bad_options(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(pt_one_group(KVC_POOL_HASH_KVCACHE, BS, 16, "m", 1, &p));
  kvc_pool_stats before = pt_stats(p, 0);
  kvc_pool_sequence* const sentinel = (kvc_pool_sequence*)(uintptr_t)0x5eed;
  kvc_pool_sequence* out = sentinel;
  static char big[KVC_POOL_EXTRA_KEY_MAX + 1];
  kvc_pool_mm_item items[2] = {{"a", 1, 0, 4}, {"b", 1, 8, 4}};
  kvc_pool_sequence_options o;
#define BAD(setup, ...)                                                                                \
  do {                                                                                                 \
    o = (kvc_pool_sequence_options)KVC_POOL_SEQUENCE_OPTIONS_INIT;                                     \
    o.mm_items = items, o.num_mm_items = 2;                                                            \
    items[0] = (kvc_pool_mm_item){"a", 1, 0, 4};                                                       \
    items[1] = (kvc_pool_mm_item){"b", 1, 8, 4};                                                       \
    setup;                                                                                             \
    EXPECT_ERR(kvc_pool_sequence_create(p, &o, &out), KVC_ERROR_INVALID_ARGUMENT,                      \
               "kvc_pool_sequence_create", __VA_ARGS__);                                               \
    CHECK_EQ_PTR(out, sentinel);                                                                       \
  } while (0)
  BAD(items[1].offset = 2, "mm_items[1].offset is 2", "covers [0, 4)", "sorted by offset", "not overlap");
  BAD(items[1].offset = 3, "mm_items[1].offset is 3", "must not overlap");
  BAD((items[0].offset = 9, items[1].offset = 1), "mm_items[1].offset is 1", "sorted by offset");
  BAD(items[0].length = 0, "mm_items[0].length is 0", ">= 1 token");
  BAD(items[1].offset = (uint64_t)1 << 40, "mm_items[1] covers tokens [1099511627776", "at most 2^40 tokens");
  BAD(items[1].length = UINT64_MAX - 4, "mm_items[1] covers tokens [8, 8 + 18446744073709551611)", "2^40");
  BAD(items[0].hash_len = 0, "mm_items[0].hash_len is 0", "1 to 1024 bytes");
  BAD((items[1].hash = big, items[1].hash_len = sizeof big), "mm_items[1].hash_len is 1025", "1 to 1024 bytes");
  BAD(items[0].hash = NULL, "mm_items[0].hash_len is 1 at a NULL hash", "non-NULL");
  BAD(o.mm_items = NULL, "mm_items is NULL but num_mm_items is 2");
  BAD(o.num_mm_items = KVC_POOL_MM_ITEMS_MAX + 1, "num_mm_items is 65537", "at most 65536");
  BAD((o.adapter_key = big, o.adapter_key_len = sizeof big), "adapter_key_len is 1025", "at most 1024");
  BAD(o.adapter_key_len = 3, "adapter_key is NULL but adapter_key_len is 3");
  BAD(o.struct_size = 40, "struct_size is 40", "24, 56");
#undef BAD
  kvc_pool_stats after = pt_stats(p, 0);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  /* The same options, made valid, work: the pool was left usable. */
  o = (kvc_pool_sequence_options)KVC_POOL_SEQUENCE_OPTIONS_INIT;
  o.mm_items = items, o.num_mm_items = 2;
  CHECK_OK(kvc_pool_sequence_create(p, &o, &out));
  kvc_pool_sequence_destroy(out);
  kvc_pool_destroy(p);
}

static int discard(void* user, const void* data, size_t bytes) {
  (void)user, (void)data, (void)bytes;
  return 0;
}

/* Sequence files hold no extra keys: saving such a sequence would load one that shares wrongly. */
static void test_save_refused(void) {
  kvc_pool* p = NULL;
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(pt_one_group(KVC_POOL_HASH_KVCACHE, BS, 16, "m", 1, &p));
  kvc_pool_sequence_options o = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  o.adapter_key = "lora:a", o.adapter_key_len = 6;
  if (CHECK_OK(kvc_pool_sequence_create(p, &o, &s)))
    EXPECT_ERR(kvc_pool_sequence_save_to(s, discard, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
               "kvc_pool_sequence_save_to", "extra keys", "cannot be saved");
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
}

int main(int argc, char** argv) {
  static const hv_test tests[] = {HV_TEST(test_v2_vectors), HV_TEST(test_sharing_follows_the_keys),
                                  HV_TEST(test_old_struct_size), HV_TEST(test_bad_options), HV_TEST(test_save_refused)};
  return hv_main(argc, argv, __FILE__, tests, sizeof tests / sizeof tests[0]);
}
