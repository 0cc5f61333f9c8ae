# ccache as the compiler launcher of every configuration (the normal build, the clang
# fuzz/ASan build, the TSan build, the CUDA objects), so a re-run, a second build folder
# and CI after a developer's own builds recompile only what changed.
#
#   cmake -S . -B build -DTRAINRT_CCACHE=OFF        # compile without it
#   CCACHE_DIR=/somewhere ccache -s                 # its statistics
#
# Why a launcher set here rather than by each script: every build folder gets it, and a
# launcher the caller sets (-DCMAKE_CXX_COMPILER_LAUNCHER=...) is kept.
option(TRAINRT_CCACHE "Compile through ccache when it is installed" ON)
find_program(TRAINRT_CCACHE_PROGRAM ccache)
if(TRAINRT_CCACHE AND TRAINRT_CCACHE_PROGRAM)
  # The sloppiness lets ccache cache the sources compiled with the tests' precompiled
  # header (tests/pch.h): it then hashes the header's sources instead of refusing the
  # compile because a .gch/.pch file is newer than the cache's rules allow.
  # Depend mode (C and C++: g++ and clang write the -MD file ccache reads) spares a
  # miss the extra preprocessor run that direct mode needs, ~0.3 s of a 7 s compile.
  # base_dir and no hash_dir: a source's hash holds no absolute path of this checkout and
  # not the build folder, so a second clone (CI's) or a second build folder hits what the
  # first compiled. (Test sources hit only in the same folder: their precompiled header
  # names the folder.)
  set(_sloppy CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=1)
  foreach(lang C CXX CUDA)
    set(_depend CCACHE_DEPEND=1)
    if(lang STREQUAL "CUDA")
      set(_depend "")
    endif()
    if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
      set(CMAKE_${lang}_COMPILER_LAUNCHER env ${_sloppy} ${_depend} ${TRAINRT_CCACHE_PROGRAM})
    endif()
  endforeach()
  message(STATUS "trainrt: compiling through ${TRAINRT_CCACHE_PROGRAM}")
endif()
