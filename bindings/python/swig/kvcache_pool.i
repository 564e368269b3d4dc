/*
 * kvcache_pool.i: the pool (kvcache/pool.h) in the SWIG module, %included by kvcache.i after the caches. The
 * public API is kvcache/pool.py; this file binds every function, struct and constant of the header, the simple
 * calls through typemaps and the ones that make handles, views or read tensors by hand (kvcache_pool.h holds
 * the handle types).
 */

%{
#include "kvcache_pool.h"
%}

/* ----------------------------------------------------------------- typemaps */

/* Every call on a pool or on one of its sequences enters the pool's guard (one thread at a time); calls that
   change blocks or tables make the pool's table and state views stale (KVC_PY_POOL_STALE_VIEWS). */
%typemap(in) kvc_pool* pool (kvc_py_guard* guard = NULL) {
  $1 = kvc_py_pool_enter($input, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) kvc_pool* pool "kvc_py_pool_leave(guard$argnum);"
%typemap(in) const kvc_pool* pool (kvc_py_guard* guard = NULL) {
  $1 = kvc_py_pool_enter($input, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) const kvc_pool* pool "kvc_py_pool_leave(guard$argnum);"
%typemap(in) kvc_pool_sequence* sequence (kvc_py_guard* guard = NULL) {
  $1 = kvc_py_seq_enter($input, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) kvc_pool_sequence* sequence "kvc_py_pool_leave(guard$argnum);"
%typemap(in) const kvc_pool_sequence* sequence (kvc_py_guard* guard = NULL) {
  $1 = kvc_py_seq_enter($input, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) const kvc_pool_sequence* sequence "kvc_py_pool_leave(guard$argnum);"

/* Token ids: a sequence of ints or a 1-D integer tensor on the CPU. */
%typemap(in) (const int32_t* tokens, size_t num_tokens) (int32_t* ids = NULL, size_t n = 0) {
  ids = kvc_py_tokens_in($input, "$symname", &n);
  if (!ids) SWIG_fail;
  $1 = ids;
  $2 = n;
}
%typemap(freearg) (const int32_t* tokens, size_t num_tokens) "PyMem_Free(ids$argnum);"

%typemap(in, numinputs=0) uint64_t* matched_tokens (uint64_t tmp = 0) "$1 = &tmp;"
%typemap(argout) uint64_t* matched_tokens {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromUnsignedLongLong((unsigned long long)*$1), 1);
}

%typemap(in, numinputs=0) kvc_pool_stats* out (kvc_pool_stats* tmp = NULL) {
  tmp = (kvc_pool_stats*)calloc(1, sizeof *tmp);
  if (!tmp) { PyErr_NoMemory(); SWIG_fail; }
  tmp->struct_size = (uint32_t)sizeof *tmp;
  $1 = tmp;
}
%typemap(argout) kvc_pool_stats* out {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj($1, $1_descriptor, SWIG_POINTER_OWN), 1);
  tmp$argnum = NULL;
}
%typemap(freearg) kvc_pool_stats* out "free(tmp$argnum);"

/* Option structs start as their _INIT macros. */
KVC_OPTIONS_CTOR(kvc_pool_options, kvc_pool_options_init)
%define KVC_OPTIONS_CTOR_MACRO(TYPE, INIT)
%extend TYPE {
  TYPE() {
    TYPE* o = (TYPE*)malloc(sizeof(TYPE));
    if (o) {
      TYPE init = INIT;
      *o = init;
    }
    return o;
  }
}
%enddef
KVC_OPTIONS_CTOR_MACRO(kvc_pool_group_options, KVC_POOL_GROUP_OPTIONS_INIT)
KVC_OPTIONS_CTOR_MACRO(kvc_pool_layer_options, KVC_POOL_LAYER_OPTIONS_INIT)
KVC_OPTIONS_CTOR_MACRO(kvc_pool_sequence_options, KVC_POOL_SEQUENCE_OPTIONS_INIT)
KVC_OPTIONS_CTOR_MACRO(kvc_pool_vllm_batch_options, KVC_POOL_VLLM_BATCH_OPTIONS_INIT)
%extend kvc_pool_stats {
  kvc_pool_stats() {
    kvc_pool_stats* o = (kvc_pool_stats*)calloc(1, sizeof(kvc_pool_stats));
    if (o) o->struct_size = (uint32_t)sizeof(kvc_pool_stats);
    return o;
  }
}

%array_class(kvc_pool_group_options, PoolGroupOptionsArray);
%array_class(kvc_pool_layer_options, PoolLayerOptionsArray);

/* The tables' tensors are the pool's: they are reached through View objects. */
%immutable kvc_pool_table::table;
%immutable kvc_pool_table::indptr;
%immutable kvc_pool_table::last_page_len;

/* Written by hand below (handles, views, tensors, arrays whose size the typemaps cannot know). */
%ignore kvc_pool_create;
%ignore kvc_pool_destroy;
%ignore kvc_pool_set_stream;
%ignore kvc_pool_sequence_create;
%ignore kvc_pool_sequence_destroy;
%ignore kvc_pool_reserve;
%ignore kvc_pool_fork;
%ignore kvc_pool_blocks_needed;
%ignore kvc_pool_write;
%ignore kvc_pool_write_layer;
%ignore kvc_pool_reserve_batch;
%ignore kvc_pool_commit_batch;
%ignore kvc_pool_layer_storage;
%ignore kvc_pool_block_table;
%ignore kvc_pool_gather;
%ignore kvc_pool_recurrent_state;
%ignore kvc_pool_events_pull;
%ignore kvc_pool_events_pull_vllm;

%include "kvcache/pool.h"

%init %{
  if (PyType_Ready(&PoolHandleType) < 0 || PyType_Ready(&SequenceHandleType) < 0) return -1;
  Py_INCREF(&PoolHandleType);
  PyModule_AddObject(m, "PoolHandle", (PyObject*)&PoolHandleType);
  Py_INCREF(&SequenceHandleType);
  PyModule_AddObject(m, "SequenceHandle", (PyObject*)&SequenceHandleType);
  kvc_py_owner_stream = kvc_py_pool_stream_of;
%}

%feature("nothread") kvc_py_pool_create;
%feature("nothread") kvc_py_pool_destroy;
%feature("nothread") kvc_py_pool_set_stream;
%feature("nothread") kvc_py_pool_sequence_create;
%feature("nothread") kvc_py_pool_sequence_destroy;
%feature("nothread") kvc_py_pool_reserve;
%feature("nothread") kvc_py_pool_fork;
%feature("nothread") kvc_py_pool_blocks_needed;
%feature("nothread") kvc_py_pool_write;
%feature("nothread") kvc_py_pool_write_layer;
%feature("nothread") kvc_py_pool_reserve_batch;
%feature("nothread") kvc_py_pool_commit_batch;
%feature("nothread") kvc_py_pool_layer_storage;
%feature("nothread") kvc_py_pool_block_table;
%feature("nothread") kvc_py_pool_gather;
%feature("nothread") kvc_py_pool_recurrent_state;
%feature("nothread") kvc_py_pool_events_pull;
%feature("nothread") kvc_py_pool_events_pull_vllm;

%rename(kvc_pool_create) kvc_py_pool_create;
%rename(kvc_pool_destroy) kvc_py_pool_destroy;
%rename(kvc_pool_set_stream) kvc_py_pool_set_stream;
%rename(kvc_pool_sequence_create) kvc_py_pool_sequence_create;
%rename(kvc_pool_sequence_destroy) kvc_py_pool_sequence_destroy;
%rename(kvc_pool_reserve) kvc_py_pool_reserve;
%rename(kvc_pool_fork) kvc_py_pool_fork;
%rename(kvc_pool_blocks_needed) kvc_py_pool_blocks_needed;
%rename(kvc_pool_write) kvc_py_pool_write;
%rename(kvc_pool_write_layer) kvc_py_pool_write_layer;
%rename(kvc_pool_reserve_batch) kvc_py_pool_reserve_batch;
%rename(kvc_pool_commit_batch) kvc_py_pool_commit_batch;
%rename(kvc_pool_layer_storage) kvc_py_pool_layer_storage;
%rename(kvc_pool_block_table) kvc_py_pool_block_table;
%rename(kvc_pool_gather) kvc_py_pool_gather;
%rename(kvc_pool_recurrent_state) kvc_py_pool_recurrent_state;
%rename(kvc_pool_events_pull) kvc_py_pool_events_pull;
%rename(kvc_pool_events_pull_vllm) kvc_py_pool_events_pull_vllm;

%inline %{
/*
 * kvc_pool_create(options, hash_seed, storage) -> PoolHandle: hash_seed (bytes or None) is set in a copy of the
 * options for the call, so that the options object never points at memory Python may free. storage (None, or a
 * writable C-contiguous buffer) holds every layer's K/V: the pool's allocator (kvcache/allocator.h) serves
 * them from it, and the handle keeps the buffer until the pool is destroyed.
 */
PyObject* kvc_py_pool_create(const kvc_pool_options* options, PyObject* hash_seed, PyObject* storage) {
  if (!options) {
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_create: options is None");
    return NULL;
  }
  kvc_py_buffer_arena* arena = NULL;
  if (storage != Py_None && !(arena = kvc_py_arena_new(storage))) return NULL;
  Py_buffer seed;
  int has_seed = hash_seed != Py_None;
  if (has_seed && kvc_py_bytes_in(hash_seed, "kvc_pool_create", "hash_seed", &seed) < 0) {
    kvc_py_arena_release(arena);
    return NULL;
  }
  kvc_pool_options o = *options;
  if (arena) o.allocator = &arena->allocator;
  if (has_seed) {
    o.hash_seed = seed.buf;
    o.hash_seed_len = (size_t)seed.len;
  }
  kvc_pool* out = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_pool_create(&o, &out);
  Py_END_ALLOW_THREADS
  if (has_seed) PyBuffer_Release(&seed);
  if (err) {
    kvc_py_arena_release(arena); /* a failed create gave back what it took */
    kvc_py_raise(err);
    return NULL;
  }
  return kvc_py_pool_handle_new(out, o.num_groups, o.num_layers, arena);
}

/*
 * kvc_pool_destroy(pool): closes the pool at once (later calls on it or its sequences raise ValueError, its
 * views go stale); the memory is freed when the last reference to it (the handle, a sequence, an exported
 * tensor) is gone.
 */
PyObject* kvc_py_pool_destroy(PyObject* pool) {
  if (pool == Py_None) Py_RETURN_NONE;
  PoolHandle* p = kvc_py_pool_arg(pool, "kvc_pool_destroy");
  if (!p) return NULL;
  if (p->own.writers || p->own.readers) {
    kvc_py_raise_code(KVC_ERROR_BUSY, "kvcache: close() while another thread is inside a call on the pool");
    return NULL;
  }
  p->own.closed = 1;
  kvc_py_pool_stale(p, 1);
  p->storage.closed = 1;
  p->storage.epoch++;
  Py_RETURN_NONE;
}

/* kvc_pool_set_stream(pool, stream): stream is a cudaStream_t / hipStream_t as an int, or None (the default). */
PyObject* kvc_py_pool_set_stream(PyObject* pool, PyObject* stream) {
  uintptr_t handle = 0;
  if (stream != Py_None) {
    PyObject* index = PyNumber_Index(stream);
    if (!index) {
      PyErr_Format(PyExc_TypeError, "kvc_pool_set_stream: stream must be an int (a stream handle) or None, got %.100s",
                   Py_TYPE(stream)->tp_name);
      return NULL;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if ((v == (unsigned long long)-1 && PyErr_Occurred()) || (unsigned long long)(uintptr_t)v != v) {
      PyErr_Clear();
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT,
                        "kvc_pool_set_stream: stream is not a stream handle (a non-negative int that fits a pointer)");
      return NULL;
    }
    handle = (uintptr_t)v;
  }
  kvc_py_guard* guard = NULL;
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!p) return NULL;
  kvc_error* err = kvc_pool_set_stream(p, (void*)handle);
  kvc_py_pool_leave(guard);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  ((PoolHandle*)pool)->stream = handle;
  Py_RETURN_NONE;
}

/*
 * The multimodal items of kvc_pool_sequence_create: `items` is a list of (bytes hash, int offset, int length)
 * that the caller (pool.py) built and keeps alive for the call, so the hashes are borrowed, not copied.
 * Returns a PyMem array (NULL with *n 0 for an empty list), or NULL with an exception set.
 */
static kvc_pool_mm_item* kvc_py_mm_items(PyObject* items, size_t* n) {
  Py_ssize_t count = PyList_Size(items);
  *n = 0;
  if (count < 0) return NULL;
  if (count == 0) return NULL;
  kvc_pool_mm_item* out = PyMem_New(kvc_pool_mm_item, (size_t)count);
  if (!out) return (kvc_pool_mm_item*)PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject* t = PyList_GET_ITEM(items, i);
    char* hash = NULL;
    Py_ssize_t hash_len = 0;
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3 ||
        PyBytes_AsStringAndSize(PyTuple_GET_ITEM(t, 0), &hash, &hash_len) < 0) {
      PyMem_Free(out);
      return NULL;
    }
    unsigned long long offset = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 1));
    unsigned long long length = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 2));
    if (PyErr_Occurred()) {
      PyMem_Free(out);
      return NULL;
    }
    out[i] = (kvc_pool_mm_item){hash, (size_t)hash_len, offset, length};
  }
  *n = (size_t)count;
  return out;
}

