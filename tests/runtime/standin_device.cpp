#include "standin_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <new>
#include <thread>

#include "graph/error.h"
#include "ops/core/common.h"
#include "runtime/executor.h"

namespace trainrt::test {

const std::set<std::string> kWrnHostOps{"MaxPool", "Sum", "SumToShape", "Flatten"};

namespace {
thread_local bool in_host_kernel = false;  // a host kernel of some stand-in runs on this thread
}  // namespace

// An event: reached once the work issued before its record() on its stream has run.
struct StandinDevice::EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false;
  Stream stream = Stream::compute;
  void reach() {
    {
      std::lock_guard<std::mutex> lock(mu);
      reached = true;
    }
    cv.notify_all();
  }
};

// One item of a stream's queue: work to run, or an event to record or to wait for.
struct StandinDevice::Work {
  std::function<void()> run;
  std::shared_ptr<EventState> record, wait;
};

struct StandinDevice::Pool {
  struct Region {
    size_t bytes = 0;   // asked for
    size_t mapped = 0;  // whole pages
    bool protect = false;
  };
  std::mutex mu;
  std::map<const std::byte*, Region> regions;       // by start
  std::map<const std::byte*, size_t> pinned;        // allocate_host() memory: start -> bytes
  std::array<std::vector<Work>, kStreams> pending;  // per stream, in issue order
  // While capturing: the recorded work per stream (instead of `pending`).
  std::optional<std::array<std::vector<Work>, kStreams>> capture;
  // The pending queues (or the capture's), mu held.
  std::array<std::vector<Work>, kStreams>& queues() { return capture ? *capture : pending; }
  void refuse_in_capture(const char* what) const {
    if (capture) throw_internal("standin-device", std::string(what) + " while capturing");
  }
  Counts counts;
  std::atomic<size_t> skipped{0};        // Counts::skipped, counted by the stream threads
  std::atomic<size_t> to_host_bytes{0};  // Counts::to_host_bytes, counted by the stream threads
  std::atomic<size_t> device_bytes{0};   // Counts::device_copy_bytes, likewise
  std::vector<size_t> copy_log;          // StandinDevice::copy_log(), written by one queue run at a time

  // The region holding `p`, or regions.end(); mu held.
  std::map<const std::byte*, Region>::iterator find(const void* p) {
    const auto* b = static_cast<const std::byte*>(p);
    auto it = regions.upper_bound(b);
    if (it == regions.begin()) return regions.end();
    --it;
    return b < it->first + std::max<size_t>(it->second.bytes, 1) ? it : regions.end();
  }
  bool is_pinned(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    auto it = pinned.upper_bound(b);
    if (it == pinned.begin()) return false;
    --it;
    return b < it->first + std::max<size_t>(it->second, 1);
  }
  void set(const std::byte* start, Region& r, bool protect) {
    if (r.protect == protect) return;
    if (mprotect(const_cast<std::byte*>(start), r.mapped, protect ? PROT_NONE : PROT_READ | PROT_WRITE) != 0)
      throw_internal("standin-device", std::string("mprotect failed: ") + std::strerror(errno));
    r.protect = protect;
  }
};

size_t StandinDevice::Counts::host_total() const {
  size_t n = 0;
  for (const auto& [op, c] : host_calls) n += c;
  return n;
}

StandinDevice::StandinDevice(std::set<std::string> host_ops_without_cuda)
    : Backend("reference", {}), host_ops_(std::move(host_ops_without_cuda)), pool_(std::make_shared<Pool>()) {
  // The layouts the cuda backend's kernels declare (NHWC where they take it); the
  // reference kernels it queues read Plain copies of such arguments.
  blocked_layout = Layout::ChannelsLast;
  report_layouts_of("cuda");
}

