/*
 * The Redis client's connection and reply reader at their edges, without a
 * server: a call whose deadline has passed before it connects, writes or
 * reads; a connection used after it was closed; a peer that closes cleanly,
 * one that resets the stream, and one that sends a line longer than the
 * read buffer; null bulk strings and null arrays, and a type byte RESP does
 * not have, inside a reply tree and as a flat reply. Each failure closes the
 * connection and says which operation failed and why.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "test_util.h"
#include "conn_pair.h"
#include "tier/redis/redis_internal.h"

/* A limit that ended a second ago. */
static const kvci_redis_limit* past(void) {
  static kvci_redis_limit l;
  l.deadline_ms = kvci_redis_now_ms() - 1000;
  l.idle_ms = 1000;
  return &l;
}

static void test_deadline_passed_before_the_call(void) {
  kvci_redis_conn c;
  kvci_redis_conn_init(&c);
  /* Connect: the address is never tried. */
  CHECK_EQ_I64(kvci_redis_conn_open(&c, "127.0.0.1", 6379, past()), -1);
  CHECK(strcmp(c.error, "connect: timed out") == 0);
  CHECK_EQ_I64(c.fd, -1);
  kvci_redis_conn_free(&c);
  /* Read: a line is waiting, but nothing is taken once the deadline has passed. */
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  CHECK(write(peer, "+OK\r\n", 5) == 5);
  const char* line = NULL;
  size_t len = 0;
  CHECK_EQ_I64(kvci_redis_conn_read_line(&c, &line, &len, past()), -1);
  CHECK(strcmp(c.error, "read: timed out") == 0);
  CHECK_EQ_I64(c.fd, -1);
  CHECK(line == NULL);
  close(peer);
  kvci_redis_conn_free(&c);
}

static void test_a_closed_connection_refuses_writes(void) {
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  kvci_redis_conn_close(&c);
  char cmd[] = "PING\r\n";
  struct iovec iov = {cmd, 6};
  CHECK_EQ_I64(kvci_redis_conn_writev(&c, &iov, 1, lim(200)), -1);
  CHECK(strstr(c.error, "write: ") == c.error && strstr(c.error, strerror(ENOTCONN)) != NULL);
  /* Nothing reached the peer: the iovec was not consumed. */
  CHECK_EQ_U64(iov.iov_len, 6);
  char got;
  CHECK_EQ_I64(recv(peer, &got, 1, MSG_DONTWAIT), 0); /* our end is closed: end of stream, no byte */
  close(peer);
  kvci_redis_conn_free(&c);
}

static void test_peer_closes_or_resets_mid_reply(void) {
  kvci_redis_conn c;
  int peer;
  const char* line;
  size_t len;
  /* A clean close after part of a line: end of stream, reported as a reset connection. */
  REQUIRE(pair_conn(&c, &peer) == 0);
  CHECK(write(peer, "+PART", 5) == 5);
  close(peer);
  CHECK_EQ_I64(kvci_redis_conn_read_line(&c, &line, &len, lim(2000)), -1);
  CHECK(strstr(c.error, "read: ") == c.error && strstr(c.error, strerror(ECONNRESET)) != NULL);
  CHECK_EQ_I64(c.fd, -1);
  kvci_redis_conn_free(&c);
  /* A peer that closes with our command unread resets the stream: recv fails with the reason. */
  REQUIRE(pair_conn(&c, &peer) == 0);
  char cmd[] = "*1\r\n$4\r\nPING\r\n";
  struct iovec iov = {cmd, sizeof cmd - 1};
  CHECK_EQ_I64(kvci_redis_conn_writev(&c, &iov, 1, lim(2000)), 0);
  close(peer);
  CHECK_EQ_I64(kvci_redis_conn_read_line(&c, &line, &len, lim(2000)), -1);
  CHECK(strstr(c.error, "read: ") == c.error && strstr(c.error, strerror(ECONNRESET)) != NULL);
  CHECK_EQ_I64(c.fd, -1);
  kvci_redis_conn_free(&c);
}