/*
 * kvc_pool_sequence_create(pool, salt, adapter_key, mm_items, adapter_path, adapter_id) -> SequenceHandle; salt,
 * adapter_key and adapter_path are bytes or None, mm_items a list of (bytes, int, int) (kvc_py_mm_items).
 */
PyObject* kvc_py_pool_sequence_create(PyObject* pool, PyObject* salt, PyObject* adapter_key, PyObject* mm_items,
                                      PyObject* adapter_path, long long adapter_id) {
  Py_buffer buf, adapter, path;
  int has_salt = salt != Py_None, has_adapter = adapter_key != Py_None, has_path = adapter_path != Py_None;
  if (has_salt && kvc_py_bytes_in(salt, "kvc_pool_sequence_create", "salt", &buf) < 0) return NULL;
  if (has_adapter && kvc_py_bytes_in(adapter_key, "kvc_pool_sequence_create", "adapter_key", &adapter) < 0) {
    if (has_salt) PyBuffer_Release(&buf);
    return NULL;
  }
  if (has_path && kvc_py_bytes_in(adapter_path, "kvc_pool_sequence_create", "adapter_path", &path) < 0) {
    if (has_adapter) PyBuffer_Release(&adapter);
    if (has_salt) PyBuffer_Release(&buf);
    return NULL;
  }
  size_t num_items = 0;
  kvc_pool_mm_item* items = kvc_py_mm_items(mm_items, &num_items);
  PyObject* result = NULL;
  if (!PyErr_Occurred()) {
    kvc_py_guard* guard = NULL;
    kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_STALE_VIEWS, &guard);
    if (p) {
      kvc_pool_sequence_options o = KVC_POOL_SEQUENCE_OPTIONS_INIT;
      if (has_salt) {
        o.salt = buf.buf;
        o.salt_len = (size_t)buf.len;
      }
      if (has_adapter) {
        o.adapter_key = adapter.buf;
        o.adapter_key_len = (size_t)adapter.len;
      }
      if (has_path) {
        o.adapter_path = path.buf;
        o.adapter_path_len = (size_t)path.len;
      }
      o.adapter_id = (int64_t)adapter_id;
      o.mm_items = items;
      o.num_mm_items = num_items;
      kvc_pool_sequence* out = NULL;
      kvc_error* err = kvc_pool_sequence_create(p, &o, &out);
      kvc_py_pool_leave(guard);
      if (err) kvc_py_raise(err);
      else result = kvc_py_seq_handle_new(out, pool);
    }
  }
  PyMem_Free(items);
  if (has_path) PyBuffer_Release(&path);
  if (has_adapter) PyBuffer_Release(&adapter);
  if (has_salt) PyBuffer_Release(&buf);
  return result;
}

