/*
 * kvcache_tier.i: tiers below a pool (kvcache/tier.h) in the SWIG module, %included by kvcache.i after the
 * pool. The public API is kvcache/tier.py. A tier is a capsule ("kvcache.tier") owned by Python until
 * kvc_pool_add_tier gives it to a pool; from then on the pool frees it and its counters are read through the
 * pool (kvc_pool_tier_stats), under the pool's guard like every pool call. kvc_tier_create (a program's own
 * store, C callbacks) has no Python form in 0.6: a Python store would run Python code inside every pool call.
 */

%ignore kvc_tier_create;
%ignore kvc_tier_destroy;
%ignore kvc_disk_tier_create;
%ignore kvc_tier_stats_get;
%ignore kvc_tier_set_auth_key;
%ignore kvc_pool_add_tier;
%ignore kvc_pool_tier;
%ignore kvc_pool_fingerprint;
%ignore kvc_tier_exists;
%ignore kvc_tier_get_blocks;
%ignore kvc_tier_put_blocks;
%ignore kvc_pool_options_fingerprint;
%ignore kvc_pool_options_block_payload;
/* The tier worker's calls: kvcache_tier_worker.i binds them by hand. */
%ignore kvc_pool_start_tier_worker;
%ignore kvc_pool_stop_tier_worker;
%ignore kvc_pool_tier_worker_stats;
%ignore kvc_pool_prefetch_start;
%ignore kvc_pool_prefetch_collect;
%ignore kvc_pool_prefetch_destroy;
%include "kvcache/tier.h"

/* Structs start as their _INIT macros (struct_size set), as every option struct of the module does. */
KVC_OPTIONS_CTOR_MACRO(kvc_disk_tier_options, KVC_DISK_TIER_OPTIONS_INIT)
KVC_OPTIONS_CTOR_MACRO(kvc_tier_worker_options, KVC_TIER_WORKER_OPTIONS_INIT)
%extend kvc_tier_worker_stats {
  kvc_tier_worker_stats() {
    kvc_tier_worker_stats* o = (kvc_tier_worker_stats*)calloc(1, sizeof(kvc_tier_worker_stats));
    if (o) o->struct_size = (uint32_t)sizeof(kvc_tier_worker_stats);
    return o;
  }
}
%extend kvc_tier_stats {
  kvc_tier_stats() {
    kvc_tier_stats* o = (kvc_tier_stats*)calloc(1, sizeof(kvc_tier_stats));
    if (o) o->struct_size = (uint32_t)sizeof(kvc_tier_stats);
    return o;
  }
}
%extend kvc_tier_ops {
  kvc_tier_ops() {
    kvc_tier_ops* o = (kvc_tier_ops*)calloc(1, sizeof(kvc_tier_ops));
    if (o) o->struct_size = (uint32_t)sizeof(kvc_tier_ops);
    return o;
  }
}

%{
static const char KVC_PY_TIER_CAPSULE[] = "kvcache.tier";
static char kvc_py_tier_given; /* a capsule's context once its tier belongs to a pool */

static void kvc_py_tier_capsule_free(PyObject* capsule) {
  if (PyCapsule_GetContext(capsule) == &kvc_py_tier_given) return;
  kvc_tier_destroy((kvc_tier*)PyCapsule_GetPointer(capsule, KVC_PY_TIER_CAPSULE));
}

/* The tier of a capsule Python still owns, or NULL with an exception set. */
static kvc_tier* kvc_py_tier_arg(PyObject* capsule, const char* fn) {
  kvc_tier* t = PyCapsule_CheckExact(capsule) ? (kvc_tier*)PyCapsule_GetPointer(capsule, KVC_PY_TIER_CAPSULE) : NULL;
  if (!t) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: tier is not a kvcache tier", fn);
    return NULL;
  }
  if (PyCapsule_GetContext(capsule) == &kvc_py_tier_given) {
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, "kvcache: the tier was given to a pool already (a tier belongs to "
                      "one pool; create another on the same store)");
    return NULL;
  }
  return t;
}

/* A new capsule owning `t` (freed with it unless given to a pool); NULL with an exception set, `t` freed. */
static PyObject* kvc_py_tier_capsule(kvc_tier* t) {
  PyObject* c = PyCapsule_New(t, KVC_PY_TIER_CAPSULE, kvc_py_tier_capsule_free);
  if (!c) kvc_tier_destroy(t);
  return c;
}

static PyObject* kvc_py_tier_stats_out(const kvc_tier_stats* s) {
  return Py_BuildValue("(KKKKKKKKK)", (unsigned long long)s->puts, (unsigned long long)s->put_failures,
                       (unsigned long long)s->gets, (unsigned long long)s->hits, (unsigned long long)s->corrupt,
                       (unsigned long long)s->bytes_written, (unsigned long long)s->bytes_read,
                       (unsigned long long)s->queued, (unsigned long long)s->dropped);
}
%}

/* These call Python's API themselves: no automatic release of the GIL around them. */
%feature("nothread") kvc_py_disk_tier_create;
%feature("nothread") kvc_py_tier_stats;
%feature("nothread") kvc_py_tier_set_auth_key;
%feature("nothread") kvc_py_tier_destroy;
%feature("nothread") kvc_py_pool_tier;
%feature("nothread") kvc_py_pool_add_tier;
%feature("nothread") kvc_py_pool_tier_stats;
%feature("nothread") kvc_py_pool_fingerprint;
%rename(kvc_disk_tier_create) kvc_py_disk_tier_create;
%rename(kvc_tier_stats_get) kvc_py_tier_stats;
%rename(kvc_tier_set_auth_key) kvc_py_tier_set_auth_key;
%rename(kvc_tier_destroy) kvc_py_tier_destroy;
%rename(kvc_pool_tier) kvc_py_pool_tier;
%rename(kvc_pool_add_tier) kvc_py_pool_add_tier;
%rename(kvc_pool_tier_stats) kvc_py_pool_tier_stats;
%rename(kvc_pool_fingerprint) kvc_py_pool_fingerprint;

