// 16-bit storage of float32 values under --precision bf16/fp16 (runtime/narrow.h): which
// values the cuda kernels' declarations let the plan store in 16 bits, and that a
// training step on the stand-in device (the cuda kernel set, the reference kernels
// reading widened copies: run_on_plain_copies) still equals the reference backend's bit
// for bit while the arena shrinks. The cuda kernels' own 16-bit reads and writes are
// compiled, not run.
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "ops/core/rounded_outputs.h"
#include "runtime/narrow.h"
#include "runtime_util.h"
#include "standin_device.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

size_t narrowed_count(const Plan& p, DataType t) {
  size_t n = 0;
  for (const PlannedValue& v : p.values) n += v.dtype == t && p.graph.find_info(v.name)->dtype == DataType::Float32;
  return n;
}

// Output k of n is a ConvGrad's dW: rounded under bf16/fp16 (math_rounded_outputs) but a
// parameter's gradient, which the optimizer reads in fp32, so never stored in 16 bits.
bool is_filter_gradient(const Node& n, size_t k) { return n.op_type == "ConvGrad" && k == 1; }

// The small Wide ResNet's bf16 training session on the stand-in device after one step:
// its plan holds the 16-bit choice the tests below read.
std::unique_ptr<TrainingSession> stepped_bf16_wrn() {
  const Graph g = small_wrn();
  auto session = std::make_unique<TrainingSession>(wrn_training(g), std::make_unique<StandinDevice>(),
                                                   SessionOptions{.seed = 3, .math = MathPrecision::bf16});
  session->step(wrn_batch(2, 1), 0.05f);
  return session;
}

}  // namespace

TEST_CASE("run_on_plain_copies hands a reference kernel float32 copies of 16-bit values, and rounds what it writes") {
  for (const auto& [t, out_layout] :
       {std::pair{DataType::BFloat16, Layout::ChannelsLast}, std::pair{DataType::Float16, Layout::ChannelsLast},
        std::pair{DataType::BFloat16, Layout::Plain}}) {
    CAPTURE(dtype_name(t));
    CAPTURE(static_cast<int>(out_layout));
    const Tensor x = random_tensor(DataType::Float32, {2, 3, 4, 5}, 7);
    Tensor x16 = x.cast(t);
    x16.set_narrowed(true);
    x16.set_layout(Layout::Plain);
    Tensor y16(t, x.dims());
    y16.set_narrowed(true);
    y16.set_layout(out_layout);  // a 16-bit output (NHWC or Plain): widened, laid out, rounded
    Node n{"scale", "Scale", "", {"x"}, {"y"}, {}, ""};
    KernelContext ctx{n, {&x16}, {&y16}};
    DataType seen = DataType::Undefined;
    const Kernel k = [&](KernelContext& c) {  // y = x * 1.001, in float32 row-major
      seen = c.in(0).dtype();
      CHECK(c.in(0).layout() == Layout::Plain);
      CHECK(c.out(0).layout() == Layout::Plain);
      for (int64_t i = 0; i < c.in(0).numel(); ++i) c.out(0).data<float>()[i] = c.in(0).data<float>()[i] * 1.001f;
    };
    run_on_plain_copies(k, ctx);
    CHECK(seen == DataType::Float32);
    const Tensor widened = x16.cast(DataType::Float32);
    Tensor want(DataType::Float32, x.dims());
    for (int64_t i = 0; i < x.numel(); ++i) want.data<float>()[i] = widened.data<float>()[i] * 1.001f;
    Tensor got = to_plain(y16);
    CHECK(got.narrowed());
    CHECK(bitwise_equal(got, want.cast(t)));
    // The rounding is to nearest even: a truncation would differ somewhere.
    size_t differs = 0;
    for (int64_t i = 0; i < x.numel(); ++i)
      differs += static_cast<double>(want.data<float>()[i]) != got.get_as_double(i);
    CHECK(differs > 0);
  }
}