/*
 * kvc_pool_sequence_destroy(sequence): releases the sequence's blocks now (cached ones stay reusable); later
 * calls on it raise ValueError. Closing twice, or after the pool was closed, does nothing.
 */
PyObject* kvc_py_pool_sequence_destroy(PyObject* sequence) {
  if (sequence == Py_None) Py_RETURN_NONE;
  SequenceHandle* s = kvc_py_seq_arg(sequence, "kvc_pool_sequence_destroy");
  if (!s) return NULL;
  PoolHandle* p = (PoolHandle*)s->pool;
  if (!s->ptr || p->own.closed) Py_RETURN_NONE;
  if (kvc_py_pool_guard_enter(p, KVC_PY_POOL_STALE_VIEWS) < 0) return NULL;
  kvc_pool_sequence_destroy(s->ptr);
  s->ptr = NULL;
  kvc_py_pool_leave(&p->own);
  Py_RETURN_NONE;
}

/*
 * kvc_pool_reserve(sequence, tokens) -> bytearray of num_groups * len(tokens) int64 slots, group-major (entry
 * g * n + i for token i in group g; -1 for a recurrent group).
 */
PyObject* kvc_py_pool_reserve(PyObject* sequence, PyObject* tokens) {
  if (!kvc_py_seq_arg(sequence, "kvc_pool_reserve")) return NULL;
  size_t count = 0;
  int32_t* ids = kvc_py_tokens_in(tokens, "kvc_pool_reserve", &count);
  if (!ids) return NULL;
  PoolHandle* pool = (PoolHandle*)((SequenceHandle*)sequence)->pool;
  PyObject* out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(count * pool->num_groups * sizeof(int64_t)));
  PyObject* result = NULL;
  kvc_py_guard* guard = NULL;
  kvc_pool_sequence* s = out ? kvc_py_seq_enter(sequence, KVC_PY_POOL_STALE_VIEWS, &guard) : NULL;
  if (s) {
    int64_t* slots = (int64_t*)PyByteArray_AS_STRING(out);
    kvc_error* err;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_pool_reserve(s, ids, count, slots);
    Py_END_ALLOW_THREADS
    kvc_py_pool_leave(guard);
    if (err) kvc_py_raise(err);
    else result = out;
  }
  if (!result) Py_XDECREF(out);
  PyMem_Free(ids);
  return result;
}

