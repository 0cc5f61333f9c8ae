# Sanitizer and fuzzing instrumentation for every target defined after this file.
#
#   cmake -S . -B build-ts -DTRAINRT_SANITIZE=thread -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_C_COMPILER=clang-16
#                          # TSan (pipeline, executor, kernels); g++ works too, ~3x slower to build
#   cmake -S . -B build-fz -DTRAINRT_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_C_COMPILER=clang-16
#                          # libFuzzer + ASan+UBSan: the fuzz targets and the whole suite
#   cmake -S . -B build-as -DTRAINRT_SANITIZE=address,undefined   # ASan+UBSan without the fuzz hooks
#
# Why here and global: a sanitizer only sees the code it instruments, so all of
# trainrt's libraries, tests and tools get the same flags. Third-party libraries
# (protobuf, libonnx, oneDNN, oneTBB, libgomp) come from Debian uninstrumented;
# their reports are handled by the narrow suppression files in fuzz/ (see
# docs/reliability.md). Any report ends the process (no recovery), so CI fails.

set(TRAINRT_SANITIZE OFF CACHE STRING "Sanitizers: address,undefined | thread | OFF")
set_property(CACHE TRAINRT_SANITIZE PROPERTY STRINGS OFF "address,undefined" address undefined thread)
option(TRAINRT_FUZZ "Build the libFuzzer targets in fuzz/ (clang; implies address,undefined)" OFF)

if(TRAINRT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TRAINRT_FUZZ=ON needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_C_COMPILER=clang-16")
  endif()
  if(TRAINRT_SANITIZE AND NOT TRAINRT_SANITIZE STREQUAL "OFF" AND NOT TRAINRT_SANITIZE STREQUAL "address,undefined")
    message(FATAL_ERROR "TRAINRT_FUZZ=ON runs with address,undefined; TRAINRT_SANITIZE=${TRAINRT_SANITIZE} conflicts")
  endif()
  set(TRAINRT_SANITIZE "address,undefined")
  # Coverage hooks where the fuzz targets go; the libFuzzer main is linked only into
  # fuzz targets. fuzz/coverage_ignore.txt leaves them out of the kernels, the runtime
  # and the tests, which the ASan suite runs on this same build. Its hash is a
  # definition so that ccache recompiles when the list changes.
  set(_cov_ignore ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/coverage_ignore.txt)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_cov_ignore})
  file(MD5 ${_cov_ignore} _cov_ignore_md5)
  add_compile_options(-fsanitize=fuzzer-no-link -fsanitize-coverage-ignorelist=${_cov_ignore}
                      -DTRAINRT_COVERAGE_IGNORE=${_cov_ignore_md5})
endif()

if(TRAINRT_SANITIZE AND NOT TRAINRT_SANITIZE STREQUAL "OFF")
  if(NOT TRAINRT_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
    message(FATAL_ERROR "TRAINRT_SANITIZE=${TRAINRT_SANITIZE}: expected address,undefined | thread | OFF")
  endif()
  set(_trainrt_san -fsanitize=${TRAINRT_SANITIZE} -fno-omit-frame-pointer)
  # Line tables are all a sanitizer report needs; full -g makes instrumented objects
  # several times larger and the three CI builds slower.
  add_compile_options(-g1)
  if(TRAINRT_SANITIZE MATCHES "undefined")
    list(APPEND _trainrt_san -fno-sanitize-recover=all)  # every UB report is fatal
  endif()
  add_compile_options(${_trainrt_san})
  add_link_options(${_trainrt_san})
  # g++ 12's -Wmaybe-uninitialized misfires on instrumented code: moving an engaged
  # std::optional<Shape> into ValueInfo (graph/ir.h) reads as uninitialized under ASan.
  # The normal build keeps the warning (and -Werror), so real cases are still caught.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
  endif()
  message(STATUS "trainrt: sanitizers ${TRAINRT_SANITIZE} (fuzz targets: ${TRAINRT_FUZZ})")
endif()
