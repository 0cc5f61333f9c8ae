// fuse_training_graph on the Wide ResNet's training graph: BN+Relu, the skip
// Conv + residual Add and the backward of Relu + Dropout fused; loss, every gradient, every updated parameter and BN
// running statistic after one SGD step equal the unfused graph's on both backends.
// TrainingSession applies it unless told not to: 3 SGD steps fused and unfused agree.
// Dropout ratio 0: the executor seeds each node's mask by its index, which fusion changes.
// BatchNormalizationRelu + Dropout -> BatchNormalizationReluDropout keeps the masks
// (dropout_node): with dropout 0.2 the fused graph trains bit for bit as without it.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <set>

#include "autodiff/training_graph.h"
#include "passes/fuse_util.h"
#include "passes/passes.h"
#include "runtime/cudnn_fusion.h"
#include "runtime/training_session.h"
#include "wrn_util.h"

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("fuse_training_graph on the Wide ResNet: counts, and one SGD step equals the unfused graph's") {
  const Graph g = random_bn_wrn({4, 8, 12, 16}, 0.f, 5);
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  o.weight_decay = 5e-4f;
  const TrainingGraph t = build_training_graph(g, o);
  TrainingGraph f = t;
  // 23 patterns, the parameters' SGD nodes into one MultiSGD (passes/fuse_optimizer.cpp),
  // and the six blocks' BatchNormalizationRelu + Dropout.
  const size_t removed = 23 + t.params.size() - 1 + 6;
  CHECK(fuse_training_graph(f.graph) == removed);
  const auto before = op_counts(t.graph), after = op_counts(f.graph);
  CHECK(after.count("BatchNormalization") == 0);
  CHECK(after.count("Relu") == 0);
  CHECK(after.count("Dropout") == 0);
  CHECK(after.at("ai.trainrt::BatchNormalizationRelu") == 7);
  CHECK(after.at("ai.trainrt::BatchNormalizationReluDropout") == 6);
  CHECK(after.at("ai.trainrt::FusedConv") == 3);  // the three 1x1 skip convolutions
  CHECK(after.at("Conv") == before.at("Conv") - 3);
  CHECK(after.at("Add") == before.at("Add") - 3);
  // The six blocks' DropoutGrad + ReluGrad; the other seven Relus feed no Dropout.
  CHECK(after.at("ai.trainrt::DropoutReluGrad") == 6);
  CHECK(after.count("ai.trainrt::DropoutGrad") == 0);
  CHECK(after.at("ai.trainrt::ReluGrad") == 7);
  // Those seven ReluGrads feed a BatchNormalizationGrad, which can mask dY itself (input
  // 5, relu_y: the BatchNormalizationRelu's output); TrainingSession fuses them for
  // asynchronous backends only, whose kernels mask as they read.
  {
    Graph more = f.graph;
    CHECK(passes::fuse_relu_grad_into_bn_grad(more) == 7);
    CHECK(op_counts(more).count("ai.trainrt::ReluGrad") == 0);
    size_t relu_y = 0;
    std::set<std::string> bn_relu_outputs;
    for (const Node& n : more.nodes)
      if (n.op_type == "BatchNormalizationRelu") bn_relu_outputs.insert(n.outputs[0]);
    for (const Node& n : more.nodes)
      if (n.op_type == "BatchNormalizationGrad" && n.inputs.size() == 6) relu_y += bn_relu_outputs.count(n.inputs[5]);
    CHECK(relu_y == 7);
    validate_graph(more, registry().schemas, "relu_y");
  }
  CHECK(after.at("ai.trainrt::MultiSGD") == 1);
  CHECK(after.count("ai.trainrt::SGD") == 0);
  // The classifier's weight and bias gradients: one FusedGemm (sums of dY's columns).
  CHECK(after.at("ai.trainrt::FusedGemm") == 1);
  CHECK(after.at("ai.trainrt::SumToShape") == before.at("ai.trainrt::SumToShape") - 1);
  CHECK(f.graph.nodes.size() == t.graph.nodes.size() - removed);
  // Every BatchNormalizationGrad reads the batch statistics its (fused) forward saved
  // (outputs 5/6, ops/norm.cpp) instead of recomputing them from X.
  std::map<std::string, std::string> saved_by;  // saved statistic -> the forward writing it
  for (const Node& n : f.graph.nodes)
    if ((n.op_type == "BatchNormalizationRelu" || n.op_type == "BatchNormalizationReluDropout") && n.has_output(5) &&
        n.has_output(6)) {
      saved_by[n.outputs[5]] = n.inputs[0];
      saved_by[n.outputs[6]] = n.inputs[0];
    }
  CHECK(saved_by.size() == 26);
  size_t reading_saved = 0;
  for (const Node& n : f.graph.nodes)
    if (n.op_type == "BatchNormalizationGrad" && n.inputs.size() >= 5 && saved_by.count(n.inputs[3]) &&
        saved_by.count(n.inputs[4]))
      reading_saved += saved_by.at(n.inputs[3]) == n.inputs[1] && saved_by.at(n.inputs[4]) == n.inputs[1];
  CHECK(reading_saved == 13);
  CHECK(f.graph.outputs == t.graph.outputs);
  CHECK(f.graph.inputs == t.graph.inputs);
  validate_graph(f.graph, registry().schemas, "fused");
  Graph typed = f.graph;
  infer_shapes(typed, registry().schemas, "fused");
  CHECK(fuse_training_graph(f.graph) == 0);  // nothing left to fuse

  const Tensor x = random_tensor(DataType::Float32, {4, 1, 28, 28}, 6);
  Tensor labels(DataType::Int64, {4});
  for (int i = 0; i < 4; ++i) labels.data<int64_t>()[i] = (3 * i + 1) % 10;
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const double tol = std::string(backend) == "reference" ? 1e-6 : 1e-4;
    // Loss and every gradient of one training run of each graph.
    TensorMap feeds{{"input", x}, {t.labels, labels}, {t.lr, Tensor(DataType::Float32, {})}};
    RunOptions ro;
    ro.training = true;
    for (const std::string& p : t.params) ro.extra_outputs.push_back(t.gradients.at(p));
    const TensorMap ga = run_graph(t.graph, feeds, *make_backend(backend), ro);
    const TensorMap gb = run_graph(f.graph, feeds, *make_backend(backend), ro);
    CHECK(rel_diff(gb.at(t.loss), ga.at(t.loss)) < tol);
    for (const std::string& p : t.params) {
      CAPTURE(p);
      CHECK(rel_diff(gb.at(t.gradients.at(p)), ga.at(t.gradients.at(p))) < tol);
    }
    // Parameters, momentum buffers and BN running statistics after one SGD step.
    TrainingSession a(t, make_backend(backend), {.fuse = false}), b(f, make_backend(backend), {.fuse = false});
    const double la = a.step({{"input", x}, {t.labels, labels}}, 0.05f);
    const double lb = b.step({{"input", x}, {t.labels, labels}}, 0.05f);
    CHECK(std::fabs(la - lb) <= tol * std::fabs(la));
    for (const std::string& s : a.state_names()) {
      CAPTURE(s);
      CHECK(rel_diff(b.state(s), a.state(s)) < tol);
    }
  }
}

