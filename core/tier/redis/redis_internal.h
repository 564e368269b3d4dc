/*
 * core/tier/redis/redis_internal.h: the Redis tier's own RESP2 client.
 *
 * One job per file: redis_conn.c (a TCP connection with connect and I/O
 * timeouts, non-blocking connect + poll, buffered reads), resp_encode.c
 * (commands as RESP arrays, large values referenced rather than copied),
 * resp_reply.c (replies: flat ones straight into the caller's buffer, nested
 * ones as a tree), redis_slot.c (CRC16 and hash slots), redis_cluster.c
 * (nodes, the slot map from CLUSTER SLOTS, MOVED and ASK), redis_pipeline.c
 * (a run of SET, GET or EXISTS on one node, pipelined in windows), redis_tier.c (the
 * options, the keys and the kvc_tier_ops). docs/tiers.md says why the
 * project has its own client rather than hiredis.
 *
 * Every failure is local: a connection that times out or breaks is closed
 * (a half-read pipeline cannot be resynchronised) and tried again after
 * reconnect_interval_ms; the keys it carried are misses or skipped puts.
 *
 * Nothing a server sends can hold a call past its deadline or make the
 * client allocate without bound: every wait ends at the call's deadline
 * (kvci_redis_limit), every reply is read against a byte cap fixed before
 * its first byte (KVCI_REDIS_*_BYTES below; docs/redis-tier.md gives the
 * values and why), and a connection with bytes nobody asked for is closed.
 */
#ifndef KVC_CORE_TIER_REDIS_INTERNAL_H
#define KVC_CORE_TIER_REDIS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/redis_tier.h"
#include "kvcache/tier.h"

/* Milliseconds of a monotonic clock. */
uint64_t kvci_redis_now_ms(void);

/* What one wait on a peer may take: never past the call's deadline, and never longer than idle_ms at once (a
 * node silent for that long is dead even when the call has time left for the other nodes). */
typedef struct kvci_redis_limit {
  uint64_t deadline_ms; /* kvci_redis_now_ms() at which the call ends */
  uint32_t idle_ms;     /* connect_timeout_ms or command_timeout_ms */
} kvci_redis_limit;

/* A limit of `ms` from now for both: one operation on its own (tests, benchmarks). */
kvci_redis_limit kvci_redis_limit_in(uint32_t ms);

/* The longest host name a node may have: a DNS name's limit (RFC 1035: 253 characters as text). */
#define KVCI_REDIS_HOST_MAX 253
/* Redis refuses a string longer than 512 MiB (proto-max-bulk-len); a longer one is a broken stream. */
#define KVCI_REDIS_BULK_MAX ((uint64_t)512 << 20)
/* A CLUSTER SLOTS reply: bytes and elements of the whole reply (a 16384-range map with two nodes per range is
 * about 3 MiB and 213000 elements), so that its tree stays below about 30 MiB of memory. */
#define KVCI_REDIS_SLOTS_REPLY_BYTES ((size_t)8 << 20)
#define KVCI_REDIS_SLOTS_REPLY_ELEMENTS ((size_t)1 << 18)
/* A value larger than the caller's buffer by at most this much is read and dropped (the connection stays in
 * step); a larger one closes the connection unread. */
#define KVCI_REDIS_DROP_BYTES ((size_t)64 << 10)
/* An error reply's text kept: "MOVED 16383 [<253 bytes>]:65535" is 275 bytes, so a redirect is never cut. */
#define KVCI_REDIS_ERROR_BYTES 320
/* Nodes a call may learn from MOVED and ASK; past that a redirect to an unknown node is a miss. */
#define KVCI_REDIS_LEARN_PER_CALL 8
/* Nodes a tier knows in all (Redis Cluster's own limit is 1000 nodes). */
#define KVCI_REDIS_MAX_NODES 4096

/* ------------------------------------------------------------ connection */

