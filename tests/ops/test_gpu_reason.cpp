// no_gpu_reason (ops/cuda/gpu_reason.h): each cause of "no usable GPU" has its own words,
// which tools/gpu_run.sh and a user on a new node rely on.
#include <doctest/doctest.h>

#include <set>

#include "ops/cuda/gpu_reason.h"

using namespace trainrt;

namespace {
GpuProbe probe(int error, const std::string& name, int count, int driver_version) {
  GpuProbe p;
  p.error = error;
  p.error_name = name;
  p.count = count;
  p.driver_version = driver_version;
  p.runtime_version = 13000;
  return p;
}
}  // namespace

TEST_CASE("no_gpu_reason: a usable GPU has no reason; each cause its own line") {
  const std::string insufficient = "cudaErrorInsufficientDriver";
  CHECK(no_gpu_reason(probe(0, "", 1, 13000)).empty());
  const std::string no_driver = no_gpu_reason(probe(kCudaErrorInsufficientDriver, insufficient, 0, 0));
  const std::string old_driver = no_gpu_reason(probe(kCudaErrorInsufficientDriver, insufficient, 0, 12040));
  const std::string no_device = no_gpu_reason(probe(kCudaErrorNoDevice, "cudaErrorNoDevice", 0, 13000));
  const std::string zero = no_gpu_reason(probe(0, "", 0, 13000));
  const std::string stub = no_gpu_reason(probe(kCudaErrorStubLibrary, "cudaErrorStubLibrary", 0, 0));
  const std::string other = no_gpu_reason(probe(999, "cudaErrorUnknown", 0, 13000));
  CHECK(no_driver.find("no NVIDIA driver: libcuda.so.1 not found by the loader, or it did not load") == 0);
  CHECK(old_driver ==
        "NVIDIA driver too old: it supports CUDA 12.4, this build needs 13.0 (cudaErrorInsufficientDriver)");
  CHECK(no_device.find("no CUDA device") == 0);
  CHECK(zero.find("no CUDA device") == 0);
  CHECK(stub.find("stub") != std::string::npos);
  CHECK(other == "CUDA error cudaErrorUnknown");
  const std::set<std::string> causes{no_driver, old_driver, no_device, stub, other};
  CHECK(causes.size() == 5);
  for (const std::string& r : causes) CHECK(r.find('\n') == std::string::npos);
}
