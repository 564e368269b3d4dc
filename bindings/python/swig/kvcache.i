/*
 * kvcache.i: SWIG interface of the kvcache C ABI, built as the private
 * extension module kvcache._lib. The public package (kvcache/*.py) is written
 * on top of it; use that.
 *
 * Every function, struct, field and constant of abi/include/kvcache*.h is
 * wrapped here. Generated wrappers release the GIL around the C call (-threads)
 * and turn a returned kvc_error* into a Python exception (the class registered
 * for its code, see kvcache/_errors.py). Functions whose results point into
 * cache memory (views), take tensors or transfer ownership are written by hand
 * below (%inline) with the C name they replace.
 */
%module(package="kvcache", docstring="Low-level SWIG bindings of the kvcache C ABI (private; use the kvcache package).") _lib

%{
#include "kvcache_py.h"
#include "kvcache_allocator.h"
#include "kvcache_torch.h"
%}

%include <stdint.i>
%include <carrays.i>

/* The headers' export macro and the 64-bit constant macro, for SWIG's preprocessor. */
#define KVC_API
#define UINT64_C(c) c ## ULL

/* --------------------------------------------------------------- typemaps */

/* Errors: NULL is success (the call returns None or its outputs); an error raises. */
%typemap(out) kvc_error* {
  if ($1) {
    kvc_py_raise($1);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* Cache handles. Mutating calls take `kvc_cache*`, queries `const kvc_cache*`. */
%typemap(in) kvc_cache* cache (kvc_py_guard* guard = NULL) {
  $1 = kvc_py_cache_enter($input, 1, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) kvc_cache* cache "kvc_py_guard_leave(guard$argnum, 1);"
%typemap(in) const kvc_cache* cache (kvc_py_guard* guard = NULL) {
  $1 = (kvc_cache*)kvc_py_cache_enter($input, 0, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) const kvc_cache* cache "kvc_py_guard_leave(guard$argnum, 0);"

%typemap(in) kvc_encoder_decoder_cache* cache (kvc_py_guard* guard = NULL) {
  $1 = kvc_py_ed_enter($input, 1, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) kvc_encoder_decoder_cache* cache "kvc_py_guard_leave(guard$argnum, 1);"
%typemap(in) const kvc_encoder_decoder_cache* cache (kvc_py_guard* guard = NULL) {
  $1 = (kvc_encoder_decoder_cache*)kvc_py_ed_enter($input, 0, &guard);
  if (!$1) SWIG_fail;
}
%typemap(freearg) const kvc_encoder_decoder_cache* cache "kvc_py_guard_leave(guard$argnum, 0);"

/* New caches come back as owned handles. */
%typemap(in, numinputs=0) kvc_cache** out (kvc_cache* tmp = NULL) "$1 = &tmp;"
%typemap(argout) kvc_cache** out {
  PyObject* h = kvc_py_handle_new(*$1, NULL, NULL);
  if (!h) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, h, 1);
}
%typemap(in, numinputs=0) kvc_encoder_decoder_cache** out (kvc_encoder_decoder_cache* tmp = NULL) "$1 = &tmp;"
%typemap(argout) kvc_encoder_decoder_cache** out {
  PyObject* h = kvc_py_ed_handle_new(*$1);
  if (!h) SWIG_fail;
  $result = SWIG_Python_AppendOutput($result, h, 1);
}

/* batch_split: Python passes the capacity; the result is a list of handles. */
%typemap(in) (kvc_cache** out, size_t capacity, size_t* count) (size_t n = 0, kvc_cache** arr = NULL) {
  Py_ssize_t cap = PyNumber_AsSsize_t($input, PyExc_OverflowError);
  if (cap == -1 && PyErr_Occurred()) SWIG_fail;
  if (cap < 0) cap = 0;
  arr = (kvc_cache**)PyMem_Calloc((size_t)cap + 1, sizeof *arr);
  if (!arr) { PyErr_NoMemory(); SWIG_fail; }
  $1 = arr; $2 = (size_t)cap; $3 = &n;
}
%typemap(argout) (kvc_cache** out, size_t capacity, size_t* count) {
  PyObject* list = PyList_New((Py_ssize_t)n$argnum);
  if (!list) {
    for (size_t i = 0; i < n$argnum; i++) kvc_cache_destroy(arr$argnum[i]);
    SWIG_fail;
  }
  for (size_t i = 0; i < n$argnum; i++) {
    PyObject* h = kvc_py_handle_new(arr$argnum[i], NULL, NULL); /* destroys the cache on failure */
    if (!h) {
      for (size_t j = i + 1; j < n$argnum; j++) kvc_cache_destroy(arr$argnum[j]);
      Py_DECREF(list);
      SWIG_fail;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, h);
  }
  $result = SWIG_Python_AppendOutput($result, list, 1);
}
%typemap(freearg) (kvc_cache** out, size_t capacity, size_t* count) "PyMem_Free(arr$argnum);"

%typemap(in) (kvc_encoder_decoder_cache** out, size_t capacity, size_t* count)
    (size_t n = 0, kvc_encoder_decoder_cache** arr = NULL) {
  Py_ssize_t cap = PyNumber_AsSsize_t($input, PyExc_OverflowError);
  if (cap == -1 && PyErr_Occurred()) SWIG_fail;
  if (cap < 0) cap = 0;
  arr = (kvc_encoder_decoder_cache**)PyMem_Calloc((size_t)cap + 1, sizeof *arr);
  if (!arr) { PyErr_NoMemory(); SWIG_fail; }
  $1 = arr; $2 = (size_t)cap; $3 = &n;
}
%typemap(argout) (kvc_encoder_decoder_cache** out, size_t capacity, size_t* count) {
  PyObject* list = PyList_New((Py_ssize_t)n$argnum);
  if (!list) {
    for (size_t i = 0; i < n$argnum; i++) kvc_encoder_decoder_cache_destroy(arr$argnum[i]);
    SWIG_fail;
  }
  for (size_t i = 0; i < n$argnum; i++) {
    PyObject* h = kvc_py_ed_handle_new(arr$argnum[i]);
    if (!h) {
      for (size_t j = i + 1; j < n$argnum; j++) kvc_encoder_decoder_cache_destroy(arr$argnum[j]);
      Py_DECREF(list);
      SWIG_fail;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, h);
  }
  $result = SWIG_Python_AppendOutput($result, list, 1);
}
%typemap(freearg) (kvc_encoder_decoder_cache** out, size_t capacity, size_t* count) "PyMem_Free(arr$argnum);"

/* from_batch_splits: a sequence of handles, borrowed for the call. */
%typemap(in) (const kvc_cache* const* splits, size_t count) (PyObject* seq = NULL, kvc_cache** arr = NULL) {
  seq = PySequence_Fast($input, "splits: expected a sequence of cache handles");
  if (!seq) SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  arr = (kvc_cache**)PyMem_Calloc((size_t)n + 1, sizeof *arr);
  if (!arr) { PyErr_NoMemory(); SWIG_fail; }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    kvc_py_guard* g = kvc_py_guard_of(item, "splits");
    if (!g || Py_TYPE(item) != &CacheHandleType) {
      if (g) PyErr_SetString(PyExc_TypeError, "splits: expected cache handles");
      SWIG_fail;
    }
    if (g->closed) { PyErr_SetString(PyExc_ValueError, "splits: a cache is closed"); SWIG_fail; }
    if (g->writers) {
      kvc_py_raise_code(KVC_ERROR_BUSY, "splits: a cache is in use by another thread");
      SWIG_fail;
    }
    arr[i] = ((CacheHandle*)item)->ptr;
  }
  $1 = ($1_ltype)arr; $2 = (size_t)n;
}
%typemap(freearg) (const kvc_cache* const* splits, size_t count) "PyMem_Free(arr$argnum); Py_XDECREF(seq$argnum);"

%typemap(in) (const kvc_encoder_decoder_cache* const* splits, size_t count)
    (PyObject* seq = NULL, kvc_encoder_decoder_cache** arr = NULL) {
  seq = PySequence_Fast($input, "splits: expected a sequence of encoder-decoder handles");
  if (!seq) SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  arr = (kvc_encoder_decoder_cache**)PyMem_Calloc((size_t)n + 1, sizeof *arr);
  if (!arr) { PyErr_NoMemory(); SWIG_fail; }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    if (Py_TYPE(item) != &EncoderDecoderHandleType) {
      PyErr_SetString(PyExc_TypeError, "splits: expected encoder-decoder handles");
      SWIG_fail;
    }
    EncoderDecoderHandle* h = (EncoderDecoderHandle*)item;
    if (h->own.closed) { PyErr_SetString(PyExc_ValueError, "splits: a cache is closed"); SWIG_fail; }
    if (h->own.writers) {
      kvc_py_raise_code(KVC_ERROR_BUSY, "splits: a cache is in use by another thread");
      SWIG_fail;
    }
    arr[i] = h->ptr;
  }
  $1 = ($1_ltype)arr; $2 = (size_t)n;
}
%typemap(freearg) (const kvc_encoder_decoder_cache* const* splits, size_t count)
    "PyMem_Free(arr$argnum); Py_XDECREF(seq$argnum);"

/* A Python allocator object (kvcache.Allocator, kvcache_allocator.h) is optional: None keeps the backend's memory. */
%typemap(default) PyObject* allocator "$1 = Py_None;";

/* Integer arguments: a value out of the C type's range is an OverflowError naming the function, the argument and
 * the value (SWIG's default names only the argument's position). Typedefs of these types (enums) get it too. */
%define KVC_PY_INT_IN(TYPE, BITS, SIGNED)
%typemap(in) TYPE {
  int64_t v_;
  if (kvc_py_int_arg($input, "$symname", "$1_name", BITS, SIGNED, &v_) < 0) SWIG_fail;
  $1 = ($1_ltype)v_;
}
%enddef
KVC_PY_INT_IN(int64_t, 64, 1)
KVC_PY_INT_IN(uint64_t, 64, 0)
KVC_PY_INT_IN(int32_t, 32, 1)
KVC_PY_INT_IN(uint32_t, 32, 0)

/* Paths: str or path-like, in the file system's encoding; a NUL byte is refused rather than cutting the path. */
%typemap(in) const char* path (PyObject* bytes = NULL), const char* directory (PyObject* bytes = NULL) {
  bytes = kvc_py_path_arg($input, "$symname", "$1_name");
  if (!bytes) SWIG_fail;
  $1 = PyBytes_AS_STRING(bytes);
}
%typemap(freearg) const char* path, const char* directory "Py_XDECREF(bytes$argnum);"

/* Index lists: a sequence of ints or a 1-D integer tensor on the CPU. */
%typemap(in) (const int64_t* beam_idx, size_t count) (kvc_py_i64 arr = {NULL, 0, {0}}) {
  if (kvc_py_i64_from($input, "beam_idx", &arr) < 0) SWIG_fail;
  $1 = ($1_ltype)arr.data; $2 = arr.count;
}
%typemap(freearg) (const int64_t* beam_idx, size_t count) "kvc_py_i64_release(&arr$argnum);"
%typemap(in) (const int64_t* indices, size_t count) (kvc_py_i64 arr = {NULL, 0, {0}}) {
  if (kvc_py_i64_from($input, "indices", &arr) < 0) SWIG_fail;
  $1 = ($1_ltype)arr.data; $2 = arr.count;
}
%typemap(freearg) (const int64_t* indices, size_t count) "kvc_py_i64_release(&arr$argnum);"

/* Scalar out-parameters become return values. */
%typemap(in, numinputs=0) int64_t* out (int64_t tmp = 0), int64_t* kv_length (int64_t tmp = 0),
    int64_t* kv_offset (int64_t tmp = 0) "$1 = &tmp;"
%typemap(argout) int64_t* out, int64_t* kv_length, int64_t* kv_offset {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromLongLong((long long)*$1), 1);
}
%typemap(in, numinputs=0) int32_t* out (int32_t tmp = 0) "$1 = &tmp;"
%typemap(argout) int32_t* out { $result = SWIG_Python_AppendOutput($result, PyBool_FromLong(*$1), 1); }
%typemap(in, numinputs=0) int* out (int tmp = 0) "$1 = &tmp;"
%typemap(in, numinputs=0) uint8_t* out (uint8_t tmp = 0) "$1 = &tmp;"
%typemap(argout) uint8_t* out { $result = SWIG_Python_AppendOutput($result, PyBool_FromLong(*$1), 1); }
%typemap(argout) int* out { $result = SWIG_Python_AppendOutput($result, PyBool_FromLong(*$1), 1); }

/* Output structs: a new object with struct_size filled in; fields the library writes. */
%typemap(in, numinputs=0) kvc_layer_info* out (kvc_layer_info* tmp = NULL) {
  tmp = (kvc_layer_info*)calloc(1, sizeof *tmp);
  if (!tmp) { PyErr_NoMemory(); SWIG_fail; }
  tmp->struct_size = (uint32_t)sizeof *tmp;
  $1 = tmp;
}
%typemap(argout) kvc_layer_info* out {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj($1, $1_descriptor, SWIG_POINTER_OWN), 1);
  tmp$argnum = NULL;
}
%typemap(freearg) kvc_layer_info* out "free(tmp$argnum);"
%typemap(in, numinputs=0) kvc_memory_info* out (kvc_memory_info* tmp = NULL) {
  tmp = (kvc_memory_info*)calloc(1, sizeof *tmp);
  if (!tmp) { PyErr_NoMemory(); SWIG_fail; }
  tmp->struct_size = (uint32_t)sizeof *tmp;
  $1 = tmp;
}
%typemap(argout) kvc_memory_info* out {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj($1, $1_descriptor, SWIG_POINTER_OWN), 1);
  tmp$argnum = NULL;
}
%typemap(freearg) kvc_memory_info* out "free(tmp$argnum);"