static void test_a_line_longer_than_the_buffer(void) {
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  int big = 256 * 1024;
  setsockopt(peer, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  size_t n = c.cap + 16;
  char* text = malloc(n);
  REQUIRE(text != NULL);
  memset(text, 'a', n);
  text[0] = '+';
  size_t sent = 0;
  while (sent < n) {
    ssize_t w = write(peer, text + sent, n - sent);
    if (w <= 0) break;
    sent += (size_t)w;
  }
  CHECK_EQ_U64(sent, n);
  const char* line;
  size_t len;
  CHECK_EQ_I64(kvci_redis_conn_read_line(&c, &line, &len, lim(2000)), -1);
  CHECK(strcmp(c.error, "a reply line longer than 65536 bytes") == 0);
  CHECK_EQ_I64(c.fd, -1);
  free(text);
  close(peer);
  kvci_redis_conn_free(&c);
}

static void test_nulls_and_unknown_types(void) {
  kvci_redis_conn c;
  int peer;
  /* A tree: a null bulk string and a null array become '_' elements; the integer after them still parses. */
  REQUIRE(pair_conn(&c, &peer) == 0);
  static const char tree[] = "*3\r\n$-1\r\n*-1\r\n:5\r\n";
  CHECK(write(peer, tree, sizeof tree - 1) == (ssize_t)(sizeof tree - 1));
  kvci_resp_reply r;
  CHECK_EQ_I64(kvci_resp_read_reply(&c, &r, 1024, 16, lim(2000)), 0);
  CHECK(r.type == '*' && r.count == 3);
  if (r.count == 3) {
    CHECK(r.items[0].type == '_' && r.items[1].type == '_');
    CHECK(r.items[2].type == ':' && r.items[2].integer == 5);
  }
  kvci_resp_reply_free(&r);
  /* A type byte RESP2 does not have, inside a tree: refused, the line quoted, the connection closed. */
  static const char odd[] = "*2\r\n:1\r\n%2\r\n";
  CHECK(write(peer, odd, sizeof odd - 1) == (ssize_t)(sizeof odd - 1));
  CHECK_EQ_I64(kvci_resp_read_reply(&c, &r, 1024, 16, lim(2000)), -1);
  CHECK(strcmp(c.error, "protocol error: unknown reply type in '%2'") == 0);
  CHECK_EQ_I64(c.fd, -1);
  CHECK(r.items == NULL && r.count == 0); /* the partial tree is freed */
  close(peer);
  kvci_redis_conn_free(&c);
  /* Flat replies: a null array is a nil (a GET of a missing key on some proxies); any other array is refused. */
  REQUIRE(pair_conn(&c, &peer) == 0);
  CHECK(write(peer, "*-1\r\n*2\r\n", 9) == 9);
  char value[8];
  size_t size = 99;
  char error[64] = "";
  CHECK_EQ_I64(kvci_resp_read_flat(&c, value, sizeof value, &size, error, sizeof error, lim(2000)), KVCI_RESP_NIL);
  CHECK_EQ_U64(size, 99); /* a nil sets no size */
  CHECK_EQ_I64(kvci_resp_read_flat(&c, value, sizeof value, &size, error, sizeof error, lim(2000)), -1);
  CHECK(strcmp(c.error, "protocol error: unexpected array in '*2'") == 0);
  CHECK_EQ_I64(c.fd, -1);
  close(peer);
  kvci_redis_conn_free(&c);
}

/* Sends `text` on the peer and reads one flat reply into a 4-byte buffer; the kind, or -1 with c->error set. */
static int flat(kvci_redis_conn* c, int peer, const char* text, int with_dst, size_t* size, char* error,
                size_t errcap) {
  if (write(peer, text, strlen(text)) != (ssize_t)strlen(text)) return -2;
  char dst[4];
  return kvci_resp_read_flat(c, with_dst ? dst : NULL, with_dst ? sizeof dst : 0, size, error, errcap, lim(2000));
}

static void test_malformed_flat_replies(void) {
  static const struct {
    const char* text;
    const char* error;
  } bad[] = {
      {":-\r\n", "protocol error: bad integer in ':-'"},
      {":1234567890123456789\r\n", "protocol error: bad integer in ':1234567890123456789'"},
      {":12a\r\n", "protocol error: bad integer in ':12a'"},
      {"$-2\r\n", "protocol error: bad bulk length in '$-2'"},
      {"*x\r\n", "protocol error: unexpected array in '*x'"},
      {"$2\r\nab!!", "protocol error: bulk string not ended by CRLF in ''"},
      {"$2\r\nab\r!", "protocol error: bulk string not ended by CRLF in ''"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kvci_redis_conn c;
    int peer;
    REQUIRE(pair_conn(&c, &peer) == 0);
    size_t size = 7;
    CHECK_EQ_I64(flat(&c, peer, bad[i].text, 1, &size, NULL, 0), -1);
    if (strcmp(c.error, bad[i].error) != 0) fprintf(stderr, "  %s: got '%s'\n", bad[i].text, c.error);
    CHECK(strcmp(c.error, bad[i].error) == 0);
    CHECK_EQ_I64(c.fd, -1);
    CHECK_EQ_U64(size, 7);
    close(peer);
    kvci_redis_conn_free(&c);
  }
  /* What a caller may leave out: the error text, the size, the destination (a small value is read and dropped,
   * and the connection stays in step for the next reply). */
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  CHECK_EQ_I64(flat(&c, peer, "-ERR no\r\n", 1, NULL, NULL, 0), KVCI_RESP_ERROR);
  char error[4] = "xyz";
  CHECK_EQ_I64(flat(&c, peer, "-ERR no\r\n", 1, NULL, error, 0), KVCI_RESP_ERROR);
  CHECK(strcmp(error, "xyz") == 0); /* errcap 0: nothing written */
  size_t size = 7;
  CHECK_EQ_I64(flat(&c, peer, "$3\r\nabc\r\n", 0, &size, NULL, 0), KVCI_RESP_TOO_LARGE);
  CHECK_EQ_U64(size, 0);
  CHECK_EQ_I64(flat(&c, peer, "$3\r\nabc\r\n", 1, NULL, NULL, 0), KVCI_RESP_VALUE);
  CHECK_EQ_I64(flat(&c, peer, ":-42\r\n", 1, NULL, NULL, 0), KVCI_RESP_INTEGER);
  CHECK(c.fd >= 0);
  close(peer);
  kvci_redis_conn_free(&c);
}

static void test_malformed_trees(void) {
  static const struct {
    const char* text;
    size_t bytes, elements;
    const char* error;
  } bad[] = {
      {"*1\r\n\r\n", 64, 4, "protocol error: empty reply in ''"},
      {"*1\r\n:x\r\n", 64, 4, "protocol error: bad integer in ':x'"},
      {"*-2\r\n", 64, 4, "protocol error: bad array length in '*-2'"},
      {"*1\r\n*q\r\n", 64, 4, "protocol error: bad array length in '*q'"},
      {"*1\r\n$-3\r\n", 64, 4, "protocol error: bad bulk length in '$-3'"},
      {"+OK\r\n", 64, 0, "protocol error: a reply of more elements than its cap"},
      {"+a-status-line-longer-than-the-cap\r\n", 8, 4, "protocol error: a reply of more bytes than its cap"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kvci_redis_conn c;
    int peer;
    REQUIRE(pair_conn(&c, &peer) == 0);
    CHECK(write(peer, bad[i].text, strlen(bad[i].text)) == (ssize_t)strlen(bad[i].text));
    kvci_resp_reply r;
    CHECK_EQ_I64(kvci_resp_read_reply(&c, &r, bad[i].bytes, bad[i].elements, lim(2000)), -1);
    if (strcmp(c.error, bad[i].error) != 0) fprintf(stderr, "  %s: got '%s'\n", bad[i].text, c.error);
    CHECK(strcmp(c.error, bad[i].error) == 0);
    CHECK_EQ_I64(c.fd, -1);
    CHECK(r.items == NULL && r.str == NULL);
    kvci_resp_reply_free(NULL); /* a no-op, as for free() */
    close(peer);
    kvci_redis_conn_free(&c);
  }
}

static void test_closed_or_late_reads_and_writes(void) {
  kvci_redis_conn c;
  int peer;
  char cmd[] = "PING\r\n";
  /* An empty piece is skipped; then the deadline, already passed, ends the write before a byte is sent. */
  REQUIRE(pair_conn(&c, &peer) == 0);
  struct iovec iov[2] = {{cmd, 0}, {cmd, 6}};
  CHECK_EQ_I64(kvci_redis_conn_writev(&c, iov, 2, lim(2000)), 0);
  char got[8] = {0};
  CHECK_EQ_I64(read(peer, got, sizeof got), 6);
  CHECK(memcmp(got, cmd, 6) == 0);
  struct iovec late = {cmd, 6};
  CHECK_EQ_I64(kvci_redis_conn_writev(&c, &late, 1, past()), -1);
  CHECK(strcmp(c.error, "write: timed out") == 0);
  CHECK_EQ_U64(late.iov_len, 6);
  /* Reads on the closed connection: a line, a small value, a large one. */
  const char* line;
  size_t len;
  CHECK_EQ_I64(kvci_redis_conn_read_line(&c, &line, &len, lim(200)), -1);
  CHECK(strstr(c.error, "read: ") == c.error && strstr(c.error, strerror(ENOTCONN)) != NULL);
  char big[32 * 1024];
  CHECK_EQ_I64(kvci_redis_conn_read_exact(&c, big, 10, lim(200)), -1);
  CHECK(strstr(c.error, strerror(ENOTCONN)) != NULL);
  close(peer);
  kvci_redis_conn_free(&c);
  /* A peer gone in the middle of a value: the direct read of a large one and the buffered read of a small one. */
  for (size_t want = 10; want <= sizeof big; want += sizeof big - 10) {
    REQUIRE(pair_conn(&c, &peer) == 0);
    CHECK(write(peer, "abc", 3) == 3);
    close(peer);
    CHECK_EQ_I64(kvci_redis_conn_read_exact(&c, big, want, lim(2000)), -1);
    CHECK(strstr(c.error, strerror(ECONNRESET)) != NULL);
    CHECK(memcmp(big, "abc", 3) == 0); /* what came is where it belongs */
    kvci_redis_conn_free(&c);
  }
  /* A CR inside a line is a byte of the line, not its end. */
  REQUIRE(pair_conn(&c, &peer) == 0);
  CHECK(write(peer, "+a\rb\r\n", 6) == 6);
  CHECK_EQ_I64(kvci_redis_conn_read_line(&c, &line, &len, lim(2000)), 0);
  CHECK(len == 4 && memcmp(line, "+a\rb", 4) == 0);
  close(peer);
  kvci_redis_conn_free(&c);
}

int main(void) {
  TU_RUN(test_deadline_passed_before_the_call);
  TU_RUN(test_a_closed_connection_refuses_writes);
  TU_RUN(test_peer_closes_or_resets_mid_reply);
  TU_RUN(test_a_line_longer_than_the_buffer);
  TU_RUN(test_nulls_and_unknown_types);
  TU_RUN(test_malformed_flat_replies);
  TU_RUN(test_malformed_trees);
  TU_RUN(test_closed_or_late_reads_and_writes);
  return tu_finish();
}
