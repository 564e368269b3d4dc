/*
 * kvcache_torch.h: the per-layer hot path of kvcache.transformers: torch tensors in, torch tensors out, and the
 * cache kept on torch's current CUDA/ROCm stream. Included by swig/kvcache.i after kvcache_py.h.
 *
 * A decode step calls update once per layer, and on a GPU the step's time is the host's: every Python call counts.
 * So these functions are METH_FASTCALL (no SWIG argument tuples), and a TorchViews object, one per drop-in cache,
 * remembers per layer the torch tensors it returned last together with the C tensor they were made from. When the
 * C layer returns the same memory with the same shape and strides again (a static layer returns its whole buffer
 * at every step; a layer view that did not change), the remembered tensor is returned: no DLPack import, and the
 * same object (stable addresses, as transformers' StaticLayer returns its self.keys). Otherwise a legacy DLPack
 * capsule is imported with torch._C._from_dlpack directly (skipping torch.utils.dlpack's Python checks).
 *
 * Reusing a remembered tensor is safe even if the layer's store was freed and another one allocated at the same
 * address in between: equal address, shape, strides, dtype and device describe exactly the new memory.
 *
 * Ownership: the drop-in holds the TorchViews, the TorchViews holds the cache handle and the remembered tensors,
 * and each tensor's DLPack export holds the handle. Nothing points back at the TorchViews, so no reference cycle
 * keeps a cache alive (the handle cannot hold these tensors: that would be one).
 *
 * Streams: a TorchViews of a device cache holds torch's current-raw-stream getter; before each call it binds the
 * cache to the stream torch works on now (kvc_cache_set_stream only when it changed), so the inputs are read, and
 * the returned tensors are written, in the order of the caller's stream, with no handshake per tensor.
 *
 * torch.compile: dynamo cannot trace these C functions, so kvcache/_torch_compile.py gives it a Python stand-in for
 * _update_torch, which receives the TorchViews. Its `record` attribute (any Python object, None at first; the drop-in
 * sets it) is how that stand-in finds the cache's stable tensors through attributes, which dynamo reads again at
 * every call of a compiled function, rather than through the identity of one cache, which it would compile in.
 * The record must not refer back to the TorchViews or its cache: a TorchViews is not tracked by the cycle collector.
 */
#ifndef KVCACHE_TORCH_H
#define KVCACHE_TORCH_H

#include <structmember.h>

#include "kvcache_py.h"

/* Per layer: the keys and values returned by update, and those of the layer view. */
#define KVC_PY_TORCH_SLOTS 4

typedef struct kvc_py_torch_slot {
  PyObject* tensor; /* the torch tensor made last for this slot, or NULL */
  kvc_tensor t;     /* what it was made from (shape/strides point into the arrays below) */
  int64_t shape[KVC_PY_MAX_NDIM];
  int64_t strides[KVC_PY_MAX_NDIM];
} kvc_py_torch_slot;

typedef struct TorchViews {
  PyObject_HEAD
  PyObject* handle;       /* the CacheHandle */
  PyObject* stream_fn;    /* torch._C._cuda_getCurrentRawStream for a device cache, else NULL */
  PyObject* device_index; /* its argument */
  kvc_py_torch_slot* slots;
  size_t num_layers;      /* slots holds KVC_PY_TORCH_SLOTS entries per layer */
  PyObject* record;       /* the drop-in's torch.compile record, or NULL (see above) */
} TorchViews;

static PyTypeObject TorchViewsType;
static PyObject* kvc_py_torch_import = NULL; /* torch._C._from_dlpack (or torch.utils.dlpack.from_dlpack) */

static void TorchViews_forget(TorchViews* self) {
  for (size_t i = 0; i < self->num_layers * KVC_PY_TORCH_SLOTS; i++) Py_CLEAR(self->slots[i].tensor);
}

