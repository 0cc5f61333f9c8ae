// The optimizer fusion of a training graph: the per-parameter update nodes
//   p_i' [, m_i'] = SGD(p_i, g_i, lr, step [, m_i])
//   p_i', exp_avg_i', exp_avg_sq_i' = Adam(p_i, g_i, lr, step, exp_avg_i, exp_avg_sq_i)
// that share lr, step, attributes, parameter dtype (and, for SGD, whether they carry a
// momentum buffer) become one
//   MultiSGD(lr, step, p_1, g_1, [m_1], p_2, g_2, [m_2], ...) or
//   MultiAdam(lr, step, p_1, g_1, exp_avg_1, exp_avg_sq_1, ...)
// (ops/optimizer.cpp), in the order the parameters' nodes had, writing every output
// under its old name: the state updates, checkpoints and exports see the same values.
// What it saves: one kernel for all parameters instead of one per parameter (on a GPU
// ~50 tiny launches per Wide ResNet step become one, as PyTorch's foreach optimizers
// and apex's multi_tensor_apply do). The multi node takes the position of its group's
// last node, after which every member's inputs exist; a node whose outputs another
// node reads stays as it is (a multi node's outputs are written only at its position).
// Nodes before the group keep their indices (Dropout's seeds, runtime/executor.cpp).
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "passes/fuse_util.h"
#include "passes/passes.h"

namespace trainrt {

namespace {

// The key of the group node n may join: op type, lr, step, parameter dtype, argument
// counts and attributes; empty when n is no fusable update (an optional argument
// omitted, a non-scalar attribute, an output other nodes read).
std::string group_key(const Graph& g, const passes::Uses& u, const Node& n) {
  if (n.domain != kTrainrtDomain) return "";
  const bool sgd = n.op_type == "SGD", adam = n.op_type == "Adam";
  const size_t ins = n.inputs.size(), outs = n.outputs.size();
  if (!(sgd && ((ins == 4 && outs == 1) || (ins == 5 && outs == 2))) && !(adam && ins == 6 && outs == 3)) return "";
  for (const std::string& v : n.inputs)
    if (v.empty()) return "";
  for (const std::string& v : n.outputs)
    if (v.empty() || u.readers.count(v)) return "";
  const ValueInfo* p = g.find_info(n.inputs[0]);
  if (!p || (p->dtype != DataType::Float32 && p->dtype != DataType::Float64)) return "";
  std::string key = n.op_type + '\n' + n.inputs[2] + '\n' + n.inputs[3] + '\n' + dtype_name(p->dtype) + '\n' +
                    std::to_string(ins) + '\n';
  for (const auto& [name, a] : n.attrs) {  // std::map: in name order
    if (a.kind == Attribute::Kind::Int) {
      key += name + "=i" + std::to_string(a.i) + '\n';
    } else if (a.kind == Attribute::Kind::Float) {
      uint32_t bits = 0;  // exact: 0.9f and 0.90000004f are different settings
      std::memcpy(&bits, &a.f, sizeof bits);
      key += name + "=f" + std::to_string(bits) + '\n';
    } else {
      return "";
    }
  }
  return key;
}

}  // namespace

size_t fuse_optimizer(Graph& g) {
  const passes::Uses u(g);
  std::map<std::string, std::vector<size_t>> groups;  // key -> member nodes in graph order
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (std::string key = group_key(g, u, g.nodes[i]); !key.empty()) groups[key].push_back(i);
  std::vector<bool> dead(g.nodes.size(), false);
  size_t removed = 0;
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    const Node& first = g.nodes[members.front()];
    Node multi;
    multi.name = passes::fused_name(first, g.nodes[members.back()]);
    multi.domain = kTrainrtDomain;
    multi.op_type = first.op_type == "SGD" ? "MultiSGD" : "MultiAdam";
    multi.attrs = first.attrs;
    multi.inputs = {first.inputs[2], first.inputs[3]};  // lr, step
    for (size_t i : members) {
      const Node& n = g.nodes[i];
      for (size_t j = 0; j < n.inputs.size(); ++j)
        if (j != 2 && j != 3) multi.inputs.push_back(n.inputs[j]);
      multi.outputs.insert(multi.outputs.end(), n.outputs.begin(), n.outputs.end());
      dead[i] = true;
    }
    dead[members.back()] = false;
    g.nodes[members.back()] = std::move(multi);
    removed += members.size() - 1;
  }
  passes::erase_marked(g, dead);
  return removed;
}

}  // namespace trainrt
