// A strict stand-in for the cuda backend, for the executor's tests on the CPU.
//
//   StandinDevice dev;                              // kernels: the cuda backend's set
//   TrainingSession s(t, ..., dev);  s.step(b, lr);
//   CHECK(dev.counts().syncs == 2);                  // synchronize() calls outside host kernels
//
// What it models of a CUDA stream and the cuda backend (runtime/cuda/cuda_backend.cpp):
// - Kernels of ops that have a "cuda" kernel in the registry are queued (as their
//   reference kernels) on the compute stream and run only at synchronize(), in issue
//   order; so are copies and NaN/Inf checks (flag_non_finite).
// - Streams as CUDA's: compute, copy, comm and side (the second compute stream, where
//   run_pair() issues a pair's second step) each have a queue, and synchronize() runs
//   each non-empty queue on a thread of its own. Only events (record/wait) order work of
//   two streams; without one, two streams touching the same bytes race (ThreadSanitizer
//   reports it) and results may differ. late_stream makes one stream run as late as its
//   events allow (a deterministic worst case for a missing event); ignore_waits drops
//   every wait (a test's control that shows a missing event is caught). The other ops run on the host through
//   Backend::on_host, as the cuda backend runs its fallbacks. A build without CUDA has no
//   "cuda" kernels: there the host ops are an explicit list (the constructor's).
// - Its kernels refuse memory that allocate() did not hand out (a device kernel faults
//   on a host pointer).
// - Memory it hands out is its own page-aligned mmap, device memory as the cuda backend's
//   cudaMalloc gives (device_memory, the default): PROT_NONE except while synchronize()
//   runs the queue, so a host read or write outside its kernels and copies faults at once
//   (SIGSEGV). The host reaches it only through copy() and the executor's staging
//   (Backend::host_visible() is false). With device_memory off (managed memory) a region
//   is PROT_NONE only from the moment queued work touches it until synchronize().
// - allocate_host() memory is pinned host memory: a copy() from it reads it when the copy
//   runs, not when it is issued, so a host write before synchronize() shows in results.
//   A copy from other host memory reads it at the call (pageable memory).
// - A queued kernel given KernelContext::skip_if_flagged reads the flag when it runs and
//   writes nothing when a check lowered it, as the cuda optimizer kernels do.
// - Layouts as the cuda backend's: Backend::layouts() reports the "cuda" kernels'
//   declared layouts and blocked_layout is ChannelsLast (NHWC), so the executor keeps the
//   values the cuda backend would keep NHWC so; the queued reference kernels read Plain
//   copies of such arguments and write theirs back (run_on_plain_copies).
// - It counts synchronize() calls (apart: those a host kernel makes) and host kernel
//   calls, per op.
// Its results equal the reference backend's bit for bit: the kernels are the same.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/plan.h"

namespace trainrt::test {

// Ops of the fused Wide ResNet training graph the stand-in runs on the host in a build
// without CUDA kernels.
extern const std::set<std::string> kWrnHostOps;

class StandinDevice : public Backend {
 public:
  explicit StandinDevice(std::set<std::string> host_ops_without_cuda = kWrnHostOps);
  ~StandinDevice() override;
  std::string name() const override { return "standin-device"; }
  bool asynchronous() const override { return true; }
  const Kernel& kernel(const Node& n) const override;
  std::shared_ptr<std::byte[]> allocate(size_t bytes) const override;
  bool reaches(const void* p) const override { return owns(p); }
  void copy(void* to, const void* from, size_t bytes) const override;
  void copy_on(Stream s, void* to, const void* from, size_t bytes) const override;
  Event record(Stream s) const override;
  void wait(Stream s, const Event& e) const override;
  void synchronize() const override;
  void wait_host(const Event& e) const override;  // counted apart: Counts::host_waits
  // Capture as CUDA graphs do: between begin_capture() and end_capture() the queues'
  // work is recorded instead of queued; replay() queues it again (events renewed), so
  // kernels read their memory when the replay runs. synchronize(), allocate(),
  // allocate_host() and a copy from pageable host memory while capturing throw Internal.
  bool can_capture() const override { return capture_enabled; }
  void begin_capture() const override;
  Captured end_capture() const override;
  void abort_capture() const noexcept override;
  void replay(const Captured& c) const override;
  bool runs_on_host(const Node& n) const override { return runs_on_host(n.domain, n.op_type); }
  bool host_visible() const override { return !device_memory; }
  std::shared_ptr<std::byte[]> allocate_host(size_t bytes) const override;
  void flag_non_finite(const Tensor& t, uint64_t* flag) const override;
  void round_outputs(const KernelContext& ctx, const std::vector<size_t>& outs) const override;  // queued
  size_t available_bytes() const override { return budget; }
  std::string available_source() const override { return "the stand-in's budget"; }

  // Whether op `op` runs on the host here (no "cuda" kernel, or the explicit list).
  bool runs_on_host(const std::string& domain, const std::string& op) const;
  bool capturing() const;
  // As the cuda backend: its host ops, and the kernels whose cuda kernel honours the flag
  // (the registry's; in a build without CUDA the optimizer updates, as optimizer_cuda.cu).
  bool skips_when_flagged(const Node& n) const override;
  // Whether the registry holds cuda kernels (a CUDA build): the host ops follow them.
  static bool have_cuda_kernels();

