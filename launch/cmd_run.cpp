// `trainrt run MODEL.onnx --input NAME=file.pb ... --output-dir DIR`: inference on
// given inputs; each output is written as an ONNX TensorProto file (output_K.pb,
// the layout of ONNX's own test data).
#include <cstdio>
#include <filesystem>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/train_util.h"
#include "runtime/executor.h"

namespace trainrt {

namespace {
const CommandSpec kSpec{"run",
                        "trainrt run MODEL.onnx --input NAME=FILE.pb [--input ...] --output-dir DIR [options]",
                        "Run inference on inputs stored as ONNX TensorProto files and write each graph output\n"
                        "as DIR/output_K.pb (K in graph-output order).",
                        {{"input", "", "NAME=FILE.pb, one per graph input", Flag::Repeat},
                         {"output-dir", "", "folder for output_K.pb files (created if missing)"},
                         {"backend", "cpu", "reference or cpu"},
                         {"threads", "0", "threads for the cpu backend (0 = all cores)"}},
                        1,
                        1};
}  // namespace

int cmd_run(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  if (!a.on("output-dir")) throw_bad_input("trainrt run", "--output-dir is required");
  const int threads = static_cast<int>(a.at_least("threads", 0));
  configure_threads(threads);
  auto backend = make_backend(a.str("backend"), threads);
  Graph g = import_onnx_file(a.positional[0], registry().schemas);
  TensorMap feeds;
  for (const std::string& spec : a.all("input")) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw_bad_input("--input " + spec, "expected NAME=FILE.pb");
    std::string name = spec.substr(0, eq);
    if (feeds.count(name)) throw_bad_input("--input " + spec, "input '" + name + "' is given twice");
    feeds[name] = read_tensor_file(spec.substr(eq + 1));
  }
  TensorMap out = run_graph(g, feeds, *backend);
  const std::string dir = a.str("output-dir");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_bad_input(dir, "cannot create the output folder: " + ec.message());
  // All outputs or none: a failure part-way removes the files this run wrote.
  std::vector<std::string> written;
  try {
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      std::string file = (std::filesystem::path(dir) / ("output_" + std::to_string(k) + ".pb")).string();
      write_tensor_file(out.at(g.outputs[k]), file, g.outputs[k]);
      written.push_back(file);
    }
  } catch (...) {
    for (const std::string& f : written) std::filesystem::remove(f, ec);
    throw;
  }
  for (size_t k = 0; k < g.outputs.size(); ++k)
    std::printf("%s: %s %s\n", written[k].c_str(), g.outputs[k].c_str(),
                dims_to_string(out.at(g.outputs[k]).dims()).c_str());
  return 0;
}

}  // namespace trainrt
