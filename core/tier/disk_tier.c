/*
 * core/tier/disk_tier.c: kvc_disk_tier_create, a tier in a local directory
 * (docs/tiers.md, 'The disk tier').
 *
 * One file per block, DIR/XX/<hex of the 72-byte key>.kvtb, XX the block
 * hash's first byte (256 subdirectories: no directory grows past what a
 * file system lists quickly). A value is written to a temporary name in the
 * same subdirectory and renamed over the final one: rename is atomic, so a
 * reader (this process, another sharing the directory, a restarted one)
 * sees the whole old file, the whole new one, or none, never a torn one.
 * No fsync: a tier is a cache, and a power loss that leaves a renamed file
 * short or zeroed leaves one the frame's size and CRC-32C refuse (a miss
 * counted corrupt), so syncing would buy durability the contract does not
 * promise at a cost of milliseconds per block. The size limit is kept with
 * an in-memory LRU index (disk_index.c) rebuilt at creation by scanning the
 * directory, oldest modification first; with several processes each evicts
 * from what it knows, so a shared directory can exceed the limit by what the
 * others wrote since they started.
 */
#define _DEFAULT_SOURCE 1 /* O_CLOEXEC, st_mtim (POSIX 2008) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/regular_file.h"
#include "disk_index.h"

#define SUFFIX ".kvtb"
#define NAME_LEN (2 * KVCI_TIER_KEY_SIZE + sizeof(SUFFIX) - 1)
/* Temporary files older than this at creation are a crashed writer's: removed. */
#define STALE_TEMP_SECONDS 3600

typedef struct disk_tier {
  char* dir;
  size_t dir_len;
  uint64_t max_bytes;
  uint64_t temp_counter;
  kvci_disk_index index;
} disk_tier;

static const char HEX[] = "0123456789abcdef";

/* DIR/XX/NAME.kvtb of a key, into `path` (dir_len + 4 + NAME_LEN + 32 bytes at least). */
static void block_path(const disk_tier* d, const uint8_t key[KVCI_TIER_KEY_SIZE], char* path) {
  memcpy(path, d->dir, d->dir_len);
  char* at = path + d->dir_len;
  *at++ = '/';
  *at++ = HEX[key[32] >> 4];
  *at++ = HEX[key[32] & 15];
  *at++ = '/';
  for (size_t i = 0; i < KVCI_TIER_KEY_SIZE; i++) {
    *at++ = HEX[key[i] >> 4];
    *at++ = HEX[key[i] & 15];
  }
  memcpy(at, SUFFIX, sizeof(SUFFIX));
}

static size_t path_size(const disk_tier* d) { return d->dir_len + 4 + NAME_LEN + 64; }

/* Removes least recently used files until `incoming` more bytes fit under the limit. */
static void make_room(disk_tier* d, uint64_t incoming, char* path) {
  if (!d->max_bytes) return;
  while (d->index.count && d->index.bytes + incoming > d->max_bytes) {
    uint32_t e = d->index.lru_head;
    block_path(d, d->index.entries[e].key, path);
    unlink(path); /* already gone (another process evicted it): the same */
    kvci_disk_index_remove(&d->index, e);
  }
}

