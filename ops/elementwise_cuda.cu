// The cuda backend's elementwise kernels: Relu, Add, Sub, Mul, Div, Sum, ReluGrad,
// SumToShape, the activations Sigmoid, Tanh, LeakyRelu, Gelu, Clip, HardSigmoid,
// HardSwish and their gradients, Neg, Sqrt, Exp, Log, Reciprocal, Erf (with SqrtGrad,
// ErfGrad): float32, and float64 for Relu, Add, Sum, ReluGrad, SumToShape (Dropout's:
// ops/misc_cuda.cu).
//
//   Relu        y = x < 0 ? 0 : x (NaN stays NaN)        ReluGrad   dX = Y > 0 ? dY : 0
//   Add, Sub, Mul, Div   y = a op b, numpy broadcasting up to rank 8
//   the unary table's ops and their *Grad (ops/unary_ops.h): the functors of
//               ops/core/unary_math.h, which the reference and cpu loops run too
//               (map_kernel, grad_map_kernel); Clip's min/max inputs are read on the device
//   Sum         y = ((0 + x0) + x1) + ...: the reference's order, so its bits
//   SumToShape  dX[j] = sum of the dY elements that read X[j] in the forward broadcast
//
// Why own kernels: each is one pass over memory; cuDNN has no op with these exact
// semantics (Relu's NaN). Kernels run in place where the planner puts an
// output over an input (runtime/plan.cpp): every thread reads element i before writing it.
// The same-index maps (Relu, ReluGrad, the activations and their gradients, and Add, Sub,
// Mul, Div without broadcasting) take fp32 values four at a time, with 16-byte loads and
// stores, where the count is a multiple of 4 and the buffers are 16-byte aligned (arena
// offsets are 64-byte aligned); the per-element arithmetic is the scalar kernels'.
//
// SumToShape collapses dY's axes into kept runs (dX's) and reduced runs, as the cpu kernel
// does (ops/elementwise_cpu.cpp). Innermost run kept (a bias gradient [N,K] -> [K]):
// a warp's lanes take 32 neighbouring dX elements, so reads are coalesced, and 8 rows
// split the reduction. Innermost run reduced ([N,C,H,W] -> [1,C,1,1]): one block per dX
// element strides over its contiguous runs. Sums are in double, so they may differ from
// the reference's sequential T sums by rounding only.
//
// Host fallbacks (reference kernel after a stream synchronisation): Add and Mul of
// integer dtypes (shape arithmetic) or with an output rank above 8, Sub, Mul, Div and the
// activations of float64, Clip of integers, Sum with a broadcast input,
// SumToShape above rank 8, any dtype other than float32/float64.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "graph/error.h"
#include "ops/core/kernel_facts.h"
#include "ops/cuda/cuda_load16.h"
#include "ops/cuda/cuda_util.h"
#include "ops/unary_ops.h"

namespace trainrt::cuda {

namespace {

constexpr int kMaxRank = 8;

// ---- Relu, ReluGrad, Add, Sum -------------------------------------------------

// ops/core/broadcast.h's BroadcastIndex on the device: the input offset of output element i.
struct DeviceIndex {
  int rank = 0;
  bool same = true, scalar = false;
  int64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};

  __device__ int64_t operator()(int64_t i) const {
    if (same) return i;
    if (scalar) return 0;
    int64_t offset = 0;
    for (int k = rank - 1; k >= 0 && i > 0; --k) {
      offset += (i % dims[k]) * strides[k];
      i /= dims[k];
    }
    return offset;
  }
};

// False when the output's rank exceeds kMaxRank and `in` is really broadcast.
bool device_index(const std::vector<int64_t>& in, const std::vector<int64_t>& out, DeviceIndex& d) {
  d.same = element_count(in) == element_count(out);
  d.scalar = element_count(in) == 1;
  if (d.same || d.scalar) return true;
  if (out.size() > static_cast<size_t>(kMaxRank)) return false;
  d.rank = static_cast<int>(out.size());
  const size_t lead = out.size() - in.size();
  int64_t stride = 1;
  for (size_t k = in.size(); k-- > 0;) {
    d.strides[lead + k] = in[k] != 1 ? stride : 0;
    stride *= in[k];
  }
  std::copy(out.begin(), out.end(), d.dims);
  return true;
}

struct AddOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MulOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a * b;
  }
};
struct SubOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a - b;
  }
};
struct DivOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a / b;
  }
};

