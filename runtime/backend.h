// Backends: where kernels run. The executor asks a Backend for each node's kernel.
//
//   std::unique_ptr<Backend> b = make_backend("cpu");   // or "reference", "cuda"
//   const Kernel& k = b->kernel(node);                  // throws Unsupported if none
//
// Why: the reference backend is the oracle (plain loops, fp32/fp64); the cpu
// backend uses oneDNN/oneTBB kernels and falls back to the reference kernel only
// for ops listed by fallback_ops() (shown by `trainrt inspect`); the cuda backend
// (cuDNN/cuBLASLt) slots in behind the same interface.
//
// Memory and time: the executor asks its backend for every buffer kernels touch
// (allocate) and copies in what the backend cannot reach (feeds, constants from the
// model). A backend whose kernels run asynchronously (cuda: queued on a stream) says
// so, and the executor calls synchronize() only where the host reads or writes a value:
// a step's end (results and the NaN/Inf flags: the checks run on the device,
// flag_non_finite, and state writers skip on them, skips_when_flagged), where a step hook reads a value
// (Executor::value) and after each kernel when profiling; its kernels that have no
// device version run on the host after a synchronize() too (fallback_ops). The cpu and
// reference backends are synchronous host backends, so all of this is a no-op for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/core/register_all.h"

namespace trainrt {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The kernel for `n` on this backend; throws Unsupported naming the op.
  virtual const Kernel& kernel(const Node& n) const;
  // Which arguments `n`'s kernel takes in blocked_layout (ops/core/kernel.h); all Plain
  // for reference fallbacks, kernels that declared nothing and !blocked_layouts.
  NodeLayouts layouts(const Graph& g, const Node& n) const;
  // Which float32 arguments `n`'s kernel takes stored in 16 bits (ops/core/kernel.h
  // NodeSlots; runtime/narrow.h picks the values); none for reference fallbacks, kernels
  // that declared nothing and !narrow_storage. Reported from the same kernel set as layouts().
  NodeSlots narrow(const Graph& g, const Node& n) const;
  // Throws Unsupported (naming why) when this backend cannot run the convolutions in
  // `m` arithmetic at a useful speed: the cpu backend needs AVX-512 BF16 for bf16 (fp16
  // it emulates: rounded copies, no speed-up); the reference and cuda backends take
  // everything (cuda: rounded copies on TF32 tensor cores, ops/conv_cuda.cu).
  virtual void check_math(MathPrecision m) const { (void)m; }
  // Runs two independent kernel calls (a pair of the plan, Plan::runs_with_next) at the
  // same time where this backend can: the cpu backend runs them on two oneTBB threads
  // and gives each half of its OpenMP threads; an asynchronous backend issues the second
  // on its side stream (Stream::side: cuda's second compute stream), forked from the
  // compute stream by an event before the pair and joined back by one after it, with a
  // workspace of its own. By default one after the other.
  virtual void run_pair(const std::function<void()>& first, const std::function<void()>& second) const {
    first();
    second();
  }
  // Ops whose kernel on this backend is the reference one (on an asynchronous backend:
  // the ops that run on the host).
  std::vector<std::string> fallback_ops() const;

