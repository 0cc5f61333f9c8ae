// Executor features around the plan: profiling events and the Chrome trace,
// NaN/Inf checks that stop a step before state is written, and the memory refusal.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// x [N,4] -> Gemm(w, transB) [N,3] -> Div by the input `scale` [1] -> logits; loss appended.
Graph scaled_classifier() {
  Graph g;
  g.name = "scaled";
  g.opsets[""] = 17;
  g.inputs = {"x", "scale"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(4)}};
  g.values["scale"] = ValueInfo{DataType::Float32, shape_of({1})};
  g.initializers["w"] = random_tensor(DataType::Float32, {3, 4}, 3);
  g.values["w"] = ValueInfo{DataType::Float32, shape_of({3, 4})};
  g.initializers["b"] = random_tensor(DataType::Float32, {3}, 4);
  g.values["b"] = ValueInfo{DataType::Float32, shape_of({3})};
  Node gemm = make_node("Gemm", {"x", "w", "b"}, {"h"}, {{"transB", Attribute::of_int(1)}});
  gemm.name = "fc";
  Node div = make_node("Div", {"h", "scale"}, {"logits"});
  div.name = "scale_logits";
  g.nodes = {gemm, div};
  g.outputs = {"logits"};
  validate_graph(g, registry().schemas, "scaled");
  infer_shapes(g, registry().schemas, "scaled");
  return g;
}

TensorMap scaled_batch(float scale) {
  return {{"x", random_tensor(DataType::Float32, {5, 4}, 9)},
          {"scale", make(DataType::Float32, {1}, {scale})},
          {"labels", make(DataType::Int64, {5}, {0, 1, 2, 1, 0})}};
}

}  // namespace

TEST_CASE("profile: one event per node run, a Chrome trace that parses back, a per-op table") {
  Graph g = small_wrn({2, 3, 4, 5});
  auto b = make_backend("cpu");
  ProfileCollector prof;
  RunOptions ro;
  ro.profile = &prof;
  run_graph(g, {{"input", random_tensor(DataType::Float32, {2, 1, 28, 28}, 1)}}, *b, ro);
  REQUIRE(prof.events.size() == g.nodes.size());
  std::set<std::string> names;
  for (const NodeEvent& e : prof.events) {
    CHECK(e.end_ns >= e.start_ns);
    names.insert(e.name);
  }
  CHECK(names.size() == g.nodes.size());
  const NodeEvent& conv =
      *std::find_if(prof.events.begin(), prof.events.end(), [](const NodeEvent& e) { return e.op == "Conv"; });
  CHECK(conv.flops > 0);
  CHECK(conv.input_shapes.at(0) == std::vector<int64_t>{2, 1, 28, 28});

  const std::string path = (std::filesystem::temp_directory_path() / "trainrt_test_trace.json").string();
  TraceLane data{"data loading", {{"batch 0", prof.events.front().start_ns - 1000, prof.events.front().start_ns}}};
  write_chrome_trace(path, prof.events, {data});
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string json = ss.str();
  std::filesystem::remove(path);
  CHECK(json.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0) == 0);
  CHECK(count_of(json, "\"ph\":\"X\"") == g.nodes.size() + 1);
  CHECK(count_of(json, "\"tid\":2") == 2);  // the lane's name and its slice
  for (const Node& n : g.nodes) CHECK(json.find("\"name\":\"" + n.name + "\"") != std::string::npos);
  // Minimal structural parse: balanced brackets outside strings.
  int depth = 0;
  bool in_string = false, ok = true;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      ++depth;
    else if (c == '}' || c == ']')
      ok = ok && --depth >= 0;
  }
  CHECK((ok && depth == 0 && !in_string));

  const std::string table = profile_table(prof.events);
  CHECK(table.find("Conv") != std::string::npos);
  CHECK(table.find("BatchNormalization") != std::string::npos);
  CHECK(table.find("total") != std::string::npos);
  // Rows are sorted by time: the first data row is the op with the largest total.
  std::map<std::string, int64_t> by_op;
  for (const NodeEvent& e : prof.events) by_op[e.op] += e.end_ns - e.start_ns;
  auto top = std::max_element(by_op.begin(), by_op.end(), [](auto& a, auto& c) { return a.second < c.second; });
  CHECK(table.substr(table.find('\n') + 1, top->first.size()) == top->first);
}

