// Blocked layouts between kernels (runtime/layout.h): the index formulas against
// oneDNN's own nChw16c and a hand-written NHWC, the cuda kernels' NHWC choice (as the
// stand-in device reports it), the choice on a Wide ResNet training graph (what stays Plain,
// the declared constraints hold), and a training step with blocked values equal to
// the all-Plain run within float rounding while reordering far fewer bytes. (Not bit
// for bit: oneDNN's batch normalization and pooling have their own implementations per
// layout, which sum in another order.)
#include <doctest/doctest.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <set>

#include "ops/onednn/dnnl_util.h"
#include "passes/passes.h"
#include "runtime/layout.h"
#include "runtime/narrow.h"
#include "runtime_util.h"
#include "standin_device.h"

using namespace trainrt;
using namespace trainrt::test;
namespace du = trainrt::dnnl_util;

namespace {

// A WRN whose channel counts are multiples of 16, so its activations can be blocked.
Graph blockable_wrn() { return small_wrn({16, 32, 32, 48}); }

TensorMap step_feeds(const TrainingGraph& t, int64_t batch) {
  TensorMap feeds = wrn_batch(batch, 5);
  Tensor lr(DataType::Float32, {});
  lr.data<float>()[0] = 0.05f;
  feeds[t.lr] = lr;
  return feeds;
}

// The plan of one training step of `t`'s graph, fused, at batch 2, its outputs kept.
Plan fused_step_plan(TrainingGraph& t) {
  fuse_training_graph(t.graph);
  TensorMap feeds = step_feeds(t, 2);
  Graph s = specialize(t.graph, feeds);
  PlanOptions o = training_plan_options(t);
  for (const std::string& out : s.outputs) o.keep.push_back(out);
  return build_plan(s, o);
}

// A copy of `plain`'s values stored in layout `l`.
Tensor stored_as(const Tensor& plain, Layout l) {
  Tensor t(plain.dtype(), plain.dims());
  t.set_layout(l);
  copy_from_plain(plain, t);
  return t;
}

// The layouts `l` chosen for `plan` keep what `backend`'s kernels declare at every step:
// Plain slots Plain, a node's Shared slots in one layout.
void check_declared_layouts(const Plan& plan, const Backend& backend, const std::vector<Layout>& l) {
  for (const PlanStep& st : plan.steps) {
    const Node& n = plan.graph.nodes[st.node];
    NodeLayouts r = backend.layouts(plan.graph, n);
    std::vector<Layout> shared;
    auto check = [&](const std::vector<int>& values, const std::vector<SlotLayout>& kinds) {
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i] < 0) continue;
        const SlotLayout k = i < kinds.size() ? kinds[i] : SlotLayout::Plain;
        const Layout got = l[static_cast<size_t>(values[i])];
        CAPTURE(n.name);
        if (k == SlotLayout::Plain) CHECK(got == Layout::Plain);
        if (k == SlotLayout::Shared) shared.push_back(got);
      }
    };
    check(st.inputs, r.inputs);
    check(st.outputs, r.outputs);
    for (Layout x : shared) CHECK(x == shared.front());
  }
}

}  // namespace

TEST_CASE("Blocked16c storage order is oneDNN's nChw16c; to_plain and copy_from_plain invert each other") {
  const std::vector<int64_t> dims{2, 32, 3, 5};
  Tensor plain = random_tensor(DataType::Float32, dims, 3);
  Tensor blocked = stored_as(plain, Layout::Blocked16c);

  Tensor by_dnnl(DataType::Float32, dims);
  du::Md from = du::plain_desc(dims);
  du::Md to(du::Dims(dims.begin(), dims.end()), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nChw16c);
  du::reorder(du::make_reorder(from, to), du::memory_of(plain, from), du::memory_of(by_dnnl, to));
  CHECK(std::memcmp(blocked.raw(), by_dnnl.raw(), blocked.nbytes()) == 0);
  CHECK(std::memcmp(plain.raw(), blocked.raw(), plain.nbytes()) != 0);  // really another order

  Tensor back = to_plain(blocked);
  CHECK(back.layout() == Layout::Plain);
  CHECK(bitwise_equal(back, plain));
  for (int64_t start : {0, 1, 15, 16, 29, 95, 96, 191}) {  // the walk agrees with the formula
    int64_t checked = 0;
    for (BlockedWalk w(dims, start); w.offset < plain.numel(); w.next(), ++checked)
      REQUIRE(w.plain == blocked_to_plain_index(dims, w.offset));
    CHECK(checked == plain.numel() - start);
  }
  CHECK(blockable({1, 16, 1, 1}));
  CHECK_FALSE(blockable({1, 24, 4, 4}));
  CHECK_FALSE(blockable({16, 16}));
}

