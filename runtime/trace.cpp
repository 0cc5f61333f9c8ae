#include "runtime/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"

namespace trainrt {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

using Json = nlohmann::ordered_json;  // keys in the order written, as Chrome's examples show them

std::string shapes(const std::vector<std::vector<int64_t>>& s) {
  std::string out;
  for (const auto& d : s) out += (out.empty() ? "" : " ") + dims_to_string(d);
  return out;
}

// Microseconds since t0, to the nanosecond (Chrome's "ts" and "dur" unit).
double micros(int64_t ns) { return static_cast<double>(ns) / 1e3; }

Json lane_name(int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

std::string chrome_trace_json(const std::vector<NodeEvent>& events, const std::vector<TraceLane>& lanes) {
  int64_t t0 = INT64_MAX;
  for (const NodeEvent& e : events) t0 = std::min(t0, e.start_ns);
  for (const TraceLane& l : lanes)
    for (const TraceSlice& s : l.slices) t0 = std::min(t0, s.start_ns);
  if (t0 == INT64_MAX) t0 = 0;
  std::vector<Json> out{lane_name(1, "nodes")};
  for (const NodeEvent& e : events)
    out.push_back(
        {{"ph", "X"},
         {"pid", 1},
         {"tid", 1},
         {"name", e.name},
         {"cat", e.op},
         {"ts", micros(e.start_ns - t0)},
         {"dur", micros(e.end_ns - e.start_ns)},
         {"args",
          {{"op", e.op}, {"node", e.node}, {"inputs", shapes(e.input_shapes)}, {"outputs", shapes(e.output_shapes)}}}});
  for (size_t l = 0; l < lanes.size(); ++l) {
    const int tid = static_cast<int>(l) + 2;
    out.push_back(lane_name(tid, lanes[l].name));
    for (const TraceSlice& s : lanes[l].slices)
      out.push_back({{"ph", "X"},
                     {"pid", 1},
                     {"tid", tid},
                     {"name", s.name},
                     {"cat", lanes[l].name},
                     {"ts", micros(s.start_ns - t0)},
                     {"dur", micros(s.end_ns - s.start_ns)}});
  }
  // One event per line, so a trace can be grepped and diffed.
  std::string j = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (size_t i = 0; i < out.size(); ++i)
    j += (i ? ",\n" : "") + out[i].dump(-1, ' ', false, Json::error_handler_t::replace);
  return j + "\n]}\n";
}

void write_chrome_trace(const std::string& path, const std::vector<NodeEvent>& events,
                        const std::vector<TraceLane>& lanes) {
  write_file_atomic(path, chrome_trace_json(events, lanes));
}

std::string profile_table(const std::vector<NodeEvent>& events, double copy_gbps) {
  struct Row {
    size_t calls = 0;
    int64_t ns = 0;
    double flops = 0, bytes = 0;
    bool flops_known = true;
  };
  std::map<std::string, Row> rows;
  int64_t total = 0;
  for (const NodeEvent& e : events) {
    Row& r = rows[e.op];
    ++r.calls;
    r.ns += e.end_ns - e.start_ns;
    r.flops += e.flops;
    r.bytes += e.bytes;
    r.flops_known = r.flops_known && e.flops > 0;
    total += e.end_ns - e.start_ns;
  }
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  const bool of_copy = copy_gbps > 0;
  std::string out;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%-28s %7s %11s %7s %9s %8s%s\n", "op", "calls", "total ms", "%", "GFLOP/s", "GB/s",
                of_copy ? "  % copy" : "");
  out += buf;
  for (const auto& [op, r] : sorted) {
    double ms = static_cast<double>(r.ns) / 1e6;
    double pct = total ? 100.0 * static_cast<double>(r.ns) / static_cast<double>(total) : 0.0;
    std::string gf = "-", gb = "-", share;
    if (r.flops_known && r.ns > 0) {
      char g[32];
      std::snprintf(g, sizeof g, "%.1f", r.flops / static_cast<double>(r.ns));  // flop/ns = GFLOP/s
      gf = g;
    }
    if (r.bytes > 0 && r.ns > 0) {
      const double gbps = r.bytes / static_cast<double>(r.ns);  // byte/ns = GB/s
      char g[32];
      std::snprintf(g, sizeof g, "%.1f", gbps);
      gb = g;
      if (of_copy) {
        std::snprintf(g, sizeof g, " %7.0f%%", 100.0 * gbps / copy_gbps);
        share = g;
      }
    }
    std::snprintf(buf, sizeof buf, "%-28s %7zu %11.3f %6.1f%% %9s %8s%s\n", op.c_str(), r.calls, ms, pct, gf.c_str(),
                  gb.c_str(), share.c_str());
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%-28s %7zu %11.3f %6.1f%%\n", "total", events.size(),
                static_cast<double>(total) / 1e6, total ? 100.0 : 0.0);
  return out + buf;
}

}  // namespace trainrt
