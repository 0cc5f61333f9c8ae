#include "launch/tensor_files.h"

#include <filesystem>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace trainrt {

TensorMap read_feeds(const std::vector<std::string>& specs) {
  TensorMap feeds;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw_bad_input("--input " + spec, "expected NAME=FILE.pb");
    const std::string name = spec.substr(0, eq);
    if (feeds.count(name)) throw_bad_input("--input " + spec, "input '" + name + "' is given twice");
    feeds[name] = read_tensor_file(spec.substr(eq + 1));
  }
  return feeds;
}

std::vector<std::string> write_tensor_files(const std::string& dir, const std::vector<TensorFile>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_bad_input(dir, "cannot create the output folder: " + ec.message());
  std::vector<std::string> written;
  try {
    for (const TensorFile& f : files) {
      const std::string path = (std::filesystem::path(dir) / f.file).string();
      write_tensor_file(*f.tensor, path, f.name);
      written.push_back(path);
    }
  } catch (...) {
    for (const std::string& p : written) std::filesystem::remove(p, ec);
    throw;
  }
  return written;
}

}  // namespace trainrt
