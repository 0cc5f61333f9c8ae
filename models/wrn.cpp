#include "models/wrn.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "graph/error.h"

namespace trainrt {

namespace {

// splitmix64 seeded by seed ^ hash(name): one stream per tensor, identical on every
// platform (std:: distributions are implementation-defined).
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0,1)
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class WrnBuilder {
 public:
  explicit WrnBuilder(const WrnOptions& o) : o_(o) {}

  Graph build() {
    g_.name = "wide_resnet";
    g_.opsets[""] = 17;
    g_.ir_version = 8;
    g_.doc_string = describe();
    g_.inputs.push_back("input");
    g_.values["input"] = ValueInfo{DataType::Float32, Shape{Dim::sym(o_.batch_symbol), Dim::of(o_.in_channels),
                                                            Dim::of(o_.image_size), Dim::of(o_.image_size)}};
    const std::vector<int64_t>& w = o_.widths;
    std::string x = cbr("input", "input_block", "input_block.cbr", o_.in_channels, w[0]);
    int64_t c = w[0];
    int block = 0;
    for (int stage = 1; stage <= 3; ++stage) {
      for (int64_t b = 0; b < o_.blocks_per_stage; ++b) {
        x = residual(x, "block" + std::to_string(++block), c, w[stage]);
        c = w[stage];
      }
      if (stage < 3) x = max_pool(x, "pool" + std::to_string(stage));
    }
    // The seed's AvgPool2d(7): stride 7, no padding (8x8 -> 1x1 reads the top-left 7x7).
    x = node("AveragePool", "pool", {x},
             {{"kernel_shape", Attribute::of_ints({7, 7})}, {"strides", Attribute::of_ints({7, 7})}});
    x = node("Flatten", "flat", {x}, {{"axis", Attribute::of_int(1)}});
    std::string fw = param("fc.weight", {o_.num_classes, c}, c), fb = param("fc.bias", {o_.num_classes}, c);
    node("Gemm", "fc", {x, fw, fb}, {{"transB", Attribute::of_int(1)}}, "logits");
    g_.outputs.push_back("logits");
    return std::move(g_);
  }

 private:
  // A node named `name` writing one value (`out`, or "<name>/out").
  std::string node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                   std::map<std::string, Attribute> attrs = {}, std::string out = "") {
    Node n;
    n.name = name;
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.outputs = {out.empty() ? name + "/out" : out};
    n.attrs = std::move(attrs);
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back().outputs[0];
  }

  std::string add_initializer(const std::string& name, Tensor t) {
    TRAINRT_ASSERT(!g_.is_initializer(name));
    g_.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
    g_.initializers.emplace(name, std::move(t));
    return name;
  }

  // PyTorch's Conv2d/Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
  std::string param(const std::string& name, std::vector<int64_t> dims, int64_t fan_in) {
    Tensor t(DataType::Float32, std::move(dims));
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    Rng rng{o_.seed ^ fnv1a(name)};
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((2.0 * rng.uniform01() - 1.0) * bound);
    return add_initializer(name, std::move(t));
  }

  std::string filled(const std::string& name, int64_t channels, float v) {
    Tensor t(DataType::Float32, {channels});
    for (int64_t i = 0; i < channels; ++i) t.data<float>()[i] = v;
    return add_initializer(name, std::move(t));
  }

  // Conv3x3(pads 1, no bias) + BatchNormalization + Relu; `prefix` is the module path
  // ("block1.layer1.cbr"), `name` the node path ("block1/layer1").
  std::string cbr(const std::string& x, const std::string& name, const std::string& prefix, int64_t cin, int64_t cout) {
    std::string w = param(prefix + ".0.weight", {cout, cin, 3, 3}, cin * 9);
    std::string y = node("Conv", name + "/conv", {x, w},
                         {{"kernel_shape", Attribute::of_ints({3, 3})},
                          {"pads", Attribute::of_ints({1, 1, 1, 1})},
                          {"strides", Attribute::of_ints({1, 1})}});
    const std::string bn = prefix + ".1";
    y = node("BatchNormalization", name + "/bn",
             {y, filled(bn + ".weight", cout, 1.f), filled(bn + ".bias", cout, 0.f),
              filled(bn + ".running_mean", cout, 0.f), filled(bn + ".running_var", cout, 1.f)},
             {{"epsilon", Attribute::of_float(1e-5f)}, {"momentum", Attribute::of_float(0.9f)}});
    return node("Relu", name + "/relu", {y});
  }