TEST_CASE("choose_narrowed: a value is stored in 16 bits only where its writer and every reader declared it") {
  if (!StandinDevice::have_cuda_kernels()) {
    MESSAGE("a build without CUDA kernels declares no 16-bit slots: nothing to choose");
    return;
  }
  const std::unique_ptr<TrainingSession> stepped = stepped_bf16_wrn();
  const TrainingSession& device = *stepped;
  const Plan& plan = device.plan();
  const Graph& s = plan.graph;
  StandinDevice dev;
  std::vector<std::string> keep(s.outputs.begin(), s.outputs.end());
  const auto chosen = choose_narrowed(s, keep, {}, dev, MathPrecision::bf16);
  REQUIRE(!chosen.empty());
  // What the plan stored in 16 bits is what the chooser picks, in the precision's type.
  CHECK(narrowed_count(plan, DataType::BFloat16) == chosen.size());
  std::set<std::string> writers, readers;
  for (const Node& n : s.nodes) {
    for (const std::string& out : n.outputs)
      if (chosen.count(out)) writers.insert(n.op_type);
    for (const std::string& in : n.inputs)
      if (chosen.count(in)) readers.insert(n.op_type);
  }
  // Every value the step rounds (math_rounded_outputs: convolution outputs, batch-norm
  // outputs, the data gradients between them), now that their readers (batch norms'
  // X and dY, the fused batch norm + ReLU + Dropout's X, ConvGrad's X and dY,
  // DropoutReluGrad's dY, the gradient Sums, the residual Add, FusedConv's residual Z,
  // SumToShape's `like`) declare 16-bit reads, plus the two kinds every reader rounds: the
  // Dropouts' outputs, written by the fused batch norm + ReLU + Dropout (read by the next
  // convolution, its filter gradient and DropoutReluGrad's sign test) and the weights' copies
  // (runtime/layout.h add_layout_copies: Identity nodes, read by the convolution and its
  // data gradient; KRSC, or under bf16/fp16 Plain for the filters whose layout needs none).
  std::string names, writer_names;
  for (const std::string& r : readers) names += " " + r;
  for (const std::string& w : writers) writer_names += " " + w;
  CAPTURE(names);
  CAPTURE(writer_names);
  // No FusedConv: the Wide ResNet's are the ones with a residual (their Y is not rounded).
  // No Dropout: each is fused with the batch norm + ReLU before it.
  CHECK(writers == std::set<std::string>{"BatchNormalizationGrad", "BatchNormalizationRelu",
                                         "BatchNormalizationReluDropout", "Conv", "ConvGrad", "DropoutReluGrad",
                                         "Identity"});
  CHECK(readers == std::set<std::string>{"Add", "BatchNormalizationGrad", "BatchNormalizationRelu",
                                         "BatchNormalizationReluDropout", "Conv", "ConvGrad", "DropoutReluGrad",
                                         "FusedConv", "Sum", "SumToShape"});
  size_t rounded = 0, dropouts = 0, weight_copies = 0, fused_residual = 0;
  std::map<std::string, size_t> by_writer;  // rounded values stored in 16 bits, per writer op
  const auto producers = s.producers();
  for (const Node& n : s.nodes) {
    for (size_t k : math_rounded_outputs(n)) {
      if (!n.has_output(k)) continue;
      if (is_filter_gradient(n, k)) {  // dW: rounded, but the optimizer reads a parameter's gradient in fp32
        CHECK(!chosen.count(n.outputs[k]));
        continue;
      }
      ++rounded;
      by_writer[n.op_type] += chosen.count(n.outputs[k]);
      CHECK(chosen.count(n.outputs[k]));  // every reader declared the slot
    }
    if (n.op_type == "FusedConv" && n.has_input(3)) {  // act(conv + B) + Z is no 16-bit number
      ++fused_residual;
      CHECK(!chosen.count(n.outputs[0]));
    }
    if (n.op_type == "BatchNormalizationReluDropout") {
      ++dropouts;
      CHECK(chosen.count(n.outputs[0]));
    }
    // A weight's copy (every one is), or a KRSC dW brought back.
    if (n.op_type == "Identity") {
      const bool copy = !producers.count(n.inputs[0]);  // reads a parameter
      weight_copies += copy;
      CHECK(chosen.count(n.outputs[0]) == (copy ? 1u : 0u));  // a gradient stays float32
    }
  }
  CHECK(dropouts == 6);
  // 12 KRSC copies of the 3x3 filters over more than one channel; 4 Plain ones of the
  // first convolution's (one channel) and the 1x1 skips' filters.
  CHECK(weight_copies == 16);
  CHECK(fused_residual > 0);
  CHECK(rounded == 54);
  CHECK(rounded + dropouts + weight_copies == chosen.size());
  // 7 batch-norm outputs (the other 6 batch norms + ReLU write their Dropout's output)
  // and 13 data gradients, 6 Dropout gradients, the outputs of the 13 convolutions
  // without a residual and 15 convolutions' data gradients (the input convolution's is
  // not computed).
  CHECK(by_writer["Conv"] == 13);
  CHECK(by_writer["ConvGrad"] == 15);
  CHECK(by_writer["BatchNormalizationRelu"] == 7);
  CHECK(by_writer["BatchNormalizationGrad"] == 13);
  CHECK(by_writer["DropoutReluGrad"] == 6);
  std::string counts;
  for (const auto& [op, count] : by_writer) counts += " " + op + " " + std::to_string(count);
  MESSAGE("16-bit values by writer:" << counts << ", BatchNormalizationReluDropout " << dropouts
                                     << ", Identity (weights) " << weight_copies);
  for (const auto& [name, type] : chosen) {
    CHECK(type == DataType::BFloat16);
    CHECK(!s.is_initializer(name));
  }
  CHECK(choose_narrowed(s, keep, {}, dev, MathPrecision::fp16).begin()->second == DataType::Float16);
  CHECK(choose_narrowed(s, keep, {}, dev, MathPrecision::fp32).empty());
  CHECK(choose_narrowed(s, keep, {}, *make_backend("reference"), MathPrecision::bf16).empty());

  // A value the caller keeps, or that one more reader reads unrounded, stays float32.
  const std::string some = chosen.begin()->first;
  keep.push_back(some);
  CHECK(!choose_narrowed(s, keep, {}, dev, MathPrecision::bf16).count(some));
  keep.pop_back();
  Graph extra = s;
  extra.nodes.push_back(Node{"extra_relu", "Relu", "", {some}, {"extra_out"}, {}, ""});
  const auto fewer = choose_narrowed(extra, keep, {}, dev, MathPrecision::bf16);
  CHECK(!fewer.count(some));
  CHECK(fewer.size() == chosen.size() - 1);
  // Turned off on the backend: nothing.
  dev.narrow_storage = false;
  CHECK(choose_narrowed(s, keep, {}, dev, MathPrecision::bf16).empty());
}

