// TensorProto files on the command line, for `trainrt run` and `trainrt grad`.
//
//   TensorMap feeds = read_feeds(a.all("input"));          // "x=x.pb", "mask=m.pb"
//   write_tensor_files("out", {{"output_0.pb", y, "y"}});  // all written, or none
#pragma once

#include <string>
#include <vector>

#include "runtime/executor.h"  // TensorMap

namespace trainrt {

// NAME=FILE.pb specs (the --input flag) read into a feed map; BadInput naming the spec
// for a malformed one or a name given twice.
TensorMap read_feeds(const std::vector<std::string>& specs);

struct TensorFile {
  std::string file;  // file name inside the folder
  const Tensor* tensor;
  std::string name;  // the TensorProto's name
};
// Creates `dir` and writes every file there (each atomically); when one fails, the
// files this call wrote are removed before the error goes on. Returns their paths.
std::vector<std::string> write_tensor_files(const std::string& dir, const std::vector<TensorFile>& files);

}  // namespace trainrt
