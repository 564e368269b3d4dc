/*
 * The public header as a user's compiler sees it: this file is built as strict
 * C99 and, through header_check.cpp, as C++11 and C++17 (see
 * cmake/KvcHeaderTests.cmake), so it sticks to what all three accept. At run
 * time it checks that the header and the library it links agree.
 */
#include <kvcache.h>
#include <kvcache.h> /* the include guards hold */

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                     \
    }                                                                 \
  } while (0)

/*
 * Each option struct: the _INIT macro compiles in this language, struct_size
 * comes first and is what both the macro and the _init function put there.
 * The function gets a struct full of garbage, so it must set every byte it
 * is responsible for.
 */
#define CHECK_OPTIONS(type, init_macro, init_fn)         \
  do {                                                   \
    type from_macro = init_macro;                        \
    type from_fn;                                        \
    memset(&from_fn, 0xA5, sizeof from_fn);              \
    init_fn(&from_fn);                                   \
    init_fn(NULL);                                       \
    CHECK(offsetof(type, struct_size) == 0);             \
    CHECK(from_macro.struct_size == sizeof(type));       \
    CHECK(from_fn.struct_size == sizeof(type));          \
  } while (0)

int main(void) {
  char expected[32];
  const char* name;

  CHECK_OPTIONS(kvc_layer_options, KVC_LAYER_OPTIONS_INIT, kvc_layer_options_init);
  CHECK_OPTIONS(kvc_model_config, KVC_MODEL_CONFIG_INIT, kvc_model_config_init);
  CHECK_OPTIONS(kvc_cache_options, KVC_CACHE_OPTIONS_INIT, kvc_cache_options_init);
  CHECK_OPTIONS(kvc_init_options, KVC_INIT_OPTIONS_INIT, kvc_init_options_init);
  CHECK_OPTIONS(kvc_update_options, KVC_UPDATE_OPTIONS_INIT, kvc_update_options_init);
  CHECK_OPTIONS(kvc_allocator, KVC_ALLOCATOR_INIT, kvc_allocator_init);

  /* The header a binding was generated from must match the library it loads. */
  CHECK(kvc_version() == KVC_VERSION_NUMBER);
  snprintf(expected, sizeof expected, "%d.%d.%d",
           KVC_VERSION_MAJOR, KVC_VERSION_MINOR, KVC_VERSION_PATCH);
  CHECK(kvc_version_string() != NULL);
  CHECK(kvc_version_string() != NULL && strcmp(kvc_version_string(), expected) == 0);
  CHECK((kvc_features() & KVC_FEATURE_CPU) != 0);

  /* NULL is success, and success reads back as KVC_OK. */
  CHECK(kvc_error_code(NULL) == KVC_OK);
  name = kvc_code_name(KVC_ERROR_OUT_OF_RANGE);
  CHECK(name != NULL && strcmp(name, "KVC_ERROR_OUT_OF_RANGE") == 0);

  if (failures != 0) {
    fprintf(stderr, "%d header check(s) failed\n", failures);
    return 1;
  }
  printf("header checks passed (%s)\n",
#ifdef __cplusplus
         "C++"
#else
         "C"
#endif
  );
  return 0;
}