// The value of the row's column `col` (0: the op) in profile_table's text; "" if absent.
std::string table_cell(const std::string& table, const std::string& op, size_t col) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    std::vector<std::string> row;
    for (std::string c; cells >> c;) row.push_back(c);
    if (!row.empty() && row[0] == op) return col < row.size() ? row[col] : "";
  }
  return "";
}

TEST_CASE("profile bytes: each input buffer once, outputs as stored; the table's GB/s and share of the copy") {
  const Tensor x = random_tensor(DataType::Float32, {4, 8}, 1), y = random_tensor(DataType::Float32, {4, 8}, 2);
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    // The bytes of the one event of a one-node graph's run.
    auto bytes_of = [&](const Node& n, const TensorMap& feeds) {
      ProfileCollector prof;
      RunOptions ro;
      ro.profile = &prof;
      run_node(n, feeds, backend, {}, ro);
      REQUIRE(prof.events.size() == 1);
      return prof.events[0].bytes;
    };
    CHECK(bytes_of(make_node("Add", {"x", "y"}, {"a"}), {{"x", x}, {"y", y}}) == 3 * 128);  // 32 floats each
    CHECK(bytes_of(make_node("Mul", {"x", "x"}, {"m"}), {{"x", x}}) == 2 * 128);  // x read once for both operands
    CHECK(bytes_of(make_node("Cast", {"x"}, {"h"}, {{"to", Attribute::of_int(10)}}), {{"x", x}}) ==
          128 + 64);  // h written in 16 bits (float16)
  }

  // GB/s is bytes per nanosecond; "% copy" that rate against the copy's.
  std::vector<NodeEvent> events(3);
  events[0].op = events[1].op = "Relu";
  events[0].bytes = 3e9, events[0].end_ns = 1'000'000'000;
  events[1].bytes = 1e9, events[1].end_ns = 1'000'000'000;                         // 4e9 bytes in 2 s: 2 GB/s
  events[2].op = "Conv", events[2].flops = 6e9, events[2].end_ns = 3'000'000'000;  // no bytes: no rate
  const std::string plain = profile_table(events), shared = profile_table(events, 8.0);
  CHECK(table_cell(plain, "Relu", 5) == "2.0");
  CHECK(table_cell(plain, "Relu", 6).empty());  // no copy rate given: no share column
  CHECK(plain.find("% copy") == std::string::npos);
  CHECK(table_cell(shared, "Relu", 5) == "2.0");
  CHECK(table_cell(shared, "Relu", 6) == "25%");
  CHECK(table_cell(shared, "Conv", 4) == "2.0");  // GFLOP/s
  CHECK(table_cell(shared, "Conv", 5) == "-");
  CHECK(table_cell(shared, "Conv", 6).empty());
}

TEST_CASE("the cpu backend's copy: every byte at any length and offset, on all threads; its speed measured") {
  auto b = make_backend("cpu");
  const size_t big = (size_t{4} << 20) + 13;  // past one task's chunk (parallel_copy), not a multiple of it
  std::vector<unsigned char> from(big + 7), to(big + 7);
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t n : {size_t{0}, size_t{1}, size_t{65535}, size_t{65536}, size_t{65537}, big}) {
    CAPTURE(n);
    std::fill(to.begin(), to.end(), 0);
    b->copy(to.data() + 3, from.data() + 5, n);
    CHECK(std::equal(to.begin() + 3, to.begin() + 3 + static_cast<std::ptrdiff_t>(n), from.begin() + 5));
    CHECK(
        std::all_of(to.begin() + 3 + static_cast<std::ptrdiff_t>(n), to.end(), [](unsigned char c) { return c == 0; }));
    CHECK(std::all_of(to.begin(), to.begin() + 3, [](unsigned char c) { return c == 0; }));
  }
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const double gbps = copy_bandwidth_gbps(*make_backend(backend), size_t{8} << 20, 2);
    CHECK(gbps > 0.01);  // 16 MiB moved per copy: any working machine copies it within minutes
    CHECK(std::isfinite(gbps));
  }
  CHECK_THROWS_AS(copy_bandwidth_gbps(*b, 0, 1), Error);
}

