# Functions shared by the CMake files of kvcache. Each sets up one kind of
# target the same way everywhere, so that conventions live in one place.

# Warnings for the project's own code (never for consumers of the package).
function(kvc_warnings target)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra $<$<BOOL:${KVC_WERROR}>:-Werror>)
  endif()
endfunction()

# What every build of the library sources needs. `scope` is the scope of the
# public include directory: PUBLIC for the libraries, PRIVATE for object sets.
function(kvc_library_settings target scope)
  target_include_directories(${target} ${scope}
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/abi/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR}/core
    ${PROJECT_SOURCE_DIR}/abi/backend
    ${PROJECT_SOURCE_DIR}/backends)
  target_compile_definitions(${target} PRIVATE KVC_BUILDING_LIBRARY
    $<$<BOOL:${KVC_BACKEND_DL}>:KVC_BACKEND_DL=1>)
  get_target_property(_type ${target} TYPE)
  if(NOT _type STREQUAL "OBJECT_LIBRARY")
    kvc_link_system_libs(${target})
  endif()
endfunction()

# libm, threads and (with KVC_BACKEND_DL) libdl: what the library sources use.
function(kvc_link_system_libs target)
  if(NOT WIN32)
    target_link_libraries(${target} PRIVATE m)
  endif()
  target_link_libraries(${target} PRIVATE Threads::Threads)
  if(KVC_BACKEND_DL)
    target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS})
  endif()
endfunction()

# An executable of this tree: kvc_add_program(<target> SOURCES <src>...
#   [LINK <lib>...] [INCLUDE <dir>...] [OUTPUT_DIR <dir under the build dir>]
#   [OUTPUT_NAME <name>] [ASSERTS])
# ASSERTS keeps assert() alive in optimised builds (CMake adds -DNDEBUG to
# them), because a test whose checks compile away cannot fail.
function(kvc_add_program target)
  cmake_parse_arguments(P "ASSERTS" "OUTPUT_DIR;OUTPUT_NAME" "SOURCES;LINK;INCLUDE" ${ARGN})
  add_executable(${target} ${P_SOURCES})
  target_link_libraries(${target} PRIVATE ${P_LINK})
  kvc_link_system_libs(${target})
  if(P_INCLUDE)
    target_include_directories(${target} PRIVATE ${P_INCLUDE})
  endif()
  if(P_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES
      RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/${P_OUTPUT_DIR}")
  endif()
  if(P_OUTPUT_NAME)
    set_target_properties(${target} PROPERTIES OUTPUT_NAME ${P_OUTPUT_NAME})
  endif()
  if(P_ASSERTS)
    target_compile_options(${target} PRIVATE -UNDEBUG)
  endif()
  kvc_warnings(${target})
endfunction()

# Properties every CTest test of the tree gets: kvc_test_properties(<test>
#   LABELS <label>... [TIMEOUT <s>]). Exit code 77 marks a test that skipped
# (it prints SKIPPED and why); sanitizer findings stop the test, and so does
# an alias index kept between updates that a fresh one contradicts
# (KVC_CHECK_ALIAS_INDEX, core/model/alias_index.c).
function(kvc_test_properties test)
  cmake_parse_arguments(T "" "TIMEOUT" "LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(KVC_COVERAGE)
    # -O0 with counters on every branch: the longest suites take several times their usual time.
    math(EXPR T_TIMEOUT "${T_TIMEOUT} * 4")
  endif()
  set_tests_properties(${test} PROPERTIES
    LABELS "${T_LABELS}"
    TIMEOUT ${T_TIMEOUT}
    SKIP_RETURN_CODE 77
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1;KVC_CHECK_ALIAS_INDEX=1")
endfunction()

# A directory for kvcache.pc: absolute ones stay, relative ones hang off ${prefix}.
function(kvc_pc_dir out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
