// The Executor's ring of runs in flight (launch, collect): each run's host buffers
// (Executor::Slot), whether a run may go ahead of the host, and the retiring of runs
// with their results and checks.
#include <algorithm>
#include <cstring>
#include <iterator>

#include "graph/error.h"
#include "runtime/executor_prepared.h"

namespace trainrt {

// The host buffers of the run being issued (Prepared::current).
Executor::Slot& Executor::run_slot(Prepared& p) const {
  // Every slot at once (ExecutorOptions::max_in_flight), with the staged feeds' copies:
  // nothing is allocated once the plan has run.
  const size_t depth = std::max<size_t>({opts_.max_in_flight, p.current + 1, 1});
  if (p.ring.size() < depth) p.ring.resize(depth);
  for (Slot& slot : p.ring) {
    if (slot.feeds.empty()) {
      slot.feeds.resize(p.feed_values.size());
      slot.held.resize(p.feed_values.size());
      for (size_t i = 0; i < p.feed_values.size(); ++i) {
        const size_t bytes = static_cast<size_t>(element_count(p.feed_dims[i])) * dtype_size(p.feed_types[i]);
        if (bytes) slot.feeds[i] = backend_.allocate_host(bytes);
      }
      slot.results.resize(p.result_values.size());
      slot.seed = backend_.allocate_host(sizeof(uint64_t));
      if (!backend_.host_visible())
        for (size_t i = 0; i < p.result_values.size(); ++i) {
          const PlannedValue& pv = p.plan.values[static_cast<size_t>(p.result_values[i].second)];
          // An update written in place is returned as its state's buffer: the state is read
          // through TrainingSession::state(), not copied out at every step.
          if (pv.storage != Storage::State) slot.results[i] = backend_.allocate_host(pv.bytes);
        }
    }
    if (p.flags && !backend_.host_visible() && !slot.flags)
      slot.flags = backend_.allocate_host(std::max<size_t>(p.flags_init.size() * sizeof(uint64_t), kPlanAlignment));
  }
  return p.ring[p.current];
}

// The results of the run in slot `p.current`, after it ended: host copies of its pinned
// buffers where the host cannot see the backend's memory, else the slots themselves.
void Executor::gather_results(Prepared& p) {
  const Slot* slot = p.ring.size() > p.current ? &p.ring[p.current] : nullptr;
  for (size_t i = 0; i < p.result_values.size(); ++i) {
    const auto& [name, v] = p.result_values[i];
    const Tensor& t = p.slots[static_cast<size_t>(v)];
    if (slot && slot->results[i] && t.nbytes() && backend_.reaches(t.raw())) {
      Tensor h(t.dtype(), t.dims());  // the caller's: a copy of the pinned buffer
      h.set_layout(t.layout());
      std::memcpy(h.raw(), slot->results[i].get(), t.nbytes());
      p.results[name] = h;
    } else {
      p.results[name] = t;
    }
  }
  if (!slot) return;
  for (size_t i = 0; i < slot->out.size(); ++i) {
    const auto& [name, t] = slot->out[i];
    Tensor h(t.dtype(), t.dims());  // the caller's: a copy of the pinned buffer
    if (t.nbytes()) std::memcpy(h.raw(), slot->out_host[i].get(), t.nbytes());
    p.results[name] = h;
  }
}

bool Executor::deferrable(const Prepared& p, const RunOptions& ro, bool checking) const {
  return backend_.asynchronous() && !backend_.host_visible() && !p.host_steps && !ro.profile && !ro.hooks_need_host() &&
         !ro.skip_state_writes && (!checking || p.any_flag >= 0 || p.plan.first_state_write < 0);
}

void Executor::launch(const TensorMap& feeds, const RunOptions& ro) {
  const size_t depth = std::max<size_t>(opts_.max_in_flight, 1);
  // One plan in flight at a time: a run of another plan waits for the runs before it
  // (its arena may take theirs).
  if (!in_flight_.empty() && &prepare(feeds, ro) != in_flight_.front().p) retire(in_flight_.size());
  if (in_flight_.size() >= depth) retire(in_flight_.size() - depth + 1);
  const size_t slot = in_flight_.empty() ? 0 : (in_flight_.back().slot + 1) % depth;
  bool checking = false;
  Prepared& p = start(feeds, ro, slot, checking);
  if (!deferrable(p, ro, checking)) {  // run now, as run() does
    retire(in_flight_.size());
    if (error_) return;  // a failed run before it: nothing after it runs
    p.current = slot;
    try {
      run_now(p, ro, checking);
    } catch (const NumericalError& e) {
      error_ = e;
      return;
    }
    TensorMap own;  // the next run overwrites the arena (an update in place is its state: not copied)
    for (const auto& [name, v] : p.result_values) {
      const Tensor& t = p.results.at(name);
      own[name] = p.plan.values[static_cast<size_t>(v)].storage == Storage::State ? t : t.clone();
    }
    if (ro.copy_out)  // RunOptions::copy_out, returned with the results
      for (const auto& [name, t] : *ro.copy_out) own[name] = p.results.at(name).clone();
    done_.push_back(std::move(own));
    return;
  }
  // No run in flight and no failure: a fresh window, whose "any check failed" flag is reset.
  issue(p, ro, checking, /*fresh=*/in_flight_.empty() && !error_);
  in_flight_.push_back({&p, slot, checking});
}

// Waits for the oldest `count` runs in flight (all of them: one synchronisation; fewer:
// the host waits for the last one's end event only) and takes their results and checks.
void Executor::retire(size_t count) {
  if (count == 0) return;
  if (count >= in_flight_.size()) {
    sync();
  } else {
    backend_.wait_host(in_flight_[count - 1].p->ring[in_flight_[count - 1].slot].done);
  }
  for (size_t i = 0; i < count; ++i) {
    const InFlight f = in_flight_.front();
    in_flight_.pop_front();
    if (error_) continue;  // runs after a failed one wrote no state; their results are dropped
    Prepared& p = *f.p;
    p.current = f.slot;
    if (f.checking) try {
        p.flags_read = 0;
        read_flags(p, p.plan.steps.size());
      } catch (const NumericalError& e) {
        error_ = e;
        continue;
      }
    gather_results(p);
    done_.push_back(p.results);  // host copies (deferrable() holds only where the host cannot see the memory)
  }
}

Executor::Collected Executor::collect() {
  retire(in_flight_.size());
  Collected c;
  c.results.assign(std::make_move_iterator(done_.begin()), std::make_move_iterator(done_.end()));
  done_.clear();
  c.error = std::move(error_);
  error_.reset();
  return c;
}

}  // namespace trainrt