TEST_CASE("ChannelsLast storage order is NHWC; to_plain and copy_from_plain invert each other") {
  const std::vector<int64_t> dims{2, 3, 4, 5};
  Tensor plain = random_tensor(DataType::Float32, dims, 4);
  Tensor last = stored_as(plain, Layout::ChannelsLast);
  const auto* p = plain.data<float>();
  const auto* q = last.data<float>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w) {
          const int64_t at = ((n * 4 + h) * 5 + w) * 3 + c, row_major = ((n * 3 + c) * 4 + h) * 5 + w;
          REQUIRE(q[at] == p[row_major]);
          REQUIRE(storage_to_plain_index(Layout::ChannelsLast, dims, at) == row_major);
        }
  CHECK(bitwise_equal(to_plain(last), plain));
  CHECK(layout_fits(Layout::ChannelsLast, {2, 3, 4, 5}));
  CHECK_FALSE(layout_fits(Layout::ChannelsLast, {2, 3, 1, 1}));  // the same bytes as Plain
  CHECK_FALSE(layout_fits(Layout::ChannelsLast, {2, 1, 4, 5}));
  CHECK_FALSE(layout_fits(Layout::ChannelsLast, {6, 4, 5}));
}

TEST_CASE("the cuda kernels' declared layouts keep the WRN's activations NHWC between them") {
  if (!StandinDevice::have_cuda_kernels()) {
    MESSAGE("a build without the cuda backend declares no cuda layouts: nothing to check");
    return;
  }
  TrainingGraph t = wrn_training(small_wrn());  // channel counts 4, 8, 12, 16
  Plan plan = fused_step_plan(t);
  StandinDevice dev;  // reports the cuda kernels' declared layouts, as the cuda backend does
  std::vector<Layout> l = choose_layouts(plan, dev);
  REQUIRE(l.size() == plan.values.size());
  size_t last = 0;
  for (size_t v = 0; v < l.size(); ++v) {
    CHECK(l[v] != Layout::Blocked16c);
    if (l[v] != Layout::ChannelsLast) continue;
    ++last;
    CAPTURE(plan.values[v].name);
    CHECK(plan.values[v].storage == Storage::Arena);
    CHECK(layout_fits(Layout::ChannelsLast, plan.values[v].dims));
  }
  // What tensor cores read and write: every convolution's output and data gradient, and
  // the batch normalizations between them (forward and backward), stay NHWC.
  std::map<std::string, size_t> nhwc, seen;
  for (const PlanStep& st : plan.steps) {
    const Node& n = plan.graph.nodes[st.node];
    if (n.op_type == "Conv" || n.op_type == "FusedConv" || n.op_type == "BatchNormalizationRelu" ||
        n.op_type == "BatchNormalizationReluDropout" || n.op_type == "BatchNormalizationGrad" ||
        n.op_type == "ConvGrad" || n.op_type == "DropoutReluGrad") {
      if (st.outputs.empty() || st.outputs[0] < 0) continue;
      ++seen[n.op_type];
      if (l[static_cast<size_t>(st.outputs[0])] == Layout::ChannelsLast) ++nhwc[n.op_type];
    }
  }
  for (const auto& [op, count] : seen) {
    CAPTURE(op);
    CHECK(nhwc[op] == count);
  }
  CHECK(seen["BatchNormalizationRelu"] == 7);
  CHECK(seen["BatchNormalizationReluDropout"] == 6);
  CHECK(seen["ConvGrad"] == 15);  // 16 convolutions; the first one computes no dX
  MESSAGE(last << " of " << l.size() << " values NHWC");
  // The feed stays Plain: the first convolution reads NCHW and writes NHWC.
  CHECK(l[static_cast<size_t>(plan.index.at(t.graph.inputs[0]))] == Layout::Plain);
  check_declared_layouts(plan, dev, l);
}

