/*
 * core/tier/redis/redis_cluster.c: the nodes of a tier and, in a cluster,
 * which node holds which slot. The map comes from CLUSTER SLOTS (it works on
 * every Redis and Valkey from 3.0; CLUSTER SHARDS only from 7.0), is read at
 * creation and again, at most once per reconnect interval, after a MOVED, a
 * node failure or a slot nobody was known to hold. A failed node is closed
 * and left alone for reconnect_interval_ms, so a dead node costs one timeout
 * per interval, not one per call. What servers say cannot grow the node
 * table without bound: KVCI_REDIS_MAX_NODES in all, KVCI_REDIS_LEARN_PER_CALL
 * new ones per call from redirects, host names of at most 253 bytes.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_internal.h"

int32_t kvci_redis_node_find(kvci_redis_tier* t, const char* host, uint16_t port, int may_add) {
  for (size_t i = 0; i < t->nnodes; i++)
    if (t->nodes[i]->port == port && strcmp(t->nodes[i]->host, host) == 0) return (int32_t)i;
  if (!may_add || t->nnodes >= KVCI_REDIS_MAX_NODES || strlen(host) > KVCI_REDIS_HOST_MAX) return -1;
  if (t->nnodes == t->nodes_cap) {
    size_t cap = t->nodes_cap ? 2 * t->nodes_cap : 8;
    kvci_redis_node** n = realloc(t->nodes, cap * sizeof *n);
    if (!n) return -1;
    t->nodes = n;
    t->nodes_cap = cap;
  }
  kvci_redis_node* node = calloc(1, sizeof *node);
  if (!node) return -1;
  snprintf(node->host, sizeof node->host, "%s", host);
  node->port = port;
  kvci_redis_conn_init(&node->conn);
  t->nodes[t->nnodes] = node;
  return (int32_t)t->nnodes++;
}

void kvci_redis_node_failed(kvci_redis_tier* t, size_t node) {
  kvci_redis_node* n = t->nodes[node];
  kvci_redis_conn_free(&n->conn); /* its read buffer too: a table of many dead nodes holds no buffers */
  n->retry_after_ms = kvci_redis_now_ms() + t->reconnect_interval_ms;
  t->refresh_wanted = 1;
}

/* AUTH [username] password; 0 or -1 with the server's answer in the connection's error. */
static int authenticate(kvci_redis_tier* t, kvci_redis_conn* c) {
  kvci_resp_out_reset(&t->out);
  kvci_resp_cmd(&t->out, t->username ? 3 : 2);
  kvci_resp_arg_str(&t->out, "AUTH");
  if (t->username) kvci_resp_arg_str(&t->out, t->username);
  kvci_resp_arg_str(&t->out, t->password);
  kvci_redis_limit lim = kvci_redis_command_limit(t);
  if (kvci_resp_out_send(&t->out, c, &lim) != 0) return -1;
  char err[120];
  int kind = kvci_resp_read_flat(c, NULL, 0, NULL, err, sizeof err, &lim);
  if (kind == KVCI_RESP_STATUS) return 0;
  if (kind == KVCI_RESP_ERROR) {
    snprintf(c->error, sizeof c->error, "AUTH refused: %s", err);
    kvci_redis_conn_close(c);
  }
  return -1;
}

int kvci_redis_node_ready(kvci_redis_tier* t, size_t node) {
  kvci_redis_node* n = t->nodes[node];
  uint64_t now = kvci_redis_now_ms();
  if (now >= t->deadline_ms) {
    snprintf(n->conn.error, sizeof n->conn.error, "the call's deadline (call_timeout_ms %u) passed",
             t->call_timeout_ms);
    return -1;
  }
  /* Bytes before any command was sent (or a closed stream) would be read as the answer to the next one. */
  if (kvci_redis_conn_unrequested(&n->conn)) kvci_redis_conn_close(&n->conn);
  if (n->conn.fd >= 0) return 0;
  if (now < n->retry_after_ms) return -1;
  kvci_redis_limit lim = kvci_redis_connect_limit(t);
  if (kvci_redis_conn_open(&n->conn, n->host, n->port, &lim) == 0 &&
      (!t->password || authenticate(t, &n->conn) == 0)) {
    n->retry_after_ms = 0;
    return 0;
  }
  char why[sizeof n->conn.error];
  memcpy(why, n->conn.error, sizeof why);
  kvci_redis_node_failed(t, node);
  memcpy(n->conn.error, why, sizeof why);
  return -1;
}

