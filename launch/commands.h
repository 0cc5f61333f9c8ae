// The `trainrt` subcommands. Each takes the arguments after its name and
// returns the process exit code; errors are thrown as trainrt::Error and
// printed as one line by main (exit 2 bad input, 1 internal).
#pragma once

#include <string>
#include <vector>

namespace trainrt {

using Argv = std::vector<std::string>;

int cmd_inspect(const Argv& args);
int cmd_run(const Argv& args);
int cmd_model(const Argv& args);
int cmd_train(const Argv& args);
int cmd_evaluate(const Argv& args);
int cmd_bench(const Argv& args);
int cmd_plot(const Argv& args);
int cmd_selftest(const Argv& args);
int cmd_ops(const Argv& args);
int cmd_grad(const Argv& args);

// `trainrt --version`: version and every library compiled in.
std::string version_report();

}  // namespace trainrt
