/*
 * test_errors.h: the checks the bad-input tests share: an error of exactly
 * the expected code whose message names the function, the argument and the
 * value, and a cache left exactly as it was.
 */
#ifndef KVC_TEST_ERRORS_H
#define KVC_TEST_ERRORS_H

#include "test_util.h"

/*
 * Expects `err` to be an error of exactly `code` whose message contains every
 * needle (the function, the argument and the offending value), then destroys
 * it. On failure the whole message is printed, so a vague one is easy to see.
 */
static int expect_err(const char* file, int line, const char* expr, kvc_error* err, kvc_code code,
                      const char* const* needles) {
  tu_checks_total++;
  if (!err) {
    tu_failures_total++;
    fprintf(stderr, "%s:%d: FAILED in %s: %s succeeded, expected %s\n", file, line, tu_current_test, expr,
            kvc_code_name(code));
    return 0;
  }
  kvc_code got = kvc_error_code(err);
  const char* msg = kvc_error_message(err);
  const char* missing = NULL;
  for (const char* const* n = needles; *n && !missing; n++)
    if (!msg || !strstr(msg, *n)) missing = *n;
  int ok = got == code && msg && !missing;
  if (!ok) {
    tu_failures_total++;
    fprintf(stderr, "%s:%d: FAILED in %s: %s returned %s, expected %s", file, line, tu_current_test, expr,
            kvc_code_name(got), kvc_code_name(code));
    if (missing) fprintf(stderr, "; the message lacks \"%s\"", missing);
    fprintf(stderr, "\n    message: \"%s\"\n", msg ? msg : "(null)");
  }
  kvc_error_destroy(err);
  return ok;
}
#define EXPECT_ERR(expr, code, ...) \
  expect_err(__FILE__, __LINE__, #expr, (expr), (code), (const char* const[]){__VA_ARGS__, NULL})

/* EXPECT_ERR, plus: everything observable about `cache` is the same after the call. */
#define EXPECT_ERR_UNCHANGED(cache, expr, code, ...) CHECK_UNCHANGED_BY(cache, EXPECT_ERR(expr, code, __VA_ARGS__))

#endif /* KVC_TEST_ERRORS_H */
