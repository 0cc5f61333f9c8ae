#include "standin_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <new>

#include "graph/error.h"
#include "runtime/executor.h"

namespace trainrt::test {

const std::set<std::string> kWrnHostOps{"MaxPool", "Sum", "SumToShape", "Flatten"};

namespace {
thread_local bool in_host_kernel = false;  // a host kernel of some stand-in runs on this thread
}  // namespace

struct StandinDevice::Pool {
  struct Region {
    size_t bytes = 0;   // asked for
    size_t mapped = 0;  // whole pages
    bool protect = false;
  };
  std::mutex mu;
  std::map<const std::byte*, Region> regions;  // by start
  std::map<const std::byte*, size_t> pinned;   // allocate_host() memory: start -> bytes
  std::vector<std::function<void()>> pending;
  Counts counts;

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
  blocked_layouts = false;  // the cuda backend's kernels take plain layouts
}

StandinDevice::~StandinDevice() {
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->pending.clear();
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
  if (have_cuda_kernels()) return registry().kernels.find("cuda", domain, op) == nullptr;
  return host_ops_.count(op) != 0;
}

bool StandinDevice::skips_when_flagged(const Node& n) const {
  if (runs_on_host(n.domain, n.op_type)) return true;  // Backend::on_host reads the flag
  if (have_cuda_kernels()) return registry().kernels.skips_when_flagged("cuda", n.domain, n.op_type);
  return n.op_type == "SGD" || n.op_type == "Adam" || n.op_type == "Increment";
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
    {
      std::lock_guard<std::mutex> l(pool_->mu);
      ++pool_->counts.launched;
    }
    KernelContext launched = ctx;  // the arguments as they were at the launch
    enqueue(
        [ref, launched, pool = pool_]() mutable {
          if (launched.skip_if_flagged && *launched.skip_if_flagged != kAllFinite) {
            std::lock_guard<std::mutex> l(pool->mu);
            ++pool->counts.skipped;
            return;
          }
          (*ref)(launched);
        },
        touched);
  });
  return *k;
}

std::shared_ptr<std::byte[]> StandinDevice::allocate(size_t bytes) const {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
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
  std::shared_ptr<std::byte[]> b = Backend::allocate(bytes);
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->pinned[b.get()] = bytes;
  return std::shared_ptr<std::byte[]>(b.get(), [pool = pool_, b](std::byte* q) {
    std::lock_guard<std::mutex> l(pool->mu);
    pool->pinned.erase(q);
  });
}

void StandinDevice::copy(void* to, const void* from, size_t bytes) const {
  if (!bytes) return;
  bool read_when_run = owns(from);
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    read_when_run = read_when_run || pool_->is_pinned(from);
  }
  if (read_when_run) {  // from the device or pinned host memory: read in stream order
    enqueue([to, from, bytes] { std::memcpy(to, from, bytes); }, {to, from});
    return;
  }
  // From host memory: staged at the call (cudaMemcpyAsync from pageable memory), landed in stream order.
  std::vector<std::byte> staged(static_cast<const std::byte*>(from), static_cast<const std::byte*>(from) + bytes);
  enqueue([to, staged] { std::memcpy(to, staged.data(), staged.size()); }, {to});
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
      {t.raw(), flag});
}

void StandinDevice::enqueue(std::function<void()> f, const std::vector<const void*>& touched) const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  if (protect_memory)
    for (const void* p : touched)
      if (auto it = pool_->find(p); it != pool_->regions.end()) pool_->set(it->first, it->second, true);
  pool_->pending.push_back(std::move(f));
}

void StandinDevice::synchronize() const {
  std::vector<std::function<void()>> work;
  const bool hidden = device_memory && protect_memory;
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    work.swap(pool_->pending);
    ++(in_host_kernel ? pool_->counts.host_syncs : pool_->counts.syncs);
    if (!hidden || !work.empty())
      for (auto& [start, r] : pool_->regions) pool_->set(start, r, false);
  }
  if (!hidden) {
    for (auto& f : work) f();
    return;
  }
  // Device memory: open only while the queue runs (its kernels and copies), closed again
  // even when a queued kernel throws.
  struct Close {
    Pool& pool;
    ~Close() {
      std::lock_guard<std::mutex> lock(pool.mu);
      for (auto& [start, r] : pool.regions) pool.set(start, r, true);
    }
  } close{*pool_};
  for (auto& f : work) f();
}

StandinDevice::Counts StandinDevice::counts() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->counts;
}

void StandinDevice::reset_counts() {
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->counts = {};
}

size_t StandinDevice::pending() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->pending.size();
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

}  // namespace trainrt::test