/* kvc_pool_fork(sequence) -> SequenceHandle sharing every block. */
PyObject* kvc_py_pool_fork(PyObject* sequence) {
  kvc_py_guard* guard = NULL;
  kvc_pool_sequence* s = kvc_py_seq_enter(sequence, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (!s) return NULL;
  kvc_pool_sequence* out = NULL;
  kvc_error* err = kvc_pool_fork(s, &out);
  kvc_py_pool_leave(guard);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  return kvc_py_seq_handle_new(out, ((SequenceHandle*)sequence)->pool);
}

/* kvc_pool_blocks_needed(pool, sequences, new_tokens) -> [blocks of group 0, group 1, ...]. */
PyObject* kvc_py_pool_blocks_needed(PyObject* pool, PyObject* sequences, PyObject* new_tokens) {
  PoolHandle* ph = kvc_py_pool_arg(pool, "kvc_pool_blocks_needed");
  if (!ph) return NULL;
  const kvc_pool_sequence** seqs = NULL;
  size_t n = 0;
  kvc_py_i64 counts;
  memset(&counts, 0, sizeof counts);
  PyObject* result = NULL;
  uint64_t* out = NULL;
  kvc_py_guard* guard = NULL;
  if (kvc_py_seq_list(sequences, pool, "sequences", &seqs, &n) < 0) return NULL;
  if (kvc_py_i64_from(new_tokens, "new_tokens", &counts) < 0) goto done;
  if (counts.count != n) {
    char msg[160];
    snprintf(msg, sizeof msg, "kvc_pool_blocks_needed: new_tokens has %zu entries but sequences has %zu", counts.count,
             n);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    if (counts.data[i] < 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "kvc_pool_blocks_needed: new_tokens[%zu] is %lld; it must be >= 0", i,
               (long long)counts.data[i]);
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
      goto done;
    }
  }
  out = (uint64_t*)PyMem_Calloc((size_t)ph->num_groups + 1, sizeof *out);
  if (!out) {
    PyErr_NoMemory();
    goto done;
  }
  const kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!p) goto done;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_pool_blocks_needed(p, seqs, (const uint64_t*)counts.data, n, out);
  Py_END_ALLOW_THREADS
  kvc_py_pool_leave(guard);
  if (err) {
    kvc_py_raise(err);
    goto done;
  }
  result = PyList_New(ph->num_groups);
  for (uint32_t g = 0; result && g < ph->num_groups; g++) {
    PyObject* x = PyLong_FromUnsignedLongLong((unsigned long long)out[g]);
    if (!x) Py_CLEAR(result);
    else PyList_SET_ITEM(result, g, x);
  }
