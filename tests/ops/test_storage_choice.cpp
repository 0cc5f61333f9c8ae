// The variant of the storage-specialised cuda kernels a call runs (ops/core/storage_choice.h):
// the storage its tensors share, an absent tensor agreeing with any, and the general
// per-element variant wherever two differ.
#include <doctest/doctest.h>

#include "ops/core/storage_choice.h"

using namespace trainrt::storage_choice;

TEST_CASE("storage choice: the tensors' one storage, or the per-element variant where they differ") {
  // The Wide ResNet's batch-norm gradient under bf16: dY, X and the ReLU mask all 16-bit.
  CHECK(common_storage({Given::bf16, Given::bf16, Given::bf16}) == Storage::bf16);
  CHECK(common_storage({Given::half, Given::half, Given::half}) == Storage::half);
  CHECK(common_storage({Given::wide, Given::wide}) == Storage::wide);
  // An absent tensor (no mask, the forward's empty dY) takes the others' storage.
  CHECK(common_storage({Given::half, Given::half, Given::none}) == Storage::half);
  CHECK(common_storage({Given::none, Given::bf16}) == Storage::bf16);
  CHECK(common_storage({Given::wide, Given::none, Given::wide}) == Storage::wide);
  CHECK(common_storage({Given::none}) == Storage::wide);
  CHECK(common_storage({}) == Storage::wide);
  // Mixed storages: each tensor read as it says.
  CHECK(common_storage({Given::wide, Given::half}) == Storage::any);
  CHECK(common_storage({Given::bf16, Given::none, Given::half}) == Storage::any);
  CHECK(common_storage({Given::half, Given::half, Given::wide}) == Storage::any);
  CHECK(common_storage({Given::none, Given::wide, Given::bf16}) == Storage::any);
}
