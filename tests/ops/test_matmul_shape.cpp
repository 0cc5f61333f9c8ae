// MatMul's shapes (ops/core/matmul_shape.h), which the reference kernel walks and the
// cuda kernel turns into one strided-batched cuBLASLt call where it can: the strided
// form must pick exactly the matrices the walk picks, and must not be claimed where a
// broadcast is partial.
#include <doctest/doctest.h>

#include <vector>

#include "graph/tensor.h"
#include "ops/core/matmul_shape.h"

using namespace trainrt;

namespace {

// numpy.matmul's batch broadcast of two shapes' leading dims, and Y's matrix count.
int64_t y_batches(std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  while (a.size() < b.size()) a.insert(a.begin(), 1);
  while (b.size() < a.size()) b.insert(b.begin(), 1);
  int64_t n = 1;
  for (size_t i = 0; i + 2 < a.size(); ++i) n *= a[i] == 1 ? b[i] : a[i];
  return n;
}

}  // namespace

TEST_CASE("matmul_shape: the strided form picks the walk's matrices, and only where it can") {
  struct Case {
    std::vector<int64_t> a, b;
    bool strided;
  };
  const Case cases[] = {
      {{4, 5}, {5, 6}, true},               // plain
      {{5}, {5, 6}, true},                  // 1-D A
      {{4, 5}, {5}, true},                  // 1-D B
      {{3, 4, 5}, {5, 6}, true},            // B shared by every batch (stride 0)
      {{4, 5}, {2, 3, 5, 6}, true},         // A shared
      {{2, 3, 4, 5}, {2, 3, 5, 6}, true},   // same batch
      {{2, 3, 4, 5}, {1, 1, 5, 6}, true},   // B's batch all ones
      {{2, 1, 4, 5}, {1, 3, 5, 6}, false},  // each broadcasts along another dim
      {{2, 3, 4, 5}, {3, 5, 6}, false},     // B's batch 3 of Y's 6, repeated along the outer dim: a walk
      {{2, 1, 4, 5}, {2, 3, 5, 6}, false},  // A repeated along the inner batch dim only
  };
  for (const Case& c : cases) {
    CAPTURE(dims_to_string(c.a));
    CAPTURE(dims_to_string(c.b));
    const MatmulShape s = matmul_shape(c.a, c.b);
    CHECK(s.batches == y_batches(c.a, c.b));
    CHECK(s.k == c.a.back());
    CHECK(s.n == (c.b.size() == 1 ? 1 : c.b.back()));
    int64_t a_count = 1, b_count = 1;
    for (size_t i = 0; i + 2 < c.a.size(); ++i) a_count *= c.a[i];
    for (size_t i = 0; i + 2 < c.b.size(); ++i) b_count *= c.b[i];
    // Every matrix of each operand is used, none out of range.
    std::vector<int> used_a(static_cast<size_t>(a_count)), used_b(static_cast<size_t>(b_count));
    bool walk_is_strided = true;
    for (int64_t p = 0; p < s.batches; ++p) {
      const auto [oa, ob] = s.operands_of(p);
      REQUIRE(oa >= 0);
      REQUIRE(oa < a_count);
      REQUIRE(ob >= 0);
      REQUIRE(ob < b_count);
      ++used_a[static_cast<size_t>(oa)];
      ++used_b[static_cast<size_t>(ob)];
      walk_is_strided = walk_is_strided && oa == p * s.a_step && ob == p * s.b_step;
    }
    for (int u : used_a) CHECK(u == s.batches / a_count);
    for (int u : used_b) CHECK(u == s.batches / b_count);
    CHECK(s.strided == c.strided);
    if (s.strided) CHECK(walk_is_strided);  // the one strided call reads the walk's matrices
  }
}
