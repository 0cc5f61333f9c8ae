// `trainrt ops [--markdown]`: every op the registry knows, one row each (sorted by
// domain, then op): the opsets import accepts, whether autodiff differentiates it, and
// the input ranks its shape rule takes, and which backends run it with their own kernel
// or with which fallback. docs/ops.md is
// this command's --markdown output (tests/cli/ops_cli.sh keeps it current).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "autodiff/gradient.h"
#include "graph/error.h"
#include "graph/expand_recurrent.h"
#include "graph/infer.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "ops/core/register_all.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "ops",
    "trainrt ops [--markdown] [--kernels BACKEND]",
    "List every supported op: its domain, the opsets import accepts, the input ranks it\n"
    "takes, whether training\n"
    "differentiates it, and whether each backend runs it with its own kernel or which\n"
    "backend's kernel it falls back to (as the executor picks them). With --markdown, the\n"
    "table docs/ops.md holds. With --kernels BACKEND, the backend's own kernels grouped\n"
    "by the source file that registers them, then the ops it runs through a fallback\n"
    "(docs/cuda.md's kernel list is `--kernels cuda --markdown`).",
    {{"markdown", "", "print a Markdown document (docs/ops.md) instead of a text table", Flag::Switch},
     {"kernels", "", "list BACKEND's kernels by source file (reference, cpu or cuda in a CUDA build)"}},
    0,
    0};

// Kernel sets in the order the executor tries them, per backend (runtime/backend.cpp).
struct BackendColumn {
  const char* name;
  std::vector<const char*> fallbacks;
};

std::vector<BackendColumn> backend_columns() {
  std::vector<BackendColumn> out{{"reference", {}}, {"cpu", {"reference"}}};
#ifdef TRAINRT_HAVE_CUDA
  out.push_back({"cuda", {"cpu", "reference"}});
#endif
  return out;
}

std::string domain_name(const std::string& domain) { return domain.empty() ? "ai.onnx" : domain; }

// The default-domain opsets graph/infer.cpp accepts: kMinOpset and newer, and older
// ones from the schema's since_version. Other domains are not versioned by trainrt.
std::string opsets(const OpSchema& s) {
  if (!s.domain.empty()) return "any";
  return std::to_string(std::min<int64_t>(kMinOpset, s.since_version)) + "+";
}

std::string gradient(const OpSchema& s) {
  const GradRegistry& gr = gradients();
  if (is_recurrent_op(s.domain, s.op_type)) return "yes: expanded at import";
  if (gr.find(s.domain, s.op_type)) return "yes";
  if (gr.is_non_differentiable(s.domain, s.op_type)) return "no: non-differentiable";
  if (s.domain == "ai.onnx.preview.training") return "no: optimizer update";
  if (s.domain == kTrainrtDomain) return "no: internal op";
  return "no";
}

// "yes" for the backend's own kernel, "<set> fallback" for the kernel set the executor
// takes instead, "no" when none runs it.
std::string support(const BackendColumn& b, const OpSchema& s) {
  const KernelRegistry& k = registry().kernels;
  if (is_recurrent_op(s.domain, s.op_type)) return "expanded";
  if (k.find(b.name, s.domain, s.op_type)) return "yes";
  for (const char* set : b.fallbacks)
    if (k.find(set, s.domain, s.op_type)) return std::string(set) + " fallback";
  return "no";
}

