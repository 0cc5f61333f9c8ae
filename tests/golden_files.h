// Committed golden data (tests/data/) is opened through golden_file(): a missing or
// empty file fails the test naming the file, so no comparison can pass because the
// data it compares with is gone.
//
//   Tensor want = read_tensor_file(golden_file(dir + "output_0.pb"));
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

namespace trainrt::test {

inline std::string golden_file(const std::string& path) {
  std::error_code ec;
  REQUIRE_MESSAGE(std::filesystem::is_regular_file(path, ec), "golden file missing: " << path);
  REQUIRE_MESSAGE(std::filesystem::file_size(path, ec) > 0, "golden file empty: " << path);
  return path;
}

// A golden folder must exist and hold files.
inline std::string golden_dir(const std::string& path) {
  std::error_code ec;
  REQUIRE_MESSAGE(std::filesystem::is_directory(path, ec), "golden folder missing: " << path);
  REQUIRE_MESSAGE(!std::filesystem::is_empty(path, ec), "golden folder empty: " << path);
  return path;
}

}  // namespace trainrt::test
