/*
 * core/util/error.h: making kvc_error values, the one way every floor of the core reports a refusal.
 */
#ifndef KVC_CORE_UTIL_ERROR_H
#define KVC_CORE_UTIL_ERROR_H

#include <stddef.h>
#include <stdint.h>
#include "kvcache.h"

kvc_error* kvci_err(kvc_code code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
kvc_error* kvci_err_oom(void);

/* Struct-size check for option structs: known sizes are `known` only. */
kvc_error* kvci_check_struct_size(const char* fn, const char* arg, uint32_t got, size_t known);

/* The refusal of a file's value: "<fn>: the file's <where>: <field> is <value>; <rule>" (KVC_ERROR_IO). */
kvc_error* kvci_loaded_refuse(const char* fn, const char* where, const char* field, int64_t value,
                              const char* rule, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#endif /* KVC_CORE_UTIL_ERROR_H */
