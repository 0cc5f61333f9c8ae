#include "distribution/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "graph/error.h"
#include "ops/cuda/cuda_util.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the NCCL communicator needs NCCL 2.14 or newer (non-blocking communicators, ncclCommFinalize)"
#endif

namespace trainrt {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::microseconds(50);

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The wording of distribution/communicator.cpp's timeouts.
std::string no_answer(double timeout_seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", timeout_seconds);
  return std::string("no answer from the other ranks within ") + buf +
         ": a peer rank died or hangs (--comm-timeout sets the limit)";
}

// NCCL's text for `r` and its last warning, which names the peer or link when there is one
// (it may also be older than this call: NCCL keeps one per process).
std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) m += std::string(": ") + last;
  return m;
}

// A call NCCL refused. A remote or system (network) error is a peer's failure; anything
// else is this rank's: a trainrt bug or a broken installation.
void nccl_check(ncclResult_t r, const std::string& call, ncclComm_t comm) {
  if (r == ncclSuccess || r == ncclInProgress) return;  // a non-blocking call goes on in the background
  if (r == ncclRemoteError || r == ncclSystemError)
    throw Error(ErrorKind::Peer, call + " failed: " + nccl_message(r, comm));
  throw_internal(call, "NCCL error: " + nccl_message(r, comm));
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, CommOptions o)
    : Communicator(bootstrap.rank(), bootstrap.world(), o), bootstrap_(bootstrap), device_(cuda::context().device) {
  // Errors here are thrown on the caller's thread, so they name the rank themselves.
  const std::string here = "NCCL init: rank " + std::to_string(rank()) + " of " + std::to_string(world()) + ": ";
  try {
    cuda::check(cudaSetDevice(device_), here + "cudaSetDevice");
    cudaStream_t stream = nullptr;
    cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), here + "cudaStreamCreateWithFlags");
    stream_ = stream;
    ncclUniqueId id{};
    if (rank() == 0) nccl_check(ncclGetUniqueId(&id), here + "ncclGetUniqueId", nullptr);
    bootstrap.broadcast(&id, sizeof id, 0, "NCCL unique id");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; wait_for polls it with a deadline
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, world(), id, rank(), &config);
    comm_ = comm;
    nccl_check(r, here + "ncclCommInitRankConfig", comm_);
    wait_for(here + "ncclCommInitRankConfig", /*on_stream=*/false);
  } catch (...) {
    release(/*abort=*/true);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  // A rank that ends after an error gives up a collective in flight at once (its peers may
  // never finish it); otherwise queued work finishes, each by its own deadline. Either way
  // the thread ends, so it is joined, never abandoned with the handles it polls.
  if (broken() || std::uncaught_exceptions() > 0) closing_ = true;
  stop_thread(/*may_abandon=*/false);
  release(/*abort=*/closing_ || broken());
}

void NcclCommunicator::do_all_reduce_sum(void* data, size_t count, DataType t) {
  if (count == 0) return;
  if (!prepare(data, "ncclAllReduce")) return bootstrap_.all_reduce_sum(data, count, t, "host values");
  const ncclDataType_t type = t == DataType::Float32 ? ncclFloat32 : ncclFloat64;  // the base class checked t
  nccl_check(ncclAllReduce(data, data, count, type, ncclSum, comm_, stream_), "ncclAllReduce", comm_);
  wait_for("ncclAllReduce", /*on_stream=*/true);
}

// Issued by the caller's thread (the trainer's, between kernel launches), so the event
// `done` is recorded behind the collective before the caller's stream waits for it; the
// host waits only for NCCL's enqueue. Nothing here queries an event or synchronises: a
// step's collectives can be captured into a CUDA graph with its kernels (the
// communication stream joins the capture by waiting for `ready`, an event of the
// capturing stream). NCCL calls stay sequential: during a step nothing else is asked of
// this communicator (the host sums go to the bootstrap communicator).
Backend::Event NcclCommunicator::all_reduce_average_after(const Backend& b, const Backend::Event& ready, void* data,
                                                          size_t count, DataType t, const std::string& what) {
  (void)b;  // the cuda backend: its events are cudaEvent_t
  if (broken()) throw Error(ErrorKind::Peer, what + ": the communicator is broken by an earlier failure");
  if (t != DataType::Float32 && t != DataType::Float64)
    throw_internal("all_reduce_average " + what, std::string("unsupported element type ") + dtype_name(t));
  if (ready)
    cuda::check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(const_cast<void*>(ready.get())), 0),
                what + ": cudaStreamWaitEvent");
  const ncclDataType_t type = t == DataType::Float32 ? ncclFloat32 : ncclFloat64;
  if (count) {
    nccl_check(ncclAllReduce(data, data, count, type, ncclAvg, comm_, stream_), "ncclAllReduce", comm_);
    wait_for(what + ": ncclAllReduce", /*on_stream=*/false);
  }
  cudaEvent_t e = nullptr;
  cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), what + ": cudaEventCreate");
  std::shared_ptr<CUevent_st> done(e, [](CUevent_st* x) { (void)cudaEventDestroy(x); });
  cuda::check(cudaEventRecord(e, stream_), what + ": cudaEventRecord");
  return done;
}

