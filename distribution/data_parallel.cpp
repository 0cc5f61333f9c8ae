#include "distribution/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "graph/error.h"

namespace trainrt {

namespace {

// FNV-1a over bytes, kept below 2^40 so that a sum of a few copies stays exact in a double.
struct Hash {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  void add(int64_t x) { add(&x, sizeof x); }
  double value() const { return static_cast<double>(h >> 24); }
};

// Whether every rank passed the same `mine` (integers below 2^40, as Hash::value gives:
// their sums over the ranks are exact, and equal w times this rank's only when every rank
// agrees, short of a collision).
bool same_on_all_ranks(Communicator& c, const std::vector<double>& mine, const std::string& what) {
  std::vector<double> sums = mine;
  c.sum(sums, what);
  for (size_t i = 0; i < mine.size(); ++i)
    if (sums[i] != mine[i] * c.world()) return false;
  return true;
}

}  // namespace

// A bucket's flat buffer: its gradients back to back, and in bucket 0 the loss and the
// stop flag after them. In place (the plan's group for the bucket): a view of the arena
// where the gradients are, gaps of the 64-byte alignment between them included; else a
// buffer of its own they are packed into. On a backend whose memory the host cannot see
// (cuda) `flat` is in the backend's memory and `host` mirrors it in host memory
// (Backend::allocate_host): a host communicator reduces the mirror, and the averages are
// checked there and copied back (see start/finish). Elsewhere `host` is `flat`.
struct DataParallel::Bucket {
  Tensor flat;                           // dtype_ [elements (+2 in bucket 0)]
  Tensor host;                           // the same, where the host reads it
  std::vector<std::string> gradients;    // value names, in the bucket's order
  std::vector<size_t> offsets;           // element offset of each in `flat`
  size_t elements = 0;                   // gradient elements and gaps (extras after them)
  bool in_place = false;                 // `flat` is the plan's group in the arena
  std::shared_ptr<CommRequest> request;  // the running all-reduce, if started
  bool finished = true;
  // Ordered by events (events_): the all-reduce's end on the device (its watch: watches_).
  Backend::Event done;
  size_t flag0 = 0;  // its first check flag (bucket 0: the loss's, then one per gradient)
};

DataParallel::DataParallel(TrainingSession& s, Communicator& c, DataParallelOptions o) : s_(s), comm_(c), opts_(o) {
  if (opts_.bucket_cap_bytes == 0 || opts_.first_bucket_cap_bytes == 0)
    throw_bad_input("--bucket-cap-mb", "a bucket cap must be > 0");
  s_.set_check_finite(false);
  // Filled by choose_events(); read by the executor when a run's last step is issued, so
  // the first run (which makes the buckets in its first hook) returns it too.
  s_.set_copy_out(&checks_);
  // The device path's "any check failed" flag, which the state writers read: allocated
  // before the first run, whose options the session makes before the hooks make the
  // buckets, so that the first step's writers skip on it too.
  if (staged() && comm_.orders_by_events()) {
    any_ = s_.backend().allocate(sizeof(uint64_t));
    s_.backend().copy(any_.get(), &Backend::kAllFinite, sizeof(uint64_t));  // host memory read at the call
  }
  // The buckets are ranges of the arena, counted with it.
  s_.set_contiguous([this](const Plan& p) { return bucket_groups(p); });
  set_hooks(true);
}

std::vector<ContiguousGroup> DataParallel::bucket_groups(const Plan& p) const {
  std::vector<ContiguousGroup> out;
  for (const GradientBucket& b : plan_buckets(s_.training(), p, opts_.bucket_cap_bytes, opts_.first_bucket_cap_bytes)) {
    ContiguousGroup g;
    for (const std::string& param : b.params) g.values.push_back(s_.training().gradients.at(param));
    g.tail_bytes = out.empty() ? 2 * sizeof(double) : 0;  // bucket 0: the loss and the stop flag
    out.push_back(std::move(g));
  }
  return out;
}

size_t DataParallel::packed_buckets() const {
  size_t n = 0;
  for (const auto& st : state_) n += st->in_place ? 0 : 1;
  return n;
}

void DataParallel::set_hooks(bool on) {
  s_.set_step_hooks(on ? this : nullptr);
  s_.set_after_run(on ? std::function<double(const TensorMap&)>([this](const TensorMap& r) { return after_run(r); })
                      : nullptr);
}

// The session's after-run hook: a step's loss (the mean over the ranks on the device path).
double DataParallel::after_run(const TensorMap& results) {
  if (events_) return conclude_on_device(results);
  return results.at(s_.training().loss).get_as_double(0);
}

DataParallel::~DataParallel() {
  set_hooks(false);
  s_.set_contiguous(nullptr);
  s_.set_check_finite(true);
  s_.set_copy_out(nullptr);
  // A bucket still in flight writes into our buffers: wait for it (it completes unless a
  // peer died, in which case the communicator is broken and returns at once).
  std::vector<std::shared_ptr<CommRequest>> pending;
  for (auto& b : state_)
    if (b->request) pending.push_back(b->request);
  for (auto& w : watches_)
    if (w) pending.push_back(w);
  for (auto& r : pending) try {
      r->wait();
    } catch (const Error&) {
    }
}

void DataParallel::prepare() {
  const Plan& plan = s_.plan();
  drain();
  buckets_ = plan_buckets(s_.training(), plan, opts_.bucket_cap_bytes, opts_.first_bucket_cap_bytes);
  state_.clear();
  ready_at_.assign(plan.steps.size() + 1, {});
  need_at_.assign(plan.steps.size(), {});
  std::map<int, size_t> bucket_of_value;
  Hash agree;
  agree.add(static_cast<int64_t>(buckets_.size()));
  std::set<DataType> types;
  std::map<int, const PlannedGroup*> group_at;  // first member -> the plan's group
  for (const PlannedGroup& pg : plan.groups) group_at[pg.values.front()] = &pg;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto st = std::make_unique<Bucket>();
    std::vector<int> members;
    for (const std::string& p : buckets_[b].params) {
      const std::string& g = s_.training().gradients.at(p);
      const int v = plan.index.at(g);
      const PlannedValue& pv = plan.values[static_cast<size_t>(v)];
      types.insert(pv.dtype);
      bucket_of_value[v] = b;
      members.push_back(v);
      st->gradients.push_back(g);
    }
    auto group = members.empty() ? group_at.end() : group_at.find(members.front());
    st->in_place = types.size() == 1 && group != group_at.end() && group->second->values == members;
    const size_t esize = std::max<size_t>(1, dtype_size(*types.begin()));
    for (int v : members) {
      const PlannedValue& pv = plan.values[static_cast<size_t>(v)];
      st->offsets.push_back(st->in_place ? (pv.offset - group->second->offset) / esize : st->elements);
      st->elements =
          st->in_place ? (group->second->tail_offset - group->second->offset) / esize : st->elements + pv.bytes / esize;
      agree.add(pv.name);
      agree.add(static_cast<int64_t>(pv.bytes));
      agree.add(static_cast<int64_t>(st->offsets.back()));
    }
    state_.push_back(std::move(st));
    // A gradient written before the run (none in practice) starts with step 0's.
    ready_at_[static_cast<size_t>(std::max(0, buckets_[b].ready_after_step))].push_back(b);
  }
  if (types.size() > 1)
    throw_unsupported("data-parallel training",
                      "gradients of more than one element type (one flat buffer each bucket)");
  dtype_ = types.empty() ? DataType::Float32 : *types.begin();
  if (dtype_ != DataType::Float32 && dtype_ != DataType::Float64)
    throw_unsupported("data-parallel training", std::string("gradients of type ") + dtype_name(dtype_));
  // In the backend's memory: a GPU communicator (NCCL) reduces the buckets where they are.
  for (size_t b = 0; b < state_.size(); ++b) {
    Bucket& st = *state_[b];
    const int64_t n = static_cast<int64_t>(st.elements + (b == 0 ? 2 : 0));
    const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype_);
    if (!st.in_place) st.flat = Tensor(dtype_, {n}, s_.backend().allocate(bytes));
    if (staged()) st.host = Tensor(dtype_, {n}, s_.backend().allocate_host(bytes));
  }
  choose_events(plan);
  // Each step that reads a gradient waits for its bucket first (the optimizer nodes).
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    std::set<size_t> need;
    for (int v : plan.steps[s].inputs)
      if (auto it = bucket_of_value.find(v); it != bucket_of_value.end()) need.insert(it->second);
    need_at_[s].assign(need.begin(), need.end());
  }
  // Every rank must cut the same buckets in the same order, or the sums would mix
  // different gradients: compare a hash of the layout over the ranks.
  if (!same_on_all_ranks(comm_, {agree.value()}, "bucket layout check"))
    throw Error(ErrorKind::Peer, "data-parallel training: rank " + std::to_string(rank()) +
                                     ": the ranks' gradient buckets differ (a different model, batch shape or "
                                     "--bucket-cap-mb on some rank)");
  timings_.assign(state_.size(), {});
  plan_ = &plan;
}

