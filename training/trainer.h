// A training run from C++, without the command line: what `trainrt train` runs after
// it has read its flags (launch/cmd_train.cpp is that and nothing more).
//
//   TrainConfig c;                              // training/train_config.h
//   c.model_path = "wrn.onnx";
//   c.data.dataset = "fashion-mnist";
//   c.epochs = 2;
//   c.checkpoint_dir = "ckpt";
//   train(c);                                   // epochs, validation, checkpoints, export
//
// or step by step, on data and a model already in memory:
//
//   Trainer t(c, std::move(model), std::move(train_set), std::move(test_set));
//   t.restore(read_checkpoint("ckpt/checkpoint-0000000312.ckpt"));   // optional
//   t.run();                                    // until c.epochs, c.max_steps or early stopping
//   Evaluation e = t.evaluate();                // the test set on the trained weights
//   std::string path = t.save_checkpoint("ckpt");
//   Tensor w = t.session().state("conv1.weight");
//
// The run, in the order it happens:
//   Trainer::Trainer()  ranks (distribution/communicator.h), data, model, the training
//                       session (runtime/training_session.h), DataParallel with ranks
//   Trainer::restore()  a checkpoint's tensors and position
//   Trainer::run()      epochs: steps, validation, checkpoints (training/checkpoint.h);
//                       then the summary and the exports
// It prints what `trainrt train` prints (the seed's per-epoch line) on stdout; with
// several ranks only rank 0 prints, writes metrics, checkpoints and exports. Errors are
// trainrt::Error (graph/error.h): BadInput for a bad model, data, checkpoint or
// value of the config, NumericalError/BadInput for a step whose loss is not finite.
// The same config, data and seed give the same weights bit for bit, and a run resumed
// from a checkpoint continues exactly as the uninterrupted one.
#pragma once

#include <memory>
#include <string>

#include "datasets/dataset.h"
#include "graph/ir.h"
#include "runtime/training_session.h"
#include "training/checkpoint.h"
#include "training/evaluation.h"
#include "training/train_config.h"

namespace trainrt {

class Trainer {
 public:
  // Reads the model from c.model_path and the data from c.data.
  explicit Trainer(const TrainConfig& c);
  // Trains `model` (a forward graph with one image input and [N,classes] logits) on
  // `train_set`, validating on `test_set`; c.model_path and c.data only name them.
  Trainer(const TrainConfig& c, Graph model, Dataset train_set, Dataset test_set);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Continues from a checkpoint of a run with the same model and settings: every state
  // tensor must be the session's (BadInput naming c.resume and the tensor otherwise).
  void restore(const Checkpoint& ck);
  // Trains until c.epochs, c.max_steps, early stopping or a stop signal (then with a
  // checkpoint); returns the process exit code `trainrt train` gives (0).
  int run();
  // Validation of the current weights on the test set (every rank's share summed).
  Evaluation evaluate();
  // Writes a checkpoint of the current state into `dir` (rank 0); returns its path.
  std::string save_checkpoint(const std::string& dir);

  // Where the run is: epoch, steps, the last rate, the validation accuracies.
  const TrainerState& state() const;
  // The training session: its states (parameters, optimizer state), trained_forward().
  TrainingSession& session();
  const Graph& model() const;  // the forward graph as imported

 private:
  class Run;
  std::unique_ptr<Run> run_;
};

// The checkpoint c.resume, refused (BadInput naming "--resume PATH") when the settings
// it was written with (its resume_key) or its seed differ from c's.
Checkpoint read_resume_checkpoint(const TrainConfig& c);

// The whole run: c.resume read and checked first (before the data and model are
// loaded), then Trainer(c), restore, run(). Returns run()'s exit code.
int train(const TrainConfig& c);

}  // namespace trainrt