TEST_CASE("the cuda convolutions read KRSC weight copies made once per step and write KRSC dW converted back") {
  if (!StandinDevice::have_cuda_kernels()) {
    MESSAGE("a build without the cuda backend declares no cuda layouts: nothing to check");
    return;
  }
  TrainingGraph t = wrn_training(small_wrn());  // channel counts 4, 8, 12, 16
  fuse_training_graph(t.graph);
  Graph s = specialize(t.graph, step_feeds(t, 2));
  StandinDevice dev;  // reports the cuda kernels' declarations
  Graph copy = s;
  CHECK(add_layout_copies(copy, *make_backend("reference")) == 0);  // the reference declares nothing
  const size_t nodes = s.nodes.size();
  const size_t added = add_layout_copies(s, dev);
  PlanOptions o = training_plan_options(t);
  for (const std::string& out : s.outputs) o.keep.push_back(out);
  const Plan plan = build_plan(s, o);
  const std::vector<Layout> l = choose_layouts(plan, dev);
  check_declared_layouts(plan, dev, l);
  auto layout_of = [&](const std::string& v) { return l[static_cast<size_t>(plan.index.at(v))]; };
  auto writer_of = [&](const std::string& v) { return plan.values[static_cast<size_t>(plan.index.at(v))].def; };
  std::map<std::string, size_t> readers;  // value -> plan steps reading it
  for (const PlanStep& st : plan.steps)
    for (int v : st.inputs)
      if (v >= 0) ++readers[plan.values[static_cast<size_t>(v)].name];
  const std::set<std::string> params(t.params.begin(), t.params.end());

  // Every convolution's 3x3 filter reaches it as a KRSC copy ("W/blocked", ChannelsLast
  // of K,C,R,S) that an Identity made from the parameter; 1x1 filters (the skip
  // convolutions) are the same bytes in both orders and are read as they are.
  std::set<std::string> copied, grads;
  size_t conv_reads = 0;
  for (const PlanStep& st : plan.steps) {
    const Node& n = plan.graph.nodes[st.node];
    if (n.op_type != "Conv" && n.op_type != "FusedConv" && n.op_type != "ConvGrad") continue;
    CAPTURE(n.name);
    const bool grad = n.op_type == "ConvGrad";
    const size_t wi = grad ? 2 : 1;
    std::string w = n.inputs[wi];
    const bool krsc = w.size() > 8 && w.compare(w.size() - 8, 8, "/blocked") == 0;
    const std::string param = krsc ? w.substr(0, w.size() - 8) : w;
    REQUIRE(params.count(param));
    const std::vector<int64_t> dims = plan.values[static_cast<size_t>(plan.index.at(param))].dims;
    const bool fits = layout_fits(Layout::ChannelsLast, dims);
    if (!grad || n.has_output(0)) {  // read (ConvGrad reads W for dX only)
      CHECK(krsc == fits);
      if (krsc) {
        ++conv_reads;
        copied.insert(param);
        CHECK(layout_of(w) == Layout::ChannelsLast);
        CHECK(layout_of(param) == Layout::Plain);  // the parameter: state, row-major
        const Node& c = plan.graph.nodes[plan.steps[static_cast<size_t>(writer_of(w))].node];
        CHECK(c.op_type == "Identity");
        CHECK(c.inputs == std::vector<std::string>{param});
      }
    }
    if (grad && n.has_output(1)) {  // dW: written KRSC, an Identity brings it back
      const std::string dw = n.outputs[1];
      CHECK((dw == t.gradients.at(param) + "/blocked") == fits);
      if (!fits) continue;
      grads.insert(param);
      CHECK(layout_of(dw) == Layout::ChannelsLast);
      CHECK(readers[dw] == 1);
      const std::string g = t.gradients.at(param);
      CHECK(layout_of(g) == Layout::Plain);  // what the optimizer and the buckets read
      const Node& c = plan.graph.nodes[plan.steps[static_cast<size_t>(writer_of(g))].node];
      CHECK(c.op_type == "Identity");
      CHECK(c.inputs == std::vector<std::string>{dw});
    }
  }
  // One copy per weight and step, read by each of its convolutions (forward, and the
  // data gradient where there is one): not one per reader.
  size_t filters = 0;  // 4-D parameters stored differently in KRSC: the 3x3 filters over C > 1
  for (const std::string& p : t.params)
    filters += layout_fits(Layout::ChannelsLast, plan.values[static_cast<size_t>(plan.index.at(p))].dims);
  CHECK(copied.size() == filters);
  CHECK(copied.size() == 12);  // 12 of 16: the first (1 input channel) and the three 1x1 skips are not
  CHECK(grads == copied);
  CHECK(added == copied.size() + grads.size());
  CHECK(s.nodes.size() == nodes + added);
  for (size_t i = 0; i < nodes; ++i) {  // appended: every node keeps its index (messages, Dropout's masks)
    CAPTURE(copy.nodes[i].name);
    CHECK(s.nodes[i].name == copy.nodes[i].name);
  }
  size_t identities = 0;
  for (const PlanStep& st : plan.steps) identities += plan.graph.nodes[st.node].op_type == "Identity";
  CHECK(identities == added);
  size_t copy_reads = 0;
  for (const std::string& p : copied) {
    CHECK(readers[p + "/blocked"] >= 1);
    copy_reads += readers[p + "/blocked"];
  }
  CHECK(copy_reads == conv_reads);
  CHECK(conv_reads > copied.size());  // a copy has several readers
  // Without the cuda declarations (layouts turned off) nothing is added.
  Graph again = specialize(t.graph, step_feeds(t, 2));
  dev.blocked_layouts = false;
  CHECK(add_layout_copies(again, dev) == 0);
}

