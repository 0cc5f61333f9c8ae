#include "ops/core/kernel.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "graph/error.h"
#include "graph/schema.h"
#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/core/rounded_outputs.h"

namespace trainrt {

const char* math_precision_name(MathPrecision m) {
  switch (m) {
    case MathPrecision::bf16:
      return "bf16";
    case MathPrecision::fp16:
      return "fp16";
    default:
      return "fp32";
  }
}

const char* conv_algorithm_name(ConvAlgorithm a) { return a == ConvAlgorithm::winograd ? "winograd" : "direct"; }

const char* fp32_math_name(Fp32Math m) { return m == Fp32Math::tf32 ? "tf32" : "strict"; }

namespace {
std::atomic<Fp32Math> process_fp32_math{Fp32Math::strict};
}  // namespace

Fp32Math default_fp32_math() { return process_fp32_math.load(std::memory_order_relaxed); }
void set_default_fp32_math(Fp32Math m) { process_fp32_math.store(m, std::memory_order_relaxed); }

namespace {
std::atomic<bool> process_deterministic{true};
}  // namespace

bool default_deterministic() { return process_deterministic.load(std::memory_order_relaxed); }
void set_default_deterministic(bool on) { process_deterministic.store(on, std::memory_order_relaxed); }

Tensor math_input(const Tensor& t, MathPrecision m, bool parallel) {
  if (m == MathPrecision::fp32 || t.dtype() != DataType::Float32) return t;
  TRAINRT_ASSERT(t.layout() == Layout::Plain);
  Tensor r(DataType::Float32, t.dims());
  round_floats(t.data<float>(), r.data<float>(), t.numel(), m, parallel);
  return r;
}

void round_floats(const float* from, float* to, int64_t n, MathPrecision m, bool parallel) {
  auto round = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) to[i] = round_to_math(from[i], m);
  };
  if (parallel)
    for_range<true>(n, round);
  else
    for_range<false>(n, round);
}

std::vector<size_t> math_rounded_inputs(const Node& n, const std::vector<bool>& wanted) {
  const std::string& op = n.op_type;
  if (op == "Conv" || op == "FusedConv" || op == "ConvTranspose" || op == "Gemm" || op == "FusedGemm" || op == "MatMul")
    return {0, 1};
  if (op == "DropoutReluGrad") return {1};  // Z's sign, as a 16-bit Z reads (ops/misc.cpp)
  if (op != "ConvGrad" && op != "ConvTransposeGrad") return {};
  auto want = [&](size_t i) { return i < wanted.size() && wanted[i]; };
  std::vector<size_t> in{0};
  if (want(1)) in.push_back(1);  // X for dW
  if (want(0)) in.push_back(2);  // W for dX
  return in;
}

std::vector<size_t> math_rounded_outputs(const Node& n) {
  static const std::set<std::string> kY{"Conv",
                                        "FusedConv",
                                        "ConvGrad",
                                        "BatchNormalization",
                                        "BatchNormalizationRelu",
                                        "BatchNormalizationGrad",
                                        "DropoutReluGrad"};
  if (!kY.count(n.op_type) || n.outputs.empty()) return {};
  // FusedConv with a residual: act(conv + B) is rounded inside its kernels and Z added in
  // fp32 after it (the unfused graph's Add), so Y is no 16-bit number.
  if (n.op_type == "FusedConv" && n.has_input(3)) return {};
  // ConvGrad's dW as autocast's: the gradient of the weights' 16-bit copy is a 16-bit number.
  if (n.op_type == "ConvGrad" && n.outputs.size() > 1) return {0, 1};
  return {0};
}

bool written_rounded(const Graph& g, const std::string& v) {
  if (v.empty()) return false;
  for (const Node& n : g.nodes)
    for (size_t k : math_rounded_outputs(n))
      if (k < n.outputs.size() && n.outputs[k] == v) return true;
  return false;
}

