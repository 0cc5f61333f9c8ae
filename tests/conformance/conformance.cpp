// ONNX backend node tests (Debian libonnx-testdata) on every trainrt backend.
//
//   conformance                                  # all tests, reference + cpu
//   conformance --filter conv --backend cpu      # a subset
//   conformance --list-skips --report out.md     # every skip, table as markdown
//
// Why: ONNX ships, for each op, tiny models with inputs and expected outputs
// (/usr/share/libonnx-testdata/data/node/<test>/model.onnx, test_data_set_*/
// input_N.pb, output_N.pb). Running them is the cheapest check that a schema
// accepts what ONNX calls valid and a kernel computes what ONNX computes. A test
// whose ops are all registered is imported and run on each backend; outputs are
// compared the way onnx's own runner does (assert_allclose rtol=1e-3, atol=1e-7;
// integers and bools exactly). A BadInput error on an official model is a FAIL
// (our validation is wrong); an Unsupported one is a skip that prints why.
// Each test runs in a forked child so that a crashing kernel is one FAIL line,
// not the end of the table. tests/conformance/known_failures.txt turns listed
// FAILs into XFAILs and fails when a listed test passes (XPASS), so it cannot
// go stale. Exit: 0 no FAIL, 1 some FAIL, 2 bad usage or no test data.
// ONNX's ai.onnx.preview.training tests run like any other: the optimizer ops
// Momentum, Adam and Adagrad are registered (ops/preview_training.cpp); the two
// Gradient tests, which ONNX keeps under data/simple/ (test_gradient_of_add*),
// are listed too and skipped with the reason printed in the table.
#include <onnx/onnx_pb.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "runtime/executor.h"

namespace fs = std::filesystem;
using namespace trainrt;

namespace {

constexpr const char* kDefaultDataDir = "/usr/share/libonnx-testdata/data/node";
// The preview-training Gradient tests live beside the node tests, in data/simple.
constexpr const char* kGradientDataDir = "/usr/share/libonnx-testdata/data/simple";
constexpr const char* kGradientPrefix = "test_gradient_";
constexpr const char* kTrainingDomain = "ai.onnx.preview.training";
constexpr double kRtol = 1e-3, kAtol = 1e-7;  // onnx/backend/test/runner defaults
constexpr unsigned kTimeoutSeconds = 120;     // per test, all backends

enum class Status { Pass, Fail, XFail, Skip };
const char* status_name(Status s) {
  switch (s) {
    case Status::Pass:
      return "pass";
    case Status::Fail:
      return "FAIL";
    case Status::XFail:
      return "XFAIL";
    case Status::Skip:
      return "skip";
  }
  return "?";
}

struct Outcome {
  std::string backend;
  Status status = Status::Fail;
  std::string detail;
};

struct Options {
  std::string filter, report, known_failures = TRAINRT_KNOWN_FAILURES;
  std::string data_dir = kDefaultDataDir;
  std::vector<std::string> backends{"reference", "cpu"};
  bool list_skips = false, fork = true;
};

// ------------------------------------------------------------ small helpers

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  return s;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// Error messages name the model file by its full path; the table names the test.
std::string strip_path(std::string msg, const std::string& dir) {
  for (const std::string& p : {dir + "/model.onnx: ", dir + "/"}) {
    for (size_t at; (at = msg.find(p)) != std::string::npos;) msg.erase(at, p.size());
  }
  return one_line(msg);
}

// "Add" or "ai.onnx.preview.training::Adam"
std::string op_key(const std::string& domain, const std::string& op) {
  std::string d = canonical_domain(domain);
  return d.empty() ? op : d + "::" + op;
}

// Why a test whose missing ops are all in ai.onnx.preview.training is skipped.
std::string training_skip_reason(const std::vector<std::string>& missing) {
  const std::string gradient = std::string(kTrainingDomain) + "::Gradient";
  if (missing.size() == 1 && missing[0] == gradient)
    return "Gradient (ai.onnx.preview.training) is not supported: it needs autodiff over the ONNX subgraph its "
           "xs/zs/y attributes name, inside an inference graph; trainrt's autodiff builds whole training graphs "
           "(train, bench) from a model's loss instead";
  return "preview-training op(s) not registered: " + join(missing, ", ");
}

// Distinct ops of a model (top-level graph), in order of first use; read with
// protobuf directly so that models our importer rejects still list their ops.
struct ModelOps {
  std::vector<std::string> ops, missing;  // missing: not in registry().schemas
  bool training_domain = false;           // a missing op is an optimizer op
  std::string error;
};

ModelOps model_ops(const fs::path& model) {
  ModelOps r;
  onnx::ModelProto m;
  std::ifstream in(model, std::ios::binary);
  if (!in || !m.ParseFromIstream(&in)) {
    r.error = "model.onnx cannot be read or parsed";
    return r;
  }
  for (const auto& n : m.graph().node()) {
    std::string key = op_key(n.domain(), n.op_type());
    if (std::find(r.ops.begin(), r.ops.end(), key) != r.ops.end()) continue;
    r.ops.push_back(key);
    if (!registry().schemas.find(n.domain(), n.op_type())) {
      r.missing.push_back(key);
      r.training_domain = r.training_domain || canonical_domain(n.domain()) == kTrainingDomain;
    }
  }
  return r;
}

// ------------------------------------------------------------ comparison

// "" when `got` matches `want` the way onnx's runner checks it.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (got.dims() != want.dims())
    return "shape " + dims_to_string(got.dims()) + ", expected " + dims_to_string(want.dims());
  const int64_t n = want.numel();
  if (!dtype_is_float(want.dtype())) {  // integers and bools: bit exact
    for (int64_t i = 0; i < n; ++i) {
      size_t es = dtype_size(want.dtype());
      if (std::memcmp(got.raw() + i * es, want.raw() + i * es, es) != 0)
        return "element " + std::to_string(i) + " is " + fmt(got.get_as_double(i)) + ", expected " +
               fmt(want.get_as_double(i)) + " (exact match required)";
    }
    return "";
  }
  int64_t bad = 0, first = -1;
  double max_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = got.get_as_double(i), y = want.get_as_double(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(y) && x == y) continue;
    double d = std::fabs(x - y);
    if (std::isnan(d)) d = INFINITY;
    max_abs = std::max(max_abs, d);
    if (!(d <= kAtol + kRtol * std::fabs(y))) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (!bad) return "";
  return std::to_string(bad) + "/" + std::to_string(n) + " elements differ, max abs diff " + fmt(max_abs) +
         "; first at " + std::to_string(first) + ": " + fmt(got.get_as_double(first)) + " vs " +
         fmt(want.get_as_double(first));
}

