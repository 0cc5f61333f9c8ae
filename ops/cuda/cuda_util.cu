// The CUDA context, error checks and kernel helpers of ops/cuda/cuda_util.h. Compiled and linked in CI;
// run only where a GPU exists.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/gpu_reason.h"
#include "ops/cuda/graph_fallback.h"

namespace trainrt::cuda {

namespace {
int chosen_device = 0;
std::mutex context_mu;
Context* the_context = nullptr;
void* work[2] = {nullptr, nullptr};  // per lane
size_t work_bytes[2] = {0, 0};
std::vector<void*> outgrown;  // earlier workspaces, kept for what still names them
}  // namespace

void set_device(int device) {
  std::lock_guard<std::mutex> lock(context_mu);
  if (the_context && the_context->device != device)
    throw_internal("cuda::set_device",
                   "the CUDA context already exists on device " + std::to_string(the_context->device));
  chosen_device = device;
}

static_assert(cudaErrorStubLibrary == kCudaErrorStubLibrary);
static_assert(cudaErrorInsufficientDriver == kCudaErrorInsufficientDriver);
static_assert(cudaErrorDevicesUnavailable == kCudaErrorDevicesUnavailable);
static_assert(cudaErrorNoDevice == kCudaErrorNoDevice);
static_assert(cudaErrorSystemDriverMismatch == kCudaErrorSystemDriverMismatch);

GpuProbe probe_gpu() {
  GpuProbe p;
  const cudaError_t e = cudaGetDeviceCount(&p.count);
  p.error = static_cast<int>(e);
  if (e != cudaSuccess) {
    p.error_name = cudaGetErrorName(e);
    p.count = 0;
  }
  // 0 when no driver library could be loaded (CUDA runtime API: cudaDriverGetVersion).
  if (cudaDriverGetVersion(&p.driver_version) != cudaSuccess) p.driver_version = 0;
  p.runtime_version = CUDART_VERSION;
  return p;
}

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw_internal(what, std::string("CUDA error ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void check(cudnnStatus_t s, const std::string& what) {
  if (s != CUDNN_STATUS_SUCCESS) throw_internal(what, std::string("cuDNN error ") + cudnnGetErrorString(s));
}

void check(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_internal(what, "cuBLAS error " + std::to_string(static_cast<int>(s)));
}

// The current device is a per-thread setting in CUDA: a thread other than the one that
// created the context (a communicator's, a test's rank thread) selects it on first use.
static thread_local bool device_set_here = false;

Context& context() {
  std::lock_guard<std::mutex> lock(context_mu);
  if (the_context) {
    if (!device_set_here) {
      check(cudaSetDevice(the_context->device), "cudaSetDevice");
      device_set_here = true;
    }
    return *the_context;
  }
  const GpuProbe probe = probe_gpu();
  const int count = probe.count;
  if (const std::string why = no_gpu_reason(probe); !why.empty())
    throw_unsupported("--device cuda", "no usable GPU here (" + why + ")");
  if (chosen_device < 0 || chosen_device >= count)
    throw_bad_input("--device cuda",
                    "device " + std::to_string(chosen_device) + " does not exist (" + std::to_string(count) + " GPUs)");
  auto c = std::make_unique<Context>();
  c->device = chosen_device;
  check(cudaSetDevice(c->device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  c->compute = c->stream;
  check(cudnnCreate(&c->cudnn), "cudnnCreate");
  check(cudnnSetStream(c->cudnn, c->stream), "cudnnSetStream");
  check(cublasLtCreate(&c->lt), "cublasLtCreate");
  device_set_here = true;
  the_context = c.release();  // lives until the process ends: kernels may run at exit
  return *the_context;
}

namespace {
void* lane_workspace(int lane, size_t bytes) {
  std::lock_guard<std::mutex> lock(context_mu);
  if (bytes <= work_bytes[lane]) return work[lane];
  // An outgrown buffer is kept, not freed: queued kernels and CUDA graphs captured
  // earlier (Backend::replay) name it. Growing at least twofold keeps all of them
  // together below the final size.
  const size_t grown = std::max(bytes, 2 * work_bytes[lane]);
  void* p = nullptr;
  check(cudaMalloc(&p, grown), "cudaMalloc workspace of " + std::to_string(grown) + " bytes");
  if (work[lane]) outgrown.push_back(work[lane]);
  work[lane] = p;
  work_bytes[lane] = grown;
  return p;
}
}  // namespace

void* workspace(size_t bytes) { return lane_workspace(context().lane, bytes); }

void reserve_side_workspace(size_t bytes) {
  context();
  if (bytes) (void)lane_workspace(1, bytes);
}

cudaStream_t side_stream() {
  Context& c = context();
  std::lock_guard<std::mutex> lock(context_mu);
  if (!c.side) check(cudaStreamCreateWithFlags(&c.side, cudaStreamNonBlocking), "cudaStreamCreate (second compute)");
  return c.side;
}

SideLane::SideLane() {
  Context& c = context();
  const cudaStream_t side = side_stream();
  check(cudnnSetStream(c.cudnn, side), "cudnnSetStream (second compute stream)");
  c.stream = side;
  c.lane = 1;
}

SideLane::~SideLane() {
  Context& c = context();
  (void)cudnnSetStream(c.cudnn, c.compute);  // cannot fail for a valid handle and stream
  c.stream = c.compute;
  c.lane = 0;
}

std::string what(const Node& n, const char* call) {
  return std::string(call) + " (" + n.op_type + " '" + n.name + "')";
}

void check_launch(const Node& n, const char* kernel) { check(cudaGetLastError(), what(n, kernel)); }

void run_reference(KernelContext& ctx, const char* why) {
  const Kernel* k = registry().kernels.find("reference", ctx.node.domain, ctx.node.op_type);
  if (!k) throw_internal(what(ctx.node, "cuda host fallback"), "no reference kernel");
  if (const std::string line = host_fallback_notices().first(ctx.node.op_type, ctx.node.name, why); !line.empty())
    std::fprintf(stderr, "%s\n", line.c_str());
  fallback_log().record(
      {ctx.node.op_type, ctx.node.name, "", why, "the host reference kernel (copies and a sync per call)"});
  // Device memory: the reference kernel runs on host copies of the arguments.
  cudaStream_t stream = context().stream;
  // Host copies keep the arguments' layouts; the reference kernel reads Plain copies.
  const Kernel plain = [k](KernelContext& c) { run_on_plain_copies(*k, c); };
  run_on_host_copies(
      plain, ctx,
      [&](void* to, const void* from, size_t n) {
        check(cudaMemcpyAsync(to, from, n, cudaMemcpyDefault, stream), what(ctx.node, "copy for the host fallback"));
      },
      [&] { check(cudaStreamSynchronize(stream), what(ctx.node, "cudaStreamSynchronize before the host fallback")); },
      is_device_memory);
}

bool is_device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

const std::string& gpu_name() {
  static const std::string name = [] {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, context().device), "cudaGetDeviceProperties");
    return std::string(prop.name);
  }();
  return name;
}

int sm_count() {
  static const int count = [] {
    int n = 0;
    check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, context().device), "cudaDeviceGetAttribute");
    return n;
  }();
  return count;
}

