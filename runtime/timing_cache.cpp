#include "runtime/timing_cache.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace trainrt {

namespace {

using Json = nlohmann::ordered_json;  // fields in the order written, so diffs of the file read well

constexpr uint64_t kMaxFileBytes = 64ull << 20;  // a cache of a few thousand entries is well under 1 MiB

const char* type_name(const Json& j) { return j.type_name(); }

std::string field(const Json& e, const char* name, const std::string& where) {
  auto it = e.find(name);
  if (it == e.end()) throw_bad_input(where, std::string("missing '") + name + "'");
  if (!it->is_string()) throw_bad_input(where, std::string("'") + name + "' must be a string, got " + type_name(*it));
  return it->get<std::string>();
}

}  // namespace

std::string default_timing_cache_path(const std::string& model_path) {
  std::filesystem::path p(model_path);
  if (p.extension() == ".onnx") p.replace_extension();
  return p.string() + ".timing-cache.json";
}

std::string problem_dims(const std::vector<int64_t>& dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s.empty() ? "scalar" : s;
}

std::string timing_cache_json(const std::vector<TimingRecord>& records) {
  Json entries = Json::array();
  for (const TimingRecord& r : records)
    entries.push_back({{"pattern", r.key.pattern},
                       {"problem", r.key.problem},
                       {"precision", r.key.precision},
                       {"gpu", r.gpu},
                       {"cudnn", r.cudnn},
                       {"engine", r.entry.engine},
                       {"time_ms", r.entry.time_ms}});
  Json doc = {{"format", kTimingCacheFormat}, {"version", kTimingCacheVersion}, {"entries", entries}};
  return doc.dump(1) + "\n";
}

std::vector<TimingRecord> parse_timing_cache(const std::string& text, const std::string& path) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    if (e.byte >= text.size())
      throw_bad_input(path, "not a timing cache: JSON ends early (truncated?) at byte " + std::to_string(e.byte));
    throw_bad_input(path, "not a timing cache: invalid JSON at byte " + std::to_string(e.byte));
  }
  if (!doc.is_object())
    throw_bad_input(path, std::string("not a timing cache: a JSON ") + type_name(doc) + ", expected an object");
  const std::string format = field(doc, "format", path);
  if (format != kTimingCacheFormat)
    throw_bad_input(path, "not a timing cache: format '" + format + "', expected '" + kTimingCacheFormat + "'");
  auto v = doc.find("version");
  if (v == doc.end()) throw_bad_input(path, "missing 'version'");
  if (!v->is_number_integer()) throw_bad_input(path, std::string("'version' must be an integer, got ") + type_name(*v));
  if (v->get<int64_t>() != kTimingCacheVersion)
    throw_bad_input(path, "timing cache version " + std::to_string(v->get<int64_t>()) +
                              " is not supported (this trainrt reads version " + std::to_string(kTimingCacheVersion) +
                              ")");
  auto es = doc.find("entries");
  if (es == doc.end()) throw_bad_input(path, "missing 'entries'");
  if (!es->is_array()) throw_bad_input(path, std::string("'entries' must be an array, got ") + type_name(*es));
  std::vector<TimingRecord> out;
  std::set<std::vector<std::string>> seen;
  for (size_t i = 0; i < es->size(); ++i) {
    const Json& e = (*es)[i];
    const std::string where = path + ": entry " + std::to_string(i);
    if (!e.is_object()) throw_bad_input(where, std::string("must be an object, got ") + type_name(e));
    TimingRecord r;
    r.key.pattern = field(e, "pattern", where);
    r.key.problem = field(e, "problem", where);
    r.key.precision = field(e, "precision", where);
    r.gpu = field(e, "gpu", where);
    r.cudnn = field(e, "cudnn", where);
    r.entry.engine = field(e, "engine", where);
    if (r.key.pattern.empty()) throw_bad_input(where, "'pattern' is empty");
    if (r.entry.engine.empty()) throw_bad_input(where, "'engine' is empty");
    auto t = e.find("time_ms");
    if (t == e.end()) throw_bad_input(where, "missing 'time_ms'");
    if (!t->is_number()) throw_bad_input(where, std::string("'time_ms' must be a number, got ") + type_name(*t));
    r.entry.time_ms = t->get<double>();
    if (!(r.entry.time_ms >= 0)) throw_bad_input(where, "'time_ms' must be >= 0, got " + t->dump());
    if (!seen.insert({r.key.pattern, r.key.problem, r.key.precision, r.gpu, r.cudnn}).second)
      throw_bad_input(where, "repeats the key (pattern, problem, precision, gpu, cudnn) of an earlier entry");
    out.push_back(std::move(r));
  }
  return out;
}

