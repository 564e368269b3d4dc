/*
 * tests/pool/test_pool_allocator.c: a pool's block storage from the caller's
 * allocator (kvc_pool_options.allocator, kvcache/allocator.h): allocated
 * once at create (K and V of every layer), zeroed by the library, the
 * storage views inside the caller's memory, every byte given back by
 * destroy, and a refusal at any allocation failing create cleanly.
 */
#include "../common/arena_allocator.h"
#include "pool_test.h"

static const pt_group GROUPS[] = {{KVC_POOL_GROUP_FULL, 2, 10, 0},
                                  {KVC_POOL_GROUP_SLIDING, 2, 10, 3},
                                  {KVC_POOL_GROUP_RECURRENT, 2, 6, 0}};
static const uint32_t LAYER_GROUP[] = {0, 1, 2, 0};
#define NG 3
#define NL 4

static arena A;

static kvc_error* arena_pool(const kvc_allocator* al, kvc_pool** out) {
  return pt_pool_with(out, GROUPS, NG, LAYER_GROUP, NL, KVC_POOL_LAYOUT_NHD, 0, 1, al);
}

static int all_zero(const kvc_tensor* t) {
  const unsigned char* p = (const unsigned char*)t->data + t->byte_offset;
  size_t n = (size_t)(t->dtype.bits / 8);
  for (int32_t i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* Every layer's K and V come from the arena at create, zeroed; writes land there; destroy returns all. */
static void test_blocks_come_from_the_allocator(void) {
  kvc_allocator al = arena_start(&A);
  kvc_pool* p = NULL;
  REQUIRE_OK(arena_pool(&al, &p));
  CHECK_EQ_I64(A.allocs, 2 * NL);
  for (uint32_t l = 0; l < NL; l++) {
    if (GROUPS[LAYER_GROUP[l]].kind == KVC_POOL_GROUP_RECURRENT) continue;
    kvc_kv kv;
    REQUIRE_OK(kvc_pool_layer_storage(p, l, KVC_POOL_LAYOUT_NHD, &kv));
    CHECK(arena_holds_tensor(&kv.key) && arena_holds_tensor(&kv.value));
    CHECK(all_zero(&kv.key) && all_zero(&kv.value)); /* the arena hands out 0xA5 bytes */
  }
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  const int32_t tokens[5] = {11, 12, 13, 14, 15};
  CHECK_OK(pt_step(p, NG, NL, s, tokens, 5));
  CHECK_EQ_I64(pt_gather_mismatches(s, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(s, 3), 0);
  kvc_kv kv;
  REQUIRE_OK(kvc_pool_layer_storage(p, 0, KVC_POOL_LAYOUT_NHD, &kv));
  CHECK(!all_zero(&kv.key)); /* the written tokens are in the caller's memory */
  CHECK_EQ_I64(A.allocs, 2 * NL); /* the pool never allocates storage again */
  kvc_pool_sequence_destroy(s);
  CHECK_EQ_I64(A.releases, 0);
  kvc_pool_destroy(p);
  arena_check_all_returned(&A);
  CHECK_EQ_I64(A.releases, 1); /* once, after every block went back */
  CHECK_EQ_I64(A.live_at_release, 0);
}

/* Refusing the n-th allocation fails create with OUT_OF_MEMORY naming the bytes and the allocator; nothing kept. */
static void test_refusals_fail_create_cleanly(void) {
  for (long n = 0; n < 2 * NL; n++) {
    kvc_allocator al = arena_start(&A);
    A.budget = n;
    kvc_pool* p = (kvc_pool*)&A;
    CHECK_REFUSED(arena_pool(&al, &p), KVC_ERROR_OUT_OF_MEMORY, "caller's allocator");
    CHECK_EQ_PTR(p, &A);
    CHECK_EQ_I64(A.allocs, n);
    CHECK_EQ_I64(A.releases, 0); /* a failed create leaves ctx with the caller */
    arena_check_all_returned(&A);
  }
}

/* Options of the 0.6 size (80 bytes, before the allocator) still create pools on the backend's memory; a bad
   allocator is refused naming the field. */
static void test_old_size_and_bad_allocator(void) {
  pt_single po;
  pt_single_fill(&po, KVC_POOL_GROUP_FULL, 2, 4, 1, 4);
  po.o.struct_size = 80;
  kvc_pool* p = NULL;
  CHECK_OK(kvc_pool_create(&po.o, &p));
  kvc_kv kv;
  if (p && CHECK_OK(kvc_pool_layer_storage(p, 0, KVC_POOL_LAYOUT_NHD, &kv))) CHECK(!arena_holds_tensor(&kv.key));
  kvc_pool_destroy(p);
  kvc_allocator al = arena_start(&A);
  al.alloc = NULL;
  po.o.struct_size = sizeof po.o;
  po.o.allocator = &al;
  p = NULL;
  CHECK_REFUSED(kvc_pool_create(&po.o, &p), KVC_ERROR_INVALID_ARGUMENT, "options.allocator->alloc is NULL");
  CHECK(p == NULL);
  po.o.struct_size = 84;
  CHECK_REFUSED(kvc_pool_create(&po.o, &p), KVC_ERROR_INVALID_ARGUMENT, "struct_size is 84");
}

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  TU_RUN(test_blocks_come_from_the_allocator);
  TU_RUN(test_refusals_fail_create_cleanly);
  TU_RUN(test_old_size_and_bad_allocator);
  return tu_finish();
}