TEST_CASE("TrainingSession runs the fused graph unless told not to; 3 SGD steps equal the unfused session's") {
  const Graph g = random_bn_wrn({4, 8, 12, 16}, 0.f, 7);
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  o.weight_decay = 5e-4f;
  const TrainingGraph t = build_training_graph(g, o);
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const double tol = std::string(backend) == "reference" ? 1e-6 : 1e-4;
    TrainingSession fused(t, make_backend(backend)), plain(t, make_backend(backend), {.fuse = false});
    // What each session runs.
    const auto counts = op_counts(fused.training().graph);
    CHECK(counts.at("ai.trainrt::BatchNormalizationRelu") == 7);
    CHECK(counts.at("ai.trainrt::BatchNormalizationReluDropout") == 6);
    CHECK(counts.at("ai.trainrt::FusedConv") == 3);
    CHECK(counts.count("BatchNormalization") == 0);
    CHECK(counts.at("ai.trainrt::DropoutReluGrad") == 6);
    // Both write each BatchNormalization's two running statistics with an Assign node.
    CHECK(counts.at("ai.trainrt::Assign") == 26);
    CHECK(counts.at("ai.trainrt::MultiSGD") == 1);
    CHECK(fused.training().graph.nodes.size() == t.graph.nodes.size() - (23 + t.params.size() - 1 + 6) + 26);
    auto plain_counts = op_counts(plain.training().graph);
    CHECK(plain_counts["ai.trainrt::Assign"] == 26);
    plain_counts.erase("ai.trainrt::Assign");
    CHECK(plain_counts == op_counts(t.graph));
    // A fused node is named after the nodes it replaced.
    size_t named = 0;
    for (const Node& n : fused.training().graph.nodes)
      named += n.name == "block1/layer1/bn+block1/layer1/relu+block1/dropout" || n.name == "block1/scale+block1/add" ||
               (n.op_type == "DropoutReluGrad" && n.name.find("block1/dropout") != std::string::npos &&
                n.name.find("block1/layer1/relu") != std::string::npos);
    CHECK(named == 3);
    // Parameters, optimizer state and running statistics keep their names: checkpoints fit both.
    CHECK(fused.state_names() == plain.state_names());
    // Every gradient of the last step, read when its node has written it.
    std::vector<std::unique_ptr<AfterEachStep>> hooks;
    auto capture = [&](TrainingSession& s, std::map<std::string, Tensor>& grads) {
      hooks.push_back(std::make_unique<AfterEachStep>([&s, &grads, &t](int step) {
        const Plan& p = s.plan();
        for (const std::string& out : p.graph.nodes[p.steps[static_cast<size_t>(step)].node].outputs)
          for (const std::string& param : t.params)
            if (out == t.gradients.at(param)) grads[param] = s.value(out).clone();
      }));
      s.set_step_hooks(hooks.back().get());
    };
    std::map<std::string, Tensor> ga, gb;
    for (uint64_t step = 0; step < 3; ++step) {
      CAPTURE(step);
      if (step == 2) capture(plain, ga), capture(fused, gb);
      Tensor labels(DataType::Int64, {4});
      for (int i = 0; i < 4; ++i) labels.data<int64_t>()[i] = static_cast<int64_t>((3 * i + step) % 10);
      const TensorMap batch{{"input", random_tensor(DataType::Float32, {4, 1, 28, 28}, 10 + step)}, {t.labels, labels}};
      const double la = plain.step(batch, 0.05f), lb = fused.step(batch, 0.05f);
      CHECK(std::fabs(la - lb) <= tol * std::fabs(la));
    }
    REQUIRE(ga.size() == t.params.size());
    REQUIRE(gb.size() == t.params.size());
    for (const std::string& p : t.params) {
      CAPTURE(p);
      CHECK(rel_diff(gb.at(p), ga.at(p)) < tol);
    }
    for (const std::string& s : plain.state_names()) {
      CAPTURE(s);
      CHECK(rel_diff(fused.state(s), plain.state(s)) < tol);
    }
    // trained_forward (what --export writes) is the input graph with the trained initializers.
    const Graph exported = fused.trained_forward(g);
    CHECK(exported.nodes.size() == g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) CHECK(exported.nodes[i].op_type == g.nodes[i].op_type);
  }
}

