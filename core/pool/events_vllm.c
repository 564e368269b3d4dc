/*
 * core/pool/events_vllm.c: kvc_pool_events_pull_vllm, the queued events as
 * the msgpack bytes of vLLM's KVEventBatch (vllm/distributed/kv_events.py,
 * encoded by msgspec.msgpack.Encoder as vLLM's publisher does).
 *
 * msgspec writes a Struct with array_like=True (the batch) as an array of all
 * its fields (a None data_parallel_rank as nil); a tagged Struct
 * (an event) as a map whose first entry is "type": its class name, then its
 * fields in declaration order, those equal to their defaults omitted (every
 * field without a default is written, nil included), with a map16 header when
 * the class could have 16 entries or more. Integers take msgpack's
 * shortest form, floats always 8 bytes. The encoder below is that subset,
 * written once so every binding gets identical bytes (the Python test decodes
 * and re-encodes them with vLLM's classes).
 */
#include <math.h>
#include <string.h>

#include "pool/cbor.h"
#include "pool_internal.h"
#include "tier/tier_internal.h"
#include "tier_worker.h"

/* A writer that counts what it cannot store, so one pass measures and the next writes. */
typedef struct mp_out {
  uint8_t* buf;
  size_t cap, n;
} mp_out;

static void put(mp_out* w, const void* p, size_t len) {
  if (w->n + len <= w->cap) memcpy(w->buf + w->n, p, len);
  w->n += len;
}

