// Import-time expansion of ONNX's recurrent ops (LSTM, GRU, RNN) into existing ops,
// unrolled over the static sequence length T, so that autodiff, every backend and the
// planner see nothing new. Per direction d (forward: t = 0..T-1, reverse: T-1..0):
//
//   XW   = MatMul(X, Transpose(W[d])) + Wb        [T,N,G*H] (layout 1: [N,T,G*H]), once
//   x_t  = Squeeze(Split(XW, T, time axis)[t])    [N,G*H]
//   gates_t = x_t + Gemm(H_{t-1}, R[d], Rb, transB=1)   (t = first: x_t + Rb, H_0 = 0)
//   LSTM: i,o,f,c = Split(gates_t); i += Pi*C_{t-1}; f += Pf*C_{t-1};
//         i = f(i); f = f(f) (input_forget: 1 - i); c = g(c); C_t = f*C_{t-1} + i*c;
//         o = f(o + Po*C_t); H_t = o*h(C_t)
//   GRU:  z,r = f(x_z,r + H_{t-1}.R_z,r^T + Rb_z,r);
//         h = g(x_h + (r*H_{t-1}).R_h^T + Rb_h)       (linear_before_reset = 0)
//         h = g(x_h + r*(H_{t-1}.R_h^T + Rb_h))       (linear_before_reset = 1, PyTorch's)
//         H_t = h + z*(H_{t-1} - h)
//   RNN:  H_t = f(gates_t)
// `clip` clips every gate's input to its activation. With sequence_lens, m_t = t < len
// ([N,1]) and H_t = Where(m_t, H_t, H_{t-1}) (C_t too), Y_t = Where(m_t, H_t, 0): the state
// stops at each sequence's end and Y is zero past it, as ONNX specifies.
// Y = Concat over t of the directions' H_t stacked; Y_h, Y_c = the last states stacked.
//
// Cost: T * D steps of about 10-20 small nodes. Memory is linear in T: the forward keeps
// XW, each step's gates and states for the backward (about (G+2)*N*H values a step and
// direction), Split/Concat's gradients are one Concat/ConcatGrad over the T pieces, and
// the T per-step gradients of R (one [G*H,H] each) are summed eight at a time as the
// backward produces them (autodiff's partial Sums), so at most eight are alive at once.
#include "graph/expand_recurrent.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/schema.h"

