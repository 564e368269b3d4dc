/*
 * core/tier/redis/redis_pipeline.c: a run of SETs, GETs or EXISTS on one node,
 * pipelined: up to max_pipeline commands go out in one gathered write, then
 * their replies are read in order, values straight into the pool's
 * buffers. Windows bound what the server holds for us (a window of GETs of
 * 2 MiB blocks is max_pipeline x 2 MiB of replies in its output buffer).
 * When the connection fails, the keys not answered yet are misses and the
 * node is left alone for a while: the stream cannot be resynchronised. So is
 * a node that sends more than was asked (bytes left after a window's
 * replies). When the call's deadline has passed between windows, the rest
 * are misses and the node, whose stream is in step, is not blamed.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "redis_internal.h"

static void fail_rest(kvci_redis_tier* t, size_t node, const uint32_t* order, size_t from, size_t n) {
  for (size_t i = from; i < n; i++) t->state[order[i]] = KVCI_KEY_MISS;
  kvci_redis_node_failed(t, node);
}

static void queue(kvci_redis_tier* t, uint32_t k, int asking, const char* ttl) {
  kvci_resp_out* o = &t->out;
  const char* key = t->keys + (size_t)k * t->key_stride;
  if (asking) {
    kvci_resp_cmd(o, 1);
    kvci_resp_arg_str(o, "ASKING");
  }
  if (t->call.put) {
    kvci_resp_cmd(o, ttl ? 5 : 3);
    kvci_resp_arg_str(o, "SET");
    kvci_resp_arg(o, key, t->key_lens[k]);
    kvci_resp_arg_ref(o, t->call.values[k], t->call.value_sizes[k]);
    if (ttl) {
      kvci_resp_arg_str(o, "EX");
      kvci_resp_arg_str(o, ttl);
    }
  } else {
    kvci_resp_cmd(o, 2);
    kvci_resp_arg_str(o, t->call.exists ? "EXISTS" : "GET");
    kvci_resp_arg(o, key, t->key_lens[k]);
  }
}

/* Reads the replies of key k; 0, or -1 when the connection failed. */
static int read_replies(kvci_redis_tier* t, kvci_redis_conn* c, uint32_t k, int asking, const kvci_redis_limit* lim) {
  char err[KVCI_REDIS_ERROR_BYTES];
  if (asking && kvci_resp_read_flat(c, NULL, 0, NULL, err, sizeof err, lim) < 0) return -1;
  size_t size = 0;
  void* dst = t->call.put || t->call.exists ? NULL : t->call.dst[k];
  int kind = kvci_resp_read_flat(c, dst, t->call.capacity, &size, err, sizeof err, lim);
  if (kind < 0) return -1;
  if (kind == KVCI_RESP_ERROR) {
    /* MOVED and ASK are followed once; any other error (OOM, CLUSTERDOWN, LOADING) is a miss. */
    if (asking || !kvci_redis_redirect(t, k, err)) t->state[k] = KVCI_KEY_MISS;
    return 0;
  }
  /* An empty value is a miss: sizes[i] == 0 means a miss to the pool, and a framed value is never empty. */
  int done = t->call.put      ? kind == KVCI_RESP_STATUS
             : t->call.exists ? kind == KVCI_RESP_INTEGER && size == 1
                              : kind == KVCI_RESP_VALUE && size > 0;
  t->state[k] = done ? KVCI_KEY_DONE : KVCI_KEY_MISS;
  if (done && !t->call.put && !t->call.exists) t->call.sizes[k] = size;
  return 0;
}

void kvci_redis_pipeline(kvci_redis_tier* t, size_t node, const uint32_t* order, size_t n, int asking) {
  if (kvci_redis_node_ready(t, node) != 0) {
    for (size_t i = 0; i < n; i++) t->state[order[i]] = KVCI_KEY_MISS;
    return;
  }
  kvci_redis_conn* c = &t->nodes[node]->conn;
  char ttl[16];
  if (t->ttl_seconds) snprintf(ttl, sizeof ttl, "%u", t->ttl_seconds);
  for (size_t w = 0; w < n; w += t->max_pipeline) {
    size_t end = n - w > t->max_pipeline ? w + t->max_pipeline : n;
    kvci_redis_limit lim = kvci_redis_command_limit(t);
    if (kvci_redis_now_ms() >= lim.deadline_ms) {
      for (size_t i = w; i < n; i++) t->state[order[i]] = KVCI_KEY_MISS;
      return;
    }
    kvci_resp_out_reset(&t->out);
    for (size_t i = w; i < end; i++) queue(t, order[i], asking, t->ttl_seconds ? ttl : NULL);
    if (kvci_resp_out_send(&t->out, c, &lim) != 0) {
      fail_rest(t, node, order, w, n);
      return;
    }
    for (size_t i = w; i < end; i++)
      if (read_replies(t, c, order[i], asking, &lim) != 0) {
        fail_rest(t, node, order, i, n);
        return;
      }
    if (c->pos < c->len) { /* replies nobody asked for: the next command's answer would be one of them */
      snprintf(c->error, sizeof c->error, "%zu bytes after the replies of a pipeline", c->len - c->pos);
      fail_rest(t, node, order, end, n);
      return;
    }
  }
}