static void put_tagged(mp_out* w, uint8_t tag, uint64_t v, int bytes) {
  uint8_t b[9];
  b[0] = tag;
  for (int i = 0; i < bytes; i++) b[1 + i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
  put(w, b, 1 + (size_t)bytes);
}

static void mp_nil(mp_out* w) { put_tagged(w, 0xc0, 0, 0); }

static void mp_uint(mp_out* w, uint64_t v) {
  if (v < 128) put_tagged(w, (uint8_t)v, 0, 0);
  else if (v <= 0xff) put_tagged(w, 0xcc, v, 1);
  else if (v <= 0xffff) put_tagged(w, 0xcd, v, 2);
  else if (v <= 0xffffffffu) put_tagged(w, 0xce, v, 4);
  else put_tagged(w, 0xcf, v, 8);
}

/* A length-prefixed family: fix form below `fix_max` (tag fix | n), else the 8- (when `has8`), 16- or 32-bit one. */
static void mp_head(mp_out* w, uint8_t fix, size_t fix_max, int has8, uint8_t t8, uint8_t t16, uint8_t t32,
                    size_t n) {
  if (n < fix_max) put_tagged(w, (uint8_t)(fix | n), 0, 0);
  else if (has8 && n <= 0xff) put_tagged(w, t8, n, 1);
  else if (n <= 0xffff) put_tagged(w, t16, n, 2);
  else put_tagged(w, t32, n, 4);
}

static void mp_array(mp_out* w, size_t n) { mp_head(w, 0x90, 16, 0, 0, 0xdc, 0xdd, n); }
/* A Struct's map: msgspec picks the header's form by the entries the class can have (its fields and the tag), so
   vLLM's BlockStored (15 fields) always has a map16 header, whatever it omits. */
static void mp_struct_map(mp_out* w, size_t n, size_t class_entries) {
  if (class_entries < 16) put_tagged(w, (uint8_t)(0x80 | n), 0, 0);
  else put_tagged(w, 0xde, n, 2);
}

static void mp_str(mp_out* w, const void* s, size_t len) {
  mp_head(w, 0xa0, 32, 1, 0xd9, 0xda, 0xdb, len);
  put(w, s, len);
}

static void mp_cstr(mp_out* w, const char* s) { mp_str(w, s, strlen(s)); }

static void mp_f64(mp_out* w, double d) {
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  put_tagged(w, 0xcb, bits, 8);
}

/* A block hash: 32 bytes (bin 8), or vLLM's 64-bit form: int.from_bytes(hash, "big") & (2**64 - 1). */
static void mp_hash(mp_out* w, const uint8_t* h, int as_int) {
  if (as_int) {
    uint64_t v = 0;
    for (int i = KVC_BLOCK_HASH_SIZE - 8; i < KVC_BLOCK_HASH_SIZE; i++) v = (v << 8) | h[i];
    mp_uint(w, v);
    return;
  }
  put_tagged(w, 0xc4, KVC_BLOCK_HASH_SIZE, 1);
  put(w, h, KVC_BLOCK_HASH_SIZE);
}

typedef struct queue_view {
  const kvc_pool* p;
  uint32_t head, count;
} queue_view;

static uint32_t slot(const queue_view* q, uint32_t i) { return (q->head + i) % q->p->event_cap; }
static const kvc_pool_event* ev(const queue_view* q, uint32_t i) { return &q->p->events[slot(q, i)]; }
static const kvci_pool_event_more* more(const queue_view* q, uint32_t i) { return &q->p->event_more[slot(q, i)]; }

/* A tier store that failed or was dropped has no vLLM event: no tier holds the block. */
static int has_vllm_form(kvc_pool_event_kind kind) {
  return kind != KVC_POOL_EVENT_TIER_FAILED && kind != KVC_POOL_EVENT_TIER_DROPPED;
}

/* How many events from i form one vLLM event: a chain of STORED blocks, REMOVED blocks of one group, or blocks one
   tier stored (of one group). */
static uint32_t run_length(const queue_view* q, uint32_t i) {
  const kvc_pool_event* a = ev(q, i);
  if (a->kind == KVC_POOL_EVENT_ALL_CLEARED || !has_vllm_form(a->kind)) return 1;
  uint32_t j = i + 1;
  for (; j < q->count; j++) {
    const kvc_pool_event* b = ev(q, j);
    const kvc_pool_event* prev = ev(q, j - 1);
    if (b->kind != a->kind || b->group != a->group) break;
    if (a->kind == KVC_POOL_EVENT_TIER_STORED && b->block_id != a->block_id) break;
    if (a->kind == KVC_POOL_EVENT_BLOCK_STORED &&
        (!more(q, j)->has_parent || more(q, j)->adapter != more(q, i)->adapter ||
         memcmp(b->parent_hash, prev->block_hash, KVC_BLOCK_HASH_SIZE)))
      break;
  }
  return j - i;
}

/* Fields of vLLM 0.34's classes: the map header's form depends on them (mp_struct_map). */
#define STORED_FIELDS 15
#define REMOVED_FIELDS 5

static const char* medium(const kvc_pool* p) { return p->device.device_type == KVC_DEVICE_CPU ? "CPU" : "GPU"; }

/* The map's first entries, common to both block events: the type tag and the hashes of events [i, i + n). */
static void put_head(mp_out* w, const char* type, const queue_view* q, uint32_t i, uint32_t n, int int_hashes) {
  mp_cstr(w, "type");
  mp_cstr(w, type);
  mp_cstr(w, "block_hashes");
  mp_array(w, n);
  for (uint32_t k = 0; k < n; k++) mp_hash(w, ev(q, i + k)->block_hash, int_hashes);
}

static void put_stored(mp_out* w, const queue_view* q, uint32_t i, uint32_t n, int int_hashes) {
  const kvc_pool* p = q->p;
  const kvc_pool_event* first = ev(q, i);
  uint32_t bs = first->num_tokens;
  const kvci_pool_adapter* a = more(q, i)->adapter ? &p->adapters[more(q, i)->adapter - 1] : NULL;
  mp_struct_map(w, 9, 1 + STORED_FIELDS);
  put_head(w, "BlockStored", q, i, n, int_hashes);
  mp_cstr(w, "parent_block_hash");
  if (more(q, i)->has_parent) mp_hash(w, first->parent_hash, int_hashes);
  else mp_nil(w);
  mp_cstr(w, "token_ids");
  mp_array(w, (size_t)n * bs);
  for (uint32_t k = 0; k < n; k++) {
    const int32_t* t = p->event_tokens + (size_t)slot(q, i + k) * p->event_token_stride;
    for (uint32_t x = 0; x < bs; x++) mp_uint(w, (uint32_t)t[x]);
  }
  mp_cstr(w, "block_size");
  mp_uint(w, bs);
  mp_cstr(w, "lora_id");
  if (a && a->id) mp_uint(w, (uint64_t)a->id);
  else mp_nil(w);
  mp_cstr(w, "medium");
  mp_cstr(w, medium(p));
  mp_cstr(w, "lora_name");
  if (a && a->key_len && kvci_utf8_valid(a->key, a->key_len)) mp_str(w, a->key, a->key_len);
  else mp_nil(w);
  mp_cstr(w, "group_idx");
  mp_uint(w, first->group);
}

/* A tier's medium as vLLM names a medium: the tier's name in capitals ("DISK", "REDIS"), or "TIER" for a name
   that is not plain ASCII. */
static void put_tier_medium(mp_out* w, const kvc_pool* p, uint32_t tier) {
  char m[32] = "TIER";
  const char* name = tier < p->num_tiers ? p->tiers[tier]->name : NULL;
  size_t n = name ? strlen(name) : 0;
  int plain = n > 0 && n < sizeof m;
  for (size_t k = 0; plain && k < n; k++) plain = name[k] > 0x20 && name[k] < 0x7f;
  if (plain) {
    for (size_t k = 0; k < n; k++) m[k] = (char)(name[k] >= 'a' && name[k] <= 'z' ? name[k] - 32 : name[k]);
    m[n] = 0;
  }
  mp_cstr(w, m);
}

/* Blocks a tier stored, as vLLM's offloading connector reports a store to its CPU medium: a BlockStored with no
   parent, no token ids and no LoRA, in the tier's medium. */
static void put_tier_stored(mp_out* w, const queue_view* q, uint32_t i, uint32_t n, int int_hashes) {
  const kvc_pool_event* first = ev(q, i);
  mp_struct_map(w, 9, 1 + STORED_FIELDS);
  put_head(w, "BlockStored", q, i, n, int_hashes);
  mp_cstr(w, "parent_block_hash");
  mp_nil(w);
  mp_cstr(w, "token_ids");
  mp_array(w, 0);
  mp_cstr(w, "block_size");
  mp_uint(w, first->num_tokens);
  mp_cstr(w, "lora_id");
  mp_nil(w);
  mp_cstr(w, "medium");
  put_tier_medium(w, q->p, first->block_id);
  mp_cstr(w, "lora_name");
  mp_nil(w);
  mp_cstr(w, "group_idx");
  mp_uint(w, first->group);
}

static void put_removed(mp_out* w, const queue_view* q, uint32_t i, uint32_t n, int int_hashes) {
  mp_struct_map(w, 4, 1 + REMOVED_FIELDS);
  put_head(w, "BlockRemoved", q, i, n, int_hashes);
  mp_cstr(w, "medium");
  mp_cstr(w, medium(q->p));
  mp_cstr(w, "group_idx");
  mp_uint(w, ev(q, i)->group);
}

static void put_batch(mp_out* w, const queue_view* q, const kvc_pool_vllm_batch_options* o) {
  size_t num = 0;
  for (uint32_t i = 0; i < q->count; i += run_length(q, i)) num += (size_t)has_vllm_form(ev(q, i)->kind);
  mp_array(w, 3); /* msgspec writes the batch's trailing None too */
  mp_f64(w, o->ts);
  mp_array(w, num);
  for (uint32_t i = 0, n; i < q->count; i += n) {
    n = run_length(q, i);
    switch (ev(q, i)->kind) {
      case KVC_POOL_EVENT_BLOCK_STORED: put_stored(w, q, i, n, o->int_hashes); break;
      case KVC_POOL_EVENT_BLOCK_REMOVED: put_removed(w, q, i, n, o->int_hashes); break;
      case KVC_POOL_EVENT_TIER_STORED: put_tier_stored(w, q, i, n, o->int_hashes); break;
      case KVC_POOL_EVENT_TIER_FAILED:
      case KVC_POOL_EVENT_TIER_DROPPED: break;
      default:
        mp_struct_map(w, 1, 1);
        mp_cstr(w, "type");
        mp_cstr(w, "AllBlocksCleared");
    }
  }
  if (o->data_parallel_rank >= 0) mp_uint(w, (uint64_t)o->data_parallel_rank);
  else mp_nil(w);
}

static kvc_error* check_options(const char* fn, const kvc_pool_vllm_batch_options* in,
                                kvc_pool_vllm_batch_options* o) {
  *o = (kvc_pool_vllm_batch_options)KVC_POOL_VLLM_BATCH_OPTIONS_INIT;
  if (!in) return NULL;
  if (in->struct_size != sizeof(*in))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->struct_size is %u but this library knows only %zu; "
                    "initialize it with KVC_POOL_VLLM_BATCH_OPTIONS_INIT", fn, in->struct_size, sizeof(*in));
  if (in->int_hashes != 0 && in->int_hashes != 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->int_hashes is %d; it must be 0 (32-byte hashes) or 1 "
                    "(vLLM's 64-bit form)", fn, (int)in->int_hashes);
  if (in->data_parallel_rank < -1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->data_parallel_rank is %lld; it must be >= 0, or -1 for "
                    "none", fn, (long long)in->data_parallel_rank);
  if (!isfinite(in->ts))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->ts is %g; a batch's timestamp must be finite", fn, in->ts);
  *o = *in;
  return NULL;
}

