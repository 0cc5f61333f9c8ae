// Gradient buckets for the all-reduce: parameters grouped in the order the plan
// completes their gradients.
//
//   Plan p = build_plan(specialize(t.graph, feeds), training_plan_options(t));
//   std::vector<GradientBucket> b = plan_buckets(t, p);          // 25 MB, first 1 MB
//   // after step b[0].ready_after_step runs, b[0]'s gradients can be reduced
//
// Why: an all-reduce per gradient costs latency, one at the end of the backward
// pass hides nothing; buckets of ~25 MB started as soon as their last gradient is
// written overlap communication with the rest of the backward pass (PyTorch DDP's
// scheme, which also makes the first bucket small so communication starts early).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "runtime/plan.h"

namespace trainrt {

struct GradientBucket {
  std::vector<std::string> params;  // in the order their gradients complete
  size_t bytes = 0;                 // sum of the gradients' bytes
  int ready_after_step = -1;        // plan step that writes the bucket's last gradient
  size_t ready_after_node = 0;      // that step's node index in the graph
};

constexpr size_t kDefaultBucketCap = 25u << 20;
constexpr size_t kDefaultFirstBucketCap = 1u << 20;

// A bucket closes when the next gradient would pass its cap (the first bucket's cap is
// first_cap_bytes); a gradient larger than a cap gets a bucket of its own. BadInput
// when a cap is 0 or `p` was built for another graph (a gradient it does not know).
std::vector<GradientBucket> plan_buckets(const TrainingGraph& t, const Plan& p, size_t cap_bytes = kDefaultBucketCap,
                                         size_t first_cap_bytes = kDefaultFirstBucketCap);

}  // namespace trainrt
