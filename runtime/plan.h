// The execution plan: node order, value lifetimes and one memory arena with offsets.
//
//   Graph s = specialize(g, feeds);                       // every shape known
//   PlanOptions o;  o.keep = s.outputs;
//   Plan p = build_plan(s, o);
//   verify_plan(p);                                       // throws Internal on any overlap
//   // p.steps[i].node is the i-th node to run; value v lives at arena offset p.values[v].offset
//
// Why: a training step touches thousands of values; allocating each one per step
// costs time and the sum of all of them is several times what is live at once. The
// plan is built once per feed-shape signature: an order chosen to lower the peak
// (greedy "free the most bytes first", compared with the file order, the smaller
// arena wins), the live interval [def, last use] of every value, and offsets by
// best fit over those intervals (64-byte aligned). A node may write its output over
// an input whose last use it is (in place) when its kernels were checked to be
// alias-safe (same-index elementwise loops, oneDNN eltwise/binary with dst == src0,
// the optimizer updates). Parameters, optimizer state and BatchNormalization running
// statistics ("state") are not in the arena: they persist across steps, and an
// optimizer update writes its parameter in place (every other reader of the
// parameter is ordered before it).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "runtime/alignment.h"

namespace trainrt {

struct Plan;

// Arena values laid out back to back in one buffer, in this order (each 64-byte
// aligned), with `tail_bytes` more after the last: a gradient bucket that the
// all-reduce reads and writes in place (distribution/data_parallel.h).
struct ContiguousGroup {
  std::vector<std::string> values;
  size_t tail_bytes = 0;
};

struct PlanOptions {
  // Values kept alive to the end of the run (graph outputs, values asked for).
  std::vector<std::string> keep;
  // (produced, state): after the run `produced` replaces the initializer `state`.
  // An alias-safe update kernel writes it straight into the state's buffer.
  std::vector<std::pair<std::string, std::string>> state_updates;
  bool reorder = true;        // memory-lowering order (false: the file order)
  bool reuse = true;          // share arena bytes between disjoint lifetimes (false: the naive plan)
  bool in_place = true;       // outputs over dead inputs where the kernel allows it
  bool kept_outside = false;  // kept values get their own buffers (returned to a caller)
  // Every node that writes state in place runs after all other nodes, so a run that
  // stops early (a NaN found) leaves the state untouched.
  bool state_writes_last = true;
  // Mark neighbouring steps that may run at the same time (Plan::runs_with_next).
  bool pair_branches = false;
  // Called with each candidate order's steps and lifetimes (offsets not chosen yet):
  // the groups to lay out contiguously (Plan::groups). Empty: none.
  std::function<std::vector<ContiguousGroup>(const Plan&)> contiguous;
  // float32 values stored in 16 bits (runtime/narrow.h): name -> Float16 or BFloat16, the
  // dtype (and bytes) they get in the plan.
  std::map<std::string, DataType> narrowed;
};

enum class Storage {
  Arena,     // produced by a node, lives in the arena
  Feed,      // a graph input, bound per run
  Constant,  // an initializer no update writes
  State,     // an updated initializer, or an update written in place into one
  Output,    // a kept value with its own buffer (PlanOptions::kept_outside)
};

struct PlannedValue {
  std::string name;
  DataType dtype = DataType::Undefined;
  std::vector<int64_t> dims;
  size_t bytes = 0;  // dtype size * elements
  Storage storage = Storage::Arena;
  int def = -1;       // step that writes it (-1: bound before the run)
  int last = -1;      // last step that reads it; steps.size() when kept to the end
  int alias = -1;     // in place: the input value whose buffer this output reuses
  size_t offset = 0;  // Arena: byte offset in the arena
};

// A ContiguousGroup as placed: one buffer from the first member's definition to the
// end of the run (an all-reduce may still write it after the last member's last
// reader), whose bytes no other value uses meanwhile. Members are never written in
// place over an input, nor is anything written in place over them.
struct PlannedGroup {
  std::vector<int> values;  // member value indices, in the group's order
  size_t offset = 0;        // arena offset of the first member
  size_t bytes = 0;         // the members' aligned bytes plus the tail
  size_t tail_offset = 0;   // arena offset of the tail
  int def = -1;             // the first step writing a member
};

struct PlanStep {
  size_t node = 0;          // index into Plan::graph.nodes (also the Dropout seed index)
  std::vector<int> inputs;  // value indices, -1 for an omitted optional input
  std::vector<int> outputs;
  bool writes_state = false;  // some output is written in place into state
};

struct Plan {
  Graph graph;  // the specialised graph the plan was built for
  std::vector<PlanStep> steps;
  std::vector<PlannedValue> values;
  std::unordered_map<std::string, int> index;  // value name -> index in values
  std::string order;                           // "greedy" or "file": which order won
  size_t arena_bytes = 0;                      // the one allocation for all Arena values
  size_t naive_bytes = 0;                      // one aligned buffer per Arena value
  size_t file_order_bytes = 0;                 // the arena the file order would need
  size_t state_bytes = 0;                      // State values (persistent region)
  size_t output_bytes = 0;                     // Output values (own buffers)
  size_t in_place_count = 0;                   // outputs written over an input
  int peak_step = -1;                          // step with the most live arena bytes
  size_t peak_live_bytes = 0;
  int first_state_write = -1;  // first step with writes_state (-1: none)
  // PlanOptions::pair_branches: runs_with_next[s] marks steps s and s+1 as a pair that
  // may run concurrently: s+1 reads nothing s writes, neither writes state, and no arena
  // byte either writes is read or written by the other (the offsets were chosen for one
  // node at a time, so a value dying at s may hand its bytes to s+1; such steps are not
  // paired). A step is in at most one pair. Empty without pair_branches.
  std::vector<char> runs_with_next;
  size_t pairs = 0;
  // PlanOptions::contiguous: the groups laid out as asked (a group with a member that is
  // not an arena value of this plan, or in an earlier group, is left out).
  std::vector<PlannedGroup> groups;

  const PlannedValue& value(const std::string& name) const { return values.at(index.at(name)); }
  // Arena values live at step s (their buffers' bytes, largest first).
  std::vector<int> live_at(int s) const;
};

// `g` must be specialised (every value's shape known). Throws Internal otherwise.
Plan build_plan(const Graph& g, const PlanOptions& o);

// Whether plan steps a and b (a < b) may run at the same time (see runs_with_next).
bool steps_independent(const Plan& p, int a, int b);

// Checks the plan: a topological order running each node once; every Arena value
// 64-byte aligned and inside the arena; no two values whose lifetimes overlap share
// a byte unless one is the other's in-place output at the step the input dies;
// an in-place state write is the last reader of that state; every pair of
// runs_with_next is independent (steps_independent); every group's members back to back
// inside its buffer and no other value in that buffer while the group lives. Throws Internal.
void verify_plan(const Plan& p);

}  // namespace trainrt
