/*
 * core/persist/crc32c.h: CRC-32C (Castagnoli, the iSCSI/ext4 checksum:
 * reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF),
 * the checksum of every part of a cache file (docs/file-format.md says why
 * this one).
 *
 * kvci_crc32c_update continues a running checksum: crc = 0 starts one, and
 * update(update(0, a), b) == update(0, a || b). The x86-64 build uses the
 * SSE 4.2 crc32 instruction when the CPU has it (chosen once, at the first
 * call; three independent chains over 12 KiB segments, combined, since one
 * chain runs at a third of the instruction's throughput), else an 8-slice
 * table; both give the same bits
 * (tests/persist/test_internal_crc32c.c checks them against RFC 3720's
 * vectors and each other).
 */
#ifndef KVC_CORE_PERSIST_CRC32C_H
#define KVC_CORE_PERSIST_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t kvci_crc32c_update(uint32_t crc, const void* data, size_t bytes);
/* The table implementation alone (tests compare it with the one the CPU picks). */
uint32_t kvci_crc32c_update_portable(uint32_t crc, const void* data, size_t bytes);

#endif /* KVC_CORE_PERSIST_CRC32C_H */
