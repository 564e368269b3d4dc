/*
 * The alias index that update keeps between calls (core/alias_index.c) is
 * only as good as the touches that mark it stale. These tests show that its
 * check (KVC_CHECK_ALIAS_INDEX, on for every CTest test) sees a store that
 * moved without a touch, that a touch makes the next update see the move,
 * and that an input pointing into a store that moved behind the index's back
 * would slip through the alias check: what the check exists to prevent.
 */
#include "internal.h"
#include "test_util.h"

/* A 2-layer dynamic cache with 4 tokens in each layer. */
static kvc_cache* filled_cache(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0));
  if (!c) return NULL;
  int ok = 1;
  for (uint32_t l = 0; ok && l < 2; l++) ok = CHECK_OK(tu_update_tokens(c, l, 1, 2, 4, 8, 8, 0, NULL, NULL));
  return tu_kept(c, ok);
}

/* Gives layer 0 a new store of the same geometry (the history copied) without touching the index. */
static void move_store_behind_the_index(kvc_cache* c) {
  kvc_layer* l = c->layers[0];
  void *k, *v;
  REQUIRE(kvci_store_alloc(c, l->batch, l->heads, l->cap, l->k_dim, l->v_dim, l->elem, &k, &v) == 0);
  size_t bytes = (size_t)(l->batch * l->heads * l->cap * l->k_dim) * l->elem;
  memcpy(k, l->k, bytes);
  memcpy(v, l->v, bytes);
  kvci_store_free(c, 0, l->k, l->v);
  l->k = k;
  l->v = v;
  kvci_layer_sync_view(l);
}

static void test_check_sees_a_missed_touch(void) {
  kvc_cache* c = filled_cache();
  REQUIRE(c != NULL);
  c->check_alias_index = 0; /* refresh must not abort here: the test asks verify itself */
  REQUIRE(kvci_alias_index_refresh(c) == 0);
  CHECK(kvci_alias_index_verify(c) == 0);
  move_store_behind_the_index(c);
  CHECK(kvci_alias_index_refresh(c) == 0); /* kept: nothing touched it */
  CHECK(kvci_alias_index_verify(c) == 1);  /* and the check says so */
  /* An input inside the moved store is not seen as aliasing by the stale index: the bug a missed touch is. */
  kvc_kv view = tu_view(c, 0);
  CHECK(!kvci_alias_index_overlaps(c, kvci_tensor_span(&view.key)));
  kvci_alias_index_touch(c);
  CHECK(kvci_alias_index_refresh(c) == 0);
  CHECK(kvci_alias_index_verify(c) == 0);
  CHECK(kvci_alias_index_overlaps(c, kvci_tensor_span(&view.key)));
  kvc_cache_destroy(c);
}

/* Steady decode steps touch nothing, and the kept index stays right (the check is on under CTest). */
static void test_steady_updates_keep_a_correct_index(void) {
  kvc_cache* c = filled_cache();
  REQUIRE(c != NULL);
  for (int step = 0; step < 200; step++) { /* grows the stores a few times on the way */
    for (uint32_t l = 0; l < 2; l++) REQUIRE_OK(tu_update_tokens(c, l, 1, 2, 1, 8, 8, 4 + step, NULL, NULL));
    REQUIRE(kvci_alias_index_refresh(c) == 0);
    CHECK(kvci_alias_index_verify(c) == 0);
  }
  kvc_kv view = tu_view(c, 1);
  CHECK(kvci_alias_index_overlaps(c, kvci_tensor_span(&view.value)));
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_check_sees_a_missed_touch);
  TU_RUN(test_steady_updates_keep_a_correct_index);
  return tu_finish();
}
