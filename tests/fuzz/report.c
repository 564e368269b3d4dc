/*
 * report.c: see report.h.
 */
#include "report.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

char* g_trace;
int g_echo_trace;
const char* g_fail_title = "kvcache differential fuzzer: the library and the reference model disagree";
void (*g_on_fail)(void);
static size_t g_trace_len, g_trace_cap;

void trace(const char* fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(g_trace ? g_trace + g_trace_len : NULL, g_trace ? g_trace_cap - g_trace_len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (g_trace && g_trace_len + (size_t)n < g_trace_cap) {
      if (g_echo_trace) fputs(g_trace + g_trace_len, stdout), fflush(stdout);
      g_trace_len += (size_t)n;
      return;
    }
    size_t cap = (g_trace_cap + (size_t)n + 1) * 2;
    char* grown = realloc(g_trace, cap);
    if (!grown) abort();
    g_trace = grown;
    g_trace_cap = cap;
  }
}

void trace_reset(void) {
  g_trace_len = 0;
  if (g_trace) g_trace[0] = '\0';
}

void fail(const char* fmt, ...) {
  fprintf(stderr, "\n=== %s ===\n", g_fail_title);
  fprintf(stderr, "--- operations so far (slot: op args -> expected code) ---\n%s", g_trace ? g_trace : "");
  fprintf(stderr, "--- divergence ---\n");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  if (g_on_fail) g_on_fail();
  abort();
}

/*
 * A crash inside the library (a sanitizer report) shows the trace too. The
 * sanitizers call __sanitizer_report_error_summary as they report, before
 * they die; the death callback is left to libFuzzer, which saves the input
 * there (replacing it would lose the artifact of every sanitizer finding).
 */
static int g_trace_on_report;

void __sanitizer_report_error_summary(const char* summary);

void __sanitizer_report_error_summary(const char* summary) {
  fprintf(stderr, "%s\n", summary ? summary : "");
  if (g_trace_on_report)
    fprintf(stderr, "--- operations before the crash (slot: op args -> expected code) ---\n%s",
            g_trace ? g_trace : "");
  if (g_on_fail) g_on_fail();
}

void install_death_callback(void) { g_trace_on_report = 1; }

void expect_code(kvc_error* e, kvc_code want, const char* what) {
  kvc_code got = kvc_error_code(e);
  const char* msg = kvc_error_message(e);
  if (got != want)
    fail("%s: library returned %s (\"%s\"), reference expects %s", what, kvc_code_name(got), msg ? msg : "(null)",
         kvc_code_name(want));
  if (e && (!msg || !msg[0])) fail("%s: error %s has an empty message", what, kvc_code_name(got));
  kvc_error_destroy(e);
}

void split_outputs_mark(kvc_cache** out, size_t n) {
  for (size_t k = 0; k < n; k++) out[k] = (kvc_cache*)&out[k];
}

void split_outputs_untouched(kvc_cache* const* out, size_t n, size_t count) {
  if (count != SPLIT_COUNT_UNSET) fail("a failed batch_split wrote *count");
  for (size_t k = 0; k < n; k++)
    if (out[k] != (const kvc_cache*)&out[k]) fail("a failed batch_split wrote out[%zu]", k);
}