  // `bytes` bytes (kPlanAlignment-aligned) that this backend's kernels can read and write and
  // the host can too, after synchronize(). Default: host memory.
  virtual std::shared_ptr<std::byte[]> allocate(size_t bytes) const;
  // Whether the kernels can use memory at `p` that allocate() did not hand out (a feed
  // or a model's initializer in host memory); when not, the executor copies it in.
  virtual bool reaches(const void* p) const {
    (void)p;
    return true;
  }
  // Copies `bytes` bytes between any memory the host or this backend uses, in order
  // with the kernels already issued. A copy into host memory has landed after
  // synchronize(); a copy from host memory that allocate_host() did not hand out reads
  // it at the call (pageable memory), one from allocate_host() memory when it runs.
  virtual void copy(void* to, const void* from, size_t bytes) const;
  // Whether the host may read and write what allocate() hands out (after synchronize()).
  // False for device memory (cuda: cudaMalloc): the host then sees it only through
  // copy() into host memory at named points (results, NaN/Inf flags, state for
  // checkpoints and exports), and its host kernels (fallback_ops) run on staged copies.
  virtual bool host_visible() const { return true; }
  // Host memory for staging copies to and from this backend: pinned for cuda, so a copy
  // runs asynchronously. Default: host memory (Backend::allocate).
  virtual std::shared_ptr<std::byte[]> allocate_host(size_t bytes) const { return Backend::allocate(bytes); }
  // A host tensor holding `t` (same type, shape and layout): `t` itself where the host
  // sees this backend's memory, else a copy (synchronises).
  Tensor to_host(const Tensor& t) const;
  // Bytes a new allocation may still take, and what that figure is ("MemAvailable",
  // "free GPU memory"); the executor refuses a plan that needs more, before allocating.
  // Default: the host's MemAvailable (0: unknown).
  virtual size_t available_bytes() const;
  virtual std::string available_source() const { return "MemAvailable"; }
  // Whether kernels may still be running when their call returns (device backends).
  virtual bool asynchronous() const { return false; }
  // Waits until every kernel and copy issued so far has finished.
  virtual void synchronize() const {}
  // Records whether float tensor `t` holds a NaN or Inf, in order with the kernels issued
  // so far: `*flag` (8 bytes of this backend's memory) becomes min(*flag, non_finite_key(i,
  // element i is Inf)) over the non-finite elements i of `t` (storage order), so a flag
  // set to kAllFinite before the step names the first bad element and its kind once the
  // host reads it after synchronize(). Other dtypes leave it alone. Default: a host scan
  // at once (after synchronize() on an asynchronous backend); cuda: a kernel on its stream.
  virtual void flag_non_finite(const Tensor& t, uint64_t* flag) const;
  // Rounds float32 outputs `outs` of the kernel call `ctx` just made (math_rounded_outputs,
  // those not stored in 16 bits) to ctx.math's bf16 or half values in place, every element
  // of their storage, in order with the kernels issued so far: the executor's step after
  // such a kernel under bf16/fp16, the same for every backend. Default: on the host at once;
  // cuda: a kernel on the current stream.
  virtual void round_outputs(const KernelContext& ctx, const std::vector<size_t>& outs) const;
  static constexpr uint64_t kAllFinite = ~uint64_t{0};
  static constexpr uint64_t non_finite_key(uint64_t element, bool inf) { return element * 2 + (inf ? 1 : 0); }
  // Streams. An asynchronous backend runs kernels, copy() and flag_non_finite() on its
  // compute stream, in issue order; copy_on() may issue a copy on another stream (cuda:
  // one each for copies and for collectives). Work on different streams is ordered only
  // by events: record(s) marks the point reached by what was issued on `s` so far, and
  // wait(s, e) makes work issued on `s` afterwards start after that point, without the
  // host waiting. synchronize() waits for every stream. A synchronous backend has
  // nothing to order: record() gives a null event, wait() and copy_on() fall back to
  // the plain calls.
  // `side`: the second compute stream, where run_pair() issues the second of a pair.
  enum class Stream : uint8_t { compute, copy, comm, side };
  using Event = std::shared_ptr<const void>;
  virtual Event record(Stream s) const {
    (void)s;
    return nullptr;
  }
  virtual void wait(Stream s, const Event& e) const {
    (void)s;
    (void)e;
  }
  virtual void copy_on(Stream s, void* to, const void* from, size_t bytes) const {
    (void)s;
    copy(to, from, bytes);
  }
  // The host waits until the point `e` marks is reached (cuda: cudaEventSynchronize), and
  // for no other work. Default: synchronize() on an asynchronous backend.
  virtual void wait_host(const Event& e) const {
    (void)e;
    if (asynchronous()) synchronize();
  }
  // Capture (CUDA graphs). Work issued between begin_capture() and end_capture() on any
  // stream is recorded, not run; replay() issues it again as one launch, with the
  // arguments and memory it named when captured and the memory's contents as they are
  // when it runs (batches, the seed and the learning rate reach it through pinned
  // buffers). While capturing, synchronize(), allocate(), allocate_host() and copies from
  // pageable host memory are errors (Internal, as CUDA refuses them); abort_capture() ends
  // a capture and drops what it recorded. Default: no capture (can_capture() false).
  using Captured = std::shared_ptr<const void>;
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() const;
  virtual Captured end_capture() const;
  virtual void abort_capture() const noexcept {}
  virtual void replay(const Captured& c) const;
  // Whether `n` runs on the host here (an asynchronous backend's fallback_ops): such a
  // step synchronises, so it cannot be captured.
  virtual bool runs_on_host(const Node& n) const;
  // Scratch memory: the bytes a call of `ctx`'s kernel needs (its registered
  // WorkspaceRule; 0 for kernels of a fallback set), and reserve_workspace(), which
  // allocates that much before the plan's first run so that no step allocates (cuda:
  // the workspace its kernels share), and `side_bytes` for the side stream's kernels
  // (the second steps of pairs, run_pair). Default: none.
  virtual size_t workspace_bytes(const KernelContext& ctx) const;
  virtual void reserve_workspace(size_t bytes, size_t side_bytes) const {
    (void)bytes;
    (void)side_bytes;
  }
  // Whether this backend's kernel for `n` honours KernelContext::skip_if_flagged: its
  // own kernels where the registry says so, and every host fallback (Backend::on_host).
  virtual bool skips_when_flagged(const Node& n) const;
  // Threads this backend may use (0 = all cores).
  int threads = 0;
  // Whether layouts() reports the kernels' blocked slots. The cpu backend turns it off
  // where oneDNN has no nChw16c kernels (no AVX-512: they would run on its reference
  // implementations, ops/onednn/dnnl_util.h cpu_has_avx512_core); tests turn it on to check
  // the layout choice and the blocked kernels on any CPU.
  bool blocked_layouts = true;
  // Whether narrow() reports the kernels' 16-bit slots (cuda, under --precision bf16/fp16).
  bool narrow_storage = true;
  // The layout the kernels' Any and Shared slots take besides Plain: Blocked16c (cpu,
  // oneDNN's nChw16c) or ChannelsLast (cuda, NHWC for cuDNN's tensor cores).
  Layout blocked_layout = Layout::Blocked16c;

