// LSTM, GRU and RNN (ONNX opset 7 and 14): schemas and shape rules. No kernels: import
// rewrites each node into MatMul, Gemm, Split, Sigmoid, Tanh, Mul, Add, Concat... over
// the static sequence length (graph/expand_recurrent.cpp), so autodiff and every backend
// run what the rewrite produces.
//
//   X [T,N,I] (layout 1: [N,T,I]), W [D,G*H,I], R [D,G*H,H], B [D,2*G*H],
//   sequence_lens [N] int32, initial_h / initial_c [D,N,H] (layout 1: [N,D,H]), P [D,3*H]
//   -> Y [T,D,N,H] (layout 1: [N,T,D,H]), Y_h / Y_c [D,N,H] (layout 1: [N,D,H])
// G = 4 gates for LSTM (i,o,f,c), 3 for GRU (z,r,h), 1 for RNN; D = 2 when bidirectional.
#include "ops/recurrent.h"

#include "ops/core/common.h"

namespace trainrt {

namespace {

int64_t gate_count(const std::string& op) { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }

// Input i must be present with rank 3 (or `rank`); returns its shape.
const Shape& shape_of_rank(const InferContext& ctx, size_t i, size_t rank, const char* what) {
  const std::optional<Shape>& s = ctx.input(i).shape;
  if (!s) ctx.fail(std::string("the rank of input ") + std::to_string(i) + " (" + what + ") is unknown");
  if (s->size() != rank)
    ctx.fail("input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' (" + what + ") must be " +
             std::to_string(rank) + "-D, got " + shape_to_string(*s));
  return *s;
}

// A dim that must equal `want` when both are known.
void expect_dim(const InferContext& ctx, size_t i, const Shape& s, size_t d, const Dim& want, const char* what) {
  if (s[d].known() && want.known() && s[d].value != want.value)
    ctx.fail("input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' " + shape_to_string(s) + ": dimension " +
             std::to_string(d) + " (" + what + ") must be " + std::to_string(want.value));
}

void recurrent_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 0);
  for (size_t i : {1, 2}) require_same_dtype(ctx, 0, i);
  const std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    ctx.fail("attribute 'direction' must be forward, reverse or bidirectional, got '" + direction + "'");
  const int64_t layout = n.attr_int("layout", 0);
  if (layout != 0 && layout != 1) ctx.fail("attribute 'layout' must be 0 or 1, got " + std::to_string(layout));
  if (n.has_attr("layout") && ctx.graph().opset("") < 14)
    ctx.fail("attribute 'layout' needs ai.onnx opset 14, the model imports opset " +
             std::to_string(ctx.graph().opset("")));
  for (const char* flag : {"input_forget", "linear_before_reset"}) {
    const int64_t v = n.attr_int(flag, 0);
    if (v != 0 && v != 1) ctx.fail(std::string("attribute '") + flag + "' must be 0 or 1, got " + std::to_string(v));
  }
  if (n.has_attr("clip") && !(n.attr_float("clip", 0) > 0))
    ctx.fail("attribute 'clip' must be positive, got " + std::to_string(n.attr_float("clip", 0)));
  const int64_t gates = gate_count(n.op_type), dirs = direction == "bidirectional" ? 2 : 1;
  auto it = n.attrs.find("activations");
  const size_t acts = it == n.attrs.end() ? 0 : it->second.strings.size();
  if (acts != 0 && acts != static_cast<size_t>(gates == 4 ? 3 : gates == 3 ? 2 : 1) * static_cast<size_t>(dirs))
    ctx.fail("attribute 'activations' has " + std::to_string(acts) + " entries, expected " +
             std::to_string((gates == 4   ? 3
                             : gates == 3 ? 2
                                          : 1) *
                            dirs) +
             " (per direction: " +
             (gates == 4   ? "f, g, h"
              : gates == 3 ? "f, g"
                           : "f") +
             ")");