StandinDevice::~StandinDevice() {
  std::lock_guard<std::mutex> lock(pool_->mu);
  for (auto& q : pool_->pending) q.clear();
  for (auto& [start, r] : pool_->regions) pool_->set(start, r, false);  // what outlives the device stays readable
}

bool StandinDevice::have_cuda_kernels() {
#ifdef TRAINRT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool StandinDevice::runs_on_host(const std::string& domain, const std::string& op) const {
  if (also_on_host.count(op)) return true;
  if (have_cuda_kernels()) return registry().kernels.find("cuda", domain, op) == nullptr;
  return host_ops_.count(op) != 0;
}

bool StandinDevice::skips_when_flagged(const Node& n) const {
  if (runs_on_host(n.domain, n.op_type)) return true;  // Backend::on_host reads the flag
  if (have_cuda_kernels()) return registry().kernels.skips_when_flagged("cuda", n.domain, n.op_type);
  return n.op_type == "SGD" || n.op_type == "Adam" || n.op_type == "MultiSGD" || n.op_type == "MultiAdam" ||
         n.op_type == "Increment" || n.op_type == "Assign";
}

const Kernel& StandinDevice::kernel(const Node& n) const {
  const Kernel* ref = registry().kernels.find("reference", n.domain, n.op_type);
  if (!ref) throw_unsupported("standin-device", "no kernel for " + n.op_type);
  std::lock_guard<std::mutex> lock(kernels_mu_);
  std::unique_ptr<Kernel>& k = kernels_[ref];
  if (k) return *k;
  if (runs_on_host(n.domain, n.op_type)) {
    const Kernel& host = on_host(*ref);  // synchronises, then runs on the host
    k = std::make_unique<Kernel>([this, &host, op = n.op_type](KernelContext& ctx) {
      if (op == fail_op) throw_internal("standin-device", "launch of " + fail_op + " failed");
      {
        std::lock_guard<std::mutex> l(pool_->mu);
        ++pool_->counts.host_calls[op];
      }
      in_host_kernel = true;
      try {
        host(ctx);
      } catch (...) {
        in_host_kernel = false;
        throw;
      }
      in_host_kernel = false;
    });
    return *k;
  }
  k = std::make_unique<Kernel>([this, ref](KernelContext& ctx) {
    std::vector<const void*> touched;
    for (const Tensor* t : ctx.inputs)
      if (t && t->nbytes()) {
        if (!owns(t->raw()))
          throw_internal("standin-device", "node '" + ctx.node.name + "' was given an input in host memory");
        touched.push_back(t->raw());
      }
    for (const Tensor* t : ctx.outputs)
      if (t && t->nbytes()) {
        if (!owns(t->raw()))
          throw_internal("standin-device", "node '" + ctx.node.name + "' was given an output in host memory");
        touched.push_back(t->raw());
      }
    if (ctx.skip_if_flagged) {
      if (!owns(ctx.skip_if_flagged))
        throw_internal("standin-device", "node '" + ctx.node.name + "' was given a skip flag in host memory");
      touched.push_back(ctx.skip_if_flagged);
    }
    if (ctx.node.op_type == fail_op) throw_internal("standin-device", "launch of " + fail_op + " failed");
    const size_t scratch = workspace_bytes(ctx);
    {
      std::lock_guard<std::mutex> l(pool_->mu);
      const bool side = issue_ == Stream::side;
      const size_t reserved = side ? pool_->counts.side_workspace : pool_->counts.workspace;
      if (scratch > reserved)
        throw_internal("standin-device", "node '" + ctx.node.name + "' needs " + std::to_string(scratch) +
                                             " bytes of workspace, " + std::to_string(reserved) + " reserved" +
                                             (side ? " for the side stream" : ""));
      ++pool_->counts.launched;
      auto laid_out = [](const Tensor* t) { return t && t->layout() == Layout::ChannelsLast; };
      if (std::any_of(ctx.inputs.begin(), ctx.inputs.end(), laid_out) ||
          std::any_of(ctx.outputs.begin(), ctx.outputs.end(), laid_out))
        ++pool_->counts.laid_out;
      const std::string& op = ctx.node.op_type;
      if (op == "Conv" || op == "FusedConv" || op == "ConvGrad")
        for (const Tensor* w :
             {op == "ConvGrad" ? (ctx.has_input(2) && ctx.has_output(0) ? ctx.inputs[2] : nullptr) : ctx.inputs[1],
              static_cast<const Tensor*>(op == "ConvGrad" && ctx.has_output(1) ? ctx.outputs[1] : nullptr)})
          if (w) {
            pool_->counts.krsc_filters += laid_out(w);
            pool_->counts.narrow_filters += w->narrowed();
          }
    }
    KernelContext launched = ctx;  // the arguments as they were at the launch
    enqueue(
        [ref, launched, pool = pool_, fail = ctx.node.op_type == fail_when_run]() mutable {
          if (fail) throw_internal("standin-device", "kernel of " + launched.node.op_type + " failed");
          // As a cuda kernel drawing random numbers: the seed read when it runs.
          if (launched.run_seed) launched.seed = node_seed(*launched.run_seed, launched.node_index);
          if (launched.skip_if_flagged && *launched.skip_if_flagged != kAllFinite) {
            pool->skipped.fetch_add(1, std::memory_order_relaxed);  // no ordering between streams
            return;
          }
          run_on_plain_copies(*ref, launched);
        },
        touched, issue_);
  });
  return *k;
}