TEST_CASE("Relu + Dropout's backward fused on the Wide ResNet with dropout 0.2: the same bits, Y freed early") {
  // Only this fusion, so no forward node moves and the Dropout masks are the same.
  const Graph g = random_bn_wrn({4, 8, 12, 16}, 0.2f, 9);
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  const TrainingGraph t = build_training_graph(g, o);
  TrainingGraph f = t;
  CHECK(passes::fuse_dropout_relu_grad(f.graph) == 6);
  size_t masks = 0;
  for (const Node& n : f.graph.nodes) masks += n.op_type == "Dropout" && n.outputs.size() > 1;
  CHECK(masks == 0);  // nothing reads the masks any more
  validate_graph(f.graph, registry().schemas, "fused");
  const Tensor x = random_tensor(DataType::Float32, {4, 1, 28, 28}, 16);
  Tensor labels(DataType::Int64, {4});
  for (int i = 0; i < 4; ++i) labels.data<int64_t>()[i] = (7 * i + 2) % 10;
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    TrainingSession a(t, make_backend(backend), {.fuse = false}), b(f, make_backend(backend), {.fuse = false});
    for (int step = 0; step < 2; ++step) {
      const double la = a.step({{"input", x}, {t.labels, labels}}, 0.05f);
      const double lb = b.step({{"input", x}, {t.labels, labels}}, 0.05f);
      CHECK(la == lb);
    }
    for (const std::string& s : a.state_names()) {
      CAPTURE(s);
      CHECK(max_abs_diff(b.state(s), a.state(s)) == 0.0);
    }
    // The Relu outputs that fed a Dropout now die at the Dropout: a smaller peak.
    CHECK(b.plan().peak_live_bytes < a.plan().peak_live_bytes);
    MESSAGE(std::string(backend) << ": peak live bytes " << a.plan().peak_live_bytes << " -> "
                                 << b.plan().peak_live_bytes << ", arena " << a.plan().arena_bytes << " -> "
                                 << b.plan().arena_bytes);
  }
}

