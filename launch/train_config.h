// `trainrt train`'s flags as one validated value (training/train_config.h's TrainConfig),
// built before any work starts.
//
//   Args a = parse_args(train_spec(), argv);
//   TrainConfig c = train_config(a, rank_environment());   // BadInput naming the flag
//   c.resume_key;   // what a checkpoint must agree with to be resumed
//
// Why: every mistake in the flags is reported before the data, the model or the other
// ranks are waited for; the training run (training/trainer.h) reads only the config.
#pragma once

#include "launch/cli.h"
#include "launch/train_util.h"
#include "runtime/rank_environment.h"
#include "training/train_config.h"

namespace trainrt {

const CommandSpec& train_spec();
TrainConfig train_config(const Args& a, const RankEnvironment& env);

}  // namespace trainrt