/* Option structs start initialized (struct_size and defaults), as the _INIT macros do. */
%define KVC_OPTIONS_CTOR(TYPE, INIT)
%extend TYPE {
  TYPE() {
    TYPE* o = (TYPE*)calloc(1, sizeof(TYPE));
    if (o) INIT(o);
    return o;
  }
}
%enddef
KVC_OPTIONS_CTOR(kvc_layer_options, kvc_layer_options_init)
KVC_OPTIONS_CTOR(kvc_model_config, kvc_model_config_init)
KVC_OPTIONS_CTOR(kvc_cache_options, kvc_cache_options_init)
/* A program's alloc/free callbacks: bound as a struct only. Python caches take an allocator object
 * (kvc_cache_create's `allocator`, kvcache_allocator.h); Python pools use Pool(storage=...) (kvcache_pool.i). */
KVC_OPTIONS_CTOR(kvc_allocator, kvc_allocator_init)
KVC_OPTIONS_CTOR(kvc_init_options, kvc_init_options_init)
KVC_OPTIONS_CTOR(kvc_update_options, kvc_update_options_init)
KVC_OPTIONS_CTOR(kvc_quant_options, kvc_quant_options_init)
KVC_OPTIONS_CTOR(kvc_conv_update_options, kvc_conv_update_options_init)
%extend kvc_layer_info {
  kvc_layer_info() {
    kvc_layer_info* o = (kvc_layer_info*)calloc(1, sizeof(kvc_layer_info));
    if (o) o->struct_size = (uint32_t)sizeof(kvc_layer_info);
    return o;
  }
}
%extend kvc_memory_info {
  kvc_memory_info() {
    kvc_memory_info* o = (kvc_memory_info*)calloc(1, sizeof(kvc_memory_info));
    if (o) o->struct_size = (uint32_t)sizeof(kvc_memory_info);
    return o;
  }
}