std::shared_ptr<std::byte[]> StandinDevice::allocate(size_t bytes) const {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    pool_->refuse_in_capture("allocate()");
    ++pool_->counts.allocations;
  }
  const bool hidden = device_memory && protect_memory;  // the host never sees it, from the start
  void* p = mmap(nullptr, mapped, hidden ? PROT_NONE : PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* b = static_cast<std::byte*>(p);
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    pool_->regions[b] = Pool::Region{bytes, mapped, hidden};
  }
  return std::shared_ptr<std::byte[]>(b, [pool = pool_, mapped](std::byte* q) {
    {
      std::lock_guard<std::mutex> lock(pool->mu);
      pool->regions.erase(q);
    }
    munmap(q, mapped);
  });
}

std::shared_ptr<std::byte[]> StandinDevice::allocate_host(size_t bytes) const {
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    pool_->refuse_in_capture("allocate_host()");
    ++pool_->counts.allocations;
  }
  std::shared_ptr<std::byte[]> b = Backend::allocate(bytes);
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->pinned[b.get()] = bytes;
  return std::shared_ptr<std::byte[]>(b.get(), [pool = pool_, b](std::byte* q) {
    std::lock_guard<std::mutex> l(pool->mu);
    pool->pinned.erase(q);
  });
}

void StandinDevice::copy(void* to, const void* from, size_t bytes) const { copy_on(issue_, to, from, bytes); }

void StandinDevice::run_pair(const std::function<void()>& first, const std::function<void()>& second) const {
  if (!side_stream) return Backend::run_pair(first, second);
  const Event fork = record(Stream::compute);
  first();
  wait(Stream::side, fork);
  issue_ = Stream::side;
  try {
    second();
  } catch (...) {
    issue_ = Stream::compute;
    throw;
  }
  issue_ = Stream::compute;
  wait(Stream::compute, record(Stream::side));
  std::lock_guard<std::mutex> lock(pool_->mu);
  ++pool_->counts.pairs;
}

