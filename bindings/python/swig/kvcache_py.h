/*
 * kvcache_py.h: the Python side of the SWIG interface (swig/kvcache.i).
 *
 * SWIG generates the wrappers of every function the C headers declare; this
 * file holds what a generator cannot know:
 *
 *  - handle objects (CacheHandle, EncoderDecoderHandle) that own a kvc_cache /
 *    kvc_encoder_decoder_cache, count mutations (an epoch) so that views can
 *    tell when they went stale, and refuse a second thread while a call runs
 *    with the GIL released (the header's "one thread at a time" rule);
 *  - tensors in: anything with __dlpack__ (numpy >= 2, torch, cupy, jax), or an
 *    object with the buffer protocol, is read as a kvc_tensor without copying;
 *  - tensors out: View objects over cache-owned memory, exported through
 *    __dlpack__ / __dlpack_device__ (legacy and versioned capsules);
 *  - errors: a kvc_error* becomes an instance of the Python exception class
 *    registered for its code, carrying the C code and message.
 *
 * Everything here runs with the GIL held, except the C calls themselves.
 */
#ifndef KVCACHE_PY_H
#define KVCACHE_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

#define KVC_PY_MAX_NDIM 8

/* ------------------------------------------------------------------ DLPack */
/* Declared from the DLPack 1.x specification; kvc_tensor is laid out as DLTensor. */

typedef struct kvc_py_dl_version {
  uint32_t major;
  uint32_t minor;
} kvc_py_dl_version;

typedef struct kvc_py_dl_managed {
  kvc_tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct kvc_py_dl_managed* self);
} kvc_py_dl_managed;

typedef struct kvc_py_dl_managed_versioned {
  kvc_py_dl_version version;
  void* manager_ctx;
  void (*deleter)(struct kvc_py_dl_managed_versioned* self);
  uint64_t flags;
  kvc_tensor dl_tensor;
} kvc_py_dl_managed_versioned;

#define KVC_PY_DL_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define KVC_PY_DL_FLAG_IS_COPIED (UINT64_C(1) << 1)
#define KVC_PY_DL_MAJOR 1
#define KVC_PY_DL_MINOR 1

static const char kvc_py_capsule_legacy[] = "dltensor";
static const char kvc_py_capsule_legacy_used[] = "used_dltensor";
static const char kvc_py_capsule_versioned[] = "dltensor_versioned";
static const char kvc_py_capsule_versioned_used[] = "used_dltensor_versioned";

/* ------------------------------------------------------------------ errors */

#define KVC_PY_NUM_CODES (KVC_ERROR_BUSY + 1) /* the codes up to the newest */
static PyObject* kvc_py_error_classes[KVC_PY_NUM_CODES]; /* index = kvc_code */
static PyObject* kvc_py_error_base = NULL;                /* KvcacheError */
static PyObject* kvc_py_stale_error = NULL;               /* StaleViewError */

static PyObject* kvc_py_class_for(kvc_code code) {
  PyObject* cls = NULL;
  if (code > 0 && code < KVC_PY_NUM_CODES) cls = kvc_py_error_classes[code];
  if (!cls) cls = kvc_py_error_base;
  return cls ? cls : PyExc_RuntimeError;
}

/*
 * kvcache._streams.wait_stream(consumer, producer, device_type, device_id):
 * makes the consumer stream wait for the work issued so far on the producer
 * stream (an event, no host synchronisation), or the host when consumer is
 * None. The extension links no GPU runtime, so the package registers a
 * function that uses torch's.
 */
static PyObject* kvc_py_stream_waiter = NULL;

/* Raises `message` as the class registered for `code`: cls(message, code). */
static void kvc_py_raise_code(kvc_code code, const char* message) {
  PyObject* cls = kvc_py_class_for(code);
  PyObject* exc = cls == PyExc_RuntimeError ? PyObject_CallFunction(cls, "s", message)
                                            : PyObject_CallFunction(cls, "si", message, (int)code);
  if (exc) {
    PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
}

/* The exception a Python allocator (kvcache_allocator.h) raised on this thread, refusing memory to the C call
 * running there; that call's error takes it (kvc_py_raise). */
static _Thread_local PyObject* kvc_py_allocator_failure = NULL;

/* Consumes `error`: raises it and frees it. An out-of-memory error that a Python allocator caused names the
 * allocator's exception, which becomes its __cause__. */
static void kvc_py_raise(kvc_error* error) {
  kvc_code code = kvc_error_code(error);
  PyObject* cause = kvc_py_allocator_failure;
  kvc_py_allocator_failure = NULL;
  PyObject* text = cause && code == KVC_ERROR_OUT_OF_MEMORY
                       ? PyUnicode_FromFormat("%s (the allocator raised %.100s: %S)", kvc_error_message(error),
                                              Py_TYPE(cause)->tp_name, cause)
                       : NULL;
  const char* message = text ? PyUnicode_AsUTF8(text) : NULL;
  if (!message) PyErr_Clear();
  kvc_py_raise_code(code, message ? message : kvc_error_message(error));
  kvc_error_destroy(error);
  Py_XDECREF(text);
  if (cause && code == KVC_ERROR_OUT_OF_MEMORY) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value) PyException_SetCause(value, cause); /* steals the reference */
    else Py_DECREF(cause);
    PyErr_Restore(type, value, tb);
  } else {
    Py_XDECREF(cause);
  }
}

static PyObject* kvc_py_set_error_classes(PyObject* base, PyObject* by_code, PyObject* stale) {
  if (!PyType_Check(base) || !PyType_Check(stale) || !PySequence_Check(by_code) ||
      PySequence_Size(by_code) != KVC_PY_NUM_CODES) {
    PyErr_Format(PyExc_TypeError, "_set_error_classes(base, classes[%d], stale)", (int)KVC_PY_NUM_CODES);
    return NULL;
  }
  for (int i = 0; i < KVC_PY_NUM_CODES; i++) {
    PyObject* cls = PySequence_GetItem(by_code, i);
    if (!cls) return NULL;
    Py_XSETREF(kvc_py_error_classes[i], cls == Py_None ? (Py_DECREF(cls), (PyObject*)NULL) : cls);
  }
  Py_INCREF(base);
  Py_XSETREF(kvc_py_error_base, base);
  Py_INCREF(stale);
  Py_XSETREF(kvc_py_stale_error, stale);
  Py_RETURN_NONE;
}

static PyObject* kvc_py_set_stream_waiter(PyObject* fn) {
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "_set_stream_waiter(fn): fn must be callable");
    return NULL;
  }
  Py_INCREF(fn);
  Py_XSETREF(kvc_py_stream_waiter, fn);
  Py_RETURN_NONE;
}

/* ----------------------------------------------------------------- handles */

/*
 * A handle owns its C object unless `parent` is set: then the C object is
 * owned by the parent (the sub-caches of an encoder-decoder cache) and the
 * handle only keeps the parent alive. `epoch` and `busy` live in the root
 * object so that every handle onto the same memory shares them.
 */