bool DataParallel::staged() const { return !s_.backend().host_visible(); }

// Whether this plan's buckets go through the device path ordered by events (see the
// header): a communicator that orders collectives by events (NCCL) on a backend whose
// memory the host cannot see, every state writer skipping on a device flag, a loss of
// the gradients' type and no loss scaling (its skipped steps are decided on the host).
// Then the check flags, their host mirror and the skip flag the session's state writers
// read are set up here.
void DataParallel::choose_events(const Plan& plan) {
  const Backend& dev = s_.backend();
  const PlannedValue& loss = plan.value(s_.training().loss);
  events_ = staged() && comm_.orders_by_events() && s_.training().loss_scale.empty() && plan.first_state_write >= 0 &&
            loss.dtype == dtype_ && loss.bytes == dtype_size(dtype_);
  for (const PlanStep& st : plan.steps)
    events_ = events_ && (!st.writes_state || dev.skips_when_flagged(plan.graph.nodes[st.node]));
  events_ = events_ && any_;
  queue_only_ = false;
  checks_.clear();
  if (!events_) return;
  size_t n = 0;
  for (size_t b = 0; b < state_.size(); ++b) {
    state_[b]->flag0 = n;
    n += state_[b]->gradients.size() + (b == 0 ? 1 : 0);
  }
  flags_init_.assign(n, Backend::kAllFinite);
  // The flags, then the mean loss and the stop flag (8 bytes each, of the gradients' type),
  // which the run copies out, then this rank's stop flag, written before each run.
  flags_ = dev.allocate((n + 3) * sizeof(uint64_t));
  checks_ = {{"data_parallel.checks", Tensor(DataType::UInt64, {static_cast<int64_t>(n + 2)}, flags_)}};
  queue_only_ = true;
}