static void TorchViews_dealloc(TorchViews* self) {
  if (self->slots) TorchViews_forget(self);
  PyMem_Free(self->slots);
  Py_CLEAR(self->handle);
  Py_CLEAR(self->stream_fn);
  Py_CLEAR(self->device_index);
  Py_CLEAR(self->record);
  PyObject_Free(self);
}

static PyMemberDef TorchViews_members[] = {
    {"record", T_OBJECT, offsetof(TorchViews, record), 0,
     "what torch.compile's stand-in for _update_torch reads (kvcache/_torch_compile.py); None until set"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject TorchViewsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvcache._lib.TorchViews",
    .tp_basicsize = sizeof(TorchViews),
    .tp_dealloc = (destructor)TorchViews_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The torch tensors a kvcache.transformers cache returned last, per layer (see kvcache_torch.h).",
    .tp_members = TorchViews_members,
};

static int kvc_py_torch_load_import(void) {
  if (kvc_py_torch_import) return 0;
  PyObject* c = PyImport_ImportModule("torch._C");
  if (c) {
    kvc_py_torch_import = PyObject_GetAttrString(c, "_from_dlpack");
    Py_DECREF(c);
  }
  if (kvc_py_torch_import) return 0;
  PyErr_Clear();
  PyObject* dl = PyImport_ImportModule("torch.utils.dlpack");
  if (!dl) return -1;
  kvc_py_torch_import = PyObject_GetAttrString(dl, "from_dlpack");
  Py_DECREF(dl);
  return kvc_py_torch_import ? 0 : -1;
}

/* _torch_views(handle, stream_fn, device_index) -> TorchViews; stream_fn None for a CPU cache. */
static PyObject* kvc_py_torch_views_new(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "_torch_views(handle, stream_fn, device_index) takes 3 arguments");
    return NULL;
  }
  if (!kvc_py_typed_arg(args[0], &CacheHandleType, "_torch_views", "CacheHandle")) return NULL;
  if (args[1] != Py_None && !PyCallable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_torch_views: stream_fn must be callable or None");
    return NULL;
  }
  if (kvc_py_torch_load_import() < 0) return NULL;
  TorchViews* tv = PyObject_New(TorchViews, &TorchViewsType);
  if (!tv) return NULL;
  Py_INCREF(args[0]);
  tv->handle = args[0];
  tv->stream_fn = NULL;
  tv->device_index = NULL;
  if (args[1] != Py_None) {
    Py_INCREF(args[1]);
    Py_INCREF(args[2]);
    tv->stream_fn = args[1];
    tv->device_index = args[2];
  }
  tv->slots = NULL;
  tv->num_layers = 0;
  tv->record = NULL;
  return (PyObject*)tv;
}

static TorchViews* kvc_py_torch_views_arg(PyObject* obj, const char* fn) {
  return (TorchViews*)kvc_py_typed_arg(obj, &TorchViewsType, fn, "TorchViews");
}

/* Slots for `layer`, allocated before any C call so that a later allocation failure cannot follow a mutation. */
static kvc_py_torch_slot* kvc_py_torch_slots_of(TorchViews* tv, uint32_t layer) {
  if (layer >= tv->num_layers) {
    size_t n = tv->num_layers * 2 > (size_t)layer + 1 ? tv->num_layers * 2 : (size_t)layer + 1;
    kvc_py_torch_slot* s = (kvc_py_torch_slot*)PyMem_Realloc(tv->slots, n * KVC_PY_TORCH_SLOTS * sizeof *s);
    if (!s) {
      PyErr_NoMemory();
      return NULL;
    }
    memset(s + tv->num_layers * KVC_PY_TORCH_SLOTS, 0, (n - tv->num_layers) * KVC_PY_TORCH_SLOTS * sizeof *s);
    tv->slots = s;
    tv->num_layers = n;
  }
  return tv->slots + (size_t)layer * KVC_PY_TORCH_SLOTS;
}

