#include "launch/train_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "graph/error.h"
#include "ops/core/engine_record.h"
#include "ops/cuda/graph_fallback.h"
#include "runtime/timing_cache.h"

namespace trainrt {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
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

DataSource data_flags(const Args& a) {
  DataSource f;
  f.dataset = a.one_of("dataset", {"fashion-mnist", "mnist", "cifar10", "cifar100", "imagefolder", "npz"});
  f.data_dir = a.str("data-dir");
  f.image_size = a.at_least("image-size", 0);
  if (a.on("image-size") && f.dataset != "imagefolder")
    throw_bad_input("--image-size", "applies to --dataset imagefolder");
  f.mean = number_list(a, "mean", false);
  f.std = number_list(a, "std", true);
  return f;
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

void print_fusion_tally() {
  for (const auto& [op, n] : fusion_tally().counts())
    if (op.rfind("FusedGemm", 0) == 0)
      std::printf("fused nodes: %s %zu of %zu in cuBLASLt's epilogue%s\n", op.c_str(), n.fused, n.fused + n.unfused,
                  n.unfused ? " (the others: a kernel after the product)" : "");
    else
      std::printf("fused nodes: %s %zu of %zu ran as one cuDNN graph%s\n", op.c_str(), n.fused, n.fused + n.unfused,
                  !n.unfused ? ""
                  : op.rfind("BatchNormalization", 0) == 0
                      ? " (the others: trainrt's own batch-norm kernels)"
                      : " (the others: cuDNN's legacy convolution API, notices above)");
}

void print_fallbacks() {
  const std::vector<FallbackRecord> fallbacks = fallback_log().records();
  if (fallbacks.empty()) std::printf("fallbacks: none\n");
  for (const FallbackRecord& r : fallbacks) std::printf("%s\n", fallback_line(r).c_str());
}

void print_engines() {
  const std::vector<EngineRecord> engines = engine_log().records();
  for (const EngineRecord& r : engines) std::printf("%s\n", engine_line(r).c_str());
  std::printf("%s\n", conv_tflops_line(engines).c_str());
}

}  // namespace trainrt
