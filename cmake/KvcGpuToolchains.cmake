# The GPU toolchains of the backend plugins (backends/cuda, backends/hip).
#
# CUDA: nvcc from CMAKE_CUDA_COMPILER or CUDACXX when given, else from PATH,
# else the CUDA 13 toolkit that scripts/setup.sh installs into the project's
# .venv from NVIDIA's pip packages (site-packages/nvidia/cu13). CMake's CUDA
# language does the rest.
# HIP: hipcc (Debian's hipcc package, or ROCm's). CMake's HIP language wants
# ROCm's own directory layout, which Debian's packages do not have, so the
# HIP plugin's sources are compiled by hipcc through custom commands
# (backends/hip/CMakeLists.txt).
#
# After kvc_enable_cuda(): KVC_CUDA_TOOLKIT_ROOT and KVC_CUDART_STATIC (the
# static runtime the plugin links, so that it needs only the driver).
# After kvc_find_hipcc(): KVC_HIPCC and KVC_HIP_ARCHITECTURES.

# Targets of the CUDA plugin (KVC_CUDA_ARCHITECTURES): by default "all",
# SASS for every architecture the nvcc in use compiles for (nvcc
# --list-gpu-code; CUDA 13.2: sm_75 to sm_121) plus PTX of the lowest of
# them. SASS for every card means no card depends on the driver compiling
# PTX, which a driver older than the toolkit cannot do for the toolkit's
# PTX (docs/gpus.md); the PTX of the lowest architecture is what any later
# card, one nvcc does not know yet included, can compile at load time.
# Developers can name fewer: "native" (the cards of this machine), "90", or
# a CMake CUDA_ARCHITECTURES list such as "90-real;75-virtual".
# CMAKE_CUDA_ARCHITECTURES is set from it (one knob, not two).
set(KVC_CUDA_ARCHITECTURES "all" CACHE STRING
  "CUDA targets of the CUDA plugin: all (SASS for every architecture nvcc supports, PTX of the lowest), native, or a CUDA_ARCHITECTURES list")

# CMAKE_CUDA_ARCHITECTURES for "all": <arch>-real for each architecture `nvcc` lists, <lowest>-virtual.
function(kvc_cuda_all_architectures nvcc out)
  execute_process(COMMAND "${nvcc}" --list-gpu-code OUTPUT_VARIABLE _codes RESULT_VARIABLE _rc ERROR_QUIET)
  string(REGEX MATCHALL "sm_[0-9]+" _codes "${_codes}")
  if(NOT _rc EQUAL 0 OR NOT _codes)
    message(FATAL_ERROR "KVC_CUDA_ARCHITECTURES=all: `${nvcc} --list-gpu-code` listed no sm_ architecture "
                        "(exit ${_rc}); name the architectures instead, e.g. -DKVC_CUDA_ARCHITECTURES=90")
  endif()
  set(_archs "")
  foreach(_code IN LISTS _codes)
    string(REPLACE "sm_" "" _n "${_code}")
    list(APPEND _archs "${_n}")
  endforeach()
  list(REMOVE_DUPLICATES _archs)
  list(SORT _archs COMPARE NATURAL)
  list(GET _archs 0 _lowest)
  list(TRANSFORM _archs APPEND "-real")
  list(APPEND _archs "${_lowest}-virtual")
  set(${out} "${_archs}" PARENT_SCOPE)
endfunction()

# Targets of the HIP plugin: every GCN/CDNA (gfx9) and RDNA 1/2 (gfx10)
# target that Debian 12's clang 15 and ROCm device libraries compile for;
# gfx90a (MI200) is the one CI cares most about. gfx942 (MI300), gfx950, RDNA 3
# and 4 (gfx11, gfx12) need a newer toolchain: the gpu_hip_targets test
# compiles the kernels for them with a current clang (backends/hip). Waves
# are 64 wide on gfx9 and 32 wide on gfx10 and later (gpu_vendor.h).
set(KVC_HIP_DEFAULT_ARCHITECTURES
  "gfx900;gfx902;gfx904;gfx906;gfx908;gfx909;gfx90a;gfx90c;gfx940;gfx1010;gfx1011;gfx1012;gfx1013;gfx1030;gfx1031;gfx1032;gfx1033;gfx1034;gfx1035;gfx1036")

# The nvcc of the project's .venv, or "" when there is none.
function(kvc_venv_nvcc out)
  file(GLOB _nvcc LIST_DIRECTORIES false
    "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc")
  list(SORT _nvcc)
  list(LENGTH _nvcc _n)
  if(_n GREATER 0)
    list(GET _nvcc -1 _nvcc)
  endif()
  set(${out} "${_nvcc}" PARENT_SCOPE)
endfunction()

