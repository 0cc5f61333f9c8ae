// What an Executor keeps per plan (Executor::Prepared) and per run in flight
// (Executor::Slot): private to the executor's sources (runtime/executor*.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/executor.h"

namespace trainrt {

// Asynchronous backends: the host memory of one run in flight (allocate_host: pinned for
// cuda), one slot per run launch() may have in flight (run() uses slot 0), all allocated
// by the plan's first run (Executor::run_slot): the batch's copy per staged feed, the seed, the results and the
// check flags copied back where the host cannot see the backend's memory, and the
// event on the compute stream after the run's last copy.
struct Executor::Slot {
  std::vector<std::shared_ptr<std::byte[]>> feeds;  // per feed (null: not staged)
  // Per feed: the caller's tensor when its buffer is from batch_pool(), copied from where
  // it lies, and held until the slot is reused (its run has ended by then).
  std::vector<Tensor> held;
  std::vector<std::shared_ptr<std::byte[]>> results;  // per result_values entry (null: not copied)
  std::shared_ptr<std::byte[]> seed, flags;
  // RunOptions::copy_out of the run in this slot: each tensor and its host copy (pinned,
  // allocated for every slot at once when a run first asks for them).
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<std::shared_ptr<std::byte[]>> out_host;
  Backend::Event done;
};

struct Executor::Prepared {
  // Signature: feed dtypes and dims (in graph input order) and the extra outputs.
  std::vector<DataType> feed_types;
  std::vector<std::vector<int64_t>> feed_dims;
  std::vector<Tensor> shape_values;  // the values of shape_feeds_ the plan was specialised on
  std::vector<std::string> extra;

  Plan plan;
  std::vector<Layout> layouts;  // per plan value (runtime/layout.h)
  std::vector<char> narrowed;   // per plan value: stored in 16 bits (runtime/narrow.h)
  std::shared_ptr<std::byte[]> arena;
  std::vector<Tensor> slots;   // one per plan value; kernels get pointers to these
  std::vector<Tensor> staged;  // per feed: its copy in backend memory, when the backend cannot reach it
  // Asynchronous backends: per feed, two landing buffers in backend memory taking turns
  // (run k lands in landing[k % 2]): the copy stream writes the next batch there while
  // the step before still runs, and the compute stream copies it into `staged`.
  std::vector<std::array<Tensor, 2>> landing;
  std::vector<const Kernel*> kernels;
  std::vector<KernelContext> contexts;                     // per step, built once: a run only sets training and seed
  std::vector<std::vector<size_t>> rounded;                // per step: outputs rounded after the kernel (bf16/fp16)
  std::vector<int> feed_values;                            // plan value of each graph input
  std::vector<std::pair<std::string, int>> result_values;  // returned name -> plan value
  std::vector<double> flops;                               // per step, for profiles
  TensorMap results;
  // Which outputs of each step are checked for NaN/Inf, for the check set below.
  std::vector<std::vector<char>> checked;
  std::vector<std::string> check_names;
  bool check_anomaly = false;
  bool check_ready = false;
  // Asynchronous backends: per step and output, the index of its flag in `flags` (-1:
  // unchecked), 8 bytes each in the backend's memory (Backend::flag_non_finite), reset
  // from `flags_init` at the start of each run; steps [0, flags_read) have been read.
  std::vector<std::vector<int>> flag_of;
  std::shared_ptr<std::byte[]> flags;
  std::vector<uint64_t> flags_init;
  std::shared_ptr<std::byte[]> flags_init_pinned;  // flags_init in allocate_host memory (asynchronous backends)
  // The flag of "some check before the first state write failed" (-1: none), which the
  // state writers read on the device (KernelContext::skip_if_flagged); set when every
  // state writer's kernel honours it, and then the step waits for nothing before them.
  int any_flag = -1;
  size_t flags_read = 0;
  // Asynchronous backends: the run's seed in backend memory (KernelContext::run_seed),
  // written from its slot's pinned copy; the batch copies to issue (landing <- pinned on
  // the copy stream, then staged <- landing on the compute stream).
  std::shared_ptr<std::byte[]> seed_device;
  struct FeedCopy {
    void* to;
    const void* from;
    size_t bytes;
    void* landing = nullptr;  // asynchronous backends: the landing buffer in between
  };
  std::vector<FeedCopy> feed_copies;
  // Asynchronous backends: the host memory of each run in flight (Executor::Slot).
  std::vector<Slot> ring;
  size_t current = 0;  // the slot of the run being issued
  // The landing buffers' turn for the next run, and per turn the compute stream's event
  // after it last copied out of them (the copy stream overwrites them after that only).
  size_t landing_turn = 0;
  std::array<Backend::Event, 2> landed;
  // The captured step (Backend::replay), the run options it was captured with, and
  // whether capturing failed (the backend refused something in it: never tried again).
  Backend::Captured captured;
  std::string capture_key;
  bool capture_failed = false;
  bool host_steps = false;  // some step runs on the host (Backend::runs_on_host): never captured
  // Why runs of this plan are not captured, where it is fixed for the plan (written when
  // it is built, so that a run allocates no reason: Executor::capture_refusal).
  std::string no_capture_backend;  // "the cpu backend cannot capture"
  std::string no_capture_host;     // "an op runs on the host: 'NODE' (OP)", the first of them
  // What capture did for this plan (Executor::capture_status): captures, replays, runs
  // not captured after the first and the last run's reason; the refusal's message.
  Executor::CaptureStatus capture;
  size_t workspace = 0;       // the kernels' scratch memory (Executor::plan_workspace)
  size_t side_workspace = 0;  // the side stream's, for the second steps of pairs
  size_t runs = 0;
};

}  // namespace trainrt
