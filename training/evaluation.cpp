#include "training/evaluation.h"

#include <algorithm>
#include <cmath>

#include "datasets/pipeline.h"
#include "graph/error.h"

namespace trainrt {

ModelIo model_io(const Graph& g, const Dataset& d, const std::string& where) {
  if (g.inputs.size() != 1)
    throw_bad_input(where, "expected one graph input (the images), the model has " + std::to_string(g.inputs.size()));
  if (g.outputs.empty()) throw_bad_input(where, "the model has no outputs");
  ModelIo io{g.inputs[0], g.outputs[0]};
  const ValueInfo& in = g.info(io.input);
  const std::vector<int64_t> sample = d.sample_dims();
  // The pipeline delivers int64 token ids as they are and everything else as float32.
  const DataType gives = !d.from_files() && d.images.dtype() == DataType::Int64 ? DataType::Int64 : DataType::Float32;
  bool ok = in.dtype == gives && in.shape && in.shape->size() == sample.size() + 1;
  for (size_t i = 1; ok && i <= sample.size(); ++i)
    ok = !(*in.shape)[i].known() || (*in.shape)[i].value == sample[i - 1];
  if (!ok) {
    // "model input 'x' is 1x28x28 per sample, dataset cifar10 gives 3x32x32"
    auto per_sample = [](auto&& dims, size_t from) {
      std::string s;
      for (size_t i = from; i < dims.size(); ++i) s += (i > from ? "x" : "") + dims[i];
      return s.empty() ? std::string("a scalar") : s;
    };
    std::vector<std::string> model, data;
    for (const Dim& dim : in.shape.value_or(Shape{})) model.push_back(dim.known() ? std::to_string(dim.value) : "?");
    for (int64_t v : sample) data.push_back(std::to_string(v));
    std::string what = "model input '" + io.input + "' is " +
                       (in.shape ? per_sample(model, 1) + " per sample" : std::string("of unknown shape"));
    if (in.dtype != gives) what += std::string(" of ") + dtype_name(in.dtype);
    what += ", dataset " + d.name + " gives " + per_sample(data, 0);
    if (in.dtype != gives) what += std::string(" of ") + dtype_name(gives);
    if (in.dtype != gives && gives == DataType::Int64)
      what += " (token ids: the model's input must be int64, e.g. an Embedding's indices)";
    else if (in.dtype != gives && in.dtype == DataType::Int64)
      what += " (the model takes token ids: save x as an integer array)";
    if (d.from_files()) what += " (--image-size " + std::to_string(d.image_size) + ")";
    throw_bad_input(where, what);
  }
  const ValueInfo& out = g.info(io.logits);
  if (!out.shape || out.shape->size() != 2 || ((*out.shape)[1].known() && (*out.shape)[1].value != d.classes))
    throw_bad_input(where, "output '" + io.logits + "' is " + shape_to_string(out.shape.value_or(Shape{})) + " but " +
                               d.name + " has " + std::to_string(d.classes) + " classes: expected [N," +
                               std::to_string(d.classes) + "]");
  return io;
}

Evaluation evaluate(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size, const Backend& b,
                    const std::function<bool()>& stop, EngineChooser* chooser) {
  BatchStream stream(d, eval_options(batch_size));
  Evaluation e;
  int64_t correct = 0, batches = 0;
  ExecutorOptions eo;
  eo.chooser = chooser;
  Executor ex(g, b, eo);  // planned once per batch shape, not per batch
  while (auto batch = stream.next()) {
    if (stop && stop()) {
      e.interrupted = true;
      return e;
    }
    const TensorMap& out = ex.run({{io.input, batch->images}});  // valid until the next run
    const Tensor& logits = out.at(io.logits);
    const int64_t n = logits.dims()[0], c = logits.dims()[1];
    const float* z = logits.data<float>();
    double loss = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = z + i * c;
      int64_t best = 0;
      double mx = row[0];
      for (int64_t k = 1; k < c; ++k)
        if (row[k] > mx) mx = row[best = k];
      double sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(row[k] - mx);
      const int64_t y = batch->labels.data<int64_t>()[i];
      loss += std::log(sum) + mx - row[y];  // -log softmax(z)_y
      correct += best == y;
    }
    e.loss += loss / static_cast<double>(n);
    e.images += n;
    ++batches;
  }
  e.batches = batches;
  e.correct = correct;
  if (batches) e.loss /= static_cast<double>(batches);
  e.accuracy = e.images ? static_cast<double>(correct) / static_cast<double>(e.images) : 0.0;
  return e;
}

size_t evaluation_bytes(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size, size_t staged_copies) {
  std::vector<int64_t> dims = d.sample_dims();
  dims.insert(dims.begin(), std::min(batch_size, std::max<int64_t>(d.size(), 1)));
  const Tensor batch(DataType::Float32, dims);
  PlanOptions o;
  o.keep = g.outputs;
  o.kept_outside = true;
  Plan p;
  try {
    p = build_plan(specialize(g, {{io.input, batch}}), o);
  } catch (const Error&) {  // a model validation cannot run at this batch: evaluate() will say why
    return 0;
  }
  size_t bytes = p.arena_bytes + p.output_bytes + batch.nbytes() * std::max<size_t>(1, staged_copies);
  for (const auto& [name, t] : g.initializers) bytes += t.nbytes();
  return bytes;
}

Evaluation evaluate_share(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size, const Backend& b,
                          int rank, int world, Communicator* comm, const std::function<bool()>& stop,
                          EngineChooser* chooser) {
  if (!comm || world <= 1) return evaluate(g, io, d, batch_size, b, stop, chooser);
  const int64_t batches = (d.size() + batch_size - 1) / batch_size;
  const int64_t first = rank * batches / world, last = (rank + 1) * batches / world;
  const int64_t begin = std::min(d.size(), first * batch_size), end = std::min(d.size(), last * batch_size);
  Evaluation mine;
  if (end > begin) mine = evaluate(g, io, take_range(d, begin, end - begin), batch_size, b, {}, chooser);
  std::vector<double> sums{mine.loss * static_cast<double>(mine.batches), static_cast<double>(mine.batches),
                           static_cast<double>(mine.correct), static_cast<double>(mine.images)};
  comm->sum(sums, "validation sums");
  Evaluation e;
  e.batches = static_cast<int64_t>(sums[1]);
  e.correct = static_cast<int64_t>(sums[2]);
  e.images = static_cast<int64_t>(sums[3]);
  e.loss = e.batches ? sums[0] / sums[1] : 0.0;
  e.accuracy = e.images ? sums[2] / sums[3] : 0.0;
  return e;
}

}  // namespace trainrt