// The second way to qualify: a value its writer rounds (math_rounded_outputs) is a 16-bit
// number already, so a reader that declared the slot takes it stored in 16 bits even where
// it does not round that input itself; a value its writer does not round still needs every
// reader to round it.
TEST_CASE("choose_narrowed: a value its writer rounds needs only declared readers") {
  if (!StandinDevice::have_cuda_kernels()) {
    MESSAGE("a build without CUDA kernels declares no 16-bit slots: nothing to choose");
    return;
  }
  const std::unique_ptr<TrainingSession> stepped = stepped_bf16_wrn();
  const TrainingSession& device = *stepped;
  const Graph& s = device.plan().graph;
  StandinDevice dev;
  const std::vector<std::string> keep(s.outputs.begin(), s.outputs.end());
  const auto chosen = choose_narrowed(s, keep, {}, dev, MathPrecision::bf16);
  // A chosen BatchNormalizationGrad dX, a Dropout's output (written by the fused batch
  // norm + ReLU + Dropout, which does not round it).
  std::string rounded_value, dropout_value;
  for (const Node& n : s.nodes) {
    if (n.op_type == "BatchNormalizationGrad" && chosen.count(n.outputs[0])) rounded_value = n.outputs[0];
    if (n.op_type == "BatchNormalizationReluDropout" && chosen.count(n.outputs[0])) dropout_value = n.outputs[0];
  }
  REQUIRE(!rounded_value.empty());
  REQUIRE(!dropout_value.empty());
  // One more reader of each: a ConvGrad asked for dX only, which declares X (input 1) but
  // does not round it (math_rounded_inputs rounds X for dW only). Its W: any weight.
  const Node* conv = nullptr;
  for (const Node& n : s.nodes)
    if (n.op_type == "ConvGrad" && n.attr_int("dx_relu", 0) == 0) conv = &n;
  REQUIRE(conv != nullptr);
  for (const std::string& v : {rounded_value, dropout_value}) {
    CAPTURE(v);
    Graph extra = s;
    Node reader = *conv;
    reader.name = "extra_grad";
    reader.inputs = {conv->inputs[0], v, conv->inputs[2]};
    reader.outputs = {"extra_dx", "", ""};
    extra.nodes.push_back(reader);
    const auto with_reader = choose_narrowed(extra, keep, {}, dev, MathPrecision::bf16);
    CHECK(with_reader.count(v) == (v == rounded_value ? 1u : 0u));
  }
}

