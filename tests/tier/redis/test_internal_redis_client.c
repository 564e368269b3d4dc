/*
 * The Redis tier's RESP client without a server: CRC16 and hash slots against
 * the Redis Cluster specification's values, node addresses, the exact bytes
 * of encoded commands, and replies parsed from a socket pair, including
 * replies that arrive one byte at a time, values too large for the
 * destination, protocol errors, and a peer that never answers (the read
 * returns after the timeout).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "conn_pair.h"
#include "tier/redis/redis_internal.h"

static void test_crc16_and_slots(void) {
  CHECK_EQ_U64(kvci_redis_crc16("123456789", 9), 0x31C3);
  CHECK_EQ_U64(kvci_redis_crc16("", 0), 0);
  /* Values of CLUSTER KEYSLOT on a real server. */
  CHECK_EQ_U64(kvci_redis_key_slot("123456789", 9), 12739);
  CHECK_EQ_U64(kvci_redis_key_slot("foo", 3), 12182);
  CHECK_EQ_U64(kvci_redis_key_slot("somekey", 7), 11058);
  /* Hash tags: the first {...} that is not empty. */
  CHECK_EQ_U64(kvci_redis_key_slot("{user1000}.following", 20), kvci_redis_key_slot("user1000", 8));
  CHECK_EQ_U64(kvci_redis_key_slot("foo{}{bar}", 10), kvci_redis_crc16("foo{}{bar}", 10) & 16383);
  CHECK_EQ_U64(kvci_redis_key_slot("foo{{bar}}zap", 13), kvci_redis_key_slot("{bar", 4));
  CHECK_EQ_U64(kvci_redis_key_slot("foo{bar}{zap}", 13), kvci_redis_key_slot("bar", 3));
  CHECK_EQ_U64(kvci_redis_key_slot("foo{bar", 7), kvci_redis_crc16("foo{bar", 7) & 16383);
}

static void test_addresses(void) {
  char host[64];
  uint16_t port = 0;
  CHECK(kvci_redis_parse_address("127.0.0.1:6379", 14, host, sizeof host, &port) == 0);
  CHECK(strcmp(host, "127.0.0.1") == 0 && port == 6379);
  CHECK(kvci_redis_parse_address("[::1]:7000", 10, host, sizeof host, &port) == 0);
  CHECK(strcmp(host, "::1") == 0 && port == 7000);
  CHECK(kvci_redis_parse_address("redis.local:1,x", 13, host, sizeof host, &port) == 0);
  CHECK(strcmp(host, "redis.local") == 0 && port == 1);
  const char* bad[] = {"", "host", "host:", ":6379", "host:0", "host:65536", "host:12a", "::1:6379", "[::1]6379",
                       "host:123456"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (!CHECK(kvci_redis_parse_address(bad[i], strlen(bad[i]), host, sizeof host, &port) != 0))
      fprintf(stderr, "  accepted '%s'\n", bad[i]);
  CHECK(kvci_redis_parse_address("averyveryverylonghostname:1", 27, host, 8, &port) != 0);
}

/* The bytes an encoder queue would send. */
static size_t flatten(kvci_resp_out* o, char* out, size_t cap) {
  size_t n = 0, count = 0;
  struct iovec* iov = kvci_resp_out_iov(o, &count);
  for (size_t i = 0; iov && i < count; i++) {
    if (n + iov[i].iov_len > cap) return 0;
    memcpy(out + n, iov[i].iov_base, iov[i].iov_len);
    n += iov[i].iov_len;
  }
  return n;
}

static void test_encoder(void) {
  kvci_resp_out o;
  memset(&o, 0, sizeof o);
  static const char value[] = "v\r\n$x";
  kvci_resp_cmd(&o, 3);
  kvci_resp_arg_str(&o, "SET");
  kvci_resp_arg(&o, "k", 1);
  kvci_resp_arg_ref(&o, value, 5);
  kvci_resp_cmd(&o, 2);
  kvci_resp_arg_str(&o, "GET");
  kvci_resp_arg(&o, "", 0);
  char buf[256];
  size_t n = flatten(&o, buf, sizeof buf);
  static const char want[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\n$x\r\n*2\r\n$3\r\nGET\r\n$0\r\n\r\n";
  CHECK_EQ_U64(n, sizeof want - 1);
  CHECK(memcmp(buf, want, sizeof want - 1) == 0);
  /* The value is referenced, not copied: three pieces (before, value, after) and the second is the caller's. */
  size_t count = 0;
  struct iovec* iov = kvci_resp_out_iov(&o, &count);
  REQUIRE(iov != NULL);
  CHECK_EQ_U64(count, 3);
  CHECK(iov[1].iov_base == (void*)value);
  kvci_resp_out_reset(&o);
  CHECK_EQ_U64(flatten(&o, buf, sizeof buf), 0);
  kvci_resp_out_free(&o);
}

static void test_flat_replies(void) {
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  static const char replies[] = "+OK\r\n-MOVED 3999 127.0.0.1:6381\r\n:42\r\n$5\r\nhello\r\n$-1\r\n$0\r\n\r\n"
                                "$10\r\n0123456789\r\n$3\r\nabc\r\n";
  CHECK(write(peer, replies, sizeof replies - 1) == (ssize_t)(sizeof replies - 1));
  char dst[8], err[64];
  size_t size = 99;
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_STATUS);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_ERROR);
  CHECK(strcmp(err, "MOVED 3999 127.0.0.1:6381") == 0);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_INTEGER);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_VALUE);
  CHECK(size == 5 && memcmp(dst, "hello", 5) == 0);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_NIL);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_VALUE);
  CHECK_EQ_U64(size, 0);
  /* Too large for 8 bytes: read and dropped, the stream stays in step. */
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_TOO_LARGE);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(1000)), KVCI_RESP_VALUE);
  CHECK(size == 3 && memcmp(dst, "abc", 3) == 0);
  /* Nothing more comes: the read gives up after its timeout, not later, and closes the connection. */
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, err, sizeof err, lim(100)), -1);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
  CHECK(ms >= 90 && ms < 1000);
  CHECK_EQ_I64(c.fd, -1);
  CHECK(strstr(c.error, "timed out") != NULL);
  close(peer);
  kvci_redis_conn_free(&c);
}

