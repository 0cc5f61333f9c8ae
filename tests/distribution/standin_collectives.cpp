#include "standin_collectives.h"

#include <chrono>
#include <cstring>
#include <string>
#include <type_traits>

#include "graph/error.h"

namespace trainrt::test {

namespace {

class StandinComm : public Communicator {
 public:
  StandinComm(int rank, int world, CommOptions o, std::unique_ptr<Communicator> host, const StandinDevice& dev,
              std::shared_ptr<StandinCollectives::Meeting> m)
      : Communicator(rank, world, o), host_(std::move(host)), dev_(dev), meeting_(std::move(m)) {}
  ~StandinComm() override { stop_thread(); }
  std::string name() const override { return "standin-nccl"; }
  bool reduces_device_memory() const override { return true; }
  bool orders_by_events() const override { return true; }

  Backend::Event all_reduce_average_after(const Backend& b, const Backend::Event& ready, void* data, size_t count,
                                          DataType t, const std::string& what) override {
    if (&b != &dev_) throw_internal(what, "a stand-in collective on another device");
    if (!dev_.owns(data)) throw_internal(what, "a stand-in collective on host memory");
    dev_.wait(Backend::Stream::comm, ready);
    const int world = this->world(), me = rank();
    const double timeout = timeout_seconds();
    // The call's number is taken when it runs, not when it is issued: a captured step
    // replays the same work, and each rank's communication stream runs its calls in order.
    dev_.run_on(Backend::Stream::comm,
                [m = meeting_, calls = calls_, world, me, data, count, t, timeout, what] {
                  const int64_t k = (*calls)++;  // only this rank's comm stream thread touches it
                  std::unique_lock<std::mutex> lock(m->mu);
                  StandinCollectives::Meeting::Call& c = m->calls[k];
                  if (c.data.empty()) c.data.assign(static_cast<size_t>(world), nullptr);
                  c.data[static_cast<size_t>(me)] = data;
                  if (++c.arrived == world) {  // the last to arrive sums in rank order and averages
                    auto average = [&](auto* first) {
                      using T = std::remove_pointer_t<decltype(first)>;
                      for (int r = 1; r < world; ++r) {
                        const T* x = static_cast<const T*>(c.data[static_cast<size_t>(r)]);
                        for (size_t i = 0; i < count; ++i) first[i] += x[i];
                      }
                      const T inv = static_cast<T>(1.0 / world);
                      for (size_t i = 0; i < count; ++i) first[i] = static_cast<T>(first[i] * inv);
                      for (int r = 1; r < world; ++r)
                        std::memcpy(c.data[static_cast<size_t>(r)], first, count * sizeof(T));
                    };
                    if (t == DataType::Float32)
                      average(static_cast<float*>(c.data[0]));
                    else
                      average(static_cast<double*>(c.data[0]));
                    c.done = true;
                    m->cv.notify_all();
                  } else if (!m->cv.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return c.done; })) {
                    throw Error(ErrorKind::Peer, what + ": no answer from the other ranks (stand-in collective)");
                  }
                  if (++c.left == world) m->calls.erase(k);
                },
                {data});
    return dev_.record(Backend::Stream::comm);
  }

 protected:
  void do_all_reduce_sum(void* data, size_t count, DataType t) override {
    host_->all_reduce_sum(data, count, t, "host values");
  }
  void do_broadcast(void* data, size_t bytes, int root) override { host_->broadcast(data, bytes, root, "host values"); }

 private:
  std::unique_ptr<Communicator> host_;
  const StandinDevice& dev_;
  std::shared_ptr<StandinCollectives::Meeting> meeting_;
  std::shared_ptr<int64_t> calls_ = std::make_shared<int64_t>(0);
};

}  // namespace

std::unique_ptr<Communicator> StandinCollectives::communicator(int rank, const StandinDevice& dev, CommOptions o) {
  return std::make_unique<StandinComm>(rank, world_, o, host_.communicator(rank, o), dev, meeting_);
}

}  // namespace trainrt::test
