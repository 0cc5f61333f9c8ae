// `trainrt evaluate MODEL.onnx --dataset ...`: test loss and accuracy of any model
// whose one input takes the dataset's images and whose output is [N,classes] logits.
#include <cstdio>
#include <memory>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/train_util.h"
#include "ops/core/register_all.h"
#include "runtime/timing_cache.h"

namespace trainrt {

namespace {
const CommandSpec kSpec{
    "evaluate",
    "trainrt evaluate MODEL.onnx --dataset fashion-mnist|mnist|cifar10|cifar100|imagefolder|npz "
    "[options]",
    "Print the test-set loss (mean cross-entropy per batch) and accuracy of a model: the test\n"
    "files, an image folder's val/ (resize + center crop), an npz file's x_val/y_val (else x/y),\n"
    "normalised as `trainrt train` normalises them.",
    with_data_flags("val", with_engine_choice_flags(
                               {
                                   {"batch-size", "128", "images per forward pass"},
                                   {"limit", "0", "use only the first N test images (0 = all)"},
                                   {"device", "cpu", "cpu or cuda (a CUDA build and a GPU)"},
                                   {"backend", "cpu", "with --device cpu: cpu or reference"},
                                   {"fp32-math", "tf32",
                                    "with --device cuda: tf32 (TF32 tensor cores, as PyTorch) or "
                                    "strict (full fp32)"},
                                   {"layout", "nhwc",
                                    "with --device cuda: nhwc (activations NHWC between the kernels "
                                    "that take it) or nchw"},
                               },
                               {{"threads", "0", "CPU threads (0 = all cores)"}})),
    1,
    1};
}  // namespace

int cmd_evaluate(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  const int64_t batch = a.positive("batch-size"), limit = a.at_least("limit", 0), threads = a.at_least("threads", 0);
  configure_threads(static_cast<int>(threads));
  const std::string backend_name = backend_for_device(a);
  set_default_fp32_math(fp32_math_for_device(a, Fp32Math::tf32));
  set_default_deterministic(deterministic_for_device(a, false));
  const bool channels_last = channels_last_for_device(a);
  // --device cuda: the convolutions run the engines timed for them (by train, bench or an
  // earlier evaluate), and time the problems the file lacks once, saving them.
  const std::string cache_path = timing_cache_for_device(a, a.positional[0]);
  std::unique_ptr<EngineChooser> chooser = make_engine_chooser(backend_name, cache_path, autotune_for_device(a));
  auto backend = make_backend(backend_name, static_cast<int>(threads));
  if (backend_name == "cuda") backend->blocked_layouts = channels_last;
  const DataSource data = data_flags(a);
  Graph g = import_onnx_file(a.positional[0], registry().schemas);
  const Dataset test = load_split(data, g, /*train=*/false, limit);
  Evaluation e = evaluate(g, model_io(g, test, a.positional[0]), test, batch, *backend, {}, chooser.get());
  save_engine_choices(chooser.get(), cache_path);
  std::printf("Test Loss = %5.3f, Test Accuracy = %5.3f (%lld images)\n", e.loss, e.accuracy,
              static_cast<long long>(e.images));
  return 0;
}

}  // namespace trainrt