/* One entry of CLUSTER SLOTS: [start, end, [host, port, id, ...], replicas...]; the master is the first. */
static int apply_range(kvci_redis_tier* t, const kvci_resp_reply* e, const char* asked_host, int32_t* map) {
  if (e->type != '*' || e->count < 3 || e->items[0].type != ':' || e->items[1].type != ':') return -1;
  const kvci_resp_reply* m = &e->items[2];
  if (m->type != '*' || m->count < 2 || m->items[0].type != '$' || m->items[1].type != ':') return -1;
  int64_t lo = e->items[0].integer, hi = e->items[1].integer, port = m->items[1].integer;
  if (lo < 0 || hi >= KVCI_REDIS_SLOTS || lo > hi || port <= 0 || port > 65535) return -1;
  /* An empty or "?" endpoint means "the address you reached me on". */
  const char* host = m->items[0].str;
  if (strlen(host) != m->items[0].len) return -1; /* a NUL inside would name another host */
  if (host[0] == 0 || strcmp(host, "?") == 0) host = asked_host;
  int32_t idx = kvci_redis_node_find(t, host, (uint16_t)port, 1);
  if (idx < 0) return -1;
  for (int64_t s = lo; s <= hi; s++) map[s] = idx;
  return 0;
}

/* After a new slot map: forgets the nodes that are neither seeds nor named by the map (redirect targets, nodes of
 * older maps), so that what servers once said does not fill the node table for good. */
static void forget_unmapped(kvci_redis_tier* t) {
  int32_t* remap = malloc(t->nnodes * sizeof *remap);
  if (!remap) return; /* they stay: the table is bounded anyway */
  for (size_t i = 0; i < t->nnodes; i++) remap[i] = i < t->nseeds ? 0 : -1;
  for (size_t s = 0; s < KVCI_REDIS_SLOTS; s++)
    if (t->slots[s] >= 0) remap[t->slots[s]] = 0;
  size_t kept = 0;
  for (size_t i = 0; i < t->nnodes; i++) {
    if (remap[i] < 0) {
      kvci_redis_conn_free(&t->nodes[i]->conn);
      free(t->nodes[i]);
      continue;
    }
    remap[i] = (int32_t)kept;
    t->nodes[kept++] = t->nodes[i];
  }
  for (size_t s = 0; s < KVCI_REDIS_SLOTS; s++)
    if (t->slots[s] >= 0) t->slots[s] = remap[t->slots[s]];
  t->nnodes = kept;
  free(remap);
}

/* Asks one node; 0 with the map applied, 1 when the node is no cluster, -1 otherwise (why says). The node table
 * may be compacted then: indices of nodes taken before do not hold after a success. */
static int ask_slots(kvci_redis_tier* t, size_t node, char* why, size_t whycap) {
  if (kvci_redis_node_ready(t, node) != 0) {
    snprintf(why, whycap, "%s:%u: %s", t->nodes[node]->host, t->nodes[node]->port, t->nodes[node]->conn.error);
    return -1;
  }
  kvci_redis_conn* c = &t->nodes[node]->conn;
  kvci_resp_out_reset(&t->out);
  kvci_resp_cmd(&t->out, 2);
  kvci_resp_arg_str(&t->out, "CLUSTER");
  kvci_resp_arg_str(&t->out, "SLOTS");
  kvci_resp_reply r;
  kvci_redis_limit lim = kvci_redis_command_limit(t);
  if (kvci_resp_out_send(&t->out, c, &lim) != 0 ||
      kvci_resp_read_reply(c, &r, KVCI_REDIS_SLOTS_REPLY_BYTES, KVCI_REDIS_SLOTS_REPLY_ELEMENTS, &lim) != 0) {
    snprintf(why, whycap, "%s:%u: %s", t->nodes[node]->host, t->nodes[node]->port, c->error);
    kvci_redis_node_failed(t, node);
    return -1;
  }
  int result = 0;
  if (r.type == '-') {
    snprintf(why, whycap, "%s:%u: CLUSTER SLOTS: %s", t->nodes[node]->host, t->nodes[node]->port, r.str);
    result = strstr(r.str, "cluster support disabled") ? 1 : -1;
  } else if (r.type != '*' || r.count == 0) {
    snprintf(why, whycap, "%s:%u: CLUSTER SLOTS gave no slots (is the cluster created?)", t->nodes[node]->host,
             t->nodes[node]->port);
    result = -1;
  } else {
    int32_t* map = malloc(sizeof t->slots);
    char host[sizeof t->nodes[0]->host];
    snprintf(host, sizeof host, "%s", t->nodes[node]->host);
    if (!map) result = -1;
    for (size_t s = 0; map && s < KVCI_REDIS_SLOTS; s++) map[s] = -1;
    for (size_t i = 0; map && i < r.count && result == 0; i++) result = apply_range(t, &r.items[i], host, map);
    if (result == 0) {
      memcpy(t->slots, map, sizeof t->slots);
      forget_unmapped(t);
    } else
      snprintf(why, whycap, "%s:%u: CLUSTER SLOTS reply not understood", host, t->nodes[node]->port);
    free(map);
  }
  kvci_resp_reply_free(&r);
  return result;
}

