// Gradient rules of the matrix products (ops/gemm.cpp), written with forward ops.
//
//   Gemm  Y = alpha op(A) op(B) + beta C:
//     dA = alpha dY op(B)^T    -> Gemm(dY, B; transB = !transB)        when !transA
//                              -> Gemm(B, dY; transA = transB, transB = 1) when transA (dA = alpha op(B) dY^T)
//     dB = alpha op(A)^T dY    -> Gemm(A, dY; transA = !transA)        when !transB
//                              -> Gemm(dY, A; transA = 1, transB = transA) when transB (dB = alpha dY^T op(A))
//     dC = SumToShape(beta dY, C)   (C broadcast one way to [M,N])
//   MatMul Y = A @ B (numpy): 1-D operands are promoted (A [K] -> [1,K], B [K] -> [K,1]) and
//     dY gets the dropped 1s back by Reshape; 2-D x 2-D uses Gemm's trans flags, batched
//     operands MatMul with a Transpose of the last two axes:
//     dA = SumToShape(dY @ B^T, A),  dB = SumToShape(A^T @ dY, B)   (sums the broadcast batch dims)
//     and a 2-D B [K,N] under a batched A: dB = Gemm(A as [rows,K], dY as [rows,N]; transA = 1)
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

Attribute flag(bool v) { return Attribute::of_int(v ? 1 : 0); }

const Shape& shape_of_value(const GradBuilder& g, const std::string& v) { return g.graph().info(v).shape.value(); }

// Equal at run time for sure: same dims, where unknown the same named symbol.
bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (!(a[d] == b[d]) || (!a[d].known() && a[d].symbol.empty())) return false;
  return true;
}

void gemm_grad(GradBuilder& g) {
  const Node& n = g.node();
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const Attribute alpha = Attribute::of_float(n.attr_float("alpha", 1.0f));
  if (g.needs_dx(0)) {
    if (!ta)
      g.add_onnx("Gemm", {g.dy(0), g.input(1)}, {g.dx(0)}, {{"alpha", alpha}, {"transB", flag(!tb)}});
    else
      g.add_onnx("Gemm", {g.input(1), g.dy(0)}, {g.dx(0)},
                 {{"alpha", alpha}, {"transA", flag(tb)}, {"transB", flag(true)}});
  }
  if (g.needs_dx(1)) {
    if (!tb)
      g.add_onnx("Gemm", {g.input(0), g.dy(0)}, {g.dx(1)}, {{"alpha", alpha}, {"transA", flag(!ta)}});
    else
      g.add_onnx("Gemm", {g.dy(0), g.input(0)}, {g.dx(1)},
                 {{"alpha", alpha}, {"transA", flag(true)}, {"transB", flag(ta)}});
  }
  if (g.needs_dx(2)) {  // C of Y's exact shape takes beta dY as is; a broadcast C sums it
    const float beta = n.attr_float("beta", 1.0f);
    const bool same = same_shape(shape_of_value(g, g.input(2)), shape_of_value(g, g.output(0)));
    std::string scaled = g.dy(0);
    if (beta != 1.0f) {
      Tensor b(g.graph().info(g.output(0)).dtype, {});
      b.set_from_double(0, beta);
      scaled = same ? g.dx(2) : g.tmp("beta_dy");
      g.add_onnx("Mul", {g.dy(0), g.constant("beta", b)}, {scaled});
    }
    if (!same)
      g.add("SumToShape", {scaled, g.input(2)}, {g.dx(2)});
    else if (beta == 1.0f)
      g.add_onnx("Identity", {scaled}, {g.dx(2)});
  }
}

// A Reshape of `x` to `dims` (0 copies x's dim, -1 infers) through an int64 constant.
std::string reshape(GradBuilder& g, const std::string& x, std::vector<int64_t> dims, const std::string& what) {
  Tensor shape(DataType::Int64, {static_cast<int64_t>(dims.size())});
  for (size_t k = 0; k < dims.size(); ++k) shape.data<int64_t>()[k] = dims[k];
  const std::string out = g.tmp(what);
  g.add_onnx("Reshape", {x, g.constant(what + "_shape", shape)}, {out});
  return out;
}

// x [...,P,Q] -> [...,Q,P]
std::string transpose_last2(GradBuilder& g, const std::string& x, size_t rank, const std::string& what) {
  std::vector<int64_t> perm(rank);
  for (size_t k = 0; k < rank; ++k) perm[k] = static_cast<int64_t>(k);
  std::swap(perm[rank - 1], perm[rank - 2]);
  const std::string out = g.tmp(what);
  g.add_onnx("Transpose", {x}, {out}, {{"perm", Attribute::of_ints(perm)}});
  return out;
}