// Points the in-place buckets at their range of the current arena (it may have moved
// since the last step: the executor releases the arenas of other plans), and `host` at
// `flat` where the host sees the backend's memory.
void DataParallel::bind_in_place() {
  for (size_t b = 0; b < state_.size(); ++b) {
    Bucket& st = *state_[b];
    if (st.in_place)  // the first gradient starts the group
      st.flat = bucket_view(s_.value(st.gradients.front()), 0, {static_cast<int64_t>(st.elements + (b == 0 ? 2 : 0))});
    if (!staged()) st.host = st.flat;
  }
}

// A view, shaped `dims`, of a bucket buffer (`flat` or its host mirror) from element `at`.
Tensor DataParallel::bucket_view(const Tensor& buffer, size_t at, const std::vector<int64_t>& dims) const {
  // Not owning: the buckets outlive every use within a step.
  auto* p = const_cast<std::byte*>(buffer.raw()) + at * dtype_size(dtype_);
  return Tensor(dtype_, dims, std::shared_ptr<std::byte[]>(std::shared_ptr<std::byte[]>(), p));
}

// start() on the device path: the packing copies, the loss and stop flag, then the
// average over the ranks after an event of the compute stream. Nothing waits.
void DataParallel::start_on_device(size_t b) {
  Bucket& st = *state_[b];
  const Backend& dev = s_.backend();
  const size_t esize = dtype_size(dtype_);
  pack(st);
  if (b == 0) {  // device to device: a captured step copies what each run holds
    dev.copy(st.flat.raw() + st.elements * esize, s_.value(s_.training().loss).raw(), esize);
    dev.copy(st.flat.raw() + (st.elements + 1) * esize, flags_.get() + (flags_init_.size() + 2) * sizeof(uint64_t),
             esize);
  }
  st.finished = false;
  st.done = comm_.all_reduce_average_after(dev, dev.record(Backend::Stream::compute), st.flat.raw(),
                                           static_cast<size_t>(st.flat.numel()), dtype_,
                                           "all-reduce of gradient bucket " + std::to_string(b) + " (" +
                                               std::to_string(st.gradients.size()) + " gradients)");
}

