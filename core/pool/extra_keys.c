/*
 * core/pool/extra_keys.c: a sequence's extra keys (extra_keys.h). The
 * encoding is docs/block-hash.md's version 2: each entry is a tag byte, the
 * key's length as le32 and the key, so no two different key lists give the
 * same bytes and an adapter key never reads as an item's hash. A
 * KVC_POOL_HASH_VLLM_SHA256_CBOR pool's blocks take vLLM's extra-keys tuple
 * in CBOR instead (vllm_block), built from the same stored keys plus the
 * LoRA path and the cache salt.
 */
#include "extra_keys.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pool/cbor.h"

#define TAG_ADAPTER 0x01
#define TAG_MM_ITEM 0x02
#define ENTRY_HEAD 5 /* tag byte + le32(length) */
#define MAX_TOKEN (UINT64_C(1) << 40) /* a sequence holds at most 2^40 tokens */

typedef struct extra_item {
  uint64_t offset, end; /* tokens [offset, end) */
  size_t entry_at;      /* its encoded entry in the key bytes */
  uint32_t entry_len;
} extra_item;

struct kvci_pool_extra {
  size_t size;         /* bytes of the allocation */
  uint32_t adapter_len; /* of the adapter entry (its bytes open the key area); 0 = no adapter */
  size_t num_items;
  size_t keys_at;      /* the encoded entries, adapter first */
  size_t scratch_at;   /* room for every entry: one block's extra bytes at most */
  int vllm;            /* KVC_POOL_HASH_VLLM_SHA256_CBOR: blocks get vllm_block's bytes */
  size_t path_at, path_len, salt_at, salt_len; /* vllm: the LoRA path and the cache salt */
  extra_item items[];
};

static uint8_t* bytes_at(kvci_pool_extra* x, size_t at) { return (uint8_t*)x + at; }

static size_t put_entry(uint8_t* p, uint8_t tag, const void* key, size_t len) {
  p[0] = tag;
  for (int i = 0; i < 4; i++) p[1 + i] = (uint8_t)(len >> (8 * i));
  memcpy(p + ENTRY_HEAD, key, len);
  return ENTRY_HEAD + len;
}

static kvc_error* check_items(const char* fn, const kvc_pool_mm_item* items, size_t n) {
  if (n > KVC_POOL_MM_ITEMS_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->num_mm_items is %zu; at most %d items (KVC_POOL_MM_ITEMS_MAX)",
                    fn, n, KVC_POOL_MM_ITEMS_MAX);
  if (!items && n)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->mm_items is NULL but num_mm_items is %zu", fn, n);
  for (size_t i = 0; i < n; i++) {
    const kvc_pool_mm_item* it = &items[i];
    if (!it->hash || it->hash_len == 0 || it->hash_len > KVC_POOL_EXTRA_KEY_MAX)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->mm_items[%zu].hash_len is %zu%s; an item's hash is 1 "
                      "to %d bytes (KVC_POOL_EXTRA_KEY_MAX) at a non-NULL hash", fn, i, it->hash_len,
                      it->hash ? "" : " at a NULL hash", KVC_POOL_EXTRA_KEY_MAX);
    if (it->length == 0)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->mm_items[%zu].length is 0; an item occupies >= 1 token",
                      fn, i);
    if (it->offset >= MAX_TOKEN || it->length > MAX_TOKEN - it->offset)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->mm_items[%zu] covers tokens [%" PRIu64 ", %" PRIu64
                      " + %" PRIu64 "); a sequence holds at most 2^40 tokens", fn, i, it->offset, it->offset,
                      it->length);
    if (i && it->offset < items[i - 1].offset + items[i - 1].length)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->mm_items[%zu].offset is %" PRIu64 " but mm_items[%zu] "
                      "covers [%" PRIu64 ", %" PRIu64 "); items must be sorted by offset and must not overlap", fn, i,
                      it->offset, i - 1, items[i - 1].offset, items[i - 1].offset + items[i - 1].length);
  }
  return NULL;
}

static kvc_error* check_key(const char* fn, const char* field, const void* key, size_t len) {
  if (!key && len)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->%s is NULL but %s_len is %zu", fn, field, field, len);
  if (len > KVC_POOL_EXTRA_KEY_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->%s_len is %zu; at most %d bytes "
                    "(KVC_POOL_EXTRA_KEY_MAX)", fn, field, len, KVC_POOL_EXTRA_KEY_MAX);
  return NULL;
}