/* Arrays for the pointer fields of option structs (layer_types, layers, per-layer sizes, positions). */
%array_class(int32_t, Int32Array);
%array_class(int64_t, Int64Array);
%array_class(kvc_layer_options, LayerOptionsArray);

/* ------------------------------------------- functions written by hand */

/* Their generated versions cannot express ownership or views; the %inline versions keep the C names. */
%ignore kvc_cache_destroy;
%ignore kvc_cache_create;
%ignore kvc_cache_create_from_tensors;
%ignore kvc_cache_layer_view;
%ignore kvc_cache_update;
%ignore kvc_cache_update_all;
%ignore kvc_encoder_decoder_cache_create;
%ignore kvc_encoder_decoder_cache_destroy;
%ignore kvc_encoder_decoder_cache_self_attention;
%ignore kvc_encoder_decoder_cache_cross_attention;
%ignore kvc_encoder_decoder_cache_update_cross;
%ignore kvc_cache_update_conv_state;
%ignore kvc_cache_update_recurrent_state;
%ignore kvc_cache_state_view;
%ignore kvc_cache_update_indexer;
%ignore kvc_cache_indexer_view;
%ignore kvc_cache_set_stream;
%ignore kvc_cache_stream;
%ignore kvc_block_hash_root;
%ignore kvc_block_hash;
%ignore kvc_block_hash_chain;

/* kvc_kv's tensors are owned by the cache: reach them through View objects, not raw structs. */
%immutable kvc_kv::key;
%immutable kvc_kv::value;

%include "kvcache/version.h"
%include "kvcache/error.h"
%include "kvcache/tensor.h"
%include "kvcache/allocator.h"
%include "kvcache/quantized.h"
%include "kvcache/cache.h"
%include "kvcache/ops.h"
%include "kvcache/encoder_decoder.h"
%include "kvcache/offload.h"
%include "kvcache/recurrent.h"
%include "kvcache/indexer.h"
%include "kvcache/block_hash.h"

%init %{
  if (PyType_Ready(&CacheHandleType) < 0 || PyType_Ready(&EncoderDecoderHandleType) < 0 ||
      PyType_Ready(&ViewType) < 0 || PyType_Ready(&TorchViewsType) < 0)
    return -1;
  /* kvcache.transformers' hot path (kvcache_torch.h): METH_FASTCALL functions, not SWIG wrappers */
  if (PyModule_AddFunctions(m, kvc_py_torch_methods) < 0) return -1;
  Py_INCREF(&CacheHandleType);
  PyModule_AddObject(m, "CacheHandle", (PyObject*)&CacheHandleType);
  Py_INCREF(&EncoderDecoderHandleType);
  PyModule_AddObject(m, "EncoderDecoderHandle", (PyObject*)&EncoderDecoderHandleType);
  Py_INCREF(&ViewType);
  PyModule_AddObject(m, "View", (PyObject*)&ViewType);
  PyModule_AddIntConstant(m, "KVC_PY_MAX_NDIM", KVC_PY_MAX_NDIM);
%}

/* Hand-written functions manipulate Python objects: they release the GIL themselves. */
%feature("nothread") kvc_py_cache_update;
%feature("nothread") kvc_py_cache_update_all;
%feature("nothread") kvc_py_cache_layer_view;
%feature("nothread") kvc_py_cache_create;
%feature("nothread") kvc_py_cache_create_from_tensors;
%feature("nothread") kvc_py_cache_destroy;
%feature("nothread") kvc_py_encoder_decoder_cache_create;
%feature("nothread") kvc_py_encoder_decoder_cache_destroy;
%feature("nothread") kvc_py_encoder_decoder_cache_self_attention;
%feature("nothread") kvc_py_encoder_decoder_cache_cross_attention;
%feature("nothread") kvc_py_encoder_decoder_cache_update_cross;
%feature("nothread") kvc_py_cache_update_conv_state;
%feature("nothread") kvc_py_cache_update_recurrent_state;
%feature("nothread") kvc_py_cache_state_view;
%feature("nothread") kvc_py_cache_update_indexer;
%feature("nothread") kvc_py_cache_indexer_view;
%feature("nothread") kvc_py_set_error_classes;
%feature("nothread") kvc_py_close;
%feature("nothread") kvc_py_cache_set_stream;
%feature("nothread") kvc_py_cache_stream;
%feature("nothread") kvc_py_set_stream_waiter;
%feature("nothread") kvc_py_block_hash_root;
%feature("nothread") kvc_py_block_hash;
%feature("nothread") kvc_py_block_hash_chain;