/* Writes the whole buffer; 0 or -1. */
static int write_all(int fd, const uint8_t* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/*
 * Whether the file at `path` (already known to be `size` bytes) ends as `value` does. A frame's last bytes are its
 * CRC or MAC, so equal ends mean the same frame in practice; a file written under another authentication key (or
 * flipped in place) differs there, and is replaced instead of being kept as "stored already" for good.
 */
static int same_trailer(const char* path, const uint8_t* value, size_t size) {
  uint8_t end[KVCI_TIER_MAC_SIZE];
  size_t n = size < sizeof end ? size : sizeof end;
  struct stat st;
  const char* not_regular;
  int fd = kvci_regular_open(path, &st, &not_regular);
  if (fd < 0) return 0;
  ssize_t got = pread(fd, end, n, (off_t)(size - n));
  close(fd);
  return got == (ssize_t)n && memcmp(end, value + size - n, n) == 0;
}

/* Stores one value: temporary file, then rename. 0 or -1. */
static int put_one(disk_tier* d, const uint8_t key[KVCI_TIER_KEY_SIZE], const void* value, size_t size, char* path,
                   char* temp, char* scratch) {
  if (d->max_bytes && size > d->max_bytes) return -1; /* never fits */
  block_path(d, key, path);
  uint32_t e = kvci_disk_index_find(&d->index, key);
  struct stat st;
  if (e != UINT32_MAX && stat(path, &st) == 0 && (uint64_t)st.st_size == size && same_trailer(path, value, size)) {
    kvci_disk_index_touch(&d->index, e); /* stored already (the same key is the same bytes) */
    return 0;
  }
  if (e != UINT32_MAX) kvci_disk_index_remove(&d->index, e);
  path[d->dir_len + 3] = '\0';
  if (mkdir(path, 0755) && errno != EEXIST) return -1;
  path[d->dir_len + 3] = '/';
  snprintf(temp, path_size(d), "%s.tmp.%ld.%" PRIu64, path, (long)getpid(), ++d->temp_counter);
  int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int rc = write_all(fd, value, size);
  if (close(fd)) rc = -1;
  if (!rc) {
    make_room(d, size, scratch);
    rc = rename(temp, path);
  }
  if (rc) {
    unlink(temp);
    return -1;
  }
  kvci_disk_index_add(&d->index, key, size); /* out of memory: the file stays, found by the next scan */
  return 0;
}

static size_t disk_put_many(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                            size_t count) {
  disk_tier* d = ctx;
  size_t n = path_size(d), stored = 0;
  char *path = malloc(n), *temp = malloc(n), *scratch = malloc(n);
  for (; path && temp && scratch && stored < count; stored++) {
    uint8_t key[KVCI_TIER_KEY_SIZE];
    kvci_tier_key_encode(&keys[stored], key);
    if (put_one(d, key, values[stored], sizes[stored], path, temp, scratch)) break;
  }
  free(path);
  free(temp);
  free(scratch);
  return stored;
}

/* Bytes per read of a value: small enough that a chunk is still in a core's L2 when landed() checks it. */
#define READ_CHUNK ((size_t)256 << 10)

/* Reads the rest of `fd` into `parts` in order, a chunk at a time, landed() after each (when given); 0 or -1. */
static int read_parts(int fd, const struct iovec* parts, size_t count, kvci_tier_landed_fn landed, void* arg) {
  for (size_t i = 0; i < count; i++) {
    uint8_t* at = parts[i].iov_base;
    for (size_t left = parts[i].iov_len; left;) {
      ssize_t r = read(fd, at, left < READ_CHUNK ? left : READ_CHUNK);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -1; /* an error, or the file shrank since it was opened */
      if (landed) landed(arg, at, (size_t)r);
      at += r;
      left -= (size_t)r;
    }
  }
  return 0;
}

/*
 * Opens the block file of `key` (its path already in `path`); its size in *size. -1 for a miss: something else
 * under a block's name (a FIFO would block a plain open) is one, like a missing file, which leaves the index
 * (evicted by another process).
 */
static int open_block(disk_tier* d, const uint8_t key[KVCI_TIER_KEY_SIZE], const char* path, size_t* size) {
  struct stat st;
  const char* not_regular;
  int fd = kvci_regular_open(path, &st, &not_regular);
  if (fd < 0) {
    uint32_t e = kvci_disk_index_find(&d->index, key);
    if (e != UINT32_MAX) kvci_disk_index_remove(&d->index, e);
    return -1;
  }
  *size = st.st_size > 0 ? (size_t)st.st_size : 0;
  return fd;
}

/* A value of `size` bytes was found in a block file: the LRU index learns it was used. */
static void note_used(disk_tier* d, const uint8_t key[KVCI_TIER_KEY_SIZE], size_t size) {
  uint32_t e = kvci_disk_index_find(&d->index, key);
  if (e != UINT32_MAX)
    kvci_disk_index_touch(&d->index, e);
  else
    kvci_disk_index_add(&d->index, key, size); /* written by another process since the scan */
}

/* One key's turn in a call over keys (for_each_key): its bytes and file path. */
typedef struct key_turn {
  disk_tier* d;
  size_t i;
  uint8_t key[KVCI_TIER_KEY_SIZE];
  char* path;
} key_turn;

/* Calls visit() for each key in order with its encoded bytes and path; -1 without memory for the path. */
static int for_each_key(disk_tier* d, const kvc_tier_key* keys, size_t count, void (*visit)(key_turn*, void*),
                        void* arg) {
  key_turn k = {d, 0, {0}, malloc(path_size(d))};
  if (!k.path) return -1;
  for (; k.i < count; k.i++) {
    kvci_tier_key_encode(&keys[k.i], k.key);
    block_path(d, k.key, k.path);
    visit(&k, arg);
  }
  free(k.path);
  return 0;
}

typedef struct get_call {
  void* const* values;
  size_t capacity;
  size_t* sizes;
  size_t leading;
} get_call;

/* A value into the caller's buffer: its size, or 0 for a miss. */
static void get_one(key_turn* k, void* arg) {
  get_call* g = arg;
  size_t size = 0;
  g->sizes[k->i] = 0;
  int fd = open_block(k->d, k->key, k->path, &size);
  if (fd < 0) return;
  struct iovec all = {g->values[k->i], size};
  int ok = size && size <= g->capacity && !read_parts(fd, &all, 1, NULL, NULL);
  close(fd);
  if (!ok) return;
  note_used(k->d, k->key, size);
  g->sizes[k->i] = size;
  if (g->leading == k->i) g->leading++;
}

/*
 * Every key is looked up, past a miss too: a pool takes the leading run only, but blocks by key (tier_keys.c) want
 * each one, and a hole in a run (a block evicted alone) is rare enough that the reads after it cost little.
 */
static size_t disk_get_many(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity,
                            size_t* sizes, size_t count) {
  get_call g = {values, capacity, sizes, 0};
  return for_each_key(ctx, keys, count, get_one, &g) ? 0 : g.leading;
}

typedef struct find_call {
  size_t size;
  int fd;
} find_call;

/* A value opened for a direct read (tier_internal.h): a regular, non-empty file under the key's name. */
static void find_one(key_turn* k, void* arg) {
  find_call* c = arg;
  c->fd = open_block(k->d, k->key, k->path, &c->size);
  if (c->fd >= 0 && !c->size) { /* an empty file is a miss, as for a get */
    close(c->fd);
    c->fd = -1;
  }
  if (c->fd >= 0) note_used(k->d, k->key, c->size);
}

static int disk_find(void* ctx, const kvc_tier_key* key, size_t* size, intptr_t* handle) {
  find_call c = {0, -1};
  if (for_each_key(ctx, key, 1, find_one, &c) || c.fd < 0) return 0;
  *size = c.size;
  *handle = c.fd;
  return 1;
}

static int disk_read(void* ctx, intptr_t handle, const struct iovec* parts, size_t count, kvci_tier_landed_fn landed,
                     void* arg) {
  (void)ctx;
  int rc = read_parts((int)handle, parts, count, landed, arg);
  close((int)handle);
  return rc;
}

static void disk_drop(void* ctx, intptr_t handle) {
  (void)ctx;
  close((int)handle);
}

typedef struct exists_call {
  uint8_t* found;
  size_t n;
} exists_call;

/* A key exists when a regular, non-empty file has its name: one stat, no read (the frame is checked by a get). */
static void exists_one(key_turn* k, void* arg) {
  exists_call* x = arg;
  struct stat st;
  x->found[k->i] = stat(k->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  x->n += x->found[k->i];
}

static size_t disk_exists_many(void* ctx, const kvc_tier_key* keys, uint8_t* found, size_t count) {
  exists_call x = {found, 0};
  return for_each_key(ctx, keys, count, exists_one, &x) ? 0 : x.n;
}

static void disk_destroy(void* ctx) {
  disk_tier* d = ctx;
  if (!d) return;
  kvci_disk_index_free(&d->index);
  free(d->dir);
  free(d);
}

/* ---- the scan of a restarted process ------------------------------------ */

typedef struct found_file {
  uint8_t key[KVCI_TIER_KEY_SIZE];
  uint64_t bytes;
  int64_t mtime_ns;
} found_file;

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Whether `name` is a block file's name; its key into `key`. */
static int parse_name(const char* name, uint8_t key[KVCI_TIER_KEY_SIZE]) {
  if (strlen(name) != NAME_LEN || strcmp(name + 2 * KVCI_TIER_KEY_SIZE, SUFFIX)) return 0;
  for (size_t i = 0; i < KVCI_TIER_KEY_SIZE; i++) {
    int hi = hex_digit(name[2 * i]), lo = hex_digit(name[2 * i + 1]);
    if (hi < 0 || lo < 0) return 0;
    key[i] = (uint8_t)(hi << 4 | lo);
  }
  return 1;
}

static int by_mtime(const void* a, const void* b) {
  int64_t x = ((const found_file*)a)->mtime_ns, y = ((const found_file*)b)->mtime_ns;
  return (x > y) - (x < y);
}

/* Lists DIR/XX/ into `*files`; removes stale temporary files. 0, or -1 (out of memory). */
static int scan_sub(const disk_tier* d, const char* sub, found_file** files, size_t* n, size_t* cap) {
  DIR* dir = opendir(sub);
  if (!dir) return 0;
  size_t sub_len = strlen(sub);
  char* path = malloc(sub_len + 512);
  int rc = path ? 0 : -1;
  struct dirent* ent;
  time_t now = time(NULL);
  while (!rc && (ent = readdir(dir))) {
    if (ent->d_name[0] == '.' || strlen(ent->d_name) > 400) continue;
    snprintf(path, sub_len + 512, "%s/%s", sub, ent->d_name);
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
    found_file f;
    if (!parse_name(ent->d_name, f.key)) {
      if (strstr(ent->d_name, SUFFIX ".tmp.") && now - st.st_mtime > STALE_TEMP_SECONDS) unlink(path);
      continue;
    }
    if (f.key[32] != (uint8_t)(hex_digit(sub[strlen(sub) - 2]) << 4 | hex_digit(sub[strlen(sub) - 1]))) continue;
    f.bytes = (uint64_t)st.st_size;
    f.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (*n == *cap) {
      size_t c = *cap ? 2 * *cap : 256;
      found_file* grown = realloc(*files, c * sizeof(*grown));
      if (!grown) {
        rc = -1;
        break;
      }
      *files = grown;
      *cap = c;
    }
    (*files)[(*n)++] = f;
  }
  (void)d;
  free(path);
  closedir(dir);
  return rc;
}

static int scan(disk_tier* d) {
  found_file* files = NULL;
  size_t n = 0, cap = 0;
  char* sub = malloc(d->dir_len + 8);
  if (!sub) return -1;
  int rc = 0;
  for (int x = 0; x < 256 && !rc; x++) {
    snprintf(sub, d->dir_len + 8, "%s/%c%c", d->dir, HEX[x >> 4], HEX[x & 15]);
    rc = scan_sub(d, sub, &files, &n, &cap);
  }
  free(sub);
  if (!rc && n) qsort(files, n, sizeof(*files), by_mtime);
  for (size_t i = 0; !rc && i < n; i++) rc = kvci_disk_index_add(&d->index, files[i].key, files[i].bytes);
  free(files);
  return rc;
}

/* mkdir -p: 0, or -1 with errno. */
static int make_dirs(char* path) {
  for (char* p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int rc = mkdir(path, 0755);
    *p = '/';
    if (rc && errno != EEXIST) return -1;
  }
  return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

kvc_error* kvc_disk_tier_create(const kvc_disk_tier_options* given, kvc_tier** out) {
  static const char* FN = "kvc_disk_tier_create";
  if (!given) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options is NULL", FN);
  kvc_disk_tier_options full;
  kvc_error* bad = kvci_read_disk_tier_options(FN, "options", given, &full);
  if (bad) return bad;
  const kvc_disk_tier_options* options = &full;
  if (!options->directory || !*options->directory)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->directory is %s; name the tier's directory", FN,
                    options->directory ? "empty" : "NULL");
  if (options->reserved)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->reserved is %" PRIu64 "; it is 0", FN,
                    options->reserved);
  if ((bad = kvci_tier_auth_check(FN, "options->auth_key", options->auth_key, options->auth_key_len))) return bad;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  disk_tier* d = calloc(1, sizeof(*d));
  size_t len = strlen(options->directory);
  while (len > 1 && options->directory[len - 1] == '/') len--;
  if (!d || !(d->dir = malloc(len + 1))) {
    free(d);
    return kvci_err_oom();
  }
  memcpy(d->dir, options->directory, len);
  d->dir[len] = '\0';
  d->dir_len = len;
  d->max_bytes = options->max_bytes;
  struct stat st;
  /* The reason of the first check that fails (mkdir leaves EEXIST in errno when a file is in the way). */
  int why = make_dirs(d->dir) || stat(d->dir, &st) ? errno
            : !S_ISDIR(st.st_mode)                 ? ENOTDIR
            : access(d->dir, R_OK | W_OK | X_OK)   ? errno
                                                   : 0;
  if (why) {
    kvc_error* e = kvci_err(KVC_ERROR_IO, "%s: directory '%s' cannot be created or used: %s", FN, d->dir,
                            strerror(why));
    disk_destroy(d);
    return e;
  }
  if (scan(d)) {
    disk_destroy(d);
    return kvci_err_oom();
  }
  if (d->max_bytes && d->index.bytes > d->max_bytes) {
    char* path = malloc(path_size(d));
    if (path) make_room(d, 0, path);
    free(path);
  }
  static const kvc_tier_ops OPS = {sizeof(kvc_tier_ops), disk_put_many, disk_get_many, disk_destroy,
                                   disk_exists_many};
  char name[64];
  snprintf(name, sizeof name, "disk");
  kvc_error* e = kvc_tier_create(&OPS, d, name, out);
  if (!e) {
    kvci_tier_auth_set(*out, options->auth_key, options->auth_key_len);
    static const kvci_tier_direct DIRECT = {disk_find, disk_read, disk_drop};
    (*out)->direct = &DIRECT;
  }
  return e;
}