  std::string residual(const std::string& x, const std::string& block, int64_t cin, int64_t cout) {
    std::string y = cbr(x, block + "/layer1", block + ".layer1.cbr", cin, cout);
    Tensor ratio(DataType::Float32, {});
    ratio.data<float>()[0] = o_.dropout_ratio;
    y = node("Dropout", block + "/dropout", {y, add_initializer(block + ".dropout.ratio", ratio)});
    y = cbr(y, block + "/layer2", block + ".layer2.cbr", cout, cout);
    std::string skip = x;
    if (cin != cout) {
      std::string w = param(block + ".scale.weight", {cout, cin, 1, 1}, cin);
      std::string b = param(block + ".scale.bias", {cout}, cin);
      skip = node("Conv", block + "/scale", {x, w, b},
                  {{"kernel_shape", Attribute::of_ints({1, 1})},
                   {"pads", Attribute::of_ints({0, 0, 0, 0})},
                   {"strides", Attribute::of_ints({1, 1})}});
    }
    return node("Add", block + "/add", {y, skip});  // PyTorch: out + residual
  }

  std::string max_pool(const std::string& x, const std::string& name) {
    return node("MaxPool", name, {x},
                {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})}});
  }

  std::string describe() const {
    std::string w;
    for (int64_t v : o_.widths) w += (w.empty() ? "" : ",") + std::to_string(v);
    return "Wide ResNet (seed model.py): input [" + o_.batch_symbol + "," + std::to_string(o_.in_channels) + "," +
           std::to_string(o_.image_size) + "," + std::to_string(o_.image_size) + "], widths " + w + ", " +
           std::to_string(o_.blocks_per_stage) + " blocks per stage, " + std::to_string(o_.num_classes) +
           " classes, seed " + std::to_string(o_.seed);
  }

  const WrnOptions& o_;
  Graph g_;
};

}  // namespace

const std::vector<std::string>& wrn_datasets() {
  static const std::vector<std::string> names{"cifar100", "cifar10", "fashion-mnist"};
  return names;
}

WrnOptions wrn_options_for_dataset(const std::string& dataset) {
  WrnOptions o;
  if (dataset == "cifar100") return o;
  if (dataset == "cifar10") return o.num_classes = 10, o;
  if (dataset == "fashion-mnist") return o.in_channels = 1, o.image_size = 28, o.num_classes = 10, o;
  throw_bad_input("--dataset", "unknown dataset '" + dataset + "' (choose cifar100, cifar10 or fashion-mnist)");
}

void check_wrn_options(const WrnOptions& o) {
  if (o.widths.size() != 4)
    throw_bad_input("--widths",
                    "expected 4 widths (input block, stage 1, 2, 3), got " + std::to_string(o.widths.size()));
  for (int64_t w : o.widths)
    if (w <= 0) throw_bad_input("--widths", "widths must be positive, got " + std::to_string(w));
  if (o.blocks_per_stage < 1)
    throw_bad_input("--blocks-per-stage", "must be >= 1, got " + std::to_string(o.blocks_per_stage));
  if (o.in_channels <= 0 || o.num_classes <= 0 || o.image_size <= 0)
    throw_bad_input("wide resnet", "input channels, image size and classes must be positive");
  if (!(o.dropout_ratio >= 0.f && o.dropout_ratio < 1.f))
    throw_bad_input("wide resnet", "dropout ratio must be in [0, 1), got " + std::to_string(o.dropout_ratio));
  if (o.batch_symbol.empty()) throw_bad_input("wide resnet", "batch symbol is empty");
  // Floats in initializers (doubles: no overflow on absurd widths). A protobuf message,
  // hence an .onnx file without external data, is limited to 2 GiB.
  const std::vector<int64_t>& w = o.widths;
  double floats = 9.0 * o.in_channels * w[0] + 4.0 * w[0] + (w[3] + 1.0) * o.num_classes;
  for (int s = 1; s <= 3; ++s) {
    const double cin = static_cast<double>(w[s - 1]), c = static_cast<double>(w[s]);
    floats += (9 * cin * c + (cin != c ? cin * c + c : 0)) + (o.blocks_per_stage - 1) * 9 * c * c +
              o.blocks_per_stage * (9 * c * c + 8 * c);
  }
  if (floats * 4 > 2e9) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", floats);
    throw_bad_input("wide resnet", std::string("--widths/--blocks-per-stage give ") + n +
                                       " parameters, over the 2 GB limit of an ONNX file");
  }
}

Graph build_wide_resnet(const WrnOptions& o) {
  check_wrn_options(o);
  return WrnBuilder(o).build();
}

int64_t trainable_parameter_count(const Graph& g) {
  std::set<std::string> state;  // initializers that are statistics or constants, not weights
  std::set<std::string> weights;
  for (const Node& n : g.nodes) {
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      bool stat = (n.op_type == "BatchNormalization" && (k == 3 || k == 4)) || (n.op_type == "Dropout" && k >= 1);
      (stat ? state : weights).insert(n.inputs[k]);
    }
  }
  int64_t count = 0;
  for (const auto& [name, t] : g.initializers)
    if (dtype_is_float(t.dtype()) && !(state.count(name) && !weights.count(name))) count += t.numel();
  return count;
}

}  // namespace trainrt
