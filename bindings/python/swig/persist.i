/*
 * persist.i: cache files (kvcache/persist.h), included at the end of
 * kvcache.i. The path functions are wrapped as generated (a str path, NULL
 * options; a new cache comes back as an owned handle through the `out`
 * typemaps). The callback and buffer variants are written by hand below:
 * save_to calls a Python callable with each chunk (as bytes), the buffer
 * readers take any bytes-like object.
 */
%ignore kvc_write_fn;
/* Pool sequence files take pool handles: they are bound with the pool (bindings of kvcache/pool.h). */
%ignore kvc_pool_sequence_save;
%ignore kvc_pool_sequence_save_to;
%ignore kvc_pool_sequence_load;
%ignore kvc_pool_sequence_load_buffer;
%feature("nothread") kvc_py_cache_save_to;
%feature("nothread") kvc_py_encoder_decoder_cache_save_to;
%feature("nothread") kvc_py_cache_load_buffer;
%feature("nothread") kvc_py_encoder_decoder_cache_load_buffer;
%feature("nothread") kvc_py_cache_restore_buffer;
%feature("nothread") kvc_py_encoder_decoder_cache_restore_buffer;
%rename(kvc_cache_save_to) kvc_py_cache_save_to;
%rename(kvc_encoder_decoder_cache_save_to) kvc_py_encoder_decoder_cache_save_to;
%rename(kvc_cache_load_buffer) kvc_py_cache_load_buffer;
%rename(kvc_encoder_decoder_cache_load_buffer) kvc_py_encoder_decoder_cache_load_buffer;
%rename(kvc_cache_restore_buffer) kvc_py_cache_restore_buffer;
%rename(kvc_encoder_decoder_cache_restore_buffer) kvc_py_encoder_decoder_cache_restore_buffer;
%ignore kvc_cache_save_to;
%ignore kvc_encoder_decoder_cache_save_to;
%ignore kvc_cache_load_buffer;
%ignore kvc_encoder_decoder_cache_load_buffer;
%ignore kvc_cache_restore_buffer;
%ignore kvc_encoder_decoder_cache_restore_buffer;

KVC_OPTIONS_CTOR(kvc_save_options, kvc_save_options_init)
KVC_OPTIONS_CTOR(kvc_load_options, kvc_load_options_init)

%include "kvcache/persist.h"

%{
/* save_to's sink: the library runs without the GIL; each chunk takes it to call `write(bytes)`. */
typedef struct kvc_py_writer {
  PyObject* write;
  PyObject *type, *value, *trace; /* the callable's exception, raised once the save returns */
} kvc_py_writer;

static int kvc_py_write_chunk(void* user, const void* data, size_t bytes) {
  kvc_py_writer* w = (kvc_py_writer*)user;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject* chunk = PyBytes_FromStringAndSize((const char*)data, (Py_ssize_t)bytes);
  PyObject* r = chunk ? PyObject_CallFunctionObjArgs(w->write, chunk, NULL) : NULL;
  Py_XDECREF(chunk);
  Py_XDECREF(r);
  int failed = r == NULL;
  if (failed) PyErr_Fetch(&w->type, &w->value, &w->trace);
  PyGILState_Release(g);
  return failed;
}

/* The result of a save_to: the callable's exception if it raised, else the library's error, else None. */
static PyObject* kvc_py_save_result(kvc_error* err, kvc_py_writer* w) {
  if (w->type) {
    kvc_error_destroy(err);
    PyErr_Restore(w->type, w->value, w->trace);
    return NULL;
  }
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  Py_RETURN_NONE;
}
%}

%inline %{
/* kvc_cache_save_to(cache, write): write(bytes) is called with the file's bytes in order. */
PyObject* kvc_py_cache_save_to(PyObject* cache, PyObject* write) {
  kvc_py_guard* guard = NULL;
  kvc_cache* c = kvc_py_cache_enter(cache, 0, &guard);
  if (!c) return NULL;
  kvc_py_writer w = {write, NULL, NULL, NULL};
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_cache_save_to(c, kvc_py_write_chunk, &w, NULL);
  Py_END_ALLOW_THREADS
  kvc_py_guard_leave(guard, 0);
  return kvc_py_save_result(err, &w);
}

PyObject* kvc_py_encoder_decoder_cache_save_to(PyObject* cache, PyObject* write) {
  kvc_py_guard* guard = NULL;
  kvc_encoder_decoder_cache* c = kvc_py_ed_enter(cache, 0, &guard);
  if (!c) return NULL;
  kvc_py_writer w = {write, NULL, NULL, NULL};
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_encoder_decoder_cache_save_to(c, kvc_py_write_chunk, &w, NULL);
  Py_END_ALLOW_THREADS
  kvc_py_guard_leave(guard, 0);
  return kvc_py_save_result(err, &w);
}

/* kvc_cache_load_buffer(data) -> a new cache handle; data is bytes-like. */
PyObject* kvc_py_cache_load_buffer(PyObject* data) {
  Py_buffer b;
  if (kvc_py_bytes_in(data, "kvc_cache_load_buffer", "data", &b) < 0) return NULL;
  kvc_cache* out = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_cache_load_buffer(b.buf, (size_t)b.len, NULL, &out);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&b);
  if (err) return kvc_py_raise(err), NULL;
  return kvc_py_handle_new(out, NULL, NULL);
}

PyObject* kvc_py_encoder_decoder_cache_load_buffer(PyObject* data) {
  Py_buffer b;
  if (kvc_py_bytes_in(data, "kvc_encoder_decoder_cache_load_buffer", "data", &b) < 0) return NULL;
  kvc_encoder_decoder_cache* out = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_encoder_decoder_cache_load_buffer(b.buf, (size_t)b.len, NULL, &out);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&b);
  if (err) return kvc_py_raise(err), NULL;
  return kvc_py_ed_handle_new(out);
}

/* kvc_cache_restore_buffer(cache, data). */
PyObject* kvc_py_cache_restore_buffer(PyObject* cache, PyObject* data) {
  Py_buffer b;
  if (kvc_py_bytes_in(data, "kvc_cache_restore_buffer", "data", &b) < 0) return NULL;
  kvc_py_guard* guard = NULL;
  kvc_cache* c = kvc_py_cache_enter(cache, 1, &guard);
  kvc_error* err = NULL;
  if (c) {
    Py_BEGIN_ALLOW_THREADS
    err = kvc_cache_restore_buffer(c, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS
    kvc_py_guard_leave(guard, 1);
  }
  PyBuffer_Release(&b);
  if (!c) return NULL;
  if (err) return kvc_py_raise(err), NULL;
  Py_RETURN_NONE;
}

PyObject* kvc_py_encoder_decoder_cache_restore_buffer(PyObject* cache, PyObject* data) {
  Py_buffer b;
  if (kvc_py_bytes_in(data, "kvc_encoder_decoder_cache_restore_buffer", "data", &b) < 0) return NULL;
  kvc_py_guard* guard = NULL;
  kvc_encoder_decoder_cache* c = kvc_py_ed_enter(cache, 1, &guard);
  kvc_error* err = NULL;
  if (c) {
    Py_BEGIN_ALLOW_THREADS
    err = kvc_encoder_decoder_cache_restore_buffer(c, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS
    kvc_py_guard_leave(guard, 1);
  }
  PyBuffer_Release(&b);
  if (!c) return NULL;
  if (err) return kvc_py_raise(err), NULL;
  Py_RETURN_NONE;
}
%}
