/*
 * core/tier/redis/redis_call.c: one put_many or get_many. The keys are
 * routed by slot and grouped by node (each node's keys keep their order and
 * go out as one pipeline); keys answered with MOVED go again once after the
 * slot map was corrected, keys answered with ASK go once to the node named,
 * after ASKING. What is left is a miss. The nodes are served one after the
 * other, so N failing nodes cost N timeouts, once per reconnect interval,
 * and never more than the call's deadline: every wait of the call, the
 * slot-map refresh's included, ends when call_timeout_ms from the start of
 * the call have passed.
 */
#include <string.h>

#include "redis_internal.h"

void kvci_redis_call_begin(kvci_redis_tier* t) {
  t->deadline_ms = kvci_redis_now_ms() + t->call_timeout_ms;
  t->learned = 0;
}

kvci_redis_limit kvci_redis_command_limit(const kvci_redis_tier* t) {
  return (kvci_redis_limit){t->deadline_ms, t->command_timeout_ms};
}

kvci_redis_limit kvci_redis_connect_limit(const kvci_redis_tier* t) {
  return (kvci_redis_limit){t->deadline_ms, t->connect_timeout_ms};
}

/* Every key in state `want` goes to its node, node by node; the pipeline gives each one another state. */
static void run_state(kvci_redis_tier* t, uint8_t want, int asking) {
  size_t n = t->call.count;
  for (size_t first = 0; first < n; first++) {
    if (t->state[first] != want) continue;
    int32_t node = t->node_of[first];
    size_t m = 0;
    for (size_t i = first; i < n; i++)
      if (t->state[i] == want && t->node_of[i] == node) t->order[m++] = (uint32_t)i;
    kvci_redis_pipeline(t, (size_t)node, t->order, m, asking);
  }
}

/* Routes the keys in state PENDING by the slot map; a slot nobody holds is a miss and asks for a new map. */
static void route(kvci_redis_tier* t) {
  for (size_t i = 0; i < t->call.count; i++) {
    if (t->state[i] != KVCI_KEY_PENDING) continue;
    uint16_t slot = kvci_redis_key_slot(t->keys + i * t->key_stride, t->key_lens[i]);
    t->node_of[i] = t->slots[slot];
    if (t->node_of[i] < 0) {
      t->state[i] = KVCI_KEY_MISS;
      t->refresh_wanted = 1;
    }
  }
}

void kvci_redis_execute(kvci_redis_tier* t, const kvc_tier_key* keys) {
  kvci_redis_call_begin(t);
  size_t n = t->call.count;
  for (size_t i = 0; i < n; i++) {
    kvci_redis_format_key(t, &keys[i], t->keys + i * t->key_stride, &t->key_lens[i]);
    t->state[i] = KVCI_KEY_PENDING;
  }
  if (t->cluster && t->refresh_wanted && kvci_redis_now_ms() >= t->next_refresh_ms) {
    char why[200];
    (void)kvci_redis_refresh_slots(t, why, sizeof why); /* on failure the old map stays: its live nodes still serve */
  }
  route(t);
  run_state(t, KVCI_KEY_PENDING, 0);
  /* Once more for the redirected keys: ASK first, so that a key moved now and then asked stays a miss. */
  run_state(t, KVCI_KEY_ASK, 1);
  for (size_t i = 0; i < n; i++)
    if (t->state[i] == KVCI_KEY_MOVED) t->state[i] = KVCI_KEY_PENDING;
  route(t);
  run_state(t, KVCI_KEY_PENDING, 0);
  for (size_t i = 0; i < n; i++)
    if (t->state[i] != KVCI_KEY_DONE) t->state[i] = KVCI_KEY_MISS;
}
