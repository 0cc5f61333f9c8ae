#include "runtime/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

#include "graph/error.h"
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/gpu_reason.h"
#include "runtime/cuda/non_finite.h"
#include "runtime/rank_environment.h"

namespace trainrt {

namespace {

class CudaBackend : public Backend {
 public:
  CudaBackend() : Backend("cuda", {"cpu", "reference"}) {
    // Activations between the kernels that take it (Conv, BatchNormalization, pools,
    // elementwise ops) stay NHWC, the layout cuDNN's tensor-core convolutions read
    // without transposing; everything else, and every host fallback's argument, is Plain.
    blocked_layout = Layout::ChannelsLast;
    const GpuProbe probe = cuda::probe_gpu();  // no driver, a driver too old, no device: each its own words
    if (const std::string why = no_gpu_reason(probe); !why.empty())
      throw_unsupported("--device cuda", "no usable GPU here (" + why + ")");
    cuda::set_device(rank_environment().local_rank % probe.count);
    cuda::context();  // creates the stream and handles now, so a failure shows before training
    cuda::check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate (copies)");
    cuda::check(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "cudaStreamCreate (collectives)");
  }
  ~CudaBackend() override {
    (void)cudaStreamSynchronize(copy_stream_);
    (void)cudaStreamSynchronize(comm_stream_);
    (void)cudaStreamDestroy(copy_stream_);
    (void)cudaStreamDestroy(comm_stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  std::string name() const override { return "cuda"; }
  bool asynchronous() const override { return true; }

  // Device memory (no managed memory: it would migrate pages whenever the host looks).
  // The host sees it only through copy() (host_visible() is false).
  std::shared_ptr<std::byte[]> allocate(size_t bytes) const override {
    return allocation(bytes, cudaMalloc, cudaFree, "GPU memory", "): use a smaller batch");
  }
  bool host_visible() const override { return false; }

  // Pinned host memory: copies from and to it run asynchronously on the stream.
  std::shared_ptr<std::byte[]> allocate_host(size_t bytes) const override {
    return allocation(bytes, cudaMallocHost, cudaFreeHost, "pinned host memory", ")");
  }

  bool reaches(const void* p) const override { return cuda::is_device_memory(p); }

  size_t available_bytes() const override {
    cuda::context();
    size_t free = 0, total = 0;
    cuda::check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return free;
  }
  std::string available_source() const override {
    return "free memory of GPU " + std::to_string(cuda::context().device);
  }

  void copy(void* to, const void* from, size_t bytes) const override {
    if (!bytes) return;
    cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, cuda::context().stream), "copy to the GPU");
  }

  void copy_on(Stream s, void* to, const void* from, size_t bytes) const override {
    if (!bytes) return;
    cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream(s)), "copy to the GPU");
  }

  // An event without timing from the backend's free list (created only while the list is
  // empty), given back when its last handle goes: no cudaEventCreate per step. Recording
  // it again then is safe, since a cudaStreamWaitEvent already issued waits for the record
  // it saw, not a later one.
  Event record(Stream s) const override {
    cudaEvent_t e = nullptr;
    {
      std::lock_guard<std::mutex> lock(events_->mu);
      if (!events_->free.empty()) {
        e = events_->free.back();
        events_->free.pop_back();
      }
    }
    if (!e) cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    std::shared_ptr<CUevent_st> owned(e, [pool = events_](CUevent_st* x) { pool->give_back(x); });
    cuda::check(cudaEventRecord(e, stream(s)), "cudaEventRecord");
    return owned;
  }
  void wait(Stream s, const Event& e) const override {
    if (!e) return;
    auto* ev = static_cast<cudaEvent_t>(const_cast<void*>(e.get()));
    cuda::check(cudaStreamWaitEvent(stream(s), ev, 0), "cudaStreamWaitEvent");
  }
  void wait_host(const Event& e) const override {
    if (!e) return;
    cuda::check(cudaEventSynchronize(static_cast<cudaEvent_t>(const_cast<void*>(e.get()))), "waiting for a GPU event");
  }

