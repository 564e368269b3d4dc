/*
 * tests/gpu/emulated_probe.c: finds the emulated device plugin the core
 * loads and looks up its exported counters and controls.
 */
#include "emulated_probe.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"

static kvc_emulated_counters_fn counters_fn;
static kvc_emulated_reset_fn reset_fn;
static kvc_emulated_expect_stream_fn expect_fn;
static kvc_emulated_synchronize_fn sync_fn;
static kvc_emulated_fail_fn fail_fn;
static kvc_emulated_fail_counts_fn fail_counts_fn;
static const kvc_backend* table;

int emulated_probe_open(char* why, size_t why_len) {
  if (counters_fn) return 0;
  const char* dir = getenv("KVC_BACKEND_PATH");
  if (!dir || !*dir) {
    snprintf(why, why_len,
             "KVC_BACKEND_PATH is not set; the emulated variants run with KVC_BACKEND_PATH=<build>/tests/gpu/emulated "
             "(ctest sets it)");
    return -1;
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/libkvcache-cuda.so", dir);
  /* RTLD_LOCAL as the core opens it: both get the same handle, the one copy of the plugin's state. */
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, why_len, "cannot load %s: %s", path, dlerror());
    return -1;
  }
  counters_fn = (kvc_emulated_counters_fn)dlsym(h, KVC_EMULATED_COUNTERS_SYMBOL);
  reset_fn = (kvc_emulated_reset_fn)dlsym(h, KVC_EMULATED_RESET_SYMBOL);
  expect_fn = (kvc_emulated_expect_stream_fn)dlsym(h, KVC_EMULATED_EXPECT_STREAM_SYMBOL);
  sync_fn = (kvc_emulated_synchronize_fn)dlsym(h, KVC_EMULATED_SYNCHRONIZE_SYMBOL);
  fail_fn = (kvc_emulated_fail_fn)dlsym(h, KVC_EMULATED_FAIL_SYMBOL);
  fail_counts_fn = (kvc_emulated_fail_counts_fn)dlsym(h, KVC_EMULATED_FAIL_COUNTS_SYMBOL);
  const kvc_backend* (*entry)(uint32_t) = (const kvc_backend* (*)(uint32_t))dlsym(h, "kvc_backend_entry");
  if (!counters_fn || !reset_fn || !expect_fn || !sync_fn || !fail_fn || !fail_counts_fn || !entry) {
    snprintf(why, why_len,
             "%s is not the emulated device plugin (no %s symbol): KVC_BACKEND_PATH must name "
             "<build>/tests/gpu/emulated for the emulated variants",
             path, KVC_EMULATED_COUNTERS_SYMBOL);
    counters_fn = NULL;
    return -1;
  }
  table = entry(KVC_BACKEND_API_VERSION);
  return 0;
}

int emulated_probe_device_count(void) { return table ? table->device_count(table->ctx) : 0; }
uint32_t emulated_probe_api_version(void) { return table ? table->api_version : 0; }
const kvc_backend* emulated_probe_backend(void) { return table; }

void emulated_probe_counters(kvc_emulated_counters* out) { counters_fn(out); }
void emulated_probe_reset(void) { reset_fn(); }
void emulated_probe_expect_stream(int enable, void* stream) { expect_fn(enable, stream); }
void emulated_probe_synchronize(void) { sync_fn(); }
void emulated_probe_fail(const char* op, int64_t n) { fail_fn(op, n); }
void emulated_probe_fail_counts(int64_t* calls, int64_t* injected, char* entry, size_t entry_len) {
  fail_counts_fn(calls, injected, entry, entry_len);
}