TEST_CASE(
    "BatchNormalizationRelu + Dropout fused on the Wide ResNet with dropout 0.2: the Dropouts' masks, the same bits") {
  const Graph g = random_bn_wrn({4, 8, 12, 16}, 0.2f, 11);
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  const TrainingGraph t = build_training_graph(g, o);
  TrainingGraph a = t;  // the graph the pass sees: BN+Relu and the Dropouts' backward fused
  CHECK(passes::fuse_batchnorm_relu(a.graph) == 13);
  CHECK(passes::fuse_dropout_relu_grad(a.graph) == 6);
  TrainingGraph b = a;
  CHECK(passes::fuse_batchnorm_relu_dropout(b.graph) == 6);
  CHECK(b.graph.nodes.size() == a.graph.nodes.size() - 6);
  size_t carried = 0;
  for (const Node& n : b.graph.nodes) {
    if (n.op_type != "BatchNormalizationReluDropout") continue;
    const Node& d = a.graph.nodes.at(static_cast<size_t>(n.attr_int("dropout_node", -1)));
    carried += d.op_type == "Dropout" && d.outputs[0] == n.outputs[0] && d.inputs[1] == n.inputs[5];
  }
  CHECK(carried == 6);  // each carries its Dropout's index in the graph without this fusion
  CHECK(op_counts(b.graph).count("Dropout") == 0);
  validate_graph(b.graph, registry().schemas, "fused");
  Graph typed = b.graph;
  infer_shapes(typed, registry().schemas, "fused");
  // The control: one node carrying its neighbour's index draws another mask.
  TrainingGraph c = b;
  for (Node& n : c.graph.nodes)
    if (n.op_type == "BatchNormalizationReluDropout") {
      n.attrs["dropout_node"] = Attribute::of_int(n.attr_int("dropout_node", 0) + 1);
      break;
    }
  const Tensor x = random_tensor(DataType::Float32, {4, 1, 28, 28}, 17);
  Tensor labels(DataType::Int64, {4});
  for (int i = 0; i < 4; ++i) labels.data<int64_t>()[i] = (5 * i + 3) % 10;
  // The reference runs the pair's two loops; the cpu kernel the pair's apply loop with the
  // mask inside (row-major fp32, the Wide ResNet's layout on AVX2) or the pair's calls on
  // the same X/Z layout: the same bits on both, in every precision (under bf16/fp16 the
  // fused kernels round Y before the mask, as the executor rounds BatchNormalizationRelu's).
  for (const char* backend : {"reference", "cpu"})
    for (MathPrecision m : {MathPrecision::fp32, MathPrecision::bf16, MathPrecision::fp16}) {
      const std::string where = std::string(backend) + " " + math_precision_name(m);
      CAPTURE(where);
      const SessionOptions so{.fuse = false, .math = m};
      TrainingSession sa(a, make_backend(backend), so), sb(b, make_backend(backend), so),
          sc(c, make_backend(backend), so);
      double lc = 0, la = 0;
      for (int step = 0; step < 2; ++step) {
        la = sa.step({{"input", x}, {t.labels, labels}}, 0.05f);
        const double lb = sb.step({{"input", x}, {t.labels, labels}}, 0.05f);
        lc = sc.step({{"input", x}, {t.labels, labels}}, 0.05f);
        CHECK(la == lb);
      }
      CHECK(lc != la);
      for (const std::string& s : sa.state_names()) {
        CAPTURE(s);
        CHECK(max_abs_diff(sb.state(s), sa.state(s)) == 0.0);
      }
      // Y is never stored (it died at the Dropout already, so the peak, in the backward, need not move).
      CHECK(sb.plan().peak_live_bytes <= sa.plan().peak_live_bytes);
      if (m == MathPrecision::fp32)
        MESSAGE(std::string(backend) << ": peak live bytes " << sa.plan().peak_live_bytes << " -> "
                                     << sb.plan().peak_live_bytes);
    }
  // A session fuses it unless told not to (fuse_dropout off: the graph before this pass).
  for (bool on : {true, false}) {
    TrainingSession s(t, make_backend("reference"), {.fuse_dropout = on, .math = MathPrecision::bf16});
    CHECK(op_counts(s.training().graph).count("ai.trainrt::BatchNormalizationReluDropout") == (on ? 1u : 0u));
  }
  // fuse_training_graph makes the six last, and a session fuses unless told not to.
  TrainingGraph all = t;
  fuse_training_graph(all.graph);
  CHECK(op_counts(all.graph).at("ai.trainrt::BatchNormalizationReluDropout") == 6);
  // A Dropout that stays unfused after a site keeps its index: that site stays unfused too.
  TrainingGraph kept = a;
  size_t last = 0;
  for (size_t i = 0; i < kept.graph.nodes.size(); ++i)
    if (kept.graph.nodes[i].op_type == "Dropout") last = i;
  kept.graph.nodes[last].outputs.push_back(kept.graph.nodes[last].outputs[0] + ".mask");  // a mask written: no site
  kept.graph.outputs.push_back(kept.graph.nodes[last].outputs[1]);
  CHECK(passes::fuse_batchnorm_relu_dropout(kept.graph) == 0);
}