typedef struct kvci_redis_conn {
  int fd;       /* -1: not connected */
  uint8_t* buf; /* read buffer: bytes [pos, len) are received and unread */
  size_t pos, len, cap;
  char error[160]; /* why the last operation failed, for messages */
} kvci_redis_conn;

void kvci_redis_conn_init(kvci_redis_conn* c);
/* Connects to host:port within the limit (numeric addresses never block; names go through getaddrinfo, which no
 * limit bounds). Returns 0, or -1 with c->error set. */
int kvci_redis_conn_open(kvci_redis_conn* c, const char* host, uint16_t port, const kvci_redis_limit* lim);
void kvci_redis_conn_close(kvci_redis_conn* c);
/* Frees the buffer too. */
void kvci_redis_conn_free(kvci_redis_conn* c);
/* Whether a connection between commands holds or is sent bytes nobody asked for, or was closed by the peer:
 * then it is out of step and must be closed. 1 or 0; never waits. */
int kvci_redis_conn_unrequested(kvci_redis_conn* c);

/* A gathered write: `iov` is consumed as it is sent. Fails when the limit is reached. */
struct iovec;
int kvci_redis_conn_writev(kvci_redis_conn* c, struct iovec* iov, size_t count, const kvci_redis_limit* lim);
/* The next line without its CRLF; valid until the next read. Lines are at most 64 KiB. */
int kvci_redis_conn_read_line(kvci_redis_conn* c, const char** line, size_t* len, const kvci_redis_limit* lim);
/* Exactly `n` bytes into `dst` (NULL: read and drop them), large ones straight from the socket. */
int kvci_redis_conn_read_exact(kvci_redis_conn* c, void* dst, size_t n, const kvci_redis_limit* lim);

/* --------------------------------------------------------------- encoder */

/* A piece of output: bytes of the encoder's own buffer (ext NULL, at `off`) or a caller's value. */
typedef struct kvci_resp_piece {
  const void* ext;
  size_t off, len;
} kvci_resp_piece;

/* Commands queued for one gathered write; values are referenced, never copied. */
typedef struct kvci_resp_out {
  uint8_t* bytes;
  size_t len, cap;
  kvci_resp_piece* pieces;
  size_t npieces, pieces_cap;
  struct iovec* iov; /* built by kvci_resp_out_iov */
  size_t iov_cap;
  int failed; /* an allocation failed: the queue is unusable until reset */
} kvci_resp_out;

void kvci_resp_out_reset(kvci_resp_out* o);
void kvci_resp_out_free(kvci_resp_out* o);
/* A command's array header: *argc CRLF. */
void kvci_resp_cmd(kvci_resp_out* o, size_t argc);
/* One argument, copied (keys, small words). */
void kvci_resp_arg(kvci_resp_out* o, const void* data, size_t len);
void kvci_resp_arg_str(kvci_resp_out* o, const char* s);
/* One argument whose bytes stay the caller's until the write is done. */
void kvci_resp_arg_ref(kvci_resp_out* o, const void* data, size_t len);
/* The queue as an iovec array (valid until the next change); NULL when an allocation failed. */
struct iovec* kvci_resp_out_iov(kvci_resp_out* o, size_t* count);
/* Encodes and sends the queue; 0 or -1. */
int kvci_resp_out_send(kvci_resp_out* o, kvci_redis_conn* c, const kvci_redis_limit* lim);

/* --------------------------------------------------------------- replies */

/* What a flat reply was. */
typedef enum kvci_resp_kind {
  KVCI_RESP_STATUS,    /* +line (OK) */
  KVCI_RESP_ERROR,     /* -line: the text is in `error` */
  KVCI_RESP_INTEGER,   /* :n */
  KVCI_RESP_VALUE,     /* $n: copied into the destination */
  KVCI_RESP_NIL,       /* $-1 or *-1 */
  KVCI_RESP_TOO_LARGE, /* $n larger than the destination by at most KVCI_REDIS_DROP_BYTES: read and dropped */
} kvci_resp_kind;

