#include "graph/schema.h"

#include "graph/error.h"

namespace trainrt {

std::string canonical_domain(const std::string& domain) { return domain == "ai.onnx" ? "" : domain; }

const ValueInfo& InferContext::input(size_t i) const {
  if (!node_.has_input(i)) fail("input " + std::to_string(i) + " is required");
  const ValueInfo* v = graph_.find_info(node_.inputs[i]);
  if (!v) fail("input " + std::to_string(i) + " '" + node_.inputs[i] + "' has no known type");
  return *v;
}

const Tensor* InferContext::input_constant(size_t i) const {
  if (!node_.has_input(i)) return nullptr;
  auto it = graph_.initializers.find(node_.inputs[i]);
  if (it != graph_.initializers.end()) return &it->second;
  for (const Node& n : graph_.nodes)
    if (n.op_type == "Constant" && canonical_domain(n.domain).empty() && !n.outputs.empty() &&
        n.outputs[0] == node_.inputs[i])
      return n.attr_tensor("value");
  return nullptr;
}

std::optional<std::vector<ShapeInt>> InferContext::input_ints(size_t i) const {
  if (!node_.has_input(i)) return std::nullopt;
  if (const Tensor* t = input_constant(i)) {
    const DataType d = t->dtype();
    if ((d != DataType::Int64 && d != DataType::Int32 && d != DataType::Bool) || t->rank() > 1) return std::nullopt;
    std::vector<ShapeInt> v;
    for (int64_t k = 0; k < t->numel(); ++k)
      v.push_back(ShapeInt::of(d == DataType::Int64   ? t->data<int64_t>()[k]
                               : d == DataType::Int32 ? t->data<int32_t>()[k]
                                                      : static_cast<int64_t>(t->get_as_double(k))));
    return v;
  }
  const ValueInfo* v = graph_.find_info(node_.inputs[i]);
  return v ? v->ints : std::nullopt;
}

std::optional<std::vector<int64_t>> InferContext::input_numbers(size_t i) const {
  std::optional<std::vector<ShapeInt>> v = input_ints(i);
  if (!v) return std::nullopt;
  std::vector<int64_t> out;
  for (const ShapeInt& e : *v) {
    if (!e.known()) return std::nullopt;
    out.push_back(e.value);
  }
  return out;
}

int64_t InferContext::input_rank(size_t i) const {
  const ValueInfo& v = input(i);
  if (!v.shape) fail("input " + std::to_string(i) + " '" + node_.inputs[i] + "' has unknown rank");
  return static_cast<int64_t>(v.shape->size());
}

void InferContext::set_output(size_t i, DataType dtype, Shape shape) {
  set_output(i, ValueInfo{dtype, std::move(shape)});
}

void InferContext::set_output(size_t i, ValueInfo info) {
  if (i >= outputs_.size()) return;  // optional output not requested
  for (const Dim& d : info.shape.value_or(Shape{}))
    if (d.value < -1) fail("computed a negative output dimension " + shape_to_string(*info.shape));
  outputs_[i] = std::move(info);
}

void InferContext::fail(const std::string& what) const { throw_bad_input(where(), what); }

void OpRegistry::add(OpSchema schema) {
  auto key = std::make_pair(canonical_domain(schema.domain), schema.op_type);
  if (schemas_.count(key)) throw_internal("OpRegistry", "op '" + schema.op_type + "' registered twice");
  schemas_.emplace(key, std::move(schema));
}

const OpSchema* OpRegistry::find(const std::string& domain, const std::string& op_type) const {
  auto it = schemas_.find({canonical_domain(domain), op_type});
  return it == schemas_.end() ? nullptr : &it->second;
}

std::vector<const OpSchema*> OpRegistry::all() const {
  std::vector<const OpSchema*> out;
  for (const auto& [k, s] : schemas_) out.push_back(&s);
  return out;
}

}  // namespace trainrt