/* vLLM's keys are Python str: each must be UTF-8 text (CBOR text strings). */
static kvc_error* check_vllm_text(const char* fn, const kvc_pool_sequence_options* o) {
  static const char* RULE = "is not UTF-8; a KVC_POOL_HASH_VLLM_SHA256_CBOR pool hashes it as vLLM's str";
  if (!kvci_utf8_valid(o->adapter_key, o->adapter_key_len))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->adapter_key %s", fn, RULE);
  if (!kvci_utf8_valid(o->adapter_path, o->adapter_path_len))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->adapter_path %s", fn, RULE);
  if (!kvci_utf8_valid(o->salt, o->salt_len))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->salt (the cache salt) %s", fn, RULE);
  for (size_t i = 0; i < o->num_mm_items; i++)
    if (!kvci_utf8_valid(o->mm_items[i].hash, o->mm_items[i].hash_len))
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->mm_items[%zu].hash (vLLM's item identifier) %s", fn,
                      i, RULE);
  if (o->adapter_path_len && !o->adapter_key_len)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->adapter_path_len is %zu but adapter_key is empty; vLLM "
                    "hashes a LoRA path only with its name", fn, o->adapter_path_len);
  return NULL;
}

kvc_error* kvci_pool_extra_read(const char* fn, const kvc_pool_sequence_options* o, int vllm, kvci_pool_extra** out) {
  kvc_error* e = check_key(fn, "adapter_key", o->adapter_key, o->adapter_key_len);
  if (!e) e = check_key(fn, "adapter_path", o->adapter_path, o->adapter_path_len);
  if (!e && o->adapter_path_len && !vllm)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->adapter_path_len is %zu but the pool's hash_mode is "
                 "KVC_POOL_HASH_KVCACHE, whose hash has no adapter path; put the path in adapter_key", fn,
                 o->adapter_path_len);
  if (!e && o->adapter_id < 0)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->adapter_id is %lld; it is >= 0 (0 = none)", fn,
                 (long long)o->adapter_id);
  if (!e) e = check_items(fn, o->mm_items, o->num_mm_items);
  if (!e && vllm) e = check_vllm_text(fn, o);
  if (e) return e;
  size_t salt_len = vllm ? o->salt_len : 0; /* a kvcache pool hashes the salt into the root */
  if (!o->adapter_key_len && !o->num_mm_items && !salt_len) {
    *out = NULL;
    return NULL;
  }
  size_t keys_len = o->adapter_key_len ? ENTRY_HEAD + o->adapter_key_len : 0;
  for (size_t i = 0; i < o->num_mm_items; i++) keys_len += ENTRY_HEAD + o->mm_items[i].hash_len;
  size_t keys_at = sizeof(kvci_pool_extra) + o->num_mm_items * sizeof(extra_item);
  size_t raw = o->adapter_path_len + salt_len;
  /* Scratch: version 2's entries, or vLLM's tuple: the same keys with at most 32 bytes of CBOR around each. */
  size_t scratch = keys_len + raw + (vllm ? 96 + 32 * o->num_mm_items : 0);
  size_t size = keys_at + keys_len + raw + scratch;
  kvci_pool_extra* x = (kvci_pool_extra*)malloc(size);
  if (!x) return kvci_err_oom();
  x->size = size;
  x->num_items = o->num_mm_items;
  x->keys_at = keys_at;
  x->vllm = vllm;
  x->path_at = keys_at + keys_len;
  x->path_len = o->adapter_path_len;
  x->salt_at = x->path_at + x->path_len;
  x->salt_len = salt_len;
  if (x->path_len) memcpy(bytes_at(x, x->path_at), o->adapter_path, x->path_len);
  if (x->salt_len) memcpy(bytes_at(x, x->salt_at), o->salt, x->salt_len);
  x->scratch_at = x->salt_at + x->salt_len;
  uint8_t* p = bytes_at(x, keys_at);
  x->adapter_len = o->adapter_key_len ? (uint32_t)put_entry(p, TAG_ADAPTER, o->adapter_key, o->adapter_key_len) : 0;
  size_t at = x->adapter_len;
  for (size_t i = 0; i < o->num_mm_items; i++) {
    const kvc_pool_mm_item* it = &o->mm_items[i];
    x->items[i] = (extra_item){it->offset, it->offset + it->length, at, (uint32_t)(ENTRY_HEAD + it->hash_len)};
    at += put_entry(p + at, TAG_MM_ITEM, it->hash, it->hash_len);
  }
  *out = x;
  return NULL;
}