// ------------------------------------------------------------ running one test

struct DataSet {
  std::string name;
  TensorMap feeds;
  std::vector<Tensor> expected;
};

std::vector<Tensor> read_numbered(const fs::path& dir, const char* stem) {
  std::vector<Tensor> out;
  for (int k = 0;; ++k) {
    fs::path f = dir / (stem + std::to_string(k) + ".pb");
    if (!fs::exists(f)) return out;
    out.push_back(read_tensor_file(f.string()));
  }
}

// ONNX stores bfloat16 test tensors as uint16 bit patterns (numpy has no
// bfloat16); read them as the bfloat16 values the model declares.
Tensor as_declared(const Tensor& t, DataType declared) {
  if (declared != DataType::BFloat16 || t.dtype() != DataType::UInt16) return t;
  Tensor r(DataType::BFloat16, t.dims());
  std::memcpy(r.raw(), t.raw(), t.nbytes());
  return r;
}

// Value of a node input when it is fed, an initializer or a Constant output.
const Tensor* constant_value(const Graph& g, const TensorMap& feeds, const Node& n, size_t i) {
  if (!n.has_input(i)) return nullptr;
  const std::string& v = n.inputs[i];
  if (auto it = feeds.find(v); it != feeds.end()) return &it->second;
  if (auto it = g.initializers.find(v); it != g.initializers.end()) return &it->second;
  for (const Node& c : g.nodes)
    if (c.op_type == "Constant" && !c.outputs.empty() && c.outputs[0] == v) return c.attr_tensor("value");
  return nullptr;
}