// finish() on the device path: the compute stream waits for the average, copies it back
// and checks it into the flags; no host wait.
void DataParallel::finish_on_device(size_t b, bool check) {
  Bucket& st = *state_[b];
  const Backend& dev = s_.backend();
  dev.wait(Backend::Stream::compute, st.done);
  st.finished = true;
  auto* flags = reinterpret_cast<uint64_t*>(flags_.get());
  auto flag = [&](const Tensor& t, size_t f) {
    dev.flag_non_finite(t, flags + f);
    dev.flag_non_finite(t, reinterpret_cast<uint64_t*>(any_.get()));
  };
  if (check && b == 0) flag(bucket_view(st.flat, st.elements, {}), st.flag0);
  for (size_t i = 0; i < st.gradients.size(); ++i) {
    Tensor g = s_.value(st.gradients[i]);  // a handle on the arena value
    const Tensor avg = bucket_view(st.flat, st.offsets[i], g.dims());
    if (check) flag(avg, st.flag0 + (b == 0 ? 1 : 0) + i);
    if (avg.raw() != g.raw()) dev.copy(g.raw(), avg.raw(), g.nbytes());
  }
}

// After a step's run on the device path (TrainingSession's after-run hook, with the run's
// results: `checks_` among them, copied out at its end): the watches' verdicts, the mean
// loss and stop flag, and the first failed check in bucket order (the loss first), as
// the host path reports it; the state writers skipped on the device. Queued runs are
// concluded in order, each with the oldest watch (its own).
double DataParallel::conclude_on_device(const TensorMap& results) {
  if (!watches_.empty()) {
    std::shared_ptr<CommRequest> w = std::move(watches_.front());
    watches_.pop_front();
    if (w) w->wait();
  }
  ++totals_.steps;  // its all-reduces are not timed one by one (nor replays' at all)
  const Tensor& checks = results.at(checks_.front().first);
  const auto* flags = checks.data<uint64_t>();
  const size_t esize = dtype_size(dtype_);
  auto extra = [&](size_t k) {  // the mean loss (0) and stop flag (1), of the gradients' type
    Tensor x(dtype_, {});
    std::memcpy(x.raw(), reinterpret_cast<const std::byte*>(flags + flags_init_.size() + k), esize);
    return x.get_as_double(0);
  };
  mean_loss_ = extra(0);
  stop_agreed_ = extra(1) > 0;
  window_stop_ = window_stop_ || stop_agreed_;
  have_mean_loss_ = true;
  if (std::all_of(flags, flags + flags_init_.size(), [](uint64_t f) { return f == Backend::kAllFinite; }))
    return mean_loss_;
  const Plan& plan = s_.plan();
  for (size_t b = 0; b < state_.size(); ++b) {
    const Bucket& st = *state_[b];
    std::vector<std::string> values;
    if (b == 0) values.push_back(s_.training().loss);
    values.insert(values.end(), st.gradients.begin(), st.gradients.end());
    for (size_t k = 0; k < values.size(); ++k) {
      const uint64_t f = flags[st.flag0 + k];
      if (f == Backend::kAllFinite) continue;
      const bool is_loss = b == 0 && k == 0;
      const std::string kind = (f & 1) ? "Inf" : "NaN";
      throw numerical_fault(plan, values[k],
                            is_loss
                                ? "loss '" + values[k] + "' is " + kind
                                : "gradient '" + values[k] + "' has " + kind + " at element " + std::to_string(f >> 1));
    }
  }
  return mean_loss_;
}

