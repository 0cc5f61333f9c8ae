// Communicators: sums and broadcasts across the ranks of a data-parallel job.
//
//   RankEnvironment env = rank_environment();          // runtime/rank_environment.h
//   std::unique_ptr<Communicator> c = make_communicator(env, {.timeout_seconds = 300});   // MPI when world > 1
//   auto r = c->all_reduce_sum_async(grads, n, DataType::Float32, "bucket 0");   // returns at once
//   ... more backward work ...
//   r->wait();                                          // grads now hold the sum over ranks
//
// Why: gradients are summed while the backward pass goes on, so every operation runs
// on the communicator's own thread, in the order it was asked for (collectives match by
// order on every rank; MPI then needs only MPI_THREAD_SERIALIZED). A peer that died or
// hangs must not hang this rank: every wait has a deadline (CommOptions::timeout_seconds),
// after which it throws ErrorKind::Peer naming the operation, this rank and the timeout,
// and the communicator is broken (every later call throws the same). Backends plug in
// below by implementing the blocking primitives (MPI for CPU ranks; NCCL for GPU ranks
// will issue the same calls on a communication stream).
//
// LocalGroup runs N ranks as threads of one process over shared memory: the tests of
// the bucketed all-reduce (distribution/data_parallel.h) use it to run several ranks without
// a launcher, and sums in rank order so results are reproducible.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "graph/tensor.h"
#include "runtime/backend.h"
#include "runtime/rank_environment.h"

namespace trainrt {

struct CommOptions {
  double timeout_seconds = 300;  // how long a wait may take before a peer is declared dead
};

// One started operation; wait() blocks until it completed on every rank.
class CommRequest {
 public:
  void wait();
  bool done() const;
  const std::string& what() const { return what_; }
  // steady_clock ns: asked for, started and finished on the communicator's thread.
  int64_t issue_ns = 0, start_ns = 0, end_ns = 0;

 private:
  friend class Communicator;
  class Communicator* comm_ = nullptr;
  std::string what_;
  bool done_ = false;
  std::string error_;  // set when it failed on the communicator's thread
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  virtual std::string name() const = 0;  // "mpi", "local"
  // Whether all_reduce_sum_async reduces the backend's device memory where it is (NCCL);
  // otherwise the data-parallel code hands it host memory.
  virtual bool reduces_device_memory() const { return false; }
  // Whether all_reduce_average_after works: the collective is issued in a backend's stream
  // order (NCCL on its stream, after an event of the compute stream) and the caller orders
  // its own work after it by an event, so the host waits for neither.
  virtual bool orders_by_events() const { return false; }
  // The average over the ranks, in place, of `count` float32/float64 elements of `b`'s
  // memory at `data`, which the collective reads once `ready` (an event of `b`) is
  // reached. Returns the event reached once every rank's average is in `data`: the
  // caller waits for it on its stream before reading `data` again. Only stream work: it
  // may be captured into a CUDA graph (Backend::begin_capture) with the caller's.
  // Internal error unless orders_by_events().
  virtual Backend::Event all_reduce_average_after(const Backend& b, const Backend::Event& ready, void* data,
                                                  size_t count, DataType t, const std::string& what);
  // A request whose wait() returns once `done` (an event of `b` after collectives issued
  // with all_reduce_average_after, outside a capture) is reached, and reports a peer that
  // never joined them (Peer) after timeout_seconds(), having aborted the collectives so
  // that the caller's synchronisation returns. Null where no watch is needed (the
  // backend's own synchronisation reports a dead peer).
  virtual std::shared_ptr<CommRequest> watch_device(const Backend& b, const Backend::Event& done,
                                                    const std::string& what);
  double timeout_seconds() const { return opts_.timeout_seconds; }

  // Sum over ranks, in place, of `count` float32 or float64 elements at `data`, which
  // must stay valid until the request is done. `what` names it in errors ("bucket 3").
  std::shared_ptr<CommRequest> all_reduce_sum_async(void* data, size_t count, DataType t, std::string what);
  void all_reduce_sum(void* data, size_t count, DataType t, const std::string& what);
  // `bytes` bytes at `data` from rank `root` to every rank (blocking).
  void broadcast(void* data, size_t bytes, int root, const std::string& what);
  // Sum over ranks of a few doubles (counts, flags), blocking.
  void sum(std::vector<double>& values, const std::string& what);

 protected:
  Communicator(int rank, int world, CommOptions o);
  // The blocking primitives, called on the communicator's thread only. Throw Error on failure.
  virtual void do_all_reduce_sum(void* data, size_t count, DataType t) = 0;
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  // Subclasses call this first in their destructor: the thread stops before their state
  // goes. With `may_abandon`, a thread of a broken communicator (possibly stuck in a dead
  // peer's collective for ever) is left behind instead of joined.
  void stop_thread(bool may_abandon = true);
  bool broken() const;
  // Runs `op` on the communicator's thread after what was asked for before (the blocking
  // primitives' own path; a watch of a device collective).
  std::shared_ptr<CommRequest> submit(std::string what, std::function<void()> op);

 private:
  friend class CommRequest;
  // What the communicator's thread shares with the callers. The thread holds its own
  // reference, so an abandoned thread (stuck in a dead peer's collective) never touches
  // freed memory should the call ever return.
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;  // the thread: new work; waiters: work done
    std::deque<std::pair<std::shared_ptr<CommRequest>, std::function<void()>>> work;
    std::string broken;  // first failure; every later call throws it
    bool stopping = false;
  };
  void wait(CommRequest& r);
  static void loop(const std::shared_ptr<Queue>& q, int rank, int world);

  int rank_, world_;
  CommOptions opts_;
  std::shared_ptr<Queue> q_;
  std::thread thread_;
};

// Shared state of the N in-process ranks of a LocalGroup.
class LocalGroup {
 public:
  explicit LocalGroup(int world) : world_(world) {}
  int world() const { return world_; }
  // Rank r's communicator; each rank's calls come from its own thread(s).
  std::unique_ptr<Communicator> communicator(int rank, CommOptions o = {});

 private:
  friend class LocalCommunicator;
  struct Call {  // the k-th collective of every rank
    std::vector<void*> data;
    int arrived = 0, left = 0;
    bool done = false;
  };
  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Call> calls_;
};

// MPI when the environment has more than one rank (BadInput when trainrt was built
// without MPI); nullptr for one rank. MPI_Init runs under a watchdog: a peer that never
// starts ends this process after the timeout with one line naming it.
std::unique_ptr<Communicator> make_communicator(const RankEnvironment& env, CommOptions o = {});

// Whether this build has the MPI communicator.
bool have_mpi();

}  // namespace trainrt