TimingCache::TimingCache(std::string path, std::string gpu, std::string cudnn)
    : path_(std::move(path)), gpu_(std::move(gpu)), cudnn_(std::move(cudnn)) {}

namespace {

// The records of the file at `path`; none when it does not exist.
std::vector<TimingRecord> read_records(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !std::filesystem::is_symlink(path, ec)) return {};
  return parse_timing_cache(read_file_bytes(path, kMaxFileBytes), path);
}

}  // namespace

TimingCache TimingCache::load(const std::string& path, const std::string& gpu, const std::string& cudnn) {
  TimingCache c(path, gpu, cudnn);
  for (TimingRecord& r : read_records(path))
    c.entries_[{r.key.pattern, r.key.problem, r.key.precision, r.gpu, r.cudnn}] = std::move(r.entry);
  return c;
}

const TimingEntry* TimingCache::find(const TimingKey& k) const { return find(k, gpu_, cudnn_); }

void TimingCache::record(const TimingKey& k, const TimingEntry& e) { record(k, gpu_, cudnn_, e); }

const TimingEntry* TimingCache::find(const TimingKey& k, const std::string& gpu, const std::string& cudnn) const {
  auto it = entries_.find({k.pattern, k.problem, k.precision, gpu, cudnn});
  return it == entries_.end() ? nullptr : &it->second;
}

void TimingCache::record(const TimingKey& k, const std::string& gpu, const std::string& cudnn, const TimingEntry& e) {
  if (k.pattern.empty() || e.engine.empty() || !(e.time_ms >= 0))
    throw_internal("timing cache " + path_, "record needs a pattern, an engine and a time >= 0");
  entries_[{k.pattern, k.problem, k.precision, gpu, cudnn}] = e;
}

std::vector<TimingRecord> TimingCache::records() const {
  std::vector<TimingRecord> out;
  for (const auto& [id, e] : entries_) {
    const auto& [pattern, problem, precision, gpu, cudnn] = id;
    out.push_back({{pattern, problem, precision}, gpu, cudnn, e});
  }
  return out;
}

size_t TimingCache::usable() const {
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += std::get<3>(id) == gpu_ && std::get<4>(id) == cudnn_;
  return n;
}

void TimingCache::save() const {
  // What another process saved since load stays; ours win where both measured a key.
  TimingCache merged = load(path_, gpu_, cudnn_);
  for (const auto& [id, e] : entries_) merged.entries_[id] = e;
  write_file_atomic(path_, timing_cache_json(merged.records()));
}

TimingCacheChooser::TimingCacheChooser(TimingCache cache, TimingPolicy p)
    : EngineChooser(p), cache_(std::move(cache)) {}

std::optional<std::string> TimingCacheChooser::find(const EngineKey& k) const {
  std::lock_guard<std::mutex> lock(mu_);
  const TimingEntry* e = cache_.find({k.pattern, k.problem, k.precision}, k.gpu, k.library);
  if (!e) return std::nullopt;
  return e->engine;
}

void TimingCacheChooser::record(const EngineKey& k, const std::string& engine, double time_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.record({k.pattern, k.problem, k.precision}, k.gpu, k.library, {engine, time_ms});
  ++unsaved_;
}

size_t TimingCacheChooser::save_if_new() {
  std::lock_guard<std::mutex> lock(mu_);
  if (unsaved_ == 0) return 0;
  cache_.save();
  const size_t n = unsaved_;
  unsaved_ = 0;
  return n;
}

TimingCache TimingCacheChooser::cache() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_;
}

std::string timing_cache_saved_line(size_t timed, const std::string& path) {
  return "trainrt: timing cache: " + std::to_string(timed) + (timed == 1 ? " problem" : " problems") +
         " timed, saved to " + path;
}

}  // namespace trainrt
