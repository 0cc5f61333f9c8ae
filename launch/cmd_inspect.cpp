// `trainrt inspect MODEL.onnx [--json] [--passes]`: one line per node, then totals (or
// one JSON object, with the pass counts as its "passes" member). `--device cuda` adds
// the ops the cuda backend would run on the host, from the kernel registry alone, so it
// works in a CUDA build on a machine without a GPU.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "autodiff/training_graph.h"
#include "distribution/buckets.h"
#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "ops/core/register_all.h"
#include "passes/passes.h"
#include "runtime/cudnn_fusion.h"
#include "runtime/training_session.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "inspect",
    "trainrt inspect MODEL.onnx [--json] [--passes] [--training [--dump-training-graph OUT.onnx] [--memory [--batch N] "
    "[--bucket-cap-mb M] [--fuse on|off]]] [--device cuda]",
    "Print every node (name, op, input and output shapes) and the model's totals: parameters,\n"
    "forward FLOPs per sample, activation bytes per sample and unsupported ops. With --training,\n"
    "also build the training graph and list its backward and optimizer nodes and the memory\n"
    "the saved activations need. With --memory, also plan a training step at --batch and print\n"
    "the arena's peak bytes, the naive bytes (one buffer per value), the largest live set, the\n"
    "persistent bytes and the gradient buckets. With --device cuda, list the ops of the evaluation\n"
    "graph (and with --training of the training graph, fused as --fuse says) that have no cuda\n"
    "kernel and so run on the host after a synchronisation (needs a CUDA build, not a GPU), and\n"
    "with --training the cuDNN fusion pattern each fused step maps to or why it would run unfused.",
    {{"json", "", "print one JSON object instead of a table", Flag::Switch},
     {"training", "", "also build and summarise the training graph", Flag::Switch},
     {"dump-training-graph", "", "write the whole training graph as ONNX (domain ai.trainrt for backward ops)"},
     {"optimizer", "sgd", "optimizer of the training graph: sgd, adam, adamw or none"},
     {"momentum", "0.9", "SGD momentum (adds a momentum buffer per parameter)"},
     {"freeze", "", "initializer to keep fixed (repeatable)", Flag::Repeat},
     {"memory", "", "with --training: plan one training step and print its memory", Flag::Switch},
     {"passes", "",
      "print node counts per op before and after the graph passes (inference form; "
      "with --training also the fused training graph; with --json a \"passes\" member)",
      Flag::Switch},
     {"batch", "64", "batch size of the planned step (--memory)"},
     {"fuse", "on", "plan the fused training graph as train and bench run it (--memory); off: the unfused graph"},
     {"bucket-cap-mb", "25", "gradient bucket cap in MB (--memory); the first bucket is 1 MB at most"},
     {"device", "",
      "cuda: list the ops of the evaluation (and --training) graph without a cuda kernel, which run on the host"}},
    1,
    1};

// --json --passes: {"nodes": [before, after], "initializers": [...], "ops": {"Conv": [before, after], ...}}.
nlohmann::ordered_json passes_json(const PassReport& r) {
  nlohmann::ordered_json ops = nlohmann::ordered_json::object();
  for (const auto& [op, n] : r.before) ops[op] = {n, r.after.count(op) ? r.after.at(op) : 0};
  for (const auto& [op, n] : r.after)
    if (!r.before.count(op)) ops[op] = {0, n};
  return {{"nodes", {r.nodes_before, r.nodes_after}},
          {"initializers", {r.initializers_before, r.initializers_after}},
          {"ops", std::move(ops)}};
}

std::string value_string(const Graph& g, const std::string& v) {
  if (v.empty()) return "-";
  const ValueInfo* info = g.find_info(v);
  if (!info || info->dtype == DataType::Undefined) return "?";
  return std::string(dtype_name(info->dtype)) + (info->shape ? shape_to_string(*info->shape) : "[?]");
}