TEST_CASE("numerical faults: a NaN loss stops the step before state changes; find_anomaly names the first node") {
  Graph g = scaled_classifier();
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  TrainingSession s(build_training_graph(g, o), make_backend("reference"), {.seed = 1});
  s.step(scaled_batch(2.f), 0.1f);  // a finite step first: momentum buffers exist
  std::map<std::string, Tensor> before;
  for (const std::string& name : s.state_names()) before[name] = s.state(name).clone();
  ErrorKind kind{};
  std::string msg;
  try {
    s.step(scaled_batch(0.f), 0.1f);  // h / 0: Inf logits, NaN loss
  } catch (const NumericalError& e) {
    msg = e.what();
    kind = e.kind();
    CHECK(e.value == s.training().loss);
  }
  CHECK(kind == ErrorKind::BadInput);
  CHECK(msg.find("'" + s.training().loss + "'") != std::string::npos);
  CHECK(msg.find("NaN") != std::string::npos);
  CHECK(s.steps_done() == 1);
  for (const auto& [name, t] : before) {
    CAPTURE(name);
    CHECK(bitwise_equal(s.state(name), t));
  }
  std::optional<NumericalError> first = s.find_anomaly(scaled_batch(0.f), 0.1f);
  REQUIRE(first);
  CHECK(first->node == "scale_logits");
  CHECK(first->op == "Div");
  CHECK(first->value == "logits");
  CHECK(std::string(first->what()).find("'scale_logits' (Div)") != std::string::npos);
  for (const auto& [name, t] : before) CHECK(bitwise_equal(s.state(name), t));
  CHECK(!s.find_anomaly(scaled_batch(2.f), 0.1f));
  for (const auto& [name, t] : before) CHECK(bitwise_equal(s.state(name), t));
  // With the checks off the bad step runs and writes NaN into the parameters.
  s.set_check_finite(false);
  s.step(scaled_batch(0.f), 0.1f);
  CHECK(std::isnan(s.state("w").get_as_double(0)));
}

TEST_CASE("check_finite on run_graph names the value; detect_anomaly the first node") {
  Graph g = scaled_classifier();
  auto b = make_backend("cpu");
  TensorMap feeds = scaled_batch(0.f);
  feeds.erase("labels");
  RunOptions ro;
  ro.check_finite = {"h"};
  CHECK_NOTHROW(run_graph(g, feeds, *b, ro));  // h is finite
  ro.check_finite = {"logits"};
  CHECK(error_of([&] { run_graph(g, feeds, *b, ro); }).find("output 'logits' has Inf") != std::string::npos);
  ro.check_finite = {"nope"};
  CHECK(error_of([&] { run_graph(g, feeds, *b, ro); }).find("'nope'") != std::string::npos);
}

TEST_CASE("memory refusal: a plan larger than the limit is refused before allocating, state unchanged") {
  Graph g = small_wrn({2, 3, 4, 5});
  TrainingSession s(wrn_training(g), make_backend("cpu"));
  s.set_memory_limit(4096);
  const Tensor w0 = s.state("fc.weight").clone();
  ErrorKind kind{};
  std::string msg = error_of([&] { s.step(wrn_batch(2, 1), 0.1f); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(msg.find("needs ") != std::string::npos);
  CHECK(msg.find("GiB, ") != std::string::npos);
  CHECK(msg.find("GiB available") != std::string::npos);
  CHECK(bitwise_equal(s.state("fc.weight"), w0));
  CHECK(s.steps_done() == 0);
  s.set_memory_limit(0);  // MemAvailable: a small model fits
  CHECK_NOTHROW(s.step(wrn_batch(2, 1), 0.1f));
  CHECK(available_memory_bytes() > 0);
}