done:
  PyMem_Free(out);
  PyMem_Free((void*)seqs);
  kvc_py_i64_release(&counts);
  return result;
}

/*
 * kvc_pool_write(pool, keys, values, slot_mapping): keys[l] / values[l] are [num_tokens, heads, head_dim]
 * tensors (None for recurrent layers), one per layer; slot_mapping has num_groups * num_tokens entries in
 * kvc_pool_reserve's form. Table and state views stay valid: a write changes stored K/V only.
 */
PyObject* kvc_py_pool_write(PyObject* pool, PyObject* keys, PyObject* values, PyObject* slot_mapping) {
  PoolHandle* ph = kvc_py_pool_arg(pool, "kvc_pool_write");
  if (!ph) return NULL;
  PyObject *ks = NULL, *vs = NULL, *result = NULL;
  kvc_py_tensor_in* ins = NULL;
  kvc_tensor *kt = NULL, *vt = NULL;
  kvc_py_i64 slots;
  memset(&slots, 0, sizeof slots);
  Py_ssize_t n = 0, done = 0;
  kvc_py_guard* guard = NULL;
  ks = PySequence_Fast(keys, "keys: expected a sequence of tensors (one per layer)");
  vs = ks ? PySequence_Fast(values, "values: expected a sequence of tensors (one per layer)") : NULL;
  if (!vs) goto done;
  n = PySequence_Fast_GET_SIZE(ks);
  if (PySequence_Fast_GET_SIZE(vs) != n) {
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_write: keys and values differ in length");
    goto done;
  }
  if ((size_t)n != ph->num_layers) {
    char msg[160];
    snprintf(msg, sizeof msg, "kvc_pool_write: keys has %zd entries but the pool has %u layers (one per layer, None "
             "for recurrent layers)", n, (unsigned)ph->num_layers);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    goto done;
  }
  if (kvc_py_i64_from(slot_mapping, "slot_mapping", &slots) < 0) goto done;
  if (ph->num_groups == 0 || slots.count % ph->num_groups != 0) {
    char msg[192];
    snprintf(msg, sizeof msg, "kvc_pool_write: slot_mapping has %zu entries, not a multiple of the pool's %u groups "
             "(num_groups * num_tokens, group-major)", slots.count, (unsigned)ph->num_groups);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    goto done;
  }
  ins = (kvc_py_tensor_in*)PyMem_Calloc((size_t)(2 * n + 1), sizeof *ins);
  kt = (kvc_tensor*)PyMem_Calloc((size_t)n + 1, sizeof *kt);
  vt = (kvc_tensor*)PyMem_Calloc((size_t)n + 1, sizeof *vt);
  if (!ins || !kt || !vt) {
    PyErr_NoMemory();
    goto done;
  }
  for (done = 0; done < n; done++) {
    PyObject* k = PySequence_Fast_GET_ITEM(ks, done);
    PyObject* v = PySequence_Fast_GET_ITEM(vs, done);
    if (k != Py_None && kvc_py_tensor_in_from(k, "keys[i]", &ins[2 * done]) < 0) goto done;
    if (v != Py_None && kvc_py_tensor_in_from(v, "values[i]", &ins[2 * done + 1]) < 0) {
      done++; /* release the key read above too */
      goto done;
    }
    if (k != Py_None) kt[done] = ins[2 * done].t; /* else zeroed: a recurrent layer's ignored entry */
    if (v != Py_None) vt[done] = ins[2 * done + 1].t;
  }
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!p) goto done;
  kvc_error* err;
  size_t num_tokens = slots.count / ph->num_groups;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_pool_write(p, kt, vt, (uint32_t)n, slots.data, num_tokens);
  Py_END_ALLOW_THREADS
  kvc_py_pool_leave(guard);
  if (err) kvc_py_raise(err);
  else {
    Py_INCREF(Py_None);
    result = Py_None;
  }
