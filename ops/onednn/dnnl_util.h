// oneDNN plumbing for the cpu backend's kernels (ops/*_cpu.cpp).
//
//   namespace du = trainrt::dnnl_util;
//   struct Plan { dnnl::primitive prim; dnnl::primitive_desc pd; };
//   auto plan = du::cached<Plan>(du::key("relu", x.dims()), [&] {
//     dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, md);
//     dnnl::eltwise_forward::primitive_desc pd(d, du::attr(), du::engine());
//     return Plan{dnnl::eltwise_forward(pd), pd};
//   });
//   du::execute(plan->prim, {{DNNL_ARG_SRC, du::memory_of(x, md)}, {DNNL_ARG_DST, ...}});
//
// Why: creating a oneDNN primitive descriptor costs far more than running a small
// primitive, and the executor calls a node's kernel with the same shapes every
// step. Each kernel therefore keeps a "plan" (primitive descriptors, primitives,
// chosen layouts, fallback decision) in one process-wide cache keyed by op kind,
// shapes and attributes. The cache is thread-safe; a plan is immutable once made.
//
// Every primitive is created with a user-managed scratchpad (attr()); execute()
// gives it a per-thread buffer, so one plan can run in several threads at once.
// Temporaries for reorders (blocked layouts) come from per-thread slots too.
//
// Layout at the kernel interface is dense row-major (N,C,H,W) unless the tensor says
// Layout::Blocked16c (runtime/layout.h decides; only kernels that declared they take it
// get one): such kernels describe their arguments with desc_of(t) and put the layout
// in their plan's key. fp32 only: kernels call run_reference() for other dtypes and
// for attribute combinations oneDNN cannot express; it converts blocked arguments. Threads are OpenMP's (libdnnl here
// is built with OpenMP). Kernels that only move bytes (Transpose, Concat: ops/shape_ops_cpu.cpp) take every dtype,
// described to oneDNN as s32 or u8 words.
#pragma once

#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/core/kernel.h"