%rename(kvc_cache_update) kvc_py_cache_update;
%rename(kvc_cache_update_all) kvc_py_cache_update_all;
%rename(kvc_cache_layer_view) kvc_py_cache_layer_view;
%rename(kvc_cache_create) kvc_py_cache_create;
%rename(kvc_cache_create_from_tensors) kvc_py_cache_create_from_tensors;
%rename(kvc_cache_destroy) kvc_py_cache_destroy;
%rename(kvc_encoder_decoder_cache_create) kvc_py_encoder_decoder_cache_create;
%rename(kvc_encoder_decoder_cache_destroy) kvc_py_encoder_decoder_cache_destroy;
%rename(kvc_encoder_decoder_cache_self_attention) kvc_py_encoder_decoder_cache_self_attention;
%rename(kvc_encoder_decoder_cache_cross_attention) kvc_py_encoder_decoder_cache_cross_attention;
%rename(kvc_encoder_decoder_cache_update_cross) kvc_py_encoder_decoder_cache_update_cross;
%rename(kvc_cache_update_conv_state) kvc_py_cache_update_conv_state;
%rename(kvc_cache_update_recurrent_state) kvc_py_cache_update_recurrent_state;
%rename(kvc_cache_state_view) kvc_py_cache_state_view;
%rename(kvc_cache_update_indexer) kvc_py_cache_update_indexer;
%rename(kvc_cache_indexer_view) kvc_py_cache_indexer_view;
%rename(_set_error_classes) kvc_py_set_error_classes;
%rename(close) kvc_py_close;
%rename(kvc_cache_set_stream) kvc_py_cache_set_stream;
%rename(kvc_cache_stream) kvc_py_cache_stream;
%rename(_set_stream_waiter) kvc_py_set_stream_waiter;
%rename(kvc_block_hash_root) kvc_py_block_hash_root;
%rename(kvc_block_hash) kvc_py_block_hash;
%rename(kvc_block_hash_chain) kvc_py_block_hash_chain;

PyObject* kvc_py_set_error_classes(PyObject* base, PyObject* by_code, PyObject* stale);
PyObject* kvc_py_close(PyObject* handle);
PyObject* kvc_py_set_stream_waiter(PyObject* fn);

%{
/* kvc_cache_create / kvc_cache_create_from_tensors: `options` with a Python allocator object (kvcache.Allocator)
 * in a copy of them, or as they are for None; the tensors (keys and values: from_tensors) are borrowed for the call. */
static PyObject* kvc_py_cache_create_with(const kvc_cache_options* options, PyObject* allocator, uint32_t n,
                                          const kvc_tensor* keys, const kvc_tensor* values) {
  kvc_cache_options o;
  if (options) o = *options;
  else kvc_cache_options_init(&o);
  kvc_allocator a;
  if (kvc_py_allocator_arm(allocator, &a, &o.allocator) < 0) return NULL;
  const kvc_cache_options* use = options || o.allocator == &a ? &o : NULL;
  kvc_cache* out = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = keys ? kvc_cache_create_from_tensors(use, n, keys, values, &out) : kvc_cache_create(use, &out);
  Py_END_ALLOW_THREADS
  return kvc_py_allocator_settle(&a, o.allocator, err, out);
}

/* Tensors of an update: keys/values plus the optional fields of kvc_update_options. */
typedef struct kvc_py_update_args {
  kvc_update_options options;
  kvc_py_i64 positions;
  kvc_py_tensor_in cos, sin;
  int use_options;
} kvc_py_update_args;

static void kvc_py_update_args_release(kvc_py_update_args* a) {
  kvc_py_i64_release(&a->positions);
  kvc_py_tensor_release(&a->cos);
  kvc_py_tensor_release(&a->sin);
}

static int kvc_py_update_args_from(kvc_py_update_args* a, PyObject* cache_position, PyObject* rope_cos,
                                   PyObject* rope_sin, long long partial_rotation_size) {
  memset(a, 0, sizeof *a);
  kvc_update_options_init(&a->options);
  if (cache_position && cache_position != Py_None) {
    if (kvc_py_i64_from(cache_position, "cache_position", &a->positions) < 0) return -1;
    a->options.cache_position = a->positions.data;
    a->options.cache_position_length = (uint32_t)a->positions.count;
    a->use_options = 1;
  }
  if (rope_cos && rope_cos != Py_None) {
    if (kvc_py_tensor_in_from(rope_cos, "rope_cos", &a->cos) < 0) return -1;
    a->options.rope_cos = &a->cos.t;
    a->use_options = 1;
  }
  if (rope_sin && rope_sin != Py_None) {
    if (kvc_py_tensor_in_from(rope_sin, "rope_sin", &a->sin) < 0) return -1;
    a->options.rope_sin = &a->sin.t;
    a->use_options = 1;
  }
  if (partial_rotation_size) {
    a->options.partial_rotation_size = (int64_t)partial_rotation_size;
    a->use_options = 1;
  }
  return 0;
}

static PyObject* kvc_py_kv_pair(PyObject* owner, kvc_py_guard* guard, const kvc_kv* kv) {
  PyObject* k = kvc_py_view_new(owner, guard, &kv->key);
  if (!k) return NULL;
  PyObject* v = kvc_py_view_new(owner, guard, &kv->value);
  if (!v) {
    Py_DECREF(k);
    return NULL;
  }
  PyObject* pair = PyTuple_Pack(2, k, v);
  Py_DECREF(k);
  Py_DECREF(v);
  return pair;
}

%}