TEST_CASE("device backend: bf16/fp16 steps with 16-bit storage equal the reference's bit for bit, in a smaller arena") {
  Graph g = small_wrn();
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    const std::string name = math_precision_name(m);
    CAPTURE(name);
    auto owned = std::make_unique<StandinDevice>();
    StandinDevice& dev = *owned;
    TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3, .math = m});
    auto wide_owned = std::make_unique<StandinDevice>();
    wide_owned->narrow_storage = false;
    TrainingSession wide(wrn_training(g), std::move(wide_owned), {.seed = 3, .math = m});
    TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3, .math = m});
    for (int step = 0; step < 3; ++step) {
      const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 1));
      const double a = device.step(b, 0.05f), c = ref.step(b, 0.05f);
      CHECK(a == c);
      CHECK(wide.step(b, 0.05f) == c);  // the numerics do not depend on what is stored narrow
    }
    for (const std::string& name : ref.state_names()) {
      CAPTURE(name);
      CHECK(bitwise_equal(device.state(name), ref.state(name)));
    }
    const DataType t = m == MathPrecision::bf16 ? DataType::BFloat16 : DataType::Float16;
    if (StandinDevice::have_cuda_kernels()) {
      CHECK(narrowed_count(device.plan(), t) > 0);
      CHECK(device.plan().arena_bytes < wide.plan().arena_bytes);
      // The 76 values test "choose_narrowed: a value is stored in 16 bits only where..."
      // counts (the 54 the step rounds, 6 Dropout outputs written by the fused
      // BatchNormalizationReluDropout, 16 weight copies): 1,048,128 bytes against 1,731,264
      // all fp32. Before the residual Adds' SumToShape copies were written over their dY,
      // 1,046,272 (the best fit then placed the values 1,856 bytes tighter; the full-size
      // Wide ResNet's arena is the same either way). Before that fusion, 82 values (the 6 batch-norm+ReLU outputs it no
      // longer writes were stored too) and 1,046,400 bytes. Before the 16-bit copies of
      // the first convolution's and the 1x1 skips' filters (which their convolutions then
      // converted per pass): 78 values, 1,046,144 bytes (the 4 copies live through the
      // step). Before the convolutions wrote 16-bit outputs and the batch norms, sums and
      // DropoutReluGrad read them (38 values: 13 batch-norm data gradients, 6 Dropout
      // outputs, 7 batch-norm+ReLU outputs, 12 KRSC weight copies): 1,518,656.
      CHECK(narrowed_count(device.plan(), t) == 76);
      CHECK(device.plan().arena_bytes <= 1048128);
      MESSAGE(name << ": " << narrowed_count(device.plan(), t) << " values in 16 bits, arena "
                   << device.plan().arena_bytes << " bytes against " << wide.plan().arena_bytes);
    }
    CHECK(narrowed_count(wide.plan(), t) == 0);
    CHECK(dev.counts().launched > 0);
  }
}