template <typename T, typename Op>
__global__ void binary_kernel(const T* a, DeviceIndex ia, const T* b, DeviceIndex ib, T* y, int64_t n, Op op) {
  TRAINRT_GRID_STRIDE(i, n) { y[i] = op(a[ia(i)], b[ib(i)]); }
}
// The same where an operand is a float32 value stored in 16 bits (A or B a Load16, its
// exact widening; Add only: runtime/narrow.h).
template <typename A, typename B, typename Op>
__global__ void binary16_kernel(A a, DeviceIndex ia, B b, DeviceIndex ib, float* y, int64_t n, Op op) {
  TRAINRT_GRID_STRIDE(i, n) { y[i] = op(static_cast<float>(load_at(a, ia(i))), static_cast<float>(load_at(b, ib(i)))); }
}

// ---- activations and their gradients --------------------------------------------

template <typename T, typename F>
__global__ void map_kernel(const T* x, T* y, int64_t n, F f) {
  TRAINRT_GRID_STRIDE(i, n) { y[i] = f(x[i]); }
}

// dX = f(dY, t), t the forward's input or output (the op's input 1).
template <typename T, typename F>
__global__ void grad_map_kernel(const T* dy, const T* t, T* dx, int64_t n, F f) {
  TRAINRT_GRID_STRIDE(i, n) { dx[i] = f(dy[i], t[i]); }
}

// The same maps four fp32 values at a time, with 16-byte loads and stores, over n4 groups
// of four (where vec4() holds); y may be one of the inputs, as in the scalar kernels.
template <typename F>
__global__ void map4_kernel(const float4* x, float4* y, int64_t n4, F f) {
  TRAINRT_GRID_STRIDE(i, n4) {
    const float4 v = x[i];
    y[i] = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
  }
}
template <typename F>
__global__ void zip4_kernel(const float4* a, const float4* b, float4* y, int64_t n4, F f) {
  TRAINRT_GRID_STRIDE(i, n4) {
    const float4 u = a[i], v = b[i];
    y[i] = make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w));
  }
}

// Whether n values of fp32 buffers at these addresses can go four at a time.
bool vec4(int64_t n, std::initializer_list<const void*> buffers) {
  if (n % 4 != 0) return false;
  for (const void* p : buffers)
    if (!aligned16(p)) return false;
  return true;
}

// y = f(x) over n values of type T: four at a time where vec4() holds for fp32.
template <typename T, typename F>
void launch_map(const Node& node, const T* x, T* y, int64_t n, F f) {
  if constexpr (std::is_same_v<T, float>)
    if (vec4(n, {x, y})) {
      map4_kernel<<<blocks_for(n / 4), kThreads, 0, context().stream>>>(reinterpret_cast<const float4*>(x),
                                                                        reinterpret_cast<float4*>(y), n / 4, f);
      return check_launch(node, "map4_kernel");
    }
  map_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(x, y, n, f);
  check_launch(node, "map_kernel");
}

// y = f(a, b) over n values of type T with the same index: four at a time where vec4() holds for fp32.
template <typename T, typename F>
void launch_zip(const Node& node, const T* a, const T* b, T* y, int64_t n, F f) {
  if constexpr (std::is_same_v<T, float>)
    if (vec4(n, {a, b, y})) {
      zip4_kernel<<<blocks_for(n / 4), kThreads, 0, context().stream>>>(reinterpret_cast<const float4*>(a),
                                                                        reinterpret_cast<const float4*>(b),
                                                                        reinterpret_cast<float4*>(y), n / 4, f);
      return check_launch(node, "zip4_kernel");
    }
  grad_map_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(a, b, y, n, f);
  check_launch(node, "grad_map_kernel");
}