// A Dropout in training mode with a non-zero ratio draws a random mask that no
// fixed expected output can match.
bool has_random_mask(const Graph& g, const TensorMap& feeds) {
  for (const Node& n : g.nodes) {
    if (n.op_type != "Dropout" || !canonical_domain(n.domain).empty()) continue;
    const Tensor* ratio = constant_value(g, feeds, n, 1);
    const Tensor* training = constant_value(g, feeds, n, 2);
    if (!n.has_input(2)) continue;  // inference: identity, mask all true
    bool train = !training || training->numel() != 1 || training->get_as_double(0) != 0.0;
    bool zero = ratio && ratio->numel() == 1 && ratio->get_as_double(0) == 0.0;
    if (train && !zero) return true;
  }
  return false;
}

Outcome from_error(const std::string& backend, const Error& e, const std::string& dir, const char* stage) {
  std::string msg = strip_path(e.what(), dir);
  switch (e.kind()) {
    case ErrorKind::Unsupported:
      return {backend, Status::Skip, msg};
    case ErrorKind::BadInput:
      return {backend, Status::Fail, std::string(stage) + " rejected the official test as bad input: " + msg};
    case ErrorKind::Internal:
    case ErrorKind::Peer:
      break;
  }
  return {backend, Status::Fail, std::string(stage) + ": internal error: " + msg};
}

// Imports, runs and compares one test on each backend; `emit` gets each outcome
// as soon as it is known.
template <typename Emit>
void run_test(const fs::path& dir, const std::vector<std::string>& backends, Emit emit) {
  const std::string d = dir.string();
  auto all = [&](Outcome o) {
    for (const auto& b : backends) emit(Outcome{b, o.status, o.detail});
  };
  Graph g;
  std::vector<DataSet> sets;
  try {
    g = import_onnx_file((dir / "model.onnx").string(), registry().schemas);
    std::vector<fs::path> set_dirs;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
        set_dirs.push_back(e.path());
    std::sort(set_dirs.begin(), set_dirs.end());
    if (set_dirs.empty()) return all({"", Status::Fail, "no test_data_set_* folder"});
    for (const fs::path& sd : set_dirs) {
      DataSet s{sd.filename().string(), {}, read_numbered(sd, "output_")};
      std::vector<Tensor> inputs = read_numbered(sd, "input_");
      if (inputs.size() != g.inputs.size() || s.expected.size() != g.outputs.size())
        return all({"", Status::Fail,
                    s.name + " has " + std::to_string(inputs.size()) + " inputs and " +
                        std::to_string(s.expected.size()) + " outputs, the imported graph " +
                        std::to_string(g.inputs.size()) + " and " + std::to_string(g.outputs.size())});
      for (size_t k = 0; k < inputs.size(); ++k)
        s.feeds[g.inputs[k]] = as_declared(inputs[k], g.info(g.inputs[k]).dtype);
      for (size_t k = 0; k < s.expected.size(); ++k)
        s.expected[k] = as_declared(s.expected[k], g.info(g.outputs[k]).dtype);
      if (has_random_mask(g, s.feeds)) return all({"", Status::Skip, "random mask"});
      sets.push_back(std::move(s));
    }
  } catch (const Error& e) {
    return all(from_error("", e, d, "import"));
  } catch (const std::exception& e) {
    return all({"", Status::Fail, "import: " + one_line(e.what())});
  }
  for (const std::string& b : backends) {
    Outcome o{b, Status::Pass, ""};
    try {
      auto backend = make_backend(b);
      // A pass that used reference kernels says so: it did not test this backend's own.
      std::vector<std::string> fallback, on_reference = backend->fallback_ops();
      for (const Node& n : g.nodes) {
        std::string key = op_key(n.domain, n.op_type);
        if (std::count(on_reference.begin(), on_reference.end(), key) &&
            !std::count(fallback.begin(), fallback.end(), key))
          fallback.push_back(key);
      }
      if (!fallback.empty()) o.detail = "reference kernel: " + join(fallback, ", ");
      for (const DataSet& s : sets) {
        TensorMap out = run_graph(g, s.feeds, *backend);
        for (size_t k = 0; k < g.outputs.size() && o.status == Status::Pass; ++k) {
          std::string diff = compare(out.at(g.outputs[k]), s.expected[k]);
          if (diff.empty()) continue;
          std::string note = o.detail.empty() ? "" : "(" + o.detail + ") ";
          o = {b, Status::Fail, note + s.name + " output " + std::to_string(k) + " '" + g.outputs[k] + "': " + diff};
        }
        if (o.status != Status::Pass) break;
      }
    } catch (const Error& e) {
      o = from_error(b, e, d, "run");
    } catch (const std::exception& e) {
      o = {b, Status::Fail, "run: " + one_line(e.what())};
    }
    emit(o);
  }
}