typedef struct kvc_py_guard {
  uint64_t epoch;   /* +1 at every mutating call: views remember the epoch they were made in */
  int writers;      /* a mutating call is running with the GIL released */
  int readers;      /* const calls running with the GIL released */
  int closed;       /* close() was called: calls fail, views are stale */
} kvc_py_guard;

typedef struct CacheHandle {
  PyObject_HEAD
  kvc_cache* ptr;
  PyObject* parent;      /* NULL: owns ptr; else the EncoderDecoderHandle that owns it */
  kvc_py_guard own;      /* used when parent is NULL */
  kvc_py_guard* guard;   /* &own, or the parent's guard */
} CacheHandle;

typedef struct EncoderDecoderHandle {
  PyObject_HEAD
  kvc_encoder_decoder_cache* ptr;
  kvc_py_guard own;
} EncoderDecoderHandle;

static PyTypeObject CacheHandleType;
static PyTypeObject EncoderDecoderHandleType;

/* Defines the type object TYPE##Type of a handle or view struct TYPE with TYPE##_dealloc and TYPE##_repr: the
 * fields they all set alike, the docstring, then the type's own fields (static type objects can share fields
 * only through a macro). */
#define KVC_PY_TYPE(TYPE, NAME, DOC, ...)                                                                  \
  static PyTypeObject TYPE##Type = {                                                                       \
      PyVarObject_HEAD_INIT(NULL, 0).tp_name = NAME, .tp_basicsize = sizeof(TYPE),                         \
      .tp_dealloc = (destructor)TYPE##_dealloc, .tp_repr = (reprfunc)TYPE##_repr,                          \
      .tp_flags = Py_TPFLAGS_DEFAULT, .tp_doc = DOC, __VA_ARGS__}

