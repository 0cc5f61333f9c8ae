// The cuda backend's elementwise kernels: Relu, Add, Sum, ReluGrad, SumToShape, and
// Dropout with its two gradients (DropoutGrad, DropoutReluGrad), float32 and float64.
//
//   Relu        y = x < 0 ? 0 : x (NaN stays NaN)        ReluGrad   dX = Y > 0 ? dY : 0
//   Add         y = a + b, numpy broadcasting up to rank 8
//   Sum         y = ((0 + x0) + x1) + ...: the reference's order, so its bits
//   SumToShape  dX[j] = sum of the dY elements that read X[j] in the forward broadcast
//   Dropout     the counter-based mask of ops/misc.cpp, bit for bit
//
// Why own kernels: each is one pass over memory; cuDNN has no op with these exact
// semantics (Relu's NaN, Dropout's mask). Kernels run in place where the planner puts an
// output over an input (runtime/plan.cpp): every thread reads element i before writing it.
//
// SumToShape collapses dY's axes into kept runs (dX's) and reduced runs, as the cpu kernel
// does (ops/sum_to_shape_cpu.cpp). Innermost run kept (a bias gradient [N,K] -> [K]):
// a warp's lanes take 32 neighbouring dX elements, so reads are coalesced, and 8 rows
// split the reduction. Innermost run reduced ([N,C,H,W] -> [1,C,1,1]): one block per dX
// element strides over its contiguous runs. Sums are in double, so they may differ from
// the reference's sequential T sums by rounding only.
//
// Dropout: the mask is splitmix64 of (seed, element index), so the device draws exactly
// the host's mask; u >= ratio is tested as the integer (h >> 11) >= ceil(ratio * 2^53),
// which is the same comparison without a double per element. ratio and training_mode
// are read on the device (they are values, possibly changed between steps). A device
// kernel cannot throw: where the reference rejects a ratio outside [0, 1) in training,
// these kernels write NaN to every element (mask 0), so the loss shows it.
//
// Host fallbacks (reference kernel after a stream synchronisation): Add of integer
// dtypes (shape arithmetic) or with an output rank above 8, Sum with a broadcast input,
// SumToShape above rank 8, any dtype other than float32/float64.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/error.h"
#include "ops/core/cuda_util.h"

namespace trainrt::cuda {

namespace {

constexpr int kMaxRank = 8;
// Grid cap of kernels whose blocks first derive constants from device scalars.
constexpr unsigned kMaxBlocks = 1024;

// ---- Relu, ReluGrad, Add, Sum -------------------------------------------------

template <typename T>
__global__ void relu_kernel(const T* x, T* y, int64_t n) {
  TRAINRT_GRID_STRIDE(i, n) {
    const T v = x[i];
    y[i] = v < T(0) ? T(0) : v;
  }
}

template <typename T>
__global__ void relu_grad_kernel(const T* dy, const T* y, T* dx, int64_t n) {
  TRAINRT_GRID_STRIDE(i, n) { dx[i] = y[i] > T(0) ? dy[i] : T(0); }
}

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

template <typename T>
__global__ void add_kernel(const T* a, DeviceIndex ia, const T* b, DeviceIndex ib, T* y, int64_t n) {
  TRAINRT_GRID_STRIDE(i, n) { y[i] = a[ia(i)] + b[ib(i)]; }
}

constexpr int kSumInputs = 8;  // per launch; more inputs take further launches over y
template <typename T>
struct SumInputs {
  const T* x[kSumInputs];
  int count;
};

// y = (first ? 0 : y) + x0 + x1 + ..., left to right.
template <typename T>
__global__ void sum_kernel(SumInputs<T> in, bool first, T* y, int64_t n) {
  TRAINRT_GRID_STRIDE(i, n) {
    T acc = first ? T(0) : y[i];
    for (int k = 0; k < in.count; ++k) acc += in.x[k][i];
    y[i] = acc;
  }
}

void relu(KernelContext& ctx) {
  const int64_t n = ctx.in(0).numel();
  if (!with_float(ctx.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        relu_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(ctx.in(0).data<T>(), ctx.out(0).data<T>(), n);
        check_launch(ctx.node, "relu_kernel");
      }))
    run_reference(ctx);
}

void relu_grad(KernelContext& ctx) {
  const int64_t n = ctx.out(0).numel();
  if (!with_float(ctx.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        relu_grad_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(ctx.in(0).data<T>(), ctx.in(1).data<T>(),
                                                                           ctx.out(0).data<T>(), n);
        check_launch(ctx.node, "relu_grad_kernel");
      }))
    run_reference(ctx);
}

