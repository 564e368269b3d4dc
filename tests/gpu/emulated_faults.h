/*
 * tests/gpu/emulated_faults.h: failure injection in the emulated device.
 *
 * A real device fails calls the core cannot foresee: a launch with no kernel
 * image for the card, a dead context, a stream-ordered allocation the pool
 * cannot serve. The emulated device fails the n-th call of one entry (or of
 * any entry) on request, as a GPU backend would: the entry returns non-zero
 * (an allocation NULL), moves no byte, and leaves a vendor-like message for
 * the backend table's last_error entry. Called with the device's lock held.
 */
#ifndef KVC_TESTS_EMULATED_FAULTS_H
#define KVC_TESTS_EMULATED_FAULTS_H

#include <stdint.h>

/* Arms the injection from KVC_EMULATED_FAIL ("<entry>:<n>", "any:<n>"), once, at the first call. */
void emulated_faults_from_env(void);
/* Fails the n-th failable call of `op` from now on (NULL or "any": of every entry); n 0 disarms. */
void emulated_faults_arm(const char* op, int64_t n);
/* 1 when this call of `op` is the one to fail (the message is then set); counts every failable call. */
int emulated_fault_due(const char* op);
/* Failable calls and injected failures since the last arm. */
int64_t emulated_faults_calls(void);
int64_t emulated_faults_injected(void);
/* The entry the last injected failure hit ("" when none). */
const char* emulated_faults_entry(void);
/* The message of this thread's last call when it was failed on purpose, else NULL. */
const char* emulated_faults_message(void);

#endif /* KVC_TESTS_EMULATED_FAULTS_H */