static void CacheHandle_dealloc(CacheHandle* self) {
  if (self->parent) {
    Py_CLEAR(self->parent);
  } else if (self->ptr) {
    kvc_cache_destroy(self->ptr);
  }
  self->ptr = NULL;
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static void EncoderDecoderHandle_dealloc(EncoderDecoderHandle* self) {
  if (self->ptr) kvc_encoder_decoder_cache_destroy(self->ptr);
  self->ptr = NULL;
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* kvc_py_handle_new(kvc_cache* ptr, PyObject* parent, kvc_py_guard* parent_guard) {
  CacheHandle* h = PyObject_New(CacheHandle, &CacheHandleType);
  if (!h) {
    if (!parent) kvc_cache_destroy(ptr);
    return NULL;
  }
  h->ptr = ptr;
  memset(&h->own, 0, sizeof h->own);
  h->parent = parent;
  Py_XINCREF(parent);
  h->guard = parent ? parent_guard : &h->own;
  return (PyObject*)h;
}

static PyObject* kvc_py_ed_handle_new(kvc_encoder_decoder_cache* ptr) {
  EncoderDecoderHandle* h = PyObject_New(EncoderDecoderHandle, &EncoderDecoderHandleType);
  if (!h) {
    kvc_encoder_decoder_cache_destroy(ptr);
    return NULL;
  }
  h->ptr = ptr;
  memset(&h->own, 0, sizeof h->own);
  return (PyObject*)h;
}

static PyObject* CacheHandle_repr(CacheHandle* self) {
  return PyUnicode_FromFormat("<kvcache CacheHandle %p%s%s>", (void*)self->ptr,
                              self->parent ? " (part of an encoder-decoder cache)" : "",
                              self->guard->closed ? " closed" : "");
}

static PyObject* EncoderDecoderHandle_repr(EncoderDecoderHandle* self) {
  return PyUnicode_FromFormat("<kvcache EncoderDecoderHandle %p%s>", (void*)self->ptr,
                              self->own.closed ? " closed" : "");
}

static PyObject* kvc_py_guard_get_epoch(PyObject* self, void* closure) {
  (void)closure;
  kvc_py_guard* g = Py_TYPE(self) == &CacheHandleType ? ((CacheHandle*)self)->guard
                                                       : &((EncoderDecoderHandle*)self)->own;
  return PyLong_FromUnsignedLongLong(g->epoch);
}

static PyObject* kvc_py_guard_get_closed(PyObject* self, void* closure) {
  (void)closure;
  kvc_py_guard* g = Py_TYPE(self) == &CacheHandleType ? ((CacheHandle*)self)->guard
                                                       : &((EncoderDecoderHandle*)self)->own;
  return PyBool_FromLong(g->closed);
}

static PyGetSetDef kvc_py_handle_getset[] = {
    {"epoch", kvc_py_guard_get_epoch, NULL, "number of mutating calls so far (views made earlier are stale)", NULL},
    {"closed", kvc_py_guard_get_closed, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

KVC_PY_TYPE(CacheHandle, "kvcache._lib.CacheHandle",
            "An owned kvc_cache*: kvc_cache_destroy runs when the last reference (the cache object "
            "or a view into it) goes away.",
            .tp_getset = kvc_py_handle_getset);

KVC_PY_TYPE(EncoderDecoderHandle, "kvcache._lib.EncoderDecoderHandle",
            "An owned kvc_encoder_decoder_cache*; its two caches are reached through it.",
            .tp_getset = kvc_py_handle_getset);

static kvc_py_guard* kvc_py_guard_of(PyObject* obj, const char* what) {
  if (Py_TYPE(obj) == &CacheHandleType) return ((CacheHandle*)obj)->guard;
  if (Py_TYPE(obj) == &EncoderDecoderHandleType) return &((EncoderDecoderHandle*)obj)->own;
  PyErr_Format(PyExc_TypeError, "%s: expected a kvcache handle, got %.100s", what, Py_TYPE(obj)->tp_name);
  return NULL;
}

/* Checks that no other thread is inside a call on this cache; `write` for mutating calls. */
static int kvc_py_guard_enter(kvc_py_guard* g, int write) {
  if (g->closed) {
    PyErr_SetString(PyExc_ValueError, "kvcache: the cache is closed");
    return -1;
  }
  if (g->writers || (write && g->readers)) {
    kvc_py_raise_code(KVC_ERROR_BUSY,
                      "kvcache: the cache is in use by another thread; a cache handle must be used by one "
                      "thread at a time (give each thread its own cache, or lock around it)");
    return -1;
  }
  if (write) {
    g->writers++;
    g->epoch++; /* views made before this call are invalid after it, whether it succeeds or not */
  } else {
    g->readers++;
  }
  return 0;
}

static void kvc_py_guard_leave(kvc_py_guard* g, int write) {
  if (!g) return;
  if (write) g->writers--;
  else g->readers--;
}

/* `obj` if it is a `type`, else NULL with a TypeError: "<what>: expected a <expected>, got <its type>" (no
 * "<what>: " for a NULL `what`). */
static void* kvc_py_typed_arg(PyObject* obj, PyTypeObject* type, const char* what, const char* expected) {
  if (Py_TYPE(obj) == type) return obj;
  PyErr_Format(PyExc_TypeError, "%s%sexpected a %s, got %.100s", what ? what : "", what ? ": " : "", expected,
               Py_TYPE(obj)->tp_name);
  return NULL;
}

/* Handle arguments of the generated wrappers (typemaps in kvcache.i). */
static kvc_cache* kvc_py_cache_enter(PyObject* obj, int write, kvc_py_guard** guard) {
  CacheHandle* h = (CacheHandle*)kvc_py_typed_arg(obj, &CacheHandleType, NULL, "kvcache CacheHandle");
  if (!h || kvc_py_guard_enter(h->guard, write) < 0) return NULL;
  *guard = h->guard;
  return h->ptr;
}

static kvc_encoder_decoder_cache* kvc_py_ed_enter(PyObject* obj, int write, kvc_py_guard** guard) {
  EncoderDecoderHandle* h =
      (EncoderDecoderHandle*)kvc_py_typed_arg(obj, &EncoderDecoderHandleType, NULL, "kvcache EncoderDecoderHandle");
  if (!h || kvc_py_guard_enter(&h->own, write) < 0) return NULL;
  *guard = &h->own;
  return h->ptr;
}

/* close(handle): later calls fail and views go stale; memory is freed with the last reference. */
static PyObject* kvc_py_close(PyObject* obj) {
  kvc_py_guard* g = kvc_py_guard_of(obj, "close");
  if (!g) return NULL;
  if (g->writers || g->readers) {
    kvc_py_raise_code(KVC_ERROR_BUSY, "kvcache: close() while another thread is inside a call");
    return NULL;
  }
  g->closed = 1;
  g->epoch++;
  Py_RETURN_NONE;
}

/* ------------------------------------------------------------------- views */

typedef struct View {
  PyObject_HEAD
  PyObject* owner;       /* the handle whose memory this is */
  kvc_py_guard* guard;   /* the owner's guard */
  uint64_t epoch;        /* guard->epoch when the view was made */
  kvc_tensor t;
  int64_t shape[KVC_PY_MAX_NDIM];
  int64_t strides[KVC_PY_MAX_NDIM];
} View;

static PyTypeObject ViewType;

static int View_is_valid(const View* v) { return !v->guard->closed && v->guard->epoch == v->epoch; }

static int kvc_py_check_fresh(const View* v, const char* what) {
  if (View_is_valid(v)) return 0;
  if (kvc_py_stale_error) {
    PyObject* exc = PyObject_CallFunction(
        kvc_py_stale_error, "si",
        v->guard->closed
            ? "kvcache: this view belongs to a closed cache (or pool)"
            : "kvcache: this view is stale: the cache (or pool) was mutated after the view was returned (update, "
              "crop, reorder, batch operations, reset, reserve, commit, ...); views are valid until the next "
              "mutating call, copy what you need to keep",
        (int)KVC_ERROR_INVALID_STATE);
    if (exc) {
      PyErr_SetObject(kvc_py_stale_error, exc);
      Py_DECREF(exc);
    }
  } else {
    PyErr_Format(PyExc_RuntimeError, "kvcache: %s: stale view", what);
  }
  return -1;
}

/* Copies `t` with its shape and strides into `v` (compact row-major strides when t has none). */
static void kvc_py_view_fill(View* v, const kvc_tensor* t) {
  v->t = *t;
  for (int i = 0; i < t->ndim; i++) v->shape[i] = t->shape[i];
  if (t->strides) {
    for (int i = 0; i < t->ndim; i++) v->strides[i] = t->strides[i];
  } else {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
      v->strides[i] = s;
      s *= t->shape[i];
    }
  }
  v->t.shape = v->shape;
  v->t.strides = v->strides;
}

/* A new View of `t` (copied with its shape and strides), or Py_None for an absent tensor. */
static PyObject* kvc_py_view_new(PyObject* owner, kvc_py_guard* guard, const kvc_tensor* t) {
  if (t->data == NULL && t->ndim == 0) Py_RETURN_NONE;
  if (t->ndim < 0 || t->ndim > KVC_PY_MAX_NDIM) {
    PyErr_Format(PyExc_RuntimeError, "kvcache: a view has %d dimensions", (int)t->ndim);
    return NULL;
  }
  View* v = PyObject_New(View, &ViewType);
  if (!v) return NULL;
  Py_INCREF(owner);
  v->owner = owner;
  v->guard = guard;
  v->epoch = guard->epoch;
  kvc_py_view_fill(v, t);
  return (PyObject*)v;
}

static void View_dealloc(View* self) {
  Py_CLEAR(self->owner);
  PyObject_Free(self);
}

static const char* kvc_py_dtype_name(kvc_data_type d) {
  if (d.lanes != 1) return "unknown";
  if (d.code == KVC_TYPE_CODE_FLOAT && d.bits == 32) return "float32";
  if (d.code == KVC_TYPE_CODE_FLOAT && d.bits == 16) return "float16";
  if (d.code == KVC_TYPE_CODE_BFLOAT && d.bits == 16) return "bfloat16";
  if (d.code == KVC_TYPE_CODE_FLOAT && d.bits == 64) return "float64";
  if (d.code == KVC_TYPE_CODE_INT && d.bits == 64) return "int64";
  if (d.code == KVC_TYPE_CODE_INT && d.bits == 32) return "int32";
  if (d.code == KVC_TYPE_CODE_UINT && d.bits == 8) return "uint8";
  return "unknown";
}

static const char* kvc_py_device_name(int32_t type) {
  switch (type) {
    case KVC_DEVICE_CPU: return "cpu";
    case KVC_DEVICE_CUDA: return "cuda";
    case KVC_DEVICE_CUDA_HOST: return "cuda_host";
    case KVC_DEVICE_ROCM: return "rocm";
    case KVC_DEVICE_ROCM_HOST: return "rocm_host";
    default: return "device";
  }
}

static PyObject* kvc_py_int_tuple(const int64_t* v, int n) {
  PyObject* t = PyTuple_New(n);
  if (!t) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject* x = PyLong_FromLongLong(v[i]);
    if (!x) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

static PyObject* View_get_shape(View* v, void* c) {
  (void)c;
  return kvc_py_int_tuple(v->shape, v->t.ndim);
}
static PyObject* View_get_strides(View* v, void* c) {
  (void)c;
  return kvc_py_int_tuple(v->strides, v->t.ndim);
}
static PyObject* View_get_ndim(View* v, void* c) {
  (void)c;
  return PyLong_FromLong(v->t.ndim);
}
static PyObject* View_get_dtype(View* v, void* c) {
  (void)c;
  return PyUnicode_FromString(kvc_py_dtype_name(v->t.dtype));
}
static PyObject* View_get_device(View* v, void* c) {
  (void)c;
  return Py_BuildValue("(si)", kvc_py_device_name(v->t.device.device_type), (int)v->t.device.device_id);
}
static PyObject* View_get_data_ptr(View* v, void* c) {
  (void)c;
  return PyLong_FromUnsignedLongLong((unsigned long long)((uintptr_t)v->t.data + v->t.byte_offset));
}
static PyObject* View_get_is_valid(View* v, void* c) {
  (void)c;
  return PyBool_FromLong(View_is_valid(v));
}
static PyObject* View_get_itemsize(View* v, void* c) {
  (void)c;
  return PyLong_FromLong((v->t.dtype.bits * v->t.dtype.lanes + 7) / 8);
}

static PyGetSetDef View_getset[] = {
    {"shape", (getter)View_get_shape, NULL, "the shape, a tuple of ints", NULL},
    {"strides", (getter)View_get_strides, NULL, "strides in elements (DLPack's convention, not bytes)", NULL},
    {"ndim", (getter)View_get_ndim, NULL, "number of dimensions", NULL},
    {"dtype", (getter)View_get_dtype, NULL, "'float32', 'float16' or 'bfloat16'", NULL},
    {"device", (getter)View_get_device, NULL, "(device type name, device id), e.g. ('cpu', 0)", NULL},
    {"data_ptr", (getter)View_get_data_ptr, NULL, "address of the first element (data + byte_offset)", NULL},
    {"itemsize", (getter)View_get_itemsize, NULL, "bytes per element", NULL},
    {"is_valid", (getter)View_get_is_valid, NULL,
     "False once the cache was mutated (or closed) after this view was made", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef View_members[] = {
    {"owner", T_OBJECT, offsetof(View, owner), READONLY, "the cache handle this view points into"},
    {NULL, 0, 0, 0, NULL}};

/* What a capsule's managed tensor owns: the owner reference, shape/strides, an optional copy. */
typedef struct kvc_py_export {
  kvc_py_dl_managed legacy;
  kvc_py_dl_managed_versioned versioned;
  PyObject* owner;
  void* copy;
  int64_t shape[KVC_PY_MAX_NDIM];
  int64_t strides[KVC_PY_MAX_NDIM];
} kvc_py_export;

static int kvc_py_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

/* Called by the consumer (any thread, GIL held or not) when it is done with the memory. */
static void kvc_py_export_release(kvc_py_export* e) {
  if (!e) return;
  if (e->owner) {
    if (Py_IsInitialized() && !kvc_py_finalizing()) {
      PyGILState_STATE s = PyGILState_Ensure();
      Py_DECREF(e->owner);
      PyGILState_Release(s);
    } /* at interpreter shutdown the reference is leaked on purpose: the cache dies with the process */
  }
  free(e->copy);
  free(e);
}

static void kvc_py_deleter_legacy(kvc_py_dl_managed* m) { kvc_py_export_release((kvc_py_export*)m->manager_ctx); }
static void kvc_py_deleter_versioned(kvc_py_dl_managed_versioned* m) {
  kvc_py_export_release((kvc_py_export*)m->manager_ctx);
}

/* Capsule destructors: a capsule nobody consumed still owns its tensor. */
static void kvc_py_capsule_destructor_legacy(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kvc_py_capsule_legacy)) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    kvc_py_dl_managed* m = (kvc_py_dl_managed*)PyCapsule_GetPointer(capsule, kvc_py_capsule_legacy);
    if (m && m->deleter) m->deleter(m);
    PyErr_Restore(t, v, tb);
  }
}

static void kvc_py_capsule_destructor_versioned(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kvc_py_capsule_versioned)) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    kvc_py_dl_managed_versioned* m =
        (kvc_py_dl_managed_versioned*)PyCapsule_GetPointer(capsule, kvc_py_capsule_versioned);
    if (m && m->deleter) m->deleter(m);
    PyErr_Restore(t, v, tb);
  }
}

