// Fuzz target: bytes -> read_tensor_file, the TensorProto reader of `trainrt run`
// (inputs input_N.pb) and of the golden test data.
//
//   build-fz/fuzz/fuzz_tensor_proto -max_total_time=60 corpus/tensor_proto
//
// read_tensor_file takes a path, so each input is written to a scratch file first.
#include "fuzz/fuzz_util.h"
#include "graph/onnx_io.h"

using namespace trainrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = (fuzz::scratch_dir() / "input_0.pb").string();
  fuzz::write_bytes(path, data, size);
  ImportLimits limits;
  limits.max_file_bytes = 1 << 20;
  limits.max_tensor_bytes = 16u << 20;
  return fuzz::expect_clean_error([&] {
    Tensor t = read_tensor_file(path, limits);
    (void)t;
  });
}