// What the Wide ResNet's step rounds under bf16 (math_rounded_outputs), and which of those
// values the cuda kernels' declarations let the stand-in store in 16 bits: a rounded value
// stays float32 while one of its readers has not declared the slot (listed; none now).
TEST_CASE("choose_narrowed: the Wide ResNet's rounded activations, and the readers that keep them float32") {
  const std::unique_ptr<TrainingSession> stepped = stepped_bf16_wrn();
  const TrainingSession& device = *stepped;
  const Plan& plan = device.plan();
  const Graph& s = plan.graph;
  StandinDevice dev;
  const std::vector<std::string> keep(s.outputs.begin(), s.outputs.end());
  const auto chosen = choose_narrowed(s, keep, {}, dev, MathPrecision::bf16);
  std::map<std::string, std::string> rounded;  // value -> its writer's op
  for (const Node& n : s.nodes)
    for (size_t k : math_rounded_outputs(n))
      if (!n.outputs[k].empty() && !is_filter_gradient(n, k))  // dW: the optimizer's, fp32 (above)
        rounded[n.outputs[k]] = n.op_type;
  std::set<std::string> writers;
  for (const auto& [v, op] : rounded) writers.insert(op);
  // The training graph's convolutions (fused or not), batch norms (with their ReLU) and
  // the gradients between them.
  CHECK(writers.count("ConvGrad"));
  CHECK(writers.count("BatchNormalizationGrad"));
  CHECK((writers.count("Conv") || writers.count("FusedConv")));
  CHECK((writers.count("BatchNormalization") || writers.count("BatchNormalizationRelu")));
  std::map<std::string, std::set<std::string>> blocking;  // writer op -> readers that did not declare
  size_t stored = 0;
  for (const auto& [v, op] : rounded) {
    stored += chosen.count(v);
    for (const Node& r : s.nodes)
      for (size_t j = 0; j < r.inputs.size(); ++j)
        if (r.inputs[j] == v && !dev.narrow(s, r).input(j)) blocking[op].insert(r.op_type + "#" + std::to_string(j));
  }
  for (const auto& [op, readers] : blocking) {
    std::string list;
    for (const std::string& r : readers) list += " " + r;
    MESSAGE(op << " outputs stay float32 where read by (op#input):" << list);
  }
  MESSAGE(rounded.size() << " values rounded by their writers, " << stored << " of them stored in 16 bits; "
                         << chosen.size() << " values in 16 bits in all");
  if (!StandinDevice::have_cuda_kernels()) {  // nothing declared: every value stays float32
    CHECK(chosen.empty());
    CHECK(!blocking.empty());
    return;
  }
  CHECK(blocking.empty());
  CHECK(stored == rounded.size());
  // Each 16-bit value is one its writer rounds, or a Dropout output (the fused
  // BatchNormalizationReluDropout's Z) or a weight's copy (an Identity) every reader
  // rounds.
  for (const auto& [v, t] : chosen) {
    CAPTURE(v);
    bool read_rounded = false;
    for (const Node& n : s.nodes)
      read_rounded =
          read_rounded ||
          ((n.op_type == "Dropout" || n.op_type == "BatchNormalizationReluDropout" || n.op_type == "Identity") &&
           n.outputs[0] == v);
    CHECK((rounded.count(v) || read_rounded));
  }
}

// The other side of the declarations: a cuda kernel declares an output 16-bit only where
// it rounds it in the precision (math_rounded_outputs: the bits stored are the value), or
// where every reader rounds it anyway (a Dropout's output, also the fused
// BatchNormalizationReluDropout's, a weight's copy). A FusedConv
// with a residual Z adds Z after rounding act(conv + B): its Y is no 16-bit number, so
// its kernel must not declare it (choose_narrowed would still refuse it for readers
// that do not round it, but a reader that does, or a later rule, would take it).
TEST_CASE("cuda declarations: a kernel declares a 16-bit output only where it rounds it") {
  if (!StandinDevice::have_cuda_kernels()) {
    MESSAGE("a build without CUDA kernels declares no 16-bit slots");
    return;
  }
  const std::unique_ptr<TrainingSession> stepped = stepped_bf16_wrn();
  const TrainingSession& device = *stepped;
  const Graph& s = device.plan().graph;
  StandinDevice dev;
  size_t declared = 0, residuals = 0;
  for (const Node& n : s.nodes) {
    const NodeSlots slots = dev.narrow(s, n);
    const std::vector<size_t> r = math_rounded_outputs(n);
    const std::set<size_t> rounded(r.begin(), r.end());
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (!slots.output(k)) continue;
      CAPTURE(n.name);
      CAPTURE(k);
      ++declared;
      CHECK((rounded.count(k) || n.op_type == "Dropout" || n.op_type == "BatchNormalizationReluDropout" ||
             n.op_type == "Identity"));
    }
    if (n.op_type == "FusedConv" && n.has_input(3)) {
      ++residuals;
      CHECK(!slots.output(0));
      CHECK(slots.input(3));  // Z, a rounded value, read 16-bit
    }
  }
  CHECK(residuals > 0);
  CHECK(declared >= 76);  // at least the 76 values stored (previous test)
}