static size_t kvc_py_numel(const kvc_tensor* t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

/* Copies the strided view into a compact row-major buffer (CPU memory only). */
static void* kvc_py_compact_copy(const View* v) {
  size_t item = (size_t)(v->t.dtype.bits * v->t.dtype.lanes + 7) / 8;
  size_t n = kvc_py_numel(&v->t);
  size_t bytes = n * item;
  char* out = (char*)malloc(bytes > 0 ? bytes : 1);
  if (!out) return NULL;
  const char* base = (const char*)v->t.data + v->t.byte_offset;
  int64_t idx[KVC_PY_MAX_NDIM] = {0};
  for (size_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int d = 0; d < v->t.ndim; d++) off += idx[d] * v->strides[d];
    memcpy(out + k * item, base + off * (int64_t)item, item);
    for (int d = v->t.ndim - 1; d >= 0; d--) {
      if (++idx[d] < v->shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

/*
 * The capsule for `v`: versioned when the consumer's max_version allows it, a
 * copy when `copy` is set. The managed tensor keeps the cache handle alive.
 */
static PyObject* kvc_py_view_capsule(View* v, int versioned, uint32_t minor, int copy) {
  if (kvc_py_check_fresh(v, "__dlpack__") < 0) return NULL;
  kvc_py_export* e = (kvc_py_export*)calloc(1, sizeof *e);
  if (!e) return PyErr_NoMemory();
  kvc_tensor t = v->t;
  memcpy(e->shape, v->shape, sizeof e->shape);
  memcpy(e->strides, v->strides, sizeof e->strides);
  t.shape = e->shape;
  t.strides = e->strides;
  if (copy) {
    if (v->t.device.device_type != KVC_DEVICE_CPU) {
      free(e);
      PyErr_SetString(PyExc_BufferError, "kvcache: copy=True is only supported for CPU views");
      return NULL;
    }
    e->copy = kvc_py_compact_copy(v);
    if (!e->copy) {
      free(e);
      return PyErr_NoMemory();
    }
    t.data = e->copy;
    t.byte_offset = 0;
    int64_t s = 1;
    for (int i = t.ndim - 1; i >= 0; i--) {
      e->strides[i] = s;
      s *= t.shape[i];
    }
  } else {
    Py_INCREF(v->owner);
    e->owner = v->owner;
  }
  PyObject* capsule;
  if (versioned) {
    e->versioned.version.major = KVC_PY_DL_MAJOR;
    e->versioned.version.minor = minor;
    e->versioned.manager_ctx = e;
    e->versioned.deleter = kvc_py_deleter_versioned;
    e->versioned.flags = copy ? KVC_PY_DL_FLAG_IS_COPIED : 0;
    e->versioned.dl_tensor = t;
    capsule = PyCapsule_New(&e->versioned, kvc_py_capsule_versioned, kvc_py_capsule_destructor_versioned);
  } else {
    e->legacy.dl_tensor = t;
    e->legacy.manager_ctx = e;
    e->legacy.deleter = kvc_py_deleter_legacy;
    capsule = PyCapsule_New(&e->legacy, kvc_py_capsule_legacy, kvc_py_capsule_destructor_legacy);
  }
  if (!capsule) kvc_py_export_release(e);
  return capsule;
}

/* The stream of a view owner that is not a cache (a pool: set by kvcache_pool.h), as a DLPack stream value. */
static long long (*kvc_py_owner_stream)(PyObject* owner) = NULL;

/* The cache whose memory a view is (its stream orders the view's data). */
static const kvc_cache* kvc_py_view_cache(const View* v) {
  if (Py_TYPE(v->owner) == &CacheHandleType) return ((CacheHandle*)v->owner)->ptr;
  if (Py_TYPE(v->owner) == &EncoderDecoderHandleType) /* update_cross: the cross-attention cache's memory */
    return kvc_encoder_decoder_cache_cross_attention(((EncoderDecoderHandle*)v->owner)->ptr);
  return NULL;
}

/*
 * DLPack's stream handshake. For a view in device memory the consumer names
 * the stream it will read on (CUDA: None or 1 the legacy default stream, 2
 * the per-thread default stream, else a cudaStream_t; ROCm: None or 0 the
 * default stream, else a hipStream_t; -1: the consumer orders itself), and
 * the data must be ready there: the cache's work is ordered on its own stream
 * (kvc_cache_stream; NULL = the default stream), so a different consumer
 * stream is made to wait for it. A view of the host tier (an offloaded layer,
 * pinned host memory) is read by the host, so the cache's stream is waited
 * for (unless the consumer passed -1).
 */
static int kvc_py_order_export(const View* v, PyObject* stream) {
  int32_t type = v->t.device.device_type;
  int host = type == KVC_DEVICE_CUDA_HOST || type == KVC_DEVICE_ROCM_HOST;
  if (type != KVC_DEVICE_CUDA && type != KVC_DEVICE_ROCM && !host) return 0;
  int cuda = type == KVC_DEVICE_CUDA || type == KVC_DEVICE_CUDA_HOST;
  long long consumer = cuda ? 1 : 0;
  if (stream != Py_None) {
    if (!PyLong_Check(stream)) {
      PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be an int or None, got %.100s", Py_TYPE(stream)->tp_name);
      return -1;
    }
    consumer = PyLong_AsLongLong(stream);
    if (consumer == -1 && PyErr_Occurred()) return -1;
  }
  if (consumer == -1) return 0;
  if (!host && (consumer < -1 || (cuda && consumer == 0) || (!cuda && (consumer == 1 || consumer == 2)))) {
    PyErr_Format(PyExc_BufferError,
                 "__dlpack__: stream=%lld is not a %s stream in DLPack's convention (%s)", consumer,
                 cuda ? "CUDA" : "ROCm",
                 cuda ? "None or 1: legacy default, 2: per-thread default, -1: none, else a cudaStream_t"
                      : "None or 0: default, -1: none, else a hipStream_t");
    return -1;
  }
  const kvc_cache* cache = kvc_py_view_cache(v);
  long long producer = cache                 ? (long long)(uintptr_t)kvc_cache_stream(cache)
                       : kvc_py_owner_stream ? kvc_py_owner_stream(v->owner)
                                             : 0;
  if (cuda && producer == 0) producer = 1; /* a cache's default stream is the legacy default stream */
  if (!host && producer == consumer) return 0;
  if (!kvc_py_stream_waiter) {
    if (host)
      PyErr_Format(PyExc_BufferError,
                   "kvcache: this view is host memory written by the cache's stream 0x%llx, and nothing can wait "
                   "for that stream here; export with stream=-1 after synchronizing it",
                   (unsigned long long)producer);
    else
      PyErr_Format(PyExc_BufferError,
                   "kvcache: the view is written on the cache's stream 0x%llx but the consumer reads on stream "
                   "%lld, and nothing can order them here; bind the cache to the consumer's stream "
                   "(cache.stream = ...)",
                   (unsigned long long)producer, consumer);
    return -1;
  }
  PyObject* r = host ? PyObject_CallFunction(kvc_py_stream_waiter, "OLii", Py_None, producer, (int)type,
                                             (int)v->t.device.device_id)
                     : PyObject_CallFunction(kvc_py_stream_waiter, "LLii", consumer, producer, (int)type,
                                             (int)v->t.device.device_id);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}

static PyObject* View_dlpack(View* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", kwlist, &stream, &max_version, &dl_device,
                                   &copy))
    return NULL;
  if (stream != Py_None && self->t.device.device_type == KVC_DEVICE_CPU) {
    long s = PyLong_Check(stream) ? PyLong_AsLong(stream) : 0;
    if (!PyLong_Check(stream) || (s != -1)) {
      if (PyErr_Occurred()) return NULL;
      PyErr_SetString(PyExc_BufferError, "kvcache: a CPU view takes stream=None");
      return NULL;
    }
  }
  int versioned = 0;
  uint32_t minor = KVC_PY_DL_MINOR;
  if (max_version != Py_None) {
    long major = -1, mnr = 0;
    if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) != 2 ||
        (major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0))) == -1 ||
        (mnr = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 1))) < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "__dlpack__: max_version must be (major, minor)");
      return NULL;
    }
    if (major >= KVC_PY_DL_MAJOR) {
      versioned = 1;
      if (major == KVC_PY_DL_MAJOR && mnr < KVC_PY_DL_MINOR) minor = (uint32_t)mnr;
    }
  }
  if (dl_device != Py_None) {
    long type = -1, id = -1;
    if (!PyTuple_Check(dl_device) || PyTuple_GET_SIZE(dl_device) != 2 ||
        ((type = PyLong_AsLong(PyTuple_GET_ITEM(dl_device, 0))), PyErr_Occurred()) ||
        ((id = PyLong_AsLong(PyTuple_GET_ITEM(dl_device, 1))), PyErr_Occurred())) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "__dlpack__: dl_device must be (type, id)");
      return NULL;
    }
    if (type != self->t.device.device_type || id != self->t.device.device_id) {
      PyErr_Format(PyExc_BufferError, "kvcache: the view lives on (%d, %d); it cannot be exported to (%ld, %ld)",
                   (int)self->t.device.device_type, (int)self->t.device.device_id, type, id);
      return NULL;
    }
  }
  int do_copy = 0;
  if (copy != Py_None) {
    int c = PyObject_IsTrue(copy);
    if (c < 0) return NULL;
    do_copy = c;
  }
  if (kvc_py_check_fresh(self, "__dlpack__") < 0 || kvc_py_order_export(self, stream) < 0) return NULL;
  return kvc_py_view_capsule(self, versioned, minor, do_copy);
}