int kvci_redis_refresh_slots(kvci_redis_tier* t, char* why, size_t whycap) {
  t->next_refresh_ms = kvci_redis_now_ms() + t->reconnect_interval_ms;
  snprintf(why, whycap, "no node to ask");
  /* Connected nodes first: a refresh should not wait on a dead one while a live one can answer. */
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < t->nnodes; i++) {
      if ((t->nodes[i]->conn.fd >= 0) != (pass == 0)) continue;
      if (ask_slots(t, i, why, whycap) == 0) {
        t->refresh_wanted = 0;
        return 0;
      }
    }
  return -1;
}

/* Decides standalone or cluster at creation: the first seed that answers tells. */
int kvci_redis_detect(kvci_redis_tier* t, size_t seeds, char* why, size_t whycap) {
  for (size_t i = 0; i < seeds; i++) {
    if (t->cluster == 0) { /* KVC_REDIS_CLUSTER_OFF: the first seed that answers is the server */
      if (kvci_redis_node_ready(t, i) != 0) {
        snprintf(why, whycap, "%s:%u: %s", t->nodes[i]->host, t->nodes[i]->port, t->nodes[i]->conn.error);
        continue;
      }
      for (size_t s = 0; s < KVCI_REDIS_SLOTS; s++) t->slots[s] = (int32_t)i;
      return 0;
    }
    int r = ask_slots(t, i, why, whycap);
    if (r == 0) {
      t->cluster = 1;
      t->refresh_wanted = 0;
      return 0;
    }
    if (r == 1 && t->cluster < 0) { /* auto and a standalone server */
      t->cluster = 0;
      for (size_t s = 0; s < KVCI_REDIS_SLOTS; s++) t->slots[s] = (int32_t)i;
      return 0;
    }
    if (r == 1) return -1; /* forced cluster: a standalone seed is a configuration error */
  }
  return -1;
}

int kvci_redis_redirect(kvci_redis_tier* t, size_t key, const char* error) {
  int ask = strncmp(error, "ASK ", 4) == 0;
  if (!ask && strncmp(error, "MOVED ", 6) != 0) return 0;
  /* MOVED <slot> <host:port> / ASK <slot> <host:port> */
  const char* p = error + (ask ? 4 : 6);
  char* end;
  long slot = strtol(p, &end, 10);
  char host[sizeof t->nodes[0]->host];
  uint16_t port;
  size_t known = t->nnodes;
  if (end == p || *end != ' ' || slot < 0 || slot >= KVCI_REDIS_SLOTS ||
      kvci_redis_parse_address(end + 1, strlen(end + 1), host, sizeof host, &port) != 0) {
    t->state[key] = KVCI_KEY_MISS;
    return 1;
  }
  int32_t node = kvci_redis_node_find(t, host, port, t->learned < KVCI_REDIS_LEARN_PER_CALL);
  if (node >= 0 && (size_t)node + 1 == t->nnodes && t->nnodes > known) t->learned++;
  if (node < 0) {
    t->state[key] = KVCI_KEY_MISS;
    return 1;
  }
  if (ask) {
    t->node_of[key] = node;
    t->state[key] = KVCI_KEY_ASK;
  } else {
    t->slots[slot] = node;
    t->refresh_wanted = 1;
    t->state[key] = KVCI_KEY_MOVED;
  }
  return 1;
}
