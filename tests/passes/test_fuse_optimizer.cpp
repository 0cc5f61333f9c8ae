// fuse_optimizer (passes/fuse_optimizer.cpp): the per-parameter SGD/Adam nodes that share
// lr, step, attributes and parameter dtype become one MultiSGD/MultiAdam node, value
// names kept; differing attributes, dtypes, momentum buffers or lr split the groups; a
// node whose output another node reads stays. On the Wide ResNet's training graph every
// parameter's update goes into one node, and the graph still types.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "autodiff/training_graph.h"
#include "graph/infer.h"
#include "passes/passes.h"
#include "wrn_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// A graph of optimizer nodes over parameters p<i> (graph inputs, `dtype`, shape {i + 1}).
struct Builder {
  Graph g;
  Builder() {
    g.opsets = {{"", 17}, {kTrainrtDomain, 1}};
    for (const char* s : {"lr", "lr2"}) {
      g.inputs.push_back(s);
      g.values[s] = ValueInfo{DataType::Float32, Shape{}};
    }
    g.inputs.push_back("step");
    g.values["step"] = ValueInfo{DataType::Int64, Shape{}};
  }
  // One SGD (state "m": a momentum buffer) or Adam node for a new parameter.
  void add(const std::string& op, std::map<std::string, Attribute> attrs, DataType dtype = DataType::Float32,
           bool buffer = false, const std::string& lr = "lr") {
    const std::string p = "p" + std::to_string(g.nodes.size());
    const Shape shape = shape_of({static_cast<int64_t>(g.nodes.size() + 1)});
    Node n;
    n.name = "optimizer/" + p;
    n.domain = kTrainrtDomain;
    n.op_type = op;
    n.attrs = std::move(attrs);
    n.inputs = {p, p + ".grad", lr, "step"};
    n.outputs = {p + ".updated"};
    std::vector<std::string> states;
    if (op == "Adam") states = {p + ".exp_avg", p + ".exp_avg_sq"};
    if (buffer) states = {p + ".momentum"};
    for (const std::string& s : states) {
      n.inputs.push_back(s);
      n.outputs.push_back(s + ".updated");
    }
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (i != 2 && i != 3) {
        g.inputs.push_back(n.inputs[i]);
        g.values[n.inputs[i]] = ValueInfo{dtype, shape};
      }
    for (const std::string& o : n.outputs) g.outputs.push_back(o);
    g.nodes.push_back(std::move(n));
  }
};

std::map<std::string, Attribute> sgd(float momentum = 0, float wd = 0) {
  return {{"momentum", Attribute::of_float(momentum)}, {"weight_decay", Attribute::of_float(wd)}};
}

std::multiset<std::string> outputs_of(const Graph& g) {
  std::multiset<std::string> s;
  for (const Node& n : g.nodes) s.insert(n.outputs.begin(), n.outputs.end());
  return s;
}

}  // namespace

