/*
 * report.h: how the differential fuzzer tells what happened: the trace of
 * operations of the current input, and the abort that reports a divergence.
 */
#ifndef KVC_FUZZ_REPORT_H
#define KVC_FUZZ_REPORT_H

#include <stddef.h>
#include <string.h> /* memset, in FUZZ_START_INPUT */

#include "kvcache.h"

#if defined(__GNUC__) || defined(__clang__)
#  define KVC_FUZZ_NORETURN __attribute__((noreturn, format(printf, 1, 2)))
#  define KVC_FUZZ_PRINTF __attribute__((format(printf, 1, 2)))
#else
#  define KVC_FUZZ_NORETURN
#  define KVC_FUZZ_PRINTF
#endif

extern char* g_trace;    /* the operations of the current input, one line each */
extern int g_echo_trace; /* also print each line as it is added (standalone -trace) */
extern const char* g_fail_title; /* the first line of a divergence report (a target may set its own) */
extern void (*g_on_fail)(void);  /* called when a divergence or a sanitizer report stops the run, when set */

/* Appends to the trace. */
KVC_FUZZ_PRINTF void trace(const char* fmt, ...);
/* Starts the trace of a new input. */
void trace_reset(void);
/* Prints the trace and what differed, then aborts (libFuzzer reports a crash). */
KVC_FUZZ_NORETURN void fail(const char* fmt, ...);
/* Makes a sanitizer report inside the library print the trace too (libFuzzer still saves the input). */
void install_death_callback(void);
/* How each target's LLVMFuzzerTestOneInput starts: its state `c` (a ctx with
 * a reader r and has_cuda) zeroed and reading the input, a new trace, and
 * sanitizer reports inside the library that print it. */
#define FUZZ_START_INPUT(c, data, size)                      \
  do {                                                       \
    memset(&(c), 0, sizeof(c));                              \
    (c).r.p = (data);                                        \
    (c).r.n = (size);                                        \
    (c).has_cuda = (kvc_features() & KVC_FEATURE_CUDA) != 0; \
    trace_reset();                                           \
    install_death_callback();                                \
  } while (0)

/* Fails unless `e` has code `want` and a message; destroys `e`. */
void expect_code(kvc_error* e, kvc_code want, const char* what);

/* A batch split's out-parameters, which a failed split must leave alone: out[k] starts as &out[k] (marked
 * here) and the count as 12345. */
#define SPLIT_COUNT_UNSET 12345u
void split_outputs_mark(kvc_cache** out, size_t n);
/* Fails when a failed batch_split wrote *count or one of out[0..n). */
void split_outputs_untouched(kvc_cache* const* out, size_t n, size_t count);

#endif /* KVC_FUZZ_REPORT_H */