// Under bf16/fp16 a filter whose two orders are the same bytes (the first convolution's,
// one input channel; the 1x1 skips') gets a copy too, "W/narrow" in the parameter's own
// (Plain) layout, stored in 16 bits: rounded once per step, not by every convolution pass.
TEST_CASE("under bf16/fp16 the filters that need no KRSC copy get a 16-bit copy made once per step") {
  if (!StandinDevice::have_cuda_kernels()) {
    MESSAGE("a build without the cuda backend declares no cuda layouts: nothing to check");
    return;
  }
  TrainingGraph t = wrn_training(small_wrn());  // channel counts 4, 8, 12, 16
  fuse_training_graph(t.graph);
  const Graph base = specialize(t.graph, step_feeds(t, 2));
  StandinDevice dev;
  Graph fp32 = base;
  CHECK(add_layout_copies(fp32, dev, MathPrecision::fp32) == 24);  // as before: 12 KRSC copies, 12 dW back
  const std::set<std::string> params(t.params.begin(), t.params.end());
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    const std::string precision = math_precision_name(m);
    CAPTURE(precision);
    Graph s = base;
    const size_t added = add_layout_copies(s, dev, m);
    CHECK(added == 28);  // and one 16-bit copy per first-convolution and 1x1 filter
    CHECK(s.nodes.size() == base.nodes.size() + added);
    PlanOptions o = training_plan_options(t);
    for (const std::string& out : s.outputs) o.keep.push_back(out);
    std::vector<std::string> updates;
    for (const auto& [produced, state] : o.state_updates) updates.push_back(produced);
    o.narrowed = choose_narrowed(s, o.keep, updates, dev, m);
    const Plan plan = build_plan(s, o);
    const std::vector<Layout> l = choose_layouts(plan, dev);
    check_declared_layouts(plan, dev, l);
    const DataType narrow = m == MathPrecision::bf16 ? DataType::BFloat16 : DataType::Float16;
    auto value = [&](const std::string& v) -> const PlannedValue& {
      return plan.values[static_cast<size_t>(plan.index.at(v))];
    };
    std::set<std::string> narrow_copies;
    size_t reads = 0, plain_dw = 0;
    for (const PlanStep& st : plan.steps) {
      const Node& n = plan.graph.nodes[st.node];
      CAPTURE(n.name);
      if (n.op_type == "Identity" && params.count(n.inputs[0])) {
        const std::string& c = n.outputs[0];
        CHECK(value(c).dtype == narrow);  // every copy stored in 16 bits
        if (c != n.inputs[0] + "/narrow") continue;
        CHECK(narrow_copies.insert(n.inputs[0]).second);  // once per step
        CHECK(!layout_fits(Layout::ChannelsLast, value(n.inputs[0]).dims));
        CHECK(l[static_cast<size_t>(plan.index.at(c))] == Layout::Plain);
        CHECK(value(n.inputs[0]).dtype == DataType::Float32);  // the parameter stays fp32
      }
      if (n.op_type != "Conv" && n.op_type != "FusedConv" && n.op_type != "ConvGrad") continue;
      const bool grad = n.op_type == "ConvGrad";
      if (!grad || n.has_output(0)) {  // every convolution's filter is a copy, none the parameter
        const std::string& w = n.inputs[grad ? 2 : 1];
        CHECK(!params.count(w));
        CHECK(value(w).dtype == narrow);
        if (w.size() > 7 && w.compare(w.size() - 7, 7, "/narrow") == 0) ++reads;
      }
      if (grad && n.has_output(1)) {  // dW: the parameter's fp32 gradient itself where no KRSC
        std::string param = n.inputs[2];
        for (const std::string tail : {"/narrow", "/blocked"})
          if (param.size() > tail.size() && param.compare(param.size() - tail.size(), tail.size(), tail) == 0)
            param.resize(param.size() - tail.size());
        REQUIRE(params.count(param));
        if (!layout_fits(Layout::ChannelsLast, value(param).dims)) {
          ++plain_dw;
          CHECK(n.outputs[1] == t.gradients.at(param));
          CHECK(value(n.outputs[1]).dtype == DataType::Float32);
        }
      }
    }
    CHECK(narrow_copies.size() == 4);  // the first convolution's and the three skips'
    CHECK(reads == 7);                 // 4 forwards, the skips' 3 data gradients
    CHECK(plain_dw == 4);              // their gradients: written as before, no conversion back
    // The reference declares nothing; without 16-bit storage the copies would stay fp32: none.
    Graph ref = base;
    CHECK(add_layout_copies(ref, *make_backend("reference"), m) == 0);
    Graph wide = base;
    StandinDevice no16;
    no16.narrow_storage = false;
    CHECK(add_layout_copies(wide, no16, m) == 24);
  }
}

