# libFuzzer targets: each tests/fuzz/fuzz_<name>.c is a program built with
# clang against the library sources compiled with coverage and sanitizers,
# and a bounded CTest run `fuzz_<name>` (label fuzz). A seed corpus in
# tests/fuzz/corpus/<name> is read; new inputs go to the build directory, so
# the source tree is never written.
file(GLOB _fuzz_sources CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_*.c")
if(NOT _fuzz_sources)
  return()
endif()
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(STATUS "fuzz targets need clang: not built here (`make fuzz` configures build-fuzz with CC=clang)")
  return()
endif()

# Listed so that a seed corpus added later re-runs the configure step.
file(GLOB _seed_dirs CONFIGURE_DEPENDS LIST_DIRECTORIES true "${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/*")

set(_san address,undefined)
set(_common -g -O1 -fno-omit-frame-pointer -fno-sanitize-recover=all -UNDEBUG)

add_library(kvcache_fuzz_objects OBJECT ${KVC_LIBRARY_SOURCES})
kvc_library_settings(kvcache_fuzz_objects PRIVATE)
target_compile_options(kvcache_fuzz_objects PRIVATE -fsanitize=fuzzer-no-link,${_san} ${_common})
kvc_warnings(kvcache_fuzz_objects)

# Seconds of a target's bounded run: 60, or _fuzz_seconds_<name>. fuzz_pool's bounded run of 10^6 operations
# is the test pool_fuzz of every build (tests/CMakeLists.txt, under ASan+UBSan too); its libFuzzer run here adds
# coverage-guided inputs in less time.
set(_fuzz_seconds_pool 30)
# fuzz_files: a mutated file may declare a store of gigabytes or terabytes, which the library must refuse with
# OUT_OF_MEMORY when the allocation fails. What comes from malloc ASan's allocator refuses above 1 GiB (it returns
# NULL instead of stopping); stores of 1 MiB or more are the CPU backend's own mappings (backends/cpu/host_memory.c),
# which cost only the pages written (a 16 GiB store around a few tokens is megabytes; the seed corpus holds one)
# and are refused by the kernel past what it will map. Its inputs are mutation programs (a few dozen bytes).
set(_fuzz_seconds_files 60)
set(_fuzz_args_files -max_len=128)
set(_fuzz_asan_files allocator_may_return_null=1:max_allocation_size_mb=1024)

# `cmake --build build-fuzz --target fuzz_targets` builds only these.
add_custom_target(fuzz_targets)
foreach(_src IN LISTS _fuzz_sources)
  get_filename_component(_target "${_src}" NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" _name "${_target}")
  kvc_add_program(${_target} SOURCES "${_src}" $<TARGET_OBJECTS:kvcache_fuzz_objects>
    INCLUDE "${PROJECT_SOURCE_DIR}/abi/include" ${KVC_CORE_INCLUDE_DIRS} "${PROJECT_SOURCE_DIR}/abi/backend"
            "${PROJECT_SOURCE_DIR}/backends" "${PROJECT_SOURCE_DIR}/tests/fuzz" "${PROJECT_SOURCE_DIR}/tests/unit"
            "${PROJECT_SOURCE_DIR}/tests/persist"
    OUTPUT_DIR tests/fuzz)
  target_compile_options(${_target} PRIVATE -fsanitize=fuzzer,${_san} ${_common})
  target_link_options(${_target} PRIVATE -fsanitize=fuzzer,${_san})
  add_dependencies(fuzz_targets ${_target})

  set(_work "${PROJECT_BINARY_DIR}/fuzz/${_name}")
  file(MAKE_DIRECTORY "${_work}/corpus" "${_work}/artifacts")
  set(_corpora "${_work}/corpus")
  set(_seed "${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${_name}")
  if(_seed IN_LIST _seed_dirs AND IS_DIRECTORY "${_seed}")
    list(APPEND _corpora "${_seed}")
  endif()
  set(_seconds 60)
  if(DEFINED _fuzz_seconds_${_name})
    set(_seconds ${_fuzz_seconds_${_name}})
  endif()
  add_test(NAME ${_target}
    # -error_exitcode=1: libFuzzer's default (77) is CTest's "skipped" code here, which would hide a finding.
    COMMAND ${_target} -error_exitcode=1 -runs=300000 -max_total_time=${_seconds} -timeout=25
            ${_fuzz_args_${_name}} "-artifact_prefix=${_work}/artifacts/" ${_corpora}
    WORKING_DIRECTORY "${_work}")
  kvc_test_properties(${_target} LABELS fuzz TIMEOUT 180)
  # libFuzzer's -rss_limit_mb bounds what one input costs; freed stores the library keeps for reuse across inputs
  # (kvc_host_memory_*, docs/allocator.md) would count against it, so the fuzzers keep none.
  set_property(TEST ${_target} APPEND PROPERTY ENVIRONMENT "KVC_HOST_MEMORY_RETAIN=0")
  if(DEFINED _fuzz_asan_${_name})
    set_property(TEST ${_target} APPEND PROPERTY ENVIRONMENT
      "ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:${_fuzz_asan_${_name}}")
  endif()
endforeach()
