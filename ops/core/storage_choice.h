// Which compiled variant of a cuda kernel reads the tensors a call gives it: the kernels
// that read 16-bit storage (runtime/narrow.h) are compiled once per storage, so that no
// element waits on a branch on its storage, and the launch picks the variant from the
// storages of the tensors the kernel reads (ops/norm_cuda.cu). Host logic, tested on the
// CPU (tests/ops/test_storage_choice.cpp).
//
//   using namespace trainrt::storage_choice;
//   common_storage({Given::half, Given::half, Given::none})   // Storage::half
//   common_storage({Given::wide, Given::half})                 // Storage::any: per element
#pragma once

#include <initializer_list>

namespace trainrt::storage_choice {

// How a kernel reads its tensors: all stored in the compute type (wide), all as IEEE half
// or bfloat16 bits, or each as it says at run time (any: where they differ).
enum class Storage { wide, half, bf16, any };

// How one tensor is stored; none where the call reads no such tensor (an omitted input,
// no ReLU mask), which agrees with every other.
enum class Given { none, wide, half, bf16 };

// The one storage of `all`, none aside (all none: wide); any where two differ.
inline Storage common_storage(std::initializer_list<Given> all) {
  Given one = Given::none;
  for (Given g : all) {
    if (g == Given::none || g == one) continue;
    if (one != Given::none) return Storage::any;
    one = g;
  }
  return one == Given::half ? Storage::half : one == Given::bf16 ? Storage::bf16 : Storage::wide;
}

}  // namespace trainrt::storage_choice