void StandinDevice::copy_on(Stream s, void* to, const void* from, size_t bytes) const {
  if (!bytes) return;
  bool read_when_run = owns(from);
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    read_when_run = read_when_run || pool_->is_pinned(from);
  }
  std::atomic<size_t>* count = !owns(to) ? &pool_->to_host_bytes : owns(from) ? &pool_->device_bytes : nullptr;
  if (read_when_run) {  // from the device or pinned host memory: read in stream order
    enqueue(
        [to, from, bytes, count] {
          std::memcpy(to, from, bytes);
          if (count) count->fetch_add(bytes, std::memory_order_relaxed);
        },
        {to, from}, s);
    return;
  }
  // From host memory: staged at the call (cudaMemcpyAsync from pageable memory), landed in stream order.
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    pool_->refuse_in_capture("a copy from pageable host memory");
  }
  std::vector<std::byte> staged(static_cast<const std::byte*>(from), static_cast<const std::byte*>(from) + bytes);
  enqueue([to, staged] { std::memcpy(to, staged.data(), staged.size()); }, {to}, s);
}

Backend::Event StandinDevice::record(Stream s) const {
  auto e = std::make_shared<EventState>();
  e->stream = s;
  std::lock_guard<std::mutex> lock(pool_->mu);
  ++pool_->counts.records;
  pool_->queues()[static_cast<size_t>(s)].push_back(Work{nullptr, e, nullptr});
  return e;
}

void StandinDevice::wait(Stream s, const Event& e) const {
  if (!e) return;
  auto ev = std::static_pointer_cast<EventState>(std::const_pointer_cast<void>(e));
  std::lock_guard<std::mutex> lock(pool_->mu);
  ++pool_->counts.waits;
  if (ignore_waits || ev->stream == s) return;  // a stream is ordered with itself
  pool_->queues()[static_cast<size_t>(s)].push_back(Work{nullptr, nullptr, std::move(ev)});
}

void StandinDevice::flag_non_finite(const Tensor& t, uint64_t* flag) const {
  if (!owns(flag) || (t.nbytes() && !owns(t.raw())))
    throw_internal("standin-device", "a NaN/Inf check was given host memory");
  enqueue(
      [t, flag] {
        const int64_t bad = first_non_finite(t);
        if (bad >= 0)
          *flag = std::min(*flag, non_finite_key(static_cast<uint64_t>(bad), !std::isnan(t.get_as_double(bad))));
      },
      {t.raw(), flag}, issue_);
}

void StandinDevice::round_outputs(const KernelContext& ctx, const std::vector<size_t>& outs) const {
  for (size_t i : outs) {
    Tensor t = ctx.out(i);
    if (!t.nbytes()) continue;
    if (!owns(t.raw())) throw_internal("standin-device", "rounding of an output in host memory");
    enqueue(
        [t, m = ctx.math]() mutable {
          auto* p = reinterpret_cast<float*>(t.raw());
          round_floats(p, p, static_cast<int64_t>(t.nbytes() / sizeof(float)), m, false);
        },
        {t.raw()}, issue_);
  }
}

void StandinDevice::enqueue(std::function<void()> f, const std::vector<const void*>& touched, Stream s) const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  if (protect_memory)
    for (const void* p : touched)
      if (auto it = pool_->find(p); it != pool_->regions.end()) pool_->set(it->first, it->second, true);
  pool_->queues()[static_cast<size_t>(s)].push_back(Work{std::move(f), nullptr, nullptr});
}

namespace {

// Runs the queues of one synchronize(), each on a thread of its own as CUDA runs streams:
// nothing orders two streams but their events. A thread takes its whole queue at the
// start and shares nothing with the others while it runs, so work of two streams that no
// event orders is a data race ThreadSanitizer sees. A late stream's thread starts only
// once every other thread has finished or waits for an event (the worst order a missing
// event can meet, for tests that need it deterministic).
class QueueRun {
 public:
  // `copy_log`: for each work item the copy stream runs, how many compute-stream items had
  // run by its start.
  QueueRun(int late, std::vector<size_t>& copy_log) : late_(late), copy_log_(copy_log) {}

