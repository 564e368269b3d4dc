/*
 * core/util/options.h: the caller's option structs, read by their struct_size (ABI versioning).
 */
#ifndef KVC_CORE_UTIL_OPTIONS_H
#define KVC_CORE_UTIL_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include "kvcache.h"

/*
 * Option structs that grew (options.c): reads the caller's struct, whose
 * struct_size must be one of the published sizes, into a full-size copy
 * with the newer fields at their defaults. kvc_*_out_size checks an output
 * struct's size and returns how many bytes to write.
 */
kvc_error* kvci_read_layer_options(const char* fn, const char* arg, const kvc_layer_options* in, kvc_layer_options* out);
/* The i-th element of a caller's kvc_layer_options array: its stride is layers[0].struct_size. */
const kvc_layer_options* kvci_layer_options_at(const kvc_layer_options* layers, uint32_t i);
kvc_error* kvci_read_model_config(const char* fn, const char* arg, const kvc_model_config* in, kvc_model_config* out);
kvc_error* kvci_read_cache_options(const char* fn, const char* arg, const kvc_cache_options* in, kvc_cache_options* out);
kvc_error* kvci_read_update_options(const char* fn, const char* arg, const kvc_update_options* in,
                                   kvc_update_options* out);
kvc_error* kvci_read_quant_options(const char* fn, const char* arg, const kvc_quant_options* in, kvc_quant_options* out);
kvc_error* kvci_read_disk_tier_options(const char* fn, const char* arg, const kvc_disk_tier_options* in,
                                      kvc_disk_tier_options* out);
kvc_error* kvci_read_pool_sequence_options(const char* fn, const char* arg, const kvc_pool_sequence_options* in,
                                          kvc_pool_sequence_options* out);
kvc_error* kvci_out_struct_size(const char* fn, const char* arg, uint32_t got, const uint32_t* published, int n,
                               size_t* write);

#endif /* KVC_CORE_UTIL_OPTIONS_H */
