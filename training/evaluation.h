// Validation of a classifier on a dataset: the model's image input and logits, the
// mean cross-entropy and accuracy over a test set (one process, or each rank its share
// and the sums over the ranks), and what validation takes from the backend's memory.
//
//   ModelIo io = model_io(graph, dataset, "m.onnx");           // input/output names, checked against the data
//   Evaluation e = evaluate(graph, io, test, 128, *backend);   // mean loss per batch, accuracy
//
// Used by the training run (training/trainer.h) after each epoch and by `trainrt evaluate`.
#pragma once

#include <functional>
#include <string>

#include "datasets/dataset.h"
#include "distribution/communicator.h"
#include "ops/core/engine_choice.h"
#include "runtime/backend.h"
#include "runtime/executor.h"

namespace trainrt {

struct ModelIo {
  std::string input;   // the image input [N,C,H,W]
  std::string logits;  // [N,classes]
};
// The model must take one float input shaped like the dataset's images and give
// [N,classes] logits with the dataset's class count; BadInput naming both otherwise.
ModelIo model_io(const Graph& g, const Dataset& d, const std::string& where);

struct Evaluation {
  double loss = 0;      // mean over batches of the batch-mean cross-entropy (the seed's v_loss)
  double accuracy = 0;  // correct / total
  int64_t images = 0;
  int64_t batches = 0, correct = 0;  // for sums over the ranks of a data-parallel run
  bool interrupted = false;          // `stop` returned true before the last batch
};
// `stop` (optional) is asked before each batch; when it returns true the evaluation
// ends early with interrupted set (a stop signal during a long validation). `chooser`
// (optional, ExecutorOptions::chooser): the kernels' engine timings, e.g. the training
// run's timing cache, so validation's convolutions run the engines timed for them.
Evaluation evaluate(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size, const Backend& b,
                    const std::function<bool()>& stop = {}, EngineChooser* chooser = nullptr);

// Bytes of the backend's memory that evaluate() of `g` (the unfused forward graph: an
// upper bound for its fused inference form) takes beside training: its plan's arena and
// outputs at `batch_size` images of `d`, the staged batch (`staged_copies` of it: the
// backend's, runtime/executor.h), and the
// model's initializers (validation runs on a copy of the trained weights). Counted in the
// memory check before the first training step (TrainingSession::set_memory_reserve).
size_t evaluation_bytes(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size,
                        size_t staged_copies = 1);

// Data-parallel validation: rank `rank` of `world` evaluates its contiguous share of the
// test batches (the batches one process would make, split into `world` runs), and the
// sums over the ranks (through `comm`) give every rank the whole test set's figures.
// Without a communicator it is evaluate(). `stop` is asked only with one rank: ranks
// must not leave a validation at different batches.
Evaluation evaluate_share(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size, const Backend& b,
                          int rank, int world, Communicator* comm, const std::function<bool()>& stop = {},
                          EngineChooser* chooser = nullptr);

}  // namespace trainrt
