#include "launch/train_util.h"

#include <omp.h>
#include <oneapi/tbb/global_control.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <sstream>
#include <thread>

#include "datasets/pipeline.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "runtime/executor.h"
#include "runtime/timing_cache.h"

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

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The side of an image folder's crops when --image-size is not given: the model's
// input H (= W) when both are fixed, else torchvision's 224.
int64_t model_image_size(const Graph& g) {
  if (g.inputs.size() != 1) return 224;
  const ValueInfo& in = g.info(g.inputs[0]);
  if (in.shape && in.shape->size() == 4 && (*in.shape)[2].known() && (*in.shape)[2].value == (*in.shape)[3].value)
    return (*in.shape)[2].value;
  return 224;
}

std::vector<Flag> with_data_flags(const std::string& split, std::vector<Flag> rest) {
  std::vector<Flag> flags{
      {"dataset", "fashion-mnist",
       "fashion-mnist, mnist, cifar10, cifar100, imagefolder (D/" + split + "/<class>/) or npz"},
      {"data-dir", "", "dataset folder, or the .npz file (default: Debian's /usr/share/datasets/fashion-mnist)"},
      {"image-size", "0", "imagefolder: side of the crops (0 = the model's input H/W when fixed, else 224)"},
      {"mean", "", "per-channel mean of x/255 (uint8) or x (float), comma list (imagefolder: 0.485,0.456,0.406)"},
      {"std", "", "per-channel std, comma list (imagefolder: 0.229,0.224,0.225)"}};
  flags.insert(flags.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  return flags;
}

DataFlags data_flags(const Args& a) {
  DataFlags f;
  f.dataset = a.one_of("dataset", {"fashion-mnist", "mnist", "cifar10", "cifar100", "imagefolder", "npz"});
  f.data_dir = a.str("data-dir");
  f.image_size = a.at_least("image-size", 0);
  if (a.on("image-size") && f.dataset != "imagefolder")
    throw_bad_input("--image-size", "applies to --dataset imagefolder");
  f.mean = number_list(a, "mean", false);
  f.std = number_list(a, "std", true);
  return f;
}

Dataset load_split(const DataFlags& f, const Graph& g, bool train, int64_t limit) {
  DatasetOptions o;
  o.name = f.dataset;
  o.data_dir = f.data_dir;
  o.train = train;
  o.limit = limit;
  o.image_size = f.image_size > 0 ? f.image_size : model_image_size(g);
  Dataset d = load_dataset(o);
  if (!f.mean.empty()) d.mean = f.mean;
  if (!f.std.empty()) d.std = f.std;
  return d;
}

// A comma list of numbers, each finite (and > 0 for --std).
std::vector<float> number_list(const Args& a, const std::string& flag, bool positive) {
  std::vector<float> out;
  for (const std::string& item : split_commas(a.str(flag))) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != 0 || !std::isfinite(v) || (positive && !(v > 0)))
      throw_bad_input("--" + flag, "expected " + std::string(positive ? "positive " : "") +
                                       "numbers separated by commas, got '" + a.str(flag) + "'");
    out.push_back(static_cast<float>(v));
  }
  if (a.on(flag) && out.empty()) throw_bad_input("--" + flag, "expected numbers separated by commas");
  return out;
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

int default_rank_threads(int local_ranks) {
  if (const char* c = std::getenv("SLURM_CPUS_PER_TASK")) {
    const long n = std::strtol(c, nullptr, 10);
    if (n > 0) return static_cast<int>(n);
  }
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int mine = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : all;
  if (mine < all) return mine;  // the launcher bound this rank to its own CPUs
  if (local_ranks <= 1) return 0;
  return std::max(1, all / local_ranks);
}

double LrSchedule::at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  const double progress =
      static_cast<double>(epoch) + static_cast<double>(step) / std::max<int64_t>(1, steps_per_epoch);
  double lr = base_lr;
  if (kind == "step") lr = base_lr * std::pow(0.1, static_cast<double>(epoch / std::max<int64_t>(1, step_epochs)));
  if (kind == "cosine")
    lr = 0.5 * base_lr * (1.0 + std::cos(std::numbers::pi * progress / static_cast<double>(epochs)));
  if (warmup_epochs > 0 && progress < warmup_epochs)
    lr *= (progress + 1.0 / std::max<int64_t>(1, steps_per_epoch)) / warmup_epochs;
  return lr;
}