static void test_protocol_errors(void) {
  static const char* bad[] = {"?what\r\n", "$abc\r\n", "$-2\r\n", "$3\r\nabcXY", ":1x\r\n", "*2\r\n", "\r\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kvci_redis_conn c;
    int peer;
    REQUIRE(pair_conn(&c, &peer) == 0);
    CHECK(write(peer, bad[i], strlen(bad[i])) == (ssize_t)strlen(bad[i]));
    char dst[8];
    size_t size;
    if (!CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, NULL, 0, lim(200)), -1))
      fprintf(stderr, "  accepted '%s'\n", bad[i]);
    CHECK_EQ_I64(c.fd, -1);
    close(peer);
    kvci_redis_conn_free(&c);
  }
}

typedef struct dribble {
  int fd;
  const char* bytes;
  size_t len;
} dribble;

/* Writes one byte at a time, so every line and value arrives in pieces. */
static void* dribble_main(void* arg) {
  dribble* d = arg;
  for (size_t i = 0; i < d->len; i++) {
    if (write(d->fd, d->bytes + i, 1) != 1) break;
    if (i % 7 == 0) usleep(100);
  }
  return NULL;
}

static void test_tree_in_pieces(void) {
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  /* A CLUSTER SLOTS reply of two ranges, then a value of 40000 bytes (read past the buffer, into the destination). */
  static const char slots[] = "*2\r\n*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$4\r\nabcd\r\n"
                              "*3\r\n:5461\r\n:16383\r\n*2\r\n$0\r\n\r\n:7001\r\n";
  size_t big = 40000;
  char* stream = malloc(sizeof slots + big + 32);
  char* value = malloc(big);
  REQUIRE(stream && value);
  for (size_t i = 0; i < big; i++) value[i] = (char)(i * 31 + 7);
  size_t n = (size_t)sprintf(stream, "%s$%zu\r\n", slots, big);
  memcpy(stream + n, value, big);
  memcpy(stream + n + big, "\r\n", 2);
  dribble d = {peer, stream, n + big + 2};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, dribble_main, &d) == 0);
  kvci_resp_reply r;
  CHECK_EQ_I64(kvci_resp_read_reply(&c, &r, KVCI_REDIS_SLOTS_REPLY_BYTES, KVCI_REDIS_SLOTS_REPLY_ELEMENTS, lim(5000)), 0);
  CHECK(r.type == '*' && r.count == 2);
  if (r.count == 2) {
    CHECK(r.items[0].items[0].integer == 0 && r.items[0].items[1].integer == 5460);
    CHECK(strcmp(r.items[0].items[2].items[0].str, "127.0.0.1") == 0);
    CHECK(r.items[0].items[2].items[1].integer == 7000);
    CHECK(r.items[1].items[2].items[0].len == 0 && r.items[1].items[2].items[1].integer == 7001);
  }
  kvci_resp_reply_free(&r);
  char* dst = malloc(big);
  size_t size = 0;
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, big, &size, NULL, 0, lim(5000)), KVCI_RESP_VALUE);
  CHECK(size == big && memcmp(dst, value, big) == 0);
  pthread_join(th, NULL);
  free(dst);
  free(stream);
  free(value);
  close(peer);
  kvci_redis_conn_free(&c);
}

