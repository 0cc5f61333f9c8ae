// The graph IR: one Graph of Nodes that read and write named Values.
//
//   Graph g = import_onnx_file("wrn.onnx", registry().schemas);   // graph/onnx_io.h, ops/core/register_all.h
//   for (const Node& n : g.nodes) std::cout << n.op_type << " " << shape_to_string(*g.info(n.outputs[0]).shape);
//
// Why names and not pointers: ONNX is name-based, passes rewrite nodes freely and
// the exporter writes names back unchanged. Forward, backward (domain ai.trainrt)
// and optimizer nodes all live in this one list. Shapes are N,C,H,W for images; a
// dimension is either a number or a symbol (the batch, "N").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/tensor.h"

namespace trainrt {

// A dimension: a known size (value >= 0) or a symbol such as "N" (value == -1).
struct Dim {
  int64_t value = -1;
  std::string symbol;
  bool known() const { return value >= 0; }
  bool operator==(const Dim&) const = default;
  static Dim of(int64_t v) { return Dim{v, {}}; }
  static Dim sym(std::string s) { return Dim{-1, std::move(s)}; }
};
using Shape = std::vector<Dim>;

std::string shape_to_string(const Shape& s);  // "[N,3,32,32]"
Shape shape_of(const std::vector<int64_t>& dims);
bool shape_is_known(const Shape& s);
std::vector<int64_t> shape_dims(const Shape& s);  // requires shape_is_known

// One element of a small integer value known while shapes are inferred (Shape's
// output and what is computed from it): a number of any sign, or not a number, then
// the symbol of the dimension it copies ("N") or "?" when nothing is known.
struct ShapeInt {
  int64_t value = 0;
  std::string symbol;  // empty: `value` is the number
  bool known() const { return symbol.empty(); }
  bool operator==(const ShapeInt&) const = default;
  static ShapeInt of(int64_t v) { return ShapeInt{v, {}}; }
  static ShapeInt of(const Dim& d) { return d.known() ? of(d.value) : ShapeInt{0, d.symbol.empty() ? "?" : d.symbol}; }
  // As a dimension: a number >= 0, the symbol, or unknown.
  Dim dim() const { return known() ? (value >= 0 ? Dim::of(value) : Dim{}) : symbol == "?" ? Dim{} : Dim::sym(symbol); }
};

// Type of a value: dtype plus a shape that may be missing (rank unknown). `ints`:
// for a scalar or 1-D integer value computed from shapes (or a bool one, 0/1, compared
// from them), its elements as far as shape inference knows them (Reshape's computed
// shape becomes [N,2,58,8,8]).
struct ValueInfo {
  ValueInfo() = default;
  ValueInfo(DataType t, std::optional<Shape> s = std::nullopt, std::optional<std::vector<ShapeInt>> i = std::nullopt)
      : dtype(t), shape(std::move(s)), ints(std::move(i)) {}
  DataType dtype = DataType::Undefined;
  std::optional<Shape> shape;
  std::optional<std::vector<ShapeInt>> ints;
  bool operator==(const ValueInfo&) const = default;
};

struct Attribute {
  enum class Kind { Float, Int, String, Tensor, Floats, Ints, Strings };
  Kind kind = Kind::Int;
  float f = 0;
  int64_t i = 0;
  std::string s;
  trainrt::Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  static Attribute of_int(int64_t v) {
    Attribute a;
    a.kind = Kind::Int;
    a.i = v;
    return a;
  }
  static Attribute of_float(float v) {
    Attribute a;
    a.kind = Kind::Float;
    a.f = v;
    return a;
  }
  static Attribute of_string(std::string v) {
    Attribute a;
    a.kind = Kind::String;
    a.s = std::move(v);
    return a;
  }
  static Attribute of_ints(std::vector<int64_t> v) {
    Attribute a;
    a.kind = Kind::Ints;
    a.ints = std::move(v);
    return a;
  }
  static Attribute of_floats(std::vector<float> v) {
    Attribute a;
    a.kind = Kind::Floats;
    a.floats = std::move(v);
    return a;
  }
  static Attribute of_tensor(trainrt::Tensor v) {
    Attribute a;
    a.kind = Kind::Tensor;
    a.t = std::move(v);
    return a;
  }
};
const char* attribute_kind_name(Attribute::Kind k);

// The domain of trainrt's own ops (backward, fused, optimizer); "" is ai.onnx.
inline constexpr const char* kTrainrtDomain = "ai.trainrt";

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;                // "" is ai.onnx; "ai.trainrt" for our own ops
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  std::map<std::string, Attribute> attrs;
  std::string doc_string;

  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  // Typed getters; a present attribute of the wrong kind is a bad-input error.
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  float attr_float(const std::string& key, float fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> fallback = {}) const;
  const Tensor* attr_tensor(const std::string& key) const;

  // Number of inputs/outputs up to the last non-empty name.
  size_t input_count() const;
  size_t output_count() const;
  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  bool has_output(size_t i) const { return i < outputs.size() && !outputs[i].empty(); }
};

// "node 3 'conv1' (Conv)": how every message names a node.
std::string describe_node(const Node& n, size_t index);

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<std::string> inputs;  // graph inputs that are not initializers
  std::vector<std::string> outputs;
  std::map<std::string, Tensor> initializers;
  std::unordered_map<std::string, ValueInfo> values;  // type of every known value
  std::map<std::string, int64_t> opsets;              // domain -> version
  int64_t ir_version = 8;
  std::string producer_name, producer_version, doc_string;
  std::vector<std::pair<std::string, std::string>> metadata;
  // Initializers that were graph inputs too (ONNX IR < 4 style); kept for export.
  std::vector<std::string> initializer_inputs;

  const ValueInfo& info(const std::string& value) const;  // throws Internal if unknown
  ValueInfo* find_info(const std::string& value);
  const ValueInfo* find_info(const std::string& value) const;
  bool is_initializer(const std::string& v) const { return initializers.count(v) != 0; }
  int64_t opset(const std::string& domain = "") const;

  // value -> index of the node that writes it (graph inputs/initializers absent)
  std::unordered_map<std::string, size_t> producers() const;
  // value -> indices of nodes that read it
  std::unordered_map<std::string, std::vector<size_t>> consumers() const;
  // A topological order of node indices; throws BadInput naming a node on a cycle.
  std::vector<size_t> topological_order() const;
  // Reorders `nodes` topologically (stable where possible).
  void sort_topologically();
  // Number of float elements in initializers (the parameter count of a model).
  int64_t parameter_count() const;
};

}  // namespace trainrt