done:
  if (ins)
    for (Py_ssize_t i = 0; i < 2 * done && i < 2 * n; i++) kvc_py_tensor_release(&ins[i]);
  PyMem_Free(ins);
  PyMem_Free(kt);
  PyMem_Free(vt);
  kvc_py_i64_release(&slots);
  Py_XDECREF(ks);
  Py_XDECREF(vs);
  return result;
}

/*
 * kvc_pool_write_layer(pool, layer, key, value, slot_mapping): one layer's [num_tokens, heads, head_dim] K/V
 * through the step's whole slot mapping (num_groups * num_tokens int64 entries, kvc_pool_reserve's form).
 */
PyObject* kvc_py_pool_write_layer(PyObject* pool, unsigned int layer, PyObject* key, PyObject* value,
                                  PyObject* slot_mapping) {
  static const char* FN = "kvc_pool_write_layer";
  PoolHandle* ph = kvc_py_pool_arg(pool, FN);
  if (!ph) return NULL;
  kvc_py_tensor_in k, v;
  kvc_py_i64 slots;
  memset(&slots, 0, sizeof slots);
  PyObject* result = NULL;
  if (kvc_py_tensor_in_from(key, "key", &k) < 0) return NULL;
  memset(&v, 0, sizeof v);
  const int has_value = value != Py_None; /* a latent layer takes no value */
  if (has_value && kvc_py_tensor_in_from(value, "value", &v) < 0) {
    kvc_py_tensor_release(&k);
    return NULL;
  }
  if (kvc_py_i64_from(slot_mapping, "slot_mapping", &slots) == 0) {
    if (ph->num_groups == 0 || slots.count % ph->num_groups != 0) {
      char msg[192];
      snprintf(msg, sizeof msg, "%s: slot_mapping has %zu entries, not a multiple of the pool's %u groups "
               "(num_groups * num_tokens, group-major)", FN, slots.count, (unsigned)ph->num_groups);
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    } else {
      kvc_py_guard* guard = NULL;
      kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_KEEP_VIEWS, &guard);
      if (p) {
        kvc_error* err;
        size_t num_tokens = slots.count / ph->num_groups;
        Py_BEGIN_ALLOW_THREADS
        err = kvc_pool_write_layer(p, (uint32_t)layer, &k.t, has_value ? &v.t : NULL, slots.data, num_tokens);
        Py_END_ALLOW_THREADS
        kvc_py_pool_leave(guard);
        if (err) kvc_py_raise(err);
        else {
      Py_INCREF(Py_None);
      result = Py_None;
    }
      }
    }
  }
  kvc_py_i64_release(&slots);
  kvc_py_tensor_release(&k);
  kvc_py_tensor_release(&v);
  return result;
}

/*
 * kvc_pool_reserve_batch(pool, sequences, tokens, num_tokens) -> (num_reserved, bytearray of num_groups * T
 * int64 slots): tokens are the sequences' tokens one after another (T of them); num_tokens is one count per
 * sequence or one int for all. One C call for the whole batch.
 */
PyObject* kvc_py_pool_reserve_batch(PyObject* pool, PyObject* sequences, PyObject* tokens, PyObject* num_tokens) {
  static const char* FN = "kvc_pool_reserve_batch";
  PoolHandle* ph = kvc_py_pool_arg(pool, FN);
  if (!ph) return NULL;
  const kvc_pool_sequence** seqs = NULL;
  size_t n = 0, count = 0;
  int32_t* ids = NULL;
  uint64_t* counts = NULL;
  PyObject *out = NULL, *result = NULL;
  kvc_py_i64 given;
  memset(&given, 0, sizeof given);
  if (kvc_py_seq_list(sequences, pool, "sequences", &seqs, &n) < 0) return NULL;
  if (!(ids = kvc_py_tokens_in(tokens, FN, &count))) goto done;
  if (!(counts = (uint64_t*)PyMem_Malloc((n + 1) * sizeof *counts))) {
    PyErr_NoMemory();
    goto done;
  }
  if (PyLong_Check(num_tokens)) {
    long long each = PyLong_AsLongLong(num_tokens);
    if (each == -1 && PyErr_Occurred()) goto done;
    given.data = given.small; /* one count for every sequence */
    given.small[0] = each;
    given.count = 1;
  } else {
    if (kvc_py_i64_from(num_tokens, "num_tokens", &given) < 0) goto done;
    if (given.count != n) {
      char msg[160];
      snprintf(msg, sizeof msg, "%s: num_tokens has %zu entries but sequences has %zu", FN, given.count, n);
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
      goto done;
    }
  }
  for (size_t i = 0; i < given.count; i++)
    if (given.data[i] < 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "%s: num_tokens[%zu] is %lld; it must be >= 0", FN, i, (long long)given.data[i]);
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
      goto done;
    }
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) counts[i] = (uint64_t)given.data[given.count == n ? i : 0];
  for (size_t i = 0; i < n; i++) total += counts[i];
  if (total != count) {
    char msg[192];
    snprintf(msg, sizeof msg, "%s: tokens has %zu entries but num_tokens adds up to %llu (the sequences' tokens "
             "one after another)", FN, count, (unsigned long long)total);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    goto done;
  }
  out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(count * ph->num_groups * sizeof(int64_t)));
  if (!out) goto done;
  kvc_py_guard* guard = NULL;
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (!p) goto done;
  size_t reserved = 0;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_pool_reserve_batch(p, (kvc_pool_sequence* const*)seqs, n, ids, counts,
                               (int64_t*)PyByteArray_AS_STRING(out), &reserved);
  Py_END_ALLOW_THREADS
  kvc_py_pool_leave(guard);
  if (err) kvc_py_raise(err);
  else result = Py_BuildValue("(nO)", (Py_ssize_t)reserved, out);
