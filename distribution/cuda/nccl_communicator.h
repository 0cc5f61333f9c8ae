// The NCCL communicator: sums and broadcasts of GPU buffers across the ranks of a
// data-parallel job, on a communication stream of its own.
//
//   std::unique_ptr<Communicator> mpi = make_communicator(env, {.timeout_seconds = 300});
//   std::unique_ptr<Communicator> nccl = make_nccl_communicator(*mpi, {.timeout_seconds = 300});
//   cuda::check(cudaStreamSynchronize(cuda::context().stream), "bucket 0");  // grads written
//   auto r = nccl->all_reduce_sum_async(flat, n, DataType::Float32, "bucket 0");
//   ... more backward kernels on the compute stream ...
//   r->wait();                                          // flat holds the sum over ranks
//
// Why: GPU ranks sum their gradient buckets with NCCL (NVLink, InfiniBand, no copy through
// the host) on a stream separate from the compute stream, so the sums overlap the backward
// pass. MPI stays the bootstrap (it carries NCCL's unique id) and carries the few small
// host-side sums and broadcasts, which this communicator hands on to it.
//
// Preconditions of all_reduce_sum_async / broadcast:
//   - `data` is device memory for NCCL; host memory (the trainer's few
//     counts and flags) is passed on to the bootstrap communicator, in issue order;
//   - NCCL reads `data` on its own stream, ordered after nothing: the caller has
//     synchronised the compute stream after the last kernel that writes `data`, and
//     neither reads nor writes it until the request is done.
//
// Deadlines: the NCCL communicator is non-blocking (ncclConfig_t::blocking = 0), so every
// NCCL call returns at once and the communicator's thread polls the stream and
// ncclCommGetAsyncError. A peer that died or hangs ends the wait after
// CommOptions::timeout_seconds with ErrorKind::Peer, and the NCCL communicator is aborted
// (its kernels stop): no call blocks for ever, so the thread is always joined.
//
// Compiled in CI, run only on GPU nodes; nothing of it has run here (no GPU).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "distribution/communicator.h"

// Plain C++ header: the handles' types are those of nccl.h (ncclComm_t) and
// cuda_runtime_api.h (cudaStream_t), declared here so that includers need neither.
struct ncclComm;
struct CUstream_st;

namespace trainrt {

class NcclCommunicator : public Communicator {
 public:
  // Collective: every rank of `bootstrap` constructs it at the same point. Uses the device
  // of cuda::context(), which the cuda backend has already chosen.
  NcclCommunicator(Communicator& bootstrap, CommOptions o);
  ~NcclCommunicator() override;
  std::string name() const override { return "nccl"; }
  bool reduces_device_memory() const override { return true; }
  bool orders_by_events() const override { return true; }
  // ncclAllReduce with ncclAvg on the communication stream after `ready` (a cuda backend
  // event), and an event recorded behind it; capturable into a CUDA graph.
  Backend::Event all_reduce_average_after(const Backend& b, const Backend::Event& ready, void* data, size_t count,
                                          DataType t, const std::string& what) override;
  // The communicator's thread polls `done` and NCCL's asynchronous error with the
  // deadline (see the .cpp).
  std::shared_ptr<CommRequest> watch_device(const Backend& b, const Backend::Event& done,
                                            const std::string& what) override;

 protected:
  void do_all_reduce_sum(void* data, size_t count, DataType t) override;
  void do_broadcast(void* data, size_t bytes, int root) override;

 private:
  bool prepare(const void* data, const char* call);
  void wait_for(const std::string& call, bool on_stream);
  [[noreturn]] void fail(const std::string& what);
  void abort_comm() noexcept;
  bool finalize() noexcept;
  void release(bool abort) noexcept;

  Communicator& bootstrap_;  // carries host values; outlives this
  int device_ = 0;
  ncclComm* comm_ = nullptr;          // null once aborted or destroyed
  CUstream_st* stream_ = nullptr;     // the communication stream
  std::atomic<bool> closing_{false};  // set by the destructor: a poll in flight gives up
};

// The NCCL communicator over the ranks of `bootstrap` (the MPI communicator of the same
// job), which carries NCCL's unique id and later the host-memory sums, so it must outlive
// the result. ErrorKind::Peer when another rank
// does not join within o.timeout_seconds.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, CommOptions o = {});

}  // namespace trainrt