/*
 * Reads one reply that is not an array (GET, SET, EXISTS, ASKING, AUTH). A bulk value goes into `dst` (capacity
 * `cap`), its size into *size; an integer's value (a negative one as 0) into *size too. An error's text (up to errcap - 1 bytes) into `error`. Returns the kind, or -1 when the
 * connection failed or spoke something else, or announced a value larger than cap + KVCI_REDIS_DROP_BYTES (then
 * the connection is closed, the value unread).
 */
int kvci_resp_read_flat(kvci_redis_conn* c, void* dst, size_t cap, size_t* size, char* error, size_t errcap,
                        const kvci_redis_limit* lim);

/* A reply as a tree, for the few nested ones (CLUSTER SLOTS). */
typedef struct kvci_resp_reply {
  char type;      /* '+', '-', ':', '$', '*', or '_' for nil */
  int64_t integer;
  char* str;      /* '+', '-', '$': NUL-terminated */
  size_t len;
  struct kvci_resp_reply* items; /* '*' */
  size_t count;
} kvci_resp_reply;

/* Reads one reply of any type, of at most `max_bytes` on the wire and `max_elements` elements in all; arrays nest
 * at most 8 deep. Nothing is allocated for a length before it is checked against what is left of both. 0, or -1
 * (connection closed). */
int kvci_resp_read_reply(kvci_redis_conn* c, kvci_resp_reply* out, size_t max_bytes, size_t max_elements,
                         const kvci_redis_limit* lim);
void kvci_resp_reply_free(kvci_resp_reply* r);

/* ----------------------------------------------------------------- slots */

#define KVCI_REDIS_SLOTS 16384

/* CRC16-XMODEM (polynomial 0x1021, initial 0), the checksum of Redis Cluster's key slots. */
uint16_t kvci_redis_crc16(const void* data, size_t len);
/* The key's slot: CRC16 of the key, or of its {hash tag} when it has a non-empty one, mod 16384. */
uint16_t kvci_redis_key_slot(const void* key, size_t len);

/* Splits "host:port" or "[v6]:port" into host (NUL-terminated, cap bytes, at most KVCI_REDIS_HOST_MAX before the
 * NUL) and port; 0 or -1. The port is what follows the last ':' (after the ']'), never cut by the host's length. */
int kvci_redis_parse_address(const char* s, size_t len, char* host, size_t cap, uint16_t* port);

/* ------------------------------------------------------------------ tier */

typedef struct kvci_redis_node {
  char host[KVCI_REDIS_HOST_MAX + 1];
  uint16_t port;
  kvci_redis_conn conn;
  uint64_t retry_after_ms; /* a node that failed is left alone until then */
} kvci_redis_node;

/* What became of one key of a call. */
enum {
  KVCI_KEY_PENDING, /* not sent yet */
  KVCI_KEY_DONE,    /* stored, or found (size in the call's sizes) */
  KVCI_KEY_MISS,    /* not found, refused or failed: final */
  KVCI_KEY_MOVED,   /* MOVED: the slot map was updated; send again once */
  KVCI_KEY_ASK,     /* ASK: send again once to ask_node, after ASKING */
};

/* One put_many, get_many or exists_many. */
typedef struct kvci_redis_call {
  int put;
  int exists;                /* EXISTS: whether each key is stored (state DONE), no value read */
  size_t count;
  const void* const* values; /* put */
  const size_t* value_sizes; /* put */
  void* const* dst;          /* get */
  size_t capacity;           /* get */
  size_t* sizes;             /* get: the size of each value found */
} kvci_redis_call;

