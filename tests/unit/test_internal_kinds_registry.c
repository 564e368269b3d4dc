/*
 * test_internal_kinds_registry.c: what the registry (core/kinds.c) requires
 * of every kind it lists: a check_loaded hook (core/kind.h), without which a
 * file could give the kind's layers any geometry; and kvci_kind_check_loaded
 * refusing a layer of a kind that lacks one instead of trusting it.
 */
#include "internal.h"
#include "test_util.h"

static void test_every_kind_checks_loaded_layers(void) {
  size_t n = 0;
  for (const kvc_kind* k; (k = kvci_kind_at(n)) != NULL; n++)
    if (!CHECK(k->check_loaded != NULL)) fprintf(TU_LOG, "  kind %d (%s) has no check_loaded hook\n", (int)k->id, k->name);
  CHECK(n >= 17);
}

static void test_a_kind_without_the_hook_is_refused(void) {
  kvc_kind bare = *kvci_kind_find(KVC_LAYER_DYNAMIC);
  bare.check_loaded = NULL;
  kvc_layer l;
  memset(&l, 0, sizeof l);
  l.kind = bare.id;
  l.desc = &bare;
  l.ops = bare.ops;
  kvc_error* e = kvci_kind_check_loaded("test", "layer 0", &l);
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_INTERNAL);
  CHECK(e && strstr(kvc_error_message(e), "defines no check_loaded hook") != NULL);
  kvc_error_destroy(e);
  bare.check_loaded = kvci_loaded_store_only;
  CHECK_OK(kvci_kind_check_loaded("test", "layer 0", &l));
}

int main(void) {
  TU_RUN(test_every_kind_checks_loaded_layers);
  TU_RUN(test_a_kind_without_the_hook_is_refused);
  return tu_finish();
}