TEST_CASE("fusions leave a pattern alone when its intermediate value has another reader or is a graph output") {
  auto build = [](bool bn_out_is_output, bool conv_read_twice) {
    Graph g;
    g.name = "shared";
    g.opsets[""] = 17;
    g.inputs = {"x"};
    g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(3), Dim::of(6), Dim::of(6)}};
    auto init = [&](const std::string& name, std::vector<int64_t> dims, double lo, double hi) {
      g.initializers[name] = random_tensor(DataType::Float32, dims, name.size(), lo, hi);
      g.values[name] = ValueInfo{DataType::Float32, shape_of(dims)};
    };
    init("w", {3, 3, 3, 3}, -0.5, 0.5);
    init("w2", {3, 3, 1, 1}, -0.5, 0.5);
    for (const char* p : {"s", "b", "m"}) init(p, {3}, -0.5, 0.5);
    init("v", {3}, 0.5, 1.5);
    const std::map<std::string, Attribute> conv{{"pads", Attribute::of_ints({1, 1, 1, 1})}};
    auto add = [&](const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                   std::map<std::string, Attribute> attrs = {}) {
      Node n = make_node(op, std::move(in), out, std::move(attrs));
      n.name = out[0] + "_node";
      g.nodes.push_back(n);
    };
    add("Conv", {"x", "w"}, {"c"}, conv);
    add("BatchNormalization", {"c", "s", "b", "m", "v"}, {"bn", "m.updated", "v.updated"},
        {{"training_mode", Attribute::of_int(1)}});
    add("Relu", {"bn"}, {"r"});
    add("Conv", {"r", "w2"}, {"c2"});
    add("Add", {"c2", "x"}, {"y"});
    g.outputs = {"y", "m.updated", "v.updated"};
    if (bn_out_is_output) g.outputs.push_back("bn");
    if (conv_read_twice) {
      add("Relu", {"c2"}, {"r2"});
      g.outputs.push_back("r2");
    }
    validate_graph(g, registry().schemas, "shared");
    infer_shapes(g, registry().schemas, "shared");
    return g;
  };
  Graph plain = build(false, false);
  CHECK(fuse_training_graph(plain) == 2);
  CHECK(op_counts(plain) == std::map<std::string, size_t>{
                                {"Conv", 1}, {"ai.trainrt::BatchNormalizationRelu", 1}, {"ai.trainrt::FusedConv", 1}});
  Graph shared = build(true, true);
  const size_t nodes = shared.nodes.size();
  CHECK(fuse_training_graph(shared) == 0);
  CHECK(shared.nodes.size() == nodes);
  // The fused graph computes what the plain one does (running statistics included).
  const Graph ref = build(false, false);
  const Tensor x = random_tensor(DataType::Float32, {2, 3, 6, 6}, 8);
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const TensorMap a = run_graph(ref, {{"x", x}}, *make_backend(backend));
    const TensorMap b = run_graph(plain, {{"x", x}}, *make_backend(backend));
    for (const std::string& o : ref.outputs) {
      CAPTURE(o);
      CHECK(rel_diff(b.at(o), a.at(o)) < 1e-5);
    }
  }
}