%inline %{
/*
 * update(key, value, layer) -> (keys, values): Views valid until the next
 * mutating call. cache_position, rope_cos, rope_sin and partial_rotation_size
 * are the fields of kvc_update_options (None/0 = default).
 */
PyObject* kvc_py_cache_update(PyObject* cache, unsigned int layer, PyObject* key, PyObject* value,
                              PyObject* cache_position, PyObject* rope_cos, PyObject* rope_sin,
                              long long partial_rotation_size) {
  /* Inputs are read before the cache is entered: a View of this very cache is still valid then. */
  kvc_py_guard* guard = NULL;
  kvc_cache* c = NULL;
  PyObject* result = NULL;
  kvc_py_tensor_in k, v;
  kvc_py_update_args a;
  memset(&k, 0, sizeof k);
  memset(&v, 0, sizeof v);
  if (kvc_py_update_args_from(&a, cache_position, rope_cos, rope_sin, partial_rotation_size) == 0 &&
      kvc_py_tensor_in_from(key, "key", &k) == 0 && kvc_py_tensor_in_from(value, "value", &v) == 0 &&
      (c = kvc_py_cache_enter(cache, 1, &guard)) != NULL) {
    kvc_kv out;
    kvc_error* err;
    const kvc_update_options* opts = a.use_options ? &a.options : NULL;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_cache_update(c, (uint32_t)layer, &k.t, &v.t, opts, &out);
    Py_END_ALLOW_THREADS
    if (err) kvc_py_raise(err);
    else result = kvc_py_kv_pair(cache, guard, &out);
  }
  kvc_py_tensor_release(&k);
  kvc_py_tensor_release(&v);
  kvc_py_update_args_release(&a);
  kvc_py_guard_leave(guard, 1);
  return result;
}

/* update_all(keys, values) -> [(keys0, values0), ...]: one step for layers 0..len(keys)-1. */
PyObject* kvc_py_cache_update_all(PyObject* cache, PyObject* keys, PyObject* values, PyObject* cache_position,
                                  PyObject* rope_cos, PyObject* rope_sin, long long partial_rotation_size) {
  kvc_py_guard* guard = NULL;
  PyObject *ks = NULL, *vs = NULL, *result = NULL;
  kvc_py_tensor_in* ins = NULL;
  kvc_tensor *kt = NULL, *vt = NULL;
  kvc_kv* outs = NULL;
  Py_ssize_t n = 0, done = 0;
  kvc_py_update_args a;
  kvc_cache* c = NULL;
  memset(&a, 0, sizeof a);
  ks = PySequence_Fast(keys, "keys: expected a sequence of tensors");
  vs = ks ? PySequence_Fast(values, "values: expected a sequence of tensors") : NULL;
  if (!vs) goto done;
  n = PySequence_Fast_GET_SIZE(ks);
  if (PySequence_Fast_GET_SIZE(vs) != n) {
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_update_all: keys and values differ in length");
    goto done;
  }
  ins = (kvc_py_tensor_in*)PyMem_Calloc((size_t)(2 * n + 1), sizeof *ins);
  kt = (kvc_tensor*)PyMem_Calloc((size_t)n + 1, sizeof *kt);
  vt = (kvc_tensor*)PyMem_Calloc((size_t)n + 1, sizeof *vt);
  outs = (kvc_kv*)PyMem_Calloc((size_t)n + 1, sizeof *outs);
  if (!ins || !kt || !vt || !outs) {
    PyErr_NoMemory();
    goto done;
  }
  if (kvc_py_update_args_from(&a, cache_position, rope_cos, rope_sin, partial_rotation_size) < 0) goto done;
  for (done = 0; done < n; done++) {
    if (kvc_py_tensor_in_from(PySequence_Fast_GET_ITEM(ks, done), "keys[i]", &ins[2 * done]) < 0) goto done;
    if (kvc_py_tensor_in_from(PySequence_Fast_GET_ITEM(vs, done), "values[i]", &ins[2 * done + 1]) < 0) {
      done++; /* release the key read above too */
      goto done;
    }
    kt[done] = ins[2 * done].t;
    vt[done] = ins[2 * done + 1].t;
  }
  c = kvc_py_cache_enter(cache, 1, &guard);
  if (!c) goto done;
  {
    kvc_error* err;
    const kvc_update_options* opts = a.use_options ? &a.options : NULL;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_cache_update_all(c, (uint32_t)n, kt, vt, opts, outs);
    Py_END_ALLOW_THREADS
    if (err) {
      kvc_py_raise(err);
      goto done;
    }
  }
  result = PyList_New(n);
  if (!result) goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* pair = kvc_py_kv_pair(cache, guard, &outs[i]);
    if (!pair) {
      Py_CLEAR(result);
      goto done;
    }
    PyList_SET_ITEM(result, i, pair);
  }
done:
  if (ins)
    for (Py_ssize_t i = 0; i < 2 * done && i < 2 * n; i++) kvc_py_tensor_release(&ins[i]);
  PyMem_Free(ins);
  PyMem_Free(kt);
  PyMem_Free(vt);
  PyMem_Free(outs);
  Py_XDECREF(ks);
  Py_XDECREF(vs);
  kvc_py_update_args_release(&a);
  kvc_py_guard_leave(guard, 1);
  return result;
}

/*
 * kvc_cache_set_stream(handle, stream): stream is the cudaStream_t / hipStream_t
 * as an int (0 or None: the default stream). Runs with the GIL held (it only
 * records an event), and does not make views stale: it moves no memory.
 */
PyObject* kvc_py_cache_set_stream(PyObject* cache, PyObject* stream) {
  CacheHandle* h = (CacheHandle*)kvc_py_typed_arg(cache, &CacheHandleType, "kvc_cache_set_stream", "CacheHandle");
  if (!h) return NULL;
  if (h->guard->closed) {
    PyErr_SetString(PyExc_ValueError, "kvcache: the cache is closed");
    return NULL;
  }
  if (h->guard->writers || h->guard->readers) {
    kvc_py_raise_code(KVC_ERROR_INVALID_STATE,
                      "kvc_cache_set_stream: the cache is in use by another thread; a cache handle must be used by "
                      "one thread at a time");
    return NULL;
  }
  void* handle = NULL;
  if (stream != Py_None) {
    PyObject* index = PyNumber_Index(stream);
    if (!index) {
      PyErr_Format(PyExc_TypeError, "kvc_cache_set_stream: stream must be an int (a stream handle) or None, got %.100s",
                   Py_TYPE(stream)->tp_name);
      return NULL;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT,
                        "kvc_cache_set_stream: stream is not a stream handle (a non-negative int that fits a pointer)");
      return NULL;
    }
    if ((unsigned long long)(uintptr_t)v != v) {
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_set_stream: stream does not fit a pointer");
      return NULL;
    }
    handle = (void*)(uintptr_t)v;
  }
  kvc_error* err = kvc_cache_set_stream(h->ptr, handle);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* kvc_cache_stream(handle) -> int: the bound stream's handle, 0 for the default stream. */
PyObject* kvc_py_cache_stream(PyObject* cache) {
  CacheHandle* h = (CacheHandle*)kvc_py_typed_arg(cache, &CacheHandleType, "kvc_cache_stream", "CacheHandle");
  if (!h) return NULL;
  if (h->guard->closed) {
    PyErr_SetString(PyExc_ValueError, "kvcache: the cache is closed");
    return NULL;
  }
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)kvc_cache_stream(h->ptr));
}

/* layer_view(layer) -> (keys, values): the stored K/V of one layer. */
PyObject* kvc_py_cache_layer_view(PyObject* cache, unsigned int layer) {
  kvc_py_guard* guard = NULL;
  kvc_cache* c = kvc_py_cache_enter(cache, 0, &guard);
  if (!c) return NULL;
  kvc_kv out;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_cache_layer_view(c, (uint32_t)layer, &out);
  Py_END_ALLOW_THREADS
  PyObject* result = NULL;
  if (err) kvc_py_raise(err);
  else result = kvc_py_kv_pair(cache, guard, &out);
  kvc_py_guard_leave(guard, 0);
  return result;
}

/* kvc_cache_create(options, allocator=None) -> handle. */
PyObject* kvc_py_cache_create(const kvc_cache_options* options, PyObject* allocator) {
  return kvc_py_cache_create_with(options, allocator, 0, NULL, NULL);
}

