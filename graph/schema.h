// Op schemas: what an op accepts and the shape rule that types its outputs.
//
//   const OpRegistry& reg = registry().schemas;  // ops/core/register_all.h
//   const OpSchema* s = reg.find("", "Conv");
//   infer_shapes(graph, reg, "model.onnx");      // graph/infer.h
//
// Why here and not in ops/: import, validation and shape inference are graph/
// work, but the rules themselves are written beside each op's kernels in ops/.
// A shape rule both checks (attribute ranges, ranks, channel counts: errors name
// the node) and computes output ValueInfos. The graph constructor is the check.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace trainrt {

// Largest element count of one value (product of its known non-zero dims): above any
// tensor ImportLimits lets in (8 GiB), and low enough that the products of dims in
// shape rules cannot overflow int64 (a hostile Pad or Reshape could make one). Shape
// inference checks every output against it; a rule that multiplies dims it did not
// get from a checked value (Reshape's shape input) checks as it goes.
inline constexpr int64_t kMaxElements = int64_t{1} << 36;
// n * d for a count n <= kMaxElements and a dim d >= 0, or nullopt when it would exceed
// kMaxElements (checked before multiplying, so it cannot overflow).
inline std::optional<int64_t> times_within_limit(int64_t n, int64_t d) {
  if (d != 0 && n > kMaxElements / d) return std::nullopt;
  return n * d;
}

class InferContext {
 public:
  InferContext(const Graph& g, const Node& n, size_t index, std::vector<ValueInfo>& outputs)
      : graph_(g), node_(n), index_(index), outputs_(outputs) {}

  const Node& node() const { return node_; }
  const Graph& graph() const { return graph_; }
  size_t input_count() const { return node_.input_count(); }
  bool has_input(size_t i) const { return node_.has_input(i); }
  const ValueInfo& input(size_t i) const;  // type of input i (must be present)
  // Constant value of input i when it is an initializer or a Constant node output.
  const Tensor* input_constant(size_t i) const;
  // Elements of a scalar or 1-D integer (or bool: 0/1) input as far as they are
  // known: a constant's values, or what shape inference computed for it (ValueInfo::ints); nullopt otherwise.
  std::optional<std::vector<ShapeInt>> input_ints(size_t i) const;
  // input_ints(i) when every element is a number.
  std::optional<std::vector<int64_t>> input_numbers(size_t i) const;
  // Rank of input i; fails if unknown.
  int64_t input_rank(size_t i) const;
  size_t output_count() const { return outputs_.size(); }
  void set_output(size_t i, DataType dtype, Shape shape);
  void set_output(size_t i, ValueInfo info);

  // "node 3 'conv1' (Conv)" for error messages.
  std::string where() const { return describe_node(node_, index_); }
  [[noreturn]] void fail(const std::string& what) const;

 private:
  const Graph& graph_;
  const Node& node_;
  size_t index_;
  std::vector<ValueInfo>& outputs_;
};

using ShapeRule = std::function<void(InferContext&)>;
// Forward FLOPs of one node given its typed inputs/outputs (multiply-add = 2).
using FlopRule = std::function<double(const Graph&, const Node&)>;

struct OpSchema {
  std::string domain;  // "" = ai.onnx
  std::string op_type;
  int min_inputs = 1, max_inputs = 1;
  int min_outputs = 1, max_outputs = 1;
  // Oldest ai.onnx opset whose semantics this schema implements (opset < this is rejected).
  int since_version = 1;
  ShapeRule infer;
  FlopRule flops;  // optional
  // Attributes the op understands; others are reported as unsupported.
  std::vector<std::string> attributes;
};

class OpRegistry {
 public:
  void add(OpSchema schema);  // throws Internal on duplicates
  const OpSchema* find(const std::string& domain, const std::string& op_type) const;
  std::vector<const OpSchema*> all() const;

 private:
  std::map<std::pair<std::string, std::string>, OpSchema> schemas_;
};

// Normalises "ai.onnx" to "" so both spellings find the same schema.
std::string canonical_domain(const std::string& domain);

}  // namespace trainrt
