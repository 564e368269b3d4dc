/*
 * pool_model.c: see pool_model.h. Every rule below quotes the sentence of
 * kvcache/pool.h it models.
 */
#include "pool_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pm_die(const char* what) {
  fprintf(stderr, "pool model: %s\n", what);
  abort();
}

/* ----------------------------------------------------------- helpers */

int pm_is_attention(const pool_model* m, uint32_t g) { return m->g[g].kind != KVC_POOL_GROUP_RECURRENT; }

static uint32_t ceil_div(uint64_t a, uint32_t b) { return (uint32_t)((a + b - 1) / b); }

uint32_t pm_table_len(const pool_model* m, const pm_seq* s, uint32_t g) {
  return pm_is_attention(m, g) ? ceil_div(s->len, m->g[g].bs) : 0;
}

/* "SLIDING: a query attends to itself and window - 1 tokens before it"; "CHUNKED: attention within chunks of
 * `window` tokens"; "the window of the first uncommitted token (the window is judged from the committed
 * length ...)". */
uint64_t pm_window_start(const pm_group* g, uint64_t committed) {
  if (g->kind == KVC_POOL_GROUP_SLIDING)
    return committed + 1 > (uint64_t)g->window ? committed + 1 - (uint64_t)g->window : 0;
  if (g->kind == KVC_POOL_GROUP_CHUNKED) return committed / (uint64_t)g->window * (uint64_t)g->window;
  return 0;
}

/* Whether block index b holds only tokens before `start` (it left the window). */
static int left_window(const pm_group* g, uint64_t b, uint64_t start) { return (b + 1) * g->bs <= start; }

int64_t pm_first_missing(const pool_model* m, const pm_seq* s, uint32_t g) {
  for (uint32_t b = 0; b < pm_table_len(m, s, g); b++)
    if (s->table[g][b] == 0) return (int64_t)b * m->g[g].bs;
  return -1;
}

static int pm_free(const pm_block* x) { return x->ref == 0 && !x->cached; }
static int pm_evictable(const pm_block* x) { return x->ref == 0 && x->cached && !x->pinned; }

void pm_stats_of(const pool_model* m, uint32_t g, pm_stats* out) {
  memset(out, 0, sizeof *out);
  out->num_blocks = m->g[g].nb - 1;
  for (uint32_t x = 1; x < m->g[g].nb; x++) {
    const pm_block* b = &m->b[g][x];
    if (pm_free(b)) out->free_blocks++;
    /* "cached_blocks: cached, unreferenced and not pinned"; "pinned_blocks: ... (referenced or not; free +
     * cached + used + unreferenced pinned = num_blocks)". */
    if (pm_evictable(b)) out->cached_blocks++;
    if (b->ref > 0) out->used_blocks++;
    if (b->pinned) out->pinned_blocks++;
  }
  out->prefix_queries = m->queries[g];
  out->prefix_hits = m->hits[g];
  out->evictions = m->evictions[g];
}

/* The chain of hashes of the full blocks of `tokens` (n of them) in blocks of `bs`, from `root`: out[k] is block
 * k's hash; returns how many. */
typedef uint8_t pm_hash[KVC_BLOCK_HASH_SIZE];

static uint32_t chain_of(const uint8_t root[32], const int32_t* tokens, uint64_t n, uint32_t bs, pm_hash* out) {
  uint32_t count = (uint32_t)(n / bs);
  for (uint32_t k = 0; k < count; k++) {
    kvc_error* e = kvc_block_hash(k ? out[k - 1] : root, tokens + (size_t)k * bs, bs, NULL, 0, out[k]);
    if (e) pm_die(kvc_error_message(e));
  }
  return count;
}

/* A cached block of group g with `hash`, or 0. */
static uint32_t find_cached(const pool_model* m, uint32_t g, const uint8_t hash[32]) {
  for (uint32_t x = 1; x < m->g[g].nb; x++)
    if (m->b[g][x].cached && !memcmp(m->b[g][x].hash, hash, 32)) return x;
  return 0;
}

static uint64_t count_available(const pool_model* m, uint32_t g) {
  uint64_t n = 0;
  for (uint32_t x = 1; x < m->g[g].nb; x++)
    if (pm_free(&m->b[g][x]) || pm_evictable(&m->b[g][x])) n++;
  return n;
}

/* ------------------------------------------------------------- events */

void pm_begin_call(pool_model* m) { m->call++; }

/* "event_capacity: events kept until pulled; 0 = no events. When full, the oldest are dropped (ids show the
 * gap)"; "id: 1, 2, 3, ... per pool". */