/* create_from_tensors(options, [(k0, v0), (k1, v1), ...], allocator=None) -> handle. */
PyObject* kvc_py_cache_create_from_tensors(const kvc_cache_options* options, PyObject* pairs, PyObject* allocator) {
  PyObject* seq = PySequence_Fast(pairs, "kvc_cache_create_from_tensors: expected a sequence of (key, value) pairs");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), done = 0;
  PyObject* result = NULL;
  kvc_py_tensor_in* ins = (kvc_py_tensor_in*)PyMem_Calloc((size_t)(2 * n + 1), sizeof *ins);
  kvc_tensor* kt = (kvc_tensor*)PyMem_Calloc((size_t)n + 1, sizeof *kt);
  kvc_tensor* vt = (kvc_tensor*)PyMem_Calloc((size_t)n + 1, sizeof *vt);
  if (!ins || !kt || !vt) {
    PyErr_NoMemory();
    goto done;
  }
  for (done = 0; done < n; done++) {
    PyObject* pair = PySequence_Fast_GET_ITEM(seq, done);
    PyObject *k = NULL, *v = NULL;
    if (!PyTuple_Check(pair) && !PyList_Check(pair)) {
      PyErr_Format(PyExc_TypeError, "kvc_cache_create_from_tensors: item %zd is not a (key, value) pair", done);
      goto done;
    }
    if (PySequence_Size(pair) < 2) {
      PyErr_Format(PyExc_ValueError, "kvc_cache_create_from_tensors: item %zd has fewer than 2 tensors", done);
      goto done;
    }
    k = PySequence_GetItem(pair, 0);
    v = PySequence_GetItem(pair, 1);
    int rc = (k && v) ? kvc_py_tensor_in_from(k, "keys[i]", &ins[2 * done]) : -1;
    if (rc == 0) rc = kvc_py_tensor_in_from(v, "values[i]", &ins[2 * done + 1]);
    Py_XDECREF(k);
    Py_XDECREF(v);
    if (rc < 0) {
      done++;
      goto done;
    }
    kt[done] = ins[2 * done].t;
    vt[done] = ins[2 * done + 1].t;
  }
  result = kvc_py_cache_create_with(options, allocator, (uint32_t)n, kt, vt);
done:
  if (ins)
    for (Py_ssize_t i = 0; i < 2 * done && i < 2 * n; i++) kvc_py_tensor_release(&ins[i]);
  PyMem_Free(ins);
  PyMem_Free(kt);
  PyMem_Free(vt);
  Py_DECREF(seq);
  return result;
}

/*
 * kvc_cache_destroy(handle): the handle is closed at once (later calls raise
 * ValueError, views go stale); the memory is freed when the last reference to
 * it (the handle or a tensor exported from a view) is gone.
 */
PyObject* kvc_py_cache_destroy(PyObject* handle) {
  if (handle == Py_None) Py_RETURN_NONE;
  if (Py_TYPE(handle) != &CacheHandleType) {
    PyErr_SetString(PyExc_TypeError, "kvc_cache_destroy: expected a CacheHandle");
    return NULL;
  }
  return kvc_py_close(handle);
}

PyObject* kvc_py_encoder_decoder_cache_destroy(PyObject* handle) {
  if (handle == Py_None) Py_RETURN_NONE;
  if (Py_TYPE(handle) != &EncoderDecoderHandleType) {
    PyErr_SetString(PyExc_TypeError, "kvc_encoder_decoder_cache_destroy: expected an EncoderDecoderHandle");
    return NULL;
  }
  return kvc_py_close(handle);
}

/*
 * Takes the two caches: on success their handles stop owning them and keep
 * the new pair alive instead, so they stay usable as views of its sub-caches.
 */
PyObject* kvc_py_encoder_decoder_cache_create(PyObject* self_attention, PyObject* cross_attention) {
  if (Py_TYPE(self_attention) != &CacheHandleType || Py_TYPE(cross_attention) != &CacheHandleType) {
    PyErr_SetString(PyExc_TypeError, "kvc_encoder_decoder_cache_create: expected two CacheHandles");
    return NULL;
  }
  CacheHandle* s = (CacheHandle*)self_attention;
  CacheHandle* x = (CacheHandle*)cross_attention;
  if (s->parent || x->parent) {
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT,
                      "kvc_encoder_decoder_cache_create: a cache already belongs to an encoder-decoder cache");
    return NULL;
  }
  if (s->own.closed || x->own.closed) {
    PyErr_SetString(PyExc_ValueError, "kvc_encoder_decoder_cache_create: a cache is closed");
    return NULL;
  }
  if (s->own.writers || s->own.readers || x->own.writers || x->own.readers) {
    kvc_py_raise_code(KVC_ERROR_INVALID_STATE, "kvc_encoder_decoder_cache_create: a cache is in use by another thread");
    return NULL;
  }
  kvc_encoder_decoder_cache* out = NULL;
  kvc_error* err = kvc_encoder_decoder_cache_create(s->ptr, x->ptr, &out);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  PyObject* h = kvc_py_ed_handle_new(out);
  if (!h) return NULL; /* the pair (and both caches) were destroyed */
  kvc_py_guard* g = &((EncoderDecoderHandle*)h)->own;
  CacheHandle* subs[2] = {s, x};
  for (int i = 0; i < 2; i++) {
    subs[i]->own.epoch++; /* views made before belong to the old owner: stale */
    subs[i]->parent = h;
    Py_INCREF(h);
    subs[i]->guard = g;
  }
  g->epoch++;
  return h;
}

