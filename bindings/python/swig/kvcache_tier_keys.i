/*
 * kvcache_tier_keys.i: blocks by key in a tier and what a tier needs of a model without a pool (kvcache/tier.h,
 * 'Key-level access', since 0.7), and the Redis tier as a capsule of its own (so that Pool.add_tier takes it like
 * a DiskTier, and a program without a pool uses it by key). %included by kvcache.i after kvcache_redis_tier.i.
 * The public API is kvcache/tier.py (Tier.exists, get_blocks, put_blocks; model_fingerprint) and
 * kvcache/redis_tier.py (RedisTier).
 *
 * Keys cross as one bytes-like object of packed kvc_tier_key structs (72 bytes each: fingerprint, block hash, u32
 * group, u32 reserved, native byte order; tier.py packs them), so a call of many keys converts no Python objects
 * per key. Payloads cross as buffers: get_blocks writes straight into the caller's writable buffers (an engine's
 * own CPU blocks), put_blocks reads the caller's. The GIL is released for the tier's I/O.
 */

%feature("nothread") kvc_py_redis_tier_create;
%feature("nothread") kvc_py_tier_exists;
%feature("nothread") kvc_py_tier_get_blocks;
%feature("nothread") kvc_py_tier_put_blocks;
%feature("nothread") kvc_py_pool_options_fingerprint;
%feature("nothread") kvc_py_pool_options_block_payload;
%rename(kvc_tier_exists) kvc_py_tier_exists;
%rename(kvc_tier_get_blocks) kvc_py_tier_get_blocks;
%rename(kvc_tier_put_blocks) kvc_py_tier_put_blocks;
%rename(kvc_pool_options_fingerprint) kvc_py_pool_options_fingerprint;
%rename(kvc_pool_options_block_payload) kvc_py_pool_options_block_payload;

%{
_Static_assert(sizeof(kvc_tier_key) == 72, "tier.py packs kvc_tier_key as 72 bytes");

/* The keys argument: a bytes-like of packed kvc_tier_key structs; their count, or -1 with an exception set. */
static Py_ssize_t kvc_py_keys_in(PyObject* keys, const char* fn, Py_buffer* view) {
  if (kvc_py_bytes_in(keys, fn, "keys", view) < 0) return -1;
  if (view->len % (Py_ssize_t)sizeof(kvc_tier_key)) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: keys is %zd bytes; it packs kvc_tier_key structs of %zu bytes each", fn,
             view->len, sizeof(kvc_tier_key));
    PyBuffer_Release(view);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    return -1;
  }
  return view->len / (Py_ssize_t)sizeof(kvc_tier_key);
}

/*
 * The payload buffers of a call: `count` buffers of one length (writable for a get), taken from the sequence
 * `seq`. 0 with views[0..count) held and *size set, or -1 with an exception set and none held.
 */
static int kvc_py_payloads_in(PyObject* seq, Py_ssize_t count, int writable, const char* fn, Py_buffer* views,
                              size_t* size) {
  PyObject* fast = PySequence_Fast(seq, "payloads must be a sequence of buffers");
  if (!fast) return -1;
  char msg[240] = "";
  Py_ssize_t held = 0;
  if (PySequence_Fast_GET_SIZE(fast) != count)
    snprintf(msg, sizeof msg, "%s: %zd payload buffers for %zd keys; give one per key", fn,
             PySequence_Fast_GET_SIZE(fast), count);
  for (; !msg[0] && held < count; held++) {
    PyObject* item = PySequence_Fast_GET_ITEM(fast, held);
    int flags = writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS;
    if (PyObject_GetBuffer(item, &views[held], flags) < 0) {
      PyErr_Clear();
      snprintf(msg, sizeof msg, "%s: payloads[%zd] is a %.80s, not a %s buffer", fn, held, Py_TYPE(item)->tp_name,
               writable ? "writable contiguous" : "contiguous");
      break;
    }
    if (views[held].len != views[0].len) {
      snprintf(msg, sizeof msg, "%s: payloads[%zd] is %zd bytes but payloads[0] is %zd; the blocks of one call have "
               "one size", fn, held, views[held].len, views[0].len);
      held++;
      break;
    }
  }
  Py_DECREF(fast);
  if (!msg[0]) {
    *size = count ? (size_t)views[0].len : 0;
    return 0;
  }
  while (held > 0) PyBuffer_Release(&views[--held]);
  kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
  return -1;
}

