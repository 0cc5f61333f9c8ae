#include "autodiff/gradient.h"

#include "graph/error.h"
#include "graph/schema.h"

namespace trainrt {

GradBuilder::GradBuilder(const Graph& g, const Node& n, std::vector<std::string> dys, std::vector<bool> needs,
                         std::vector<Node>& out)
    : graph_(g), node_(n), dys_(std::move(dys)), needs_(std::move(needs)), out_(out) {}

std::string GradBuilder::dx(size_t i) const {
  if (!needs_dx(i)) return "";
  return node_.name + "/grad/d_" + std::to_string(i);
}

std::string GradBuilder::tmp(const std::string& what) const { return node_.name + "/grad/" + what; }

std::string GradBuilder::constant(const std::string& what, Tensor value) {
  std::string name = tmp(what);
  constants[name] = std::move(value);
  return name;
}

void GradBuilder::add(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                      std::map<std::string, Attribute> attrs, const std::string& domain) {
  Node n;
  n.name = node_.name + "/grad/" + op + (counter_ ? "_" + std::to_string(counter_) : "");
  ++counter_;
  n.op_type = op;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  out_.push_back(std::move(n));
}

void GradRegistry::add_rule(const std::string& op, GradRule rule, std::set<size_t> differentiable, PrepareRule prepare,
                            const std::string& domain) {
  auto key = std::make_pair(canonical_domain(domain), op);
  if (rules_.count(key)) throw_internal("GradRegistry", "rule for '" + op + "' registered twice");
  rules_[key] = GradEntry{std::move(rule), std::move(prepare), std::move(differentiable)};
}

void GradRegistry::add_non_differentiable(const std::string& op, const std::string& domain) {
  non_diff_.insert({canonical_domain(domain), op});
}

const GradEntry* GradRegistry::find(const std::string& domain, const std::string& op) const {
  auto it = rules_.find({canonical_domain(domain), op});
  return it == rules_.end() ? nullptr : &it->second;
}

bool GradRegistry::is_non_differentiable(const std::string& domain, const std::string& op) const {
  return non_diff_.count({canonical_domain(domain), op}) != 0;
}

std::vector<std::string> GradRegistry::ops_with_rules() const {
  std::vector<std::string> out;
  for (const auto& [key, e] : rules_) out.push_back(key.first.empty() ? key.second : key.first + "::" + key.second);
  return out;
}

void register_all_gradients(GradRegistry& r) {
  register_elementwise_gradients(r);
  register_conv_gradients(r);
  register_conv_transpose_gradients(r);
  register_resize_gradients(r);
  register_pool_gradients(r);
  register_norm_gradients(r);
  register_group_norm_gradients(r);
  register_gemm_gradients(r);
  register_shape_gradients(r);
  register_softmax_loss_gradients(r);
  register_misc_gradients(r);
}

const GradRegistry& gradients() {
  static const GradRegistry r = [] {
    GradRegistry built;
    register_all_gradients(built);
    return built;
  }();
  return r;
}

}  // namespace trainrt