NumericalError DataParallel::numerical_fault(const Plan& plan, const std::string& value,
                                             const std::string& what) const {
  const PlannedValue& pv = plan.value(value);
  const size_t node = pv.def >= 0 ? plan.steps[static_cast<size_t>(pv.def)].node : 0;
  const Node& n = plan.graph.nodes[node];
  return NumericalError(n.name, n.op_type, value, node,
                        "rank " + std::to_string(rank()) + " of " + std::to_string(world()) + ": " + what +
                            " (averaged over the ranks; the step stopped before any state was written)");
}

// Copies bucket `st`'s gradients into its flat buffer, those the plan did not put there:
// device copies in stream order where the host cannot see the backend's memory.
void DataParallel::pack(Bucket& st) {
  const size_t esize = dtype_size(dtype_);
  for (size_t i = 0; i < st.gradients.size(); ++i) {
    const Tensor& g = s_.value(st.gradients[i]);
    if (g.layout() != Layout::Plain || g.dtype() != dtype_)
      throw_internal("data-parallel training",
                     "gradient '" + st.gradients[i] + "' is not a plain " + dtype_name(dtype_) + " tensor");
    std::byte* to = st.flat.raw() + st.offsets[i] * esize;
    if (to == g.raw()) continue;  // in place: the plan put it there
    if (staged())
      s_.backend().copy(to, g.raw(), g.nbytes());
    else
      std::memcpy(to, g.raw(), g.nbytes());
  }
}

// Packs bucket `b`'s gradients (and in bucket 0 the loss and stop flag) into its flat
// buffer and starts its all-reduce. Staged (device memory the host cannot see): `flat`
// is complete in stream order, then one synchronisation. A host communicator reduces
// `host` (copied from `flat` before that synchronisation); NCCL reduces `flat` (bucket
// 0: a second synchronisation lands the loss and stop flag in it first).
void DataParallel::start(size_t b) {
  if (events_) return start_on_device(b);
  Bucket& st = *state_[b];
  const Backend& dev = s_.backend();
  const size_t esize = dtype_size(dtype_);
  pack(st);
  const bool on_device = staged() && comm_.reduces_device_memory();  // NCCL reduces `flat` itself
  if (staged()) {
    if (!on_device) dev.copy(st.host.raw(), st.flat.raw(), st.elements * esize);
    if (b == 0) {
      const Tensor& loss = s_.value(s_.training().loss);
      if (loss_host_.dtype() != loss.dtype() || loss_host_.nbytes() != loss.nbytes())
        loss_host_ = Tensor(loss.dtype(), loss.dims(), dev.allocate_host(loss.nbytes()));
      dev.copy(loss_host_.raw(), loss.raw(), loss.nbytes());
    }
    dev.synchronize();
  }
  if (b == 0) {
    const double loss = staged() ? loss_host_.get_as_double(0) : s_.value(s_.training().loss).get_as_double(0);
    st.host.set_from_double(static_cast<int64_t>(st.elements), loss);
    st.host.set_from_double(static_cast<int64_t>(st.elements) + 1, stop_ ? 1.0 : 0.0);
    if (on_device) {  // the two extras into `flat`, landed before NCCL's stream reads it
      dev.copy(st.flat.raw() + st.elements * esize, st.host.raw() + st.elements * esize, 2 * esize);
      dev.synchronize();
    }
  }
  std::byte* flat = on_device ? st.flat.raw() : st.host.raw();
  st.finished = false;
  timings_[b] = {};
  timings_[b].bucket = static_cast<int>(b);
  timings_[b].bytes = st.elements * esize;
  timings_[b].ready_ns = now_ns();
  st.request = comm_.all_reduce_sum_async(flat, static_cast<size_t>(st.flat.numel()), dtype_,
                                          "all-reduce of gradient bucket " + std::to_string(b) + " (" +
                                              std::to_string(st.gradients.size()) + " gradients)");
}

