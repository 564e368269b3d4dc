/*
 * kvcache_tier_worker.i: the pool's tier worker and prefetches (kvcache/tier.h, 'Tiers off the step', since 0.7)
 * in the SWIG module, %included by kvcache.i after the tiers. The public API is kvcache/tier.py (TierWorker
 * options) and Pool.start_tier_worker / Sequence.prefetch in kvcache/pool.py.
 *
 * A prefetch is a capsule ("kvcache.prefetch") holding its C handle and a reference to its PoolHandle (a pool
 * outlives its prefetches, as it outlives its sequences). A pool that is destroyed first frees its prefetches
 * itself; the capsule then frees only its own memory.
 */

/* The header's functions are %ignored in kvcache_tier.i, before its %include of kvcache/tier.h. */

%{
static const char KVC_PY_PREFETCH_CAPSULE[] = "kvcache.prefetch";

typedef struct kvc_py_prefetch {
  kvc_pool_prefetch* ptr; /* NULL once destroyed */
  PyObject* pool;         /* the PoolHandle (a strong reference) */
} kvc_py_prefetch;

static void kvc_py_prefetch_release(kvc_py_prefetch* f) {
  PoolHandle* pool = (PoolHandle*)f->pool;
  /* A closed pool freed it; a pool with a call running (another thread) frees it at its destroy. */
  if (f->ptr && pool && pool->ptr && !pool->own.writers && !pool->own.readers) kvc_pool_prefetch_destroy(f->ptr);
  f->ptr = NULL;
}

static void kvc_py_prefetch_capsule_free(PyObject* capsule) {
  kvc_py_prefetch* f = (kvc_py_prefetch*)PyCapsule_GetPointer(capsule, KVC_PY_PREFETCH_CAPSULE);
  if (!f) return;
  kvc_py_prefetch_release(f);
  Py_CLEAR(f->pool);
  PyMem_Free(f);
}

static kvc_py_prefetch* kvc_py_prefetch_arg(PyObject* capsule, const char* fn) {
  kvc_py_prefetch* f = PyCapsule_CheckExact(capsule)
                           ? (kvc_py_prefetch*)PyCapsule_GetPointer(capsule, KVC_PY_PREFETCH_CAPSULE) : NULL;
  if (!f) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: prefetch is not a kvcache prefetch", fn);
    return NULL;
  }
  if (!f->ptr) {
    kvc_py_raise_code(KVC_ERROR_INVALID_STATE, "kvcache: the prefetch was destroyed");
    return NULL;
  }
  return f;
}

static PyObject* kvc_py_raise_or_none(kvc_error* err) {
  if (err) return kvc_py_raise(err), NULL;
  Py_RETURN_NONE;
}
%}

%feature("nothread") kvc_py_pool_start_tier_worker;
%feature("nothread") kvc_py_pool_stop_tier_worker;
%feature("nothread") kvc_py_pool_tier_worker_stats;
%feature("nothread") kvc_py_pool_prefetch_start;
%feature("nothread") kvc_py_pool_prefetch_collect;
%feature("nothread") kvc_py_pool_prefetch_destroy;
%rename(kvc_pool_start_tier_worker) kvc_py_pool_start_tier_worker;
%rename(kvc_pool_stop_tier_worker) kvc_py_pool_stop_tier_worker;
%rename(kvc_pool_tier_worker_stats) kvc_py_pool_tier_worker_stats;
%rename(kvc_pool_prefetch_start) kvc_py_pool_prefetch_start;
%rename(kvc_pool_prefetch_collect) kvc_py_pool_prefetch_collect;
%rename(kvc_pool_prefetch_destroy) kvc_py_pool_prefetch_destroy;

