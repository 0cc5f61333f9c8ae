// "No per-step heap allocation": the process's operator new is replaced by a
// counting one (for this test binary), and a repeated Executor run of a graph whose
// reference kernels allocate nothing themselves (elementwise activations) must not
// allocate at all; the first run (plan, arena) does.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "graph/tsan.h"
#include "runtime_util.h"

// clang's TSan runtime is linked into the program whole, its own operator new with it,
// so a second definition here cannot replace it (g++ links TSan as a shared library,
// which a definition here overrides). The normal and the ASan runs check the count.
#ifndef TRAINRT_TSAN

// GCC sees std::free in a replaced operator delete as a mismatch with new; it is the pair of the malloc above.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  ++g_allocations;
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al + (n ? 0 : al))) return p;
  throw std::bad_alloc();
}
// Every other allocation form goes through the two above, so that all of them are
// counted and every delete below (std::free) pairs with a malloc. Replacing only some
// is a mismatch under ASan: its runtime defines the forms left out (new(nothrow), used by
// std::stable_sort's temporary buffer; new[]) with its own allocator, and their memory
// then reaches the std::free of the replaced delete (alloc-dealloc-mismatch).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  return ::operator new(n, a, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("a repeated Executor run allocates nothing: no graph value, no kernel argument list, no result map") {
  Graph g;
  g.name = "chain";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(64)}};
  g.nodes = {make_node("Relu", {"x"}, {"a"}), make_node("Neg", {"a"}, {"b"}), make_node("Sigmoid", {"a"}, {"c"}),
             make_node("Tanh", {"b"}, {"d"}), make_node("Relu", {"d"}, {"e"})};
  for (size_t i = 0; i < g.nodes.size(); ++i) g.nodes[i].name = "n" + std::to_string(i);
  g.outputs = {"e", "c"};
  validate_graph(g, registry().schemas, "chain");
  infer_shapes(g, registry().schemas, "chain");
  auto b = make_backend("reference");
  Executor ex(g, *b);
  TensorMap feeds{{"x", random_tensor(DataType::Float32, {8, 64}, 1)}};
  RunOptions ro;
  long before = g_allocations.load();
  ex.run(feeds, ro);
  const long first = g_allocations.load() - before;
  before = g_allocations.load();
  const TensorMap& out = ex.run(feeds, ro);
  const long second = g_allocations.load() - before;
  CHECK(first > 0);
  CHECK(second == 0);
  // And the results are right: e = relu(tanh(-relu(x))) = 0 wherever relu(x) >= 0, c = sigmoid(relu(x)).
  TensorMap want = naive_run(g, feeds, *b, false, 0);
  CHECK(bitwise_equal(out.at("e"), want.at("e")));
  CHECK(bitwise_equal(out.at("c"), want.at("c")));
  CHECK(ex.plan().in_place_count > 0);
}

#endif  // TRAINRT_TSAN