void configure_threads(int threads) {
  if (threads <= 0) return;
  // oneDNN here is built on OpenMP; kernels run on this (the main) thread, whose
  // parallel regions take their size from this setting.
  omp_set_num_threads(threads);
  static std::unique_ptr<tbb::global_control> tbb_limit;
  tbb_limit =
      std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
}

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }
}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in flight continue; the flag is polled
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGUSR1, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) throw_bad_input("--metrics " + path, std::string("cannot open for writing: ") + std::strerror(errno));
}

namespace {
// Whether a line MetricsWriter wrote comes after the checkpoint a run resumes from.
// A line that is not one of its objects is kept.
bool after_resume_point(const std::string& line, int64_t resume_step, int64_t resume_epochs) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const std::string kind = j.value("kind", "");
  if (kind == "step") return j.value("step", int64_t{-1}) > resume_step;
  if (kind == "epoch") return j.value("epoch", int64_t{-1}) > resume_epochs;
  return false;
}

void write_line(FILE* f, const nlohmann::ordered_json& j) {
  std::fputs((j.dump() + "\n").c_str(), f);
  std::fflush(f);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step, int64_t resume_epochs) {
  if (path.empty()) return;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::stringstream in(read_file_bytes(path, uint64_t{1} << 30));
    std::string kept;
    for (std::string line; std::getline(in, line);)
      if (!after_resume_point(line, resume_step, resume_epochs)) kept += line + "\n";
    write_file_atomic(path, kept);
  }
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw_bad_input("--metrics " + path, std::string("cannot open for writing: ") + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::step(int64_t step, int64_t epoch, double loss, double lr) {
  if (!f_) return;
  write_line(f_, {{"kind", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}});
}

void MetricsWriter::epoch(int64_t epoch, double epoch_time, double train_loss, double val_loss, double val_accuracy,
                          double images_per_sec, double cumulative_time, double lr) {
  if (!f_) return;
  write_line(f_, {{"kind", "epoch"},
                  {"epoch", epoch},
                  {"epoch_time", epoch_time},
                  {"train_loss", train_loss},
                  {"val_loss", val_loss},
                  {"val_accuracy", val_accuracy},
                  {"images_per_sec", images_per_sec},
                  {"cumulative_time", cumulative_time},
                  {"lr", lr}});
}

std::vector<int64_t> parse_widths(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v <= 0)
      throw_bad_input("--widths", "expected 4 positive integers like 16,160,320,640, got '" + text + "'");
    out.push_back(v);
  }
  if (out.size() != 4 || text.back() == ',')
    throw_bad_input("--widths", "expected 4 positive integers like 16,160,320,640, got '" + text + "'");
  return out;
}

std::string backend_for_device(const Args& a) {
  const std::string device = a.str("device"), backend = a.str("backend");
  if (device != "cpu" && device != "cuda") throw_bad_input("--device " + device, "expected cpu or cuda");
  if (device == "cpu") {
    if (backend != "cpu" && backend != "reference")
      throw_bad_input("--backend " + backend, "expected cpu or reference");
    return backend;
  }
  if (a.on("backend")) throw_bad_input("--backend " + backend, "contradicts --device cuda");
  return "cuda";
}

Fp32Math fp32_math_for_device(const Args& a, Fp32Math cuda_default) {
  if (a.str("device") != "cuda") {
    if (a.on("fp32-math")) throw_bad_input("--fp32-math", "applies to --device cuda");
    return Fp32Math::strict;
  }
  if (!a.on("fp32-math")) return cuda_default;
  return a.one_of("fp32-math", {"tf32", "strict"}) == "tf32" ? Fp32Math::tf32 : Fp32Math::strict;
}

bool channels_last_for_device(const Args& a) {
  if (a.str("device") != "cuda") {
    if (a.on("layout")) throw_bad_input("--layout", "applies to --device cuda");
    return true;
  }
  return a.one_of("layout", {"nhwc", "nchw"}) == "nhwc";
}

std::string timing_cache_for_device(const Args& a, const std::string& model_path) {
  if (a.on("timing-cache") && a.str("timing-cache") == "off") return "";  // every device: no file
  if (a.str("device") != "cuda") {
    if (a.on("timing-cache")) throw_bad_input("--timing-cache", "applies to --device cuda");
    return "";
  }
  const std::string path = a.on("timing-cache") ? a.str("timing-cache") : default_timing_cache_path(model_path);
  TimingCache::load(path, "", "");  // refuses a corrupt file now, not after the first epoch
  return path;
}

