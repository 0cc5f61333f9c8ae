#include "runtime/executor.h"

#include <algorithm>
#include <unordered_map>

#include "graph/error.h"
#include "graph/infer.h"

namespace trainrt {

Graph specialize(const Graph& g, const TensorMap& feeds) {
  Graph s = g;
  for (const std::string& in : g.inputs) {
    auto it = feeds.find(in);
    if (it == feeds.end()) throw_bad_input("input '" + in + "'", "is required but was not given");
    const Tensor& t = it->second;
    const ValueInfo& want = g.info(in);
    if (t.dtype() != want.dtype)
      throw_bad_input("input '" + in + "'",
                      std::string("expected ") + dtype_name(want.dtype) + ", got " + dtype_name(t.dtype()));
    if (want.shape) {
      bool ok = want.shape->size() == t.dims().size();
      for (size_t i = 0; ok && i < t.dims().size(); ++i)
        ok = !(*want.shape)[i].known() || (*want.shape)[i].value == t.dims()[i];
      if (!ok)
        throw_bad_input("input '" + in + "'",
                        "expected shape " + shape_to_string(*want.shape) + ", got " + dims_to_string(t.dims()));
    }
    s.values[in] = ValueInfo{t.dtype(), shape_of(t.dims())};
  }
  for (const auto& [name, t] : feeds)
    if (!s.find_info(name) || std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end())
      throw_bad_input("input '" + name + "'", "is not an input of the model");
  infer_shapes(s, registry().schemas, "");
  return s;
}

TensorMap run_graph(const Graph& g, const TensorMap& feeds, const Backend& backend, const RunOptions& opts) {
  Graph s = specialize(g, feeds);
  std::unordered_map<std::string, Tensor> values;
  for (const auto& [name, t] : s.initializers) values[name] = t;
  for (const auto& [name, t] : feeds) values[name] = t;
  uint64_t node_index = 0;
  for (const Node& n : s.nodes) {
    const Kernel& k = backend.kernel(n);
    KernelContext ctx{n, {}, {}, opts.training, opts.seed * 1000003u + node_index++};
    for (const std::string& in : n.inputs) ctx.inputs.push_back(in.empty() ? nullptr : &values.at(in));
    std::vector<Tensor> outs(n.outputs.size());
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      const ValueInfo& info = s.info(n.outputs[i]);
      if (!info.shape || !shape_is_known(*info.shape))
        throw_internal(describe_node(n, node_index - 1), "output '" + n.outputs[i] + "' has no concrete shape");
      values[n.outputs[i]] = Tensor(info.dtype, shape_dims(*info.shape));
    }
    for (const std::string& out : n.outputs) ctx.outputs.push_back(out.empty() ? nullptr : &values.at(out));
    try {
      k(ctx);
    } catch (const Error& e) {
      throw Error(e.kind(), describe_node(n, node_index - 1) + ": " + e.what());
    } catch (const std::exception& e) {
      throw_internal(describe_node(n, node_index - 1), e.what());
    }
  }
  TensorMap result;
  for (const std::string& out : s.outputs) result[out] = values.at(out);
  for (const std::string& out : opts.extra_outputs) {
    auto it = values.find(out);
    if (it == values.end()) throw_bad_input("output '" + out + "'", "is not a value of the model");
    result[out] = it->second;
  }
  return result;
}

}  // namespace trainrt
