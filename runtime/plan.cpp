#include "runtime/plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "graph/error.h"
#include "ops/core/register_all.h"

namespace trainrt {

namespace {

// The output/input slot pairs `n`'s op declared alias-safe where its kernels register
// (KernelRegistry::set_in_place, ops/core/kernel_facts.h); out0 is null where the
// output's dims are not known yet.
std::vector<InPlacePair> in_place_candidates(const Node& n, const std::function<const PlannedValue*(size_t)>& in,
                                             const PlannedValue* out0) {
  auto dims = [&](size_t j) -> const std::vector<int64_t>* {
    const PlannedValue* v = in(j);
    return v ? &v->dims : nullptr;
  };
  return registry().kernels.in_place(n, dims, out0 ? &out0->dims : nullptr);
}

// How many times value v appears among a node's inputs.
int occurrences(const PlanStep& s, int v) { return static_cast<int>(std::count(s.inputs.begin(), s.inputs.end(), v)); }

int root_of(const std::vector<PlannedValue>& vals, int v) {
  while (vals[static_cast<size_t>(v)].alias >= 0) v = vals[static_cast<size_t>(v)].alias;
  return v;
}

// Values and storage classes; state updates written in place (order independent).
Plan skeleton(const Graph& g, const PlanOptions& o) {
  Plan p;
  p.graph = g;
  auto add = [&](const std::string& name, Storage st) {
    if (name.empty() || p.index.count(name)) return;
    PlannedValue v;
    v.name = name;
    v.storage = st;
    if (auto it = g.initializers.find(name); it != g.initializers.end()) {
      v.dtype = it->second.dtype();
      v.dims = it->second.dims();
    } else {
      const ValueInfo* info = g.find_info(name);
      if (!info || !info->shape || !shape_is_known(*info->shape))
        throw_internal("plan", "value '" + name + "' has no concrete shape (specialise the graph first)");
      v.dtype = info->dtype;
      v.dims = shape_dims(*info->shape);
      if (auto n = o.narrowed.find(name); n != o.narrowed.end()) v.dtype = n->second;
    }
    v.bytes = static_cast<size_t>(element_count(v.dims)) * dtype_size(v.dtype);
    p.index[name] = static_cast<int>(p.values.size());
    p.values.push_back(std::move(v));
  };
  std::set<std::string> states, kept(o.keep.begin(), o.keep.end());
  for (const auto& [produced, state] : o.state_updates) states.insert(state);
  for (const std::string& in : g.inputs) add(in, Storage::Feed);
  for (const auto& [name, t] : g.initializers) add(name, states.count(name) ? Storage::State : Storage::Constant);
  for (const Node& n : g.nodes)
    for (const std::string& out : n.outputs)
      add(out, kept.count(out) && o.kept_outside ? Storage::Output : Storage::Arena);
  p.steps.resize(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    PlanStep& s = p.steps[i];
    s.node = i;
    for (const std::string& in : g.nodes[i].inputs) {
      if (in.empty()) {
        s.inputs.push_back(-1);
        continue;
      }
      auto it = p.index.find(in);
      if (it == p.index.end()) throw_internal(describe_node(g.nodes[i], i), "input '" + in + "' is never produced");
      s.inputs.push_back(it->second);
    }
    for (const std::string& out : g.nodes[i].outputs) s.outputs.push_back(out.empty() ? -1 : p.index.at(out));
  }
  // Updates written straight into their state when the kernel allows it.
  if (o.in_place) {
    std::unordered_map<int, size_t> producer;
    for (size_t i = 0; i < p.steps.size(); ++i)
      for (int v : p.steps[i].outputs)
        if (v >= 0) producer[v] = i;
    for (const auto& [produced, state] : o.state_updates) {
      auto pi = p.index.find(produced), si = p.index.find(state);
      if (pi == p.index.end() || si == p.index.end() || !producer.count(pi->second) || kept.count(state)) continue;
      PlanStep& s = p.steps[producer.at(pi->second)];
      PlannedValue& pv = p.values[static_cast<size_t>(pi->second)];
      if (pv.storage != Storage::Arena) continue;
      auto in = [&](size_t j) {
        return j < s.inputs.size() && s.inputs[j] >= 0 ? &p.values[static_cast<size_t>(s.inputs[j])] : nullptr;
      };
      for (InPlacePair c : in_place_candidates(g.nodes[s.node], in, nullptr)) {
        if (c.out >= s.outputs.size() || s.outputs[c.out] != pi->second || c.in >= s.inputs.size() ||
            s.inputs[c.in] != si->second || occurrences(s, si->second) != 1)
          continue;
        const PlannedValue& sv = p.values[static_cast<size_t>(si->second)];
        if (sv.dtype != pv.dtype || sv.dims != pv.dims) continue;
        pv.storage = Storage::State;
        pv.alias = si->second;
        s.writes_state = true;
      }
    }
  }
  return p;
}

// A topological order: Kahn's algorithm choosing among ready nodes either the
// first in file order or the one that frees the most arena bytes net of what it
// allocates. Nodes writing state in place wait for every other node when asked.
std::vector<size_t> schedule(const Plan& p, const PlanOptions& o, bool greedy, const std::set<int>& kept) {
  const size_t n = p.steps.size();
  std::vector<std::vector<size_t>> succ(n);
  std::vector<size_t> indegree(n, 0);
  std::unordered_map<int, size_t> producer;
  std::unordered_map<int, std::vector<size_t>> readers;
  for (size_t i = 0; i < n; ++i) {
    for (int v : p.steps[i].outputs)
      if (v >= 0) producer[v] = i;
    std::set<int> seen;
    for (int v : p.steps[i].inputs)
      if (v >= 0 && seen.insert(v).second) readers[v].push_back(i);
  }
  std::set<std::pair<size_t, size_t>> edges;
  for (size_t i = 0; i < n; ++i) {
    for (int v : p.steps[i].inputs)
      if (v >= 0 && producer.count(v) && producer.at(v) != i) edges.insert({producer.at(v), i});
    // An in-place state write runs after every other reader of that state.
    for (size_t k = 0; k < p.steps[i].outputs.size(); ++k) {
      int out = p.steps[i].outputs[k];
      if (out < 0 || p.values[static_cast<size_t>(out)].storage != Storage::State) continue;
      int state = p.values[static_cast<size_t>(out)].alias;
      if (state < 0) continue;
      for (size_t r : readers[state])
        if (r != i) edges.insert({r, i});
    }
  }
  for (auto [a, b] : edges) {
    succ[a].push_back(b);
    ++indegree[b];
  }
  std::vector<int> remaining(p.values.size(), 0);
  for (const auto& [v, rs] : readers) remaining[static_cast<size_t>(v)] = static_cast<int>(rs.size());
  size_t writers_left = 0, others_left = 0;
  for (const PlanStep& s : p.steps) (s.writes_state ? writers_left : others_left)++;
  std::vector<size_t> ready, order;
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push_back(i);
  auto score = [&](size_t i) -> long long {
    long long delta = 0;
    std::set<int> seen;
    for (int v : p.steps[i].inputs) {
      if (v < 0 || !seen.insert(v).second) continue;
      const PlannedValue& pv = p.values[static_cast<size_t>(v)];
      if (pv.storage == Storage::Arena && !kept.count(v) && remaining[static_cast<size_t>(v)] == 1)
        delta += static_cast<long long>(align_up(pv.bytes));
    }
    for (int v : p.steps[i].outputs)
      if (v >= 0 && p.values[static_cast<size_t>(v)].storage == Storage::Arena)
        delta -= static_cast<long long>(align_up(p.values[static_cast<size_t>(v)].bytes));
    return delta;
  };
  while (!ready.empty()) {
    size_t best = ready.size();
    long long best_score = 0;
    for (int pass = 0; pass < 2 && best == ready.size(); ++pass) {
      for (size_t k = 0; k < ready.size(); ++k) {
        size_t i = ready[k];
        // Pass 0 holds back state writers while other nodes remain; pass 1 releases them.
        if (pass == 0 && o.state_writes_last && p.steps[i].writes_state && others_left > 0) continue;
        long long sc = greedy ? score(i) : 0;
        if (best == ready.size() || sc > best_score || (sc == best_score && i < ready[best])) {
          best = k;
          best_score = sc;
        }
      }
    }
    size_t i = ready[best];
    ready.erase(ready.begin() + static_cast<long>(best));
    order.push_back(i);
    (p.steps[i].writes_state ? writers_left : others_left)--;
    std::set<int> seen;
    for (int v : p.steps[i].inputs)
      if (v >= 0 && seen.insert(v).second) --remaining[static_cast<size_t>(v)];
    for (size_t j : succ[i])
      if (--indegree[j] == 0) ready.push_back(j);
  }
  if (order.size() != n) throw_bad_input("plan", "the graph has a cycle");
  return order;
}

// Each value's defining and last step in p's order (kept values live to the end), and
// the first step that writes state.
void set_lifetimes(Plan& p, const std::set<int>& kept) {
  const int end = static_cast<int>(p.steps.size());
  for (PlannedValue& v : p.values) {
    v.def = -1;
    v.last = -1;
  }
  for (int s = 0; s < end; ++s) {
    for (int v : p.steps[static_cast<size_t>(s)].inputs)
      if (v >= 0) p.values[static_cast<size_t>(v)].last = s;
    for (int v : p.steps[static_cast<size_t>(s)].outputs)
      if (v >= 0) {
        p.values[static_cast<size_t>(v)].def = s;
        p.values[static_cast<size_t>(v)].last = std::max(p.values[static_cast<size_t>(v)].last, s);
      }
  }
  for (int v : kept) p.values[static_cast<size_t>(v)].last = end;
  for (int s = 0; s < end; ++s)
    if (p.steps[static_cast<size_t>(s)].writes_state && p.first_state_write < 0) p.first_state_write = s;
}

// Contiguous groups (o.contiguous): arena values of this plan, each in one group at most;
// they live to the end of the run. Returns each value's group (-1: none).
std::vector<int> place_groups(Plan& p, const PlanOptions& o) {
  const int end = static_cast<int>(p.steps.size());
  std::vector<int> group_of(p.values.size(), -1);
  if (!o.contiguous) return group_of;
  for (const ContiguousGroup& cg : o.contiguous(p)) {
    PlannedGroup pg;
    bool ok = !cg.values.empty();
    for (const std::string& name : cg.values) {
      auto it = p.index.find(name);
      ok = ok && it != p.index.end() && p.values[static_cast<size_t>(it->second)].storage == Storage::Arena &&
           group_of[static_cast<size_t>(it->second)] < 0 &&
           std::find(pg.values.begin(), pg.values.end(), it->second) == pg.values.end();
      if (ok) pg.values.push_back(it->second);
    }
    if (!ok) continue;
    pg.def = end;
    for (int v : pg.values) {
      group_of[static_cast<size_t>(v)] = static_cast<int>(p.groups.size());
      pg.def = std::min(pg.def, p.values[static_cast<size_t>(v)].def);
      pg.bytes += align_up(p.values[static_cast<size_t>(v)].bytes);
      p.values[static_cast<size_t>(v)].last = end;
    }
    pg.bytes += cg.tail_bytes ? align_up(cg.tail_bytes) : 0;
    p.groups.push_back(std::move(pg));
  }
  return group_of;
}

// In place: an output over an input that dies at this step (the node's candidates).
void choose_in_place(Plan& p, const Plan& base, const std::vector<int>& group_of) {
  const int end = static_cast<int>(p.steps.size());
  for (int s = 0; s < end; ++s) {
    PlanStep& st = p.steps[static_cast<size_t>(s)];
    auto in = [&](size_t j) {
      return j < st.inputs.size() && st.inputs[j] >= 0 ? &p.values[static_cast<size_t>(st.inputs[j])] : nullptr;
    };
    const PlannedValue* out0 =
        !st.outputs.empty() && st.outputs[0] >= 0 ? &p.values[static_cast<size_t>(st.outputs[0])] : nullptr;
    std::set<int> taken;
    for (InPlacePair c : in_place_candidates(base.graph.nodes[st.node], in, out0)) {
      if (c.out >= st.outputs.size() || c.in >= st.inputs.size()) continue;
      int ov = st.outputs[c.out], iv = st.inputs[c.in];
      if (ov < 0 || iv < 0 || taken.count(iv)) continue;
      if (group_of[static_cast<size_t>(ov)] >= 0 || group_of[static_cast<size_t>(iv)] >= 0) continue;
      PlannedValue &ov_ = p.values[static_cast<size_t>(ov)], &iv_ = p.values[static_cast<size_t>(iv)];
      if (ov_.storage != Storage::Arena || iv_.storage != Storage::Arena || ov_.alias >= 0) continue;
      if (iv_.last != s || occurrences(st, iv) != 1 || iv_.dtype != ov_.dtype || iv_.bytes != ov_.bytes) continue;
      ov_.alias = iv;
      taken.insert(iv);
      ++p.in_place_count;
    }
  }
}

// One arena buffer: an alias group's root value (-1: a contiguous group), its lifetime
// in steps and its place.
struct Buffer {
  int root, def, last;
  size_t size, offset = 0;
};

// Offsets for `bufs`; returns the arena's size. Without reuse one after the other; with
// it largest first, each at the best-fitting gap among the placed buffers it overlaps
// in time.
size_t fit_buffers(std::vector<Buffer>& bufs, bool reuse) {
  size_t arena = 0;
  if (!reuse) {
    for (Buffer& b : bufs) b.offset = arena, arena += b.size;
    return arena;
  }
  std::vector<size_t> by_size(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) by_size[i] = i;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    return bufs[a].size != bufs[b].size ? bufs[a].size > bufs[b].size : bufs[a].def < bufs[b].def;
  });
  std::vector<size_t> placed;
  for (size_t bi : by_size) {
    Buffer& b = bufs[bi];
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of overlapping buffers
    for (size_t pi : placed)
      if (bufs[pi].def <= b.last && b.def <= bufs[pi].last)
        busy.push_back({bufs[pi].offset, bufs[pi].offset + bufs[pi].size});
    std::sort(busy.begin(), busy.end());
    size_t cursor = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (auto [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= b.size && lo - cursor < best_gap) best = cursor, best_gap = lo - cursor;
      cursor = std::max(cursor, hi);
    }
    b.offset = best != SIZE_MAX ? best : cursor;
    arena = std::max(arena, b.offset + b.size);
    placed.push_back(bi);
  }
  return arena;
}