void add(KernelContext& ctx) {
  const Tensor &a = ctx.in(0), &b = ctx.in(1);
  Tensor& y = ctx.out(0);
  DeviceIndex ia, ib;
  const bool ok = device_index(a.dims(), y.dims(), ia) && device_index(b.dims(), y.dims(), ib);
  if (!ok || !with_float(a.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = y.numel();
        add_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(a.data<T>(), ia, b.data<T>(), ib, y.data<T>(), n);
        check_launch(ctx.node, "add_kernel");
      }))
    run_reference(ctx);
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
          for (int k = 0; k < in.count; ++k) in.x[k] = ctx.in(k0 + static_cast<size_t>(k)).data<T>();
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

// ---- Dropout -------------------------------------------------------------------

__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Dropout's optional ratio and training_mode inputs, read on the device.
struct DropoutOptions {
  const void* ratio = nullptr;  // scalar of ratio_type; nullptr: 0.5
  DataType ratio_type = DataType::Float32;
  const uint8_t* training_mode = nullptr;  // bool scalar; nullptr: false
  bool training = false;                   // KernelContext::training
};

// What every thread of a launch needs, derived once per block by thread 0.
template <typename T>
struct DropoutConstants {
  bool training, valid;  // valid: ratio in [0, 1), the reference's check
  uint64_t threshold;    // keep when (h >> 11) >= threshold, i.e. u >= ratio
  T scale;               // 1 / (1 - ratio) in training, else 1; NaN when !valid
};

template <typename T>
__device__ DropoutConstants<T> dropout_constants(const DropoutOptions& o) {
  double ratio = 0.5;
  if (o.ratio) switch (o.ratio_type) {
      case DataType::Float64:
        ratio = *static_cast<const double*>(o.ratio);
        break;
      case DataType::Float16:
        ratio = __half2float(*static_cast<const __half*>(o.ratio));
        break;
      case DataType::BFloat16:
        ratio = __bfloat162float(*static_cast<const __nv_bfloat16*>(o.ratio));
        break;
      default:
        ratio = *static_cast<const float*>(o.ratio);
        break;
    }
  DropoutConstants<T> c;
  c.training = o.training || (o.training_mode && *o.training_mode != 0);
  c.valid = ratio >= 0.0 && ratio < 1.0;
  // u = k * 2^-53 exactly (k < 2^53), so u >= ratio <=> k >= ceil(ratio * 2^53), exact too.
  c.threshold = c.valid ? static_cast<uint64_t>(ceil(ratio * 9007199254740992.0)) : 0;
  c.scale = !c.training ? T(1) : c.valid ? static_cast<T>(1.0 / (1.0 - ratio)) : static_cast<T>(nan(""));
  return c;
}

template <typename T>
__device__ DropoutConstants<T> block_dropout_constants(const DropoutOptions& o) {
  __shared__ DropoutConstants<T> shared;
  if (threadIdx.x == 0) shared = dropout_constants<T>(o);
  __syncthreads();
  return shared;
}