void DataParallel::finish(size_t b, bool check) {
  if (b != 0 && !state_.empty()) finish(0, check);  // the loss first: a NaN loss is reported as such
  Bucket& st = *state_[b];
  if (st.finished) return;
  if (events_) return finish_on_device(b, check);
  const int64_t w0 = now_ns();
  st.request->wait();
  if (staged() && comm_.reduces_device_memory()) {  // the sums, where the host averages and checks them
    s_.backend().copy(st.host.raw(), st.flat.raw(), st.host.nbytes());
    s_.backend().synchronize();
  }
  timings_[b].wait_ns = now_ns() - w0;
  timings_[b].start_ns = st.request->start_ns;
  timings_[b].end_ns = st.request->end_ns;
  st.request.reset();
  st.finished = true;
  const double inv = 1.0 / comm_.world();
  // Average in place; the flat buffer then holds what every rank writes back.
  auto average = [&](auto* x, int64_t n) {
    using T = std::remove_pointer_t<decltype(x)>;
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * static_cast<T>(inv));
  };
  if (dtype_ == DataType::Float32)
    average(st.host.data<float>(), st.host.numel());
  else
    average(st.host.data<double>(), st.host.numel());
  if (b == 0) {
    mean_loss_ = st.host.get_as_double(static_cast<int64_t>(st.elements));
    have_mean_loss_ = true;
    stop_agreed_ = st.host.get_as_double(static_cast<int64_t>(st.elements) + 1) > 0;
  }
  if (!check) return;
  const Plan& plan = s_.plan();
  auto fault = [&](const std::string& value, const std::string& what) {
    drain();
    throw numerical_fault(plan, value, what);
  };
  if (b == 0 && !std::isfinite(mean_loss_))
    fault(s_.training().loss, "loss '" + s_.training().loss + "' is " + (std::isnan(mean_loss_) ? "NaN" : "Inf"));
  for (size_t i = 0; i < st.gradients.size(); ++i) {
    Tensor g = s_.value(st.gradients[i]);  // a handle on the arena value
    // The averaged gradient, where the host reads it.
    const Tensor avg = bucket_view(st.host, st.offsets[i], g.dims());
    if (const int64_t bad = first_non_finite(avg); bad >= 0)
      fault(st.gradients[i], "gradient '" + st.gradients[i] + "' has " +
                                 (std::isnan(avg.get_as_double(bad)) ? "NaN" : "Inf") + " at element " +
                                 std::to_string(bad));
    // Staged: read by the copy when it runs (allocate_host memory), before the next
    // step's start() writes the mirror again after a synchronisation.
    if (avg.raw() == g.raw()) continue;  // averaged in place
    if (staged())
      s_.backend().copy(g.raw(), avg.raw(), g.nbytes());
    else
      std::memcpy(g.raw(), avg.raw(), g.nbytes());
  }
}

void DataParallel::drain() {
  // The device path: collectives issued and not concluded (a failed step's, or those of
  // the queued steps after it); wait for their end.
  while (!watches_.empty()) {
    std::shared_ptr<CommRequest> w = std::move(watches_.front());
    watches_.pop_front();
    if (w) w->wait();
  }
  for (auto& st : state_) {
    if (!st->request) continue;
    std::shared_ptr<CommRequest> r = std::move(st->request);
    st->finished = true;
    r->wait();  // a Peer error goes up: the communicator is broken anyway
  }
}