// Runs one test in a child process; a crash or a hang becomes a FAIL.
std::vector<Outcome> run_isolated(const fs::path& dir, const std::vector<std::string>& backends, bool isolate) {
  std::vector<Outcome> got;
  if (!isolate) {
    run_test(dir, backends, [&](Outcome o) { got.push_back(std::move(o)); });
    return got;
  }
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(kTimeoutSeconds);
    run_test(dir, backends, [&](const Outcome& o) {
      std::string line = o.backend + "\t" + status_name(o.status) + "\t" + one_line(o.detail) + "\n";
      for (size_t done = 0; done < line.size();) {
        ssize_t w = ::write(fds[1], line.data() + done, line.size() - done);
        if (w <= 0) ::_exit(3);
        done += static_cast<size_t>(w);
      }
    });
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    text.append(buf, static_cast<size_t>(r));
  }
  ::close(fds[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    std::string line = text.substr(pos, nl - pos);
    size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    std::string s = line.substr(t1 + 1, t2 - t1 - 1);
    Status status = s == "pass" ? Status::Pass : s == "skip" ? Status::Skip : Status::Fail;
    got.push_back({line.substr(0, t1), status, line.substr(t2 + 1)});
  }
  std::string why;
  if (WIFSIGNALED(st))
    why = WTERMSIG(st) == SIGALRM
              ? "timed out after " + std::to_string(kTimeoutSeconds) + " s"
              : std::string("crashed: signal ") + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  else if (WEXITSTATUS(st) != 0)
    why = "child exited with status " + std::to_string(WEXITSTATUS(st));
  for (const std::string& b : backends) {
    bool have = std::any_of(got.begin(), got.end(), [&](const Outcome& o) { return o.backend == b; });
    if (!have) got.push_back({b, Status::Fail, why.empty() ? "no result reported" : why});
  }
  return got;
}

// ------------------------------------------------------------ known failures

// Lines "test_name  # reason" or "test_name@backend  # reason".
struct KnownFailures {
  std::map<std::string, std::string> reason;  // "test" or "test@backend" -> reason
  std::set<std::string> used;

  const std::string* find(const std::string& test, const std::string& backend) {
    for (const std::string& k : {test + "@" + backend, test}) {
      auto it = reason.find(k);
      if (it != reason.end()) {
        used.insert(k);
        return &it->second;
      }
    }
    return nullptr;
  }
};

KnownFailures load_known_failures(const std::string& path) {
  KnownFailures kf;
  std::ifstream in(path);
  if (!in) return kf;  // no file: no known failures
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    size_t hash = line.find('#');
    std::string name = line.substr(0, hash), why = hash == std::string::npos ? "" : line.substr(hash + 1);
    auto trim = [](std::string& s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t\r") + 1);
    };
    trim(name);
    trim(why);
    if (name.empty()) continue;
    if (why.empty())
      throw Error(ErrorKind::BadInput, path + ":" + std::to_string(no) + ": '" + name + "' needs a '# reason'");
    kf.reason[name] = why;
  }
  return kf;
}

void apply_known(KnownFailures& kf, const std::string& test, Outcome& o) {
  const std::string* why = kf.find(test, o.backend);
  if (!why) return;
  if (o.status == Status::Fail)
    o = {o.backend, Status::XFail, *why + " -- " + o.detail};
  else if (o.status == Status::Pass)
    o = {o.backend, Status::Fail, "XPASS: remove from known_failures.txt"};
  else
    o.detail += " (listed in known_failures.txt)";
}

// ------------------------------------------------------------ table

struct Row {
  std::string test, ops, backend;
  Status status;
  std::string detail;
};

std::string ops_column(const std::string& ops) { return ops.size() > 28 ? ops.substr(0, 25) + "..." : ops; }

void print_row(const Row& r) {
  std::printf("%-56s %-28s %-9s %-5s %s\n", r.test.c_str(), ops_column(r.ops).c_str(), r.backend.c_str(),
              status_name(r.status), r.detail.c_str());
  std::fflush(stdout);
}

std::string md_cell(std::string s) {
  for (size_t at = 0; (at = s.find('|', at)) != std::string::npos; at += 2) s.replace(at, 1, "\\|");
  return s;
}