TEST_CASE("choose_layouts on the WRN training graph: activations blocked, everything a caller sees Plain") {
  TrainingGraph t = wrn_training(blockable_wrn());
  Plan plan = fused_step_plan(t);

  auto cpu = make_backend("cpu");
  // Off by default without AVX-512 (runtime/backend.h); the choice itself is checked on any CPU.
  CHECK(cpu->blocked_layouts == du::cpu_has_avx512_core());
  if (!cpu->blocked_layouts)
    for (Layout x : choose_layouts(plan, *cpu)) CHECK(x == Layout::Plain);
  cpu->blocked_layouts = true;
  std::vector<Layout> l = choose_layouts(plan, *cpu);
  REQUIRE(l.size() == plan.values.size());
  size_t blocked = 0;
  for (size_t v = 0; v < l.size(); ++v) {
    const PlannedValue& pv = plan.values[v];
    if (l[v] != Layout::Blocked16c) continue;
    ++blocked;
    CAPTURE(pv.name);
    CHECK(pv.storage == Storage::Arena);  // never a feed, state, constant or kept value
    CHECK(blockable(pv.dims));
  }
  MESSAGE(blocked << " of " << l.size() << " values blocked");
  CHECK(blocked >= 20);
  check_declared_layouts(plan, *cpu, l);
  // The reference backend declares nothing: all Plain.
  auto ref = make_backend("reference");
  for (Layout x : choose_layouts(plan, *ref)) CHECK(x == Layout::Plain);
}