static void push_event(pool_model* m, kvc_pool_event_kind kind, uint32_t g, uint32_t block, const uint8_t* hash,
                       const uint8_t* parent, uint32_t ntok, int check_block_id) {
  if (m->event_cap == 0) return;
  pm_event ev;
  memset(&ev, 0, sizeof ev);
  ev.e.id = m->next_id++;
  ev.e.kind = kind;
  ev.e.group = g;
  if (hash) memcpy(ev.e.block_hash, hash, 32);
  if (parent) memcpy(ev.e.parent_hash, parent, 32);
  ev.e.num_tokens = ntok;
  ev.e.block_id = block;
  ev.call = m->call;
  ev.check_block_id = check_block_id;
  if (m->q_count == m->event_cap) {
    m->last_dropped_call = m->q[m->q_head].call;
    m->dropped++;
    m->q_head = (m->q_head + 1) % m->event_cap;
    m->q_count--;
  }
  m->q[(m->q_head + m->q_count) % m->event_cap] = ev;
  m->q_count++;
}

size_t pm_events_pull(pool_model* m, pm_event* out, size_t cap) {
  size_t n = 0;
  while (n < cap && m->q_count) {
    out[n++] = m->q[m->q_head];
    m->q_head = (m->q_head + 1) % m->event_cap;
    m->q_count--;
  }
  return n;
}

/* ---------------------------------------------------------- blocks */

/* "One reference less": an unreferenced cached block stays (evictable from now on, unless pinned), another is
 * free. "0: never hashed, released blocks are freed". */
static void release(pool_model* m, uint32_t g, uint32_t x) {
  pm_block* b = &m->b[g][x];
  if (b->ref <= 0) pm_die("release of an unreferenced block");
  if (--b->ref > 0) return;
  b->stamp = m->call;
  if (!b->cached) memset(b->row, 0, sizeof b->row);
}

/* "a cached block was evicted (its hash is no longer found)". */
static void evict(pool_model* m, uint32_t g, uint32_t x) {
  pm_block* b = &m->b[g][x];
  m->n_checkpoint_evicted += !pm_is_attention(m, g);
  push_event(m, KVC_POOL_EVENT_BLOCK_REMOVED, g, x, b->hash, NULL, 0, pm_is_attention(m, g));
  b->cached = 0;
  m->evictions[g]++;
}

/* A slot of a recurrent group, chosen by the model (their ids are not observable): "taken from the free list,
 * then by evicting the least recently used cached blocks". `keep` is not evicted (the checkpoint being read).
 * Returns 0 when none is available. */
static uint32_t take_slot(pool_model* m, uint32_t g, uint32_t keep) {
  for (uint32_t x = 1; x < m->g[g].nb; x++)
    if (pm_free(&m->b[g][x])) return x;
  uint32_t best = 0;
  for (uint32_t x = 1; x < m->g[g].nb; x++)
    if (x != keep && pm_evictable(&m->b[g][x]) && (!best || m->b[g][x].stamp < m->b[g][best].stamp)) best = x;
  if (best) evict(m, g, best);
  return best;
}

static uint64_t slots_available(const pool_model* m, uint32_t g, uint32_t keep) {
  return count_available(m, g) - (keep && pm_evictable(&m->b[g][keep]) ? 1 : 0);
}

/* "a recurrent group ... a checkpoint at its end": the cached checkpoint of the first `n` tokens, or 0. */
static uint32_t find_checkpoint(const pool_model* m, uint32_t g, const uint8_t root[32], const int32_t* tokens,
                                uint64_t n) {
  if (!m->caching || n == 0 || n % m->g[g].bs) return 0;
  pm_hash chain[PM_LEN];
  uint32_t k = chain_of(root, tokens, n, m->g[g].bs, chain);
  return find_cached(m, g, chain[k - 1]);
}

/* A checkpoint read (match or truncate) was used: it becomes the most recently used. */
static void touch(pool_model* m, uint32_t g, uint32_t x) {
  if (m->b[g][x].ref == 0) m->b[g][x].stamp = m->call;
}

/* ------------------------------------------------------ pool, sequences */

