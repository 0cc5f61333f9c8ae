// The timing cache file (runtime/timing_cache.h): round trip, what the key tells
// apart, entries of other GPUs and cuDNN versions kept but not used, merging saves,
// each kind of corrupt file refused with its one-line message, and a failed save
// leaving the old file and no temporary behind.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "runtime/timing_cache.h"
#include "test_util.h"

using namespace trainrt;
using trainrt::test::TempDir;
namespace fs = std::filesystem;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
std::string read(const std::string& path) { return read_file_bytes(path, 1 << 20); }

const char* kGpu = "NVIDIA H100 80GB HBM3";
const TimingKey kConv{"conv_bias_relu", "x=8x16x28x28 w=32x16x3x3 pads=1,1,1,1 strides=1,1", "fp32"};

// The message of the BadInput error `f` throws ("" if it throws none or another kind).
template <class F>
std::string bad_input(F f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::BadInput);
    return e.what();
  }
  return "";
}

std::string load_error(const std::string& path) {
  return bad_input([&] { TimingCache::load(path, kGpu, "9.1.0"); });
}

}  // namespace

TEST_CASE("timing cache: default path, missing file, round trip") {
  CHECK(default_timing_cache_path("runs/wrn.onnx") == "runs/wrn.timing-cache.json");
  CHECK(default_timing_cache_path("model") == "model.timing-cache.json");
  CHECK(problem_dims({8, 16, 28, 28}) == "8x16x28x28");

  TempDir d;
  const std::string path = d.file("wrn.timing-cache.json");
  TimingCache c = TimingCache::load(path, kGpu, "9.1.0");  // missing: empty, nothing written
  CHECK(c.records().empty());
  CHECK(c.find(kConv) == nullptr);
  CHECK(d.count() == 0);

  c.record(kConv, {"eng12_k3=1", 0.041});
  c.record({"dgrad_drelu", "dy=8x32x28x28 w=32x16x3x3", "fp32"}, {"eng3", 0.25});
  c.save();
  CHECK(d.count() == 1);

  TimingCache back = TimingCache::load(path, kGpu, "9.1.0");
  REQUIRE(back.records().size() == 2);
  const TimingEntry* e = back.find(kConv);
  REQUIRE(e != nullptr);
  CHECK(e->engine == "eng12_k3=1");
  CHECK(e->time_ms == 0.041);
  CHECK(back.find({"dgrad_drelu", "dy=8x32x28x28 w=32x16x3x3", "fp32"})->engine == "eng3");
  // Written again unchanged: the text is a function of the entries.
  const std::string text = read(path);
  back.save();
  CHECK(read(path) == text);
  CHECK(text.find("\"format\": \"trainrt-timing-cache\"") != std::string::npos);
  CHECK(text.find("\"version\": 1") != std::string::npos);
}

TEST_CASE("timing cache: the key tells apart pattern, problem, precision, GPU and cuDNN version") {
  TempDir d;
  const std::string path = d.file("c.json");
  TimingCache c(path, kGpu, "9.1.0");
  c.record(kConv, {"a", 1});
  CHECK(c.find(kConv)->engine == "a");
  CHECK(c.find({"conv_add_relu", kConv.problem, "fp32"}) == nullptr);
  CHECK(c.find({kConv.pattern, "x=8x16x28x28 w=32x16x3x3 pads=0,0,0,0 strides=1,1", "fp32"}) == nullptr);
  CHECK(c.find({kConv.pattern, "x=16x16x28x28 w=32x16x3x3 pads=1,1,1,1 strides=1,1", "fp32"}) == nullptr);
  CHECK(c.find({kConv.pattern, kConv.problem, "bf16"}) == nullptr);
  c.record({kConv.pattern, kConv.problem, "bf16"}, {"b", 2});
  CHECK(c.find(kConv)->engine == "a");
  c.save();

  // Another GPU, another cuDNN version: the entries are in the file but not used...
  TimingCache a100 = TimingCache::load(path, "NVIDIA A100-SXM4-80GB", "9.1.0");
  TimingCache newer = TimingCache::load(path, kGpu, "9.2.0");
  CHECK(a100.find(kConv) == nullptr);
  CHECK(newer.find(kConv) == nullptr);
  CHECK(a100.usable() == 0);
  CHECK(a100.records().size() == 2);
  // ... and kept when that device saves its own.
  a100.record(kConv, {"c", 3});
  a100.save();
  TimingCache h100 = TimingCache::load(path, kGpu, "9.1.0");
  CHECK(h100.records().size() == 3);
  CHECK(h100.usable() == 2);
  CHECK(h100.find(kConv)->engine == "a");
  CHECK(TimingCache::load(path, "NVIDIA A100-SXM4-80GB", "9.1.0").find(kConv)->engine == "c");
}

TEST_CASE("timing cache: save merges with what the file holds by then, its own entries winning") {
  TempDir d;
  const std::string path = d.file("c.json");
  TimingCache first = TimingCache::load(path, kGpu, "9.1.0");
  TimingCache second = TimingCache::load(path, kGpu, "9.1.0");  // two processes, both loaded an empty cache
  first.record(kConv, {"first", 1});
  first.record({"bn_relu_fwd", "x=8x16x28x28", "fp32"}, {"first", 1});
  first.save();
  second.record(kConv, {"second", 0.5});
  second.save();
  TimingCache c = TimingCache::load(path, kGpu, "9.1.0");
  CHECK(c.records().size() == 2);
  CHECK(c.find(kConv)->engine == "second");
  CHECK(c.find({"bn_relu_fwd", "x=8x16x28x28", "fp32"})->engine == "first");
}

