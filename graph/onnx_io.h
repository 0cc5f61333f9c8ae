// ONNX files in and out of the IR, and ONNX TensorProto files (test data).
//
//   const OpRegistry& reg = registry().schemas;        // ops/core/register_all.h
//   Graph g = import_onnx_file("model.onnx", reg);   // validated, shapes inferred
//   export_onnx_file(g, "out.onnx");                   // atomic write
//   Tensor x = read_tensor_file("input_0.pb");
//
// Why: the importer is the trust boundary. Every size read from the file is
// checked against the file's own size and the limits below before anything is
// allocated, external data must stay inside the model's folder, and every error
// is one line naming the file and the node or field.
#pragma once

#include <cstdint>
#include <string>

#include "graph/schema.h"

namespace trainrt {

struct ImportLimits {
  uint64_t max_file_bytes = 8ull << 30;    // the .onnx file itself
  uint64_t max_tensor_bytes = 8ull << 30;  // one initializer (inline or external)
  int64_t max_dim = int64_t{1} << 32;      // one dimension
  int64_t max_rank = 8;
  uint64_t max_nodes = 1u << 20;
};

// Parses, converts, validates and infers shapes. Throws Error (BadInput /
// Unsupported) with "<path>: ..." messages.
Graph import_onnx_file(const std::string& path, const OpRegistry& reg, const ImportLimits& limits = {});
// Same, from bytes; `base_dir` resolves external data ("" forbids it).
Graph import_onnx_bytes(const std::string& bytes, const std::string& where, const std::string& base_dir,
                        const OpRegistry& reg, const ImportLimits& limits = {});
// Conversion only (no validation, no inference): for tools that inspect broken models.
Graph parse_onnx_bytes(const std::string& bytes, const std::string& where, const std::string& base_dir,
                       const ImportLimits& limits = {});

std::string export_onnx_bytes(const Graph& g);
void export_onnx_file(const Graph& g, const std::string& path);  // temp file, fsync, rename

Tensor read_tensor_file(const std::string& path, const ImportLimits& limits = {});
void write_tensor_file(const Tensor& t, const std::string& path, const std::string& name = "");

// Files: bounded read and atomic write (temp name in the same folder, fsync, rename).
std::string read_file_bytes(const std::string& path, uint64_t max_bytes);
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace trainrt
