// `trainrt train MODEL.onnx --dataset fashion-mnist ...`: the seed's training job.
// What it does for a user is in `trainrt train --help` (launch/train_config.cpp).
//
// The command is its flags: train_config() checks them all and builds the run's
// TrainConfig (launch/train_config.h) before any work starts; the run itself (ranks,
// data, model, epochs, validation, checkpoints, exports) is the training library's
// (training/trainer.h), which a C++ program calls the same way.
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/train_config.h"
#include "runtime/rank_environment.h"
#include "training/trainer.h"

namespace trainrt {

int cmd_train(const Argv& argv) {
  Args a = parse_args(train_spec(), argv);
  if (a.help) return print_help(train_spec()), 0;
  return train(train_config(a, rank_environment()));
}

}  // namespace trainrt