  template <class Queue, size_t N>
  void run(std::array<Queue, N>& queues) {
    size_t busy = 0;
    for (const auto& q : queues) busy += !q.empty();
    if (busy <= 1) {  // one stream: its events are reached in order, or were reached before
      for (size_t i = 0; i < queues.size(); ++i) drain(queues[i], false, i);
      return;
    }
    for (size_t i = 0; i < queues.size(); ++i)
      if (!queues[i].empty() && static_cast<int>(i) != late_) ++active_;
    std::vector<std::thread> threads;
    for (size_t i = 0; i < queues.size(); ++i)
      if (!queues[i].empty())
        threads.emplace_back([this, &q = queues[i], i, late = static_cast<int>(i) == late_] { drain(q, late, i); });
    for (std::thread& t : threads) t.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  template <class Queue>
  void drain(Queue& q, bool late, size_t stream) {
    if (late) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return active_ == 0; });
    }
    bool failed = false;
    for (auto& w : q) {
      if (w.wait && !failed) {
        std::unique_lock<std::mutex> lock(w.wait->mu);
        if (!w.wait->reached) {  // an event reached already does not make this stream idle
          lock.unlock();
          if (!late) idle(+1);
          lock.lock();
          w.wait->cv.wait(lock, [&] { return w.wait->reached; });
          lock.unlock();
          if (!late) idle(-1);
        }
      }
      if (w.run && !failed && stream == static_cast<size_t>(Backend::Stream::copy)) {
        std::lock_guard<std::mutex> lock(mu_);
        copy_log_.push_back(compute_done_.load());
      }
      if (w.run && !failed) try {
          w.run();
          if (stream == static_cast<size_t>(Backend::Stream::compute)) ++compute_done_;
        } catch (...) {  // like a failed CUDA stream: later work does not run, events are still reached
          failed = true;
          std::lock_guard<std::mutex> lock(mu_);
          if (!error_) error_ = std::current_exception();
        }
      if (w.record) w.record->reach();
    }
    if (!late) idle(+1);
  }
  // A thread stops (+1) or starts again (-1) being in the way of a late stream.
  void idle(int d) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      active_ -= d;
    }
    cv_.notify_all();
  }
  int late_;
  std::vector<size_t>& copy_log_;
  std::atomic<size_t> compute_done_{0};
  int active_ = 0;  // threads of streams that are not late, running and not waiting for an event
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;
};

}  // namespace

void StandinDevice::synchronize() const { drain(false); }

void StandinDevice::reserve_workspace(size_t bytes, size_t side_bytes) const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->refuse_in_capture("reserve_workspace()");
  pool_->counts.side_workspace = std::max(pool_->counts.side_workspace, side_bytes);
  if (bytes <= pool_->counts.workspace) return;
  pool_->counts.workspace = bytes;
  ++pool_->counts.workspace_grown;
}

// An event's point is reached once everything queued before it ran: the stand-in runs all
// that is queued (work after the event may run too, as it may on a GPU).
void StandinDevice::wait_host(const Event& e) const {
  if (e) drain(true);
}

void StandinDevice::drain(bool event_wait) const {
  std::array<std::vector<Work>, kStreams> work;
  const bool hidden = device_memory && protect_memory;
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    pool_->refuse_in_capture(event_wait ? "wait_host()" : "synchronize()");
    work.swap(pool_->pending);
    ++(event_wait ? pool_->counts.host_waits : in_host_kernel ? pool_->counts.host_syncs : pool_->counts.syncs);
    for (const auto& q : work) any = any || !q.empty();
    if (!hidden || any)
      for (auto& [start, r] : pool_->regions) pool_->set(start, r, false);
  }
  QueueRun run(late_stream ? static_cast<int>(*late_stream) : -1, pool_->copy_log);
  if (!hidden) {
    run.run(work);
    return;
  }
  // Device memory: open only while the queues run (their kernels and copies), closed
  // again even when a queued kernel throws.
  struct Close {
    Pool& pool;
    ~Close() {
      std::lock_guard<std::mutex> lock(pool.mu);
      for (auto& [start, r] : pool.regions) pool.set(start, r, true);
    }
  } close{*pool_};
  run.run(work);
}

