# The public header must compile as strict C99 and as C++11 and C++17, each
# header on its own and all together; a program built that way then checks at
# run time that the header agrees with the library it links. A warning fails
# the build, so a header regression cannot reach a user unseen.
set(_dir "${PROJECT_SOURCE_DIR}/tests/header")
set(_gen "${CMAKE_CURRENT_BINARY_DIR}/header")

# One translation unit per public header that includes only that header
# (twice, for the include guard), generated so new headers are covered.
file(GLOB _headers CONFIGURE_DEPENDS
  RELATIVE "${PROJECT_SOURCE_DIR}/abi/include"
  "${PROJECT_SOURCE_DIR}/abi/include/*.h"
  "${PROJECT_SOURCE_DIR}/abi/include/kvcache/*.h")
set(_alone_c "")
set(_alone_cxx "")
foreach(_h IN LISTS _headers)
  string(MAKE_C_IDENTIFIER "${_h}" _id)
  set(_body "/* generated: ${_h} compiles on its own */\n#include <${_h}>\n#include <${_h}>\ntypedef int alone_${_id};\n")
  file(CONFIGURE OUTPUT "${_gen}/alone_${_id}.c" CONTENT "${_body}")
  file(CONFIGURE OUTPUT "${_gen}/alone_${_id}.cpp" CONTENT "${_body}")
  list(APPEND _alone_c "${_gen}/alone_${_id}.c")
  list(APPEND _alone_cxx "${_gen}/alone_${_id}.cpp")
endforeach()

set(_strict -Wall -Wextra -pedantic -Werror)

kvc_add_program(header_c99 SOURCES "${_dir}/header_check.c" ${_alone_c} LINK kvcache
  OUTPUT_DIR tests/header ASSERTS)
set_target_properties(header_c99 PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF)
target_compile_options(header_c99 PRIVATE ${_strict} -Wstrict-prototypes)
add_test(NAME header_c99 COMMAND header_c99)
kvc_test_properties(header_c99 LABELS header TIMEOUT 60)

include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  foreach(_std 11 17)
    kvc_add_program(header_cxx${_std} SOURCES "${_dir}/header_check.cpp" ${_alone_cxx}
      LINK kvcache OUTPUT_DIR tests/header ASSERTS)
    set_target_properties(header_cxx${_std} PROPERTIES CXX_STANDARD ${_std}
      CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
    target_compile_options(header_cxx${_std} PRIVATE ${_strict})
    add_test(NAME header_cxx${_std} COMMAND header_cxx${_std})
    kvc_test_properties(header_cxx${_std} LABELS header TIMEOUT 60)
  endforeach()
else()
  message(WARNING "no C++ compiler: the C++ header tests will report SKIPPED")
  foreach(_std 11 17)
    add_test(NAME header_cxx${_std} COMMAND "${CMAKE_COMMAND}" -E echo
      "SKIPPED: no C++ compiler was found when configuring")
    # A passing echo must not count as a pass.
    set_tests_properties(header_cxx${_std} PROPERTIES LABELS header
      SKIP_REGULAR_EXPRESSION "SKIPPED")
  endforeach()
endif()