typedef struct kvci_redis_tier {
  char* seeds; /* the options' strings, copied */
  char* prefix;
  char* username;
  char* password;
  uint32_t connect_timeout_ms, command_timeout_ms, reconnect_interval_ms, ttl_seconds, max_pipeline;
  uint32_t call_timeout_ms; /* the deadline of every call, from its start */
  int cluster;              /* 1 cluster, 0 standalone (decided at creation) */

  /* The call under way: its deadline and the nodes it learned from redirects. */
  uint64_t deadline_ms;
  unsigned learned;

  kvci_redis_node** nodes; /* the seeds first, then the nodes of the slot map and those learned since from MOVED
                              and ASK (a new map forgets those it does not name) */
  size_t nnodes, nodes_cap, nseeds;
  int32_t slots[KVCI_REDIS_SLOTS]; /* node index of each slot; -1 unknown */
  int refresh_wanted;              /* the slot map may be stale */
  uint64_t next_refresh_ms;

  /* Scratch of a call, kept between calls. */
  char* keys; /* key i at keys + i * key_stride */
  size_t key_stride, keys_cap;
  uint16_t* key_lens;
  uint8_t* state;
  int32_t* node_of; /* node of key i for this pass; ask target for KVCI_KEY_ASK */
  uint32_t* order;  /* the keys of one node */
  size_t scratch_cap;
  kvci_resp_out out;
  kvci_redis_call call;
} kvci_redis_tier;

/* Connects (and authenticates) a node unless it is connected or left alone, or the call's deadline has passed (the
 * node is not blamed then). A connection holding unrequested bytes is closed and opened again. 0 or -1. */
int kvci_redis_node_ready(kvci_redis_tier* t, size_t node);
/* Closes a node after a failure and leaves it alone for reconnect_interval_ms. */
void kvci_redis_node_failed(kvci_redis_tier* t, size_t node);
/* Starts a call: its deadline is call_timeout_ms from now. */
void kvci_redis_call_begin(kvci_redis_tier* t);
/* The limit of a command (idle command_timeout_ms) or a connect (connect_timeout_ms) within the call. */
kvci_redis_limit kvci_redis_command_limit(const kvci_redis_tier* t);
kvci_redis_limit kvci_redis_connect_limit(const kvci_redis_tier* t);
/* The index of the node host:port, added if new and `may_add`; -1 when unknown and not added (a host longer than
 * KVCI_REDIS_HOST_MAX, KVCI_REDIS_MAX_NODES known, out of memory). */
int32_t kvci_redis_node_find(kvci_redis_tier* t, const char* host, uint16_t port, int may_add);
/* Reads the slot map (CLUSTER SLOTS) from the first node that answers; 0, or -1 with `why`. Node indices taken
 * before a success do not hold after it (the table is compacted): call it before routing, never during. */
int kvci_redis_refresh_slots(kvci_redis_tier* t, char* why, size_t whycap);
/* At creation: standalone or cluster (t->cluster -1 auto, 0 off, 1 on), from seeds nodes[0..seeds); 0 or -1. */
int kvci_redis_detect(kvci_redis_tier* t, size_t seeds, char* why, size_t whycap);
/* Acts on a MOVED or ASK error of key i (text without the '-'); 1 when it was one, 0 otherwise. */
int kvci_redis_redirect(kvci_redis_tier* t, size_t key, const char* error);

/* Sends the call's keys order[0..n) to `node` in pipelined windows and reads their replies into the state. */
void kvci_redis_pipeline(kvci_redis_tier* t, size_t node, const uint32_t* order, size_t n, int asking);

/* Writes key i of the call: <prefix><fingerprint hex>:<group>:<block hash hex>. */
void kvci_redis_format_key(const kvci_redis_tier* t, const kvc_tier_key* key, char* out, uint16_t* len);
/* Bytes a key of this tier takes at most. */
size_t kvci_redis_key_bytes(const kvci_redis_tier* t);

/* Routes the call's keys by slot, runs them node by node, retries MOVED and ASK once. */
void kvci_redis_execute(kvci_redis_tier* t, const kvc_tier_key* keys);

#endif /* KVC_CORE_TIER_REDIS_INTERNAL_H */