bool deterministic_for_device(const Args& a, bool fallback) {
  if (!a.on("deterministic")) return fallback;
  return a.on_off("deterministic");
}

size_t autotune_for_device(const Args& a) { return static_cast<size_t>(a.at_least("autotune", 0)); }

std::vector<Flag> with_engine_choice_flags(std::vector<Flag> before, const std::vector<Flag>& after) {
  const std::vector<Flag> engine{
      {"timing-cache", "",
       "with --device cuda: engine timings per shape and GPU (default: MODEL.timing-cache.json); off: no file "
       "(any device)"},
      {"autotune", "4",
       "with --device cuda: engine candidates timed per problem, the heuristics' first N (0: none timed, the "
       "heuristics' first engine)"},
      {"deterministic", "off",
       "on: deterministic library engines only (cuda; the cpu kernels are deterministic either way); off: also "
       "non-deterministic ones (split-K weight gradients), as PyTorch with cudnn.benchmark"}};
  before.insert(before.end(), engine.begin(), engine.end());
  before.insert(before.end(), after.begin(), after.end());
  return before;
}

std::unique_ptr<EngineChooser> make_engine_chooser(const std::string& backend, const std::string& cache_path,
                                                   size_t autotune) {
  if (backend != "cuda" || autotune == 0) return nullptr;
  TimingPolicy policy;
  policy.max_candidates = autotune;
  if (cache_path.empty()) return std::make_unique<MemoryEngineChooser>(policy);
  return std::make_unique<TimingCacheChooser>(TimingCache::load(cache_path, "", ""), policy);
}

void save_engine_choices(EngineChooser* chooser, const std::string& cache_path) {
  auto* file = dynamic_cast<TimingCacheChooser*>(chooser);
  if (!file) return;
  if (const size_t n = file->save_if_new())
    std::fprintf(stderr, "%s\n", timing_cache_saved_line(n, cache_path).c_str());
}

BatchIo batch_io(const Graph& forward, int64_t batch, const std::string& path, const std::string& command) {
  if (forward.inputs.size() != 1)
    throw_bad_input(
        path, command + " needs one graph input (the images), the model has " + std::to_string(forward.inputs.size()));
  if (forward.outputs.empty()) throw_bad_input(path, "the model has no outputs");
  BatchIo io{forward.inputs[0], forward.outputs[0], {batch}, 0};
  const ValueInfo& in = forward.info(io.input);
  if (in.dtype != DataType::Float32 || !in.shape || in.shape->size() < 2)
    throw_bad_input(path, "input '" + io.input + "' is " + dtype_name(in.dtype) +
                              shape_to_string(in.shape.value_or(Shape{})) + "; " + command +
                              " needs float32 [N,C,...]");
  if ((*in.shape)[0].known() && (*in.shape)[0].value != batch)
    throw_bad_input(path, "input '" + io.input + "' has a fixed batch of " + std::to_string((*in.shape)[0].value) +
                              ", so --batch must be " + std::to_string((*in.shape)[0].value));
  for (size_t i = 1; i < in.shape->size(); ++i) {
    if (!(*in.shape)[i].known())
      throw_bad_input(path, "input '" + io.input + "' has symbolic dimension " + std::to_string(i) +
                                " (only the batch dimension may be symbolic): " + shape_to_string(*in.shape));
    io.dims.push_back((*in.shape)[i].value);
  }
  const ValueInfo& out = forward.info(io.logits);
  if (!out.shape || out.shape->size() != 2 || !(*out.shape)[1].known() || (*out.shape)[1].value < 1)
    throw_bad_input(path, "output '" + io.logits + "' is " + shape_to_string(out.shape.value_or(Shape{})) + "; " +
                              command + " needs logits [N,classes] with a known class count");
  io.classes = (*out.shape)[1].value;
  return io;
}

TensorMap random_batch(const BatchIo& io, const std::string& labels_name, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor images(DataType::Float32, io.dims), labels(DataType::Int64, {io.dims[0]});
  std::normal_distribution<float> pixel(0.f, 1.f);
  std::uniform_int_distribution<int64_t> label(0, io.classes - 1);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<float>()[i] = pixel(rng);
  for (int64_t i = 0; i < io.dims[0]; ++i) labels.data<int64_t>()[i] = label(rng);
  return {{io.input, images}, {labels_name, labels}};
}

}  // namespace trainrt