void KernelRegistry::add(const std::string& backend, const std::string& domain, const std::string& op_type, Kernel k) {
  auto key = std::make_tuple(backend, canonical_domain(domain), op_type);
  if (kernels_.count(key)) throw_internal("KernelRegistry", backend + " kernel for '" + op_type + "' registered twice");
  kernels_.emplace(key, std::move(k));
  if (!source_.empty()) sources_[key] = source_;
}

std::string KernelRegistry::source(const std::string& backend, const std::string& domain,
                                   const std::string& op_type) const {
  auto it = sources_.find(std::make_tuple(backend, canonical_domain(domain), op_type));
  return it == sources_.end() ? std::string() : it->second;
}

const Kernel* KernelRegistry::find(const std::string& backend, const std::string& domain,
                                   const std::string& op_type) const {
  auto it = kernels_.find(std::make_tuple(backend, canonical_domain(domain), op_type));
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::ops_of(const std::string& backend) const {
  std::vector<std::string> out;
  for (const auto& [key, k] : kernels_)
    if (std::get<0>(key) == backend)
      out.push_back(std::get<1>(key).empty() ? std::get<2>(key) : std::get<1>(key) + "::" + std::get<2>(key));
  return out;
}

void KernelRegistry::set_layouts(const std::string& backend, const std::string& domain, const std::string& op_type,
                                 LayoutRule r) {
  auto key = std::make_tuple(backend, canonical_domain(domain), op_type);
  if (!kernels_.count(key)) throw_internal("KernelRegistry", "layouts for '" + op_type + "' before its kernel");
  layouts_[key] = std::move(r);
}

NodeLayouts KernelRegistry::layouts(const std::string& backend, const Graph& g, const Node& n) const {
  auto it = layouts_.find(std::make_tuple(backend, canonical_domain(n.domain), n.op_type));
  return it == layouts_.end() ? NodeLayouts{} : it->second(g, n);
}

void KernelRegistry::set_narrow(const std::string& backend, const std::string& domain, const std::string& op_type,
                                NarrowRule r) {
  auto key = std::make_tuple(backend, canonical_domain(domain), op_type);
  if (!kernels_.count(key)) throw_internal("KernelRegistry", "16-bit slots of '" + op_type + "' before its kernel");
  narrow_[key] = std::move(r);
}

NodeSlots KernelRegistry::narrow(const std::string& backend, const Graph& g, const Node& n) const {
  auto it = narrow_.find(std::make_tuple(backend, canonical_domain(n.domain), n.op_type));
  return it == narrow_.end() ? NodeSlots{} : it->second(g, n);
}

void KernelRegistry::set_skips_when_flagged(const std::string& backend, const std::string& domain,
                                            const std::string& op_type) {
  auto key = std::make_tuple(backend, canonical_domain(domain), op_type);
  if (!kernels_.count(key)) throw_internal("KernelRegistry", "skip flag of '" + op_type + "' before its kernel");
  skips_.insert(key);
}

bool KernelRegistry::skips_when_flagged(const std::string& backend, const std::string& domain,
                                        const std::string& op_type) const {
  return skips_.count(std::make_tuple(backend, canonical_domain(domain), op_type)) != 0;
}

void KernelRegistry::set_workspace(const std::string& backend, const std::string& domain, const std::string& op_type,
                                   WorkspaceRule r) {
  auto key = std::make_tuple(backend, canonical_domain(domain), op_type);
  if (!kernels_.count(key)) throw_internal("KernelRegistry", "workspace of '" + op_type + "' before its kernel");
  workspace_[key] = std::move(r);
}

size_t KernelRegistry::workspace(const std::string& backend, const KernelContext& ctx) const {
  auto it = workspace_.find(std::make_tuple(backend, canonical_domain(ctx.node.domain), ctx.node.op_type));
  return it == workspace_.end() ? 0 : it->second(ctx);
}

void run_on_plain_copies(const Kernel& k, KernelContext& ctx) {
  auto converted = [](const Tensor* t) { return t && (t->layout() != Layout::Plain || t->narrowed()); };
  if (std::none_of(ctx.inputs.begin(), ctx.inputs.end(), converted) &&
      std::none_of(ctx.outputs.begin(), ctx.outputs.end(), converted))
    return k(ctx);
  std::vector<Tensor> copies;  // reserved: the pointers into it stay valid
  copies.reserve(ctx.inputs.size() + ctx.outputs.size());
  KernelContext plain = ctx;
  plain.inputs.clear();
  plain.outputs.clear();
  // A narrowed tensor widens element by element (its layout kept), then goes to Plain.
  auto plain_copy = [](const Tensor& t) {
    Tensor wide = t.narrowed() ? t.cast(DataType::Float32) : t;
    return wide.layout() == Layout::Plain ? wide : to_plain(wide);
  };
  for (const Tensor* t : ctx.inputs) plain.inputs.push_back(converted(t) ? &copies.emplace_back(plain_copy(*t)) : t);
  for (Tensor* t : ctx.outputs)
    plain.outputs.push_back(
        converted(t) ? &copies.emplace_back(t->narrowed() ? DataType::Float32 : t->dtype(), t->dims()) : t);
  k(plain);
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    Tensor* to = ctx.outputs[i];
    if (!converted(to)) continue;
    const Tensor& from = *plain.outputs[i];
    if (!to->narrowed()) {
      copy_from_plain(from, *to);
      continue;
    }
    Tensor laid = from;  // the float32 result in the output's layout
    if (to->layout() != Layout::Plain) {
      laid = Tensor(DataType::Float32, to->dims());
      laid.set_layout(to->layout());
      copy_from_plain(from, laid);
    }
    const Tensor rounded = laid.cast(to->dtype());  // round to nearest even, as round_to_math
    if (rounded.nbytes()) std::memcpy(to->raw(), rounded.raw(), rounded.nbytes());
  }
}