kvc_error* kvc_pool_events_pull_vllm(kvc_pool* pool, const kvc_pool_vllm_batch_options* options, void* buf,
                                     size_t capacity, size_t* size) {
  static const char* FN = "kvc_pool_events_pull_vllm";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  kvc_error* e = kvci_pool_check_pull(FN, pool, size, "size", "the byte count", buf, "buf", capacity,
                                      "a buffer of capacity bytes (or NULL and 0 to learn the size)");
  kvc_pool_vllm_batch_options o;
  if (!e) e = check_options(FN, options, &o);
  if (e) return e;
  kvci_tier_worker_events(pool); /* what the tier worker did since the last pull */
  queue_view q = {pool, pool->event_head, pool->event_count};
  mp_out measure = {NULL, 0, 0};
  put_batch(&measure, &q, &o);
  if (!buf) {
    *size = measure.n;
    return NULL;
  }
  if (measure.n > capacity)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: capacity is %zu but the batch of the %u queued events takes %zu "
                    "bytes; nothing was taken (pass buf NULL to learn the size)", FN, capacity, q.count, measure.n);
  mp_out w = {(uint8_t*)buf, capacity, 0};
  put_batch(&w, &q, &o);
  *size = w.n;
  pool->event_head = 0;
  pool->event_count = 0;
  return NULL;
}
