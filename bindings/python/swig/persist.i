/*
 * persist.i: cache files (kvcache/persist.h), included at the end of
 * kvcache.i. The path functions are wrapped as generated (a str path, NULL
 * options; a new cache comes back as an owned handle through the `out`
 * typemaps). The callback and buffer variants are written by hand below:
 * save_to calls a Python callable with each chunk (as bytes), the buffer
 * readers take any bytes-like object.
 */
%ignore kvc_write_fn;
/* Pool sequence files: kvc_pool_sequence_save is generated (kvcache_pool.i's sequence typemap enters the pool's
   guard); the other three make or feed sequence handles and are written by hand at the end of this file. */
%feature("nothread") kvc_py_pool_sequence_save_to;
%feature("nothread") kvc_py_pool_sequence_load;
%feature("nothread") kvc_py_pool_sequence_load_buffer;
%rename(kvc_pool_sequence_save_to) kvc_py_pool_sequence_save_to;
%rename(kvc_pool_sequence_load) kvc_py_pool_sequence_load;
%rename(kvc_pool_sequence_load_buffer) kvc_py_pool_sequence_load_buffer;
%ignore kvc_pool_sequence_save_to;
%ignore kvc_pool_sequence_load;
%ignore kvc_pool_sequence_load_buffer;
%feature("nothread") kvc_py_cache_save_to;
%feature("nothread") kvc_py_encoder_decoder_cache_save_to;
%feature("nothread") kvc_py_cache_load;
%feature("nothread") kvc_py_cache_load_buffer;
%feature("nothread") kvc_py_encoder_decoder_cache_load_buffer;
%feature("nothread") kvc_py_cache_restore_buffer;
%feature("nothread") kvc_py_encoder_decoder_cache_restore_buffer;
%rename(kvc_cache_save_to) kvc_py_cache_save_to;
%rename(kvc_encoder_decoder_cache_save_to) kvc_py_encoder_decoder_cache_save_to;
%rename(kvc_cache_load) kvc_py_cache_load;
%rename(kvc_cache_load_buffer) kvc_py_cache_load_buffer;
%rename(kvc_encoder_decoder_cache_load_buffer) kvc_py_encoder_decoder_cache_load_buffer;
%rename(kvc_cache_restore_buffer) kvc_py_cache_restore_buffer;
%rename(kvc_encoder_decoder_cache_restore_buffer) kvc_py_encoder_decoder_cache_restore_buffer;
%ignore kvc_cache_save_to;
%ignore kvc_encoder_decoder_cache_save_to;
%ignore kvc_cache_load;
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

/* kvc_cache_load(path, options, allocator=None) -> a new cache handle; `allocator` (kvcache.Allocator) holds its
 * K/V stores (set in a copy of the options). */
PyObject* kvc_py_cache_load(const char* path, const kvc_load_options* options, PyObject* allocator) {
  kvc_load_options o;
  if (options) o = *options;
  else kvc_load_options_init(&o);
  kvc_allocator a;
  if (kvc_py_allocator_arm(allocator, &a, &o.allocator) < 0) return NULL;
  const kvc_load_options* use = options || o.allocator == &a ? &o : NULL;
  kvc_cache* out = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_cache_load(path, use, &out);
  Py_END_ALLOW_THREADS
  return kvc_py_allocator_settle(&a, o.allocator, err, out);
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

/* ------------------------------------------------------- pool sequence files */

%{
/* A pool sequence from the file `path` (from_file) or from a file's bytes, as a SequenceHandle of `pool`. A load
   takes blocks (and may evict cached ones): table and state views go stale. */
static PyObject* kvc_py_pool_sequence_load_from(PyObject* pool, int from_file, const char* path, const void* data,
                                                size_t bytes) {
  kvc_py_guard* guard = NULL;
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (!p) return NULL;
  kvc_pool_sequence* out = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = from_file ? kvc_pool_sequence_load(p, path, &out) : kvc_pool_sequence_load_buffer(p, data, bytes, &out);
  Py_END_ALLOW_THREADS
  kvc_py_pool_leave(guard);
  if (err) return kvc_py_raise(err), NULL;
  return kvc_py_seq_handle_new(out, pool);
}
%}

%inline %{
/* kvc_pool_sequence_save_to(sequence, write): write(bytes) is called with the file's bytes in order. */
PyObject* kvc_py_pool_sequence_save_to(PyObject* sequence, PyObject* write) {
  kvc_py_guard* guard = NULL;
  const kvc_pool_sequence* s = kvc_py_seq_enter(sequence, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!s) return NULL;
  kvc_py_writer w = {write, NULL, NULL, NULL};
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_pool_sequence_save_to(s, kvc_py_write_chunk, &w, NULL);
  Py_END_ALLOW_THREADS
  kvc_py_pool_leave(guard);
  return kvc_py_save_result(err, &w);
}

/* kvc_pool_sequence_load(pool, path) -> a new SequenceHandle in `pool`. */
PyObject* kvc_py_pool_sequence_load(PyObject* pool, const char* path) {
  return kvc_py_pool_sequence_load_from(pool, 1, path, NULL, 0);
}

/* kvc_pool_sequence_load_buffer(pool, data) -> a new SequenceHandle in `pool`; data is bytes-like. */
PyObject* kvc_py_pool_sequence_load_buffer(PyObject* pool, PyObject* data) {
  Py_buffer b;
  if (kvc_py_bytes_in(data, "kvc_pool_sequence_load_buffer", "data", &b) < 0) return NULL;
  PyObject* result = kvc_py_pool_sequence_load_from(pool, 0, NULL, b.buf, (size_t)b.len);
  PyBuffer_Release(&b);
  return result;
}
%}