/* The held buffers and their pointers for the C call; NULL with an exception set. */
static void** kvc_py_payload_pointers(Py_buffer* views, Py_ssize_t count) {
  void** p = (void**)PyMem_Malloc((size_t)(count ? count : 1) * sizeof(void*));
  if (!p) return (void**)PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < count; i++) p[i] = views[i].buf;
  return p;
}

/* kvc_pool_options with Python's hash seed (bytes or None) set in a copy, as kvc_pool_create's form does. */
static int kvc_py_options_seeded(const kvc_pool_options* options, PyObject* hash_seed, const char* fn,
                                 kvc_pool_options* o, Py_buffer* seed) {
  memset(seed, 0, sizeof *seed);
  if (!options) {
    char msg[120];
    snprintf(msg, sizeof msg, "%s: options is None", fn);
    kvc_py_raise_code(KVC_ERROR_INVALID_ARGUMENT, msg);
    return -1;
  }
  *o = *options;
  if (hash_seed == Py_None) return 0;
  if (kvc_py_bytes_in(hash_seed, fn, "hash_seed", seed) < 0) return -1;
  o->hash_seed = seed->buf;
  o->hash_seed_len = (size_t)seed->len;
  return 0;
}
%}

%inline %{
/* kvc_redis_tier_create(...) -> capsule: a Redis tier Python owns, for Pool.add_tier or use by key. */
PyObject* kvc_py_redis_tier_create(const char* seeds, int cluster, const char* key_prefix, const char* username,
                                   const char* password, unsigned int connect_timeout_ms,
                                   unsigned int command_timeout_ms, unsigned int reconnect_interval_ms,
                                   unsigned int ttl_seconds, unsigned int max_pipeline, unsigned int call_timeout_ms,
                                   PyObject* auth_key) {
  Py_buffer key;
  if (kvc_py_auth_key_in(auth_key, "RedisTier", &key) < 0) return NULL;
  kvc_tier* t = NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_py_redis_tier_make(seeds, cluster, key_prefix, username, password, connect_timeout_ms,
                               command_timeout_ms, reconnect_interval_ms, ttl_seconds, max_pipeline, call_timeout_ms,
                               &key, &t);
  Py_END_ALLOW_THREADS
  if (key.obj) PyBuffer_Release(&key);
  if (err) return kvc_py_raise(err), NULL;
  return kvc_py_tier_capsule(t);
}

/* kvc_tier_exists(tier, keys) -> bytes: one 0/1 byte per key. */
PyObject* kvc_py_tier_exists(PyObject* tier, PyObject* keys) {
  kvc_tier* t = kvc_py_tier_arg(tier, "kvc_tier_exists");
  if (!t) return NULL;
  Py_buffer kv;
  Py_ssize_t n = kvc_py_keys_in(keys, "kvc_tier_exists", &kv);
  if (n < 0) return NULL;
  PyObject* found = PyBytes_FromStringAndSize(NULL, n);
  if (!found) {
    PyBuffer_Release(&kv);
    return NULL;
  }
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_tier_exists(t, (const kvc_tier_key*)kv.buf, (size_t)n, (uint8_t*)PyBytes_AS_STRING(found), NULL);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&kv);
  if (err) {
    Py_DECREF(found);
    kvc_py_raise(err);
    return NULL;
  }
  return found;
}