// The data input ranks of the ops whose shape rules take fewer than ONNX's spec allows
// or whose spatial rank matters to users (ops/conv.cpp, ops/pool.cpp, ops/norm.cpp,
// ops/fused.cpp); every other op takes the ranks its ONNX spec allows.
std::string ranks(const OpSchema& s) {
  static const char* kConvRanks = "3-5 (1-D, 2-D, 3-D; cuda: all three, 1-D as 2-D over a unit height)";
  static const std::map<std::string, std::string> known = {
      {"Conv", kConvRanks},
      {"ConvGrad", kConvRanks},
      {"FusedConv", kConvRanks},
      {"MaxPool", "3-5 (1-D, 2-D, 3-D)"},
      {"MaxPoolGrad", "3-5 (1-D, 2-D, 3-D)"},
      {"AveragePool", "3-5 (1-D, 2-D, 3-D)"},
      {"AveragePoolGrad", "3-5 (1-D, 2-D, 3-D)"},
      {"LpPool", "3-5 (1-D, 2-D, 3-D)"},
      {"LpPoolGrad", "3-5 (1-D, 2-D, 3-D)"},
      {"GlobalAveragePool", ">= 3 (N-D)"},
      {"GlobalAveragePoolGrad", ">= 3 (N-D)"},
      {"GlobalMaxPool", ">= 3 (N-D)"},
      {"GlobalMaxPoolGrad", ">= 3 (N-D)"},
      {"BatchNormalization", ">= 2 (N,C,...)"},
      {"BatchNormalizationGrad", ">= 2 (N,C,...)"},
      {"BatchNormalizationRelu", ">= 2 (N,C,...)"},
      {"BatchNormalizationReluDropout", ">= 2 (N,C,...)"},
  };
  auto it = known.find(s.op_type);
  return it == known.end() ? "spec" : it->second;
}

using Row = std::vector<std::string>;

std::vector<Row> rows(const std::vector<BackendColumn>& backends) {
  std::vector<const OpSchema*> schemas = registry().schemas.all();
  std::sort(schemas.begin(), schemas.end(), [](const OpSchema* a, const OpSchema* b) {
    return std::pair(a->domain, a->op_type) < std::pair(b->domain, b->op_type);
  });
  std::vector<Row> out;
  for (const OpSchema* s : schemas) {
    Row r{s->op_type, domain_name(s->domain), opsets(*s), ranks(*s), gradient(*s)};
    for (const BackendColumn& b : backends) r.push_back(support(b, *s));
    out.push_back(std::move(r));
  }
  return out;
}

void print_markdown(const Row& header, const std::vector<Row>& body) {
  std::printf(
      "<!-- Generated by `trainrt ops --markdown > docs/ops.md` (launch/cmd_ops.cpp); do not edit. "
      "tests/cli/ops_cli.sh fails when it is out of date. -->\n");
  std::printf("# Supported ops\n\n");
  std::printf(
      "Every op trainrt imports, sorted by domain and op. **opsets**: the default-domain opsets import\n"
      "accepts. **ranks**: the data input ranks the shape rule takes (`spec`: every rank the ONNX spec\n"
      "allows). **gradient**: `yes` when autodiff has a gradient rule; `no: non-differentiable` when\n"
      "its outputs carry no gradient on purpose; `no: internal op` for the ops trainrt writes itself\n"
      "(backward ops of gradient rules, optimizer updates, fusions), which are never differentiated.\n"
      "**reference / cpu / cuda**: `yes` when the backend has its own kernel, otherwise the kernel set\n"
      "the executor falls back to (the cuda backend runs a fallback on the host).\n\n"
      "LSTM, GRU and RNN (`expanded`) have no kernels and no gradient rules: import unrolls each node\n"
      "over its static sequence length into the ops above (X.W^T in one MatMul for all steps, then per\n"
      "step a Gemm with R, Split, the activations, Mul and Add; Where masks with sequence_lens), so\n"
      "autodiff and every backend run them as they run those ops (graph/expand_recurrent.cpp). All\n"
      "directions, layouts, optional inputs and outputs, clip, input_forget and linear_before_reset are\n"
      "taken; every activation the spec lists: Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu, Affine,\n"
      "ScaledTanh, ThresholdedRelu, Elu, Softsign and Softplus. Memory grows linearly with the sequence\n"
      "length: the backward keeps each step's gates and states, and sums the T per-step gradients of R\n"
      "eight at a time as they arrive. A sequence length that is not a number is refused.\n\n");
  auto line = [](const Row& r) {
    std::string s = "|";
    for (const std::string& c : r) s += " " + c + " |";
    std::printf("%s\n", s.c_str());
  };
  line(header);
  line(Row(header.size(), "---"));
  for (const Row& r : body) line(r);
  std::printf("\n%zu ops.\n", body.size());
}

