/*
 * core/tier/redis/resp_reply.c: RESP2 replies. Flat replies (GET, SET,
 * ASKING, AUTH) are read without allocating: a bulk value lands in the
 * caller's buffer. Nested ones (CLUSTER SLOTS) become a small tree, bounded
 * in depth and element count so that a confused server cannot make the
 * client allocate without limit.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_internal.h"

#define MAX_DEPTH 8
#define MAX_ELEMENTS (1u << 20)
#define MAX_BULK ((int64_t)1 << 32) /* 512 MB is Redis's own limit */

static int protocol_error(kvci_redis_conn* c, const char* what, const char* line, size_t len) {
  snprintf(c->error, sizeof c->error, "protocol error: %s in '%.*s'", what, (int)(len > 40 ? 40 : len), line);
  kvci_redis_conn_close(c);
  return -1;
}

/* Parses the decimal after a type byte; 0 or -1. */
static int parse_int(const char* s, size_t len, int64_t* out) {
  size_t i = 0;
  int neg = 0;
  if (len > 0 && s[0] == '-') neg = 1, i = 1;
  if (i == len || len - i > 18) return -1;
  int64_t v = 0;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  *out = neg ? -v : v;
  return 0;
}

int kvci_resp_read_flat(kvci_redis_conn* c, void* dst, size_t cap, size_t* size, char* error, size_t errcap,
                        uint32_t timeout_ms) {
  const char* line;
  size_t len;
  if (kvci_redis_conn_read_line(c, &line, &len, timeout_ms) != 0) return -1;
  if (len == 0) return protocol_error(c, "empty reply", line, len);
  int64_t n = 0;
  switch (line[0]) {
    case '+':
      return KVCI_RESP_STATUS;
    case '-':
      if (error && errcap) {
        size_t k = len - 1 < errcap - 1 ? len - 1 : errcap - 1;
        memcpy(error, line + 1, k);
        error[k] = 0;
      }
      return KVCI_RESP_ERROR;
    case ':':
      if (parse_int(line + 1, len - 1, &n) != 0) return protocol_error(c, "bad integer", line, len);
      return KVCI_RESP_INTEGER;
    case '*':
      if (parse_int(line + 1, len - 1, &n) != 0 || n != -1) return protocol_error(c, "unexpected array", line, len);
      return KVCI_RESP_NIL;
    case '$':
      if (parse_int(line + 1, len - 1, &n) != 0 || n < -1 || n > MAX_BULK)
        return protocol_error(c, "bad bulk length", line, len);
      if (n == -1) return KVCI_RESP_NIL;
      {
        int fits = dst && (uint64_t)n <= cap;
        if (kvci_redis_conn_read_exact(c, fits ? dst : NULL, (size_t)n, timeout_ms) != 0) return -1;
        char crlf[2];
        if (kvci_redis_conn_read_exact(c, crlf, 2, timeout_ms) != 0) return -1;
        if (crlf[0] != '\r' || crlf[1] != '\n') return protocol_error(c, "bulk string not ended by CRLF", "", 0);
        if (size) *size = fits ? (size_t)n : 0;
        return fits ? KVCI_RESP_VALUE : KVCI_RESP_TOO_LARGE;
      }
    default:
      return protocol_error(c, "unknown reply type", line, len);
  }
}

void kvci_resp_reply_free(kvci_resp_reply* r) {
  if (!r) return;
  for (size_t i = 0; i < r->count; i++) kvci_resp_reply_free(&r->items[i]);
  free(r->items);
  free(r->str);
  memset(r, 0, sizeof *r);
}

static int read_tree(kvci_redis_conn* c, kvci_resp_reply* out, uint32_t timeout_ms, int depth) {
  memset(out, 0, sizeof *out);
  const char* line;
  size_t len;
  if (kvci_redis_conn_read_line(c, &line, &len, timeout_ms) != 0) return -1;
  if (len == 0) return protocol_error(c, "empty reply", line, len);
  out->type = line[0];
  int64_t n = 0;
  switch (line[0]) {
    case '+':
    case '-':
      out->str = malloc(len);
      if (!out->str) return protocol_error(c, "out of memory", line, len);
      memcpy(out->str, line + 1, len - 1);
      out->str[len - 1] = 0;
      out->len = len - 1;
      return 0;
    case ':':
      if (parse_int(line + 1, len - 1, &out->integer) != 0) return protocol_error(c, "bad integer", line, len);
      return 0;
    case '$':
      if (parse_int(line + 1, len - 1, &n) != 0 || n < -1 || n > MAX_BULK)
        return protocol_error(c, "bad bulk length", line, len);
      if (n == -1) {
        out->type = '_';
        return 0;
      }
      out->str = malloc((size_t)n + 2);
      if (!out->str) return protocol_error(c, "out of memory", line, len);
      if (kvci_redis_conn_read_exact(c, out->str, (size_t)n + 2, timeout_ms) != 0) return -1;
      out->str[n] = 0;
      out->len = (size_t)n;
      return 0;
    case '*':
      if (parse_int(line + 1, len - 1, &n) != 0 || n < -1 || n > MAX_ELEMENTS)
        return protocol_error(c, "bad array length", line, len);
      if (n == -1) {
        out->type = '_';
        return 0;
      }
      if (depth >= MAX_DEPTH) return protocol_error(c, "arrays nested too deep", line, len);
      if (n == 0) return 0;
      out->items = calloc((size_t)n, sizeof *out->items);
      if (!out->items) return protocol_error(c, "out of memory", line, len);
      for (int64_t i = 0; i < n; i++) {
        out->count = (size_t)i + 1;
        if (read_tree(c, &out->items[i], timeout_ms, depth + 1) != 0) return -1;
      }
      return 0;
    default:
      return protocol_error(c, "unknown reply type", line, len);
  }
}

int kvci_resp_read_reply(kvci_redis_conn* c, kvci_resp_reply* out, uint32_t timeout_ms) {
  if (read_tree(c, out, timeout_ms, 0) == 0) return 0;
  kvci_resp_reply_free(out);
  return -1;
}
