/*
 * kvcache_pool.h: the Python side of the pool (kvcache/pool.h), included by swig/kvcache_pool.i after
 * kvcache_py.h, whose guards, views and tensor readers it reuses.
 *
 *  - PoolHandle owns a kvc_pool. Its guard `own` is the pool's: the header makes a pool and all its sequences
 *    one object for threading, so every call on the pool or on any of its sequences enters it (exclusively: two
 *    calls must not overlap, queries included), and calls that change blocks or tables bump its epoch, which
 *    makes block-table and recurrent-state views stale. The K/V storage never moves while the pool lives, so
 *    storage views have a guard of their own (`storage`) whose epoch changes only at close.
 *  - SequenceHandle owns a kvc_pool_sequence and holds a reference to its PoolHandle, so a pool outlives its
 *    sequences (and the tensors exported from its views, which hold the PoolHandle too).
 *  - Block tables have a guard per group and format (`tables`): the header keeps a table valid until the next
 *    call that changes blocks or tables, or the next kvc_pool_block_table of the same group and format, so the
 *    tables of several groups coexist (a hybrid model's forward needs them all).
 *  - A sequence handle dropped while another thread is inside a call on its pool (the GIL released) cannot be
 *    destroyed then: its C handle waits in the pool's `dropped` list and is destroyed at the pool's next call.
 *
 * Token and byte arguments are read with kvcache.i's block-hash helpers (kvc_py_tokens_in, kvc_py_bytes_in),
 * which precede this file in the generated module.
 */
#ifndef KVCACHE_POOL_PY_H
#define KVCACHE_POOL_PY_H

#include "kvcache_py.h"
#include "kvcache/pool.h"

/*
 * A pool's whole storage in one caller's buffer (a NumPy array, a CPU torch tensor's .numpy(), a bytearray):
 * the kvc_allocator the pool is created with hands out consecutive aligned pieces of it. The pool's handle
 * keeps the buffer (and so its object) until the pool is destroyed, which gives every piece back.
 */
typedef struct kvc_py_buffer_arena {
  Py_buffer view;
  size_t used;
  long live;
  kvc_allocator allocator;
} kvc_py_buffer_arena;

/* Called inside kvc_pool_create and kvc_pool_destroy (without the GIL: no Python object is touched). */
static void* kvc_py_arena_alloc(void* ctx, size_t bytes, size_t align, kvc_device device, void* stream) {
  kvc_py_buffer_arena* a = (kvc_py_buffer_arena*)ctx;
  (void)stream;
  if (device.device_type != KVC_DEVICE_CPU) return NULL;
  uintptr_t base = (uintptr_t)a->view.buf, at = (base + a->used + align - 1) & ~(uintptr_t)(align - 1);
  size_t len = (size_t)a->view.len;
  if (at - base > len || bytes > len - (at - base)) return NULL;
  a->used = (size_t)(at - base) + bytes;
  a->live++;
  return (void*)at;
}

static void kvc_py_arena_free(void* ctx, void* ptr, size_t bytes, kvc_device device, void* stream) {
  (void)ptr, (void)bytes, (void)device, (void)stream;
  ((kvc_py_buffer_arena*)ctx)->live--;
}