// `done` is an event of the caller's stream recorded after a step's collectives (after a
// replay of its CUDA graph, or after the step issued kernel by kernel). The
// communicator's thread watches it with the deadline: a peer that never joins aborts the
// NCCL communicator, whose kernels then end, so the caller's synchronisation returns
// and the watch reports Peer.
std::shared_ptr<CommRequest> NcclCommunicator::watch_device(const Backend& b, const Backend::Event& done,
                                                            const std::string& what) {
  (void)b;
  if (!done) return nullptr;
  return submit(what, [this, done, what] {
    const Clock::time_point deadline = deadline_after(timeout_seconds());
    auto* event = static_cast<cudaEvent_t>(const_cast<void*>(done.get()));
    for (;;) {
      ncclResult_t state = ncclSuccess;
      nccl_check(ncclCommGetAsyncError(comm_, &state), what + ": ncclCommGetAsyncError", comm_);
      if (state != ncclSuccess && state != ncclInProgress) fail(what + " failed: " + nccl_message(state, comm_));
      const cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort_comm();
        cuda::check(q, what + ": cudaEventQuery");
      }
      if (closing_) fail(what + ": given up: this rank is ending after an error");
      if (Clock::now() > deadline) fail(what + ": " + no_answer(timeout_seconds()));
      std::this_thread::sleep_for(kPoll);
    }
  });
}

void NcclCommunicator::do_broadcast(void* data, size_t bytes, int root) {
  if (bytes == 0) return;
  if (!prepare(data, "ncclBroadcast")) return bootstrap_.broadcast(data, bytes, root, "host values");
  nccl_check(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast", comm_);
  wait_for("ncclBroadcast", /*on_stream=*/true);
}

// Runs on the communicator's thread, whose current device is its own. False for host
// memory (a few counts and flags), which the bootstrap communicator carries: a host
// pointer would fault inside NCCL's kernel and take the whole CUDA context down. Called
// in issue order on every rank, so both communicators see their calls in one order.
bool NcclCommunicator::prepare(const void* data, const char* call) {
  TRAINRT_ASSERT(comm_ != nullptr);  // aborted only by a failure, after which the base class runs nothing
  cuda::check(cudaSetDevice(device_), std::string(call) + ": cudaSetDevice");
  cudaPointerAttributes a{};
  cuda::check(cudaPointerGetAttributes(&a, data), std::string(call) + ": cudaPointerGetAttributes");
  return a.type == cudaMemoryTypeDevice;
}

// Polls until NCCL has finished the last call (init, or the enqueue of a collective) and,
// with `on_stream`, the communication stream has run it. NCCL's asynchronous error, the
// deadline, or this communicator giving up abort the NCCL communicator and throw Peer.
void NcclCommunicator::wait_for(const std::string& call, bool on_stream) {
  const Clock::time_point deadline = deadline_after(timeout_seconds());
  for (;;) {
    ncclResult_t state = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &state), call + ": ncclCommGetAsyncError", comm_);
    if (state != ncclSuccess && state != ncclInProgress) fail(call + " failed: " + nccl_message(state, comm_));
    // The stream is queried only once the enqueue is done: before, it may look idle.
    if (state == ncclSuccess) {
      if (!on_stream) return;
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        abort_comm();
        cuda::check(e, call + ": cudaStreamQuery");
      }
    }
    // A waiter whose deadline passed first broke the communicator; the destructor closes it.
    if (closing_ || broken()) fail(call + ": given up: this rank is ending after an error");
    if (Clock::now() > deadline) fail(call + ": " + no_answer(timeout_seconds()));
    std::this_thread::sleep_for(kPoll);
  }
}

void NcclCommunicator::fail(const std::string& what) {
  abort_comm();  // stops NCCL's kernels and proxy threads, which would otherwise wait for ever
  throw Error(ErrorKind::Peer, what);
}

void NcclCommunicator::abort_comm() noexcept {
  if (!comm_) return;
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
}

// ncclCommFinalize flushes this rank's operations; in non-blocking mode it returns at once
// and the communicator's state says when it is done. False on an error or at the deadline.
bool NcclCommunicator::finalize() noexcept {
  const ncclResult_t r = ncclCommFinalize(comm_);
  if (r != ncclSuccess && r != ncclInProgress) return false;
  const Clock::time_point deadline = deadline_after(timeout_seconds());
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return false;
    if (state != ncclInProgress) return state == ncclSuccess;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(kPoll);
  }
}

void NcclCommunicator::release(bool abort) noexcept {
  (void)cudaSetDevice(device_);
  if (comm_) {
    if (!abort && finalize())
      (void)ncclCommDestroy(comm_);
    else
      (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (stream_) {
    (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, CommOptions o) {
  return std::make_unique<NcclCommunicator>(bootstrap, o);
}

}  // namespace trainrt
