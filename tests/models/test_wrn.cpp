// The Wide ResNet builder against the seed's PyTorch model (tools/wrn_reference.py
// wrote tests/data/wrn_param_counts.json and the small wrn_small_*.onnx exports).
#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "golden_files.h"
#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "models/wrn.h"

using namespace trainrt;

namespace {

const std::string kData = TRAINRT_TEST_DATA;

std::string read_text(const std::string& path) {
  std::ifstream f(test::golden_file(path), std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The number after "<key>": inside the JSON object that follows "<object>": { ... }.
int64_t json_count(const std::string& json, const std::string& object, const std::string& key) {
  size_t at = json.find("\"" + object + "\": {");
  REQUIRE_MESSAGE(at != std::string::npos, "no object '" << object << "' in wrn_param_counts.json");
  const std::string rest = json.substr(at, json.find('}', at) - at);
  const std::string field = "\"" + key + "\": ";
  const size_t k = rest.find(field);
  REQUIRE_MESSAGE(k != std::string::npos, "no '" << key << "' in '" << object << "'");
  const size_t digits = k + field.size();
  REQUIRE_MESSAGE(digits < rest.size(), "no number after '" << key << "'");
  REQUIRE_MESSAGE(std::isdigit(static_cast<unsigned char>(rest[digits])), "no number after '" << key << "'");
  return std::stoll(rest.substr(digits));
}

WrnOptions small_fashion() {
  WrnOptions o = wrn_options_for_dataset("fashion-mnist");
  o.widths = {4, 8, 12, 16};
  return o;
}

std::map<std::string, int> op_counts(const Graph& g) {
  std::map<std::string, int> c;
  for (const Node& n : g.nodes) ++c[n.op_type];
  return c;
}

}  // namespace

TEST_CASE("wrn: trainable parameters equal PyTorch's (tests/data/wrn_param_counts.json)") {
  const std::string json = read_text(kData + "/wrn_param_counts.json");
  for (const std::string& d : wrn_datasets()) {
    CAPTURE(d);
    Graph g = build_wide_resnet(wrn_options_for_dataset(d));
    CHECK(trainable_parameter_count(g) == json_count(json, "trainable_parameters", d));
    WrnOptions o = wrn_options_for_dataset(d);
    o.widths = {4, 8, 12, 16};
    CHECK(trainable_parameter_count(build_wide_resnet(o)) ==
          json_count(json.substr(json.find("\"small\"")), "trainable_parameters", d));
  }
  // The numbers DESIGN.md quotes, independently of the JSON.
  CHECK(trainable_parameter_count(build_wide_resnet(wrn_options_for_dataset("cifar100"))) == 17175444);
  CHECK(trainable_parameter_count(build_wide_resnet(wrn_options_for_dataset("fashion-mnist"))) == 17117466);
  // Graph::parameter_count adds the BN running statistics: 2 x (16 + 2x2x(160+320+640)).
  CHECK(build_wide_resnet(wrn_options_for_dataset("cifar100")).parameter_count() == 17175444 + 2 * 4496 + 6);
}

TEST_CASE("wrn: op counts of the seed's layout") {
  Graph g = build_wide_resnet(wrn_options_for_dataset("cifar100"));
  std::map<std::string, int> want{
      {"Conv", 13 + 3}, {"BatchNormalization", 13}, {"Relu", 13},   {"Dropout", 6}, {"Add", 6},
      {"MaxPool", 2},   {"AveragePool", 1},         {"Flatten", 1}, {"Gemm", 1}};
  CHECK(op_counts(g) == want);
  CHECK(g.nodes.size() == 59);
  CHECK(g.opset("") == 17);
  CHECK(g.inputs == std::vector<std::string>{"input"});
  CHECK(g.outputs == std::vector<std::string>{"logits"});

  // Three blocks per stage: 1 + 9x2 cbr, still 3 skip convs (only the first block of a stage changes channels).
  WrnOptions o = wrn_options_for_dataset("cifar10");
  o.blocks_per_stage = 3;
  std::map<std::string, int> c = op_counts(build_wide_resnet(o));
  CHECK(c["Conv"] == 19 + 3);
  CHECK(c["Dropout"] == 9);
  CHECK(c["Add"] == 9);
  CHECK(c["MaxPool"] == 2);
}

TEST_CASE("wrn: node attributes follow model.py") {
  Graph g = build_wide_resnet(wrn_options_for_dataset("cifar100"));
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  for (const char* name : {"input_block/conv", "block1/layer1/conv", "block1/layer1/bn", "block1/dropout",
                           "block1/scale", "block1/add", "pool1", "pool2", "pool", "flat", "fc"})
    REQUIRE_MESSAGE(by_name.count(name), "no node " << name);
  const Node& conv = *by_name["block1/layer1/conv"];
  CHECK(conv.inputs.size() == 2);  // no bias
  CHECK(conv.attr_ints("pads") == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(conv.attr_ints("kernel_shape") == std::vector<int64_t>{3, 3});
  const Node& scale = *by_name["block1/scale"];
  CHECK(scale.inputs.size() == 3);  // with bias
  CHECK(scale.attr_ints("kernel_shape") == std::vector<int64_t>{1, 1});
  CHECK(!by_name.count("block2/scale"));
  const Node& bn = *by_name["block1/layer1/bn"];
  CHECK(bn.outputs.size() == 1);
  CHECK(bn.attr_float("epsilon", 0) == doctest::Approx(1e-5));
  CHECK(bn.attr_float("momentum", 0) == doctest::Approx(0.9));
  const Node& drop = *by_name["block1/dropout"];
  CHECK(g.initializers.at(drop.inputs[1]).data<float>()[0] == doctest::Approx(0.01));
  CHECK(by_name["pool"]->attr_ints("kernel_shape") == std::vector<int64_t>{7, 7});
  CHECK(by_name["pool"]->attr_ints("strides") == std::vector<int64_t>{7, 7});
  CHECK(by_name["pool1"]->attr_ints("strides") == std::vector<int64_t>{2, 2});
  CHECK(by_name["fc"]->attr_int("transB", 0) == 1);
  CHECK(by_name["fc"]->outputs[0] == "logits");
  // The skip adds the block's input (block2 has no scale conv).
  CHECK(by_name["block2/add"]->inputs[1] == by_name["block1/add"]->outputs[0]);
}

TEST_CASE("wrn: initialisation matches PyTorch's defaults in distribution and is seeded") {
  Graph g = build_wide_resnet(wrn_options_for_dataset("cifar100"));
  const Tensor& w = g.initializers.at("block3.layer1.cbr.0.weight");  // 320,160,3,3
  REQUIRE(w.dims() == std::vector<int64_t>{320, 160, 3, 3});
  const double bound = 1.0 / std::sqrt(160.0 * 9);
  double sum = 0, sq = 0, lo = 0, hi = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    double v = w.data<float>()[i];
    sum += v, sq += v * v, lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const double n = static_cast<double>(w.numel());
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(hi > 0.99 * bound);
  CHECK(std::fabs(sum / n) < 0.01 * bound);
  CHECK(sq / n == doctest::Approx(bound * bound / 3).epsilon(0.01));  // variance of U(-b, b)
  const Tensor& b = g.initializers.at("fc.bias");
  for (int64_t i = 0; i < b.numel(); ++i) CHECK(std::fabs(b.data<float>()[i]) <= 1.0 / std::sqrt(640.0));
  CHECK(g.initializers.at("block1.layer1.cbr.1.weight").data<float>()[5] == 1.f);
  CHECK(g.initializers.at("block1.layer1.cbr.1.bias").data<float>()[5] == 0.f);
  CHECK(g.initializers.at("block1.layer1.cbr.1.running_mean").data<float>()[5] == 0.f);
  CHECK(g.initializers.at("block1.layer1.cbr.1.running_var").data<float>()[5] == 1.f);

  // Same seed: same bytes; another seed: other weights.
  WrnOptions o = small_fashion();
  CHECK(export_onnx_bytes(build_wide_resnet(o)) == export_onnx_bytes(build_wide_resnet(o)));
  WrnOptions o2 = o;
  o2.seed = 1;
  CHECK(build_wide_resnet(o).initializers.at("fc.weight").data<float>()[0] !=
        build_wide_resnet(o2).initializers.at("fc.weight").data<float>()[0]);
}

TEST_CASE("wrn: bad options are one-line BadInput errors") {
  WrnOptions o;
  o.widths = {16, 160, 320};
  CHECK_THROWS_WITH_AS(build_wide_resnet(o), doctest::Contains("expected 4 widths"), Error);
  o.widths = {16, 0, 320, 640};
  CHECK_THROWS_WITH_AS(build_wide_resnet(o), doctest::Contains("positive"), Error);
  o = WrnOptions{};
  o.blocks_per_stage = 0;
  CHECK_THROWS_WITH_AS(build_wide_resnet(o), doctest::Contains("--blocks-per-stage"), Error);
  o.blocks_per_stage = 1000;  // ~1e10 parameters: refused before anything is allocated
  CHECK_THROWS_WITH_AS(build_wide_resnet(o), doctest::Contains("over the 2 GB limit"), Error);
  CHECK_THROWS_WITH_AS(wrn_options_for_dataset("mnist"), doctest::Contains("unknown dataset 'mnist'"), Error);
}

TEST_CASE("wrn: initializer names and shapes are PyTorch's state_dict (wrn_small_train.onnx)") {
  Graph torch = parse_onnx_bytes(read_text(kData + "/wrn_small_train.onnx"), "wrn_small_train.onnx", "");
  Graph ours = build_wide_resnet(small_fashion());
  std::map<std::string, std::vector<int64_t>> a, b;
  for (const auto& [name, t] : torch.initializers) a[name] = t.dims();
  for (const auto& [name, t] : ours.initializers)
    if (name.find(".dropout.ratio") == std::string::npos) b[name] = t.dims();
  CHECK(a.size() == 73);
  CHECK(a == b);
  for (const auto& [name, dims] : a)
    if (!b.count(name)) FAIL_CHECK("PyTorch has " << name << " but the builder does not");
  for (const auto& [name, dims] : b)
    if (!a.count(name)) FAIL_CHECK("the builder has " << name << " but PyTorch does not");
  CHECK(trainable_parameter_count(ours) == trainable_parameter_count(torch));
  CHECK(op_counts(ours)["Conv"] == op_counts(torch)["Conv"]);
  CHECK(op_counts(ours)["BatchNormalization"] == op_counts(torch)["BatchNormalization"]);
  CHECK(op_counts(ours)["Dropout"] == op_counts(torch)["Dropout"]);
  CHECK(op_counts(ours)["Add"] == op_counts(torch)["Add"]);
}

TEST_CASE("wrn: export -> parse -> export is byte-identical") {
  Graph g = build_wide_resnet(small_fashion());
  const std::string first = export_onnx_bytes(g);
  const std::string second = export_onnx_bytes(parse_onnx_bytes(first, "wrn.onnx", ""));
  CHECK(first.size() == second.size());
  CHECK(first == second);
}