namespace {

// relu_cnn (test_util.h): without batch norm, ConvGrad(dx_relu=1)'s X is the first
// FusedConv's Y, rounded by its writer under bf16/fp16.
TensorMap relu_cnn_batch(int64_t n, uint64_t seed) {
  TensorMap b = wrn_batch(n, seed);
  b["input"] = random_tensor(DataType::Float32, {n, 1, 12, 12}, seed);
  return b;
}

}  // namespace

TEST_CASE("written_rounded: a value whose writer rounds it (math_rounded_outputs)") {
  const Graph g = relu_cnn(8);
  CHECK(written_rounded(g, "conv1"));   // a Conv's Y
  CHECK(!written_rounded(g, "relu1"));  // a Relu's: not rounded by it
  CHECK(!written_rounded(g, "input"));
  CHECK(!written_rounded(g, "w1"));
  CHECK(!written_rounded(g, ""));
  CHECK(!written_rounded(g, "no such value"));
  Graph fused = g;
  fused.nodes[0].op_type = "FusedConv";
  fused.nodes[0].domain = kTrainrtDomain;
  CHECK(written_rounded(fused, "conv1"));  // without a residual Z
  fused.nodes[0].inputs.push_back("input");
  CHECK(!written_rounded(fused, "conv1"));  // act(conv + B) + Z is no 16-bit number
}

// ConvGrad with dx_relu reads X twice: rounded for dW, unrounded for the ReLU mask
// (ops/conv.cpp with_dx_relu). X stored in 16 bits is the value the mask tests only where
// its writer rounded it (written_rounded); a value only its readers round (a Dropout's
// output) would have a tiny positive X stored as 0 and its mask flipped, so it stays
// float32. The Wide ResNet has no dx_relu (its ReLU gradients fold into the batch norms'):
// one ConvGrad of each kind of X is given one here.
TEST_CASE("choose_narrowed: a ConvGrad with dx_relu takes X in 16 bits only where X's writer rounds it") {
  if (!StandinDevice::have_cuda_kernels()) {
    MESSAGE("a build without CUDA kernels declares no 16-bit slots");
    return;
  }
  const std::unique_ptr<TrainingSession> stepped = stepped_bf16_wrn();
  const Graph& s = stepped->plan().graph;
  StandinDevice dev;
  const std::vector<std::string> keep(s.outputs.begin(), s.outputs.end());
  const auto chosen = choose_narrowed(s, keep, {}, dev, MathPrecision::bf16);
  const auto producers = s.producers();
  size_t rounded_x = s.nodes.size(), dropout_x = s.nodes.size();
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const Node& n = s.nodes[i];
    if (n.op_type != "ConvGrad" || !n.has_output(0) || !chosen.count(n.inputs[1])) continue;
    const std::string& writer = s.nodes[producers.at(n.inputs[1])].op_type;
    if (writer == "BatchNormalizationRelu") rounded_x = i;
    if (writer == "BatchNormalizationReluDropout") dropout_x = i;
  }
  REQUIRE(rounded_x < s.nodes.size());
  REQUIRE(dropout_x < s.nodes.size());
  for (const auto& [i, stays16] : {std::pair{rounded_x, true}, std::pair{dropout_x, false}}) {
    Graph g = s;
    Node& n = g.nodes[i];
    CAPTURE(n.name);
    n.attrs["dx_relu"] = Attribute::of_int(1);
    CHECK(written_rounded(g, n.inputs[1]) == stays16);
    CHECK(dev.narrow(g, n).input(1) == stays16);
    const auto c = choose_narrowed(g, keep, {}, dev, MathPrecision::bf16);
    CHECK(c.count(n.inputs[1]) == (stays16 ? 1u : 0u));
    CHECK(c.count(n.outputs[0]) == 1u);  // its dX, rounded by it, stays 16-bit either way
    CHECK(c.size() == chosen.size() - (stays16 ? 0 : 1));
  }
}

