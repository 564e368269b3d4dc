/*
 * test_persist_load_budget.c: kvc_load_options.max_bytes. A file's capacity may lawfully be far past its tokens
 * (a static layer of many slots holding a few), so a file of kilobytes can ask for gigabytes; a load given
 * max_bytes counts what each layer declares before allocating it and refuses with OUT_OF_MEMORY the store that
 * would pass the limit, naming the layer, the bytes and the limit, with nothing kept and *out untouched. The
 * halves of an encoder-decoder file share one limit; option structs of the earlier published sizes load as
 * before.
 */
#include <stdio.h>
#include <stddef.h>

#include "persist_test.h"

#include "../fuzz/files_mutator.c"
#include "../fuzz/reader.c"

#define LAYR ((uint32_t)'L' | (uint32_t)'A' << 8 | (uint32_t)'Y' << 16 | (uint32_t)'R' << 24)
enum { REC_CAP = 6 }; /* the LAYR record's capacity (docs/file-format.md 'Layer record') */

/* Bytes a layer of ps_step's shape (PS_B x PS_H, PS_D-wide f32 keys and values) declares. */
static uint64_t layer_bytes(int64_t max_cache_len) {
  return (uint64_t)PS_B * PS_H * (uint64_t)max_cache_len * (2 * PS_D) * sizeof(float);
}

/* Two static layers of max_cache_len slots holding 3 tokens. */
static kvc_cache* static_cache(int64_t max_cache_len, uint64_t step) {
  kvc_cache* c = NULL;
  kvc_layer_options l[2] = {tu_layer(KVC_LAYER_STATIC, 0, max_cache_len), tu_layer(KVC_LAYER_STATIC, 0, max_cache_len)};
  kvc_cache_options o = tu_custom_options(2, l);
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  ps_step(c, 2, 3, 0, step);
  return c;
}

static int save(const kvc_cache* c, ps_buffer* out) {
  memset(out, 0, sizeof *out);
  return CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, out, NULL));
}

static kvc_load_options with_max(uint64_t max_bytes) {
  kvc_load_options o = KVC_LOAD_OPTIONS_INIT;
  o.max_bytes = max_bytes;
  return o;
}

/* The refusal: OUT_OF_MEMORY whose message has each of `parts`, and *out as it was. */
static void check_refused(kvc_error* e, void* out, void* was, const char* const* parts, int n) {
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_OUT_OF_MEMORY);
  for (int i = 0; i < n; i++)
    if (!CHECK(strstr(kvc_error_message(e), parts[i]) != NULL))
      fprintf(TU_LOG, "  message: %s\n  missing: %s\n", kvc_error_message(e), parts[i]);
  CHECK_EQ_PTR(out, was);
  kvc_error_destroy(e);
}

static void test_a_load_within_max_bytes_is_the_saved_cache(void) {
  kvc_cache* c = static_cache(64, 1);
  ps_buffer file;
  if (!c || !save(c, &file)) goto done;
  const uint64_t total = 2 * layer_bytes(64);
  const uint64_t limits[2] = {0, total}; /* no limit, and exactly what the file declares */
  for (int i = 0; i < 2; i++) {
    kvc_load_options o = with_max(limits[i]);
    kvc_cache* copy = NULL;
    if (!CHECK_OK(kvc_cache_load_buffer(file.data, file.len, &o, &copy))) continue;
    ps_same(c, copy, "the loaded cache");
    kvc_memory_info m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    if (limits[i] && CHECK_OK(kvc_cache_memory(copy, &m))) CHECK(m.bytes_reserved <= limits[i]);
    kvc_cache_destroy(copy);
  }
done:
  free(file.data);
  kvc_cache_destroy(c);
}

static void test_a_load_past_max_bytes_is_refused_at_the_layer_that_passes_it(void) {
  kvc_cache* c = static_cache(64, 2);
  ps_buffer file;
  char path[512];
  if (!c || !save(c, &file)) goto done;
  REQUIRE_OK(kvc_cache_save(c, ps_path(path, sizeof path, "budget"), NULL));
  const uint64_t layer = layer_bytes(64);
  char limit[64], declared[64], before[96];
  snprintf(limit, sizeof limit, "options->max_bytes (%llu)", (unsigned long long)(2 * layer - 1));
  snprintf(declared, sizeof declared, "layer 1 declares %llu bytes of key/value stores", (unsigned long long)layer);
  snprintf(before, sizeof before, "the %llu bytes declared before it", (unsigned long long)layer);
  const char* const parts[] = {"kvc_cache_load", limit, declared, before};
  kvc_load_options o = with_max(2 * layer - 1);
  kvc_cache* out = (kvc_cache*)&file; /* left alone by the refusal */
  check_refused(kvc_cache_load_buffer(file.data, file.len, &o, &out), out, &file, parts, 4);
  check_refused(kvc_cache_load(path, &o, &out), out, &file, parts, 4);
  /* A limit below the first layer stops there. */
  o.max_bytes = 1;
  const char* const first[] = {"layer 0 declares", "options->max_bytes (1)"};
  check_refused(kvc_cache_load_buffer(file.data, file.len, &o, &out), out, &file, first, 2);
  unlink(path);
done:
  free(file.data);
  kvc_cache_destroy(c);
}