TEST_CASE("a cpu training step with blocked layouts equals the all-Plain step, with far fewer reorders") {
  for (bool fused : {false, true}) {
    CAPTURE(fused);
    TrainingGraph t = wrn_training(blockable_wrn());
    if (fused) fuse_training_graph(t.graph);
    TensorMap feeds = step_feeds(t, 8);
    auto cpu = make_backend("cpu");
    cpu->blocked_layouts = true;  // also without AVX-512, where the blocked kernels are slow but must agree
    std::map<bool, TensorMap> results;
    std::map<bool, uint64_t> moved;
    for (bool blocked : {false, true}) {
      ExecutorOptions eo;
      eo.poison_arena = true;
      eo.blocked_layouts = blocked;
      Graph g = t.graph;  // updates write state in place: each run starts from the same weights
      for (auto& [name, x] : g.initializers) x = x.clone();
      Executor ex(g, *cpu, eo);
      RunOptions ro;
      ro.training = true;
      ro.seed = 3;
      ex.run(feeds, ro);  // first run: primitives made, caches warm
      const uint64_t before = du::reorder_bytes();
      for (const auto& [name, out] : ex.run(feeds, ro)) results[blocked][name] = out.clone();
      moved[blocked] = du::reorder_bytes() - before;
      if (blocked) CHECK(ex.value("block1/layer1/conv/out").layout() == Layout::Blocked16c);
    }
    double worst = 0;
    for (const std::string& out : t.graph.outputs) {
      CAPTURE(out);
      const Tensor& got = results[true].at(out);
      const Tensor& want = results[false].at(out);
      CHECK(got.layout() == Layout::Plain);
      double scale = 1e-3;  // each output against its own magnitude
      for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.get_as_double(i)));
      const double err = max_abs_diff(got, want) / scale;
      worst = std::max(worst, err);
      CHECK(err < 1e-4);
    }
    MESSAGE("largest difference, relative to each output's magnitude: " << worst);
    MESSAGE("reordered bytes per step: plain " << moved[false] << ", blocked " << moved[true]);
    // What is left is the weights' reorders (row-major W into the primitives' layouts,
    // dW back) and the 1-channel input: at batch 8 a fifteenth. Without AVX-512
    // oneDNN's kernels want nChw8c and reorder the nChw16c values themselves.
    if (du::cpu_has_avx512_core()) CHECK(moved[true] * 10 < moved[false]);
  }
}

TEST_CASE("Dropout on a Blocked16c tensor draws the row-major tensor's mask, element for element") {
  const std::vector<int64_t> dims{3, 32, 5, 7};  // 3360 elements: several walks start mid-block
  Node n = make_node("Dropout", {"x", "ratio"}, {"y", "mask"});
  Tensor ratio = make(DataType::Float32, {}, {0.3f});
  Tensor x = random_tensor(DataType::Float32, dims, 4);
  Tensor xb = stored_as(x, Layout::Blocked16c);
  const Kernel& k = make_backend("cpu")->kernel(n);
  Tensor y(DataType::Float32, dims), mask(DataType::Bool, dims);
  KernelContext plain{n, {&x, &ratio}, {&y, &mask}, true, 77};
  k(plain);
  Tensor yb(DataType::Float32, dims), maskb(DataType::Bool, dims);
  yb.set_layout(Layout::Blocked16c);
  maskb.set_layout(Layout::Blocked16c);
  KernelContext blocked{n, {&xb, &ratio}, {&yb, &maskb}, true, 77};
  k(blocked);
  CHECK(bitwise_equal(to_plain(yb), y));
  CHECK(bitwise_equal(to_plain(maskb), mask));
}