%}
%{
static PyObject* kvc_py_ed_sub(PyObject* handle, int cross) {
  if (Py_TYPE(handle) != &EncoderDecoderHandleType) {
    PyErr_SetString(PyExc_TypeError, "expected an EncoderDecoderHandle");
    return NULL;
  }
  EncoderDecoderHandle* h = (EncoderDecoderHandle*)handle;
  if (h->own.closed) {
    PyErr_SetString(PyExc_ValueError, "kvcache: the cache is closed");
    return NULL;
  }
  kvc_cache* c = cross ? kvc_encoder_decoder_cache_cross_attention(h->ptr)
                       : kvc_encoder_decoder_cache_self_attention(h->ptr);
  return kvc_py_handle_new(c, handle, &h->own);
}

%}
%inline %{
/* The self-attention cache: a handle that keeps the pair alive (borrowed memory). */
PyObject* kvc_py_encoder_decoder_cache_self_attention(PyObject* handle) { return kvc_py_ed_sub(handle, 0); }
/* The cross-attention cache, likewise. */
PyObject* kvc_py_encoder_decoder_cache_cross_attention(PyObject* handle) { return kvc_py_ed_sub(handle, 1); }

/* update_cross(layer, key, value) -> (keys, values); key/value may be None once the layer is updated. */
PyObject* kvc_py_encoder_decoder_cache_update_cross(PyObject* handle, unsigned int layer, PyObject* key,
                                                    PyObject* value) {
  kvc_py_guard* guard = NULL;
  kvc_encoder_decoder_cache* c = NULL;
  PyObject* result = NULL;
  kvc_py_tensor_in k, v;
  memset(&k, 0, sizeof k);
  memset(&v, 0, sizeof v);
  int ok = 1;
  if (key != Py_None && kvc_py_tensor_in_from(key, "key", &k) < 0) ok = 0;
  if (ok && value != Py_None && kvc_py_tensor_in_from(value, "value", &v) < 0) ok = 0;
  if (ok && (c = kvc_py_ed_enter(handle, 1, &guard)) == NULL) ok = 0;
  if (ok) {
    kvc_kv out;
    kvc_error* err;
    const kvc_tensor* kp = key != Py_None ? &k.t : NULL;
    const kvc_tensor* vp = value != Py_None ? &v.t : NULL;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_encoder_decoder_cache_update_cross(c, (uint32_t)layer, kp, vp, &out);
    Py_END_ALLOW_THREADS
    if (err) kvc_py_raise(err);
    else result = kvc_py_kv_pair(handle, guard, &out);
  }
  kvc_py_tensor_release(&k);
  kvc_py_tensor_release(&v);
  kvc_py_guard_leave(guard, 1);
  return result;
}

/*
 * update_conv_state(layer, x, state_index, conv_kernel_size, cache_position) -> View:
 * the fields of kvc_conv_update_options as arguments (cache_position None = current API).
 */
PyObject* kvc_py_cache_update_conv_state(PyObject* cache, unsigned int layer, PyObject* x,
                                         unsigned int state_index, long long conv_kernel_size,
                                         PyObject* cache_position) {
  kvc_py_guard* guard = NULL;
  kvc_cache* c = NULL;
  PyObject* result = NULL;
  kvc_py_tensor_in t;
  kvc_py_i64 pos;
  memset(&t, 0, sizeof t);
  memset(&pos, 0, sizeof pos);
  kvc_conv_update_options o;
  kvc_conv_update_options_init(&o);
  o.state_index = (uint32_t)state_index;
  o.conv_kernel_size = (int64_t)conv_kernel_size;
  int ok = kvc_py_tensor_in_from(x, "x", &t) == 0;
  if (ok && cache_position != Py_None) {
    ok = kvc_py_i64_from(cache_position, "cache_position", &pos) == 0;
    o.cache_position = pos.data;
    o.cache_position_length = (uint32_t)pos.count;
  }
  if (ok && (c = kvc_py_cache_enter(cache, 1, &guard)) == NULL) ok = 0;
  if (ok) {
    kvc_tensor out;
    kvc_error* err;
    memset(&out, 0, sizeof out);
    Py_BEGIN_ALLOW_THREADS
    err = kvc_cache_update_conv_state(c, (uint32_t)layer, &t.t, &o, &out);
    Py_END_ALLOW_THREADS
    if (err) kvc_py_raise(err);
    else result = kvc_py_view_new(cache, guard, &out);
  }
  kvc_py_tensor_release(&t);
  kvc_py_i64_release(&pos);
  kvc_py_guard_leave(guard, 1);
  return result;
}

/* update_recurrent_state(layer, state_index, state) -> View of the stored state. */
PyObject* kvc_py_cache_update_recurrent_state(PyObject* cache, unsigned int layer, unsigned int state_index,
                                              PyObject* state) {
  kvc_py_guard* guard = NULL;
  kvc_cache* c = NULL;
  PyObject* result = NULL;
  kvc_py_tensor_in t;
  if (kvc_py_tensor_in_from(state, "state", &t) == 0 && (c = kvc_py_cache_enter(cache, 1, &guard)) != NULL) {
    kvc_tensor out;
    kvc_error* err;
    memset(&out, 0, sizeof out);
    Py_BEGIN_ALLOW_THREADS
    err = kvc_cache_update_recurrent_state(c, (uint32_t)layer, (uint32_t)state_index, &t.t, &out);
    Py_END_ALLOW_THREADS
    if (err) kvc_py_raise(err);
    else result = kvc_py_view_new(cache, guard, &out);
  }
  kvc_py_tensor_release(&t);
  kvc_py_guard_leave(guard, 1);
  return result;
}

/* update_indexer(layer, x) -> View of the whole indexer store (kvcache/indexer.h). */
PyObject* kvc_py_cache_update_indexer(PyObject* cache, unsigned int layer, PyObject* x) {
  kvc_py_guard* guard = NULL;
  kvc_cache* c = NULL;
  PyObject* result = NULL;
  kvc_py_tensor_in t;
  if (kvc_py_tensor_in_from(x, "indexer_key_states", &t) == 0 && (c = kvc_py_cache_enter(cache, 1, &guard)) != NULL) {
    kvc_tensor out;
    kvc_error* err;
    memset(&out, 0, sizeof out);
    Py_BEGIN_ALLOW_THREADS
    err = kvc_cache_update_indexer(c, (uint32_t)layer, &t.t, &out);
    Py_END_ALLOW_THREADS
    if (err) kvc_py_raise(err);
    else result = kvc_py_view_new(cache, guard, &out);
  }
  kvc_py_tensor_release(&t);
  kvc_py_guard_leave(guard, 1);
  return result;
}

/* indexer_view(layer) -> View of the indexer store, or None before its first update_indexer. */
PyObject* kvc_py_cache_indexer_view(PyObject* cache, unsigned int layer) {
  kvc_py_guard* guard = NULL;
  kvc_cache* c = kvc_py_cache_enter(cache, 0, &guard);
  if (!c) return NULL;
  PyObject* result = NULL;
  kvc_tensor out;
  memset(&out, 0, sizeof out);
  kvc_error* err = kvc_cache_indexer_view(c, (uint32_t)layer, &out);
  if (err) kvc_py_raise(err);
  else result = kvc_py_view_new(cache, guard, &out);
  kvc_py_guard_leave(guard, 0);
  return result;
}

/* state_view(layer, state_index) -> (conv View or None, recurrent View or None). */
PyObject* kvc_py_cache_state_view(PyObject* cache, unsigned int layer, unsigned int state_index) {
  kvc_py_guard* guard = NULL;
  kvc_cache* c = kvc_py_cache_enter(cache, 0, &guard);
  if (!c) return NULL;
  PyObject* result = NULL;
  kvc_tensor conv, rec;
  kvc_error* err;
  memset(&conv, 0, sizeof conv);
  memset(&rec, 0, sizeof rec);
  Py_BEGIN_ALLOW_THREADS
  err = kvc_cache_state_view(c, (uint32_t)layer, (uint32_t)state_index, &conv, &rec);
  Py_END_ALLOW_THREADS
  if (err) {
    kvc_py_raise(err);
  } else {
    PyObject* a = kvc_py_view_new(cache, guard, &conv);
    PyObject* b = a ? kvc_py_view_new(cache, guard, &rec) : NULL;
    if (a && b) result = PyTuple_Pack(2, a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
  }
  kvc_py_guard_leave(guard, 0);
  return result;
}
%}

/* ------------------------------------------------------------ block hash */
%{
/* A bytes-like argument (bytes, bytearray, memoryview, a contiguous array) as read-only bytes; str is refused. */
static int kvc_py_bytes_in(PyObject* obj, const char* fn, const char* name, Py_buffer* view) {
  memset(view, 0, sizeof *view);
  if (PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be bytes, not str; encode it first (%s.encode())", fn, name, name);
    return -1;
  }
  if (PyObject_GetBuffer(obj, view, PyBUF_CONTIG_RO) < 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: %s must be a bytes-like object, got %.100s", fn, name, Py_TYPE(obj)->tp_name);
    return -1;
  }
  return 0;
}

/* A block hash argument: exactly KVC_BLOCK_HASH_SIZE bytes. */
static int kvc_py_hash_in(PyObject* obj, const char* fn, const char* name, Py_buffer* view) {
  if (kvc_py_bytes_in(obj, fn, name, view) < 0) return -1;
  if (view->len != KVC_BLOCK_HASH_SIZE) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: %s is %zd bytes; a block hash is %d bytes", fn, name, view->len,
             KVC_BLOCK_HASH_SIZE);
    PyBuffer_Release(view);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    return -1;
  }
  return 0;
}