TEST_CASE("timing cache: corrupt files are refused with one line naming the file and the fault") {
  TempDir d;
  const std::string path = d.file("c.json");
  const std::string entry =
      R"({"pattern": "p", "problem": "x=1", "precision": "fp32", "gpu": "g", "cudnn": "9", "engine": "e", "time_ms": 1})";
  auto doc = [](const std::string& entries) {
    return R"({"format": "trainrt-timing-cache", "version": 1, "entries": [)" + entries + "]}";
  };
  write(path, doc(entry));
  CHECK(TimingCache::load(path, kGpu, "9.1.0").records().size() == 1);  // the cases below differ from this one

  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases{
      {"", "not a timing cache: JSON ends early (truncated?) at byte"},
      {doc(entry).substr(0, 60), "not a timing cache: JSON ends early (truncated?) at byte"},
      {"{\"format\": trainrt}", "not a timing cache: invalid JSON at byte"},
      {"[1, 2]", "not a timing cache: a JSON array, expected an object"},
      {R"({"version": 1, "entries": []})", "missing 'format'"},
      {R"({"format": "tensorrt-timing-cache", "version": 1, "entries": []})",
       "not a timing cache: format 'tensorrt-timing-cache', expected 'trainrt-timing-cache'"},
      {R"({"format": "trainrt-timing-cache", "version": 2, "entries": []})",
       "timing cache version 2 is not supported (this trainrt reads version 1)"},
      {R"({"format": "trainrt-timing-cache", "version": "1", "entries": []})",
       "'version' must be an integer, got string"},
      {R"({"format": "trainrt-timing-cache", "version": 1})", "missing 'entries'"},
      {R"({"format": "trainrt-timing-cache", "version": 1, "entries": {}})", "'entries' must be an array, got object"},
      {doc("3"), "entry 0: must be an object, got number"},
      {doc(entry + ", {}"), "entry 1: missing 'pattern'"},
      {doc(R"({"pattern": "p", "problem": [1], "precision": "fp32", "gpu": "g", "cudnn": "9", "engine": "e", "time_ms": 1})"),
       "entry 0: 'problem' must be a string, got array"},
      {doc(R"({"pattern": "p", "problem": "x", "precision": "fp32", "gpu": "g", "cudnn": "9", "engine": "e", "time_ms": "1"})"),
       "entry 0: 'time_ms' must be a number, got string"},
      {doc(R"({"pattern": "p", "problem": "x", "precision": "fp32", "gpu": "g", "cudnn": "9", "engine": "e", "time_ms": -1})"),
       "entry 0: 'time_ms' must be >= 0, got -1"},
      {doc(R"({"pattern": "p", "problem": "x", "precision": "fp32", "gpu": "g", "cudnn": "9", "engine": "e"})"),
       "entry 0: missing 'time_ms'"},
      {doc(R"({"pattern": "p", "problem": "x", "precision": "fp32", "gpu": "g", "cudnn": "9", "engine": "", "time_ms": 1})"),
       "entry 0: 'engine' is empty"},
      {doc(entry + ", " + entry),
       "entry 1: repeats the key (pattern, problem, precision, gpu, cudnn) of an earlier entry"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.text);
    write(path, k.text);
    const std::string msg = load_error(path);
    CHECK(msg.rfind(path + ": ", 0) == 0);  // names the file first
    CHECK(msg.find(k.message) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  CHECK(load_error(d.path.string()).find("is a directory") != std::string::npos);

  // A save refuses to overwrite a file that became corrupt after the load.
  TimingCache c = TimingCache::load(d.file("other.json"), kGpu, "9.1.0");
  c.record(kConv, {"a", 1});
  write(d.file("other.json"), "{\"format\"");
  CHECK(bad_input([&] { c.save(); }).find("JSON ends early") != std::string::npos);
  CHECK(read(d.file("other.json")) == "{\"format\"");
}

TEST_CASE("timing cache: a failed save leaves the old file intact and no temporary file") {
  TempDir d;
  const std::string path = d.file("c.json");
  TimingCache c = TimingCache::load(path, kGpu, "9.1.0");
  c.record(kConv, {"a", 1});
  c.save();
  const std::string before = read(path);
  for (int i = 0; i < 50; ++i) c.record({"Conv", "case " + std::to_string(i), "fp32"}, {"eng" + std::to_string(i), 1});

  // The write of the temporary file fails part way: files may grow to fewer bytes than
  // the new cache has (EFBIG; SIGXFSZ ignored so it is an error, not a signal).
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = static_cast<rlim_t>(before.size() + 100);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string msg = bad_input([&] { c.save(); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);

  CHECK(msg.find(path + ": write failed") == 0);
  CHECK(read(path) == before);
  CHECK(d.count() == 1);  // no temporary left
  CHECK(TimingCache::load(path, kGpu, "9.1.0").records().size() == 1);

  // Into a folder that does not exist: refused, nothing created.
  TimingCache nowhere(d.file("missing/c.json"), kGpu, "9.1.0");
  nowhere.record(kConv, {"a", 1});
  CHECK(bad_input([&] { nowhere.save(); }).find("cannot create a temporary file") != std::string::npos);
  CHECK(d.count() == 1);
}