namespace {

// input [N,1,28,28] -> Flatten -> Linear(784, 16) + Relu -> Gemm(16, 12; W not transposed)
// + bias + Relu -> Linear(12, 10): two Gemm + Relu sites, three weight-and-bias gradient
// sites (dY as op(A) of dW = dY^T X for the Linear layers, as op(B) of dW = X^T dY for the
// middle one). With `shared`, the first Gemm's output is also a graph output: no longer
// fusable with its Relu.
Graph mlp(bool shared) {
  Graph g;
  g.name = "mlp";
  g.opsets[""] = 17;
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(1), Dim::of(28), Dim::of(28)}};
  auto init = [&](const std::string& name, std::vector<int64_t> dims, uint64_t seed, double scale) {
    g.initializers[name] = random_tensor(DataType::Float32, dims, seed, -scale, scale);
    g.values[name] = ValueInfo{DataType::Float32, shape_of(dims)};
  };
  init("w1", {16, 784}, 1, 0.05);
  init("b1", {16}, 2, 0.1);
  init("w2", {16, 12}, 3, 0.3);
  init("b2", {12}, 6, 0.1);
  init("w3", {10, 12}, 4, 0.3);
  init("b3", {10}, 5, 0.1);
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out,
                 std::map<std::string, Attribute> attrs = {}) {
    Node n = make_node(op, std::move(in), {out}, std::move(attrs));
    n.name = out;
    g.nodes.push_back(n);
  };
  add("Flatten", {"input"}, "flat", {{"axis", Attribute::of_int(1)}});
  add("Gemm", {"flat", "w1", "b1"}, "fc1", {{"transB", Attribute::of_int(1)}});
  add("Relu", {"fc1"}, "relu1");
  add("Gemm", {"relu1", "w2", "b2"}, "fc2");
  add("Relu", {"fc2"}, "relu2");
  add("Gemm", {"relu2", "w3", "b3"}, "logits", {{"transB", Attribute::of_int(1)}});
  g.outputs = {"logits"};
  if (shared) g.outputs.push_back("fc1");
  validate_graph(g, registry().schemas, "mlp");
  infer_shapes(g, registry().schemas, "mlp");
  return g;
}

}  // namespace

