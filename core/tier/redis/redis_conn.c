/*
 * core/tier/redis/redis_conn.c: one TCP connection to a Redis node with
 * limits on everything: the connect is non-blocking and polled, every read
 * and write polls until the call's deadline but no longer than the idle
 * timeout, so a dead or stopped server costs at most the idle timeout and a
 * server that sends a byte now and then no more than the call's deadline.
 * The deadline is checked before every system call too, so a server that
 * floods never makes a wait necessary and still cannot hold the call.
 * MSG_NOSIGNAL: a peer that went away must not kill the process with SIGPIPE.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "redis_internal.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* macOS: SO_NOSIGPIPE is set on the socket instead */
#endif

#define READ_BUFFER_BYTES (64u * 1024u)
/* Values at least this large are received straight into the caller's buffer, not through ours. */
#define DIRECT_READ_BYTES (16u * 1024u)

uint64_t kvci_redis_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

kvci_redis_limit kvci_redis_limit_in(uint32_t ms) {
  return (kvci_redis_limit){kvci_redis_now_ms() + ms, ms};
}

/* Milliseconds one wait may take now: up to idle_ms, never past the deadline; 0 when the deadline has passed. */
static int wait_budget(const kvci_redis_limit* lim) {
  uint64_t now = kvci_redis_now_ms();
  if (now >= lim->deadline_ms) return 0;
  uint64_t left = lim->deadline_ms - now;
  if (left > lim->idle_ms) left = lim->idle_ms;
  return left > INT_MAX ? INT_MAX : (int)left; /* poll() reads a negative timeout as "wait forever" */
}

static int past_deadline(const kvci_redis_limit* lim) { return kvci_redis_now_ms() >= lim->deadline_ms; }

void kvci_redis_conn_init(kvci_redis_conn* c) {
  memset(c, 0, sizeof *c);
  c->fd = -1;
}

void kvci_redis_conn_close(kvci_redis_conn* c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->pos = c->len = 0;
}

void kvci_redis_conn_free(kvci_redis_conn* c) {
  kvci_redis_conn_close(c);
  free(c->buf);
  c->buf = NULL;
  c->cap = 0;
}

static int fail(kvci_redis_conn* c, const char* what, int err) {
  snprintf(c->error, sizeof c->error, "%s: %s", what, err ? strerror(err) : "timed out");
  kvci_redis_conn_close(c);
  return -1;
}