// Clip's bounds: the min/max inputs (opset >= 11, read on the device: they may be
// computed values), else the min/max attributes (opset 6-10), else T's extremes.
template <typename T>
struct ClipBounds {
  const T* lo_at = nullptr;
  const T* hi_at = nullptr;
  T lo, hi;
  __device__ T low() const { return lo_at ? *lo_at : lo; }
  __device__ T high() const { return hi_at ? *hi_at : hi; }
};
template <typename T>
ClipBounds<T> clip_bounds(const KernelContext& ctx) {
  ClipBounds<T> b;
  b.lo = std::numeric_limits<T>::lowest();
  b.hi = std::numeric_limits<T>::max();
  const size_t first = ctx.node.domain.empty() ? 1 : 2;  // ClipGrad has dY first
  if (ctx.has_input(first)) b.lo_at = ctx.in(first).data<T>();
  if (ctx.has_input(first + 1)) b.hi_at = ctx.in(first + 1).data<T>();
  if (ctx.node.attrs.count("min")) b.lo_at = nullptr, b.lo = static_cast<T>(ctx.node.attr_float("min", 0.f));
  if (ctx.node.attrs.count("max")) b.hi_at = nullptr, b.hi = static_cast<T>(ctx.node.attr_float("max", 0.f));
  return b;
}
template <typename T>
struct ClipOp {
  ClipBounds<T> b;
  __device__ T operator()(T x) const {
    const T v = x < b.low() ? b.low() : x;
    return v > b.high() ? b.high() : v;
  }
};
template <typename T>
struct ClipGradOp {  // (dY, X)
  ClipBounds<T> b;
  __device__ T operator()(T dy, T x) const { return b.low() <= x && x <= b.high() ? dy : T(0); }
};

constexpr int kSumInputs = 8;  // per launch; more inputs take further launches over y
// x16[k]: input k's 16-bit bits where it is a float32 value stored so (runtime/narrow.h:
// a gradient its writer rounded, read as its exact widening), else null and x[k] reads it.
template <typename T>
struct SumInputs {
  const T* x[kSumInputs];
  const uint16_t* x16[kSumInputs];
  bool bf16;
  int count;
};

// y = (first ? 0 : y) + x0 + x1 + ..., left to right.
template <typename T>
__global__ void sum_kernel(SumInputs<T> in, bool first, T* y, int64_t n) {
  TRAINRT_GRID_STRIDE(i, n) {
    T acc = first ? T(0) : y[i];
    for (int k = 0; k < in.count; ++k)
      acc += in.x16[k] ? static_cast<T>(load_at(Load16{in.x16[k], in.bf16}, i)) : in.x[k][i];
    y[i] = acc;
  }
}

template <bool kFp64, typename F>
bool with_float_if(DataType t, F&& f) {
  if constexpr (kFp64)
    return with_float(t, f);
  else
    return t == DataType::Float32 ? (f(float{}), true) : false;
}