void print_table(const Row& header, const std::vector<Row>& body) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const Row& r : body)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  auto line = [&](const Row& r) {
    std::string s;
    for (size_t i = 0; i < r.size(); ++i) {
      s += r[i];
      if (i + 1 < r.size()) s += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::printf("%s\n", s.c_str());
  };
  line(header);
  for (const Row& r : body) line(r);
  std::printf("%zu ops\n", body.size());
}

// `--kernels BACKEND`: the backend's kernels grouped by the file whose registration
// function added them, then every other op and the kernel set it falls back to. The
// Markdown form is the generated block of docs/cuda.md (tests/cli/ops_cli.sh).
void print_kernels(const BackendColumn& b, bool markdown) {
  const KernelRegistry& k = registry().kernels;
  std::map<std::string, std::vector<std::string>> by_file;
  std::map<std::string, std::vector<std::string>> fallback;  // "cpu fallback" -> ops
  std::vector<const OpSchema*> schemas = registry().schemas.all();
  std::sort(schemas.begin(), schemas.end(),
            [](const OpSchema* a, const OpSchema* c) { return a->op_type < c->op_type; });
  for (const OpSchema* s : schemas) {
    std::string where = support(b, *s);
    // The preview-training optimizers share names with trainrt's own (Adam).
    std::string op = s->op_type;
    if (!s->domain.empty() && s->domain != kTrainrtDomain) op += " (" + s->domain + ")";
    if (where == "yes")
      by_file[k.source(b.name, s->domain, s->op_type)].push_back(op);
    else
      fallback[where].push_back(op);
  }
  auto join = [](const std::vector<std::string>& ops) {
    std::string out;
    for (const std::string& op : ops) out += (out.empty() ? "" : ", ") + op;
    return out;
  };
  if (markdown) {
    std::printf("<!-- Generated by `trainrt ops --kernels %s --markdown` (launch/cmd_ops.cpp); do not edit. -->\n",
                b.name);
    std::printf("| registered by | ops with a %s kernel |\n|---|---|\n", b.name);
    for (const auto& [file, ops] : by_file) std::printf("| `%s` | %s |\n", file.c_str(), join(ops).c_str());
    for (const auto& [where, ops] : fallback)
      std::printf("\n%s (%zu ops): %s\n", where.c_str(), ops.size(), join(ops).c_str());
    std::printf("<!-- end of generated block -->\n");
    return;
  }
  for (const auto& [file, ops] : by_file) std::printf("%s: %s\n", file.c_str(), join(ops).c_str());
  for (const auto& [where, ops] : fallback) std::printf("%s: %s\n", where.c_str(), join(ops).c_str());
}

}  // namespace

int cmd_ops(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  const std::vector<BackendColumn> backends = backend_columns();
  if (a.on("kernels")) {
    const std::string name = a.str("kernels");
    for (const BackendColumn& b : backends)
      if (b.name == name) return print_kernels(b, a.on("markdown")), 0;
    std::string known;
    for (const BackendColumn& b : backends) known += std::string(known.empty() ? "" : ", ") + b.name;
    throw_bad_input("--kernels " + name, "no such backend in this build; expected one of " + known);
  }
  Row header{"op", "domain", "opsets", "ranks", "gradient"};
  for (const BackendColumn& b : backends) header.push_back(b.name);
  const std::vector<Row> body = rows(backends);
  if (a.on("markdown"))
    print_markdown(header, body);
  else
    print_table(header, body);
  return 0;
}

}  // namespace trainrt
