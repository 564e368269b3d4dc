/*
 * tests/tier/redis/fake_server.h: a scripted RESP server on 127.0.0.1 at a
 * free port, in a thread of the test, for what a real redis-server never
 * does: answer a byte at a time, redirect everywhere, announce 4 GiB values,
 * flood, or send replies nobody asked for. The thread accepts one connection
 * at a time and hands it to the test's `serve` function, which reads the
 * client's commands (fs_read_command) and writes whatever it likes
 * (fs_send); the connection is closed when `serve` returns. Also "dead"
 * nodes: sockets that listen and never accept, so a connect succeeds and
 * every command goes unanswered.
 */
#ifndef KVC_TESTS_FAKE_SERVER_H
#define KVC_TESTS_FAKE_SERVER_H

/* The including test defines _GNU_SOURCE before any system header. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FS_UNUSED __attribute__((unused))

typedef struct fs_server fs_server;

/* One command of the client: its words, NUL-terminated, in `buf`. */
typedef struct fs_conn {
  fs_server* server;
  int fd;
  char in[64 * 1024]; /* received, not yet parsed: [0, len) */
  size_t len;
  size_t argc;
  char* argv[8];
  size_t argl[8]; /* their lengths (a SET's value may hold any byte) */
  char words[64 * 1024];
} fs_conn;

struct fs_server {
  int listen_fd;
  int port;
  pthread_t thread;
  atomic_int stop;
  atomic_int connections; /* accepted so far */
  atomic_int commands;    /* read so far, over all connections */
  void (*serve)(fs_conn* c);
  void* arg; /* the test's */
};

/* A socket listening on 127.0.0.1 at a free port; the fd, or -1. */
static FS_UNUSED int fs_listen(int* port, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7f000001);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || listen(fd, backlog) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

/* Waits up to `ms` for the fd to be readable, waking every 20 ms to see whether the test stops; 1, or 0. */
static FS_UNUSED int fs_wait_readable(fs_server* s, int fd, int ms) {
  for (int waited = 0; waited < ms && !atomic_load(&s->stop); waited += 20) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 20) > 0) return 1;
  }
  return 0;
}

/* Sends all of `len` bytes; 0, or -1 when the client is gone. */
static FS_UNUSED int fs_send(fs_conn* c, const void* data, size_t len) {
  const char* p = data;
  while (len > 0) {
    ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n, len -= (size_t)n;
  }
  return 0;
}

static FS_UNUSED int fs_send_str(fs_conn* c, const char* s) { return fs_send(c, s, strlen(s)); }

/* Parses one whole command at the start of `in` into argv; its length, or 0 when it is not all there yet. */
static FS_UNUSED size_t fs_parse(fs_conn* c) {
  char* p = c->in;
  char* end = c->in + c->len;
  char* w = c->words;
  char* nl = memchr(p, '\n', (size_t)(end - p));
  if (!nl || p[0] != '*') return 0;
  size_t argc = strtoul(p + 1, NULL, 10);
  p = nl + 1;
  c->argc = 0;
  for (size_t i = 0; i < argc; i++) {
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || p[0] != '$') return 0;
    size_t n = strtoul(p + 1, NULL, 10);
    p = nl + 1;
    if ((size_t)(end - p) < n + 2) return 0;
    if (i < sizeof c->argv / sizeof c->argv[0]) {
      memcpy(w, p, n);
      w[n] = 0;
      c->argl[c->argc] = n;
      c->argv[c->argc++] = w;
      w += n + 1;
    }
    p += n + 2;
  }
  return (size_t)(p - c->in);
}

/* Reads the client's next command (argv[0] the command word); 1, or 0 when the client closed or the test stops. */
static FS_UNUSED int fs_read_command(fs_conn* c) {
  for (;;) {
    size_t used = c->len ? fs_parse(c) : 0;
    if (used) {
      memmove(c->in, c->in + used, c->len - used);
      c->len -= used;
      atomic_fetch_add(&c->server->commands, 1);
      return 1;
    }
    if (c->len == sizeof c->in || !fs_wait_readable(c->server, c->fd, 60000)) return 0;
    ssize_t n = recv(c->fd, c->in + c->len, sizeof c->in - c->len, 0);
    if (n <= 0) return 0;
    c->len += (size_t)n;
  }
}

/* Whether the client closed its end (waits up to `ms` for it). */
static FS_UNUSED int fs_client_closed(fs_conn* c, int ms) {
  if (!fs_wait_readable(c->server, c->fd, ms)) return 0;
  char b[256];
  return recv(c->fd, b, sizeof b, MSG_DONTWAIT) == 0;
}

static FS_UNUSED int fs_is(const fs_conn* c, const char* word) {
  return c->argc > 0 && strcasecmp(c->argv[0], word) == 0;
}

static FS_UNUSED void* fs_main(void* arg) {
  fs_server* s = arg;
  fs_conn* c = malloc(sizeof *c);
  while (c && !atomic_load(&s->stop)) {
    if (!fs_wait_readable(s, s->listen_fd, 1000)) continue;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0) continue;
    atomic_fetch_add(&s->connections, 1);
    c->server = s;
    c->len = c->argc = 0; /* nothing of the last connection's commands */
    c->fd = fd;
    s->serve(c);
    close(fd);
  }
  free(c);
  return NULL;
}

/* Starts a server whose connections go to `serve`; 0 or -1. */
static FS_UNUSED int fs_start(fs_server* s, void (*serve)(fs_conn*), void* arg) {
  memset(s, 0, sizeof *s);
  s->serve = serve;
  s->arg = arg;
  s->listen_fd = fs_listen(&s->port, 16);
  if (s->listen_fd < 0) return -1;
  if (pthread_create(&s->thread, NULL, fs_main, s) != 0) {
    close(s->listen_fd);
    return -1;
  }
  return 0;
}

static FS_UNUSED void fs_stop(fs_server* s) {
  atomic_store(&s->stop, 1);
  pthread_join(s->thread, NULL);
  close(s->listen_fd);
}

#endif /* KVC_TESTS_FAKE_SERVER_H */
