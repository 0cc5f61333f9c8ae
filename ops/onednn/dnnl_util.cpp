#include "ops/onednn/dnnl_util.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/register_all.h"
#include "ops/onednn/winograd.h"

namespace trainrt::dnnl_util {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

static Dims dims_or_scalar(const std::vector<int64_t>& dims) {
  if (dims.empty()) return Dims{1};
  return Dims(dims.begin(), dims.end());
}

static Dims row_major_strides(const Dims& d) {
  Dims strides(d.size());
  int64_t s = 1;
  for (size_t i = d.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(d[i], 1);
  }
  return strides;
}

Md plain_desc(const std::vector<int64_t>& dims) {
  Dims d = dims_or_scalar(dims);
  return Md(d, dnnl::memory::data_type::f32, row_major_strides(d));
}

Md sub_block_desc(const std::vector<int64_t>& used, const std::vector<int64_t>& full) {
  TRAINRT_ASSERT(used.size() == full.size());
  return Md(dims_or_scalar(used), dnnl::memory::data_type::f32, row_major_strides(dims_or_scalar(full)));
}

Md desc_of(const Tensor& t) {
  if (t.layout() == Layout::Blocked16c)
    return Md(dims_or_scalar(t.dims()), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nChw16c);
  return plain_desc(t.dims());
}

Md blocked_sub_block_desc(const Tensor& t, const std::vector<int64_t>& used) {
  TRAINRT_ASSERT(t.layout() == Layout::Blocked16c && used.size() == t.dims().size() && used[1] == t.dims()[1]);
  return desc_of(t).submemory_desc(dims_or_scalar(used), Dims(used.size(), 0));
}

Md blocked16_desc(const std::vector<int64_t>& dims) {
  return Md(dims_or_scalar(dims), dnnl::memory::data_type::f32, dnnl::memory::format_tag::nChw16c);
}

Md any_desc(const std::vector<int64_t>& dims, dnnl::memory::data_type dt) {
  return Md(dims_or_scalar(dims), dt, dnnl::memory::format_tag::any);
}

dnnl::memory::data_type math_type(MathPrecision m) {
  return m == MathPrecision::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

dnnl::memory math_rounded(const Tensor& t, const Md& md, MathPrecision m, int slot) {
  if (m != MathPrecision::fp16) return memory_of(t, md);
  dnnl::memory r = temp_memory(md, slot);
  const int64_t count = static_cast<int64_t>(md.get_size() / sizeof(float));
  TRAINRT_ASSERT(count <= t.numel());
  round_floats(t.data<float>(), static_cast<float*>(r.get_data_handle()), count, m, /*parallel=*/true);
  return r;
}

bool cpu_has_bf16() {
  // oneDNN's ISA values are bit sets: a newer ISA contains the bits of the older ones.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

bool cpu_has_avx512_core() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;
}

std::string cpu_isa_name() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41:
      return "sse41";
    case isa::avx:
      return "avx";
    case isa::avx2:
      return "avx2";
    case isa::avx2_vnni:
      return "avx2_vnni";
    case isa::avx512_mic:
      return "avx512_mic";
    case isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case isa::avx512_core:
      return "avx512_core";
    case isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

std::string cpu_paths() {
  // Blocked layouts follow cpu_has_avx512_core (CpuBackend); Winograd is oneDNN's on
  // AVX-512 and the backend's own (ops/onednn/winograd.h) on AVX2+FMA; bf16 follows
  // cpu_has_bf16.
  const auto on = [](bool b) { return b ? "on" : "off"; };
  const bool avx512 = cpu_has_avx512_core();
  return cpu_isa_name() + ": blocked layouts " + on(avx512) + ", Winograd " + on(avx512 || winograd::supported()) +
         ", bf16 " + on(cpu_has_bf16());
}

dnnl::memory memory_of(const Tensor& t, const Md& md) {
  TRAINRT_ASSERT(md.get_size() <= t.nbytes() || t.nbytes() == 0);
  return dnnl::memory(md, engine(), const_cast<std::byte*>(t.raw()));
}

namespace {
// A grow-only, 64-byte aligned buffer per (thread, slot).
struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr, o.bytes = 0; }
  ~Buffer() { std::free(ptr); }
  void* get(size_t want) {
    if (want > bytes) {
      std::free(ptr);
      bytes = (want + 63) / 64 * 64;
      ptr = std::aligned_alloc(64, bytes);
      if (!ptr) throw_internal("dnnl_util", "out of memory for a " + std::to_string(bytes) + "-byte temporary");
    }
    return ptr;
  }
};

void* thread_buffer(size_t slot, size_t bytes) {
  thread_local std::vector<Buffer> buffers;
  if (buffers.size() <= slot) buffers.resize(slot + 1);
  return buffers[slot].get(std::max<size_t>(bytes, 64));
}
}  // namespace

dnnl::memory temp_memory(const Md& md, int slot) {
  TRAINRT_ASSERT(slot >= 0);
  return dnnl::memory(md, engine(), thread_buffer(static_cast<size_t>(slot) + 1, md.get_size()));
}

dnnl::primitive_attr attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

void execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory> args) {
  const dnnl_memory_desc_t* scratch =
      dnnl_primitive_desc_query_md(prim.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  if (scratch) {
    Md md(*scratch);
    if (md.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(md, engine(), thread_buffer(0, md.get_size()));
  }
  prim.execute(stream(), args);
  stream().wait();
}

dnnl::reorder make_reorder(const Md& from, const Md& to) {
  if (from == to) return dnnl::reorder();
  return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to, attr()));
}

namespace {
std::atomic<uint64_t> g_reorder_bytes{0};
}

void reorder(const dnnl::reorder& r, const dnnl::memory& from, const dnnl::memory& to) {
  g_reorder_bytes.fetch_add(to.get_desc().get_size(), std::memory_order_relaxed);
  execute(r, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

uint64_t reorder_bytes() { return g_reorder_bytes.load(); }

// ---- plan cache ----------------------------------------------------------
namespace {
struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const void>> plans;
};
Cache& cache() {
  static Cache c;
  return c;
}
// Shapes vary only with the batch size in practice; a runaway (e.g. a model fed
// many resolutions) restarts the cache instead of growing without bound.
constexpr size_t kMaxPlans = 4096;
}  // namespace

std::shared_ptr<const void> cache_find(const std::string& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find(key);
  return it == c.plans.end() ? nullptr : it->second;
}

std::shared_ptr<const void> cache_insert(const std::string& key, std::shared_ptr<const void> plan) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.plans.size() >= kMaxPlans) c.plans.clear();
  return c.plans.emplace(key, std::move(plan)).first->second;
}

size_t cache_size() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.plans.size();
}

void cache_clear() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.plans.clear();
}

void key_part(std::string& s, int64_t v) { s += std::to_string(v); }
void key_part(std::string& s, int v) { s += std::to_string(v); }
void key_part(std::string& s, bool v) { s += v ? '1' : '0'; }
void key_part(std::string& s, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  s += std::to_string(bits);
}
void key_part(std::string& s, const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  s += ']';  // distinguishes [] from a missing part
}
void key_part(std::string& s, const std::string& v) { s += v; }
void key_part(std::string& s, const char* v) { s += v; }
void key_part(std::string& s, Layout v) { s += v == Layout::Plain ? "plain" : "b16c"; }

// ---- kernel helpers ------------------------------------------------------
bool all_f32(const KernelContext& ctx) {
  for (const Tensor* t : ctx.inputs)
    if (t && t->dtype() != DataType::Float32) return false;
  for (const Tensor* t : ctx.outputs)
    if (t && t->dtype() != DataType::Float32) return false;
  return true;
}

namespace {
std::atomic<uint64_t> g_fallbacks{0};
}  // namespace

uint64_t reference_fallbacks() { return g_fallbacks.load(); }

void run_reference(KernelContext& ctx) {
  g_fallbacks.fetch_add(1);
  const Kernel* k = registry().kernels.find("reference", ctx.node.domain, ctx.node.op_type);
  if (!k) throw_unsupported("cpu backend", "no reference kernel to fall back on for op " + ctx.node.op_type);
  run_on_plain_copies(*k, ctx);  // reference kernels read row-major data
}

bool winograd_shape(const Node& n, const Tensor& w) {
  const std::vector<int64_t>& wd = w.dims();
  auto all_one = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
  };
  return wd.size() == 4 && wd[2] == 3 && wd[3] == 3 && n.attr_int("group", 1) == 1 &&
         all_one(n.attr_ints("strides", {1, 1})) && all_one(n.attr_ints("dilations", {1, 1}));
}

Window window_of(const Node& n, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                 const std::vector<int64_t>& kernel) {
  const size_t sp = in.size();
  Window w;
  w.kernel = n.attr_ints("kernel_shape", kernel);
  w.strides = n.attr_ints("strides", std::vector<int64_t>(sp, 1));
  w.dilations = n.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  TRAINRT_ASSERT(w.kernel.size() == sp && w.strides.size() == sp && w.dilations.size() == sp && pads.size() == 2 * sp);
  w.pads_begin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(sp));
  w.pads_end.assign(pads.begin() + static_cast<std::ptrdiff_t>(sp), pads.end());
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    std::fill(w.pads_begin.begin(), w.pads_begin.end(), 0);
    std::fill(w.pads_end.begin(), w.pads_end.end(), 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < sp; ++i) {
      int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * w.strides[i] + extent - in[i]);
      int64_t small = total / 2;
      w.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.pads_end[i] = total - w.pads_begin[i];
    }
  }
  return w;
}

std::vector<int64_t> effective_pads_end(const Window& w, const std::vector<int64_t>& in,
                                        const std::vector<int64_t>& out) {
  std::vector<int64_t> pe(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
    pe[i] = (out[i] - 1) * w.strides[i] + extent - in[i] - w.pads_begin[i];
  }
  return pe;
}

Dims dnnl_dilations(const std::vector<int64_t>& onnx_dilations) {
  Dims d;
  for (int64_t v : onnx_dilations) d.push_back(v - 1);
  return d;
}

}  // namespace trainrt::dnnl_util