// Best-effort inference: types what it can, skipping unsupported nodes and
// nodes whose inputs are untyped. Used so that inspect shows a partial table.
void infer_best_effort(Graph& g, const OpRegistry& reg) {
  for (size_t i : g.topological_order()) {
    const Node& n = g.nodes[i];
    const OpSchema* s = reg.find(n.domain, n.op_type);
    if (!s) continue;
    bool typed = true;
    for (const std::string& in : n.inputs) typed = typed && (in.empty() || g.find_info(in));
    if (!typed) continue;
    std::vector<ValueInfo> outs(n.outputs.size());
    InferContext ctx(g, n, i, outs);
    s->infer(ctx);  // shape errors propagate: the model is wrong, not just unsupported
    for (size_t k = 0; k < outs.size(); ++k)
      if (!n.outputs[k].empty()) g.values[n.outputs[k]] = outs[k];
  }
}

// The same graph with every symbolic input dimension set to 1 (one sample).
Graph per_sample(const Graph& g, const OpRegistry& reg) {
  Graph s = g;
  for (const std::string& in : s.inputs) {
    ValueInfo& v = s.values[in];
    if (v.shape)
      for (Dim& d : *v.shape)
        if (!d.known()) d = Dim::of(1);
  }
  infer_best_effort(s, reg);
  return s;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// 17117466 -> "17,117,466".
std::string thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// Elements of the parameters training updates, as PyTorch counts model.parameters():
// float initializers in differentiable slots, so BatchNormalization's running
// statistics are not counted (autodiff/training_graph.h trainable_parameters).
int64_t trainable_count(const Graph& g) {
  int64_t n = 0;
  for (const std::string& p : trainable_parameters(g, {})) n += g.initializers.at(p).numel();
  return n;
}

// The memory plan of one training step at --batch (runtime/plan.h) and its gradient buckets.
void inspect_memory(TrainingGraph t, const Args& a) {
  const int64_t batch = a.positive("batch");
  const double cap_arg = a.positive_number("bucket-cap-mb");
  const bool fuse = a.on_off("fuse");
  if (fuse) fuse_training_graph(t.graph);  // what TrainingSession plans (runtime/training_session.h)
  TensorMap feeds;
  for (const std::string& in : t.graph.inputs) {
    const ValueInfo& v = t.graph.info(in);
    if (!v.shape) throw_bad_input("input '" + in + "'", "has no shape: cannot plan memory");
    std::vector<int64_t> dims;
    for (const Dim& d : *v.shape) dims.push_back(d.known() ? d.value : batch);
    feeds[in] = Tensor(v.dtype, dims);
  }
  const Graph s = specialize(t.graph, feeds);
  PlanOptions o = training_plan_options(t);
  o.keep = t.graph.outputs;
  const Plan p = build_plan(s, o);
  verify_plan(p);
  std::printf("memory plan of one training step, batch %lld (%s graph, order: %s, %zu nodes)\n",
              static_cast<long long>(batch), fuse ? "fused" : "unfused", p.order.c_str(), p.steps.size());
  std::printf("  peak arena bytes: %zu (%.2f MiB)\n", p.arena_bytes, mib(p.arena_bytes));
  std::printf("  naive bytes (one buffer per value): %zu (%.2f MiB, %.2fx the arena)\n", p.naive_bytes,
              mib(p.naive_bytes),
              static_cast<double>(p.naive_bytes) / static_cast<double>(std::max<size_t>(p.arena_bytes, 1)));
  std::printf("  arena bytes in the file's node order: %zu (%.2f MiB)\n", p.file_order_bytes, mib(p.file_order_bytes));
  std::printf("  persistent bytes (parameters, optimizer state, BN statistics): %zu (%.2f MiB)\n", p.state_bytes,
              mib(p.state_bytes));
  std::printf("  outputs written in place: %zu\n", p.in_place_count);
  if (p.peak_step >= 0) {
    const Node& n = s.nodes[p.steps[static_cast<size_t>(p.peak_step)].node];
    std::vector<int> live = p.live_at(p.peak_step);
    std::printf("  largest live set: %zu values, %zu bytes (%.2f MiB) at step %d, node '%s' (%s):\n", live.size(),
                p.peak_live_bytes, mib(p.peak_live_bytes), p.peak_step, n.name.c_str(), n.op_type.c_str());
    for (size_t i = 0; i < live.size() && i < 12; ++i) {
      const PlannedValue& v = p.values[static_cast<size_t>(live[i])];
      std::printf("    %-48s %-20s %10.2f MiB\n", v.name.c_str(), dims_to_string(v.dims).c_str(), mib(v.bytes));
    }
    if (live.size() > 12) std::printf("    ... %zu more\n", live.size() - 12);
  }
  const size_t cap = static_cast<size_t>(cap_arg * (1 << 20));  // MB as PyTorch DDP counts them (MiB)
  const std::vector<GradientBucket> buckets = plan_buckets(t, p, cap, std::min<size_t>(cap, kDefaultFirstBucketCap));
  std::printf("gradient buckets: %zu (cap %.3g MiB, first %.3g MiB)\n", buckets.size(), mib(cap),
              mib(std::min<size_t>(cap, kDefaultFirstBucketCap)));
  for (size_t i = 0; i < buckets.size(); ++i) {
    const GradientBucket& b = buckets[i];
    const Node& n = s.nodes[b.ready_after_node];
    std::printf("  bucket %zu: %zu params, %.2f MiB, ready after step %d node %zu '%s' (first: %s)\n", i,
                b.params.size(), mib(b.bytes), b.ready_after_step, b.ready_after_node, n.name.c_str(),
                b.params.front().c_str());
  }
}

// --device cuda: the ops of `g` without a cuda kernel (the cuda backend runs them on the
// host after a synchronisation, runtime/backend.cpp Backend::kernel), "domain::op (count)".
// Kernels that exist but fall back for some dtypes or shapes are not listed.
std::vector<std::string> host_ops(const Graph& g) {
  std::map<std::string, int> count;
  for (const Node& n : g.nodes)
    if (!registry().kernels.find("cuda", n.domain, n.op_type))
      ++count[n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type];
  std::vector<std::string> out;
  for (const auto& [op, k] : count) out.push_back(op + " (" + std::to_string(k) + ")");
  return out;
}

void print_host_ops(const char* graph, const Graph& g) {
  std::string list;
  for (const std::string& op : host_ops(g)) list += (list.empty() ? "" : ", ") + op;
  std::printf("cuda host fallbacks of the %s: %s\n", graph, list.empty() ? "none" : list.c_str());
}

// --device cuda: the cuDNN-graph pattern of each fused step (runtime/cudnn_fusion.h),
// one line per pattern and reason it would run unfused for. A plan: no fused cuDNN
// graph runs yet.
void print_fusion_rows(const std::vector<FusionSite>& sites, const char* fused_word, const char* unfused_word) {
  std::printf("  %-22s %6s %8s  %s\n", "pattern", fused_word, unfused_word, "reason");
  for (const FusionRow& r : cudnn_fusion_table(sites)) {
    if (r.unfused.empty()) std::printf("  %-22s %6zu %8d  -\n", r.pattern.c_str(), r.fused, 0);
    bool first = true;
    for (const auto& [reason, n] : r.unfused) {
      std::printf("  %-22s %6zu %8zu  %s\n", r.pattern.c_str(), first ? r.fused : size_t{0}, n, reason.c_str());
      first = false;
    }
  }
}
void print_cudnn_fusions(const Graph& fused) {
  std::printf("cuDNN fusion patterns of the fused training graph (planned):\n");
  print_fusion_rows(cudnn_fusion_sites(fused), "fused", "unfused");
  std::printf("convolution passes on 16-bit tensor-core graphs under --precision bf16/fp16 (planned):\n");
  print_fusion_rows(cudnn_conv16_sites(fused), "graph", "legacy");
}

// Backward/optimizer nodes, saved-activation memory per sample, state bytes.
void inspect_training(const Graph& g, const Args& a) {
  const Registry& reg = registry();
  TrainingOptions o;
  o.optimizer = a.str("optimizer");
  o.momentum = static_cast<float>(a.number("momentum"));
  o.freeze = a.all("freeze");
  TrainingGraph t = build_training_graph(g, o);
  if (a.on("dump-training-graph")) {
    export_onnx_file(t.graph, a.str("dump-training-graph"));
    std::printf("training graph written to %s\n", a.str("dump-training-graph").c_str());
  }
  if (!a.on("training")) return;
  Graph one = per_sample(t.graph, reg.schemas);
  auto bytes_of = [&](const std::string& v) -> int64_t {
    const ValueInfo* info = one.find_info(v);
    if (!info || !info->shape || !shape_is_known(*info->shape)) return 0;
    return element_count(shape_dims(*info->shape)) * static_cast<int64_t>(dtype_size(info->dtype));
  };
  std::set<std::string> forward_values(t.graph.inputs.begin(), t.graph.inputs.end());
  for (size_t i = 0; i < t.forward_nodes; ++i)
    for (const std::string& o2 : t.graph.nodes[i].outputs) forward_values.insert(o2);
  std::set<std::string> saved;
  size_t backward = 0, optimizer = 0;
  std::printf("training graph: loss '%s', %zu trainable parameters, optimizer %s\n", t.loss.c_str(), t.params.size(),
              o.optimizer.c_str());
  for (size_t i = t.forward_nodes; i < t.graph.nodes.size(); ++i) {
    const Node& n = t.graph.nodes[i];
    bool is_opt = n.name.rfind("optimizer/", 0) == 0;
    (is_opt ? optimizer : backward)++;
    for (const std::string& in : n.inputs)
      if (forward_values.count(in) && !t.graph.is_initializer(in)) saved.insert(in);
    std::string ins, outs;
    for (const std::string& in : n.inputs) ins += (ins.empty() ? "" : ", ") + value_string(t.graph, in);
    for (const std::string& out : n.outputs) outs += (outs.empty() ? "" : ", ") + value_string(t.graph, out);
    std::printf("%4zu  %-9s %-36s %-26s (%s) -> (%s)\n", i, is_opt ? "optimizer" : "backward", n.name.c_str(),
                n.op_type.c_str(), ins.c_str(), outs.c_str());
  }
  int64_t saved_bytes = 0, state_bytes = 0;
  for (const std::string& v : saved) saved_bytes += bytes_of(v);
  for (const std::string& s : t.optimizer_state)
    state_bytes += static_cast<int64_t>(t.graph.initializers.at(s).nbytes());
  std::printf("forward nodes: %zu, backward nodes: %zu, optimizer nodes: %zu\n", t.forward_nodes, backward, optimizer);
  std::printf("saved activations for backward: %zu values, %lld bytes per sample (%.2f MiB)\n", saved.size(),
              static_cast<long long>(saved_bytes), static_cast<double>(saved_bytes) / (1 << 20));
  std::printf("optimizer state: %lld bytes (%.2f MiB)\n", static_cast<long long>(state_bytes),
              static_cast<double>(state_bytes) / (1 << 20));
  if (a.on("memory")) inspect_memory(t, a);
  if (a.on("device")) {
    Graph fused = t.graph;
    if (a.on_off("fuse")) fuse_training_graph(fused);  // what TrainingSession plans
    print_host_ops(a.on_off("fuse") ? "fused training graph" : "training graph", fused);
    if (a.on_off("fuse")) print_cudnn_fusions(fused);
  }
  if (a.on("passes")) {
    Graph fused = t.graph;
    size_t n = fuse_training_graph(fused);
    std::printf("training graph passes (%zu fusions):\n%s", n, describe_passes(t.graph, fused).c_str());
  }
}

}  // namespace

