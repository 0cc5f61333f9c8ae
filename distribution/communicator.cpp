#include "distribution/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "graph/error.h"
#include "runtime/trace.h"

#ifdef TRAINRT_HAVE_MPI
#include <mpi.h>
#include <unistd.h>
#endif

namespace trainrt {

namespace {

[[noreturn]] void throw_peer(const std::string& what) { throw Error(ErrorKind::Peer, what); }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string no_answer(double timeout_seconds) {
  return "no answer from the other ranks within " + seconds_text(timeout_seconds) +
         ": a peer rank died or hangs (--comm-timeout sets the limit)";
}

}  // namespace

// ---- CommRequest / Communicator --------------------------------------------------------

void CommRequest::wait() { comm_->wait(*this); }

bool CommRequest::done() const {
  std::lock_guard<std::mutex> l(comm_->q_->mu);
  return done_;
}

Communicator::Communicator(int rank, int world, CommOptions o)
    : rank_(rank), world_(world), opts_(o), q_(std::make_shared<Queue>()) {
  if (!(opts_.timeout_seconds > 0)) throw_bad_input("--comm-timeout", "must be > 0 seconds");
  thread_ = std::thread([q = q_, rank, world] { loop(q, rank, world); });
}

Communicator::~Communicator() {
  // Subclasses stop the thread in their destructor; this covers a subclass that failed to.
  if (thread_.joinable()) stop_thread(false);
}

void Communicator::stop_thread(bool may_abandon) {
  std::unique_lock<std::mutex> l(q_->mu);
  q_->stopping = true;
  q_->cv.notify_all();
  // After a timeout the thread may be inside a collective that a dead peer never
  // completes: it is abandoned (the process is about to end with the error) rather than
  // joined, which would hang exactly as the timeout was there to prevent.
  const bool abandon = may_abandon && !q_->broken.empty();
  l.unlock();
  if (!thread_.joinable()) return;
  if (abandon)
    thread_.detach();
  else
    thread_.join();
}

bool Communicator::broken() const {
  std::lock_guard<std::mutex> l(q_->mu);
  return !q_->broken.empty();
}

void Communicator::loop(const std::shared_ptr<Queue>& q, int rank, int world) {
  for (;;) {
    std::shared_ptr<CommRequest> r;
    std::function<void()> op;
    {
      std::unique_lock<std::mutex> l(q->mu);
      q->cv.wait(l, [&] { return q->stopping || !q->work.empty(); });
      if (q->work.empty()) return;  // stopping, nothing left
      r = std::move(q->work.front().first);
      op = std::move(q->work.front().second);
      q->work.pop_front();
      if (!q->broken.empty()) {  // a failed collective breaks every later one
        r->error_ = q->broken;
        r->done_ = true;
        q->cv.notify_all();
        continue;
      }
    }
    const int64_t start = now_ns();
    std::string error;
    try {
      op();
    } catch (const std::exception& e) {
      error = r->what_ + ": rank " + std::to_string(rank) + " of " + std::to_string(world) + ": " + e.what();
    }
    std::lock_guard<std::mutex> l(q->mu);
    r->start_ns = start;
    r->end_ns = now_ns();
    r->error_ = error;
    if (!error.empty() && q->broken.empty()) q->broken = error;
    r->done_ = true;
    q->cv.notify_all();
  }
}

std::shared_ptr<CommRequest> Communicator::submit(std::string what, std::function<void()> op) {
  auto r = std::make_shared<CommRequest>();
  r->comm_ = this;
  r->what_ = std::move(what);
  r->issue_ns = now_ns();
  std::lock_guard<std::mutex> l(q_->mu);
  if (!q_->broken.empty()) throw_peer(q_->broken);
  q_->work.emplace_back(r, std::move(op));
  q_->cv.notify_all();
  return r;
}

void Communicator::wait(CommRequest& r) {
  std::unique_lock<std::mutex> l(q_->mu);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts_.timeout_seconds);
  // A broken communicator answers at once: its thread may never finish `r`.
  const bool done = q_->cv.wait_until(l, deadline, [&] { return r.done_ || !q_->broken.empty(); }) && r.done_;
  if (!done) {
    if (q_->broken.empty())
      q_->broken = r.what_ + ": rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ": " +
                   no_answer(opts_.timeout_seconds);
    throw_peer(q_->broken);
  }
  if (!r.error_.empty()) throw_peer(r.error_);
}

