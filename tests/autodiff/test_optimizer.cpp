// Optimizer ops against torch.optim (golden data: tools/golden_optimizers.py).
// Parameters are float64 so the comparison is limited only by lr being a float32
// input (relative error ~1e-8); tolerance 1e-7.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "golden_files.h"
#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

struct Case {
  std::string optimizer;
  std::map<std::string, double> opts;
  std::vector<double> param;
  std::vector<std::vector<double>> grads, after;
};

std::vector<Case> load_cases() {
  std::ifstream in(golden_file(std::string(TRAINRT_TEST_DATA) + "/optimizers.txt"));
  REQUIRE(in);
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "case") {
      cases.emplace_back();
      ls >> cases.back().optimizer;
      std::string kv;
      while (ls >> kv) cases.back().opts[kv.substr(0, kv.find('='))] = std::stod(kv.substr(kv.find('=') + 1));
      continue;
    }
    std::vector<double> v;
    for (double x; ls >> x;) v.push_back(x);
    if (kind == "param") cases.back().param = v;
    if (kind == "grad") cases.back().grads.push_back(v);
    if (kind == "after") cases.back().after.push_back(v);
  }
  return cases;
}

Tensor vec(const std::vector<double>& v) {
  Tensor t(DataType::Float64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<double>()[i] = v[i];
  return t;
}

double opt(const Case& c, const std::string& k, double fallback) {
  auto it = c.opts.find(k);
  return it == c.opts.end() ? fallback : it->second;
}

}  // namespace

TEST_CASE("SGD and Adam/AdamW match torch.optim over three steps") {
  std::vector<Case> cases = load_cases();
  REQUIRE(cases.size() == 7);
  for (const Case& c : cases) {
    CAPTURE(c.optimizer);
    CAPTURE(c.opts.size());
    const int64_t n = static_cast<int64_t>(c.param.size());
    Tensor p = vec(c.param), buf(DataType::Float64, {n}), m(DataType::Float64, {n}), v(DataType::Float64, {n});
    Tensor lr(DataType::Float32, {});
    lr.data<float>()[0] = static_cast<float>(opt(c, "lr", 0));
    for (size_t step = 0; step < c.grads.size(); ++step) {
      Tensor s(DataType::Int64, {});
      s.data<int64_t>()[0] = static_cast<int64_t>(step);
      TensorMap feeds{{"p", p}, {"g", vec(c.grads[step])}, {"lr", lr}, {"step", s}};
      TensorMap out;
      if (c.optimizer == "sgd") {
        const double momentum = opt(c, "momentum", 0);
        std::map<std::string, Attribute> attrs{
            {"momentum", Attribute::of_float(static_cast<float>(momentum))},
            {"dampening", Attribute::of_float(static_cast<float>(opt(c, "dampening", 0)))},
            {"nesterov", Attribute::of_int(opt(c, "nesterov", 0) != 0)},
            {"weight_decay", Attribute::of_float(static_cast<float>(opt(c, "weight_decay", 0)))}};
        std::vector<std::string> ins{"p", "g", "lr", "step"}, outs{"p2"};
        if (momentum != 0) {
          ins.push_back("buf");
          outs.push_back("buf2");
          feeds["buf"] = buf;
        }
        out = run_node(make_node("SGD", ins, outs, attrs, kTrainrtDomain), feeds, "reference");
        if (momentum != 0) buf = out.at("buf2");
      } else {
        std::map<std::string, Attribute> attrs{
            {"beta1", Attribute::of_float(static_cast<float>(opt(c, "beta1", 0.9)))},
            {"beta2", Attribute::of_float(static_cast<float>(opt(c, "beta2", 0.999)))},
            {"epsilon", Attribute::of_float(static_cast<float>(opt(c, "epsilon", 1e-8)))},
            {"weight_decay", Attribute::of_float(static_cast<float>(opt(c, "weight_decay", 0)))},
            {"decoupled_weight_decay", Attribute::of_int(c.optimizer == "adamw")}};
        feeds["m"] = m;
        feeds["v"] = v;
        out = run_node(make_node("Adam", {"p", "g", "lr", "step", "m", "v"}, {"p2", "m2", "v2"}, attrs, kTrainrtDomain),
                       feeds, "reference");
        m = out.at("m2");
        v = out.at("v2");
      }
      p = out.at("p2");
      CHECK(max_abs_diff(p, vec(c.after[step])) < 1e-7);
    }
  }
}

TEST_CASE("optimizer ops reject mismatched state") {
  Tensor lr(DataType::Float32, {}), s(DataType::Int64, {});
  TensorMap feeds{
      {"p", Tensor(DataType::Float32, {3})}, {"g", Tensor(DataType::Float32, {4})}, {"lr", lr}, {"step", s}};
  CHECK_THROWS_WITH_AS(
      run_node(make_node("SGD", {"p", "g", "lr", "step"}, {"p2"}, {}, kTrainrtDomain), feeds, "reference"),
      doctest::Contains("must match input 0"), trainrt::Error);
  feeds["g"] = Tensor(DataType::Float32, {3});
  feeds["lr"] = Tensor(DataType::Float32, {1});
  CHECK_THROWS_WITH_AS(
      run_node(make_node("SGD", {"p", "g", "lr", "step"}, {"p2"}, {}, kTrainrtDomain), feeds, "reference"),
      doctest::Contains("float32 scalar"), trainrt::Error);
}
