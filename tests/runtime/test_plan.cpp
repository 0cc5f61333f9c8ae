// The memory plan: verifier on the Wide ResNet training graph and random DAGs, the
// verifier rejecting broken plans, and results bit-identical to the naive executor
// (one zero-filled buffer per value, file order) on the reference and cpu backends,
// with the arena poisoned (NaN bytes) so a kernel reading unwritten memory shows.
#include <doctest/doctest.h>

#include <functional>
#include <random>

#include "runtime_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// A random DAG of elementwise ops over float32 values of shapes [4,6], [6] and [1,6]
// (broadcasting both ways), some values read many times, a few graph outputs.
Graph random_dag(uint64_t seed, TensorMap& feeds) {
  std::mt19937_64 rng(seed);
  Graph g;
  g.name = "dag";
  g.opsets[""] = 17;
  std::vector<std::string> vals;
  std::vector<std::vector<int64_t>> shapes{{4, 6}, {6}, {1, 6}};
  for (int i = 0; i < 3; ++i) {
    std::string name = "x" + std::to_string(i);
    auto dims = shapes[static_cast<size_t>(i)];
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{DataType::Float32, shape_of(dims)};
    feeds[name] = random_tensor(DataType::Float32, dims, seed * 10 + static_cast<uint64_t>(i));
    vals.push_back(name);
  }
  g.initializers["c"] = random_tensor(DataType::Float32, {4, 6}, seed + 99);
  g.values["c"] = ValueInfo{DataType::Float32, shape_of({4, 6})};
  vals.push_back("c");
  const char* unary[] = {"Relu", "Sigmoid", "Tanh", "Neg"};
  const char* binary[] = {"Add", "Sub", "Mul", "Div"};
  const int nodes = 20 + static_cast<int>(rng() % 20);
  for (int i = 0; i < nodes; ++i) {
    // Prefer recent values so chains form (and in-place chances), sometimes reach back.
    auto pick = [&]() -> std::string {
      size_t n = vals.size();
      size_t back = rng() % 4 == 0 ? rng() % n : rng() % std::min<size_t>(n, 4);
      return vals[n - 1 - back];
    };
    Node n;
    n.name = "n" + std::to_string(i);
    bool un = rng() % 3 == 0;
    n.op_type = un ? unary[rng() % 4] : binary[rng() % 4];
    n.inputs.push_back(pick());
    if (!un) n.inputs.push_back(pick());
    if (n.op_type == "Div") {  // keep denominators away from 0: 2 + sigmoid(.)
      Node sg;
      sg.name = n.name + "_den";
      sg.op_type = "Sigmoid";
      sg.inputs = {n.inputs[1]};
      sg.outputs = {n.name + "_s"};
      g.nodes.push_back(sg);
      Node add2;
      add2.name = n.name + "_two";
      add2.op_type = "Add";
      add2.inputs = {n.name + "_s", "two"};
      add2.outputs = {n.name + "_d"};
      g.nodes.push_back(add2);
      n.inputs[1] = n.name + "_d";
    }
    n.outputs = {"v" + std::to_string(i)};
    vals.push_back(n.outputs[0]);
    g.nodes.push_back(n);
  }
  g.initializers["two"] = make(DataType::Float32, {1}, {2.0});
  g.values["two"] = ValueInfo{DataType::Float32, shape_of({1})};
  g.outputs = {vals.back(), vals[vals.size() / 2]};
  validate_graph(g, registry().schemas, "dag");
  infer_shapes(g, registry().schemas, "dag");
  return g;
}

// Runs `g` on `feeds` with the Executor (arena poisoned, so a read of unwritten bytes
// shows), set up by `configure`, on the reference and cpu backends, and checks every result
// bit for bit against the naive executor's (`want`, which `after` may check more against).
void expect_naive_results(const Graph& g, const TensorMap& feeds, const RunOptions& ro,
                          const std::function<void(Executor&)>& configure,
                          const std::function<void(const Executor&, const Backend&, const TensorMap&)>& after) {
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    auto b = make_backend(backend);
    TensorMap want = naive_run(g, feeds, *b, false, 0);
    ExecutorOptions eo;
    eo.poison_arena = true;
    Executor ex(g, *b, eo);
    configure(ex);
    const TensorMap& got = ex.run(feeds, ro);
    for (const auto& [name, t] : got) {
      CAPTURE(name);
      CHECK(bitwise_equal(t, want.at(name)));
    }
    after(ex, *b, want);
  }
}

}  // namespace

