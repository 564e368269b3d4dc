/* core/util/error.c: returned error objects (kvcache/error.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

struct kvc_error {
  kvc_code code;
  char* message;
};

/* Out-of-memory must be reportable without allocating: one static object, never freed. */
static char oom_message[] = "out of memory: an allocation failed; the cache is unchanged";
static struct kvc_error oom_error = {KVC_ERROR_OUT_OF_MEMORY, oom_message};

kvc_error* kvci_err_oom(void) { return &oom_error; }

kvc_error* kvci_err(kvc_code code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (len < 0) len = 0;
  kvc_error* e = (kvc_error*)malloc(sizeof(*e));
  char* msg = (char*)malloc((size_t)len + 1);
  if (!e || !msg) {
    free(e);
    free(msg);
    return &oom_error;
  }
  va_start(ap, fmt);
  vsnprintf(msg, (size_t)len + 1, fmt, ap);
  va_end(ap);
  e->code = code;
  e->message = msg;
  return e;
}

kvc_error* kvci_check_struct_size(const char* fn, const char* arg, uint32_t got, size_t known) {
  if (got != known)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: %s.struct_size is %u but this library knows only %zu; "
                   "initialize the struct with its _INIT macro or init function",
                   fn, arg, got, known);
  return NULL;
}

kvc_code kvc_error_code(const kvc_error* error) { return error ? error->code : KVC_OK; }

const char* kvc_error_message(const kvc_error* error) { return error ? error->message : "ok"; }

void kvc_error_destroy(kvc_error* error) {
  if (!error || error == &oom_error) return;
  free(error->message);
  free(error);
}

const char* kvc_code_name(kvc_code code) {
  switch (code) {
    case KVC_OK: return "KVC_OK";
    case KVC_ERROR_INVALID_ARGUMENT: return "KVC_ERROR_INVALID_ARGUMENT";
    case KVC_ERROR_OUT_OF_RANGE: return "KVC_ERROR_OUT_OF_RANGE";
    case KVC_ERROR_DTYPE_MISMATCH: return "KVC_ERROR_DTYPE_MISMATCH";
    case KVC_ERROR_SHAPE_MISMATCH: return "KVC_ERROR_SHAPE_MISMATCH";
    case KVC_ERROR_DEVICE_MISMATCH: return "KVC_ERROR_DEVICE_MISMATCH";
    case KVC_ERROR_UNSUPPORTED: return "KVC_ERROR_UNSUPPORTED";
    case KVC_ERROR_INVALID_STATE: return "KVC_ERROR_INVALID_STATE";
    case KVC_ERROR_OUT_OF_MEMORY: return "KVC_ERROR_OUT_OF_MEMORY";
    case KVC_ERROR_NO_DEVICE: return "KVC_ERROR_NO_DEVICE";
    case KVC_ERROR_VERSION_MISMATCH: return "KVC_ERROR_VERSION_MISMATCH";
    case KVC_ERROR_INTERNAL: return "KVC_ERROR_INTERNAL";
    case KVC_ERROR_IO: return "KVC_ERROR_IO";
    case KVC_ERROR_BUSY: return "KVC_ERROR_BUSY";
    default: return "KVC_ERROR_UNKNOWN";
  }
}

kvc_error* kvci_loaded_refuse(const char* fn, const char* where, const char* field, int64_t value,
                              const char* rule, ...) {
  char text[384];
  va_list ap;
  va_start(ap, rule);
  vsnprintf(text, sizeof text, rule, ap);
  va_end(ap);
  return kvci_err(KVC_ERROR_IO, "%s: the file's %s: %s is %" PRId64 "; %s", fn, where, field, value, text);
}