// The dgrad + ReLU gradient under bf16/fp16 with X and dX stored in 16 bits: the stand-in
// device (the cuda kernels' declarations, reference math on widened copies) equals the
// reference backend bit for bit; dX = round(X > 0 ? dgrad : 0) whichever storage.
TEST_CASE("device backend: ConvGrad with dx_relu reads a 16-bit X and writes a 16-bit dX, bit for bit") {
  const Graph g = relu_cnn(8);
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    const std::string name = math_precision_name(m);
    CAPTURE(name);
    TrainingSession device(wrn_training(g), std::make_unique<StandinDevice>(), {.seed = 5, .math = m});
    TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 5, .math = m});
    for (int step = 0; step < 3; ++step) {
      const TensorMap b = relu_cnn_batch(4, static_cast<uint64_t>(step + 1));
      CHECK(device.step(b, 0.05f) == ref.step(b, 0.05f));
    }
    for (const std::string& state : ref.state_names()) {
      CAPTURE(state);
      CHECK(bitwise_equal(device.state(state), ref.state(state)));
    }
    const Plan& plan = device.plan();
    const Node* grad = nullptr;
    for (const Node& n : plan.graph.nodes)
      if (n.op_type == "ConvGrad" && n.attr_int("dx_relu", 0) == 1) grad = &n;
    REQUIRE(grad != nullptr);
    std::map<std::string, DataType> stored;
    for (const PlannedValue& v : plan.values) stored[v.name] = v.dtype;
    const DataType t = m == MathPrecision::bf16 ? DataType::BFloat16 : DataType::Float16;
    const DataType want = StandinDevice::have_cuda_kernels() ? t : DataType::Float32;
    CHECK(stored.at(grad->inputs[1]) == want);   // X: the first FusedConv's rounded Y
    CHECK(stored.at(grad->outputs[0]) == want);  // dX
  }
}

TEST_CASE("device backend: tests/data/mobile_cnn.onnx's bf16/fp16 steps with 16-bit storage equal the reference's") {
  // The model of the one selftest a GPU failed (its squeeze-and-excitation 1x1
  // convolutions on a 1x1 image, behind a GlobalAveragePool): the cuda kernels' layouts,
  // 16-bit storage and rounding on the stand-in device, against the reference, bit for bit.
  Graph g = import_onnx_file(std::string(TRAINRT_SOURCE_DIR) + "/tests/data/mobile_cnn.onnx", registry().schemas);
  infer_shapes(g, registry().schemas, "mobile_cnn");
  auto batch = [](uint64_t seed) {
    Tensor labels(DataType::Int64, {4});
    for (int64_t i = 0; i < 4; ++i)
      labels.data<int64_t>()[i] = static_cast<int64_t>((seed + 5 * static_cast<uint64_t>(i)) % 6);
    return TensorMap{{"images", random_tensor(DataType::Float32, {4, 3, 16, 16}, seed)}, {"labels", labels}};
  };
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    const std::string name = math_precision_name(m);
    CAPTURE(name);
    TrainingSession device(wrn_training(g), std::make_unique<StandinDevice>(), {.seed = 3, .math = m});
    TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3, .math = m});
    for (int step = 0; step < 2; ++step) {
      const TensorMap b = batch(static_cast<uint64_t>(step + 1));
      CHECK(device.step(b, 0.05f) == ref.step(b, 0.05f));
    }
    for (const std::string& s : ref.state_names()) {
      CAPTURE(s);
      CHECK(bitwise_equal(device.state(s), ref.state(s)));
    }
    const DataType t = m == MathPrecision::bf16 ? DataType::BFloat16 : DataType::Float16;
    if (StandinDevice::have_cuda_kernels()) {
      std::string names;
      for (const PlannedValue& v : device.plan().values)
        if (v.dtype == t) names += " " + v.name;
      MESSAGE(name << ": " << narrowed_count(device.plan(), t) << " values in 16 bits:" << names);
    }
  }
}