static double ms_since(const struct timespec* a) {
  struct timespec b;
  clock_gettime(CLOCK_MONOTONIC, &b);
  return (double)(b.tv_sec - a->tv_sec) * 1e3 + (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

/* Bytes a connection holds or is sent between commands are seen without waiting; so is a peer that closed. */
static void test_unrequested_bytes(void) {
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  CHECK_EQ_I64(kvci_redis_conn_unrequested(&c), 0);
  CHECK(write(peer, "+OK\r\n", 5) == 5);
  CHECK_EQ_I64(kvci_redis_conn_unrequested(&c), 1);
  char err[8];
  CHECK_EQ_I64(kvci_resp_read_flat(&c, NULL, 0, NULL, err, sizeof err, lim(100)), KVCI_RESP_STATUS);
  CHECK_EQ_I64(kvci_redis_conn_unrequested(&c), 0);
  /* Two replies arrive; one is read: the other is still held in the buffer. */
  CHECK(write(peer, "+OK\r\n:1\r\n", 9) == 9);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, NULL, 0, NULL, err, sizeof err, lim(100)), KVCI_RESP_STATUS);
  CHECK_EQ_I64(kvci_redis_conn_unrequested(&c), 1);
  kvci_redis_conn_close(&c);
  CHECK_EQ_I64(kvci_redis_conn_unrequested(&c), 0); /* closed: nothing to fall out of step */
  close(peer);
  kvci_redis_conn_free(&c);
  REQUIRE(pair_conn(&c, &peer) == 0);
  close(peer);
  CHECK_EQ_I64(kvci_redis_conn_unrequested(&c), 1); /* the server went away */
  kvci_redis_conn_free(&c);
}

/* Values larger than the destination by more than KVCI_REDIS_DROP_BYTES, or than Redis allows, are refused from
 * their header: nothing more is read (the peer sends nothing more, so a read would wait for the whole limit). */
static void test_values_refused_from_their_header(void) {
  static const char* headers[] = {"$65545\r\n", "$4294967295\r\n", "$536870913\r\n", "$99999999999999999\r\n"};
  for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
    kvci_redis_conn c;
    int peer;
    REQUIRE(pair_conn(&c, &peer) == 0);
    CHECK(write(peer, headers[i], strlen(headers[i])) == (ssize_t)strlen(headers[i]));
    char dst[8];
    size_t size;
    struct timespec a;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (!CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, NULL, 0, lim(2000)), -1))
      fprintf(stderr, "  accepted '%s'\n", headers[i]);
    CHECK(ms_since(&a) < 1000);
    CHECK_EQ_I64(c.fd, -1);
    close(peer);
    kvci_redis_conn_free(&c);
  }
  /* 8 + 65536 bytes: still read and dropped, the stream in step. */
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  static char stream[65544 + 32];
  int n = sprintf(stream, "$65544\r\n");
  memset(stream + n, 'v', 65544);
  memcpy(stream + n + 65544, "\r\n:7\r\n", 6);
  dribble d = {peer, stream, (size_t)n + 65550};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, dribble_main, &d) == 0);
  char dst[8];
  size_t size;
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, NULL, 0, lim(10000)), KVCI_RESP_TOO_LARGE);
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, NULL, 0, lim(10000)), KVCI_RESP_INTEGER);
  pthread_join(th, NULL);
  close(peer);
  kvci_redis_conn_free(&c);
}

typedef struct slow_peer {
  int fd;
  int stop;
} slow_peer;

/* One byte of a never-ending value every 50 ms: never silent for the idle timeout. */
static void* slow_peer_main(void* arg) {
  slow_peer* p = arg;
  static const char head[] = "$1000\r\n";
  for (size_t i = 0; !__atomic_load_n(&p->stop, __ATOMIC_SEQ_CST); i++) {
    char b = i < sizeof head - 1 ? head[i] : 'x';
    if (write(p->fd, &b, 1) != 1) break;
    usleep(50000);
  }
  return NULL;
}

