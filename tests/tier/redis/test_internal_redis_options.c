/*
 * kvc_redis_tier_create's options refused before any connection (no server
 * needed): a cluster mode below the first, empty seeds, more seeds than a
 * tier may know, a key prefix longer than its cap, a pipeline past 65536,
 * NULL outputs; and options that are
 * accepted and then meet a closed port, so the message shows what the tier
 * made of them (a NULL key prefix, AUTH with a user name, a call deadline
 * that would overflow 32 bits and is held at UINT32_MAX ms).
 */
#define _GNU_SOURCE
#include <string.h>

#include "test_util.h"
#include "redis_tier_test.h"
#include "tier/redis/redis_internal.h"
#include "tier/redis/redis_tier_open.h"

/* Port 1 on 127.0.0.1 is closed on every test machine: a connect is refused at once. */
static kvc_redis_tier_options closed_port(char* seeds, size_t cap) {
  int port = 1;
  return rt_options(&port, 1, KVC_REDIS_CLUSTER_AUTO, seeds, cap);
}

static void test_refused_before_connecting(void) {
  char seeds[64];
  kvc_redis_tier_options o = closed_port(seeds, sizeof seeds);
  rt_tier t = {{0}, (void*)0x1};
  kvc_redis_tier_options b = o;
  b.cluster = (kvc_redis_cluster_mode)-1;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "options.cluster is -1"));
  b = o, b.seeds = "";
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "options.seeds is empty"));
  char prefix[258];
  memset(prefix, 'p', 257);
  prefix[257] = 0;
  b = o, b.key_prefix = prefix;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "options.key_prefix is 257 bytes long; at most 256"));
  b = o, b.max_pipeline = 65537;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "options.max_pipeline is 65537; it is 1 to 65536"));
  /* More seeds than a tier may know (KVCI_REDIS_MAX_NODES): refused while the list is read, before a connect. */
  size_t cap = (KVCI_REDIS_MAX_NODES + 1) * 16;
  char* many = malloc(cap);
  REQUIRE(many != NULL);
  size_t at = 0;
  for (int i = 0; i <= KVCI_REDIS_MAX_NODES; i++)
    at += (size_t)snprintf(many + at, cap - at, "%s127.0.0.1:%d", i ? "," : "", 10000 + i);
  b = o, b.seeds = many;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "options.seeds lists more than 4096 nodes"));
  free(many);
  /* Valid options but nowhere to put the tier. */
  CHECK(tt_err_says(kvci_redis_tier_open(&o, NULL, &t.ctx), KVC_ERROR_INVALID_ARGUMENT, "out is NULL"));
  CHECK(tt_err_says(kvci_redis_tier_open(&o, &t.ops, NULL), KVC_ERROR_INVALID_ARGUMENT, "out is NULL"));
  CHECK(tt_err_says(kvc_redis_tier_create(&o, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_redis_tier_create: out is NULL"));
  /* The outputs are untouched by every refusal. */
  CHECK(t.ctx == (void*)0x1 && t.ops.struct_size == 0);
  kvc_redis_tier_options_init(NULL); /* documented as a no-op */
}

static void test_accepted_then_refused_by_the_port(void) {
  char seeds[64];
  kvc_redis_tier_options o = closed_port(seeds, sizeof seeds);
  rt_tier t = {{0}, (void*)0x1};
  kvc_redis_tier_options b = o;
  /* No prefix at all is the empty prefix, not a refusal: the tier is built and fails only at the port. */
  b.key_prefix = NULL;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_IO, "no seed could be used"));
  /* AUTH with a user name is accepted; a deadline of connect + 2 x command past 32 bits is held at UINT32_MAX. */
  b = o, b.username = "alice", b.password = "secret";
  b.connect_timeout_ms = UINT32_MAX, b.command_timeout_ms = UINT32_MAX, b.call_timeout_ms = 0;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_IO, "call_timeout_ms 4294967295)"));
  CHECK(t.ctx == (void*)0x1 && t.ops.struct_size == 0);
}

int main(void) {
  TU_RUN(test_refused_before_connecting);
  TU_RUN(test_accepted_then_refused_by_the_port);
  return tu_finish();
}
