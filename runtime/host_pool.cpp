#include "runtime/host_pool.h"

#include <map>
#include <mutex>
#include <vector>

#include "runtime/backend.h"

namespace trainrt {

struct HostPool::State {
  const Backend* backend;
  mutable std::mutex mu;
  std::map<const std::byte*, size_t> sizes;                          // every buffer allocated
  std::map<size_t, std::vector<std::shared_ptr<std::byte[]>>> free;  // by size
  size_t in_use = 0;
};

HostPool::HostPool(const Backend& backend) : s_(std::make_shared<State>()) { s_->backend = &backend; }

HostPool::~HostPool() = default;

std::shared_ptr<std::byte[]> HostPool::take(size_t bytes) {
  std::shared_ptr<std::byte[]> block;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    auto& list = s_->free[bytes];
    if (!list.empty()) {
      block = std::move(list.back());
      list.pop_back();
    }
    ++s_->in_use;
  }
  if (!block) {
    block = s_->backend->allocate_host(bytes);
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->sizes[block.get()] = bytes;
  }
  // The handle's deleter gives the block (kept alive by the deleter) back to the pool.
  std::byte* p = block.get();
  return std::shared_ptr<std::byte[]>(p, [state = s_, block = std::move(block), bytes](std::byte*) mutable {
    std::lock_guard<std::mutex> lock(state->mu);
    state->free[bytes].push_back(std::move(block));
    --state->in_use;
  });
}

bool HostPool::owns(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  auto it = s_->sizes.find(static_cast<const std::byte*>(p));
  return it != s_->sizes.end() && bytes <= it->second;
}

size_t HostPool::allocated() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->sizes.size();
}

size_t HostPool::in_use() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->in_use;
}

}  // namespace trainrt