int cmd_inspect(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  const std::string path = a.positional[0];
  if (a.on("memory") && !a.on("training")) throw_bad_input("trainrt inspect", "--memory needs --training");
  if (a.on("json") && a.on("training"))
    throw_bad_input("trainrt inspect", "--json and --training cannot be combined yet");
  if (a.on("device")) {
    if (a.str("device") != "cuda")
      throw_bad_input("--device " + a.str("device"), "inspect lists the host fallbacks of cuda only; expected cuda");
#ifndef TRAINRT_HAVE_CUDA
    throw_unsupported("--device cuda",
                      "the cuda backend is not built in this trainrt (configure with -DTRAINRT_CUDA=ON)");
#endif
  }
  const Registry& reg = registry();
  ImportLimits limits;
  std::string bytes = read_file_bytes(path, limits.max_file_bytes);
  std::string dir =
      std::filesystem::path(path).has_parent_path() ? std::filesystem::path(path).parent_path().string() : ".";
  Graph g = parse_onnx_bytes(bytes, path, dir, limits);

  std::vector<std::string> unsupported;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!reg.schemas.find(g.nodes[i].domain, g.nodes[i].op_type)) unsupported.push_back(describe_node(g.nodes[i], i));
  if (unsupported.empty()) {
    g = import_onnx_bytes(bytes, path, dir, reg.schemas, limits);  // full validation
  } else {
    (void)g.topological_order();
    g.sort_topologically();
    infer_best_effort(g, reg.schemas);
  }
  Graph one = per_sample(g, reg.schemas);

  double flops = 0;
  int64_t act_bytes = 0;
  std::vector<double> node_flops(g.nodes.size(), 0.0);
  for (size_t i = 0; i < one.nodes.size(); ++i) {
    const Node& n = one.nodes[i];
    const OpSchema* s = reg.schemas.find(n.domain, n.op_type);
    if (s && s->flops) {
      bool typed = true;
      for (const std::string& o : n.outputs)
        typed = typed && (o.empty() || (one.find_info(o) && one.info(o).shape && shape_is_known(*one.info(o).shape)));
      if (typed) node_flops[i] = s->flops(one, n);
    }
    flops += node_flops[i];
    for (const std::string& o : n.outputs) {
      const ValueInfo* v = o.empty() ? nullptr : one.find_info(o);
      if (v && v->shape && shape_is_known(*v->shape))
        act_bytes += element_count(shape_dims(*v->shape)) * static_cast<int64_t>(dtype_size(v->dtype));
    }
  }
  const int64_t params = g.parameter_count();
  const int64_t trainable = trainable_count(g);

  if (a.on("json")) {
    nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
    auto values = [&](const std::vector<std::string>& names) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const std::string& v : names) out.push_back({{"name", v}, {"type", value_string(g, v)}});
      return out;
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      nodes.push_back({{"name", n.name},
                       {"op", n.op_type},
                       {"inputs", values(n.inputs)},
                       {"outputs", values(n.outputs)},
                       {"flops_per_sample", node_flops[i]}});
    }
    nlohmann::ordered_json o{{"model", path},
                             {"nodes", std::move(nodes)},
                             {"parameters", params},
                             {"trainable_parameters", trainable},
                             {"flops_per_sample", flops},
                             {"activation_bytes_per_sample", act_bytes},
                             {"unsupported", unsupported}};
    if (unsupported.empty() && a.on("device")) {
      o["cuda_host_fallbacks"] = {{"model", host_ops(g)}, {"evaluation", host_ops(optimize_for_inference(g))}};
    }
    if (unsupported.empty() && a.on("passes")) o["passes"] = passes_json(pass_report(g, optimize_for_inference(g)));
    std::printf("%s\n", o.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s: %zu nodes, opset %lld, producer '%s'\n", path.c_str(), g.nodes.size(),
                static_cast<long long>(g.opset("")), g.producer_name.c_str());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      std::string ins, outs;
      for (const std::string& in : n.inputs) ins += (ins.empty() ? "" : ", ") + value_string(g, in);
      for (const std::string& out : n.outputs) outs += (outs.empty() ? "" : ", ") + value_string(g, out);
      std::printf("%4zu  %-28s %-22s (%s) -> (%s)\n", i, n.name.c_str(), n.op_type.c_str(), ins.c_str(), outs.c_str());
    }
    std::printf("parameters: %lld (float initializer elements)\n", static_cast<long long>(params));
    std::printf("trainable parameters: %s (as PyTorch counts model.parameters())\n", thousands(trainable).c_str());
    std::printf("forward FLOPs per sample: %.4g (%.3f GFLOP)\n", flops, flops / 1e9);
    std::printf("activation bytes per sample: %lld (%.2f MiB)\n", static_cast<long long>(act_bytes),
                static_cast<double>(act_bytes) / (1 << 20));
    std::printf("unsupported ops: %s\n", unsupported.empty() ? "none" : "");
    for (const std::string& u : unsupported) std::printf("  %s\n", u.c_str());
  }
  if (unsupported.empty() && a.on("passes") && !a.on("json"))
    std::printf("inference passes:\n%s", describe_passes(g, optimize_for_inference(g)).c_str());
  if (unsupported.empty() && a.on("device") && !a.on("json")) {
    print_host_ops("model graph", g);                               // what evaluate and run execute
    print_host_ops("evaluation graph", optimize_for_inference(g));  // what train evaluates with
  }
  if (unsupported.empty() && (a.on("training") || a.on("dump-training-graph"))) inspect_training(g, a);
  return unsupported.empty() ? 0 : 2;
}

}  // namespace trainrt
