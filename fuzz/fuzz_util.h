// Shared pieces of the libFuzzer targets in fuzz/.
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     return trainrt::fuzz::expect_clean_error([&] { import_onnx_bytes(...); });
//   }
//
// Why: hostile input must end in a trainrt::Error of kind BadInput or Unsupported
// (the CLI prints one line and exits 2). A sanitizer report, a crash, a hang, a
// leak, an Internal error or any other exception escaping a reader is a finding:
// the target aborts so libFuzzer saves the input as crash-<sha1>.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>

#include "graph/error.h"

namespace trainrt::fuzz {

// Runs f; returns 0 when it succeeds or throws a clean (exit-2) trainrt::Error.
template <typename F>
int expect_clean_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Internal) {
      std::fprintf(stderr, "fuzz finding: internal error on hostile input: %s\n", e.what());
      std::abort();
    }
  } catch (const std::bad_alloc&) {
    // Allocations over -rss_limit_mb / malloc_limit_mb are reported by libFuzzer itself;
    // a bad_alloc reaching here means a size from the file was trusted.
    std::fprintf(stderr, "fuzz finding: std::bad_alloc (a size from the input was trusted)\n");
    std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding: exception that is not a trainrt::Error: %s\n", e.what());
    std::abort();
  }
  return 0;
}

// A private folder for the files a reader needs (removed at exit).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trainrt-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::filesystem::path keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return keep;
  }();
  return dir;
}

inline void write_bytes(const std::filesystem::path& p, const uint8_t* data, size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::perror(p.c_str());
    std::abort();
  }
}

}  // namespace trainrt::fuzz