void pm_init(pool_model* m, const kvc_pool_options* o) {
  memset(m, 0, sizeof *m);
  m->dtype = o->dtype;
  m->layout = o->layout;
  m->caching = o->enable_prefix_caching;
  m->seed_len = (uint32_t)o->hash_seed_len;
  if (m->seed_len) memcpy(m->seed, o->hash_seed, m->seed_len);
  m->event_cap = o->event_capacity;
  m->ng = o->num_groups;
  m->nl = o->num_layers;
  for (uint32_t g = 0; g < m->ng; g++) {
    m->g[g].kind = o->groups[g].kind;
    m->g[g].bs = o->groups[g].block_size;
    m->g[g].nb = o->groups[g].num_blocks;
    m->g[g].window = o->groups[g].window;
  }
  for (uint32_t l = 0; l < m->nl; l++) {
    const kvc_pool_layer_options* lo = &o->layers[l];
    pm_layer* L = &m->l[l];
    L->group = lo->group;
    L->H = lo->num_kv_heads;
    L->Dk = lo->key_head_dim;
    L->Dv = lo->value_head_dim ? lo->value_head_dim : lo->key_head_dim;
    L->C = lo->conv_dim;
    L->K = lo->conv_kernel;
    L->N = lo->ssm_state_size;
  }
  m->next_id = 1;
}

void pm_seq_create(pool_model* m, int i, const void* salt, size_t salt_len) {
  pm_seq* s = &m->s[i];
  memset(s, 0, sizeof *s);
  s->used = 1;
  kvc_error* e = kvc_block_hash_root(m->seed, m->seed_len, salt, salt_len, s->root);
  if (e) pm_die(kvc_error_message(e));
}

/* "Releases the sequence's blocks ... Blocks that are cached stay in the pool, reusable, until evicted (or kept
 * while pinned); the others are free at once." */
