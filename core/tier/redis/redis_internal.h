/*
 * core/tier/redis/redis_internal.h: the Redis tier's own RESP2 client.
 *
 * One job per file: redis_conn.c (a TCP connection with connect and I/O
 * timeouts, non-blocking connect + poll, buffered reads), resp_encode.c
 * (commands as RESP arrays, large values referenced rather than copied),
 * resp_reply.c (replies: flat ones straight into the caller's buffer, nested
 * ones as a tree), redis_slot.c (CRC16 and hash slots), redis_cluster.c
 * (nodes, the slot map from CLUSTER SLOTS, MOVED and ASK), redis_pipeline.c
 * (a run of SET or GET on one node, pipelined in windows), redis_tier.c (the
 * options, the keys and the kvc_tier_ops). docs/tiers.md says why the
 * project has its own client rather than hiredis.
 *
 * Every failure is local: a connection that times out or breaks is closed
 * (a half-read pipeline cannot be resynchronised) and tried again after
 * reconnect_interval_ms; the keys it carried are misses or skipped puts.
 */
#ifndef KVC_CORE_TIER_REDIS_INTERNAL_H
#define KVC_CORE_TIER_REDIS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/redis_tier.h"
#include "kvcache/tier.h"

/* Milliseconds of a monotonic clock. */
uint64_t kvci_redis_now_ms(void);

/* ------------------------------------------------------------ connection */

typedef struct kvci_redis_conn {
  int fd;       /* -1: not connected */
  uint8_t* buf; /* read buffer: bytes [pos, len) are received and unread */
  size_t pos, len, cap;
  char error[160]; /* why the last operation failed, for messages */
} kvci_redis_conn;

void kvci_redis_conn_init(kvci_redis_conn* c);
/* Connects to host:port within `timeout_ms` (numeric addresses never block; names go through getaddrinfo).
 * Returns 0, or -1 with c->error set. */
int kvci_redis_conn_open(kvci_redis_conn* c, const char* host, uint16_t port, uint32_t timeout_ms);
void kvci_redis_conn_close(kvci_redis_conn* c);
/* Frees the buffer too. */
void kvci_redis_conn_free(kvci_redis_conn* c);

/* A gathered write: `iov` is consumed as it is sent. Fails when no byte moves for `timeout_ms`. */
struct iovec;
int kvci_redis_conn_writev(kvci_redis_conn* c, struct iovec* iov, size_t count, uint32_t timeout_ms);
/* The next line without its CRLF; valid until the next read. Lines are at most 64 KiB. */
int kvci_redis_conn_read_line(kvci_redis_conn* c, const char** line, size_t* len, uint32_t timeout_ms);
/* Exactly `n` bytes into `dst` (NULL: read and drop them), large ones straight from the socket. */
int kvci_redis_conn_read_exact(kvci_redis_conn* c, void* dst, size_t n, uint32_t timeout_ms);

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
int kvci_resp_out_send(kvci_resp_out* o, kvci_redis_conn* c, uint32_t timeout_ms);

/* --------------------------------------------------------------- replies */

/* What a flat reply was. */
typedef enum kvci_resp_kind {
  KVCI_RESP_STATUS,    /* +line (OK) */
  KVCI_RESP_ERROR,     /* -line: the text is in `error` */
  KVCI_RESP_INTEGER,   /* :n */
  KVCI_RESP_VALUE,     /* $n: copied into the destination */
  KVCI_RESP_NIL,       /* $-1 or *-1 */
  KVCI_RESP_TOO_LARGE, /* $n larger than the destination: read and dropped */
} kvci_resp_kind;

/*
 * Reads one reply that is not an array (GET, SET, ASKING, AUTH). A bulk value goes into `dst` (capacity `cap`),
 * its size into *size. An error's text (up to errcap - 1 bytes) into `error`. Returns the kind, or -1 when the
 * connection failed or spoke something else (then the connection is closed).
 */
int kvci_resp_read_flat(kvci_redis_conn* c, void* dst, size_t cap, size_t* size, char* error, size_t errcap,
                        uint32_t timeout_ms);

/* A reply as a tree, for the few nested ones (CLUSTER SLOTS). */
typedef struct kvci_resp_reply {
  char type;      /* '+', '-', ':', '$', '*', or '_' for nil */
  int64_t integer;
  char* str;      /* '+', '-', '$': NUL-terminated */
  size_t len;
  struct kvci_resp_reply* items; /* '*' */
  size_t count;
} kvci_resp_reply;

/* Reads one reply of any type; arrays nest at most 8 deep. 0, or -1 (connection closed). */
int kvci_resp_read_reply(kvci_redis_conn* c, kvci_resp_reply* out, uint32_t timeout_ms);
void kvci_resp_reply_free(kvci_resp_reply* r);

/* ----------------------------------------------------------------- slots */

#define KVCI_REDIS_SLOTS 16384

/* CRC16-XMODEM (polynomial 0x1021, initial 0), the checksum of Redis Cluster's key slots. */
uint16_t kvci_redis_crc16(const void* data, size_t len);
/* The key's slot: CRC16 of the key, or of its {hash tag} when it has a non-empty one, mod 16384. */
uint16_t kvci_redis_key_slot(const void* key, size_t len);

/* Splits "host:port" or "[v6]:port" into host (NUL-terminated, cap bytes) and port; 0 or -1. */
int kvci_redis_parse_address(const char* s, size_t len, char* host, size_t cap, uint16_t* port);

/* ------------------------------------------------------------------ tier */

typedef struct kvci_redis_node {
  char host[256];
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

/* One put_many or get_many. */
typedef struct kvci_redis_call {
  int put;
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
  int cluster; /* 1 cluster, 0 standalone (decided at creation) */

  kvci_redis_node** nodes; /* every node seen: seeds, CLUSTER SLOTS, MOVED, ASK */
  size_t nnodes, nodes_cap;
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

/* Connects (and authenticates) a node unless it is connected or left alone; 0 or -1. */
int kvci_redis_node_ready(kvci_redis_tier* t, size_t node);
/* Closes a node after a failure and leaves it alone for reconnect_interval_ms. */
void kvci_redis_node_failed(kvci_redis_tier* t, size_t node);
/* The index of the node host:port, added if new; -1 when out of memory. */
int32_t kvci_redis_node_find(kvci_redis_tier* t, const char* host, uint16_t port);
/* Reads the slot map (CLUSTER SLOTS) from the first node that answers; 0, or -1 with `why`. */
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
