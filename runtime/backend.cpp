#include "runtime/backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/onednn/dnnl_util.h"
#include "runtime/alignment.h"
#include "runtime/non_finite.h"

namespace trainrt {

const Kernel& Backend::kernel(const Node& n) const {
  const Registry& r = registry();
  if (const Kernel* k = r.kernels.find(kernel_set_, n.domain, n.op_type)) return *k;
  for (const std::string& set : fallbacks_)
    if (const Kernel* k = r.kernels.find(set, n.domain, n.op_type)) return asynchronous() ? on_host(*k) : *k;
  throw_unsupported("backend " + name(), "no kernel for op " + n.op_type + " (node '" + n.name + "')");
}

const Kernel& Backend::on_host(const Kernel& k) const {
  std::lock_guard<std::mutex> lock(host_mu_);
  std::unique_ptr<Kernel>& w = host_kernels_[&k];
  if (!w)
    w = std::make_unique<Kernel>([this, &k](KernelContext& ctx) {
      if (host_visible()) {
        synchronize();
        if (!ctx.skip_if_flagged || *ctx.skip_if_flagged == kAllFinite) k(ctx);
        return;
      }
      run_on_host_copies(
          k, ctx, [this](void* to, const void* from, size_t n) { copy(to, from, n); }, [this] { synchronize(); },
          [this](const void* p) { return reaches(p); });
    });
  return *w;
}

void Backend::begin_capture() const { throw_internal("backend " + name(), "cannot capture a step"); }
Backend::Captured Backend::end_capture() const { throw_internal("backend " + name(), "cannot capture a step"); }
void Backend::replay(const Captured& c) const {
  (void)c;
  throw_internal("backend " + name(), "cannot replay a step");
}

bool Backend::runs_on_host(const Node& n) const {
  return asynchronous() && registry().kernels.find(kernel_set_, n.domain, n.op_type) == nullptr;
}

Tensor Backend::to_host(const Tensor& t) const {
  if (host_visible() || !t.nbytes() || !reaches(t.raw())) {
    if (asynchronous()) synchronize();
    return t;
  }
  Tensor h(t.dtype(), t.dims());
  h.set_layout(t.layout());
  h.set_narrowed(t.narrowed());
  copy(h.raw(), t.raw(), t.nbytes());
  synchronize();
  return h;
}

std::shared_ptr<std::byte[]> Backend::allocate(size_t bytes) const {
  // The plan's offsets are multiples of kPlanAlignment from an arena's start.
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(::operator new[](std::max<size_t>(bytes, kPlanAlignment),
                                                                               std::align_val_t(kPlanAlignment))),
                                      [](std::byte* q) { ::operator delete[](q, std::align_val_t(kPlanAlignment)); });
}

size_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

size_t Backend::available_bytes() const { return available_memory_bytes(); }

void Backend::copy(void* to, const void* from, size_t bytes) const {
  if (bytes) std::memcpy(to, from, bytes);
}

double copy_bandwidth_gbps(const Backend& b, size_t bytes, int timed) {
  if (bytes == 0 || timed < 1) throw_internal("copy_bandwidth_gbps", "needs bytes > 0 and timed >= 1");
  const std::shared_ptr<std::byte[]> from = b.allocate(bytes), to = b.allocate(bytes);
  if (b.host_visible()) std::memset(from.get(), 1, bytes);
  b.copy(to.get(), from.get(), bytes);
  b.synchronize();
  double best = 0;
  for (int i = 0; i < timed; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    b.copy(to.get(), from.get(), bytes);
    b.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / s * 1e-9);
  }
  return best;
}

void Backend::flag_non_finite(const Tensor& t, uint64_t* flag) const {
  if (asynchronous()) synchronize();
  const int64_t bad = first_non_finite(t);
  if (bad < 0) return;
  const uint64_t key = non_finite_key(static_cast<uint64_t>(bad), !std::isnan(t.get_as_double(bad)));
  *flag = std::min(*flag, key);
}

void Backend::round_outputs(const KernelContext& ctx, const std::vector<size_t>& outs) const {
  for (size_t i : outs) {
    float* p = ctx.out(i).data<float>();
    round_floats(p, p, static_cast<int64_t>(ctx.out(i).nbytes() / sizeof(float)), ctx.math, true);
  }
}

bool Backend::skips_when_flagged(const Node& n) const {
  const Registry& r = registry();
  if (r.kernels.find(kernel_set_, n.domain, n.op_type))
    return r.kernels.skips_when_flagged(kernel_set_, n.domain, n.op_type);
  return asynchronous();  // a fallback runs through on_host, which reads the flag
}

size_t Backend::workspace_bytes(const KernelContext& ctx) const {
  return registry().kernels.workspace(kernel_set_, ctx);
}

NodeLayouts Backend::layouts(const Graph& g, const Node& n) const {
  if (!blocked_layouts) return {};
  return registry().kernels.layouts(layout_set_, g, n);
}

NodeSlots Backend::narrow(const Graph& g, const Node& n) const {
  if (!narrow_storage) return {};
  return registry().kernels.narrow(layout_set_, g, n);
}

std::vector<std::string> Backend::fallback_ops() const {
  std::vector<std::string> out;
  if (fallbacks_.empty()) return out;
  const Registry& r = registry();
  for (const std::string& op : r.kernels.ops_of("reference")) {
    auto sep = op.find("::");
    std::string domain = sep == std::string::npos ? "" : op.substr(0, sep);
    std::string type = sep == std::string::npos ? op : op.substr(sep + 2);
    if (!r.kernels.find(kernel_set_, domain, type)) out.push_back(op);
  }
  return out;
}

}  // namespace trainrt