TEST_CASE("fuse_optimizer: one multi node per group of lr, step, attributes, dtype and buffers") {
  Builder b;
  b.add("SGD", sgd());                                    // p0: group A
  b.add("SGD", sgd());                                    // p1: A
  b.add("SGD", sgd(0, 1e-4f));                            // p2: B (weight decay)
  b.add("SGD", sgd(), DataType::Float64);                 // p3: C (fp64)
  b.add("SGD", sgd(), DataType::Float64);                 // p4: C
  b.add("SGD", sgd(0.9f), DataType::Float32, true);       // p5: D (momentum buffer)
  b.add("SGD", sgd(0.9f), DataType::Float32, true);       // p6: D
  b.add("SGD", sgd(), DataType::Float32, false, "lr2");   // p7: E (another lr)
  b.add("SGD", sgd());                                    // p8: A
  b.add("Adam", {{"beta1", Attribute::of_float(0.9f)}});  // p9: F
  b.add("Adam", {{"beta1", Attribute::of_float(0.9f)}});  // p10: F
  b.add("Adam", {{"beta1", Attribute::of_float(0.8f)}});  // p11: G
  Graph g = b.g;
  validate_graph(g, registry().schemas, "optimizers");
  infer_shapes(g, registry().schemas, "optimizers");
  const Graph before = g;
  CHECK(fuse_optimizer(g) == 5);  // A: 3 -> 1, C, D, F: 2 -> 1
  CHECK(op_counts(g) == std::map<std::string, size_t>{{"ai.trainrt::MultiSGD", 3},
                                                      {"ai.trainrt::SGD", 2},
                                                      {"ai.trainrt::MultiAdam", 1},
                                                      {"ai.trainrt::Adam", 1}});
  CHECK(outputs_of(g) == outputs_of(before));  // every value name kept
  CHECK(g.outputs == before.outputs);
  CHECK(g.inputs == before.inputs);
  // Group A, at its last node's place, in its parameters' order.
  const Node* a = nullptr;
  for (const Node& n : g.nodes)
    if (n.op_type == "MultiSGD" && n.inputs.size() == 8) a = &n;
  REQUIRE(a != nullptr);
  CHECK(a->name == "optimizer/p0+optimizer/p8");
  CHECK(a->inputs == std::vector<std::string>{"lr", "step", "p0", "p0.grad", "p1", "p1.grad", "p8", "p8.grad"});
  CHECK(a->outputs == std::vector<std::string>{"p0.updated", "p1.updated", "p8.updated"});
  CHECK(a->attrs.at("weight_decay").f == 0.f);
  CHECK(a == &g.nodes[4]);  // p2, C (at p4), D (at p6), p7, A (at p8), F (at p10), p11
  validate_graph(g, registry().schemas, "fused");
  infer_shapes(g, registry().schemas, "fused");
  CHECK(fuse_optimizer(g) == 0);  // nothing left to fuse
}

TEST_CASE("fuse_optimizer: a node whose output another node reads stays as it is") {
  Builder b;
  b.add("SGD", sgd());
  b.add("SGD", sgd());
  b.add("SGD", sgd());
  Node neg;
  neg.op_type = "Neg";
  neg.inputs = {"p1.updated"};
  neg.outputs = {"n"};
  b.g.nodes.push_back(neg);
  b.g.outputs.push_back("n");
  Graph g = b.g;
  infer_shapes(g, registry().schemas, "optimizers");
  CHECK(fuse_optimizer(g) == 1);
  CHECK(op_counts(g) == std::map<std::string, size_t>{{"ai.trainrt::MultiSGD", 1}, {"ai.trainrt::SGD", 1}, {"Neg", 1}});
  CHECK(g.nodes[0].op_type == "SGD");
  CHECK(g.nodes[0].outputs[0] == "p1.updated");
}

TEST_CASE("fuse_optimizer on the Wide ResNet's training graph: one node updates every parameter") {
  const Graph forward = random_bn_wrn({4, 8, 12, 16}, 0.f, 5);
  for (const char* optimizer : {"sgd", "adamw"}) {
    CAPTURE(optimizer);
    TrainingOptions o;
    o.optimizer = optimizer;
    o.momentum = 0.9f;
    const TrainingGraph t = build_training_graph(forward, o);
    Graph g = t.graph;
    const size_t params = t.params.size();
    REQUIRE(params > 2);
    CHECK(fuse_optimizer(g) == params - 1);
    const std::string multi = std::string(optimizer) == "sgd" ? "ai.trainrt::MultiSGD" : "ai.trainrt::MultiAdam";
    const auto counts = op_counts(g);
    CHECK(counts.at(multi) == 1);
    CHECK(counts.count("ai.trainrt::SGD") + counts.count("ai.trainrt::Adam") == 0);
    CHECK(g.nodes.size() == t.graph.nodes.size() - (params - 1));
    CHECK(outputs_of(g) == outputs_of(t.graph));
    validate_graph(g, registry().schemas, "fused");
    infer_shapes(g, registry().schemas, "fused");
    // Nothing before the optimizer moved (Dropout's seeds are the nodes' indices).
    for (size_t i = 0; i < g.nodes.size() && g.nodes[i].domain + "::" + g.nodes[i].op_type != multi; ++i)
      CHECK(g.nodes[i].name == t.graph.nodes[i].name);
  }
}