// Buffers: one per alias group, living from the root's def to the group's last use, and
// one per contiguous group; their offsets, every value's, the byte counts and the peak.
void place_buffers(Plan& p, const PlanOptions& o, const std::vector<int>& group_of) {
  const int end = static_cast<int>(p.steps.size());
  std::map<int, std::pair<int, int>> span;  // root -> [def, last]
  for (size_t v = 0; v < p.values.size(); ++v) {
    const PlannedValue& pv = p.values[v];
    if (pv.storage == Storage::Arena) {
      p.naive_bytes += align_up(pv.bytes);
      int r = root_of(p.values, static_cast<int>(v));
      auto [it, fresh] = span.insert({r, {p.values[static_cast<size_t>(r)].def, pv.last}});
      if (!fresh) it->second.second = std::max(it->second.second, pv.last);
    } else if (pv.storage == Storage::State && pv.alias < 0) {
      p.state_bytes += align_up(pv.bytes);
    } else if (pv.storage == Storage::Output) {
      p.output_bytes += align_up(pv.bytes);
    }
  }
  std::vector<Buffer> bufs;
  for (const auto& [r, s] : span)
    if (group_of[static_cast<size_t>(r)] < 0)
      bufs.push_back({r, s.first, s.second, align_up(p.values[static_cast<size_t>(r)].bytes)});
  const size_t group_buf0 = bufs.size();  // bufs[group_buf0 + k] is group k's buffer
  for (const PlannedGroup& pg : p.groups) bufs.push_back({-1, pg.def, end, pg.bytes});
  p.arena_bytes = fit_buffers(bufs, o.reuse);
  for (const Buffer& b : bufs)
    if (b.root >= 0) p.values[static_cast<size_t>(b.root)].offset = b.offset;
  for (size_t k = 0; k < p.groups.size(); ++k) {
    PlannedGroup& pg = p.groups[k];
    pg.offset = pg.tail_offset = bufs[group_buf0 + k].offset;
    for (int v : pg.values) {
      p.values[static_cast<size_t>(v)].offset = pg.tail_offset;
      pg.tail_offset += align_up(p.values[static_cast<size_t>(v)].bytes);
    }
  }
  for (size_t v = 0; v < p.values.size(); ++v)
    if (p.values[v].storage == Storage::Arena)
      p.values[v].offset = p.values[static_cast<size_t>(root_of(p.values, static_cast<int>(v)))].offset;

  // The peak: the step with the most live buffer bytes.
  for (int s = 0; s < end; ++s) {
    size_t live = 0;
    for (const Buffer& b : bufs)
      if (b.def <= s && s <= b.last) live += b.size;
    if (live > p.peak_live_bytes || p.peak_step < 0) p.peak_live_bytes = live, p.peak_step = s;
  }
}

