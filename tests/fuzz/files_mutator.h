/*
 * files_mutator.h: structure-aware mutation of cache files (docs/file-format.md)
 * and tier frames (docs/tiers.md) for the file fuzzer (fuzz_files.c).
 *
 * A file is split into its file header and its sections (header fields and
 * payload); mutations change FIELDS (a section header's numbers, an int64 of
 * a record payload, a payload's length, the file's object kind) or the list
 * of sections (duplicate, drop, reorder); the file is then written again with
 * every checksum recomputed (file header, section headers, table entries,
 * table, footer), so what the loader sees is well formed and only its
 * semantic checks stand between the mutation and the cache's memory.
 *
 * Byte-driven: every choice is read from a reader (reader.h), so libFuzzer's
 * input is a program of mutations and the standalone driver's pseudo-random
 * inputs are too. Each mutation is described in `log` (the field, its old and
 * new value), which the target prints with a finding.
 */
#ifndef KVC_TESTS_FUZZ_FILES_MUTATOR_H
#define KVC_TESTS_FUZZ_FILES_MUTATOR_H

#include <stddef.h>
#include <stdint.h>

#include "reader.h"

typedef struct fm_section {
  uint32_t type, part, index, sub;
  uint32_t dims[4], dtype, elem_bytes;
  unsigned char* payload; /* owned */
  size_t len;
} fm_section;

typedef struct fm_file {
  unsigned char header[64];
  size_t count, cap;
  fm_section* sections;
} fm_file;

/* Splits a valid file (0; -1 when it is not one this mutator understands or memory ran out). */
int fm_parse(const unsigned char* data, size_t len, fm_file* out);
void fm_free(fm_file* f);
/* The file written again, every checksum recomputed; *out is malloc'd (NULL when out of memory). */
unsigned char* fm_write(const fm_file* f, size_t* len);
/* Applies 1..max mutations chosen by `in`; appends what each did to log (size n). */
void fm_mutate(fm_file* f, reader* in, int max, char* log, size_t n);

/*
 * Tier frames: a frame's header fields (version, key, payload bytes, layers)
 * or its length mutated, then its CRC recomputed. `frame` is malloc'd and may
 * be reallocated; *len is updated.
 */
void fm_mutate_frame(unsigned char** frame, size_t* len, reader* in, char* log, size_t n);

/* CRC-32C (Castagnoli), as the format uses it. */
uint32_t fm_crc32c(uint32_t crc, const void* data, size_t n);

#endif /* KVC_TESTS_FUZZ_FILES_MUTATOR_H */