  struct Counts {
    size_t syncs = 0;                           // synchronize() calls other than a host kernel's own
    size_t host_syncs = 0;                      // the host kernels' synchronize() calls
    size_t launched = 0;                        // queued kernels
    size_t skipped = 0;                         // of those, skipped on a lowered skip flag
    size_t to_host_bytes = 0;                   // bytes copied from device memory into host memory
    size_t device_copy_bytes = 0;               // bytes copied from device memory to device memory
    size_t records = 0, waits = 0;              // record() and wait() calls
    size_t host_waits = 0;                      // wait_host() calls
    size_t allocations = 0;                     // allocate() and allocate_host() calls
    size_t workspace = 0, workspace_grown = 0;  // reserved workspace bytes, and reserves that grew it
    size_t captures = 0, replays = 0;           // end_capture() and replay() calls
    size_t side_workspace = 0;                  // reserved for the side stream
    size_t pairs = 0;                           // run_pair() calls that used the side stream
    size_t laid_out = 0;                        // queued kernels given a ChannelsLast argument
    // Filter arguments of queued convolutions (Conv and FusedConv w, ConvGrad's W and dW)
    // that were ChannelsLast (KRSC), and those stored in 16 bits (KRSC or not).
    size_t krsc_filters = 0, narrow_filters = 0;
    std::map<std::string, size_t> host_calls;  // host kernel calls per op
    size_t host_total() const;
  };
  Counts counts() const;
  void reset_counts();

  // Queues `f` on stream `s` as a kernel of this device that touches `touched` (the
  // stand-in collectives' work on the comm stream).
  void run_on(Stream s, std::function<void()> f, const std::vector<const void*>& touched) const {
    enqueue(std::move(f), touched, s);
  }
  size_t pending() const;
  // For each work item the copy stream ran since reset_counts(), in order: how many
  // compute-stream work items its synchronize() had run when it started (how far the
  // copy stream was ahead of the compute stream).
  std::vector<size_t> copy_log() const;
  bool owns(const void* p) const;
  // Whether the region holding `p` is protected now (what the stand-in believes; the
  // tests read /proc/self/maps too).
  bool is_protected(const void* p) const;

  size_t budget = size_t{1} << 40;
  std::string fail_op;         // kernels of this op type fail at launch
  std::string fail_when_run;   // queued kernels of this op type fail when they run (a CUDA asynchronous error)
  bool protect_memory = true;  // false: memory stays readable (a test's control)
  // true (cudaMalloc): the host never sees memory allocate() hands out; it is PROT_NONE
  // except while synchronize() runs the queue, so only the stand-in's own kernels and
  // copies touch it. false (managed memory): only while queued work touches it.
  bool device_memory = true;
  // This stream's queue runs only once every other stream's is done or waits for an event.
  std::optional<Stream> late_stream;
  bool ignore_waits = false;    // wait() orders nothing (a missing event, for a test's control)
  bool capture_enabled = true;  // false: can_capture() says no (the executor issues every run)
  // Scratch memory its kernels need per call (as the cuda kernels' WorkspaceRule); none
  // when unset. A queued kernel needing more than reserve_workspace() reserved fails at
  // launch, as a cuda step would have to allocate there.
  std::function<size_t(const KernelContext&)> workspace_of;
  size_t workspace_bytes(const KernelContext& ctx) const override { return workspace_of ? workspace_of(ctx) : 0; }
  void reserve_workspace(size_t bytes, size_t side_bytes) const override;
  // A pair as the cuda backend runs it: the first on the compute stream, the second on the
  // side stream after an event of the compute stream, the compute stream waiting for the
  // side stream's end; the second's kernels and copies check the side workspace. Off
  // (side_stream false): one after the other on the compute stream.
  void run_pair(const std::function<void()>& first, const std::function<void()>& second) const override;
  bool side_stream = true;
  // Ops run on the host besides those without a cuda kernel (as a cuda kernel's own
  // fallback for a dtype or shape it lacks): a plan holding one is neither queued ahead
  // of the host nor captured.
  std::set<std::string> also_on_host;

  struct Pool;  // the regions, shared with the deleters of what allocate() handed out
  struct EventState;
  struct Work;

 private:
  static constexpr size_t kStreams = 4;     // compute, copy, comm, side
  mutable Stream issue_ = Stream::compute;  // where kernels and copy() go now (side: in a pair's second)
  void enqueue(std::function<void()> f, const std::vector<const void*>& touched, Stream s) const;
  void drain(bool event_wait) const;  // synchronize() and wait_host()
  std::set<std::string> host_ops_;
  std::shared_ptr<Pool> pool_;
  mutable std::mutex kernels_mu_;
  mutable std::map<const Kernel*, std::unique_ptr<Kernel>> kernels_;
};

// Plan steps of `p` whose op runs on the host on `dev`, per op (the host calls a run of
// the plan should count).
std::map<std::string, size_t> host_steps(const Plan& p, const StandinDevice& dev);

}  // namespace trainrt::test
