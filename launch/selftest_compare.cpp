// The comparison of `trainrt selftest` (launch/selftest_compare.h).
#include "launch/selftest_compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "graph/infer.h"
#include "ops/core/register_all.h"
#include "ops/core/rounded_outputs.h"
#include "runtime/executor.h"

namespace trainrt {

double selftest_default_tolerance(MathPrecision math, bool tf32) {
  const double summation_order = 1e-4;  // fp32 kernels against the reference's double sums
  switch (math) {
    case MathPrecision::bf16:
      return std::max(std::ldexp(1.0, -8) / 8, summation_order);
    case MathPrecision::fp16:
      return std::max(std::ldexp(1.0, -11) / 8, summation_order);
    default:
      return tf32 ? 10 * std::ldexp(1.0, -11) : summation_order;
  }
}

namespace {

// The distance between neighbouring 16-bit numbers of precision `m` at magnitude |v|.
double spacing_16(double v, MathPrecision m) {
  if (m == MathPrecision::fp32 || v == 0) return m == MathPrecision::fp16 ? std::ldexp(1.0, -24) : 0;
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  if (m == MathPrecision::bf16) return std::ldexp(1.0, e - 1 - 7);
  return std::ldexp(1.0, std::max(e - 1, -14) - 10);  // half: 10 fraction bits, subnormals below 2^-14
}

}  // namespace

SelftestDifference selftest_difference(const Tensor& got, const Tensor& want, MathPrecision rounded,
                                       const Tensor* residual) {
  const Tensor a = to_plain(got), b = to_plain(want);
  const Tensor z = residual ? to_plain(*residual) : Tensor();
  if (residual && z.dims() != a.dims()) return {INFINITY, 0};
  if (a.dims() != b.dims()) return {INFINITY, 0};
  SelftestDifference d;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.get_as_double(i), y = b.get_as_double(i);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (!(x == y || (std::isnan(x) && std::isnan(y)))) d.diff = INFINITY;
      continue;
    }
    const double r = residual ? z.get_as_double(i) : 0;  // added after the rounding: the step is that of x - r
    const double step =
        rounded == MathPrecision::fp32 ? 0 : spacing_16(std::max(std::fabs(x - r), std::fabs(y - r)), rounded);
    d.diff = std::max(d.diff, std::max(std::fabs(x - y) - step, 0.0));
    d.scale = std::max(d.scale, std::fabs(y));
  }
  return d;
}

namespace {

std::string describe(const Node& n) { return "node '" + n.name + "' (" + n.op_type + ")"; }

// `feeds` with every float input that `n` does not round (math_rounded_inputs) moved by
// a relative 2^-18..2^-17 (32..64 fp32 last places) of random sign and size per element,
// reproducibly for one `seed`.
TensorMap wiggled(const Node& n, const TensorMap& feeds, MathPrecision math, uint64_t seed) {
  std::vector<size_t> rounded;
  if (math != MathPrecision::fp32) rounded = math_rounded_inputs(n, std::vector<bool>(n.outputs.size(), true));
  TensorMap out = feeds;
  uint64_t state = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty() || std::find(rounded.begin(), rounded.end(), i) != rounded.end()) continue;
    Tensor& t = out.at(n.inputs[i]);
    if (t.dtype() != DataType::Float32 && t.dtype() != DataType::Float64) continue;
    t = to_plain(t).clone();
    for (int64_t k = 0; k < t.numel(); ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const double size = 0x1p-18 * (1.0 + static_cast<double>(state >> 43) * 0x1p-21);  // [2^-18, 2^-17)
      t.set_from_double(k, t.get_as_double(k) * (1.0 + ((state >> 42) & 1 ? size : -size)));
    }
  }
  return out;
}

// The node the replay reruns for `n` when the device's run seed is not known. A training
// BatchNormalizationReluDropout draws its Dropout's mask from the run's seed, as the
// Dropout did (passes/fuse_dropout.cpp): it reruns as its BatchNormalizationRelu, whose
// statistics outputs are compared, and its Z (output 0, renamed so nothing compares it)
// passes on as the device made it, as a Dropout's output does.
Node replayed(const Node& n, bool training) {
  if (!training || n.op_type != "BatchNormalizationReluDropout") return n;
  Node r = n;
  r.op_type = "BatchNormalizationRelu";
  r.inputs.resize(std::min<size_t>(5, r.inputs.size()));
  r.attrs.erase("dropout_node");
  r.attrs.erase("seed");
  r.outputs[0] += "#before_dropout";
  return r;
}

}  // namespace

