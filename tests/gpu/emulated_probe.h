/*
 * tests/gpu/emulated_probe.h: the emulated device plugin as the tests reach
 * it: the same loaded copy the core uses (dlopen of the file the core loads
 * from KVC_BACKEND_PATH gives the same handle), its counters and controls.
 */
#ifndef KVC_TESTS_EMULATED_PROBE_H
#define KVC_TESTS_EMULATED_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "emulated_device.h"

/* Loads $KVC_BACKEND_PATH/libkvcache-cuda.so and checks that it is the emulated device. 0 on success; otherwise
   `why` says what is wrong. */
int emulated_probe_open(char* why, size_t why_len);

/* The plugin's device count and the backend API version it claims (its kvc_backend_entry table). */
int emulated_probe_device_count(void);
uint32_t emulated_probe_api_version(void);

/* The plugin's backend table (to drive it directly). */
const struct kvc_backend* emulated_probe_backend(void);

void emulated_probe_counters(kvc_emulated_counters* out);
void emulated_probe_reset(void);
void emulated_probe_expect_stream(int enable, void* stream);
/* Completes the asynchronous copies still pending (the device-wide synchronisation of the emulated device). */
void emulated_probe_synchronize(void);

/* Failure injection (emulated_faults.h): fail the n-th call from now of entry `op` (NULL: of any entry), and the
   calls that could have failed, the failures injected since and the entry the last one hit. */
void emulated_probe_fail(const char* op, int64_t n);
void emulated_probe_fail_counts(int64_t* calls, int64_t* injected, char* entry, size_t entry_len);

#endif /* KVC_TESTS_EMULATED_PROBE_H */
