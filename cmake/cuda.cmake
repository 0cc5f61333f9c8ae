# CUDA detection. TRAINRT_CUDA=AUTO builds the CUDA backend when nvcc is found
# (default location /usr/local/cuda); ON makes its absence an error; OFF skips it.
# Without a GPU the code still compiles and links; its tests carry the label `gpu`.
set(TRAINRT_BUILD_CUDA OFF)
if(NOT TRAINRT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(TRAINRT_BUILD_CUDA ON)
  elseif(TRAINRT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TRAINRT_CUDA=ON but no CUDA compiler was found (looked for /usr/local/cuda/bin/nvcc)")
  endif()
endif()

if(TRAINRT_BUILD_CUDA)
  # Turing (the seeds' Quadro RTX 5000), Ampere (A100) and Hopper (GH200 nodes) as
  # machine code; PTX only for Hopper, which newer GPUs compile at load time (PTX for
  # every architecture doubled the binary and pushed the GPU bundle past its 60 MiB).
  # CUDA 13 has no Volta. -DCMAKE_CUDA_ARCHITECTURES=... picks others.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 75-real 80-real 90)
  endif()
  enable_language(CUDA)
  # The kernels include the C++20 headers of graph/ and ops/. CMake 3.25 knows no C++20
  # flag for nvcc (nvcc has had -std=c++20 since CUDA 12): it is taught here.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  get_filename_component(_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  find_library(TRAINRT_CUDNN cudnn HINTS ${_cuda_root}/lib64 ${_cuda_root}/lib REQUIRED)
  find_library(TRAINRT_NCCL nccl HINTS ${_cuda_root}/lib64 ${_cuda_root}/lib REQUIRED)
  # Three object libraries folded into the folder libraries they belong to (the top-level
  # CMakeLists.txt does it): ops/*.cu and ops/cuda/*.cu are kernels of ops/ (registered by register_all),
  # runtime/cuda/* is the cuda Backend and its memory, distribution/cuda/* the NCCL communicator.
  # --compress-mode=size: the smallest fatbinary (decompressed once, when the module loads).
  set(_cuda_flags
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter --compress-mode=size>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-unused-parameter>)
  file(GLOB _cuda_ops_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/ops/*.cu
       ${CMAKE_CURRENT_SOURCE_DIR}/ops/cuda/*.cu)
  file(GLOB _cuda_runtime_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/runtime/cuda/*.cu
       ${CMAKE_CURRENT_SOURCE_DIR}/runtime/cuda/*.cpp)
  file(GLOB _cuda_distribution_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/distribution/cuda/*.cu
       ${CMAKE_CURRENT_SOURCE_DIR}/distribution/cuda/*.cpp)
  add_library(trainrt_cuda_ops OBJECT ${_cuda_ops_srcs})
  add_library(trainrt_cuda_runtime OBJECT ${_cuda_runtime_srcs})
  add_library(trainrt_cuda_distribution OBJECT ${_cuda_distribution_srcs})
  foreach(t trainrt_cuda_ops trainrt_cuda_runtime trainrt_cuda_distribution)
    target_include_directories(${t} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(${t} PUBLIC CUDA::cudart CUDA::cublasLt ${TRAINRT_CUDNN} ${TRAINRT_NCCL})
    target_compile_definitions(${t} PUBLIC TRAINRT_HAVE_CUDA=1)
    target_compile_options(${t} PRIVATE ${_cuda_flags})
  endforeach()
  # `trainrt --version` names the architectures (a GPU bundle made from a compile-check
  # build, sm_90 only, runs on Hopper alone).
  string(REPLACE ";" " " _archs "${CMAKE_CUDA_ARCHITECTURES}")
  set_property(SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/runtime/cuda/cuda_info.cpp APPEND PROPERTY
               COMPILE_DEFINITIONS "TRAINRT_CUDA_ARCHITECTURES=\"${_archs}\"")
  message(STATUS "trainrt: CUDA backend ON (${CMAKE_CUDA_COMPILER}, architectures ${_archs})")
else()
  message(STATUS "trainrt: CUDA backend OFF")
endif()