/* Waits for `events` on the socket; 1 ready, 0 timed out (idle or deadline), -1 error (errno). */
static int wait_fd(int fd, short events, const kvci_redis_limit* lim) {
  struct pollfd p = {fd, events, 0};
  uint64_t end = kvci_redis_now_ms() + (uint64_t)wait_budget(lim);
  for (;;) {
    uint64_t now = kvci_redis_now_ms();
    int left = now >= end ? 0 : (int)(end - now);
    int r = poll(&p, 1, left);
    if (r > 0) return 1;
    if (r == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

int kvci_redis_conn_unrequested(kvci_redis_conn* c) {
  if (c->fd < 0) return 0;
  if (c->pos < c->len) return 1;
  char b;
  ssize_t r;
  do r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  /* A byte, an end of stream (the server closed: restarted, or timed us out) or an error: not usable as is. */
  return r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

static int try_connect(kvci_redis_conn* c, const struct addrinfo* ai, const kvci_redis_limit* lim) {
  int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
  if (fd < 0) return fail(c, "socket", errno);
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
    int e = errno;
    close(fd);
    return fail(c, "fcntl", e);
  }
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
#ifdef SO_NOSIGPIPE
  (void)setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      int e = errno;
      close(fd);
      return fail(c, "connect", e);
    }
    int r = wait_fd(fd, POLLOUT, lim);
    int err = 0;
    socklen_t len = sizeof err;
    if (r <= 0) err = r == 0 ? 0 : errno;
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (r <= 0 || err != 0) {
      close(fd);
      return fail(c, "connect", err);
    }
  }
  c->fd = fd;
  return 0;
}

int kvci_redis_conn_open(kvci_redis_conn* c, const char* host, uint16_t port, const kvci_redis_limit* lim) {
  kvci_redis_conn_close(c);
  if (!c->buf) {
    c->buf = malloc(READ_BUFFER_BYTES);
    if (!c->buf) return fail(c, "read buffer", ENOMEM);
    c->cap = READ_BUFFER_BYTES;
  }
  char service[8];
  snprintf(service, sizeof service, "%u", (unsigned)port);
  struct addrinfo hints, *list = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(host, service, &hints, &list);
  if (g != 0) {
    snprintf(c->error, sizeof c->error, "cannot resolve %s: %s", host, gai_strerror(g));
    return -1;
  }
  int r = -1;
  for (const struct addrinfo* ai = list; ai && r != 0; ai = ai->ai_next) {
    if (past_deadline(lim)) {
      r = fail(c, "connect", 0);
      break;
    }
    r = try_connect(c, ai, lim);
  }
  freeaddrinfo(list);
  return r;
}

int kvci_redis_conn_writev(kvci_redis_conn* c, struct iovec* iov, size_t count, const kvci_redis_limit* lim) {
  if (c->fd < 0) return fail(c, "write", ENOTCONN);
  while (count > 0) {
    if (past_deadline(lim)) return fail(c, "write", 0);
    if (iov->iov_len == 0) {
      iov++, count--;
      continue;
    }
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = iov;
    m.msg_iovlen = count > 1024 ? 1024 : count; /* IOV_MAX */
    ssize_t n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return fail(c, "write", errno);
      int r = wait_fd(c->fd, POLLOUT, lim);
      if (r <= 0) return fail(c, "write", r == 0 ? 0 : errno);
      continue;
    }
    size_t left = (size_t)n;
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++, count--;
    }
    if (count > 0) {
      iov->iov_base = (char*)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

/* Receives into dst (up to n bytes) once something is readable; the count, or -1. */
static ssize_t receive(kvci_redis_conn* c, void* dst, size_t n, const kvci_redis_limit* lim) {
  for (;;) {
    if (past_deadline(lim)) {
      fail(c, "read", 0);
      return -1;
    }
    ssize_t r = recv(c->fd, dst, n, 0);
    if (r > 0) return r;
    if (r == 0) {
      fail(c, "read", ECONNRESET);
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      fail(c, "read", errno);
      return -1;
    }
    int w = wait_fd(c->fd, POLLIN, lim);
    if (w <= 0) {
      fail(c, "read", w == 0 ? 0 : errno);
      return -1;
    }
  }
}

/* Reads more into the buffer, moving the unread bytes to its start first. */
static int fill(kvci_redis_conn* c, const kvci_redis_limit* lim) {
  if (c->fd < 0) return fail(c, "read", ENOTCONN);
  if (c->pos > 0) {
    memmove(c->buf, c->buf + c->pos, c->len - c->pos);
    c->len -= c->pos;
    c->pos = 0;
  }
  if (c->len == c->cap) {
    snprintf(c->error, sizeof c->error, "a reply line longer than %zu bytes", c->cap);
    kvci_redis_conn_close(c);
    return -1;
  }
  ssize_t n = receive(c, c->buf + c->len, c->cap - c->len, lim);
  if (n < 0) return -1;
  c->len += (size_t)n;
  return 0;
}

int kvci_redis_conn_read_line(kvci_redis_conn* c, const char** line, size_t* len, const kvci_redis_limit* lim) {
  size_t scanned = 0;
  for (;;) {
    const uint8_t* start = c->buf + c->pos;
    size_t have = c->len - c->pos;
    for (size_t i = scanned; i + 1 < have; i++) {
      if (start[i] == '\r' && start[i + 1] == '\n') {
        *line = (const char*)start;
        *len = i;
        c->pos += i + 2;
        return 0;
      }
    }
    scanned = have > 0 ? have - 1 : 0;
    if (fill(c, lim) != 0) return -1;
  }
}

int kvci_redis_conn_read_exact(kvci_redis_conn* c, void* dst, size_t n, const kvci_redis_limit* lim) {
  uint8_t* out = dst;
  size_t have = c->len - c->pos;
  size_t take = have < n ? have : n;
  if (out && take) memcpy(out, c->buf + c->pos, take);
  c->pos += take;
  n -= take;
  if (out) out += take;
  while (n > 0) {
    if (c->fd < 0) return fail(c, "read", ENOTCONN);
    if (out && n >= DIRECT_READ_BYTES) {
      ssize_t r = receive(c, out, n, lim);
      if (r < 0) return -1;
      out += r;
      n -= (size_t)r;
      continue;
    }
    c->pos = c->len = 0;
    if (fill(c, lim) != 0) return -1;
    take = c->len < n ? c->len : n;
    if (out) {
      memcpy(out, c->buf, take);
      out += take;
    }
    c->pos = take;
    n -= take;
  }
  return 0;
}