/*
 * Token ids (a sequence of ints or a 1-D integer tensor) as int32. Ids outside int32 are refused here with the
 * library's wording; negative int32 ids go through, for the library to refuse with its message.
 */
static int32_t* kvc_py_tokens_in(PyObject* obj, const char* fn, size_t* n) {
  kvc_py_i64 ids;
  if (kvc_py_i64_from(obj, "tokens", &ids) < 0) return NULL;
  int32_t* out = (int32_t*)PyMem_Malloc((ids.count + 1) * sizeof *out);
  if (!out) PyErr_NoMemory();
  for (size_t i = 0; out && i < ids.count; i++) {
    if (ids.data[i] < INT32_MIN || ids.data[i] > INT32_MAX) {
      char msg[200];
      snprintf(msg, sizeof msg, "%s: tokens[%zu] is %lld; token ids must be >= 0 and fit int32 (at most 2147483647)",
               fn, i, (long long)ids.data[i]);
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
      PyMem_Free(out);
      out = NULL;
    } else {
      out[i] = (int32_t)ids.data[i];
    }
  }
  *n = ids.count;
  kvc_py_i64_release(&ids);
  return out;
}
%}

%inline %{
/* kvc_block_hash_root(seed, salt) -> bytes (32): seed and salt are bytes-like, empty allowed. */
PyObject* kvc_py_block_hash_root(PyObject* seed, PyObject* salt) {
  static const char* FN = "kvc_block_hash_root";
  Py_buffer a, b;
  PyObject* result = NULL;
  if (kvc_py_bytes_in(seed, FN, "seed", &a) < 0) return NULL;
  if (kvc_py_bytes_in(salt, FN, "salt", &b) == 0) {
    uint8_t out[KVC_BLOCK_HASH_SIZE];
    kvc_error* err = kvc_block_hash_root(a.buf, (size_t)a.len, b.buf, (size_t)b.len, out);
    if (err) kvc_py_raise(err);
    else result = PyBytes_FromStringAndSize((const char*)out, KVC_BLOCK_HASH_SIZE);
    PyBuffer_Release(&b);
  }
  PyBuffer_Release(&a);
  return result;
}

/* kvc_block_hash(parent, tokens, extra) -> bytes (32). */
PyObject* kvc_py_block_hash(PyObject* parent, PyObject* tokens, PyObject* extra) {
  static const char* FN = "kvc_block_hash";
  Py_buffer p, x;
  size_t n = 0;
  PyObject* result = NULL;
  if (kvc_py_hash_in(parent, FN, "parent", &p) < 0) return NULL;
  int32_t* ids = kvc_py_tokens_in(tokens, FN, &n);
  if (ids && kvc_py_bytes_in(extra, FN, "extra", &x) == 0) {
    uint8_t out[KVC_BLOCK_HASH_SIZE];
    kvc_error* err;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_block_hash((const uint8_t*)p.buf, ids, n, x.buf, (size_t)x.len, out);
    Py_END_ALLOW_THREADS
    if (err) kvc_py_raise(err);
    else result = PyBytes_FromStringAndSize((const char*)out, KVC_BLOCK_HASH_SIZE);
    PyBuffer_Release(&x);
  }
  PyMem_Free(ids);
  PyBuffer_Release(&p);
  return result;
}

/* kvc_block_hash_chain(root, tokens, block_size) -> [bytes (32), ...]: the hashes of the full blocks. */
PyObject* kvc_py_block_hash_chain(PyObject* root, PyObject* tokens, long long block_size) {
  static const char* FN = "kvc_block_hash_chain";
  if (block_size < 0 || block_size > (long long)UINT32_MAX) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s: block_size is %lld; it must be >= 1 and fit uint32", FN, block_size);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    return NULL;
  }
  Py_buffer r;
  size_t n = 0, count = 0;
  PyObject* result = NULL;
  if (kvc_py_hash_in(root, FN, "root", &r) < 0) return NULL;
  int32_t* ids = kvc_py_tokens_in(tokens, FN, &n);
  /* block_size 0 is the library's to refuse: room for nothing then. */
  size_t full = ids && block_size ? n / (size_t)block_size : 0;
  uint8_t(*out)[KVC_BLOCK_HASH_SIZE] = ids ? (uint8_t(*)[KVC_BLOCK_HASH_SIZE])PyMem_Malloc((full + 1) * KVC_BLOCK_HASH_SIZE) : NULL;
  if (ids && !out) PyErr_NoMemory();
  if (out) {
    kvc_error* err;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_block_hash_chain((const uint8_t*)r.buf, ids, n, (uint32_t)block_size, out, full, &count);
    Py_END_ALLOW_THREADS
    if (err) {
      kvc_py_raise(err);
    } else if ((result = PyList_New((Py_ssize_t)count)) != NULL) {
      for (size_t i = 0; i < count; i++) {
        PyObject* h = PyBytes_FromStringAndSize((const char*)out[i], KVC_BLOCK_HASH_SIZE);
        if (!h) {
          Py_CLEAR(result);
          break;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, h);
      }
    }
  }
  PyMem_Free(out);
  PyMem_Free(ids);
  PyBuffer_Release(&r);
  return result;
}
%}

/* The pool (kvcache/pool.h): its handles, typemaps and hand-written functions. */
%include "kvcache_pool.i"
/* Cache files: their section needs the helpers above (kvc_py_bytes_in). */
%include "persist.i"
%include "kvcache_tier.i"

/* The Redis tier of a pool (kvcache/redis_tier.h). */
%include "kvcache_redis_tier.i"
/* Blocks by key in a tier, the model fingerprint without a pool (kvcache/tier.h, since 0.7). */
%include "kvcache_tier_keys.i"
/* The pool's tier worker and prefetches (kvcache/tier.h, since 0.7). */
%include "kvcache_tier_worker.i"