/* An arena over `storage` (writable, C-contiguous), or NULL with a Python exception set. */
static kvc_py_buffer_arena* kvc_py_arena_new(PyObject* storage) {
  kvc_py_buffer_arena* a = (kvc_py_buffer_arena*)PyMem_Calloc(1, sizeof *a);
  if (!a) return (kvc_py_buffer_arena*)PyErr_NoMemory();
  if (PyObject_GetBuffer(storage, &a->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
    PyMem_Free(a);
    return NULL;
  }
  kvc_allocator_init(&a->allocator);
  a->allocator.ctx = a;
  a->allocator.alloc = kvc_py_arena_alloc;
  a->allocator.free = kvc_py_arena_free;
  return a;
}

/* After the pool that used it is destroyed. */
static void kvc_py_arena_release(kvc_py_buffer_arena* a) {
  if (!a) return;
  PyBuffer_Release(&a->view);
  PyMem_Free(a);
}

typedef struct PoolHandle {
  PyObject_HEAD
  kvc_pool* ptr;
  kvc_py_guard own;             /* threads, closed, and the epoch of table and state views */
  kvc_py_guard storage;         /* storage views: the epoch changes at close only */
  kvc_py_guard* tables;         /* block tables: one guard per group and format (2 * num_groups) */
  uint32_t num_groups;          /* from the options: the header has no getter, and reserve sizes its output */
  uint32_t num_layers;
  uintptr_t stream;             /* the stream bound with kvc_pool_set_stream (orders DLPack exports) */
  kvc_pool_sequence** dropped;  /* sequences released while a call ran; destroyed at the next call */
  size_t num_dropped, cap_dropped;
  kvc_py_buffer_arena* arena;   /* the storage buffer the pool's blocks live in, or NULL */
} PoolHandle;

typedef struct SequenceHandle {
  PyObject_HEAD
  kvc_pool_sequence* ptr;       /* NULL once closed */
  PyObject* pool;               /* the PoolHandle (a strong reference) */
} SequenceHandle;

static PyTypeObject PoolHandleType;
static PyTypeObject SequenceHandleType;

/* A call that changes blocks or tables: every table and state view goes stale (close: `closed` too). */
static void kvc_py_pool_stale(PoolHandle* p, int closed) {
  p->own.epoch++;
  for (uint32_t i = 0; i < 2 * p->num_groups; i++) {
    p->tables[i].epoch++;
    if (closed) p->tables[i].closed = 1;
  }
}

static void kvc_py_pool_destroy_dropped(PoolHandle* p) {
  for (size_t i = 0; i < p->num_dropped; i++) kvc_pool_sequence_destroy(p->dropped[i]);
  p->num_dropped = 0;
  kvc_py_pool_stale(p, 0); /* blocks were released: a mutation of the pool */
}

static void PoolHandle_dealloc(PoolHandle* self) {
  /* kvc_pool_destroy frees the sequences still held, the dropped ones included */
  if (self->ptr) kvc_pool_destroy(self->ptr);
  self->ptr = NULL;
  kvc_py_arena_release(self->arena); /* after the destroy gave its pieces back */
  self->arena = NULL;
  PyMem_Free(self->dropped);
  PyMem_Free(self->tables);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static void SequenceHandle_dealloc(SequenceHandle* self) {
  PoolHandle* pool = (PoolHandle*)self->pool;
  if (self->ptr && pool) {
    if (pool->own.writers || pool->own.readers) {
      /* another thread is inside a call on this pool: destroy at the pool's next call */
      if (pool->num_dropped == pool->cap_dropped) {
        size_t cap = pool->cap_dropped ? 2 * pool->cap_dropped : 8;
        kvc_pool_sequence** d = (kvc_pool_sequence**)PyMem_Realloc(pool->dropped, cap * sizeof *d);
        if (d) {
          pool->dropped = d;
          pool->cap_dropped = cap;
        }
      }
      /* out of memory: the sequence stays in the pool until kvc_pool_destroy frees it */
      if (pool->num_dropped < pool->cap_dropped) pool->dropped[pool->num_dropped++] = self->ptr;
    } else {
      kvc_pool_sequence_destroy(self->ptr);
      kvc_py_pool_stale(pool, 0);
    }
  }
  self->ptr = NULL;
  Py_CLEAR(self->pool);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* PoolHandle_repr(PoolHandle* self) {
  return PyUnicode_FromFormat("<kvcache PoolHandle %p, %u groups, %u layers%s>", (void*)self->ptr,
                              (unsigned)self->num_groups, (unsigned)self->num_layers,
                              self->own.closed ? " closed" : "");
}

static PyObject* SequenceHandle_repr(SequenceHandle* self) {
  return PyUnicode_FromFormat("<kvcache SequenceHandle %p%s>", (void*)self->ptr, self->ptr ? "" : " closed");
}

static PyObject* PoolHandle_get_epoch(PoolHandle* self, void* c) {
  (void)c;
  return PyLong_FromUnsignedLongLong(self->own.epoch);
}
static PyObject* PoolHandle_get_closed(PoolHandle* self, void* c) {
  (void)c;
  return PyBool_FromLong(self->own.closed);
}
static PyObject* PoolHandle_get_stream(PoolHandle* self, void* c) {
  (void)c;
  return PyLong_FromUnsignedLongLong((unsigned long long)self->stream);
}

static PyGetSetDef PoolHandle_getset[] = {
    {"epoch", (getter)PoolHandle_get_epoch, NULL, "number of calls so far that made table and state views stale",
     NULL},
    {"closed", (getter)PoolHandle_get_closed, NULL, "whether close() was called", NULL},
    {"stream", (getter)PoolHandle_get_stream, NULL, "the bound stream's handle (0: the default stream)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef PoolHandle_members[] = {
    {"num_groups", T_UINT, offsetof(PoolHandle, num_groups), READONLY, "groups of the pool"},
    {"num_layers", T_UINT, offsetof(PoolHandle, num_layers), READONLY, "layers of the pool"},
    {NULL, 0, 0, 0, NULL}};

static PyObject* SequenceHandle_get_closed(SequenceHandle* self, void* c) {
  (void)c;
  return PyBool_FromLong(self->ptr == NULL || ((PoolHandle*)self->pool)->own.closed);
}

static PyGetSetDef SequenceHandle_getset[] = {
    {"closed", (getter)SequenceHandle_get_closed, NULL, "whether the sequence (or its pool) was closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef SequenceHandle_members[] = {
    {"pool", T_OBJECT, offsetof(SequenceHandle, pool), READONLY, "the PoolHandle the sequence belongs to"},
    {NULL, 0, 0, 0, NULL}};

KVC_PY_TYPE(PoolHandle, "kvcache._lib.PoolHandle",
            "An owned kvc_pool*: kvc_pool_destroy runs when the last reference (the pool object, one of its "
            "sequences, or a tensor exported from one of its views) goes away.",
            .tp_getset = PoolHandle_getset, .tp_members = PoolHandle_members);

KVC_PY_TYPE(SequenceHandle, "kvcache._lib.SequenceHandle",
            "An owned kvc_pool_sequence*; it keeps its pool alive.",
            .tp_getset = SequenceHandle_getset, .tp_members = SequenceHandle_members);

static PyObject* kvc_py_pool_handle_new(kvc_pool* ptr, uint32_t num_groups, uint32_t num_layers,
                                        kvc_py_buffer_arena* arena) {
  kvc_py_guard* tables = (kvc_py_guard*)PyMem_Calloc(2 * (size_t)num_groups + 1, sizeof *tables);
  PoolHandle* h = tables ? PyObject_New(PoolHandle, &PoolHandleType) : NULL;
  if (!h) {
    PyMem_Free(tables);
    kvc_pool_destroy(ptr);
    kvc_py_arena_release(arena);
    return tables ? NULL : PyErr_NoMemory();
  }
  h->arena = arena;
  h->ptr = ptr;
  h->tables = tables;
  memset(&h->own, 0, sizeof h->own);
  memset(&h->storage, 0, sizeof h->storage);
  h->num_groups = num_groups;
  h->num_layers = num_layers;
  h->stream = 0;
  h->dropped = NULL;
  h->num_dropped = h->cap_dropped = 0;
  return (PyObject*)h;
}

static PyObject* kvc_py_seq_handle_new(kvc_pool_sequence* ptr, PyObject* pool) {
  SequenceHandle* h = PyObject_New(SequenceHandle, &SequenceHandleType);
  if (!h) {
    kvc_pool_sequence_destroy(ptr);
    return NULL;
  }
  h->ptr = ptr;
  Py_INCREF(pool);
  h->pool = pool;
  return (PyObject*)h;
}

/* ------------------------------------------------------------ entering calls */

/* Whether a call makes table and state views stale (it changes blocks or tables). */
enum { KVC_PY_POOL_KEEP_VIEWS = 0, KVC_PY_POOL_STALE_VIEWS = 1 };

static PoolHandle* kvc_py_pool_arg(PyObject* obj, const char* what) {
  return (PoolHandle*)kvc_py_typed_arg(obj, &PoolHandleType, what, "kvcache PoolHandle");
}

static SequenceHandle* kvc_py_seq_arg(PyObject* obj, const char* what) {
  return (SequenceHandle*)kvc_py_typed_arg(obj, &SequenceHandleType, what, "kvcache SequenceHandle");
}

/* Enters a call on `p`: refuses a closed pool and a second thread, destroys the sequences dropped meanwhile. */
static int kvc_py_pool_guard_enter(PoolHandle* p, int mode) {
  if (p->own.closed) {
    PyErr_SetString(PyExc_ValueError, "kvcache: the pool is closed");
    return -1;
  }
  if (p->own.writers || p->own.readers) {
    kvc_py_raise_code(KVC_ERROR_BUSY,
                      "kvcache: the pool is in use by another thread; a pool and its sequences must be used by one "
                      "thread at a time (serialize the calls, as a scheduler thread does)");
    return -1;
  }
  if (p->num_dropped) kvc_py_pool_destroy_dropped(p);
  p->own.writers++;
  if (mode == KVC_PY_POOL_STALE_VIEWS) kvc_py_pool_stale(p, 0); /* stale whether the call succeeds or not */
  return 0;
}

static kvc_pool* kvc_py_pool_enter(PyObject* obj, int mode, kvc_py_guard** guard) {
  PoolHandle* p = kvc_py_pool_arg(obj, "kvcache pool");
  if (!p || kvc_py_pool_guard_enter(p, mode) < 0) return NULL;
  *guard = &p->own;
  return p->ptr;
}

static kvc_pool_sequence* kvc_py_seq_enter(PyObject* obj, int mode, kvc_py_guard** guard) {
  SequenceHandle* s = kvc_py_seq_arg(obj, "kvcache sequence");
  if (!s) return NULL;
  PoolHandle* p = (PoolHandle*)s->pool;
  if (!p->own.closed && !s->ptr) {
    PyErr_SetString(PyExc_ValueError, "kvcache: the sequence is closed");
    return NULL;
  }
  if (kvc_py_pool_guard_enter(p, mode) < 0) return NULL;
  *guard = &p->own;
  return s->ptr;
}

/* Every pool call holds the guard exclusively (see kvc_py_pool_guard_enter). */
static void kvc_py_pool_leave(kvc_py_guard* guard) { kvc_py_guard_leave(guard, 1); }

/* The stream of a view's pool, for kvc_py_order_export (registered as kvc_py_owner_stream). */
static long long kvc_py_pool_stream_of(PyObject* owner) {
  if (Py_TYPE(owner) == &PoolHandleType) return (long long)((PoolHandle*)owner)->stream;
  return 0;
}

/* ----------------------------------------------------------------- arguments */

/* A list of sequence handles of one pool, borrowed for the call. */
static int kvc_py_seq_list(PyObject* obj, PyObject* pool, const char* name, const kvc_pool_sequence*** out,
                           size_t* count) {
  PyObject* seq = PySequence_Fast(obj, "sequences: expected a sequence of kvcache sequences");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  const kvc_pool_sequence** arr = (const kvc_pool_sequence**)PyMem_Calloc((size_t)n + 1, sizeof *arr);
  if (!arr) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  static PyObject* handle_name;
  if (!handle_name) handle_name = PyUnicode_InternFromString("_handle");
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    if (Py_TYPE(item) != &SequenceHandleType && handle_name) {
      /* A kvcache.Sequence: its handle (the batch calls take the package's objects without a Python loop). */
      PyObject* h = PyObject_GetAttr(item, handle_name);
      if (h) {
        Py_DECREF(h); /* the Sequence keeps it alive */
        item = h;
      } else {
        PyErr_Clear();
      }
    }
    if (Py_TYPE(item) != &SequenceHandleType) {
      PyErr_Format(PyExc_TypeError, "%s[%zd]: expected a kvcache sequence, got %.100s", name, i,
                   Py_TYPE(item)->tp_name);
      goto fail;
    }
    SequenceHandle* s = (SequenceHandle*)item;
    if (s->pool != pool) {
      char msg[160];
      snprintf(msg, sizeof msg, "%s[%zd] belongs to another pool", name, i);
      kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
      goto fail;
    }
    if (!s->ptr) {
      PyErr_Format(PyExc_ValueError, "%s[%zd]: the sequence is closed", name, i);
      goto fail;
    }
    arr[i] = s->ptr;
  }
  Py_DECREF(seq);
  *out = arr;
  *count = (size_t)n;
  return 0;
fail:
  Py_DECREF(seq);
  PyMem_Free(arr);
  return -1;
}

#endif /* KVCACHE_POOL_PY_H */