/* kvc_tier_get_blocks(tier, keys, num_layers, buffers) -> bytes: one 0/1 byte per key; payloads into buffers. */
PyObject* kvc_py_tier_get_blocks(PyObject* tier, PyObject* keys, unsigned int num_layers, PyObject* buffers) {
  static const char* FN = "kvc_tier_get_blocks";
  kvc_tier* t = kvc_py_tier_arg(tier, FN);
  if (!t) return NULL;
  Py_buffer kv;
  Py_ssize_t n = kvc_py_keys_in(keys, FN, &kv);
  if (n < 0) return NULL;
  Py_buffer* views = (Py_buffer*)PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
  size_t size = 0;
  void** ptrs = NULL;
  PyObject* found = NULL;
  if (!views) PyErr_NoMemory();
  else if (kvc_py_payloads_in(buffers, n, 1, FN, views, &size) == 0) {
    if ((ptrs = kvc_py_payload_pointers(views, n)) && (found = PyBytes_FromStringAndSize(NULL, n))) {
      kvc_error* err;
      Py_BEGIN_ALLOW_THREADS
      err = kvc_tier_get_blocks(t, (const kvc_tier_key*)kv.buf, (size_t)n, size, num_layers, ptrs,
                                (uint8_t*)PyBytes_AS_STRING(found), NULL);
      Py_END_ALLOW_THREADS
      if (err) {
        Py_CLEAR(found);
        kvc_py_raise(err);
      }
    }
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&views[i]);
  }
  PyMem_Free(ptrs);
  PyMem_Free(views);
  PyBuffer_Release(&kv);
  return found;
}

/* kvc_tier_put_blocks(tier, keys, num_layers, payloads) -> int: how many the store took. */
PyObject* kvc_py_tier_put_blocks(PyObject* tier, PyObject* keys, unsigned int num_layers, PyObject* payloads) {
  static const char* FN = "kvc_tier_put_blocks";
  kvc_tier* t = kvc_py_tier_arg(tier, FN);
  if (!t) return NULL;
  Py_buffer kv;
  Py_ssize_t n = kvc_py_keys_in(keys, FN, &kv);
  if (n < 0) return NULL;
  Py_buffer* views = (Py_buffer*)PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
  size_t size = 0, stored = 0;
  void** ptrs = NULL;
  PyObject* out = NULL;
  if (!views) PyErr_NoMemory();
  else if (kvc_py_payloads_in(payloads, n, 0, FN, views, &size) == 0) {
    if ((ptrs = kvc_py_payload_pointers(views, n))) {
      kvc_error* err;
      Py_BEGIN_ALLOW_THREADS
      err = kvc_tier_put_blocks(t, (const kvc_tier_key*)kv.buf, (size_t)n, size, num_layers,
                                (const void* const*)ptrs, &stored);
      Py_END_ALLOW_THREADS
      if (err) kvc_py_raise(err);
      else out = PyLong_FromSize_t(stored);
    }
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&views[i]);
  }
  PyMem_Free(ptrs);
  PyMem_Free(views);
  PyBuffer_Release(&kv);
  return out;
}

/* kvc_pool_options_fingerprint(options, hash_seed) -> 32 bytes. */
PyObject* kvc_py_pool_options_fingerprint(const kvc_pool_options* options, PyObject* hash_seed) {
  kvc_pool_options o;
  Py_buffer seed;
  if (kvc_py_options_seeded(options, hash_seed, "kvc_pool_options_fingerprint", &o, &seed) < 0) return NULL;
  uint8_t fp[KVC_BLOCK_HASH_SIZE];
  kvc_error* err = kvc_pool_options_fingerprint(&o, fp);
  if (seed.obj) PyBuffer_Release(&seed);
  if (err) return kvc_py_raise(err), NULL;
  return PyBytes_FromStringAndSize((const char*)fp, KVC_BLOCK_HASH_SIZE);
}

/* kvc_pool_options_block_payload(options, hash_seed, group) -> (payload_size, num_layers). */
PyObject* kvc_py_pool_options_block_payload(const kvc_pool_options* options, PyObject* hash_seed, uint32_t group) {
  kvc_pool_options o;
  Py_buffer seed;
  if (kvc_py_options_seeded(options, hash_seed, "kvc_pool_options_block_payload", &o, &seed) < 0) return NULL;
  size_t size = 0;
  uint32_t layers = 0;
  kvc_error* err = kvc_pool_options_block_payload(&o, group, &size, &layers);
  if (seed.obj) PyBuffer_Release(&seed);
  if (err) return kvc_py_raise(err), NULL;
  return Py_BuildValue("(nI)", (Py_ssize_t)size, (unsigned int)layers);
}
%}