  const Shape& x = shape_of_rank(ctx, 0, 3, "X");
  const Shape& w = shape_of_rank(ctx, 1, 3, "W");
  const Shape& r = shape_of_rank(ctx, 2, 3, "R");
  Dim hidden = r[2];
  if (n.has_attr("hidden_size")) {
    const int64_t h = n.attr_int("hidden_size", 0);
    if (h <= 0) ctx.fail("attribute 'hidden_size' must be positive, got " + std::to_string(h));
    hidden = Dim::of(h);
  }
  const Dim gh = hidden.known() ? Dim::of(gates * hidden.value) : Dim{};
  const Dim batch = x[layout == 0 ? 1 : 0], steps = x[layout == 0 ? 0 : 1];
  expect_dim(ctx, 1, w, 0, Dim::of(dirs), "num_directions");
  expect_dim(ctx, 1, w, 1, gh, "gates * hidden_size");
  expect_dim(ctx, 1, w, 2, x[2], "input_size, X's last");
  expect_dim(ctx, 2, r, 0, Dim::of(dirs), "num_directions");
  expect_dim(ctx, 2, r, 1, gh, "gates * hidden_size");
  expect_dim(ctx, 2, r, 2, hidden, "hidden_size");
  if (ctx.has_input(3)) {
    require_same_dtype(ctx, 0, 3);
    const Shape& b = shape_of_rank(ctx, 3, 2, "B");
    expect_dim(ctx, 3, b, 0, Dim::of(dirs), "num_directions");
    expect_dim(ctx, 3, b, 1, gh.known() ? Dim::of(2 * gh.value) : Dim{}, "2 * gates * hidden_size");
  }
  if (ctx.has_input(4)) {
    if (ctx.input(4).dtype != DataType::Int32)
      ctx.fail("input 4 '" + n.inputs[4] + "' (sequence_lens) must be int32, got " + dtype_name(ctx.input(4).dtype));
    const Shape& s = shape_of_rank(ctx, 4, 1, "sequence_lens");
    expect_dim(ctx, 4, s, 0, batch, "batch_size");
  }
  const Shape state = layout == 0 ? Shape{Dim::of(dirs), batch, hidden} : Shape{batch, Dim::of(dirs), hidden};
  for (size_t i : {size_t{5}, size_t{6}}) {
    if (!ctx.has_input(i)) continue;
    require_same_dtype(ctx, 0, i);
    const Shape& s = shape_of_rank(ctx, i, 3, i == 5 ? "initial_h" : "initial_c");
    for (size_t d = 0; d < 3; ++d) expect_dim(ctx, i, s, d, state[d], layout == 0 ? "of [D,N,H]" : "of [N,D,H]");
  }
  if (ctx.has_input(7)) {
    require_same_dtype(ctx, 0, 7);
    const Shape& p = shape_of_rank(ctx, 7, 2, "P");
    expect_dim(ctx, 7, p, 0, Dim::of(dirs), "num_directions");
    expect_dim(ctx, 7, p, 1, hidden.known() ? Dim::of(3 * hidden.value) : Dim{}, "3 * hidden_size");
  }
  const Shape y = layout == 0 ? Shape{steps, Dim::of(dirs), batch, hidden} : Shape{batch, steps, Dim::of(dirs), hidden};
  for (size_t i = 0; i < ctx.output_count(); ++i) ctx.set_output(i, t, i == 0 ? y : state);
}

// The MatMul and Gemm work of the expansion: X.W^T once, then H.R^T per step.
double recurrent_flops(const Graph& g, const Node& n) {
  const Shape& x = *g.info(n.inputs[0]).shape;
  const Shape& w = *g.info(n.inputs[1]).shape;
  const Shape& r = *g.info(n.inputs[2]).shape;
  auto v = [](const Dim& d) { return static_cast<double>(d.known() ? d.value : 0); };
  return 2.0 * v(x[0]) * v(x[1]) * v(w[0]) * v(w[1]) * (v(w[2]) + v(r[2]));
}

}  // namespace

void register_recurrent(Registry& r) {
  const std::vector<std::string> common{"activation_alpha", "activation_beta", "activations", "clip",
                                        "direction",        "hidden_size",     "layout"};
  std::vector<std::string> lstm = common, gru = common;
  lstm.push_back("input_forget");
  gru.push_back("linear_before_reset");
  r.schemas.add(OpSchema{"", "LSTM", 3, 8, 0, 3, 7, recurrent_infer, recurrent_flops, lstm});
  r.schemas.add(OpSchema{"", "GRU", 3, 6, 0, 2, 7, recurrent_infer, recurrent_flops, gru});
  r.schemas.add(OpSchema{"", "RNN", 3, 6, 0, 2, 7, recurrent_infer, recurrent_flops, common});
}

}  // namespace trainrt