namespace trainrt::dnnl_util {

using Dims = dnnl::memory::dims;
using Md = dnnl::memory::desc;

dnnl::engine& engine();
dnnl::stream& stream();  // one per thread

// Row-major fp32 descriptor of `dims` (any rank 1..12; rank 0 is treated as {1}).
Md plain_desc(const std::vector<int64_t>& dims);
// The leading sub-block `used` (each dim <= full's) of a row-major fp32 tensor of
// dims `full`: dims `used`, strides of `full`.
Md sub_block_desc(const std::vector<int64_t>& used, const std::vector<int64_t>& full);
// fp32 descriptor of the tensor's storage: plain_desc, or nChw16c for Blocked16c.
Md desc_of(const Tensor& t);
// The leading sub-block `used` (spatial dims only may be smaller) of Blocked16c `t`: a
// view with t's strides, for a reorder into a dense nChw16c tensor of dims `used`
// (blocked16_desc) or out of one. oneDNN's jit kernels want dense operands.
Md blocked_sub_block_desc(const Tensor& t, const std::vector<int64_t>& used);
// A dense nChw16c fp32 descriptor of `dims` (rank 4, C a multiple of 16).
Md blocked16_desc(const std::vector<int64_t>& dims);
// Descriptor with format_tag::any (fp32 unless `dt` says): the primitive picks the layout.
Md any_desc(const std::vector<int64_t>& dims, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// The data type a convolution primitive reads its inputs in: bf16 for MathPrecision::
// bf16, else f32 (fp16 is emulated: the inputs are rounded copies, see math_rounded).
dnnl::memory::data_type math_type(MathPrecision m);
// The tensor's memory as the primitive should read it: for MathPrecision::fp16 a copy
// in per-thread `slot` with every element rounded to half precision (same layout: the
// rounding is per element), else the tensor itself.
dnnl::memory math_rounded(const Tensor& t, const Md& md, MathPrecision m, int slot);
// True when this CPU runs oneDNN's bf16 convolutions natively (AVX-512 BF16 or newer);
// elsewhere oneDNN would take its slow reference path, so callers refuse bf16 instead.
bool cpu_has_bf16();
// True when oneDNN runs its AVX-512 kernels here (avx512_core or newer): the ones that
// take the nChw16c layout natively (runtime/layout.h) and the fp32 Winograd
// convolutions. On AVX2 oneDNN's kernels block by 8 channels and have no Winograd, and
// nChw16c tensors would go to its reference implementations (measured on an AVX2
// machine: a Wide ResNet step ~100x slower), so blocked layouts stay off there.
bool cpu_has_avx512_core();
// The effective oneDNN ISA by name ("avx512_core_bf16", "avx2", ...): what oneDNN
// dispatches to on this CPU, lowered by ONEDNN_MAX_CPU_ISA when that is set.
std::string cpu_isa_name();
// One line naming the CPU paths the cpu backend takes here, for `trainrt --version`
// and CI logs: "avx512_core_bf16: blocked layouts on, Winograd on, bf16 on".
std::string cpu_paths();
// Wraps the tensor's buffer (no copy); `md` must describe the same bytes.
dnnl::memory memory_of(const Tensor& t, const Md& md);
// Memory of `md` in a per-thread temporary slot (valid until the slot is reused).
dnnl::memory temp_memory(const Md& md, int slot);

// Attributes every primitive is created with (user scratchpad).
dnnl::primitive_attr attr();
// Runs `prim` on the thread's stream with a scratchpad and waits.
void execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory> args);
// A reorder between two layouts, or an empty one when they are equal.
dnnl::reorder make_reorder(const Md& from, const Md& to);
// Runs a reorder primitive from `from` to `to`.
void reorder(const dnnl::reorder& r, const dnnl::memory& from, const dnnl::memory& to);
// Bytes written by reorder() since the process started (tests and the benchmark
// use it to see layout round trips).
uint64_t reorder_bytes();

// ---- plan cache ----------------------------------------------------------
std::shared_ptr<const void> cache_find(const std::string& key);
// Inserts unless present; returns whichever plan is in the cache afterwards.
std::shared_ptr<const void> cache_insert(const std::string& key, std::shared_ptr<const void> plan);
size_t cache_size();
void cache_clear();

// The plan for `key`, made by `make()` on first use. Plans of one key prefix
// (the op kind) must all be of one type.
template <typename Plan, typename Make>
std::shared_ptr<const Plan> cached(const std::string& key, Make&& make) {
  if (auto p = cache_find(key)) return std::static_pointer_cast<const Plan>(p);
  std::shared_ptr<const void> made = std::make_shared<const Plan>(make());
  return std::static_pointer_cast<const Plan>(cache_insert(key, std::move(made)));
}

// A plan that sends the op to the reference kernel.
template <typename Plan>
Plan reference_plan() {
  Plan p;
  p.use_reference = true;
  return p;
}

// Cache keys: key("conv", x.dims(), w.dims(), strides, group, alpha) -> "conv|2,3,8,8|...".
void key_part(std::string& s, int64_t v);
void key_part(std::string& s, int v);
void key_part(std::string& s, bool v);
void key_part(std::string& s, float v);  // exact bits
void key_part(std::string& s, const std::vector<int64_t>& v);
void key_part(std::string& s, const std::string& v);
void key_part(std::string& s, const char* v);
void key_part(std::string& s, Layout v);
template <typename... A>
std::string key(const A&... parts) {
  std::string s;
  ((key_part(s, parts), s += '|'), ...);
  return s;
}

// ---- kernel helpers ------------------------------------------------------
// True when every present input and output is fp32.
bool all_f32(const KernelContext& ctx);
// Runs the reference kernel of ctx.node's op (the oracle; handles every case).
void run_reference(KernelContext& ctx);
// How many times a cpu kernel has handed a call to the reference kernel (tests
// use it to tell the oneDNN path from the fallback; the benchmark reports it).
uint64_t reference_fallbacks();
// ONNX spatial attributes resolved against concrete shapes (Conv and pools).
// `in`/`out` are spatial sizes, `kernel` the kernel extent before dilation.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads_begin, pads_end;
};
// Reads kernel_shape (or `kernel` when given), strides, dilations, pads and
// auto_pad; for auto_pad SAME_* the pads are derived from the output size.
Window window_of(const Node& n, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                 const std::vector<int64_t>& kernel);
// oneDNN's padding_r that makes `out` exact for the window: it differs from the
// ONNX end pad under ceil_mode (larger) or when the last rows are dropped (smaller).
std::vector<int64_t> effective_pads_end(const Window& w, const std::vector<int64_t>& in,
                                        const std::vector<int64_t>& out);
// A 2-D convolution oneDNN's Winograd F(4x4, 3x3) can take: 3x3 weights, stride 1,
// no dilation, one group (whether it has an implementation is known only when its
// primitive descriptor is created).
bool winograd_shape(const Node& n, const Tensor& w);
// oneDNN dilation = ONNX dilation - 1.
Dims dnnl_dilations(const std::vector<int64_t>& onnx_dilations);

}  // namespace trainrt::dnnl_util