// Lifetimes, in-place outputs and offsets for one order.
Plan place(const Plan& base, const std::vector<size_t>& order, const PlanOptions& o, const std::set<int>& kept) {
  Plan p;
  p.values = base.values;
  p.index = base.index;
  for (size_t i : order) p.steps.push_back(base.steps[i]);
  set_lifetimes(p, kept);
  const std::vector<int> group_of = place_groups(p, o);
  if (o.in_place) choose_in_place(p, base, group_of);
  place_buffers(p, o, group_of);
  return p;
}

}  // namespace

std::vector<int> Plan::live_at(int s) const {
  std::vector<int> out;
  for (size_t v = 0; v < values.size(); ++v) {
    const PlannedValue& pv = values[v];
    if (pv.storage == Storage::Arena && pv.alias < 0) {
      int last = pv.last;  // the group's last use
      for (size_t w = 0; w < values.size(); ++w)
        if (values[w].storage == Storage::Arena && values[w].alias >= 0 &&
            root_of(values, static_cast<int>(w)) == static_cast<int>(v))
          last = std::max(last, values[w].last);
      if (pv.def <= s && s <= last) out.push_back(static_cast<int>(v));
    }
  }
  std::sort(out.begin(), out.end(),
            [&](int a, int b) { return values[static_cast<size_t>(a)].bytes > values[static_cast<size_t>(b)].bytes; });
  return out;
}

