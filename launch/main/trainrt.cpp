// trainrt: train ONNX models. `trainrt --help` lists the commands.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

// oneDNN's primitives (OpenMP threads) and trainrt's own loops (oneTBB threads) share the
// cores. With libgomp's default wait policy the OpenMP threads spin after each parallel
// region, holding the cores the next oneTBB loop needs: the Wide ResNet's step on 2 cores
// ran 15 % slower (docs/status.md, "Speed"). libgomp reads OMP_WAIT_POLICY once, when it is
// loaded, so where the user has not set it trainrt starts itself again with PASSIVE (same
// process, same arguments; an exec that fails leaves it running as it is). Not when an
// explicit dynamic loader runs it (the GPU bundle's run.sh), whose own arguments an exec
// of /proc/self/exe would lose.
void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  const char* base = std::strrchr(self, '/');
  if (std::strncmp(base ? base + 1 : self, "ld-", 3) == 0) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv(self, argv);
}

}  // namespace

int main(int argc, char** argv) {
  prefer_passive_openmp(argv);
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
