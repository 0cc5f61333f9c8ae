// Batch memory the backend's copies read where it lies: pinned host buffers (cuda:
// cudaMallocHost through Backend::allocate_host), handed out and taken back.
//
//   HostPool pool(backend);
//   std::shared_ptr<std::byte[]> b = pool.take(bytes);  // the data pipeline writes a batch here
//   Tensor x(DataType::Float32, dims, b);
//   executor.launch({{"x", x}});   // copied to the device from b itself: no host copy
//   // b returns to the pool when the last Tensor on it is gone (the executor holds it
//   // until the run that copies from it has ended)
//
// Why: an asynchronous backend copies a batch to the device from pinned memory, as the
// DMA engine reads only page-locked pages at full rate and a captured or queued step runs
// after the caller's buffer may have changed. Without this pool the executor first copies
// each batch on the host into its own pinned buffer, while the GPU may be waiting; with it
// the data pipeline decodes straight into pinned memory (PipelineOptions::allocate) and
// the executor (Executor::batch_pool) issues the copy from there.
//
// A buffer comes back when the last shared_ptr to it (the pipeline's Batch, the tensors
// of a feed map, the executor's hold on a run in flight) is released; buffers are reused
// for requests of the same size only, so a pipeline of fixed-size batches settles on
// (prefetch + runs in flight + 2) buffers. Thread-safe: the pipeline's tasks take buffers
// on oneTBB's threads. The pool's state lives as long as any buffer it handed out.
#pragma once

#include <cstddef>
#include <memory>

namespace trainrt {

class Backend;

class HostPool {
 public:
  explicit HostPool(const Backend& backend);
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // A buffer of `bytes` (not zeroed), reused or newly allocated.
  std::shared_ptr<std::byte[]> take(size_t bytes);
  // Whether [p, p + bytes) lies at the start of a buffer of this pool.
  bool owns(const void* p, size_t bytes) const;
  size_t allocated() const;  // buffers allocated so far (in use or free)
  size_t in_use() const;     // buffers handed out and not yet back

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace trainrt