Backend::Event Communicator::all_reduce_average_after(const Backend& b, const Backend::Event& ready, void* data,
                                                      size_t count, DataType t, const std::string& what) {
  (void)b, (void)ready, (void)data, (void)count, (void)t;
  throw_internal(what, "communicator " + name() + " does not order collectives by events");
}

std::shared_ptr<CommRequest> Communicator::watch_device(const Backend& b, const Backend::Event& done,
                                                        const std::string& what) {
  (void)b, (void)done, (void)what;
  return nullptr;
}

std::shared_ptr<CommRequest> Communicator::all_reduce_sum_async(void* data, size_t count, DataType t,
                                                                std::string what) {
  if (t != DataType::Float32 && t != DataType::Float64)
    throw_internal("all_reduce_sum " + what, std::string("unsupported element type ") + dtype_name(t));
  return submit(std::move(what), [this, data, count, t] { do_all_reduce_sum(data, count, t); });
}

void Communicator::all_reduce_sum(void* data, size_t count, DataType t, const std::string& what) {
  all_reduce_sum_async(data, count, t, what)->wait();
}

void Communicator::broadcast(void* data, size_t bytes, int root, const std::string& what) {
  if (root < 0 || root >= world_) throw_internal("broadcast " + what, "root rank out of range");
  submit(what, [this, data, bytes, root] { do_broadcast(data, bytes, root); })->wait();
}

void Communicator::sum(std::vector<double>& values, const std::string& what) {
  all_reduce_sum(values.data(), values.size(), DataType::Float64, what);
}

// ---- LocalGroup --------------------------------------------------------------------------

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(LocalGroup& g, int rank, CommOptions o) : Communicator(rank, g.world(), o), g_(g) {}
  // Its collectives end at their own deadline, so the thread is always joined.
  ~LocalCommunicator() override { stop_thread(/*may_abandon=*/false); }
  std::string name() const override { return "local"; }

 protected:
  void do_all_reduce_sum(void* data, size_t count, DataType t) override {
    collective(data, [&](std::vector<void*>& all) {
      // Sum in rank order into rank 0's buffer, then copy it to the others.
      auto add = [&](auto* first) {
        using T = std::remove_pointer_t<decltype(first)>;
        for (int r = 1; r < g_.world(); ++r) {
          const T* x = static_cast<const T*>(all[static_cast<size_t>(r)]);
          for (size_t i = 0; i < count; ++i) first[i] += x[i];
        }
      };
      if (t == DataType::Float32)
        add(static_cast<float*>(all[0]));
      else
        add(static_cast<double*>(all[0]));
      const size_t bytes = count * dtype_size(t);
      for (int r = 1; r < g_.world(); ++r) std::memcpy(all[static_cast<size_t>(r)], all[0], bytes);
    });
  }
  void do_broadcast(void* data, size_t bytes, int root) override {
    collective(data, [&](std::vector<void*>& all) {
      for (int r = 0; r < g_.world(); ++r)
        if (r != root) std::memcpy(all[static_cast<size_t>(r)], all[static_cast<size_t>(root)], bytes);
    });
  }

 private:
  // The k-th call of every rank meets here; the last to arrive runs `combine` over all
  // ranks' buffers. Waits at most the timeout for the others.
  void collective(void* data, const std::function<void(std::vector<void*>&)>& combine) {
    const int64_t k = seq_++;
    std::unique_lock<std::mutex> l(g_.mu_);
    LocalGroup::Call& c = g_.calls_[k];
    c.data.resize(static_cast<size_t>(g_.world()));
    c.data[static_cast<size_t>(rank())] = data;
    if (++c.arrived == g_.world()) {
      combine(c.data);
      c.done = true;
      g_.cv_.notify_all();
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds());
      if (!g_.cv_.wait_until(l, deadline, [&] { return c.done; }))
        throw Error(ErrorKind::Peer, no_answer(timeout_seconds()));
    }
    if (++c.left == g_.world()) g_.calls_.erase(k);
  }

  LocalGroup& g_;
  int64_t seq_ = 0;  // touched by the communicator's thread only
};

std::unique_ptr<Communicator> LocalGroup::communicator(int rank, CommOptions o) {
  if (rank < 0 || rank >= world_) throw_internal("LocalGroup", "rank out of range");
  return std::make_unique<LocalCommunicator>(*this, rank, o);
}