 protected:
  // Kernels of `kernel_set`; ops without one take the first kernel set of `fallbacks`
  // that has it ("cpu" and then "reference" for the cuda backend).
  Backend(std::string kernel_set, std::vector<std::string> fallbacks)
      : kernel_set_(std::move(kernel_set)), layout_set_(kernel_set_), fallbacks_(std::move(fallbacks)) {}
  // `k` made safe to call among asynchronous kernels: it calls synchronize() first
  // (a host kernel reads what queued kernels write) and, where the host cannot see this
  // backend's memory, runs `k` on host copies of its arguments and copies its outputs
  // back. One wrapper per kernel, kept.
  const Kernel& on_host(const Kernel& k) const;
  // layouts() reports the layouts `set` declared instead of this backend's own (a
  // stand-in device: the kernels it models).
  void report_layouts_of(std::string set) { layout_set_ = std::move(set); }

 private:
  std::string kernel_set_;
  std::string layout_set_;  // whose declared layouts layouts() reports
  std::vector<std::string> fallbacks_;
  mutable std::mutex host_mu_;
  mutable std::map<const Kernel*, std::unique_ptr<Kernel>> host_kernels_;
};

// The host's MemAvailable from /proc/meminfo (0 if unreadable): what a host backend's
// new arena may take.
size_t available_memory_bytes();

// The speed of `b`'s copy(): `bytes` copied between two buffers of its allocate(), the
// bytes read plus the bytes written per second, in GB/s (1e9 bytes), the best of `timed`
// copies after an untimed one (first touch). What a memory-bound kernel can reach on this
// backend, measured in the run that profiles the kernels (trainrt bench --profile).
double copy_bandwidth_gbps(const Backend& b, size_t bytes = size_t{256} << 20, int timed = 3);

// "reference", "cpu" (and "cuda" when built with CUDA); BadInput for other names.
// "cuda" without a usable GPU is Unsupported, naming the reason.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads = 0);
std::vector<std::string> backend_names();

}  // namespace trainrt