%{
/* An optional authentication key (None: no key) as a buffer; its length is checked by the library. */
static int kvc_py_auth_key_in(PyObject* key, const char* fn, Py_buffer* view) {
  memset(view, 0, sizeof *view);
  if (key == Py_None) return 0;
  return kvc_py_bytes_in(key, fn, "auth_key", view);
}
%}

%inline %{
/* kvc_disk_tier_create(directory, max_bytes, auth_key) -> capsule; auth_key is None or bytes-like. */
PyObject* kvc_py_disk_tier_create(const char* directory, unsigned long long max_bytes, PyObject* auth_key) {
  Py_buffer key;
  if (kvc_py_auth_key_in(auth_key, "DiskTier", &key) < 0) return NULL;
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = directory;
  o.max_bytes = (uint64_t)max_bytes;
  o.auth_key = (const uint8_t*)key.buf;
  o.auth_key_len = (size_t)key.len;
  kvc_tier* t = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_disk_tier_create(&o, &t);
  Py_END_ALLOW_THREADS
  if (key.obj) PyBuffer_Release(&key);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  return kvc_py_tier_capsule(t);
}

/* The counters of a tier not given to a pool: (puts, put_failures, gets, hits, corrupt, bytes_written, bytes_read). */
PyObject* kvc_py_tier_stats(PyObject* tier) {
  kvc_tier* t = kvc_py_tier_arg(tier, "kvc_tier_stats_get");
  if (!t) return NULL;
  kvc_tier_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = (uint32_t)sizeof s;
  kvc_error* err = kvc_tier_stats_get(t, &s);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  return kvc_py_tier_stats_out(&s);
}

/* kvc_tier_set_auth_key(tier, key): a tier Python still owns gets the key (None: none). DiskTier(auth_key=) is the
   public form; this is the raw ABI's. */
PyObject* kvc_py_tier_set_auth_key(PyObject* tier, PyObject* key) {
  kvc_tier* t = kvc_py_tier_arg(tier, "kvc_tier_set_auth_key");
  if (!t) return NULL;
  Py_buffer k;
  if (kvc_py_auth_key_in(key, "kvc_tier_set_auth_key", &k) < 0) return NULL;
  kvc_error* err = kvc_tier_set_auth_key(t, (const uint8_t*)k.buf, (size_t)k.len);
  if (k.obj) PyBuffer_Release(&k);
  if (err) return kvc_py_raise(err), NULL;
  Py_RETURN_NONE;
}

/* kvc_tier_destroy(tier): frees a tier not given to a pool now (its capsule is spent); None is accepted. */
PyObject* kvc_py_tier_destroy(PyObject* tier) {
  if (tier == Py_None) Py_RETURN_NONE;
  kvc_tier* t = kvc_py_tier_arg(tier, "kvc_tier_destroy");
  if (!t) return NULL;
  PyCapsule_SetContext(tier, &kvc_py_tier_given); /* the destructor leaves it alone; the handle is dead */
  kvc_tier_destroy(t);
  Py_RETURN_NONE;
}

/* kvc_pool_tier(pool, index): whether the pool has tier `index` (the tier is the pool's; see kvc_pool_tier_stats). */
PyObject* kvc_py_pool_tier(const kvc_pool* pool, uint32_t index) {
  return PyBool_FromLong(kvc_pool_tier(pool, index) != NULL);
}

/* kvc_pool_add_tier(pool, tier, policy): on success the pool owns the tier (the capsule no longer frees it). */
PyObject* kvc_py_pool_add_tier(kvc_pool* pool, PyObject* tier, int policy) {
  kvc_tier* t = kvc_py_tier_arg(tier, "kvc_pool_add_tier");
  if (!t) return NULL;
  kvc_error* err = kvc_pool_add_tier(pool, t, (kvc_tier_write_policy)policy);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  PyCapsule_SetContext(tier, &kvc_py_tier_given);
  Py_RETURN_NONE;
}

/* The counters of the pool's tier `index` (order of kvc_pool_add_tier); IndexError past the end. */
PyObject* kvc_py_pool_tier_stats(const kvc_pool* pool, uint32_t index) {
  const kvc_tier* t = kvc_pool_tier(pool, index);
  if (!t) {
    unsigned n = 0;
    while (kvc_pool_tier(pool, n)) n++;
    PyErr_Format(PyExc_IndexError, "tier_stats: index is %u but the pool has %u tiers", (unsigned)index, n);
    return NULL;
  }
  kvc_tier_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = (uint32_t)sizeof s;
  kvc_error* err = kvc_tier_stats_get(t, &s);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  return kvc_py_tier_stats_out(&s);
}

/* The pool's model fingerprint (32 bytes). */
PyObject* kvc_py_pool_fingerprint(const kvc_pool* pool) {
  uint8_t fp[KVC_BLOCK_HASH_SIZE];
  kvc_error* err = kvc_pool_fingerprint(pool, fp);
  if (err) {
    kvc_py_raise(err);
    return NULL;
  }
  return PyBytes_FromStringAndSize((const char*)fp, KVC_BLOCK_HASH_SIZE);
}
%}