// ---- MPI ---------------------------------------------------------------------------------

#ifdef TRAINRT_HAVE_MPI
namespace {

std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}

void mpi_check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw_peer(std::string(call) + " failed: " + mpi_error(rc));
}

// Runs `call` (MPI_Init, MPI_Finalize: both wait for every rank) under a watchdog: when
// a peer never starts or never finishes, the call would wait for ever; the watchdog ends
// the process after the timeout with one line instead (exit 3, ErrorKind::Peer's code).
int with_watchdog(const std::function<int()>& call, double timeout_seconds, const std::string& what) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(m);
    if (cv.wait_for(l, std::chrono::duration<double>(timeout_seconds), [&] { return done; })) return;
    std::fprintf(stderr, "trainrt: error: %s: no answer from the other ranks within %s\n", what.c_str(),
                 seconds_text(timeout_seconds).c_str());
    std::fflush(stderr);
    ::_exit(3);
  });
  const int rc = call();
  {
    std::lock_guard<std::mutex> l(m);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  return rc;
}

void init_mpi(const RankEnvironment& env, double timeout_seconds) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) throw_internal("MPI", "MPI is already initialised in this process");
  // Open MPI's progress loop spins while a blocking collective waits; yielding lets the
  // compute threads of this rank (and of other ranks on the node) have the cores.
  ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  int provided = 0;
  const int rc = with_watchdog(
      [&] { return MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided); }, timeout_seconds,
      "MPI_Init: rank " + std::to_string(env.rank) + " of " + std::to_string(env.world) + " (" + env.launcher +
          "): a peer rank did not start, or the launcher gave MPI no process manager (srun --mpi=pmix)");
  mpi_check(rc, "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED)
    throw_internal("MPI",
                   "the MPI library does not provide MPI_THREAD_SERIALIZED (level " + std::to_string(provided) + ")");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(int rank, int world, CommOptions o) : Communicator(rank, world, o) {}
  ~MpiCommunicator() override {
    stop_thread();
    // MPI_Finalize waits for every rank to finalize too. After a peer failure, or while
    // an error ends this rank (the others may be waiting in a collective), it would hang:
    // leave it undone and let the process end.
    if (broken() || std::uncaught_exceptions() > 0) return;
    with_watchdog(MPI_Finalize, timeout_seconds(),
                  "MPI_Finalize: rank " + std::to_string(rank()) + " of " + std::to_string(world()) +
                      ": another rank ended without finishing the job");
  }
  std::string name() const override { return "mpi"; }

 protected:
  void do_all_reduce_sum(void* data, size_t count, DataType t) override {
    const size_t size = dtype_size(t);
    constexpr size_t kChunk = size_t{1} << 28;  // elements per call: MPI counts are int
    for (size_t at = 0; at < count; at += kChunk)
      mpi_check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * size,
                              static_cast<int>(std::min(kChunk, count - at)),
                              t == DataType::Float32 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                "MPI_Allreduce");
  }
  void do_broadcast(void* data, size_t bytes, int root) override {
    constexpr size_t kChunk = size_t{1} << 30;
    for (size_t at = 0; at < bytes; at += kChunk)
      mpi_check(MPI_Bcast(static_cast<char*>(data) + at, static_cast<int>(std::min(kChunk, bytes - at)), MPI_BYTE, root,
                          MPI_COMM_WORLD),
                "MPI_Bcast");
  }
};

}  // namespace
#endif

bool have_mpi() {
#ifdef TRAINRT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_communicator(const RankEnvironment& env, CommOptions o) {
  if (env.world <= 1) return nullptr;
#ifdef TRAINRT_HAVE_MPI
  init_mpi(env, o.timeout_seconds);
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (rank != env.rank || world != env.world) {
    const std::string what = env.launcher + " started rank " + std::to_string(env.rank) + " of " +
                             std::to_string(env.world) + " but MPI sees rank " + std::to_string(rank) + " of " +
                             std::to_string(world);
    MPI_Finalize();
    throw_bad_input("MPI", what + (world == 1 ? ": launch with srun --mpi=pmix (or mpirun)" : ""));
  }
  return std::make_unique<MpiCommunicator>(rank, world, o);
#else
  throw_bad_input(env.launcher + " started " + std::to_string(env.world) + " ranks",
                  "this trainrt was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}

}  // namespace trainrt