// Writes dx(i) from a product with the promoted operand's layout, summing broadcast
// batch dims; a product that already has the input's shape is written directly.
void finish_operand(GradBuilder& g, size_t i, const std::string& op, std::vector<std::string> ins,
                    std::map<std::string, Attribute> attrs, bool reduce) {
  if (!reduce) return g.add_onnx(op, std::move(ins), {g.dx(i)}, std::move(attrs));
  const std::string prod = g.tmp("d_" + std::to_string(i) + "_unreduced");
  g.add_onnx(op, std::move(ins), {prod}, std::move(attrs));
  g.add("SumToShape", {prod, g.input(i)}, {g.dx(i)});
}

void matmul_grad(GradBuilder& g) {
  const Shape& sa = shape_of_value(g, g.input(0));
  const Shape& sb = shape_of_value(g, g.input(1));
  const size_t ra = sa.size(), rb = sb.size(), ry = shape_of_value(g, g.output(0)).size();
  if (ra == 2 && rb == 2) {  // Y[M,N] = A[M,K] B[K,N]
    if (g.needs_dx(0)) g.add_onnx("Gemm", {g.dy(0), g.input(1)}, {g.dx(0)}, {{"transB", flag(true)}});
    if (g.needs_dx(1)) g.add_onnx("Gemm", {g.input(0), g.dy(0)}, {g.dx(1)}, {{"transA", flag(true)}});
    return;
  }
  // Promoted operands a [...,M,K], b [...,K,N] and dy [...,M,N].
  const std::string a = ra == 1 ? reshape(g, g.input(0), {1, -1}, "a_row") : g.input(0);
  const std::string b = rb == 1 ? reshape(g, g.input(1), {-1, 1}, "b_col") : g.input(1);
  std::string dy = g.dy(0);
  if (ra == 1 || rb == 1) {
    std::vector<int64_t> dims(ry - (ra == 1 && rb > 1 ? 1 : 0), 0);  // 0 copies the batch (symbolic too)
    if (ra == 1 && rb == 1)
      dims = {1, 1};
    else if (ra == 1)
      dims.insert(dims.end(), {1, -1});  // [...,N] -> [...,1,N]
    else
      dims.push_back(1);  // [...,M] -> [...,M,1]
    dy = reshape(g, g.dy(0), dims, "dy_promoted");
  }
  const size_t pa = std::max<size_t>(ra, 2), pb = std::max<size_t>(rb, 2), rank = std::max(pa, pb);
  // An operand needs its batch dims summed unless they are exactly Y's.
  auto batch_equal = [&](const Shape& s, size_t r) {
    if (r != rank) return false;
    const Shape& y = shape_of_value(g, g.output(0));
    for (size_t d = 0; d + 2 < r; ++d)
      if (!(s[d] == y[d]) || (!s[d].known() && s[d].symbol.empty())) return false;
    return true;
  };
  if (g.needs_dx(0))
    finish_operand(g, 0, "MatMul", {dy, transpose_last2(g, b, pb, "b_t")}, {}, ra == 1 || !batch_equal(sa, ra));
  const bool shared_b = rb == 2 && ra > 2;
  const Dim k = shared_b ? sa.back() : Dim{}, n = shared_b ? shape_of_value(g, g.output(0)).back() : Dim{};
  if (g.needs_dx(1) && shared_b && k.known() && n.known()) {
    // B [K,N] shared by every batch (a Linear layer on [N,T,C], an LSTM's X.W^T): the batch
    // flattened into rows, dB = A[rows,K]^T dY[rows,N] in one Gemm, without the per-batch
    // [...,K,N] products a batched MatMul would write before SumToShape.
    g.add_onnx("Gemm", {reshape(g, a, {-1, k.value}, "a_rows"), reshape(g, dy, {-1, n.value}, "dy_rows")}, {g.dx(1)},
               {{"transA", flag(true)}});
  } else if (g.needs_dx(1)) {
    const std::string at = transpose_last2(g, a, pa, "a_t");
    if (rb == 1) {  // [...,K,1] -> [...,K], then sum the batch
      const std::string prod = g.tmp("d_1_col");
      g.add_onnx("MatMul", {at, dy}, {prod});
      g.add("SumToShape", {reshape(g, prod, std::vector<int64_t>(rank - 1, 0), "d_1_squeezed"), g.input(1)}, {g.dx(1)});
    } else {
      finish_operand(g, 1, "MatMul", {at, dy}, {}, !batch_equal(sb, rb));
    }
  }
}

}  // namespace

void register_gemm_gradients(GradRegistry& r) {
  r.add_rule("Gemm", gemm_grad);
  r.add_rule("MatMul", matmul_grad);
}

}  // namespace trainrt