// Node by node on the device's own inputs: each node of `g` runs alone on the reference
// backend, in `math`, on the values the device's run gave its inputs (`got`, else
// `given`: feeds, initializers, state before the step), and its outputs are compared with
// the device's. With the device's run seed, the graph of one node runs under the seed that
// gives it the node's own (seed_placing), so Dropout redraws the device's masks. Under
// bf16/fp16 whole runs drift apart faster still: a difference in an fp32 value's last
// place moves it across a bf16/half rounding boundary now and then, and what that changes
// grows layer by layer (a ReLU mask flips). Dropout in training
// draws from the node's seed: without the run seed it is not rerun, and its outputs pass
// on as the device made them (a BatchNormalizationReluDropout reruns as its
// BatchNormalizationRelu: replayed, above).
//
// A value over `tol` may still agree: a sum whose terms cancel (the bias gradient of a
// batch norm that another batch norm follows is 0 up to rounding) carries the rounding
// of its terms, not of its result. The node then reruns twice on inputs moved by up to
// 64 fp32 last places (wiggled; never the inputs it rounds to bf16/fp16, whose rounding
// is what the comparison checks), and a difference within tol of the scale plus the
// larger change those moves made is agreement, counted in `worst.sensitive`.
std::string selftest_replay(const Graph& g, const TensorMap& given, const TensorMap& got, MathPrecision math,
                            bool training, double tol, SelftestWorst& worst, std::optional<uint64_t> run_seed) {
  const std::unique_ptr<Backend> reference = make_backend("reference");
  // The reference's plain loops take minutes on large images: after 10 s, a line on
  // stderr every 10 s says how far the replay is.
  const auto start = std::chrono::steady_clock::now();
  auto next_note = start + std::chrono::seconds(10);
  for (size_t index = 0; index < g.nodes.size(); ++index) {
    const Node& n = g.nodes[index];
    if (const auto now = std::chrono::steady_clock::now(); now >= next_note) {
      std::fprintf(stderr, "selftest: node %zu of %zu rerun on the reference (%.0f s)\n", index, g.nodes.size(),
                   std::chrono::duration<double>(now - start).count());
      next_note = now + std::chrono::seconds(10);
    }
    if (training && !run_seed && n.op_type == "Dropout") continue;
    const Node run = replayed(n, training && !run_seed);
    Graph one;
    one.name = "selftest";
    one.opsets = g.opsets;
    TensorMap feeds;
    for (const std::string& in : run.inputs) {
      if (in.empty() || feeds.count(in)) continue;
      auto it = got.find(in);
      if (it == got.end() && (it = given.find(in)) == given.end())
        return "value '" + in + "' read by " + describe(n) + " was not recorded";
      // A value the device stored in 16 bits (Tensor::narrowed) is read as its float32 widening.
      feeds[in] = it->second.narrowed() ? it->second.cast(DataType::Float32) : it->second;
      one.inputs.push_back(in);
      one.values[in] = ValueInfo{feeds[in].dtype(), shape_of(it->second.dims())};
    }
    one.nodes.push_back(run);
    for (const std::string& out : run.outputs)
      if (!out.empty()) one.outputs.push_back(out);
    infer_shapes(one, registry().schemas, "selftest");
    ExecutorOptions eo;
    eo.plan.kept_outside = true;  // the results outlive the executor
    eo.math = math;
    RunOptions ro;
    ro.training = training;
    // A Dropout draws from its node's seed: placed at node 0. A fused node that carries its
    // Dropout's index (dropout_node) draws from node_seed(seed, 0) + that index on every
    // backend, so it runs under the run seed itself.
    if (run_seed) ro.seed = seed_placing(*run_seed, n.has_attr("dropout_node") ? 0 : index);
    const TensorMap want = Executor(one, *reference, eo).run(feeds, ro);
    std::optional<std::pair<TensorMap, TensorMap>> moved;  // the rerun on wiggled inputs, when a value needs it
    const std::vector<size_t> rounds = math != MathPrecision::fp32 ? math_rounded_outputs(n) : std::vector<size_t>{};
    for (const std::string& value : one.outputs) {
      // An output both sides rounded to 16 bits (math_rounded_outputs) may land on
      // neighbouring 16-bit numbers where the fp32 sums differ by their last places.
      bool rounded = false;
      for (size_t k : rounds) rounded = rounded || (k < n.outputs.size() && n.outputs[k] == value);
      // FusedConv's Y with Z under bf16/fp16: act(conv + B) rounded, then Z added in fp32.
      const Tensor* residual =
          math != MathPrecision::fp32 && n.op_type == "FusedConv" && n.has_input(3) && value == n.outputs[0]
              ? &feeds.at(n.inputs[3])
              : nullptr;
      const MathPrecision r = rounded || residual ? math : MathPrecision::fp32;
      auto dev = got.find(value), w = want.find(value);
      if (rounded && dev != got.end() && dev->second.dtype() == DataType::Float32) {
        // The device must have rounded it, as the reference did (one step apart is allowed below).
        const Tensor t = to_plain(dev->second);
        for (int64_t i = 0; i < t.numel(); ++i)
          if (const float v = t.data<float>()[i]; std::isfinite(v) && round_to_math(v, math) != v)
            return describe(n) + " output '" + value + "' is not rounded to " + math_precision_name(math) +
                   " (element " + std::to_string(i) + ")";
      }
      if (dev == got.end() || w == want.end() || !dtype_is_float(w->second.dtype())) continue;
      // Stored in 16 bits on the device: the reference's value rounded the same way.
      const auto as_stored = [&](const Tensor& t) { return dev->second.narrowed() ? t.cast(dev->second.dtype()) : t; };
      const Tensor reference_value = as_stored(w->second);
      const SelftestDifference d = selftest_difference(dev->second, reference_value, r, residual);
      const double e = d.error();
      ++worst.values;
      if (e <= tol) {
        if (e > worst.error) worst = {e, describe(n) + " output '" + value + "'", worst.values, worst.sensitive};
        continue;
      }
      if (!moved)  // two moves: one random pattern of signs may cancel in a short sum
        moved = {Executor(one, *reference, eo).run(wiggled(run, feeds, math, 0), ro),
                 Executor(one, *reference, eo).run(wiggled(run, feeds, math, 1), ro)};
      const double sensitivity =
          std::max(selftest_difference(as_stored(moved->first.at(value)), reference_value, r, residual).diff,
                   selftest_difference(as_stored(moved->second.at(value)), reference_value, r, residual).diff);
      if (d.diff <= tol * std::max(d.scale, 1e-6) + sensitivity) {
        ++worst.sensitive;
        continue;
      }
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "relative error %.3g (tolerance %g; largest difference %.3g, largest |value| %.3g, "
                    "moved by %.3g when its inputs move by 64 last places)",
                    e, tol, d.diff, d.scale, sensitivity);
      return describe(n) + " output '" + value + "': " + buf;
    }
  }
  return "";
}

}  // namespace trainrt