/* The idle timeout bounds one wait; the deadline bounds them all. */
static void test_deadline_ends_a_slow_reply(void) {
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  slow_peer p = {peer, 0};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, slow_peer_main, &p) == 0);
  char dst[1000];
  size_t size;
  struct timespec a;
  clock_gettime(CLOCK_MONOTONIC, &a);
  kvci_redis_limit l = {kvci_redis_now_ms() + 300, 200};
  CHECK_EQ_I64(kvci_resp_read_flat(&c, dst, sizeof dst, &size, NULL, 0, &l), -1);
  double ms = ms_since(&a);
  if (!CHECK(ms >= 280 && ms < 1000)) fprintf(stderr, "  the read ended after %.0f ms; its deadline was 300\n", ms);
  CHECK(strstr(c.error, "timed out") != NULL);
  __atomic_store_n(&p.stop, 1, __ATOMIC_SEQ_CST);
  pthread_join(th, NULL);
  close(peer);
  kvci_redis_conn_free(&c);
}

/* A CLUSTER SLOTS-like reply is refused at its caps, before anything is allocated for the lengths it announces. */
static void test_tree_caps(void) {
  static const struct {
    const char* bytes;
    size_t max_bytes, max_elements;
    const char* says;
  } cases[] = {
      {"*3\r\n:1\r\n:2\r\n:3\r\n", 1000, 3, "more elements"},
      {"*1000\r\n", 2999, 1 << 20, "more bytes"},
      {"*2\r\n$40\r\n", 40, 100, "more bytes"},
      {"$536870912\r\n", (size_t)8 << 20, 100, "more bytes"},
      {"$536870913\r\n", (size_t)1 << 40, 100, "bad bulk length"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kvci_redis_conn c;
    int peer;
    REQUIRE(pair_conn(&c, &peer) == 0);
    CHECK(write(peer, cases[i].bytes, strlen(cases[i].bytes)) == (ssize_t)strlen(cases[i].bytes));
    kvci_resp_reply r;
    CHECK_EQ_I64(kvci_resp_read_reply(&c, &r, cases[i].max_bytes, cases[i].max_elements, lim(2000)), -1);
    if (!CHECK(strstr(c.error, cases[i].says) != NULL)) fprintf(stderr, "  '%s': %s\n", cases[i].bytes, c.error);
    close(peer);
    kvci_redis_conn_free(&c);
  }
  /* Exactly at the caps: accepted (4 elements, 4 + 3 x 4 = 16 bytes). */
  kvci_redis_conn c;
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  CHECK(write(peer, "*3\r\n:1\r\n:2\r\n:3\r\n", 16) == 16);
  kvci_resp_reply r;
  CHECK_EQ_I64(kvci_resp_read_reply(&c, &r, 16, 4, lim(2000)), 0);
  CHECK(r.type == '*' && r.count == 3 && r.items[2].integer == 3);
  kvci_resp_reply_free(&r);
  close(peer);
  kvci_redis_conn_free(&c);
}

static void test_connect_refused_and_writes_to_a_closed_peer(void) {
  /* Port 1 on 127.0.0.1 is closed on every test machine: refused at once, with the reason. */
  kvci_redis_conn c;
  kvci_redis_conn_init(&c);
  CHECK_EQ_I64(kvci_redis_conn_open(&c, "127.0.0.1", 1, lim(200)), -1);
  CHECK(strstr(c.error, "refused") != NULL);
  kvci_redis_conn_free(&c);
  /* A peer gone: the write fails (no SIGPIPE kills the test). */
  int peer;
  REQUIRE(pair_conn(&c, &peer) == 0);
  close(peer);
  char big[4096] = {0};
  struct iovec iov = {big, sizeof big};
  CHECK_EQ_I64(kvci_redis_conn_writev(&c, &iov, 1, lim(200)), -1);
  CHECK_EQ_I64(c.fd, -1);
  kvci_redis_conn_free(&c);
}

int main(void) {
  TU_RUN(test_crc16_and_slots);
  TU_RUN(test_addresses);
  TU_RUN(test_encoder);
  TU_RUN(test_flat_replies);
  TU_RUN(test_protocol_errors);
  TU_RUN(test_tree_in_pieces);
  TU_RUN(test_unrequested_bytes);
  TU_RUN(test_values_refused_from_their_header);
  TU_RUN(test_deadline_ends_a_slow_reply);
  TU_RUN(test_tree_caps);
  TU_RUN(test_connect_refused_and_writes_to_a_closed_peer);
  return tu_finish();
}
