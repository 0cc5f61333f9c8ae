// Gradient rules of Resize and Upsample (ops/resize.cpp): a scatter-add over the forward's taps.
//
//   Resize(X, roi, scales, sizes) -> Y     dX = ResizeGrad(dY, X, roi, scales, sizes)   attributes copied
//   Upsample(X, scales) -> Y               dX = ResizeGrad(dY, X, "", scales, "")       as Resize with
//                                          asymmetric coordinates and floor rounding
// roi, scales and sizes carry no gradient (they are shapes); X is read for its shape.
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

void resize_grad(GradBuilder& g) {
  std::vector<std::string> ins{g.dy(0), g.input(0)};
  for (size_t i = 1; i < 4; ++i) ins.push_back(g.has_input(i) ? g.input(i) : "");
  while (ins.size() > 2 && ins.back().empty()) ins.pop_back();
  g.add("ResizeGrad", std::move(ins), {g.dx(0)}, g.node().attrs);
}

void upsample_grad(GradBuilder& g) {
  std::string scales = g.has_input(1) ? g.input(1) : "";
  if (scales.empty()) {  // Upsample-7: scales is an attribute
    const std::vector<float> s = g.node().attr_floats("scales");
    Tensor t(DataType::Float32, {static_cast<int64_t>(s.size())});
    for (size_t i = 0; i < s.size(); ++i) t.data<float>()[i] = s[i];
    scales = g.constant("scales", std::move(t));
  }
  std::string mode = g.node().attr_string("mode", "nearest");
  if (mode == "bilinear") mode = "linear";
  std::map<std::string, Attribute> attrs;
  attrs["mode"] = Attribute::of_string(mode);
  attrs["coordinate_transformation_mode"] = Attribute::of_string("asymmetric");
  attrs["nearest_mode"] = Attribute::of_string("floor");
  g.add("ResizeGrad", {g.dy(0), g.input(0), "", scales}, {g.dx(0)}, std::move(attrs));
}

}  // namespace

void register_resize_gradients(GradRegistry& r) {
  r.add_rule("Resize", resize_grad, /*differentiable=*/{0});
  r.add_rule("Upsample", upsample_grad, /*differentiable=*/{0});
}

}  // namespace trainrt