kvci_pool_extra* kvci_pool_extra_copy(const kvci_pool_extra* x, int* oom) {
  *oom = 0;
  if (!x) return NULL;
  kvci_pool_extra* y = (kvci_pool_extra*)malloc(x->size);
  if (!y) {
    *oom = 1;
    return NULL;
  }
  memcpy(y, x, x->size); /* offsets, not pointers: the copy stands alone */
  return y;
}

void kvci_pool_extra_free(kvci_pool_extra* x) { free(x); }

/* The first item ending after `start` (items are sorted and disjoint, so their ends are sorted too). */
static size_t first_ending_after(const kvci_pool_extra* x, uint64_t start) {
  size_t lo = 0, hi = x->num_items;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (x->items[mid].end <= start) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static size_t put_text(uint8_t* out, const char* s) { return kvci_cbor_text(out, s, strlen(s)); }

/* vLLM's generate_block_hash_extra_keys for the block [start, end), as CBOR: the LoRA key, the overlapping
   items' ("mm", identifier, offset relative to the block), the cache salt on the first block; null when none. */
static const uint8_t* vllm_block(kvci_pool_extra* x, uint64_t start, uint64_t end, uint32_t* len) {
  uint8_t* keys = bytes_at(x, x->keys_at);
  uint8_t* out = bytes_at(x, x->scratch_at);
  size_t first = first_ending_after(x, start), last = first;
  while (last < x->num_items && x->items[last].offset < end) last++;
  size_t count = (x->adapter_len ? 1 : 0) + (last - first) + (start == 0 && x->salt_len ? 1 : 0);
  if (!count) return NULL; /* None: kvci_vllm_block_hash writes the null */
  size_t n = kvci_cbor_head(out, KVCI_CBOR_ARRAY, count);
  if (x->adapter_len) {
    n += kvci_cbor_head(out + n, KVCI_CBOR_ARRAY, 3);
    n += put_text(out + n, "lora");
    n += kvci_cbor_text(out + n, keys + ENTRY_HEAD, x->adapter_len - ENTRY_HEAD);
    n += kvci_cbor_text(out + n, bytes_at(x, x->path_at), x->path_len);
  }
  for (size_t i = first; i < last; i++) {
    const extra_item* it = &x->items[i];
    n += kvci_cbor_head(out + n, KVCI_CBOR_ARRAY, 3);
    n += put_text(out + n, "mm");
    n += kvci_cbor_text(out + n, keys + it->entry_at + ENTRY_HEAD, it->entry_len - ENTRY_HEAD);
    n += kvci_cbor_int(out + n, (int64_t)it->offset - (int64_t)start);
  }
  if (start == 0 && x->salt_len) {
    n += kvci_cbor_head(out + n, KVCI_CBOR_ARRAY, 2);
    n += put_text(out + n, "cache_salt");
    n += kvci_cbor_text(out + n, bytes_at(x, x->salt_at), x->salt_len);
  }
  *len = (uint32_t)n;
  return out;
}

const uint8_t* kvci_pool_extra_block(kvci_pool_extra* x, uint64_t start, uint64_t end, uint32_t* len) {
  *len = 0;
  if (!x) return NULL;
  if (x->vllm) return vllm_block(x, start, end, len);
  uint8_t* keys = bytes_at(x, x->keys_at);
  uint8_t* out = bytes_at(x, x->scratch_at);
  size_t n = x->adapter_len;
  memcpy(out, keys, n);
  for (size_t i = first_ending_after(x, start); i < x->num_items && x->items[i].offset < end; i++) {
    memcpy(out + n, keys + x->items[i].entry_at, x->items[i].entry_len);
    n += x->items[i].entry_len;
  }
  *len = (uint32_t)n;
  return n ? out : NULL;
}