TEST_CASE(
    "Gemm + Relu and a Linear layer's weight and bias gradients fused into FusedGemm on an MLP: 3 SGD steps "
    "equal the unfused graph's") {
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  const TrainingGraph t = build_training_graph(mlp(false), o);
  TrainingGraph f = t;
  CHECK(passes::fuse_gemm_relu(f.graph) == 2);
  CHECK(passes::fuse_gemm_bias_grad(f.graph) == 3);
  validate_graph(f.graph, registry().schemas, "fused");
  infer_shapes(f.graph, registry().schemas, "fused");  // the fused nodes' rules agree with the values they write
  const auto counts = op_counts(f.graph), unfused = op_counts(t.graph);
  CHECK(counts.at("ai.trainrt::FusedGemm") == 5);
  CHECK(counts.count("Relu") == 0);
  CHECK(counts.at("Gemm") == unfused.at("Gemm") - 5);  // the last layer and the data-gradient Gemms stay
  CHECK(counts.count("ai.trainrt::SumToShape") == 0);
  size_t named = 0, sum_of_a = 0, sum_of_b = 0;
  for (const Node& n : f.graph.nodes) {
    named += n.name == "fc1+relu1" || n.name == "fc2+relu2";
    sum_of_a += n.attr_string("sum_of", "") == "A";
    sum_of_b += n.attr_string("sum_of", "") == "B";
  }
  CHECK(named == 2);
  CHECK(sum_of_a == 2);
  CHECK(sum_of_b == 1);
  // fuse_training_graph makes the same five (and the optimizer's one MultiSGD).
  TrainingGraph all = t;
  CHECK(fuse_training_graph(all.graph) == 5 + t.params.size() - 1);
  CHECK(op_counts(all.graph).at("ai.trainrt::FusedGemm") == 5);

  Tensor labels(DataType::Int64, {6});
  for (int i = 0; i < 6; ++i) labels.data<int64_t>()[i] = (3 * i + 1) % 10;
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    // The reference runs the fused node as its two ops: the same bits. oneDNN's ReLU
    // post-op is exact too, but the matmul it rides on may be another kernel: 1e-5.
    const bool exact = std::string(backend) == "reference";
    TrainingSession a(t, make_backend(backend), {.fuse = false}), b(f, make_backend(backend), {.fuse = false});
    for (uint64_t step = 0; step < 3; ++step) {
      CAPTURE(step);
      const TensorMap batch{{"input", random_tensor(DataType::Float32, {6, 1, 28, 28}, 20 + step)}, {t.labels, labels}};
      const double la = a.step(batch, 0.1f), lb = b.step(batch, 0.1f);
      if (exact)
        CHECK(la == lb);
      else
        CHECK(std::fabs(la - lb) <= 1e-5 * std::fabs(la));
    }
    for (const std::string& s : a.state_names()) {
      CAPTURE(s);
      if (exact)
        CHECK(max_abs_diff(b.state(s), a.state(s)) == 0.0);
      else
        CHECK(rel_diff(b.state(s), a.state(s)) < 1e-5);
    }
  }

  // The first Gemm's output is a graph output too: that site stays unfused.
  TrainingGraph shared = build_training_graph(mlp(true), o);
  CHECK(passes::fuse_gemm_relu(shared.graph) == 1);
  // A bias gradient the fusion would have to move above a reader of the weight gradient stays.
  TrainingGraph moved = t;
  for (size_t i = 0; i < moved.graph.nodes.size(); ++i) {
    const Node& n = moved.graph.nodes[i];
    if (n.op_type != "SumToShape" || n.inputs[1] != "b3") continue;
    for (size_t k = 0; k < i; ++k)
      if (moved.graph.nodes[k].op_type == "Gemm" && moved.graph.nodes[k].inputs[0] == n.inputs[0] &&
          moved.graph.nodes[k].attr_int("transA", 0) == 1) {
        Node reader = make_node("Identity", {moved.graph.nodes[k].outputs[0]}, {"dw3_copy"});
        reader.name = "dw3_reader";
        moved.graph.nodes.insert(moved.graph.nodes.begin() + static_cast<std::ptrdiff_t>(k) + 1, reader);
        moved.graph.outputs.push_back("dw3_copy");
        break;
      }
    break;
  }
  infer_shapes(moved.graph, registry().schemas, "moved");
  CHECK(passes::fuse_gemm_bias_grad(moved.graph) == 2);
  CHECK(op_counts(shared.graph).at("ai.trainrt::FusedGemm") == 1);
  // optimize_for_inference fuses both sites of the forward graph; standard ONNX keeps them apart.
  CHECK(op_counts(optimize_for_inference(mlp(false))).at("ai.trainrt::FusedGemm") == 2);
  CHECK(op_counts(optimize_for_inference(mlp(false), {.standard_onnx_only = true})).count("ai.trainrt::FusedGemm") ==
        0);
}