# enable_language(CUDA) with nvcc found as above. A macro: enable_language
# must run in the scope of a directory, not of a function.
macro(kvc_enable_cuda)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(KVC_NVCC_ON_PATH nvcc)
    if(KVC_NVCC_ON_PATH)
      set(CMAKE_CUDA_COMPILER "${KVC_NVCC_ON_PATH}" CACHE FILEPATH "nvcc")
    else()
      kvc_venv_nvcc(_kvc_nvcc)
      if(NOT _kvc_nvcc)
        message(FATAL_ERROR
          "KVC_CUDA=ON (or KVC_LINK_BACKEND=CUDA) needs nvcc: none on PATH, none in CUDACXX or "
          "CMAKE_CUDA_COMPILER, and none in ${PROJECT_SOURCE_DIR}/.venv (scripts/setup.sh installs the CUDA "
          "toolkit there from scripts/requirements-gpu.txt)")
      endif()
      set(CMAKE_CUDA_COMPILER "${_kvc_nvcc}" CACHE FILEPATH "nvcc")
    endif()
  endif()
  # A normal variable: it hides a CMAKE_CUDA_ARCHITECTURES that an older configure of this build tree cached
  # (80;90 before "all"), so that KVC_CUDA_ARCHITECTURES alone decides.
  if(KVC_CUDA_ARCHITECTURES STREQUAL "all")
    kvc_cuda_all_architectures("${CMAKE_CUDA_COMPILER}" _kvc_cuda_archs)
    set(CMAKE_CUDA_ARCHITECTURES "${_kvc_cuda_archs}")
  else()
    set(CMAKE_CUDA_ARCHITECTURES "${KVC_CUDA_ARCHITECTURES}")
  endif()
  enable_language(CUDA)
  if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.1)
    # The batched copy passes up to 32 KiB of kernel parameters (gpu_backend.cpp).
    message(FATAL_ERROR "the CUDA plugin needs CUDA 12.1 or newer; ${CMAKE_CUDA_COMPILER} is "
                        "${CMAKE_CUDA_COMPILER_VERSION}")
  endif()
  get_filename_component(KVC_CUDA_TOOLKIT_ROOT "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  get_filename_component(KVC_CUDA_TOOLKIT_ROOT "${KVC_CUDA_TOOLKIT_ROOT}" DIRECTORY)
  find_library(KVC_CUDART_STATIC NAMES libcudart_static.a cudart_static
    HINTS "${KVC_CUDA_TOOLKIT_ROOT}" PATH_SUFFIXES lib lib64 targets/x86_64-linux/lib targets/sbsa-linux/lib
    NO_DEFAULT_PATH)
  if(NOT KVC_CUDART_STATIC)
    message(FATAL_ERROR "no libcudart_static.a next to ${CMAKE_CUDA_COMPILER} (looked in ${KVC_CUDA_TOOLKIT_ROOT}/lib); "
                        "the CUDA plugin links the runtime statically so that it needs only the driver")
  endif()
  message(STATUS "CUDA plugin: ${CMAKE_CUDA_COMPILER} ${CMAKE_CUDA_COMPILER_VERSION}, targets "
                 "${CMAKE_CUDA_ARCHITECTURES}")
endmacro()

function(kvc_find_hipcc)
  find_program(KVC_HIPCC hipcc HINTS /opt/rocm/bin)
  if(NOT KVC_HIPCC)
    message(FATAL_ERROR "KVC_HIP=ON (or KVC_LINK_BACKEND=HIP) needs hipcc: scripts/setup.sh installs it (Debian "
                        "packages hipcc and libamdhip64-dev); or set KVC_HIPCC")
  endif()
  set(KVC_HIP_ARCHITECTURES "${KVC_HIP_DEFAULT_ARCHITECTURES}" CACHE STRING
    "AMD GPU targets of the HIP plugin (e.g. gfx90a;gfx1030)")
  message(STATUS "HIP plugin: ${KVC_HIPCC}, targets ${KVC_HIP_ARCHITECTURES}")
endfunction()

# A backend plugin: lib<name>.so beside libkvcache.so, in the build tree and
# in the install (core/registry.c looks in libkvcache's own directory after
# $KVC_BACKEND_PATH), exporting kvc_backend_entry and nothing else.
function(kvc_gpu_plugin target name)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME ${name}
    LIBRARY_OUTPUT_DIRECTORY "$<TARGET_FILE_DIR:kvcache>")
  set(_map "${PROJECT_SOURCE_DIR}/backends/gpu/plugin.map")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${_map}" "LINKER:--no-undefined")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${_map}")
  if(KVC_INSTALL)
    # Beside libkvcache, where the core looks first; $ORIGIN: nothing absolute, like the library's.
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN")
    install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endfunction()
