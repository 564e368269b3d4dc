/*
 * tests/tier/redis/redis_server.h: redis-server processes for the Redis tier's
 * tests, on 127.0.0.1 at free ports, each in its own temporary directory
 * (removed at stop; no configuration file: everything is on the command
 * line), killed with the test process if it dies (PR_SET_PDEATHSIG).
 * Administration goes through redis-cli, never through the client under test.
 *
 * A test calls rs_require() first: without redis-server and redis-cli on PATH
 * it prints SKIPPED and why, and exits 77 (CTest's skip code).
 */
#ifndef KVC_TESTS_REDIS_SERVER_H
#define KVC_TESTS_REDIS_SERVER_H

/* The including test defines _GNU_SOURCE before any system header (mkdtemp, nftw, popen, prctl). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct rs_server {
  pid_t pid; /* 0: not running */
  int port;
  int cluster;
  char dir[64];
} rs_server;

#define RS_UNUSED __attribute__((unused))

static RS_UNUSED int rs_on_path(const char* tool) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
  return system(cmd) == 0;
}

static RS_UNUSED void rs_require(void) {
  if (rs_on_path("redis-server") && rs_on_path("redis-cli")) return;
  printf("SKIPPED: redis-server or redis-cli is not on PATH (scripts/setup.sh installs Debian's redis-server)\n");
  exit(77);
}

static RS_UNUSED void rs_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static RS_UNUSED double rs_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static RS_UNUSED int rs_port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(0x7f000001);
  int ok = fd >= 0 && bind(fd, (struct sockaddr*)&a, sizeof a) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

/* A port that is free, and whose cluster bus port (+10000) is free too. */
static RS_UNUSED int rs_free_port(void) {
  static unsigned seed;
  if (!seed) seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int tries = 0; tries < 1000; tries++) {
    int port = 20000 + (int)(rand_r(&seed) % 30000);
    if (rs_port_free(port) && rs_port_free(port + 10000)) return port;
  }
  return -1;
}

/* Output of redis-cli -p port <args> (stdout and stderr) in out; its exit status. */
static RS_UNUSED int rs_cli(int port, char* out, size_t cap, const char* fmt, ...) {
  char args[512], cmd[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "redis-cli -h 127.0.0.1 -p %d %s 2>&1", port, args);
  FILE* p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = out && cap ? fread(out, 1, cap - 1, p) : 0;
  if (out && cap) out[n] = 0;
  char sink[256];
  while (fread(sink, 1, sizeof sink, p) > 0) {
  }
  return pclose(p);
}

static RS_UNUSED int rs_ping(int port) {
  char out[64];
  return rs_cli(port, out, sizeof out, "ping") == 0 && strstr(out, "PONG") != NULL;
}

/* Starts (or restarts, same port and directory) the server; 0 once it answers PING. */
static RS_UNUSED int rs_launch(rs_server* s) {
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
    }
    char* argv[40];
    int n = 0;
    argv[n++] = "redis-server";
    argv[n++] = "--port", argv[n++] = port;
    argv[n++] = "--bind", argv[n++] = "127.0.0.1";
    argv[n++] = "--dir", argv[n++] = s->dir;
    argv[n++] = "--save", argv[n++] = "";
    argv[n++] = "--appendonly", argv[n++] = "no";
    argv[n++] = "--daemonize", argv[n++] = "no";
    argv[n++] = "--logfile", argv[n++] = "";
    argv[n++] = "--loglevel", argv[n++] = "warning";
    if (s->cluster) {
      argv[n++] = "--cluster-enabled", argv[n++] = "yes";
      argv[n++] = "--cluster-config-file", argv[n++] = "nodes.conf";
      argv[n++] = "--cluster-node-timeout", argv[n++] = "1000";
      /* The slots of a dead node fail; the other nodes keep serving theirs. */
      argv[n++] = "--cluster-require-full-coverage", argv[n++] = "no";
    }
    argv[n] = NULL;
    execvp("redis-server", argv);
    _exit(127);
  }
  s->pid = pid;
  for (int i = 0; i < 250; i++) {
    if (rs_ping(s->port)) return 0;
    if (waitpid(pid, NULL, WNOHANG) == pid) {
      s->pid = 0;
      return -1;
    }
    rs_sleep_ms(20);
  }
  return -1;
}

static RS_UNUSED int rs_start(rs_server* s, int cluster) {
  memset(s, 0, sizeof *s);
  s->cluster = cluster;
  snprintf(s->dir, sizeof s->dir, "/tmp/kvc-redis-XXXXXX");
  if (!mkdtemp(s->dir)) return -1;
  for (int attempt = 0; attempt < 5; attempt++) {
    s->port = rs_free_port();
    if (s->port > 0 && rs_launch(s) == 0) return 0;
  }
  return -1;
}

/* Kills the process (SIGKILL: no goodbye to the cluster), keeps the directory for a restart. */
static RS_UNUSED void rs_kill(rs_server* s) {
  if (s->pid > 0) {
    kill(s->pid, SIGCONT);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
  }
  s->pid = 0;
}

static RS_UNUSED int rs_remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static RS_UNUSED void rs_stop(rs_server* s) {
  rs_kill(s);
  if (s->dir[0]) nftw(s->dir, rs_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  s->dir[0] = 0;
}

/* Waits until `cluster info` of node says cluster_state:ok; 0 or -1. */
static RS_UNUSED int rs_cluster_wait_ok(const rs_server* node, int timeout_ms) {
  char out[2048];
  double end = rs_now_ms() + timeout_ms;
  while (rs_now_ms() < end) {
    if (rs_cli(node->port, out, sizeof out, "cluster info") == 0 && strstr(out, "cluster_state:ok")) return 0;
    rs_sleep_ms(50);
  }
  return -1;
}

/* Starts n cluster nodes and joins them into one cluster without replicas; 0 once every node says ok. */
static RS_UNUSED int rs_cluster_start(rs_server* nodes, int n) {
  char addrs[256] = "";
  for (int i = 0; i < n; i++) {
    if (rs_start(&nodes[i], 1) != 0) return -1;
    snprintf(addrs + strlen(addrs), sizeof addrs - strlen(addrs), "127.0.0.1:%d ", nodes[i].port);
  }
  char out[4096];
  if (rs_cli(nodes[0].port, out, sizeof out, "--cluster create %s --cluster-replicas 0 --cluster-yes", addrs) != 0) {
    fprintf(stderr, "redis-cli --cluster create failed:\n%s\n", out);
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (rs_cluster_wait_ok(&nodes[i], 10000) != 0) return -1;
  return 0;
}

#endif /* KVC_TESTS_REDIS_SERVER_H */