Plan build_plan(const Graph& g, const PlanOptions& o) {
  Plan base = skeleton(g, o);
  std::set<int> kept;
  for (const std::string& k : o.keep)
    if (auto it = base.index.find(k); it != base.index.end()) kept.insert(it->second);
  // Updates that are not written in place are read after the run: keep them.
  for (const auto& [produced, state] : o.state_updates)
    if (auto it = base.index.find(produced);
        it != base.index.end() && base.values[static_cast<size_t>(it->second)].storage == Storage::Arena)
      kept.insert(it->second);
  Plan best = place(base, schedule(base, o, false, kept), o, kept);
  best.order = "file";
  const size_t file_bytes = best.arena_bytes;
  if (o.reorder && o.reuse) {
    Plan greedy = place(base, schedule(base, o, true, kept), o, kept);
    greedy.order = "greedy";
    if (greedy.arena_bytes < best.arena_bytes) best = std::move(greedy);
  }
  best.file_order_bytes = file_bytes;
  best.graph = std::move(base.graph);
  if (o.pair_branches) {
    best.runs_with_next.assign(best.steps.size(), 0);
    for (size_t s = 0; s + 1 < best.steps.size(); ++s)
      if (steps_independent(best, static_cast<int>(s), static_cast<int>(s) + 1)) {
        best.runs_with_next[s] = 1;
        ++best.pairs;
        ++s;  // a step is in one pair at most
      }
  }
  return best;
}

