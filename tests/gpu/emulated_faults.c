/*
 * tests/gpu/emulated_faults.c: failure injection in the emulated device
 * (emulated_faults.h). The message imitates what the CUDA runtime says for
 * the failure the issue found on cards the build has no image for, so that
 * the tests can see the vendor's words reach the caller's error.
 */
#include "emulated_faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emulated_device.h"

static char armed_op[64]; /* "" : any entry */
static int64_t armed_n;   /* 0: disarmed */
static int64_t calls, matching, injected;
static char injected_entry[64];
static int env_read;
static _Thread_local char message[256];
static _Thread_local int has_message;

void emulated_faults_arm(const char* op, int64_t n) {
  snprintf(armed_op, sizeof armed_op, "%s", op && strcmp(op, "any") ? op : "");
  armed_n = n > 0 ? n : 0;
  calls = matching = injected = 0;
  injected_entry[0] = '\0';
  env_read = 1; /* a test's own arming wins over the environment */
}

void emulated_faults_from_env(void) {
  if (env_read) return;
  env_read = 1;
  const char* env = getenv(KVC_EMULATED_FAIL_ENV);
  if (!env || !*env) return;
  const char* colon = strrchr(env, ':');
  char* end = NULL;
  long long n = colon ? strtoll(colon + 1, &end, 10) : 0;
  if (!colon || *end || n < 1 || (size_t)(colon - env) >= sizeof armed_op) {
    fprintf(stderr, "kvcache emulated device: %s=\"%s\" is not \"<entry>:<n>\" with n >= 1; no failure injected\n",
            KVC_EMULATED_FAIL_ENV, env);
    return;
  }
  char op[sizeof armed_op];
  memcpy(op, env, (size_t)(colon - env));
  op[colon - env] = '\0';
  emulated_faults_arm(op, n);
}

int emulated_fault_due(const char* op) {
  emulated_faults_from_env();
  has_message = 0; /* the message describes the last call of this thread, failed or not */
  calls++;
  /* "copy_tier_4d(offload)" matches "copy_tier_4d": the entry's name, then what the call does. */
  size_t len = strlen(armed_op);
  if (len && (strncmp(op, armed_op, len) || (op[len] && op[len] != '('))) return 0;
  if (!armed_n || ++matching != armed_n) return 0;
  injected++;
  snprintf(injected_entry, sizeof injected_entry, "%s", op);
  snprintf(message, sizeof message,
           "CUDA error 209 (cudaErrorNoKernelImageForDevice): no kernel image is available for execution on the "
           "device [emulated failure of %s, call %lld]",
           op, (long long)armed_n);
  has_message = 1;
  return 1;
}

int64_t emulated_faults_calls(void) { return calls; }
int64_t emulated_faults_injected(void) { return injected; }
const char* emulated_faults_entry(void) { return injected_entry; }

const char* emulated_faults_message(void) { return has_message ? message : NULL; }