TEST_CASE("plan of the Wide ResNet training graph: verified, smaller than naive, outputs bit-identical") {
  Graph g = small_wrn();
  TrainingGraph t = wrn_training(g);
  TensorMap feeds = wrn_batch(4, 7);
  Tensor lr(DataType::Float32, {});
  lr.data<float>()[0] = 0.05f;
  feeds[t.lr] = lr;
  Graph s = specialize(t.graph, feeds);
  PlanOptions o;
  o.keep = s.outputs;
  Plan p = build_plan(s, o);
  verify_plan(p);
  CHECK(p.arena_bytes < p.naive_bytes / 2);
  CHECK(p.in_place_count > 0);
  // The residual Adds' gradients (SumToShape copies): one of each pair written over its dY.
  size_t copies_in_place = 0;
  for (const PlanStep& st : p.steps)
    if (p.graph.nodes[st.node].op_type == "SumToShape" && p.values[static_cast<size_t>(st.outputs[0])].alias >= 0)
      ++copies_in_place;
  CHECK(copies_in_place > 0);
  CHECK(p.peak_live_bytes <= p.arena_bytes);
  CHECK(p.arena_bytes <= p.file_order_bytes);  // the chosen order is never worse than the file's
  MESSAGE("order " << p.order << ": arena " << p.arena_bytes << " B, naive " << p.naive_bytes << " B, in place "
                   << p.in_place_count);
  PlanOptions naive = o;
  naive.reuse = naive.reorder = naive.in_place = false;
  Plan n = build_plan(s, naive);
  verify_plan(n);
  CHECK(n.arena_bytes == n.naive_bytes);
  CHECK(p.naive_bytes == n.naive_bytes);
  // The session's plan: updates in place, state written after everything else.
  Plan sp = build_plan(s, training_plan_options(t));
  verify_plan(sp);
  CHECK(sp.first_state_write > 0);
  for (size_t i = static_cast<size_t>(sp.first_state_write); i < sp.steps.size(); ++i) CHECK(sp.steps[i].writes_state);
  CHECK(sp.value(t.updates.front().first).storage == Storage::State);

  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    auto b = make_backend(backend);
    TensorMap want = naive_run(t.graph, feeds, *b, true, 11);
    ExecutorOptions eo;
    eo.poison_arena = true;
    eo.blocked_layouts = false;  // the plan alone: oneDNN's batch normalization sums in
                                 // another order on blocked data (tests/runtime/test_layouts.cpp)
    Executor ex(t.graph, *b, eo);
    RunOptions ro;
    ro.training = true;
    ro.seed = 11;
    const TensorMap& got = ex.run(feeds, ro);
    for (const std::string& out : t.graph.outputs) {
      CAPTURE(out);
      CHECK(bitwise_equal(got.at(out), want.at(out)));
    }
  }
}

TEST_CASE("TrainingSession with the plan matches naive steps bit for bit (SGD momentum and Adam, 3 steps)") {
  Graph g = small_wrn({3, 5, 6, 7});
  for (const char* optimizer : {"sgd", "adam"}) {
    for (const char* backend : {"reference", "cpu"}) {
      CAPTURE(optimizer);
      CAPTURE(backend);
      TrainingGraph t = wrn_training(g, optimizer);
      TrainingSession s(t, make_backend(backend), {.seed = 5});
      TrainingGraph naive_t = s.training();  // the fused graph the session runs
      for (auto& [name, x] : naive_t.graph.initializers) x = x.clone();
      auto b = make_backend(backend);
      for (int step = 0; step < 3; ++step) {
        TensorMap batch = wrn_batch(3, 20 + static_cast<uint64_t>(step));
        double loss = s.step(batch, 0.01f);
        TensorMap feeds = batch;
        Tensor lr(DataType::Float32, {});
        lr.data<float>()[0] = 0.01f;
        feeds[t.lr] = lr;
        TensorMap want =
            naive_run(naive_t.graph, feeds, *b, true, 5 * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(step));
        for (const auto& [produced, state] : naive_t.updates) naive_t.graph.initializers[state] = want.at(produced);
        CHECK(loss == want.at(t.loss).get_as_double(0));
      }
      for (const std::string& name : s.state_names()) {
        CAPTURE(name);
        CHECK(bitwise_equal(s.state(name), naive_t.graph.initializers.at(name)));
      }
      CHECK(s.steps_done() == 3);
    }
  }
}

