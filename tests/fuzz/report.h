/*
 * report.h: how the differential fuzzer tells what happened: the trace of
 * operations of the current input, and the abort that reports a divergence.
 */
#ifndef KVC_FUZZ_REPORT_H
#define KVC_FUZZ_REPORT_H

#include <stddef.h>

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

/* Appends to the trace. */
KVC_FUZZ_PRINTF void trace(const char* fmt, ...);
/* Starts the trace of a new input. */
void trace_reset(void);
/* Prints the trace and what differed, then aborts (libFuzzer reports a crash). */
KVC_FUZZ_NORETURN void fail(const char* fmt, ...);
/* Makes a sanitizer report inside the library print the trace too (libFuzzer still saves the input). */
void install_death_callback(void);
/* Fails unless `e` has code `want` and a message; destroys `e`. */
void expect_code(kvc_error* e, kvc_code want, const char* what);

/* A batch split's out-parameters, which a failed split must leave alone: out[k] starts as &out[k] (marked
 * here) and the count as 12345. */
#define SPLIT_COUNT_UNSET 12345u
void split_outputs_mark(kvc_cache** out, size_t n);
/* Fails when a failed batch_split wrote *count or one of out[0..n). */
void split_outputs_untouched(kvc_cache* const* out, size_t n, size_t count);

#endif /* KVC_FUZZ_REPORT_H */