void run_on_host_copies(const Kernel& k, KernelContext& ctx,
                        const std::function<void(void*, const void*, size_t)>& copy, const std::function<void()>& sync,
                        const std::function<bool(const void*)>& on_device) {
  uint64_t flag = ~uint64_t{0};
  if (ctx.skip_if_flagged) copy(&flag, ctx.skip_if_flagged, sizeof flag);
  std::map<const void*, Tensor> host;  // by device address
  auto stage = [&](const Tensor* t) -> Tensor* {
    if (!t || !t->nbytes() || !on_device(t->raw())) return const_cast<Tensor*>(t);
    auto [it, fresh] = host.try_emplace(t->raw());
    if (fresh) {
      it->second = Tensor(t->dtype(), t->dims());
      it->second.set_layout(t->layout());
      it->second.set_narrowed(t->narrowed());
      copy(it->second.raw(), t->raw(), t->nbytes());
    }
    return &it->second;
  };
  KernelContext hc = ctx;
  hc.skip_if_flagged = nullptr;
  for (auto& t : hc.inputs) t = stage(t);
  for (auto& t : hc.outputs) t = stage(t);
  sync();
  if (flag != ~uint64_t{0}) return;
  k(hc);
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    if (hc.outputs[i] != ctx.outputs[i]) copy(ctx.outputs[i]->raw(), hc.outputs[i]->raw(), ctx.outputs[i]->nbytes());
}

void KernelRegistry::set_in_place(const std::string& domain, const std::string& op_type, InPlaceRule r) {
  in_place_[std::make_pair(canonical_domain(domain), op_type)] = std::move(r);
}

std::vector<InPlacePair> KernelRegistry::in_place(const Node& n, const InPlaceDims& in,
                                                  const std::vector<int64_t>* out0) const {
  auto it = in_place_.find(std::make_pair(canonical_domain(n.domain), n.op_type));
  return it == in_place_.end() ? std::vector<InPlacePair>{} : it->second(n, in, out0);
}

}  // namespace trainrt