template <typename Op, bool kFp64 = false>
void binary(KernelContext& ctx) {
  const Tensor &a = ctx.in(0), &b = ctx.in(1);
  Tensor& y = ctx.out(0);
  DeviceIndex ia, ib;
  const bool ok = device_index(a.dims(), y.dims(), ia) && device_index(b.dims(), y.dims(), ib);
  const bool a16 = stored_narrow(ctx, a), b16 = stored_narrow(ctx, b);
  if (ok && (a16 || b16)) {  // float32 math on the 16-bit operands' widenings
    const int64_t n = y.numel();
    auto launch = [&](auto at, auto bt) {
      binary16_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(at, ia, bt, ib, y.data<float>(), n, Op{});
      check_launch(ctx.node, "binary16_kernel");
    };
    if (a16 && b16) return launch(load16(a, ctx.math), load16(b, ctx.math));
    if (a16) return launch(load16(a, ctx.math), b.data<float>());
    return launch(a.data<float>(), load16(b, ctx.math));
  }
  if (!ok || !with_float_if<kFp64>(a.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = y.numel();
        if (ia.same && ib.same) return launch_zip(ctx.node, a.data<T>(), b.data<T>(), y.data<T>(), n, Op{});
        binary_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(a.data<T>(), ia, b.data<T>(), ib, y.data<T>(),
                                                                        n, Op{});
        check_launch(ctx.node, "binary_kernel");
      }))
    run_reference(ctx);
}

// y = f(x) for an activation functor made per dtype by make(T{}); fp32 only (fp64 runs
// on the host: training on the cuda backend is fp32, and each dtype is another kernel
// for every GPU architecture in the binary).
template <typename Make>
void unary(KernelContext& ctx, Make make) {
  const int64_t n = ctx.in(0).numel();
  if (!with_float_if<false>(ctx.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        launch_map(ctx.node, ctx.in(0).data<T>(), ctx.out(0).data<T>(), n, make(tag));
      }))
    run_reference(ctx);
}

// dX = f(dY, t) for a gradient functor made per dtype by make(T{}); fp32 only.
template <typename Make>
void unary_grad(KernelContext& ctx, Make make) {
  const int64_t n = ctx.out(0).numel();
  if (!with_float_if<false>(ctx.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        launch_zip(ctx.node, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>(), n, make(tag));
      }))
    run_reference(ctx);
}

// A kernel of a functor without parameters.
// y = Op(x) and dX = Grad(dY, t) of a table op (ops/unary_ops.h) with the shared
// functors (ops/core/unary_math.h), built from the node's attributes. Relu also takes
// fp64 (the reference's float64 training graphs run on the device).
template <typename F>
void unary_op(KernelContext& ctx) {
  const F f = UnaryAttrs<F>::of(ctx.node);
  const int64_t n = ctx.in(0).numel();
  if (!with_float_if<std::is_same_v<F, unary_math::Relu>>(ctx.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        launch_map(ctx.node, ctx.in(0).data<T>(), ctx.out(0).data<T>(), n, f);
      }))
    run_reference(ctx);
}
template <typename G>
void unary_op_grad(KernelContext& ctx) {
  const G g = UnaryAttrs<G>::of(ctx.node);
  const int64_t n = ctx.out(0).numel();
  if (!with_float_if<std::is_same_v<G, unary_math::ReluGrad>>(ctx.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        launch_zip(ctx.node, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>(), n, g);
      }))
    run_reference(ctx);
}

void clip(KernelContext& ctx) {
  unary(ctx, [&](auto tag) { return ClipOp<decltype(tag)>{clip_bounds<decltype(tag)>(ctx)}; });
}
void clip_grad(KernelContext& ctx) {
  unary_grad(ctx, [&](auto tag) { return ClipGradOp<decltype(tag)>{clip_bounds<decltype(tag)>(ctx)}; });
}

void sum(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  for (const Tensor* x : ctx.inputs)
    if (x->numel() != y.numel()) return run_reference(ctx);
  if (!with_float(y.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = y.numel();
        for (size_t k0 = 0; k0 < ctx.inputs.size(); k0 += kSumInputs) {
          SumInputs<T> in{};
          in.count = static_cast<int>(std::min<size_t>(kSumInputs, ctx.inputs.size() - k0));
          in.bf16 = ctx.math == MathPrecision::bf16;
          for (int k = 0; k < in.count; ++k) {
            const Tensor& x = ctx.in(k0 + static_cast<size_t>(k));
            if (stored_narrow(ctx, x))
              in.x16[k] = x.data<uint16_t>();
            else
              in.x[k] = x.data<T>();
          }
          sum_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(in, k0 == 0, y.data<T>(), n);
          check_launch(ctx.node, "sum_kernel");
        }
      }))
    run_reference(ctx);
}