const std::string& cudnn_version() {
  static const std::string version = [] {
    const size_t v = cudnnGetVersion();
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
  }();
  return version;
}

bool capturing(const Node& node) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(context().stream, &capture), what(node, "cudaStreamIsCapturing"));
  return capture != cudaStreamCaptureStatusNone;
}

std::optional<double> time_calls(const Node& node, const TimingPolicy& p, const std::function<bool()>& call) {
  cudaStream_t stream = context().stream;
  for (int i = 0; i < p.warmup; ++i)
    if (!call()) {
      check(cudaStreamSynchronize(stream), what(node, "cudaStreamSynchronize"));
      return std::nullopt;
    }
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), what(node, "cudaEventCreate"));
  std::unique_ptr<CUevent_st, void (*)(cudaEvent_t)> own_start(start, [](cudaEvent_t e) { cudaEventDestroy(e); });
  check(cudaEventCreate(&stop), what(node, "cudaEventCreate"));
  std::unique_ptr<CUevent_st, void (*)(cudaEvent_t)> own_stop(stop, [](cudaEvent_t e) { cudaEventDestroy(e); });
  check(cudaEventRecord(start, stream), what(node, "cudaEventRecord"));
  const int repeats = std::max(p.repeats, 1);
  for (int i = 0; i < repeats; ++i)
    if (!call()) {
      check(cudaStreamSynchronize(stream), what(node, "cudaStreamSynchronize"));  // the queued calls end first
      return std::nullopt;
    }
  check(cudaEventRecord(stop, stream), what(node, "cudaEventRecord"));
  check(cudaEventSynchronize(stop), what(node, "cudaEventSynchronize"));
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), what(node, "cudaEventElapsedTime"));
  return static_cast<double>(ms) / repeats;
}

