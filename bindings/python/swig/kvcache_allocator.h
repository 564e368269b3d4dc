/*
 * kvcache_allocator.h: a Python object as a cache's kvc_allocator (kvcache/allocator.h), included by kvcache.i
 * after kvcache_py.h.
 *
 * The object has alloc(nbytes, align, device) -> address and free(address, nbytes, device) (kvcache.Allocator).
 * The library calls them inside cache calls, most of which run with the GIL released, so each callback takes
 * the GIL itself (PyGILState_Ensure; a call that kept the GIL re-enters it). The object is the allocator's
 * `ctx`: every successful create or load holds one reference to it, which the library hands back through
 * `release` after the last cache sharing it (clones, splits, stacks included) is destroyed; a create that
 * fails never calls `release`, so its reference is dropped here.
 *
 * An exception in alloc refuses the allocation: the C call fails with KVC_ERROR_OUT_OF_MEMORY and changes
 * nothing. The exception is kept per thread until that error is raised (kvc_py_raise), which names it in its
 * message and sets it as the __cause__. An exception in free cannot fail anything: it is reported as
 * unraisable.
 */
#ifndef KVCACHE_ALLOCATOR_PY_H
#define KVCACHE_ALLOCATOR_PY_H

#include "kvcache_py.h"

/* Python calls are not made while the interpreter shuts down: what is still allocated then dies with it. */
static int kvc_py_allocator_callable(void) { return Py_IsInitialized() && !kvc_py_finalizing(); }

/* "cpu", "cuda:0", "rocm:1": the device as torch and kvcache's device arguments spell it. */
static PyObject* kvc_py_allocator_device(kvc_device device) {
  if (device.device_type == KVC_DEVICE_CPU) return PyUnicode_FromString("cpu");
  return PyUnicode_FromFormat("%s:%d", kvc_py_device_name(device.device_type), (int)device.device_id);
}

/* Keeps the exception being handled as this thread's allocator failure (replacing an older one). */
static void kvc_py_allocator_keep_failure(void) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value && tb) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  Py_XSETREF(kvc_py_allocator_failure, value);
}

static void* kvc_py_allocator_alloc(void* ctx, size_t bytes, size_t align, kvc_device device, void* stream) {
  (void)stream; /* Python allocators serve host memory, which has no stream */
  if (!kvc_py_allocator_callable()) return NULL;
  PyGILState_STATE gil = PyGILState_Ensure();
  void* ptr = NULL;
  PyObject* dev = kvc_py_allocator_device(device);
  PyObject* got = dev ? PyObject_CallMethod((PyObject*)ctx, "alloc", "nnO", (Py_ssize_t)bytes, (Py_ssize_t)align,
                                            dev)
                      : NULL;
  if (got && got != Py_None) {
    if (!PyLong_Check(got)) PyErr_Format(PyExc_TypeError, "alloc() returned %.100s, not an int address",
                                         Py_TYPE(got)->tp_name);
    else ptr = PyLong_AsVoidPtr(got);
  }
  if (PyErr_Occurred()) {
    ptr = NULL;
    kvc_py_allocator_keep_failure();
  } else {
    Py_CLEAR(kvc_py_allocator_failure); /* an older refusal on this thread was not this call's */
  }
  Py_XDECREF(got);
  Py_XDECREF(dev);
  PyGILState_Release(gil);
  return ptr;
}

static void kvc_py_allocator_free(void* ctx, void* ptr, size_t bytes, kvc_device device, void* stream) {
  (void)stream;
  if (!kvc_py_allocator_callable()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* error_type = NULL, *error = NULL, *error_tb = NULL;
  PyErr_Fetch(&error_type, &error, &error_tb); /* a free inside a failing call keeps that call's exception */
  PyObject* dev = kvc_py_allocator_device(device);
  PyObject* done = dev ? PyObject_CallMethod((PyObject*)ctx, "free", "NnO", PyLong_FromVoidPtr(ptr),
                                             (Py_ssize_t)bytes, dev)
                       : NULL;
  if (!done) PyErr_WriteUnraisable((PyObject*)ctx);
  Py_XDECREF(done);
  Py_XDECREF(dev);
  PyErr_Restore(error_type, error, error_tb);
  PyGILState_Release(gil);
}

static void kvc_py_allocator_release(void* ctx) {
  if (!kvc_py_allocator_callable()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF((PyObject*)ctx);
  PyGILState_Release(gil);
}

/*
 * Points `*field` (an options struct's allocator) at `a`, a kvc_allocator over `obj`, holding a reference for the
 * call about to be made; None leaves `*field` alone. -1 with a TypeError for an object without alloc and free.
 */
static int kvc_py_allocator_arm(PyObject* obj, kvc_allocator* a, const kvc_allocator** field) {
  if (!obj || obj == Py_None) return 0;
  static const char* const methods[] = {"alloc", "free"};
  for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
    PyObject* m = PyObject_GetAttrString(obj, methods[i]);
    int ok = m && PyCallable_Check(m);
    Py_XDECREF(m);
    if (!ok) {
      PyErr_Format(PyExc_TypeError, "allocator: %.100s has no %s() method (see kvcache.Allocator)",
                   Py_TYPE(obj)->tp_name, methods[i]);
      return -1;
    }
  }
  kvc_allocator_init(a);
  a->ctx = obj;
  a->alloc = kvc_py_allocator_alloc;
  a->free = kvc_py_allocator_free;
  a->release = kvc_py_allocator_release;
  Py_INCREF(obj);
  *field = a;
  return 0;
}

/* After a create or load armed with `a`: its reference now belongs to the library (`release` drops it), unless
 * the call failed. Then the new cache's handle, or NULL with `err` raised. */
static PyObject* kvc_py_allocator_settle(const kvc_allocator* a, const kvc_allocator* field, kvc_error* err,
                                         kvc_cache* out) {
  if (field == a && err) Py_DECREF((PyObject*)a->ctx);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  return kvc_py_handle_new(out, NULL, NULL);
}

#endif /* KVCACHE_ALLOCATOR_PY_H */
