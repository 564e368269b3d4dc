/* core/options.c: the init functions of every option struct, for languages without macros. */
#include "internal.h"

void kvc_layer_options_init(kvc_layer_options* o) {
  if (o) *o = (kvc_layer_options)KVC_LAYER_OPTIONS_INIT;
}
void kvc_model_config_init(kvc_model_config* o) {
  if (o) *o = (kvc_model_config)KVC_MODEL_CONFIG_INIT;
}
void kvc_cache_options_init(kvc_cache_options* o) {
  if (o) *o = (kvc_cache_options)KVC_CACHE_OPTIONS_INIT;
}
void kvc_init_options_init(kvc_init_options* o) {
  if (o) *o = (kvc_init_options)KVC_INIT_OPTIONS_INIT;
}
void kvc_update_options_init(kvc_update_options* o) {
  if (o) *o = (kvc_update_options)KVC_UPDATE_OPTIONS_INIT;
}