namespace {
__global__ void round_kernel(const float* from, float* to, int64_t n, MathPrecision m) {
  TRAINRT_GRID_STRIDE(i, n) { to[i] = round_to_math(from[i], m); }
}
}  // namespace

void round_to_math(const float* from, float* to, int64_t n, MathPrecision m, const Node& node) {
  if (n == 0) return;
  round_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(from, to, n, m);
  check_launch(node, "round_kernel");
}

namespace {
__global__ void narrow_kernel(const float* from, uint16_t* to, int64_t n, bool bf16) {
  TRAINRT_GRID_STRIDE(i, n) { to[i] = bf16 ? float_to_bfloat16(from[i]) : float_to_half(from[i]); }
}
}  // namespace

void narrow_to_math(const float* from, uint16_t* to, int64_t n, MathPrecision m, const Node& node) {
  if (n == 0) return;
  if (m == MathPrecision::fp32) throw_internal(what(node, "narrow_to_math"), "fp32 has no 16-bit copy");
  narrow_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(from, to, n, m == MathPrecision::bf16);
  check_launch(node, "narrow_kernel");
}

namespace {
__global__ void widen_kernel(const uint16_t* from, float* to, int64_t n, bool bf16) {
  TRAINRT_GRID_STRIDE(i, n) { to[i] = bf16 ? bfloat16_to_float(from[i]) : half_to_float(from[i]); }
}
}  // namespace

void widen_from_math(const uint16_t* from, float* to, int64_t n, MathPrecision m, const Node& node) {
  if (n == 0) return;
  if (m == MathPrecision::fp32) throw_internal(what(node, "widen_from_math"), "fp32 has no 16-bit values");
  widen_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(from, to, n, m == MathPrecision::bf16);
  check_launch(node, "widen_kernel");
}

std::vector<size_t> rounded_inputs(const KernelContext& ctx) {
  if (ctx.math == MathPrecision::fp32) return {};
  std::vector<bool> wanted(ctx.outputs.size());
  for (size_t i = 0; i < wanted.size(); ++i) wanted[i] = ctx.has_output(i);
  std::vector<size_t> in;
  for (size_t i : math_rounded_inputs(ctx.node, wanted))
    if (ctx.has_input(i) && (ctx.in(i).dtype() == DataType::Float32 || stored_narrow(ctx, ctx.in(i)))) in.push_back(i);
  return in;
}

bool stored_narrow(const KernelContext& ctx, const Tensor& t) { return stored_16bit(t, ctx.math); }

size_t math_bytes(const KernelContext& ctx) {
  Carve carve;
  for (size_t i : rounded_inputs(ctx)) carve.take(static_cast<size_t>(ctx.in(i).numel()) * sizeof(float));
  return carve.size;
}

Tensor wide_shape(const Tensor& t) {
  if (!t.narrowed()) return t;
  Tensor w(DataType::Float32, t.dims(), nullptr);
  w.set_layout(t.layout());
  return w;
}

NarrowInputs narrow_inputs(const KernelContext& ctx, std::byte* base) {
  NarrowInputs r;
  const std::vector<size_t> rounded = rounded_inputs(ctx);
  if (rounded.empty()) return r;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) r.t.push_back(ctx.has_input(i) ? ctx.in(i) : Tensor());
  const DataType type = ctx.math == MathPrecision::bf16 ? DataType::BFloat16 : DataType::Float16;
  struct Job {
    const float* from;
    uint16_t* to;
    int64_t n;
  };
  std::vector<Job> jobs;
  Carve carve;
  for (size_t i : rounded) {
    const Tensor& t = ctx.in(i);
    const size_t at_offset = carve.take(static_cast<size_t>(t.numel()) * sizeof(float));  // math_bytes' place
    if (stored_narrow(ctx, t)) continue;  // stored in 16 bits already: read as it is
    std::byte* at = base ? base + at_offset : nullptr;
    r.t[i] = Tensor(type, t.dims(), std::shared_ptr<std::byte[]>(std::shared_ptr<std::byte[]>(), at));
    r.t[i].set_layout(t.layout());
    jobs.push_back(Job{t.data<float>(), reinterpret_cast<uint16_t*>(at), t.numel()});
  }
  r.prepare = [jobs, node = &ctx.node, m = ctx.math, done = std::make_shared<bool>(false)] {
    if (*done) return;
    *done = true;
    for (const Job& j : jobs) narrow_to_math(j.from, j.to, j.n, m, *node);
  };
  r.ok = true;
  return r;
}

}  // namespace trainrt::cuda