// ---- SumToShape ----------------------------------------------------------------

// Collapsed axes of dY, outermost first: sizes and dY strides.
struct Axes {
  int count = 0;
  int64_t size[kMaxRank] = {}, stride[kMaxRank] = {};

  // dY offset of the j-th multi-index over these axes (row-major).
  __device__ int64_t offset(int64_t j) const {
    int64_t off = 0;
    for (int k = count - 1; k >= 0; --k) {
      off += (j % size[k]) * stride[k];
      j /= size[k];
    }
    return off;
  }
};

constexpr int kRows = 8;  // threadIdx.y of sum_columns: rows that split one dX element's sum

// Innermost axis kept: block (32, kRows) sums dX elements tile*32 + threadIdx.x.
template <typename T>
__global__ void sum_columns(const T* dy, T* dx, int64_t n, Axes kept, Axes reduced, int64_t r_count) {
  __shared__ double rows[kRows][32];
  for (int64_t tile = blockIdx.x; tile * 32 < n; tile += gridDim.x) {
    const int64_t j = tile * 32 + threadIdx.x;
    double acc = 0;
    if (j < n) {
      const T* base = dy + kept.offset(j);
      for (int64_t r = threadIdx.y; r < r_count; r += kRows) acc += static_cast<double>(base[reduced.offset(r)]);
    }
    rows[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
      for (int y = 1; y < kRows; ++y) acc += rows[y][threadIdx.x];
      dx[j] = static_cast<T>(acc);
    }
    __syncthreads();
  }
}

// Innermost axis reduced: block b sums dX elements b, b + gridDim.x, ... one at a time.
template <typename T>
__global__ void sum_rows(const T* dy, T* dx, int64_t n, Axes kept, Axes reduced, int64_t r_count) {
  for (int64_t j = blockIdx.x; j < n; j += gridDim.x) {
    const T* base = dy + kept.offset(j);
    double acc = 0;
    for (int64_t r = threadIdx.x; r < r_count; r += kThreads) acc += static_cast<double>(base[reduced.offset(r)]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) dx[j] = static_cast<T>(acc);
  }
}

void sum_to_shape(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const std::vector<int64_t>&dyd = dy.dims(), &dxd = dx.dims();
  const int64_t n = dx.numel();
  if (n == dy.numel()) {  // nothing is broadcast: a copy, none when dX is over dY
    if (dx.raw() != dy.raw() && n > 0)
      check(cudaMemcpyAsync(dx.raw(), dy.raw(), dx.nbytes(), cudaMemcpyDefault, context().stream),
            what(ctx.node, "cudaMemcpyAsync"));
    return;
  }
  if (n == 0) return;
  if (dyd.size() > static_cast<size_t>(kMaxRank)) return run_reference(ctx);
  // Innermost axis first; neighbouring axes of one kind merge, keeping the inner stride.
  Axes kept, reduced;
  int last_kind = -1;  // 0 kept, 1 reduced
  bool inner_kept = false;
  int64_t stride = 1, r_count = 1;
  const size_t lead = dyd.size() - dxd.size();
  for (size_t k = dyd.size(); k-- > 0;) {
    const int64_t d = dyd[k], e = k < lead ? 1 : dxd[k - lead];
    if (d == 1) continue;
    const int kind = e == 1 ? 1 : 0;
    Axes& list = kind ? reduced : kept;
    if (kind == last_kind) {
      list.size[list.count - 1] *= d;
    } else {
      list.size[list.count] = d;
      list.stride[list.count] = stride;
      ++list.count;
    }
    if (last_kind < 0) inner_kept = kind == 0;
    if (kind) r_count *= d;
    last_kind = kind;
    stride *= d;
  }
  std::reverse(kept.size, kept.size + kept.count);
  std::reverse(kept.stride, kept.stride + kept.count);
  std::reverse(reduced.size, reduced.size + reduced.count);
  std::reverse(reduced.stride, reduced.stride + reduced.count);
  if (!with_float(dy.dtype(), [&](auto tag) {
        using T = decltype(tag);
        cudaStream_t s = context().stream;
        if (inner_kept) {
          const unsigned tiles = static_cast<unsigned>(std::min<int64_t>((n + 31) / 32, 65535));
          sum_columns<<<tiles, dim3(32, kRows), 0, s>>>(dy.data<T>(), dx.data<T>(), n, kept, reduced, r_count);
          check_launch(ctx.node, "sum_columns");
        } else {
          const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, 65535));
          sum_rows<<<blocks, kThreads, 0, s>>>(dy.data<T>(), dx.data<T>(), n, kept, reduced, r_count);
          check_launch(ctx.node, "sum_rows");
        }
      }))
    run_reference(ctx);
}

}  // namespace

