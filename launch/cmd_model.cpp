// `trainrt model wrn --dataset cifar100 -o wrn.onnx`: writes the built-in Wide ResNet.
#include <cstdio>
#include <sstream>

#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/train_util.h"
#include "models/wrn.h"
#include "ops/core/register_all.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "model",
    "trainrt model wrn --dataset cifar100|cifar10|fashion-mnist [options] -o OUT.onnx",
    "Write the seed's Wide ResNet (model.py) as an ONNX file (opset 17) with freshly\n"
    "initialised weights, input 'input' [N,C,H,W] and output 'logits' [N,classes].\n"
    "Initializer names are PyTorch's state_dict names.",
    {{"dataset", "", "cifar100 ([N,3,32,32], 100 classes), cifar10 or fashion-mnist ([N,1,28,28], 10)"},
     {"widths", "16,160,320,640", "channels of the input block and of stages 1, 2, 3"},
     {"blocks-per-stage", "2", "residual blocks per stage"},
     {"seed", "0", "seed of the weight initialisation"},
     {"output", "", "the .onnx file to write (also -o)"}},
    1,
    1};

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

}  // namespace

int cmd_model(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  if (a.positional[0] != "wrn")
    throw_bad_input("trainrt model", "unknown model '" + a.positional[0] + "' (built-in models: wrn)");
  if (!a.on("dataset")) throw_bad_input("trainrt model", "--dataset is required (cifar100, cifar10 or fashion-mnist)");
  if (!a.on("output") || a.str("output").empty()) throw_bad_input("trainrt model", "-o OUT.onnx is required");

  const std::string dataset = a.str("dataset");
  WrnOptions o = wrn_options_for_dataset(dataset);
  o.widths = parse_widths(a.str("widths"));
  o.blocks_per_stage = a.integer("blocks-per-stage");
  if (o.blocks_per_stage < 1 || o.blocks_per_stage > 1000)
    throw_bad_input("--blocks-per-stage", "expected 1..1000, got " + a.str("blocks-per-stage"));
  o.seed = static_cast<uint64_t>(a.at_least("seed", 0));

  Graph g = build_wide_resnet(o);
  g.producer_name = "trainrt";
  g.producer_version = TRAINRT_VERSION;
  const std::string where = "wrn (" + dataset + ")";
  validate_graph(g, registry().schemas, where);
  infer_shapes(g, registry().schemas, where);

  const std::string out = a.str("output");
  export_onnx_file(g, out);
  std::printf("wrote %s: Wide ResNet for %s, input %s -> logits %s, %s trainable parameters (%s with BN statistics)\n",
              out.c_str(), dataset.c_str(), shape_to_string(*g.info("input").shape).c_str(),
              shape_to_string(*g.info("logits").shape).c_str(), with_commas(trainable_parameter_count(g)).c_str(),
              with_commas(g.parameter_count()).c_str());
  return 0;
}

}  // namespace trainrt