static PyObject* View_dlpack_device(View* self, PyObject* unused) {
  (void)unused;
  return Py_BuildValue("(ii)", (int)self->t.device.device_type, (int)self->t.device.device_id);
}

static PyObject* View_array(View* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"dtype", "copy", NULL};
  PyObject *dtype = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", kwlist, &dtype, &copy)) return NULL;
  if (kvc_py_check_fresh(self, "__array__") < 0) return NULL;
  PyObject* np = PyImport_ImportModule("numpy");
  if (!np) return NULL;
  PyObject* arr = PyObject_CallMethod(np, "from_dlpack", "O", (PyObject*)self);
  Py_DECREF(np);
  if (!arr) return NULL;
  if (dtype != Py_None) {
    PyObject* cast = PyObject_CallMethod(arr, "astype", "O", dtype);
    Py_DECREF(arr);
    arr = cast;
  } else if (copy == Py_True) {
    PyObject* c = PyObject_CallMethod(arr, "copy", NULL);
    Py_DECREF(arr);
    arr = c;
  }
  return arr;
}

/* _capsule(): a legacy capsule, for consumers that take one directly (torch.utils.dlpack.from_dlpack). */
static PyObject* View_capsule(View* self, PyObject* unused) {
  (void)unused;
  return kvc_py_view_capsule(self, 0, 0, 0);
}