/* The layer index argument: an int in [0, 2^32), as kvcache._cache._layer checks it. */
static int kvc_py_torch_layer_arg(PyObject* obj, uint32_t* layer) {
  PyObject* index = PyNumber_Index(obj);
  if (!index) return -1;
  long long v = PyLong_AsLongLong(index);
  Py_DECREF(index);
  if (v == -1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
    PyErr_Clear();
    v = -1;
  }
  if (v < 0 || v >= (1LL << 32)) {
    char msg[128];
    snprintf(msg, sizeof msg, "layer_idx is %lld; layer indices are in [0, 2^32)", v);
    kvc_py_raise_code(KVC_ERROR_OUT_OF_RANGE, msg);
    return -1;
  }
  *layer = (uint32_t)v;
  return 0;
}

/*
 * Reads a torch tensor (or anything kvc_py_tensor_in_from reads). torch refuses to export a tensor that requires
 * grad; the cache only copies the values, so such a tensor is read through its detached alias, as
 * transformers' caches store detached history.
 */
static int kvc_py_torch_input(PyObject* obj, const char* name, kvc_py_tensor_in* out) {
  if (kvc_py_tensor_in_from(obj, name, out) == 0) return 0;
  if (!kvc_py_torch_tensor || !PyObject_TypeCheck(obj, kvc_py_torch_tensor)) return -1;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* rg = PyObject_GetAttrString(obj, "requires_grad");
  int requires_grad = rg ? PyObject_IsTrue(rg) : -1;
  Py_XDECREF(rg);
  if (requires_grad != 1) {
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return -1;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  kvc_py_tensor_release(out);
  PyObject* detached = PyObject_CallMethod(obj, "detach", NULL);
  if (!detached) return -1;
  int rc = kvc_py_tensor_in_from(detached, name, out); /* the capsule keeps the alias alive */
  Py_DECREF(detached);
  return rc;
}

/* The (views, layer, ...) arguments of the per-layer functions: the layer's slots (NULL with an exception set). */
static kvc_py_torch_slot* kvc_py_torch_layer_args(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t min_args,
                                                  Py_ssize_t max_args, const char* usage, TorchViews** tv,
                                                  uint32_t* layer) {
  if (nargs < min_args || nargs > max_args) {
    PyErr_Format(PyExc_TypeError, "%s: got %zd arguments", usage, nargs);
    return NULL;
  }
  *tv = kvc_py_torch_views_arg(args[0], usage);
  if (!*tv || kvc_py_torch_layer_arg(args[1], layer) < 0) return NULL;
  return kvc_py_torch_slots_of(*tv, *layer);
}

/* Binds a device cache to the stream torch works on now (only when that changed; no work for a CPU cache). */
static int kvc_py_torch_follow_stream(const TorchViews* tv, kvc_cache* c) {
  if (!tv->stream_fn) return 0;
  PyObject* r = PyObject_CallOneArg(tv->stream_fn, tv->device_index);
  if (!r) return -1;
  unsigned long long s = PyLong_AsUnsignedLongLong(r);
  Py_DECREF(r);
  if (s == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  if ((uintptr_t)kvc_cache_stream(c) == (uintptr_t)s) return 0;
  kvc_error* err = kvc_cache_set_stream(c, (void*)(uintptr_t)s);
  if (err) {
    kvc_py_raise(err);
    return -1;
  }
  return 0;
}

static int kvc_py_torch_slot_matches(const kvc_py_torch_slot* s, const View* v) {
  const kvc_tensor* t = &v->t;
  if (!s->tensor || s->t.data != t->data || s->t.byte_offset != t->byte_offset || s->t.ndim != t->ndim ||
      s->t.device.device_type != t->device.device_type || s->t.device.device_id != t->device.device_id ||
      s->t.dtype.code != t->dtype.code || s->t.dtype.bits != t->dtype.bits || s->t.dtype.lanes != t->dtype.lanes)
    return 0;
  for (int i = 0; i < t->ndim; i++)
    if (s->shape[i] != v->shape[i] || s->strides[i] != v->strides[i]) return 0;
  return 1;
}

/* The torch tensor over `t` (new reference): the slot's when it is the same memory and layout, else imported. */
static PyObject* kvc_py_torch_tensor_of(TorchViews* tv, kvc_py_guard* guard, kvc_py_torch_slot* s,
                                        const kvc_tensor* t) {
  if (t->ndim < 0 || t->ndim > KVC_PY_MAX_NDIM) {
    PyErr_Format(PyExc_RuntimeError, "kvcache: a view has %d dimensions", (int)t->ndim);
    return NULL;
  }
  View v; /* on the stack: only read by the capsule maker */
  memset(&v, 0, sizeof v);
  v.owner = tv->handle;
  v.guard = guard;
  v.epoch = guard->epoch;
  kvc_py_view_fill(&v, t);
  int32_t type = t->device.device_type;
  if ((type == KVC_DEVICE_CUDA_HOST || type == KVC_DEVICE_ROCM_HOST) && kvc_py_order_export(&v, Py_None) < 0)
    return NULL; /* an offloaded layer's host copy is read by the host: its stream is waited for */
  if (kvc_py_torch_slot_matches(s, &v)) {
    Py_INCREF(s->tensor);
    return s->tensor;
  }
  PyObject* capsule = kvc_py_view_capsule(&v, 0, 0, 0);
  if (!capsule) return NULL;
  PyObject* out = PyObject_CallOneArg(kvc_py_torch_import, capsule);
  Py_DECREF(capsule);
  if (!out) return NULL;
  Py_INCREF(out);
  Py_XSETREF(s->tensor, out);
  s->t = v.t;
  memcpy(s->shape, v.shape, sizeof s->shape);
  memcpy(s->strides, v.strides, sizeof s->strides);
  s->t.shape = s->shape;
  s->t.strides = s->strides;
  return out;
}

static PyObject* kvc_py_torch_pair(TorchViews* tv, kvc_py_guard* guard, kvc_py_torch_slot* slots,
                                   const kvc_kv* kv) {
  PyObject* k = kvc_py_torch_tensor_of(tv, guard, &slots[0], &kv->key);
  if (!k) return NULL;
  PyObject* v = kvc_py_torch_tensor_of(tv, guard, &slots[1], &kv->value);
  if (!v) {
    Py_DECREF(k);
    return NULL;
  }
  PyObject* pair = PyTuple_Pack(2, k, v);
  Py_DECREF(k);
  Py_DECREF(v);
  return pair;
}

/*
 * _update_torch(views, layer, key, value[, cache_position]) -> (keys, values) torch tensors: kvc_cache_update
 * (cache_position: host positions for static layers, or None). The tensors are valid until the next mutating
 * call; on error the cache is unchanged.
 */
static PyObject* kvc_py_update_torch(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  TorchViews* tv = NULL;
  uint32_t layer = 0;
  kvc_py_torch_slot* slots =
      kvc_py_torch_layer_args(args, nargs, 4, 5, "_update_torch(views, layer, key, value[, cache_position])", &tv,
                              &layer);
  if (!slots) return NULL;
  kvc_py_guard* guard = NULL;
  kvc_cache* c = NULL;
  PyObject* result = NULL;
  kvc_py_tensor_in k, v;
  kvc_py_i64 positions;
  kvc_update_options options;
  memset(&k, 0, sizeof k);
  memset(&v, 0, sizeof v);
  memset(&positions, 0, sizeof positions);
  kvc_update_options_init(&options);
  int use_positions = nargs == 5 && args[4] != Py_None;
  if ((!use_positions || kvc_py_i64_from(args[4], "cache_position", &positions) == 0) &&
      kvc_py_torch_input(args[2], "key", &k) == 0 && kvc_py_torch_input(args[3], "value", &v) == 0 &&
      (c = kvc_py_cache_enter(tv->handle, 1, &guard)) != NULL && kvc_py_torch_follow_stream(tv, c) == 0) {
    kvc_kv out;
    kvc_error* err;
    options.cache_position = positions.data;
    options.cache_position_length = (uint32_t)positions.count;
    Py_BEGIN_ALLOW_THREADS
    err = kvc_cache_update(c, layer, &k.t, &v.t, use_positions ? &options : NULL, &out);
    Py_END_ALLOW_THREADS
    if (err) kvc_py_raise(err);
    else result = kvc_py_torch_pair(tv, guard, slots, &out);
  }
  kvc_py_tensor_release(&k);
  kvc_py_tensor_release(&v);
  kvc_py_i64_release(&positions);
  kvc_py_guard_leave(guard, 1);
  return result;
}

/* _torch_layer_view(views, layer) -> (keys, values) torch tensors of what the layer stores, or None before its
   first update. */
static PyObject* kvc_py_torch_layer_view(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  TorchViews* tv = NULL;
  uint32_t layer = 0;
  kvc_py_torch_slot* slots = kvc_py_torch_layer_args(args, nargs, 2, 2, "_torch_layer_view(views, layer)", &tv, &layer);
  if (!slots) return NULL;
  kvc_py_guard* guard = NULL;
  kvc_cache* c = kvc_py_cache_enter(tv->handle, 0, &guard);
  if (!c) return NULL;
  PyObject* result = NULL;
  kvc_layer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  kvc_kv out;
  kvc_error* err = kvc_cache_layer_info(c, layer, &info);
  if (!err && info.is_initialized) err = kvc_cache_layer_view(c, layer, &out);
  if (err) {
    kvc_py_raise(err);
  } else if (!info.is_initialized) {
    Py_INCREF(Py_None);
    result = Py_None;
  } else if (kvc_py_torch_follow_stream(tv, c) == 0) {
    result = kvc_py_torch_pair(tv, guard, slots + 2, &out);
  }
  kvc_py_guard_leave(guard, 0);
  return result;
}

/* _torch_follow_stream(views): binds a device cache to torch's current stream now (before calls that issue device
   work through other functions: crop, reorder, state updates ...). */
static PyObject* kvc_py_torch_views_follow_stream(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "_torch_follow_stream(views) takes 1 argument");
    return NULL;
  }
  TorchViews* tv = kvc_py_torch_views_arg(args[0], "_torch_follow_stream");
  if (!tv) return NULL;
  kvc_py_guard* guard = NULL;
  kvc_cache* c = kvc_py_cache_enter(tv->handle, 0, &guard);
  if (!c) return NULL;
  int rc = kvc_py_torch_follow_stream(tv, c);
  kvc_py_guard_leave(guard, 0);
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef kvc_py_torch_methods[] = {
    {"_torch_views", (PyCFunction)(void (*)(void))kvc_py_torch_views_new, METH_FASTCALL,
     "_torch_views(handle, stream_fn, device_index): the torch-tensor memory of one kvcache.transformers cache"},
    {"_update_torch", (PyCFunction)(void (*)(void))kvc_py_update_torch, METH_FASTCALL,
     "_update_torch(views, layer, key, value[, cache_position]) -> (keys, values) torch tensors"},
    {"_torch_layer_view", (PyCFunction)(void (*)(void))kvc_py_torch_layer_view, METH_FASTCALL,
     "_torch_layer_view(views, layer) -> (keys, values) torch tensors, or None before the layer's first update"},
    {"_torch_follow_stream", (PyCFunction)(void (*)(void))kvc_py_torch_views_follow_stream, METH_FASTCALL,
     "_torch_follow_stream(views): binds a device cache to torch's current stream"},
    {NULL, NULL, 0, NULL}};

#endif /* KVCACHE_TORCH_H */
