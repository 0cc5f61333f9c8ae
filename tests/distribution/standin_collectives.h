// Collectives between stand-in devices (tests/runtime/standin_device.h), for the
// data-parallel tests on the CPU.
//
//   StandinCollectives collectives(2);
//   auto c = collectives.communicator(rank, dev);   // on each rank's thread, its own StandinDevice
//   DataParallel dp(session, *c);                   // the path ordered by events, as on NCCL
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "../runtime/standin_device.h"
#include "distribution/communicator.h"

namespace trainrt::test {

// NCCL's part on the stand-in: ranks of one group (threads of this process, each with
// its own StandinDevice) average buffers of their devices on their comm streams, ordered
// by events (Communicator::all_reduce_average_after); host sums and broadcasts go through
// a LocalGroup, as NCCL hands them to its bootstrap communicator. The k-th collective of
// every rank meets on the ranks' comm-stream threads while they synchronise; it sums in
// rank order and multiplies by 1/world, as the data-parallel host path does, so results
// are bit for bit those of the host path. A rank that never arrives ends the others'
// wait after the timeout with a Peer error, reported by synchronize().
class StandinCollectives {
 public:
  explicit StandinCollectives(int world) : host_(world), world_(world) {}
  std::unique_ptr<Communicator> communicator(int rank, const StandinDevice& dev, CommOptions o = {});

  struct Meeting {
    std::mutex mu;
    std::condition_variable cv;
    struct Call {
      std::vector<void*> data;
      int arrived = 0, left = 0;
      bool done = false;
    };
    std::map<int64_t, Call> calls;
  };

 private:
  LocalGroup host_;
  int world_;
  std::shared_ptr<Meeting> meeting_ = std::make_shared<Meeting>();
};

}  // namespace trainrt::test
