/*
 * core/tier/redis/resp_reply.c: RESP2 replies. Flat replies (GET, SET,
 * ASKING, AUTH) are read without allocating: a bulk value lands in the
 * caller's buffer. Nested ones (CLUSTER SLOTS) become a small tree, bounded
 * in depth, and for the whole reply in bytes and elements, so that a
 * confused or hostile server cannot make the client allocate without limit:
 * every announced length is checked against what is left of the reply's
 * budget before anything is allocated or read for it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_internal.h"

#define MAX_DEPTH 8
/* The fewest bytes an element takes on the wire (":0\r\n" is 4, "+\r\n" 3): an array of n elements needs 3n. */
#define MIN_ELEMENT_BYTES 3

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

/* A bulk length: -1 (nil) up to Redis's own limit; 0 or -1. */
static int parse_bulk_length(const char* s, size_t len, int64_t* out) {
  return parse_int(s, len, out) == 0 && *out >= -1 && (uint64_t)(*out + 1) <= KVCI_REDIS_BULK_MAX + 1 ? 0 : -1;
}

int kvci_resp_read_flat(kvci_redis_conn* c, void* dst, size_t cap, size_t* size, char* error, size_t errcap,
                        const kvci_redis_limit* lim) {
  const char* line;
  size_t len;
  if (kvci_redis_conn_read_line(c, &line, &len, lim) != 0) return -1;
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
      if (size) *size = n < 0 ? 0 : (size_t)n; /* EXISTS: how many of the keys exist */
      return KVCI_RESP_INTEGER;
    case '*':
      if (parse_int(line + 1, len - 1, &n) != 0 || n != -1) return protocol_error(c, "unexpected array", line, len);
      return KVCI_RESP_NIL;
    case '$':
      if (parse_bulk_length(line + 1, len - 1, &n) != 0) return protocol_error(c, "bad bulk length", line, len);
      if (n == -1) return KVCI_RESP_NIL;
      {
        size_t have = dst ? cap : 0;
        int fits = dst && (uint64_t)n <= cap;
        /* Reading a value only to drop it is worth it while it is small: the connection stays. */
        if ((uint64_t)n > (uint64_t)have + KVCI_REDIS_DROP_BYTES)
          return protocol_error(c, "a value larger than expected", line, len);
        if (kvci_redis_conn_read_exact(c, fits ? dst : NULL, (size_t)n, lim) != 0) return -1;
        char crlf[2];
        if (kvci_redis_conn_read_exact(c, crlf, 2, lim) != 0) return -1;
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

/* What is left of a reply's budget. */
typedef struct tree_budget {
  size_t bytes, elements;
  const kvci_redis_limit* lim;
} tree_budget;

static int over_cap(kvci_redis_conn* c, const char* what) {
  snprintf(c->error, sizeof c->error, "protocol error: a reply of more %s than its cap", what);
  kvci_redis_conn_close(c);
  return -1;
}

/* Takes `n` bytes from the budget; 0, or -1 when the reply would be larger than its cap. */
static int spend(kvci_redis_conn* c, tree_budget* b, uint64_t n) {
  if (n > b->bytes) return over_cap(c, "bytes");
  b->bytes -= (size_t)n;
  return 0;
}

static int read_tree(kvci_redis_conn* c, kvci_resp_reply* out, tree_budget* b, int depth) {
  memset(out, 0, sizeof *out);
  const char* line;
  size_t len;
  if (b->elements == 0) return over_cap(c, "elements");
  b->elements--;
  if (kvci_redis_conn_read_line(c, &line, &len, b->lim) != 0) return -1;
  if (spend(c, b, (uint64_t)len + 2) != 0) return -1;
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
      if (parse_bulk_length(line + 1, len - 1, &n) != 0) return protocol_error(c, "bad bulk length", line, len);
      if (n == -1) {
        out->type = '_';
        return 0;
      }
      if (spend(c, b, (uint64_t)n + 2) != 0) return -1;
      out->str = malloc((size_t)n + 2);
      if (!out->str) return protocol_error(c, "out of memory", line, len);
      if (kvci_redis_conn_read_exact(c, out->str, (size_t)n + 2, b->lim) != 0) return -1;
      out->str[n] = 0;
      out->len = (size_t)n;
      return 0;
    case '*':
      if (parse_int(line + 1, len - 1, &n) != 0 || n < -1) return protocol_error(c, "bad array length", line, len);
      if (n == -1) {
        out->type = '_';
        return 0;
      }
      if (depth >= MAX_DEPTH) return protocol_error(c, "arrays nested too deep", line, len);
      if (n == 0) return 0;
      /* Checked before the allocation: n elements need n of the budget's elements and 3n of its bytes. */
      if ((uint64_t)n > b->elements) return over_cap(c, "elements");
      if ((uint64_t)n > b->bytes / MIN_ELEMENT_BYTES) return over_cap(c, "bytes");
      out->items = calloc((size_t)n, sizeof *out->items);
      if (!out->items) return protocol_error(c, "out of memory", line, len);
      for (int64_t i = 0; i < n; i++) {
        out->count = (size_t)i + 1;
        if (read_tree(c, &out->items[i], b, depth + 1) != 0) return -1;
      }
      return 0;
    default:
      return protocol_error(c, "unknown reply type", line, len);
  }
}

int kvci_resp_read_reply(kvci_redis_conn* c, kvci_resp_reply* out, size_t max_bytes, size_t max_elements,
                         const kvci_redis_limit* lim) {
  tree_budget b = {max_bytes, max_elements, lim};
  if (read_tree(c, out, &b, 0) == 0) return 0;
  kvci_resp_reply_free(out);
  return -1;
}