done:
  Py_XDECREF(out);
  PyMem_Free(counts);
  PyMem_Free(ids);
  PyMem_Free((void*)seqs);
  kvc_py_i64_release(&given);
  return result;
}

/* kvc_pool_commit_batch(pool, sequences): kvc_pool_commit of each, in one C call. */
PyObject* kvc_py_pool_commit_batch(PyObject* pool, PyObject* sequences) {
  PoolHandle* ph = kvc_py_pool_arg(pool, "kvc_pool_commit_batch");
  if (!ph) return NULL;
  const kvc_pool_sequence** seqs = NULL;
  size_t n = 0;
  if (kvc_py_seq_list(sequences, pool, "sequences", &seqs, &n) < 0) return NULL;
  PyObject* result = NULL;
  kvc_py_guard* guard = NULL;
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (p) {
    kvc_error* err;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_pool_commit_batch(p, (kvc_pool_sequence* const*)seqs, n);
    Py_END_ALLOW_THREADS
    kvc_py_pool_leave(guard);
    if (err) kvc_py_raise(err);
    else {
      Py_INCREF(Py_None);
      result = Py_None;
    }
  }
  PyMem_Free((void*)seqs);
  return result;
}

/* kvc_pool_layer_storage(pool, layer, layout) -> (keys, values): Views valid until the pool is closed. */
PyObject* kvc_py_pool_layer_storage(PyObject* pool, unsigned int layer, int layout) {
  kvc_py_guard* guard = NULL;
  const kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!p) return NULL;
  kvc_kv out;
  memset(&out, 0, sizeof out);
  kvc_error* err = kvc_pool_layer_storage(p, (uint32_t)layer, (kvc_pool_layout)layout, &out);
  kvc_py_pool_leave(guard);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  if (out.value.data) return kvc_py_kv_pair(pool, &((PoolHandle*)pool)->storage, &out);
  /* A latent layer: its rows, and no V (None). */
  PyObject* k = kvc_py_view_new(pool, &((PoolHandle*)pool)->storage, &out.key);
  PyObject* pair = k ? PyTuple_Pack(2, k, Py_None) : NULL;
  Py_XDECREF(k);
  return pair;
}

/*
 * kvc_pool_block_table(pool, sequences, group, format) -> (table, indptr, last_page_len): int32 Views over the
 * pool's table buffer of that group and format (indptr and last_page_len None for the padded format), valid
 * until the next call that changes the pool's blocks or tables, or the next table of the same group and format.
 */
PyObject* kvc_py_pool_block_table(PyObject* pool, PyObject* sequences, unsigned int group, int format) {
  if (!kvc_py_pool_arg(pool, "kvc_pool_block_table")) return NULL;
  const kvc_pool_sequence** seqs = NULL;
  size_t n = 0;
  if (kvc_py_seq_list(sequences, pool, "sequences", &seqs, &n) < 0) return NULL;
  kvc_py_guard* guard = NULL;
  PyObject* result = NULL;
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (p) {
    kvc_pool_table out;
    memset(&out, 0, sizeof out);
    kvc_error* err;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_pool_block_table(p, seqs, n, (uint32_t)group, (kvc_pool_table_format)format, &out);
    Py_END_ALLOW_THREADS
    kvc_py_pool_leave(guard);
    if (err) {
      kvc_py_raise(err); /* nothing changed: the previous table of this group and format stays valid */
    } else {
      /* the group is in range (the call succeeded): its table of this format was rewritten */
      kvc_py_guard* tg = &((PoolHandle*)pool)->tables[2 * (size_t)group + (format == KVC_POOL_TABLE_CSR)];
      tg->epoch++;
      PyObject* t = kvc_py_view_new(pool, tg, &out.table);
      PyObject* i = t ? kvc_py_view_new(pool, tg, &out.indptr) : NULL;
      PyObject* l = i ? kvc_py_view_new(pool, tg, &out.last_page_len) : NULL;
      if (l) result = PyTuple_Pack(3, t, i, l);
      Py_XDECREF(t);
      Py_XDECREF(i);
      Py_XDECREF(l);
    }
  }
  PyMem_Free((void*)seqs);
  return result;
}