%inline %{
/* kvc_pool_start_tier_worker(pool, max_jobs, max_bytes, drain_timeout_ms, events). */
PyObject* kvc_py_pool_start_tier_worker(kvc_pool* pool, unsigned int max_jobs, unsigned long long max_bytes,
                                        unsigned int drain_timeout_ms, unsigned int events) {
  kvc_tier_worker_options o = KVC_TIER_WORKER_OPTIONS_INIT;
  o.max_jobs = max_jobs;
  o.max_bytes = (uint64_t)max_bytes;
  o.drain_timeout_ms = drain_timeout_ms;
  o.events = events;
  return kvc_py_raise_or_none(kvc_pool_start_tier_worker(pool, &o));
}

/* kvc_pool_stop_tier_worker(pool, drain_timeout_ms): waits for the store in flight without the GIL. */
PyObject* kvc_py_pool_stop_tier_worker(kvc_pool* pool, unsigned int drain_timeout_ms) {
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_pool_stop_tier_worker(pool, drain_timeout_ms);
  Py_END_ALLOW_THREADS
  return kvc_py_raise_or_none(err);
}

/* (running, pending_jobs, pending_bytes, blocks_queued, blocks_dropped, blocks_abandoned, prefetches,
   prefetches_late, prefetches_abandoned, events_lost) */
PyObject* kvc_py_pool_tier_worker_stats(const kvc_pool* pool) {
  kvc_tier_worker_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = (uint32_t)sizeof s;
  kvc_error* err = kvc_pool_tier_worker_stats(pool, &s);
  if (err) return kvc_py_raise(err), NULL;
  return Py_BuildValue("(IKKKKKKKKK)", (unsigned)s.running, (unsigned long long)s.pending_jobs,
                       (unsigned long long)s.pending_bytes, (unsigned long long)s.blocks_queued,
                       (unsigned long long)s.blocks_dropped, (unsigned long long)s.blocks_abandoned,
                       (unsigned long long)s.prefetches, (unsigned long long)s.prefetches_late,
                       (unsigned long long)s.prefetches_abandoned, (unsigned long long)s.events_lost);
}

/* kvc_pool_prefetch_start(sequence, tokens) -> capsule. */
PyObject* kvc_py_pool_prefetch_start(PyObject* seq, const int32_t* tokens, size_t num_tokens) {
  kvc_py_guard* guard = NULL;
  kvc_pool_sequence* s = kvc_py_seq_enter(seq, KVC_PY_POOL_KEEP_VIEWS, &guard);
  if (!s) return NULL;
  kvc_py_prefetch* f = (kvc_py_prefetch*)PyMem_Calloc(1, sizeof *f);
  kvc_error* err = f ? kvc_pool_prefetch_start(s, tokens, num_tokens, &f->ptr) : NULL;
  kvc_py_pool_leave(guard);
  if (!f) return PyErr_NoMemory();
  if (err) {
    PyMem_Free(f);
    return kvc_py_raise(err), NULL;
  }
  f->pool = ((SequenceHandle*)seq)->pool;
  Py_INCREF(f->pool);
  PyObject* c = PyCapsule_New(f, KVC_PY_PREFETCH_CAPSULE, kvc_py_prefetch_capsule_free);
  if (!c) {
    kvc_py_prefetch_release(f);
    Py_CLEAR(f->pool);
    PyMem_Free(f);
  }
  return c;
}

/* kvc_pool_prefetch_collect(prefetch, sequence, timeout_ms) -> matched tokens; waits without the GIL. */
PyObject* kvc_py_pool_prefetch_collect(PyObject* prefetch, PyObject* seq, unsigned int timeout_ms) {
  kvc_py_prefetch* f = kvc_py_prefetch_arg(prefetch, "kvc_pool_prefetch_collect");
  if (!f) return NULL;
  kvc_py_guard* guard = NULL;
  kvc_pool_sequence* s = kvc_py_seq_enter(seq, KVC_PY_POOL_STALE_VIEWS, &guard);
  if (!s) return NULL;
  uint64_t matched = 0;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_pool_prefetch_collect(f->ptr, s, timeout_ms, &matched);
  Py_END_ALLOW_THREADS
  kvc_py_pool_leave(guard);
  if (err) return kvc_py_raise(err), NULL;
  return PyLong_FromUnsignedLongLong((unsigned long long)matched);
}

/* kvc_pool_prefetch_destroy(prefetch): frees it now (None accepted; a second call does nothing). */
PyObject* kvc_py_pool_prefetch_destroy(PyObject* prefetch) {
  if (prefetch == Py_None) Py_RETURN_NONE;
  kvc_py_prefetch* f = PyCapsule_CheckExact(prefetch)
                           ? (kvc_py_prefetch*)PyCapsule_GetPointer(prefetch, KVC_PY_PREFETCH_CAPSULE) : NULL;
  if (!f) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "kvc_pool_prefetch_destroy: prefetch is not a kvcache prefetch");
    return NULL;
  }
  kvc_py_prefetch_release(f);
  Py_RETURN_NONE;
}
%}