template <typename T>
__global__ void dropout_kernel(const T* x, T* y, uint8_t* mask, int64_t n, uint64_t key, DropoutOptions o) {
  const DropoutConstants<T> c = block_dropout_constants<T>(o);
  TRAINRT_GRID_STRIDE(i, n) {
    if (!c.training) {  // inference: identity, mask all true
      y[i] = x[i];
      if (mask) mask[i] = 1;
      continue;
    }
    const bool keep =
        c.valid && (splitmix64(key + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 11) >= c.threshold;
    y[i] = keep ? x[i] * c.scale : c.valid ? T(0) : c.scale;
    if (mask) mask[i] = keep ? 1 : 0;
  }
}

// DropoutGrad (kRelu false): dX = mask ? dY * scale : 0.
// DropoutReluGrad (kRelu true, `keep` is Z): dX = Z > 0 ? dZ * scale : 0.
template <typename T, bool kRelu>
__global__ void dropout_grad_kernel(const T* dy, const void* keep, T* dx, int64_t n, DropoutOptions o) {
  const DropoutConstants<T> c = block_dropout_constants<T>(o);
  TRAINRT_GRID_STRIDE(i, n) {
    bool kept;
    if constexpr (kRelu)
      kept = static_cast<const T*>(keep)[i] > T(0);
    else
      kept = static_cast<const uint8_t*>(keep)[i] != 0;
    dx[i] = c.training && !c.valid ? c.scale : kept ? dy[i] * c.scale : T(0);
  }
}

// Inputs `ratio_at` (ratio) and `ratio_at + 1` (training_mode), either optional.
bool dropout_options(const KernelContext& ctx, size_t ratio_at, DropoutOptions& o) {
  o.training = ctx.training;
  if (ctx.has_input(ratio_at)) {
    o.ratio = ctx.in(ratio_at).raw();
    o.ratio_type = ctx.in(ratio_at).dtype();
    if (o.ratio_type != DataType::Float32 && o.ratio_type != DataType::Float64 && o.ratio_type != DataType::Float16 &&
        o.ratio_type != DataType::BFloat16)
      return false;
  }
  if (ctx.has_input(ratio_at + 1)) {
    if (ctx.in(ratio_at + 1).dtype() != DataType::Bool) return false;
    o.training_mode = ctx.in(ratio_at + 1).data<uint8_t>();
  }
  return true;
}

void dropout(KernelContext& ctx) {
  DropoutOptions o;
  const Tensor& x = ctx.in(0);
  // The reference's key: splitmix64(seed), or splitmix64(seed ^ splitmix64(attr seed)).
  uint64_t key = ctx.seed;
  if (ctx.node.has_attr("seed")) key ^= splitmix64(static_cast<uint64_t>(ctx.node.attr_int("seed", 0)));
  key = splitmix64(key);
  uint8_t* mask = ctx.has_output(1) ? ctx.out(1).data<uint8_t>() : nullptr;
  if (!dropout_options(ctx, 1, o) || !with_float(x.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = x.numel();
        const unsigned blocks = std::min(blocks_for(n), kMaxBlocks);
        dropout_kernel<<<blocks, kThreads, 0, context().stream>>>(x.data<T>(), ctx.out(0).data<T>(), mask, n, key, o);
        check_launch(ctx.node, "dropout_kernel");
      }))
    run_reference(ctx);
}

template <bool kRelu>
void dropout_grad(KernelContext& ctx) {
  DropoutOptions o;
  const Tensor& dy = ctx.in(0);
  if (!dropout_options(ctx, 2, o) || !with_float(dy.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = dy.numel();
        const unsigned blocks = std::min(blocks_for(n), kMaxBlocks);
        dropout_grad_kernel<T, kRelu>
            <<<blocks, kThreads, 0, context().stream>>>(dy.data<T>(), ctx.in(1).raw(), ctx.out(0).data<T>(), n, o);
        check_launch(ctx.node, "dropout_grad_kernel");
      }))
    run_reference(ctx);
}

}  // namespace

void register_elementwise_cuda(Registry& r) {
  add_if_schema(r, "cuda", "", "Relu", relu);
  add_if_schema(r, "cuda", "", "Add", add);
  add_if_schema(r, "cuda", "", "Sum", sum);
  add_if_schema(r, "cuda", kTrainrtDomain, "ReluGrad", relu_grad);
  add_if_schema(r, "cuda", kTrainrtDomain, "SumToShape", sum_to_shape);
  add_if_schema(r, "cuda", "", "Dropout", dropout);
  add_if_schema(r, "cuda", kTrainrtDomain, "DropoutGrad", dropout_grad<false>);
  add_if_schema(r, "cuda", kTrainrtDomain, "DropoutReluGrad", dropout_grad<true>);
}

}  // namespace trainrt::cuda
