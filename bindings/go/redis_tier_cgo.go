//go:build cgo

package kvcache

// The Redis tier's calls into the C library (kvcache/redis_tier.h, tier.h):
// the options' strings live in C memory for the call (arena).

/*
#include <stdlib.h>
#include <string.h>
#include <kvcache.h>

// kvc_redis_tier_create + kvc_pool_add_tier; the tier is destroyed when the pool refuses it.
static kvc_error* kvcgo_pool_add_redis_tier(kvc_pool* p, const kvc_redis_tier_options* o, int32_t policy) {
  kvc_tier* tier = NULL;
  kvc_error* e = kvc_redis_tier_create(o, &tier);
  if (e) return e;
  e = kvc_pool_add_tier(p, tier, policy);
  if (e) kvc_tier_destroy(tier);
  return e;
}

static uint32_t kvcgo_pool_tier_count(const kvc_pool* p) {
  uint32_t n = 0;
  while (kvc_pool_tier(p, n)) n++;
  return n;
}

*/
import "C"

import "unsafe"

// cstring copies s into the arena, NUL-terminated; "" is NULL when empty means "none".
func (a *arena) cstring(s string, emptyIsNull bool) *C.char {
	if s == "" && emptyIsNull {
		return nil
	}
	b := unsafe.Slice((*byte)(a.alloc(uintptr(len(s)+1))), len(s)+1)
	copy(b, s)
	b[len(s)] = 0
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// bytes copies b into the arena (freed with it); nil stays NULL, an empty slice is a pointer to 0 bytes.
func (a *arena) bytes(b []byte) *C.uint8_t {
	if b == nil {
		return nil
	}
	c := unsafe.Slice((*byte)(a.alloc(uintptr(len(b)))), len(b))
	copy(c, b)
	return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(c)))
}

func cPoolAddRedisTier(p unsafe.Pointer, c *redisTierConfig) error {
	var a arena
	defer a.free()
	return takeError(C.kvcgo_pool_add_redis_tier(pool(p), cRedisOptions(&a, c), C.int32_t(c.write)))
}

// cRedisTierCreate creates a tier the program owns (NewRedisTier).
func cRedisTierCreate(c *redisTierConfig) (unsafe.Pointer, error) {
	var a arena
	defer a.free()
	var out *C.kvc_tier
	if err := takeError(C.kvc_redis_tier_create(cRedisOptions(&a, c), &out)); err != nil {
		return nil, err
	}
	return unsafe.Pointer(out), nil
}

// cRedisOptions fills kvc_redis_tier_options in C memory of a (valid until a is freed).
func cRedisOptions(a *arena, c *redisTierConfig) *C.kvc_redis_tier_options {
	o := (*C.kvc_redis_tier_options)(a.alloc(C.sizeof_kvc_redis_tier_options))
	C.kvc_redis_tier_options_init(o)
	o.cluster = C.kvc_redis_cluster_mode(c.cluster)
	o.seeds = a.cstring(c.seeds, false)
	o.key_prefix = a.cstring(c.prefix, false)
	o.username = a.cstring(c.username, true)
	o.password = a.cstring(c.password, true)
	o.connect_timeout_ms = C.uint32_t(c.connectMs)
	o.command_timeout_ms = C.uint32_t(c.commandMs)
	o.reconnect_interval_ms = C.uint32_t(c.reconnectMs)
	o.ttl_seconds = C.uint32_t(c.ttlSeconds)
	o.max_pipeline = C.uint32_t(c.pipeln)
	o.call_timeout_ms = C.uint32_t(c.callMs)
	o.auth_key = a.bytes(c.authKey)
	o.auth_key_len = C.size_t(len(c.authKey))
	return o
}

func cPoolTierCount(p unsafe.Pointer) int { return int(C.kvcgo_pool_tier_count(pool(p))) }