bool steps_independent(const Plan& p, int a, int b) {
  const PlanStep &x = p.steps[static_cast<size_t>(a)], &y = p.steps[static_cast<size_t>(b)];
  if (x.writes_state || y.writes_state) return false;
  for (int v : y.inputs)
    if (v >= 0 && std::find(x.outputs.begin(), x.outputs.end(), v) != x.outputs.end()) return false;
  for (int v : x.inputs)  // not in a topological order, but cheap to rule out
    if (v >= 0 && std::find(y.outputs.begin(), y.outputs.end(), v) != y.outputs.end()) return false;
  // Byte ranges: what one step writes must not meet anything the other touches. Values
  // outside the arena are feeds and constants (read-only here: neither writes state) or
  // kept outputs in buffers of their own.
  auto range = [&](int v) {
    const PlannedValue& pv = p.values[static_cast<size_t>(v)];
    return std::pair<size_t, size_t>(pv.offset, pv.offset + std::max<size_t>(pv.bytes, 1));
  };
  auto in_arena = [&](int v) { return v >= 0 && p.values[static_cast<size_t>(v)].storage == Storage::Arena; };
  auto meets = [&](const std::vector<int>& writes, const PlanStep& other) {
    for (int w : writes) {
      if (!in_arena(w)) continue;
      const auto [lo, hi] = range(w);
      for (const auto* list : {&other.inputs, &other.outputs})
        for (int v : *list)
          if (in_arena(v)) {
            const auto [l, h] = range(v);
            if (lo < h && l < hi) return true;
          }
    }
    return false;
  };
  return !meets(x.outputs, y) && !meets(y.outputs, x);
}