static PyObject* View_repr(View* v) {
  PyObject* shape = kvc_py_int_tuple(v->shape, v->t.ndim);
  PyObject* strides = kvc_py_int_tuple(v->strides, v->t.ndim);
  PyObject* r = NULL;
  if (shape && strides)
    r = PyUnicode_FromFormat("View(shape=%R, dtype=%s, device=%s:%d, strides=%R%s)", shape,
                             kvc_py_dtype_name(v->t.dtype), kvc_py_device_name(v->t.device.device_type),
                             (int)v->t.device.device_id, strides, View_is_valid(v) ? "" : ", stale");
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  return r;
}

static PyMethodDef View_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))View_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None): a DLPack capsule over the "
     "cache's memory (zero-copy unless copy=True). Versioned when max_version >= (1, 0). Raises "
     "StaleViewError once the cache has been mutated after this view was made."},
    {"__dlpack_device__", (PyCFunction)View_dlpack_device, METH_NOARGS, "(device_type, device_id) as DLPack numbers"},
    {"__array__", (PyCFunction)(void (*)(void))View_array, METH_VARARGS | METH_KEYWORDS,
     "numpy.asarray(view): a zero-copy numpy array (float32/float16 only; numpy has no bfloat16)"},
    {"_capsule", (PyCFunction)View_capsule, METH_NOARGS, "a legacy 'dltensor' capsule (zero-copy)"},
    {NULL, NULL, 0, NULL}};

KVC_PY_TYPE(View, "kvcache.View",
            "A zero-copy view of cache-owned memory (a key, value or state tensor).\n\n"
            "Export it with torch.from_dlpack(view), numpy.from_dlpack(view) or any DLPack consumer: the "
            "result shares memory with the cache and keeps the cache's memory alive. A view is valid until the "
            "next call that mutates its cache (update, crop, reorder, batch operations, reset, close, ...): "
            "after that, exporting it raises StaleViewError, and tensors exported earlier must not be read, "
            "because the cache may have moved or freed that memory. Copy what you need to keep.",
            .tp_methods = View_methods, .tp_getset = View_getset, .tp_members = View_members);

/* -------------------------------------------------------------- tensors in */

/* A borrowed kvc_tensor built from a Python object, and what keeps it alive. */
typedef struct kvc_py_tensor_in {
  kvc_tensor t;
  PyObject* keep;    /* the capsule (released -> the producer's deleter runs) or the View */
  Py_buffer buf;
  int has_buf;
  void* copy;        /* a View's contents, copied (see kvc_py_tensor_in_from) */
  int64_t shape[KVC_PY_MAX_NDIM];
  int64_t strides[KVC_PY_MAX_NDIM];
} kvc_py_tensor_in;

static PyTypeObject* kvc_py_torch_tensor = NULL; /* torch.Tensor, once torch is imported */
static PyObject* kvc_py_torch_to_dlpack = NULL;  /* torch.utils.dlpack.to_dlpack */
static PyObject* kvc_py_torch_from_dlpack = NULL; /* torch.utils.dlpack.from_dlpack */

static int kvc_py_load_torch(void) {
  if (kvc_py_torch_tensor) return 1;
  PyObject* name = PyUnicode_FromString("torch");
  if (!name) return -1;
  PyObject* torch = PyImport_GetModule(name);
  Py_DECREF(name);
  if (!torch) return PyErr_Occurred() ? -1 : 0; /* torch not imported: no torch tensors exist */
  PyObject* tensor = PyObject_GetAttrString(torch, "Tensor");
  Py_DECREF(torch);
  PyObject* dl = PyImport_ImportModule("torch.utils.dlpack");
  if (!tensor || !dl || !PyType_Check(tensor)) {
    Py_XDECREF(tensor);
    Py_XDECREF(dl);
    PyErr_Clear();
    return 0;
  }
  PyObject* to = PyObject_GetAttrString(dl, "to_dlpack");
  PyObject* from = PyObject_GetAttrString(dl, "from_dlpack");
  Py_DECREF(dl);
  if (!to || !from) {
    Py_XDECREF(to);
    Py_XDECREF(from);
    Py_DECREF(tensor);
    PyErr_Clear();
    return 0;
  }
  kvc_py_torch_to_dlpack = to;
  kvc_py_torch_from_dlpack = from;
  kvc_py_torch_tensor = (PyTypeObject*)tensor;
  return 1;
}

static void kvc_py_tensor_release(kvc_py_tensor_in* in) {
  if (in->has_buf) PyBuffer_Release(&in->buf);
  in->has_buf = 0;
  free(in->copy);
  in->copy = NULL;
  Py_CLEAR(in->keep);
}

static int kvc_py_tensor_from_capsule(PyObject* capsule, const char* name, kvc_py_tensor_in* out) {
  if (PyCapsule_IsValid(capsule, kvc_py_capsule_legacy)) {
    kvc_py_dl_managed* m = (kvc_py_dl_managed*)PyCapsule_GetPointer(capsule, kvc_py_capsule_legacy);
    out->t = m->dl_tensor;
  } else if (PyCapsule_IsValid(capsule, kvc_py_capsule_versioned)) {
    kvc_py_dl_managed_versioned* m =
        (kvc_py_dl_managed_versioned*)PyCapsule_GetPointer(capsule, kvc_py_capsule_versioned);
    if (m->version.major != KVC_PY_DL_MAJOR) {
      PyErr_Format(PyExc_BufferError, "%s: DLPack version %u.%u is not supported (kvcache reads 1.x)", name,
                   (unsigned)m->version.major, (unsigned)m->version.minor);
      return -1;
    }
    out->t = m->dl_tensor;
  } else {
    PyErr_Format(PyExc_TypeError, "%s: __dlpack__() did not return a DLPack capsule", name);
    return -1;
  }
  out->keep = capsule; /* DECREF later: an unconsumed capsule calls the producer's deleter */
  return 0;
}

static int kvc_py_format_dtype(const char* fmt, Py_ssize_t itemsize, kvc_data_type* dt) {
  if (!fmt) fmt = "B";
  while (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '!' || *fmt == '>') {
    if (*fmt == '>' || *fmt == '!') return -1; /* big-endian data */
    fmt++;
  }
  if (fmt[0] == '\0' || fmt[1] != '\0') return -1;
  dt->lanes = 1;
  dt->bits = (uint8_t)(itemsize * 8);
  switch (fmt[0]) {
    case 'f': case 'd': case 'e': dt->code = KVC_TYPE_CODE_FLOAT; return 0;
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': dt->code = KVC_TYPE_CODE_INT; return 0;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': case '?': dt->code = KVC_TYPE_CODE_UINT; return 0;
    default: return -1;
  }
}