// Before each run's steps, outside a capture (StepHooks::before_steps): the buckets of a
// new plan, and on the device path the flags' reset and this rank's stop flag, from host
// memory read at the call (a captured step reads them from device memory).
void DataParallel::before_steps() {
  if (plan_ != &s_.plan()) prepare();
  // Nothing of an earlier (failed) step may still write into the buffers. On the device
  // path stream order sees to that: the step before waited for every average before
  // its optimizer, and the watches are read when its run is concluded.
  if (!events_) drain();
  bind_in_place();
  have_mean_loss_ = false;
  if (!window_open_) stop_agreed_ = false;
  if (!events_) return;
  // The "any" flag only where a window of queued steps starts: it stays lowered after a
  // failed step of the window.
  const Backend& dev = s_.backend();
  dev.copy(flags_.get(), flags_init_.data(), flags_init_.size() * sizeof(uint64_t));
  if (!window_open_) dev.copy(any_.get(), &Backend::kAllFinite, sizeof(uint64_t));
  Tensor stop(dtype_, {});
  stop.set_from_double(0, stop_ ? 1.0 : 0.0);
  dev.copy(flags_.get() + (flags_init_.size() + 2) * sizeof(uint64_t), stop.raw(), stop.nbytes());
}

// After each run's steps (issued or replayed), outside a capture: on the device path a
// watch of the run's collectives (a dead peer ends the run after --comm-timeout).
void DataParallel::after_steps() {
  if (!events_) return;
  const Backend& dev = s_.backend();
  watches_.push_back(comm_.watch_device(dev, dev.record(Backend::Stream::compute), "the step's gradient all-reduces"));
}

void DataParallel::before_step(int step) {
  if (events_ && step == s_.plan().first_state_write) {
    // Every bucket's average and checks before the first state write, so the skip flag
    // the writers read is complete; then the mean loss and stop flag beside the flags,
    // which the run copies out at its end (checks_).
    for (size_t b = 0; b < state_.size(); ++b) finish(b, true);
    const size_t esize = dtype_size(dtype_);
    for (size_t k = 0; k < 2; ++k)
      s_.backend().copy(flags_.get() + (flags_init_.size() + k) * sizeof(uint64_t),
                        state_[0]->flat.raw() + (state_[0]->elements + k) * esize, esize);
  }
  if (static_cast<size_t>(step) < need_at_.size())
    for (size_t b : need_at_[static_cast<size_t>(step)]) finish(b, true);
}

void DataParallel::after_step(int step) {
  if (static_cast<size_t>(step) < ready_at_.size())
    for (size_t b : ready_at_[static_cast<size_t>(step)]) start(b);
}

double DataParallel::step(const TensorMap& batch, float lr, bool stop) {
  if (window_open_) throw_internal("DataParallel::step", "steps queued: finish_steps() first");
  return run_step(batch, lr, stop);
}

double DataParallel::run_step(const TensorMap& batch, float lr, bool stop) {
  stop_ = stop;
  double loss = s_.step(batch, lr);
  if (events_) return loss;  // the mean, concluded in the session's after-run hook
  // Buckets no optimizer node read (none in a training graph) and a skipped step's
  // (fp16 loss scaling) still complete, so every rank has issued the same collectives.
  for (size_t b = 0; b < state_.size(); ++b) finish(b, false);
  add_totals();
  return have_mean_loss_ ? mean_loss_ : loss;
}

void DataParallel::add_totals() {
  for (const BucketTiming& t : timings_) {
    totals_.reduce_ms += static_cast<double>(t.end_ns - t.start_ns) / 1e6;
    totals_.exposed_ms += static_cast<double>(t.wait_ns) / 1e6;
  }
  ++totals_.steps;
  ++totals_.timed;
}