void pm_seq_destroy(pool_model* m, int i) {
  pm_seq* s = &m->s[i];
  for (uint32_t g = 0; g < m->ng; g++) {
    if (pm_is_attention(m, g)) {
      for (uint32_t b = pm_table_len(m, s, g); b-- > 0;)
        if (s->table[g][b]) release(m, g, s->table[g][b]);
    } else if (s->live[g]) {
      release(m, g, s->live[g]);
    }
  }
  memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------- match_prefix */

/* Whether group g can supply a prefix of `n` tokens: "a full group needs every block of it, a sliding or
 * chunked group those the last token still attends to, a recurrent group a checkpoint at its end". CHOICE:
 * "the last token" is the next one computed (token n, the first not matched), so a sliding group needs the
 * blocks of its window - 1 earlier tokens, as reserve keeps them (pm_window_start). */
static int group_has_prefix(const pool_model* m, uint32_t g, const pm_hash* chain, uint64_t n) {
  const pm_group* G = &m->g[g];
  if (n % G->bs) return 0;
  if (G->kind == KVC_POOL_GROUP_RECURRENT) return find_cached(m, g, chain[n / G->bs - 1]) != 0;
  uint64_t start = pm_window_start(G, n);
  for (uint64_t b = 0; b < n / G->bs; b++)
    if (!left_window(G, b, start) && !find_cached(m, g, chain[b])) return 0;
  return 1;
}

kvc_code pm_match(const pool_model* m, int i, const int32_t* tokens, size_t n, uint64_t* matched) {
  const pm_seq* s = &m->s[i];
  *matched = 0;
  for (size_t k = 0; k < n; k++)
    if (tokens[k] < 0) return KVC_ERROR_INVALID_ARGUMENT;
  if (s->len) return KVC_ERROR_INVALID_ARGUMENT;
  if (!m->caching || n < 2) return KVC_OK;
  /* "the longest cached prefix ... a whole number of blocks of every group, found in every group ... At most
   * num_tokens - 1 tokens". */
  static pm_hash chains[PM_GROUPS][PM_LEN];
  uint64_t best = 0;
  for (uint32_t g = 0; g < m->ng; g++) chain_of(s->root, tokens, n - 1, m->g[g].bs, chains[g]);
  for (uint64_t len = n - 1; len > 0 && !best; len--) {
    int ok = 1;
    for (uint32_t g = 0; g < m->ng && ok; g++) ok = group_has_prefix(m, g, chains[g], len);
    if (ok) best = len;
  }
  *matched = best;
  /* "OUT_OF_MEMORY (no slot for a recurrent group's live state)". */
  if (best)
    for (uint32_t g = 0; g < m->ng; g++)
      if (!pm_is_attention(m, g) && !s->live[g] &&
          slots_available(m, g, find_checkpoint(m, g, s->root, tokens, best)) == 0)
        return KVC_ERROR_OUT_OF_MEMORY;
  return KVC_OK;
}

int pm_match_apply(pool_model* m, int i, const int32_t* tokens, size_t n, uint64_t matched,
                   const int32_t* const* tables, char* why, size_t why_size) {
  pm_seq* s = &m->s[i];
  /* "prefix_queries: blocks match_prefix could have matched since creation ((num_tokens - 1) / block_size per
   * call)"; "prefix_hits: of which the matches covered" (in a sliding group, also those outside the window).
   * CHOICE: counted with prefix caching off too. */
  for (uint32_t g = 0; g < m->ng && n >= 1; g++) {
    m->queries[g] += (n - 1) / m->g[g].bs;
    m->hits[g] += matched / m->g[g].bs;
  }
  if (!matched) return 1;
  memcpy(s->tok, tokens, matched * sizeof *tokens);
  s->len = s->committed = (uint32_t)matched;
  for (uint32_t g = 0; g < m->ng; g++) {
    const pm_group* G = &m->g[g];
    if (!pm_is_attention(m, g)) {
      uint32_t cp = find_checkpoint(m, g, s->root, tokens, matched);
      if (!s->live[g]) {
        s->live[g] = take_slot(m, g, cp);
        m->b[g][s->live[g]].ref = 1;
      }
      for (uint32_t l = 0; l < m->nl; l++)
        if (m->l[l].group == g) s->state[l] = m->b[g][cp].row[0][l];
      touch(m, g, cp);
      continue;
    }
    uint64_t start = pm_window_start(G, matched);
    pm_hash chain[PM_LEN];
    chain_of(s->root, tokens, matched, G->bs, chain);
    for (uint32_t b = 0; b < matched / G->bs; b++) {
      int32_t got = tables[g][b];
      if (left_window(G, b, start)) {
        if (got != 0) {
          snprintf(why, why_size, "group %u: block index %u left the window: table holds %d, expected 0", g, b, got);
          return 0;
        }
        continue;
      }
      if (got <= 0 || (uint32_t)got >= G->nb || !m->b[g][got].cached || memcmp(m->b[g][got].hash, chain[b], 32)) {
        snprintf(why, why_size, "group %u: matched block index %u is block %d, not a cached block of its hash", g, b,
                 got);
        return 0;
      }
      s->table[g][b] = (uint32_t)got;
      m->b[g][got].ref++;
      for (uint32_t r = 0; r < G->bs; r++)
        for (uint32_t l = 0; l < m->nl; l++)
          if (m->l[l].group == g) s->want[b * G->bs + r][l] = m->b[g][got].row[r][l];
    }
  }
  return 1;
}

/* ---------------------------------------------------------- reserve */

void pm_reserve_need(const pool_model* m, int i, uint64_t n, uint64_t take[PM_GROUPS], uint64_t give[PM_GROUPS]) {
  const pm_seq* s = &m->s[i];
  for (uint32_t g = 0; g < m->ng; g++) {
    const pm_group* G = &m->g[g];
    take[g] = give[g] = 0;
    if (!pm_is_attention(m, g)) {
      take[g] = s->live[g] ? 0 : 1; /* "recurrent slots included" */
      continue;
    }
    uint32_t old_blocks = ceil_div(s->len, G->bs);
    take[g] = ceil_div(s->len + n, G->bs) - old_blocks;
    /* "Sliding and chunked groups give back the blocks that left the window": those nobody else holds become
     * available (unless pinned). */
    uint64_t start = pm_window_start(G, s->committed);
    for (uint32_t b = 0; b < old_blocks; b++) {
      uint32_t x = s->table[g][b];
      if (x && left_window(G, b, start) && m->b[g][x].ref == 1 && !m->b[g][x].pinned) give[g]++;
    }
    if (s->len % G->bs) {
      uint32_t last = s->table[g][s->len / G->bs];
      /* "a shared or cached last block is first copied". CHOICE (the header leaves the order open): the
       * sequence lets go of the block before the copy is taken, so when it held the block alone the release
       * counts like a window's (and the take may evict that very block, whose bytes are then in place). */
      if (last && (m->b[g][last].ref > 1 || m->b[g][last].cached)) {
        take[g]++;
        if (m->b[g][last].ref == 1 && !m->b[g][last].pinned) give[g]++;
      }
    }
  }
}

kvc_code pm_reserve(const pool_model* m, int i, const int32_t* tokens, size_t n, uint32_t* oom_group) {
  if (n == 0) return KVC_ERROR_INVALID_ARGUMENT;
  for (size_t k = 0; k < n; k++)
    if (tokens[k] < 0) return KVC_ERROR_INVALID_ARGUMENT;
  uint64_t take[PM_GROUPS], give[PM_GROUPS];
  pm_reserve_need(m, i, n, take, give);
  for (uint32_t g = 0; g < m->ng; g++)
    if (take[g] > count_available(m, g) + give[g]) {
      *oom_group = g;
      return KVC_ERROR_OUT_OF_MEMORY;
    }
  return KVC_OK;
}

/*
 * Checks the blocks the library took in group g (ids[0..k)): distinct, not
 * referenced, "taken from the free list, then by evicting the least recently
 * used cached blocks"; then evicts the cached ones.
 */
static int take_learned(pool_model* m, uint32_t g, const uint32_t* ids, uint32_t k, char* why, size_t why_size) {
  uint32_t nfree = 0, free_taken = 0;
  for (uint32_t x = 1; x < m->g[g].nb; x++) nfree += pm_free(&m->b[g][x]);
  uint64_t newest_taken = 0;
  for (uint32_t a = 0; a < k; a++) {
    uint32_t x = ids[a];
    if (x == 0 || x >= m->g[g].nb) {
      snprintf(why, why_size, "group %u: a new block has id %u (valid: 1..%u)", g, x, m->g[g].nb - 1);
      return 0;
    }
    for (uint32_t c = 0; c < a; c++)
      if (ids[c] == x) {
        snprintf(why, why_size, "group %u: block %u taken twice by one reserve", g, x);
        return 0;
      }
    const pm_block* b = &m->b[g][x];
    if (pm_free(b)) {
      free_taken++;
    } else if (pm_evictable(b)) {
      if (b->stamp > newest_taken) newest_taken = b->stamp;
    } else {
      snprintf(why, why_size, "group %u: took block %u, which is %s", g, x,
               b->ref ? "referenced" : "pinned");
      return 0;
    }
  }
  uint32_t want_free = k < nfree ? k : nfree;
  if (free_taken != want_free) {
    snprintf(why, why_size, "group %u: took %u free blocks of %u free for %u new ones (free blocks go first)", g,
             free_taken, nfree, k);
    return 0;
  }
  for (uint32_t x = 1; x < m->g[g].nb; x++) {
    const pm_block* b = &m->b[g][x];
    int taken = 0;
    for (uint32_t a = 0; a < k; a++) taken |= ids[a] == x;
    if (!taken && pm_evictable(b) && b->stamp < newest_taken) {
      snprintf(why, why_size,
               "group %u: evicted a block released at call %llu but kept block %u, released at call %llu "
               "(least recently used first)",
               g, (unsigned long long)newest_taken, x, (unsigned long long)b->stamp);
      return 0;
    }
  }
  for (uint32_t a = 0; a < k; a++) {
    if (m->b[g][ids[a]].cached) evict(m, g, ids[a]);
    pm_block* b = &m->b[g][ids[a]];
    b->ref = 1;
    memset(b->row, 0, sizeof b->row);
  }
  return 1;
}

int pm_reserve_apply(pool_model* m, int i, const int32_t* tokens, size_t n, const int64_t* slots, char* why,
                     size_t why_size) {
  pm_seq* s = &m->s[i];
  uint32_t L = s->len;
  for (uint32_t g = 0; g < m->ng; g++) {
    const pm_group* G = &m->g[g];
    const int64_t* sg = slots + (size_t)g * n;
    if (!pm_is_attention(m, g)) {
      for (size_t t = 0; t < n; t++)
        if (sg[t] != -1) {
          snprintf(why, why_size, "group %u (recurrent): slot of token %zu is %lld, expected -1", g, t,
                   (long long)sg[t]);
          return 0;
        }
      if (!s->live[g]) {
        s->live[g] = take_slot(m, g, 0);
        if (!s->live[g]) pm_die("reserve: no recurrent slot although the check passed");
        m->b[g][s->live[g]].ref = 1;
        for (uint32_t l = 0; l < m->nl; l++)
          if (m->l[l].group == g) s->state[l] = PM_ZERO; /* CHOICE: a new live state is zeros */
      }
      continue;
    }
    /* Blocks that left the window go back first (blocks_needed counts them against the new ones). */
    uint32_t old_blocks = ceil_div(L, G->bs);
    uint64_t start = pm_window_start(G, s->committed);
    for (uint32_t b = old_blocks; b-- > 0;)
      if (s->table[g][b] && left_window(G, b, start)) {
        release(m, g, s->table[g][b]);
        s->table[g][b] = 0;
      }
    /* The block indices that get a new block, and where each one's first new token is. */
    uint32_t pos[PM_LEN + 1], ids[PM_LEN + 1], k = 0, cow_src = 0;
    uint32_t cow_rows[PM_BS][PM_LAYERS];
    if (L % G->bs) {
      uint32_t last = s->table[g][L / G->bs];
      if (last && (m->b[g][last].ref > 1 || m->b[g][last].cached)) {
        cow_src = last;
        pos[k++] = L / G->bs;
        memcpy(cow_rows, m->b[g][last].row, sizeof cow_rows);
        release(m, g, last);
      }
    }
    for (uint32_t b = old_blocks; b < ceil_div(L + n, G->bs); b++) pos[k++] = b;
    for (uint32_t a = 0; a < k; a++) {
      uint64_t first = (uint64_t)pos[a] * G->bs > L ? (uint64_t)pos[a] * G->bs : L;
      int64_t slot = sg[first - L];
      if (slot < 0 || (uint64_t)slot % G->bs != first % G->bs) {
        snprintf(why, why_size, "group %u: token %llu (position %llu) got slot %lld, not at offset %llu of a block", g,
                 (unsigned long long)(first - L), (unsigned long long)first, (long long)slot,
                 (unsigned long long)(first % G->bs));
        return 0;
      }
      ids[a] = (uint32_t)((uint64_t)slot / G->bs);
    }
    if (!take_learned(m, g, ids, k, why, why_size)) return 0;
    for (uint32_t a = 0; a < k; a++) {
      m->n_cow_in_place += a == 0 && cow_src && ids[0] == cow_src; /* the take evicted the block itself */
      if (a == 0 && cow_src) /* "copy-on-write, all layers of its group": the rows the sequence holds */
        for (uint32_t r = 0; r < L % G->bs; r++)
          for (uint32_t l = 0; l < m->nl; l++) m->b[g][ids[0]].row[r][l] = cow_rows[r][l];
      s->table[g][pos[a]] = ids[a];
    }
    for (size_t t = 0; t < n; t++) {
      uint64_t p = L + t;
      int64_t want = (int64_t)s->table[g][p / G->bs] * G->bs + (int64_t)(p % G->bs);
      if (sg[t] != want) {
        snprintf(why, why_size, "group %u: slot of token %zu (position %llu) is %lld, expected %lld", g, t,
                 (unsigned long long)p, (long long)sg[t], (long long)want);
        return 0;
      }
    }
  }
  for (size_t t = 0; t < n; t++) {
    s->tok[L + t] = tokens[t];
    for (uint32_t l = 0; l < m->nl; l++) s->want[L + t][l] = PM_UNKNOWN;
  }
  /* Rows a copy brought along (the sequence's tokens) keep their contents; new rows are unknown until
   * written. */
  s->len = L + (uint32_t)n;
  return 1;
}

/* A reserve on a copy of the model, for blocks_needed: only what later sequences can see (reference counts of
 * shared blocks, the length); the new blocks are the sequence's own. */
static void simulate_reserve(pool_model* m, int i, uint64_t n) {
  pm_seq* s = &m->s[i];
  for (uint32_t g = 0; g < m->ng; g++) {
    const pm_group* G = &m->g[g];
    if (!pm_is_attention(m, g)) continue;
    uint32_t old_blocks = ceil_div(s->len, G->bs);
    uint64_t start = pm_window_start(G, s->committed);
    for (uint32_t b = 0; b < old_blocks; b++)
      if (s->table[g][b] && left_window(G, b, start)) {
        release(m, g, s->table[g][b]);
        s->table[g][b] = 0;
      }
    if (s->len % G->bs) {
      uint32_t last = s->table[g][s->len / G->bs];
      if (last && (m->b[g][last].ref > 1 || m->b[g][last].cached)) release(m, g, last);
    }
  }
  s->len += (uint32_t)n;
}

void pm_blocks_needed(const pool_model* m, const int* seqs, const uint64_t* n, size_t count,
                      uint64_t out[PM_GROUPS]) {
  static pool_model sim; /* large: not on the stack */
  sim = *m;
  int64_t total[PM_GROUPS] = {0}, peak[PM_GROUPS] = {0};
  for (size_t k = 0; k < count; k++) {
    uint64_t take[PM_GROUPS], give[PM_GROUPS];
    if (!n[k]) continue; /* "A new_tokens[i] of 0 counts nothing" */
    pm_reserve_need(&sim, seqs[k], n[k], take, give);
    for (uint32_t g = 0; g < m->ng; g++) {
      total[g] += (int64_t)take[g] - (int64_t)give[g];
      if (total[g] > peak[g]) peak[g] = total[g];
    }
    simulate_reserve(&sim, seqs[k], n[k]);
  }
  /* "The sequences are taken in order, as reserves in that order run ..., and exactly: reserving them in that
   * order succeeds when each group's entry is at most kvc_pool_stats' free_blocks + cached_blocks." A reserve
   * gets back only its own window's blocks (and its copied last block: CHOICE, pm_reserve_need), so a later
   * sequence's give-backs cannot pay for an earlier one's takes: what makes that promise exact is the most the
   * reserves take at once in that order (the largest running total of take - give), not the final total the
   * sentence before it names ("minus the blocks sliding groups would give back"); for one sequence the two are
   * the same. The model keeps the promise. */
  for (uint32_t g = 0; g < m->ng; g++) out[g] = (uint64_t)peak[g];
}

/* ------------------------------------------------------------ writes */

int pm_writable(const pool_model* m, int i, uint32_t g, uint32_t pos) {
  const pm_seq* s = &m->s[i];
  if (!pm_is_attention(m, g) || pos >= s->len) return 0;
  uint32_t x = s->table[g][pos / m->g[g].bs];
  return x && m->b[g][x].ref == 1 && !m->b[g][x].cached;
}

void pm_write(pool_model* m, int i, uint32_t pos, uint32_t layer, uint32_t nonce) {
  pm_seq* s = &m->s[i];
  uint32_t g = m->l[layer].group;
  uint32_t x = s->table[g][pos / m->g[g].bs];
  m->b[g][x].row[pos % m->g[g].bs][layer] = nonce;
  s->want[pos][layer] = nonce;
}

void pm_state_write(pool_model* m, int i, uint32_t layer, uint32_t nonce) { m->s[i].state[layer] = nonce; }

/* ------------------------------------------------------------ commit */

/* "Declares every reserved token written: blocks that became full are hashed and cached (with a
 * KVC_POOL_EVENT_BLOCK_STORED event each), and a recurrent group checkpoints the live state when the committed
 * length is a multiple of its block size." */
void pm_commit(pool_model* m, int i) {
  pm_seq* s = &m->s[i];
  uint32_t before = s->committed;
  /* CHOICE: with nothing reserved since the last commit there is nothing to declare (no checkpoint either). */
  if (before == s->len) return;
  s->committed = s->len;
  if (!m->caching) return;
  for (uint32_t g = 0; g < m->ng; g++) {
    const pm_group* G = &m->g[g];
    pm_hash chain[PM_LEN];
    uint32_t full = chain_of(s->root, s->tok, s->len, G->bs, chain);
    if (pm_is_attention(m, g)) {
      for (uint32_t b = before / G->bs; b < full; b++) {
        uint32_t x = s->table[g][b];
        if (!x || m->b[g][x].cached) continue; /* shared with a sequence that committed it already */
        /* CHOICE: a hash already cached (the same tokens computed twice) keeps its block; the new block stays
         * uncached and no event is queued. */
        if (find_cached(m, g, chain[b])) {
          m->n_dedup++;
          continue;
        }
        m->b[g][x].cached = 1;
        memcpy(m->b[g][x].hash, chain[b], 32);
        push_event(m, KVC_POOL_EVENT_BLOCK_STORED, g, x, chain[b], b ? chain[b - 1] : s->root, G->bs, 1);
      }
      continue;
    }
    if (!s->live[g] || s->committed == 0 || s->committed % G->bs) continue;
    const uint8_t* h = chain[full - 1];
    const uint8_t* parent = full > 1 ? chain[full - 2] : s->root;
    uint32_t have = find_cached(m, g, h);
    if (have) { /* CHOICE: reaching a checkpoint again is a use of it (LRU) */
      touch(m, g, have);
      continue;
    }
    /* "(skipped, not an error, when no state slot is free or evictable)" */
    uint32_t x = take_slot(m, g, 0);
    if (!x) {
      m->n_checkpoint_skipped++;
      continue;
    }
    pm_block* b = &m->b[g][x];
    b->cached = 1;
    b->ref = 0;
    b->stamp = m->call;
    memcpy(b->hash, h, 32);
    for (uint32_t l = 0; l < m->nl; l++)
      if (m->l[l].group == g) b->row[0][l] = s->state[l];
    push_event(m, KVC_POOL_EVENT_BLOCK_STORED, g, x, h, parent, G->bs, 0);
  }
}

/* -------------------------------------------------------------- fork */

kvc_code pm_fork(pool_model* m, int i, int j) {
  const pm_seq* s = &m->s[i];
  for (uint32_t g = 0; g < m->ng; g++)
    if (!pm_is_attention(m, g) && s->live[g] && count_available(m, g) == 0) return KVC_ERROR_OUT_OF_MEMORY;
  pm_seq* d = &m->s[j];
  *d = *s;
  for (uint32_t g = 0; g < m->ng; g++) {
    if (pm_is_attention(m, g)) {
      for (uint32_t b = 0; b < pm_table_len(m, d, g); b++)
        if (d->table[g][b]) m->b[g][d->table[g][b]].ref++;
    } else if (s->live[g]) {
      d->live[g] = take_slot(m, g, 0); /* "a recurrent group's live state is copied" */
      m->b[g][d->live[g]].ref = 1;
    }
  }
  return KVC_OK;
}

/* ---------------------------------------------------------- truncate */

kvc_code pm_truncate(pool_model* m, int i, uint64_t n) {
  pm_seq* s = &m->s[i];
  if (n > s->len) return KVC_ERROR_OUT_OF_RANGE;
  /* "a recurrent group's live state cannot be rolled back without a checkpoint at num_tokens (restored if one
   * exists; otherwise INVALID_STATE and nothing changes; at 0 tokens the state is zeroed)". CHOICE: keeping
   * every token rolls nothing back. */
  uint32_t restore[PM_GROUPS] = {0};
  if (n == s->len) return KVC_OK;
  for (uint32_t g = 0; g < m->ng; g++) {
    const pm_group* G = &m->g[g];
    if (pm_is_attention(m, g)) {
      /* "A sliding or chunked group that already gave back a block the token after `num_tokens` attends to
       * refuses too (INVALID_STATE)". */
      uint64_t committed = s->committed < n ? s->committed : n;
      for (uint64_t b = pm_window_start(G, committed) / G->bs; b < ceil_div(n, G->bs); b++)
        if (!s->table[g][b]) {
          m->n_truncate_window_refused++;
          return KVC_ERROR_INVALID_STATE;
        }
      continue;
    }
    if (!s->live[g] || n == 0) continue;
    /* CHOICE: "a checkpoint at num_tokens" is one of the sequence's own: at a committed position. */
    if (n <= s->committed) restore[g] = find_checkpoint(m, g, s->root, s->tok, n);
    if (!restore[g]) {
      m->n_rollback_refused++;
      return KVC_ERROR_INVALID_STATE;
    }
  }
  for (uint32_t g = 0; g < m->ng; g++) {
    const pm_group* G = &m->g[g];
    if (pm_is_attention(m, g)) {
      /* "blocks wholly past them are released" (the last first). */
      for (uint32_t b = pm_table_len(m, s, g); b-- > ceil_div(n, G->bs);) {
        if (s->table[g][b]) release(m, g, s->table[g][b]);
        s->table[g][b] = 0;
      }
    } else if (s->live[g]) {
      /* CHOICE: a restore for rollback is not a use of the checkpoint (its LRU place stays). */
      for (uint32_t l = 0; l < m->nl; l++)
        if (m->l[l].group == g) s->state[l] = restore[g] ? m->b[g][restore[g]].row[0][l] : PM_ZERO;
    }
  }
  for (uint64_t p = n; p < s->len; p++) {
    s->tok[p] = 0;
    for (uint32_t l = 0; l < m->nl; l++) s->want[p][l] = PM_UNKNOWN;
  }
  s->len = (uint32_t)n;
  if (s->committed > n) s->committed = (uint32_t)n;
  return KVC_OK;
}

/* -------------------------------------------------- pins and the cache */

/* "Pins the sequence's cached blocks". CHOICE: the cached blocks of the hashes of its committed full blocks in
 * each group: those a window gave back and recurrent checkpoints included, and the cached block of a hash the
 * sequence computed a second time (its own copy stayed uncached). */
void pm_pin(pool_model* m, int i) {
  const pm_seq* s = &m->s[i];
  if (!m->caching) return;
  for (uint32_t g = 0; g < m->ng; g++) {
    pm_hash chain[PM_LEN];
    uint32_t full = chain_of(s->root, s->tok, s->committed, m->g[g].bs, chain);
    for (uint32_t k = 0; k < full; k++) {
      uint32_t x = find_cached(m, g, chain[k]);
      if (x) m->b[g][x].pinned = 1;
    }
  }
}

/* "Unpins every block; they stay cached, evictable again." CHOICE: as the most recently used (the unpinning
 * call's stamp), all of one call alike. */
void pm_unpin_all(pool_model* m) {
  for (uint32_t g = 0; g < m->ng; g++)
    for (uint32_t x = 1; x < m->g[g].nb; x++)
      if (m->b[g][x].pinned) {
        m->b[g][x].pinned = 0;
        if (!m->b[g][x].ref) m->b[g][x].stamp = m->call;
      }
}

/* "Evicts every cached, unreferenced, unpinned block ... and queues a KVC_POOL_EVENT_ALL_CLEARED event. Blocks
 * in use are untouched." CHOICE: no REMOVED event per block and no count in `evictions` ("reclaimed for new
 * data"). */
void pm_clear_cache(pool_model* m) {
  for (uint32_t g = 0; g < m->ng; g++)
    for (uint32_t x = 1; x < m->g[g].nb; x++)
      if (pm_evictable(&m->b[g][x])) {
        m->b[g][x].cached = 0;
        memset(m->b[g][x].row, 0, sizeof m->b[g][x].row);
      }
  push_event(m, KVC_POOL_EVENT_ALL_CLEARED, 0, 0, NULL, NULL, 0, 0);
}
