# libFuzzer targets (TRAINRT_FUZZ=ON, clang): one executable per fuzz/fuzz_*.cpp.
#
#   cmake -S . -B build-fz -G Ninja -DTRAINRT_FUZZ=ON -DTRAINRT_CUDA=OFF \
#         -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16
#   cmake --build build-fz --target trainrt_fuzz
#   python3 fuzz/make_corpus.py build-fz/corpus && build-fz/fuzz/fuzz_onnx_import build-fz/corpus/onnx_import
#
# Why: the instrumentation flags are set for every target by cmake/sanitizers.cmake;
# this file only adds the executables (linked with libFuzzer's main) and the
# `trainrt_fuzz` target that builds them all. tools/ci_reliability.sh runs them.
if(NOT TRAINRT_FUZZ)
  return()
endif()

add_custom_target(trainrt_fuzz)
set(_fuzz_dir ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)

# trainrt_fuzz_target(NAME [SOURCE FILE] [extra sources...]): fuzz/NAME.cpp, or
# fuzz/FILE when one source makes several targets.
function(trainrt_fuzz_target name)
  cmake_parse_arguments(PARSE_ARGV 1 _arg "" "SOURCE" "")
  if(NOT _arg_SOURCE)
    set(_arg_SOURCE ${name}.cpp)
  endif()
  add_executable(${name} ${_fuzz_dir}/${_arg_SOURCE} ${_arg_UNPARSED_ARGUMENTS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${TRAINRT_WARNINGS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(trainrt_fuzz ${name})
endfunction()

trainrt_fuzz_target(fuzz_onnx_import)
target_link_libraries(fuzz_onnx_import PRIVATE trainrt_autodiff)

trainrt_fuzz_target(fuzz_tensor_proto)
target_link_libraries(fuzz_tensor_proto PRIVATE trainrt_graph)

# The readers alone (datasets/dataset.cpp needs only graph/ and zlib), not all of
# trainrt_launch with its runtime and OpenMP.
trainrt_fuzz_target(fuzz_dataset ${CMAKE_CURRENT_SOURCE_DIR}/datasets/dataset.cpp)
target_link_libraries(fuzz_dataset PRIVATE trainrt_graph ZLIB::ZLIB)

# The checkpoint reader (training/checkpoint.cpp: graph/, protobuf, zlib).
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/training/checkpoint.cpp)
  trainrt_fuzz_target(fuzz_checkpoint ${CMAKE_CURRENT_SOURCE_DIR}/training/checkpoint.cpp)
  target_link_libraries(fuzz_checkpoint PRIVATE trainrt_graph ZLIB::ZLIB)
endif()

# The image decoders (datasets/image.cpp: libjpeg-turbo, libpng), one target each from
# one source that FUZZ_IMAGE_PNG points at one decoder.
foreach(_fmt jpeg png)
  trainrt_fuzz_target(fuzz_image_${_fmt} SOURCE fuzz_image.cpp ${CMAKE_CURRENT_SOURCE_DIR}/datasets/image.cpp)
  target_link_libraries(fuzz_image_${_fmt} PRIVATE trainrt_graph JPEG::JPEG PNG::PNG)
  target_compile_definitions(fuzz_image_${_fmt} PRIVATE FUZZ_IMAGE_PNG=$<STREQUAL:${_fmt},png>)
endforeach()
