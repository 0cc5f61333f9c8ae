// How `trainrt selftest` compares a device's run with the reference backend, node by
// node (launch/cmd_selftest.cpp runs it; tests/launch/test_selftest_compare.cpp feeds
// it made-up device values).
//
//   SelftestWorst w;
//   std::string failure = selftest_replay(graph, given, recorded, MathPrecision::fp32,
//                                         /*training=*/true, 1e-4, w);
//   // "" when every recorded value agrees; else the first node and value that does not
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "graph/ir.h"
#include "ops/core/kernel.h"
#include "runtime/executor.h"

namespace trainrt {

struct SelftestWorst {
  double error = 0;
  std::string where;
  size_t values = 0;
  size_t sensitive = 0;  // over the tolerance, within what 64 last places of their inputs move
};

// Scale-relative difference of two tensors of one shape (any layout): the largest
// |got - want| over the largest |want|. Equal non-finite values (an fp16 overflow both
// backends make) agree; a non-finite value on one side only is an infinite error.
struct SelftestDifference {
  double diff = 0, scale = 0;
  double error() const { return diff / std::max(scale, 1e-6); }
};
// `rounded` (bf16/fp16): both are outputs that each side rounded to that precision
// (math_rounded_outputs); an fp32 difference within the tolerance may round to
// neighbouring 16-bit numbers, so each element's difference counts less one 16-bit
// spacing at its magnitude; `residual`: a value added in fp32 after that rounding
// (FusedConv's Z), so the spacing is taken at the magnitude of the element less it.
SelftestDifference selftest_difference(const Tensor& got, const Tensor& want,
                                       MathPrecision rounded = MathPrecision::fp32, const Tensor* residual = nullptr);

// The default --tolerance of `trainrt selftest`, derived from the arithmetic the run
// uses (u: unit roundoff, half a last place: TF32 and fp16 2^-11, bf16 2^-8):
//   fp32, strict math      1e-4: only the summation order differs from the reference
//   fp32, --fp32-math tf32 10 u(TF32) = 4.9e-3: TF32 tensor cores round each input to
//                          10 significand bits, which the reference does not do
//   bf16 / fp16            max(u/8, 1e-4) = 4.9e-4 / 1e-4: the reference rounds the same
//                          inputs, so a correct kernel differs by summation order only, and
//                          one that skipped the rounding (off by about u) fails
// tf32 counts only under fp32: TF32 holds rounded bf16/fp16 inputs exactly.
double selftest_default_tolerance(MathPrecision math, bool tf32);

// Node by node on the device's own inputs: each node of `g` runs alone on the reference
// backend, in `math`, on the values the device's run gave its inputs (`got`, else
// `given`: feeds, initializers, state before the step), and its outputs in `got` are
// compared with the reference's. Returns "" or the first disagreement, naming the node
// and value; `worst` keeps the largest error within `tol` and counts the values.
// `run_seed`: the device's run seed (TrainingSession::next_run_seed before its step), with
// which each training Dropout and BatchNormalizationReluDropout redraws the device's masks
// and is compared too; without it they pass on as the device made them.
std::string selftest_replay(const Graph& g, const TensorMap& given, const TensorMap& got, MathPrecision math,
                            bool training, double tol, SelftestWorst& worst,
                            std::optional<uint64_t> run_seed = std::nullopt);

}  // namespace trainrt