static int kvc_py_tensor_from_buffer(PyObject* obj, const char* name, kvc_py_tensor_in* out) {
  if (PyObject_GetBuffer(obj, &out->buf, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return -1;
  out->has_buf = 1;
  if (out->buf.ndim > KVC_PY_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "%s: %d dimensions (at most %d)", name, out->buf.ndim, KVC_PY_MAX_NDIM);
    return -1;
  }
  if (kvc_py_format_dtype(out->buf.format, out->buf.itemsize, &out->t.dtype) < 0) {
    PyErr_Format(PyExc_TypeError, "%s: buffer format '%s' is not a number kvcache can read", name,
                 out->buf.format ? out->buf.format : "B");
    return -1;
  }
  out->t.data = out->buf.buf;
  out->t.device.device_type = KVC_DEVICE_CPU;
  out->t.device.device_id = 0;
  out->t.ndim = out->buf.ndim;
  out->t.byte_offset = 0;
  for (int i = 0; i < out->buf.ndim; i++) {
    out->shape[i] = out->buf.shape ? out->buf.shape[i] : out->buf.len / out->buf.itemsize;
    Py_ssize_t s = out->buf.strides ? out->buf.strides[i] : out->buf.itemsize;
    if (s % out->buf.itemsize != 0) {
      PyErr_Format(PyExc_ValueError, "%s: stride %zd bytes of dimension %d is not a multiple of the item size %zd",
                   name, s, i, out->buf.itemsize);
      return -1;
    }
    out->strides[i] = s / out->buf.itemsize;
  }
  out->t.shape = out->shape;
  out->t.strides = out->strides;
  return 0;
}

/*
 * Reads `obj` as a tensor, without copying: a kvcache View, a torch tensor
 * (through torch.utils.dlpack.to_dlpack, the fast path), anything with
 * __dlpack__ (legacy call first, then max_version=(1, 1) for producers such as
 * numpy that export read-only arrays only as versioned capsules), or an object
 * with the buffer protocol. Release with kvc_py_tensor_release.
 */
static int kvc_py_tensor_in_from(PyObject* obj, const char* name, kvc_py_tensor_in* out) {
  memset(out, 0, sizeof *out);
  if (obj == NULL || obj == Py_None) {
    PyErr_Format(PyExc_TypeError, "%s: expected a tensor, got None", name);
    return -1;
  }
  if (Py_TYPE(obj) == &ViewType) {
    /* A view points into a cache, maybe the one being updated, whose update may move or free that memory
       before it copies: the view's contents are copied out first. */
    View* v = (View*)obj;
    if (kvc_py_check_fresh(v, name) < 0) return -1;
    if (v->t.device.device_type != KVC_DEVICE_CPU) {
      PyErr_Format(PyExc_ValueError, "%s: a kvcache View on a device cannot be an input; export it first", name);
      return -1;
    }
    out->copy = kvc_py_compact_copy(v);
    if (!out->copy) {
      PyErr_NoMemory();
      return -1;
    }
    out->t = v->t;
    out->t.data = out->copy;
    out->t.byte_offset = 0;
    int64_t s = 1;
    for (int i = v->t.ndim - 1; i >= 0; i--) {
      out->shape[i] = v->shape[i];
      out->strides[i] = s;
      s *= v->shape[i];
    }
    out->t.shape = out->shape;
    out->t.strides = out->strides;
    return 0;
  }
  if (kvc_py_torch_tensor || kvc_py_load_torch() > 0) {
    if (PyObject_TypeCheck(obj, kvc_py_torch_tensor)) {
      PyObject* capsule = PyObject_CallOneArg(kvc_py_torch_to_dlpack, obj);
      if (!capsule) return -1;
      if (kvc_py_tensor_from_capsule(capsule, name, out) < 0) {
        Py_DECREF(capsule);
        return -1;
      }
      return 0;
    }
  } else if (PyErr_Occurred()) {
    return -1;
  }
  PyObject* dlpack = PyObject_GetAttrString(obj, "__dlpack__");
  if (dlpack) {
    PyObject* capsule = PyObject_CallNoArgs(dlpack);
    if (!capsule && (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError))) {
      /* numpy exports read-only arrays only through versioned capsules */
      PyErr_Clear();
      PyObject* kw = Py_BuildValue("{s:(ii)}", "max_version", KVC_PY_DL_MAJOR, KVC_PY_DL_MINOR);
      PyObject* empty = PyTuple_New(0);
      if (kw && empty) capsule = PyObject_Call(dlpack, empty, kw);
      Py_XDECREF(kw);
      Py_XDECREF(empty);
    }
    Py_DECREF(dlpack);
    if (!capsule) {
      if (PyObject_CheckBuffer(obj)) {
        PyErr_Clear();
        return kvc_py_tensor_from_buffer(obj, name, out);
      }
      return -1;
    }
    if (kvc_py_tensor_from_capsule(capsule, name, out) < 0) {
      Py_DECREF(capsule);
      return -1;
    }
    return 0;
  }
  PyErr_Clear();
  if (PyObject_CheckBuffer(obj)) return kvc_py_tensor_from_buffer(obj, name, out);
  PyErr_Format(PyExc_TypeError,
               "%s: expected a tensor (an object with __dlpack__ such as a torch, numpy, cupy or jax array, or a "
               "buffer), got %.100s",
               name, Py_TYPE(obj)->tp_name);
  return -1;
}

/* ------------------------------------------------------------ int64 arrays */

typedef struct kvc_py_i64 {
  int64_t* data;
  size_t count;
  int64_t small[16];
} kvc_py_i64;

static void kvc_py_i64_release(kvc_py_i64* a) {
  if (a->data && a->data != a->small) PyMem_Free(a->data);
  a->data = NULL;
  a->count = 0;
}

