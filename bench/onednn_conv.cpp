// onednn_conv: the Wide ResNet's 3x3 convolutions (forward, data gradient, weight
// gradient) on whichever oneDNN this file is compiled against, for comparing oneDNN
// versions on one machine. It includes nothing of trainrt: tools/bench_onednn.sh
// builds it twice, against the system's oneDNN and against PyPI's onednn-cpu-tbb,
// and alternates the two programs.
//
//   onednn_conv [--dataset fashion-mnist|cifar100] [--batch N] [--reps N] [--algorithm direct|winograd|auto]
//
// One line per layer and pass: shape, the implementation oneDNN picked
// (impl_info_str), the layouts it chose (format_tag::any everywhere, so each version
// gets its preferred blocked layout; reorders into it are not timed), the median ms of
// --reps calls after two warm-up calls, and GFLOP/s (multiply-add = 2). A last line
// sums the step's 3x3 convolutions (each layer once per occurrence in the model).
// Not a test: nothing is asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Layer {
  const char* name;
  int64_t cin, cout, size, count;  // count: occurrences in the model
};

// The seed's Wide ResNet (widths 16, 160, 320, 640; two blocks per stage), 3x3 stride 1 pad 1.
std::vector<Layer> layers(int64_t in_channels, int64_t image) {
  return {{"input_block", in_channels, 16, image, 1},  {"stage1_16->160", 16, 160, image, 1},
          {"stage1_160->160", 160, 160, image, 3},     {"stage2_160->320", 160, 320, image / 2, 1},
          {"stage2_320->320", 320, 320, image / 2, 3}, {"stage3_320->640", 320, 640, image / 4, 1},
          {"stage3_640->640", 640, 640, image / 4, 3}};
}

// The blocking of a chosen layout: its inner blocks, e.g. "8c" (activations) or "8i8o"
// (weights), or "plain".
std::string layout(const memory::desc& md, bool weights = false) {
#if DNNL_VERSION_MAJOR >= 3
  const memory::dims blocks = md.get_inner_blks();
  const memory::dims idxs = md.get_inner_idxs();
#else
  const dnnl_blocking_desc_t& b = md.data.format_desc.blocking;
  const memory::dims blocks(b.inner_blks, b.inner_blks + b.inner_nblks);
  const memory::dims idxs(b.inner_idxs, b.inner_idxs + b.inner_nblks);
#endif
  if (blocks.empty()) return "plain";
  std::string s;
  const char* names = weights ? "oihw" : "nchw";
  for (size_t i = 0; i < blocks.size(); ++i) s += std::to_string(blocks[i]) + names[std::min<int64_t>(idxs[i], 3)];
  return s;
}

