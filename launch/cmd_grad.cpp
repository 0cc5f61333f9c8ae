// `trainrt grad MODEL.onnx --input NAME=FILE.pb --labels FILE.pb --output-dir DIR`: the
// loss and every trainable parameter's gradient of one batch in training mode, written
// as ONNX TensorProto files, so that another framework's gradients can be compared
// with trainrt's (tests/cli/torchvision_models.py does so with PyTorch's).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/tensor_files.h"
#include "launch/train_util.h"
#include "runtime/executor.h"

namespace trainrt {

namespace {
const CommandSpec kSpec{
    "grad",
    "trainrt grad MODEL.onnx --input NAME=FILE.pb [--input ...] [--labels FILE.pb] --output-dir DIR [options]",
    "Build the training graph (the loss trainrt train appends: mean SoftmaxCrossEntropyLoss on\n"
    "logits, or the model's own scalar output), run one batch of it in training mode and write\n"
    "DIR/loss.pb and DIR/grad_K.pb, the gradient of the K-th trainable parameter in name order\n"
    "(each TensorProto is named after its parameter). Nothing is updated.",
    {{"input", "", "NAME=FILE.pb, one per graph input", Flag::Repeat},
     {"labels", "", "int64 class indices [N] (TensorProto), for a model that ends in logits"},
     {"output-dir", "", "folder for loss.pb and grad_K.pb (created if missing)"},
     {"backend", "reference", "reference or cpu"},
     {"threads", "0", "threads for the cpu backend (0 = all cores)"},
     {"seed", "0", "seed of Dropout masks"}},
    1,
    1};
}  // namespace

int cmd_grad(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  if (!a.on("output-dir")) throw_bad_input("trainrt grad", "--output-dir is required");
  const int threads = static_cast<int>(a.at_least("threads", 0));
  configure_threads(threads);
  auto backend = make_backend(a.str("backend"), threads);
  const Graph g = import_onnx_file(a.positional[0], registry().schemas);
  TrainingOptions o;
  o.optimizer = "none";
  const TrainingGraph t = build_training_graph(g, o);

  TensorMap feeds = read_feeds(a.all("input"));
  if (!t.labels.empty()) {
    if (!a.on("labels"))
      throw_bad_input("trainrt grad", "the model ends in logits: --labels FILE.pb (int64 class indices) is required");
    feeds[t.labels] = read_tensor_file(a.str("labels"));
  } else if (a.on("labels")) {
    throw_bad_input("--labels", "the model computes its own loss ('" + t.loss + "'): it takes no labels");
  }

  RunOptions ro;
  ro.training = true;
  ro.seed = static_cast<uint64_t>(a.at_least("seed", 0));
  const TensorMap out = run_graph(t.graph, feeds, *backend, ro);

  std::vector<std::string> params = t.params;
  std::sort(params.begin(), params.end());
  std::vector<TensorFile> files{{"loss.pb", &out.at(t.loss), "loss"}};
  for (size_t k = 0; k < params.size(); ++k)
    files.push_back({"grad_" + std::to_string(k) + ".pb", &out.at(t.gradients.at(params[k])), params[k]});
  const std::string dir = a.str("output-dir");
  write_tensor_files(dir, files);
  std::printf("loss %.9g, %zu gradients written to %s\n", out.at(t.loss).get_as_double(0), params.size(), dir.c_str());
  return 0;
}

}  // namespace trainrt