bool StandinDevice::capturing() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->capture.has_value();
}

void StandinDevice::begin_capture() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  if (pool_->capture) throw_internal("standin-device", "begin_capture() while capturing");
  pool_->capture.emplace();
}

Backend::Captured StandinDevice::end_capture() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  if (!pool_->capture) throw_internal("standin-device", "end_capture() without begin_capture()");
  auto c = std::make_shared<std::array<std::vector<Work>, kStreams>>(std::move(*pool_->capture));
  pool_->capture.reset();
  ++pool_->counts.captures;
  return c;
}

void StandinDevice::abort_capture() const noexcept {
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->capture.reset();
}

void StandinDevice::replay(const Captured& c) const {
  const auto& graph = *std::static_pointer_cast<const std::array<std::vector<Work>, kStreams>>(c);
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->refuse_in_capture("replay()");
  ++pool_->counts.replays;
  // Each replay reaches its events anew: those recorded in the capture are replaced by
  // fresh ones (a wait for an event from before the capture keeps it: reached already).
  std::map<const EventState*, std::shared_ptr<EventState>> fresh;
  for (const auto& q : graph)
    for (const Work& w : q)
      if (w.record) fresh[w.record.get()] = nullptr;
  auto renew = [&](const std::shared_ptr<EventState>& e) -> std::shared_ptr<EventState> {
    if (!e || !fresh.count(e.get())) return e;
    std::shared_ptr<EventState>& n = fresh[e.get()];
    if (!n) {
      n = std::make_shared<EventState>();
      n->stream = e->stream;
    }
    return n;
  };
  for (size_t q = 0; q < kStreams; ++q)
    for (const Work& w : graph[q]) pool_->pending[q].push_back(Work{w.run, renew(w.record), renew(w.wait)});
  if (protect_memory)  // what queued work touches is closed already (device memory) or now
    for (auto& [start, r] : pool_->regions) pool_->set(start, r, true);
}

StandinDevice::Counts StandinDevice::counts() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  Counts c = pool_->counts;
  c.skipped = pool_->skipped.load(std::memory_order_relaxed);
  c.to_host_bytes = pool_->to_host_bytes.load(std::memory_order_relaxed);
  c.device_copy_bytes = pool_->device_bytes.load(std::memory_order_relaxed);
  return c;
}

void StandinDevice::reset_counts() {
  std::lock_guard<std::mutex> lock(pool_->mu);
  const size_t reserved = pool_->counts.workspace, side = pool_->counts.side_workspace;  // states, not counts
  pool_->counts = {};
  pool_->counts.workspace = reserved;
  pool_->counts.side_workspace = side;
  pool_->skipped.store(0, std::memory_order_relaxed);
  pool_->to_host_bytes.store(0, std::memory_order_relaxed);
  pool_->device_bytes.store(0, std::memory_order_relaxed);
  pool_->copy_log.clear();
}

std::vector<size_t> StandinDevice::copy_log() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->copy_log;
}

size_t StandinDevice::pending() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  size_t n = 0;
  for (const auto& q : pool_->pending) n += q.size();
  return n;
}

bool StandinDevice::owns(const void* p) const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->find(p) != pool_->regions.end();
}

bool StandinDevice::is_protected(const void* p) const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  auto it = pool_->find(p);
  return it != pool_->regions.end() && it->second.protect;
}

std::map<std::string, size_t> host_steps(const Plan& p, const StandinDevice& dev) {
  std::map<std::string, size_t> out;
  for (const PlanStep& st : p.steps) {
    const Node& n = p.graph.nodes[st.node];
    if (dev.runs_on_host(n.domain, n.op_type)) ++out[n.op_type];
  }
  return out;
}

}  // namespace trainrt::test