/* kvc_pool_gather(sequence, layer, keys, values): copies the sequence's K/V into caller tensors. */
PyObject* kvc_py_pool_gather(PyObject* sequence, unsigned int layer, PyObject* keys, PyObject* values) {
  kvc_py_tensor_in k, v;
  memset(&k, 0, sizeof k);
  memset(&v, 0, sizeof v);
  PyObject* result = NULL;
  kvc_py_guard* guard = NULL;
  const kvc_pool_sequence* s = NULL;
  const int has_values = values != Py_None; /* a latent layer has no V */
  if (kvc_py_tensor_in_from(keys, "keys", &k) == 0 &&
      (!has_values || kvc_py_tensor_in_from(values, "values", &v) == 0) &&
      (s = kvc_py_seq_enter(sequence, KVC_PY_POOL_KEEP_VIEWS, &guard)) != NULL) {
    kvc_error* err;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_pool_gather(s, (uint32_t)layer, &k.t, has_values ? &v.t : NULL);
    Py_END_ALLOW_THREADS
    kvc_py_pool_leave(guard);
    if (err) kvc_py_raise(err);
    else {
    Py_INCREF(Py_None);
    result = Py_None;
  }
  }
  kvc_py_tensor_release(&k);
  kvc_py_tensor_release(&v);
  return result;
}

/* kvc_pool_recurrent_state(sequence, layer) -> (conv, ssm) Views, written in place by the model. */
PyObject* kvc_py_pool_recurrent_state(PyObject* sequence, unsigned int layer) {
  kvc_py_guard* guard = NULL;
  kvc_pool_sequence* s = kvc_py_seq_enter(sequence, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!s) return NULL;
  kvc_tensor conv, ssm;
  memset(&conv, 0, sizeof conv);
  memset(&ssm, 0, sizeof ssm);
  kvc_error* err = kvc_pool_recurrent_state(s, (uint32_t)layer, &conv, &ssm);
  kvc_py_pool_leave(guard);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  PyObject* pool = ((SequenceHandle*)sequence)->pool;
  PyObject* a = kvc_py_view_new(pool, guard, &conv);
  PyObject* b = a ? kvc_py_view_new(pool, guard, &ssm) : NULL;
  PyObject* result = b ? PyTuple_Pack(2, a, b) : NULL;
  Py_XDECREF(a);
  Py_XDECREF(b);
  return result;
}

/*
 * kvc_pool_events_pull(pool, capacity) -> [(id, kind, group, block_hash, parent_hash, num_tokens, block_id)]:
 * up to `capacity` queued events, oldest first; the hashes as 32-byte bytes.
 */
PyObject* kvc_py_pool_events_pull(PyObject* pool, size_t capacity) {
  kvc_pool_event* events = (kvc_pool_event*)PyMem_Calloc(capacity ? capacity : 1, sizeof *events);
  if (!events) return PyErr_NoMemory();
  kvc_py_guard* guard = NULL;
  PyObject* result = NULL;
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (p) {
    size_t count = 0;
    kvc_error* err = kvc_pool_events_pull(p, events, capacity, &count);
    kvc_py_pool_leave(guard);
    if (err) {
      kvc_py_raise(err);
    } else if ((result = PyList_New((Py_ssize_t)count)) != NULL) {
      for (size_t i = 0; i < count; i++) {
        const kvc_pool_event* e = &events[i];
        PyObject* item = Py_BuildValue("(KiIy#y#II)", (unsigned long long)e->id, (int)e->kind, (unsigned)e->group,
                                       (const char*)e->block_hash, (Py_ssize_t)KVC_BLOCK_HASH_SIZE,
                                       (const char*)e->parent_hash, (Py_ssize_t)KVC_BLOCK_HASH_SIZE,
                                       (unsigned)e->num_tokens, (unsigned)e->block_id);
        if (!item) {
          Py_CLEAR(result);
          break;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, item);
      }
    }
  }
  PyMem_Free(events);
  return result;
}

/*
 * kvc_pool_events_pull_vllm(pool, int_hashes, ts, data_parallel_rank) -> bytes: every queued event as the
 * msgpack of vLLM's KVEventBatch (the size query, then the pull, under one entry of the pool).
 */
PyObject* kvc_py_pool_events_pull_vllm(PyObject* pool, int int_hashes, double ts, long long data_parallel_rank) {
  kvc_py_guard* guard = NULL;
  kvc_pool* p = kvc_py_pool_enter(pool, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (!p) return NULL;
  kvc_pool_vllm_batch_options o = KVC_POOL_VLLM_BATCH_OPTIONS_INIT;
  o.int_hashes = int_hashes;
  o.ts = ts;
  o.data_parallel_rank = (int64_t)data_parallel_rank;
  size_t size = 0;
  kvc_error* err = kvc_pool_events_pull_vllm(p, &o, NULL, 0, &size);
  PyObject* out = NULL;
  if (!err) {
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out) err = kvc_pool_events_pull_vllm(p, &o, PyBytes_AS_STRING(out), size, &size);
  }
  kvc_py_pool_leave(guard);
  if (err) {
    Py_CLEAR(out);
    kvc_py_raise(err);
  }
  return out;
}
%}