TEST_CASE("random DAGs: plans verify and runs equal the naive executor bit for bit") {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    CAPTURE(seed);
    TensorMap feeds;
    Graph g = random_dag(seed, feeds);
    Graph s = specialize(g, feeds);
    PlanOptions o;
    o.keep = s.outputs;
    Plan p = build_plan(s, o);
    verify_plan(p);
    CHECK(p.arena_bytes <= p.naive_bytes);
    RunOptions ro;
    ro.extra_outputs = {g.nodes[g.nodes.size() / 3].outputs[0]};
    expect_naive_results(
        g, feeds, ro, [](Executor&) {},
        [&](const Executor&, const Backend& b, const TensorMap& want) {
          TensorMap once = run_graph(g, feeds, b);
          for (const std::string& out : g.outputs) CHECK(bitwise_equal(once.at(out), want.at(out)));
        });
  }
}

TEST_CASE("verify_plan rejects overlapping live values, misalignment, overflow and a too-early in-place write") {
  TensorMap feeds;
  Graph g = random_dag(3, feeds);
  PlanOptions o;
  o.keep = g.outputs;
  Plan good = build_plan(specialize(g, feeds), o);
  verify_plan(good);
  // Two arena values live at the same step, moved onto the same bytes.
  int a = -1, b = -1;
  for (size_t v = 0; v < good.values.size() && b < 0; ++v)
    for (size_t w = 0; w < v && b < 0; ++w) {
      const PlannedValue &x = good.values[v], &y = good.values[w];
      if (x.storage == Storage::Arena && y.storage == Storage::Arena && x.alias < 0 && y.alias < 0 && x.def <= y.last &&
          y.def <= x.last && x.offset != y.offset)
        a = static_cast<int>(v), b = static_cast<int>(w);
    }
  REQUIRE(b >= 0);
  Plan bad = good;
  bad.values[static_cast<size_t>(a)].offset = bad.values[static_cast<size_t>(b)].offset;
  CHECK(error_of([&] { verify_plan(bad); }).find("share arena bytes") != std::string::npos);
  bad = good;
  bad.values[static_cast<size_t>(a)].offset += 4;
  CHECK(error_of([&] { verify_plan(bad); }).find("aligned") != std::string::npos);
  bad = good;
  bad.arena_bytes = 64;
  CHECK(error_of([&] { verify_plan(bad); }).find("does not fit") != std::string::npos);
  bad = good;
  std::swap(bad.steps.front(), bad.steps.back());
  CHECK(!error_of([&] { verify_plan(bad); }).empty());
}

TEST_CASE("contiguous groups: members back to back, never in place, verified; runs equal the naive executor") {
  // Groups as the data-parallel buckets ask for them (PlanOptions::contiguous): every
  // fifth node's output, three to a group, in reverse name order, the first with a tail.
  auto groups = [](const Plan& p) {
    std::vector<std::string> pick;
    for (int i = 0; p.index.count("v" + std::to_string(i)); ++i)
      if (i % 5 == 1) pick.insert(pick.begin(), "v" + std::to_string(i));
    std::vector<ContiguousGroup> out;
    for (size_t k = 0; k < pick.size(); ++k) {
      if (k % 3 == 0) out.push_back({{}, out.empty() ? size_t{256} : size_t{0}});
      out.back().values.push_back(pick[k]);
    }
    return out;
  };
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    TensorMap feeds;
    Graph g = random_dag(seed, feeds);
    PlanOptions o;
    o.keep = g.outputs;
    o.contiguous = groups;
    const Plan p = build_plan(specialize(g, feeds), o);
    verify_plan(p);
    const std::vector<ContiguousGroup> asked = groups(p);
    REQUIRE(p.groups.size() == asked.size());
    for (size_t k = 0; k < p.groups.size(); ++k) {
      const PlannedGroup& pg = p.groups[k];
      size_t at = pg.offset;
      REQUIRE(pg.values.size() == asked[k].values.size());
      for (size_t i = 0; i < pg.values.size(); ++i) {
        const PlannedValue& pv = p.values[static_cast<size_t>(pg.values[i])];
        CHECK(pv.name == asked[k].values[i]);
        CHECK(pv.offset == at);
        CHECK(pv.alias < 0);
        CHECK(pv.last == static_cast<int>(p.steps.size()));
        for (const PlannedValue& other : p.values) CHECK(other.alias != pg.values[i]);
        at += align_up(pv.bytes);
      }
      CHECK(pg.tail_offset == at);
      CHECK(pg.bytes == at - pg.offset + (k == 0 ? 256 : 0));
    }
    // The verifier: a value of its own inside the first group's tail while it lives, a member
    // moved out of its place.
    int stranger = -1;
    for (size_t v = 0; v < p.values.size() && stranger < 0; ++v) {
      const PlannedValue& pv = p.values[v];
      bool member = false;
      for (const PlannedGroup& pg : p.groups)
        member = member || std::find(pg.values.begin(), pg.values.end(), static_cast<int>(v)) != pg.values.end();
      bool aliased = false;  // moving a value that another is written over would break that first
      for (const PlannedValue& other : p.values) aliased = aliased || other.alias == static_cast<int>(v);
      if (!member && !aliased && pv.storage == Storage::Arena && pv.alias < 0 && pv.def >= p.groups[0].def &&
          pv.bytes <= 256)
        stranger = static_cast<int>(v);
    }
    REQUIRE(stranger >= 0);
    Plan bad = p;
    bad.values[static_cast<size_t>(stranger)].offset = p.groups[0].tail_offset;
    CHECK(error_of([&] { verify_plan(bad); }).find("uses its bytes while it lives") != std::string::npos);
    bad = p;
    bad.groups[0].offset += kPlanAlignment;
    CHECK(error_of([&] { verify_plan(bad); }).find("not in its place") != std::string::npos);
    // Runs: bit for bit the naive executor's results, with the groups set on the executor.
    expect_naive_results(
        g, feeds, {}, [&](Executor& ex) { ex.set_contiguous(groups); },
        [&](const Executor& ex, const Backend&, const TensorMap&) { CHECK(ex.plan().groups.size() == asked.size()); });
  }
}

