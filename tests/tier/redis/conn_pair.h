/*
 * tests/tier/redis/conn_pair.h: a Redis connection without a server, for
 * tests of the RESP client: the connection holds one end of a socket pair
 * and the test writes (or closes) the server's end itself.
 */
#ifndef KVC_TESTS_CONN_PAIR_H
#define KVC_TESTS_CONN_PAIR_H

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "tier/redis/redis_internal.h"

/* A limit of `ms` from now, for one operation; valid until the next call. */
static inline const kvci_redis_limit* lim(uint32_t ms) {
  static kvci_redis_limit l;
  l = kvci_redis_limit_in(ms);
  return &l;
}

/* A connection over one end of a socket pair (non-blocking, as kvci_redis_conn_open leaves its sockets) with
 * the library's 64 KiB read buffer; the other end in *peer. 0, or -1. */
static inline int pair_conn(kvci_redis_conn* c, int* peer) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
  kvci_redis_conn_init(c);
  c->buf = malloc(64 * 1024);
  c->cap = 64 * 1024;
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  c->fd = sv[0];
  *peer = sv[1];
  return 0;
}

#endif
