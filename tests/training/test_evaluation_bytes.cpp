// evaluation_bytes(): what the memory check before training reserves for validation must
// cover what evaluate() then takes from the backend (a backend that counts its
// allocations and reaches no host memory, so batches and weights are copied in, as on a
// GPU).
#include <algorithm>
#include <map>
#include <mutex>

#include "runtime/runtime_util.h"
#include "training/evaluation.h"

using namespace trainrt;
using trainrt::test::small_wrn;

namespace {

class CountingBackend : public Backend {
 public:
  CountingBackend() : Backend("reference", {}) {}
  std::string name() const override { return "counting"; }
  std::shared_ptr<std::byte[]> allocate(size_t bytes) const override {
    std::shared_ptr<std::byte[]> b = Backend::allocate(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    live_ += bytes;
    peak = std::max(peak, live_);
    mine_[b.get()] = bytes;
    return std::shared_ptr<std::byte[]>(b.get(), [this, b, bytes](std::byte* q) {
      std::lock_guard<std::mutex> l(mu_);
      live_ -= bytes;
      mine_.erase(q);
    });
  }
  bool reaches(const void* p) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mine_.upper_bound(static_cast<const std::byte*>(p));
    return it != mine_.begin() && static_cast<const std::byte*>(p) < std::prev(it)->first + std::prev(it)->second;
  }
  mutable size_t peak = 0;  // the most bytes allocated at once

 private:
  mutable size_t live_ = 0;
  mutable std::mutex mu_;
  mutable std::map<const std::byte*, size_t> mine_;
};

}  // namespace

TEST_CASE("evaluation_bytes covers what validation allocates in the backend, and not much more") {
  const Graph g = small_wrn();
  Dataset d;
  d.name = "fashion-mnist";
  d.classes = 10;
  d.images = Tensor(DataType::UInt8, {10, 1, 28, 28});
  d.labels = Tensor(DataType::Int64, {10});
  for (int64_t i = 0; i < 10; ++i) d.labels.data<int64_t>()[i] = i % 10;
  for (int64_t i = 0; i < d.images.numel(); ++i) d.images.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  d.mean = {0.5f};
  d.std = {0.25f};
  const ModelIo io = model_io(g, d, "wrn");
  for (int64_t batch : {4, 16}) {
    CAPTURE(batch);
    CountingBackend b;
    const Evaluation e = evaluate(g, io, d, batch, b);
    CHECK(e.images == 10);
    const size_t reserved = evaluation_bytes(g, io, d, batch);
    CHECK(b.peak > 0);
    CHECK(b.peak <= reserved);
    CHECK(reserved <= 2 * b.peak);
    // An asynchronous backend lands each batch in two buffers taking turns besides the
    // staged one (runtime/executor_plan_cache.cpp): two more batches of float32 images.
    const size_t batch_bytes = static_cast<size_t>(std::min<int64_t>(batch, 10)) * 28 * 28 * sizeof(float);
    CHECK(evaluation_bytes(g, io, d, batch, 3) == reserved + 2 * batch_bytes);
  }
}