TEST_CASE("the cpu batch norm + ReLU (+ Dropout) on Blocked16c equals its row-major run bit for bit") {
  // The cpu backend's own apply loop runs both layouts (ops/norm_cpu.cpp: apply_rows),
  // with the Dropout fused into it on Blocked16c too: Z, the running and the saved
  // statistics must be the row-major run's bits, in training (the mask drawn by row-major
  // index) and in inference.
  const std::vector<int64_t> dims{3, 32, 5, 7};
  const std::vector<int64_t> ch{32};
  Tensor x = random_tensor(DataType::Float32, dims, 4, -2, 2);
  Tensor scale = random_tensor(DataType::Float32, ch, 5, 0.5, 1.5), bias = random_tensor(DataType::Float32, ch, 6);
  Tensor mean = random_tensor(DataType::Float32, ch, 7), var = random_tensor(DataType::Float32, ch, 8, 0.5, 2);
  Tensor ratio = make(DataType::Float32, {}, {0.3f});
  for (bool dropout : {false, true})
    for (bool training : {false, true}) {
      CAPTURE(dropout);
      CAPTURE(training);
      std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(1e-3f)},
                                             {"momentum", Attribute::of_float(0.8f)}};
      std::vector<std::string> ins{"x", "scale", "bias", "mean", "var"};
      if (dropout) {
        attrs["dropout_node"] = Attribute::of_int(1);
        ins.push_back("ratio");
      }
      const std::vector<std::string> outs{"z", "rm", "rv", "", "", "sm", "sv"};
      Node n = make_node(dropout ? "BatchNormalizationReluDropout" : "BatchNormalizationRelu", ins,
                         training ? outs : std::vector<std::string>{"z"}, attrs, kTrainrtDomain);
      const Kernel& k = make_backend("cpu")->kernel(n);
      std::map<Layout, std::vector<Tensor>> got;
      for (Layout l : {Layout::Plain, Layout::Blocked16c}) {
        Tensor xl = stored_as(x, l);
        std::vector<Tensor> o{Tensor(DataType::Float32, dims)};
        o[0].set_layout(l);
        if (training)
          for (int i = 0; i < 4; ++i) o.emplace_back(DataType::Float32, ch);
        std::vector<Tensor*> out_ptrs{&o[0]};
        if (training) out_ptrs = {&o[0], &o[1], &o[2], nullptr, nullptr, &o[3], &o[4]};
        std::vector<const Tensor*> in_ptrs{&xl, &scale, &bias, &mean, &var};
        if (dropout) in_ptrs.push_back(&ratio);
        KernelContext c{n, in_ptrs, out_ptrs, training, 77};
        const uint64_t fallbacks = dnnl_util::reference_fallbacks();
        k(c);
        CHECK(dnnl_util::reference_fallbacks() == fallbacks);
        o[0] = to_plain(o[0]);
        got[l] = std::move(o);
      }
      for (size_t i = 0; i < got[Layout::Plain].size(); ++i) {
        CAPTURE(i);
        CHECK(bitwise_equal(got[Layout::Blocked16c][i], got[Layout::Plain][i]));
      }
      if (dropout && training) {  // the mask dropped some of the positive values
        int64_t zeros = 0;
        for (int64_t i = 0; i < x.numel(); ++i) zeros += got[Layout::Plain][0].data<float>()[i] == 0.f;
        CHECK(zeros > x.numel() / 2);  // ReLU's about half, and the Dropout's 30 % of the rest
      }
    }
}
