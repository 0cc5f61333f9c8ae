// Fuzz target: bytes -> ONNX import (parse, convert, validate_graph, infer_shapes)
// -> build_training_graph when the model has float parameters.
//
//   build-fz/fuzz/fuzz_onnx_import -max_total_time=60 corpus/onnx_import
//
// External data resolves against a scratch folder holding `weights.bin` (64 bytes)
// and a symlink `escape` to /etc, so the path checks (absolute, "..", symlink
// escape, offset/length against the file size) are reachable from the corpus.
#include <filesystem>
#include <string>
#include <system_error>

#include "autodiff/training_graph.h"
#include "fuzz/fuzz_util.h"
#include "graph/onnx_io.h"
#include "ops/core/register_all.h"

using namespace trainrt;

namespace {

const std::string& model_dir() {
  static const std::string dir = [] {
    auto d = fuzz::scratch_dir() / "model";
    std::filesystem::create_directories(d);
    uint8_t w[64];
    for (int i = 0; i < 64; ++i) w[i] = static_cast<uint8_t>(i);
    fuzz::write_bytes(d / "weights.bin", w, sizeof w);
    std::error_code ec;
    std::filesystem::create_directory_symlink("/etc", d / "escape", ec);
    return d.string();
  }();
  return dir;
}

bool has_float_parameter(const Graph& g) {
  for (const auto& [name, t] : g.initializers)
    if (t.dtype() == DataType::Float32 || t.dtype() == DataType::Float64) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Registry& reg = registry();
  ImportLimits limits;
  limits.max_file_bytes = 1 << 20;      // the fuzzer's inputs are small;
  limits.max_tensor_bytes = 16u << 20;  // keep allocations under -rss_limit_mb
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  return fuzz::expect_clean_error([&] {
    Graph g = import_onnx_bytes(bytes, "fuzz.onnx", model_dir(), reg.schemas, limits);
    if (!has_float_parameter(g)) return;
    TrainingOptions o;
    o.optimizer = "sgd";
    o.momentum = 0.9f;
    TrainingGraph t = build_training_graph(g, o);
    (void)t;
  });
}
