/*
 * core/tier/redis/resp_encode.c: commands as RESP2 arrays of bulk strings.
 * Small arguments (command words, keys) are copied into one buffer; values
 * are referenced, so a pipeline of 2 MiB blocks goes to the socket with one
 * gathered write and no copy of the blocks.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "redis_internal.h"

void kvci_resp_out_reset(kvci_resp_out* o) {
  o->len = 0;
  o->npieces = 0;
  o->failed = 0;
}

void kvci_resp_out_free(kvci_resp_out* o) {
  free(o->bytes);
  free(o->pieces);
  free(o->iov);
  memset(o, 0, sizeof *o);
}

static int grow(void** p, size_t* cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void* q = realloc(*p, n * elem);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

static kvci_resp_piece* add_piece(kvci_resp_out* o) {
  if (grow((void**)&o->pieces, &o->pieces_cap, o->npieces + 1, sizeof *o->pieces) != 0) {
    o->failed = 1;
    return NULL;
  }
  return &o->pieces[o->npieces++];
}

/* Copies bytes into the buffer, extending the last piece when it is the buffer's too. */
static void put(kvci_resp_out* o, const void* data, size_t len) {
  if (o->failed) return;
  if (grow((void**)&o->bytes, &o->cap, o->len + len, 1) != 0) {
    o->failed = 1;
    return;
  }
  memcpy(o->bytes + o->len, data, len);
  kvci_resp_piece* last = o->npieces ? &o->pieces[o->npieces - 1] : NULL;
  if (last && !last->ext && last->off + last->len == o->len) {
    last->len += len;
  } else {
    kvci_resp_piece* p = add_piece(o);
    if (p) *p = (kvci_resp_piece){NULL, o->len, len};
  }
  o->len += len;
}

static void put_header(kvci_resp_out* o, char kind, size_t n) {
  char h[32];
  int k = snprintf(h, sizeof h, "%c%zu\r\n", kind, n);
  put(o, h, (size_t)k);
}

void kvci_resp_cmd(kvci_resp_out* o, size_t argc) { put_header(o, '*', argc); }

void kvci_resp_arg(kvci_resp_out* o, const void* data, size_t len) {
  put_header(o, '$', len);
  put(o, data, len);
  put(o, "\r\n", 2);
}

void kvci_resp_arg_str(kvci_resp_out* o, const char* s) { kvci_resp_arg(o, s, strlen(s)); }

void kvci_resp_arg_ref(kvci_resp_out* o, const void* data, size_t len) {
  put_header(o, '$', len);
  if (!o->failed && len > 0) {
    kvci_resp_piece* p = add_piece(o);
    if (p) *p = (kvci_resp_piece){data, 0, len};
  }
  put(o, "\r\n", 2);
}

struct iovec* kvci_resp_out_iov(kvci_resp_out* o, size_t* count) {
  if (o->failed || grow((void**)&o->iov, &o->iov_cap, o->npieces, sizeof *o->iov) != 0) return NULL;
  for (size_t i = 0; i < o->npieces; i++) {
    const kvci_resp_piece* p = &o->pieces[i];
    o->iov[i].iov_base = p->ext ? (void*)p->ext : (void*)(o->bytes + p->off);
    o->iov[i].iov_len = p->len;
  }
  *count = o->npieces;
  return o->iov;
}

int kvci_resp_out_send(kvci_resp_out* o, kvci_redis_conn* c, const kvci_redis_limit* lim) {
  size_t n = 0;
  struct iovec* iov = kvci_resp_out_iov(o, &n);
  if (!iov) {
    snprintf(c->error, sizeof c->error, "out of memory encoding commands");
    kvci_redis_conn_close(c);
    return -1;
  }
  return kvci_redis_conn_writev(c, iov, n, lim);
}
