// Per-node timing: what the executor records when asked, a Chrome/Perfetto trace
// and a per-op-type table.
//
//   ProfileCollector prof;
//   RunOptions ro;  ro.profile = &prof;
//   run_graph(g, feeds, *backend, ro);
//   write_chrome_trace("trace.json", prof.events);          // open in ui.perfetto.dev
//   std::cout << profile_table(prof.events);                // calls, ms, %, GFLOP/s, GB/s by op
//
// Why: "which op costs what" is the first question of any speed work. Times are
// steady-clock nanoseconds; the trace has one lane ("tid") for nodes and, through
// `lanes`, any the caller adds (data loading, all-reduce) on the same clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrt {

// The trace clock: std::chrono::steady_clock nanoseconds since its epoch.
int64_t now_ns();

struct NodeEvent {
  std::string name, op;
  size_t node = 0;  // index in the graph
  std::vector<std::vector<int64_t>> input_shapes, output_shapes;
  int64_t start_ns = 0, end_ns = 0;  // std::chrono::steady_clock, since its epoch
  double flops = 0;                  // from the op's FLOP rule; 0 when unknown
  // Bytes of the node's inputs (each buffer once) and outputs as stored (16-bit where a
  // value is stored so): what it reads and writes at least, its memory traffic where the
  // op is memory bound (workspace and re-reads not counted).
  double bytes = 0;
};

// Filled by the executor when RunOptions::profile points to it (events append).
struct ProfileCollector {
  std::vector<NodeEvent> events;
};

// A slice on a caller's lane (e.g. "data" or "allreduce").
struct TraceSlice {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
};
struct TraceLane {
  std::string name;
  std::vector<TraceSlice> slices;
};

// Chrome trace JSON ({"traceEvents": [...]} with ph "X" slices in microseconds,
// relative to the earliest event), written atomically. BadInput if the file
// cannot be written.
void write_chrome_trace(const std::string& path, const std::vector<NodeEvent>& events,
                        const std::vector<TraceLane>& lanes = {});
std::string chrome_trace_json(const std::vector<NodeEvent>& events, const std::vector<TraceLane>& lanes = {});

// One row per op type sorted by total time: calls, total ms, % of the summed node
// time, GFLOP/s when the op's FLOPs are known, GB/s (NodeEvent::bytes per second) and,
// given `copy_gbps` (copy_bandwidth_gbps of the same backend, runtime/backend.h), that
// rate as a percentage of the copy's: how near a memory-bound op runs to what memory
// allows.
std::string profile_table(const std::vector<NodeEvent>& events, double copy_gbps = 0);

}  // namespace trainrt