static int kvc_py_i64_alloc(kvc_py_i64* a, size_t n) {
  a->count = n;
  if (n <= sizeof a->small / sizeof a->small[0]) {
    a->data = a->small;
    return 0;
  }
  a->data = (int64_t*)PyMem_Malloc(n * sizeof(int64_t));
  if (!a->data) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

/*
 * A Python int (anything with __index__) as a C integer of `bits` bits, signed or not, for argument `arg` of
 * `fn`. SWIG's own conversion names neither the argument nor the value; this raises TypeError for a non-int and
 * OverflowError naming both and the range for an int that does not fit.
 */
static int kvc_py_int_arg(PyObject* obj, const char* fn, const char* arg, int bits, int is_signed, int64_t* out) {
  PyObject* idx = PyNumber_Index(obj);
  if (!idx) {
    PyErr_Format(PyExc_TypeError, "%s: %s is a %.100s; it must be an int", fn, arg, Py_TYPE(obj)->tp_name);
    return -1;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
  int fits = 0;
  if (v == -1 && PyErr_Occurred()) {
    Py_DECREF(idx);
    return -1;
  }
  if (is_signed) {
    fits = !overflow && (bits == 64 || (v >= -(1LL << (bits - 1)) && v < (1LL << (bits - 1))));
    *out = (int64_t)v;
  } else if (overflow > 0 && bits == 64) {
    unsigned long long u = PyLong_AsUnsignedLongLong(idx);
    fits = !(u == (unsigned long long)-1 && PyErr_Occurred());
    PyErr_Clear();
    *out = (int64_t)u;
  } else {
    fits = !overflow && v >= 0 && (bits == 64 || v < (1LL << bits));
    *out = (int64_t)v;
  }
  if (!fits) {
    PyErr_Format(PyExc_OverflowError, "%s: %s is %S; it must be an int in [%s, 2^%d)", fn, arg, idx,
                 is_signed ? (bits == 64 ? "-2^63" : "-2^31") : "0", is_signed ? bits - 1 : bits);
  }
  Py_DECREF(idx);
  return fits ? 0 : -1;
}

/*
 * A file-system path for argument `arg` of `fn`: a str (or bytes, or path-like), encoded as the file system
 * wants. A NUL byte would silently cut the C string and name another file, so it is refused, naming the
 * argument. Returns the bytes object that owns the C string (the caller releases it), or NULL with an error set.
 */
static PyObject* kvc_py_path_arg(PyObject* obj, const char* fn, const char* arg) {
  PyObject* bytes = NULL;
  if (!PyUnicode_FSConverter(obj, &bytes)) {
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "%s: %s is a %.100s; it must be a str or path-like", fn, arg,
                   Py_TYPE(obj)->tp_name);
      return NULL;
    }
    if (!PyErr_ExceptionMatches(PyExc_ValueError)) return NULL;
    PyErr_Clear(); /* "embedded null byte": raised below with the argument's name */
    bytes = PyUnicode_Check(obj) ? PyUnicode_AsUTF8String(obj) : NULL;
    if (!bytes) {
      PyErr_Clear();
      bytes = PyObject_Str(obj);
    }
  }
  if (bytes && PyBytes_Check(bytes) && strlen(PyBytes_AS_STRING(bytes)) == (size_t)PyBytes_GET_SIZE(bytes)) {
    return bytes;
  }
  char msg[512];
  snprintf(msg, sizeof msg, "%s: %s holds a NUL byte; a path ends at its first NUL, so it would name another file",
           fn, arg);
  Py_XDECREF(bytes);
  kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
  return NULL;
}

/*
 * A 1-D sequence of integers: a list/tuple/range of ints, or a 1-D integer
 * tensor (torch, numpy, ...) on the CPU. Elements are copied.
 */
static int kvc_py_i64_from(PyObject* obj, const char* name, kvc_py_i64* out) {
  memset(out, 0, sizeof *out);
  int is_tensor = Py_TYPE(obj) == &ViewType || PyObject_HasAttrString(obj, "__dlpack__") ||
                  (kvc_py_torch_tensor && PyObject_TypeCheck(obj, kvc_py_torch_tensor)) ||
                  (!PyList_Check(obj) && !PyTuple_Check(obj) && PyObject_CheckBuffer(obj));
  if (is_tensor) {
    kvc_py_tensor_in t;
    if (kvc_py_tensor_in_from(obj, name, &t) < 0) return -1;
    int rc = -1;
    if (t.t.ndim != 1 && t.t.ndim != 0) {
      PyErr_Format(PyExc_ValueError, "%s: expected a 1-D tensor of indices, got %d dimensions", name, t.t.ndim);
    } else if (t.t.device.device_type != KVC_DEVICE_CPU) {
      PyErr_Format(PyExc_ValueError, "%s: indices must be on the CPU (device type %d); use .cpu()", name,
                   (int)t.t.device.device_type);
    } else if ((t.t.dtype.code != KVC_TYPE_CODE_INT && t.t.dtype.code != KVC_TYPE_CODE_UINT) ||
               (t.t.dtype.bits != 8 && t.t.dtype.bits != 16 && t.t.dtype.bits != 32 && t.t.dtype.bits != 64) ||
               t.t.dtype.lanes != 1) {
      PyErr_Format(PyExc_TypeError, "%s: indices must be integers (DLPack type code %d, %d bits)", name,
                   (int)t.t.dtype.code, (int)t.t.dtype.bits);
    } else {
      size_t n = t.t.ndim == 0 ? 1 : (size_t)t.t.shape[0];
      int64_t stride = (t.t.ndim == 0 || !t.t.strides) ? 1 : t.t.strides[0];
      if (kvc_py_i64_alloc(out, n) == 0) {
        const char* base = (const char*)t.t.data + t.t.byte_offset;
        int bytes = t.t.dtype.bits / 8;
        int is_signed = t.t.dtype.code == KVC_TYPE_CODE_INT;
        for (size_t i = 0; i < n; i++) {
          const char* p = base + (int64_t)i * stride * bytes;
          int64_t v = 0;
          switch (bytes) {
            case 1: v = is_signed ? (int64_t) * (const int8_t*)p : (int64_t) * (const uint8_t*)p; break;
            case 2: v = is_signed ? (int64_t) * (const int16_t*)p : (int64_t) * (const uint16_t*)p; break;
            case 4: v = is_signed ? (int64_t) * (const int32_t*)p : (int64_t) * (const uint32_t*)p; break;
            default: memcpy(&v, p, 8); break;
          }
          out->data[i] = v;
        }
        rc = 0;
      }
    }
    kvc_py_tensor_release(&t);
    return rc;
  }
  PyObject* seq = PySequence_Fast(obj, "");
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "%s: expected a sequence of ints or a 1-D integer tensor, got %.100s", name,
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (kvc_py_i64_alloc(out, (size_t)n) < 0) {
    Py_DECREF(seq);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    if (PyLong_CheckExact(item)) { /* the usual entry: no name formatted unless it is refused */
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
      if (!overflow && !(v == -1 && PyErr_Occurred())) {
        out->data[i] = (int64_t)v;
        continue;
      }
      PyErr_Clear(); /* the general path below reports it */
    }
    PyObject* idx = PyNumber_Index(item);
    if (!idx) {
      PyErr_Format(PyExc_TypeError, "%s[%zd]: expected an int, got %.100s", name, i, Py_TYPE(item)->tp_name);
      Py_DECREF(seq);
      kvc_py_i64_release(out);
      return -1;
    }
    char item_name[128];
    snprintf(item_name, sizeof item_name, "%s[%zd]", name, i);
    int64_t v = 0;
    int rc = kvc_py_int_arg(idx, "kvcache", item_name, 64, 1, &v);
    Py_DECREF(idx);
    if (rc < 0) {
      Py_DECREF(seq);
      kvc_py_i64_release(out);
      return -1;
    }
    out->data[i] = v;
  }
  Py_DECREF(seq);
  return 0;
}

#endif /* KVCACHE_PY_H */