void usage(FILE* to) {
  std::fprintf(to,
               "usage: conformance [--filter SUBSTR] [--backend NAME] [--list-skips] [--data-dir DIR]\n"
               "                   [--report FILE.md] [--known-failures FILE] [--no-fork]\n"
               "Runs ONNX's backend node tests (default %s) on trainrt's backends.\n",
               kDefaultDataDir);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "conformance: error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return args[++i];
    };
    if (a == "--filter")
      opt.filter = value();
    else if (a == "--backend")
      opt.backends = {value()};
    else if (a == "--data-dir")
      opt.data_dir = value();
    else if (a == "--report")
      opt.report = value();
    else if (a == "--known-failures")
      opt.known_failures = value();
    else if (a == "--list-skips")
      opt.list_skips = true;
    else if (a == "--no-fork")
      opt.fork = false;
    else if (a == "--help" || a == "-h")
      return usage(stdout), 0;
    else {
      std::fprintf(stderr, "conformance: error: unknown argument '%s'\n", a.c_str());
      return usage(stderr), 2;
    }
  }
  KnownFailures known;
  try {
    for (const std::string& b : opt.backends) (void)make_backend(b);
    known = load_known_failures(opt.known_failures);
  } catch (const Error& e) {
    std::fprintf(stderr, "conformance: error: %s\n", e.what());
    return 2;
  }
  std::error_code ec;
  if (!fs::is_directory(opt.data_dir, ec)) {
    std::fprintf(stderr,
                 "conformance: error: %s is not a folder: ONNX's node tests are missing "
                 "(install the Debian package libonnx-testdata, or pass --data-dir)\n",
                 opt.data_dir.c_str());
    return 2;
  }
  std::vector<fs::path> tests;
  std::set<std::string> all_names;
  for (const auto& e : fs::directory_iterator(opt.data_dir)) {
    if (!e.is_directory() || !fs::exists(e.path() / "model.onnx")) continue;
    all_names.insert(e.path().filename().string());
    if (e.path().filename().string().find(opt.filter) != std::string::npos) tests.push_back(e.path());
  }
  if (all_names.empty()) {
    std::fprintf(stderr, "conformance: error: no <test>/model.onnx under %s\n", opt.data_dir.c_str());
    return 2;
  }
  // ONNX keeps the Gradient op's tests in data/simple; list them when that folder exists.
  if (fs::is_directory(kGradientDataDir, ec))
    for (const auto& e : fs::directory_iterator(kGradientDataDir)) {
      const std::string name = e.path().filename().string();
      if (!e.is_directory() || name.rfind(kGradientPrefix, 0) != 0 || !fs::exists(e.path() / "model.onnx")) continue;
      all_names.insert(name);
      if (name.find(opt.filter) != std::string::npos) tests.push_back(e.path());
    }
  std::sort(tests.begin(), tests.end(),
            [](const fs::path& x, const fs::path& y) { return x.filename() < y.filename(); });

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  std::map<std::string, int> unsupported_ops;                          // op -> tests skipped for it
  std::vector<std::pair<std::string, std::string>> unsupported_tests;  // test, missing ops
  std::printf("%-56s %-28s %-9s %-5s %s\n", "test", "ops", "backend", "result", "detail");
  for (const fs::path& dir : tests) {
    const std::string name = dir.filename().string();
    ModelOps m = model_ops(dir / "model.onnx");
    std::vector<Outcome> outcomes;
    auto skip_all = [&](const std::string& why) {
      for (const auto& b : opt.backends) outcomes.push_back({b, Status::Skip, why});
    };
    if (!m.error.empty()) {
      for (const auto& b : opt.backends) outcomes.push_back({b, Status::Fail, m.error});
    } else if (!m.missing.empty()) {
      std::string sibling = name;
      if (size_t at = sibling.find("_expanded"); at != std::string::npos) sibling.erase(at, 9);
      if (m.training_domain) {
        skip_all(training_skip_reason(m.missing));
      } else if (sibling != name && all_names.count(sibling) &&
                 model_ops(fs::path(opt.data_dir) / sibling / "model.onnx").missing.empty()) {
        skip_all("expanded variant uses ops we do not have: " + join(m.missing, ", "));
      } else {
        for (const auto& op : m.missing) ++unsupported_ops[op];
        unsupported_tests.emplace_back(name, join(m.missing, ", "));
      }
    } else {
      outcomes = run_isolated(dir, opt.backends, opt.fork);
    }
    for (Outcome& o : outcomes) apply_known(known, name, o);
    bool same = !outcomes.empty() && std::all_of(outcomes.begin(), outcomes.end(), [&](const Outcome& o) {
      return o.status == outcomes[0].status && o.detail == outcomes[0].detail;
    });
    for (size_t i = 0; i < outcomes.size(); ++i) {
      Row r{name, join(m.ops, ","), outcomes[i].backend, outcomes[i].status, outcomes[i].detail};
      rows.push_back(r);
      if (same && outcomes.size() > 1) {
        if (i == 0) r.backend = "all", print_row(r);
      } else {
        print_row(r);
      }
    }
  }
  // Stale list entries: a listed test that no longer exists (full runs only).
  std::vector<std::string> stale;
  if (opt.filter.empty())
    for (const auto& [key, why] : known.reason)
      if (!all_names.count(key.substr(0, key.find('@')))) stale.push_back(key);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Summary.
  std::map<std::string, std::map<Status, int>> totals;
  for (const Row& r : rows) ++totals[r.backend][r.status];
  int fails = static_cast<int>(stale.size());
  std::string summary =
      "\n" + std::to_string(tests.size()) + " tests under " + opt.data_dir + " in " + fmt(secs) + " s\n";
  summary += "backend     pass  FAIL  XFAIL  skip  unsupported-op\n";
  for (const std::string& b : opt.backends) {
    auto& t = totals[b];
    fails += t[Status::Fail];
    char line[128];
    std::snprintf(line, sizeof line, "%-10s %5d %5d %6d %5d %15zu\n", b.c_str(), t[Status::Pass], t[Status::Fail],
                  t[Status::XFail], t[Status::Skip], unsupported_tests.size());
    summary += line;
  }
  if (!unsupported_ops.empty()) {
    std::vector<std::string> parts;
    for (const auto& [op, n] : unsupported_ops) parts.push_back(op + " " + std::to_string(n));
    summary += std::to_string(unsupported_tests.size()) +
               " tests not run because trainrt does not register their op (tests per op" +
               (opt.list_skips ? "" : "; --list-skips lists each test") + "):\n  " + join(parts, ", ") + "\n";
  }
  if (opt.list_skips)
    for (const auto& [t, ops] : unsupported_tests) summary += "  skip " + t + ": op not supported: " + ops + "\n";
  for (const std::string& k : stale) summary += "FAIL known_failures.txt lists '" + k + "', which is not a test here\n";
  for (const auto& [key, why] : known.reason) {
    size_t at = key.find('@');
    bool ran_backend = at == std::string::npos ||
                       std::find(opt.backends.begin(), opt.backends.end(), key.substr(at + 1)) != opt.backends.end();
    if (opt.filter.empty() && ran_backend && !known.used.count(key) && all_names.count(key.substr(0, at))) {
      summary += "note: known_failures.txt lists '" + key + "', which was not run (its op is not registered)\n";
    }
  }
  summary += fails ? std::to_string(fails) + " FAIL\n" : "no FAIL\n";
  std::fputs(summary.c_str(), stdout);

  if (!opt.report.empty()) {
    std::string md =
        "# trainrt conformance: ONNX backend node tests\n\n| test | ops | backend | result | detail "
        "|\n|---|---|---|---|---|\n";
    for (const Row& r : rows)
      md += "| " + r.test + " | " + md_cell(r.ops) + " | " + r.backend + " | " + status_name(r.status) + " | " +
            md_cell(r.detail) + " |\n";
    md += "\n```" + summary + "```\n";
    if (!opt.list_skips && !unsupported_tests.empty()) {
      md += "\n## Tests whose op is not registered\n\n| test | missing ops |\n|---|---|\n";
      for (const auto& [t, ops] : unsupported_tests) md += "| " + t + " | " + md_cell(ops) + " |\n";
    }
    try {
      write_file_atomic(opt.report, md);
    } catch (const Error& e) {
      std::fprintf(stderr, "conformance: error: %s\n", e.what());
      return 2;
    }
  }
  return fails ? 1 : 0;
}
