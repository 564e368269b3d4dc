/*
 * Prints the layout of every public struct and the value of every public
 * enumerator, one "name value" line each, so that scripts/check_abi_baseline.sh
 * can compare them with the committed baseline (abi/baseline/layout.txt).
 * A binding compiled against an older header must keep working: a field may
 * be appended (new lines), never moved, resized or renumbered (changed lines).
 * Every field is named here one by one, on purpose: the listing is what the
 * baseline is checked against, so runs of it look alike.
 */
#include <stddef.h>
#include <stdio.h>

#include "kvcache.h"

#define SIZE(T) printf("sizeof(%s) %zu\n", #T, sizeof(T))
#define OFF(T, f) printf("offsetof(%s.%s) %zu\n", #T, #f, offsetof(T, f))
#define VAL(x) printf("%s %lld\n", #x, (long long)(x))

int main(void) {
  SIZE(kvc_device); OFF(kvc_device, device_type); OFF(kvc_device, device_id);
  SIZE(kvc_data_type); OFF(kvc_data_type, code); OFF(kvc_data_type, bits); OFF(kvc_data_type, lanes);
  SIZE(kvc_tensor); OFF(kvc_tensor, data); OFF(kvc_tensor, device); OFF(kvc_tensor, ndim); OFF(kvc_tensor, dtype);
  OFF(kvc_tensor, shape); OFF(kvc_tensor, strides); OFF(kvc_tensor, byte_offset);
  SIZE(kvc_kv); OFF(kvc_kv, key); OFF(kvc_kv, value);
  SIZE(kvc_layer_options); OFF(kvc_layer_options, struct_size); OFF(kvc_layer_options, kind);
  OFF(kvc_layer_options, window); OFF(kvc_layer_options, max_cache_len);
  OFF(kvc_layer_options, quant); OFF(kvc_layer_options, num_sink_tokens); OFF(kvc_layer_options, num_states);
  OFF(kvc_layer_options, conv_kernel_size);
  SIZE(kvc_model_config); OFF(kvc_model_config, struct_size); OFF(kvc_model_config, num_hidden_layers);
  OFF(kvc_model_config, layer_types); OFF(kvc_model_config, sliding_window);
  OFF(kvc_model_config, attention_chunk_size); OFF(kvc_model_config, num_kv_shared_layers);
  OFF(kvc_model_config, sliding_window_pattern); OFF(kvc_model_config, number_of_conv_states);
  OFF(kvc_model_config, conv_kernel);
  SIZE(kvc_cache_options); OFF(kvc_cache_options, struct_size); OFF(kvc_cache_options, preset);
  OFF(kvc_cache_options, config); OFF(kvc_cache_options, max_cache_len); OFF(kvc_cache_options, num_layers);
  OFF(kvc_cache_options, layers); OFF(kvc_cache_options, device); OFF(kvc_cache_options, quant);
  OFF(kvc_cache_options, offload); OFF(kvc_cache_options, window_length); OFF(kvc_cache_options, num_sink_tokens);
  OFF(kvc_cache_options, transformers_release); OFF(kvc_cache_options, query_offset_rule);
  OFF(kvc_cache_options, allocator);
  SIZE(kvc_allocator); OFF(kvc_allocator, struct_size); OFF(kvc_allocator, ctx); OFF(kvc_allocator, alloc);
  OFF(kvc_allocator, free); OFF(kvc_allocator, release); VAL(KVC_ALLOCATOR_ALIGNMENT);
  SIZE(kvc_init_options); OFF(kvc_init_options, struct_size); OFF(kvc_init_options, batch_size);
  OFF(kvc_init_options, num_kv_heads); OFF(kvc_init_options, k_head_dim); OFF(kvc_init_options, v_head_dim);
  OFF(kvc_init_options, dtype); OFF(kvc_init_options, num_kv_heads_per_layer); OFF(kvc_init_options, head_dim_per_layer);
  SIZE(kvc_layer_info); OFF(kvc_layer_info, struct_size); OFF(kvc_layer_info, kind); OFF(kvc_layer_info, window);
  OFF(kvc_layer_info, max_cache_len); OFF(kvc_layer_info, capacity); OFF(kvc_layer_info, is_initialized);
  OFF(kvc_layer_info, is_sliding); OFF(kvc_layer_info, is_chunked); OFF(kvc_layer_info, is_compileable);
  OFF(kvc_layer_info, records_past); OFF(kvc_layer_info, dtype); OFF(kvc_layer_info, batch_size);
  OFF(kvc_layer_info, num_kv_heads); OFF(kvc_layer_info, k_head_dim); OFF(kvc_layer_info, v_head_dim);
  OFF(kvc_layer_info, seq_length); OFF(kvc_layer_info, stored_length); OFF(kvc_layer_info, is_linear);
  OFF(kvc_layer_info, is_offloaded); OFF(kvc_layer_info, has_previous_state); OFF(kvc_layer_info, num_states);
  OFF(kvc_layer_info, conv_kernel_size); OFF(kvc_layer_info, num_sink_tokens); OFF(kvc_layer_info, quantized_length);
  SIZE(kvc_memory_info); OFF(kvc_memory_info, struct_size); OFF(kvc_memory_info, bytes_reserved);
  OFF(kvc_memory_info, bytes_used); OFF(kvc_memory_info, bytes_device); OFF(kvc_memory_info, bytes_host);
  OFF(kvc_memory_info, bytes_quantized); OFF(kvc_memory_info, bytes_state);
  SIZE(kvc_update_options); OFF(kvc_update_options, struct_size); OFF(kvc_update_options, cache_position);
  OFF(kvc_update_options, cache_position_length); OFF(kvc_update_options, rope_cos); OFF(kvc_update_options, rope_sin);
  OFF(kvc_update_options, partial_rotation_size);
  SIZE(kvc_quant_options); OFF(kvc_quant_options, struct_size); OFF(kvc_quant_options, quantizer);
  OFF(kvc_quant_options, mode); OFF(kvc_quant_options, nbits); OFF(kvc_quant_options, axis_key);
  OFF(kvc_quant_options, axis_value); OFF(kvc_quant_options, q_group_size); OFF(kvc_quant_options, residual_length);
  SIZE(kvc_conv_update_options); OFF(kvc_conv_update_options, struct_size); OFF(kvc_conv_update_options, state_index);
  OFF(kvc_conv_update_options, conv_kernel_size); OFF(kvc_conv_update_options, cache_position);
  OFF(kvc_conv_update_options, cache_position_length);

  VAL(KVC_VERSION_MAJOR);
  VAL(KVC_OK); VAL(KVC_ERROR_INVALID_ARGUMENT); VAL(KVC_ERROR_OUT_OF_RANGE); VAL(KVC_ERROR_DTYPE_MISMATCH);
  VAL(KVC_ERROR_SHAPE_MISMATCH); VAL(KVC_ERROR_DEVICE_MISMATCH); VAL(KVC_ERROR_UNSUPPORTED);
  VAL(KVC_ERROR_INVALID_STATE); VAL(KVC_ERROR_OUT_OF_MEMORY); VAL(KVC_ERROR_NO_DEVICE);
  VAL(KVC_ERROR_VERSION_MISMATCH); VAL(KVC_ERROR_INTERNAL); VAL(KVC_ERROR_IO);
  VAL(KVC_ERROR_BUSY);
  SIZE(kvc_save_options); OFF(kvc_save_options, struct_size); OFF(kvc_save_options, reserved);
  OFF(kvc_save_options, staging_bytes);
  SIZE(kvc_load_options); OFF(kvc_load_options, struct_size); OFF(kvc_load_options, device);
  OFF(kvc_load_options, stream); OFF(kvc_load_options, allocator); OFF(kvc_load_options, max_bytes);
  VAL(KVC_FILE_FORMAT_VERSION);
  VAL(KVC_FEATURE_CPU); VAL(KVC_FEATURE_CUDA); VAL(KVC_FEATURE_HIP); VAL(KVC_FEATURE_BACKEND_DL);
  VAL(KVC_DEVICE_CPU); VAL(KVC_DEVICE_CUDA); VAL(KVC_DEVICE_CUDA_HOST); VAL(KVC_DEVICE_ROCM); VAL(KVC_DEVICE_ROCM_HOST);
  VAL(KVC_TYPE_CODE_INT); VAL(KVC_TYPE_CODE_UINT); VAL(KVC_TYPE_CODE_FLOAT); VAL(KVC_TYPE_CODE_BFLOAT);
  SIZE(kvc_pool_group_options); OFF(kvc_pool_group_options, struct_size); OFF(kvc_pool_group_options, kind);
  OFF(kvc_pool_group_options, block_size); OFF(kvc_pool_group_options, num_blocks); OFF(kvc_pool_group_options, window);
  OFF(kvc_pool_group_options, reserved);
  SIZE(kvc_pool_layer_options); OFF(kvc_pool_layer_options, struct_size); OFF(kvc_pool_layer_options, group);
  OFF(kvc_pool_layer_options, num_kv_heads); OFF(kvc_pool_layer_options, key_head_dim);
  OFF(kvc_pool_layer_options, value_head_dim); OFF(kvc_pool_layer_options, conv_dim);
  OFF(kvc_pool_layer_options, conv_kernel); OFF(kvc_pool_layer_options, ssm_state_size);
  OFF(kvc_pool_layer_options, reserved); OFF(kvc_pool_layer_options, storage);
  OFF(kvc_pool_layer_options, k_scale); OFF(kvc_pool_layer_options, v_scale);
  SIZE(kvc_pool_options); OFF(kvc_pool_options, struct_size); OFF(kvc_pool_options, dtype);
  OFF(kvc_pool_options, device); OFF(kvc_pool_options, num_groups); OFF(kvc_pool_options, groups);
  OFF(kvc_pool_options, num_layers); OFF(kvc_pool_options, layers); OFF(kvc_pool_options, layout);
  OFF(kvc_pool_options, hash_seed); OFF(kvc_pool_options, hash_seed_len);
  OFF(kvc_pool_options, enable_prefix_caching); OFF(kvc_pool_options, event_capacity);
  OFF(kvc_pool_options, allocator); OFF(kvc_pool_options, shared_budget_bytes);
  OFF(kvc_pool_options, hash_mode);
  SIZE(kvc_pool_stats); OFF(kvc_pool_stats, struct_size); OFF(kvc_pool_stats, group); OFF(kvc_pool_stats, num_blocks);
  OFF(kvc_pool_stats, free_blocks); OFF(kvc_pool_stats, cached_blocks); OFF(kvc_pool_stats, used_blocks);
  OFF(kvc_pool_stats, pinned_blocks); OFF(kvc_pool_stats, prefix_queries); OFF(kvc_pool_stats, prefix_hits);
  OFF(kvc_pool_stats, evictions);
  SIZE(kvc_pool_sequence_options); OFF(kvc_pool_sequence_options, struct_size); OFF(kvc_pool_sequence_options, salt);
  OFF(kvc_pool_sequence_options, salt_len); OFF(kvc_pool_sequence_options, mm_items);
  OFF(kvc_pool_sequence_options, num_mm_items); OFF(kvc_pool_sequence_options, adapter_key);
  OFF(kvc_pool_sequence_options, adapter_key_len); OFF(kvc_pool_sequence_options, adapter_path);
  OFF(kvc_pool_sequence_options, adapter_path_len); OFF(kvc_pool_sequence_options, adapter_id);
  SIZE(kvc_pool_vllm_batch_options); OFF(kvc_pool_vllm_batch_options, struct_size);
  OFF(kvc_pool_vllm_batch_options, int_hashes); OFF(kvc_pool_vllm_batch_options, ts);
  OFF(kvc_pool_vllm_batch_options, data_parallel_rank); OFF(kvc_pool_vllm_batch_options, reserved);
  VAL(KVC_POOL_HASH_KVCACHE); VAL(KVC_POOL_HASH_VLLM_SHA256_CBOR);
  SIZE(kvc_pool_mm_item); OFF(kvc_pool_mm_item, hash); OFF(kvc_pool_mm_item, hash_len);
  OFF(kvc_pool_mm_item, offset); OFF(kvc_pool_mm_item, length);
  VAL(KVC_POOL_BLOCK_HASH_VERSION); VAL(KVC_POOL_EXTRA_KEY_MAX); VAL(KVC_POOL_MM_ITEMS_MAX);
  SIZE(kvc_pool_table); OFF(kvc_pool_table, table); OFF(kvc_pool_table, indptr); OFF(kvc_pool_table, last_page_len);
  SIZE(kvc_pool_event); OFF(kvc_pool_event, id); OFF(kvc_pool_event, kind); OFF(kvc_pool_event, group);
  OFF(kvc_pool_event, block_hash); OFF(kvc_pool_event, parent_hash); OFF(kvc_pool_event, num_tokens);
  OFF(kvc_pool_event, block_id); OFF(kvc_pool_event, reserved);
  SIZE(kvc_tier_key); OFF(kvc_tier_key, fingerprint); OFF(kvc_tier_key, block_hash); OFF(kvc_tier_key, group);
  OFF(kvc_tier_key, reserved);
  SIZE(kvc_tier_ops); OFF(kvc_tier_ops, struct_size); OFF(kvc_tier_ops, put_many); OFF(kvc_tier_ops, get_many);
  OFF(kvc_tier_ops, destroy); OFF(kvc_tier_ops, exists_many);
  SIZE(kvc_disk_tier_options); OFF(kvc_disk_tier_options, struct_size); OFF(kvc_disk_tier_options, directory);
  OFF(kvc_disk_tier_options, max_bytes); OFF(kvc_disk_tier_options, reserved);
  OFF(kvc_disk_tier_options, auth_key); OFF(kvc_disk_tier_options, auth_key_len);
  SIZE(kvc_redis_tier_options); OFF(kvc_redis_tier_options, struct_size); OFF(kvc_redis_tier_options, cluster);
  OFF(kvc_redis_tier_options, seeds); OFF(kvc_redis_tier_options, key_prefix); OFF(kvc_redis_tier_options, username);
  OFF(kvc_redis_tier_options, password); OFF(kvc_redis_tier_options, connect_timeout_ms);
  OFF(kvc_redis_tier_options, command_timeout_ms); OFF(kvc_redis_tier_options, reconnect_interval_ms);
  OFF(kvc_redis_tier_options, ttl_seconds); OFF(kvc_redis_tier_options, max_pipeline);
  OFF(kvc_redis_tier_options, reserved); OFF(kvc_redis_tier_options, call_timeout_ms);
  OFF(kvc_redis_tier_options, auth_key); OFF(kvc_redis_tier_options, auth_key_len);
  SIZE(kvc_tier_stats); OFF(kvc_tier_stats, struct_size); OFF(kvc_tier_stats, reserved); OFF(kvc_tier_stats, puts);
  OFF(kvc_tier_stats, put_failures); OFF(kvc_tier_stats, gets); OFF(kvc_tier_stats, hits);
  OFF(kvc_tier_stats, corrupt); OFF(kvc_tier_stats, bytes_written); OFF(kvc_tier_stats, bytes_read);
  OFF(kvc_tier_stats, queued); OFF(kvc_tier_stats, dropped);
  SIZE(kvc_tier_worker_options); OFF(kvc_tier_worker_options, struct_size); OFF(kvc_tier_worker_options, max_jobs);
  OFF(kvc_tier_worker_options, max_bytes); OFF(kvc_tier_worker_options, drain_timeout_ms);
  OFF(kvc_tier_worker_options, events);
  SIZE(kvc_tier_worker_stats); OFF(kvc_tier_worker_stats, struct_size); OFF(kvc_tier_worker_stats, running);
  OFF(kvc_tier_worker_stats, pending_jobs); OFF(kvc_tier_worker_stats, pending_bytes);
  OFF(kvc_tier_worker_stats, blocks_queued); OFF(kvc_tier_worker_stats, blocks_dropped);
  OFF(kvc_tier_worker_stats, blocks_abandoned); OFF(kvc_tier_worker_stats, prefetches);
  OFF(kvc_tier_worker_stats, prefetches_late); OFF(kvc_tier_worker_stats, prefetches_abandoned);
  OFF(kvc_tier_worker_stats, events_lost);
  VAL(KVC_TIER_WRITE_ON_COMMIT); VAL(KVC_TIER_WRITE_ON_EVICT); VAL(KVC_TIER_AUTH_KEY_MIN); VAL(KVC_TIER_AUTH_KEY_MAX);
  VAL(KVC_REDIS_CLUSTER_AUTO); VAL(KVC_REDIS_CLUSTER_OFF); VAL(KVC_REDIS_CLUSTER_ON);
  VAL(KVC_POOL_GROUP_FULL); VAL(KVC_POOL_GROUP_SLIDING); VAL(KVC_POOL_GROUP_CHUNKED); VAL(KVC_POOL_GROUP_RECURRENT);
  VAL(KVC_POOL_GROUP_LATENT); VAL(KVC_POOL_STORAGE_DTYPE); VAL(KVC_POOL_STORAGE_FP8_E4M3);
  VAL(KVC_POOL_LAYOUT_NHD); VAL(KVC_POOL_LAYOUT_HND); VAL(KVC_POOL_TABLE_PADDED); VAL(KVC_POOL_TABLE_CSR);
  VAL(KVC_POOL_EVENT_BLOCK_STORED); VAL(KVC_POOL_EVENT_BLOCK_REMOVED); VAL(KVC_POOL_EVENT_ALL_CLEARED);
  VAL(KVC_POOL_EVENT_TIER_STORED); VAL(KVC_POOL_EVENT_TIER_FAILED); VAL(KVC_POOL_EVENT_TIER_DROPPED);
  VAL(KVC_DTYPE_UNSET); VAL(KVC_DTYPE_FLOAT32); VAL(KVC_DTYPE_FLOAT16); VAL(KVC_DTYPE_BFLOAT16);
  VAL(KVC_LAYER_DYNAMIC); VAL(KVC_LAYER_DYNAMIC_SLIDING); VAL(KVC_LAYER_DYNAMIC_CHUNKED); VAL(KVC_LAYER_STATIC);
  VAL(KVC_LAYER_STATIC_SLIDING); VAL(KVC_LAYER_STATIC_CHUNKED);
  VAL(KVC_QUERY_OFFSET_PLAIN); VAL(KVC_QUERY_OFFSET_MTP); VAL(KVC_QUERY_OFFSET_DFLASH);
  VAL(KVC_LAYER_QUANTIZED); VAL(KVC_LAYER_QUANTIZED_FP8); VAL(KVC_LAYER_SINK); VAL(KVC_LAYER_LINEAR); VAL(KVC_LAYER_LINEAR_DYNAMIC);
  VAL(KVC_LAYER_LINEAR_DYNAMIC_SLIDING); VAL(KVC_LAYER_LINEAR_STATIC); VAL(KVC_LAYER_LINEAR_STATIC_SLIDING);
  VAL(KVC_LAYER_DUMMY);
  VAL(KVC_LAYER_DYNAMIC_INDEXED);
  VAL(KVC_LAYER_STATIC_INDEXED);
  VAL(KVC_LAYER_TYPE_FULL_ATTENTION); VAL(KVC_LAYER_TYPE_SLIDING_ATTENTION); VAL(KVC_LAYER_TYPE_CHUNKED_ATTENTION);
  VAL(KVC_LAYER_TYPE_LINEAR_ATTENTION); VAL(KVC_LAYER_TYPE_HYBRID); VAL(KVC_LAYER_TYPE_HYBRID_SLIDING);
  VAL(KVC_LAYER_TYPE_DUMMY);
  VAL(KVC_BLOCK_HASH_SIZE); VAL(KVC_BLOCK_HASH_VERSION);
  VAL(KVC_LAYER_TYPE_INDEXED_ATTENTION);
  VAL(KVC_PRESET_CUSTOM); VAL(KVC_PRESET_DYNAMIC); VAL(KVC_PRESET_STATIC); VAL(KVC_PRESET_SLIDING_WINDOW);
  VAL(KVC_PRESET_HYBRID); VAL(KVC_PRESET_HYBRID_CHUNKED); VAL(KVC_ALL_LAYERS);
  VAL(KVC_PRESET_QUANTIZED); VAL(KVC_PRESET_OFFLOADED); VAL(KVC_PRESET_OFFLOADED_STATIC);
  VAL(KVC_PRESET_OFFLOADED_HYBRID); VAL(KVC_PRESET_SINK); VAL(KVC_PRESET_MAMBA); VAL(KVC_PRESET_HYBRID_MAMBA);
  VAL(KVC_OFFLOAD_DEFAULT); VAL(KVC_OFFLOAD_NONE); VAL(KVC_OFFLOAD_ALL); VAL(KVC_OFFLOAD_NON_SLIDING);
  VAL(KVC_QUANTIZER_QUANTO); VAL(KVC_QUANTIZER_HQQ); VAL(KVC_QUANT_MODE_INCREMENTAL);
  VAL(KVC_QUANT_MODE_TRANSFORMERS);
  VAL(KVC_QUANT_MODE_COMPACT);
  return 0;
}
