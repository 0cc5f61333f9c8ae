// `trainrt run MODEL.onnx --input NAME=file.pb ... --output-dir DIR`: inference on
// given inputs; each output is written as an ONNX TensorProto file (output_K.pb,
// the layout of ONNX's own test data).
#include <cstdio>
#include <filesystem>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/tensor_files.h"
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
  TensorMap feeds = read_feeds(a.all("input"));
  TensorMap out = run_graph(g, feeds, *backend);
  std::vector<TensorFile> files;
  for (size_t k = 0; k < g.outputs.size(); ++k)
    files.push_back({"output_" + std::to_string(k) + ".pb", &out.at(g.outputs[k]), g.outputs[k]});
  const std::vector<std::string> written = write_tensor_files(a.str("output-dir"), files);
  for (size_t k = 0; k < g.outputs.size(); ++k)
    std::printf("%s: %s %s\n", written[k].c_str(), g.outputs[k].c_str(),
                dims_to_string(out.at(g.outputs[k]).dims()).c_str());
  return 0;
}

}  // namespace trainrt