void register_elementwise_cuda(Registry& r) {
  // Same-shape arguments in one layout (Plain or ChannelsLast): the kernels are
  // position-independent loops; a broadcast takes Plain arguments.
#define TRAINRT_CUDA_UNARY(Op, ...) add_if_schema(r, "cuda", "", #Op, unary_op<unary_math::Op>, facts::elementwise);
#define TRAINRT_CUDA_UNARY_GRAD(Op, since, flops, Grad, ...) \
  TRAINRT_CUDA_UNARY(Op)                                     \
  add_if_schema(r, "cuda", kTrainrtDomain, #Grad, unary_op_grad<unary_math::Grad>, facts::elementwise);
  TRAINRT_UNARY_OPS(TRAINRT_CUDA_UNARY_GRAD)
  TRAINRT_UNARY_OPS_COMPOSITE_GRAD(TRAINRT_CUDA_UNARY)
#undef TRAINRT_CUDA_UNARY_GRAD
#undef TRAINRT_CUDA_UNARY
  add_if_schema(r, "cuda", "", "Add", binary<AddOp, true>, facts::elementwise);
  if (r.kernels.find("cuda", "", "Add"))  // a residual sum's rounded operands stored in 16 bits (binary16_kernel)
    r.kernels.set_narrow("cuda", "", "Add", facts::narrow_float_inputs({0, 1}));
  add_if_schema(r, "cuda", "", "Mul", binary<MulOp>, facts::elementwise);
  add_if_schema(r, "cuda", "", "Sub", binary<SubOp>, facts::elementwise);
  add_if_schema(r, "cuda", "", "Div", binary<DivOp>, facts::elementwise);
  add_if_schema(r, "cuda", "", "Clip", clip, facts::clip);
  add_if_schema(r, "cuda", kTrainrtDomain, "ClipGrad", clip_grad, facts::clip);
  add_if_schema(r, "cuda", "", "Sum", sum, facts::elementwise);
  if (r.kernels.find("cuda", "", "Sum"))  // every input may be a rounded gradient stored in 16 bits (sum_kernel)
    r.kernels.set_narrow("cuda", "", "Sum", [](const Graph&, const Node& n) {
      NodeSlots s;
      s.inputs.assign(n.inputs.size(), true);
      return s;
    });
  add_if_schema(r, "cuda", kTrainrtDomain, "SumToShape", sum_to_shape, facts::sum_to_shape);
  if (r.kernels.find("cuda", kTrainrtDomain, "SumToShape"))  // `like` lends only its dims: any storage
    r.kernels.set_narrow("cuda", kTrainrtDomain, "SumToShape", facts::narrow_float_inputs({1}));
}

}  // namespace trainrt::cuda
