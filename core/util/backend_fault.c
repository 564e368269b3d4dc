/* core/util/backend_fault.c: failed backend calls become errors and poisoned state (backend_fault.h). */
#include "backend_fault.h"

#include <stdio.h>

#include "error.h"

const kvci_fault_owner kvci_fault_cache = {"cache",
                                           "every call but kvc_cache_reset and kvc_cache_destroy is refused until a "
                                           "reset empties it"};
const kvci_fault_owner kvci_fault_pool = {"pool", "every call but the destroy functions is refused"};

/* The backend's words for the call that just failed, or its return value. */
static void describe(char* out, size_t len, const kvc_backend* b, int rc) {
  const char* m = b->last_error ? b->last_error(b->ctx) : NULL;
  if (m && *m)
    snprintf(out, len, "%s", m);
  else
    snprintf(out, len, "it returned %d", rc);
}

int kvci_fault_note_failure(kvci_fault* f, const kvc_backend* b, int rc, const char* entry) {
  if (!rc || f->fresh) return rc;
  f->poisoned = 1;
  f->fresh = 1;
  snprintf(f->entry, sizeof f->entry, "%s", entry);
  describe(f->message, sizeof f->message, b, rc);
  return rc;
}

kvc_error* kvci_fault_refusal_poisoned(const char* fn, const kvci_fault* f, const kvc_backend* b,
                                       const kvci_fault_owner* owner) {
  if (!f->poisoned) return NULL;
  return kvci_err(KVC_ERROR_INVALID_STATE, "%s: the %s's contents were lost when the %s backend failed %s (%s); %s",
                  fn, owner->what, b->name, f->entry, f->message, owner->remedy);
}

kvc_error* kvci_fault_result_fresh(const char* fn, kvci_fault* f, const kvc_backend* b,
                                   const kvci_fault_owner* owner, kvc_error* e) {
  if (!f->fresh) return e;
  f->fresh = 0;
  kvc_error_destroy(e);
  return kvci_err(KVC_ERROR_INVALID_STATE,
                  "%s: the %s backend failed %s (%s) after part of the %s was written; the %s is poisoned: %s", fn,
                  b->name, f->entry, f->message, owner->what, owner->what, owner->remedy);
}

static kvc_error* failed(const char* fn, const kvc_backend* b, const char* entry, const char* message,
                         const char* unchanged) {
  return kvci_err(KVC_ERROR_INVALID_STATE, "%s: the %s backend failed %s (%s); %s", fn, b->name, entry, message,
                  unchanged);
}

kvc_error* kvci_fault_error(const char* fn, const kvc_backend* b, const char* entry, int rc, const char* unchanged) {
  char m[400];
  describe(m, sizeof m, b, rc);
  return failed(fn, b, entry, m, unchanged);
}

kvc_error* kvci_fault_discard(const char* fn, kvci_fault* f, const kvc_backend* b, const char* unchanged) {
  if (!f->fresh) return NULL;
  f->fresh = f->poisoned = 0; /* what the failure damaged does not stay */
  return failed(fn, b, f->entry, f->message, unchanged);
}