void DataParallel::queue_step(const TensorMap& batch, float lr, bool stop) {
  if (queue_failed()) return;  // a failed step: nothing after it runs until finish_steps()
  if (!window_open_) window_stop_ = false;
  if (!events_) {  // off the device path, or no plan yet: the step runs now
    absorb();
    if (finished_.error) return;
    try {
      // stop_agreed() stays this step's: every rank ran it at once.
      finished_.losses.push_back(run_step(batch, lr, stop));
      window_stop_ = window_stop_ || stop_agreed_;
    } catch (const NumericalError& e) {
      finished_.error = e;
    }
    return;
  }
  stop_ = stop;
  s_.queue_step(batch, lr);
  window_open_ = true;
  stop_agreed_ = false;
}

void DataParallel::absorb() {
  if (s_.queued_steps() == 0 && !s_.queue_failed()) return;
  TrainingSession::Finished f = s_.finish_steps();
  finished_.losses.insert(finished_.losses.end(), f.losses.begin(), f.losses.end());
  if (f.error && !finished_.error) finished_.error = std::move(f.error);
}

TrainingSession::Finished DataParallel::finish_steps() {
  absorb();
  window_open_ = false;
  if (events_) drain();  // the runs after a failed one: issued, never concluded
  stop_agreed_ = window_stop_;
  window_stop_ = false;
  TrainingSession::Finished f = std::move(finished_);
  finished_ = {};
  return f;
}

std::optional<NumericalError> DataParallel::find_anomaly(const TensorMap& batch, float lr) {
  // TrainingSession::find_anomaly runs without the step hooks: nothing here to undo.
  return s_.find_anomaly(batch, lr);
}

std::vector<std::string> DataParallel::buffer_names() const {
  const TrainingGraph& t = s_.training();
  std::set<std::string> written(t.params.begin(), t.params.end());
  written.insert(t.optimizer_state.begin(), t.optimizer_state.end());
  std::vector<std::string> out;
  for (const auto& [produced, state] : t.updates)
    if (!written.count(state)) out.push_back(state);
  return out;
}

void DataParallel::broadcast_names(const std::vector<std::string>& names, int root, const std::string& what) {
  Hash agree;
  size_t bytes = 0;
  for (const std::string& n : names) {
    const Tensor& t = s_.state(n);
    agree.add(n);
    agree.add(static_cast<int64_t>(t.dtype()));
    for (int64_t d : t.dims()) agree.add(d);
    bytes += t.nbytes();
  }
  if (!same_on_all_ranks(comm_, {agree.value()}, what + " check"))
    throw Error(ErrorKind::Peer, what + ": rank " + std::to_string(rank()) +
                                     ": the ranks' models differ (state names, types or shapes): every rank must "
                                     "load the same model with the same flags");
  // Host memory: state() and set_state() hand out and take host tensors on every backend.
  std::shared_ptr<std::byte[]> flat = s_.backend().allocate_host(bytes);
  size_t at = 0;
  for (const std::string& n : names) {
    const Tensor& t = s_.state(n);
    if (t.nbytes()) std::memcpy(flat.get() + at, t.raw(), t.nbytes());
    at += t.nbytes();
  }
  comm_.broadcast(flat.get(), bytes, root, what);
  at = 0;
  for (const std::string& n : names) {
    Tensor t = s_.state(n).clone();
    if (t.nbytes()) std::memcpy(t.raw(), flat.get() + at, t.nbytes());
    at += t.nbytes();
    s_.set_state(n, t);
  }
}

void DataParallel::broadcast_state(int root) { broadcast_names(s_.state_names(), root, "broadcast of the state"); }

void DataParallel::broadcast_buffers(int root) {
  broadcast_names(buffer_names(), root, "broadcast of the running statistics");
}

bool DataParallel::state_identical() {
  const TrainingGraph& t = s_.training();
  // Two hashes with different starting values: a false "identical" needs both to collide.
  Hash a, b;
  b.h ^= 0x9e3779b97f4a7c15ull;
  for (const auto* names : {&t.params, &t.optimizer_state})
    for (const std::string& n : *names) {
      const Tensor& x = s_.state(n);
      a.add(x.raw(), x.nbytes());
      b.add(x.raw(), x.nbytes());
    }
  return same_on_all_ranks(comm_, {a.value(), b.value()}, "state comparison");
}

}  // namespace trainrt