TEST_CASE("SumToShape: a copy (nothing broadcast) is planned over its dY, a reduction is not; runs equal naive") {
  // a = Relu(x); s = SumToShape(a, x) (dims agree: a copy, a's last use) and
  // r = SumToShape(Neg(x), b) (reduced to [6]); the outputs read s and r.
  Graph g;
  g.name = "sum_to_shape";
  g.opsets[""] = 17;
  g.opsets[kTrainrtDomain] = 1;
  g.inputs = {"x", "b"};
  g.values["x"] = ValueInfo{DataType::Float32, shape_of({4, 6})};
  g.values["b"] = ValueInfo{DataType::Float32, shape_of({6})};
  auto add = [&](const char* op, const char* domain, std::vector<std::string> in, const char* out) {
    g.nodes.push_back(make_node(op, std::move(in), {out}, {}, domain));
    g.nodes.back().name = std::string("n_") + out;  // make_node names by op type: two SumToShape
  };
  add("Relu", "", {"x"}, "a");
  add("SumToShape", kTrainrtDomain, {"a", "x"}, "s");
  add("Neg", "", {"x"}, "m");
  add("SumToShape", kTrainrtDomain, {"m", "b"}, "r");
  add("Tanh", "", {"s"}, "y");
  add("Sigmoid", "", {"r"}, "z");
  g.outputs = {"y", "z"};
  validate_graph(g, registry().schemas, "sum_to_shape");
  infer_shapes(g, registry().schemas, "sum_to_shape");
  TensorMap feeds{{"x", random_tensor(DataType::Float32, {4, 6}, 3)}, {"b", random_tensor(DataType::Float32, {6}, 4)}};
  PlanOptions o;
  o.keep = g.outputs;
  const Plan p = build_plan(specialize(g, feeds), o);
  verify_plan(p);
  CHECK(p.value("s").alias == p.index.at("a"));
  CHECK(p.value("r").alias < 0);
  // Without the rule the copy gets bytes of its own: the naive plan's (in_place off) layout.
  PlanOptions off = o;
  off.in_place = false;
  CHECK(build_plan(specialize(g, feeds), off).value("s").alias < 0);
  expect_naive_results(
      g, feeds, {}, [](Executor&) {},
      [](const Executor& ex, const Backend&, const TensorMap&) {
        CHECK(ex.plan().value("s").alias == ex.plan().index.at("a"));
      });
}

TEST_CASE("Executor: the second run with the same shapes reuses the plan and the arena") {
  Graph g = small_wrn({2, 3, 4, 5});
  auto b = make_backend("cpu");
  Executor ex(g, *b);
  TensorMap feeds{{"input", random_tensor(DataType::Float32, {2, 1, 28, 28}, 1)}};
  const std::byte* first = ex.run(feeds).at("logits").raw();
  Tensor keep = ex.run(feeds).at("logits").clone();
  CHECK(ex.plans_built() == 1);
  CHECK(ex.run(feeds).at("logits").raw() == first);
  TensorMap other{{"input", random_tensor(DataType::Float32, {3, 1, 28, 28}, 1)}};
  CHECK(ex.run(other).at("logits").dims() == std::vector<int64_t>{3, 10});
  CHECK(ex.plans_built() == 2);
  CHECK(bitwise_equal(ex.run(feeds).at("logits"), keep));
  CHECK(ex.plans_built() == 2);
  CHECK(bitwise_equal(keep, run_graph(g, feeds, *b).at("logits")));
}