  // CUDA graphs: the compute stream captures; the copy and collectives streams join the
  // capture by waiting for an event of it, and rejoin it before it ends, as CUDA requires
  // of every stream a captured graph forks.
  bool can_capture() const override { return true; }
  void begin_capture() const override {
    cuda::check(cudaStreamBeginCapture(cuda::context().compute, cudaStreamCaptureModeThreadLocal),
                "cudaStreamBeginCapture");
    const Event fork = record(Stream::compute);
    wait(Stream::copy, fork);
    wait(Stream::comm, fork);
  }
  Captured end_capture() const override {
    wait(Stream::compute, record(Stream::copy));
    wait(Stream::compute, record(Stream::comm));
    cudaGraph_t graph = nullptr;
    cuda::check(cudaStreamEndCapture(cuda::context().compute, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    cuda::check(e, "cudaGraphInstantiate");
    return std::shared_ptr<CUgraphExec_st>(exec, [](CUgraphExec_st* x) { (void)cudaGraphExecDestroy(x); });
  }
  void abort_capture() const noexcept override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cuda::context().compute, &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(cuda::context().compute, &graph);
      if (graph) (void)cudaGraphDestroy(graph);
    }
    (void)cudaGetLastError();  // the refused call's error is not the next call's
  }
  void replay(const Captured& c) const override {
    auto* exec = static_cast<cudaGraphExec_t>(const_cast<void*>(c.get()));
    cuda::check(cudaGraphLaunch(exec, cuda::context().compute), "cudaGraphLaunch");
  }

  // The plan's kernels' scratch memory, allocated before its first run (cuda::workspace),
  // and the second compute stream's for the second steps of pairs.
  void reserve_workspace(size_t bytes, size_t side_bytes) const override {
    if (bytes) (void)cuda::workspace(bytes);
    if (side_bytes) cuda::reserve_side_workspace(side_bytes);
  }

  // Two independent plan steps at once: the second on the second compute stream, after
  // an event of the compute stream marking what the first may not overlap (everything
  // before the pair), and the compute stream waits for the second's end before the
  // step after the pair. Captured like the rest: the side stream joins the capture by
  // the fork event and is joined back by the join event.
  void run_pair(const std::function<void()>& first, const std::function<void()>& second) const override {
    const Event fork = record(Stream::compute);
    first();
    wait(Stream::side, fork);
    {
      cuda::SideLane lane;
      second();
    }
    wait(Stream::compute, record(Stream::side));
  }

  void synchronize() const override {
    cuda::check(cudaStreamSynchronize(cuda::context().compute), "waiting for the GPU");
    cuda::check(cudaStreamSynchronize(copy_stream_), "waiting for the GPU's copies");
    cuda::check(cudaStreamSynchronize(comm_stream_), "waiting for the GPU's collectives");
    if (const cudaStream_t side = cuda::context().side)
      cuda::check(cudaStreamSynchronize(side), "waiting for the GPU's second compute stream");
  }

  // On the stream, into device memory the executor copies out before the step's synchronisation.
  void flag_non_finite(const Tensor& t, uint64_t* flag) const override { cuda::flag_non_finite(t, flag); }
  void round_outputs(const KernelContext& ctx, const std::vector<size_t>& outs) const override {
    for (size_t i : outs) {  // in place, on the stream the kernel ran on
      float* p = ctx.out(i).data<float>();
      cuda::round_to_math(p, p, static_cast<int64_t>(ctx.out(i).nbytes() / sizeof(float)), ctx.math, ctx.node);
    }
  }

 private:
  cudaStream_t stream(Stream s) const {
    switch (s) {
      case Stream::copy:
        return copy_stream_;
      case Stream::comm:
        return comm_stream_;
      case Stream::side:
        return cuda::side_stream();
      case Stream::compute:
        break;
    }
    return cuda::context().compute;
  }
  cudaStream_t copy_stream_ = nullptr, comm_stream_ = nullptr;
  // record()'s events not in use; shared with every handle, which may outlive the backend.
  struct EventPool {
    std::mutex mu;
    std::vector<cudaEvent_t> free;
    void give_back(cudaEvent_t e) noexcept {
      try {
        std::lock_guard<std::mutex> lock(mu);
        free.push_back(e);
      } catch (...) {
        (void)cudaEventDestroy(e);  // no room in the list: CUDA frees it once it completes
      }
    }
    ~EventPool() {
      for (cudaEvent_t e : free) (void)cudaEventDestroy(e);
    }
  };
  std::shared_ptr<EventPool> events_ = std::make_shared<EventPool>();

  // `bytes` bytes from `alloc` (cudaMalloc, cudaMallocHost), freed by `release`; a
  // failure is one line naming `what`, its size and CUDA's reason, then `advice`.
  static std::shared_ptr<std::byte[]> allocation(size_t bytes, cudaError_t (*alloc)(void**, size_t),
                                                 cudaError_t (*release)(void*), const char* what, const char* advice) {
    cuda::context();
    void* p = nullptr;
    cudaError_t e = alloc(&p, bytes ? bytes : 64);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls report their own
      throw_bad_input(what, "cannot allocate " + std::to_string(bytes) + " bytes (" + cudaGetErrorString(e) + advice);
    }
    return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [release](std::byte* q) { (void)release(q); });
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace trainrt