namespace trainrt {

namespace {

// An activation the rewrite builds from existing ops, with the parameters it takes and
// their defaults (those of the ONNX op of the same name).
struct ActivationSpec {
  const char* name;
  bool alpha, beta;
  float alpha0, beta0;
};
constexpr ActivationSpec kActivations[] = {
    {"Sigmoid", false, false, 0, 0},         {"Tanh", false, false, 0, 0},           {"Relu", false, false, 0, 0},
    {"HardSigmoid", true, true, 0.2f, 0.5f}, {"LeakyRelu", true, false, 0.01f, 0},   {"Affine", true, true, 1, 0},
    {"ScaledTanh", true, true, 1, 1},        {"ThresholdedRelu", true, false, 1, 0}, {"Elu", true, false, 1, 0},
    {"Softsign", false, false, 0, 0},        {"Softplus", false, false, 0, 0},
};

struct Activation {
  std::string name;
  float alpha = 0, beta = 0;
};

bool same_name(const std::string& a, const char* b) {
  const std::string lb(b);
  return a.size() == lb.size() && std::equal(a.begin(), a.end(), lb.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

class Expansion {
 public:
  // `taken`: the names every expansion of the graph made so far (not yet in g.values).
  Expansion(Graph& g, const Node& n, std::string where, std::vector<Node>& out, std::set<std::string>& taken)
      : g_(g), n_(n), where_(std::move(where)), out_(out), taken_(taken), opset_(g.opset("")) {}

  void run() {
    prefix_ = n_.name + "/";
    const Shape& x = g_.info(n_.inputs[0]).shape.value();
    dtype_ = g_.info(n_.inputs[0]).dtype;
    layout_ = n_.attr_int("layout", 0);
    time_axis_ = layout_ == 0 ? 0 : 1;
    const Dim& steps = x[time_axis_];
    if (!steps.known())
      throw_unsupported(where_, "needs a static sequence length: X is " + shape_to_string(x) + ", dimension " +
                                    std::to_string(time_axis_) + " is not a number");
    if (steps.value < 1) throw_unsupported(where_, "X " + shape_to_string(x) + " has no time steps");
    steps_ = steps.value;
    const std::string direction = n_.attr_string("direction", "forward");
    dirs_ = direction == "bidirectional" ? 2 : 1;
    gates_ = n_.op_type == "LSTM" ? 4 : n_.op_type == "GRU" ? 3 : 1;
    parse_activations();
    clip_ = n_.has_attr("clip") ? n_.attr_float("clip", 0) : 0.0f;
    if (n_.has_input(4)) lens_ = unsqueeze(n_.inputs[4], 1, "lens");  // [N,1] int32

    const std::vector<std::string> w = per_direction(1, 0), r = per_direction(2, 0);
    const std::vector<std::string> b = per_direction(3, 0), p = per_direction(7, 0);
    const std::vector<std::string> h0 = per_direction(5, layout_), c0 = per_direction(6, layout_);
    std::vector<std::vector<std::string>> ys(dirs_);
    std::vector<std::string> hs(dirs_), cs(dirs_);
    for (int64_t d = 0; d < dirs_; ++d) {
      const bool reverse = direction == "reverse" || d == 1;
      Direction dir = weights(d, r[d], b[d], p[d]);
      std::vector<std::string> xs = time_steps(d, w[d], dir.wb);
      std::string h = h0[d], c = c0[d];
      ys[d].resize(steps_);
      for (int64_t k = 0; k < steps_; ++k) {
        const int64_t t = reverse ? steps_ - 1 - k : k;
        prefix_ = n_.name + "/d" + std::to_string(d) + "/t" + std::to_string(t) + "/";
        std::string h_new, c_new;
        if (gates_ == 4) lstm_step(dir, xs[t], h, c, h_new, c_new);
        if (gates_ == 3) h_new = gru_step(dir, xs[t], h);
        if (gates_ == 1) h_new = act(dir.f[0], clip(plus(xs[t], recurrent(h, dir.r, dir.rb))));
        if (lens_.empty()) {
          ys[d][t] = h = h_new;
          c = c_new;
          continue;
        }
        const std::string m = add("Less", {int32_scalar(t), lens_}, {}, "mask");
        ys[d][t] = add("Where", {m, h_new, scalar(0)}, {}, "y");
        h = h.empty() ? ys[d][t] : add("Where", {m, h_new, h}, {}, "h_kept");
        if (!c_new.empty()) c = add("Where", {m, c_new, c.empty() ? scalar(0) : c}, {}, "c_kept");
      }
      hs[d] = h;
      cs[d] = c;
    }
    prefix_ = n_.name + "/";
    if (n_.has_output(0)) {
      std::vector<std::string> per_t;
      for (int64_t t = 0; t < steps_; ++t) {
        std::vector<std::string> at_t;
        for (int64_t d = 0; d < dirs_; ++d) at_t.push_back(ys[d][t]);
        per_t.push_back(unsqueeze(stack(at_t, ""), time_axis_, "y_t"));
      }
      add("Concat", per_t, {{"axis", Attribute::of_int(time_axis_)}}, "", n_.outputs[0]);
    }
    if (n_.has_output(1)) stack(hs, n_.outputs[1]);
    if (n_.has_output(2)) stack(cs, n_.outputs[2]);
  }

 private:
  // One direction's weights: R[d] (GRU with linear_before_reset 0: R_zr and R_h apart),
  // biases and peepholes, and the activations f, g, h.
  struct Direction {
    std::string r, rb, r_h, rb_h, wb;
    std::vector<std::string> rb_parts, p;  // Rb split per gate; Pi, Po, Pf
    std::vector<Activation> f;             // f, g, h in the spec's order
  };

  Direction weights(int64_t d, const std::string& r, const std::string& b, const std::string& p) {
    prefix_ = n_.name + "/d" + std::to_string(d) + "/";
    Direction dir;
    dir.f = activations_[d];
    dir.r = r;
    if (!b.empty()) {
      std::vector<std::string> wr = split(b, 0, 2, "b");
      dir.wb = wr[0];
      dir.rb = wr[1];
      if (gates_ == 3) dir.rb_parts = split(dir.rb, 0, 3, "rb");
    }
    if (!p.empty()) dir.p = split(p, 0, 3, "p");
    if (gates_ == 3 && n_.attr_int("linear_before_reset", 0) == 0) {
      std::vector<std::string> rs = split(r, 0, 3, "r");
      dir.r = add("Concat", {rs[0], rs[1]}, {{"axis", Attribute::of_int(0)}}, "r_zr");
      dir.r_h = rs[2];
      if (!b.empty()) {
        dir.rb = add("Concat", {dir.rb_parts[0], dir.rb_parts[1]}, {{"axis", Attribute::of_int(0)}}, "rb_zr");
        dir.rb_h = dir.rb_parts[2];
      }
    }
    return dir;
  }

  // X.W^T (+ Wb) for all steps in one MatMul, then one [N,G*H] value per step.
  std::vector<std::string> time_steps(int64_t d, const std::string& w, const std::string& wb) {
    prefix_ = n_.name + "/d" + std::to_string(d) + "/";
    const std::string wt = add("Transpose", {w}, {{"perm", Attribute::of_ints({1, 0})}}, "w_t");
    std::string xw = add("MatMul", {n_.inputs[0], wt}, {}, "xw");
    if (!wb.empty()) xw = add("Add", {xw, wb}, {}, "xw_b");
    std::vector<std::string> parts = steps_ == 1 ? std::vector<std::string>{xw} : split(xw, time_axis_, steps_, "xw");
    for (std::string& part : parts) part = squeeze(part, time_axis_, "x");
    return parts;
  }

  void lstm_step(const Direction& dir, const std::string& x, const std::string& h, const std::string& c,
                 std::string& h_new, std::string& c_new) {
    std::vector<std::string> g = split(plus(x, recurrent(h, dir.r, dir.rb)), 1, 4, "gates");  // i, o, f, c
    if (!dir.p.empty() && !c.empty()) {
      g[0] = add("Add", {g[0], add("Mul", {dir.p[0], c}, {}, "pi_c")}, {}, "i_peep");
      g[2] = add("Add", {g[2], add("Mul", {dir.p[2], c}, {}, "pf_c")}, {}, "f_peep");
    }
    const std::string i = act(dir.f[0], clip(g[0]), "i");
    const std::string cell = act(dir.f[1], clip(g[3]), "c");
    c_new = add("Mul", {i, cell}, {}, "ic");
    if (!c.empty()) {
      const std::string f =
          n_.attr_int("input_forget", 0) != 0 ? add("Sub", {scalar(1), i}, {}, "f") : act(dir.f[0], clip(g[2]), "f");
      c_new = add("Add", {add("Mul", {f, c}, {}, "fc"), c_new}, {}, "cell");
    }
    std::string o = g[1];
    if (!dir.p.empty()) o = add("Add", {o, add("Mul", {dir.p[1], c_new}, {}, "po_c")}, {}, "o_peep");
    o = act(dir.f[0], clip(o), "o");
    h_new = add("Mul", {o, act(dir.f[2], c_new, "hc")}, {}, "h");
  }

  std::string gru_step(const Direction& dir, const std::string& x, const std::string& h) {
    const std::vector<std::string> xs = split(x, 1, 3, "x");  // z, r, h
    const bool before_reset = n_.attr_int("linear_before_reset", 0) != 0;
    std::vector<std::string> rec(3);
    if (!h.empty()) {
      std::vector<std::string> parts = split(recurrent(h, dir.r, dir.rb), 1, before_reset ? 3 : 2, "hr");
      std::copy(parts.begin(), parts.end(), rec.begin());
    } else if (!dir.rb_parts.empty()) {
      rec = dir.rb_parts;  // H_0 = 0: only the recurrent biases remain
    }
    const std::string z = act(dir.f[0], clip(plus(xs[0], rec[0])), "z");
    const std::string r = act(dir.f[0], clip(plus(xs[1], rec[1])), "r");
    std::string hh;
    if (before_reset)
      hh = rec[2].empty() ? xs[2] : add("Add", {xs[2], add("Mul", {r, rec[2]}, {}, "r_hr")}, {}, "h_in");
    else if (!h.empty())
      hh = add("Add", {xs[2], recurrent(add("Mul", {r, h}, {}, "r_h"), dir.r_h, dir.rb_h)}, {}, "h_in");
    else
      hh = plus(xs[2], rec[2]);
    hh = act(dir.f[1], clip(hh), "hh");
    if (h.empty()) return add("Sub", {hh, add("Mul", {z, hh}, {}, "z_hh")}, {}, "h");
    return add("Add", {hh, add("Mul", {z, add("Sub", {h, hh}, {}, "h_diff")}, {}, "z_diff")}, {}, "h");
  }

  // H.R^T + Rb ([N,G*H]); only Rb (or nothing) while H is the implicit zero state.
  std::string recurrent(const std::string& h, const std::string& r, const std::string& rb) {
    if (h.empty()) return rb;
    std::vector<std::string> in{h, r};
    if (!rb.empty()) in.push_back(rb);
    return add("Gemm", in, {{"transB", Attribute::of_int(1)}}, "hr");
  }

  std::string plus(const std::string& a, const std::string& b) { return b.empty() ? a : add("Add", {a, b}, {}, "sum"); }

  std::string clip(const std::string& x) {
    if (clip_ <= 0) return x;
    if (opset_ < 11)
      return add("Clip", {x}, {{"min", Attribute::of_float(-clip_)}, {"max", Attribute::of_float(clip_)}}, "clip");
    return add("Clip", {x, scalar(-clip_), scalar(clip_)}, {}, "clip");
  }

  std::string act(const Activation& a, const std::string& x, const std::string& what = "act") {
    const std::string& f = a.name;
    if (f == "Sigmoid" || f == "Tanh" || f == "Relu" || f == "Softsign" || f == "Softplus")
      return add(f, {x}, {}, what);
    if (f == "Elu") return add(f, {x}, {{"alpha", Attribute::of_float(a.alpha)}}, what);
    if (f == "HardSigmoid")
      return add(f, {x}, {{"alpha", Attribute::of_float(a.alpha)}, {"beta", Attribute::of_float(a.beta)}}, what);
    if (f == "LeakyRelu") return add(f, {x}, {{"alpha", Attribute::of_float(a.alpha)}}, what);
    if (f == "Affine") return add("Add", {add("Mul", {x, scalar(a.alpha)}, {}, what), scalar(a.beta)}, {}, what);
    if (f == "ScaledTanh")
      return add("Mul", {add("Tanh", {add("Mul", {x, scalar(a.beta)}, {}, what)}, {}, what), scalar(a.alpha)}, {},
                 what);
    // ThresholdedRelu
    return add("Where", {add("Greater", {x, scalar(a.alpha)}, {}, what), x, scalar(0)}, {}, what);
  }

  // The activations per direction, names as the spec spells them; alpha and beta are
  // consumed in order by the activations that take them.
  void parse_activations() {
    static const char* kDefaults[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    const size_t per_dir = gates_ == 4 ? 3 : gates_ == 3 ? 2 : 1;
    std::vector<std::string> names;
    if (auto it = n_.attrs.find("activations"); it != n_.attrs.end()) names = it->second.strings;
    if (names.empty())
      for (int64_t d = 0; d < dirs_; ++d)
        for (size_t k = 0; k < per_dir; ++k) names.push_back(kDefaults[per_dir - 1][k]);
    const std::vector<float> alphas = n_.attr_floats("activation_alpha"), betas = n_.attr_floats("activation_beta");
    size_t next_alpha = 0, next_beta = 0;
    activations_.assign(dirs_, {});
    for (size_t k = 0; k < names.size(); ++k) {
      const ActivationSpec* spec = nullptr;
      for (const ActivationSpec& s : kActivations)
        if (same_name(names[k], s.name)) spec = &s;
      if (!spec) {
        std::string known;
        for (const ActivationSpec& s : kActivations) known += std::string(known.empty() ? "" : ", ") + s.name;
        throw_unsupported(where_, "activation '" + names[k] + "' is not supported (supported: " + known + ")");
      }
      Activation a{spec->name, spec->alpha0, spec->beta0};
      if (spec->alpha && next_alpha < alphas.size()) a.alpha = alphas[next_alpha++];
      if (spec->beta && next_beta < betas.size()) a.beta = betas[next_beta++];
      activations_[k / per_dir].push_back(a);
    }
  }

  // Input `i` split per direction along `axis` with that axis removed; "" when absent.
  std::vector<std::string> per_direction(size_t i, int64_t axis) {
    if (!n_.has_input(i)) return std::vector<std::string>(dirs_);
    prefix_ = n_.name + "/";
    const std::string what = "in" + std::to_string(i);
    std::vector<std::string> parts =
        dirs_ == 1 ? std::vector<std::string>{n_.inputs[i]} : split(n_.inputs[i], axis, 2, what);
    for (std::string& p : parts) p = squeeze(p, axis, what);
    return parts;
  }

  // [D,N,H] (layout 0) or [N,D,H] (layout 1) from the directions' [N,H] values.
  std::string stack(const std::vector<std::string>& per_dir, const std::string& out) {
    const int64_t axis = layout_ == 0 ? 0 : 1;
    if (per_dir.size() == 1) return unsqueeze(per_dir[0], axis, "stack", out);
    std::vector<std::string> parts;
    for (const std::string& v : per_dir) parts.push_back(unsqueeze(v, axis, "stack"));
    return add("Concat", parts, {{"axis", Attribute::of_int(axis)}}, "stack", out);
  }

  // Squeeze/Unsqueeze/Split in the form of the model's opset (attributes before 13).
  std::string squeeze(const std::string& x, int64_t axis, const std::string& what) {
    if (opset_ < 13) return add("Squeeze", {x}, {{"axes", Attribute::of_ints({axis})}}, what);
    return add("Squeeze", {x, int64s({axis})}, {}, what);
  }
  std::string unsqueeze(const std::string& x, int64_t axis, const std::string& what, const std::string& out = "") {
    if (opset_ < 13) return add("Unsqueeze", {x}, {{"axes", Attribute::of_ints({axis})}}, what, out);
    return add("Unsqueeze", {x, int64s({axis})}, {}, what, out);
  }
  std::vector<std::string> split(const std::string& x, int64_t axis, int64_t parts, const std::string& what) {
    std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(axis)}};
    if (opset_ >= 18) attrs["num_outputs"] = Attribute::of_int(parts);
    std::vector<std::string> outs;
    for (int64_t k = 0; k < parts; ++k) outs.push_back(fresh(what + std::to_string(k)));
    emit("Split", {x}, outs, attrs);
    return outs;
  }

  std::string add(const std::string& op, const std::vector<std::string>& inputs,
                  const std::map<std::string, Attribute>& attrs, const std::string& what, const std::string& out = "") {
    const std::string name = out.empty() ? fresh(what) : out;
    emit(op, inputs, {name}, attrs);
    return name;
  }

  void emit(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
            const std::map<std::string, Attribute>& attrs) {
    Node m;
    m.name = outputs[0];
    m.op_type = op;
    m.inputs = inputs;
    m.outputs = outputs;
    m.attrs = attrs;
    out_.push_back(std::move(m));
  }

  // A value name of this expansion not yet taken in the graph.
  std::string fresh(const std::string& what) {
    std::string name = prefix_ + what;
    for (int k = 1; g_.values.count(name) || taken_.count(name); ++k) name = prefix_ + what + "_" + std::to_string(k);
    taken_.insert(name);
    return name;
  }

  std::string constant(const std::string& what, Tensor t) {
    const std::string name = fresh(what);
    g_.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
    g_.initializers.emplace(name, std::move(t));
    return name;
  }
  std::string scalar(double v) {
    const std::string key = std::to_string(v);
    if (auto it = scalars_.find(key); it != scalars_.end()) return it->second;
    Tensor t(dtype_, {});
    t.set_from_double(0, v);
    const std::string saved = prefix_;
    prefix_ = n_.name + "/";
    const std::string name = constant("const", std::move(t));
    prefix_ = saved;
    return scalars_[key] = name;
  }
  std::string int32_scalar(int64_t v) {
    Tensor t(DataType::Int32, {});
    t.set_from_double(0, static_cast<double>(v));
    return constant("step", std::move(t));
  }
  std::string int64s(const std::vector<int64_t>& v) {
    const std::string key = "axes" + std::to_string(v[0]);
    if (auto it = scalars_.find(key); it != scalars_.end()) return it->second;
    Tensor t(DataType::Int64, {static_cast<int64_t>(v.size())});
    for (size_t k = 0; k < v.size(); ++k) t.set_from_double(static_cast<int64_t>(k), static_cast<double>(v[k]));
    const std::string saved = prefix_;
    prefix_ = n_.name + "/";
    const std::string name = constant(key, std::move(t));
    prefix_ = saved;
    return scalars_[key] = name;
  }

  Graph& g_;
  const Node& n_;
  std::string where_;
  std::vector<Node>& out_;
  std::set<std::string>& taken_;
  int64_t opset_;
  DataType dtype_ = DataType::Float32;
  int64_t layout_ = 0, time_axis_ = 0, steps_ = 0, dirs_ = 1, gates_ = 1;
  float clip_ = 0;
  std::string lens_, prefix_;
  std::vector<std::vector<Activation>> activations_;
  std::map<std::string, std::string> scalars_;
};

}  // namespace

bool is_recurrent_op(const std::string& domain, const std::string& op_type) {
  return canonical_domain(domain).empty() && (op_type == "LSTM" || op_type == "GRU" || op_type == "RNN");
}

size_t expand_recurrent(Graph& g, const std::string& where) {
  size_t expanded = 0;
  std::vector<Node> nodes;
  std::set<std::string> taken;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!is_recurrent_op(n.domain, n.op_type)) {
      nodes.push_back(n);
      continue;
    }
    ++expanded;
    if (n.output_count() == 0) continue;  // nothing reads it
    Expansion(g, n, where.empty() ? describe_node(n, i) : where + ": " + describe_node(n, i), nodes, taken).run();
  }
  if (expanded) g.nodes = std::move(nodes);
  return expanded;
}

}  // namespace trainrt