// input [N,1,12,12] -> Conv(16, 3x3, bias) + Relu -> Conv(6, 3x3, bias) + Relu -> MaxPool
// -> GlobalAveragePool -> Flatten -> Linear(6, 10): a CNN without batch normalization, as
// small exported models are. Both Conv + Relu pairs become FusedConv(activation=Relu), and
// the second convolution's data gradient takes the first Relu's gradient
// (ConvGrad(dx_relu=1)); 16 channels there, so on AVX-512 the cpu backend may block X and dX.
TEST_CASE(
    "Conv + Relu and dgrad + ReLU gradient fused in a CNN without batch normalization: 3 SGD steps equal the "
    "unfused graph's") {
  const Graph g = relu_cnn(16);

  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  const TrainingGraph t = build_training_graph(g, o);
  TrainingGraph f = t;
  fuse_training_graph(f.graph);
  validate_graph(f.graph, registry().schemas, "fused");
  const auto counts = op_counts(f.graph);
  CHECK(counts.at("ai.trainrt::FusedConv") == 2);
  CHECK(counts.count("Conv") == 0);
  CHECK(counts.count("Relu") == 0);
  size_t relu = 0, dx_relu = 0;
  for (const Node& n : f.graph.nodes) {
    relu += n.op_type == "FusedConv" && n.attr_string("activation", "") == "Relu";
    dx_relu += n.op_type == "ConvGrad" && n.attr_int("dx_relu", 0) == 1;
  }
  CHECK(relu == 2);
  CHECK(dx_relu == 1);
  // relu2's gradient follows the MaxPool's: it stays a ReluGrad.
  CHECK(counts.at("ai.trainrt::ReluGrad") == op_counts(t.graph).at("ai.trainrt::ReluGrad") - 1);
  TrainingGraph only = t;
  CHECK(passes::fuse_dgrad_relu_grad(only.graph) == 1);
  // The cuDNN plan: both convolutions' epilogues and the fused data gradient.
  const std::vector<FusionRow> rows = cudnn_fusion_table(cudnn_fusion_sites(f.graph));
  size_t bias_relu = 0, dgrad = 0;
  for (const FusionRow& r : rows) {
    if (r.pattern == "conv_bias_relu") bias_relu = r.fused;
    if (r.pattern == "dgrad_drelu") dgrad = r.fused;
  }
  CHECK(bias_relu == 2);
  CHECK(dgrad == 1);

  Tensor labels(DataType::Int64, {5});
  for (int i = 0; i < 5; ++i) labels.data<int64_t>()[i] = (7 * i + 3) % 10;
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    // The reference runs FusedConv as Conv then its ReLU: the same bits. oneDNN's ReLU
    // post-op rides on the convolution: 1e-5.
    const bool exact = std::string(backend) == "reference";
    TrainingSession a(t, make_backend(backend), {.fuse = false}), b(f, make_backend(backend), {.fuse = false});
    for (uint64_t step = 0; step < 3; ++step) {
      CAPTURE(step);
      const TensorMap batch{{"input", random_tensor(DataType::Float32, {5, 1, 12, 12}, 40 + step)}, {t.labels, labels}};
      const double la = a.step(batch, 0.1f), lb = b.step(batch, 0.1f);
      if (exact)
        CHECK(la == lb);
      else
        CHECK(std::fabs(la - lb) <= 1e-5 * std::fabs(la));
    }
    for (const std::string& s : a.state_names()) {
      CAPTURE(s);
      if (exact)
        CHECK(max_abs_diff(b.state(s), a.state(s)) == 0.0);
      else
        CHECK(rel_diff(b.state(s), a.state(s)) < 1e-5);
    }
  }
}
