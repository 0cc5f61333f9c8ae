// The cpu backend's kernels for the backward ops (domain ai.trainrt), fp32 on
// oneDNN (ops/*_grad_dnnl.cpp); fp64 and cases oneDNN cannot express go to the
// reference kernel (dnnl_util::run_reference).
//
//   register_cpu_grad_kernels(r);   // last line of register_cpu_kernels()
//
//   ConvGrad(dY, X, W) -> (dX, dW, dB)          convolution_backward_data/_weights
//   BatchNormalizationGrad(dY, X, scale) -> (dX, dScale, dBias)
//                                               batch_normalization_backward
//   MaxPoolGrad(dY, X) -> dX                    by hand (oneTBB), reference tie rule
//   AveragePoolGrad(dY, X) -> dX                pooling_v2_backward
//   GlobalAveragePoolGrad(dY, X) -> dX          by hand (a broadcast)
//   ReluGrad(dY, Y) -> dX                       eltwise_backward, relu_use_dst_for_bwd
//   SumToShape(dY, X) -> dX                     by hand (oneTBB), the reference's order
//
// Why a separate header: the forward kernels' files (ops/*_dnnl.cpp) belong to their
// family; the backward kernels register only when their op's schema exists, so this
// runs after every register_<family>() like the forward ones.
#pragma once

namespace trainrt {
struct Registry;

// Registers every backward cpu kernel below (defined in ops/conv_grad_dnnl.cpp).
void register_cpu_grad_kernels(Registry& r);

void register_conv_grad_dnnl(Registry& r);
void register_norm_grad_dnnl(Registry& r);
void register_pool_grad_dnnl(Registry& r);
void register_eltwise_grad_dnnl(Registry& r);
void register_sum_to_shape_cpu(Registry& r);  // ops/sum_to_shape_cpu.cpp
}  // namespace trainrt
