// Where the optimizer ops' tensors sit among a node's arguments, shared by every backend's
// kernels (ops/optimizer_loops.h for reference and cpu, ops/optimizer_cuda.cu), so the
// argument layouts of ops/optimizer.cpp's header are read in one place:
//
//   const SgdTensors<float> t = sgd_tensors<float>(k);                 // SGD
//   const std::vector<AdamTensors<float>> ts = multi_adam_tensors<float>(k);  // MultiAdam
//
// Plain structs of pointers and a count: the cuda kernels take them by value.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/core/kernel.h"

namespace trainrt {

// One parameter's tensors (SGD): buf, buf_out nullptr without a momentum buffer (or its output).
template <typename T>
struct SgdTensors {
  const T *p, *g, *buf;
  T *out, *buf_out;
  int64_t n;
};

// One parameter's tensors (Adam).
template <typename T>
struct AdamTensors {
  const T *p, *g, *m, *v;
  T *out, *m_out, *v_out;
  int64_t n;
};

//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
template <typename T>
SgdTensors<T> sgd_tensors(const KernelContext& k) {
  const bool has_buf = k.has_input(4);
  return {.p = k.in(0).data<T>(),
          .g = k.in(1).data<T>(),
          .buf = has_buf ? k.in(4).data<T>() : nullptr,
          .out = k.out(0).data<T>(),
          .buf_out = has_buf && k.has_output(1) ? k.out(1).data<T>() : nullptr,
          .n = k.in(0).numel()};
}

//   Adam(param, grad, lr, step, exp_avg, exp_avg_sq) -> param', exp_avg', exp_avg_sq'
template <typename T>
AdamTensors<T> adam_tensors(const KernelContext& k) {
  return {.p = k.in(0).data<T>(),
          .g = k.in(1).data<T>(),
          .m = k.in(4).data<T>(),
          .v = k.in(5).data<T>(),
          .out = k.out(0).data<T>(),
          .m_out = k.out(1).data<T>(),
          .v_out = k.out(2).data<T>(),
          .n = k.in(0).numel()};
}

// Whether a MultiSGD node with these argument counts carries momentum buffers: 2 + 2n
// inputs and n outputs without, 2 + 3n inputs and 2n outputs with.
inline bool multi_sgd_has_buffers(size_t inputs, size_t outputs) { return inputs - 2 != 2 * outputs; }

//   MultiSGD(lr, step, p_1, g_1, [m_1], p_2, g_2, [m_2], ...) -> p_1', [m_1'], p_2', [m_2'], ...
template <typename T>
std::vector<SgdTensors<T>> multi_sgd_tensors(const KernelContext& k) {
  const size_t outs = k.outputs.size();
  const bool buffers = multi_sgd_has_buffers(k.inputs.size(), outs);
  const size_t per_in = buffers ? 3 : 2, per_out = buffers ? 2 : 1;
  std::vector<SgdTensors<T>> ts;
  for (size_t i = 2, o = 0; o < outs; i += per_in, o += per_out)
    ts.push_back({.p = k.in(i).data<T>(),
                  .g = k.in(i + 1).data<T>(),
                  .buf = buffers ? k.in(i + 2).data<T>() : nullptr,
                  .out = k.out(o).data<T>(),
                  .buf_out = buffers ? k.out(o + 1).data<T>() : nullptr,
                  .n = k.in(i).numel()});
  return ts;
}

//   MultiAdam(lr, step, p_1, g_1, exp_avg_1, exp_avg_sq_1, ...) -> p_1', exp_avg_1', exp_avg_sq_1', ...
template <typename T>
std::vector<AdamTensors<T>> multi_adam_tensors(const KernelContext& k) {
  std::vector<AdamTensors<T>> ts;
  for (size_t i = 2, o = 0; o < k.outputs.size(); i += 4, o += 3)
    ts.push_back({.p = k.in(i).data<T>(),
                  .g = k.in(i + 1).data<T>(),
                  .m = k.in(i + 2).data<T>(),
                  .v = k.in(i + 3).data<T>(),
                  .out = k.out(o).data<T>(),
                  .m_out = k.out(o + 1).data<T>(),
                  .v_out = k.out(o + 2).data<T>(),
                  .n = k.in(i).numel()});
  return ts;
}

}  // namespace trainrt