double median_ms(const std::function<void()>& call, int reps) {
  call();
  call();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    call();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Pass {
  std::string impl, layouts;
  double ms = 0;
};

// Builds and times one pass. Memory is filled with small values so no denormals appear.
Pass run(dnnl::engine& eng, dnnl::stream& s, dnnl::primitive prim, const std::string& impl,
         std::unordered_map<int, memory::desc> mds, const std::string& layouts, int reps) {
  std::unordered_map<int, memory> args;
  for (auto& [arg, md] : mds) {
    memory m(md, eng);
    float* p = static_cast<float*>(m.get_data_handle());
    const size_t n = md.get_size() / sizeof(float);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>((i * 7919 % 1000) * 1e-3 - 0.5);
    args.emplace(arg, m);
  }
  Pass r{impl, layouts, 0};
  r.ms = median_ms(
      [&] {
        prim.execute(s, args);
        s.wait();
      },
      reps);
  return r;
}

algorithm parse_algorithm(const std::string& a) {
  if (a == "winograd") return algorithm::convolution_winograd;
  if (a == "auto") return algorithm::convolution_auto;
  return algorithm::convolution_direct;
}

// Forward, data gradient and weight gradient of one layer; an empty impl where the
// version has no implementation for the algorithm.
std::vector<Pass> time_layer(dnnl::engine& eng, dnnl::stream& s, const Layer& l, int64_t batch, algorithm algo,
                             int reps) {
  const memory::dims src{batch, l.cin, l.size, l.size}, wei{l.cout, l.cin, 3, 3}, dst{batch, l.cout, l.size, l.size};
  const memory::dims strides{1, 1}, pad{1, 1};
  const memory::desc src_any(src, dt::f32, tag::any), wei_any(wei, dt::f32, tag::any), dst_any(dst, dt::f32, tag::any);
  std::vector<Pass> out;
  try {
#if DNNL_VERSION_MAJOR >= 3
    dnnl::convolution_forward::primitive_desc fwd(eng, prop_kind::forward_training, algo, src_any, wei_any, dst_any,
                                                  strides, pad, pad);
    dnnl::convolution_backward_data::primitive_desc bwd_d(eng, algo, src_any, wei_any, dst_any, strides, pad, pad, fwd);
    dnnl::convolution_backward_weights::primitive_desc bwd_w(eng, algo, src_any, wei_any, dst_any, strides, pad, pad,
                                                             fwd);
#else
    dnnl::convolution_forward::primitive_desc fwd(
        {prop_kind::forward_training, algo, src_any, wei_any, dst_any, strides, pad, pad}, eng);
    dnnl::convolution_backward_data::primitive_desc bwd_d({algo, src_any, wei_any, dst_any, strides, pad, pad}, eng,
                                                          fwd);
    dnnl::convolution_backward_weights::primitive_desc bwd_w({algo, src_any, wei_any, dst_any, strides, pad, pad}, eng,
                                                             fwd);
#endif
    const std::string fl =
        layout(fwd.src_desc()) + "/" + layout(fwd.weights_desc(), true) + "/" + layout(fwd.dst_desc());
    out.push_back(run(eng, s, dnnl::convolution_forward(fwd), fwd.impl_info_str(),
                      {{DNNL_ARG_SRC, fwd.src_desc()},
                       {DNNL_ARG_WEIGHTS, fwd.weights_desc()},
                       {DNNL_ARG_DST, fwd.dst_desc()},
                       {DNNL_ARG_SCRATCHPAD, fwd.scratchpad_desc()}},
                      fl, reps));
    out.push_back(run(eng, s, dnnl::convolution_backward_data(bwd_d), bwd_d.impl_info_str(),
                      {{DNNL_ARG_DIFF_SRC, bwd_d.diff_src_desc()},
                       {DNNL_ARG_WEIGHTS, bwd_d.weights_desc()},
                       {DNNL_ARG_DIFF_DST, bwd_d.diff_dst_desc()},
                       {DNNL_ARG_SCRATCHPAD, bwd_d.scratchpad_desc()}},
                      layout(bwd_d.diff_src_desc()) + "/" + layout(bwd_d.weights_desc(), true), reps));
    out.push_back(run(eng, s, dnnl::convolution_backward_weights(bwd_w), bwd_w.impl_info_str(),
                      {{DNNL_ARG_SRC, bwd_w.src_desc()},
                       {DNNL_ARG_DIFF_WEIGHTS, bwd_w.diff_weights_desc()},
                       {DNNL_ARG_DIFF_DST, bwd_w.diff_dst_desc()},
                       {DNNL_ARG_SCRATCHPAD, bwd_w.scratchpad_desc()}},
                      layout(bwd_w.src_desc()) + "/" + layout(bwd_w.diff_weights_desc(), true), reps));
  } catch (const dnnl::error&) {
    out.assign(3, Pass{});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataset = "fashion-mnist", algo = "direct";
  int64_t batch = 64;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dataset")
      dataset = value;
    else if (flag == "--batch")
      batch = std::atoll(value.c_str());
    else if (flag == "--reps")
      reps = std::atoi(value.c_str());
    else if (flag == "--algorithm")
      algo = value;
    else {
      std::fprintf(stderr, "onednn_conv: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0 || batch <= 0 || reps <= 0 || (dataset != "fashion-mnist" && dataset != "cifar100")) {
    std::fprintf(stderr,
                 "onednn_conv: usage: [--dataset fashion-mnist|cifar100] [--batch N] [--reps N] [--algorithm A]\n");
    return 2;
  }
  const bool fm = dataset == "fashion-mnist";
  const dnnl_version_t* v = dnnl_version();
  std::printf("# oneDNN %d.%d.%d (%s), %s batch %lld, algorithm %s, median of %d\n", v->major, v->minor, v->patch,
              v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
              : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                                                   : "other",
              dataset.c_str(), static_cast<long long>(batch), algo.c_str(), reps);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const char* pass_names[3] = {"fwd", "bwd_data", "bwd_weights"};
  double step_ms = 0;
  bool complete = true;
  for (const Layer& l : layers(fm ? 1 : 3, fm ? 28 : 32)) {
    const std::vector<Pass> passes = time_layer(eng, s, l, batch, parse_algorithm(algo), reps);
    const double gflop = 2.0 * batch * l.cout * l.size * l.size * l.cin * 9 * 1e-9;
    for (int p = 0; p < 3; ++p) {
      if (passes[p].impl.empty()) {
        std::printf("%-16s %-11s none\n", l.name, pass_names[p]);
        complete = false;
        continue;
      }
      std::printf("%-16s %-11s %-22s %-18s %9.3f ms %7.1f GFLOP/s\n", l.name, pass_names[p], passes[p].impl.c_str(),
                  passes[p].layouts.c_str(), passes[p].ms, gflop / (passes[p].ms * 1e-3));
      step_ms += passes[p].ms * static_cast<double>(l.count);
    }
  }
  if (complete) std::printf("step_3x3_ms %.2f\n", step_ms);
  return 0;
}