void verify_plan(const Plan& p) {
  const std::string where = "verify_plan";
  const int end = static_cast<int>(p.steps.size());
  if (p.steps.size() != p.graph.nodes.size()) throw_internal(where, "the plan does not run every node once");
  std::vector<int> ran(p.graph.nodes.size(), 0);
  std::vector<int> written(p.values.size(), -1);
  for (int s = 0; s < end; ++s) {
    const PlanStep& st = p.steps[static_cast<size_t>(s)];
    if (st.node >= ran.size() || ran[st.node]++)
      throw_internal(where, "node " + std::to_string(st.node) + " runs twice");
    for (int v : st.inputs) {
      if (v < 0) continue;
      const PlannedValue& pv = p.values[static_cast<size_t>(v)];
      bool bound = pv.storage == Storage::Feed || pv.storage == Storage::Constant ||
                   (pv.storage == Storage::State && pv.alias < 0 && pv.def < 0);
      if (!bound && written[static_cast<size_t>(v)] < 0)
        throw_internal(where, "value '" + pv.name + "' is read at step " + std::to_string(s) + " before it is written");
      if (pv.last < s) throw_internal(where, "value '" + pv.name + "' is read after its last use");
    }
    for (int v : st.outputs)
      if (v >= 0) written[static_cast<size_t>(v)] = s;
  }
  // Each value's own live interval and bytes.
  struct Span {
    int v, def, last;
    size_t lo, hi;
  };
  std::vector<Span> spans;
  for (size_t v = 0; v < p.values.size(); ++v) {
    const PlannedValue& pv = p.values[v];
    if (pv.storage == Storage::State && pv.alias >= 0) {
      // In place into state: the state's every other reader ran before this write.
      const PlannedValue& sv = p.values[static_cast<size_t>(pv.alias)];
      if (sv.last > pv.def)
        throw_internal(where, "state '" + sv.name + "' is read after '" + pv.name + "' overwrote it");
      if (sv.dims != pv.dims || sv.dtype != pv.dtype) throw_internal(where, "'" + pv.name + "' does not fit its state");
      continue;
    }
    if (pv.storage != Storage::Arena) continue;
    if (pv.offset % kPlanAlignment) throw_internal(where, "'" + pv.name + "' is not 64-byte aligned");
    if (pv.offset + pv.bytes > p.arena_bytes) throw_internal(where, "'" + pv.name + "' does not fit in the arena");
    if (pv.def < 0 || pv.def != written[v]) throw_internal(where, "'" + pv.name + "' has a wrong definition step");
    if (pv.alias >= 0) {
      const PlannedValue& in = p.values[static_cast<size_t>(pv.alias)];
      if (in.offset != pv.offset || in.last != pv.def || in.bytes != pv.bytes)
        throw_internal(where, "'" + pv.name + "' is written in place over '" + in.name + "', which is still live");
      const auto& ins = p.steps[static_cast<size_t>(pv.def)].inputs;
      if (std::find(ins.begin(), ins.end(), pv.alias) == ins.end())
        throw_internal(where, "'" + pv.name + "' aliases '" + in.name + "', which its node does not read");
    }
    spans.push_back({static_cast<int>(v), pv.def, pv.last, pv.offset, pv.offset + std::max<size_t>(pv.bytes, 1)});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size() && spans[j].lo < spans[i].hi; ++j) {
      const Span &a = spans[i], &b = spans[j];
      if (a.def > b.last || b.def > a.last) continue;  // disjoint in time
      const PlannedValue &va = p.values[static_cast<size_t>(a.v)], &vb = p.values[static_cast<size_t>(b.v)];
      bool handoff = (vb.alias == a.v && va.last == vb.def) || (va.alias == b.v && vb.last == va.def);
      if (!handoff)
        throw_internal(where, "'" + va.name + "' and '" + vb.name + "' are live together and share arena bytes");
    }
  // Groups: members back to back from the group's offset, living to the end; no other
  // value inside the buffer while the group lives (its gaps and tail included).
  std::vector<int> group_of(p.values.size(), -1);
  for (size_t k = 0; k < p.groups.size(); ++k) {
    const PlannedGroup& pg = p.groups[k];
    const std::string name = "group " + std::to_string(k);
    size_t at = pg.offset;
    for (int v : pg.values) {
      const PlannedValue& pv = p.values[static_cast<size_t>(v)];
      if (pv.storage != Storage::Arena || pv.alias >= 0 || group_of[static_cast<size_t>(v)] >= 0)
        throw_internal(where, name + ": '" + pv.name + "' is not an arena value of its own, or in two groups");
      if (pv.offset != at || pv.last != end || pv.def < pg.def)
        throw_internal(where, name + ": '" + pv.name + "' is not in its place or does not live to the end");
      group_of[static_cast<size_t>(v)] = static_cast<int>(k);
      at += align_up(pv.bytes);
    }
    if (at != pg.tail_offset || pg.tail_offset > pg.offset + pg.bytes || pg.offset + pg.bytes > p.arena_bytes)
      throw_internal(where, name + ": its buffer does not fit its members and tail in the arena");
    for (const Span& sp : spans)
      if (group_of[static_cast<size_t>(sp.v)] != static_cast<int>(k) && sp.lo < pg.offset + pg.bytes &&
          pg.offset < sp.hi && sp.last >= pg.def)
        throw_internal(where,
                       name + ": '" + p.values[static_cast<size_t>(sp.v)].name + "' uses its bytes while it lives");
  }
  for (size_t s = 0; s < p.runs_with_next.size(); ++s) {
    if (!p.runs_with_next[s]) continue;
    if (s + 1 >= p.steps.size() || !steps_independent(p, static_cast<int>(s), static_cast<int>(s) + 1))
      throw_internal(where, "steps " + std::to_string(s) + " and " + std::to_string(s + 1) +
                                " are paired but depend on each other or share arena bytes");
    if (s + 1 < p.runs_with_next.size() && p.runs_with_next[s + 1])
      throw_internal(where, "step " + std::to_string(s + 1) + " is in two pairs");
  }
}

}  // namespace trainrt
