// trainrt: train ONNX models. `trainrt --help` lists the commands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "graph/error.h"
#include "launch/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const trainrt::Argv&);
  const char* summary;
};

const Command kCommands[] = {
    {"inspect", trainrt::cmd_inspect, "print a model's nodes, shapes, parameters and FLOPs"},
    {"run", trainrt::cmd_run, "run inference on TensorProto inputs, write TensorProto outputs"},
    {"model", trainrt::cmd_model, "write a built-in model (the Wide ResNet) as ONNX"},
    {"train", trainrt::cmd_train, "train a model on Fashion-MNIST / CIFAR and export it"},
    {"evaluate", trainrt::cmd_evaluate, "test loss and accuracy of a model on a dataset"},
    {"bench", trainrt::cmd_bench, "time the full training step of a model (images/s, ms/step, memory)"},
    {"plot", trainrt::cmd_plot, "draw loss and accuracy curves from a --metrics file"},
    {"selftest", trainrt::cmd_selftest, "check this machine's kernels (--device cpu|cuda) against the reference"},
    {"grad", trainrt::cmd_grad, "write one batch's loss and parameter gradients as TensorProto files"},
    {"ops", trainrt::cmd_ops, "list the supported ops: opsets, gradient, backends (docs/ops.md)"},
};

void usage(FILE* to) {
  std::fprintf(to, "usage: trainrt COMMAND [options]   (trainrt COMMAND --help for its options)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(to, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(to, "  %-10s %s\n", "--version", "print the version and the libraries compiled in");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr), 2;
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout), 0;
  try {
    if (cmd == "--version" || cmd == "version") {
      std::fputs(trainrt::version_report().c_str(), stdout);
      return 0;
    }
    for (const Command& c : kCommands)
      if (cmd == c.name) return c.run(trainrt::Argv(argv + 2, argv + argc));
    std::fprintf(stderr, "trainrt: error: unknown command '%s' (see trainrt --help)\n", cmd.c_str());
    return 2;
  } catch (const trainrt::Error& e) {
    std::fprintf(stderr, "trainrt: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "trainrt: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainrt: internal error: %s\n", e.what());
    return 1;
  }
}