/* The case the option is for: a dynamic layer's capacity is its growth, which a file keeps, and the file holds only
   its tokens; so a file of kilobytes may declare a gigabyte (here a re-signed file whose layer 0 says 4M slots
   around its 3 tokens, as a cache cropped from 4M tokens would). Without a limit it loads (memory the kernel maps
   and never touches); with one it is refused before that memory is asked for. */
static void test_a_small_file_declaring_a_gigabyte_is_refused(void) {
  const int64_t slots = (int64_t)1 << 22;
  kvc_cache* c = NULL;
  kvc_layer_options l[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0)};
  kvc_cache_options co = tu_custom_options(2, l);
  ps_buffer b = {0};
  fm_file f;
  memset(&f, 0, sizeof f);
  unsigned char* file = NULL;
  size_t len = 0;
  if (!CHECK_OK(kvc_cache_create(&co, &c))) return;
  ps_step(c, 2, 3, 0, 3);
  if (!CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, &b, NULL)) || !CHECK(fm_parse(b.data, b.len, &f) == 0))
    goto done;
  fm_section* rec = NULL;
  for (size_t i = 0; i < f.count; i++)
    if (f.sections[i].type == LAYR && f.sections[i].index == 0) rec = &f.sections[i];
  if (!CHECK(rec != NULL)) goto done;
  put64(rec->payload + 8 * REC_CAP, (uint64_t)slots);
  if (!CHECK((file = fm_write(&f, &len)) != NULL)) goto done;
  CHECK(len < 64 * 1024);
  kvc_cache* loaded = NULL;
  if (CHECK_OK(kvc_cache_load_buffer(file, len, NULL, &loaded))) {
    kvc_memory_info m;
    memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    if (CHECK_OK(kvc_cache_memory(loaded, &m))) CHECK(m.bytes_reserved >= layer_bytes(slots));
    kvc_cache_destroy(loaded);
  }
  kvc_load_options o = with_max((uint64_t)64 << 20);
  char declared[96];
  snprintf(declared, sizeof declared, "layer 0 declares %llu bytes", (unsigned long long)layer_bytes(slots));
  const char* const parts[] = {declared, "options->max_bytes (67108864)"};
  loaded = NULL;
  check_refused(kvc_cache_load_buffer(file, len, &o, &loaded), loaded, NULL, parts, 2);
done:
  free(file);
  fm_free(&f);
  free(b.data);
  kvc_cache_destroy(c);
}

static void test_the_halves_of_an_encoder_decoder_file_share_the_limit(void) {
  kvc_cache *self = static_cache(32, 4), *cross = static_cache(16, 5);
  kvc_encoder_decoder_cache* ed = NULL;
  ps_buffer file = {0};
  if (!self || !cross || !CHECK_OK(kvc_encoder_decoder_cache_create(self, cross, &ed))) {
    kvc_cache_destroy(self);
    kvc_cache_destroy(cross);
    return;
  }
  if (!CHECK_OK(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &file, NULL))) goto done;
  const uint64_t both = 2 * layer_bytes(32) + 2 * layer_bytes(16);
  kvc_load_options o = with_max(both - 1);
  kvc_encoder_decoder_cache* out = NULL;
  const char* const parts[] = {"kvc_encoder_decoder_cache_load_buffer", "cross-attention layer 1 declares"};
  check_refused(kvc_encoder_decoder_cache_load_buffer(file.data, file.len, &o, &out), out, NULL, parts, 2);
  o.max_bytes = both;
  if (CHECK_OK(kvc_encoder_decoder_cache_load_buffer(file.data, file.len, &o, &out))) kvc_encoder_decoder_cache_destroy(out);
done:
  free(file.data);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* A caller built against 0.6 (24 bytes) or an earlier 0.7 header (32: no max_bytes) has no limit, whatever lies
   past its struct. */
static void test_earlier_option_sizes_load_without_a_limit(void) {
  kvc_cache* c = static_cache(64, 6);
  ps_buffer file;
  if (!c || !save(c, &file)) goto done;
  const uint32_t sizes[2] = {offsetof(kvc_load_options, allocator), offsetof(kvc_load_options, max_bytes)};
  for (int i = 0; i < 2; i++) {
    kvc_load_options o = with_max(1); /* past the caller's struct: never read */
    o.struct_size = sizes[i];
    kvc_cache* copy = NULL;
    if (CHECK_OK(kvc_cache_load_buffer(file.data, file.len, &o, &copy))) {
      ps_same(c, copy, "loaded with an earlier struct size");
      kvc_cache_destroy(copy);
    }
  }
done:
  free(file.data);
  kvc_cache_destroy(c);
}

int main(void) {
  kvc_host_memory_set_retention(0); /* the gigabyte stores go back to the kernel when freed */
  TU_RUN(test_a_load_within_max_bytes_is_the_saved_cache);
  TU_RUN(test_a_load_past_max_bytes_is_refused_at_the_layer_that_passes_it);
  TU_RUN(test_a_small_file_declaring_a_gigabyte_is_refused);
  TU_RUN(test_the_halves_of_an_encoder_decoder_file_share_the_limit);
  TU_RUN(test_earlier_option_sizes_load_without_a_limit);
  return tu_finish();
}
